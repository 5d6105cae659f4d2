//! Splitting a reply into text and calls as it streams: text is released as
//! soon as it cannot be the start of call markup (a partial `<tool_` is held
//! until decided), a call once it is complete. Markup that never becomes a
//! valid call is released as text at the end.

use super::{call_from_json, pythonic, ParsedCall, ToolFormat};
use serde_json::Value;

/// What [`ToolStream`] released.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// Text to show.
    Content(String),
    /// A complete call.
    Call(ParsedCall),
}

/// Where the splitter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet (formats whose calls are the whole reply
    /// decide on the first other character).
    Start,
    /// Ordinary text.
    Text,
    /// Inside an opened call block, waiting for its end.
    Block,
    /// The rest of the reply is call payload (parsed at the end).
    Payload,
}

/// A streaming splitter ([`ToolFormat::stream`]).
#[derive(Debug, Clone)]
pub struct ToolStream {
    format: ToolFormat,
    state: State,
    /// Text received and not yet released.
    held: String,
}

impl ToolStream {
    pub(super) fn new(format: ToolFormat) -> Self {
        Self {
            format,
            state: State::Start,
            held: String::new(),
        }
    }

    /// The markers of block formats: (opening, closing).
    fn block_markers(&self) -> Option<(&'static str, Option<&'static str>)> {
        match self.format {
            ToolFormat::Hermes => Some(("<tool_call>", Some("</tool_call>"))),
            ToolFormat::Lfm2 => Some(("<|tool_call_start|>", Some("<|tool_call_end|>"))),
            ToolFormat::Mistral => Some(("[TOOL_CALLS]", None)),
            ToolFormat::Llama3 | ToolFormat::Generic => None,
        }
    }

    /// Takes more text; returns what can be released now.
    pub fn push(&mut self, text: &str) -> Vec<StreamItem> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            let before = (self.state, self.held.len());
            self.step(&mut out);
            if (self.state, self.held.len()) == before {
                return out;
            }
        }
    }

    /// One transition (none when more text is needed).
    fn step(&mut self, out: &mut Vec<StreamItem>) {
        match (self.state, self.block_markers()) {
            (State::Start, None) => {
                // the whole reply is a call when it opens with JSON (or Llama's tag)
                let t = self.held.trim_start();
                if t.is_empty() || (self.format == ToolFormat::Llama3 && PYTHON_TAG.starts_with(t))
                {
                    return;
                }
                let json = t.starts_with('{')
                    || (self.format == ToolFormat::Llama3 && t.starts_with(PYTHON_TAG));
                self.state = if json { State::Payload } else { State::Text };
            }
            (State::Start, Some(_)) => self.state = State::Text,
            (State::Text, Some((open, _))) => {
                if let Some(i) = self.held.find(open) {
                    release(out, self.held[..i].to_owned());
                    self.held.drain(..i + open.len());
                    self.state = if self.format == ToolFormat::Mistral {
                        State::Payload
                    } else {
                        State::Block
                    };
                } else {
                    let keep = partial_suffix(&self.held, open);
                    let cut = self.held.len() - keep;
                    release(out, self.held[..cut].to_owned());
                    self.held.drain(..cut);
                }
            }
            (State::Text, None) => release(out, std::mem::take(&mut self.held)),
            (State::Block, Some((open, Some(close)))) => {
                if let Some(j) = self.held.find(close) {
                    let block: String = self.held.drain(..j + close.len()).collect();
                    let body = &block[..j];
                    match self.block_calls(body) {
                        Some(calls) => out.extend(calls.into_iter().map(StreamItem::Call)),
                        None => release(out, format!("{open}{block}")),
                    }
                    self.state = State::Text;
                }
            }
            (State::Block, _) | (State::Payload, _) => {}
        }
    }

    /// Ends the stream: held markup becomes calls if it parses, else text.
    pub fn finish(mut self) -> Vec<StreamItem> {
        let mut out = Vec::new();
        let held = std::mem::take(&mut self.held);
        match (self.state, self.block_markers()) {
            (State::Block, Some((open, _))) => match self.block_calls(&held) {
                // a block the reply ended inside (no closing marker) still counts
                Some(calls) => out.extend(calls.into_iter().map(StreamItem::Call)),
                None => release(&mut out, format!("{open}{held}")),
            },
            (State::Payload, Some((open, _))) => match mistral_calls(&held) {
                Some(calls) => out.extend(calls.into_iter().map(StreamItem::Call)),
                None => release(&mut out, format!("{open}{held}")),
            },
            (State::Payload, None) => match self.whole_reply(&held) {
                Some(items) => out.extend(items),
                None => release(&mut out, held),
            },
            _ => release(&mut out, held),
        }
        out
    }

    /// The calls of one block's body, if it is well-formed.
    fn block_calls(&self, body: &str) -> Option<Vec<ParsedCall>> {
        match self.format {
            ToolFormat::Hermes => {
                let v: Value = serde_json::from_str(body.trim()).ok()?;
                call_from_json(&v).map(|c| vec![c])
            }
            ToolFormat::Lfm2 => pythonic::parse_calls(body.trim()),
            _ => None,
        }
    }

    /// A reply that is all JSON: Llama's call(s), or the generic format.
    fn whole_reply(&self, text: &str) -> Option<Vec<StreamItem>> {
        let t = text.trim();
        match self.format {
            ToolFormat::Llama3 => {
                let t = t.strip_prefix(PYTHON_TAG).unwrap_or(t).trim();
                let calls: Option<Vec<ParsedCall>> = split_top_level(t, ';')
                    .into_iter()
                    .map(|part| {
                        let v: Value = serde_json::from_str(part.trim()).ok()?;
                        call_from_json(&v)
                    })
                    .collect();
                calls
                    .filter(|c| !c.is_empty())
                    .map(|c| c.into_iter().map(StreamItem::Call).collect())
            }
            ToolFormat::Generic => {
                let v: Value = serde_json::from_str(t).ok()?;
                if let Some(call) = v.get("tool_call") {
                    return call_from_json(call).map(|c| vec![StreamItem::Call(c)]);
                }
                if let Some(calls) = v.get("tool_calls").and_then(Value::as_array) {
                    let calls: Option<Vec<_>> = calls.iter().map(call_from_json).collect();
                    return calls.map(|c| c.into_iter().map(StreamItem::Call).collect());
                }
                match v.get("response") {
                    Some(Value::String(s)) => Some(vec![StreamItem::Content(s.clone())]),
                    Some(other) => Some(vec![StreamItem::Content(other.to_string())]),
                    None => None,
                }
            }
            _ => None,
        }
    }
}

