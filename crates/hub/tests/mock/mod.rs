//! A small mock of the Hugging Face hub's HTTP API for the tests: model
//! info, `resolve` (302 to a separate "CDN" listener for LFS files, with
//! `X-Linked-Etag`/`X-Linked-Size`; 200 with the git-sha1 `ETag` for small
//! files), Range requests, gated repos, and faults on demand (a connection
//! cut after N bytes, corrupt bytes, Range ignored, the hub down).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use anedvd_hub::{git_blob_sha1, sha256_hex};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// A file of a mock repo.
#[derive(Clone, Debug)]
pub struct MockFile {
    pub name: String,
    pub content: Vec<u8>,
    /// Stored in LFS: named by sha256 and served from the CDN listener.
    pub lfs: bool,
}

impl MockFile {
    pub fn lfs(name: &str, content: Vec<u8>) -> Self {
        MockFile {
            name: name.into(),
            content,
            lfs: true,
        }
    }

    pub fn git(name: &str, content: &[u8]) -> Self {
        MockFile {
            name: name.into(),
            content: content.to_vec(),
            lfs: false,
        }
    }

    /// The cache blob name huggingface_hub gives it.
    pub fn blob(&self) -> String {
        if self.lfs {
            sha256_hex(&self.content)
        } else {
            git_blob_sha1(&self.content)
        }
    }
}

/// A mock repo.
#[derive(Clone, Debug)]
pub struct MockRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<MockFile>,
    /// Gated: only this token gets in (401 without a token, 403 with another).
    pub token: Option<String>,
}

impl MockRepo {
    pub fn new(id: &str, commit_seed: char, files: Vec<MockFile>) -> Self {
        MockRepo {
            id: id.into(),
            commit: commit_seed.to_string().repeat(40),
            files,
            token: None,
        }
    }

    pub fn file(&self, name: &str) -> &MockFile {
        self.files
            .iter()
            .find(|f| f.name == name)
            .expect("mock file")
    }
}

/// One request the mock saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub auth: Option<String>,
    /// Served by the CDN listener.
    pub cdn: bool,
}

/// Faults to inject.
#[derive(Default, Debug)]
pub struct Faults {
    /// File name → send only this many body bytes (once), then close.
    pub cut_after: HashMap<String, usize>,
    /// Files whose bytes are served flipped (same length).
    pub corrupt: HashSet<String>,
    /// Answer 200 with the whole file to Range requests.
    pub ignore_range: bool,
    /// Model info without `size`/`blobId`/`lfs` (forces HEAD requests).
    pub no_blob_info: bool,
    /// Answer 503 to everything.
    pub down: bool,
}

#[derive(Default)]
struct State {
    repos: Vec<MockRepo>,
    faults: Faults,
    seen: Vec<Seen>,
}

/// The running mock: the hub on one port, the CDN on another.
pub struct MockHub {
    pub endpoint: String,
    pub cdn: String,
    state: Arc<Mutex<State>>,
}

impl MockHub {
    pub fn start(repos: Vec<MockRepo>) -> Self {
        let state = Arc::new(Mutex::new(State {
            repos,
            ..Default::default()
        }));
        let hub = TcpListener::bind("127.0.0.1:0").unwrap();
        let cdn = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", hub.local_addr().unwrap());
        let cdn_url = format!("http://{}", cdn.local_addr().unwrap());
        for (listener, is_cdn) in [(hub, false), (cdn, true)] {
            let state = state.clone();
            let cdn_url = cdn_url.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    let state = state.clone();
                    let cdn_url = cdn_url.clone();
                    std::thread::spawn(move || {
                        let _ = serve(stream, &state, is_cdn, &cdn_url);
                    });
                }
            });
        }
        MockHub {
            endpoint,
            cdn: cdn_url,
            state,
        }
    }

    pub fn faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.state.lock().unwrap().faults);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn clear_seen(&self) {
        self.state.lock().unwrap().seen.clear();
    }

    /// Requests for file content (CDN fetches and direct small-file GETs).
    pub fn content_gets(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "GET" && (s.cdn || s.path.contains("/resolve/")))
            .collect()
    }
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: HashMap<String, String>,
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target, String::new()),
    };
    Some(Request {
        method,
        path: percent_decode(&path),
        query,
        headers,
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes, then close.
    cut: Option<usize>,
}

impl Reply {
    fn new(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            cut: None,
        }
    }

    fn header(mut self, k: &str, v: impl Into<String>) -> Self {
        self.headers.push((k.to_string(), v.into()));
        self
    }

    fn body(mut self, b: Vec<u8>) -> Self {
        self.body = b;
        self
    }
}

fn serve(
    mut stream: TcpStream,
    state: &Mutex<State>,
    is_cdn: bool,
    cdn_url: &str,
) -> std::io::Result<()> {
    let Some(req) = read_request(&stream) else {
        return Ok(());
    };
    let reply = {
        let mut st = state.lock().unwrap();
        st.seen.push(Seen {
            method: req.method.clone(),
            path: req.path.clone(),
            range: req.headers.get("range").cloned(),
            auth: req.headers.get("authorization").cloned(),
            cdn: is_cdn,
        });
        route(&mut st, &req, is_cdn, cdn_url)
    };
    let reason = match reply.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        503 => "Service Unavailable",
        _ => "Whatever",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nConnection: close\r\n",
        reply.status
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", reply.body.len()));
    stream.write_all(head.as_bytes())?;
    if req.method != "HEAD" {
        let n = reply.cut.unwrap_or(reply.body.len()).min(reply.body.len());
        stream.write_all(&reply.body[..n])?;
    }
    stream.flush()?;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(())
}

