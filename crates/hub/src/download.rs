//! One file into the cache: resumable (Range on `blobs/{etag}.incomplete`),
//! verified (sha256 of LFS files, git blob sha1 of the others), then linked
//! from the snapshot.

use crate::cache::RepoCache;
use crate::client::{Client, Method, RemoteFile, Target};
use crate::error::{Error, Result};
use crate::Progress;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// How a file came to be in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The snapshot already had it.
    Cached,
    /// The blob was there (another revision or tool fetched it); linked.
    Linked,
    /// Downloaded: this many bytes came over the network.
    Downloaded(u64),
}

/// Whether `blob` can be a file name in `blobs/`.
fn safe_blob_name(blob: &str) -> bool {
    !blob.is_empty()
        && blob.len() <= 128
        && !blob.starts_with('.')
        && blob
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Puts `file` of `repo` at `commit` into the snapshot.
pub(crate) fn ensure_file(
    client: &Client,
    cache: &RepoCache,
    repo: &str,
    commit: &str,
    file: &RemoteFile,
    progress: &mut dyn Progress,
) -> Result<Outcome> {
    let pointer = cache.pointer_path(commit, &file.name);
    if let Ok(meta) = std::fs::metadata(&pointer) {
        if meta.is_file() && file.size.is_none_or(|s| s == meta.len()) {
            return Ok(Outcome::Cached);
        }
    }
    let url = client.resolve_url(repo, commit, &file.name);
    let target = Target::File {
        repo,
        file: &file.name,
    };
    let (blob, size) = match &file.blob {
        Some(b) => (b.clone(), file.size),
        None => {
            // The listing had no blob ids: ask the file's metadata, as
            // huggingface_hub does (HEAD; the hub's X-Linked-Etag/ETag).
            let head = client.send(Method::Head, &url, None)?;
            client.check(&head, target)?;
            let size = head
                .linked_size
                .or_else(|| head.header("content-length").and_then(|s| s.parse().ok()));
            let etag = head.etag.clone().ok_or_else(|| Error::BadResponse {
                url: head.url.clone(),
                reason: "no ETag: cannot name the blob".into(),
            })?;
            (etag.to_ascii_lowercase(), file.size.or(size))
        }
    };
    if !safe_blob_name(&blob) {
        return Err(Error::BadResponse {
            url,
            reason: format!("`{blob}` cannot name a blob"),
        });
    }
    let blob_path = cache.blob_path(&blob);
    if let Ok(meta) = std::fs::metadata(&blob_path) {
        if size.is_none_or(|s| s == meta.len()) {
            cache.link(commit, &file.name, &blob)?;
            return Ok(Outcome::Linked);
        }
        // Named by its hash yet the wrong size: damaged; fetch it again.
        std::fs::remove_file(&blob_path).map_err(|e| Error::io(&blob_path, e))?;
    }
    let received = download_blob(
        client, cache, &url, target, &file.name, &blob, size, progress,
    )?;
    cache.link(commit, &file.name, &blob)?;
    Ok(Outcome::Downloaded(received))
}

/// The running hash of the bytes of the `.incomplete` file.
struct Hashing {
    sha256: Option<Sha256>,
    hashed: u64,
}

impl Hashing {
    fn new(blob: &str) -> Self {
        Hashing {
            sha256: is_hex(blob, 64).then(Sha256::new),
            hashed: 0,
        }
    }

    fn reset(&mut self) {
        if let Some(h) = &mut self.sha256 {
            *h = Sha256::new();
        }
        self.hashed = 0;
    }

    fn update(&mut self, bytes: &[u8]) {
        if let Some(h) = &mut self.sha256 {
            h.update(bytes);
        }
        self.hashed += bytes.len() as u64;
    }

    /// Hashes what the file holds beyond what was hashed (a resumed
    /// partial download from an earlier run).
    fn catch_up(&mut self, f: &mut File, len: u64, path: &Path) -> Result<()> {
        if self.hashed > len {
            self.reset();
        }
        if self.hashed == len {
            return Ok(());
        }
        f.seek(SeekFrom::Start(self.hashed))
            .map_err(|e| Error::io(path, e))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut left = len - self.hashed;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = f.read(&mut buf[..want]).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            self.update(&buf[..n]);
            left -= n as u64;
        }
        Ok(())
    }
}

