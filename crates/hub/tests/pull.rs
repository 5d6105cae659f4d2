//! `pull` against a mock hub (tests/mock): the cache layout, resume,
//! verification, selection, errors, offline use, and a cache laid out by
//! huggingface_hub's rules by hand.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod mock;

use anedvd_hub::{pull, Error, HubOptions, ModelRef, Progress, PullRequest, Pulled, RepoCache};
use mock::{MockFile, MockHub, MockRepo};
use std::path::{Path, PathBuf};

/// Deterministic pseudo-random bytes.
fn bytes(n: usize, seed: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9_u32 ^ u32::from(seed);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

#[derive(Default)]
struct Record {
    notes: Vec<String>,
    starts: Vec<(String, Option<u64>, u64)>,
    max_done: u64,
}

impl Progress for Record {
    fn file_start(&mut self, file: &str, total: Option<u64>, already: u64) {
        self.starts.push((file.to_string(), total, already));
    }
    fn advance(&mut self, done: u64) {
        self.max_done = self.max_done.max(done);
    }
    fn note(&mut self, message: &str) {
        self.notes.push(message.to_string());
    }
}

fn gguf_repo() -> MockRepo {
    MockRepo::new(
        "org/tiny-GGUF",
        'a',
        vec![
            MockFile::git(
                ".gitattributes",
                b"*.gguf filter=lfs diff=lfs merge=lfs -text\n",
            ),
            MockFile::git("README.md", b"# tiny\n"),
            MockFile::lfs("tiny-Q4_K_M.gguf", bytes(5000, 1)),
            MockFile::lfs("tiny-Q8_0.gguf", bytes(7000, 2)),
            MockFile::lfs("tiny-BF16-00001-of-00002.gguf", bytes(3000, 3)),
            MockFile::lfs("tiny-BF16-00002-of-00002.gguf", bytes(2000, 4)),
            MockFile::lfs("mmproj-tiny-F16.gguf", bytes(100, 5)),
        ],
    )
}

fn hf_repo() -> MockRepo {
    let index = br#"{"metadata":{"total_size":9000},"weight_map":{"a.weight":"model-00001-of-00002.safetensors","b.weight":"model-00002-of-00002.safetensors"}}"#;
    MockRepo::new(
        "org/tiny-hf",
        'b',
        vec![
            MockFile::git("README.md", b"# tiny hf\n"),
            MockFile::git("config.json", br#"{"model_type":"llama"}"#),
            MockFile::git("generation_config.json", br#"{"eos_token_id":2}"#),
            MockFile::git("tokenizer_config.json", br#"{"bos_token":"<s>"}"#),
            MockFile::lfs("tokenizer.json", bytes(1200, 6)),
            MockFile::git("model.safetensors.index.json", index),
            MockFile::lfs("model-00001-of-00002.safetensors", bytes(4000, 7)),
            MockFile::lfs("model-00002-of-00002.safetensors", bytes(5000, 8)),
            MockFile::lfs("consolidated.safetensors", bytes(9000, 9)),
            MockFile::lfs("pytorch_model.bin", bytes(9000, 10)),
        ],
    )
}

fn gated_repo() -> MockRepo {
    let mut r = MockRepo::new(
        "org/gated",
        'c',
        vec![MockFile::lfs("g-Q4_K_M.gguf", bytes(1500, 11))],
    );
    r.token = Some("hf_secret".into());
    r
}

struct Env {
    hub: MockHub,
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            hub: MockHub::start(vec![gguf_repo(), hf_repo(), gated_repo()]),
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn cache(&self) -> PathBuf {
        self.tmp.path().join("hub")
    }

    fn opts(&self) -> HubOptions {
        HubOptions::isolated(&self.hub.endpoint, self.cache())
    }

    fn pull(&self, spec: &str) -> Result<Pulled, Error> {
        self.pull_with(&self.opts(), spec, &mut Record::default())
    }

    fn pull_with(&self, opts: &HubOptions, spec: &str, rec: &mut Record) -> Result<Pulled, Error> {
        pull(opts, &PullRequest::new(ModelRef::parse(spec).unwrap()), rec)
    }
}

fn commit(c: char) -> String {
    c.to_string().repeat(40)
}

/// Everything under `dir`, relative, sorted (symlinks not followed).
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn fresh_download_lands_in_the_hub_layout() {
    let env = Env::new();
    let repo = gguf_repo();
    let file = repo.file("tiny-Q4_K_M.gguf");
    let pulled = env.pull("org/tiny-GGUF:Q4_K_M").unwrap();
    let root = env.cache().join("models--org--tiny-GGUF");
    let snap = root.join("snapshots").join(commit('a'));
    assert_eq!(pulled.commit, commit('a'));
    assert_eq!(pulled.snapshot, snap);
    assert_eq!(pulled.path, snap.join("tiny-Q4_K_M.gguf"));
    assert_eq!(pulled.files, vec!["tiny-Q4_K_M.gguf"]);
    assert_eq!(pulled.downloaded, 5000);
    assert!(!pulled.offline);
    // refs/main → commit; blob named by sha256; relative symlink.
    assert_eq!(
        std::fs::read_to_string(root.join("refs/main")).unwrap(),
        commit('a')
    );
    let blob = root.join("blobs").join(file.blob());
    assert_eq!(std::fs::read(&blob).unwrap(), file.content);
    #[cfg(unix)]
    assert_eq!(
        std::fs::read_link(&pulled.path).unwrap(),
        Path::new("../../blobs").join(file.blob())
    );
    assert_eq!(std::fs::read(&pulled.path).unwrap(), file.content);
    assert_eq!(
        tree(&root),
        vec![
            format!("blobs/{}", file.blob()),
            "refs/main".to_string(),
            format!("snapshots/{}/tiny-Q4_K_M.gguf", commit('a')),
        ]
    );
    assert!(env.cache().join("CACHEDIR.TAG").is_file());
    // The token-less fetch went hub → 302 → CDN.
    let gets = env.hub.content_gets();
    assert!(gets.iter().any(|s| s.cdn && s.range.is_none()), "{gets:?}");

    // Again: nothing is downloaded; only the model info is asked.
    env.hub.clear_seen();
    let again = env.pull("org/tiny-GGUF:Q4_K_M").unwrap();
    assert_eq!(again.path, pulled.path);
    assert_eq!(again.downloaded, 0);
    let seen = env.hub.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0]
        .path
        .starts_with("/api/models/org/tiny-GGUF/revision/main"));
}

#[test]
fn quant_tags_and_defaults_select_files() {
    let env = Env::new();
    // Bare repo: Q4_K_M.
    let mut rec = Record::default();
    let p = env
        .pull_with(&env.opts(), "org/tiny-GGUF", &mut rec)
        .unwrap();
    assert_eq!(p.files, vec!["tiny-Q4_K_M.gguf"]);
    assert!(
        rec.notes.iter().any(|n| n.contains("default quant Q4_K_M")),
        "{:?}",
        rec.notes
    );
    // Case-insensitive tag.
    let p = env.pull("org/tiny-GGUF:q8_0").unwrap();
    assert_eq!(p.files, vec!["tiny-Q8_0.gguf"]);
    assert_eq!(std::fs::read(&p.path).unwrap(), bytes(7000, 2));
    // A split set: every part, the path at part 1.
    let p = env.pull("hf://org/tiny-GGUF:bf16").unwrap();
    assert_eq!(
        p.files,
        vec![
            "tiny-BF16-00001-of-00002.gguf",
            "tiny-BF16-00002-of-00002.gguf"
        ]
    );
    assert!(p.path.ends_with("tiny-BF16-00001-of-00002.gguf"));
    assert!(p.snapshot.join("tiny-BF16-00002-of-00002.gguf").is_file());
    // An exact file name.
    let p = env.pull("org/tiny-GGUF:README.md").unwrap();
    assert_eq!(std::fs::read(&p.path).unwrap(), b"# tiny\n");
    // No such tag: the error lists the GGUFs (and not the projector).
    let e = env.pull("org/tiny-GGUF:Q5_K_S").unwrap_err().to_string();
    assert!(e.contains("tiny-Q8_0.gguf") && !e.contains("mmproj"), "{e}");
}

#[test]
fn hf_format_repo_fetches_what_the_loader_reads() {
    let env = Env::new();
    let p = env.pull("org/tiny-hf").unwrap();
    assert_eq!(p.path, p.snapshot);
    assert_eq!(
        p.files,
        vec![
            "config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "generation_config.json",
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ]
    );
    let repo = hf_repo();
    for f in &p.files {
        assert_eq!(
            std::fs::read(p.snapshot.join(f)).unwrap(),
            repo.file(f).content,
            "{f}"
        );
    }
    assert!(!p.snapshot.join("pytorch_model.bin").exists());
    assert!(!p.snapshot.join("consolidated.safetensors").exists());
    // Small files are named by their git blob sha1, LFS ones by sha256.
    let root = env.cache().join("models--org--tiny-hf/blobs");
    assert!(root
        .join(anedvd_hub::git_blob_sha1(br#"{"model_type":"llama"}"#))
        .is_file());
    assert!(root.join(repo.file("tokenizer.json").blob()).is_file());
    // --include adds files.
    let mut req = PullRequest::new(ModelRef::parse("org/tiny-hf:config.json").unwrap());
    req.include = vec!["*.md".into()];
    let p = pull(&env.opts(), &req, &mut Record::default()).unwrap();
    assert_eq!(p.files, vec!["config.json", "README.md"]);
}

#[test]
fn a_cut_download_resumes_with_a_range_request() {
    let env = Env::new();
    let repo = gguf_repo();
    let file = repo.file("tiny-Q4_K_M.gguf");
    env.hub.faults(|f| {
        f.cut_after.insert("tiny-Q4_K_M.gguf".into(), 1000);
    });
    // No retries: the pull fails and keeps the partial file.
    let mut opts = env.opts();
    opts.retries = 0;
    let e = env
        .pull_with(&opts, "org/tiny-GGUF:Q4_K_M", &mut Record::default())
        .unwrap_err();
    let Error::Interrupted { done, partial, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*done, 1000);
    let blobs = env.cache().join("models--org--tiny-GGUF/blobs");
    assert_eq!(*partial, blobs.join(format!("{}.incomplete", file.blob())));
    assert_eq!(std::fs::read(partial).unwrap(), file.content[..1000]);
    assert!(e.to_string().contains("next pull resumes it"), "{e}");
    let snap = env
        .cache()
        .join("models--org--tiny-GGUF/snapshots")
        .join(commit('a'));
    assert!(!snap.join("tiny-Q4_K_M.gguf").exists());

    // The next pull asks for the rest only and verifies the whole.
    env.hub.clear_seen();
    let mut rec = Record::default();
    let p = env
        .pull_with(&env.opts(), "org/tiny-GGUF:Q4_K_M", &mut rec)
        .unwrap();
    assert_eq!(
        rec.starts,
        vec![("tiny-Q4_K_M.gguf".to_string(), Some(5000), 1000)]
    );
    assert_eq!(p.downloaded, 4000);
    assert_eq!(std::fs::read(&p.path).unwrap(), file.content);
    let cdn: Vec<_> = env
        .hub
        .content_gets()
        .into_iter()
        .filter(|s| s.cdn)
        .collect();
    assert_eq!(cdn.len(), 1);
    assert_eq!(cdn[0].range.as_deref(), Some("bytes=1000-"));
    assert!(!partial.exists());
}

#[test]
fn a_cut_download_is_resumed_within_one_pull() {
    let env = Env::new();
    env.hub.faults(|f| {
        f.cut_after.insert("tiny-Q8_0.gguf".into(), 2500);
    });
    let mut rec = Record::default();
    let p = env
        .pull_with(&env.opts(), "org/tiny-GGUF:Q8_0", &mut rec)
        .unwrap();
    assert_eq!(std::fs::read(&p.path).unwrap(), bytes(7000, 2));
    assert!(
        rec.notes
            .iter()
            .any(|n| n.contains("resuming (retry 1 of 1)")),
        "{:?}",
        rec.notes
    );
    assert!(
        !rec.notes.iter().any(|n| n.contains("not verified")),
        "{:?}",
        rec.notes
    );
    let ranges: Vec<_> = env
        .hub
        .content_gets()
        .into_iter()
        .filter(|s| s.cdn)
        .map(|s| s.range)
        .collect();
    assert_eq!(ranges, vec![None, Some("bytes=2500-".to_string())]);
}

#[test]
fn a_server_ignoring_range_restarts_from_zero() {
    let env = Env::new();
    env.hub.faults(|f| {
        f.cut_after.insert("tiny-Q8_0.gguf".into(), 2500);
        f.ignore_range = true;
    });
    let p = env.pull("org/tiny-GGUF:Q8_0").unwrap();
    assert_eq!(std::fs::read(&p.path).unwrap(), bytes(7000, 2));
    assert_eq!(p.downloaded, 2500 + 7000);
}

#[test]
fn a_hash_mismatch_is_refused_and_leaves_nothing() {
    let env = Env::new();
    env.hub.faults(|f| {
        f.corrupt.insert("tiny-Q4_K_M.gguf".into());
        f.corrupt.insert("config.json".into());
    });
    let e = env.pull("org/tiny-GGUF:Q4_K_M").unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            Error::HashMismatch {
                algorithm: "sha256",
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("the file was deleted"), "{msg}");
    let root = env.cache().join("models--org--tiny-GGUF");
    let left = tree(&root);
    assert!(
        left.iter()
            .all(|f| !f.starts_with("blobs/") && !f.starts_with("snapshots/")),
        "{left:?}"
    );
    // A small (git) file: its git blob sha1 is checked too.
    let e = env.pull("org/tiny-hf:config.json").unwrap_err();
    assert!(
        matches!(
            e,
            Error::HashMismatch {
                algorithm: "git sha1",
                ..
            }
        ),
        "{e}"
    );
    assert!(!env
        .cache()
        .join("models--org--tiny-hf/snapshots")
        .join(commit('b'))
        .join("config.json")
        .exists());
}

#[test]
fn not_found_and_gated_errors_say_what_to_do() {
    let env = Env::new();
    let e = env.pull("org/missing").unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("repo org/missing does not exist"), "{msg}");

    let mut req = PullRequest::new(ModelRef::parse("org/tiny-GGUF").unwrap());
    req.revision = "v9".into();
    let e = pull(&env.opts(), &req, &mut Record::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("revision `v9` of org/tiny-GGUF does not exist"),
        "{e}"
    );

    let e = env.pull("org/gated").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Gated { status: 401, .. }), "{msg}");
    assert!(
        msg.contains("gated") && msg.contains("HF_TOKEN") && msg.contains("/org/gated"),
        "{msg}"
    );

    let mut opts = env.opts();
    opts.token = Some("hf_wrong".into());
    let e = env
        .pull_with(&opts, "org/gated", &mut Record::default())
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Gated { status: 403, .. }), "{msg}");
    assert!(msg.contains("token was refused"), "{msg}");

    // The right token: the hub sees it, the CDN does not.
    env.hub.clear_seen();
    opts.token = Some("hf_secret".into());
    let p = env
        .pull_with(&opts, "org/gated", &mut Record::default())
        .unwrap();
    assert_eq!(std::fs::read(&p.path).unwrap(), bytes(1500, 11));
    for s in env.hub.seen() {
        if s.cdn {
            assert_eq!(s.auth, None, "token leaked to the CDN: {s:?}");
        } else {
            assert_eq!(s.auth.as_deref(), Some("Bearer hf_secret"), "{s:?}");
        }
    }
}

