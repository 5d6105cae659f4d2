//! Request fields that shape the output beyond sampling, shared by the
//! routes: structured output (OpenAI `response_format`, llama-server's
//! `grammar` and `json_schema`) and `logit_bias` in both the OpenAI form
//! (`{"id": bias}`) and llama-server's (`[[id or text, bias or false]]`).
//! They are read without the model ([`Shaping::decode`]) and resolved
//! against it once it is known ([`Shaping::apply`]: ids checked against the
//! vocabulary, texts tokenized, the grammar compiled off the async runtime).

use crate::error::{ApiError, Dialect, ErrorKind};
use anedvd_engine::constrain::Grammar;
use anedvd_engine::{Engine, GenerateParams};
use serde_json::Value;
use std::sync::Arc;

/// One `logit_bias` entry before the vocabulary is known.
#[derive(Debug, Clone, PartialEq)]
enum BiasTarget {
    Id(u64),
    /// llama-server: every token of this text.
    Text(String),
}

/// Output-shaping fields of one request, read but not yet resolved.
#[derive(Debug, Default)]
pub struct Shaping {
    /// The grammar the output must match, and the field that gave it.
    pub grammar: Option<(Grammar, &'static str)>,
    bias: Vec<(BiasTarget, f32)>,
}

impl Shaping {
    /// Reads `response_format`, `grammar`, `json_schema` and `logit_bias`
    /// from a request body (at most one of the three grammar fields).
    pub fn decode(v: &Value, dialect: Dialect) -> Result<Shaping, ApiError> {
        let mut grammars = Vec::new();
        if let Some(g) = response_format(v.get("response_format"), dialect)? {
            grammars.push((g, "response_format"));
        }
        match v.get("grammar") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.trim().is_empty() => {}
            Some(Value::String(s)) => grammars.push((Grammar::Gbnf(s.clone()), "grammar")),
            Some(other) => {
                return Err(ApiError::invalid(
                    dialect,
                    "grammar",
                    format!("`grammar` must be a GBNF grammar as a string, got {other}"),
                ))
            }
        }
        match v.get("json_schema") {
            None | Some(Value::Null) => {}
            Some(schema @ (Value::Object(_) | Value::Bool(true))) => grammars.push((
                Grammar::JsonSchema {
                    schema: schema.clone(),
                    strict: false,
                },
                "json_schema",
            )),
            Some(other) => {
                return Err(ApiError::invalid(
                    dialect,
                    "json_schema",
                    format!("`json_schema` must be a JSON schema object, got {other}"),
                ))
            }
        }
        if grammars.len() > 1 {
            let names: Vec<&str> = grammars.iter().map(|(_, f)| *f).collect();
            return Err(ApiError::invalid(
                dialect,
                names[1],
                format!(
                    "use only one of `response_format`, `grammar` and `json_schema` (got {})",
                    names.join(" and ")
                ),
            ));
        }
        Ok(Shaping {
            grammar: grammars.pop(),
            bias: logit_bias(v.get("logit_bias"), dialect)?,
        })
    }

    /// Resolves the fields against `engine` into `params`: biases by token
    /// id, the grammar compiled (a 400 naming the field when it is invalid).
    pub async fn apply(
        self,
        engine: &Arc<Engine>,
        params: &mut GenerateParams,
        dialect: Dialect,
    ) -> Result<(), ApiError> {
        let vocab = engine.tokenizer.vocab_size();
        let mut bias = Vec::with_capacity(self.bias.len());
        for (target, b) in self.bias {
            match target {
                BiasTarget::Id(id) => match u32::try_from(id) {
                    Ok(id) if (id as usize) < vocab => bias.push((id, b)),
                    _ => {
                        return Err(ApiError::invalid(
                            dialect,
                            "logit_bias",
                            format!("logit_bias: token id {id} is out of the vocabulary ({vocab})"),
                        ))
                    }
                },
                BiasTarget::Text(text) => {
                    let ids = engine.tokenizer.encode(&text, false, false).map_err(|e| {
                        ApiError::invalid(dialect, "logit_bias", format!("logit_bias: {e}"))
                    })?;
                    bias.extend(ids.into_iter().map(|id| (id, b)));
                }
            }
        }
        params.sampling.logit_bias = bias;
        if let Some((grammar, field)) = self.grammar {
            params.grammar = Some(compile(engine, grammar, field, dialect).await?);
        }
        Ok(())
    }
}

