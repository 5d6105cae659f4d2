//! Error shapes in both dialects: bad JSON, wrong types, unsupported fields,
//! prompt too long, auth, 404, 413, 503 while loading.
#![allow(clippy::unwrap_used)]

mod common;
use anedvd_server::{router, AppState, ServerConfig};
use common::*;
use serde_json::{json, Value};

fn openai_error(r: &Reply, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text);
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string());
    assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
    e.clone()
}

fn anthropic_error(r: &Reply, status: u16, kind: &str) -> String {
    assert_eq!(r.status, status, "{}", r.text);
    let v = r.json();
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], kind, "{v}");
    v["error"]["message"].as_str().unwrap().to_owned()
}

const CHAT: &str = "/v1/chat/completions";

#[tokio::test]
async fn openai_bad_requests() {
    let app = app(config());
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let r = send(&app, "POST", CHAT, &[], "{not json").await;
    let e = openai_error(&r, 400);
    assert_eq!(e["type"], "invalid_request_error");
    assert!(e["message"].as_str().unwrap().contains("JSON"));

    let r = post(&app, CHAT, &json!({"messages": msgs, "temperature": "hot"})).await;
    assert_eq!(openai_error(&r, 400)["param"], "temperature");
    let r = post(&app, CHAT, &json!({"messages": "hi"})).await;
    assert_eq!(openai_error(&r, 400)["param"], "messages");
    let r = post(&app, CHAT, &json!({"model": "x"})).await;
    assert!(openai_error(&r, 400)["message"]
        .as_str()
        .unwrap()
        .contains("messages"));

    for (field, value) in [
        // a tool without a name
        ("tools", json!([{"type": "function", "function": {}}])),
        ("n", json!(0)),
        ("tool_choice", json!("required")),
    ] {
        let mut b = json!({"messages": msgs});
        b[field] = value;
        let e = openai_error(&post(&app, CHAT, &b).await, 400);
        assert_eq!(e["param"], field);
        assert!(e["message"].as_str().unwrap().contains(field));
    }
    // Harmless defaults are accepted.
    let ok = post(&app, CHAT, &json!({"messages": msgs, "n": 1, "tools": [], "response_format": {"type": "text"}, "max_tokens": 1})).await;
    assert_eq!(ok.status, 200, "{}", ok.text);

    let r = post(&app, CHAT, &json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})).await;
    assert_eq!(openai_error(&r, 400)["param"], "messages[0].content[0]");
    let r = post(&app, CHAT, &json!({"messages": msgs, "top_p": 3})).await;
    assert!(openai_error(&r, 400)["message"]
        .as_str()
        .unwrap()
        .contains("top_p"));
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": "a", "echo": true}),
    )
    .await;
    assert_eq!(openai_error(&r, 400)["param"], "echo");
}

