//! A reader that goes away early (`anedvd … | head`) ends a command
//! quietly: no panic message, no error.
#![cfg(unix)]
#![allow(clippy::unwrap_used)]

use std::process::Command;

/// Runs `anedvd ARGS | true` (the reader exits at once, so every write of
/// the command meets a closed pipe) and returns its stderr.
fn stderr_with_closed_stdout(args: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let bin = env!("CARGO_BIN_EXE_anedvd");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("'{bin}' {args} | true"))
        .current_dir(root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn commands_end_quietly_when_the_reader_goes() {
    let model = "tests/fixtures/models/llama/model-f32.gguf";
    for args in [
        format!("kernels -m {model}"),
        format!("inspect {model}"),
        format!("tokenize -m {model} --show --text 'hello world, hello again'"),
        "ops --path e5rt".to_string(),
    ] {
        let err = stderr_with_closed_stdout(&args);
        assert!(
            !err.contains("panicked") && !err.contains("error"),
            "`anedvd {args} | true` wrote: {err}"
        );
    }
}
