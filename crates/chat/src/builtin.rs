//! Official chat templates shipped with the crate, for model files that carry none.
//!
//! The texts are the models' own `chat_template`s (see `templates/extract_templates.py` for the
//! source of each). Which one a model gets is decided by the table below: first its
//! `general.architecture`, then marker tokens in its vocabulary.

/// A built-in chat template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinTemplate {
    /// Gemma 2/3 (`<start_of_turn>`; system folded into the first user turn, as Gemma 3's template).
    Gemma,
    /// Plain ChatML (`<|im_start|>`), as used by Qwen2 and many fine-tunes.
    Chatml,
    /// Llama 3.1 (`<|start_header_id|>`, with its tool-calling support).
    Llama3,
    /// Llama 2 chat (`[INST]`, `<<SYS>>`).
    Llama2,
    /// Mistral 7B Instruct v0.2 ("v1": ` [INST] ... [/INST]`, system prepended to the first turn).
    Mistral,
    /// Phi-3 / Phi-3.5 (`<|user|>`, `<|end|>`).
    Phi3,
    /// LFM2 (ChatML-like with a tool list).
    Lfm2,
    /// SmolLM2 (ChatML with its default system prompt).
    Smollm2,
    /// Qwen3 (ChatML with thinking and tool calls).
    Qwen3,
}

struct Entry {
    template: BuiltinTemplate,
    name: &'static str,
    source: &'static str,
    origin: &'static str,
}

const ENTRIES: &[Entry] = &[
    Entry {
        template: BuiltinTemplate::Gemma,
        name: "gemma",
        source: include_str!("../templates/gemma.jinja"),
        origin: "google/gemma-3-*-it tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Chatml,
        name: "chatml",
        source: include_str!("../templates/chatml.jinja"),
        origin: "teknium/OpenHermes-2.5-Mistral-7B tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Llama3,
        name: "llama3",
        source: include_str!("../templates/llama3.jinja"),
        origin: "meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Llama2,
        name: "llama2",
        source: include_str!("../templates/llama2.jinja"),
        origin: "meta-llama/Llama-2-13b-chat-hf tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Mistral,
        name: "mistral",
        source: include_str!("../templates/mistral.jinja"),
        origin: "mistralai/Mistral-7B-Instruct-v0.2 tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Phi3,
        name: "phi3",
        source: include_str!("../templates/phi3.jinja"),
        origin: "microsoft/Phi-3.5-mini-instruct tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Lfm2,
        name: "lfm2",
        source: include_str!("../templates/lfm2.jinja"),
        origin: "LiquidAI/LFM2-8B-A1B tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Smollm2,
        name: "smollm2",
        source: include_str!("../templates/smollm2.jinja"),
        origin: "HuggingFaceTB/SmolLM2-135M-Instruct tokenizer_config.json",
    },
    Entry {
        template: BuiltinTemplate::Qwen3,
        name: "qwen3",
        source: include_str!("../templates/qwen3.jinja"),
        origin: "Qwen/Qwen3-0.6B tokenizer_config.json",
    },
];

/// `general.architecture` values and the template their instruct models use.
const BY_ARCHITECTURE: &[(&str, BuiltinTemplate)] = &[
    ("gemma", BuiltinTemplate::Gemma),
    ("gemma2", BuiltinTemplate::Gemma),
    ("gemma3", BuiltinTemplate::Gemma),
    ("gemma3n", BuiltinTemplate::Gemma),
    ("qwen2", BuiltinTemplate::Chatml),
    ("qwen2moe", BuiltinTemplate::Chatml),
    ("qwen3", BuiltinTemplate::Qwen3),
    ("qwen3moe", BuiltinTemplate::Qwen3),
    ("phi3", BuiltinTemplate::Phi3),
    ("lfm2", BuiltinTemplate::Lfm2),
    ("lfm2moe", BuiltinTemplate::Lfm2),
    ("mistral", BuiltinTemplate::Mistral),
];

