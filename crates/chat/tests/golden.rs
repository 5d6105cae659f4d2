//! Renders every golden case (tests/golden/cases.json x templates.json) and requires byte
//! equality with HF transformers' `apply_chat_template` output (tests/golden/expected/*.json,
//! made by tests/golden/gen_golden.py).

use std::path::{Path, PathBuf};

use anedvd_chat::{BuiltinTemplate, ChatTemplate, Error, Message, RenderOptions, Timestamp};
use serde_json::Value;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn template_source(spec: &str) -> String {
    if let Some(name) = spec.strip_prefix("builtin:") {
        let b = BuiltinTemplate::from_name(name).unwrap_or_else(|| panic!("no built-in {name}"));
        b.source().to_owned()
    } else if let Some(file) = spec.strip_prefix("file:") {
        let path = golden_dir().join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    } else {
        panic!("bad source spec {spec}")
    }
}

#[test]
fn transformers_goldens() {
    let dir = golden_dir();
    let cases = read_json(&dir.join("cases.json"));
    let templates = read_json(&dir.join("templates.json"));
    let now: Vec<u32> = serde_json::from_value(cases["now"].clone()).expect("now");
    let now = Timestamp {
        year: i32::try_from(now[0]).expect("year"),
        month: now[1],
        day: now[2],
        hour: now[3],
        minute: now[4],
        second: now[5],
    };
    let (mut total, mut passed, mut expected_errors) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    let mut max_fuel = 0u64;
    for t in templates["templates"].as_array().expect("templates") {
        let name = t["name"].as_str().expect("name");
        let source = template_source(t["source"].as_str().expect("source"));
        let expected = read_json(&dir.join("expected").join(format!("{name}.json")));
        let tmpl = ChatTemplate::new(
            &source,
            t["bos"].as_str().expect("bos"),
            t["eos"].as_str().expect("eos"),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        for case in cases["cases"].as_array().expect("cases") {
            let cname = case["name"].as_str().expect("case name");
            let Some(want) = expected.get(cname) else {
                continue;
            };
            total += 1;
            let messages: Vec<Message> = serde_json::from_value(case["messages"].clone())
                .unwrap_or_else(|e| panic!("{cname}: {e}"));
            let opts = RenderOptions {
                add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap_or(false),
                tools: case.get("tools").cloned(),
                documents: None,
                extra: case
                    .get("kwargs")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default(),
                now: Some(now),
                continue_final_message: case["continue_final_message"].as_bool().unwrap_or(false),
            };
            let got = tmpl.render_with_fuel(&messages, &opts).map(|(text, fuel)| {
                max_fuel = max_fuel.max(fuel);
                text
            });
            let ok = match (want.get("ok").and_then(Value::as_str), &got) {
                (Some(w), Ok(g)) => w == g,
                (None, Err(e)) => {
                    expected_errors += 1;
                    let raised = want["raised"].as_bool().unwrap_or(false);
                    match e {
                        Error::Raised { message } => {
                            raised && Some(message.as_str()) == want["error"].as_str()
                        }
                        _ => !raised,
                    }
                }
                _ => false,
            };
            if ok {
                passed += 1;
            } else {
                failures.push(format!("{name}/{cname}:\n  want {want}\n  got  {got:?}"));
            }
        }
    }
    println!("golden cases: {passed}/{total} equal ({expected_errors} expected errors); max fuel {max_fuel}");
    assert!(
        failures.is_empty(),
        "{} of {total} golden cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(total >= 250, "too few golden cases: {total}");
}
