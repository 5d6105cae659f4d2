//! A batch thread that dies (a panic outside the per-sequence guards,
//! injected at the `batch-loop` fail point) is reported, not hung on. In a
//! binary of its own: every idle batch thread of the process evaluates that
//! point, so another test's scheduler could take the panic.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_batch_thread_is_reported_not_hung_on() {
    let scenario = fail::FailScenario::setup();
    let app = app(config());
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": expected()["prompt_ids"], "max_tokens": 4}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    fail::cfg("batch-loop", "1*panic(injected)").unwrap();
    // The loop panics at its next iteration (it wakes at least every 100 ms).
    let start = std::time::Instant::now();
    let health = loop {
        let h = send(&app, "GET", "/health", &[], "").await;
        if h.status != 200 || start.elapsed().as_secs() > 10 {
            break h;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    fail::remove("batch-loop");
    assert_eq!(health.status, 500, "{}", health.text);
    assert!(
        health.text.contains("batch thread stopped"),
        "{}",
        health.text
    );
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": expected()["prompt_ids"], "max_tokens": 4}),
    )
    .await;
    assert_eq!(r.status, 500, "{}", r.text);
    assert!(r.text.contains("batch thread stopped"), "{}", r.text);
    scenario.teardown();
}
