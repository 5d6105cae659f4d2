//! Diagnostic tools behind `anedvd verify`, `check`, `kernels`, `ops`, `selftest`,
//! `inspect`, `tokenize`, `info`, `probe` and `width`. Each returns a typed
//! report; printing is the caller's business (the CLI formats them).
//!
//! These open models their own way (a bare [`DecoderProgram`], a tokenizer
//! without weights, a raw weight source) because they look at one part of
//! the stack, not at a ready [`crate::Engine`].

pub mod device;
pub mod inspect;
pub mod kernels;
pub mod ops;
pub mod verify;

use crate::load::hf_tokenizer;
use crate::Result;
use anedvd_base::WeightSource;
use anedvd_graph::DecoderProgram;
use anedvd_model::ConfigOverrides;
use anedvd_tokenizer::Tokenizer;
use std::path::Path;
use std::sync::Arc;

/// A model opened as a bare decoder program (no backend), with its
/// tokenizer when asked for.
pub struct OpenedProgram {
    /// The decoder program.
    pub program: DecoderProgram,
    /// The tokenizer, when requested.
    pub tokenizer: Option<Tokenizer>,
}

/// Opens the model at `path` (a .gguf file or a Hugging Face directory) as a
/// decoder program with `overrides` applied, and its tokenizer if `with_tokenizer`.
pub fn open_program(
    path: &Path,
    overrides: &ConfigOverrides,
    with_tokenizer: bool,
) -> Result<OpenedProgram> {
    let opened = anedvd_weights::open(path)?;
    let dir = opened.dir.clone();
    let kind = opened.kind;
    let source: Arc<dyn WeightSource> = Arc::from(opened.source);
    let tokenizer = if !with_tokenizer {
        None
    } else if let Some(dir) = &dir {
        let files = (
            dir.join("tokenizer.json"),
            dir.join("tokenizer_config.json"),
        );
        Some(hf_tokenizer(&files.0, &files.1)?.0)
    } else {
        Some(crate::load::gguf_tokenizer(path, source.metadata())?)
    };
    let (_, program) = crate::load::build_model(path, kind, source, overrides)?;
    Ok(OpenedProgram { program, tokenizer })
}

/// Opens the weights at `path` (a .gguf file or a Hugging Face directory)
/// and scans them for NaN and infinities ([`crate::check_tensors`], the
/// `--check-tensors` of the commands that do not go through
/// [`crate::Engine::load`]); `progress(done, total)` gets the bytes scanned.
pub fn check_tensors_at(path: &Path, progress: impl FnMut(u64, u64)) -> Result<()> {
    let opened = anedvd_weights::open(path)?;
    crate::load::scan_with_progress(opened.source.as_ref(), path, progress)
}

/// Loads the tokenizer of the model at `path`: a Hugging Face directory
/// (`tokenizer.json` + `tokenizer_config.json`; the weights are not opened),
/// a `tokenizer.json` file, or a GGUF file (its `tokenizer.ggml.*` metadata).
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    let (json_path, config_path) = if path.is_dir() {
        (
            path.join("tokenizer.json"),
            path.join("tokenizer_config.json"),
        )
    } else if path.extension().is_some_and(|e| e == "json") {
        let dir = path.parent().unwrap_or(Path::new("."));
        (path.to_path_buf(), dir.join("tokenizer_config.json"))
    } else {
        let opened = anedvd_weights::open(path)?;
        return crate::load::gguf_tokenizer(path, opened.source.metadata());
    };
    Ok(hf_tokenizer(&json_path, &config_path)?.0)
}
