//! Panics injected on the batch thread (the engine's `failpoints` feature):
//! a panic while serving one request fails that request, not the server or
//! the other sequences of its batch. Fail points are process-wide, so every
//! test here holds a `FailScenario` (which serialises them).
#![allow(clippy::unwrap_used)]

mod common;
use axum::Router;
use common::*;
use serde_json::{json, Value};

const COMPLETIONS: &str = "/v1/completions";

fn request(max_tokens: usize) -> Value {
    json!({"prompt": expected()["prompt_ids"], "max_tokens": max_tokens})
}

/// The text the request gives with no fault.
async fn reference(app: &Router, max_tokens: usize) -> String {
    let r = post(app, COMPLETIONS, &request(max_tokens)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["choices"][0]["text"].as_str().unwrap().to_owned()
}

/// Sends `n` identical requests at once; returns the replies.
async fn concurrent(app: &Router, n: usize, max_tokens: usize) -> Vec<Reply> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { post(&app, COMPLETIONS, &request(max_tokens)).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

async fn metrics(app: &Router) -> String {
    send(app, "GET", "/metrics", &[], "").await.text
}

/// Asserts the server is idle and healthy, and answers `want` again.
async fn still_serving(app: &Router, want: &str, max_tokens: usize) {
    assert_eq!(reference(app, max_tokens).await, want);
    let m = metrics(app).await;
    assert_eq!(metric(&m, "anedvd_slots_busy"), 0.0, "{m}");
    assert_eq!(send(app, "GET", "/health", &[], "").await.status, 200);
}

fn is_internal_error(r: &Reply) -> bool {
    r.status == 500
        && r.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("internal error") && m.contains("injected"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_sampling_fails_only_that_request() {
    let scenario = fail::FailScenario::setup();
    let mut cfg = config();
    cfg.parallel = 3;
    let app = app(cfg);
    let want = reference(&app, 24).await;
    fail::cfg("batch-sample", "1*panic(injected)").unwrap();
    let replies = concurrent(&app, 3, 24).await;
    fail::remove("batch-sample");
    let failed = replies.iter().filter(|r| is_internal_error(r)).count();
    assert_eq!(
        failed,
        1,
        "{:?}",
        replies.iter().map(|r| &r.text).collect::<Vec<_>>()
    );
    for r in replies.iter().filter(|r| r.status == 200) {
        assert_eq!(r.json()["choices"][0]["text"], want.as_str());
    }
    assert_eq!(metric(&metrics(&app).await, "anedvd_panics_total"), 1.0);
    still_serving(&app, &want, 24).await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_shared_pass_is_retried_alone_and_nothing_is_lost() {
    let scenario = fail::FailScenario::setup();
    let mut cfg = config();
    cfg.parallel = 3;
    let app = app(cfg);
    let want = reference(&app, 48).await;
    // Panics once, in the first pass that holds more than one sequence.
    fail::cfg("batch-forward-shared", "1*panic").unwrap();
    let replies = concurrent(&app, 3, 48).await;
    fail::remove("batch-forward-shared");
    for r in &replies {
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json()["choices"][0]["text"], want.as_str());
    }
    assert_eq!(metric(&metrics(&app).await, "anedvd_panics_total"), 1.0);
    still_serving(&app, &want, 48).await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_own_pass_panics_fails_and_the_next_is_served() {
    let scenario = fail::FailScenario::setup();
    let app = app(config());
    let want = reference(&app, 8).await;
    fail::cfg("batch-forward", "1*panic(injected)").unwrap();
    let r = post(&app, COMPLETIONS, &request(8)).await;
    fail::remove("batch-forward");
    assert!(is_internal_error(&r), "{}", r.text);
    still_serving(&app, &want, 8).await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_while_admitting_fails_that_request() {
    let scenario = fail::FailScenario::setup();
    let app = app(config());
    let want = reference(&app, 8).await;
    fail::cfg("batch-admit", "1*panic(injected)").unwrap();
    let r = post(&app, COMPLETIONS, &request(8)).await;
    fail::remove("batch-admit");
    assert!(is_internal_error(&r), "{}", r.text);
    still_serving(&app, &want, 8).await;
    scenario.teardown();
}
