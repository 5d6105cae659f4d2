//! The anedvd HTTP server: OpenAI-compatible (`/v1/chat/completions`,
//! `/v1/completions`, `/v1/responses`, `/v1/embeddings`, `/v1/models`), Anthropic-compatible
//! (`/v1/messages`) and llama-server's native (`/completion`, `/props`,
//! `/slots`) endpoints, `/health`, Prometheus `/metrics`, `/tokenize`,
//! `/detokenize` and a built-in WebUI at `/`.
//!
//! It knows HTTP and the two wire dialects; it does not know models, backends
//! or how requests are batched (the engine does: `anedvd_engine::scheduler`
//! runs every slot of `--parallel` in one batched forward pass per step on its
//! own thread, never on the async runtime). A request's events come back
//! through a bounded tokio channel, the engine's `EventSink` here.
//!
//! ```no_run
//! # async fn demo(engine: anedvd_engine::Engine) -> Result<(), Box<dyn std::error::Error>> {
//! use anedvd_server::{router, AppState, ServerConfig};
//! let state = AppState::new(ServerConfig::default());
//! state.set_engine(engine, None)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, router(state)).await?;
//! # Ok(()) }
//! ```

mod anthropic;
mod embeddings;
mod error;
mod llama;
mod metrics;
mod openai;
mod request;
mod responses;
mod serve;
mod shift;
mod sse;
mod state;
mod structured;
mod template;
mod tools;

pub use anedvd_engine::scheduler::{
    Event, Finish, Gauges, Job, Scheduler, SubmitError, Summary, TokenInfo,
};
pub use anedvd_engine::scheduler::{StopMatcher, StopOutcome};
pub use error::{ApiError, ContextOverflow, Dialect, Error, ErrorKind};
pub use metrics::{KvSize, Metrics, Outcome, RequestGuard};
pub use serve::serve;
pub use shift::{reply_room, truncate_middle, Shift, HEADER as CONTEXT_SHIFT_HEADER};
pub use state::{AppState, ChannelSink, Ready, ServerConfig};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

/// Decodes a request body for `path` exactly as its handler does before a
/// model is involved: JSON, field types, unsupported fields, messages and
/// content parts, sampling and speculation against `state`'s defaults,
/// stop strings. `Ok` means the handler would go on to the model. The
/// entry point of the request-decoding fuzz target (`fuzz/`); a path
/// without a JSON body is `Ok` without looking at it.
pub fn decode_request(state: &AppState, path: &str, body: &[u8]) -> Result<(), ApiError> {
    let dialect = Dialect::of_path(path);
    let v = request::parse_json(body, dialect)?;
    match path {
        "/v1/chat/completions" | "/chat/completions" => openai::decode_chat(state, v).map(drop),
        "/v1/completions" => openai::decode_completion(state, v).map(drop),
        "/completion" | "/completions" => llama::decode_completion(state, v).map(drop),
        "/v1/responses" | "/responses" => responses::decode(state, v).map(drop),
        "/v1/embeddings" | "/embeddings" => embeddings::decode(&v).map(drop),
        "/v1/messages" => anthropic::decode_messages(state, v).map(drop),
        "/v1/messages/count_tokens" => anthropic::decode_count_tokens(v).map(drop),
        "/tokenize" => request::typed::<TokenizeRequest>(v, dialect).map(drop),
        "/detokenize" => request::typed::<DetokenizeRequest>(v, dialect).map(drop),
        _ => Ok(()),
    }
}

/// The WebUI page, embedded at build time.
const WEBUI: &str = include_str!("webui.html");

/// All routes, with authentication and CORS as configured in `state`.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        // llama-server's native routes (`/completions` is its alias of `/completion`).
        .route("/completion", post(llama::completion))
        .route("/completions", post(llama::completion))
        .route("/props", get(llama::props))
        .route("/slots", get(llama::slots))
        .route("/v1/responses", post(responses::responses))
        .route("/responses", post(responses::responses))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/embeddings", post(embeddings::embeddings))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/metrics", get(metrics_text))
        .route("/apply-template", post(template::apply_template))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    let mut app = Router::new()
        .route("/", get(webui))
        .route("/health", get(health))
        .merge(api)
        .fallback(not_found)
        .with_state(state.clone());
    let origins = &state.config().cors_origins;
    if !origins.is_empty() {
        let allow = if origins.iter().any(|o| o == "*") {
            AllowOrigin::from(Any)
        } else {
            AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
        };
        app = app.layer(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
                .allow_headers(Any),
        );
    }
    app
}

/// Checks `Authorization: Bearer <key>` or `x-api-key: <key>` when keys are set.
async fn auth(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let keys = &state.config().api_keys;
    if keys.is_empty() || key_ok(req.headers(), keys) {
        return next.run(req).await;
    }
    let dialect = Dialect::of_path(req.uri().path());
    let present = req.headers().contains_key(header::AUTHORIZATION)
        || req.headers().contains_key("x-api-key");
    let msg = if present {
        "invalid API key"
    } else {
        "missing API key (send `Authorization: Bearer <key>` or `x-api-key: <key>`)"
    };
    ApiError::new(dialect, ErrorKind::Authentication, msg).into_response()
}

