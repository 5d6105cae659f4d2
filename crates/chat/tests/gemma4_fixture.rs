//! The tiny Gemma 4 fixture's own chat template (tests/fixtures/models/gemma4)
//! renders the prompts of its `reference.json` byte for byte as transformers'
//! `apply_chat_template` did, taken from the HF files (chat_template.jinja,
//! bos/eos from tokenizer_config.json) and from each GGUF
//! (`tokenizer.chat_template`, bos/eos the tokens its metadata names), as the
//! engine finds them. That the rendered text tokenizes to transformers' ids is
//! checked in crates/tokenizer/tests/gemma4_fixture.rs.

use anedvd_chat::{
    special_tokens_from_tokenizer_config, template_from_hf_files, ChatTemplate, Message,
    RenderOptions,
};
use anedvd_tokenizer::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/models/gemma4")
}

fn read(name: &str) -> String {
    let path = fixture_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The template with the bos/eos strings it is rendered with, per form.
fn templates() -> Vec<(&'static str, ChatTemplate)> {
    let config = read("tokenizer_config.json");
    let source = template_from_hf_files(Some(&read("chat_template.jinja")), Some(&config))
        .expect("template")
        .expect("the fixture has a template");
    let specials = special_tokens_from_tokenizer_config(&config).expect("specials");
    let (bos, eos) = (specials.bos.expect("bos"), specials.eos.expect("eos"));
    let mut out = vec![(
        "HF files",
        ChatTemplate::new(&source, &bos, &eos).expect("HF template"),
    )];
    for name in ["model-f32.gguf", "model-q8_0.gguf"] {
        let file = anedvd_gguf::GgufFile::open(fixture_dir().join(name)).expect(name);
        let md = file.metadata();
        let source = md
            .opt_str("tokenizer.chat_template")
            .expect("metadata")
            .expect("the converter writes the template");
        let tok = Tokenizer::from_gguf_metadata(md).expect(name);
        let text = |id: Option<u32>| {
            id.and_then(|i| tok.token_text(i))
                .expect("special token")
                .to_owned()
        };
        let (bos, eos) = (text(tok.bos_id()), text(tok.eos_id()));
        out.push((
            name,
            ChatTemplate::new(source, &bos, &eos).expect("GGUF template"),
        ));
    }
    out
}

#[test]
fn chat_prompts_render_as_transformers() {
    let r: Value = serde_json::from_str(&read("reference.json")).expect("reference.json");
    for (form, tmpl) in templates() {
        // Plain, and with thinking on (a system turn opened by `<|think|>`,
        // no empty thought channel after the generation prompt).
        for key in ["chat", "chat_thinking"] {
            let chat = &r[key];
            let messages: Vec<Message> =
                serde_json::from_value(chat["messages"].clone()).expect("messages");
            let mut opts = RenderOptions {
                add_generation_prompt: chat["add_generation_prompt"].as_bool().expect("flag"),
                ..Default::default()
            };
            if let Some(kwargs) = chat["template_kwargs"].as_object() {
                opts.extra = kwargs.clone();
            }
            let got = tmpl.render(&messages, &opts).expect("render");
            assert_eq!(
                got,
                chat["rendered"].as_str().expect("rendered"),
                "{form} {key}"
            );
        }
    }
}
