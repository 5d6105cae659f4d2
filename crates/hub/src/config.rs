//! Where the hub is, who we are, and where the cache lives: the environment
//! variables `huggingface_hub` reads, with its defaults.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// The hub used when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How to reach the hub and where to keep what is downloaded.
#[derive(Debug, Clone)]
pub struct HubOptions {
    /// The hub's base URL, without a trailing `/` (`HF_ENDPOINT`).
    pub endpoint: String,
    /// The token sent as `Authorization: Bearer` to the endpoint's host
    /// (`HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN`, else the token file).
    pub token: Option<String>,
    /// The token file (`HF_TOKEN_PATH`, else `$HF_HOME/token`); named in the
    /// message of a gated repo.
    pub token_path: PathBuf,
    /// The hub cache (`HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, else
    /// `$HF_HOME/hub`); holds one `models--ORG--REPO` folder per repo.
    pub cache_dir: PathBuf,
    /// Never touch the network; use the cache only (`HF_HUB_OFFLINE` or
    /// `TRANSFORMERS_OFFLINE` set to 1/ON/YES/TRUE).
    pub offline: bool,
    /// How many times a broken download is resumed (with a Range request)
    /// before giving up.
    pub retries: u32,
    /// The pause before the first retry; doubled after each.
    pub retry_delay: Duration,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// The longest wait for any one read from the network.
    pub read_timeout: Duration,
    /// Use the proxy of `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY` (honouring `NO_PROXY`).
    pub env_proxy: bool,
}

impl HubOptions {
    /// The options of this process's environment.
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var_os(k))
    }

    /// The options given the environment lookup `var` (for tests: no need to
    /// touch the process environment).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let get = |k: &str| var(k).filter(|v| !v.is_empty());
        let home = get("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        let expand = |v: OsString| -> PathBuf {
            let s = v.to_string_lossy();
            match s.strip_prefix("~/") {
                Some(rest) => home.join(rest),
                None if s == "~" => home.clone(),
                None => PathBuf::from(v),
            }
        };
        let hf_home = get("HF_HOME").map(&expand).unwrap_or_else(|| {
            get("XDG_CACHE_HOME")
                .map(&expand)
                .unwrap_or_else(|| home.join(".cache"))
                .join("huggingface")
        });
        let cache_dir = get("HF_HUB_CACHE")
            .or_else(|| get("HUGGINGFACE_HUB_CACHE"))
            .map(&expand)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token_path = get("HF_TOKEN_PATH")
            .map(&expand)
            .unwrap_or_else(|| hf_home.join("token"));
        let clean = |t: String| {
            let t = t.trim().to_string();
            (!t.is_empty()).then_some(t)
        };
        let token = get("HF_TOKEN")
            .or_else(|| get("HUGGING_FACE_HUB_TOKEN"))
            .and_then(|t| clean(t.to_string_lossy().into_owned()))
            .or_else(|| std::fs::read_to_string(&token_path).ok().and_then(clean));
        let truthy = |k: &str| {
            get(k).is_some_and(|v| {
                matches!(
                    v.to_string_lossy().trim().to_ascii_uppercase().as_str(),
                    "1" | "ON" | "YES" | "TRUE"
                )
            })
        };
        let endpoint = get("HF_ENDPOINT")
            .map(|e| e.to_string_lossy().trim_end_matches('/').to_string())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        HubOptions {
            endpoint,
            token,
            token_path,
            cache_dir,
            offline: truthy("HF_HUB_OFFLINE") || truthy("TRANSFORMERS_OFFLINE"),
            retries: 5,
            retry_delay: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            env_proxy: true,
        }
    }

    /// Options for `endpoint` and `cache_dir` with nothing read from the
    /// environment: no token, online, no proxy, short timeouts, one retry
    /// without a pause (what the tests use).
    pub fn isolated(endpoint: &str, cache_dir: impl Into<PathBuf>) -> Self {
        let cache_dir = cache_dir.into();
        HubOptions {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token: None,
            token_path: cache_dir.join("token"),
            cache_dir,
            offline: false,
            retries: 1,
            retry_delay: Duration::ZERO,
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(10),
            env_proxy: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn opts(vars: &[(&str, &str)]) -> HubOptions {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        HubOptions::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_follow_huggingface_hub() {
        let o = opts(&[("HOME", "/h")]);
        assert_eq!(o.endpoint, "https://huggingface.co");
        assert_eq!(o.cache_dir, PathBuf::from("/h/.cache/huggingface/hub"));
        assert_eq!(o.token_path, PathBuf::from("/h/.cache/huggingface/token"));
        assert!(!o.offline);
        assert_eq!(o.token, None);
    }

    #[test]
    fn variables_take_precedence_in_order() {
        let o = opts(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(o.cache_dir, PathBuf::from("/x/huggingface/hub"));
        let o = opts(&[
            ("HOME", "/h"),
            ("XDG_CACHE_HOME", "/x"),
            ("HF_HOME", "~/hf"),
        ]);
        assert_eq!(o.cache_dir, PathBuf::from("/h/hf/hub"));
        assert_eq!(o.token_path, PathBuf::from("/h/hf/token"));
        let o = opts(&[("HF_HOME", "/hf"), ("HUGGINGFACE_HUB_CACHE", "/legacy")]);
        assert_eq!(o.cache_dir, PathBuf::from("/legacy"));
        let o = opts(&[
            ("HUGGINGFACE_HUB_CACHE", "/legacy"),
            ("HF_HUB_CACHE", "/new"),
        ]);
        assert_eq!(o.cache_dir, PathBuf::from("/new"));
        let o = opts(&[
            ("HF_ENDPOINT", "http://mirror:8080/"),
            ("HF_HUB_OFFLINE", "yes"),
        ]);
        assert_eq!(o.endpoint, "http://mirror:8080");
        assert!(o.offline);
        assert!(opts(&[("TRANSFORMERS_OFFLINE", "1")]).offline);
        assert!(!opts(&[("HF_HUB_OFFLINE", "0")]).offline);
    }

    #[test]
    fn token_from_env_then_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "hf_file\n").unwrap();
        let home = dir.path().to_string_lossy().into_owned();
        let o = opts(&[("HF_HOME", &home)]);
        assert_eq!(o.token.as_deref(), Some("hf_file"));
        let o = opts(&[("HF_HOME", &home), ("HUGGING_FACE_HUB_TOKEN", "hf_old")]);
        assert_eq!(o.token.as_deref(), Some("hf_old"));
        let o = opts(&[
            ("HF_HOME", &home),
            ("HUGGING_FACE_HUB_TOKEN", "x"),
            ("HF_TOKEN", " hf_env "),
        ]);
        assert_eq!(o.token.as_deref(), Some("hf_env"));
    }
}
