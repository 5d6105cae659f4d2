//! Request plumbing shared by the dialects: reading the body under a size
//! limit, typed parsing that names the bad field, sampling fields, and
//! collecting a generation for non-streamed replies.

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::metrics::RequestGuard;
use crate::state::AppState;
use anedvd_engine::scheduler::{Event, Finish, Summary, TokenInfo};
use anedvd_engine::speculative::{ProposerKind, SpecParams};
use anedvd_engine::GenerateParams;
use axum::body::Body;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc::Receiver;
use tokio::time::Instant;

/// Bytes of an over-limit body still read (and dropped) before answering 413,
/// so a client that is still sending sees the reply instead of a reset.
const DRAIN_BYTES: usize = 16 * 1024 * 1024;

/// Reads the body (413 past the limit) and parses it as a JSON object (400 otherwise).
pub async fn read_json(body: Body, limit: usize, dialect: Dialect) -> Result<Value, ApiError> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                dialect,
                ErrorKind::InvalidRequest,
                format!("reading the body: {e}"),
            )
        })?;
        total = total.saturating_add(chunk.len());
        if total <= limit {
            bytes.extend_from_slice(&chunk);
        } else if total > limit.saturating_add(DRAIN_BYTES) {
            break;
        }
    }
    if total > limit {
        return Err(ApiError::new(
            dialect,
            ErrorKind::TooLarge,
            format!("the request body is larger than {limit} bytes"),
        ));
    }
    parse_json(&bytes, dialect)
}

/// Parses a body as a JSON object (400 otherwise).
pub fn parse_json(bytes: &[u8], dialect: Dialect) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            dialect,
            ErrorKind::InvalidRequest,
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        return Err(ApiError::new(
            dialect,
            ErrorKind::InvalidRequest,
            "the body must be a JSON object",
        ));
    }
    Ok(value)
}

/// Deserializes `value` into `T`; the error names the path of the bad field.
pub fn typed<T: DeserializeOwned>(value: Value, dialect: Dialect) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let (param, message) = if path == "." {
            (String::new(), inner)
        } else {
            (path.clone(), format!("{path}: {inner}"))
        };
        let mut err = ApiError::new(dialect, ErrorKind::InvalidRequest, message);
        err.param = (!param.is_empty()).then_some(param);
        err
    })
}

