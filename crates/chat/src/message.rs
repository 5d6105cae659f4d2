//! Chat messages in the OpenAI wire shape, and their conversion to what a template sees.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One chat message, (de)serializable in the OpenAI chat-completions shape.
///
/// Absent optional fields (and JSON `null`s) are not shown to the template, as transformers drops
/// `None` keys before rendering. Unknown fields are kept in [`Message::extra`] and passed through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, or any role the template knows.
    pub role: String,
    /// The text, or a list of typed parts; `None` for an assistant turn that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// The assistant's reasoning ("thinking") text, when the API carries it separately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls made by an assistant turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// For a `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Participant or tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Any other fields, passed to the template unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Message content: a plain string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Typed parts such as `{"type": "text", "text": "..."}`.
    Parts(Vec<ContentPart>),
}

/// One part of a multi-part content list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    /// The part type: `text`, `image`, `image_url`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Other fields of the part (e.g. `image_url`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool call made by the assistant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Usually `function`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The function called.
    pub function: FunctionCall,
    /// Other fields, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The function part of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Function name.
    pub name: String,
    /// Arguments: a JSON object (what most templates expect) or a JSON-encoded string (the
    /// OpenAI wire form). Rendered as given; converting is the caller's choice.
    pub arguments: Value,
}

impl Message {
    /// A message with a role and plain-text content.
    pub fn new(role: impl Into<String>, text: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: Some(Content::Text(text.into())),
            reasoning_content: None,
            tool_calls: None,
            tool_call_id: None,
            name: None,
            extra: Map::new(),
        }
    }

    /// A `system` message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new("system", text)
    }

    /// A `user` message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new("user", text)
    }

    /// An `assistant` message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new("assistant", text)
    }

    /// A `tool` result message answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, text: impl Into<String>) -> Self {
        let mut m = Self::new("tool", text);
        m.tool_call_id = Some(tool_call_id.into());
        m
    }

    /// The text of the content: the string itself, or the `text` parts joined with no separator.
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => parts.iter().filter_map(|p| p.text.as_deref()).collect(),
        }
    }

    /// The message as the template sees it (transformers' `_normalize_chat_messages` +
    /// `_alias_reasoning_fields`): `null` fields dropped, and when reasoning is present under
    /// `reasoning_content`, `thinking` or `reasoning`, it is also exposed as `thinking` (first key)
    /// and `reasoning_content`.
    pub fn to_template_value(&self) -> Value {
        let mut fields = match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            // A struct of strings and JSON values always serializes to an object.
            _ => Map::new(),
        };
        fields.retain(|_, v| !v.is_null());
        let reasoning = ["reasoning_content", "thinking", "reasoning"]
            .iter()
            .find_map(|k| fields.get(*k).cloned());
        match reasoning {
            None => Value::Object(fields),
            Some(r) => {
                let mut out = Map::new();
                out.insert("thinking".to_owned(), r.clone());
                for (k, v) in fields {
                    out.insert(k, v);
                }
                out.insert("reasoning_content".to_owned(), r);
                Value::Object(out)
            }
        }
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_owned())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_shape_round_trips() {
        let json = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}"#;
        let m: Message = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        assert!(m.content.is_none());
        let v = m.to_template_value();
        assert!(v.get("content").is_none(), "null content must be dropped");
        assert_eq!(v["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
    }

    #[test]
    fn parts_and_text() {
        let json = r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]}"#;
        let m: Message = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.text(), "ab");
        let back = serde_json::to_string(&m).unwrap_or_default();
        assert_eq!(back, json);
    }

    #[test]
    fn reasoning_alias_order() {
        let mut m = Message::assistant("4.");
        m.reasoning_content = Some("think".into());
        let v = m.to_template_value();
        let keys: Vec<&str> = v
            .as_object()
            .map(|o| o.keys().map(|k| k.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(keys, ["thinking", "role", "content", "reasoning_content"]);
    }
}
