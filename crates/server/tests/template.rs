//! Chat rendering through the router: llama-server's `/apply-template`, the
//! request's `add_generation_prompt` / `continue_final_message` /
//! `chat_template_kwargs`, an assistant prefill, a template given in place of
//! the model's (`--chat-template`), and the `--n-predict` default. Expected texts
//! and ids are transformers' `apply_chat_template`
//! (tests/server/gen_template_expected.py → template_expected.json).
#![allow(clippy::unwrap_used)]

mod common;
use anedvd_engine::{BuiltinTemplate, Engine, LoadOptions, TemplateOverride};
use anedvd_server::ServerConfig;
use anedvd_testkit::fixtures::{self, Format};
use axum::http::StatusCode;
use common::*;
use serde_json::{json, Value};

fn expected() -> Value {
    let path = repo().join("tests/server/template_expected.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn case(name: &str) -> Value {
    let all = expected();
    let found = all["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name);
    found.unwrap_or_else(|| panic!("no case {name}")).clone()
}

fn app_with_template(given: Option<TemplateOverride>) -> axum::Router {
    wide_app_with(given, config())
}

async fn check_apply(app: &axum::Router, c: &Value) {
    let r = post(app, "/apply-template", &c["body"]).await;
    assert_eq!(r.status, StatusCode::OK, "{}: {}", c["name"], r.text);
    assert_eq!(r.json()["prompt"], c["text"], "{}", c["name"]);
}

/// The prompt token count a chat request reports for `body`.
async fn prompt_tokens(app: &axum::Router, body: &Value) -> Value {
    let mut body = body.clone();
    body["max_tokens"] = json!(1);
    let r = post(app, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    r.json()["usage"]["prompt_tokens"].clone()
}

#[tokio::test]
async fn apply_template_renders_the_models_template_as_transformers_does() {
    let app = app_with_template(None);
    for name in [
        "own_generation_prompt",
        "own_no_generation_prompt",
        "own_prefill",
        "own_tools",
    ] {
        let c = case(name);
        check_apply(&app, &c).await;
        let ids = c["ids"].as_array().unwrap().len();
        assert_eq!(prompt_tokens(&app, &c["body"]).await, json!(ids), "{name}");
    }
}

#[tokio::test]
async fn a_final_assistant_message_is_continued_unless_a_new_turn_is_asked_for() {
    let app = app_with_template(None);
    let c = case("own_prefill");
    let mut body = c["body"].clone();
    body.as_object_mut()
        .unwrap()
        .remove("continue_final_message");
    // No flag: the prefill is continued (llama-server's rule, Anthropic's too).
    check_apply(
        &app,
        &json!({"name": "implicit", "body": body, "text": c["text"]}),
    )
    .await;
    let anthropic = json!({"model": "m", "max_tokens": 1, "system": body["messages"][0]["content"],
        "messages": body["messages"].as_array().unwrap()[1..]});
    let r = post(&app, "/v1/messages/count_tokens", &anthropic).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.json()["input_tokens"],
        json!(c["ids"].as_array().unwrap().len())
    );
    // An explicit generation prompt closes the assistant turn instead.
    body["add_generation_prompt"] = json!(true);
    let r = post(&app, "/apply-template", &body).await;
    let text = r.json()["prompt"].as_str().unwrap().to_owned();
    assert!(
        text.ends_with("The capital is<|im_end|>\n<|im_start|>assistant\n"),
        "{text:?}"
    );
    // A flag that is not a boolean is refused by name.
    let mut wrong = body.clone();
    wrong["add_generation_prompt"] = json!("yes");
    let r = post(&app, "/apply-template", &wrong).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(
        r.json()["error"]["param"],
        "add_generation_prompt",
        "{}",
        r.text
    );
    // Both at once is a contradiction.
    body["continue_final_message"] = json!(true);
    let r = post(&app, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("continue_final_message"), "{}", r.text);
}

#[tokio::test]
async fn a_given_template_replaces_the_models() {
    let app = app_with_template(Some(TemplateOverride::Builtin(BuiltinTemplate::Llama3)));
    let c = case("builtin_llama3");
    check_apply(&app, &c).await;
    assert_eq!(
        prompt_tokens(&app, &c["body"]).await,
        json!(c["ids"].as_array().unwrap().len())
    );

    // Without the request's date, the template gets today's (as llama-server
    // gives it), here checked against the system's `date`.
    let mut today_body = c["body"].clone();
    today_body
        .as_object_mut()
        .unwrap()
        .remove("chat_template_kwargs");
    let r = post(&app, "/apply-template", &today_body).await;
    let text = r.json()["prompt"].as_str().unwrap().to_owned();
    if let Ok(out) = std::process::Command::new("date")
        .env("LC_ALL", "C")
        .args(["-u", "+%d %b %Y"])
        .output()
    {
        let today = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            text.contains(&format!("Today Date: {today}")),
            "{today}: {text:?}"
        );
    }

    let inline = expected()["inline_template"].as_str().unwrap().to_owned();
    let given = TemplateOverride::Source {
        text: inline,
        from: "--chat-template".into(),
    };
    let app = app_with_template(Some(given));
    let c = case("inline_kwargs");
    check_apply(&app, &c).await;
    let mut wrong = c["body"].clone();
    wrong["chat_template_kwargs"] = json!("greeting=hi");
    let r = post(&app, "/apply-template", &wrong).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("chat_template_kwargs"), "{}", r.text);
}