#[test]
fn offline_uses_the_cache_and_says_so() {
    let env = Env::new();
    let online = env.pull("org/tiny-GGUF:Q4_K_M").unwrap();
    env.hub.clear_seen();
    let mut opts = env.opts();
    opts.offline = true;
    let mut rec = Record::default();
    let p = env
        .pull_with(&opts, "org/tiny-GGUF:Q4_K_M", &mut rec)
        .unwrap();
    assert!(p.offline);
    assert_eq!(p.path, online.path);
    assert!(env.hub.seen().is_empty());
    assert!(
        rec.notes
            .iter()
            .any(|n| n.contains("HF_HUB_OFFLINE") && n.contains("cached snapshot")),
        "{:?}",
        rec.notes
    );
    // The bare repo offline: the one GGUF the snapshot holds.
    assert_eq!(
        env.pull_with(&opts, "org/tiny-GGUF", &mut Record::default())
            .unwrap()
            .path,
        online.path
    );
    // Not cached: a clear error.
    let e = env
        .pull_with(&opts, "org/tiny-GGUF:Q8_0", &mut Record::default())
        .unwrap_err();
    assert!(matches!(e, Error::NotCached { .. }), "{e:?}");
    let e = env
        .pull_with(&opts, "org/tiny-hf", &mut Record::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not in the cache") && e.contains("HF_HUB_OFFLINE"),
        "{e}"
    );
}

