//! Tool calls through the router on the tiny qwen2 fixture (its template is
//! Qwen2.5's, with Hermes `<tool_call>` markup), given a 2048-position
//! context so the rendered tool listing fits. With `required` or a named
//! function the grammar forces a call; its arguments are checked by the
//! schema's plain meaning.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add", "description": "Adds integers.",
            "parameters": {"type": "object", "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 99},
                "b": {"type": "integer", "minimum": 0, "maximum": 99}},
                "required": ["a", "b"], "additionalProperties": false}}},
    ])
}

fn check_call(call: &Value) -> String {
    assert_eq!(call["type"], "function", "{call}");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    let name = call["function"]["name"].as_str().unwrap().to_owned();
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    let o = args.as_object().unwrap();
    match name.as_str() {
        "get_weather" => {
            assert_eq!(o.len(), 2, "{args}");
            assert!(o["city"].as_str().unwrap().chars().count() <= 12);
            assert!(["celsius", "fahrenheit"].contains(&o["unit"].as_str().unwrap()));
        }
        "add" => {
            assert_eq!(o.len(), 2, "{args}");
            for k in ["a", "b"] {
                assert!((0..=99).contains(&o[k].as_i64().unwrap()), "{args}");
            }
        }
        other => panic!("called an unknown tool {other}"),
    }
    name
}

#[tokio::test]
async fn required_and_named_tool_choice_always_give_a_valid_call() {
    let app = wide_app();
    for (seed, choice) in [
        (0, json!("required")),
        (1, json!("required")),
        (2, json!({"type": "function", "function": {"name": "add"}})),
        (
            3,
            json!({"type": "function", "function": {"name": "get_weather"}}),
        ),
    ] {
        let body = json!({"messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "tools": tools(), "tool_choice": choice, "temperature": 1.0, "seed": seed,
            "max_tokens": 150});
        let r = post(&app, CHAT, &body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let v = r.json();
        let choice0 = &v["choices"][0];
        assert_eq!(choice0["finish_reason"], "tool_calls", "{v}");
        let calls = choice0["message"]["tool_calls"].as_array().unwrap();
        assert!(!calls.is_empty(), "{v}");
        for c in calls {
            let name = check_call(c);
            if let Some(want) = choice.pointer("/function/name") {
                assert_eq!(name, want.as_str().unwrap());
            }
        }
        // no markup leaks into the text
        let content = choice0["message"]["content"].as_str().unwrap_or_default();
        assert!(!content.contains("<tool_call>"), "{content:?}");
    }
}

#[tokio::test]
async fn streamed_calls_arrive_as_tool_call_deltas() {
    let app = wide_app();
    let body = json!({"messages": [{"role": "user", "content": "Add 2 and 3."}],
        "tools": tools(), "tool_choice": "required", "stream": true, "max_tokens": 150});
    let r = post(&app, CHAT, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut calls = Vec::new();
    let mut text = String::new();
    let mut finish = Value::Null;
    for ev in parse_sse(&r.text) {
        if ev.data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        let c = &v["choices"][0];
        text.push_str(c["delta"]["content"].as_str().unwrap_or_default());
        if let Some(tc) = c["delta"]["tool_calls"].as_array() {
            for call in tc {
                assert_eq!(call["index"].as_u64().unwrap() as usize, calls.len());
                calls.push(call.clone());
            }
        }
        if !c["finish_reason"].is_null() {
            finish = c["finish_reason"].clone();
        }
    }
    assert_eq!(finish, "tool_calls");
    assert!(!calls.is_empty());
    calls.iter().for_each(|c| {
        check_call(c);
    });
    assert!(!text.contains("<tool_call>"), "{text:?}");
}

#[tokio::test]
async fn tool_results_render_back_and_auto_may_answer_in_text() {
    let app = wide_app();
    let msgs = json!([
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]);
    let r = post(
        &app,
        CHAT,
        &json!({"messages": msgs, "tools": tools(), "max_tokens": 8}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let m = &r.json()["choices"][0]["message"];
    assert!(
        m["content"].is_string() || m["tool_calls"].is_array(),
        "{m}"
    );
}

#[tokio::test]
async fn anthropic_tool_use_blocks() {
    let app = wide_app();
    let tools = json!([{"name": "add", "description": "Adds integers.", "input_schema":
        tools()[1]["function"]["parameters"]}]);
    let body = json!({"model": "m", "max_tokens": 150, "messages": [{"role": "user",
        "content": "Add 2 and 3."}], "tools": tools, "tool_choice": {"type": "any"}});
    let r = post(&app, "/v1/messages", &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let uses: Vec<&Value> = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .collect();
    assert!(!uses.is_empty(), "{v}");
    assert_eq!(uses[0]["name"], "add");
    assert!(uses[0]["id"].as_str().unwrap().starts_with("toolu_"));
    let input = uses[0]["input"].as_object().unwrap();
    assert!((0..=99).contains(&input["a"].as_i64().unwrap()));
    // the same, streamed: a tool_use block whose input_json_delta parses
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = post(&app, "/v1/messages", &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut json_text = String::new();
    let mut started = false;
    let mut reason = Value::Null;
    for ev in parse_sse(&r.text) {
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        match ev.event.as_deref() {
            Some("content_block_start") if v["content_block"]["type"] == "tool_use" => {
                assert_eq!(v["content_block"]["name"], "add");
                started = true;
            }
            Some("content_block_delta") if v["delta"]["type"] == "input_json_delta" => {
                json_text.push_str(v["delta"]["partial_json"].as_str().unwrap());
            }
            Some("message_delta") => reason = v["delta"]["stop_reason"].clone(),
            _ => {}
        }
    }
    assert!(started);
    assert_eq!(reason, "tool_use");
    let input: Value = serde_json::from_str(&json_text).unwrap();
    assert!(input["a"].is_i64() && input["b"].is_i64(), "{input}");
}

#[tokio::test]
async fn bad_tool_requests_name_the_field() {
    let app = wide_app();
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (body, param) in [
        (
            json!({"messages": msgs, "tools": tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
        ),
        (
            json!({"messages": msgs, "tools": tools(), "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (
            json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "bogus"}}}], "tool_choice": "required"}),
            "tools",
        ),
        (
            json!({"messages": msgs, "tools": tools(), "response_format": {"type": "json_object"}}),
            "response_format",
        ),
    ] {
        let r = post(&app, CHAT, &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["error"]["param"], param, "{}", r.text);
    }
}