#[test]
fn a_given_template_that_does_not_compile_is_an_error_naming_it() {
    let options = LoadOptions {
        backend_options: anedvd_engine::BackendOptions::with_threads(1),
        overrides: fixtures::overrides("qwen2", Format::GgufF32),
        chat_template: Some(TemplateOverride::Source {
            text: "{% for m in messages %}".into(),
            from: "broken.jinja".into(),
        }),
        ..LoadOptions::default()
    };
    let err = Engine::load(fixtures::path("qwen2", Format::GgufF32), &options, |_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("broken.jinja"), "{err}");
}

#[tokio::test]
async fn n_predict_is_the_default_a_request_may_exceed() {
    let app = app(ServerConfig {
        default_max_tokens: Some(3),
        ..config()
    });
    let exp = common::expected();
    let ids = &exp["prompt_ids"];
    for (body, want) in [
        (json!({"prompt": ids, "ignore_eos": true}), 3),
        (
            json!({"prompt": ids, "n_predict": 5, "ignore_eos": true}),
            5,
        ),
    ] {
        let r = post(&app, "/completion", &body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(
            r.json()["tokens_predicted"],
            json!(want),
            "{body}: {}",
            r.text
        );
    }
    let chat = json!({"messages": exp["chat_messages"]});
    let r = post(&app, "/v1/chat/completions", &chat).await;
    let n = r.json()["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=3).contains(&n), "{}", r.text);
}

#[tokio::test]
async fn verbose_replies_carry_the_rendered_prompt() {
    let app = app_with_template(None);
    let c = case("own_prefill");
    let mut body = c["body"].clone();
    body["max_tokens"] = json!(1);
    body["verbose"] = json!(true);
    let r = post(&app, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["__verbose"]["prompt"], c["text"]);
    body["verbose"] = json!(false);
    let r = post(&app, "/v1/chat/completions", &body).await;
    assert!(r.json().get("__verbose").is_none(), "{}", r.text);
}

#[tokio::test]
async fn enable_thinking_follows_the_server_unless_the_request_says() {
    let probe = TemplateOverride::Source {
        text: "{% if enable_thinking %}thinks{% else %}does not think{% endif %}".into(),
        from: "--chat-template".into(),
    };
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    for (thinking, expect) in [(true, "thinks"), (false, "does not think")] {
        let app = wide_app_with(
            Some(probe.clone()),
            ServerConfig {
                thinking,
                ..config()
            },
        );
        let r = post(&app, "/apply-template", &body).await;
        assert_eq!(r.json()["prompt"], expect, "{}", r.text);
        let mut asked = body.clone();
        asked["chat_template_kwargs"] = json!({"enable_thinking": !thinking});
        let r = post(&app, "/apply-template", &asked).await;
        assert_ne!(r.json()["prompt"], expect, "{}", r.text);
    }
}
