//! Anthropic-compatible `POST /v1/messages` (streaming with named events, and not).

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::metrics::RequestGuard;
use crate::openai::flatten_content;
use crate::request::{
    collect, generate_params, handle, is_set, new_id, read_json, typed, Deadline, Sampling,
};
use crate::shift::{fit_chat, mark};
use crate::sse::{json_event, sse_response, Transcoder};
use crate::state::AppState;
use crate::structured::Shaping;
use crate::template::{chat_prompt, render_options};
use crate::tools::{call_id, ToolUse};
use anedvd_engine::scheduler::{Finish, Summary, TokenInfo};
use anedvd_engine::tool_format::{ParsedCall, StreamItem, ToolStream};
use anedvd_engine::{
    Content, ContentPart, FunctionCall, GenerateParams, Message, RenderOptions, ToolCall,
};
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
    for key in ["mcp_servers", "container"] {
        if is_set(v, key) {
            return Err(ApiError::unsupported(D, key));
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
        out.extend(split_tool_blocks(i, m)?);
    }
    if req.messages.is_empty() {
        // Anthropic's API refuses an empty conversation (llama-server
        // accepts one; most templates index messages[0] and fail anyway).
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

/// One Anthropic message as chat messages: `tool_use` blocks of an
/// assistant turn become its tool calls, each `tool_result` block of a user
/// turn a `tool` message (before the user's own text, as the results answer
/// the previous turn); other blocks stay for `flatten_content` to check.
fn split_tool_blocks(i: usize, m: &InMessage) -> Result<Vec<Message>, ApiError> {
    let Content::Parts(parts) = &m.content else {
        let mut msg = Message::new(m.role.clone(), String::new());
        msg.content = Some(m.content.clone());
        return Ok(vec![msg]);
    };
    let mut out = Vec::new();
    let mut rest = Vec::new();
    let mut calls = Vec::new();
    for (j, p) in parts.iter().enumerate() {
        let field = |name: &str| format!("messages[{i}].content[{j}].{name}");
        let text_of = |key: &str| p.extra.get(key).and_then(Value::as_str).map(str::to_owned);
        match p.kind.as_str() {
            "tool_use" if m.role == "assistant" => {
                let name = text_of("name").ok_or_else(|| {
                    ApiError::invalid(D, &field("name"), "a tool_use block needs a `name`")
                })?;
                let arguments = p.extra.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(ToolCall {
                    id: text_of("id"),
                    kind: Some("function".into()),
                    function: FunctionCall { name, arguments },
                    extra: Default::default(),
                });
            }
            "tool_result" if m.role == "user" => {
                let id = text_of("tool_use_id").ok_or_else(|| {
                    ApiError::invalid(
                        D,
                        &field("tool_use_id"),
                        "a tool_result block needs a `tool_use_id`",
                    )
                })?;
                let text = match p.extra.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(blocks)) => blocks
                        .iter()
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(""),
                    Some(other) => other.to_string(),
                };
                out.push(Message::tool(id, text));
            }
            _ => rest.push(p.clone()),
        }
    }
    if !rest.is_empty() || !calls.is_empty() {
        let mut msg = Message::new(m.role.clone(), String::new());
        msg.content = Some(Content::Parts(rest));
        if !calls.is_empty() {
            msg.tool_calls = Some(calls);
        }
        out.push(msg);
    }
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
    shaping: Shaping,
    tools: Option<ToolUse>,
    stop: Vec<String>,
    render: RenderOptions,
}

/// Anthropic's render rule: a final assistant message is a prefill the
/// reply continues; otherwise a new assistant turn is opened.
fn prefill_options(state: &AppState, messages: &[Message]) -> Result<RenderOptions, ApiError> {
    render_options(&Value::Null, messages, state.config().thinking, D)
}

/// Decodes a Messages body (every check that needs no model).
pub(crate) fn decode_messages(state: &AppState, v: Value) -> Result<DecodedMessages, ApiError> {
    reject_unsupported(&v)?;
    let shaping = Shaping::decode(&v, D)?;
    let tools = ToolUse::decode_anthropic(&v, D)?;
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
    let render = prefill_options(state, &messages)?;
    let params = generate_params(state, &sampling, Some(max_tokens), 0, D)?;
    let stop = req.stop_sequences.clone().unwrap_or_default();
    Ok(DecodedMessages {
        req,
        messages,
        params,
        shaping,
        tools,
        stop,
        render,
    })
}

