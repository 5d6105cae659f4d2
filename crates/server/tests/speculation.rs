//! Speculative decoding in the server: requests that speculate share the
//! batched passes (their drafts verified together), keep their greedy text,
//! follow the server's `--spec` default unless they say otherwise, and are
//! counted in /metrics and in OpenAI usage.
#![allow(clippy::unwrap_used)]

mod common;
use anedvd_engine::scheduler::DraftModel;
use anedvd_engine::speculative::{ProposerKind, SpecParams};
use anedvd_engine::BackendChoice;
use anedvd_server::{router, AppState};
use anedvd_testkit::fixtures::{self, Format};
use axum::Router;
use common::*;
use serde_json::{json, Value};
use std::sync::Arc;

/// The family's fixture prompt twice: the second copy is where n-grams
/// recur, so drafts are made, accepted and rejected.
fn repeating_prompt(family: &str) -> Vec<u32> {
    let once = fixtures::reference(family).prompt;
    let mut prompt = once.clone();
    prompt.extend_from_slice(&once[1..]);
    prompt
}

async fn metrics(app: &Router) -> String {
    send(app, "GET", "/metrics", &[], "").await.text
}

async fn complete(app: &Router, body: Value) -> Value {
    let r = post(app, "/v1/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

fn text(v: &Value) -> String {
    v["choices"][0]["text"].as_str().unwrap().to_owned()
}

/// The qwen2 fixture served with its Q8_0 file as the draft model (same
/// vocabulary; no probability floor: these random models are never sure).
fn draft_app() -> Router {
    let st = AppState::new(config());
    let draft = DraftModel {
        engine: Arc::new(load("qwen2", Format::GgufQ8)),
        p_min: 0.0,
    };
    st.set_engine(load("qwen2", Format::GgufF32), Some(draft))
        .unwrap();
    router(st)
}

/// Three greedy requests speculating with the n-gram proposer run together
/// and each gets the text of a plain run; their verify passes share the
/// batched forward passes. LFM2's conv state rewinds inside the batch; on
/// ane-sim the verify pass is the W-column program.
#[tokio::test]
async fn speculating_requests_share_passes_and_keep_greedy_text() {
    let mut total_accepted = 0.0;
    let runs = [
        ("qwen2", BackendChoice::Cpu, 120),
        ("lfm2", BackendChoice::Cpu, 120),
        ("qwen2", BackendChoice::AneSim, 60),
    ];
    for (family, backend, max_tokens) in runs {
        let mut cfg = config();
        cfg.parallel = 3;
        let st = AppState::new(cfg);
        st.set_engine(load_on(family, Format::GgufF32, backend), None)
            .unwrap();
        let app = router(st);
        let prompt = repeating_prompt(family);
        let family = format!("{family} on {backend:?}");
        let plain = complete(&app, json!({"prompt": prompt, "max_tokens": max_tokens})).await;
        assert!(plain["usage"].get("completion_tokens_details").is_none());
        let before = metrics(&app).await;
        let body = json!({
            "prompt": prompt,
            "max_tokens": max_tokens,
            "speculative": {"proposer": "ngram", "n": 2, "m": 6},
        });
        let runs: Vec<_> = (0..3)
            .map(|_| {
                let (app, body) = (app.clone(), body.clone());
                tokio::spawn(async move { complete(&app, body).await })
            })
            .collect();
        let mut accepted_in_usage = 0;
        for r in runs {
            let v = r.await.unwrap();
            assert_eq!(text(&v), text(&plain), "{family}: {v}");
            let details = &v["usage"]["completion_tokens_details"];
            accepted_in_usage += details["accepted_prediction_tokens"].as_u64().unwrap();
            assert!(details["rejected_prediction_tokens"].as_u64().is_some());
        }
        let after = metrics(&app).await;
        let delta = |name: &str| metric(&after, name) - metric(&before, name);
        let drafted = delta("anedvd_spec_drafted_tokens_total");
        let accepted = delta("anedvd_spec_accepted_tokens_total");
        let verifies = delta("anedvd_spec_verify_passes_total");
        let passes = delta("anedvd_batch_passes_total");
        let seqs = delta("anedvd_batch_sequences_total");
        println!("{family}: {verifies} verify passes, {passes} forward passes of {seqs} sequences, {accepted} of {drafted} drafts accepted");
        assert_eq!(accepted, accepted_in_usage as f64, "{family}");
        assert!(drafted > accepted, "{family}: {after}");
        total_accepted += accepted;
        // The three identical greedy requests step together: nearly every
        // forward pass holds all three (a verify pass is one of them, not
        // a pass of its own).
        assert!(
            verifies > 0.0 && seqs >= 0.9 * 3.0 * passes,
            "{family}: {after}"
        );
    }
    // (LFM2's random fixture rejects its few drafts: the rewind is what it tests)
    assert!(total_accepted > 0.0);
}

/// The server's `--spec` default applies to requests that do not say; a
/// request turns it off with `false` (or `"off"`).
#[tokio::test]
async fn server_default_and_per_request_override() {
    let mut cfg = config();
    cfg.speculative = Some(SpecParams {
        proposer: ProposerKind::Ngram,
        n: 2,
        m: 6,
    });
    let app = router(state_for("qwen2", cfg));
    let prompt = repeating_prompt("qwen2");
    let drafted = |m: &str| metric(m, "anedvd_spec_drafted_tokens_total");
    let m0 = metrics(&app).await;
    let on = complete(&app, json!({"prompt": prompt, "max_tokens": 60})).await;
    let m1 = metrics(&app).await;
    assert!(drafted(&m1) > drafted(&m0), "{m1}");
    for off in [json!(false), json!("off"), json!({"proposer": "off"})] {
        let v = complete(
            &app,
            json!({"prompt": prompt, "max_tokens": 60, "speculative": off}),
        )
        .await;
        assert_eq!(text(&v), text(&on));
    }
    let m2 = metrics(&app).await;
    assert_eq!(drafted(&m2), drafted(&m1), "{m2}");
}

/// With a draft model (the family's Q8_0 file, same vocabulary) loaded
/// beside the model, `"speculative": "draft"` keeps the greedy text and
/// gets drafts accepted, in the chat dialect too. A draft model of another
/// vocabulary is refused when the slots start.
#[tokio::test]
async fn draft_model_requests() {
    let app = draft_app();
    let prompt = fixtures::reference("qwen2").prompt;
    let plain = complete(&app, json!({"prompt": prompt, "max_tokens": 40})).await;
    let spec = complete(
        &app,
        json!({"prompt": prompt, "max_tokens": 40, "speculative": "draft"}),
    )
    .await;
    assert_eq!(text(&spec), text(&plain));
    let accepted = spec["usage"]["completion_tokens_details"]["accepted_prediction_tokens"]
        .as_u64()
        .unwrap();
    assert!(accepted > 0, "{spec}");
    let chat = |spec: Value| {
        json!({"messages": [{"role": "user", "content": "hello there"}],
               "max_tokens": 24, "speculative": spec})
    };
    let a = post(&app, "/v1/chat/completions", &chat(json!(false))).await;
    let b = post(
        &app,
        "/v1/chat/completions",
        &chat(json!({"proposer": "draft", "m": 3})),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        a.json()["choices"][0]["message"]["content"],
        b.json()["choices"][0]["message"]["content"]
    );

    let st = AppState::new(config());
    let other = DraftModel {
        engine: Arc::new(load("llama", Format::GgufF32)),
        p_min: 0.5,
    };
    let e = st
        .set_engine(load("qwen2", Format::GgufF32), Some(other))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("needs the same vocabulary"), "{e}");
}

/// A slot's draft-model session outlives its request: each request's own
/// `m` caps its drafts (a short first request does not cap later ones).
#[tokio::test]
async fn each_request_sets_its_draft_length() {
    let app = draft_app();
    let prompt = fixtures::reference("qwen2").prompt;
    let per_pass = |before: &str, after: &str| {
        let d = |name: &str| metric(after, name) - metric(before, name);
        d("anedvd_spec_drafted_tokens_total") / d("anedvd_spec_verify_passes_total")
    };
    for m in [1u64, 6] {
        let before = metrics(&app).await;
        let body = json!({"prompt": prompt, "max_tokens": 40,
                          "speculative": {"proposer": "draft", "m": m}});
        complete(&app, body).await;
        let after = metrics(&app).await;
        let drafted = per_pass(&before, &after);
        // with no probability floor every pass drafts up to m (fewer only
        // near max_tokens)
        assert!(
            drafted <= m as f64 && drafted > (m as f64 - 1.0).max(0.5),
            "m {m}: {drafted} drafts per verify pass"
        );
    }
}

/// Bad `speculative` values are 400s naming the field, in both dialects.
#[tokio::test]
async fn bad_speculative_fields() {
    let app = app(config());
    let cases = [
        (json!({"m": 0}), "speculative", "must be in 1..=256, not 0"),
        // would overflow the n-gram lookup's arithmetic if accepted
        (json!({"n": u64::MAX}), "speculative", "must be in 1..=256"),
        (json!({"m": 100_000}), "speculative", "must be in 1..=256"),
        (json!({"n": -3}), "speculative.n", "positive integer"),
        (
            json!({"proposer": "eagle"}),
            "speculative.proposer",
            "expected",
        ),
        (json!({"k": 4}), "speculative.k", "unknown field"),
        (json!("medusa"), "speculative", "expected"),
        (json!(7), "speculative", "expected true/false"),
        (json!("draft"), "speculative", "no draft model"),
    ];
    for (spec, param, needle) in cases {
        let body = json!({"prompt": "hi", "max_tokens": 4, "speculative": spec});
        let r = post(&app, "/v1/completions", &body).await;
        assert_eq!(r.status, 400, "{spec}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["param"], param, "{spec}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(needle),
            "{spec}: {e}"
        );
        let body = json!({"model": "m", "max_tokens": 4, "speculative": spec,
                          "messages": [{"role": "user", "content": "hi"}]});
        let r = post(&app, "/v1/messages", &body).await;
        assert_eq!(r.status, 400, "{spec}: {}", r.text);
        let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(needle), "{spec}: {message}");
    }
}