/// True when `v[key]` is present and not null / `false` / empty.
pub fn is_set(v: &Value, key: &str) -> bool {
    match v.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

/// Sampling fields common to the dialects (unset fields use the server defaults).
#[derive(Debug, Default, Deserialize)]
pub struct Sampling {
    /// Temperature (0 = greedy).
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Top-k.
    pub top_k: Option<usize>,
    /// Min-p.
    pub min_p: Option<f32>,
    /// Seed.
    pub seed: Option<u64>,
    /// OpenAI presence penalty.
    pub presence_penalty: Option<f32>,
    /// OpenAI frequency penalty.
    pub frequency_penalty: Option<f32>,
    /// llama.cpp repetition penalty (`repeat_penalty` also accepted).
    #[serde(alias = "repeat_penalty")]
    pub repetition_penalty: Option<f32>,
    /// Speculative decoding for this request (an extension of both
    /// dialects; unset = the server's `--spec` default): see [`speculation`].
    pub speculative: Option<Value>,
    /// Token ids that end the generation like an end-of-generation token
    /// (vLLM's field; not part of the text).
    pub stop_token_ids: Option<Vec<u32>>,
}

/// Resolves a request's `speculative` field against the server default:
/// `false` or `"off"` (none), `true` (the server's default, else n-gram),
/// `"ngram"` or `"draft"`, or an object `{"proposer": "ngram"|"draft"|"off",
/// "n": N, "m": M}` whose unset fields come from the server's default (or,
/// for another proposer than the default's, the built-in defaults).
fn speculation(
    field: Option<&Value>,
    default: Option<SpecParams>,
    dialect: Dialect,
) -> Result<Option<SpecParams>, ApiError> {
    let bad = |param: &str, message: String| ApiError::invalid(dialect, param, message);
    let base = default.unwrap_or_default();
    let named = |param: &str, name: &Value| -> Result<Option<ProposerKind>, ApiError> {
        match name.as_str() {
            Some("ngram") => Ok(Some(ProposerKind::Ngram)),
            Some("draft") => Ok(Some(ProposerKind::Draft)),
            Some("off" | "none") => Ok(None),
            _ => Err(bad(
                param,
                format!("`{param}` is {name}: expected \"ngram\", \"draft\" or \"off\""),
            )),
        }
    };
    let with = |kind: ProposerKind| {
        if kind == base.proposer {
            base
        } else {
            SpecParams {
                proposer: kind,
                ..SpecParams::default()
            }
        }
    };
    let params = match field {
        None | Some(Value::Null) => return Ok(default),
        Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => base,
        Some(name @ Value::String(_)) => match named("speculative", name)? {
            Some(kind) => with(kind),
            None => return Ok(None),
        },
        Some(Value::Object(o)) => {
            let mut kind = base.proposer;
            let (mut n, mut m) = (None, None);
            for (key, v) in o {
                let param = format!("speculative.{key}");
                match key.as_str() {
                    "proposer" => match named(&param, v)? {
                        Some(k) => kind = k,
                        None => return Ok(None),
                    },
                    "n" | "m" => {
                        let Some(x) = v.as_u64().and_then(|x| usize::try_from(x).ok()) else {
                            return Err(bad(
                                &param,
                                format!("`{param}` is {v}: expected a positive integer"),
                            ));
                        };
                        *(if key == "n" { &mut n } else { &mut m }) = Some(x);
                    }
                    _ => {
                        return Err(bad(
                            &param,
                            format!("unknown field `{param}` (expected proposer, n or m)"),
                        ))
                    }
                }
            }
            let p = with(kind);
            SpecParams {
                n: n.unwrap_or(p.n),
                m: m.unwrap_or(p.m),
                ..p
            }
        }
        Some(other) => {
            return Err(bad(
                "speculative",
                format!(
                    "`speculative` is {other}: expected true/false, a proposer name or an object"
                ),
            ))
        }
    };
    params.validate().map_err(|m| bad("speculative", m))?;
    Ok(Some(params))
}

/// Builds generation parameters: server defaults overridden by the request.
pub fn generate_params(
    state: &AppState,
    s: &Sampling,
    max_tokens: Option<u64>,
    top_logprobs: usize,
    dialect: Dialect,
) -> Result<GenerateParams, ApiError> {
    let c = state.config();
    let mut p = c.sampling.clone();
    if !c.fixed_seed {
        p.seed = fresh_seed();
    }
    if let Some(t) = s.temperature {
        if t < 0.0 {
            return Err(ApiError::invalid(
                dialect,
                "temperature",
                "temperature must be ≥ 0",
            ));
        }
        p.temperature = t;
    }
    if let Some(v) = s.top_p {
        p.top_p = v;
    }
    if let Some(v) = s.top_k {
        p.top_k = v;
    }
    if let Some(v) = s.min_p {
        p.min_p = v;
    }
    if let Some(v) = s.seed {
        p.seed = v;
    }
    if let Some(v) = s.presence_penalty {
        p.presence_penalty = v;
    }
    if let Some(v) = s.frequency_penalty {
        p.frequency_penalty = v;
    }
    if let Some(v) = s.repetition_penalty {
        p.repeat_penalty = v;
    }
    p.validate()
        .map_err(|m| ApiError::new(dialect, ErrorKind::InvalidRequest, m))?;
    let max_tokens = match max_tokens {
        Some(0) => {
            return Err(ApiError::invalid(
                dialect,
                "max_tokens",
                "max_tokens must be ≥ 1",
            ));
        }
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => c.default_max_tokens.unwrap_or(usize::MAX),
    };
    Ok(GenerateParams {
        max_tokens,
        sampling: p,
        ignore_eos: false,
        top_logprobs,
        speculative: speculation(s.speculative.as_ref(), c.speculative, dialect)?,
        grammar: None,
        render_special: false,
        stop_tokens: s.stop_token_ids.clone().unwrap_or_default(),
        reuse_prefix: true,
    })
}

fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}

/// Stop strings: a string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StopField {
    /// One string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl StopField {
    /// As a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopField::One(s) => vec![s],
            StopField::Many(v) => v,
        }
    }
}

/// A whole generation, for non-streamed replies.
#[derive(Debug, Default)]
pub struct Collected {
    /// The text.
    pub text: String,
    /// Per-token log-probabilities (when requested).
    pub tokens: Vec<TokenInfo>,
}

