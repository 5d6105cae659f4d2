//! Compiling and rendering a chat template the way transformers' `apply_chat_template` does.

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{AutoEscape, Environment, ErrorKind, State, UndefinedBehavior};
use serde_json::Map;
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::message::Message;
use crate::pyfmt::{self, DumpOptions};
use crate::strftime::Timestamp;

const TEMPLATE_NAME: &str = "chat_template";
/// The marker transformers appends to a message it is asked to continue.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// Cut a render at the continue marker, as transformers does.
fn cut_at_continue_tag(rendered: String, final_text: &str) -> Result<String> {
    let tag = CONTINUE_TAG.trim_matches(pyfmt::is_py_space);
    let final_text = final_text.trim_matches(pyfmt::is_py_space);
    let (Some(pos), true) = (rendered.rfind(tag), rendered.contains(final_text)) else {
        return Err(Error::Continue {
            reason: "the final message does not appear in the rendered chat".to_owned(),
        });
    };
    let mut out = rendered;
    let keeps_spacing = out[pos..].starts_with(CONTINUE_TAG);
    out.truncate(pos);
    if !keeps_spacing {
        let end = out.trim_end_matches(pyfmt::is_py_space).len();
        out.truncate(end);
    }
    Ok(out)
}

/// Resource limits for one render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Instruction budget (minijinja fuel) per render.
    pub fuel: u64,
    /// Largest rendered prompt in bytes.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // The golden conversations cost under 1,000 steps each; a 16 MiB prompt is
        // millions of tokens.
        Limits {
            fuel: 10_000_000,
            max_output_bytes: 16 << 20,
        }
    }
}

/// Per-render inputs besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// Append the header that opens an assistant turn.
    pub add_generation_prompt: bool,
    /// Tool schemas (`[{"type": "function", "function": {...}}, ...]`), shown as `tools`.
    pub tools: Option<serde_json::Value>,
    /// RAG documents, shown as `documents`.
    pub documents: Option<serde_json::Value>,
    /// Extra template variables (e.g. `enable_thinking`); they override `bos_token`/`eos_token`.
    pub extra: Map<String, serde_json::Value>,
    /// The clock `strftime_now` reads; `None` is the current UTC time.
    pub now: Option<Timestamp>,
    /// Leave the final message open so the model continues it (transformers'
    /// `continue_final_message=True`, e.g. an assistant prefill); excludes `add_generation_prompt`.
    pub continue_final_message: bool,
}

/// A compiled chat template plus the special tokens it is rendered with.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    limits: Limits,
    source: String,
}

/// Marks the error created by `raise_exception` so it can be told apart from other failures.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

thread_local! {
    static CLOCK: std::cell::Cell<Option<Timestamp>> = const { std::cell::Cell::new(None) };
}

/// Rewrite transformers' `{% generation %}...{% endgeneration %}` (AssistantTracker extension, a
/// pass-through when rendering) into `{% if true %}...{% endif %}`, keeping the `-` whitespace
/// markers so trimming is unchanged.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(pos) = rest.find("{%") {
        out.push_str(&rest[..pos]);
        let tag = &rest[pos..];
        // Look for the closing `%}` after the opening `{%`: in `{%}` the `%` would otherwise
        // close the tag it opens and `&tag[2..end]` would be an inverted range (a panic).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lead} if true {trail}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lead} endif {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

fn tojson(
    value: &Value,
    args: Rest<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    // Python signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    let names = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > names.len() {
        return Err(minijinja::Error::from(ErrorKind::TooManyArguments));
    }
    let mut slots: [Option<Value>; 4] = Default::default();
    for (slot, v) in slots.iter_mut().zip(args.iter()) {
        *slot = Some(v.clone());
    }
    for (i, name) in names.iter().enumerate() {
        if kwargs.has(name) {
            slots[i] = Some(kwargs.get::<Value>(name)?);
        }
    }
    kwargs.assert_all_used()?;
    let [ensure_ascii, indent, separators, sort_keys] = slots;
    let truthy = |v: &Option<Value>| v.as_ref().is_some_and(|v| v.is_true());
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                let n = i64::try_from(v.clone())?;
                Some(" ".repeat(usize::try_from(n).unwrap_or(0).min(64)))
            }
        },
    };
    let separators = match separators {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let items: Vec<Value> = v.try_iter()?.collect();
            match items.as_slice() {
                [a, b] => Some((pyfmt::py_str(a), pyfmt::py_str(b))),
                _ => {
                    return Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        "separators must be a pair of strings",
                    ))
                }
            }
        }
        _ => None,
    };
    let opts = DumpOptions {
        ensure_ascii: truthy(&ensure_ascii),
        indent,
        separators,
        sort_keys: truthy(&sort_keys),
    };
    pyfmt::json_dumps(value, &opts).map(Value::from)
}

