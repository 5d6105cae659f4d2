//! Rendering a request's conversation with the chat template: the render
//! options a request may set (llama-server's and vLLM's
//! `add_generation_prompt`, `continue_final_message`, `chat_template_kwargs`;
//! an assistant prefill), the prompt ids, and llama-server's
//! `POST /apply-template`, which returns the rendered text.

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::openai::decode_chat;
use crate::request::read_json;
use crate::state::AppState;
use anedvd_engine::{Engine, Message, RenderOptions, Timestamp};
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The render options in a request body: `add_generation_prompt` (default
/// true), `continue_final_message` (default: whether the last message is the
/// assistant's, i.e. a final assistant message is a prefill the reply
/// continues, as llama-server does and as Anthropic's API defines it, unless
/// `add_generation_prompt` is explicitly true), `chat_template_kwargs` (extra
/// template variables such as `enable_thinking`), over the server's defaults:
/// today's date as `date_string` and `datetime`, and `enable_thinking` =
/// `thinking` (`serve --reasoning`).
pub(crate) fn render_options(
    v: &Value,
    messages: &[Message],
    thinking: bool,
    dialect: Dialect,
) -> Result<RenderOptions, ApiError> {
    let flag = |key: &str| -> Result<Option<bool>, ApiError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(ApiError::invalid(
                dialect,
                key,
                format!("`{key}` must be a boolean, got {other}"),
            )),
        }
    };
    let add = flag("add_generation_prompt")?;
    let cont = flag("continue_final_message")?;
    if add == Some(true) && cont == Some(true) {
        return Err(ApiError::invalid(
            dialect,
            "continue_final_message",
            "`continue_final_message` and `add_generation_prompt` cannot both be true",
        ));
    }
    let last_is_assistant = messages.last().is_some_and(|m| m.role == "assistant");
    let continue_final_message = cont.unwrap_or(last_is_assistant && add != Some(true));
    // Today's date, as llama-server gives every template (Llama 3.x reads
    // `date_string`, FireFunction `datetime`); the request may override.
    let today = Timestamp::now_utc();
    let mut extra = serde_json::Map::new();
    extra.insert("date_string".into(), json!(today.strftime("%d %b %Y")));
    extra.insert("datetime".into(), json!(today.strftime("%b %d %Y")));
    // `serve --reasoning`, as llama-server passes it to every template.
    extra.insert("enable_thinking".into(), json!(thinking));
    match v.get("chat_template_kwargs") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => extra.extend(m.clone()),
        Some(other) => {
            return Err(ApiError::invalid(
                dialect,
                "chat_template_kwargs",
                format!("`chat_template_kwargs` must be an object, got {other}"),
            ))
        }
    }
    Ok(RenderOptions {
        add_generation_prompt: !continue_final_message && add.unwrap_or(true),
        continue_final_message,
        extra,
        ..RenderOptions::default()
    })
}

/// Renders `messages` with the model's chat template into prompt ids.
pub fn chat_prompt(
    engine: &Engine,
    messages: &[Message],
    opts: &RenderOptions,
    dialect: Dialect,
) -> Result<Vec<u32>, ApiError> {
    engine
        .chat_prompt_with(messages, opts)
        .map_err(|e| ApiError::new(dialect, ErrorKind::InvalidRequest, e.to_string()))
}

/// `POST /apply-template` (llama-server): a chat request's conversation
/// rendered by the chat template, as text (`{"prompt": ...}`), tools
/// included; nothing is generated. The body is decoded as a chat request.
pub async fn apply_template(State(state): State<AppState>, body: Body) -> Response {
    const D: Dialect = Dialect::OpenAi;
    let run = async {
        let v = read_json(body, state.config().max_body_bytes, D).await?;
        let decoded = decode_chat(&state, v)?;
        let ready = state.ready(D)?;
        let prompt = decoded.rendered_text(&ready.engine)?;
        Ok::<_, ApiError>(Json(json!({ "prompt": prompt })).into_response())
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}
