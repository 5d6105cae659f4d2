//! Anthropic Messages dialect through the in-process router.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use serde_json::{json, Value};

/// reference.json's chat as an Anthropic request: `system` separate.
fn body(exp: &Value, system_blocks: bool, extra: Value) -> Value {
    let msgs = exp["chat_messages"].as_array().unwrap();
    let system = msgs[0]["content"].as_str().unwrap();
    let system = if system_blocks {
        json!([{"type": "text", "text": system}])
    } else {
        json!(system)
    };
    let mut b = json!({
        "model": "qwen2-tiny",
        "max_tokens": 6,
        "system": system,
        "messages": msgs[1..],
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test]
async fn message_shape_and_system_prompt() {
    let exp = expected();
    let app = app(config());
    let r = post(&app, "/v1/messages", &body(&exp, false, json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["stop_reason"], "max_tokens");
    assert_eq!(v["stop_sequence"], Value::Null);
    // Same prompt as HF's apply_chat_template with the system message first.
    assert_eq!(v["usage"]["input_tokens"], exp["chat_prompt_tokens"]);
    assert_eq!(v["usage"]["output_tokens"], 6);

    let c = post(
        &app,
        "/v1/messages/count_tokens",
        &body(&exp, true, json!({})),
    )
    .await
    .json();
    assert_eq!(c["input_tokens"], exp["chat_prompt_tokens"]);
    let v2 = post(&app, "/v1/messages", &body(&exp, true, json!({})))
        .await
        .json();
    assert_eq!(v2["usage"]["input_tokens"], exp["chat_prompt_tokens"]);
    assert_eq!(v2["content"], v["content"]);

    // The same conversation through the OpenAI route gives the same text.
    let oai = post(
        &app,
        "/v1/chat/completions",
        &json!({
            "messages": exp["chat_messages"], "max_tokens": 6
        }),
    )
    .await
    .json();
    assert_eq!(
        v["content"][0]["text"],
        oai["choices"][0]["message"]["content"]
    );
}

#[tokio::test]
async fn stream_event_order() {
    let exp = expected();
    let app = app(config());
    let full = post(&app, "/v1/messages", &body(&exp, false, json!({})))
        .await
        .json();
    let r = post(
        &app,
        "/v1/messages",
        &body(&exp, false, json!({"stream": true})),
    )
    .await;
    assert_eq!(r.status, 200);
    let events = parse_sse(&r.text);
    let names: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    let n = names.len();
    assert_eq!(
        &names[..3],
        ["message_start", "content_block_start", "ping"]
    );
    assert!(names[3..n - 3].iter().all(|e| *e == "content_block_delta"));
    assert_eq!(
        &names[n - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let data: Vec<Value> = events
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    for (name, d) in names.iter().zip(&data) {
        assert_eq!(d["type"], *name);
    }
    assert_eq!(data[0]["message"]["content"], json!([]));
    assert_eq!(
        data[0]["message"]["usage"]["input_tokens"],
        exp["chat_prompt_tokens"]
    );
    assert_eq!(
        data[1]["content_block"],
        json!({"type": "text", "text": ""})
    );
    let text: String = data[3..n - 3]
        .iter()
        .map(|d| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(text, full["content"][0]["text"].as_str().unwrap());
    assert_eq!(data[n - 2]["delta"]["stop_reason"], "max_tokens");
    assert_eq!(data[n - 2]["usage"]["output_tokens"], 6);
}

#[tokio::test]
async fn stop_sequences() {
    let exp = expected();
    let app = app(config());
    let long = post(
        &app,
        "/v1/messages",
        &body(&exp, false, json!({"max_tokens": 24})),
    )
    .await
    .json();
    let text = long["content"][0]["text"].as_str().unwrap().to_owned();
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() >= 6, "{text:?}");
    // A stop string taken from the middle of the reply.
    let stop: String = chars[3..5].iter().collect();
    let before = &text[..text.find(&stop).unwrap()];
    let v = post(
        &app,
        "/v1/messages",
        &body(
            &exp,
            false,
            json!({"max_tokens": 24, "stop_sequences": [stop]}),
        ),
    )
    .await
    .json();
    assert_eq!(v["content"][0]["text"], before);
    assert_eq!(v["stop_reason"], "stop_sequence");
    assert_eq!(v["stop_sequence"], json!(stop));

    let r = post(
        &app,
        "/v1/messages",
        &body(
            &exp,
            false,
            json!({"max_tokens": 24, "stop_sequences": [stop], "stream": true}),
        ),
    )
    .await;
    let events = parse_sse(&r.text);
    let delta: Value = serde_json::from_str(&events[events.len() - 2].data).unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "stop_sequence");
    assert_eq!(delta["delta"]["stop_sequence"], json!(stop));
}