/// Python methods on values (`.strip()`, `.split()`, `.items()`, ...): minijinja-contrib's
/// pycompat, with `str.title()` done Python's way (any uncased character starts a new word).
fn python_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> std::result::Result<Value, minijinja::Error> {
    if method == "title" && args.is_empty() {
        if let Some(s) = value.as_str() {
            return Ok(Value::from(pyfmt::py_title(s)));
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Jinja2's `is iterable`: Python `iter(x)` succeeds (not for `None` or numbers; Jinja2's
/// `Undefined` is iterable).
fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Invalid => false,
        ValueKind::Undefined
        | ValueKind::String
        | ValueKind::Seq
        | ValueKind::Map
        | ValueKind::Iterable => true,
        _ => value.try_iter().is_ok(),
    }
}

/// Jinja2's `is sequence`: has `len()` and indexing (strings, lists, dicts and `Undefined`).
fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::Undefined | ValueKind::String | ValueKind::Seq | ValueKind::Map
    )
}

/// Jinja2's `join(value, d='', attribute=None)`, items printed with Python's `str()`.
fn join(
    value: &Value,
    sep: Option<String>,
    kwargs: Kwargs,
) -> std::result::Result<String, minijinja::Error> {
    let attribute: Option<String> = kwargs.get("attribute")?;
    kwargs.assert_all_used()?;
    if value.is_undefined() || value.is_none() {
        return Ok(String::new());
    }
    if let Some(s) = value.as_str() {
        let sep = sep.unwrap_or_default();
        return Ok(s.chars().map(String::from).collect::<Vec<_>>().join(&sep));
    }
    let mut parts = Vec::new();
    for item in value.try_iter()? {
        let item = match &attribute {
            Some(path) => path.split('.').try_fold(item, |v, key| v.get_attr(key))?,
            None => item,
        };
        parts.push(pyfmt::py_str(&item));
    }
    Ok(parts.join(&sep.unwrap_or_default()))
}

/// Jinja2's `length`: Python `len()`, and 0 for an undefined value (Jinja2's `Undefined` is empty).
fn length(value: &Value) -> std::result::Result<usize, minijinja::Error> {
    if value.is_undefined() {
        return Ok(0);
    }
    value.len().ok_or_else(|| {
        minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("object of type {} has no len()", value.kind()),
        )
    })
}

/// Jinja2's `trim(value, chars=None)`: `str(value).strip(chars)` with Python's `str()`.
fn trim(value: &Value, chars: Option<String>) -> String {
    let s = pyfmt::py_str(value);
    match chars {
        Some(set) => s.trim_matches(|c| set.contains(c)).to_owned(),
        None => s.trim_matches(pyfmt::is_py_space).to_owned(),
    }
}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(
        minijinja::Error::new(ErrorKind::InvalidOperation, message.clone())
            .with_source(Raised(message)),
    )
}

fn strftime_now(format: &str) -> String {
    let now = CLOCK.with(|c| c.get()).unwrap_or_else(Timestamp::now_utc);
    now.strftime(format)
}

fn build_env(limits: Limits) -> Environment<'static> {
    let mut env = Environment::new();
    // ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), Jinja2 defaults otherwise.
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_fuel(Some(limits.fuel));
    env.set_unknown_method_callback(python_method);
    env.set_formatter(|out, _state: &State, value: &Value| {
        if !value.is_undefined() {
            out.write_str(&pyfmt::py_str(value))
                .map_err(|_| minijinja::Error::from(ErrorKind::WriteFailure))?;
        }
        Ok(())
    });
    env.add_filter("tojson", tojson);
    env.add_filter("string", |v: &Value| Value::from(pyfmt::py_str(v)));
    env.add_filter("trim", trim);
    env.add_filter("length", length);
    env.add_filter("join", join);
    env.add_filter("count", length);
    env.add_test("iterable", is_iterable);
    env.add_test("sequence", is_sequence);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env
}

/// An `io::Write` that stops once the output passes a cap.
struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.cap {
            self.overflowed = true;
            return Err(std::io::Error::other("output cap reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn convert_error(err: &minijinja::Error, limits: Limits) -> Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(Raised(message)) = e.downcast_ref::<Raised>() {
            return Error::Raised {
                message: message.clone(),
            };
        }
        source = e.source();
    }
    let message = match err.detail() {
        Some(d) => format!("{}: {d}", err.kind()),
        None => err.kind().to_string(),
    };
    match err.kind() {
        ErrorKind::SyntaxError | ErrorKind::BadEscape | ErrorKind::UnknownBlock => Error::Syntax {
            line: err.line(),
            message,
        },
        ErrorKind::OutOfFuel => Error::OutOfFuel { fuel: limits.fuel },
        _ => Error::Render {
            line: err.line(),
            message,
        },
    }
}

