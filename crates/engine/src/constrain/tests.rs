//! The bridge to llguidance over a real tokenizer (the tiny qwen2 fixture's
//! byte-level BPE): random logits are masked and sampled, and what comes
//! out is checked by an outside parser (serde_json) or by the grammar's
//! plain meaning.

use super::*;
use anedvd_tokenizer::Tokenizer;

pub(crate) fn tokenizer() -> Tokenizer {
    let dir = anedvd_testkit::fixtures::dir("qwen2");
    let json = std::fs::read_to_string(dir.join("tokenizer.json")).expect("tokenizer.json");
    let config = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok();
    Tokenizer::from_tokenizer_json(&json, config.as_deref()).expect("tokenizer")
}

/// xorshift64*: random logits for the tests.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
    }
}

/// Generates up to `max` tokens under `grammar` from random logits (arg-max
/// of the masked row); returns the text and whether the grammar completed
/// or an end token was chosen.
fn run(tok: &Tokenizer, grammar: &CompiledGrammar, seed: u64, max: usize) -> (String, bool) {
    let mut c = grammar.start();
    let mut noise = Noise(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut ids = Vec::new();
    let vocab = tok.vocab_size() + 5; // a padded logits row
    for _ in 0..max {
        if c.is_complete() {
            return (tok.decode(&ids, false).expect("decode"), true);
        }
        let mut row: Vec<f32> = (0..vocab).map(|_| noise.next()).collect();
        c.apply(&mut row).expect("mask");
        let id = crate::sampler::argmax(&row);
        assert!(
            row[id as usize].is_finite(),
            "arg-max picked a masked token"
        );
        c.commit(id).expect("commit");
        if tok.is_eog(id) {
            return (tok.decode(&ids, false).expect("decode"), true);
        }
        ids.push(id);
    }
    (tok.decode(&ids, false).expect("decode"), false)
}

#[test]
fn json_schema_outputs_parse_and_fit_the_schema() {
    let tok = tokenizer();
    let constraints = Constraints::new(&tok).expect("constraints");
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false,
    });
    let g = constraints
        .compile(&Grammar::JsonSchema {
            schema,
            strict: true,
        })
        .expect("compile");
    for seed in 1..=20u64 {
        let (text, done) = run(&tok, &g, seed, 400);
        assert!(done, "seed {seed}: no end after 400 tokens: {text:?}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("seed {seed}: {text:?} is not JSON: {e}"));
        let o = v.as_object().expect("an object");
        assert_eq!(o.len(), 3, "seed {seed}: {text}");
        assert!(o["name"].as_str().expect("name").chars().count() <= 8);
        let age = o["age"].as_i64().expect("integer age");
        assert!((0..=150).contains(&age), "seed {seed}: age {age}");
        for t in o["tags"].as_array().expect("tags") {
            assert!(["a", "b", "c"].contains(&t.as_str().expect("tag")));
        }
        // the fixed layout: keys followed by ": ", items by ", "
        assert!(text.starts_with("{\"name\": "), "seed {seed}: {text}");
    }
}

