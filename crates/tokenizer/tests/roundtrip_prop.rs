//! Property: encoding never fails or panics on arbitrary text, and decoding
//! gives the text back for lossless vocabularies (byte fallback / byte-level).

use anedvd_tokenizer::Tokenizer;
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

fn fixture(name: &str) -> Tokenizer {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    Tokenizer::from_tokenizer_json(&std::fs::read_to_string(p).expect("fixture"), None).expect(name)
}

fn spm() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| fixture("trained_spm.json"))
}

fn bytelevel() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| fixture("trained_bytelevel.json"))
}

fn gemma3() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let p = std::env::var("ANEDVD_GEMMA3_GGUF")
            .unwrap_or_else(|_| "/root/.cache/models/gemma3-270m-q4_k_m.gguf".into());
        let file = anedvd_gguf::GgufFile::open(&p).ok()?;
        Tokenizer::from_gguf_metadata(file.metadata()).ok()
    })
    .as_ref()
}

/// Text from many scripts, whitespace and special-token fragments (no `▁`,
/// which SentencePiece-style vocabularies cannot tell from a space).
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z0-9 ]{1,8}",
        "[\\t\\n\\r ]{1,4}",
        "[\u{4e00}-\u{4e40}\u{0600}-\u{0620}\u{0400}-\u{0430}]{1,4}",
        "[\u{1F600}-\u{1F640}\u{2200}-\u{2240}]{1,3}",
        Just("<start_of_turn>".to_string()),
        Just("<|im_end|>".to_string()),
        "[^\u{2581}]{1,3}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn spm_fixture_roundtrips(s in text()) {
        let tok = spm();
        let ids = tok.encode(&s, false, false).unwrap();
        prop_assert_eq!(tok.decode(&ids, false).unwrap(), s.clone());
        let mut d = tok.stream_decoder(false);
        let mut streamed: String = ids.iter().map(|&i| d.push(i).unwrap()).collect();
        streamed.push_str(&d.finish());
        prop_assert_eq!(streamed, s);
    }

    #[test]
    fn bytelevel_fixture_roundtrips(s in text()) {
        // The fixture's normalizer is NFC; byte-level BPE is otherwise lossless.
        use unicode_normalization::UnicodeNormalization;
        let tok = bytelevel();
        let ids = tok.encode(&s, false, false).unwrap();
        let nfc: String = s.nfc().collect();
        prop_assert_eq!(tok.decode(&ids, false).unwrap(), nfc);
    }

    #[test]
    fn gemma3_roundtrips(s in text()) {
        if let Some(tok) = gemma3() {
            let ids = tok.encode(&s, false, false).unwrap();
            prop_assert_eq!(tok.decode(&ids, false).unwrap(), s.clone());
            let ids = tok.encode(&s, true, true).unwrap();
            prop_assert_eq!(tok.decode(&ids, false).unwrap(), format!("<bos>{s}"));
        }
    }
}
