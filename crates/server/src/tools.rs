//! Tool calling, shared by the dialects. The request's tools go to the
//! model's own chat template (which renders them its way); a template that
//! knows no tools gets them described in a system message in the generic
//! JSON format. The model's output is split into text and calls by the
//! parser of its family's format (`anedvd_engine::tool_format`), whole or as
//! a stream that never lets call markup into the text. With `required` (or
//! Anthropic `any`) or a named function, decoding is constrained by a
//! grammar, so the call always parses and its arguments fit the schema.

use crate::error::{ApiError, Dialect};
use crate::structured::compile;
use anedvd_engine::constrain::Grammar;
use anedvd_engine::tool_format::{self as toolcall, ToolChoice, ToolFormat, ToolSpec};
use anedvd_engine::{Content, Engine, GenerateParams, Message, RenderOptions};
use serde_json::{json, Value};
use std::sync::Arc;

/// The tools of one request and how they may be used.
#[derive(Debug)]
pub struct ToolUse {
    specs: Vec<ToolSpec>,
    choice: ToolChoice,
}

impl ToolUse {
    /// OpenAI `tools` and `tool_choice` (`none`, `auto`, `required`, or
    /// `{"type": "function", "function": {"name": ...}}`). `None` when no
    /// tool may be called.
    pub fn decode_openai(v: &Value, dialect: Dialect) -> Result<Option<ToolUse>, ApiError> {
        let specs = match v.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(tools) => toolcall::from_openai_tools(tools)
                .map_err(|m| ApiError::invalid(dialect, "tools", format!("tools: {m}")))?,
        };
        let choice = match v.get("tool_choice") {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::None,
                "required" => ToolChoice::Required,
                other => {
                    return Err(ApiError::invalid(
                        dialect,
                        "tool_choice",
                        format!("tool_choice {other:?}: expected \"none\", \"auto\", \"required\" or a function"),
                    ))
                }
            },
            Some(obj @ Value::Object(_)) => {
                let name = obj
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            dialect,
                            "tool_choice",
                            "tool_choice must name a function: {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        )
                    })?;
                ToolChoice::Function(name.to_owned())
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    dialect,
                    "tool_choice",
                    format!("tool_choice must be a string or an object, got {other}"),
                ))
            }
        };
        Self::checked(specs, choice, dialect)
    }

    /// Anthropic `tools` and `tool_choice` (`{"type": "auto" | "any" |
    /// "none" | "tool", "name": ...}`).
    pub fn decode_anthropic(v: &Value, dialect: Dialect) -> Result<Option<ToolUse>, ApiError> {
        let specs = match v.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(tools) => toolcall::from_anthropic_tools(tools)
                .map_err(|m| ApiError::invalid(dialect, "tools", format!("tools: {m}")))?,
        };
        let choice = match v.get("tool_choice") {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(tc) => match tc.get("type").and_then(Value::as_str) {
                Some("auto") => ToolChoice::Auto,
                Some("none") => ToolChoice::None,
                Some("any") => ToolChoice::Required,
                Some("tool") => match tc.get("name").and_then(Value::as_str) {
                    Some(name) => ToolChoice::Function(name.to_owned()),
                    None => {
                        return Err(ApiError::invalid(
                            dialect,
                            "tool_choice.name",
                            "tool_choice of type `tool` needs a `name`",
                        ))
                    }
                },
                _ => {
                    return Err(ApiError::invalid(
                        dialect,
                        "tool_choice",
                        format!("tool_choice {tc}: expected type auto, any, tool or none"),
                    ))
                }
            },
        };
        Self::checked(specs, choice, dialect)
    }

    fn checked(
        specs: Vec<ToolSpec>,
        choice: ToolChoice,
        dialect: Dialect,
    ) -> Result<Option<ToolUse>, ApiError> {
        if let ToolChoice::Function(name) = &choice {
            if !specs.iter().any(|s| &s.name == name) {
                return Err(ApiError::invalid(
                    dialect,
                    "tool_choice",
                    format!("tool_choice names `{name}`, which is not one of the tools"),
                ));
            }
        }
        if specs.is_empty() {
            if matches!(choice, ToolChoice::Required) {
                return Err(ApiError::invalid(
                    dialect,
                    "tool_choice",
                    "tool_choice `required` needs at least one tool",
                ));
            }
            return Ok(None);
        }
        if matches!(choice, ToolChoice::None) {
            return Ok(None);
        }
        Ok(Some(ToolUse { specs, choice }))
    }

    /// Renders `messages` with the tools into prompt ids (under the
    /// request's render options `base`).
    pub fn prompt(
        &self,
        engine: &Engine,
        messages: &[Message],
        base: &RenderOptions,
        dialect: Dialect,
    ) -> Result<Vec<u32>, ApiError> {
        let (messages, opts) = self.with_tools(engine, messages, base);
        engine
            .chat_prompt_with(&messages, &opts)
            .map_err(|e| ApiError::invalid(dialect, "messages", e.to_string()))
    }

    /// Sets up `params` for the tools (special tokens shown, so call
    /// markers reach the parser; a grammar when a call is required) and
    /// returns the format the output is parsed with.
    pub async fn constrain(
        &self,
        engine: &Arc<Engine>,
        params: &mut GenerateParams,
        dialect: Dialect,
    ) -> Result<ToolFormat, ApiError> {
        let format = Self::format(engine);
        params.render_special = true;
        if matches!(self.choice, ToolChoice::Required | ToolChoice::Function(_)) {
            let lark = format.call_grammar(&self.specs, &self.choice, &engine.tokenizer);
            params.grammar = Some(compile(engine, Grammar::Lark(lark), "tools", dialect).await?);
        }
        Ok(format)
    }

    /// The text [`ToolUse::prompt`] tokenizes (llama-server's `/apply-template`).
    pub fn render_text(
        &self,
        engine: &Engine,
        messages: &[Message],
        base: &RenderOptions,
        dialect: Dialect,
    ) -> Result<String, ApiError> {
        let (messages, opts) = self.with_tools(engine, messages, base);
        engine
            .chat_text(&messages, &opts)
            .map_err(|e| ApiError::invalid(dialect, "messages", e.to_string()))
    }

    /// The conversation and render options with the tools shown: to the
    /// template as `tools` where it renders them, else described in the
    /// system message.
    fn with_tools(
        &self,
        engine: &Engine,
        messages: &[Message],
        base: &RenderOptions,
    ) -> (Vec<Message>, RenderOptions) {
        let format = Self::format(engine);
        let template_tools: Vec<Value> = self.specs.iter().map(openai_tool).collect();
        let mut messages = messages.to_vec();
        let native = Self::template_source(engine).contains("tools");
        if !native || format == ToolFormat::Generic {
            describe_tools(&mut messages, &template_tools);
        }
        let opts = RenderOptions {
            tools: native.then(|| Value::Array(template_tools)),
            ..base.clone()
        };
        (messages, opts)
    }

    /// The chat template's source (empty without one).
    fn template_source(engine: &Engine) -> &str {
        engine
            .template
            .as_ref()
            .map(|(t, _)| t.source())
            .unwrap_or_default()
    }

    /// The call format the model's template implies.
    fn format(engine: &Engine) -> ToolFormat {
        ToolFormat::detect(Self::template_source(engine), &engine.tokenizer)
    }
}

