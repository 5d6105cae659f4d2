//! Tool calls in model output, per family: which convention a model uses
//! (detected from its chat template), the tools a request offers, splitting
//! a reply into text and calls (whole, or streamed without letting call
//! markup into the text: [`ToolStream`]), and a grammar that makes a reply
//! one or more valid calls ([`ToolFormat::call_grammar`]).
//!
//! The conventions, as llama.cpp's `common/chat.cpp` and vLLM's tool parsers
//! read them:
//! - Hermes (Qwen2.5/3, SmolLM3, Hermes): `<tool_call>\n{"name": ..,
//!   "arguments": {..}}\n</tool_call>`, one block per call.
//! - Llama 3.1/3.2 JSON: the reply is `{"name": .., "parameters": {..}}`
//!   (`arguments` also read), optionally after `<|python_tag|>`, several
//!   separated by `;`.
//! - Mistral: `[TOOL_CALLS][{"name": .., "arguments": {..}}, ..]`, or the
//!   newer `[TOOL_CALLS]name[ARGS]{..}` per call.
//! - LFM2: `<|tool_call_start|>[name(arg=value, ..), ..]<|tool_call_end|>`,
//!   Python call syntax.
//! - Generic (any other template, llama.cpp's generic format): the whole
//!   reply is `{"tool_call": {"name": .., "arguments": {..}}}`,
//!   `{"tool_calls": [..]}` or `{"response": "text"}`.

mod grammar;
mod pythonic;
mod stream;

pub use stream::{StreamItem, ToolStream};

use anedvd_tokenizer::Tokenizer;
use serde_json::{Map, Value};

/// A model family's tool-call convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{json}</tool_call>` blocks.
    Hermes,
    /// A bare `{"name", "parameters"}` object (Llama 3.1/3.2).
    Llama3,
    /// `[TOOL_CALLS]` then a JSON list, or `name[ARGS]{json}`.
    Mistral,
    /// `<|tool_call_start|>[python calls]<|tool_call_end|>` (LFM2).
    Lfm2,
    /// The whole reply is a JSON object naming a call or a response.
    Generic,
}

/// One tool a request offers.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Function name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// JSON schema of its arguments.
    pub parameters: Value,
}

/// Which calls a reply may or must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// Calls or text, as the model decides.
    Auto,
    /// No calls.
    None,
    /// At least one call.
    Required,
    /// A call of this function.
    Function(String),
}

/// A call found in a reply.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    /// Function name.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: Value,
}

/// A reply split into text and calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The text outside the calls (trimmed).
    pub content: String,
    /// The calls, in order.
    pub calls: Vec<ParsedCall>,
}

impl ToolFormat {
    /// The convention of a chat template (its Jinja source; LFM2's lists
    /// tools between `<|tool_list_start|>` markers and leaves the call
    /// markers to the model); `Generic` when it shows none.
    pub fn detect(template_source: &str, _tokenizer: &Tokenizer) -> ToolFormat {
        let has = |s: &str| template_source.contains(s);
        if has("<tool_call>") {
            ToolFormat::Hermes
        } else if has("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if has("<|tool_call_start|>") || has("<|tool_list_start|>") {
            ToolFormat::Lfm2
        } else if has("<|python_tag|>") || (has("<|start_header_id|>") && has("parameters")) {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// Splits a whole reply into text and calls (the same split as
    /// streaming it through [`ToolFormat::stream`]).
    pub fn parse(self, text: &str) -> Parsed {
        let mut stream = self.stream();
        let mut items = stream.push(text);
        items.extend(stream.finish());
        let mut out = Parsed::default();
        for item in items {
            match item {
                StreamItem::Content(t) => out.content.push_str(&t),
                StreamItem::Call(c) => out.calls.push(c),
            }
        }
        out.content = out.content.trim().to_owned();
        out
    }

    /// A streaming splitter for this format.
    pub fn stream(self) -> ToolStream {
        ToolStream::new(self)
    }

    /// A Lark grammar (llguidance) whose every sentence is one or more
    /// calls in this format (one for a named function) with arguments
    /// valid against the tool's schema; `tokenizer` says which markers are
    /// single special tokens.
    pub fn call_grammar(
        self,
        tools: &[ToolSpec],
        choice: &ToolChoice,
        tokenizer: &Tokenizer,
    ) -> String {
        grammar::call_grammar(self, tools, choice, tokenizer)
    }
}

/// The OpenAI `tools` array: `[{"type": "function", "function": {"name",
/// "description", "parameters"}}]`.
pub fn from_openai_tools(v: &Value) -> Result<Vec<ToolSpec>, String> {
    let list = v.as_array().ok_or("`tools` must be an array")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") | None => {}
            Some(other) => {
                return Err(format!(
                    "tools[{i}].type is {other:?}: only \"function\" tools are supported"
                ))
            }
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("tools[{i}] needs a `function` object"))?;
        out.push(spec(f, "parameters", &format!("tools[{i}].function"))?);
    }
    unique(&out)?;
    Ok(out)
}

/// The Anthropic `tools` array: `[{"name", "description", "input_schema"}]`.
pub fn from_anthropic_tools(v: &Value) -> Result<Vec<ToolSpec>, String> {
    let list = v.as_array().ok_or("`tools` must be an array")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let o = t
            .as_object()
            .ok_or_else(|| format!("tools[{i}] must be an object"))?;
        out.push(spec(o, "input_schema", &format!("tools[{i}]"))?);
    }
    unique(&out)?;
    Ok(out)
}

fn spec(o: &Map<String, Value>, schema_key: &str, at: &str) -> Result<ToolSpec, String> {
    let name = o
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{at}.name is missing"))?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err(format!(
            "{at}.name {name:?} may only hold letters, digits, `_`, `-` and `.`"
        ));
    }
    let parameters = match o.get(schema_key) {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(other) => {
            return Err(format!(
                "{at}.{schema_key} must be a JSON schema object, got {other}"
            ))
        }
    };
    Ok(ToolSpec {
        name: name.to_owned(),
        description: o
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        parameters,
    })
}

fn unique(specs: &[ToolSpec]) -> Result<(), String> {
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|t| t.name == s.name) {
            return Err(format!("tools[{i}]: the name {:?} is used twice", s.name));
        }
    }
    Ok(())
}

/// A call from a JSON object with a name and `arguments` (or `parameters`,
/// Llama's key); arguments given as JSON text are parsed.
fn call_from_json(v: &Value) -> Option<ParsedCall> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?.to_owned();
    let arguments = match o.get("arguments").or_else(|| o.get("parameters")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => serde_json::from_str(s).ok().filter(Value::is_object)?,
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return None,
    };
    Some(ParsedCall { name, arguments })
}

#[cfg(test)]
mod tests;
