//! Anthropic-compatible `POST /v1/messages` (streaming with named events, and not).

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::metrics::RequestGuard;
use crate::openai::{chat_prompt, flatten_content};
use crate::request::{
    collect, generate_params, is_set, new_id, read_json, typed, within, Deadline, Sampling,
};
use crate::sse::{json_event, sse_response, Transcoder};
use crate::state::AppState;
use anedvd_engine::scheduler::{Finish, Summary, TokenInfo};
use anedvd_engine::{Content, ContentPart, GenerateParams, Message};
use axum::body::Body;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

const D: Dialect = Dialect::Anthropic;

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SystemField {
    Text(String),
    Blocks(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
struct InMessage {
    role: String,
    content: Content,
}

#[derive(Debug, Deserialize)]
struct MessagesRequest {
    #[serde(default)]
    max_tokens: Option<u64>,
    messages: Vec<InMessage>,
    #[serde(default)]
    system: Option<SystemField>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: Option<bool>,
}

fn reject_unsupported(v: &Value) -> Result<(), ApiError> {
    for key in ["tools", "mcp_servers", "container"] {
        if is_set(v, key) {
            return Err(ApiError::unsupported(D, key));
        }
    }
    if let Some(tc) = v.get("tool_choice") {
        let kind = tc.get("type").and_then(Value::as_str);
        if !(tc.is_null() || kind == Some("none") || kind == Some("auto")) {
            return Err(ApiError::unsupported(D, "tool_choice"));
        }
    }
    if let Some(th) = v.get("thinking") {
        let kind = th.get("type").and_then(Value::as_str);
        if !(th.is_null() || kind == Some("disabled")) {
            return Err(ApiError::unsupported(D, "thinking"));
        }
    }
    Ok(())
}

fn to_messages(req: &MessagesRequest) -> Result<Vec<Message>, ApiError> {
    let mut out = Vec::with_capacity(req.messages.len() + 1);
    match &req.system {
        None => {}
        Some(SystemField::Text(t)) => out.push(Message::new("system", t.clone())),
        Some(SystemField::Blocks(b)) => {
            let mut m = Message::new("system", String::new());
            m.content = Some(Content::Parts(b.clone()));
            out.push(m);
        }
    }
    for (i, m) in req.messages.iter().enumerate() {
        if m.role != "user" && m.role != "assistant" {
            return Err(ApiError::invalid(
                D,
                &format!("messages[{i}].role"),
                format!("role must be `user` or `assistant`, not `{}`", m.role),
            ));
        }
        let mut msg = Message::new(m.role.clone(), String::new());
        msg.content = Some(m.content.clone());
        out.push(msg);
    }
    if out.is_empty() {
        return Err(ApiError::invalid(
            D,
            "messages",
            "`messages` must not be empty",
        ));
    }
    flatten_content(&mut out, D).map_err(|mut e| {
        // Indices above count the system message; name the request field instead.
        if req.system.is_some() {
            if let Some(p) = &e.param {
                e.param = Some(if p.starts_with("messages[0]") {
                    p.replacen("messages[0]", "system", 1)
                } else {
                    shift_index(p)
                });
            }
            e.message = format!("{}: {}", e.param.as_deref().unwrap_or(""), e.message);
        }
        e
    })?;
    Ok(out)
}

fn shift_index(p: &str) -> String {
    let Some(rest) = p.strip_prefix("messages[") else {
        return p.to_owned();
    };
    let Some((n, tail)) = rest.split_once(']') else {
        return p.to_owned();
    };
    match n.parse::<usize>() {
        Ok(n) if n > 0 => format!("messages[{}]{tail}", n - 1),
        _ => p.to_owned(),
    }
}

fn stop_reason(f: Finish) -> &'static str {
    match f {
        Finish::Eos | Finish::Cancelled => "end_turn",
        Finish::StopSequence => "stop_sequence",
        Finish::Length => "max_tokens",
        Finish::ContextFull => "model_context_window_exceeded",
    }
}

fn usage(input: usize, cached: usize, output: usize) -> Value {
    json!({
        "input_tokens": input,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    })
}

/// A Messages request decoded and checked, before any model is involved.
pub(crate) struct DecodedMessages {
    req: MessagesRequest,
    messages: Vec<Message>,
    params: GenerateParams,
    stop: Vec<String>,
}

/// Decodes a Messages body (every check that needs no model).
pub(crate) fn decode_messages(state: &AppState, v: Value) -> Result<DecodedMessages, ApiError> {
    reject_unsupported(&v)?;
    let sampling: Sampling = typed(v.clone(), D)?;
    let req: MessagesRequest = typed(v, D)?;
    let Some(max_tokens) = req.max_tokens else {
        return Err(ApiError::invalid(
            D,
            "max_tokens",
            "max_tokens: field required",
        ));
    };
    let messages = to_messages(&req)?;
    let params = generate_params(state, &sampling, Some(max_tokens), 0, D)?;
    let stop = req.stop_sequences.clone().unwrap_or_default();
    Ok(DecodedMessages {
        req,
        messages,
        params,
        stop,
    })
}

/// `POST /v1/messages`.
pub async fn messages(State(state): State<AppState>, body: Body) -> Response {
    let mut guard = state.begin("messages");
    let deadline = state.deadline();
    let work = inner(state, body, &mut guard, deadline);
    let result = within(deadline, D, work).await;
    guard.respond(result)
}

async fn inner(
    state: AppState,
    body: Body,
    guard: &mut RequestGuard,
    deadline: Deadline,
) -> Result<Response, ApiError> {
    let v = read_json(body, state.config().max_body_bytes, D).await?;
    let DecodedMessages {
        req,
        messages,
        params,
        stop,
    } = decode_messages(&state, v)?;
    let ready = state.ready(D)?;
    let prompt = chat_prompt(&ready.engine, &messages, D)?;
    let input_tokens = prompt.len();
    let generation = state.submit(D, &ready, prompt, params, stop, deadline)?;
    let id = new_id("msg_");
    let model = state.config().model_id.clone();
    if req.stream.unwrap_or(false) {
        let start = json!({
            "type": "message_start",
            "message": {
                "id": id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": usage(input_tokens, 0, 0),
            },
        });
        let first = vec![
            json_event(Some("message_start"), &start),
            json_event(
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            json_event(Some("ping"), &json!({"type": "ping"})),
        ];
        return Ok(sse_response(
            first,
            generation,
            MessagesStream,
            guard.hand_off(),
        ));
    }
    let (out, s) = collect(generation, D).await?;
    Ok(Json(json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": out.text}],
        "stop_reason": stop_reason(s.finish),
        "stop_sequence": s.stop_sequence,
        "usage": usage(s.prompt_tokens, s.cached_tokens, s.completion_tokens),
    }))
    .into_response())
}

