//! OpenAI's Responses API (`POST /v1/responses`): text, function tools,
//! structured output (`text.format`) and its streaming events. A request is
//! translated to the chat-completions form and runs through the same path
//! (template, tools, grammar, scheduler); only the shapes differ. The server
//! keeps no responses: `previous_response_id` and `store: true` retrieval
//! are not offered, so a client sends the whole conversation in `input`.

use crate::error::{ApiError, Dialect};
use crate::metrics::RequestGuard;
use crate::openai::{decode_chat, prepare_chat, DecodedChat, PreparedChat};
use crate::request::{collect, handle, new_id, now, read_json, Deadline};
use crate::shift::mark;
use crate::sse::{json_event, sse_response, Transcoder};
use crate::state::AppState;
use crate::tools::call_id;
use anedvd_engine::scheduler::{Finish, Summary, TokenInfo};
use anedvd_engine::tool_format::{ParsedCall, StreamItem, ToolStream};
use axum::body::Body;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

const D: Dialect = Dialect::OpenAi;

/// Fields that ask for what this server does not do, refused by name.
const REFUSED: [(&str, &str); 4] = [
    (
        "previous_response_id",
        "this server keeps no responses: send the whole conversation in `input`",
    ),
    ("background", "background responses are not supported"),
    (
        "reasoning",
        "reasoning settings are not supported (the model decides whether it reasons)",
    ),
    (
        "include",
        "`include` is not supported (nothing extra can be included)",
    ),
];

/// Chat fields a Responses request may carry unchanged (the Responses
/// names plus the sampling knobs the other routes take).
const PASSED: [&str; 10] = [
    "temperature",
    "top_p",
    "stream",
    "seed",
    "top_k",
    "min_p",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
];

/// Translates a Responses body to the chat-completions body it means.
fn to_chat(v: &Value) -> Result<Value, ApiError> {
    let Some(obj) = v.as_object() else {
        return Err(ApiError::invalid(
            D,
            "input",
            "the body must be a JSON object",
        ));
    };
    for (key, why) in REFUSED {
        let set = match obj.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if set {
            return Err(ApiError::invalid(D, key, why));
        }
    }
    let mut chat = Map::new();
    for key in PASSED {
        if let Some(x) = obj.get(key) {
            chat.insert(key.into(), x.clone());
        }
    }
    if let Some(m) = obj.get("max_output_tokens") {
        chat.insert("max_completion_tokens".into(), m.clone());
    }
    // An input that ends with an assistant message is context, not a
    // prefill: a new turn is opened whatever the last item is.
    chat.insert("add_generation_prompt".into(), Value::Bool(true));
    let mut messages = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(ApiError::invalid(D, "instructions", "must be a string")),
    }
    match obj.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(item, i, &mut messages)?;
            }
        }
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(D, "input", "`input` is required"));
        }
        Some(_) => {
            return Err(ApiError::invalid(
                D,
                "input",
                "`input` must be a string or a list of items",
            ))
        }
    }
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = obj.get("tools").filter(|t| !t.is_null()) {
        chat.insert("tools".into(), chat_tools(tools)?);
    }
    match obj.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            chat.insert("tool_choice".into(), json!(s));
        }
        Some(c) => match (c.get("type").and_then(Value::as_str), c.get("name")) {
            (Some("function"), Some(name)) => {
                chat.insert(
                    "tool_choice".into(),
                    json!({"type": "function", "function": {"name": name}}),
                );
            }
            _ => {
                return Err(ApiError::invalid(
                    D,
                    "tool_choice",
                    "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
                ))
            }
        },
    }
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")) {
        if let Some(rf) = response_format(format)? {
            chat.insert("response_format".into(), rf);
        }
    }
    Ok(Value::Object(chat))
}