#[tokio::test]
async fn prompt_longer_than_context() {
    let mut cfg = config();
    cfg.max_seq = 32;
    let app = app(cfg);
    let ids: Vec<u32> = (0..40).map(|i| 10 + i).collect();
    let r = post(&app, "/v1/completions", &json!({"prompt": ids})).await;
    let e = openai_error(&r, 400);
    // llama-server's shape, which its clients parse: the type, the status as
    // `code`, and both sizes.
    assert_eq!(e["type"], "exceed_context_size_error");
    assert_eq!(e["code"], 400);
    assert_eq!(
        (e["n_prompt_tokens"].as_u64(), e["n_ctx"].as_u64()),
        (Some(40), Some(32))
    );
    let m = e["message"].as_str().unwrap();
    assert!(m.contains("40") && m.contains("32"), "{m}");

    let long = "word ".repeat(200);
    let r = post(
        &app,
        "/v1/messages",
        &json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    let m = anthropic_error(&r, 400, "invalid_request_error");
    assert!(m.contains("32"), "{m}");
}

#[tokio::test]
async fn anthropic_bad_requests() {
    let app = app(config());
    let r = send(&app, "POST", "/v1/messages", &[], "[1,").await;
    anthropic_error(&r, 400, "invalid_request_error");
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let r = post(
        &app,
        "/v1/messages",
        &json!({"model": "m", "messages": msgs}),
    )
    .await;
    assert!(anthropic_error(&r, 400, "invalid_request_error").contains("max_tokens"));
    let r = post(
        &app,
        "/v1/messages",
        &json!({"model": "m", "max_tokens": 5, "messages": msgs, "tools": [{"input_schema": {}}]}),
    )
    .await;
    assert!(anthropic_error(&r, 400, "invalid_request_error").contains("tools"));
    let r = post(&app, "/v1/messages", &json!({"model": "m", "max_tokens": 5, "messages": msgs, "thinking": {"type": "enabled", "budget_tokens": 100}})).await;
    assert!(anthropic_error(&r, 400, "invalid_request_error").contains("thinking"));
    let r = post(
        &app,
        "/v1/messages",
        &json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
    )
    .await;
    assert!(anthropic_error(&r, 400, "invalid_request_error").contains("role"));
}

#[tokio::test]
async fn body_limit_and_not_found() {
    let mut cfg = config();
    cfg.max_body_bytes = 1024;
    let app = app(cfg);
    let big = json!({"messages": [{"role": "user", "content": "x".repeat(4000)}]});
    let e = openai_error(&post(&app, CHAT, &big).await, 413);
    assert!(e["message"].as_str().unwrap().contains("1024"));
    anthropic_error(
        &post(&app, "/v1/messages", &big).await,
        413,
        "request_too_large",
    );

    let r = send(&app, "GET", "/v1/nothing", &[], "").await;
    assert_eq!(openai_error(&r, 404)["type"], "not_found_error");
    let r = send(&app, "GET", "/v1/messages/zzz", &[], "").await;
    anthropic_error(&r, 404, "not_found_error");
}

#[tokio::test]
async fn api_key_bearer_and_x_api_key() {
    let mut cfg = config();
    cfg.api_keys = vec!["sekret".into()];
    let app = app(cfg);
    let body =
        json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).to_string();
    let r = send(&app, "POST", CHAT, &[], &body).await;
    assert_eq!(openai_error(&r, 401)["type"], "authentication_error");
    let r = send(
        &app,
        "POST",
        CHAT,
        &[("authorization", "Bearer nope")],
        &body,
    )
    .await;
    assert!(openai_error(&r, 401)["message"]
        .as_str()
        .unwrap()
        .contains("invalid"));
    assert_eq!(
        send(
            &app,
            "POST",
            CHAT,
            &[("authorization", "Bearer sekret")],
            &body
        )
        .await
        .status,
        200
    );
    assert_eq!(
        send(&app, "POST", CHAT, &[("x-api-key", "sekret")], &body)
            .await
            .status,
        200
    );

    let ab =
        json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
            .to_string();
    let r = send(&app, "POST", "/v1/messages", &[("x-api-key", "wrong")], &ab).await;
    anthropic_error(&r, 401, "authentication_error");
    assert_eq!(
        send(
            &app,
            "POST",
            "/v1/messages",
            &[("x-api-key", "sekret")],
            &ab
        )
        .await
        .status,
        200
    );
    // /health and the WebUI page are public.
    assert_eq!(send(&app, "GET", "/health", &[], "").await.status, 200);
    assert_eq!(send(&app, "GET", "/", &[], "").await.status, 200);
    assert_eq!(send(&app, "GET", "/metrics", &[], "").await.status, 401);
}

#[tokio::test]
async fn loading_answers_503_with_retry_after() {
    let app = router(AppState::new(ServerConfig::default()));
    let r = send(&app, "GET", "/health", &[], "").await;
    assert_eq!(r.status, 503);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(r.json()["error"]["type"], "unavailable_error");
    let r = post(
        &app,
        CHAT,
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    openai_error(&r, 503);
    assert!(r.headers.contains_key("retry-after"));
    let r = post(
        &app,
        "/v1/messages",
        &json!({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    anthropic_error(&r, 503, "overloaded_error");
    let m = send(&app, "GET", "/metrics", &[], "").await;
    assert!(m.text.contains("anedvd_model_ready 0\n"));
}