/// `POST /v1/messages`.
pub async fn messages(State(state): State<AppState>, body: Body) -> Response {
    handle(state, "messages", D, body, |s, b, g, d| {
        Box::pin(inner(s, b, g, d))
    })
    .await
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
        mut messages,
        mut params,
        shaping,
        tools,
        stop,
        render,
    } = decode_messages(&state, v)?;
    let ready = state.ready(D)?;
    shaping.apply(&ready.engine, &mut params, D).await?;
    let format = match &tools {
        Some(t) => Some(t.constrain(&ready.engine, &mut params, D).await?),
        None => None,
    };
    let engine = &ready.engine;
    let (prompt, shift) = fit_chat(
        &state,
        "messages",
        ready.max_seq,
        params.max_tokens,
        &mut messages,
        |m| match &tools {
            Some(t) => t.prompt(engine, m, &render, D),
            None => chat_prompt(engine, m, &render, D),
        },
    )?;
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
        let stream = MessagesStream {
            tools: format.map(|f| f.stream()),
            block: 0,
            text_open: true,
            calls: 0,
        };
        return Ok(mark(
            sse_response(first, generation, stream, guard.hand_off()),
            shift,
        ));
    }
    let (out, s) = collect(generation, D).await?;
    let (text, calls) = match format {
        Some(f) => {
            let parsed = f.parse(&out.text);
            (parsed.content, parsed.calls)
        }
        None => (out.text, Vec::new()),
    };
    let mut content = Vec::new();
    if !text.is_empty() || calls.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    content.extend(calls.iter().map(tool_use_block));
    let reason = if calls.is_empty() {
        stop_reason(s.finish)
    } else {
        "tool_use"
    };
    let reply = Json(json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": s.stop_sequence,
        "usage": usage(s.prompt_tokens, s.cached_tokens, s.completion_tokens),
    }));
    Ok(mark(reply.into_response(), shift))
}

/// A `tool_use` content block.
fn tool_use_block(call: &ParsedCall) -> Value {
    json!({"type": "tool_use", "id": call_id("toolu_"), "name": call.name, "input": call.arguments})
}

/// The Messages stream: text blocks, and with tools a `tool_use` block per
/// call (its input sent whole as one `input_json_delta`).
struct MessagesStream {
    tools: Option<ToolStream>,
    /// Index of the current (or last) content block.
    block: usize,
    /// Whether that block is an open text block.
    text_open: bool,
    calls: usize,
}

fn event(name: &str, data: Value) -> SseEvent {
    json_event(Some(name), &data)
}

impl MessagesStream {
    fn close_text(&mut self, evs: &mut Vec<SseEvent>) {
        if self.text_open {
            evs.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.block}),
            ));
            self.text_open = false;
        }
    }

    fn items(&mut self, items: Vec<StreamItem>) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        for item in items {
            match item {
                StreamItem::Content(text) => {
                    if !self.text_open {
                        self.block += 1;
                        self.text_open = true;
                        evs.push(event(
                            "content_block_start",
                            json!({"type": "content_block_start", "index": self.block,
                                "content_block": {"type": "text", "text": ""}}),
                        ));
                    }
                    evs.push(event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": self.block,
                            "delta": {"type": "text_delta", "text": text}}),
                    ));
                }
                StreamItem::Call(call) => {
                    self.close_text(&mut evs);
                    self.block += 1;
                    self.calls += 1;
                    let mut start = tool_use_block(&call);
                    start["input"] = json!({});
                    evs.push(event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": self.block,
                            "content_block": start}),
                    ));
                    evs.push(event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": self.block,
                            "delta": {"type": "input_json_delta",
                                "partial_json": call.arguments.to_string()}}),
                    ));
                    evs.push(event(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": self.block}),
                    ));
                }
            }
        }
        evs
    }
}

impl Transcoder for MessagesStream {
    fn delta(&mut self, text: &str, _tokens: &[TokenInfo]) -> Vec<SseEvent> {
        let items = match self.tools.as_mut() {
            Some(t) => t.push(text),
            None => vec![StreamItem::Content(text.to_owned())],
        };
        self.items(items)
    }

    fn done(&mut self, s: &Summary) -> Vec<SseEvent> {
        let mut evs = match self.tools.take() {
            Some(t) => self.items(t.finish()),
            None => Vec::new(),
        };
        self.close_text(&mut evs);
        let reason = if self.calls > 0 {
            "tool_use"
        } else {
            stop_reason(s.finish)
        };
        evs.push(event(
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": s.stop_sequence},
                "usage": {"output_tokens": s.completion_tokens},
            }),
        ));
        evs.push(event("message_stop", json!({"type": "message_stop"})));
        evs
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
        let render = prefill_options(&state, &messages)?;
        let ready = state.ready(D)?;
        let prompt = chat_prompt(&ready.engine, &messages, &render, D)?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": prompt.len()})).into_response())
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}
