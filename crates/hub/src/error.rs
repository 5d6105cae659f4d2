//! The errors of a pull.

use std::path::PathBuf;

/// What went wrong while resolving or downloading a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model reference (`ORG/REPO[:FILE|:QUANT]`) or an option is malformed.
    #[error("bad model reference `{spec}`: {reason}")]
    BadSpec {
        /// The reference as given.
        spec: String,
        /// Why it was refused.
        reason: String,
    },
    /// The hub answered 404: the repo, revision or file does not exist.
    #[error("{what} does not exist on {endpoint} (HTTP 404{})", code_suffix(code))]
    NotFound {
        /// `repo ORG/REPO`, `revision REV of ORG/REPO` or `file F in ORG/REPO`.
        what: String,
        /// The hub's endpoint.
        endpoint: String,
        /// The hub's `X-Error-Code` header, if any.
        code: Option<String>,
    },
    /// The hub answered 401 or 403: the repo is gated or private (or, without
    /// a token, may not exist), and the token was missing or refused.
    #[error("{}", gated_message(repo, *status, *token_sent, endpoint, token_path))]
    Gated {
        /// The repo.
        repo: String,
        /// 401 or 403.
        status: u16,
        /// Whether a token was sent.
        token_sent: bool,
        /// The hub's endpoint.
        endpoint: String,
        /// Where the token file is read from.
        token_path: PathBuf,
    },
    /// Another HTTP error status.
    #[error("{url}: HTTP {status}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Http {
        /// The URL asked for.
        url: String,
        /// The status code.
        status: u16,
        /// The hub's `X-Error-Message` header, if any.
        message: Option<String>,
    },
    /// The hub could not be reached (DNS, connection, TLS, timeout, 5xx).
    #[error("cannot reach {url}: {reason}")]
    Network {
        /// The URL asked for.
        url: String,
        /// What failed.
        reason: String,
    },
    /// A download broke off and the retries ran out; the partial file is kept
    /// and the next pull resumes it.
    #[error(
        "downloading {file} stopped at {done} bytes: {reason}; the partial download \
         is kept at {} and the next pull resumes it",
        partial.display()
    )]
    Interrupted {
        /// The file in the repo.
        file: String,
        /// Bytes on disk.
        done: u64,
        /// The last failure.
        reason: String,
        /// The `.incomplete` file.
        partial: PathBuf,
    },
    /// Offline (HF_HUB_OFFLINE, or the hub unreachable) and the cache does
    /// not hold what was asked for.
    #[error("{repo} (revision {revision}) is not in the cache {}: {reason}", cache.display())]
    NotCached {
        /// The repo.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The hub cache directory.
        cache: PathBuf,
        /// Why the hub was not asked and what is missing.
        reason: String,
    },
    /// A downloaded file's hash is not the one the hub announced; the file
    /// was deleted.
    #[error(
        "{file}: {algorithm} mismatch: the hub announced {expected}, the download \
         hashes to {actual}; the file was deleted (run the pull again; if it \
         persists, the hub or a proxy serves corrupt data)"
    )]
    HashMismatch {
        /// The file in the repo.
        file: String,
        /// `sha256` (LFS files) or `git sha1` (small files).
        algorithm: &'static str,
        /// The announced hash.
        expected: String,
        /// The hash of what was received.
        actual: String,
    },
    /// A downloaded file's size is not the one the hub announced; the file
    /// was deleted.
    #[error("{file}: expected {expected} bytes, received {actual}; the file was deleted")]
    SizeMismatch {
        /// The file in the repo.
        file: String,
        /// The announced size.
        expected: u64,
        /// The size received.
        actual: u64,
    },
    /// No file, or more than one, fits the request.
    #[error("{repo}: {reason}")]
    Selection {
        /// The repo.
        repo: String,
        /// What was asked, what matched and what to do.
        reason: String,
    },
    /// The hub's answer is not what the API promises.
    #[error("{url}: unexpected answer: {reason}")]
    BadResponse {
        /// The URL asked for.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file system operation on the cache failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the error means the hub could not be reached (so the cache is
    /// the fallback), as opposed to the hub answering no.
    pub fn is_network(&self) -> bool {
        matches!(self, Error::Network { .. })
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

fn code_suffix(code: &Option<String>) -> String {
    code.as_deref()
        .map(|c| format!(", {c}"))
        .unwrap_or_default()
}

fn gated_message(
    repo: &str,
    status: u16,
    token_sent: bool,
    endpoint: &str,
    token_path: &std::path::Path,
) -> String {
    if token_sent {
        format!(
            "{repo}: HTTP {status}: the token was refused for this repo: it is gated \
             (request access at {endpoint}/{repo} and wait for approval) or private, or \
             the token lacks read access"
        )
    } else {
        format!(
            "{repo}: HTTP {status}: the repo is gated or private (or does not exist). \
             If it is gated, accept its terms at {endpoint}/{repo}, then give a token: \
             set HF_TOKEN=hf_... or write it to {} (as `hf auth login` does)",
            token_path.display()
        )
    }
}

/// The result of a hub operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