#[test]
fn an_unreachable_hub_falls_back_to_the_cache() {
    let env = Env::new();
    let online = env.pull("org/tiny-hf").unwrap();
    // A port nobody listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let opts = HubOptions::isolated(&dead, env.cache());
    let mut rec = Record::default();
    let p = env.pull_with(&opts, "org/tiny-hf", &mut rec).unwrap();
    assert!(p.offline);
    assert_eq!(p.path, online.path);
    assert_eq!(p.files, online.files);
    assert!(
        rec.notes.iter().any(|n| n.contains("cannot reach")),
        "{:?}",
        rec.notes
    );
    let e = env
        .pull_with(&opts, "org/never", &mut Record::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot reach") && e.contains("not in the cache"),
        "{e}"
    );
    // A hub answering 503 counts as unreachable too.
    env.hub.faults(|f| f.down = true);
    let p = env.pull("org/tiny-hf").unwrap();
    assert!(p.offline);
}

#[test]
fn without_blob_ids_the_etag_names_the_blob() {
    let env = Env::new();
    env.hub.faults(|f| f.no_blob_info = true);
    let p = env.pull("org/tiny-GGUF:Q4_K_M").unwrap();
    let blob = gguf_repo().file("tiny-Q4_K_M.gguf").blob();
    assert!(env
        .cache()
        .join("models--org--tiny-GGUF/blobs")
        .join(&blob)
        .is_file());
    assert_eq!(std::fs::read(&p.path).unwrap(), bytes(5000, 1));
    assert!(env.hub.seen().iter().any(|s| s.method == "HEAD"));
}

