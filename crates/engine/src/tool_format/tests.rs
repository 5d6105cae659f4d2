//! Replies in each family's documented format (the strings are the shapes
//! the vendors document: NousResearch's Hermes-Function-Calling README,
//! Meta's Llama 3.1 model card, Mistral's function-calling guide, Liquid's
//! LFM2 model card, llama.cpp's generic format) split into text and calls;
//! every split point of a stream gives the same result; forced-call grammars
//! accept a valid call and refuse wrong names and arguments.

use super::*;
use serde_json::json;

fn call(name: &str, arguments: Value) -> ParsedCall {
    ParsedCall {
        name: name.into(),
        arguments,
    }
}

fn cases() -> Vec<(ToolFormat, &'static str, &'static str, Vec<ParsedCall>)> {
    vec![
        (
            ToolFormat::Hermes,
            "Let me check.\n<tool_call>\n{\"name\": \"get_current_stock_price\", \"arguments\": {\"symbol\": \"TSLA\"}}\n</tool_call>",
            "Let me check.",
            vec![call("get_current_stock_price", json!({"symbol": "TSLA"}))],
        ),
        (
            ToolFormat::Hermes,
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
            "",
            vec![call("a", json!({})), call("b", json!({"x": [1, 2]}))],
        ),
        (ToolFormat::Hermes, "No tools needed: 2 < 3.", "No tools needed: 2 < 3.", vec![]),
        (
            ToolFormat::Hermes,
            "<tool_call>\n{not json}\n</tool_call>",
            "<tool_call>\n{not json}\n</tool_call>",
            vec![],
        ),
        (
            ToolFormat::Llama3,
            "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", \"unit\": \"Fahrenheit\"}}",
            "",
            vec![call(
                "get_current_conditions",
                json!({"location": "San Francisco, CA", "unit": "Fahrenheit"}),
            )],
        ),
        (
            ToolFormat::Llama3,
            "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; {\"name\": \"b\", \"parameters\": {}}",
            "",
            vec![call("a", json!({"q": "x;y"})), call("b", json!({}))],
        ),
        (ToolFormat::Llama3, "The answer is 4.", "The answer is 4.", vec![]),
        (
            ToolFormat::Mistral,
            "[TOOL_CALLS][{\"name\": \"retrieve_payment_status\", \"arguments\": {\"transaction_id\": \"T1001\"}}]",
            "",
            vec![call("retrieve_payment_status", json!({"transaction_id": "T1001"}))],
        ),
        (
            ToolFormat::Mistral,
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
            "",
            vec![call("get_weather", json!({"city": "Paris"}))],
        ),
        (
            ToolFormat::Lfm2,
            "<|tool_call_start|>[get_candidate_status(candidate_id=\"12345\")]<|tool_call_end|>Checking the status.",
            "Checking the status.",
            vec![call("get_candidate_status", json!({"candidate_id": "12345"}))],
        ),
        (
            ToolFormat::Lfm2,
            "<|tool_call_start|>[f(a=1, b='two', c=True, d=None, e=[1.5, {'k': \"v\"}]), g()]<|tool_call_end|>",
            "",
            vec![
                call("f", json!({"a": 1, "b": "two", "c": true, "d": null, "e": [1.5, {"k": "v"}]})),
                call("g", json!({})),
            ],
        ),
        (
            ToolFormat::Generic,
            "{\"tool_call\": {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}}",
            "",
            vec![call("add", json!({"a": 2, "b": 3}))],
        ),
        (
            ToolFormat::Generic,
            "{\"response\": \"Hello there\"}",
            "Hello there",
            vec![],
        ),
        (ToolFormat::Generic, "  plain text", "plain text", vec![]),
    ]
}

#[test]
fn whole_replies_split_into_text_and_calls() {
    for (format, text, content, calls) in cases() {
        let p = format.parse(text);
        assert_eq!(p.content, content, "{format:?}: {text:?}");
        assert_eq!(p.calls, calls, "{format:?}: {text:?}");
    }
}

#[test]
fn any_chunking_of_the_stream_gives_the_whole_split_and_no_markup() {
    for (format, text, _, _) in cases() {
        let whole = format.parse(text);
        let chunkings: Vec<Vec<&str>> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .map(|i| vec![&text[..i], &text[i..]])
            .chain(std::iter::once(
                text.char_indices()
                    .map(|(i, c)| &text[i..i + c.len_utf8()])
                    .collect(),
            ))
            .collect();
        for chunks in chunkings {
            let mut s = format.stream();
            let mut items = Vec::new();
            for c in &chunks {
                items.extend(s.push(c));
            }
            items.extend(s.finish());
            let mut content = String::new();
            let mut calls = Vec::new();
            for item in items {
                match item {
                    StreamItem::Content(t) => content.push_str(&t),
                    StreamItem::Call(c) => calls.push(c),
                }
            }
            assert_eq!(content.trim(), whole.content, "{format:?} {chunks:?}");
            assert_eq!(calls, whole.calls, "{format:?} {chunks:?}");
        }
    }
}

