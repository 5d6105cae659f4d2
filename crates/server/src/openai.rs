//! OpenAI-compatible `/v1/chat/completions` and `/v1/completions`.

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::metrics::RequestGuard;
use crate::request::{
    collect, generate_params, handle, is_set, new_id, now, read_json, typed, Collected, Deadline,
    Sampling, StopField,
};
use crate::shift::{fit_chat, fit_raw, mark, Shift};
use crate::sse::{json_event, sse_response_choices, Transcoder};
use crate::state::{AppState, Ready};
use crate::structured::Shaping;
use crate::template::{chat_prompt, render_options};
use crate::tools::{arguments_as_objects, call_id, ToolUse};
use anedvd_engine::scheduler::{Finish, Summary, TokenInfo};
use anedvd_engine::tool_format::{ParsedCall, StreamItem, ToolFormat, ToolStream};
use anedvd_engine::{Content, GenerateParams, Message, RenderOptions, Tokenizer};
use axum::body::Body;
use axum::extract::State;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::future::try_join_all;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

const D: Dialect = Dialect::OpenAi;
/// Most alternatives per token OpenAI allows.
const MAX_TOP_LOGPROBS: u32 = 20;

#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct ChatRequest {
    messages: Vec<Message>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default)]
    top_logprobs: Option<u32>,
    /// llama-server's debugging aid: the reply carries `__verbose` with the
    /// rendered prompt (also for every request under `serve --verbose`).
    #[serde(default)]
    verbose: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PromptField {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    prompt: PromptField,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    logprobs: Option<u32>,
    /// llama-server's: prompt tokens kept in front when `--context-shift`
    /// cuts a prompt longer than the context (negative = all it may).
    #[serde(default)]
    n_keep: Option<i64>,
}

/// The build a reply came from, llama-server's way (`b<build>-<name>`).
const FINGERPRINT: &str = concat!("b", env!("CARGO_PKG_VERSION"), "-anedvd");

/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: u64 = 16;

/// The request's `n`: how many independent choices to sample from the one
/// prompt (its prefill is shared; see the scheduler).
fn choices(v: &Value) -> Result<usize, ApiError> {
    match v.get("n") {
        None | Some(Value::Null) => Ok(1),
        Some(n) => match n.as_u64() {
            Some(n) if (1..=MAX_CHOICES).contains(&n) => Ok(n as usize),
            _ => Err(ApiError::invalid(
                D,
                "n",
                format!("`n` must be an integer in [1, {MAX_CHOICES}], got {n}"),
            )),
        },
    }
}

/// Fields that would change the result and are not implemented: refused by name.
fn reject_unsupported(v: &Value, chat: bool) -> Result<(), ApiError> {
    // `functions`/`function_call` are the deprecated forms of `tools`.
    for key in ["functions", "function_call", "audio", "prediction"] {
        if is_set(v, key) {
            return Err(ApiError::unsupported(D, key));
        }
    }
    if !chat {
        for key in ["tools", "tool_choice"] {
            if is_set(v, key) {
                return Err(ApiError::unsupported(D, key));
            }
        }
    }
    if let Some(n) = v.get("best_of") {
        if !(n.is_null() || n == 1) {
            return Err(ApiError::invalid(
                D,
                "best_of",
                "`best_of` other than 1 is not supported by this server",
            ));
        }
    }
    if !chat {
        if is_set(v, "echo") {
            return Err(ApiError::unsupported(D, "echo"));
        }
        if is_set(v, "suffix") {
            return Err(ApiError::unsupported(D, "suffix"));
        }
    }
    if let Some(m) = v.get("modalities").and_then(Value::as_array) {
        if m.iter().any(|x| x != "text") {
            return Err(ApiError::unsupported(D, "modalities"));
        }
    }
    Ok(())
}

/// Flattens text parts to a string (any other part type is refused) and maps
/// the OpenAI `developer` role to `system`, which chat templates know.
pub fn flatten_content(messages: &mut [Message], dialect: Dialect) -> Result<(), ApiError> {
    for (i, m) in messages.iter_mut().enumerate() {
        if m.role == "developer" {
            m.role = "system".into();
        }
        if let Some(Content::Parts(parts)) = &m.content {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => text.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            dialect,
                            &format!("messages[{i}].content[{j}]"),
                            format!(
                                "content parts of type `{}` are not supported (text only)",
                                p.kind
                            ),
                        ))
                    }
                }
            }
            m.content = Some(Content::Text(text));
        }
    }
    Ok(())
}