struct MessagesStream;

impl Transcoder for MessagesStream {
    fn delta(&mut self, text: &str, _tokens: &[TokenInfo]) -> Vec<SseEvent> {
        vec![json_event(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        )]
    }

    fn done(&mut self, s: &Summary) -> Vec<SseEvent> {
        vec![
            json_event(
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": 0}),
            ),
            json_event(
                Some("message_delta"),
                &json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason(s.finish), "stop_sequence": s.stop_sequence},
                    "usage": {"output_tokens": s.completion_tokens},
                }),
            ),
            json_event(Some("message_stop"), &json!({"type": "message_stop"})),
        ]
    }

    fn error(&mut self, message: &str) -> Vec<SseEvent> {
        let e = ApiError::new(D, ErrorKind::Internal, message);
        vec![json_event(Some("error"), &e.body())]
    }
}

/// Decodes a count_tokens body (a Messages request without `max_tokens`).
pub(crate) fn decode_count_tokens(v: Value) -> Result<Vec<Message>, ApiError> {
    reject_unsupported(&v)?;
    let req: MessagesRequest = typed(v, D)?;
    to_messages(&req)
}

/// `POST /v1/messages/count_tokens`: the prompt's token count.
pub async fn count_tokens(State(state): State<AppState>, body: Body) -> Response {
    let run = async {
        let v = read_json(body, state.config().max_body_bytes, D).await?;
        let messages = decode_count_tokens(v)?;
        let ready = state.ready(D)?;
        let prompt = chat_prompt(&ready.engine, &messages, D)?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": prompt.len()})).into_response())
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}