/// One `input` item as chat messages (consecutive function calls join one
/// assistant turn, as a model makes parallel calls).
fn input_item(item: &Value, i: usize, messages: &mut Vec<Value>) -> Result<(), ApiError> {
    let param = format!("input[{i}]");
    let bad = |m: &str| ApiError::invalid(D, &param, format!("input[{i}]: {m}"));
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        None | Some("message") => {
            let role = item
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a message needs a `role`"))?;
            let content = match item.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match p.get("type").and_then(Value::as_str) {
                            Some("input_text" | "output_text" | "text") => {
                                text.push_str(p.get("text").and_then(Value::as_str).unwrap_or(""));
                            }
                            Some("refusal") => {}
                            other => {
                                return Err(bad(&format!(
                                    "content parts of type {other:?} are not supported (text only)"
                                )))
                            }
                        }
                    }
                    text
                }
                _ => return Err(bad("a message needs `content` (a string or parts)")),
            };
            messages.push(json!({"role": role, "content": content}));
        }
        Some("function_call") => {
            let name = item.get("name").and_then(Value::as_str);
            let args = item
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}");
            let (Some(name), Some(id)) = (name, item.get("call_id").and_then(Value::as_str)) else {
                return Err(bad("a function_call needs `name` and `call_id`"));
            };
            let call = json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": args}});
            let joins = messages.last().is_some_and(|m| {
                m["role"] == "assistant" && m["tool_calls"].is_array() && m["content"].is_null()
            });
            if joins {
                if let Some(Value::Array(calls)) =
                    messages.last_mut().and_then(|m| m.get_mut("tool_calls"))
                {
                    calls.push(call);
                }
            } else {
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
            }
        }
        Some("function_call_output") => {
            let id = item
                .get("call_id")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a function_call_output needs `call_id`"))?;
            let output = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        }
        // Reasoning items of earlier turns carry nothing a template takes.
        Some("reasoning") => {}
        Some(other) => return Err(bad(&format!("items of type {other:?} are not supported"))),
    }
    Ok(())
}

/// Responses tools (`{"type": "function", "name", "parameters", ...}`) in
/// the chat form; built-in tools (web search, files, ...) are refused.
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let Some(list) = tools.as_array() else {
        return Err(ApiError::invalid(D, "tools", "`tools` must be a list"));
    };
    let mut out = Vec::new();
    for (i, t) in list.iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(ApiError::invalid(
                D,
                "tools",
                format!(
                    "tools[{i}]: only function tools are supported, not {}",
                    t.get("type").unwrap_or(&Value::Null)
                ),
            ));
        }
        let mut f = Map::new();
        for key in ["name", "description", "parameters", "strict"] {
            if let Some(x) = t.get(key) {
                f.insert(key.into(), x.clone());
            }
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// `text.format` as a chat `response_format` (`None` for plain text).
fn response_format(format: &Value) -> Result<Option<Value>, ApiError> {
    let bad = |m: &str| ApiError::invalid(D, "text.format", m.to_owned());
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let schema = format
                .get("schema")
                .ok_or_else(|| bad("a json_schema format needs `schema`"))?;
            Ok(Some(json!({"type": "json_schema", "json_schema": {
                "name": format.get("name").cloned().unwrap_or(json!("response")),
                "schema": schema,
                "strict": format.get("strict").cloned().unwrap_or(Value::Null),
            }})))
        }
        _ => Err(bad(
            "text.format.type must be \"text\", \"json_object\" or \"json_schema\"",
        )),
    }
}

/// Chat-path errors renamed to the Responses fields they came from.
fn renamed(mut e: ApiError) -> ApiError {
    const NAMES: [(&str, &str); 4] = [
        ("response_format", "text.format"),
        ("max_completion_tokens", "max_output_tokens"),
        ("max_tokens", "max_output_tokens"),
        ("messages", "input"),
    ];
    if let Some(param) = e.param.as_deref() {
        let to = NAMES
            .iter()
            .find_map(|(chat, ours)| param.strip_prefix(chat).map(|rest| format!("{ours}{rest}")));
        if let Some(to) = to {
            e.param = Some(to);
        }
    }
    e
}

/// Decodes a Responses body (every check that needs no model).
pub(crate) fn decode(state: &AppState, v: Value) -> Result<(DecodedChat, Value), ApiError> {
    let chat = to_chat(&v)?;
    let decoded = decode_chat(state, chat).map_err(renamed)?;
    Ok((decoded, v))
}

