//! `serve --context-shift` through the router, on the tiny qwen2 fixture (a
//! 256-position context): a chat that outgrows the context loses its oldest
//! exchanges on every chat route (system prompt and last question kept,
//! shown by `__verbose.prompt`, said by the `anedvd-context-shift` header,
//! counted at /metrics); a raw prompt is cut as llama-server cuts it
//! (`n_keep`, `truncated`); without the flag the same requests get the
//! existing `exceed_context_size_error`.
#![allow(clippy::unwrap_used)]

mod common;
use anedvd_server::CONTEXT_SHIFT_HEADER;
use common::*;
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

/// Words that mark each exchange, oldest first.
const MARKS: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];
const SYSTEM: &str = "SYSTEM RULES stay";
const LAST: &str = "final question zulu";

fn shifting_app(on: bool) -> axum::Router {
    app(anedvd_server::ServerConfig {
        context_shift: on,
        ..config()
    })
}

/// Four exchanges of about 80 bytes each (about a token per byte with this
/// fixture), then the question: more than the 256 positions in all.
fn conversation() -> Vec<Value> {
    let mut m = vec![json!({"role": "system", "content": SYSTEM})];
    for w in MARKS {
        m.push(json!({"role": "user", "content": format!("question {}", [w; 6].join(" "))}));
        m.push(json!({"role": "assistant", "content": format!("answer {}", [w; 6].join(" "))}));
    }
    m.push(json!({"role": "user", "content": LAST}));
    m
}

/// `messages=M, tokens=T` of a shifted reply.
fn shift_header(r: &Reply) -> Option<(usize, usize)> {
    let v = r.headers.get(CONTEXT_SHIFT_HEADER)?.to_str().ok()?;
    let (m, t) = v.split_once(", ")?;
    Some((
        m.strip_prefix("messages=")?.parse().ok()?,
        t.strip_prefix("tokens=")?.parse().ok()?,
    ))
}

/// Checks a shifted conversation: whole exchanges gone from the oldest, the
/// system prompt and the last question kept. Returns the exchanges dropped.
fn check_kept(prompt: &str, messages_dropped: usize) -> usize {
    assert_eq!(
        messages_dropped % 2,
        0,
        "whole exchanges: {messages_dropped}"
    );
    let dropped = messages_dropped / 2;
    assert!(
        (1..MARKS.len()).contains(&dropped),
        "{dropped} exchanges dropped"
    );
    assert!(prompt.contains(SYSTEM), "system prompt lost: {prompt}");
    assert!(prompt.contains(LAST), "last question lost: {prompt}");
    for (i, w) in MARKS.iter().enumerate() {
        assert_eq!(prompt.contains(w), i >= dropped, "{w} in {prompt}");
    }
    dropped
}

fn exceeds_context(r: &Reply) {
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.headers.get(CONTEXT_SHIFT_HEADER).is_none());
}

