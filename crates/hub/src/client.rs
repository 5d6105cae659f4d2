//! The hub's HTTP API: model info and file URLs, redirects followed by hand
//! (so that the hub's `X-Linked-Etag`/`X-Linked-Size` on the redirect are
//! seen and the token never leaves the hub's host).

use crate::config::HubOptions;
use crate::error::{Error, Result};
use serde::Deserialize;
use ureq::http::{HeaderMap, Response};
use ureq::{Agent, Body};

/// A file of a repo as the model-info API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    /// The path in the repo (`/`-separated).
    pub name: String,
    /// Its size in bytes, when the hub said.
    pub size: Option<u64>,
    /// The cache blob name: the sha256 of an LFS file, else the git blob
    /// sha1 (what the hub's ETag is); `None` when the hub did not say.
    pub blob: Option<String>,
}

/// What `GET /api/models/{repo}/revision/{rev}?blobs=true` tells.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// The commit the revision points at.
    pub commit: String,
    /// The repo's files at that commit.
    pub files: Vec<RemoteFile>,
}

#[derive(Deserialize)]
struct InfoJson {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<SiblingJson>,
}

#[derive(Deserialize)]
struct SiblingJson {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<LfsJson>,
}

#[derive(Deserialize)]
struct LfsJson {
    #[serde(alias = "oid")]
    sha256: Option<String>,
    size: Option<u64>,
}

/// What is being asked for (to word a 401/404).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// The model info of `repo` at `revision`.
    Info { repo: &'a str, revision: &'a str },
    /// A file of `repo`.
    File { repo: &'a str, file: &'a str },
}

/// A response after the redirects, with what the hops said.
pub(crate) struct Fetched {
    pub response: Response<Body>,
    pub url: String,
    /// `X-Linked-Etag` of any hop, else the first response's `ETag` (normalized).
    pub etag: Option<String>,
    /// `X-Linked-Size` of any hop.
    pub linked_size: Option<u64>,
}

impl Fetched {
    pub fn status(&self) -> u16 {
        self.response.status().as_u16()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        header(self.response.headers(), name)
    }
}

fn header<'h>(h: &'h HeaderMap, name: &str) -> Option<&'h str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// `huggingface_hub._normalize_etag`: drop a `W/` prefix and the quotes.
pub(crate) fn normalize_etag(etag: &str) -> String {
    let e = etag.trim();
    let e = e.strip_prefix("W/").unwrap_or(e);
    e.trim_matches('"').to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
}

/// A blocking client for one hub endpoint.
pub(crate) struct Client {
    agent: Agent,
    opts: HubOptions,
    endpoint_origin: String,
}

