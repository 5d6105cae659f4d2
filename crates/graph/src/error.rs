//! The error type shared by all backends (so callers can match on it without
//! knowing which backend runs).

use anedvd_base::GgmlType;

/// Errors from validating a program, compiling it, or running a session.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A token id is not below the vocabulary size.
    #[error("token id {token} is out of range (vocabulary size {n_vocab})")]
    TokenOutOfRange {
        /// The offending id.
        token: u32,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// A forward call would run past the session's capacity.
    #[error("context overflow: {needed} positions needed, session holds at most {max_seq}")]
    ContextOverflow {
        /// Positions the call needs (current position + new tokens).
        needed: usize,
        /// The session's capacity.
        max_seq: usize,
    },
    /// A tensor the program names is absent from the weight source.
    #[error("tensor `{0}` not found in the weight source")]
    MissingTensor(String),
    /// A tensor has a shape other than the program's hyperparameters imply.
    #[error("tensor {tensor}: expected {expected:?}, found {found:?}")]
    Shape {
        /// The tensor name.
        tensor: String,
        /// The expected shape (ggml `ne` order).
        expected: Vec<u64>,
        /// The shape stored in the source.
        found: Vec<u64>,
    },
    /// A tensor's element type is not supported for its role by a backend.
    #[error("tensor {tensor}: type {dtype} is not supported by {backend}")]
    UnsupportedType {
        /// The tensor name.
        tensor: String,
        /// Its element type.
        dtype: GgmlType,
        /// The backend's name.
        backend: String,
    },
    /// A block variant (or a feature of one) this backend does not run.
    #[error("backend {backend} does not support {part} {variant} (layer {layer})")]
    Unsupported {
        /// The backend's name.
        backend: String,
        /// Which part of the block (`mixer`, `feed-forward`, `attention`, ...).
        part: &'static str,
        /// The variant or feature (`short_conv`, `moe`, `shared K/V`, ...).
        variant: String,
        /// The layer.
        layer: usize,
    },
    /// The program's hyperparameters are inconsistent.
    #[error("invalid program: {0}")]
    InvalidProgram(String),
    /// An invalid argument to a session call.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Writing a dump failed.
    #[error("dump to {path}: {source}")]
    Io {
        /// The file being written.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A backend-specific failure, with context.
    #[error("{backend}: {message}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What failed.
        message: String,
    },
}

impl Error {
    /// [`Error::Unsupported`] for `backend`.
    pub fn unsupported(
        backend: &str,
        part: &'static str,
        variant: impl Into<String>,
        layer: usize,
    ) -> Error {
        Error::Unsupported {
            backend: backend.to_string(),
            part,
            variant: variant.into(),
            layer,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