/// Lays out `repo` the way huggingface_hub does, by hand: blobs named by
/// sha256/git sha1, `snapshots/{commit}/{file}` relative symlinks, `refs/main`.
#[cfg(unix)]
fn hand_made_cache(cache: &Path, repo: &MockRepo, files: &[&str]) {
    let root = cache.join(format!("models--{}", repo.id.replace('/', "--")));
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), &repo.commit).unwrap();
    for name in files {
        let f = repo.file(name);
        std::fs::write(root.join("blobs").join(f.blob()), &f.content).unwrap();
        let pointer = root.join("snapshots").join(&repo.commit).join(name);
        std::fs::create_dir_all(pointer.parent().unwrap()).unwrap();
        let depth = name.split('/').count() + 1;
        let target = format!("{}blobs/{}", "../".repeat(depth), f.blob());
        std::os::unix::fs::symlink(target, &pointer).unwrap();
    }
}

#[cfg(unix)]
#[test]
fn a_cache_laid_out_by_huggingface_hub_is_found() {
    let env = Env::new();
    let repo = hf_repo();
    let files = [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    hand_made_cache(&env.cache(), &repo, &files);
    // Offline: found.
    let mut opts = env.opts();
    opts.offline = true;
    let p = env
        .pull_with(&opts, "org/tiny-hf", &mut Record::default())
        .unwrap();
    assert_eq!(
        p.snapshot,
        env.cache()
            .join("models--org--tiny-hf/snapshots")
            .join(commit('b'))
    );
    assert_eq!(p.files.len(), files.len());
    // By commit hash too, without refs.
    std::fs::remove_file(env.cache().join("models--org--tiny-hf/refs/main")).unwrap();
    let mut req = PullRequest::new(ModelRef::parse("org/tiny-hf").unwrap());
    req.revision = commit('b');
    assert!(pull(&opts, &req, &mut Record::default()).is_ok());
    // Online: nothing is downloaded.
    env.hub.clear_seen();
    let p = env.pull("org/tiny-hf").unwrap();
    assert_eq!(p.downloaded, 0);
    assert!(
        env.hub.content_gets().is_empty(),
        "{:?}",
        env.hub.content_gets()
    );
    assert_eq!(
        RepoCache::new(&env.cache(), "org/tiny-hf").read_ref("main"),
        Some(commit('b'))
    );
}

#[cfg(unix)]
#[test]
fn a_blob_from_another_snapshot_is_linked_not_downloaded() {
    let env = Env::new();
    let repo = gguf_repo();
    // An older commit's snapshot holds the same blob.
    let mut old = repo.clone();
    old.commit = commit('0');
    hand_made_cache(&env.cache(), &old, &["tiny-Q4_K_M.gguf"]);
    let p = env.pull("org/tiny-GGUF:Q4_K_M").unwrap();
    assert_eq!(p.commit, commit('a'));
    assert_eq!(p.downloaded, 0);
    assert!(env.hub.content_gets().is_empty());
    assert_eq!(
        std::fs::read(&p.path).unwrap(),
        repo.file("tiny-Q4_K_M.gguf").content
    );
}
