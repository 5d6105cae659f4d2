//! `POST /v1/embeddings`: the loaded model's final hidden states pooled
//! over each input (`--pooling mean|last`) at unit length
//! (`Engine::embed`). They are a generative model's states, not a trained
//! embedding model's vectors; see `anedvd_engine::Pooling`. Each input runs
//! in a session of its own on a blocking thread, beside the slots.

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::request::{read_json, within};
use crate::state::AppState;
use anedvd_engine::Engine;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde_json::{json, Value};

const D: Dialect = Dialect::OpenAi;

/// Most inputs one request may carry (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// One input: a text or token ids.
#[derive(Debug, Clone, PartialEq)]
enum Input {
    Text(String),
    Ids(Vec<u32>),
}

/// A decoded request.
#[derive(Debug)]
pub(crate) struct EmbeddingRequest {
    inputs: Vec<Input>,
    base64: bool,
    dimensions: Option<u64>,
}

fn ids(v: &[Value]) -> Option<Vec<u32>> {
    v.iter()
        .map(|x| x.as_u64().and_then(|i| u32::try_from(i).ok()))
        .collect()
}

/// Decodes a body (every check that needs no model).
pub(crate) fn decode(v: &Value) -> Result<EmbeddingRequest, ApiError> {
    let bad = |m: &str| ApiError::invalid(D, "input", m.to_owned());
    let inputs = match v.get("input") {
        Some(Value::String(s)) => vec![Input::Text(s.clone())],
        Some(Value::Array(items)) if items.is_empty() => return Err(bad("`input` is empty")),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .map(|s| Input::Text(s.as_str().unwrap_or_default().to_owned()))
            .collect(),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            vec![Input::Ids(
                ids(items).ok_or_else(|| bad("token ids must be integers"))?,
            )]
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_array) => items
            .iter()
            .map(|a| {
                ids(a.as_array().map_or(&[][..], Vec::as_slice))
                    .map(Input::Ids)
                    .ok_or_else(|| bad("token ids must be integers"))
            })
            .collect::<Result<_, _>>()?,
        None | Some(Value::Null) => return Err(bad("`input` is required")),
        Some(_) => {
            return Err(bad(
                "`input` must be a string, a list of strings, token ids or lists of token ids",
            ))
        }
    };
    if inputs.len() > MAX_INPUTS {
        return Err(bad(&format!(
            "{} inputs (at most {MAX_INPUTS})",
            inputs.len()
        )));
    }
    let base64 = match v.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                D,
                "encoding_format",
                format!("encoding_format {other:?}: expected \"float\" or \"base64\""),
            ))
        }
    };
    let dimensions = match v.get("dimensions") {
        None | Some(Value::Null) => None,
        Some(d) => Some(d.as_u64().ok_or_else(|| {
            ApiError::invalid(D, "dimensions", "`dimensions` must be a positive integer")
        })?),
    };
    Ok(EmbeddingRequest {
        inputs,
        base64,
        dimensions,
    })
}

/// Token ids of every input, checked against the vocabulary and `max_seq`.
fn tokenize(engine: &Engine, inputs: &[Input], max_seq: usize) -> Result<Vec<Vec<u32>>, ApiError> {
    let vocab = engine.tokenizer.vocab_size();
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let ids = match input {
                Input::Text(t) => engine
                    .raw_prompt(t)
                    .map_err(|e| ApiError::new(D, ErrorKind::InvalidRequest, e.to_string()))?,
                Input::Ids(ids) => {
                    if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                        return Err(ApiError::invalid(
                            D,
                            "input",
                            format!("input {i}: token id {bad} is out of the vocabulary ({vocab})"),
                        ));
                    }
                    ids.clone()
                }
            };
            if ids.is_empty() {
                return Err(ApiError::invalid(
                    D,
                    "input",
                    format!("input {i} has no tokens"),
                ));
            }
            if ids.len() > max_seq {
                return Err(ApiError::context_length(D, ids.len(), max_seq));
            }
            Ok(ids)
        })
        .collect()
}

/// `POST /v1/embeddings`.
pub async fn embeddings(State(state): State<AppState>, body: Body) -> Response {
    let guard = state.begin("embeddings");
    let deadline = state.deadline();
    let work = async {
        let v = read_json(body, state.config().max_body_bytes, D).await?;
        let req = decode(&v)?;
        let ready = state.ready(D)?;
        let engine = ready.engine.clone();
        let width = engine.config.n_embd;
        if let Some(d) = req.dimensions {
            if d != width as u64 {
                return Err(ApiError::invalid(
                    D,
                    "dimensions",
                    format!("this model's embeddings have {width} dimensions, not {d}"),
                ));
            }
        }
        let tokens = tokenize(&engine, &req.inputs, ready.max_seq)?;
        let n_tokens: usize = tokens.iter().map(Vec::len).sum();
        let pooling = state.config().pooling;
        let vectors = tokio::task::spawn_blocking(move || {
            tokens
                .iter()
                .map(|t| engine.embed(t, pooling))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| ApiError::new(D, ErrorKind::Internal, e.to_string()))?
        .map_err(|e| ApiError::new(D, ErrorKind::InvalidRequest, e.to_string()))?;
        let data: Vec<Value> = vectors
            .iter()
            .enumerate()
            .map(|(index, v)| {
                let embedding = if req.base64 {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                } else {
                    json!(v)
                };
                json!({"object": "embedding", "index": index, "embedding": embedding})
            })
            .collect();
        Ok(Json(json!({
            "object": "list",
            "data": data,
            "model": state.config().model_id,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }))
        .into_response())
    };
    let result = within(deadline, D, work).await;
    guard.respond(result)
}