/// Compiles `grammar` on a blocking thread (the first grammar of a model
/// also builds its token trie); an invalid grammar is a 400 naming `field`.
pub async fn compile(
    engine: &Arc<Engine>,
    grammar: Grammar,
    field: &str,
    dialect: Dialect,
) -> Result<anedvd_engine::constrain::CompiledGrammar, ApiError> {
    let engine = engine.clone();
    let compiled = tokio::task::spawn_blocking(move || engine.compile_grammar(&grammar))
        .await
        .map_err(|e| {
            ApiError::new(
                dialect,
                ErrorKind::Internal,
                format!("compiling the grammar: {e}"),
            )
        })?;
    compiled.map_err(|e| ApiError::invalid(dialect, field, format!("{field}: {e}")))
}

/// OpenAI `response_format`: `text`, `json_object` (llama-server: with an
/// optional `schema`), or `json_schema` with `json_schema.schema` and
/// `strict`.
fn response_format(rf: Option<&Value>, dialect: Dialect) -> Result<Option<Grammar>, ApiError> {
    let bad = |param: &str, message: String| ApiError::invalid(dialect, param, message);
    let Some(rf) = rf.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(o) = rf.as_object() else {
        return Err(bad(
            "response_format",
            format!("`response_format` must be an object, got {rf}"),
        ));
    };
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(match o.get("schema") {
            Some(schema @ Value::Object(_)) => Grammar::JsonSchema {
                schema: schema.clone(),
                strict: false,
            },
            _ => Grammar::JsonObject,
        })),
        Some("json_schema") => {
            let Some(js) = o.get("json_schema").and_then(Value::as_object) else {
                return Err(bad(
                    "response_format.json_schema",
                    "`response_format.json_schema` must be an object with a `schema`".into(),
                ));
            };
            let strict = match js.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(bad(
                        "response_format.json_schema.strict",
                        format!("`strict` must be a boolean, got {other}"),
                    ))
                }
            };
            match js.get("schema") {
                Some(schema @ (Value::Object(_) | Value::Bool(true))) => {
                    Ok(Some(Grammar::JsonSchema {
                        schema: schema.clone(),
                        strict,
                    }))
                }
                // OpenAI: a json_schema without a schema is any JSON object.
                None | Some(Value::Null) => Ok(Some(Grammar::JsonObject)),
                Some(other) => Err(bad(
                    "response_format.json_schema.schema",
                    format!("`schema` must be a JSON schema object, got {other}"),
                )),
            }
        }
        Some(other) => Err(bad(
            "response_format.type",
            format!(
                "`response_format.type` is {other:?}: expected \"text\", \"json_object\" or \"json_schema\""
            ),
        )),
        None => Err(bad(
            "response_format.type",
            "`response_format` needs a `type`".into(),
        )),
    }
}

/// Most `logit_bias` entries read (OpenAI allows 300).
const MAX_BIAS_ENTRIES: usize = 1024;

