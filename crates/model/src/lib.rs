//! The generic decoder: [`DecoderConfig`] (every option as data), built from
//! small family tables (`families/*.rs`), and the builder of the
//! backend-neutral [`DecoderProgram`](anedvd_graph::DecoderProgram).
//!
//! This crate reads only [`anedvd_base::Metadata`] and
//! [`anedvd_base::WeightSource`]; it never sees GGUF or safetensors types and
//! knows nothing about backends. A family is identified by
//! `general.architecture` (GGUF) or `model_type` (HF config.json); each table
//! maps both namings of keys and tensor names to one vocabulary (see
//! `docs/glossary.md`). There is no `if arch == ...` outside the tables.
//!
//! ```no_run
//! # fn f(source: std::sync::Arc<dyn anedvd_base::WeightSource>) -> Result<(), anedvd_model::Error> {
//! let (config, program) = anedvd_model::load(source, &anedvd_model::ConfigOverrides::default())?;
//! println!("{} layers of {}", config.n_layer, config.family);
//! # Ok(()) }
//! ```

mod config;
pub mod families;
pub mod family;
mod program;
pub mod views;

pub use config::{
    DecoderConfig, MoeConfig, RopeConfig, RopeScaling, SourceFormat, MAX_CONV_KERNEL,
};
pub use program::{
    base_inv_freq, llama3_inv_freq, longrope_attention_factor, longrope_inv_freq, yarn_inv_freq,
};

use anedvd_base::WeightSource;
use anedvd_graph::{DecoderProgram, RopePairing};
use std::sync::Arc;

