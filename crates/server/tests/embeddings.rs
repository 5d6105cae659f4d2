//! `/v1/embeddings` on the tiny qwen2 fixture: shapes, unit length, input
//! forms that mean the same tokens give the same vector, base64 encoding,
//! refusals naming the field. (That the hidden states are right is checked
//! against transformers in crates/engine/tests/families.rs.)
#![allow(clippy::unwrap_used)]

mod common;
use base64::Engine as _;
use common::*;
use serde_json::{json, Value};

const EMB: &str = "/v1/embeddings";

fn vectors(v: &Value) -> Vec<Vec<f64>> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["object"], "embedding");
            assert_eq!(d["index"], i);
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn inputs_give_unit_vectors_of_the_model_width() {
    let app = app(config());
    let r = post(
        &app,
        EMB,
        &json!({"model": "m", "input": ["Hello world", "Hello world", "Other text"]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["object"], "list");
    let vs = vectors(&v);
    assert_eq!(vs.len(), 3);
    for e in &vs {
        assert_eq!(e.len(), 64);
        let norm: f64 = e.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
    assert_eq!(vs[0], vs[1]);
    assert_ne!(vs[0], vs[2]);
    // The same tokens as ids give the same vector; usage counts them.
    let ids = post(&app, "/tokenize", &json!({"content": "Hello world"}))
        .await
        .json()["tokens"]
        .clone();
    let n = ids.as_array().unwrap().len();
    let by_ids = post(&app, EMB, &json!({"input": ids})).await.json();
    assert_eq!(vectors(&by_ids)[0], vs[0]);
    assert_eq!(by_ids["usage"]["prompt_tokens"], n);
    let nested = post(&app, EMB, &json!({"input": [ids, ids]})).await.json();
    assert_eq!(vectors(&nested).len(), 2);
    // base64: the same floats, little-endian f32.
    let b = post(
        &app,
        EMB,
        &json!({"input": "Hello world", "encoding_format": "base64"}),
    )
    .await
    .json();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let floats: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // JSON carries each f32 in its shortest form: read back as f32, equal.
    let json32: Vec<f32> = vs[0].iter().map(|&x| x as f32).collect();
    assert_eq!(floats, json32);
}

#[tokio::test]
async fn pooling_is_the_servers_choice() {
    let mean = app(config());
    let mut cfg = config();
    cfg.pooling = anedvd_engine::Pooling::Last;
    let last = app(cfg);
    let body = json!({"input": "Some words here"});
    let a = vectors(&post(&mean, EMB, &body).await.json());
    let b = vectors(&post(&last, EMB, &body).await.json());
    assert_ne!(a, b);
}

#[tokio::test]
async fn bad_requests_name_the_field() {
    let app = app(config());
    let long: Vec<u32> = (0..300).map(|i| 10 + i % 200).collect();
    for (body, param) in [
        (json!({}), "input"),
        (json!({"input": []}), "input"),
        (json!({"input": [1, "a"]}), "input"),
        (json!({"input": [99999]}), "input"),
        (
            json!({"input": "x", "encoding_format": "hex"}),
            "encoding_format",
        ),
        (json!({"input": "x", "dimensions": 8}), "dimensions"),
    ] {
        let r = post(&app, EMB, &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(r.json()["error"]["param"], param, "{body}");
    }
    let r = post(&app, EMB, &json!({"input": long})).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"]["type"], "exceed_context_size_error");
}

#[tokio::test]
async fn backends_without_hidden_states_refuse_clearly() {
    let engine = load_on(
        "qwen2",
        anedvd_testkit::fixtures::Format::GgufF32,
        anedvd_engine::BackendChoice::AneSim,
    );
    let st = anedvd_server::AppState::new(config());
    st.set_engine(engine, None).unwrap();
    let app = anedvd_server::router(st);
    let r = post(&app, EMB, &json!({"input": "Hello"})).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let m = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(m.contains("cpu backend"), "{m}");
}
