//! llama.cpp's native server API (llama-server's `tools/server`):
//! `POST /completion` (alias `/completions`), `GET /props` and `GET /slots`,
//! in llama-server's shapes. Errors use the OpenAI dialect's shape, as
//! llama-server's do.

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::metrics::RequestGuard;
use crate::request::{
    collect, generate_params, handle, is_set, read_json, typed, Collected, Deadline, Sampling,
    StopField,
};
use crate::shift::{fit_raw, mark, Shift};
use crate::sse::{json_event, sse_response, Transcoder};
use crate::state::{AppState, Ready};
use crate::structured::Shaping;
use anedvd_engine::constrain::Grammar;
use anedvd_engine::scheduler::{Finish, Summary, TokenInfo};
use anedvd_engine::{Engine, GenerateParams, SamplingParams};
use axum::body::Body;
use axum::extract::State;
use axum::http::Uri;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Number, Value};
use std::sync::Arc;

const D: Dialect = Dialect::OpenAi;

/// Most `n_probs` a request may ask for.
pub const MAX_N_PROBS: usize = 100;

/// llama-server's seed meaning "draw a random one" (`LLAMA_DEFAULT_SEED`),
/// also what `/props` reports when requests without a seed get a fresh one.
const RANDOM_SEED: u64 = 0xFFFF_FFFF;

/// The samplers the engine applies, in its order, by llama.cpp's names
/// (logit bias and the grammar come first).
const SAMPLERS: [&str; 5] = ["penalties", "top_k", "top_p", "min_p", "temperature"];

/// The fields of a `/completion` body read by type (the prompt, sampling
/// knobs that llama-server spells differently and the refused ones are read
/// from the JSON directly).
#[derive(Debug, Default, Deserialize)]
struct CompletionRequest {
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    n_predict: Option<i64>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    max_completion_tokens: Option<i64>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    min_p: Option<f32>,
    #[serde(default)]
    seed: Option<Number>,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    n_probs: Option<i64>,
    #[serde(default)]
    return_tokens: Option<bool>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default, alias = "repetition_penalty")]
    repeat_penalty: Option<f32>,
    #[serde(default)]
    repeat_last_n: Option<i32>,
    #[serde(default)]
    presence_penalty: Option<f32>,
    #[serde(default)]
    frequency_penalty: Option<f32>,
    /// Accepted: the scheduler always reuses a slot's cached prefix.
    #[serde(default)]
    cache_prompt: Option<bool>,
    #[serde(default)]
    id_slot: Option<i64>,
    #[serde(default)]
    response_fields: Option<Vec<String>>,
    /// Prompt tokens kept in front when `--context-shift` cuts a prompt
    /// longer than the context (negative = as many as may be kept).
    #[serde(default)]
    n_keep: Option<i64>,
    #[serde(default)]
    speculative: Option<Value>,
    #[serde(default)]
    stop_token_ids: Option<Vec<u32>>,
}

/// One piece of a prompt: text to tokenize, or a token id.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Id(u32),
}

/// One prompt, as pieces in order.
type PromptSpec = Vec<Piece>;

/// Whether a knob's value is its "off" value.
type IsOff = fn(f64) -> bool;