/// The request's settings a response object echoes.
fn echo(req: &Value, response: &mut Map<String, Value>) {
    for (key, default) in [
        ("instructions", Value::Null),
        ("max_output_tokens", Value::Null),
        ("temperature", json!(1.0)),
        ("top_p", json!(1.0)),
        ("tools", json!([])),
        ("tool_choice", json!("auto")),
        ("text", json!({"format": {"type": "text"}})),
        ("parallel_tool_calls", json!(true)),
        ("metadata", json!({})),
    ] {
        let v = req.get(key).filter(|v| !v.is_null()).cloned();
        response.insert(key.into(), v.unwrap_or(default));
    }
}

/// Builds response objects and output items for one request.
struct Shaper {
    id: String,
    created: u64,
    model: String,
    request: Value,
}

impl Shaper {
    fn response(&self, status: &str, output: &[Value], summary: Option<&Summary>) -> Value {
        let mut r = Map::new();
        r.insert("id".into(), json!(self.id));
        r.insert("object".into(), json!("response"));
        r.insert("created_at".into(), json!(self.created));
        r.insert("status".into(), json!(status));
        r.insert("model".into(), json!(self.model));
        r.insert("output".into(), json!(output));
        r.insert("error".into(), Value::Null);
        let incomplete = summary
            .filter(|s| matches!(s.finish, Finish::Length | Finish::ContextFull))
            .map(|_| json!({"reason": "max_output_tokens"}));
        r.insert(
            "incomplete_details".into(),
            incomplete.unwrap_or(Value::Null),
        );
        r.insert(
            "usage".into(),
            summary.map_or(Value::Null, |s| {
                json!({
                    "input_tokens": s.prompt_tokens,
                    "input_tokens_details": {"cached_tokens": s.cached_tokens},
                    "output_tokens": s.completion_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": s.prompt_tokens + s.completion_tokens,
                })
            }),
        );
        echo(&self.request, &mut r);
        Value::Object(r)
    }
}

fn status_of(s: &Summary) -> &'static str {
    match s.finish {
        Finish::Length | Finish::ContextFull => "incomplete",
        _ => "completed",
    }
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": if text.is_empty() && status != "completed" {
            json!([])
        } else {
            json!([{"type": "output_text", "text": text, "annotations": []}])
        },
    })
}

fn call_item(call: &ParsedCall, status: &str, arguments: &str) -> Value {
    json!({
        "type": "function_call",
        "id": new_id("fc_"),
        "call_id": call_id("call_"),
        "name": call.name,
        "arguments": arguments,
        "status": status,
    })
}

/// `POST /v1/responses`.
pub async fn responses(State(state): State<AppState>, body: Body) -> Response {
    handle(state, "responses", D, body, |s, b, g, d| {
        Box::pin(responses_inner(s, b, g, d))
    })
    .await
}

async fn responses_inner(
    state: AppState,
    body: Body,
    guard: &mut RequestGuard,
    deadline: Deadline,
) -> Result<Response, ApiError> {
    let v = read_json(body, state.config().max_body_bytes, D).await?;
    let (decoded, request) = decode(&state, v)?;
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let PreparedChat {
        ready,
        prompt,
        params,
        stop,
        format,
        shift,
        ..
    } = prepare_chat(&state, "responses", decoded)
        .await
        .map_err(renamed)?;
    let generation = state.submit(D, &ready, prompt, params, stop, deadline)?;
    let shaper = Shaper {
        id: new_id("resp_"),
        created: now(),
        model: state.config().model_id.clone(),
        request,
    };
    if stream {
        let mut t = ResponsesStream {
            shaper,
            sequence: 0,
            tools: format.map(|f| f.stream()),
            message: None,
            output: Vec::new(),
        };
        let created = t.shaper.response("in_progress", &[], None);
        let first = vec![
            t.event("response.created", json!({"response": created})),
            t.event("response.in_progress", json!({"response": created})),
        ];
        return Ok(mark(
            sse_response(first, generation, t, guard.hand_off()),
            shift,
        ));
    }
    let (out, summary) = collect(generation, D).await?;
    let (content, calls) = match format {
        Some(f) => {
            let parsed = f.parse(&out.text);
            (parsed.content, parsed.calls)
        }
        None => (out.text, Vec::new()),
    };
    let mut output = Vec::new();
    if !content.is_empty() || calls.is_empty() {
        output.push(message_item(&new_id("msg_"), &content, "completed"));
    }
    for c in &calls {
        output.push(call_item(c, "completed", &c.arguments.to_string()));
    }
    let response = shaper.response(status_of(&summary), &output, Some(&summary));
    Ok(mark(Json(response).into_response(), shift))
}

