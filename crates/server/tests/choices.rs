//! `n` > 1: independent choices from one prompt whose prefill runs once;
//! seeds that reproduce a choice whatever slot or company it runs in.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};

fn sampled_config(parallel: usize) -> anedvd_server::ServerConfig {
    let mut cfg = config();
    cfg.parallel = parallel;
    cfg.sampling.temperature = 1.0;
    cfg.sampling.top_k = 0;
    cfg.sampling.top_p = 1.0;
    cfg.sampling.min_p = 0.0;
    cfg
}

fn prompt() -> Vec<u32> {
    (0..24).map(|i| 30 + (i * 11) % 150).collect()
}

fn texts(v: &Value) -> Vec<String> {
    v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn choices_share_one_prefill_and_reproduce_by_seed() {
    let app = app(sampled_config(3));
    let body = json!({"prompt": prompt(), "max_tokens": 12, "n": 3, "seed": 42});
    let r = post(&app, "/v1/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{v}");
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
    }
    let first = texts(&v);
    assert!(
        first[0] != first[1] || first[1] != first[2],
        "choices all alike: {first:?}"
    );
    assert_eq!(v["usage"]["prompt_tokens"], 24);
    let completion: u64 = choices.len() as u64 * 12;
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() <= completion);
    // The prompt ran once; the other two choices copied its cache and ran
    // only its last token.
    let m = send(&app, "GET", "/metrics", &[], "").await.text;
    assert_eq!(metric(&m, "anedvd_prompt_tokens_total"), 24.0 + 2.0, "{m}");
    assert_eq!(metric(&m, "anedvd_prompt_tokens_cached_total"), 46.0, "{m}");

    // The same seed gives the same choices; choice 0 is a lone request with
    // that seed, and choice 2 a lone request with seed + 2.
    let again = post(&app, "/v1/completions", &body).await.json();
    assert_eq!(texts(&again), first);
    for (i, seed) in [(0usize, 42u64), (2, 44)] {
        let lone = json!({"prompt": prompt(), "max_tokens": 12, "seed": seed});
        let lone = post(&app, "/v1/completions", &lone).await.json();
        assert_eq!(texts(&lone)[0], first[i], "choice {i}");
    }
}

#[tokio::test]
async fn a_seeded_request_gives_the_same_text_alone_or_beside_another() {
    let app = app(sampled_config(2));
    let seeded = json!({"prompt": prompt(), "max_tokens": 16, "seed": 7});
    let alone = post(&app, "/v1/completions", &seeded).await.json();
    // A long generation extending the same prompt takes the slot that holds
    // it, so the seeded request runs again on the other slot (from a cache
    // copied off the busy one), batched beside it.
    let mut longer = prompt();
    longer.extend([9, 9, 9]);
    let mut busy = open_stream(&app, &json!(longer)).await.into_data_stream();
    busy.next().await.unwrap().unwrap();
    let beside = post(&app, "/v1/completions", &seeded).await.json();
    assert_eq!(texts(&beside), texts(&alone));
    assert_eq!(
        beside["usage"]["prompt_tokens_details"]["cached_tokens"],
        23
    );
    drop(busy);
}

#[tokio::test]
async fn streamed_choices_carry_their_index_and_match_the_whole_reply() {
    let app = app(sampled_config(2));
    let body = json!({"prompt": prompt(), "max_tokens": 10, "n": 2, "seed": 5});
    let whole = texts(&post(&app, "/v1/completions", &body).await.json());
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let r = post(&app, "/v1/completions", &streamed).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = parse_sse(&r.text);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    assert_eq!(events.iter().filter(|e| e.data == "[DONE]").count(), 1);
    let mut text = [String::new(), String::new()];
    let mut finished = [0, 0];
    let mut usage = Vec::new();
    for e in &events[..events.len() - 1] {
        let c: Value = serde_json::from_str(&e.data).unwrap();
        if !c["usage"].is_null() {
            usage.push(c["usage"].clone());
        }
        for ch in c["choices"].as_array().unwrap() {
            let i = ch["index"].as_u64().unwrap() as usize;
            text[i].push_str(ch["text"].as_str().unwrap());
            if !ch["finish_reason"].is_null() {
                finished[i] += 1;
            }
        }
    }
    assert_eq!(finished, [1, 1]);
    assert_eq!(text.to_vec(), whole);
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0]["prompt_tokens"], 24);

    // Chat: every choice streams its own role chunk and deltas.
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
        "n": 2, "seed": 3, "stream": true});
    let r = post(&app, "/v1/chat/completions", &chat).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut roles = [0, 0];
    for e in parse_sse(&r.text).iter().filter(|e| e.data != "[DONE]") {
        let c: Value = serde_json::from_str(&e.data).unwrap();
        for ch in c["choices"].as_array().unwrap() {
            if ch["delta"]["role"] == "assistant" {
                roles[ch["index"].as_u64().unwrap() as usize] += 1;
            }
        }
    }
    assert_eq!(roles, [1, 1]);
    let mut whole_chat = chat;
    whole_chat["stream"] = json!(false);
    let v = post(&app, "/v1/chat/completions", &whole_chat).await.json();
    assert_eq!(v["choices"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["choices"][1]["index"], 1);
}

#[tokio::test]
async fn n_out_of_range_is_refused_by_name() {
    let app = app(config());
    for n in [json!(0), json!(17), json!(1.5), json!("2")] {
        let r = post(
            &app,
            "/v1/completions",
            &json!({"prompt": "hi", "max_tokens": 2, "n": n}),
        )
        .await;
        assert_eq!(r.status, 400, "{n}: {}", r.text);
        assert_eq!(r.json()["error"]["param"], "n");
    }
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2, "best_of": 2}),
    )
    .await;
    assert_eq!(r.json()["error"]["param"], "best_of");
}