/// Why one attempt stopped.
enum Stop {
    /// Worth resuming: the connection broke or the server had a hiccup.
    Retry(String),
    /// Not worth it.
    Fatal(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        match e {
            Error::Network { reason, .. } => Stop::Retry(reason),
            other => Stop::Fatal(other),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn download_blob(
    client: &Client,
    cache: &RepoCache,
    url: &str,
    target: Target<'_>,
    name: &str,
    blob: &str,
    size: Option<u64>,
    progress: &mut dyn Progress,
) -> Result<u64> {
    let part = cache.incomplete_path(blob);
    let blobs = part.parent().unwrap_or(cache.root()).to_path_buf();
    std::fs::create_dir_all(&blobs).map_err(|e| Error::io(&blobs, e))?;
    cache.tag_cache_dir();
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&part)
        .map_err(|e| Error::io(&part, e))?;
    let start = f.metadata().map_err(|e| Error::io(&part, e))?.len();
    progress.file_start(name, size, start);
    let mut hashing = Hashing::new(blob);
    let mut received = 0u64;
    let opts = client.opts();
    let mut attempt = 0u32;
    loop {
        match attempt_once(
            client,
            url,
            target,
            &mut f,
            &part,
            size,
            &mut hashing,
            &mut received,
            progress,
        ) {
            Ok(()) => break,
            Err(Stop::Fatal(e)) => return Err(e),
            Err(Stop::Retry(reason)) => {
                let done = f.metadata().map(|m| m.len()).unwrap_or(0);
                if attempt >= opts.retries {
                    progress.file_done(name);
                    return Err(Error::Interrupted {
                        file: name.to_string(),
                        done,
                        reason,
                        partial: part,
                    });
                }
                attempt += 1;
                progress.note(&format!(
                    "{name}: {reason} at {done} bytes; resuming (retry {attempt} of {})",
                    opts.retries
                ));
                std::thread::sleep(opts.retry_delay.saturating_mul(1 << (attempt - 1).min(6)));
            }
        }
    }
    progress.file_done(name);
    drop(f);
    let verified = verify(&part, name, blob, size, &mut hashing)?;
    let dest = cache.blob_path(blob);
    std::fs::rename(&part, &dest).map_err(|e| Error::io(&dest, e))?;
    if !verified {
        progress.note(&format!(
            "{name}: not verified (the hub's ETag `{blob}` is neither a sha256 nor a git sha1)"
        ));
    }
    Ok(received)
}

/// One GET from where the partial file ends to the end (or until it breaks).
#[allow(clippy::too_many_arguments)]
fn attempt_once(
    client: &Client,
    url: &str,
    target: Target<'_>,
    f: &mut File,
    part: &Path,
    size: Option<u64>,
    hashing: &mut Hashing,
    received: &mut u64,
    progress: &mut dyn Progress,
) -> Result<(), Stop> {
    let io = |e| Stop::Fatal(Error::io(part, e));
    let mut offset = f.metadata().map_err(io)?.len();
    if size.is_some_and(|s| offset > s) {
        f.set_len(0).map_err(io)?;
        offset = 0;
    }
    hashing.catch_up(f, offset, part)?;
    if size == Some(offset) && offset > 0 {
        return Ok(());
    }
    let fetched = client.send(Method::Get, url, Some(offset))?;
    let status = fetched.status();
    match status {
        206 => {
            let range = fetched
                .header("content-range")
                .and_then(parse_content_range);
            if range.map(|r| r.0) != Some(offset) {
                f.set_len(0).map_err(io)?;
                hashing.reset();
                progress.restart(0);
                return Err(Stop::Retry(
                    "the server resumed at another offset; starting over".into(),
                ));
            }
        }
        200 => {
            if offset > 0 {
                // The server ignored the Range: start over.
                f.set_len(0).map_err(io)?;
                hashing.reset();
                offset = 0;
            }
        }
        416 if offset > 0 => {
            // Nothing past our end: the partial file is all there is (or
            // longer than the file now is); let verification decide.
            return Ok(());
        }
        _ => {
            client.check(&fetched, target)?;
            return Err(Stop::Fatal(Error::BadResponse {
                url: fetched.url,
                reason: format!("HTTP {status} to a download"),
            }));
        }
    }
    progress.restart(offset);
    let total = size
        .or_else(|| {
            fetched
                .header("content-range")
                .and_then(parse_content_range)
                .and_then(|r| r.1)
        })
        .or_else(|| {
            fetched
                .header("content-length")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map(|n| n + offset)
        });
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut reader = fetched.response.into_body().into_reader();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = offset;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                f.flush().map_err(io)?;
                return Err(Stop::Retry(format!("connection lost ({e})")));
            }
        };
        f.write_all(&buf[..n]).map_err(io)?;
        hashing.update(&buf[..n]);
        at += n as u64;
        *received += n as u64;
        progress.advance(at);
    }
    f.flush().map_err(io)?;
    if let Some(total) = total {
        if at < total {
            return Err(Stop::Retry(format!(
                "connection closed after {at} of {total} bytes"
            )));
        }
    }
    Ok(())
}