fn error(status: u16, code: &str) -> Reply {
    Reply::new(status)
        .header("X-Error-Code", code)
        .header("X-Error-Message", format!("mock: {code}"))
}

fn route(st: &mut State, req: &Request, is_cdn: bool, cdn_url: &str) -> Reply {
    if st.faults.down {
        return Reply::new(503);
    }
    if is_cdn {
        let Some(sha) = req.path.strip_prefix("/cdn/") else {
            return Reply::new(404);
        };
        let found = st
            .repos
            .iter()
            .flat_map(|r| r.files.iter())
            .find(|f| f.lfs && f.blob() == sha)
            .cloned();
        return match found {
            Some(f) => content(st, req, &f, vec![]),
            None => Reply::new(404),
        };
    }
    let auth = req.headers.get("authorization").cloned();
    if let Some(rest) = req.path.strip_prefix("/api/models/") {
        // {org}/{name}/revision/{rev}
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let (repo_id, rev) = match parts.as_slice() {
            [o, n, "revision", rev] => (format!("{o}/{n}"), rev.to_string()),
            [o, n] => (format!("{o}/{n}"), "main".to_string()),
            _ => return Reply::new(400),
        };
        let Some(repo) = st.repos.iter().find(|r| r.id == repo_id).cloned() else {
            return error(404, "RepoNotFound");
        };
        if let Some(r) = gate(&repo, &auth) {
            return r;
        }
        if rev != "main" && rev != repo.commit {
            return error(404, "RevisionNotFound");
        }
        let blobs = req.query.contains("blobs=true") && !st.faults.no_blob_info;
        let siblings: Vec<serde_json::Value> = repo
            .files
            .iter()
            .map(|f| {
                if !blobs {
                    return serde_json::json!({ "rfilename": f.name });
                }
                let mut v = serde_json::json!({
                    "rfilename": f.name,
                    "size": f.content.len(),
                    "blobId": git_blob_sha1(f.name.as_bytes()),
                });
                if f.lfs {
                    v["lfs"] = serde_json::json!({
                        "size": f.content.len(),
                        "sha256": f.blob(),
                        "pointerSize": 134,
                    });
                } else {
                    v["blobId"] = serde_json::json!(f.blob());
                }
                v
            })
            .collect();
        let body = serde_json::json!({
            "id": repo.id,
            "modelId": repo.id,
            "sha": repo.commit,
            "private": false,
            "gated": repo.token.is_some(),
            "siblings": siblings,
        });
        return Reply::new(200)
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap());
    }
    // /{org}/{name}/resolve/{rev}/{file...}
    let parts: Vec<&str> = req.path.trim_start_matches('/').splitn(5, '/').collect();
    let [o, n, "resolve", rev, file] = parts.as_slice() else {
        return Reply::new(404);
    };
    let repo_id = format!("{o}/{n}");
    let Some(repo) = st.repos.iter().find(|r| r.id == repo_id).cloned() else {
        return error(404, "RepoNotFound");
    };
    if let Some(r) = gate(&repo, &auth) {
        return r;
    }
    if *rev != "main" && *rev != repo.commit {
        return error(404, "RevisionNotFound");
    }
    let Some(f) = repo.files.iter().find(|f| f.name == *file).cloned() else {
        return error(404, "EntryNotFound").header("X-Repo-Commit", repo.commit.clone());
    };
    let common = vec![("X-Repo-Commit".to_string(), repo.commit.clone())];
    if f.lfs {
        let mut r = Reply::new(302)
            .header("Location", format!("{cdn_url}/cdn/{}", f.blob()))
            .header("X-Linked-Etag", format!("\"{}\"", f.blob()))
            .header("X-Linked-Size", f.content.len().to_string())
            .header("ETag", "\"not-the-blob-etag\"");
        r.headers.extend(common);
        r
    } else {
        content(
            st,
            req,
            &f,
            [
                common,
                vec![("ETag".to_string(), format!("\"{}\"", f.blob()))],
            ]
            .concat(),
        )
    }
}

fn gate(repo: &MockRepo, auth: &Option<String>) -> Option<Reply> {
    let want = repo.token.as_ref()?;
    match auth {
        None => Some(error(401, "GatedRepo")),
        Some(a) if *a == format!("Bearer {want}") => None,
        Some(_) => Some(error(403, "GatedRepo")),
    }
}

fn content(st: &mut State, req: &Request, f: &MockFile, headers: Vec<(String, String)>) -> Reply {
    let mut bytes = f.content.clone();
    if st.faults.corrupt.contains(&f.name) {
        for b in bytes.iter_mut() {
            *b ^= 0x5a;
        }
    }
    let len = bytes.len();
    let range = req
        .headers
        .get("range")
        .filter(|_| !st.faults.ignore_range)
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok());
    let mut reply = match range {
        Some(from) if from >= len => {
            return Reply::new(416).header("Content-Range", format!("bytes */{len}"));
        }
        Some(from) => Reply::new(206)
            .header("Content-Range", format!("bytes {from}-{}/{len}", len - 1))
            .body(bytes[from..].to_vec()),
        None => Reply::new(200).body(bytes),
    };
    reply.headers.push(("Accept-Ranges".into(), "bytes".into()));
    reply.headers.extend(headers);
    if req.method == "GET" {
        if let Some(n) = st.faults.cut_after.remove(&f.name) {
            reply.cut = Some(n);
        }
    }
    reply
}
