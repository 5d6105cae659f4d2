//! Structured output and logit bias through the router, on the tiny qwen2
//! fixture (random weights: whatever it "wants" to say, the grammar decides
//! what it can say). Outputs are checked with serde_json and by the schema's
//! plain meaning.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

fn content(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pet": {"enum": ["cat", "dog", "none"]},
        },
        "required": ["name", "age", "pet"],
        "additionalProperties": false,
    })
}

fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let o = v.as_object().unwrap();
    assert_eq!(o.len(), 3, "{text}");
    assert!(o["name"].as_str().unwrap().chars().count() <= 10, "{text}");
    assert!((0..=120).contains(&o["age"].as_i64().unwrap()), "{text}");
    assert!(["cat", "dog", "none"].contains(&o["pet"].as_str().unwrap()));
}

#[tokio::test]
async fn json_schema_strict_output_fits_the_schema_whatever_the_seed() {
    let app = app(config());
    for seed in 0..8 {
        let body = json!({
            "messages": [{"role": "user", "content": "Describe a person."}],
            "temperature": 1.0,
            "seed": seed,
            "max_tokens": 120,
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "person", "strict": true, "schema": person_schema()}},
        });
        let r = post(&app, CHAT, &body).await;
        check_person(&content(&r));
        assert_eq!(
            r.json()["choices"][0]["finish_reason"],
            "stop",
            "{}",
            r.text
        );
    }
}

#[tokio::test]
async fn streamed_constrained_output_concatenates_to_valid_json() {
    let app = app(config());
    let body = json!({
        "messages": [{"role": "user", "content": "hi"}],
        "stream": true,
        "max_tokens": 120,
        "json_schema": person_schema(),
    });
    let r = post(&app, CHAT, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut text = String::new();
    for ev in parse_sse(&r.text) {
        if ev.data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    check_person(&text);
}

#[tokio::test]
async fn json_object_mode_and_completions_fields() {
    let app = app(config());
    let r = post(
        &app,
        CHAT,
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 60,
            "response_format": {"type": "json_object"}}),
    )
    .await;
    let text = content(&r);
    if r.json()["choices"][0]["finish_reason"] == "stop" {
        assert!(serde_json::from_str::<Value>(&text).unwrap().is_object());
    } else {
        assert!(text.starts_with('{'), "{text}");
    }
    // llama-server's fields on the legacy completions route
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": "The answer is", "max_tokens": 100, "json_schema": person_schema()}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    check_person(r.json()["choices"][0]["text"].as_str().unwrap());
}

#[tokio::test]
async fn invalid_grammars_are_400s_naming_the_field() {
    let app = app(config());
    let msgs = json!([{"role": "user", "content": "hi"}]);
    for (field, value) in [
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}, "strict": true}}),
        ),
        (
            "json_schema",
            json!({"type": "object", "minProperties": "x"}),
        ),
        ("grammar", json!("root ::= undefined-rule")),
        ("response_format", json!({"type": "yaml"})),
    ] {
        let mut body = json!({"messages": msgs, "max_tokens": 4});
        body[field] = value.clone();
        let r = post(&app, CHAT, &body).await;
        assert_eq!(r.status, 400, "{field}={value}: {}", r.text);
        let e = &r.json()["error"];
        let param = e["param"].as_str().unwrap_or_default();
        assert!(param.starts_with(field), "{field}={value}: {e}");
    }
}

#[tokio::test]
async fn logit_bias_bans_tokens_in_both_forms() {
    let app = app(config());
    let msgs = json!([{"role": "user", "content": "Say something."}]);
    let greedy = |bias: Value| {
        json!({"messages": msgs, "max_tokens": 6, "temperature": 0, "logit_bias": bias,
            "logprobs": true})
    };
    // each generated token's bytes (distinct tokens have distinct bytes)
    let tokens = |r: &Reply| -> Vec<Value> {
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["bytes"].clone())
            .collect()
    };
    // the first greedy token's id, from the engine itself
    let engine = load("qwen2", anedvd_testkit::fixtures::Format::GgufF32);
    let mut session = engine.new_session(256).unwrap();
    let params = anedvd_engine::GenerateParams {
        max_tokens: 1,
        sampling: anedvd_engine::SamplingParams::greedy(),
        ..Default::default()
    };
    let messages: Vec<anedvd_engine::Message> = serde_json::from_value(msgs.clone()).unwrap();
    let ids = engine.chat_prompt(&messages).unwrap();
    let first = anedvd_engine::generate(&mut session, &engine.tokenizer, &ids, &params, |_| {
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let id = first.tokens[0];
    let id_bytes = json!(engine.tokenizer.piece_bytes(id).unwrap());
    let plain = tokens(&post(&app, CHAT, &greedy(Value::Null)).await);
    assert_eq!(plain[0], id_bytes);
    for bias in [json!({ id.to_string(): -100 }), json!([[id, false]])] {
        let banned = tokens(&post(&app, CHAT, &greedy(bias.clone())).await);
        assert!(!banned.contains(&id_bytes), "{bias}: {banned:?}");
    }
    // a large positive bias makes the token the greedy choice everywhere
    let forced = tokens(&post(&app, CHAT, &greedy(json!({ id.to_string(): 100 }))).await);
    assert!(forced.iter().all(|t| *t == id_bytes), "{forced:?}");
    let r = post(&app, CHAT, &greedy(json!({"99999999": 1}))).await;
    assert_eq!(r.status, 400, "{}", r.text);
}