/// Usage of a request's choices: the prompt once (as the first choice ran
/// it), the completions summed.
fn usage_of(all: &[Summary]) -> Value {
    let mut s = all[0].clone();
    s.completion_tokens = all.iter().map(|s| s.completion_tokens).sum();
    s.drafted_tokens = all.iter().map(|s| s.drafted_tokens).sum();
    s.accepted_tokens = all.iter().map(|s| s.accepted_tokens).sum();
    usage(&s)
}

fn usage(s: &Summary) -> Value {
    let mut u = json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
    });
    if s.drafted_tokens > 0 {
        // OpenAI's names for speculated tokens (its Predicted Outputs).
        u["completion_tokens_details"] = json!({
            "accepted_prediction_tokens": s.accepted_tokens,
            "rejected_prediction_tokens": s.drafted_tokens - s.accepted_tokens,
        });
    }
    u
}

fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Length | Finish::ContextFull => "length",
        Finish::Eos | Finish::StopSequence | Finish::Cancelled => "stop",
    }
}

fn piece(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.piece_bytes(id).map(<[u8]>::to_vec).unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// OpenAI chat `logprobs.content` entries.
fn chat_logprobs(tok: &Tokenizer, tokens: &[TokenInfo], top: usize) -> Value {
    let entry = |id: u32, lp: f32| {
        let (t, b) = piece(tok, id);
        json!({"token": t, "logprob": lp, "bytes": b})
    };
    let content: Vec<Value> = tokens
        .iter()
        .map(|ti| {
            let mut e = entry(ti.id, ti.logprob);
            let alts: Vec<Value> = ti.top.iter().take(top).map(|&(i, l)| entry(i, l)).collect();
            e["top_logprobs"] = Value::Array(alts);
            e
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// Legacy completions `logprobs` object.
fn legacy_logprobs(tok: &Tokenizer, tokens: &[TokenInfo], top: usize, offset0: usize) -> Value {
    let mut offset = offset0;
    let (mut toks, mut lps, mut tops, mut offs) = (vec![], vec![], vec![], vec![]);
    for ti in tokens {
        let (t, _) = piece(tok, ti.id);
        offs.push(offset);
        offset += t.len();
        toks.push(t);
        lps.push(ti.logprob);
        let m: serde_json::Map<String, Value> = ti
            .top
            .iter()
            .take(top)
            .map(|&(i, l)| (piece(tok, i).0, json!(l)))
            .collect();
        tops.push(Value::Object(m));
    }
    json!({"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs})
}

/// A chat request decoded and checked, before any model is involved.
pub(crate) struct DecodedChat {
    req: ChatRequest,
    params: GenerateParams,
    shaping: Shaping,
    tools: Option<ToolUse>,
    stop: Vec<String>,
    top: u32,
    want_lp: bool,
    /// Choices to sample.
    n: usize,
    /// How the conversation is rendered.
    render: RenderOptions,
}

/// Decodes a chat completion body (every check that needs no model).
pub(crate) fn decode_chat(state: &AppState, v: Value) -> Result<DecodedChat, ApiError> {
    reject_unsupported(&v, true)?;
    let n = choices(&v)?;
    let shaping = Shaping::decode(&v, D)?;
    let tools = ToolUse::decode_openai(&v, D)?;
    if tools.is_some() && shaping.grammar.is_some() {
        return Err(ApiError::invalid(
            D,
            "response_format",
            "structured output and tools cannot be combined in one request",
        ));
    }
    let sampling: Sampling = typed(v.clone(), D)?;
    let mut req: ChatRequest = typed(v.clone(), D)?;
    if req.messages.is_empty() {
        return Err(ApiError::invalid(
            D,
            "messages",
            "`messages` must not be empty",
        ));
    }
    flatten_content(&mut req.messages, D)?;
    arguments_as_objects(&mut req.messages);
    let render = render_options(&v, &req.messages, state.config().thinking, D)?;
    let top = req.top_logprobs.unwrap_or(0);
    if top > MAX_TOP_LOGPROBS {
        return Err(ApiError::invalid(
            D,
            "top_logprobs",
            "top_logprobs must be in [0, 20]",
        ));
    }
    let want_lp = req.logprobs.unwrap_or(false);
    if top > 0 && !want_lp {
        return Err(ApiError::invalid(
            D,
            "logprobs",
            "`logprobs` must be true when `top_logprobs` is used",
        ));
    }
    let engine_top = if want_lp { top.max(1) as usize } else { 0 };
    let max_tokens = req.max_completion_tokens.or(req.max_tokens);
    let params = generate_params(state, &sampling, max_tokens, engine_top, D)?;
    let stop = req.stop.take().map(StopField::into_vec).unwrap_or_default();
    Ok(DecodedChat {
        req,
        params,
        shaping,
        tools,
        stop,
        top,
        want_lp,
        n,
        render,
    })
}

/// A chat request ready to submit: the prompt rendered (with its tools,
/// shifted to fit under `--context-shift`), the grammar compiled.
pub(crate) struct PreparedChat {
    req: ChatRequest,
    pub ready: Arc<Ready>,
    pub prompt: Vec<u32>,
    pub params: GenerateParams,
    pub stop: Vec<String>,
    /// How calls are written, when tools were offered.
    pub format: Option<ToolFormat>,
    /// What `--context-shift` dropped, if it did.
    pub shift: Option<Shift>,
}

impl DecodedChat {
    /// The text [`prepare_chat`] would tokenize (llama-server's `/apply-template`).
    pub(crate) fn rendered_text(&self, engine: &anedvd_engine::Engine) -> Result<String, ApiError> {
        match &self.tools {
            Some(t) => t.render_text(engine, &self.req.messages, &self.render, D),
            None => engine
                .chat_text(&self.req.messages, &self.render)
                .map_err(|e| ApiError::new(D, ErrorKind::InvalidRequest, e.to_string())),
        }
    }
}

/// Applies a decoded chat request (of `endpoint`) to the loaded model.
pub(crate) async fn prepare_chat(
    state: &AppState,
    endpoint: &str,
    decoded: DecodedChat,
) -> Result<PreparedChat, ApiError> {
    let DecodedChat {
        mut req,
        mut params,
        shaping,
        tools,
        stop,
        render,
        ..
    } = decoded;
    let ready = state.ready(D)?;
    shaping.apply(&ready.engine, &mut params, D).await?;
    let format = match &tools {
        Some(t) => Some(t.constrain(&ready.engine, &mut params, D).await?),
        None => None,
    };
    let engine = &ready.engine;
    let (prompt, shift) = fit_chat(
        state,
        endpoint,
        ready.max_seq,
        params.max_tokens,
        &mut req.messages,
        |m| match &tools {
            Some(t) => t.prompt(engine, m, &render, D),
            None => chat_prompt(engine, m, &render, D),
        },
    )?;
    Ok(PreparedChat {
        req,
        ready,
        prompt,
        params,
        stop,
        format,
        shift,
    })
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(State(state): State<AppState>, body: Body) -> Response {
    handle(state, "chat_completions", D, body, |s, b, g, d| {
        Box::pin(chat_inner(s, b, g, d))
    })
    .await
}

async fn chat_inner(
    state: AppState,
    body: Body,
    guard: &mut RequestGuard,
    deadline: Deadline,
) -> Result<Response, ApiError> {
    let v = read_json(body, state.config().max_body_bytes, D).await?;
    let decoded = decode_chat(&state, v)?;
    let (top, want_lp, n) = (decoded.top, decoded.want_lp, decoded.n);
    let PreparedChat {
        req,
        ready,
        prompt,
        params,
        stop,
        format,
        shift,
    } = prepare_chat(&state, "chat_completions", decoded).await?;
    let verbose = (req.verbose.unwrap_or(false) || state.config().verbose_replies).then(|| {
        ready
            .engine
            .tokenizer
            .decode(&prompt, false)
            .unwrap_or_default()
    });
    let generations = state.submit_choices(D, &ready, prompt, params, stop, deadline, n)?;
    let id = new_id("chatcmpl-");
    let model = state.config().model_id.clone();
    let created = now();
    if req.stream.unwrap_or(false) {
        let include_usage = req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let streams: Vec<ChatStream> = (0..n)
            .map(|index| ChatStream {
                id: id.clone(),
                model: model.clone(),
                created,
                index,
                include_usage,
                logprobs: want_lp.then_some(top as usize),
                engine: ready.engine.clone(),
                tools: format.map(|f| f.stream()),
                calls: 0,
            })
            .collect();
        let first = streams
            .iter()
            .map(|t| {
                // llama-server's first delta: the role, content null.
                t.chunk(
                    json!({"role": "assistant", "content": null}),
                    Value::Null,
                    None,
                )
            })
            .collect();
        let resp = sse_response_choices(first, generations, streams, guard.hand_off());
        return Ok(mark(resp, shift));
    }
    let results = try_join_all(generations.into_iter().map(|g| collect(g, D))).await?;
    let tokenizer = &ready.engine.tokenizer;
    let choices: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(index, (out, summary))| {
            let logprobs = if want_lp {
                chat_logprobs(tokenizer, &out.tokens, top as usize)
            } else {
                Value::Null
            };
            chat_choice(index, out, summary, format, logprobs)
        })
        .collect();
    let summaries: Vec<Summary> = results.into_iter().map(|(_, s)| s).collect();
    let mut reply = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": choices,
        "usage": usage_of(&summaries),
        "timings": {
            "seconds": summaries[0].seconds,
            "decode_tokens_per_second": summaries[0].decode_tps,
        },
    });
    if let Some(prompt) = verbose {
        reply["__verbose"] = json!({ "prompt": prompt });
    }
    Ok(mark(Json(reply).into_response(), shift))
}

/// One choice of a chat reply: the text split into content and tool calls
/// when tools were offered.
fn chat_choice(
    index: usize,
    out: &Collected,
    summary: &Summary,
    format: Option<ToolFormat>,
    logprobs: Value,
) -> Value {
    let (content, calls) = match format {
        Some(f) => {
            let parsed = f.parse(&out.text);
            (parsed.content, parsed.calls)
        }
        None => (out.text.clone(), Vec::new()),
    };
    let mut message = json!({"role": "assistant", "content": content, "refusal": null});
    let mut finish = finish_reason(summary.finish);
    if !calls.is_empty() {
        let calls: Vec<Value> = calls.iter().map(|c| wire_call(c, None)).collect();
        message["tool_calls"] = Value::Array(calls);
        if content.is_empty() {
            message["content"] = Value::Null;
        }
        finish = "tool_calls";
    }
    json!({
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish,
    })
}

/// An OpenAI `tool_calls` entry; with `index`, the streamed delta form.
fn wire_call(call: &ParsedCall, index: Option<usize>) -> Value {
    let mut v = json!({
        "id": call_id("call_"),
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments.to_string()},
    });
    if let Some(i) = index {
        v["index"] = json!(i);
    }
    v
}

struct ChatStream {
    id: String,
    model: String,
    created: u64,
    /// The choice this stream carries.
    index: usize,
    include_usage: bool,
    logprobs: Option<usize>,
    engine: Arc<anedvd_engine::Engine>,
    /// With tools: splits the text into content and calls.
    tools: Option<ToolStream>,
    /// Calls streamed so far.
    calls: usize,
}

impl ChatStream {
    fn chunk(&self, delta: Value, logprobs: Value, finish: Option<&str>) -> SseEvent {
        let mut c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        });
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        json_event(None, &c)
    }
}

impl ChatStream {
    /// Chunks for what the tool parser released.
    fn items(&mut self, items: Vec<StreamItem>, mut lp: Value) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        for item in items {
            let delta = match item {
                StreamItem::Content(text) => json!({"content": text}),
                StreamItem::Call(call) => {
                    let index = self.calls;
                    self.calls += 1;
                    json!({"tool_calls": [wire_call(&call, Some(index))]})
                }
            };
            evs.push(self.chunk(delta, std::mem::take(&mut lp), None));
        }
        evs
    }
}