/// The open message item of a stream: its id, index and text so far.
struct OpenMessage {
    id: String,
    index: usize,
    text: String,
}

struct ResponsesStream {
    shaper: Shaper,
    sequence: u64,
    tools: Option<ToolStream>,
    message: Option<OpenMessage>,
    /// Finished output items.
    output: Vec<Value>,
}

impl ResponsesStream {
    fn event(&mut self, kind: &str, mut data: Value) -> SseEvent {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        json_event(Some(kind), &data)
    }

    fn text(&mut self, delta: &str) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        if self.message.is_none() {
            let m = OpenMessage {
                id: new_id("msg_"),
                index: self.output.len(),
                text: String::new(),
            };
            let item = message_item(&m.id, "", "in_progress");
            let (id, index) = (m.id.clone(), m.index);
            self.message = Some(m);
            evs.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            evs.push(self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []}}),
            ));
        }
        let Some(m) = self.message.as_mut() else {
            return evs;
        };
        m.text.push_str(delta);
        let (id, index) = (m.id.clone(), m.index);
        evs.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
        ));
        evs
    }

    fn close_message(&mut self) -> Vec<SseEvent> {
        let Some(m) = self.message.take() else {
            return Vec::new();
        };
        let item = message_item(&m.id, &m.text, "completed");
        let part = json!({"type": "output_text", "text": m.text, "annotations": []});
        let evs = vec![
            self.event(
                "response.output_text.done",
                json!({"item_id": m.id, "output_index": m.index, "content_index": 0, "text": m.text}),
            ),
            self.event(
                "response.content_part.done",
                json!({"item_id": m.id, "output_index": m.index, "content_index": 0, "part": part}),
            ),
            self.event(
                "response.output_item.done",
                json!({"output_index": m.index, "item": item}),
            ),
        ];
        self.output.push(item);
        evs
    }

    fn call(&mut self, call: &ParsedCall) -> Vec<SseEvent> {
        let mut evs = self.close_message();
        let index = self.output.len();
        let arguments = call.arguments.to_string();
        let mut item = call_item(call, "in_progress", "");
        let id = item["id"].clone();
        evs.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        evs.push(self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": arguments}),
        ));
        evs.push(self.event(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": arguments}),
        ));
        item["arguments"] = json!(arguments);
        item["status"] = json!("completed");
        evs.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
        evs
    }

    fn items(&mut self, items: Vec<StreamItem>) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        for item in items {
            match item {
                StreamItem::Content(text) => evs.extend(self.text(&text)),
                StreamItem::Call(call) => evs.extend(self.call(&call)),
            }
        }
        evs
    }
}

impl Transcoder for ResponsesStream {
    fn delta(&mut self, text: &str, _tokens: &[TokenInfo]) -> Vec<SseEvent> {
        match self.tools.as_mut() {
            Some(t) => {
                let items = t.push(text);
                self.items(items)
            }
            None => self.text(text),
        }
    }

    fn done(&mut self, s: &Summary) -> Vec<SseEvent> {
        let mut evs = match self.tools.take() {
            Some(t) => self.items(t.finish()),
            None => Vec::new(),
        };
        if self.output.is_empty() && self.message.is_none() {
            // An empty reply is still one (empty) message.
            evs.extend(self.text(""));
        }
        evs.extend(self.close_message());
        let status = status_of(s);
        let response = self.shaper.response(status, &self.output, Some(s));
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        evs.push(self.event(kind, json!({"response": response})));
        evs
    }

    fn error(&mut self, message: &str) -> Vec<SseEvent> {
        vec![self.event(
            "error",
            json!({"code": "server_error", "message": message, "param": null}),
        )]
    }
}
