//! Slots, queue, cancellation and prefix routing through the router.
#![allow(clippy::unwrap_used)]

mod common;
use axum::Router;
use common::*;
use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

/// Polls /metrics until `pred` holds (or fails after 10 s).
async fn wait_metrics(app: &Router, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let m = send(app, "GET", "/metrics", &[], "").await.text;
        if pred(&m) {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn queue_full_then_disconnect_frees_the_slot() {
    let exp = expected();
    let mut cfg = config();
    cfg.queue_capacity = 0;
    let app = app(cfg);
    // A client that reads one chunk and then stops reading keeps its slot busy
    // (the slot waits once its event buffer is full)...
    let mut stream = open_stream(&app, &exp["prompt_ids"])
        .await
        .into_data_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    wait_metrics(&app, "busy slot", |m| metric(m, "anedvd_slots_busy") == 1.0).await;
    // ...so the next request finds no slot and no queue room: 503 + Retry-After.
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(r.json()["error"]["code"], "queue_full");
    // Disconnecting cancels the generation and frees the slot.
    drop(stream);
    let m = wait_metrics(&app, "cancellation", |m| {
        metric(m, "anedvd_requests_cancelled_total") == 1.0 && metric(m, "anedvd_slots_busy") == 0.0
    })
    .await;
    assert!(metric(&m, "anedvd_tokens_generated_total") < 200.0, "{m}");
    assert_eq!(metric(&m, "anedvd_requests_rejected_total"), 1.0);
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": exp["prompt_ids"], "max_tokens": 3}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn parallel_slots_and_fifo_queue() {
    let exp = expected();
    let mut cfg = config();
    cfg.parallel = 2;
    cfg.queue_capacity = 1;
    let app = app(cfg);
    let mut a = open_stream(&app, &exp["prompt_ids"])
        .await
        .into_data_stream();
    let mut b = open_stream(&app, &json!([5, 6, 7, 8]))
        .await
        .into_data_stream();
    a.next().await.unwrap().unwrap();
    b.next().await.unwrap().unwrap();
    wait_metrics(&app, "two busy slots", |m| {
        metric(m, "anedvd_slots_busy") == 2.0
    })
    .await;
    // A third request waits in the queue.
    let app2 = app.clone();
    let prompt = exp["prompt_ids"].clone();
    let queued = tokio::spawn(async move {
        post(
            &app2,
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": 16}),
        )
        .await
    });
    wait_metrics(&app, "queued request", |m| {
        metric(m, "anedvd_queue_depth") == 1.0
    })
    .await;
    // A fourth is refused.
    let r = post(
        &app,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.status, 503);
    drop(a);
    let r = queued.await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["choices"][0]["text"], exp["greedy_text"]);
    drop(b);
    wait_metrics(&app, "idle", |m| metric(m, "anedvd_slots_busy") == 0.0).await;
}

#[tokio::test]
async fn requests_go_to_the_slot_with_the_longest_cached_prefix() {
    let mut cfg = config();
    cfg.parallel = 2;
    let app = app(cfg);
    let p1: Vec<u32> = (0..20).map(|i| 40 + i).collect();
    let p2: Vec<u32> = (0..20).map(|i| 100 + i).collect();
    for p in [&p1, &p2] {
        let r = post(
            &app,
            "/v1/completions",
            &json!({"prompt": p, "max_tokens": 2}),
        )
        .await;
        assert_eq!(
            r.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
            0
        );
    }
    // Each extension must land on the slot holding its prefix.
    for round in 0..2 {
        for p in [&p1, &p2] {
            let mut ext = p.clone();
            ext.extend([7 + round, 8, 9]);
            let v = post(
                &app,
                "/v1/completions",
                &json!({"prompt": ext, "max_tokens": 2}),
            )
            .await
            .json();
            assert_eq!(
                v["usage"]["prompt_tokens_details"]["cached_tokens"], 20,
                "{v}"
            );
        }
    }
}

#[tokio::test]
async fn shutdown_cancel_ends_streams_with_an_error_event() {
    let exp = expected();
    let st = state(config());
    let app = anedvd_server::router(st.clone());
    let body = open_stream(&app, &exp["prompt_ids"]).await;
    let mut stream = body.into_data_stream();
    stream.next().await.unwrap().unwrap();
    st.cancel_all();
    let mut rest = String::new();
    while let Some(chunk) = stream.next().await {
        rest.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let events = parse_sse(&rest);
    let last = events.last().unwrap();
    assert_eq!(last.data, "[DONE]");
    let err: serde_json::Value = serde_json::from_str(&events[events.len() - 2].data).unwrap();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{err}"
    );
    // New requests are refused while shutting down.
    let r = post(
        &app,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status, 503);
}

#[tokio::test]
async fn prefix_reuse_gives_the_same_text_as_a_fresh_slot_with_sliding_window() {
    // gemma3's fixture has sliding-window layers (window 8): reusing a cached
    // prefix longer than the window must not change the continuation.
    let reused = anedvd_server::router(state_for("gemma3", config()));
    let fresh = anedvd_server::router(state_for("gemma3", config()));
    let base: Vec<u32> = (0..30).map(|i| 10 + (i * 7) % 200).collect();
    let mut ext = base.clone();
    ext.extend([50, 60, 70, 80]);
    let warm = post(
        &reused,
        "/v1/completions",
        &json!({"prompt": base, "max_tokens": 4}),
    )
    .await;
    assert_eq!(warm.status, 200, "{}", warm.text);
    let a = post(
        &reused,
        "/v1/completions",
        &json!({"prompt": ext, "max_tokens": 12}),
    )
    .await
    .json();
    assert_eq!(a["usage"]["prompt_tokens_details"]["cached_tokens"], 30);
    let b = post(
        &fresh,
        "/v1/completions",
        &json!({"prompt": ext, "max_tokens": 12}),
    )
    .await
    .json();
    assert_eq!(b["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(b["usage"]["completion_tokens"], 12);
    assert!(!b["choices"][0]["text"].as_str().unwrap().is_empty());
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
}

#[tokio::test]
async fn concurrent_requests_share_forward_passes_and_match_a_lone_run() {
    let exp = expected();
    let mut cfg = config();
    cfg.parallel = 4;
    let app = app(cfg);
    // Long enough that requests started together overlap for most steps.
    let body = json!({"prompt": exp["prompt_ids"], "max_tokens": 128});
    let lone = post(&app, "/v1/completions", &body).await.json();
    let text = lone["choices"][0]["text"].as_str().unwrap().to_string();
    let greedy = exp["greedy_text"].as_str().unwrap();
    assert!(text.starts_with(greedy), "{text:?} vs {greedy:?}");
    let before = send(&app, "GET", "/metrics", &[], "").await.text;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let (app, body) = (app.clone(), body.clone());
            tokio::spawn(async move { post(&app, "/v1/completions", &body).await })
        })
        .collect();
    let mut steps = 0.0;
    for r in runs {
        let v = r.await.unwrap().json();
        // Greedy text is the same whether a sequence ran alone or batched.
        assert_eq!(v["choices"][0]["text"], text.as_str(), "{v}");
        steps += v["usage"]["completion_tokens"].as_f64().unwrap();
    }
    let after = send(&app, "GET", "/metrics", &[], "").await.text;
    let delta = |name: &str| metric(&after, name) - metric(&before, name);
    let (passes, seqs) = (
        delta("anedvd_batch_passes_total"),
        delta("anedvd_batch_sequences_total"),
    );
    // One sequence-step per generated token; run one after another they
    // would need as many passes.
    assert_eq!(seqs, steps, "{after}");
    assert!(
        passes <= 0.6 * seqs,
        "{passes} passes for {seqs} sequence-steps: requests were not batched"
    );
}

#[tokio::test]
async fn the_prefix_cache_serves_a_prefix_the_slot_no_longer_holds() {
    // One slot: the third prompt's prefix is gone from it (the second
    // prompt replaced it), but its whole blocks are in the prefix cache.
    let mut cfg = config();
    cfg.parallel = 1;
    let cached = anedvd_server::router(state(cfg.clone()));
    cfg.cache_ram_bytes = 0;
    let uncached = anedvd_server::router(state(cfg));
    let shared: Vec<u32> = (0..150).map(|i| 10 + (i * 13) % 230).collect();
    let other: Vec<u32> = (0..150).map(|i| 11 + (i * 7) % 230).collect();
    let first = [shared.clone(), vec![1, 2, 3]].concat();
    let third = [shared.clone(), vec![4, 5, 6]].concat();
    let mut texts = Vec::new();
    for (app, want) in [(&cached, 128), (&uncached, 0)] {
        for p in [&first, &other] {
            let r = post(
                app,
                "/v1/completions",
                &json!({"prompt": p, "max_tokens": 2}),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
        let v = post(
            app,
            "/v1/completions",
            &json!({"prompt": third, "max_tokens": 8}),
        )
        .await
        .json();
        assert_eq!(
            v["usage"]["prompt_tokens_details"]["cached_tokens"], want,
            "{v}"
        );
        texts.push(v["choices"][0]["text"].clone());
    }
    assert_eq!(texts[0], texts[1]);
    let m = send(&cached, "GET", "/metrics", &[], "").await.text;
    assert_eq!(metric(&m, "anedvd_prefix_cache_lookups_total"), 3.0);
    assert_eq!(metric(&m, "anedvd_prefix_cache_hits_total"), 1.0);
    assert_eq!(metric(&m, "anedvd_prefix_cache_hit_tokens_total"), 128.0);
    assert!(metric(&m, "anedvd_prefix_cache_bytes") > 0.0);
    let m = send(&uncached, "GET", "/metrics", &[], "").await.text;
    assert_eq!(metric(&m, "anedvd_prefix_cache_budget_bytes"), 0.0);
    assert_eq!(metric(&m, "anedvd_prefix_cache_hits_total"), 0.0);
}
