//! OpenAI's Responses API through the router on the tiny qwen2 fixture:
//! shapes, the streamed event sequence against the whole reply, function
//! tools forced by `tool_choice`, `text.format` schemas, refusals by name.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use serde_json::{json, Value};

const RESP: &str = "/v1/responses";

fn output_text(v: &Value) -> String {
    let mut text = String::new();
    for item in v["output"].as_array().unwrap() {
        if item["type"] == "message" {
            for part in item["content"].as_array().unwrap() {
                assert_eq!(part["type"], "output_text", "{part}");
                text.push_str(part["text"].as_str().unwrap());
            }
        }
    }
    text
}

#[tokio::test]
async fn text_reply_shape_and_length_limit() {
    let app = app(config());
    let body = json!({"model": "m", "instructions": "Be brief.", "input": "Hello there",
        "max_output_tokens": 5, "temperature": 0});
    let r = post(&app, RESP, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert!(v["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(v["status"], "incomplete", "{v}");
    assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(v["instructions"], "Be brief.");
    assert_eq!(v["max_output_tokens"], 5);
    assert_eq!(v["usage"]["output_tokens"], 5);
    let input = v["usage"]["input_tokens"].as_u64().unwrap();
    assert_eq!(v["usage"]["total_tokens"].as_u64().unwrap(), input + 5);
    let item = &v["output"][0];
    assert_eq!(
        (&item["type"], &item["role"]),
        (&json!("message"), &json!("assistant"))
    );
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    // The same conversation as chat items gives the same prompt.
    let items = json!({"model": "m", "instructions": "Be brief.", "max_output_tokens": 5,
        "temperature": 0,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hello there"}]}]});
    let w = post(&app, RESP, &items).await.json();
    assert_eq!(w["usage"]["input_tokens"], input);
    assert_eq!(output_text(&w), output_text(&v));
}

#[tokio::test]
async fn stream_events_are_ordered_and_add_up_to_the_reply() {
    let app = app(config());
    let body = json!({"input": "Tell me", "max_output_tokens": 8, "temperature": 0});
    let whole = post(&app, RESP, &body).await.json();
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let r = post(&app, RESP, &streamed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = parse_sse(&r.text);
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_deref().unwrap()).collect();
    let deltas = kinds
        .iter()
        .filter(|k| **k == "response.output_text.delta")
        .count();
    assert!(deltas >= 1, "{kinds:?}");
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    want.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    want.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]);
    assert_eq!(kinds, want);
    let mut text = String::new();
    for (i, e) in events.iter().enumerate() {
        let d: Value = serde_json::from_str(&e.data).unwrap();
        assert_eq!(d["type"], kinds[i]);
        assert_eq!(d["sequence_number"], i);
        if kinds[i] == "response.output_text.delta" {
            text.push_str(d["delta"].as_str().unwrap());
        }
    }
    assert_eq!(text, output_text(&whole));
    let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(output_text(&last["response"]), text);
    assert_eq!(last["response"]["usage"]["output_tokens"], 8);
}

fn weather_tool() -> Value {
    json!([{"type": "function", "name": "get_weather", "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": false}}])
}

fn check_weather_call(item: &Value) {
    assert_eq!(item["type"], "function_call", "{item}");
    assert_eq!(item["name"], "get_weather");
    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
    let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert!(
        args["city"].as_str().unwrap().chars().count() <= 12,
        "{args}"
    );
    assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
}

#[tokio::test]
async fn forced_function_calls_whole_and_streamed_and_results_back_in() {
    let app = wide_app();
    let body = json!({"input": "Weather in Oslo?", "tools": weather_tool(),
        "tool_choice": "required", "max_output_tokens": 300});
    let v = post(&app, RESP, &body).await.json();
    let calls: Vec<&Value> = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    assert_eq!(calls.len(), 1, "{v}");
    check_weather_call(calls[0]);

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["tool_choice"] = json!({"type": "function", "name": "get_weather"});
    let r = post(&app, RESP, &streamed).await;
    let events = parse_sse(&r.text);
    let done: Vec<Value> = events
        .iter()
        .filter(|e| e.event.as_deref() == Some("response.function_call_arguments.done"))
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect();
    assert_eq!(done.len(), 1, "{}", r.text);
    let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    let item = last["response"]["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap()
        .clone();
    check_weather_call(&item);
    assert_eq!(item["arguments"], done[0]["arguments"]);

    // The call and its result go back in as items.
    let follow = json!({"tools": weather_tool(), "max_output_tokens": 4, "input": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": "{\"city\": \"Oslo\", \"unit\": \"celsius\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "{\"temp\": 3}"},
    ]});
    let r = post(&app, RESP, &follow).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.json()["usage"]["input_tokens"].as_u64().unwrap()
            > v["usage"]["input_tokens"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn text_format_json_schema_is_enforced() {
    let app = app(config());
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"], "additionalProperties": false});
    let body = json!({"input": "Answer", "max_output_tokens": 40, "temperature": 1.0, "seed": 4,
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": true}}});
    let v = post(&app, RESP, &body).await.json();
    let parsed: Value = serde_json::from_str(&output_text(&v)).unwrap();
    assert!(parsed["ok"].is_boolean(), "{parsed}");
    assert_eq!(v["text"]["format"]["name"], "answer");
}

#[tokio::test]
async fn unsupported_and_malformed_requests_name_the_field() {
    let app = app(config());
    for (body, param) in [
        (
            json!({"input": "x", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (json!({"input": "x", "background": true}), "background"),
        (
            json!({"input": "x", "tools": [{"type": "web_search"}]}),
            "tools",
        ),
        (json!({"model": "m"}), "input"),
        (json!({"input": 3}), "input"),
        (json!({"input": [{"type": "input_image"}]}), "input[0]"),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
            "input[0]",
        ),
        (
            json!({"input": "x", "text": {"format": {"type": "yaml"}}}),
            "text.format",
        ),
        (
            json!({"input": "x", "text": {"format": {"type": "json_schema", "schema": "no"}}}),
            "text.format.json_schema.schema",
        ),
        (
            json!({"input": "x", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
        (
            json!({"input": "x", "tool_choice": {"type": "file_search"}}),
            "tool_choice",
        ),
    ] {
        let r = post(&app, RESP, &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["error"]["param"], param, "{body}: {}", r.text);
    }
}