/// Waits for the generation to finish (504 past the request's deadline).
pub async fn collect(
    mut generation: Generation,
    dialect: Dialect,
) -> Result<(Collected, Summary), ApiError> {
    let mut out = Collected::default();
    loop {
        match generation.recv().await {
            Received::Event(Event::Delta { text, tokens }) => {
                out.text.push_str(&text);
                out.tokens.extend(tokens);
            }
            Received::Event(Event::Done(s)) if s.finish == Finish::Cancelled => {
                return Err(ApiError::new(
                    dialect,
                    ErrorKind::Overloaded,
                    crate::sse::CANCELLED,
                ));
            }
            Received::Event(Event::Done(s)) => return Ok((out, s)),
            Received::Event(Event::Error(m)) => {
                return Err(ApiError::new(dialect, ErrorKind::Internal, m))
            }
            Received::TimedOut(m) => return Err(ApiError::new(dialect, ErrorKind::Timeout, m)),
            Received::Ended => {
                return Err(ApiError::new(
                    dialect,
                    ErrorKind::Internal,
                    "the generation ended without a result",
                ))
            }
        }
    }
}

/// When a request must be done by, with the limit it comes from.
pub type Deadline = Option<(Instant, Duration)>;

/// A queued generation's events, with the request's deadline: dropping it
/// cancels the generation.
pub struct Generation {
    rx: Receiver<Event>,
    deadline: Option<(Instant, Duration)>,
}

/// What [`Generation::recv`] got.
pub enum Received {
    /// The next event.
    Event(Event),
    /// The sender is gone without a final event.
    Ended,
    /// The deadline passed (the message says so).
    TimedOut(String),
}

impl Generation {
    /// Events from `rx`, until `deadline` (the instant and the limit it
    /// came from) if set.
    pub fn new(rx: Receiver<Event>, deadline: Option<(Instant, Duration)>) -> Self {
        Self { rx, deadline }
    }

    /// The next event, or why there is none.
    pub async fn recv(&mut self) -> Received {
        let next = match self.deadline {
            None => self.rx.recv().await,
            Some((at, limit)) => match tokio::time::timeout_at(at, self.rx.recv()).await {
                Ok(next) => next,
                Err(_) => return Received::TimedOut(timeout_message(limit)),
            },
        };
        next.map_or(Received::Ended, Received::Event)
    }
}

/// A route's work: it may hand its guard to a response stream
/// ([`RequestGuard::hand_off`]).
pub type Work<'g> = futures_util::future::BoxFuture<'g, Result<axum::response::Response, ApiError>>;

/// Serves one request to `endpoint`: counts it in /metrics, runs `work`
/// within the server's `--request-timeout` (a 504 past it) and settles the
/// count by the result.
pub async fn handle(
    state: AppState,
    endpoint: &str,
    dialect: Dialect,
    body: Body,
    work: impl for<'g> FnOnce(AppState, Body, &'g mut RequestGuard, Deadline) -> Work<'g>,
) -> axum::response::Response {
    let mut guard = state.begin(endpoint);
    let deadline = state.deadline();
    let result = within(deadline, dialect, work(state, body, &mut guard, deadline)).await;
    guard.respond(result)
}

/// Runs a handler's work until `deadline` (a 504 past it; the work, and
/// with it any generation it waits for, is dropped).
pub async fn within(
    deadline: Option<(Instant, Duration)>,
    dialect: Dialect,
    work: impl std::future::Future<Output = Result<axum::response::Response, ApiError>>,
) -> Result<axum::response::Response, ApiError> {
    match deadline {
        None => work.await,
        Some((at, limit)) => tokio::time::timeout_at(at, work).await.unwrap_or_else(|_| {
            Err(ApiError::new(
                dialect,
                ErrorKind::Timeout,
                timeout_message(limit),
            ))
        }),
    }
}

/// The error of a request that ran past `limit`.
pub fn timeout_message(limit: Duration) -> String {
    format!(
        "the request ran past the server's --request-timeout of {} s and was cancelled",
        limit.as_secs()
    )
}

/// A fresh id with a prefix (`chatcmpl-`, `msg_`, ...).
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    format!("{prefix}{t:x}{n:04x}")
}

/// Current Unix time in seconds.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
