//! llama-server's native API through the router, on the tiny qwen2 fixture:
//! `/completion` (fields, limits, stop words, token ids, probabilities,
//! streaming, seeds, prompt forms, refused fields), `/props`, `/slots`, and
//! the over-context error shape on every completion route.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use serde_json::{json, Value};

const CMPL: &str = "/completion";

async fn complete(app: &axum::Router, body: Value) -> Value {
    let r = post(app, CMPL, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

fn content(v: &Value) -> String {
    v["content"].as_str().unwrap().to_owned()
}

fn error(r: &Reply, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text);
    let v = r.json();
    assert!(v["error"]["message"].is_string(), "{v}");
    v["error"].clone()
}

async fn tokenize(app: &axum::Router, text: &str) -> Vec<u32> {
    let r = post(
        app,
        "/tokenize",
        &json!({"content": text, "add_special": true}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    serde_json::from_value(r.json()["tokens"].clone()).unwrap()
}

#[tokio::test]
async fn reply_has_llama_server_fields_and_types() {
    let app = app(config());
    let v = complete(
        &app,
        json!({"prompt": "Hello there", "n_predict": 6, "temperature": 0}),
    )
    .await;
    assert!(v["content"].is_string(), "{v}");
    assert_eq!(v["tokens"], json!([]), "{v}");
    assert_eq!(v["index"], 0);
    assert!(v["id_slot"].is_i64());
    assert_eq!(v["stop"], true);
    assert_eq!(v["model"], "qwen2-tiny");
    assert_eq!(v["truncated"], false);
    assert!(v["has_new_line"].is_boolean());
    assert!(["eos", "limit"].contains(&v["stop_type"].as_str().unwrap()));
    assert_eq!(v["stopping_word"], "");
    assert!(v["prompt"].as_str().unwrap().contains("Hello there"));
    assert!(v.get("completion_probabilities").is_none());
    let predicted = v["tokens_predicted"].as_u64().unwrap();
    assert!((1..=6).contains(&predicted), "{v}");
    let evaluated = v["tokens_evaluated"].as_u64().unwrap();
    assert_eq!(
        evaluated as usize,
        tokenize(&app, "Hello there").await.len()
    );
    assert!(v["tokens_cached"].as_u64().unwrap() <= evaluated);

    let t = &v["timings"];
    for key in [
        "prompt_ms",
        "prompt_per_token_ms",
        "prompt_per_second",
        "predicted_ms",
        "predicted_per_token_ms",
        "predicted_per_second",
    ] {
        assert!(t[key].as_f64().unwrap() >= 0.0, "{key}: {t}");
    }
    assert_eq!(
        t["prompt_n"].as_u64().unwrap() + t["cache_n"].as_u64().unwrap(),
        evaluated
    );
    assert_eq!(t["predicted_n"].as_u64().unwrap(), predicted);

    let g = &v["generation_settings"];
    assert_eq!(g["n_predict"], 6, "{g}");
    assert_eq!(g["temperature"], 0.0);
    assert_eq!(g["n_ctx"], 256);
    assert!(g["seed"].is_u64());
    assert!(g["top_k"].is_u64() && g["top_p"].is_f64() && g["min_p"].is_f64());
    assert!(g["samplers"].is_array());
    assert_eq!(g["stop"], json!([]));
}

#[tokio::test]
async fn n_predict_limits_the_output() {
    let mut cfg = config();
    cfg.max_seq = 32;
    let app = app(cfg);
    let v = complete(
        &app,
        json!({"prompt": "Once upon", "n_predict": 3, "ignore_eos": true}),
    )
    .await;
    assert_eq!(v["tokens_predicted"], 3, "{v}");
    assert_eq!(v["timings"]["predicted_n"], 3);
    assert_eq!(v["stop_type"], "limit");
    assert_eq!(v["truncated"], false);
    assert_eq!(v["generation_settings"]["ignore_eos"], true);

    // 0: the prompt is evaluated, nothing is generated.
    let v = complete(&app, json!({"prompt": "Once upon", "n_predict": 0})).await;
    assert_eq!(v["tokens_predicted"], 0, "{v}");
    assert_eq!(v["content"], "");
    assert_eq!(v["stop_type"], "limit");

    // -1: until the context is full (EOS banned by ignore_eos).
    let v = complete(
        &app,
        json!({"prompt": "Once upon", "n_predict": -1, "ignore_eos": true}),
    )
    .await;
    assert_eq!(v["stop_type"], "limit", "{v}");
    assert_eq!(v["truncated"], true);
    assert_eq!(v["generation_settings"]["n_predict"], -1);
    let total = v["tokens_evaluated"].as_u64().unwrap() + v["tokens_predicted"].as_u64().unwrap();
    // As llama-server counts it: prompt and generated tokens fill n_ctx.
    assert_eq!(total, 32, "{v}");

    let r = post(&app, CMPL, &json!({"prompt": "x", "n_predict": -2})).await;
    assert_eq!(error(&r, 400)["param"], "n_predict");
    // max_tokens is read when n_predict is absent.
    let v = complete(
        &app,
        json!({"prompt": "x", "max_tokens": 2, "ignore_eos": true}),
    )
    .await;
    assert_eq!(v["tokens_predicted"], 2, "{v}");
}

#[tokio::test]
async fn stop_word_ends_the_output() {
    let app = app(config());
    let base = json!({"prompt": "The story", "n_predict": 24, "ignore_eos": true});
    let full = content(&complete(&app, base.clone()).await);
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 8, "{full:?}");
    // A piece of the greedy output after its start: the output must end
    // right before its first occurrence.
    let word: String = chars[4..7].iter().collect();
    let cut = full.find(&word).unwrap();
    let mut body = base;
    body["stop"] = json!(["a-stop-that-never-occurs", word]);
    let v = complete(&app, body).await;
    assert_eq!(v["stop_type"], "word", "{v}");
    assert_eq!(v["stopping_word"], word);
    assert_eq!(content(&v), full[..cut]);
    assert_eq!(v["generation_settings"]["stop"][1], word);
}

/// `text` without the `<|...|>` control tokens of the tiny fixture's vocabulary.
fn without_control_tokens(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<|") {
        out.push_str(&rest[..start]);
        match rest[start..].find("|>") {
            Some(end) => rest = &rest[start + end + 2..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn returned_tokens_detokenize_to_the_content() {
    let app = app(config());
    let v = complete(
        &app,
        json!({"prompt": "A list:", "n_predict": 12, "ignore_eos": true, "return_tokens": true}),
    )
    .await;
    let tokens = v["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 12, "{v}");
    assert!(tokens.iter().all(Value::is_u64));
    let r = post(&app, "/detokenize", &json!({"tokens": tokens})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // As in llama-server, `/detokenize` renders control tokens and the
    // completion's content does not.
    let rendered = r.json()["content"].as_str().unwrap().to_owned();
    assert_eq!(without_control_tokens(&rendered), content(&v));
}

#[tokio::test]
async fn n_probs_are_well_formed_and_sorted() {
    let app = app(config());
    let v = complete(
        &app,
        json!({"prompt": "Hi", "n_probs": 5, "n_predict": 4, "temperature": 0, "ignore_eos": true}),
    )
    .await;
    let probs = v["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 4, "{v}");
    let mut text = String::new();
    for p in probs {
        assert!(p["id"].is_u64(), "{p}");
        text.push_str(p["token"].as_str().unwrap());
        assert!(p["bytes"].as_array().unwrap().iter().all(Value::is_u64));
        assert!(p["logprob"].as_f64().unwrap() <= 0.0);
        let top = p["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 5, "{p}");
        for t in top {
            assert!(t["id"].is_u64() && t["token"].is_string() && t["bytes"].is_array());
            assert!(t["logprob"].as_f64().unwrap() <= 0.0);
        }
        let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]), "{lps:?}");
        // Greedy without penalties picks the most likely token.
        assert_eq!(p["id"], top[0]["id"]);
        assert_eq!(p["logprob"], top[0]["logprob"]);
    }
    assert_eq!(text, content(&v));
    assert_eq!(v["generation_settings"]["n_probs"], 5);

    let r = post(&app, CMPL, &json!({"prompt": "Hi", "n_probs": 101})).await;
    assert_eq!(error(&r, 400)["param"], "n_probs");
}

#[tokio::test]
async fn stream_concatenates_to_the_non_streamed_content() {
    let app = app(config());
    let body = json!({"prompt": "Tell me", "n_predict": 10, "temperature": 0, "n_probs": 2});
    let plain = complete(&app, body.clone()).await;
    let mut sbody = body;
    sbody["stream"] = json!(true);
    let r = post(&app, CMPL, &sbody).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = parse_sse(&r.text);
    assert!(events.iter().all(|e| e.data != "[DONE]"), "{}", r.text);
    let (last, deltas) = events.split_last().unwrap();
    let mut text = String::new();
    let mut ids = Vec::new();
    for e in deltas {
        let v: Value = serde_json::from_str(&e.data).unwrap();
        assert_eq!(v["stop"], false, "{v}");
        let tokens = v["tokens"].as_array().unwrap();
        assert!(!tokens.is_empty(), "{v}");
        assert_eq!(
            v["completion_probabilities"].as_array().unwrap().len(),
            tokens.len()
        );
        ids.extend(tokens.iter().map(|t| t.as_u64().unwrap()));
        text.push_str(v["content"].as_str().unwrap());
    }
    assert_eq!(text, content(&plain));
    let last: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(last["stop"], true, "{last}");
    assert_eq!(last["content"], "");
    assert_eq!(last["stop_type"], plain["stop_type"]);
    assert_eq!(last["tokens_predicted"], plain["tokens_predicted"]);
    assert_eq!(last["generation_settings"]["stream"], true);
    assert!(last["timings"]["predicted_n"].is_u64());
    assert!(last.get("completion_probabilities").is_none());
    let plain_ids: Vec<u64> = plain["completion_probabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, plain_ids);
}

#[tokio::test]
async fn same_seed_same_text_other_seed_other_text() {
    let app = app(config());
    let run = |seed: i64| {
        let app = app.clone();
        async move {
            let body = json!({"prompt": "Random", "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                "min_p": 0.0, "seed": seed, "n_predict": 16, "ignore_eos": true});
            let v = complete(&app, body).await;
            assert_eq!(v["generation_settings"]["seed"], seed);
            content(&v)
        }
    };
    let a = run(1).await;
    assert_eq!(a, run(1).await);
    let b = run(2).await;
    assert_ne!(a, b);
    assert_eq!(b, run(2).await);
    // -1 draws a fresh seed (reported); other negatives are refused.
    let v = complete(&app, json!({"prompt": "x", "seed": -1, "n_predict": 1})).await;
    assert!(v["generation_settings"]["seed"].is_u64());
    let r = post(&app, CMPL, &json!({"prompt": "x", "seed": -5})).await;
    assert_eq!(error(&r, 400)["param"], "seed");
}

#[tokio::test]
async fn prompt_forms() {
    let app = app(config());
    let greedy = |prompt: Value| json!({"prompt": prompt, "n_predict": 6, "temperature": 0});
    let text = complete(&app, greedy(json!("Good morning"))).await;
    let ids = tokenize(&app, "Good morning").await;
    let by_ids = complete(&app, greedy(json!(ids))).await;
    assert_eq!(content(&by_ids), content(&text));
    assert_eq!(by_ids["tokens_evaluated"], text["tokens_evaluated"]);

    // Mixed ids and text is one prompt: the text after ids gets no BOS.
    let good = tokenize(&app, "Good").await;
    let mixed = complete(&app, greedy(json!([good[0], " morning"]))).await;
    assert!(mixed.is_object(), "{mixed}");

    // Several prompts: an array of replies, in order.
    let r = post(&app, CMPL, &greedy(json!(["Good morning", ids]))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["index"], 0);
    assert_eq!(arr[1]["index"], 1);
    assert_eq!(arr[0]["content"], text["content"]);
    assert_eq!(arr[1]["content"], text["content"]);
    // One prompt in a list is a single reply.
    let one = complete(&app, greedy(json!(["Good morning"]))).await;
    assert_eq!(one["content"], text["content"]);

    for (prompt, param) in [
        (Value::Null, "prompt"),
        (json!([]), "prompt"),
        (json!([1.5, "x"]), "prompt"),
        (json!([-3]), "prompt"),
        (
            json!({"prompt_string": "x", "multimodal_data": ["AAAA"]}),
            "prompt",
        ),
        (json!([999_999_999]), "prompt"),
    ] {
        let r = post(&app, CMPL, &json!({"prompt": prompt})).await;
        let e = error(&r, 400);
        assert!(
            e["param"].as_str().unwrap().starts_with(param),
            "{prompt}: {e}"
        );
    }
    let r = post(&app, CMPL, &json!({"prompt": ["a", "b"], "stream": true})).await;
    assert_eq!(error(&r, 400)["param"], "prompt");
}

#[tokio::test]
async fn unsupported_knobs_are_refused_by_name_defaults_accepted() {
    let app = app(config());
    for (field, value) in [
        ("mirostat", json!(2)),
        ("typical_p", json!(0.5)),
        ("dynatemp_range", json!(0.5)),
        ("xtc_probability", json!(0.5)),
        ("dry_multiplier", json!(0.8)),
        ("n_cmpl", json!(2)),
        ("post_sampling_probs", json!(true)),
        ("lora", json!([{"id": 0, "scale": 1.0}])),
        ("id_slot", json!(7)),
    ] {
        let r = post(&app, CMPL, &json!({"prompt": "x", field: value})).await;
        let e = error(&r, 400);
        assert_eq!(e["param"], field, "{e}");
    }
    let accepted = json!({
        "prompt": "x", "n_predict": 2, "mirostat": 0, "typical_p": 1.0, "dynatemp_range": 0.0,
        "xtc_probability": 0.0, "dry_multiplier": 0.0, "cache_prompt": false, "id_slot": -1,
        "samplers": ["top_k", "top_p", "min_p", "temperature"], "n_keep": 4,
        "timings_per_token": false, "post_sampling_probs": false, "repeat_last_n": -1,
        "repeat_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": 0.2, "top_k": -1,
    });
    let v = complete(&app, accepted).await;
    let g = &v["generation_settings"];
    assert_eq!(g["repeat_last_n"], -1, "{g}");
    assert_eq!(g["top_k"], 0);
    assert!((g["repeat_penalty"].as_f64().unwrap() - 1.1).abs() < 1e-6);
    let r = post(
        &app,
        CMPL,
        &json!({"prompt": "x", "id_slot": 0, "n_predict": 1}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn grammar_logit_bias_and_response_fields() {
    let app = app(config());
    let g = r#"root ::= "yes" | "no""#;
    let v = complete(
        &app,
        json!({"prompt": "Answer:", "grammar": g, "n_predict": 8, "temperature": 1.0, "seed": 3}),
    )
    .await;
    assert!(
        ["yes", "no"].contains(&v["content"].as_str().unwrap()),
        "{v}"
    );
    assert_eq!(v["generation_settings"]["grammar"], g);
    assert_eq!(v["stop_type"], "eos");

    let v = complete(
        &app,
        json!({"prompt": "Answer:", "json_schema": {"type": "boolean"}, "n_predict": 8}),
    )
    .await;
    assert!(serde_json::from_str::<bool>(&content(&v)).is_ok(), "{v}");

    // Ban the greedy first token, llama-server's way ([id, false]).
    let body = json!({"prompt": "Hi", "n_predict": 1, "temperature": 0, "return_tokens": true, "ignore_eos": true});
    let first = complete(&app, body.clone()).await["tokens"][0].clone();
    let mut banned = body;
    banned["logit_bias"] = json!([[first, false]]);
    let v = complete(&app, banned).await;
    assert_ne!(v["tokens"][0], first, "{v}");
    let bias = v["generation_settings"]["logit_bias"].as_array().unwrap();
    // A ban is −∞, written as null (as llama-server does).
    assert!(
        bias.iter()
            .any(|b| b["token"] == first && b["bias"].is_null()),
        "{bias:?}"
    );

    let v = complete(
        &app,
        json!({"prompt": "Hi", "n_predict": 3, "response_fields": ["content", "generation_settings/n_predict", "nope"]}),
    )
    .await;
    let o = v.as_object().unwrap();
    assert_eq!(o.len(), 2, "{v}");
    assert!(o["content"].is_string());
    assert_eq!(o["generation_settings/n_predict"], 3);
}

#[tokio::test]
async fn completions_is_an_alias() {
    let app = app(config());
    let r = post(
        &app,
        "/completions",
        &json!({"prompt": "Hi", "n_predict": 2}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert!(
        v["content"].is_string() && v.get("choices").is_none(),
        "{v}"
    );
    // The OpenAI legacy route keeps its shape.
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    )
    .await;
    assert!(r.json()["choices"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn props_shape() {
    let mut cfg = config();
    cfg.parallel = 2;
    let app = app(cfg);
    let r = send(&app, "GET", "/props", &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    let d = &v["default_generation_settings"];
    assert_eq!(d["n_ctx"], 256, "{v}");
    assert_eq!(d["is_processing"], false);
    assert_eq!(d["params"]["temperature"], 0.0);
    assert_eq!(d["params"]["n_predict"], -1);
    // fixed_seed: the configured seed.
    assert_eq!(
        d["params"]["seed"],
        anedvd_engine::SamplingParams::default().seed
    );
    assert_eq!(v["total_slots"], 2);
    assert!(!v["model_path"].as_str().unwrap().is_empty());
    assert!(v["chat_template"].is_string());
    assert_eq!(v["modalities"]["vision"], false);
    assert!(v["build_info"].as_str().unwrap().starts_with("anedvd"));
}

#[tokio::test]
async fn slots_shape_and_busy_slots() {
    let app = app(config());
    let r = send(&app, "GET", "/slots", &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    let slots = v.as_array().unwrap();
    assert_eq!(slots.len(), 1);
    assert_eq!(slots[0]["id"], 0);
    assert_eq!(slots[0]["n_ctx"], 256);
    assert_eq!(slots[0]["is_processing"], false);
    assert!(slots[0]["params"]["top_k"].is_u64());
    let r = send(&app, "GET", "/slots?fail_on_no_slot=1", &[], "").await;
    assert_eq!(r.status, 200, "{}", r.text);

    // A stream left unread holds the only slot.
    let body = open_stream(&app, &json!("Busy")).await;
    let mut busy = false;
    for _ in 0..200 {
        let v = send(&app, "GET", "/slots", &[], "").await.json();
        if v[0]["is_processing"] == true {
            busy = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(busy, "the slot never showed as processing");
    let r = send(&app, "GET", "/slots?fail_on_no_slot=1", &[], "").await;
    assert_eq!(r.status, 503, "{}", r.text);
    drop(body);
}

#[tokio::test]
async fn over_context_error_has_llama_server_shape_on_every_route() {
    let mut cfg = config();
    cfg.max_seq = 32;
    let app = app(cfg);
    let ids: Vec<u32> = (0..40).map(|i| 10 + i).collect();
    let long = "word ".repeat(100);
    for (path, body) in [
        (CMPL, json!({"prompt": ids})),
        ("/v1/completions", json!({"prompt": ids})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": long}]}),
        ),
    ] {
        let r = post(&app, path, &body).await;
        let e = error(&r, 400);
        assert_eq!(e["type"], "exceed_context_size_error", "{path}: {e}");
        assert_eq!(e["code"], 400);
        assert_eq!(e["n_ctx"], 32);
        let n = e["n_prompt_tokens"].as_u64().unwrap();
        assert!(n > 32, "{e}");
        if path != "/v1/chat/completions" {
            assert_eq!(n, 40);
        }
        let m = e["message"].as_str().unwrap();
        assert_eq!(
            m,
            format!("request ({n} tokens) exceeds the available context size (32 tokens), try increasing it")
        );
        assert!(e.get("param").is_some());
    }
}

#[test]
fn decode_request_checks_completion_bodies_without_a_model() {
    let state = anedvd_server::AppState::new(config());
    let ok = |path: &str, body: Value| {
        anedvd_server::decode_request(&state, path, body.to_string().as_bytes())
    };
    assert!(ok(CMPL, json!({"prompt": "x", "n_predict": 3})).is_ok());
    assert!(ok("/completions", json!({"prompt": [1, "x"]})).is_ok());
    let e = ok(CMPL, json!({"prompt": "x", "mirostat": 1})).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("mirostat"));
    let e = ok(CMPL, json!({"prompt": "x", "temperature": "hot"})).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("temperature"));
    assert!(ok(CMPL, json!({"n_predict": 3})).is_err());
}

#[tokio::test]
async fn cache_prompt_false_prefills_the_whole_prompt() {
    let app = app(config());
    let body = json!({"prompt": "Once upon a time", "n_predict": 2, "ignore_eos": true});
    let first = complete(&app, body.clone()).await;
    assert_eq!(first["timings"]["cache_n"], 0, "{first}");
    let cached = complete(&app, body.clone()).await;
    let n = first["tokens_evaluated"].as_u64().unwrap();
    assert_eq!(cached["timings"]["cache_n"], n - 1, "{cached}");
    let mut fresh = body;
    fresh["cache_prompt"] = json!(false);
    let v = complete(&app, fresh).await;
    assert_eq!(v["timings"]["cache_n"], 0, "{v}");
    assert_eq!(v["timings"]["prompt_n"], n);
    assert_eq!(v["content"], first["content"]);
}

#[tokio::test]
async fn logit_bias_map_keys_may_be_texts() {
    let app = app(config());
    let body = json!({"prompt": "Hi", "n_predict": 1, "temperature": 0, "return_tokens": true,
        "ignore_eos": true});
    let first = complete(&app, body.clone()).await["tokens"][0].clone();
    let r = post(&app, "/detokenize", &json!({"tokens": [first]})).await;
    let text = r.json()["content"].as_str().unwrap().to_owned();
    let mut banned = body;
    banned["logit_bias"] = json!({ text.clone(): false });
    let v = complete(&app, banned).await;
    assert_ne!(v["tokens"][0], first, "{text:?}: {v}");
}

#[tokio::test]
async fn metrics_carry_llama_server_names_and_start_time() {
    let app = app(config());
    complete(
        &app,
        json!({"prompt": "Hi there", "n_predict": 3, "ignore_eos": true}),
    )
    .await;
    let r = send(&app, "GET", "/metrics", &[], "").await;
    let started: u64 = r.headers["process-start-time-unix"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(started > 1_700_000_000, "{started}");
    let m = r.text;
    assert_eq!(
        metric(&m, "anedvd_requests_total{endpoint=\"completion\"}"),
        1.0
    );
    assert_eq!(metric(&m, "llamacpp:tokens_predicted_total"), 3.0);
    assert_eq!(
        metric(&m, "llamacpp:prompt_tokens_total"),
        metric(&m, "anedvd_prompt_tokens_total")
    );
    assert!(
        m.contains("# TYPE llamacpp:requests_processing gauge"),
        "{m}"
    );
}
