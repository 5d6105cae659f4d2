//! Model references: `ORG/REPO[:FILE|:QUANT]`, optionally as `hf://...`.

use crate::error::{Error, Result};

/// The URL-like prefix that marks a hub reference where a path is expected.
pub const HF_SCHEME: &str = "hf://";

/// A repo on the hub and, optionally, what to take from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    /// `ORG/REPO` (or a bare legacy name such as `gpt2`).
    pub repo: String,
    /// After the `:`: a file in the repo (`model-Q4_K_M.gguf`,
    /// `sub/dir/file`) or a GGUF quant tag (`Q4_K_M`, case-insensitive).
    /// Which of the two is decided against the repo's file list: an exact
    /// file name wins.
    pub selector: Option<String>,
}

impl ModelRef {
    /// Parses `ORG/REPO[:FILE|:QUANT]`, with or without the `hf://` prefix.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |reason: &str| Error::BadSpec {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let s = spec.strip_prefix(HF_SCHEME).unwrap_or(spec);
        let (repo, selector) = match s.split_once(':') {
            Some((r, sel)) => {
                if sel.is_empty() {
                    return Err(bad(
                        "nothing after `:` (give a file name or a quant tag such as Q4_K_M)",
                    ));
                }
                (r, Some(sel.to_string()))
            }
            None => (s, None),
        };
        validate_repo_id(repo).map_err(|reason| bad(&reason))?;
        if let Some(sel) = &selector {
            validate_file_name(sel).map_err(|reason| bad(&reason))?;
        }
        Ok(ModelRef {
            repo: repo.to_string(),
            selector,
        })
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.selector {
            Some(sel) => write!(f, "{}:{sel}", self.repo),
            None => f.write_str(&self.repo),
        }
    }
}

/// The reference inside `s` when it is written `hf://ORG/REPO[:FILE]`.
pub fn strip_hf_scheme(s: &str) -> Option<&str> {
    s.strip_prefix(HF_SCHEME)
}

/// `huggingface_hub`'s repo id rules: one or two `/`-separated names of
/// `[A-Za-z0-9_.-]`, not starting or ending with `-` or `.`, no `--` or
/// `..`, at most 96 characters.
fn validate_repo_id(repo: &str) -> Result<(), String> {
    if repo.is_empty() {
        return Err("no repo (expected ORG/REPO)".into());
    }
    if repo.len() > 96 {
        return Err("a repo id has at most 96 characters".into());
    }
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 2 {
        return Err(
            "expected ORG/REPO (one `/`); to name a file in a folder write ORG/REPO:folder/file"
                .into(),
        );
    }
    for p in &parts {
        let ok = !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.']);
        if !ok {
            return Err(format!(
                "`{p}` is not a valid repo name part (letters, digits, `-`, `_`, `.`; \
                 not starting or ending with `-` or `.`)"
            ));
        }
    }
    if repo.contains("--") || repo.contains("..") {
        return Err("`--` and `..` are not allowed in a repo id".into());
    }
    Ok(())
}

/// A repo file name must stay inside the snapshot folder: relative, `/`
/// separated, no empty, `.` or `..` component, no backslash or NUL.
pub(crate) fn validate_file_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty file name".into());
    }
    if name.starts_with('/') || name.contains('\\') || name.contains('\0') {
        return Err(format!(
            "`{name}` is not a relative file name inside the repo"
        ));
    }
    if name
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!("`{name}` has an empty, `.` or `..` path component"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_references() {
        let r = ModelRef::parse("hf://unsloth/Qwen3-0.6B-GGUF:Q4_K_M").unwrap();
        assert_eq!(r.repo, "unsloth/Qwen3-0.6B-GGUF");
        assert_eq!(r.selector.as_deref(), Some("Q4_K_M"));
        assert_eq!(r.to_string(), "unsloth/Qwen3-0.6B-GGUF:Q4_K_M");
        let r = ModelRef::parse("Qwen/Qwen3-0.6B").unwrap();
        assert_eq!(r.selector, None);
        let r = ModelRef::parse("org/repo:sub/model.gguf").unwrap();
        assert_eq!(r.selector.as_deref(), Some("sub/model.gguf"));
        assert!(ModelRef::parse("gpt2").is_ok());
    }

    #[test]
    fn refuses_bad_references() {
        for bad in [
            "",
            "hf://",
            "a/b/c",
            "org/repo:",
            "org/-repo",
            "org/re..po",
            "org/re--po",
            "org/re po",
            "org/repo:../x",
            "org/repo:/etc/passwd",
            "org/repo:a//b",
            "/repo",
        ] {
            let e = ModelRef::parse(bad);
            assert!(matches!(e, Err(Error::BadSpec { .. })), "{bad}: {e:?}");
        }
        assert_eq!(strip_hf_scheme("hf://a/b"), Some("a/b"));
        assert_eq!(strip_hf_scheme("/models/a.gguf"), None);
    }
}
