//! Errors: the crate's typed error, and API errors rendered in each dialect's own shape.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Errors of starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine failed (opening a slot's session, ...).
    #[error(transparent)]
    Engine(#[from] anedvd_engine::Error),
    /// A bad configuration value.
    #[error("invalid server configuration: {0}")]
    Config(String),
}

/// Which API's conventions a route follows (error shapes, SSE error events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI (`/v1/chat/completions`, `/v1/completions`, and the utility routes).
    OpenAi,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
}

impl Dialect {
    /// The dialect of a request path.
    pub fn of_path(path: &str) -> Dialect {
        if path.starts_with("/v1/messages") {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    }
}

/// What went wrong, independent of dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: malformed or unsupported request.
    InvalidRequest,
    /// 400: the prompt does not fit the context (llama-server's
    /// `exceed_context_size_error`; build it with [`ApiError::context_length`]).
    ContextLength,
    /// 401: missing or wrong API key.
    Authentication,
    /// 404: no such route.
    NotFound,
    /// 413: body too large.
    TooLarge,
    /// 503: every slot is busy and the queue is full.
    Overloaded,
    /// 503: the model is still loading.
    Loading,
    /// 504: the request ran past `--request-timeout`.
    Timeout,
    /// 500: the engine failed.
    Internal,
}

impl ErrorKind {
    fn status(self) -> StatusCode {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ContextLength => StatusCode::BAD_REQUEST,
            ErrorKind::Authentication => StatusCode::UNAUTHORIZED,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Overloaded | ErrorKind::Loading => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI `type` and `code`.
    fn openai(self) -> (&'static str, Option<&'static str>) {
        match self {
            ErrorKind::InvalidRequest => ("invalid_request_error", None),
            // llama-server's type; its `code` is the HTTP status (see `body`).
            ErrorKind::ContextLength => ("exceed_context_size_error", None),
            ErrorKind::Authentication => ("authentication_error", Some("invalid_api_key")),
            ErrorKind::NotFound => ("not_found_error", None),
            ErrorKind::TooLarge => ("invalid_request_error", Some("request_too_large")),
            ErrorKind::Overloaded => ("server_overloaded", Some("queue_full")),
            ErrorKind::Loading => ("unavailable_error", Some("model_loading")),
            ErrorKind::Timeout => ("timeout_error", Some("request_timeout")),
            ErrorKind::Internal => ("server_error", None),
        }
    }

    /// Anthropic `error.type`.
    fn anthropic(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ContextLength => "invalid_request_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::TooLarge => "request_too_large",
            ErrorKind::Overloaded | ErrorKind::Loading => "overloaded_error",
            ErrorKind::Timeout => "timeout_error",
            ErrorKind::Internal => "api_error",
        }
    }
}

/// An error answered to a client, in the dialect of the route it came in on.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Human-readable message.
    pub message: String,
    /// The request field at fault (OpenAI `param`).
    pub param: Option<String>,
    /// The dialect to render in.
    pub dialect: Dialect,
    /// For [`ErrorKind::ContextLength`]: the sizes that did not fit.
    pub context: Option<ContextOverflow>,
}

/// A prompt that does not fit the context: llama-server's `n_prompt_tokens`
/// and `n_ctx` of an `exceed_context_size_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOverflow {
    /// Tokens in the prompt.
    pub n_prompt_tokens: usize,
    /// Positions of the context (one must be left to generate).
    pub n_ctx: usize,
}

/// Seconds a client should wait before retrying a 503 or 504.
pub const RETRY_AFTER_SECS: u64 = 1;

impl ApiError {
    /// A new error.
    pub fn new(dialect: Dialect, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            param: None,
            dialect,
            context: None,
        }
    }

    /// A 400 for a prompt of `n_prompt_tokens` that does not fit a context of
    /// `n_ctx` positions, worded as llama-server words it (clients parse it).
    pub fn context_length(dialect: Dialect, n_prompt_tokens: usize, n_ctx: usize) -> Self {
        let mut e = Self::new(
            dialect,
            ErrorKind::ContextLength,
            format!(
                "request ({n_prompt_tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
            ),
        );
        e.context = Some(ContextOverflow {
            n_prompt_tokens,
            n_ctx,
        });
        e
    }

    /// A 400 naming the field at fault.
    pub fn invalid(dialect: Dialect, param: &str, message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::InvalidRequest,
            message: message.into(),
            param: Some(param.to_owned()),
            dialect,
            context: None,
        }
    }

    /// A 400 for a field this server does not support.
    pub fn unsupported(dialect: Dialect, param: &str) -> Self {
        Self::invalid(
            dialect,
            param,
            format!("`{param}` is not supported by this server"),
        )
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The JSON body in the dialect's shape.
    pub fn body(&self) -> Value {
        match self.dialect {
            Dialect::OpenAi => {
                let (kind, code) = self.kind.openai();
                let mut body = json!({"error": {
                    "message": self.message,
                    "type": kind,
                    "param": self.param,
                    "code": code,
                }});
                if self.kind == ErrorKind::ContextLength {
                    // llama-server's shape: `code` is the status, with both sizes.
                    body["error"]["code"] = json!(self.status().as_u16());
                    if let Some(c) = self.context {
                        body["error"]["n_prompt_tokens"] = json!(c.n_prompt_tokens);
                        body["error"]["n_ctx"] = json!(c.n_ctx);
                    }
                }
                body
            }
            Dialect::Anthropic => json!({
                "type": "error",
                "error": {"type": self.kind.anthropic(), "message": self.message},
            }),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut resp = (status, axum::Json(self.body())).into_response();
        if matches!(
            status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
        ) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        resp
    }
}
