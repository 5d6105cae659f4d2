//! Dumps of named intermediates (see [`crate::intermediate`]): one `{name}.npy`
//! (f32, little-endian, C order) per name plus an `index.json` listing names,
//! shapes and files in first-write order.
//!
//! Rows of the same name from successive chunks are appended, so a
//! dump covers a whole forward call however a backend splits it.

use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// An open dump directory: rows per name accumulated in memory, written by [`Dump::finish`].
pub struct Dump {
    dir: PathBuf,
    /// name, data, columns — in first-write order.
    entries: Vec<(String, Vec<f32>, usize)>,
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Dump {
    /// Creates `dir` if needed.
    pub fn new(dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        Ok(Dump {
            dir,
            entries: Vec::new(),
        })
    }

    /// Appends `rows` rows (`data.len() / rows` columns) to `name`.
    pub fn put(&mut self, name: &str, data: &[f32], rows: usize) {
        let cols = data.len().checked_div(rows).unwrap_or(0);
        match self
            .entries
            .iter_mut()
            .find(|(n, _, c)| n == name && *c == cols)
        {
            Some((_, d, _)) => d.extend_from_slice(&data[..rows * cols]),
            None => self
                .entries
                .push((name.to_string(), data[..rows * cols].to_vec(), cols)),
        }
    }

    /// Records `data` under `blk.{layer}.{name}` (or `name` when `layer` is
    /// `None`) if a dump is active; does nothing otherwise. Inlined: the
    /// decoders call it a dozen times per layer, nearly always with `None`.
    #[inline]
    pub fn put_opt(
        dump: &mut Option<Dump>,
        layer: Option<usize>,
        name: &str,
        data: &[f32],
        rows: usize,
    ) {
        if let Some(d) = dump.as_mut() {
            match layer {
                Some(i) => d.put(&crate::intermediate::layer_name(i, name), data, rows),
                None => d.put(name, data, rows),
            }
        }
    }

    /// Writes every `.npy` file and `index.json`.
    pub fn finish(self) -> Result<()> {
        let mut items = Vec::new();
        for (name, data, cols) in &self.entries {
            let rows = data.len().checked_div(*cols).unwrap_or(0);
            let path = self.dir.join(format!("{name}.npy"));
            let mut header =
                format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
            let total = 10 + header.len() + 1;
            header.push_str(&" ".repeat((64 - total % 64) % 64));
            header.push('\n');
            let mut buf = Vec::with_capacity(10 + header.len() + data.len() * 4);
            buf.extend_from_slice(b"\x93NUMPY\x01\x00");
            buf.extend_from_slice(&(header.len() as u16).to_le_bytes());
            buf.extend_from_slice(header.as_bytes());
            for v in data {
                buf.extend_from_slice(&v.to_le_bytes());
            }
            std::fs::write(&path, buf).map_err(|e| io(&path, e))?;
            items.push(format!(
                "  {{\"name\": \"{name}\", \"shape\": [{rows}, {cols}], \"file\": \"{name}.npy\"}}"
            ));
        }
        let path = self.dir.join("index.json");
        std::fs::write(&path, format!("[\n{}\n]\n", items.join(",\n"))).map_err(|e| io(&path, e))
    }
}