impl Transcoder for ChatStream {
    fn delta(&mut self, text: &str, tokens: &[TokenInfo]) -> Vec<SseEvent> {
        let lp = match self.logprobs {
            Some(top) => chat_logprobs(&self.engine.tokenizer, tokens, top),
            None => Value::Null,
        };
        match self.tools.as_mut() {
            Some(t) => {
                let items = t.push(text);
                self.items(items, lp)
            }
            None => vec![self.chunk(json!({"content": text}), lp, None)],
        }
    }

    fn done(&mut self, s: &Summary) -> Vec<SseEvent> {
        let mut evs = self.choice_done(s);
        evs.extend(self.all_done(std::slice::from_ref(s)));
        evs
    }

    fn choice_done(&mut self, s: &Summary) -> Vec<SseEvent> {
        let mut evs = match self.tools.take() {
            Some(t) => self.items(t.finish(), Value::Null),
            None => Vec::new(),
        };
        let finish = if self.calls > 0 {
            "tool_calls"
        } else {
            finish_reason(s.finish)
        };
        evs.push(self.chunk(json!({}), Value::Null, Some(finish)));
        evs
    }

    fn all_done(&mut self, all: &[Summary]) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        if self.include_usage {
            let c = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": FINGERPRINT,
                "choices": [],
                "usage": usage_of(all),
            });
            evs.push(json_event(None, &c));
        }
        evs.push(SseEvent::default().data("[DONE]"));
        evs
    }

    fn error(&mut self, message: &str) -> Vec<SseEvent> {
        stream_error(message)
    }
}

