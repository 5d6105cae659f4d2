//! The on-disk copy of a program the ANE compiler reads: `<base>/<hex>/model.mil` + weight files.

use std::path::{Component, Path, PathBuf};

use super::driver::ProgramSource;
use super::error::{Error, Result};

/// The prefix every weight key starts with.
pub const MODEL_PATH_PREFIX: &str = "@model_path/";

/// Turns a weight key (`@model_path/weights/w.bin`) into a relative path
/// (`weights/w.bin`), rejecting anything that could escape the model
/// directory: a missing prefix, an empty path, `..`, `.`, absolute paths,
/// backslashes, NUL bytes (Espresso `ane_interop_sanitized_relative_weight_path`).
pub fn sanitize_weight_key(key: &str) -> Result<PathBuf> {
    let bad = |reason: &str| Error::WeightKey {
        key: key.to_string(),
        reason: reason.to_string(),
    };
    let rel = key
        .strip_prefix(MODEL_PATH_PREFIX)
        .ok_or_else(|| bad("does not start with `@model_path/`"))?;
    if rel.is_empty() {
        return Err(bad("empty path"));
    }
    if rel.contains('\0') || rel.contains('\\') {
        return Err(bad("NUL or backslash in path"));
    }
    if rel.starts_with('/') {
        return Err(bad("absolute path"));
    }
    let mut out = PathBuf::new();
    for part in rel.split('/') {
        match part {
            "" => return Err(bad("empty path component")),
            "." | ".." => return Err(bad("`.`/`..` path component")),
            p => out.push(p),
        }
    }
    if out.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(bad("not a plain relative path"));
    }
    Ok(out)
}

/// Checks every weight key of `src` (see [`sanitize_weight_key`]).
pub fn check_weight_keys(src: &ProgramSource) -> Result<()> {
    for k in src.weights.keys() {
        sanitize_weight_key(k)?;
    }
    Ok(())
}

/// Writes `model.mil` and every weight file of `src` (each at its sanitized
/// key, `@model_path/weights/w.bin` → `dir/weights/w.bin`) into `dir`,
/// creating it and `weights/`. Every key is checked before anything is
/// written. This is what the drivers hand the ANE compiler, and what
/// `anedvd kernels --emit` writes, byte for byte.
pub fn write_program_files(dir: &Path, src: &ProgramSource) -> Result<()> {
    let rels: Vec<(PathBuf, &Vec<u8>)> = src
        .weights
        .iter()
        .map(|(k, v)| sanitize_weight_key(k).map(|p| (p, v)))
        .collect::<Result<_>>()?;
    let weights = dir.join("weights");
    std::fs::create_dir_all(&weights).map_err(io(&weights))?;
    let mil = dir.join("model.mil");
    std::fs::write(&mil, src.mil.as_bytes()).map_err(io(&mil))?;
    for (rel, bytes) in rels {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&p, bytes).map_err(io(&p))?;
    }
    Ok(())
}

/// A written model directory; removed by [`ModelDir::remove`] (not on drop,
/// so a failed run can be inspected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDir {
    /// `<base>/<hex>`.
    pub path: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl ModelDir {
    /// Writes `model.mil` and every weight file of `src` under `base/hex/`
    /// (creating `weights/`). `hex` must be one plain path component
    /// (ASCII letters, digits, `_`, `-`).
    pub fn write(base: &Path, hex: &str, src: &ProgramSource) -> Result<ModelDir> {
        let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        if hex.is_empty() || hex.len() > 255 || !hex.bytes().all(plain) {
            return Err(Error::driver(
                super::error::Op::Compile,
                format!("unexpected hexStringIdentifier `{hex}`"),
            ));
        }
        let dir = base.join(hex);
        write_program_files(&dir, src)?;
        Ok(ModelDir { path: dir })
    }

    /// Deletes the directory and everything in it.
    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&self.path)(e)),
        }
    }
}