fn key_ok(headers: &HeaderMap, keys: &[String]) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let xkey = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    [bearer, xkey].into_iter().flatten().any(|k| {
        keys.iter()
            .any(|good| constant_time_eq(good.as_bytes(), k.as_bytes()))
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(req: Request) -> Response {
    let path = req.uri().path().to_owned();
    ApiError::new(
        Dialect::of_path(&path),
        ErrorKind::NotFound,
        format!("no route for {} {path}", req.method()),
    )
    .into_response()
}

async fn webui() -> Html<&'static str> {
    Html(WEBUI)
}

async fn health(State(state): State<AppState>) -> Response {
    match state.status() {
        Ok(Some(_)) => Json(json!({"status": "ok"})).into_response(),
        Ok(None) => {
            ApiError::new(Dialect::OpenAi, ErrorKind::Loading, "Loading model").into_response()
        }
        Err(m) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"status": "error", "error": {"message": m, "type": "server_error"}})),
        )
            .into_response(),
    }
}

async fn models(State(state): State<AppState>) -> Response {
    let c = state.config();
    let meta = match state.status() {
        Ok(Some(r)) => json!({
            "n_ctx": r.max_seq,
            "n_ctx_train": r.engine.n_ctx_train(),
            "n_vocab": r.engine.vocab_size(),
            "size": r.engine.weight_bytes(),
            "parallel": c.parallel,
        }),
        _ => json!({"n_ctx": c.max_seq, "parallel": c.parallel, "loading": true}),
    };
    Json(json!({
        "object": "list",
        "data": [{
            "id": c.model_id,
            "object": "model",
            "created": state.created(),
            "owned_by": "anedvd",
            "meta": meta,
        }],
    }))
    .into_response()
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    let mut g = state.gauges();
    let ready = state.status().ok().flatten();
    g.ready = ready.is_some();
    let kv = ready.map_or_else(KvSize::default, |r| KvSize {
        per_position: r.engine.kv_bytes_per_position(),
        capacity_positions: r.max_seq * state.config().parallel,
    });
    // llama-server's header: when this server started, for rate queries.
    let started = state.created().to_string();
    (
        [
            (
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8".to_owned(),
            ),
            (
                header::HeaderName::from_static("process-start-time-unix"),
                started,
            ),
        ],
        state.metrics().render(g, kv),
    )
        .into_response()
}

#[derive(Deserialize)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: Option<bool>,
    #[serde(default)]
    parse_special: Option<bool>,
    #[serde(default)]
    with_pieces: Option<bool>,
}

async fn tokenize(State(state): State<AppState>, body: Body) -> Response {
    let guard = state.begin("tokenize");
    let d = Dialect::OpenAi;
    let run = async {
        let v = request::read_json(body, state.config().max_body_bytes, d).await?;
        let req: TokenizeRequest = request::typed(v, d)?;
        let ready = state.ready(d)?;
        let tok = &ready.engine.tokenizer;
        let ids = tok
            .encode(
                &req.content,
                req.add_special.unwrap_or(false),
                req.parse_special.unwrap_or(true),
            )
            .map_err(|e| ApiError::new(d, ErrorKind::InvalidRequest, e.to_string()))?;
        let tokens: Vec<serde_json::Value> = if req.with_pieces.unwrap_or(false) {
            ids.iter()
                .map(|&id| {
                    let bytes = tok.piece_bytes(id).unwrap_or_default();
                    let piece = match std::str::from_utf8(bytes) {
                        Ok(s) => json!(s),
                        Err(_) => json!(bytes),
                    };
                    json!({"id": id, "piece": piece})
                })
                .collect()
        } else {
            ids.iter().map(|&id| json!(id)).collect()
        };
        Ok::<_, ApiError>(Json(json!({"tokens": tokens})).into_response())
    };
    guard.respond(run.await)
}

#[derive(Deserialize)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

async fn detokenize(State(state): State<AppState>, body: Body) -> Response {
    let guard = state.begin("detokenize");
    let d = Dialect::OpenAi;
    let run = async {
        let v = request::read_json(body, state.config().max_body_bytes, d).await?;
        let req: DetokenizeRequest = request::typed(v, d)?;
        let ready = state.ready(d)?;
        let tok = &ready.engine.tokenizer;
        let vocab = tok.vocab_size();
        if let Some(bad) = req.tokens.iter().find(|&&i| i as usize >= vocab) {
            return Err(ApiError::invalid(
                d,
                "tokens",
                format!("token id {bad} is out of the vocabulary ({vocab})"),
            ));
        }
        let text = tok
            .decode(&req.tokens, false)
            .map_err(|e| ApiError::new(d, ErrorKind::InvalidRequest, e.to_string()))?;
        Ok(Json(json!({"content": text})).into_response())
    };
    guard.respond(run.await)
}
