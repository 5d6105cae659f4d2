//! Which files of a repo to fetch: an exact file, a GGUF quant tag (as
//! llama.cpp's `-hf repo:quant`), a repo's default model, or globs.

use crate::error::{Error, Result};

/// The quant tag picked in a GGUF repo when none is given.
pub const DEFAULT_QUANT: &str = "Q4_K_M";

/// The files of a Hugging Face (safetensors) model directory that the
/// engine reads, besides the weights, when present in the repo.
pub const HF_SIDE_FILES: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
];
/// The single-file safetensors checkpoint.
pub const SAFETENSORS_SINGLE: &str = "model.safetensors";
/// The shard index of a sharded safetensors checkpoint.
pub const SAFETENSORS_INDEX: &str = "model.safetensors.index.json";

/// What to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Repo file names, in download order.
    pub files: Vec<String>,
    /// The file the model path points at (a GGUF, or the first part of a
    /// split set); `None`: the snapshot folder is the model path.
    pub primary: Option<String>,
    /// The safetensors index to read for the shard names (HF-format repos).
    pub index: Option<String>,
    /// Things worth telling the user.
    pub notes: Vec<String>,
}

impl Plan {
    fn add(&mut self, name: &str) {
        if !self.files.iter().any(|f| f == name) {
            self.files.push(name.to_string());
        }
    }
}

/// The plan for `repo` whose files are `names`, given the `:selector` and
/// the `--include` globs.
pub fn plan(
    repo: &str,
    names: &[String],
    selector: Option<&str>,
    include: &[String],
) -> Result<Plan> {
    let fail = |reason: String| Error::Selection {
        repo: repo.to_string(),
        reason,
    };
    let mut p = Plan::default();
    match selector {
        Some(sel) => {
            if names.iter().any(|n| n == sel) {
                match split_part(sel) {
                    Some(split) => {
                        let set = split_set(names, &split);
                        check_complete(repo, &split, &set)?;
                        for f in &set {
                            p.add(f);
                        }
                        p.primary = set.first().cloned();
                    }
                    None => {
                        p.add(sel);
                        p.primary = Some(sel.to_string());
                    }
                }
            } else {
                let ggufs = model_ggufs(names);
                if ggufs.is_empty() {
                    return Err(fail(format!(
                        "no file `{sel}` and no GGUF files to match it as a quant tag; files: {}",
                        list(names)
                    )));
                }
                let set = by_quant(repo, &ggufs, sel)?.ok_or_else(|| {
                    fail(format!(
                        "no file `{sel}` and no GGUF whose name has the quant tag `{sel}`; \
                         GGUF files: {}",
                        list(&ggufs)
                    ))
                })?;
                for f in &set {
                    p.add(f);
                }
                p.primary = set.first().cloned();
            }
        }
        None if !include.is_empty() => {}
        None => default_plan(repo, names, &mut p)?,
    }
    let before = p.files.len();
    for n in names {
        if include.iter().any(|g| glob_match(g, n)) {
            p.add(n);
        }
    }
    if !include.is_empty() && p.files.len() == before && selector.is_none() {
        return Err(fail(format!(
            "no file matches --include {}; files: {}",
            include.join(" --include "),
            list(names)
        )));
    }
    if let Some(primary) = &p.primary {
        if let Some(split) = split_part(primary) {
            p.notes.push(format!(
                "{primary} is part 1 of a {}-part split GGUF; all parts were fetched",
                split.total
            ));
        }
    }
    Ok(p)
}