/// A completion request decoded and checked, before any model is involved
/// (the prompt is tokenized or checked against the vocabulary later).
pub(crate) struct DecodedCompletion {
    req: CompletionRequest,
    params: GenerateParams,
    shaping: Shaping,
    stop: Vec<String>,
    /// Choices to sample.
    n: usize,
}

/// Decodes a legacy completion body (every check that needs no model).
pub(crate) fn decode_completion(state: &AppState, v: Value) -> Result<DecodedCompletion, ApiError> {
    reject_unsupported(&v, false)?;
    let n = choices(&v)?;
    let shaping = Shaping::decode(&v, D)?;
    let sampling: Sampling = typed(v.clone(), D)?;
    let mut req: CompletionRequest = typed(v, D)?;
    if matches!(&req.prompt, PromptField::Texts(t) if t.len() != 1) {
        return Err(ApiError::invalid(
            D,
            "prompt",
            "only one prompt per request is supported",
        ));
    }
    let top = req.logprobs.unwrap_or(0);
    if top > 5 {
        return Err(ApiError::invalid(
            D,
            "logprobs",
            "logprobs must be in [0, 5]",
        ));
    }
    let engine_top = if req.logprobs.is_some() {
        top.max(1) as usize
    } else {
        0
    };
    let params = generate_params(state, &sampling, req.max_tokens.or(Some(16)), engine_top, D)?;
    let stop = req.stop.take().map(StopField::into_vec).unwrap_or_default();
    Ok(DecodedCompletion {
        req,
        params,
        shaping,
        stop,
        n,
    })
}

