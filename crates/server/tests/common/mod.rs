//! Shared helpers for the in-process router tests.
#![allow(dead_code, clippy::unwrap_used)]

use anedvd_engine::{Engine, LoadOptions, SamplingParams};
use anedvd_server::{router, AppState, ServerConfig};
use anedvd_testkit::fixtures::{self, Format};
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use std::path::PathBuf;
use tower::ServiceExt;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// tests/server/expected.json (HF references, see tests/server/gen_expected.py).
pub fn expected() -> Value {
    let text = std::fs::read_to_string(repo().join("tests/server/expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn config() -> ServerConfig {
    ServerConfig {
        model_id: "qwen2-tiny".into(),
        sampling: SamplingParams::greedy(),
        fixed_seed: true,
        max_seq: 256,
        ..ServerConfig::default()
    }
}

/// A ready state with the tiny qwen2 fixture.
pub fn state(config: ServerConfig) -> AppState {
    state_for("qwen2", config)
}

/// A ready state with the tiny fixture of `family`.
pub fn state_for(family: &str, config: ServerConfig) -> AppState {
    let st = AppState::new(config);
    st.set_engine(load(family, Format::GgufF32), None).unwrap();
    st
}

/// The tiny fixture of `family` in `format`, on one CPU thread.
pub fn load(family: &str, format: Format) -> Engine {
    load_on(family, format, anedvd_engine::BackendChoice::Cpu)
}

/// The tiny fixture of `family` in `format` on `backend` (one CPU thread).
pub fn load_on(family: &str, format: Format, backend: anedvd_engine::BackendChoice) -> Engine {
    let options = LoadOptions {
        backend,
        backend_options: anedvd_engine::BackendOptions::with_threads(1),
        overrides: fixtures::overrides(family, format),
        ..LoadOptions::default()
    };
    Engine::load(fixtures::path(family, format), &options, |_| {}).unwrap()
}

pub fn app(config: ServerConfig) -> Router {
    router(state(config))
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }
}

pub async fn send(
    app: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let mut b = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if !body.is_empty() {
        b = b.header("content-type", "application/json");
    }
    let resp = app
        .clone()
        .oneshot(b.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        text: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// The value of the Prometheus sample `name` in a /metrics text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} missing"))
        .parse()
        .unwrap()
}

pub async fn post(app: &Router, path: &str, body: &Value) -> Reply {
    send(app, "POST", path, &[], &body.to_string()).await
}

/// One SSE event: its name (if any) and data.
#[derive(Debug, Clone)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
}

/// Parses an SSE transcript (comments skipped).
pub fn parse_sse(text: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let mut ev = Sse {
            event: None,
            data: String::new(),
        };
        let mut any = false;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                ev.event = Some(v.trim_start().to_owned());
                any = true;
            } else if let Some(v) = line.strip_prefix("data:") {
                if !ev.data.is_empty() {
                    ev.data.push('\n');
                }
                ev.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                any = true;
            }
        }
        if any {
            out.push(ev);
        }
    }
    out
}

/// Starts a streaming completion of `prompt` (200 tokens) and returns its
/// body unread.
pub async fn open_stream(app: &Router, prompt: &Value) -> Body {
    let body = serde_json::json!({"prompt": prompt, "max_tokens": 200, "stream": true}).to_string();
    let req = Request::post("/v1/completions")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body()
}

/// The tiny qwen2 fixture with a 2048-position context (its trained 256 is
/// too short for a rendered tool listing: ~1 token per byte).
pub fn wide_app() -> Router {
    wide_app_with(None, config())
}

/// The qwen2 fixture with a 2048-position context (`cfg.max_seq` is set so)
/// and `chat_template` in place of its own.
pub fn wide_app_with(
    chat_template: Option<anedvd_engine::TemplateOverride>,
    mut cfg: ServerConfig,
) -> Router {
    let mut overrides = fixtures::overrides("qwen2", Format::GgufF32);
    overrides.n_ctx_train = Some(2048);
    let options = LoadOptions {
        backend_options: anedvd_engine::BackendOptions::with_threads(1),
        overrides,
        chat_template,
        ..LoadOptions::default()
    };
    let engine = Engine::load(fixtures::path("qwen2", Format::GgufF32), &options, |_| {}).unwrap();
    cfg.max_seq = 2048;
    let st = AppState::new(cfg);
    st.set_engine(engine, None).unwrap();
    router(st)
}