/// Bare `ORG/REPO`: a GGUF repo's Q4_K_M (or its only model), else the
/// files of a Hugging Face safetensors directory.
fn default_plan(repo: &str, names: &[String], p: &mut Plan) -> Result<()> {
    let ggufs = model_ggufs(names);
    let has_config = names.iter().any(|n| n == "config.json");
    let has_st = names
        .iter()
        .any(|n| n == SAFETENSORS_SINGLE || n == SAFETENSORS_INDEX);
    let hf_model = has_config && has_st;
    if !ggufs.is_empty() && !hf_model {
        if let Some(set) = by_quant(repo, &ggufs, DEFAULT_QUANT)? {
            p.notes.push(format!(
                "picked {} (the default quant {DEFAULT_QUANT}; name another with ORG/REPO:QUANT)",
                set.first().map(String::as_str).unwrap_or_default()
            ));
            for f in &set {
                p.add(f);
            }
            p.primary = set.first().cloned();
            return Ok(());
        }
        let models = models_of(&ggufs);
        if models.len() == 1 {
            let set = &models[0];
            for f in set {
                p.add(f);
            }
            p.primary = set.first().cloned();
            return Ok(());
        }
        return Err(Error::Selection {
            repo: repo.to_string(),
            reason: format!(
                "no {DEFAULT_QUANT} GGUF here; choose one with {repo}:QUANT or {repo}:FILE \
                 from: {}",
                list(
                    &models
                        .iter()
                        .filter_map(|s| s.first().cloned())
                        .collect::<Vec<_>>()
                )
            ),
        });
    }
    if !has_config {
        return Err(Error::Selection {
            repo: repo.to_string(),
            reason: format!(
                "neither GGUF files nor a Hugging Face model (config.json + \
                 model.safetensors[.index.json]); files: {}",
                list(names)
            ),
        });
    }
    for side in HF_SIDE_FILES {
        if names.iter().any(|n| n == side) {
            p.add(side);
        }
    }
    if names.iter().any(|n| n == SAFETENSORS_INDEX) {
        p.add(SAFETENSORS_INDEX);
        p.index = Some(SAFETENSORS_INDEX.to_string());
    } else if names.iter().any(|n| n == SAFETENSORS_SINGLE) {
        p.add(SAFETENSORS_SINGLE);
    } else {
        return Err(Error::Selection {
            repo: repo.to_string(),
            reason: format!(
                "config.json but no model.safetensors or model.safetensors.index.json \
                 (only safetensors weights are read); files: {}",
                list(names)
            ),
        });
    }
    if !names.iter().any(|n| n == "tokenizer.json") {
        p.notes.push(format!(
            "{repo} has no tokenizer.json; the engine needs one to load the model"
        ));
    }
    Ok(())
}

/// The shard names of a `model.safetensors.index.json`, in first-use order,
/// relative to the index's folder.
pub fn shards_of_index(text: &str) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    let map = v
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
        .ok_or("no `weight_map` object")?;
    let mut out: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| format!("shard of `{tensor}` is not a string"))?;
        crate::spec::validate_file_name(file)?;
        if !out.iter().any(|f| f == file) {
            out.push(file.to_string());
        }
    }
    Ok(out)
}

/// The GGUF files that are models (not multimodal projectors), sorted.
fn model_ggufs(names: &[String]) -> Vec<String> {
    let mut v: Vec<String> = names
        .iter()
        .filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
        .filter(|n| !base_name(n).to_ascii_lowercase().contains("mmproj"))
        .cloned()
        .collect();
    v.sort();
    v
}

/// The files named with quant `tag`, as one model: a single file, or a
/// whole split set. Several candidates: single files beat split sets; more
/// than one left is an error naming them.
fn by_quant(repo: &str, ggufs: &[String], tag: &str) -> Result<Option<Vec<String>>> {
    let matching: Vec<String> = ggufs.iter().filter(|n| has_tag(n, tag)).cloned().collect();
    if matching.is_empty() {
        return Ok(None);
    }
    let models = models_of(&matching);
    let singles: Vec<&Vec<String>> = models
        .iter()
        .filter(|m| m.len() == 1 && split_part(&m[0]).is_none())
        .collect();
    let chosen: Vec<&Vec<String>> = if singles.is_empty() {
        models.iter().collect()
    } else {
        singles
    };
    match chosen.as_slice() {
        [one] => {
            if let Some(split) = split_part(&one[0]) {
                check_complete(repo, &split, one)?;
            }
            Ok(Some((*one).clone()))
        }
        many => Err(Error::Selection {
            repo: repo.to_string(),
            reason: format!(
                "{} GGUF models match the quant tag `{tag}`: {}; name one with {repo}:FILE",
                many.len(),
                list(
                    &many
                        .iter()
                        .filter_map(|m| m.first().cloned())
                        .collect::<Vec<_>>()
                )
            ),
        }),
    }
}

/// Groups GGUF names into models: each split set is one model (its parts
/// in order), each other file is one.
fn models_of(ggufs: &[String]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for n in ggufs {
        match split_part(n) {
            Some(s) => {
                if out.iter().any(|m| m.iter().any(|f| f == n)) {
                    continue;
                }
                out.push(split_set(ggufs, &s));
            }
            None => out.push(vec![n.clone()]),
        }
    }
    out
}

/// `NAME-00001-of-00003.gguf`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SplitPart {
    /// Everything before `-00001-of-`.
    stem: String,
    index: u32,
    total: u32,
    digits: usize,
}

fn split_part(name: &str) -> Option<SplitPart> {
    let lower = name.to_ascii_lowercase();
    let body = lower.strip_suffix(".gguf")?;
    let (head, total) = body.rsplit_once("-of-")?;
    let (stem, index) = head.rsplit_once('-')?;
    let digits = index.len();
    if digits < 3
        || total.len() != digits
        || !index.bytes().all(|b| b.is_ascii_digit())
        || !total.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some(SplitPart {
        stem: name[..stem.len()].to_string(),
        index: index.parse().ok()?,
        total: total.parse().ok()?,
        digits,
    })
}

