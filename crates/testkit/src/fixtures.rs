//! The tiny reference checkpoints and what is known about each.

use anedvd_base::WeightSource;
use anedvd_graph::DecoderProgram;
use anedvd_model::ConfigOverrides;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// How a fixture's weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The HF directory (config.json + float32 safetensors).
    Hf,
    /// llama.cpp's F32 conversion.
    GgufF32,
    /// llama.cpp's Q8_0 conversion (norms stay F32).
    GgufQ8,
}

impl Format {
    /// Every format, HF first.
    pub const ALL: [Format; 3] = [Format::Hf, Format::GgufF32, Format::GgufQ8];

    /// Short name for messages (`hf`, `f32`, `q8_0`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Hf => "hf",
            Format::GgufF32 => "f32",
            Format::GgufQ8 => "q8_0",
        }
    }

    /// The file (or directory) inside a fixture directory.
    pub fn file(self) -> &'static str {
        match self {
            Format::Hf => ".",
            Format::GgufF32 => "model-f32.gguf",
            Format::GgufQ8 => "model-q8_0.gguf",
        }
    }
}

/// `tests/fixtures/models` of the repository.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/models")
}

/// The fixture directory of `family`.
pub fn dir(family: &str) -> PathBuf {
    root().join(family)
}

/// The weights of `family` in `format`.
pub fn path(family: &str, format: Format) -> PathBuf {
    dir(family).join(format.file())
}

/// Fixtures of a family's config variant, each with the family it
/// belongs to (a directory beside the family's own, same generator).
pub const VARIANTS: &[(&str, &str)] = &[
    // Gemma 4 31B's `attention_k_eq_v`: full layers take V from K.
    ("gemma4_keqv", "gemma4"),
];

/// Every fixture: each family the model crate knows, in its registry
/// order, then the variants. Each family must have a fixture: a family
/// added without one fails the conformance suite.
pub fn families() -> Vec<&'static str> {
    let registered = anedvd_model::family::all().iter().map(|f| f.name);
    registered.chain(VARIANTS.iter().map(|(v, _)| *v)).collect()
}

/// The family a fixture belongs to (itself unless a variant).
pub fn family_of(fixture: &str) -> &str {
    VARIANTS
        .iter()
        .find(|(v, _)| *v == fixture)
        .map_or(fixture, |(_, f)| f)
}

/// The families whose F32 programs the ANE lowering accepts (the others
/// are refused by name; the conformance suite checks those refusals).
pub fn ane_families() -> Vec<&'static str> {
    families()
        .into_iter()
        .filter(|f| {
            let p = program(f, Format::GgufF32);
            anedvd_ane::lower::layer_views(&p, "ane").is_ok()
        })
        .collect()
}

/// What transformers computed for a fixture (`reference.json`).
#[derive(Debug, Clone)]
pub struct Reference {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// Logits at the last prompt position.
    pub last: Vec<f32>,
    /// Logits at every prompt position.
    pub all: Vec<Vec<f32>>,
    /// Greedy continuation (16 tokens).
    pub greedy: Vec<u32>,
    /// Per greedy step: transformers' top-1 and top-2 tokens and the margin
    /// between their logits (empty for references made before the field).
    pub greedy_top2: Vec<([u32; 2], f64)>,
    /// The whole file, for the fields above do not cover.
    pub json: Value,
}

/// Token ids of a JSON array.
pub fn ids(v: &Value) -> Vec<u32> {
    let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .map(|x| x.as_u64().and_then(|i| u32::try_from(i).ok()))
        .collect::<Option<Vec<u32>>>()
        .unwrap_or_else(|| panic!("expected an array of token ids, found {v}"))
}

/// Floats of a JSON array.
pub fn floats(v: &Value) -> Vec<f32> {
    let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .map(|x| x.as_f64().map(|f| f as f32))
        .collect::<Option<Vec<f32>>>()
        .unwrap_or_else(|| panic!("expected an array of numbers, found {v}"))
}

fn read_json(path: PathBuf) -> Value {
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (fixtures are committed)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The transformers reference of `family`.
pub fn reference(family: &str) -> Reference {
    let json = read_json(dir(family).join("reference.json"));
    let all = json["all_logits"]
        .as_array()
        .map(|rows| rows.iter().map(floats).collect())
        .unwrap_or_default();
    Reference {
        prompt: ids(&json["prompt_ids"]),
        last: floats(&json["last_logits"]),
        all,
        greedy: ids(&json["greedy_new_ids"]),
        greedy_top2: top2(&json),
        json,
    }
}

fn top2(json: &Value) -> Vec<([u32; 2], f64)> {
    let (Some(pairs), Some(margins)) = (
        json["greedy_top2_ids"].as_array(),
        json["greedy_top2_margins"].as_array(),
    ) else {
        return Vec::new();
    };
    pairs
        .iter()
        .zip(margins)
        .map(|(p, m)| {
            let p = ids(p);
            assert_eq!(p.len(), 2, "greedy_top2_ids entries are pairs");
            ([p[0], p[1]], m.as_f64().unwrap_or(f64::NAN))
        })
        .collect()
}

/// The `config.json` of `family`'s HF directory.
pub fn hf_config(family: &str) -> Value {
    read_json(dir(family).join("config.json"))
}

/// The overrides `format` of `family` needs to compute what transformers
/// computes — the one place this is decided. llama.cpp's converter maps
/// Mistral to architecture `llama` and drops `sliding_window` (llama.cpp
/// ignores it as well), so the Mistral GGUFs are loaded with the mistral
/// table and the window from config.json.
pub fn overrides(family: &str, format: Format) -> ConfigOverrides {
    if family != "mistral" || format == Format::Hf {
        return ConfigOverrides::default();
    }
    let window = hf_config(family)["sliding_window"]
        .as_u64()
        .and_then(|w| usize::try_from(w).ok());
    ConfigOverrides {
        family: Some("mistral".into()),
        sliding_window: window,
        ..Default::default()
    }
}

/// Opens `family` in `format` and builds its program with
/// [`overrides`].
pub fn program(family: &str, format: Format) -> DecoderProgram {
    program_with(family, format, &overrides(family, format))
}

/// [`program`] with explicit overrides.
pub fn program_with(family: &str, format: Format, overrides: &ConfigOverrides) -> DecoderProgram {
    let path = path(family, format);
    let opened = anedvd_weights::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let source: Arc<dyn WeightSource> = Arc::from(opened.source);
    anedvd_model::load(source, overrides)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .1
}
