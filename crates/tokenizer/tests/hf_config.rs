//! tokenizer_config.json handling: bos/eos names, add_bos/add_eos flags
//! overriding the post-processor (as transformers does), added_tokens_decoder.

use anedvd_tokenizer::Tokenizer;
use std::path::Path;

fn spm_json() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/trained_spm.json");
    std::fs::read_to_string(p).expect("fixture")
}

#[test]
fn post_processor_adds_bos_by_default() {
    let tok = Tokenizer::from_tokenizer_json(&spm_json(), None).unwrap();
    let s = tok.token_id("<s>").unwrap();
    assert_eq!(tok.bos_id(), Some(s));
    assert!(tok.add_bos() && !tok.add_eos());
    assert_eq!(tok.encode("hi", true, true).unwrap()[0], s);
}

#[test]
fn config_flags_override() {
    let cfg = r#"{"bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": false,
                  "add_eos_token": true, "pad_token": "<unk>"}"#;
    let tok = Tokenizer::from_tokenizer_json(&spm_json(), Some(cfg)).unwrap();
    let eos = tok.token_id("</s>").unwrap();
    assert_eq!(tok.eos_id(), Some(eos));
    assert_eq!(tok.pad_id(), tok.token_id("<unk>"));
    let ids = tok.encode("hi", true, true).unwrap();
    assert_ne!(ids[0], tok.bos_id().unwrap());
    assert_eq!(*ids.last().unwrap(), eos);
    assert!(tok.is_eog(eos));
    assert!(tok.is_eog(tok.token_id("<end_of_turn>").unwrap()));
}

#[test]
fn added_tokens_decoder_extends_vocab() {
    let n = Tokenizer::from_tokenizer_json(&spm_json(), None)
        .unwrap()
        .vocab_size() as u32;
    let cfg = format!(
        r#"{{"added_tokens_decoder": {{"{n}": {{"content": "<tool_call>", "special": true}},
                                       "{m}": {{"content": "hello there", "special": false}}}}}}"#,
        m = n + 1
    );
    let tok = Tokenizer::from_tokenizer_json(&spm_json(), Some(&cfg)).unwrap();
    assert_eq!(tok.vocab_size() as u32, n + 2);
    let ids = tok.encode("a<tool_call>b", false, true).unwrap();
    assert!(ids.contains(&n), "{ids:?}");
    // Without parse_special the special one is plain text; the non-special one still matches.
    let ids = tok.encode("a<tool_call>b", false, false).unwrap();
    assert!(!ids.contains(&n), "{ids:?}");
    assert!(tok.is_special(n) && !tok.is_special(n + 1));
    assert_eq!(tok.decode(&[n], true).unwrap(), "");
    assert_eq!(tok.decode(&[n], false).unwrap(), "<tool_call>");
}