/// `POST /v1/completions`.
pub async fn completions(State(state): State<AppState>, body: Body) -> Response {
    handle(state, "completions", D, body, |s, b, g, d| {
        Box::pin(completions_inner(s, b, g, d))
    })
    .await
}

async fn completions_inner(
    state: AppState,
    body: Body,
    guard: &mut RequestGuard,
    deadline: Deadline,
) -> Result<Response, ApiError> {
    let v = read_json(body, state.config().max_body_bytes, D).await?;
    let DecodedCompletion {
        req,
        mut params,
        shaping,
        stop,
        n,
    } = decode_completion(&state, v)?;
    let ready = state.ready(D)?;
    shaping.apply(&ready.engine, &mut params, D).await?;
    let engine = &ready.engine;
    let prompt = match req.prompt {
        PromptField::Text(t) => engine.raw_prompt(&t),
        // decode_completion leaves exactly one.
        PromptField::Texts(t) => engine.raw_prompt(&t.concat()),
        PromptField::Ids(ids) => {
            let vocab = engine.tokenizer.vocab_size();
            if let Some(bad) = ids.iter().find(|&&i| i as usize >= vocab) {
                return Err(ApiError::invalid(
                    D,
                    "prompt",
                    format!("token id {bad} is out of the vocabulary ({vocab})"),
                ));
            }
            Ok(ids)
        }
    }
    .map_err(|e| ApiError::new(D, ErrorKind::InvalidRequest, e.to_string()))?;
    let n_keep = req.n_keep.unwrap_or(0);
    let (prompt, shift) = fit_raw(&state, "completions", ready.max_seq, n_keep, prompt);
    let generations = state.submit_choices(D, &ready, prompt, params, stop, deadline, n)?;
    let id = new_id("cmpl-");
    let model = state.config().model_id.clone();
    let created = now();
    if req.stream.unwrap_or(false) {
        let include_usage = req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let streams: Vec<CompletionStream> = (0..n)
            .map(|index| CompletionStream {
                id: id.clone(),
                model: model.clone(),
                created,
                index,
                include_usage,
                logprobs: req.logprobs.map(|t| t as usize),
                offset: 0,
                engine: ready.engine.clone(),
            })
            .collect();
        let resp = sse_response_choices(Vec::new(), generations, streams, guard.hand_off());
        return Ok(mark(resp, shift));
    }
    let results = try_join_all(generations.into_iter().map(|g| collect(g, D))).await?;
    let choices: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(index, (out, summary))| {
            let logprobs = match req.logprobs {
                Some(t) => legacy_logprobs(&engine.tokenizer, &out.tokens, t as usize, 0),
                None => Value::Null,
            };
            json!({
                "text": out.text,
                "index": index,
                "logprobs": logprobs,
                "finish_reason": finish_reason(summary.finish),
            })
        })
        .collect();
    let summaries: Vec<Summary> = results.into_iter().map(|(_, s)| s).collect();
    let reply = Json(json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": choices,
        "usage": usage_of(&summaries),
    }));
    Ok(mark(reply.into_response(), shift))
}

