//! Grammars that make a reply exactly one call in a format, naming one of
//! the allowed tools, with arguments valid against its schema (llguidance's
//! Lark with `%json` for the JSON parts). One call, not several: a forced
//! reply then ends as soon as the call is complete, and a small model cannot
//! run out of tokens halfway through a second one. Markers that are single
//! special tokens of the vocabulary are matched as those tokens.

use super::{ToolChoice, ToolFormat, ToolSpec};
use anedvd_tokenizer::Tokenizer;
use serde_json::{json, Value};

pub(super) fn call_grammar(
    format: ToolFormat,
    tools: &[ToolSpec],
    choice: &ToolChoice,
    tokenizer: &Tokenizer,
) -> String {
    let allowed: Vec<&ToolSpec> = match choice {
        ToolChoice::Function(name) => tools.iter().filter(|t| &t.name == name).collect(),
        _ => tools.iter().collect(),
    };
    let marker = |text: &str| marker(tokenizer, text);
    match format {
        ToolFormat::Hermes => format!(
            "start: {} \"\\n\" body \"\\n\" {}\nbody: %json {}\n",
            marker("<tool_call>"),
            marker("</tool_call>"),
            json_layout(calls_schema(&allowed, "arguments"))
        ),
        ToolFormat::Llama3 => format!(
            "start: body\nbody: %json {}\n",
            json_layout(calls_schema(&allowed, "parameters"))
        ),
        ToolFormat::Mistral => format!(
            "start: {} body\nbody: %json {}\n",
            marker("[TOOL_CALLS]"),
            json_layout(json!({"type": "array", "minItems": 1, "maxItems": 1,
                "items": calls_schema(&allowed, "arguments")}))
        ),
        ToolFormat::Generic => format!(
            "start: body\nbody: %json {}\n",
            json_layout(json!({"type": "object",
                "properties": {"tool_call": calls_schema(&allowed, "arguments")},
                "required": ["tool_call"], "additionalProperties": false}))
        ),
        ToolFormat::Lfm2 => lfm2_grammar(&allowed, &marker),
    }
}

/// A Lark literal: the special token itself when `text` is one, else the text.
fn marker(tokenizer: &Tokenizer, text: &str) -> String {
    match tokenizer.token_id(text) {
        Some(id) if tokenizer.is_special(id) => format!("<[{id}]>"),
        _ => lark_string(text),
    }
}

fn lark_string(text: &str) -> String {
    // JSON's escapes are Lark's
    Value::String(text.to_owned()).to_string()
}

/// `{"name": <one of the tools>, <args_key>: <its schema>}`.
fn calls_schema(tools: &[&ToolSpec], args_key: &str) -> Value {
    let one = |t: &ToolSpec| {
        json!({"type": "object",
            "properties": {"name": {"const": t.name}, args_key: t.parameters},
            "required": ["name", args_key], "additionalProperties": false})
    };
    match tools {
        [t] => one(t),
        _ => json!({"anyOf": tools.iter().map(|t| one(t)).collect::<Vec<_>>()}),
    }
}

/// The schema with the compact layout the rest of the engine uses.
fn json_layout(mut schema: Value) -> String {
    if let Value::Object(o) = &mut schema {
        o.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema.to_string()
}

/// `<|tool_call_start|>[name(key=<json value>, ...)]<|tool_call_end|>` with
/// the schema's required arguments in order (optional ones left out).
fn lfm2_grammar(tools: &[&ToolSpec], marker: &dyn Fn(&str) -> String) -> String {
    let mut rules = Vec::new();
    let mut alternatives = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let props = t.parameters.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = t
            .parameters
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut seq = vec![lark_string(&format!("{}(", t.name))];
        for (j, key) in required.iter().enumerate() {
            let schema = props
                .and_then(|p| p.get(*key))
                .cloned()
                .unwrap_or_else(|| json!({}));
            let sep = if j == 0 { "" } else { ", " };
            seq.push(lark_string(&format!("{sep}{key}=")));
            seq.push(format!("arg_{i}_{j}"));
            rules.push(format!("arg_{i}_{j}: %json {}", json_layout(schema)));
        }
        seq.push(lark_string(")"));
        rules.push(format!("call_{i}: {}", seq.join(" ")));
        alternatives.push(format!("call_{i}"));
    }
    format!(
        "start: {} \"[\" call \"]\" {}\ncall: {}\n{}\n",
        marker("<|tool_call_start|>"),
        marker("<|tool_call_end|>"),
        alternatives.join(" | "),
        rules.join("\n")
    )
}