#[tokio::test]
async fn chat_drops_the_oldest_exchanges_and_keeps_the_system_prompt() {
    let body = json!({"messages": conversation(), "max_tokens": 4, "verbose": true});

    // Off (the default): the existing error, as llama-server's.
    let app = shifting_app(false);
    let r = post(&app, CHAT, &body).await;
    exceeds_context(&r);
    let e = &r.json()["error"];
    assert_eq!(e["type"], "exceed_context_size_error", "{e}");
    assert_eq!(e["n_ctx"], 256);
    let full = e["n_prompt_tokens"].as_u64().unwrap() as usize;
    assert!(full > 256, "{e}");

    // On: the oldest exchanges go until the prompt leaves room for 4 tokens.
    let app = shifting_app(true);
    let r = post(&app, CHAT, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (messages, tokens) = shift_header(&r).expect("the context-shift header");
    let v = r.json();
    let prompt = v["__verbose"]["prompt"].as_str().unwrap();
    check_kept(prompt, messages);
    let used = v["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert!(used + 4 <= 256, "{used} prompt tokens");
    assert_eq!(used + tokens, full, "the header counts the tokens dropped");
    let m = send(&app, "GET", "/metrics", &[], "").await.text;
    assert_eq!(metric(&m, "anedvd_context_shifts_total"), 1.0);
    assert_eq!(
        metric(&m, "anedvd_context_shift_dropped_tokens_total"),
        tokens as f64
    );

    // A conversation that fits is left alone, with no header.
    let short = json!({"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}], "max_tokens": 4});
    let r = post(&app, CHAT, &short).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.headers.get(CONTEXT_SHIFT_HEADER).is_none());

    // Streamed replies carry the header too.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = post(&app, CHAT, &streamed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(shift_header(&r).map(|s| s.0), Some(messages));
}

#[tokio::test]
async fn the_reply_room_is_the_requests_max_tokens_up_to_a_quarter() {
    let app = shifting_app(true);
    let mut dropped = Vec::new();
    for max_tokens in [1, 64, 1000] {
        let body = json!({"messages": conversation(), "max_tokens": max_tokens});
        let r = post(&app, CHAT, &body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let used = r.json()["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
        assert!(used + max_tokens.min(64) <= 256, "{max_tokens}: {used}");
        dropped.push(shift_header(&r).unwrap().0);
    }
    // More room for the reply never keeps more of the conversation, and a
    // max_tokens past a quarter of the context costs no more than a quarter.
    assert!(dropped[0] <= dropped[1], "{dropped:?}");
    assert_eq!(dropped[1], dropped[2], "{dropped:?}");
}

#[tokio::test]
async fn anthropic_messages_and_responses_shift_too() {
    let conv = conversation();
    let turns: Vec<Value> = conv[1..].to_vec();
    let anthropic = json!({"model": "m", "max_tokens": 4, "system": SYSTEM, "messages": turns});
    let responses = json!({"instructions": SYSTEM, "input": turns, "max_output_tokens": 4});

    let off = shifting_app(false);
    let r = post(&off, "/v1/messages", &anthropic).await;
    exceeds_context(&r);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = post(&off, "/v1/responses", &responses).await;
    exceeds_context(&r);

    let on = shifting_app(true);
    let r = post(&on, "/v1/messages", &anthropic).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (messages, _) = shift_header(&r).expect("the header on /v1/messages");
    assert!(messages >= 2 && messages % 2 == 0, "{messages}");
    assert!(r.json()["usage"]["input_tokens"].as_u64().unwrap() + 4 <= 256);
    let r = post(&on, "/v1/responses", &responses).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let (messages, _) = shift_header(&r).expect("the header on /v1/responses");
    assert!(messages >= 2 && messages % 2 == 0, "{messages}");
    let m = send(&on, "GET", "/metrics", &[], "").await.text;
    assert_eq!(metric(&m, "anedvd_context_shifts_total"), 2.0);
}

#[tokio::test]
async fn a_last_message_longer_than_the_context_is_still_refused() {
    let app = shifting_app(true);
    let long = "word ".repeat(300);
    let body = json!({"messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": long},
    ]});
    let r = post(&app, CHAT, &body).await;
    exceeds_context(&r);
    assert_eq!(r.json()["error"]["type"], "exceed_context_size_error");
}

#[tokio::test]
async fn raw_prompts_are_cut_as_llama_server_cuts_them() {
    // llama.cpp's test_ctx_shift.py: 301 tokens in a 128-token slot, n_keep
    // 0: three blocks of 64 go and the last 109 tokens are evaluated.
    let ids: Vec<u32> = (0..301).map(|i| 10 + i % 200).collect();
    let cfg = |on| anedvd_server::ServerConfig {
        context_shift: on,
        max_seq: 128,
        ..config()
    };
    let off = app(cfg(false));
    for path in ["/completion", "/v1/completions"] {
        let r = post(
            &off,
            path,
            &json!({"prompt": ids, "max_tokens": 4, "n_predict": 4}),
        )
        .await;
        exceeds_context(&r);
        assert_eq!(r.json()["error"]["type"], "exceed_context_size_error");
    }

    let on = app(cfg(true));
    let r = post(&on, "/completion", &json!({"prompt": ids, "n_predict": 4})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(shift_header(&r), Some((0, 192)));
    let v = r.json();
    assert_eq!(v["truncated"], true, "{v}");
    assert_eq!(v["tokens_evaluated"], 109);
    assert_eq!(v["timings"]["prompt_n"], 109);
    assert_eq!(v["generation_settings"]["n_keep"], 0);

    // n_keep tokens stay in front: 10 + the last 114.
    let r = post(
        &on,
        "/completion",
        &json!({"prompt": ids, "n_predict": 1, "n_keep": 10}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["tokens_evaluated"], 124);
    assert_eq!(v["generation_settings"]["n_keep"], 10);

    let r = post(
        &on,
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 4}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["usage"]["prompt_tokens"], 109);
    assert_eq!(shift_header(&r), Some((0, 192)));

    // A prompt that fits is not truncated.
    let r = post(
        &on,
        "/completion",
        &json!({"prompt": &ids[..50], "n_predict": 2}),
    )
    .await;
    assert_eq!(r.json()["truncated"], false);
    assert!(r.headers.get(CONTEXT_SHIFT_HEADER).is_none());
    let m = send(&on, "GET", "/metrics", &[], "").await.text;
    assert_eq!(metric(&m, "anedvd_context_shifts_total"), 3.0);
    assert_eq!(
        metric(&m, "anedvd_context_shift_dropped_tokens_total"),
        (192 + 177 + 192) as f64
    );
}