/// The parts of `split`'s set present in `names`, in order.
fn split_set(names: &[String], split: &SplitPart) -> Vec<String> {
    let mut parts: Vec<(u32, String)> = names
        .iter()
        .filter_map(|n| {
            let s = split_part(n)?;
            (s.stem == split.stem && s.total == split.total && s.digits == split.digits)
                .then(|| (s.index, n.clone()))
        })
        .collect();
    parts.sort();
    parts.into_iter().map(|(_, n)| n).collect()
}

fn check_complete(repo: &str, split: &SplitPart, set: &[String]) -> Result<()> {
    let have: Vec<u32> = set
        .iter()
        .filter_map(|n| split_part(n))
        .map(|s| s.index)
        .collect();
    let missing: Vec<String> = (1..=split.total)
        .filter(|i| !have.contains(i))
        .map(|i| format!("{i:0w$}", w = split.digits))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Selection {
            repo: repo.to_string(),
            reason: format!(
                "the split GGUF {}-*-of-{:0w$}.gguf lacks part(s) {}",
                split.stem,
                split.total,
                missing.join(", "),
                w = split.digits
            ),
        })
    }
}

fn base_name(n: &str) -> &str {
    n.rsplit('/').next().unwrap_or(n)
}

/// Whether `name` carries the quant `tag`, case-insensitively, as a whole
/// token: not preceded by a letter or digit, not followed by a letter,
/// digit or `_` (so `Q4_K` does not match `Q4_K_M`, nor `Q4_0` `IQ4_0`).
pub fn has_tag(name: &str, tag: &str) -> bool {
    let hay = name.to_ascii_lowercase();
    let tag = tag.to_ascii_lowercase();
    if tag.is_empty() {
        return false;
    }
    let bytes = hay.as_bytes();
    let mut from = 0;
    while let Some(pos) = hay[from..].find(&tag) {
        let start = from + pos;
        let end = start + tag.len();
        let before_ok = start == 0 || !bytes[start - 1].is_ascii_alphanumeric();
        let after_ok =
            end == bytes.len() || !(bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_');
        if before_ok && after_ok {
            return true;
        }
        from = start + 1;
    }
    false
}

/// `fnmatch`-style matching as `huggingface_hub`'s `allow_patterns`: `*`
/// any run of characters (including `/`), `?` one character, `[abc]`,
/// `[a-z]` and `[!abc]` one of (or none of) a set.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matcher with backtracking to the last `*`.
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class(&p, pi, n[ni]) {
                        if matched {
                            pi = next;
                            ni += 1;
                            continue;
                        }
                    } else if n[ni] == '[' {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A `[...]` class at `p[at]`: whether `c` is in it and the index after it;
/// `None` when the class is not closed (then `[` is literal).
fn class(p: &[char], at: usize, c: char) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = matches!(p.get(i), Some('!'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            if p[i] <= c && c <= p[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if p[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    None
}

fn list(names: &[String]) -> String {
    const MAX: usize = 40;
    if names.is_empty() {
        return "(none)".into();
    }
    let mut s = names
        .iter()
        .take(MAX)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX {
        s.push_str(&format!(", ... ({} more)", names.len() - MAX));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn quant_tags_match_whole_tokens() {
        assert!(has_tag("Qwen3-0.6B-Q4_K_M.gguf", "q4_k_m"));
        assert!(has_tag("qwen3-0.6b.q4_k_m.gguf", "Q4_K_M"));
        assert!(has_tag("model_Q8_0.gguf", "Q8_0"));
        assert!(has_tag("BF16/Model-BF16-00001-of-00002.gguf", "bf16"));
        assert!(!has_tag("Model-Q4_K_M.gguf", "Q4_K"));
        assert!(!has_tag("Model-IQ4_XS.gguf", "Q4_XS"));
        assert!(!has_tag("Model-UD-Q4_K_XL.gguf", "Q4_K_M"));
        assert!(has_tag("Model-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"));
    }

    #[test]
    fn picks_by_quant_preferring_single_files() {
        let files = names(&[
            "README.md",
            "m-Q4_K_M.gguf",
            "m-Q8_0.gguf",
            "m-Q8_0-00001-of-00002.gguf",
            "m-Q8_0-00002-of-00002.gguf",
            "mmproj-m-Q8_0.gguf",
        ]);
        let p = plan("o/r", &files, Some("q8_0"), &[]).unwrap();
        assert_eq!(p.files, vec!["m-Q8_0.gguf"]);
        assert_eq!(p.primary.as_deref(), Some("m-Q8_0.gguf"));
        let p = plan("o/r", &files, None, &[]).unwrap();
        assert_eq!(p.files, vec!["m-Q4_K_M.gguf"]);
        let p = plan("o/r", &files, Some("m-Q8_0-00002-of-00002.gguf"), &[]).unwrap();
        assert_eq!(
            p.files,
            vec!["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"]
        );
        assert_eq!(p.primary.as_deref(), Some("m-Q8_0-00001-of-00002.gguf"));
        let p = plan("o/r", &files, Some("README.md"), &[]).unwrap();
        assert_eq!(p.files, vec!["README.md"]);
    }

    #[test]
    fn whole_split_set_when_only_split_matches() {
        let files = names(&[
            "BF16/m-BF16-00002-of-00003.gguf",
            "BF16/m-BF16-00001-of-00003.gguf",
            "BF16/m-BF16-00003-of-00003.gguf",
            "m-Q2_K.gguf",
        ]);
        let p = plan("o/r", &files, Some("BF16"), &[]).unwrap();
        assert_eq!(
            p.files,
            vec![
                "BF16/m-BF16-00001-of-00003.gguf",
                "BF16/m-BF16-00002-of-00003.gguf",
                "BF16/m-BF16-00003-of-00003.gguf"
            ]
        );
        assert_eq!(p.notes.len(), 1);
        let broken = names(&["m-BF16-00001-of-00003.gguf", "m-BF16-00003-of-00003.gguf"]);
        let e = plan("o/r", &broken, Some("BF16"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("lacks part(s) 00002"), "{e}");
    }

    #[test]
    fn ambiguous_and_missing_tags_say_what_exists() {
        let files = names(&["a-Q4_K_M.gguf", "b-Q4_K_M.gguf", "a-Q6_K.gguf"]);
        let e = plan("o/r", &files, Some("Q4_K_M"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 GGUF models match") && e.contains("a-Q4_K_M.gguf, b-Q4_K_M.gguf"),
            "{e}"
        );
        let e = plan("o/r", &files, Some("Q5_K_M"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("a-Q6_K.gguf"), "{e}");
        let files = names(&["a-Q6_K.gguf", "a-Q8_0.gguf"]);
        let e = plan("o/r", &files, None, &[]).unwrap_err().to_string();
        assert!(
            e.contains("no Q4_K_M GGUF here") && e.contains("a-Q8_0.gguf"),
            "{e}"
        );
        let p = plan(
            "o/r",
            &names(&["only-Q8_0.gguf", "mmproj-F16.gguf"]),
            None,
            &[],
        )
        .unwrap();
        assert_eq!(p.files, vec!["only-Q8_0.gguf"]);
    }

    #[test]
    fn hf_format_takes_what_the_loader_reads() {
        let files = names(&[
            ".gitattributes",
            "README.md",
            "config.json",
            "generation_config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "consolidated.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "pytorch_model.bin",
        ]);
        let p = plan("o/r", &files, None, &[]).unwrap();
        assert_eq!(
            p.files,
            vec![
                "config.json",
                "tokenizer.json",
                "tokenizer_config.json",
                "generation_config.json",
                "model.safetensors.index.json"
            ]
        );
        assert_eq!(p.index.as_deref(), Some(SAFETENSORS_INDEX));
        assert_eq!(p.primary, None);
        let e = plan(
            "o/r",
            &names(&["config.json", "pytorch_model.bin"]),
            None,
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("only safetensors"), "{e}");
        let idx = r#"{"metadata":{},"weight_map":{"a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}"#;
        assert_eq!(
            shards_of_index(idx).unwrap(),
            vec![
                "model-00002-of-00002.safetensors",
                "model-00001-of-00002.safetensors"
            ]
        );
        assert!(shards_of_index(r#"{"weight_map":{"a":"../x"}}"#).is_err());
    }

    #[test]
    fn include_globs() {
        let files = names(&["a.gguf", "sub/b.gguf", "README.md", "config.json"]);
        let p = plan("o/r", &files, None, &["*.gguf".into()]).unwrap();
        assert_eq!(p.files, vec!["a.gguf", "sub/b.gguf"]);
        assert_eq!(p.primary, None);
        let p = plan("o/r", &files, Some("a.gguf"), &["*.md".into()]).unwrap();
        assert_eq!(p.files, vec!["a.gguf", "README.md"]);
        assert!(plan("o/r", &files, None, &["*.bin".into()]).is_err());
        assert!(glob_match(
            "model-0000[1-2]-of-*.safetensors",
            "model-00002-of-00003.safetensors"
        ));
        assert!(!glob_match("model-0000[!1-2]-of-*", "model-00002-of-00003"));
        assert!(glob_match("*Q4_K_M*", "x/y-Q4_K_M.gguf"));
        assert!(glob_match("?.md", "a.md"));
        assert!(!glob_match("?.md", "ab.md"));
        assert!(glob_match("[x", "[x"));
    }
}
