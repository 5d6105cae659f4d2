//! Errors of graph construction, compilation and execution.

use anedvd_mil::rules::RuleId;

/// A forge error. Every variant names what the caller can fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An op was given operands it cannot take (shapes, ranks, axes).
    #[error("{op}: {detail}")]
    Shape {
        /// The op being built.
        op: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// Tensors from two different graphs were combined.
    #[error("tensors belong to different graphs")]
    ForeignTensor,
    /// The chosen runtime path's rules refuse a node.
    #[error("node `{node}` ({op}) is refused on the {path} path: {rule} {detail}")]
    Invalid {
        /// The node's name.
        node: String,
        /// The graph op.
        op: String,
        /// The runtime path checked.
        path: &'static str,
        /// The rule id (`ANE-OP`, ...).
        rule: &'static str,
        /// The rule's detail.
        detail: String,
        /// The typed rule.
        rule_id: RuleId,
    },
    /// A run was given the wrong inputs.
    #[error("input `{name}`: {detail}")]
    Feed {
        /// The input's name.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// Writing a program's files failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The runtime driver refused or failed (e.g. no ANE on this machine).
    #[error("runtime: {0}")]
    Runtime(#[from] anedvd_ane_runtime::Error),
    /// The MIL layer refused something (a bug in the lowering if it passed validation).
    #[error(transparent)]
    Mil(#[from] anedvd_mil::Error),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn shape_err(op: &'static str, detail: impl Into<String>) -> Error {
    Error::Shape {
        op,
        detail: detail.into(),
    }
}
