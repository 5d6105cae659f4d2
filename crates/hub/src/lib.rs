//! Models from the Hugging Face hub, into the cache `huggingface_hub` uses.
//!
//! [`pull`] resolves a [`ModelRef`] (`ORG/REPO[:FILE|:QUANT]`) at a
//! revision: it asks the hub's model-info API which commit the revision is
//! and which files exist, picks the files (an exact file, a GGUF quant tag,
//! a repo's default model, `--include` globs; see [`select::plan`]),
//! downloads what the cache lacks (resumable, sha256/git-sha1 verified) and
//! returns the local path to load.
//!
//! The cache is shared with Python's `huggingface_hub` (see [`cache`]):
//! what either downloads, the other finds. Offline (`HF_HUB_OFFLINE=1`, or
//! when the hub cannot be reached) the cache alone answers: `refs/{rev}`
//! gives the commit, the snapshot the files.
//!
//! Environment: `HF_ENDPOINT`, `HF_TOKEN` (or the token file
//! `$HF_HOME/token`), `HF_HOME`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`; see
//! [`HubOptions::from_env`]. docs/hub.md tells the whole story.

pub mod cache;
mod client;
pub mod config;
mod download;
mod error;
pub mod select;
pub mod spec;

pub use cache::RepoCache;
pub use client::{ModelInfo, RemoteFile};
pub use config::HubOptions;
pub use download::{git_blob_sha1, sha256_hex};
pub use error::{Error, Result};
pub use spec::{strip_hf_scheme, ModelRef, HF_SCHEME};

use client::Client;
use download::Outcome;
use std::path::PathBuf;

/// What a pull reports as it goes (the CLI draws progress bars from it).
/// Every method does nothing by default.
pub trait Progress {
    /// A download of `file` starts: `total` bytes if known, `already` of
    /// them on disk from an earlier, interrupted download.
    fn file_start(&mut self, file: &str, total: Option<u64>, already: u64) {
        let _ = (file, total, already);
    }
    /// `done` bytes of the current file are on disk.
    fn advance(&mut self, done: u64) {
        let _ = done;
    }
    /// The current file's download (re)starts at byte `at` (a resume, or 0
    /// when the server would not resume).
    fn restart(&mut self, at: u64) {
        let _ = at;
    }
    /// The current file's download ended (complete or not).
    fn file_done(&mut self, file: &str) {
        let _ = file;
    }
    /// Something worth telling: the default quant picked, the cache used
    /// offline, a retry.
    fn note(&mut self, message: &str) {
        let _ = message;
    }
}

/// A [`Progress`] that reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Quiet;

impl Progress for Quiet {}

/// What to pull.
#[derive(Debug, Clone)]
pub struct PullRequest {
    /// The repo and optional file or quant tag.
    pub model: ModelRef,
    /// A branch, tag or commit hash (`main` by default).
    pub revision: String,
    /// Globs of more files to fetch (`fnmatch` style, as `huggingface-cli
    /// download --include`); without a selector, only these are fetched.
    pub include: Vec<String>,
}

impl PullRequest {
    /// `model` at `main`, no globs.
    pub fn new(model: ModelRef) -> Self {
        PullRequest {
            model,
            revision: "main".to_string(),
            include: Vec::new(),
        }
    }
}

/// The result of a pull.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The repo.
    pub repo: String,
    /// The commit the revision resolved to.
    pub commit: String,
    /// `snapshots/{commit}` in the cache.
    pub snapshot: PathBuf,
    /// The repo files fetched (or found), in order.
    pub files: Vec<String>,
    /// What to load: the GGUF (the first part of a split set) or the
    /// snapshot folder (a Hugging Face safetensors model, or globs only).
    pub path: PathBuf,
    /// Bytes that came over the network.
    pub downloaded: u64,
    /// Whether the hub was not asked (offline, or unreachable): the cache
    /// answered alone.
    pub offline: bool,
}