/// Sampler knobs llama-server has and the engine does not: refused when set
/// to anything but their "off" value, since they would change the output.
/// Each entry: the field and whether a value is off.
fn off_values() -> [(&'static str, IsOff); 10] {
    [
        ("mirostat", |x| x == 0.0),
        ("dynatemp_range", |x| x <= 0.0),
        ("typical_p", |x| x >= 1.0),
        ("xtc_probability", |x| x <= 0.0),
        ("dry_multiplier", |x| x <= 0.0),
        ("top_n_sigma", |x| x <= 0.0),
        ("n_indent", |x| x <= 0.0),
        ("t_max_predict_ms", |x| x <= 0.0),
        ("min_keep", |x| x <= 1.0),
        ("n_cmpl", |x| x == 1.0),
    ]
}

/// Refuses, by name, the fields that would change the result and that this
/// server does not implement.
fn reject_unsupported(v: &Value) -> Result<(), ApiError> {
    for (key, off) in off_values() {
        match v.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_f64().is_some_and(off) => {}
            Some(Value::Number(_)) => {
                return Err(ApiError::invalid(
                    D,
                    key,
                    format!(
                    "`{key}` is not supported by this server (only its default, which disables it)"
                ),
                ))
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    D,
                    key,
                    format!("`{key}` must be a number, got {other}"),
                ))
            }
        }
    }
    if let Some(n) = v.get("n") {
        if !(n.is_null() || n == 1) {
            return Err(ApiError::invalid(
                D,
                "n",
                "`n` other than 1 is not supported by this server",
            ));
        }
    }
    for key in [
        "post_sampling_probs",
        "lora",
        "grammar_lazy",
        "multimodal_data",
    ] {
        if is_set(v, key) {
            return Err(ApiError::unsupported(D, key));
        }
    }
    Ok(())
}

/// A prompt's pieces: a string, or an array of strings and token ids.
fn mixed(v: &Value, param: &str) -> Result<PromptSpec, ApiError> {
    let bad = |m: String| ApiError::invalid(D, param, m);
    match v {
        Value::String(s) => Ok(vec![Piece::Text(s.clone())]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, x)| match x {
                Value::String(s) => Ok(Piece::Text(s.clone())),
                Value::Number(n) => n
                    .as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .map(Piece::Id)
                    .ok_or_else(|| bad(format!("{param}[{i}]: {n} is not a token id"))),
                other => Err(bad(format!(
                    "{param}[{i}]: expected a string or a token id, got {other}"
                ))),
            })
            .collect(),
        Value::Object(o) => {
            if o.contains_key("multimodal_data") {
                return Err(bad(
                    "multimodal prompts are not supported by this server (text only)".into(),
                ));
            }
            match o.get("prompt_string") {
                Some(p @ (Value::String(_) | Value::Array(_))) => {
                    mixed(p, &format!("{param}.prompt_string"))
                }
                _ => Err(bad(format!(
                    "`{param}` as an object needs a `prompt_string`"
                ))),
            }
        }
        other => Err(bad(format!(
            "`{param}` must be a string, token ids, or a list of them, got {other}"
        ))),
    }
}