/// Vocabulary marker tokens, checked in order when the architecture alone does not decide
/// (e.g. `llama` is shared by Llama 2/3, Mistral, SmolLM2 and many fine-tunes).
const BY_TOKEN: &[(&str, BuiltinTemplate)] = &[
    ("<start_of_turn>", BuiltinTemplate::Gemma),
    ("<|start_header_id|>", BuiltinTemplate::Llama3),
    ("<|im_start|>", BuiltinTemplate::Chatml),
    ("<|assistant|>", BuiltinTemplate::Phi3),
    ("[INST]", BuiltinTemplate::Mistral),
];

/// Architectures that, with no marker token, fall back to a template.
const FALLBACK: &[(&str, BuiltinTemplate)] = &[("llama", BuiltinTemplate::Llama2)];

impl BuiltinTemplate {
    /// Every built-in template.
    pub const ALL: [BuiltinTemplate; 9] = [
        BuiltinTemplate::Gemma,
        BuiltinTemplate::Chatml,
        BuiltinTemplate::Llama3,
        BuiltinTemplate::Llama2,
        BuiltinTemplate::Mistral,
        BuiltinTemplate::Phi3,
        BuiltinTemplate::Lfm2,
        BuiltinTemplate::Smollm2,
        BuiltinTemplate::Qwen3,
    ];

    fn entry(self) -> &'static Entry {
        // ENTRIES lists every variant; the fallback is never reached.
        ENTRIES
            .iter()
            .find(|e| e.template == self)
            .unwrap_or(&ENTRIES[0])
    }

    /// Short name (`gemma`, `chatml`, `llama3`, ...).
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// The Jinja source.
    pub fn source(self) -> &'static str {
        self.entry().source
    }

    /// Where the text comes from (model repository and file).
    pub fn origin(self) -> &'static str {
        self.entry().origin
    }

    /// Look a built-in up by its short name.
    pub fn from_name(name: &str) -> Option<BuiltinTemplate> {
        ENTRIES.iter().find(|e| e.name == name).map(|e| e.template)
    }
}

/// Choose a built-in template for a model without one, from its GGUF `general.architecture` and
/// a test for whether its vocabulary holds a token. `None` when nothing fits.
pub fn builtin_for(
    architecture: &str,
    has_token: impl Fn(&str) -> bool,
) -> Option<BuiltinTemplate> {
    if let Some((_, t)) = BY_ARCHITECTURE.iter().find(|(a, _)| *a == architecture) {
        return Some(*t);
    }
    if let Some((_, t)) = BY_TOKEN.iter().find(|(tok, _)| has_token(tok)) {
        return Some(*t);
    }
    FALLBACK
        .iter()
        .find(|(a, _)| *a == architecture)
        .map(|(_, t)| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_an_entry() {
        for t in BuiltinTemplate::ALL {
            assert!(ENTRIES.iter().any(|e| e.template == t), "{t:?}");
            assert_eq!(BuiltinTemplate::from_name(t.name()), Some(t));
            assert!(!t.source().is_empty());
        }
    }

    #[test]
    fn selection() {
        let none = |_: &str| false;
        assert_eq!(builtin_for("gemma3", none), Some(BuiltinTemplate::Gemma));
        assert_eq!(builtin_for("qwen2", none), Some(BuiltinTemplate::Chatml));
        assert_eq!(
            builtin_for("llama", |t| t == "<|start_header_id|>"),
            Some(BuiltinTemplate::Llama3)
        );
        assert_eq!(
            builtin_for("llama", |t| t == "<|im_start|>"),
            Some(BuiltinTemplate::Chatml)
        );
        assert_eq!(
            builtin_for("llama", |t| t == "[INST]"),
            Some(BuiltinTemplate::Mistral)
        );
        assert_eq!(builtin_for("llama", none), Some(BuiltinTemplate::Llama2));
        assert_eq!(
            builtin_for("unknownarch", |t| t == "<start_of_turn>"),
            Some(BuiltinTemplate::Gemma)
        );
        assert_eq!(builtin_for("unknownarch", none), None);
    }
}