/// `logit_bias`: OpenAI's object `{"123": -100}` (bias in [-100, 100]; a key
/// that is not an id is a text, as llama-server reads it) or
/// llama-server's list `[[123, -1.5], [123, false], ["text", 2.0]]`
/// (`false` bans the token).
fn logit_bias(v: Option<&Value>, dialect: Dialect) -> Result<Vec<(BiasTarget, f32)>, ApiError> {
    let bad = |message: String| ApiError::invalid(dialect, "logit_bias", message);
    let bias_of = |key: &str, b: &Value| -> Result<f32, ApiError> {
        match b {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            Value::Number(n) => match n.as_f64() {
                Some(x) if (-100.0..=100.0).contains(&x) => Ok(x as f32),
                _ => Err(bad(format!(
                    "logit_bias for {key} is {n}: expected a number in [-100, 100] or false"
                ))),
            },
            other => Err(bad(format!(
                "logit_bias for {key} is {other}: expected a number in [-100, 100] or false"
            ))),
        }
    };
    let mut out = Vec::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            if o.len() > MAX_BIAS_ENTRIES {
                return Err(bad(format!(
                    "logit_bias has {} entries (at most {MAX_BIAS_ENTRIES})",
                    o.len()
                )));
            }
            for (key, b) in o {
                // A key that is not a token id is a text (llama-server's reading).
                let target = match key.trim().parse::<u64>() {
                    Ok(id) => BiasTarget::Id(id),
                    Err(_) => BiasTarget::Text(key.clone()),
                };
                out.push((target, bias_of(key, b)?));
            }
        }
        Some(Value::Array(a)) => {
            if a.len() > MAX_BIAS_ENTRIES {
                return Err(bad(format!(
                    "logit_bias has {} entries (at most {MAX_BIAS_ENTRIES})",
                    a.len()
                )));
            }
            for (i, entry) in a.iter().enumerate() {
                let pair = entry.as_array().filter(|p| p.len() == 2);
                let Some(pair) = pair else {
                    return Err(bad(format!(
                        "logit_bias[{i}] must be a pair [token id or text, bias], got {entry}"
                    )));
                };
                let target = match &pair[0] {
                    Value::Number(n) => match n.as_u64() {
                        Some(id) => BiasTarget::Id(id),
                        None => return Err(bad(format!("logit_bias[{i}]: {n} is not a token id"))),
                    },
                    Value::String(s) => BiasTarget::Text(s.clone()),
                    other => {
                        return Err(bad(format!(
                            "logit_bias[{i}]: {other} is neither a token id nor a text"
                        )))
                    }
                };
                out.push((target, bias_of(&format!("logit_bias[{i}]"), &pair[1])?));
            }
        }
        Some(other) => {
            return Err(bad(format!(
                "`logit_bias` must be an object of token id → bias, or a list of pairs; got {other}"
            )))
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const D: Dialect = Dialect::OpenAi;

    fn decode(v: Value) -> Result<Shaping, ApiError> {
        Shaping::decode(&v, D)
    }

    #[test]
    fn response_formats_map_to_grammars() {
        assert!(decode(json!({"response_format": {"type": "text"}}))
            .expect("text")
            .grammar
            .is_none());
        let g = decode(json!({"response_format": {"type": "json_object"}})).expect("object");
        assert_eq!(g.grammar, Some((Grammar::JsonObject, "response_format")));
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let g = decode(json!({"response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "strict": true, "schema": schema}}}))
        .expect("schema");
        assert_eq!(
            g.grammar,
            Some((
                Grammar::JsonSchema {
                    schema,
                    strict: true
                },
                "response_format"
            ))
        );
        let g = decode(json!({"grammar": "root ::= \"a\""})).expect("gbnf");
        assert!(matches!(g.grammar, Some((Grammar::Gbnf(_), "grammar"))));
        let g = decode(json!({"json_schema": {"type": "string"}})).expect("json_schema");
        assert!(matches!(
            g.grammar,
            Some((Grammar::JsonSchema { .. }, "json_schema"))
        ));
    }

    #[test]
    fn bad_shaping_fields_name_the_field() {
        let cases = [
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format.type",
            ),
            (json!({"response_format": "json"}), "response_format"),
            (
                json!({"response_format": {"type": "json_schema"}}),
                "response_format.json_schema",
            ),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}}),
                "response_format.json_schema.schema",
            ),
            (json!({"grammar": 5}), "grammar"),
            (json!({"json_schema": "x"}), "json_schema"),
            (
                json!({"grammar": "root ::= \"a\"", "json_schema": {}}),
                "json_schema",
            ),
            (json!({"logit_bias": {"abc": "high"}}), "logit_bias"),
            (json!({"logit_bias": {"5": 101}}), "logit_bias"),
            (json!({"logit_bias": [[1]]}), "logit_bias"),
            (json!({"logit_bias": [[1, "x"]]}), "logit_bias"),
            (json!({"logit_bias": 3}), "logit_bias"),
        ];
        for (body, param) in cases {
            let e = decode(body.clone()).expect_err(&body.to_string());
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn logit_bias_in_both_forms() {
        let s = decode(json!({"logit_bias": {"7": -100, "9": 2.5}})).expect("openai");
        assert_eq!(
            s.bias,
            vec![(BiasTarget::Id(7), -100.0), (BiasTarget::Id(9), 2.5)]
        );
        let s = decode(json!({"logit_bias": [[7, false], ["hi", 1]]})).expect("llama");
        assert_eq!(
            s.bias,
            vec![
                (BiasTarget::Id(7), f32::NEG_INFINITY),
                (BiasTarget::Text("hi".into()), 1.0)
            ]
        );
    }
}
