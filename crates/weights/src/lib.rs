//! Opens model weights as a format-neutral [`WeightSource`].
//!
//! [`open`] picks the reader from the path: a `*.gguf` file goes to
//! `anedvd-gguf`; a directory is a Hugging Face checkpoint (`config.json` plus
//! `model.safetensors` or a sharded `model.safetensors.index.json`), read
//! through the `safetensors` crate over read-only mmaps; a bare
//! `*.safetensors` file is read without config. safetensors dtypes map to
//! ggml types and shapes are reversed into ggml `ne` order; `config.json` is
//! flattened into [`anedvd_base::Metadata`] with dotted keys.
//!
//! This crate does not interpret metadata or tensor names (no model families,
//! no tokenizer): it only opens files. For Hugging Face directories it hands
//! back the directory so the engine can find `tokenizer.json` and friends.
//!
//! ```no_run
//! let model = anedvd_weights::open("model.gguf").unwrap();
//! println!("{} tensors", model.source.tensors().len());
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod config;
mod error;
mod hf;
mod safetensors;

pub use crate::safetensors::{base_metadata, ggml_dtype, SafetensorsSource};
pub use anedvd_base::WeightSource;
pub use config::flatten_config;
pub use error::{Error, Result};
pub use hf::{open_dir, INDEX_FILE, SINGLE_FILE};

use std::path::{Path, PathBuf};

/// Which on-disk format a model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// A single GGUF file.
    Gguf,
    /// A Hugging Face directory (`config.json` + safetensors).
    HuggingFace,
    /// A single `.safetensors` file without `config.json`.
    Safetensors,
}

impl ModelFormat {
    /// A short name (`gguf`, `hf-safetensors`, `safetensors`).
    pub fn name(self) -> &'static str {
        match self {
            ModelFormat::Gguf => "gguf",
            ModelFormat::HuggingFace => "hf-safetensors",
            ModelFormat::Safetensors => "safetensors",
        }
    }
}

/// An opened model: its weights and where they came from.
pub struct OpenedModel {
    /// Tensors and metadata.
    pub source: Box<dyn WeightSource>,
    /// The format detected.
    pub kind: ModelFormat,
    /// The path given to [`open`].
    pub path: PathBuf,
    /// For Hugging Face directories, the directory (where `tokenizer.json`,
    /// `tokenizer_config.json` and `chat_template.jinja` live); else `None`.
    pub dir: Option<PathBuf>,
}

impl std::fmt::Debug for OpenedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedModel")
            .field("kind", &self.kind)
            .field("path", &self.path)
            .field("tensors", &self.source.tensors().len())
            .finish()
    }
}

/// The format [`open`] would use for `path`, without opening it.
pub fn detect(path: &Path) -> Result<ModelFormat> {
    if path.is_dir() {
        return Ok(ModelFormat::HuggingFace);
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("gguf") => Ok(ModelFormat::Gguf),
        Some("safetensors") => Ok(ModelFormat::Safetensors),
        _ if !path.exists() => Err(Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        }),
        _ => Err(Error::UnknownFormat {
            path: path.to_path_buf(),
        }),
    }
}

/// Opens the model at `path` (a `.gguf` file, a Hugging Face directory or a
/// `.safetensors` file).
pub fn open(path: impl AsRef<Path>) -> Result<OpenedModel> {
    let path = path.as_ref();
    let kind = detect(path)?;
    let (source, dir): (Box<dyn WeightSource>, _) = match kind {
        ModelFormat::Gguf => {
            let file = anedvd_gguf::GgufFile::open(path).map_err(|e| match e {
                // already "PATH: cause": not prefixed with the path again
                anedvd_gguf::Error::Io { path, source } => Error::Io { path, source },
                source => Error::Gguf {
                    path: path.to_path_buf(),
                    source,
                },
            })?;
            (Box::new(file), None)
        }
        ModelFormat::HuggingFace => (Box::new(open_dir(path)?), Some(path.to_path_buf())),
        ModelFormat::Safetensors => (
            Box::new(SafetensorsSource::open_files(
                &[path.to_path_buf()],
                base_metadata(),
            )?),
            None,
        ),
    };
    Ok(OpenedModel {
        source,
        kind,
        path: path.to_path_buf(),
        dir,
    })
}