/// A tool in the OpenAI shape chat templates expect.
fn openai_tool(spec: &ToolSpec) -> Value {
    // OpenAI's key order (name, description, parameters): templates print
    // the object with `tojson`, which keeps it.
    let mut f = serde_json::Map::new();
    f.insert("name".into(), json!(spec.name));
    if let Some(d) = &spec.description {
        f.insert("description".into(), json!(d));
    }
    f.insert("parameters".into(), spec.parameters.clone());
    json!({"type": "function", "function": f})
}

/// For a template without tool support: the tools and the generic reply
/// format in the system message (what llama.cpp's generic format does).
fn describe_tools(messages: &mut Vec<Message>, tools: &[Value]) {
    let listing = serde_json::to_string_pretty(tools).unwrap_or_default();
    let text = format!(
        "You can call these tools:\n{listing}\n\nTo call a tool, reply with only a JSON object \
         {{\"tool_call\": {{\"name\": <tool name>, \"arguments\": <arguments object>}}}}. \
         To answer without a tool, reply with {{\"response\": <your answer>}}."
    );
    match messages.first_mut() {
        Some(m) if m.role == "system" => {
            let old = m.text();
            m.content = Some(Content::Text(format!("{old}\n\n{text}")));
        }
        _ => messages.insert(0, Message::system(text)),
    }
}

/// OpenAI assistant messages carry call arguments as JSON text; templates
/// index into them as objects, so they are parsed where they are JSON.
pub fn arguments_as_objects(messages: &mut [Message]) {
    for m in messages {
        for call in m.tool_calls.iter_mut().flatten() {
            if let Value::String(s) = &call.function.arguments {
                if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(s) {
                    call.function.arguments = v;
                }
            }
        }
    }
}

/// A fresh tool-call id with the dialect's prefix (`call_`, `toolu_`).
pub fn call_id(prefix: &str) -> String {
    crate::request::new_id(prefix)
}