#[test]
fn a_partial_marker_is_held_until_decided() {
    let mut s = ToolFormat::Hermes.stream();
    assert_eq!(s.push("Hi <tool"), vec![StreamItem::Content("Hi ".into())]);
    assert_eq!(
        s.push("box>"),
        vec![StreamItem::Content("<toolbox>".into())]
    );
    assert!(s.push("<tool_call>{\"name\": \"f\", \"argu").is_empty());
}

fn tools() -> Vec<ToolSpec> {
    from_openai_tools(&json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "noop"}},
    ]))
    .expect("tools")
}

/// Whether `grammar` accepts exactly `text` (a byte per token).
fn accepts(grammar: &str, text: &str) -> bool {
    let bytes: Vec<u32> = text.bytes().map(u32::from).collect();
    crate::constrain::lark_accepts_bytes(grammar, &bytes)
}

#[test]
fn forced_call_grammars_accept_valid_calls_only() {
    let tok = crate::constrain::tests_tokenizer();
    let tools = tools();
    let good = [
        (
            ToolFormat::Hermes,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>",
        ),
        (
            ToolFormat::Llama3,
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 3}}",
        ),
        (
            ToolFormat::Mistral,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}]",
        ),
        (
            ToolFormat::Generic,
            "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}}",
        ),
        (
            ToolFormat::Lfm2,
            "<|tool_call_start|>[get_weather(city=\"Oslo\", days=3)]<|tool_call_end|>",
        ),
    ];
    for (format, text) in good {
        let g = format.call_grammar(&tools, &ToolChoice::Required, &tok);
        assert!(accepts(&g, text), "{format:?} should accept {text}\n{g}");
        // what is accepted is parsed back as the call
        let p = format.parse(text);
        assert_eq!(p.calls.len(), 1, "{format:?}");
        assert_eq!(p.calls[0].name, "get_weather");
        // a wrong name, a bad argument, a missing argument
        for bad in [
            text.replace("get_weather", "get_weathr"),
            text.replace("3", "9"),
            text.replace("Oslo", "Oslo is a long name"),
        ] {
            assert!(!accepts(&g, &bad), "{format:?} should refuse {bad}");
        }
        // a named function allows only that one
        let named = format.call_grammar(&tools, &ToolChoice::Function("noop".into()), &tok);
        assert!(
            !accepts(&named, text),
            "{format:?}: named noop accepted get_weather"
        );
    }
}

#[test]
fn tool_lists_are_checked() {
    for (v, needle) in [
        (json!({"name": "x"}), "array"),
        (json!([{"type": "retrieval"}]), "function"),
        (json!([{"type": "function", "function": {}}]), "name"),
        (
            json!([{"type": "function", "function": {"name": "a b"}}]),
            "letters",
        ),
        (
            json!([{"type": "function", "function": {"name": "a", "parameters": 3}}]),
            "schema",
        ),
        (
            json!([{"function": {"name": "a"}}, {"function": {"name": "a"}}]),
            "twice",
        ),
    ] {
        let e = from_openai_tools(&v).expect_err(&v.to_string());
        assert!(e.contains(needle), "{v}: {e}");
    }
    let a = from_anthropic_tools(&json!([{"name": "f", "input_schema": {"type": "object"}}]))
        .expect("anthropic");
    assert_eq!(a[0].parameters, json!({"type": "object"}));
}

#[test]
fn formats_are_detected_from_templates() {
    let tok = crate::constrain::tests_tokenizer();
    let qwen =
        std::fs::read_to_string(anedvd_testkit::fixtures::dir("qwen2").join("chat_template.jinja"))
            .expect("qwen2 template");
    assert_eq!(ToolFormat::detect(&qwen, &tok), ToolFormat::Hermes);
    for (name, want) in [
        ("llama3", ToolFormat::Llama3),
        ("qwen3", ToolFormat::Hermes),
        ("lfm2", ToolFormat::Lfm2),
        ("gemma", ToolFormat::Generic),
    ] {
        let t = anedvd_chat::BuiltinTemplate::from_name(name)
            .unwrap_or_else(|| panic!("no builtin {name}"));
        assert_eq!(ToolFormat::detect(t.source(), &tok), want, "{name}");
    }
}