#[test]
fn json_object_mode_gives_an_object_and_no_control_tokens() {
    let tok = tokenizer();
    let constraints = Constraints::new(&tok).expect("constraints");
    let g = constraints.compile(&Grammar::JsonObject).expect("compile");
    for seed in 1..=10u64 {
        let mut c = g.start();
        let mut noise = Noise(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut ids = Vec::new();
        for _ in 0..300 {
            if c.is_complete() {
                break;
            }
            let mut row: Vec<f32> = (0..tok.vocab_size()).map(|_| noise.next()).collect();
            c.apply(&mut row).expect("mask");
            for id in 0..tok.vocab_size() as u32 {
                if tok.is_special(id) && !tok.is_eog(id) {
                    assert_eq!(row[id as usize], f32::NEG_INFINITY, "control token {id}");
                }
            }
            let id = crate::sampler::argmax(&row);
            c.commit(id).expect("commit");
            if tok.is_eog(id) {
                break;
            }
            ids.push(id);
        }
        let text = tok.decode(&ids, false).expect("decode");
        if c.is_accepting() || c.is_complete() {
            let v: Value = serde_json::from_str(&text).expect("JSON");
            assert!(v.is_object(), "{text}");
        } else {
            // cut off: still the start of an object
            assert!(text.starts_with('{'), "{text}");
        }
    }
}

#[test]
fn regex_and_gbnf_grammars_constrain_the_text() {
    let tok = tokenizer();
    let constraints = Constraints::new(&tok).expect("constraints");
    let rx = constraints
        .compile(&Grammar::Regex("(yes|no)".into()))
        .expect("regex");
    for seed in 1..=10u64 {
        let (text, done) = run(&tok, &rx, seed, 20);
        assert!(done && (text == "yes" || text == "no"), "{text:?}");
    }
    let lark = constraints
        .compile(&Grammar::Lark("start: \"a\" \"b\"+".into()))
        .expect("lark");
    for seed in 1..=10u64 {
        let (text, _) = run(&tok, &lark, seed, 30);
        assert!(text.starts_with("ab"), "{text:?}");
        assert!(text[1..].chars().all(|c| c == 'b'), "{text:?}");
    }
}

#[test]
fn a_forbidden_token_is_refused_on_commit() {
    let tok = tokenizer();
    let constraints = Constraints::new(&tok).expect("constraints");
    let g = constraints
        .compile(&Grammar::Regex("[0-9]+".into()))
        .expect("regex");
    let mut c = g.start();
    let letter = tok.encode("x", false, false).expect("encode")[0];
    assert!(c.commit(letter).is_err());
}

#[test]
fn invalid_grammars_name_the_problem() {
    let tok = tokenizer();
    let constraints = Constraints::new(&tok).expect("constraints");
    let bad = [
        Grammar::JsonSchema {
            schema: json!("string"),
            strict: true,
        },
        Grammar::JsonSchema {
            schema: json!({"type": "no-such-type"}),
            strict: true,
        },
        Grammar::Lark("start: undefined_rule".into()),
        Grammar::Regex("(unclosed".into()),
    ];
    for g in bad {
        match constraints.compile(&g) {
            Err(Error::BadGrammar(m)) => assert!(!m.is_empty(), "{g:?}"),
            other => panic!("{g:?}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn word_at_a_time_masking_matches_bit_by_bit() {
    let mut noise = Noise(77);
    for (vocab, row_len) in [(100usize, 100usize), (100, 130), (64, 64), (1000, 1003)] {
        let words: Vec<u32> = (0..vocab.div_ceil(32))
            .map(|i| match i % 4 {
                0 => 0,
                1 => u32::MAX,
                _ => (noise.next().to_bits()) ^ 0x5555_5555,
            })
            .collect();
        let row: Vec<f32> = (0..row_len).map(|_| noise.next()).collect();
        let mut fast = row.clone();
        let any = mask_row(&words, vocab, &mut fast);
        let mut slow = row.clone();
        let mut slow_any = false;
        for (i, l) in slow.iter_mut().enumerate() {
            let set = i < vocab && words[i / 32] & (1 << (i % 32)) != 0;
            if set {
                slow_any = true;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        assert_eq!(any, slow_any);
        assert_eq!(
            fast.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            slow.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}

/// The cases of llama.cpp's `tests/test-grammar-integration.cpp` (transcribed
/// into `gbnf_cases.json`, source commit inside): each grammar, translated,
/// accepts its passing strings and refuses its failing ones; a token stands
/// for one token id, text for a token per byte.
#[test]
fn gbnf_translation_passes_llama_cpp_grammar_cases() {
    let cases: Value =
        serde_json::from_str(include_str!("gbnf_cases.json")).expect("gbnf_cases.json");
    let no_tokens = |_: &str| None;
    let tokens_of = |parts: &Value| -> Vec<u32> {
        let mut out = Vec::new();
        for part in parts.as_array().expect("parts") {
            match part {
                Value::Number(id) => out.push(id.as_u64().expect("id") as u32),
                Value::String(text) => out.extend(text.bytes().map(u32::from)),
                other => panic!("bad part {other}"),
            }
        }
        out
    };
    let mut checked = 0;
    for case in cases["cases"].as_array().expect("cases") {
        let name = &case["name"];
        let grammar = case["grammar"].as_str().expect("grammar");
        let lark =
            gbnf::gbnf_to_lark(grammar, &no_tokens).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (key, want) in [("pass", true), ("fail", false)] {
            for text in case[key].as_array().expect("strings") {
                let text = text.as_str().expect("string");
                let bytes: Vec<u32> = text.bytes().map(u32::from).collect();
                assert_eq!(
                    lark_accepts_bytes(&lark, &bytes),
                    want,
                    "{name}: {text:?}\n{lark}"
                );
                checked += 1;
            }
        }
    }
    for case in cases["token_cases"].as_array().expect("token cases") {
        let name = &case["name"];
        let grammar = case["grammar"].as_str().expect("grammar");
        let lark =
            gbnf::gbnf_to_lark(grammar, &no_tokens).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (key, want) in [("pass_parts", true), ("fail_parts", false)] {
            for parts in case[key].as_array().expect("parts") {
                let tokens = tokens_of(parts);
                assert_eq!(
                    lark_accepts_bytes(&lark, &tokens),
                    want,
                    "{name}: {parts}\n{lark}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 80, "only {checked} strings checked");
    // llama.cpp refuses these; here an undefined name and a missing root
    // are refused, and left recursion works (llguidance parses with Earley).
    for case in cases["invalid"].as_array().expect("invalid") {
        let name = case["name"].as_str().expect("name");
        let grammar = case["grammar"].as_str().expect("grammar");
        let result = gbnf::gbnf_to_lark(grammar, &no_tokens);
        if name.starts_with("left recursion") {
            let lark = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                lark_accepts_bytes(&lark, &[u32::from(b'a')]),
                "{name}\n{lark}"
            );
            assert!(!lark_accepts_bytes(&lark, &[]), "{name}\n{lark}");
        } else {
            let e = result.expect_err(name);
            assert!(
                e.message.contains("root") || e.message.contains("never defined"),
                "{name}: {e}"
            );
        }
    }
    // The simple left-recursive grammar means a+.
    let lark = gbnf::gbnf_to_lark("root ::= \"a\" | root \"a\"", &no_tokens).expect("lark");
    assert!(lark_accepts_bytes(&lark, &[97, 97, 97]));
    assert!(!lark_accepts_bytes(&lark, &[97, 98]));
}

/// One-character lexemes keep GBNF's meaning where a greedy lexer would
/// not: the first alternative must be able to stop short.
#[test]
fn gbnf_prefix_alternatives_are_not_swallowed() {
    let lark = gbnf::gbnf_to_lark("root ::= (\"a\" | \"ab\") \"b\"", &|_| None).expect("lark");
    for (text, want) in [("ab", true), ("abb", true), ("a", false), ("abbb", false)] {
        let bytes: Vec<u32> = text.bytes().map(u32::from).collect();
        assert_eq!(lark_accepts_bytes(&lark, &bytes), want, "{text}\n{lark}");
    }
}
