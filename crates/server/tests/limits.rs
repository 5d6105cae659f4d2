//! Every resource limit, hit: connections, header size and time, request
//! time, KV budget, and the request outcome accounting. The connection
//! limits live in the accept loop, so these tests serve over loopback TCP.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use futures_util::StreamExt;
use serde_json::json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Serves `config` with the tiny qwen2 model on a free loopback port.
async fn listen(config: anedvd_server::ServerConfig) -> SocketAddr {
    let state = state(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(anedvd_server::serve(
        listener,
        state,
        std::future::pending(),
    ));
    addr
}

/// Sends raw bytes and reads until the server closes or `limit` passes.
async fn exchange(conn: &mut TcpStream, bytes: &[u8], limit: Duration) -> String {
    conn.write_all(bytes).await.unwrap();
    read_all(conn, limit).await
}

async fn read_all(conn: &mut TcpStream, limit: Duration) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_get_503_in_their_dialect() {
    let mut cfg = config();
    cfg.max_connections = 2;
    let addr = listen(cfg).await;
    // Two idle connections hold both permits (a request on each shows they
    // are being served).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(c);
    }
    let mut third = TcpStream::connect(addr).await.unwrap();
    let body = r#"{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#;
    let req = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let reply = exchange(&mut third, req.as_bytes(), Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("retry-after: 1"), "{reply}");
    let json: serde_json::Value =
        serde_json::from_str(reply.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(json["type"], "error");
    assert_eq!(json["error"]["type"], "overloaded_error");
    assert!(json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--max-connections"));
    // Closing one frees its permit.
    drop(held.pop());
    let start = Instant::now();
    loop {
        let mut c = TcpStream::connect(addr).await.unwrap();
        let reply = exchange(&mut c, &get("/health"), Duration::from_secs(5)).await;
        if reply.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{reply}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_get_431() {
    let mut cfg = config();
    cfg.max_header_bytes = 8192;
    let addr = listen(cfg).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let big = "a".repeat(20_000);
    let req = format!("GET /health HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
    let reply = exchange(&mut c, req.as_bytes(), Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
    // Headers under the limit are served.
    let mut c = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-big: {}\r\n\r\n",
        "a".repeat(4000)
    );
    let reply = exchange(&mut c, req.as_bytes(), Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_closed() {
    let mut cfg = config();
    cfg.header_timeout = Duration::from_secs(1);
    let addr = listen(cfg).await;
    // Headers trickling in past the timeout: the connection is closed.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
    let start = Instant::now();
    let reply = read_all(&mut slow, Duration::from_secs(10)).await;
    let waited = start.elapsed();
    assert!(!reply.contains("200 OK"), "{reply}");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "closed after {waited:?}"
    );
    // A keep-alive connection left idle after a request is closed too.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let reply = read_all(&mut idle, Duration::from_secs(10)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_gets_504_and_its_slot_back() {
    let mut cfg = config();
    cfg.request_timeout = Some(Duration::from_secs(1));
    cfg.queue_capacity = 4;
    let app = app(cfg);
    let exp = expected();
    // A streaming client that stops reading keeps the only slot busy...
    let mut stream = open_stream(&app, &exp["prompt_ids"])
        .await
        .into_data_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    // ...so this one waits in the queue until its deadline: 504 + Retry-After.
    let start = Instant::now();
    let r = post(
        &app,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}),
    )
    .await;
    assert_eq!(r.status, 504, "{}", r.text);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(r.json()["error"]["type"], "timeout_error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--request-timeout"));
    assert!(start.elapsed() < Duration::from_secs(5));
    // The stalled stream, read now, ends with the timeout as an error event.
    let mut rest = String::new();
    while let Some(chunk) = stream.next().await {
        rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let events = parse_sse(&rest);
    let error = &events[events.len() - 2];
    assert!(error.data.contains("--request-timeout"), "{rest}");
    assert_eq!(events.last().unwrap().data, "[DONE]");
    // Both generations are gone: the slot is free, nothing is in flight.
    let start = Instant::now();
    loop {
        let m = send(&app, "GET", "/metrics", &[], "").await.text;
        if metric(&m, "anedvd_slots_busy") == 0.0 && metric(&m, "anedvd_requests_in_flight") == 0.0
        {
            assert_eq!(
                metric(&m, "anedvd_requests_ended_total{outcome=\"errored\"}"),
                2.0,
                "{m}"
            );
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_kv_cache_over_the_budget_is_refused_at_start() {
    let engine = load("qwen2", anedvd_testkit::fixtures::Format::GgufF32);
    let per_position = engine.kv_bytes_per_position();
    assert!(per_position > 0);
    let mut cfg = config();
    cfg.parallel = 4;
    // One position short of what 4 slots x 256 positions need.
    cfg.kv_budget_bytes = Some((4 * 256 * per_position - 1) as u64);
    let st = anedvd_server::AppState::new(cfg.clone());
    let err = st.set_engine(engine, None).unwrap_err().to_string();
    assert!(
        err.contains("--kv-budget") && err.contains("--parallel"),
        "{err}"
    );
    // Exactly enough is accepted.
    cfg.kv_budget_bytes = Some((4 * 256 * per_position) as u64);
    let st = anedvd_server::AppState::new(cfg);
    let engine = load("qwen2", anedvd_testkit::fixtures::Format::GgufF32);
    st.set_engine(engine, None).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_outcomes_add_up() {
    let app = app(config());
    let exp = expected();
    let ok = post(
        &app,
        "/v1/completions",
        &json!({"prompt": exp["prompt_ids"], "max_tokens": 3}),
    )
    .await;
    assert_eq!(ok.status, 200);
    let bad = post(&app, "/v1/completions", &json!({"prompt": 5})).await;
    assert_eq!(bad.status, 400);
    // A client that leaves mid-stream.
    let mut stream = open_stream(&app, &exp["prompt_ids"])
        .await
        .into_data_stream();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    let m = send(&app, "GET", "/metrics", &[], "").await.text;
    let ended = |o: &str| {
        metric(
            &m,
            &format!("anedvd_requests_ended_total{{outcome=\"{o}\"}}"),
        )
    };
    assert_eq!(ended("completed"), 1.0, "{m}");
    assert_eq!(ended("errored"), 1.0, "{m}");
    assert_eq!(ended("cancelled"), 1.0, "{m}");
    assert_eq!(metric(&m, "anedvd_requests_in_flight"), 0.0, "{m}");
    assert_eq!(
        metric(&m, "anedvd_requests_total{endpoint=\"completions\"}"),
        3.0
    );
}
