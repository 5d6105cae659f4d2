//! Cross-check with Python's `huggingface_hub`: what we download, it finds
//! offline, and what it downloads (from the same mock hub), we find
//! offline. Runs only when `ANEDVD_HF_PYTHON` names a Python with
//! `huggingface_hub` installed (e.g. `python3 -m venv /tmp/hub-venv &&
//! /tmp/hub-venv/bin/pip install huggingface_hub`, then
//! `ANEDVD_HF_PYTHON=/tmp/hub-venv/bin/python`); otherwise it passes
//! without doing anything, so CI does not need Python.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod mock;

use anedvd_hub::{pull, HubOptions, ModelRef, PullRequest, Quiet};
use mock::{MockFile, MockHub, MockRepo};
use std::path::Path;
use std::process::Command;

fn python() -> Option<String> {
    std::env::var("ANEDVD_HF_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
}

/// Runs `code` with `python`; returns stdout's last line.
fn run_py(python: &str, code: &str, envs: &[(&str, &str)]) -> String {
    let out = Command::new(python)
        .arg("-c")
        .arg(code)
        .env_remove("HF_TOKEN")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_XET", "1")
        .envs(envs.iter().copied())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().last().unwrap_or_default().trim().to_string()
}

fn repo() -> MockRepo {
    MockRepo::new(
        "org/cross",
        'd',
        vec![
            MockFile::git("README.md", b"# cross\n"),
            MockFile::git("config.json", br#"{"model_type":"llama"}"#),
            MockFile::lfs(
                "cross-Q4_K_M.gguf",
                (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect(),
            ),
        ],
    )
}

#[test]
fn huggingface_hub_and_we_share_the_cache() {
    let Some(py) = python() else {
        eprintln!("ANEDVD_HF_PYTHON unset: skipping the huggingface_hub cross-check");
        return;
    };
    let hub = MockHub::start(vec![repo()]);
    let tmp = tempfile::tempdir().unwrap();
    let ours = tmp.path().join("ours");
    let theirs = tmp.path().join("theirs");
    let cache_str = |p: &Path| p.to_string_lossy().into_owned();

    // 1. We download; huggingface_hub finds it offline, and its cache scan
    //    sees a healthy repo.
    let opts = HubOptions::isolated(&hub.endpoint, &ours);
    let req = PullRequest::new(ModelRef::parse("org/cross:Q4_K_M").unwrap());
    let pulled = pull(&opts, &req, &mut Quiet).unwrap();
    let found = run_py(
        &py,
        "from huggingface_hub import hf_hub_download, scan_cache_dir\n\
         info = scan_cache_dir()\n\
         assert not info.warnings, info.warnings\n\
         (r,) = info.repos\n\
         assert r.repo_id == 'org/cross' and r.nb_files == 1, r\n\
         print(hf_hub_download('org/cross', 'cross-Q4_K_M.gguf'))",
        &[
            ("HF_HUB_CACHE", &cache_str(&ours)),
            ("HF_HUB_OFFLINE", "1"),
            ("HF_ENDPOINT", &hub.endpoint),
        ],
    );
    assert_eq!(Path::new(&found), pulled.path);

    // 2. huggingface_hub downloads from the mock; we find it offline.
    let got = run_py(
        &py,
        "from huggingface_hub import hf_hub_download\n\
         hf_hub_download('org/cross', 'config.json')\n\
         print(hf_hub_download('org/cross', 'cross-Q4_K_M.gguf'))",
        &[
            ("HF_HUB_CACHE", &cache_str(&theirs)),
            ("HF_ENDPOINT", &hub.endpoint),
        ],
    );
    let mut opts = HubOptions::isolated(&hub.endpoint, &theirs);
    opts.offline = true;
    let p = pull(
        &opts,
        &PullRequest::new(ModelRef::parse("org/cross").unwrap()),
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(p.path, Path::new(&got));
    let p = pull(
        &opts,
        &PullRequest::new(ModelRef::parse("org/cross:config.json").unwrap()),
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(std::fs::read(p.path).unwrap(), br#"{"model_type":"llama"}"#);
}