/// Errors while resolving a config or building a program.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No family table matches the source.
    #[error("unknown model family: {format} `{name}` (known: {known})")]
    UnknownFamily {
        /// What was looked up (`general.architecture` or `model_type`).
        format: &'static str,
        /// The value found.
        name: String,
        /// Known families.
        known: String,
    },
    /// A required hyperparameter is absent.
    #[error("hyperparameter {param} is missing (looked for: {keys})")]
    MissingParam {
        /// The glossary name of the parameter.
        param: String,
        /// The keys tried.
        keys: String,
    },
    /// A metadata value is unusable.
    #[error("metadata key `{key}`: {reason}")]
    BadValue {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A metadata read failed.
    #[error(transparent)]
    Metadata(#[from] anedvd_base::Error),
    /// A tensor the config needs is absent.
    #[error("tensor `{0}` not found")]
    MissingTensor(String),
    /// Hyperparameters are inconsistent.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// A feature the generic decoder does not implement yet.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The built program failed validation (e.g. a tensor shape).
    #[error(transparent)]
    Program(#[from] anedvd_graph::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Options that override what the metadata says.
#[derive(Debug, Clone, Default)]
pub struct ConfigOverrides {
    /// Force a family table by name (`"llama"`, `"gemma3"`, ...).
    pub family: Option<String>,
    /// Force the RoPE pairing (for files converted without the usual permutation).
    pub rope_pairing: Option<RopePairing>,
    /// Replace the training context length.
    pub n_ctx_train: Option<usize>,
    /// Replace the sliding window (0 disables it). Needed for Mistral GGUFs,
    /// whose converter drops the window (llama.cpp ignores it too); use with
    /// `family: Some("mistral")` to apply it to every layer.
    pub sliding_window: Option<usize>,
}

/// Picks the family table and naming for `source`.
pub fn detect(
    source: &dyn WeightSource,
    overrides: &ConfigOverrides,
) -> Result<(&'static family::Family, SourceFormat, String)> {
    let md = source.metadata();
    let known = || {
        family::all()
            .iter()
            .map(|f| f.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (format, what, name) = if source.format_name() == "gguf" {
        (
            SourceFormat::Gguf,
            "general.architecture",
            md.str("general.architecture")?.to_string(),
        )
    } else {
        (
            SourceFormat::HuggingFace,
            "model_type",
            md.str("model_type")?.to_string(),
        )
    };
    let fam = match &overrides.family {
        Some(f) => family::by_name(f),
        None => match format {
            SourceFormat::Gguf => family::by_gguf_arch(&name),
            SourceFormat::HuggingFace => family::by_hf_model_type(&name),
        },
    };
    let fam = fam.ok_or_else(|| Error::UnknownFamily {
        format: what,
        name: overrides.family.clone().unwrap_or_else(|| name.clone()),
        known: known(),
    })?;
    Ok((fam, format, name))
}

/// Resolves the config of `source` (family detection plus every
/// hyperparameter check) without building the program: of the tensors, only
/// the token embedding's shape and which optional tensors exist are looked
/// at. [`load`] is this followed by the program build (the fuzz target
/// `config_json` drives it with an in-memory source).
pub fn resolve_config(
    source: &dyn WeightSource,
    overrides: &ConfigOverrides,
) -> Result<DecoderConfig> {
    let (fam, format, arch) = detect(source, overrides)?;
    config::resolve(source, fam, format, arch, overrides)
}

/// Resolves the config of `source` and builds its program. Every bound
/// tensor's shape is checked against the config.
pub fn load(
    source: Arc<dyn WeightSource>,
    overrides: &ConfigOverrides,
) -> Result<(DecoderConfig, DecoderProgram)> {
    let (fam, format, arch) = detect(source.as_ref(), overrides)?;
    let cfg = config::resolve(source.as_ref(), fam, format, arch, overrides)?;
    let program = program::build(&cfg, fam, source)?;
    Ok((cfg, program))
}

/// Things about how `source` is read under `overrides` that a user should
/// know, one sentence each (`inspect` prints them, the CLI's loaders print
/// them to stderr as `note: ...`):
/// today, a Mistral model converted to GGUF architecture `llama` without
/// `llama.attention.sliding_window` (llama.cpp's converter drops it) runs
/// with full attention on every layer, and LongRoPE models (Phi-3-128k,
/// Phi-3.5, Phi-4-mini) keep their short factors past the original context.
pub fn notes(source: &dyn WeightSource, overrides: &ConfigOverrides) -> Vec<String> {
    let md = source.metadata();
    let text = |k: &str| md.opt_str(k).ok().flatten().unwrap_or("");
    let mut notes = Vec::new();
    let arch = text("general.architecture");
    let named_mistral = ["general.name", "general.basename", "general.finetune"]
        .iter()
        .any(|k| text(k).to_ascii_lowercase().contains("mistral"));
    let looks_mistral = named_mistral || text("tokenizer.ggml.pre") == "tekken";
    let window_key = format!("{arch}.attention.sliding_window");
    if source.format_name() == "gguf"
        && arch == "llama"
        && looks_mistral
        && !md.contains(&window_key)
        && overrides.sliding_window.is_none()
    {
        notes.push(format!(
            "this looks like a Mistral model but the GGUF has no `{window_key}`: full \
             attention is used on every layer (as llama.cpp does); if the original \
             config.json sets `sliding_window`, pass --family mistral --sliding-window N"
        ));
    }
    let longrope = [
        "rope_parameters.rope_type",
        "rope_scaling.rope_type",
        "rope_scaling.type",
    ]
    .iter()
    .any(|k| text(k) == "longrope")
        || source.tensor("rope_factors_long.weight").is_some();
    if let Ok((family, format, arch)) = detect(source, overrides) {
        let r = config::Reader {
            md,
            family,
            format,
            arch,
        };
        let forced = r
            .require_usize(family::Param::NLayer)
            .and_then(|n| config::local_layers(&r, n))
            .is_ok_and(|types| config::last_layer_forced(&r, &types));
        if forced {
            notes.push(
                "the config's `layer_types` makes the last layer sliding; transformers runs \
                 it with full attention (and a warning), and so does anedvd"
                    .to_string(),
            );
        }
    }
    if longrope {
        notes.push(
            "LongRoPE: the short factors are used at every position (exact while a \
             sequence fits the model's original context); transformers switches to the \
             long factors past it, so longer sequences differ from it there"
                .to_string(),
        );
    }
    notes
}
