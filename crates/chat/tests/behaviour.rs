//! Error paths and limits: fuel, output cap, raise_exception, syntax errors, the clock.

use std::time::Instant;

use anedvd_chat::{
    BuiltinTemplate, ChatTemplate, Error, Limits, Message, RenderOptions, Timestamp,
};

fn render(source: &str, messages: &[Message]) -> Result<String, Error> {
    ChatTemplate::new(source, "<s>", "</s>")?.render(messages, &RenderOptions::default())
}

#[test]
fn endless_loop_runs_out_of_fuel() {
    let source =
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}done";
    let start = Instant::now();
    let err = render(source, &[]).expect_err("a 10^10-step loop must not finish");
    let elapsed = start.elapsed();
    assert!(
        matches!(err, Error::OutOfFuel { fuel } if fuel == Limits::default().fuel),
        "{err:?}"
    );
    assert!(err.to_string().contains("instruction budget"), "{err}");
    println!("default fuel exhausted after {elapsed:?}");
    assert!(elapsed.as_secs() < 60, "fuel limit took {elapsed:?}");

    let small = Limits {
        fuel: 1000,
        ..Limits::default()
    };
    let tmpl = ChatTemplate::with_limits(source, "", "", small).expect("compiles");
    let err = tmpl
        .render(&[], &RenderOptions::default())
        .expect_err("out of fuel");
    assert!(matches!(err, Error::OutOfFuel { fuel: 1000 }), "{err:?}");
}

#[test]
fn recursion_is_an_error_not_a_crash() {
    let source = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let err = render(source, &[]).expect_err("unbounded recursion");
    assert!(
        matches!(err, Error::Render { .. } | Error::OutOfFuel { .. }),
        "{err:?}"
    );
}

#[test]
fn output_is_capped() {
    let source = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}";
    let limits = Limits {
        max_output_bytes: 1 << 20,
        ..Limits::default()
    };
    let tmpl = ChatTemplate::with_limits(source, "", "", limits).expect("compiles");
    let err = tmpl
        .render(&[], &RenderOptions::default())
        .expect_err("100 MB of output");
    assert!(
        matches!(err, Error::OutputTooLarge { limit } if limit == 1 << 20),
        "{err:?}"
    );
    // Just under the cap is fine.
    let ok = ChatTemplate::with_limits("{{ 'x' * 1048576 }}", "", "", limits).expect("compiles");
    assert_eq!(
        ok.render(&[], &RenderOptions::default())
            .map(|s| s.len())
            .ok(),
        Some(1 << 20)
    );
}

#[test]
fn raise_exception_surfaces_the_message() {
    let gemma = BuiltinTemplate::Gemma.source();
    let err =
        render(gemma, &[Message::user("a"), Message::user("b")]).expect_err("roles must alternate");
    match err {
        Error::Raised { message } => {
            assert_eq!(
                message,
                "Conversation roles must alternate user/assistant/user/assistant/..."
            )
        }
        other => panic!("expected Raised, got {other:?}"),
    }
    let err = render(
        "{{ raise_exception('bad: ' ~ messages[0].content) }}",
        &[Message::user("x")],
    )
    .expect_err("raises");
    assert_eq!(err.to_string(), "chat template raised an exception: bad: x");
}

#[test]
fn syntax_error_has_line() {
    let err = ChatTemplate::new("line one\n{% if x %}\n{{ y }\n{% endif %}", "", "")
        .expect_err("bad syntax");
    match &err {
        Error::Syntax { line, message } => {
            assert_eq!(*line, Some(3), "{message}");
            assert!(err.to_string().contains("line 3"), "{err}");
        }
        other => panic!("expected Syntax, got {other:?}"),
    }
    let err = ChatTemplate::new("{% for m in messages %}", "", "").expect_err("unclosed block");
    assert!(
        matches!(err, Error::Syntax { line: Some(1), .. }),
        "{err:?}"
    );
}

#[test]
fn render_errors_have_line() {
    let err =
        render("ok\n{{ messages[0].content + 1 }}", &[Message::user("x")]).expect_err("str + int");
    assert!(
        matches!(err, Error::Render { line: Some(2), .. }),
        "{err:?}"
    );
}

#[test]
fn strftime_now_uses_the_given_or_current_clock() {
    let tmpl = ChatTemplate::new("{{ strftime_now('%d %B %Y') }}", "", "").expect("compiles");
    let fixed = RenderOptions {
        now: Some(Timestamp {
            year: 2024,
            month: 2,
            day: 29,
            hour: 0,
            minute: 0,
            second: 0,
        }),
        ..Default::default()
    };
    assert_eq!(
        tmpl.render(&[], &fixed).ok().as_deref(),
        Some("29 February 2024")
    );
    let today = Timestamp::now_utc().strftime("%d %B %Y");
    let got = tmpl
        .render(&[], &RenderOptions::default())
        .unwrap_or_default();
    // The date can roll over between the two reads only at midnight.
    assert!(
        got == today || got == Timestamp::now_utc().strftime("%d %B %Y"),
        "{got} vs {today}"
    );
}

#[test]
fn bos_and_extra_kwargs() {
    let tmpl = ChatTemplate::new(
        "{{ bos_token }}|{{ eos_token }}|{{ enable_thinking }}",
        "<bos>",
        "<eos>",
    )
    .expect("compiles");
    let mut opts = RenderOptions::default();
    assert_eq!(
        tmpl.render(&[], &opts).ok().as_deref(),
        Some("<bos>|<eos>|")
    );
    opts.extra
        .insert("enable_thinking".into(), serde_json::Value::Bool(false));
    opts.extra
        .insert("bos_token".into(), serde_json::Value::String("B".into()));
    assert_eq!(
        tmpl.render(&[], &opts).ok().as_deref(),
        Some("B|<eos>|False")
    );
}

#[test]
fn continue_final_message_rules() {
    let tmpl = ChatTemplate::new(BuiltinTemplate::Chatml.source(), "", "").expect("compiles");
    let msgs = [Message::user("Hi"), Message::assistant("Hello")];
    let opts = RenderOptions {
        continue_final_message: true,
        ..Default::default()
    };
    assert_eq!(
        tmpl.render(&msgs, &opts).ok().as_deref(),
        Some("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello")
    );
    let both = RenderOptions {
        add_generation_prompt: true,
        ..opts.clone()
    };
    assert!(matches!(
        tmpl.render(&msgs, &both),
        Err(Error::Continue { .. })
    ));
    assert!(matches!(
        tmpl.render(&[], &opts),
        Err(Error::Continue { .. })
    ));
}
