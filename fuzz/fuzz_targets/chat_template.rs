//! A fuzzed chat template rendered with hostile messages under small limits.
//!
//! Input: template source NUL conversation; the conversation bytes are
//! decoded by `arbitrary` (limits, options, up to 64 messages with any role,
//! text / parts / no content, reasoning, tool calls, names). An input without
//! a NUL (a seed template) is rendered with a fixed system/user/assistant/user
//! conversation.
//!
//! Asserts: no panic; a successful render is at most `max_output_bytes` long
//! and used at most `fuel` steps; an `OutputTooLarge` error names the
//! configured limit; rendering is deterministic (same input, same result).
#![no_main]

use anedvd_chat::{
    ChatTemplate, Content, ContentPart, Error, FunctionCall, Limits, Message, RenderOptions,
    Timestamp, ToolCall,
};
use libfuzzer_sys::arbitrary::{self, Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

const ROLES: &[&str] = &["system", "user", "assistant", "tool", "developer", "ipython", ""];

#[derive(Debug, Arbitrary)]
enum FContent {
    None,
    Text(String),
    Parts(Vec<(bool, String)>),
}

#[derive(Debug, Arbitrary)]
struct FMsg {
    role: Result<u8, String>,
    content: FContent,
    reasoning: Option<String>,
    tool_calls: Option<Vec<(String, String)>>,
    tool_call_id: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Arbitrary)]
struct Conv {
    fuel: u16,
    max_output: u16,
    bos: String,
    eos: String,
    add_generation_prompt: bool,
    continue_final: bool,
    tools: bool,
    enable_thinking: Option<bool>,
    msgs: Vec<FMsg>,
}

fn message(m: &FMsg) -> Message {
    let role = match &m.role {
        Ok(i) => ROLES[*i as usize % ROLES.len()].to_string(),
        Err(s) => s.clone(),
    };
    let content = match &m.content {
        FContent::None => None,
        FContent::Text(s) => Some(Content::Text(s.clone())),
        FContent::Parts(p) => Some(Content::Parts(
            p.iter()
                .take(8)
                .map(|(is_text, s)| ContentPart {
                    kind: if *is_text { "text".into() } else { "image".into() },
                    text: is_text.then(|| s.clone()),
                    extra: Map::new(),
                })
                .collect(),
        )),
    };
    Message {
        role,
        content,
        reasoning_content: m.reasoning.clone(),
        tool_calls: m.tool_calls.as_ref().map(|c| {
            c.iter()
                .take(4)
                .map(|(name, args)| ToolCall {
                    id: Some(format!("call_{}", name.len())),
                    kind: Some("function".into()),
                    function: FunctionCall {
                        name: name.clone(),
                        arguments: serde_json::from_str(args)
                            .unwrap_or_else(|_| Value::String(args.clone())),
                    },
                    extra: Map::new(),
                })
                .collect()
        }),
        tool_call_id: m.tool_call_id.clone(),
        name: m.name.clone(),
        extra: Map::new(),
    }
}

fn render(source: &str, conv: &Conv) {
    let limits = Limits {
        fuel: u64::from(conv.fuel) * 4 + 1,
        max_output_bytes: usize::from(conv.max_output) % 8192,
    };
    let Ok(t) = ChatTemplate::with_limits(source, &conv.bos, &conv.eos, limits) else {
        return;
    };
    assert_eq!(t.limits(), limits);
    let msgs: Vec<Message> = conv.msgs.iter().take(64).map(message).collect();
    let mut extra = Map::new();
    if let Some(b) = conv.enable_thinking {
        extra.insert("enable_thinking".into(), Value::Bool(b));
    }
    let opts = RenderOptions {
        add_generation_prompt: conv.add_generation_prompt,
        tools: conv.tools.then(|| {
            json!([{"type": "function", "function": {"name": "get_weather",
                "description": "Weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
        }),
        documents: None,
        extra,
        now: Some(Timestamp::from_unix(1_764_633_600)),
        continue_final_message: conv.continue_final,
    };
    let first = t.render_with_fuel(&msgs, &opts);
    match &first {
        Ok((text, fuel)) => {
            assert!(
                text.len() <= limits.max_output_bytes,
                "{} bytes rendered, limit {}",
                text.len(),
                limits.max_output_bytes
            );
            assert!(*fuel <= limits.fuel, "fuel {fuel} > limit {}", limits.fuel);
        }
        Err(Error::OutputTooLarge { limit }) => assert_eq!(*limit, limits.max_output_bytes),
        Err(Error::OutOfFuel { fuel }) => assert_eq!(*fuel, limits.fuel),
        Err(_) => {}
    }
    let again = t.render_with_fuel(&msgs, &opts);
    assert_eq!(
        first.as_ref().map_err(ToString::to_string),
        again.as_ref().map_err(ToString::to_string),
        "render is not deterministic"
    );
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0);
    let (src, rest) = match split {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    };
    let source = String::from_utf8_lossy(src);
    let conv = match rest {
        Some(r) => match Conv::arbitrary_take_rest(Unstructured::new(r)) {
            Ok(c) => c,
            Err(_) => return,
        },
        None => Conv {
            fuel: 5000,
            max_output: 4096,
            bos: "<s>".into(),
            eos: "</s>".into(),
            add_generation_prompt: true,
            continue_final: false,
            tools: false,
            enable_thinking: None,
            msgs: ["system", "user", "assistant", "user"]
                .iter()
                .map(|r| FMsg {
                    role: Err(r.to_string()),
                    content: FContent::Text(format!("hello from {r}")),
                    reasoning: None,
                    tool_calls: None,
                    tool_call_id: None,
                    name: None,
                })
                .collect(),
        },
    };
    render(&source, &conv);
});