/// The prompts of a request, as llama-server splits them: a string or an
/// array holding any token id is one prompt; another array is a list of
/// prompts (each a string, an array of strings and ids, or an object with
/// `prompt_string`).
fn prompts(v: Option<&Value>) -> Result<Vec<PromptSpec>, ApiError> {
    let v = match v {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(D, "prompt", "`prompt` is required"))
        }
        Some(v) => v,
    };
    let out = match v {
        Value::Array(items) if !items.iter().any(Value::is_number) => items
            .iter()
            .enumerate()
            .map(|(i, p)| mixed(p, &format!("prompt[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        _ => vec![mixed(v, "prompt")?],
    };
    if out.is_empty() {
        return Err(ApiError::invalid(D, "prompt", "`prompt` must not be empty"));
    }
    Ok(out)
}

/// A `/completion` request decoded and checked, before any model is involved.
pub(crate) struct DecodedCompletion {
    prompts: Vec<PromptSpec>,
    params: GenerateParams,
    shaping: Shaping,
    stop: Vec<String>,
    /// As given: -1 = until EOS or the context is full.
    n_predict: i64,
    n_probs: usize,
    return_tokens: bool,
    stream: bool,
    ignore_eos: bool,
    response_fields: Vec<String>,
    /// Tokens kept in front of a prompt `--context-shift` cuts.
    n_keep: i64,
}

/// Decodes a `/completion` body (every check that needs no model).
pub(crate) fn decode_completion(state: &AppState, v: Value) -> Result<DecodedCompletion, ApiError> {
    reject_unsupported(&v)?;
    let prompts = prompts(v.get("prompt"))?;
    let shaping = Shaping::decode(&v, D)?;
    let req: CompletionRequest = typed(v, D)?;
    let stream = req.stream.unwrap_or(false);
    if stream && prompts.len() > 1 {
        return Err(ApiError::invalid(
            D,
            "prompt",
            "streaming more than one prompt per request is not supported",
        ));
    }
    let n_predict = req
        .n_predict
        .or(req.max_completion_tokens)
        .or(req.max_tokens)
        .unwrap_or(-1);
    if n_predict < -1 {
        return Err(ApiError::invalid(
            D,
            "n_predict",
            format!("n_predict must be -1 (no limit) or ≥ 0, got {n_predict}"),
        ));
    }
    let seed = match &req.seed {
        None => None,
        Some(n) => match (n.as_u64(), n.as_i64()) {
            (Some(RANDOM_SEED), _) | (None, Some(-1)) => None,
            (Some(s), _) => Some(s),
            _ => {
                return Err(ApiError::invalid(
                    D,
                    "seed",
                    format!("seed must be -1 (random) or a non-negative integer, got {n}"),
                ))
            }
        },
    };
    if let Some(slot) = req.id_slot {
        let total = state.config().parallel;
        if slot < -1 || slot >= total as i64 {
            return Err(ApiError::invalid(
                D,
                "id_slot",
                format!("id_slot must be -1 (any) or a slot in 0..{total}, got {slot}"),
            ));
        }
    }
    let n_probs = usize::try_from(req.n_probs.unwrap_or(0).max(0)).unwrap_or(usize::MAX);
    if n_probs > MAX_N_PROBS {
        return Err(ApiError::invalid(
            D,
            "n_probs",
            format!("n_probs must be in [0, {MAX_N_PROBS}], got {n_probs}"),
        ));
    }
    let return_tokens = req.return_tokens.unwrap_or(false);
    // Token ids come with the engine's per-token report, which only exists
    // when some alternatives are asked for: one is enough.
    let engine_top = if n_probs > 0 || return_tokens || stream {
        n_probs.max(1)
    } else {
        0
    };
    let sampling = Sampling {
        // llama-server: a negative temperature samples greedily.
        temperature: req.temperature.map(|t| t.max(0.0)),
        top_p: req.top_p,
        // llama-server: top_k ≤ 0 disables it.
        top_k: req
            .top_k
            .map(|k| usize::try_from(k.max(0)).unwrap_or(usize::MAX)),
        min_p: req.min_p,
        seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
        repetition_penalty: req.repeat_penalty,
        speculative: req.speculative,
        stop_token_ids: req.stop_token_ids,
    };
    let mut params = generate_params(state, &sampling, None, engine_top, D)?;
    if n_predict >= 0 {
        params.max_tokens = usize::try_from(n_predict).unwrap_or(usize::MAX);
    }
    if let Some(n) = req.repeat_last_n {
        params.sampling.repeat_last_n = n;
        params
            .sampling
            .validate()
            .map_err(|m| ApiError::invalid(D, "repeat_last_n", m))?;
    }
    params.reuse_prefix = req.cache_prompt.unwrap_or(true);
    let stop = req
        .stop
        .map(StopField::into_vec)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    Ok(DecodedCompletion {
        prompts,
        params,
        shaping,
        stop,
        n_predict,
        n_probs,
        return_tokens,
        stream,
        ignore_eos: req.ignore_eos.unwrap_or(false),
        response_fields: req.response_fields.unwrap_or_default(),
        n_keep: req.n_keep.unwrap_or(0),
    })
}

/// Tokenizes one prompt as llama-server does: special tokens parsed, BOS
/// (per the model) only when the prompt starts with text; ids checked
/// against the vocabulary.
fn tokenize(engine: &Engine, spec: &PromptSpec) -> Result<Vec<u32>, ApiError> {
    let tok = &engine.tokenizer;
    let vocab = tok.vocab_size();
    let mut ids = Vec::new();
    for (i, piece) in spec.iter().enumerate() {
        match piece {
            Piece::Text(s) => {
                let part = tok
                    .encode(s, i == 0, true)
                    .map_err(|e| ApiError::new(D, ErrorKind::InvalidRequest, e.to_string()))?;
                ids.extend(part);
            }
            Piece::Id(id) if (*id as usize) < vocab => ids.push(*id),
            Piece::Id(id) => {
                return Err(ApiError::invalid(
                    D,
                    "prompt",
                    format!("token id {id} is out of the vocabulary ({vocab})"),
                ))
            }
        }
    }
    Ok(ids)
}

/// `generation_settings` (and `/props`' and `/slots`' `params`): the
/// resolved sampling settings, with llama-server's samplers that this
/// server lacks at their "off" values.
#[allow(clippy::too_many_arguments)]
fn settings(
    s: &SamplingParams,
    seed: u64,
    n_predict: i64,
    ignore_eos: bool,
    stream: bool,
    n_probs: usize,
    stop: &[String],
    grammar: &str,
) -> Value {
    let bias: Vec<Value> = s
        .logit_bias
        .iter()
        // −∞ (a banned token) is `null`, as llama-server writes it.
        .map(|&(token, bias)| json!({"bias": bias.is_finite().then_some(bias), "token": token}))
        .collect();
    json!({
        "seed": seed,
        "temperature": s.temperature,
        "dynatemp_range": 0.0,
        "dynatemp_exponent": 1.0,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "top_n_sigma": -1.0,
        "xtc_probability": 0.0,
        "typical_p": 1.0,
        "repeat_last_n": s.repeat_last_n,
        "repeat_penalty": s.repeat_penalty,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "dry_multiplier": 0.0,
        "mirostat": 0,
        "stop": stop,
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "n_keep": 0,
        "n_discard": 0,
        "ignore_eos": ignore_eos,
        "stream": stream,
        "logit_bias": bias,
        "n_probs": n_probs,
        "min_keep": 0,
        "grammar": grammar,
        "samplers": SAMPLERS,
        "timings_per_token": false,
        "post_sampling_probs": false,
        "lora": [],
    })
}

/// JSON cannot carry infinities: the lowest finite value stands for −∞
/// (as llama-server does for log-probabilities of 0).
fn finite(x: f32) -> f32 {
    if x.is_finite() {
        x
    } else if x > 0.0 {
        f32::MAX
    } else {
        f32::MIN
    }
}

/// The default `params` of `/props` and `/slots`: the server's sampling
/// defaults (seed 4294967295 = a fresh one per request).
fn default_settings(state: &AppState) -> Value {
    let c = state.config();
    let seed = if c.fixed_seed {
        c.sampling.seed
    } else {
        RANDOM_SEED
    };
    settings(&c.sampling, seed, -1, false, false, 0, &[], "")
}

/// What the replies of one prompt share.
#[derive(Clone)]
struct ReplyContext {
    engine: Arc<Engine>,
    model: String,
    index: usize,
    /// The prompt as the model sees it (special tokens rendered).
    prompt: String,
    prompt_len: usize,
    settings: Value,
    n_probs: usize,
    return_tokens: bool,
    response_fields: Vec<String>,
    /// The generation was given the rest of the context (no `n_predict`):
    /// reaching that limit is the context filling up (`truncated`).
    fills_context: bool,
    /// `--context-shift` cut the prompt to fit (`truncated`).
    prompt_cut: bool,
}

fn stop_type(f: Finish) -> &'static str {
    match f {
        Finish::Eos => "eos",
        Finish::StopSequence => "word",
        Finish::Length | Finish::ContextFull => "limit",
        Finish::Cancelled => "none",
    }
}

/// A token's text (lossy) and bytes.
fn piece(engine: &Engine, id: u32) -> (String, Vec<u8>) {
    let bytes = engine
        .tokenizer
        .piece_bytes(id)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// `completion_probabilities` entries: each token with its log-probability
/// and the `n` most likely tokens at its step (the model's distribution,
/// before penalties and filters), most likely first.
fn probabilities(engine: &Engine, tokens: &[TokenInfo], n: usize) -> Value {
    let entry = |id: u32, lp: f32| {
        let (token, bytes) = piece(engine, id);
        json!({"id": id, "token": token, "bytes": bytes, "logprob": finite(lp)})
    };
    tokens
        .iter()
        .map(|t| {
            let mut e = entry(t.id, t.logprob);
            let top: Vec<Value> = t.top.iter().take(n).map(|&(i, l)| entry(i, l)).collect();
            e["top_logprobs"] = Value::Array(top);
            e
        })
        .collect()
}

/// llama-server's `timings`. The engine's summary has the slot's whole time
/// and its decode rate, not the prefill time: decode time is derived from
/// the rate (tokens after the first over `decode_tps`) and the prompt's
/// time is the rest (it includes sampling the first token).
fn timings(s: &Summary) -> Value {
    let prompt_n = s.prompt_tokens.saturating_sub(s.cached_tokens);
    let decoded = s.completion_tokens.saturating_sub(1);
    let predicted_ms = if s.decode_tps > 0.0 {
        1000.0 * decoded as f64 / s.decode_tps
    } else {
        0.0
    };
    let prompt_ms = (1000.0 * s.seconds - predicted_ms).max(0.0);
    let per_token = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let per_second = |ms: f64, n: usize| {
        if ms > 0.0 {
            1000.0 * n as f64 / ms
        } else {
            0.0
        }
    };
    let mut t = json!({
        "cache_n": s.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per_token(prompt_ms, prompt_n),
        "prompt_per_second": per_second(prompt_ms, prompt_n),
        "predicted_n": s.completion_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": if s.decode_tps > 0.0 { 1000.0 / s.decode_tps } else { 0.0 },
        "predicted_per_second": s.decode_tps,
    });
    if s.drafted_tokens > 0 {
        t["draft_n"] = json!(s.drafted_tokens);
        t["draft_n_accepted"] = json!(s.accepted_tokens);
    }
    t
}

/// `response_fields`: only these fields, a `a/b` path taken from inside
/// `a` (and named `a/b`); missing ones are left out.
fn select(fields: &[String], v: Value) -> Value {
    if fields.is_empty() {
        return v;
    }
    let mut out = serde_json::Map::new();
    for path in fields {
        let mut cur = Some(&v);
        for key in path.split('/') {
            cur = cur.and_then(|c| c.get(key));
        }
        if let Some(x) = cur {
            out.insert(path.clone(), x.clone());
        }
    }
    Value::Object(out)
}

impl ReplyContext {
    /// The closing object: the whole reply of a non-streamed request, the
    /// last event of a streamed one (`content` is then what was not sent yet).
    fn done(
        &self,
        content: &str,
        tokens: &[TokenInfo],
        has_new_line: bool,
        s: &Summary,
        stream: bool,
    ) -> Value {
        let ids: Vec<u32> = if self.return_tokens {
            tokens.iter().map(|t| t.id).collect()
        } else {
            Vec::new()
        };
        let mut v = json!({
            "index": self.index,
            "content": content,
            "tokens": ids,
            "id_slot": -1,
            "stop": true,
            "model": self.model,
            "tokens_predicted": s.completion_tokens,
            "tokens_evaluated": s.prompt_tokens,
            "generation_settings": self.settings,
            "prompt": self.prompt,
            "has_new_line": has_new_line,
            "truncated": self.prompt_cut
                || s.finish == Finish::ContextFull
                || (self.fills_context && s.finish == Finish::Length),
            "stop_type": stop_type(s.finish),
            "stopping_word": s.stop_sequence.clone().unwrap_or_default(),
            "tokens_cached": s.cached_tokens,
            "timings": timings(s),
        });
        if !stream && self.n_probs > 0 {
            v["completion_probabilities"] = probabilities(&self.engine, tokens, self.n_probs);
        }
        select(&self.response_fields, v)
    }
}

/// `POST /completion` (and `/completions`): llama-server's native completion.
pub async fn completion(State(state): State<AppState>, body: Body) -> Response {
    handle(state, "completion", D, body, |s, b, g, d| {
        Box::pin(completion_inner(s, b, g, d))
    })
    .await
}

async fn completion_inner(
    state: AppState,
    body: Body,
    guard: &mut RequestGuard,
    deadline: Deadline,
) -> Result<Response, ApiError> {
    let v = read_json(body, state.config().max_body_bytes, D).await?;
    let DecodedCompletion {
        prompts,
        mut params,
        shaping,
        stop,
        n_predict,
        n_probs,
        return_tokens,
        stream,
        ignore_eos,
        response_fields,
        n_keep,
    } = decode_completion(&state, v)?;
    let ready = state.ready(D)?;
    let grammar = match &shaping.grammar {
        Some((Grammar::Gbnf(g), _)) => g.clone(),
        _ => String::new(),
    };
    shaping.apply(&ready.engine, &mut params, D).await?;
    if ignore_eos {
        // As llama-server: end-of-generation tokens are banned, not just passed.
        params.ignore_eos = true;
        let eog = ready.engine.tokenizer.eog_ids().to_vec();
        params
            .sampling
            .logit_bias
            .extend(eog.into_iter().map(|id| (id, f32::NEG_INFINITY)));
    }
    let mut settings_v = settings(
        &params.sampling,
        params.sampling.seed,
        n_predict,
        ignore_eos,
        stream,
        n_probs,
        &stop,
        &grammar,
    );
    settings_v["n_ctx"] = json!(ready.max_seq);
    settings_v["model"] = json!(state.config().model_id);
    settings_v["n_keep"] = json!(n_keep);
    let engine = &ready.engine;
    // No n_predict: the generation is given the rest of the context.
    let fills_context = params.max_tokens == usize::MAX;
    let mut jobs = Vec::with_capacity(prompts.len());
    // What --context-shift cut, summed over the prompts (the header's).
    let mut cut: Option<Shift> = None;
    for (index, spec) in prompts.iter().enumerate() {
        let (ids, shift) = fit_raw(
            &state,
            "completion",
            ready.max_seq,
            n_keep,
            tokenize(engine, spec)?,
        );
        if let Some(s) = shift {
            let total = cut.get_or_insert(Shift {
                messages: 0,
                tokens: 0,
            });
            total.tokens += s.tokens;
        }
        let ctx = ReplyContext {
            engine: engine.clone(),
            model: state.config().model_id.clone(),
            index,
            prompt: engine.tokenizer.decode(&ids, false).unwrap_or_default(),
            prompt_len: ids.len(),
            settings: settings_v.clone(),
            n_probs,
            return_tokens,
            response_fields: response_fields.clone(),
            fills_context,
            prompt_cut: shift.is_some(),
        };
        jobs.push((ids, ctx));
    }
    let mut running = Vec::with_capacity(jobs.len());
    for (ids, ctx) in jobs {
        let mut params = params.clone();
        if fills_context {
            // "Until the context is full" as llama-server counts it: prompt
            // and generated tokens together fill n_ctx (the engine could
            // sample one more, from the last position, which needs no row).
            params.max_tokens = ready.max_seq.saturating_sub(ids.len()).max(1);
        }
        let g = state.submit(D, &ready, ids, params, stop.clone(), deadline)?;
        running.push((g, ctx));
    }
    if stream {
        // decode_completion allows one prompt per stream.
        let Some((generation, ctx)) = running.pop() else {
            return Err(ApiError::invalid(D, "prompt", "`prompt` must not be empty"));
        };
        let t = CompletionStream {
            ctx,
            predicted: 0,
            has_new_line: false,
        };
        return Ok(mark(
            sse_response(Vec::new(), generation, t, guard.hand_off()),
            cut,
        ));
    }
    let results = futures_util::future::join_all(
        running
            .into_iter()
            .map(|(g, ctx)| async move { collect(g, D).await.map(|r| (r, ctx)) }),
    )
    .await;
    let mut replies = Vec::with_capacity(results.len());
    for r in results {
        let ((Collected { text, tokens }, summary), ctx) = r?;
        replies.push(ctx.done(&text, &tokens, text.contains('\n'), &summary, false));
    }
    let body = if replies.len() == 1 {
        replies.pop().unwrap_or(Value::Null)
    } else {
        Value::Array(replies)
    };
    Ok(mark(Json(body).into_response(), cut))
}

/// llama-server's stream: one `data:` event per delta with `content`,
/// `tokens` and `stop: false`, then the closing object with `stop: true`.
/// No `[DONE]` (llama-server sends it on its OpenAI routes only).
struct CompletionStream {
    ctx: ReplyContext,
    predicted: usize,
    has_new_line: bool,
}

impl Transcoder for CompletionStream {
    fn delta(&mut self, text: &str, tokens: &[TokenInfo]) -> Vec<SseEvent> {
        self.predicted += tokens.len();
        self.has_new_line |= text.contains('\n');
        let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
        let mut v = json!({
            "index": self.ctx.index,
            "content": text,
            "tokens": ids,
            "stop": false,
            "id_slot": -1,
            "tokens_predicted": self.predicted,
            "tokens_evaluated": self.ctx.prompt_len,
        });
        if self.ctx.n_probs > 0 {
            v["completion_probabilities"] =
                probabilities(&self.ctx.engine, tokens, self.ctx.n_probs);
        }
        vec![json_event(None, &v)]
    }

    fn done(&mut self, s: &Summary) -> Vec<SseEvent> {
        let v = self.ctx.done("", &[], self.has_new_line, s, true);
        vec![json_event(None, &v)]
    }

    fn error(&mut self, message: &str) -> Vec<SseEvent> {
        let e = ApiError::new(D, ErrorKind::Internal, message);
        vec![json_event(None, &e.body())]
    }
}

/// `GET /props`: the server's properties as llama-server reports them.
pub async fn props(State(state): State<AppState>) -> Response {
    let ready = match state.ready(D) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let c = state.config();
    let engine = &ready.engine;
    let tok = &engine.tokenizer;
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("");
    let template = engine
        .template
        .as_ref()
        .map(|(t, _)| t.source())
        .unwrap_or("");
    Json(json!({
        "default_generation_settings": slot_json(&state, &ready, 0, false),
        "total_slots": c.parallel,
        "model_alias": c.model_id,
        "model_path": engine.path.display().to_string(),
        "modalities": {"vision": false, "audio": false},
        "chat_template": template,
        "bos_token": text(tok.bos_id()),
        "eos_token": text(tok.eos_id()),
        "build_info": format!("anedvd {}", env!("CARGO_PKG_VERSION")),
        "endpoint_slots": true,
        "endpoint_props": false,
        "endpoint_metrics": true,
        "is_sleeping": false,
    }))
    .into_response()
}

/// One `/slots` entry (also `/props`' `default_generation_settings`).
fn slot_json(state: &AppState, ready: &Ready, id: usize, busy: bool) -> Value {
    json!({
        "id": id,
        "id_task": -1,
        "n_ctx": ready.max_seq,
        "speculative": state.config().speculative.is_some(),
        "is_processing": busy,
        "params": default_settings(state),
        "prompt": "",
    })
}

/// `GET /slots`: one entry per slot. The scheduler reports how many slots
/// are busy, not which: the first that many entries are marked processing.
/// `?fail_on_no_slot=1` answers 503 when none is idle.
pub async fn slots(State(state): State<AppState>, uri: Uri) -> Response {
    let ready = match state.ready(D) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let g = ready.scheduler.gauges();
    let fail = uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "fail_on_no_slot=1" | "fail_on_no_slot=true"))
    });
    if fail && g.slots_busy >= g.slots_total {
        return ApiError::new(D, ErrorKind::Overloaded, "no slot available").into_response();
    }
    let entries: Vec<Value> = (0..g.slots_total)
        .map(|i| slot_json(&state, &ready, i, i < g.slots_busy))
        .collect();
    Json(Value::Array(entries)).into_response()
}