struct CompletionStream {
    id: String,
    model: String,
    created: u64,
    /// The choice this stream carries.
    index: usize,
    include_usage: bool,
    logprobs: Option<usize>,
    offset: usize,
    engine: Arc<anedvd_engine::Engine>,
}

impl CompletionStream {
    fn chunk(&self, text: &str, logprobs: Value, finish: Option<&str>) -> SseEvent {
        let mut c = json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{"text": text, "index": self.index, "logprobs": logprobs, "finish_reason": finish}],
        });
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        json_event(None, &c)
    }
}

impl Transcoder for CompletionStream {
    fn delta(&mut self, text: &str, tokens: &[TokenInfo]) -> Vec<SseEvent> {
        let lp = match self.logprobs {
            Some(t) => legacy_logprobs(&self.engine.tokenizer, tokens, t, self.offset),
            None => Value::Null,
        };
        self.offset += text.len();
        vec![self.chunk(text, lp, None)]
    }

    fn done(&mut self, s: &Summary) -> Vec<SseEvent> {
        let mut evs = self.choice_done(s);
        evs.extend(self.all_done(std::slice::from_ref(s)));
        evs
    }

    fn choice_done(&mut self, s: &Summary) -> Vec<SseEvent> {
        vec![self.chunk("", Value::Null, Some(finish_reason(s.finish)))]
    }

    fn all_done(&mut self, all: &[Summary]) -> Vec<SseEvent> {
        let mut evs = Vec::new();
        if self.include_usage {
            let c = json!({
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_of(all),
            });
            evs.push(json_event(None, &c));
        }
        evs.push(SseEvent::default().data("[DONE]"));
        evs
    }

    fn error(&mut self, message: &str) -> Vec<SseEvent> {
        stream_error(message)
    }
}

/// A mid-stream failure in the OpenAI dialect: an error object, then `[DONE]`
/// (shared by chat and legacy completion streams).
fn stream_error(message: &str) -> Vec<SseEvent> {
    let e = ApiError::new(D, ErrorKind::Internal, message);
    vec![
        json_event(None, &e.body()),
        SseEvent::default().data("[DONE]"),
    ]
}
