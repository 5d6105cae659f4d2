//! llama.cpp's own tokenizer goldens: `models/ggml-vocab-*.gguf` with
//! `.inp` (inputs separated by `__ggml_vocab_test__`) and `.out` (ids, as
//! produced by llama.cpp's `test-tokenizer-0`, add_special = false,
//! parse_special = false). The files live in a llama.cpp checkout (several
//! MB each, not committed): `$ANEDVD_LLAMACPP_SRC` or
//! `/root/.cache/llamacpp-ref/src`; the test skips when it is absent.

use anedvd_tokenizer::{Error, Tokenizer};
use std::path::PathBuf;

fn models_dir() -> Option<PathBuf> {
    let root = std::env::var("ANEDVD_LLAMACPP_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("/root/.cache/llamacpp-ref/src"));
    let dir = root.join("models");
    dir.is_dir().then_some(dir)
}

fn load_cases(inp: &str, out: &str) -> Vec<(String, Vec<u32>)> {
    let inputs: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    let outputs: Vec<&str> = out.lines().collect();
    assert!(outputs.len() <= inputs.len(), "more outputs than inputs");
    outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let ids = o
                .split_whitespace()
                .map(|t| t.parse::<u32>().expect("id"))
                .collect();
            (inputs[i].to_string(), ids)
        })
        .collect()
}

#[test]
fn llamacpp_vocab_goldens() {
    let Some(dir) = models_dir() else {
        eprintln!("SKIP llamacpp_vocab_goldens: no llama.cpp checkout (set ANEDVD_LLAMACPP_SRC)");
        return;
    };
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("read models dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("ggml-vocab-") && n.ends_with(".gguf"))
        .collect();
    names.sort();
    let (mut passed, mut failures, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    for name in names {
        let path = dir.join(&name);
        let (Ok(inp), Ok(out)) = (
            std::fs::read_to_string(path.with_extension("gguf.inp")),
            std::fs::read_to_string(path.with_extension("gguf.out")),
        ) else {
            skipped.push(format!("{name}: no .inp/.out"));
            continue;
        };
        let file = anedvd_gguf::GgufFile::open(&path).expect("open gguf");
        let tok = match Tokenizer::from_gguf_metadata(file.metadata()) {
            Ok(t) => t,
            Err(e @ (Error::UnknownModel { .. } | Error::UnknownPre(_))) => {
                skipped.push(format!("{name}: {e}"));
                continue;
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let cases = load_cases(&inp, &out);
        let mut bad = 0;
        for (text, want) in &cases {
            let got = tok.encode(text, false, false).expect("encode");
            if &got != want {
                bad += 1;
                if bad <= 3 {
                    failures.push(format!("{name}: {text:?}\n  want {want:?}\n  got  {got:?}"));
                }
            }
        }
        if bad == 0 {
            passed.push(format!("{name} ({} cases)", cases.len()));
        } else {
            failures.push(format!("{name}: {bad}/{} cases differ", cases.len()));
        }
    }
    eprintln!("passed: {passed:#?}\nskipped: {skipped:#?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        passed.len() >= 10,
        "too few vocabularies checked: {passed:?}"
    );
}