/// Resolves and fetches `request`; see the crate docs.
pub fn pull(
    opts: &HubOptions,
    request: &PullRequest,
    progress: &mut dyn Progress,
) -> Result<Pulled> {
    let repo = request.model.repo.as_str();
    spec::validate_file_name(&request.revision).map_err(|reason| Error::BadSpec {
        spec: request.revision.clone(),
        reason: format!("bad revision: {reason}"),
    })?;
    let cache = RepoCache::new(&opts.cache_dir, repo);
    if opts.offline {
        return from_cache(opts, &cache, request, "HF_HUB_OFFLINE is set", progress);
    }
    let client = Client::new(opts);
    let info = match client.model_info(repo, &request.revision) {
        Ok(info) => info,
        Err(e) if e.is_network() => {
            let why = e.to_string();
            return from_cache(opts, &cache, request, &why, progress);
        }
        Err(e) => return Err(e),
    };
    let names: Vec<String> = info.files.iter().map(|f| f.name.clone()).collect();
    let mut plan = select::plan(
        repo,
        &names,
        request.model.selector.as_deref(),
        &request.include,
    )?;
    for n in &plan.notes {
        progress.note(n);
    }
    cache.write_ref(&request.revision, &info.commit)?;
    let find = |name: &str| -> Result<&RemoteFile> {
        info.files
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| Error::Selection {
                repo: repo.to_string(),
                reason: format!("`{name}` is not in the repo at {}", info.commit),
            })
    };
    let mut downloaded = 0u64;
    let mut fetch = |name: &str, progress: &mut dyn Progress| -> Result<()> {
        let file = find(name)?;
        if let Outcome::Downloaded(n) =
            download::ensure_file(&client, &cache, repo, &info.commit, file, progress)?
        {
            downloaded += n;
        }
        Ok(())
    };
    if let Some(index) = plan.index.clone() {
        fetch(&index, progress)?;
        let shards = read_index_shards(&cache, &info.commit, &index)?;
        for s in shards {
            if !plan.files.contains(&s) {
                plan.files.push(s);
            }
        }
    }
    for name in &plan.files {
        fetch(name, progress)?;
    }
    Ok(finish(&cache, repo, &info.commit, plan, downloaded, false))
}

/// The shard files a cached `model.safetensors.index.json` names (relative
/// to the repo root).
fn read_index_shards(cache: &RepoCache, commit: &str, index: &str) -> Result<Vec<String>> {
    let path = cache.pointer_path(commit, index);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let dir = index.rsplit_once('/').map(|(d, _)| d);
    let shards = select::shards_of_index(&text).map_err(|reason| Error::BadResponse {
        url: path.display().to_string(),
        reason,
    })?;
    Ok(shards
        .into_iter()
        .map(|s| match dir {
            Some(d) => format!("{d}/{s}"),
            None => s,
        })
        .collect())
}

fn finish(
    cache: &RepoCache,
    repo: &str,
    commit: &str,
    plan: select::Plan,
    downloaded: u64,
    offline: bool,
) -> Pulled {
    let snapshot = cache.snapshot_dir(commit);
    let path = match &plan.primary {
        Some(p) => cache.pointer_path(commit, p),
        None => snapshot.clone(),
    };
    Pulled {
        repo: repo.to_string(),
        commit: commit.to_string(),
        snapshot,
        files: plan.files,
        path,
        downloaded,
        offline,
    }
}

/// The request answered from the cache alone.
fn from_cache(
    opts: &HubOptions,
    cache: &RepoCache,
    request: &PullRequest,
    why: &str,
    progress: &mut dyn Progress,
) -> Result<Pulled> {
    let repo = request.model.repo.as_str();
    let not_cached = |reason: String| Error::NotCached {
        repo: repo.to_string(),
        revision: request.revision.clone(),
        cache: opts.cache_dir.clone(),
        reason: format!("{why}, and {reason}"),
    };
    let Some(commit) = cache.resolve_revision(&request.revision) else {
        return Err(not_cached(format!(
            "there is no {}",
            if cache.root().is_dir() {
                format!("refs/{} in {}", request.revision, cache.root().display())
            } else {
                cache.root().display().to_string()
            }
        )));
    };
    let names = cache.list_snapshot(&commit)?;
    if names.is_empty() {
        return Err(not_cached(format!("snapshot {commit} is empty or missing")));
    }
    let mut plan = select::plan(
        repo,
        &names,
        request.model.selector.as_deref(),
        &request.include,
    )
    .map_err(|e| not_cached(format!("in the cached snapshot {commit}: {e}")))?;
    if let Some(index) = plan.index.clone() {
        for s in read_index_shards(cache, &commit, &index)? {
            if !plan.files.contains(&s) {
                plan.files.push(s);
            }
        }
    }
    let missing: Vec<&String> = plan.files.iter().filter(|f| !names.contains(f)).collect();
    if !missing.is_empty() {
        return Err(not_cached(format!(
            "snapshot {commit} lacks {}",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    for n in &plan.notes {
        progress.note(n);
    }
    progress.note(&format!(
        "{why}; using the cached snapshot {commit} of {repo} (revision {})",
        request.revision
    ));
    Ok(finish(cache, repo, &commit, plan, 0, true))
}
