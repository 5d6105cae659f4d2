//! Finding a chat template and the special-token strings in HF tokenizer files given as text.

use serde_json::Value;

use crate::error::{Error, Result};

const WHAT: &str = "tokenizer_config.json";

/// One named template (`default`, `tool_use`, `rag`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedTemplate {
    /// The template's name; a single-string `chat_template` is named `default`.
    pub name: String,
    /// The Jinja source.
    pub source: String,
}

/// Special-token strings from a tokenizer config (`bos_token`, ... as strings or AddedToken objects).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `bos_token`.
    pub bos: Option<String>,
    /// `eos_token`.
    pub eos: Option<String>,
    /// `unk_token`.
    pub unk: Option<String>,
    /// `pad_token`.
    pub pad: Option<String>,
}

fn parse(json: &str) -> Result<Value> {
    serde_json::from_str(json).map_err(|e| Error::Json {
        what: WHAT,
        message: e.to_string(),
    })
}

fn invalid(key: &str, message: &str) -> Error {
    Error::InvalidConfig {
        what: WHAT,
        key: key.to_owned(),
        message: message.to_owned(),
    }
}

/// All templates in a `tokenizer_config.json`: `chat_template` as a string (named `default`) or as
/// a list of `{"name": ..., "template": ...}`. Empty when there is none.
pub fn templates_from_tokenizer_config(json: &str) -> Result<Vec<NamedTemplate>> {
    let config = parse(json)?;
    match config.get("chat_template") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![NamedTemplate {
            name: "default".into(),
            source: s.clone(),
        }]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let name = item.get("name").and_then(Value::as_str);
                let source = item.get("template").and_then(Value::as_str);
                match (name, source) {
                    (Some(n), Some(s)) => Ok(NamedTemplate {
                        name: n.to_owned(),
                        source: s.to_owned(),
                    }),
                    _ => Err(invalid(
                        "chat_template",
                        "list items need string `name` and `template`",
                    )),
                }
            })
            .collect(),
        Some(_) => Err(invalid(
            "chat_template",
            "expected a string or a list of named templates",
        )),
    }
}

/// Pick a template the way transformers' `get_chat_template` does: the one named `name` when
/// given; otherwise `tool_use` when tools are passed and it exists, else `default`.
pub fn select_template<'a>(
    templates: &'a [NamedTemplate],
    name: Option<&str>,
    with_tools: bool,
) -> Option<&'a str> {
    let find = |n: &str| {
        templates
            .iter()
            .find(|t| t.name == n)
            .map(|t| t.source.as_str())
    };
    match name {
        Some(n) => find(n),
        None if with_tools => find("tool_use").or_else(|| find("default")),
        None => find("default"),
    }
}

/// The default chat template of a `tokenizer_config.json`, if it has one.
pub fn template_from_tokenizer_config(json: &str) -> Result<Option<String>> {
    let templates = templates_from_tokenizer_config(json)?;
    Ok(select_template(&templates, None, false).map(str::to_owned))
}

/// The template of an HF model directory: `chat_template.jinja` when present (transformers gives it
/// precedence), else `tokenizer_config.json`'s default.
pub fn template_from_hf_files(
    chat_template_jinja: Option<&str>,
    tokenizer_config: Option<&str>,
) -> Result<Option<String>> {
    if let Some(t) = chat_template_jinja {
        return Ok(Some(t.to_owned()));
    }
    match tokenizer_config {
        Some(json) => template_from_tokenizer_config(json),
        None => Ok(None),
    }
}

/// `bos_token`, `eos_token`, `unk_token`, `pad_token` from a `tokenizer_config.json`; each may be a
/// string or an AddedToken object with a `content` field.
pub fn special_tokens_from_tokenizer_config(json: &str) -> Result<SpecialTokens> {
    let config = parse(json)?;
    let get = |key: &str| -> Result<Option<String>> {
        match config.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Object(o)) => match o.get("content") {
                Some(Value::String(s)) => Ok(Some(s.clone())),
                _ => Err(invalid(key, "AddedToken object without a string `content`")),
            },
            Some(_) => Err(invalid(key, "expected a string or an AddedToken object")),
        }
    };
    Ok(SpecialTokens {
        bos: get("bos_token")?,
        eos: get("eos_token")?,
        unk: get("unk_token")?,
        pad: get("pad_token")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_and_list_forms() {
        let s = r#"{"chat_template": "{{ x }}", "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"}"#;
        assert_eq!(
            template_from_tokenizer_config(s).ok().flatten().as_deref(),
            Some("{{ x }}")
        );
        let tokens = special_tokens_from_tokenizer_config(s)
            .ok()
            .unwrap_or_default();
        assert_eq!(tokens.bos.as_deref(), Some("<s>"));
        assert_eq!(tokens.eos.as_deref(), Some("</s>"));
        assert_eq!(tokens.pad, None);

        let l = r#"{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}"#;
        assert_eq!(
            template_from_tokenizer_config(l).ok().flatten().as_deref(),
            Some("D")
        );
        let all = templates_from_tokenizer_config(l).unwrap_or_default();
        assert_eq!(select_template(&all, None, true), Some("T"));
        assert_eq!(select_template(&all, Some("rag"), false), None);

        assert_eq!(template_from_tokenizer_config("{}").ok().flatten(), None);
        assert!(matches!(
            template_from_tokenizer_config("{"),
            Err(Error::Json { .. })
        ));
        assert!(matches!(
            template_from_tokenizer_config(r#"{"chat_template": 3}"#),
            Err(Error::InvalidConfig { .. })
        ));
        assert_eq!(
            template_from_hf_files(Some("J"), Some(s))
                .ok()
                .flatten()
                .as_deref(),
            Some("J")
        );
    }
}
