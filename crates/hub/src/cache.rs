//! `huggingface_hub`'s cache layout, so that it and we share downloads:
//!
//! ```text
//! {cache}/models--ORG--REPO/
//!   refs/{revision}                 the commit hash the revision pointed to
//!   blobs/{etag}                    file contents, named by sha256 (LFS) or git sha1
//!   blobs/{etag}.incomplete         a download in progress (resumed)
//!   snapshots/{commit}/{file}       relative symlink to ../../blobs/{etag}
//! ```

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The `CACHEDIR.TAG` that `huggingface_hub` writes at the cache root.
const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by huggingface_hub.\n\
# For information about cache directory tags, see:\n\
#\thttps://bford.info/cachedir/\n";

/// One repo's folder in the hub cache.
#[derive(Debug, Clone)]
pub struct RepoCache {
    cache_dir: PathBuf,
    root: PathBuf,
}

/// Whether `s` is a full (40 hex digit) commit hash.
pub fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl RepoCache {
    /// The folder of model repo `repo` under the hub cache `cache_dir`.
    pub fn new(cache_dir: &Path, repo: &str) -> Self {
        RepoCache {
            cache_dir: cache_dir.to_path_buf(),
            root: cache_dir.join(Self::folder_name(repo)),
        }
    }

    /// `models--ORG--REPO`: the repo's folder name in the cache.
    pub fn folder_name(repo: &str) -> String {
        format!("models--{}", repo.replace('/', "--"))
    }

    /// The repo's folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `snapshots/{commit}`.
    pub fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.root.join("snapshots").join(commit)
    }

    /// `snapshots/{commit}/{file}` (`file` is `/`-separated).
    pub fn pointer_path(&self, commit: &str, file: &str) -> PathBuf {
        let mut p = self.snapshot_dir(commit);
        p.extend(file.split('/'));
        p
    }

    /// `blobs/{blob}`.
    pub fn blob_path(&self, blob: &str) -> PathBuf {
        self.root.join("blobs").join(blob)
    }

    /// `blobs/{blob}.incomplete`.
    pub fn incomplete_path(&self, blob: &str) -> PathBuf {
        self.root.join("blobs").join(format!("{blob}.incomplete"))
    }

    /// The commit hash `refs/{revision}` holds, if any.
    pub fn read_ref(&self, revision: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.ref_path(revision)).ok()?;
        let commit = text.trim();
        (!commit.is_empty()).then(|| commit.to_string())
    }

    fn ref_path(&self, revision: &str) -> PathBuf {
        let mut p = self.root.join("refs");
        p.extend(revision.split('/'));
        p
    }

    /// Records that `revision` points at `commit` (nothing when the revision
    /// is the commit itself), atomically, as `huggingface_hub` does.
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        if revision == commit || self.read_ref(revision).as_deref() == Some(commit) {
            return Ok(());
        }
        let path = self.ref_path(revision);
        let parent = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        std::fs::write(&tmp, commit).map_err(|e| Error::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))
    }

    /// The commit a revision resolves to from the cache alone: the revision
    /// itself when it is a commit hash with a snapshot, else `refs/{revision}`.
    pub fn resolve_revision(&self, revision: &str) -> Option<String> {
        if is_commit_hash(revision) && self.snapshot_dir(revision).is_dir() {
            return Some(revision.to_string());
        }
        self.read_ref(revision)
    }

    /// The files of a snapshot (`/`-separated names relative to it), the
    /// ones whose link resolves to an existing file, sorted.
    pub fn list_snapshot(&self, commit: &str) -> Result<Vec<String>> {
        let dir = self.snapshot_dir(commit);
        let mut out = Vec::new();
        walk(&dir, "", &mut out)?;
        out.sort();
        Ok(out)
    }

    /// Creates the cache root's `CACHEDIR.TAG` if it is missing (best effort).
    pub(crate) fn tag_cache_dir(&self) {
        let tag = self.cache_dir.join("CACHEDIR.TAG");
        if !tag.exists() {
            let _ = std::fs::write(tag, CACHEDIR_TAG);
        }
    }

    /// Points `snapshots/{commit}/{file}` at `blobs/{blob}` with a relative
    /// symlink (a copy where symlinks are not available).
    pub fn link(&self, commit: &str, file: &str, blob: &str) -> Result<PathBuf> {
        let pointer = self.pointer_path(commit, file);
        let parent = pointer.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        // From snapshots/{commit}/{dirs...}/: up past the dirs, the commit and `snapshots`.
        let depth = file.split('/').count() + 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(blob);
        match std::fs::symlink_metadata(&pointer) {
            Ok(_) => std::fs::remove_file(&pointer).map_err(|e| Error::io(&pointer, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&pointer, e)),
        }
        make_link(&target, &self.blob_path(blob), &pointer)?;
        Ok(pointer)
    }
}

#[cfg(unix)]
fn make_link(relative: &Path, _blob: &Path, pointer: &Path) -> Result<()> {
    std::os::unix::fs::symlink(relative, pointer).map_err(|e| Error::io(pointer, e))
}

#[cfg(not(unix))]
fn make_link(_relative: &Path, blob: &Path, pointer: &Path) -> Result<()> {
    // As huggingface_hub does where symlinks are unsupported: a copy.
    std::fs::copy(blob, pointer)
        .map(|_| ())
        .map_err(|e| Error::io(pointer, e))
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let path = entry.path();
        // `metadata` follows the symlink: a dangling link is skipped.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => walk(&path, &rel, out)?,
            Ok(m) if m.is_file() => out.push(rel),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_names() {
        let c = RepoCache::new(Path::new("/c"), "org/name");
        assert_eq!(c.root(), Path::new("/c/models--org--name"));
        assert_eq!(
            c.pointer_path("abc", "sub/f.gguf"),
            Path::new("/c/models--org--name/snapshots/abc/sub/f.gguf")
        );
        assert!(is_commit_hash(&"a".repeat(40)));
        assert!(!is_commit_hash("main"));
    }

    #[cfg(unix)]
    #[test]
    fn links_are_relative_and_resolve() {
        let tmp = tempfile::tempdir().unwrap();
        let c = RepoCache::new(tmp.path(), "o/r");
        std::fs::create_dir_all(c.blob_path("x").parent().unwrap()).unwrap();
        std::fs::write(c.blob_path("b1"), b"hello").unwrap();
        let p = c.link("c1", "a/b/f.txt", "b1").unwrap();
        assert_eq!(
            std::fs::read_link(&p).unwrap(),
            Path::new("../../../../blobs/b1")
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"hello");
        let p = c.link("c1", "top.txt", "b1").unwrap();
        assert_eq!(std::fs::read_link(&p).unwrap(), Path::new("../../blobs/b1"));
        assert_eq!(c.list_snapshot("c1").unwrap(), vec!["a/b/f.txt", "top.txt"]);
        c.write_ref("main", "c1").unwrap();
        assert_eq!(c.read_ref("main").as_deref(), Some("c1"));
        c.write_ref("refs/pr/1", "c1").unwrap();
        assert_eq!(c.read_ref("refs/pr/1").as_deref(), Some("c1"));
        assert!(c.root().join("refs/refs/pr/1").is_file());
    }
}