/// `bytes START-END/TOTAL` → (START, TOTAL).
fn parse_content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()))
}

/// Checks the finished `.incomplete` file against the announced size and
/// hash; on a mismatch deletes it and errors. `false`: there was no hash
/// to check (the ETag is neither a sha256 nor a git sha1).
fn verify(
    part: &Path,
    name: &str,
    blob: &str,
    size: Option<u64>,
    hashing: &mut Hashing,
) -> Result<bool> {
    let len = std::fs::metadata(part)
        .map_err(|e| Error::io(part, e))?
        .len();
    let discard = || {
        let _ = std::fs::remove_file(part);
    };
    if let Some(expected) = size {
        if len != expected {
            discard();
            return Err(Error::SizeMismatch {
                file: name.to_string(),
                expected,
                actual: len,
            });
        }
    }
    let (algorithm, actual) = if let Some(h) = hashing.sha256.take() {
        if hashing.hashed != len {
            // Cannot happen (every byte written was hashed); recompute to be sure.
            ("sha256", hash_file::<Sha256>(part, None)?)
        } else {
            ("sha256", hex(&h.finalize()))
        }
    } else if is_hex(blob, 40) {
        ("git sha1", hash_file::<Sha1>(part, Some(len))?)
    } else {
        return Ok(false);
    };
    if actual != blob {
        discard();
        return Err(Error::HashMismatch {
            file: name.to_string(),
            algorithm,
            expected: blob.to_string(),
            actual,
        });
    }
    Ok(true)
}

/// The hash of a file; with `git_len`, of git's blob object
/// (`blob {len}\0` then the bytes), which is what a non-LFS file's ETag is.
fn hash_file<D: Digest>(path: &Path, git_len: Option<u64>) -> Result<String> {
    let mut d = D::new();
    if let Some(len) = git_len {
        d.update(format!("blob {len}\0").as_bytes());
    }
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        d.update(&buf[..n]);
    }
    Ok(hex(&d.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The git blob sha1 of `bytes` (a non-LFS file's ETag on the hub).
pub fn git_blob_sha1(bytes: &[u8]) -> String {
    let mut d = Sha1::new();
    d.update(format!("blob {}\0", bytes.len()).as_bytes());
    d.update(bytes);
    hex(&d.finalize())
}

/// The sha256 of `bytes` (an LFS file's ETag on the hub), in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_git_and_sha256sum() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            git_blob_sha1(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        // `printf 'hello\n' | sha256sum`
        assert_eq!(
            sha256_hex(b"hello\n"),
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        assert_eq!(
            parse_content_range("bytes 10-99/100"),
            Some((10, Some(100)))
        );
        assert_eq!(parse_content_range("bytes 10-99/*"), Some((10, None)));
        assert!(safe_blob_name("abc123"));
        assert!(!safe_blob_name("../x"));
        assert!(!safe_blob_name(".hidden"));
    }
}
