//! The crate's one error type.

use crate::rules::RuleId;

/// Everything that can go wrong while parsing, building, packing, checking or
/// simulating a MIL program.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The MIL text is not well formed.
    #[error("MIL parse error at line {line}, column {col}: {msg}")]
    Parse {
        /// 1-based line of the offending token.
        line: usize,
        /// 1-based column of the offending token.
        col: usize,
        /// What was expected or found.
        msg: String,
    },
    /// A weight blob file is malformed or a reference into it is out of range.
    #[error("weight blob error at byte {offset}: {msg}")]
    Blob {
        /// Byte offset in the blob file where the problem was found.
        offset: u64,
        /// What is wrong.
        msg: String,
    },
    /// A program violates one of the ANE rules of [`crate::rules::RULES`].
    #[error("ANE rule {rule} violated at {location}: {detail}")]
    Rule {
        /// The id of the violated rule.
        rule: RuleId,
        /// Function/statement where the violation was found.
        location: String,
        /// Human-readable detail.
        detail: String,
    },
    /// The program is well formed but cannot be built or executed as written
    /// (unknown name, wrong argument type, shape mismatch, unsupported op...).
    #[error("in `{location}`: {msg}")]
    Semantic {
        /// Function/statement (SSA name) where the problem was found.
        location: String,
        /// What is wrong.
        msg: String,
    },
}

impl Error {
    /// The rule id if this is a [`Error::Rule`].
    pub fn rule(&self) -> Option<RuleId> {
        match self {
            Error::Rule { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    pub(crate) fn sem(location: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Semantic {
            location: location.into(),
            msg: msg.into(),
        }
    }

    pub(crate) fn blob(offset: u64, msg: impl Into<String>) -> Self {
        Error::Blob {
            offset,
            msg: msg.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
