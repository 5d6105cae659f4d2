//! The error type of the weight loaders; variants name the file, shard or
//! tensor they are about.

use std::path::PathBuf;

/// Everything that can go wrong opening weights.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The path is neither a `.gguf` file, a `.safetensors` file nor a directory.
    #[error("{}: unknown model format (expected a .gguf file, a .safetensors file or a Hugging Face model directory)", path.display())]
    UnknownFormat {
        /// The path given.
        path: PathBuf,
    },
    /// The GGUF reader refused the file.
    #[error("{}: {source}", path.display())]
    Gguf {
        /// The GGUF file.
        path: PathBuf,
        /// The reader's error.
        #[source]
        source: anedvd_gguf::Error,
    },
    /// A Hugging Face directory without `config.json`.
    #[error("{}: no config.json in this directory (a Hugging Face model directory needs one)", dir.display())]
    MissingConfig {
        /// The directory.
        dir: PathBuf,
    },
    /// `config.json` is not a JSON object.
    #[error("{}: {reason}", path.display())]
    BadConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A directory with neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error("{}: no model.safetensors or model.safetensors.index.json", dir.display())]
    NoWeights {
        /// The directory.
        dir: PathBuf,
    },
    /// `model.safetensors.index.json` is malformed.
    #[error("{}: {reason}", path.display())]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A shard named in the index does not exist.
    #[error("shard {} listed in {} does not exist", shard.display(), index.display())]
    MissingShard {
        /// The missing shard's path.
        shard: PathBuf,
        /// The index naming it.
        index: PathBuf,
    },
    /// The index maps a tensor to a shard that does not contain it.
    #[error("tensor `{tensor}` is listed in the index under {} but that shard has no such tensor", shard.display())]
    TensorNotInShard {
        /// The tensor name.
        tensor: String,
        /// The shard the index names.
        shard: PathBuf,
    },
    /// The same tensor name appears in two shards.
    #[error("tensor `{tensor}` appears in both {} and {}", first.display(), second.display())]
    DuplicateTensor {
        /// The tensor name.
        tensor: String,
        /// The first shard holding it.
        first: PathBuf,
        /// The second shard holding it.
        second: PathBuf,
    },
    /// The safetensors file is malformed as a whole: its header length,
    /// header JSON or data section (errors about one tensor are
    /// [`Error::BadTensor`]).
    #[error("{}: invalid safetensors file: {reason}", path.display())]
    Safetensors {
        /// The shard.
        path: PathBuf,
        /// What is wrong, naming the part of the file.
        reason: String,
    },
    /// One tensor's entry in a safetensors header is malformed: its
    /// `dtype`, `shape` or `data_offsets` (named in `field`).
    #[error("{}: tensor `{tensor}`: {field}: {reason}", path.display())]
    BadTensor {
        /// The shard.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The header field at fault (`dtype`, `shape`, `data_offsets`).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor whose dtype has no ggml equivalent here.
    #[error("{}: tensor `{tensor}`: dtype {dtype} is not supported (supported: F32, F16, BF16, F64, I8, I16, I32, I64)", path.display())]
    UnsupportedDtype {
        /// The shard.
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The safetensors dtype name.
        dtype: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