impl ChatTemplate {
    /// Compile `source` with the special tokens it will be rendered with, under default [`Limits`].
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        Self::with_limits(source, bos_token, eos_token, Limits::default())
    }

    /// Compile `source` with explicit resource limits.
    pub fn with_limits(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        limits: Limits,
    ) -> Result<ChatTemplate> {
        let mut env = build_env(limits);
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_tags(source))
            .map_err(|e| convert_error(&e, limits))?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            limits,
            source: source.to_owned(),
        })
    }

    /// The template source as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The limits renders run under.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Render a conversation to the prompt text, as `apply_chat_template(..., tokenize=False)` does.
    pub fn render(&self, messages: &[Message], opts: &RenderOptions) -> Result<String> {
        self.render_with_fuel(messages, opts).map(|(text, _)| text)
    }

    /// [`render`](Self::render), also returning the instruction count (fuel) the render consumed.
    pub fn render_with_fuel(
        &self,
        messages: &[Message],
        opts: &RenderOptions,
    ) -> Result<(String, u64)> {
        let mut msgs: Vec<serde_json::Value> =
            messages.iter().map(Message::to_template_value).collect();
        if !opts.continue_final_message {
            return self.render_values(serde_json::Value::Array(msgs), opts);
        }
        let final_text = self.tag_final_message(&mut msgs, opts)?;
        let (rendered, fuel) = self.render_values(serde_json::Value::Array(msgs), opts)?;
        Ok((cut_at_continue_tag(rendered, &final_text)?, fuel))
    }

    /// transformers' `continue_final_message` preparation: append the tag to the final message's
    /// text (its last text part for a list) and return the text it had.
    fn tag_final_message(
        &self,
        msgs: &mut [serde_json::Value],
        opts: &RenderOptions,
    ) -> Result<String> {
        let fail = |reason: &str| Error::Continue {
            reason: reason.to_owned(),
        };
        if opts.add_generation_prompt {
            return Err(fail(
                "continue_final_message and add_generation_prompt are not compatible",
            ));
        }
        let last = msgs
            .last_mut()
            .ok_or_else(|| fail("the conversation is empty"))?;
        let content = last
            .get_mut("content")
            .ok_or_else(|| fail("the final message has no content to continue"))?;
        if !self.source.contains("content") {
            return Err(fail("the template does not read `content`"));
        }
        match content {
            serde_json::Value::String(s) => {
                let text = s.clone();
                s.push_str(CONTINUE_TAG);
                Ok(text)
            }
            serde_json::Value::Array(parts) => {
                let text_part = parts
                    .iter_mut()
                    .rev()
                    .find_map(|p| p.get_mut("text").filter(|t| t.is_string()))
                    .ok_or_else(|| fail("the final message has no text part to continue"))?;
                let text = text_part.as_str().unwrap_or_default().to_owned();
                *text_part = serde_json::Value::String(text.clone() + CONTINUE_TAG);
                Ok(text)
            }
            _ => Err(fail("the final message content is neither text nor parts")),
        }
    }

    /// Render with messages given as raw JSON values (already in the template's shape); also
    /// returns the fuel consumed.
    pub fn render_values(
        &self,
        messages: serde_json::Value,
        opts: &RenderOptions,
    ) -> Result<(String, u64)> {
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        ctx.insert("bos_token".into(), Value::from(self.bos_token.as_str()));
        ctx.insert("eos_token".into(), Value::from(self.eos_token.as_str()));
        for (k, v) in &opts.extra {
            ctx.insert(k.clone(), Value::from_serialize(v));
        }
        ctx.insert("messages".into(), Value::from_serialize(&messages));
        ctx.insert("tools".into(), Value::from_serialize(&opts.tools));
        ctx.insert("documents".into(), Value::from_serialize(&opts.documents));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(opts.add_generation_prompt),
        );
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| convert_error(&e, self.limits))?;
        let mut writer = CappedWriter {
            buf: Vec::new(),
            cap: self.limits.max_output_bytes,
            overflowed: false,
        };
        let previous = CLOCK.with(|c| c.replace(opts.now));
        let result = tmpl
            .render_captured_to(Value::from_iter(ctx), &mut writer)
            .map(|captured| {
                captured
                    .state()
                    .fuel_levels()
                    .map_or(0, |(consumed, _)| consumed)
            });
        CLOCK.with(|c| c.set(previous));
        if writer.overflowed {
            return Err(Error::OutputTooLarge {
                limit: self.limits.max_output_bytes,
            });
        }
        let fuel = result.map_err(|e| convert_error(&e, self.limits))?;
        let text = String::from_utf8(writer.buf).map_err(|e| Error::Render {
            line: None,
            message: e.to_string(),
        })?;
        Ok((text, fuel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_closed_by_its_own_percent_sign_is_left_alone() {
        // Found by the chat_template fuzz target: `{%}` used to panic on `&tag[2..1]`.
        assert_eq!(rewrite_generation_tags("a{%}b"), "a{%}b");
        assert_eq!(rewrite_generation_tags("{%}%}"), "{%}%}");
        assert!(ChatTemplate::new("x{%}y", "", "").is_err());
    }

    #[test]
    fn generation_tags_are_rewritten() {
        assert_eq!(
            rewrite_generation_tags("a{%- generation %}b{% endgeneration -%}c{{ x }}{% if y %}"),
            "a{%- if true %}b{% endif -%}c{{ x }}{% if y %}"
        );
    }

    #[test]
    fn arc_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<std::sync::Arc<ChatTemplate>>();
    }
}