impl Client {
    pub fn new(opts: &HubOptions) -> Self {
        let proxy = if opts.env_proxy {
            ureq::Proxy::try_from_env()
        } else {
            None
        };
        let config = Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(opts.connect_timeout))
            .timeout_per_read(Some(opts.read_timeout))
            .user_agent(concat!("anedvd-hub/", env!("CARGO_PKG_VERSION")))
            .proxy(proxy)
            .build();
        Client {
            agent: Agent::new_with_config(config),
            opts: opts.clone(),
            endpoint_origin: origin(&opts.endpoint).to_string(),
        }
    }

    pub fn opts(&self) -> &HubOptions {
        &self.opts
    }

    /// `{endpoint}/{repo}/resolve/{revision}/{file}`.
    pub fn resolve_url(&self, repo: &str, revision: &str, file: &str) -> String {
        format!(
            "{}/{repo}/resolve/{}/{}",
            self.opts.endpoint,
            quote(revision, false),
            quote(file, true)
        )
    }

    /// The model info of `repo` at `revision`, with blob ids and sizes.
    pub fn model_info(&self, repo: &str, revision: &str) -> Result<ModelInfo> {
        let url = format!(
            "{}/api/models/{repo}/revision/{}?blobs=true",
            self.opts.endpoint,
            quote(revision, false)
        );
        let target = Target::Info { repo, revision };
        let fetched = self.send(Method::Get, &url, None)?;
        self.check(&fetched, target)?;
        let reader = fetched.response.into_body().into_reader();
        let info: InfoJson = serde_json::from_reader(reader).map_err(|e| {
            if e.is_io() {
                Error::Network {
                    url: url.clone(),
                    reason: e.to_string(),
                }
            } else {
                Error::BadResponse {
                    url: url.clone(),
                    reason: format!("not the model-info JSON: {e}"),
                }
            }
        })?;
        let commit = info.sha.ok_or_else(|| Error::BadResponse {
            url: url.clone(),
            reason: "no `sha` (commit) in the model info; is HF_ENDPOINT a Hugging Face hub?"
                .into(),
        })?;
        if commit.is_empty() || !commit.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::BadResponse {
                url,
                reason: format!("`{commit}` is not a commit hash"),
            });
        }
        let mut files = Vec::with_capacity(info.siblings.len());
        for s in info.siblings {
            if crate::spec::validate_file_name(&s.rfilename).is_err() {
                return Err(Error::BadResponse {
                    url,
                    reason: format!("file name `{}` leaves the repo", s.rfilename),
                });
            }
            let (blob, size) = match s.lfs {
                Some(lfs) => (lfs.sha256, lfs.size.or(s.size)),
                None => (s.blob_id, s.size),
            };
            files.push(RemoteFile {
                name: s.rfilename,
                size,
                blob: blob.map(|b| b.to_ascii_lowercase()),
            });
        }
        Ok(ModelInfo { commit, files })
    }

    /// Sends `method url` (with `Range: bytes={from}-` when given), following
    /// up to 10 redirects; the token goes to the endpoint's origin only.
    pub fn send(&self, method: Method, url: &str, from: Option<u64>) -> Result<Fetched> {
        let mut url = url.to_string();
        let mut etag: Option<String> = None;
        let mut linked_etag: Option<String> = None;
        let mut linked_size: Option<u64> = None;
        for hop in 0..10 {
            let mut req = match method {
                Method::Get => self.agent.get(&url),
                Method::Head => self.agent.head(&url),
            };
            if let Some(token) = &self.opts.token {
                if origin(&url) == self.endpoint_origin {
                    req = req.header("Authorization", format!("Bearer {token}"));
                }
            }
            if let Some(from) = from.filter(|&f| f > 0) {
                req = req.header("Range", format!("bytes={from}-"));
            }
            let response = req.call().map_err(|e| Error::Network {
                url: url.clone(),
                reason: e.to_string(),
            })?;
            let h = response.headers();
            if linked_etag.is_none() {
                linked_etag = header(h, "x-linked-etag").map(normalize_etag);
            }
            if linked_size.is_none() {
                linked_size = header(h, "x-linked-size").and_then(|s| s.trim().parse().ok());
            }
            if hop == 0 {
                etag = header(h, "etag").map(normalize_etag);
            }
            let status = response.status().as_u16();
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                let Some(location) = header(h, "location") else {
                    return Err(Error::BadResponse {
                        url,
                        reason: format!("HTTP {status} without a Location"),
                    });
                };
                url = join_url(&url, location);
                continue;
            }
            return Ok(Fetched {
                response,
                url,
                etag: linked_etag.or(etag),
                linked_size,
            });
        }
        Err(Error::BadResponse {
            url,
            reason: "more than 10 redirects".into(),
        })
    }

    /// Turns an error status into the error that explains it.
    pub fn check(&self, f: &Fetched, target: Target<'_>) -> Result<()> {
        let status = f.status();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let code = f.header("x-error-code").map(str::to_string);
        let message = f.header("x-error-message").map(str::to_string);
        let endpoint = self.opts.endpoint.clone();
        let repo = match target {
            Target::Info { repo, .. } | Target::File { repo, .. } => repo,
        };
        Err(match status {
            401 | 403 => {
                if message.as_deref() == Some("Invalid credentials in Authorization header") {
                    Error::Http {
                        url: f.url.clone(),
                        status,
                        message: Some(format!(
                            "the token is invalid (check HF_TOKEN or {})",
                            self.opts.token_path.display()
                        )),
                    }
                } else {
                    Error::Gated {
                        repo: repo.to_string(),
                        status,
                        token_sent: self.opts.token.is_some(),
                        endpoint,
                        token_path: self.opts.token_path.clone(),
                    }
                }
            }
            404 => {
                let what = match (code.as_deref(), target) {
                    (Some("RepoNotFound"), _) => format!("repo {repo}"),
                    (Some("RevisionNotFound"), Target::Info { revision, .. }) => {
                        format!("revision `{revision}` of {repo}")
                    }
                    (Some("RevisionNotFound"), Target::File { .. }) => {
                        format!("the revision of {repo}")
                    }
                    (_, Target::File { file, .. }) => format!("file `{file}` in {repo}"),
                    (_, Target::Info { revision, .. }) if revision != "main" => {
                        format!("repo {repo} (or its revision `{revision}`)")
                    }
                    (_, Target::Info { .. }) => format!("repo {repo}"),
                };
                Error::NotFound {
                    what,
                    endpoint,
                    code,
                }
            }
            429 | 500..=599 => Error::Network {
                url: f.url.clone(),
                reason: format!(
                    "HTTP {status}{}",
                    message.map(|m| format!(": {m}")).unwrap_or_default()
                ),
            },
            _ => Error::Http {
                url: f.url.clone(),
                status,
                message,
            },
        })
    }
}

/// `scheme://authority` of `url`.
fn origin(url: &str) -> &str {
    let Some(i) = url.find("://") else {
        return url;
    };
    let rest = &url[i + 3..];
    let end = rest.find(['/', '?', '#']).map_or(url.len(), |j| i + 3 + j);
    &url[..end]
}

/// `location` resolved against `base` (absolute, scheme-relative,
/// origin-relative or path-relative).
pub(crate) fn join_url(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    if let Some(rest) = location.strip_prefix("//") {
        let scheme = base.split("://").next().unwrap_or("https");
        return format!("{scheme}://{rest}");
    }
    let origin = origin(base);
    if location.starts_with('/') {
        return format!("{origin}{location}");
    }
    let path = &base[origin.len()..];
    let path = path.split(['?', '#']).next().unwrap_or("");
    let dir = match path.rfind('/') {
        Some(i) => &path[..=i],
        None => "/",
    };
    format!("{origin}{dir}{location}")
}

/// Percent-encodes all but the unreserved characters (and `/` when `keep_slash`),
/// as Python's `urllib.parse.quote`.
pub(crate) fn quote(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/');
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(origin("https://hf.co/a/b?x"), "https://hf.co");
        assert_eq!(origin("http://127.0.0.1:9/x"), "http://127.0.0.1:9");
        assert_eq!(join_url("http://h:1/a/b/c", "/cdn/x"), "http://h:1/cdn/x");
        assert_eq!(
            join_url("http://h:1/a/b/c", "https://cdn/x"),
            "https://cdn/x"
        );
        assert_eq!(join_url("https://h/a/b/c?q", "d"), "https://h/a/b/d");
        assert_eq!(join_url("https://h/a", "//cdn/x"), "https://cdn/x");
        assert_eq!(quote("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(quote("sub dir/a+b.gguf", true), "sub%20dir/a%2Bb.gguf");
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("\"abc\""), "abc");
    }
}