const PYTHON_TAG: &str = "<|python_tag|>";

fn release(out: &mut Vec<StreamItem>, text: String) {
    if text.is_empty() {
        return;
    }
    if let Some(StreamItem::Content(last)) = out.last_mut() {
        last.push_str(&text);
    } else {
        out.push(StreamItem::Content(text));
    }
}

/// Bytes at the end of `text` that could begin `marker` (held back).
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// Mistral's payload: a JSON list of calls, or `name[ARGS]{json}` per call
/// (several joined by further `[TOOL_CALLS]`).
fn mistral_calls(payload: &str) -> Option<Vec<ParsedCall>> {
    let t = payload.trim();
    if t.starts_with('[') {
        let v: Value = serde_json::from_str(t).ok()?;
        let calls: Option<Vec<_>> = v.as_array()?.iter().map(call_from_json).collect();
        return calls.filter(|c| !c.is_empty());
    }
    let mut calls = Vec::new();
    for part in t.split("[TOOL_CALLS]") {
        let (name, args) = part.split_once("[ARGS]")?;
        let arguments: Value = serde_json::from_str(args.trim()).ok()?;
        if !arguments.is_object() || name.trim().is_empty() {
            return None;
        }
        calls.push(ParsedCall {
            name: name.trim().to_owned(),
            arguments,
        });
    }
    Some(calls).filter(|c| !c.is_empty())
}

/// Splits at `sep` outside JSON strings, brackets and braces.
fn split_top_level(text: &str, sep: char) -> Vec<&str> {
    let (mut depth, mut in_str, mut escaped, mut start) = (0i32, false, false, 0);
    let mut parts = Vec::new();
    for (i, c) in text.char_indices() {
        if in_str {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.retain(|p| !p.trim().is_empty());
    parts
}
