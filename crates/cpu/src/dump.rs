//! Writes named intermediates as `.npy` (f32, little-endian, C order) plus an
//! `index.json` listing names and shapes.

use anedvd_graph::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// An open dump directory for one forward call.
pub struct Dump {
    dir: PathBuf,
    entries: Vec<(String, [usize; 2])>,
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
        Ok(Self {
            dir,
            entries: Vec::new(),
        })
    }

    /// Writes `data` (`rows × cols`) as `{name}.npy`.
    pub fn write(&mut self, name: &str, data: &[f32], rows: usize, cols: usize) -> Result<()> {
        let path = self.dir.join(format!("{name}.npy"));
        let mut header =
            format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
        // Magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
        let total = 10 + header.len() + 1;
        header.push_str(&" ".repeat((64 - total % 64) % 64));
        header.push('\n');
        let mut buf = Vec::with_capacity(10 + header.len() + data.len() * 4);
        buf.extend_from_slice(b"\x93NUMPY\x01\x00");
        buf.extend_from_slice(&(header.len() as u16).to_le_bytes());
        buf.extend_from_slice(header.as_bytes());
        for v in &data[..rows * cols] {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        std::fs::write(&path, buf).map_err(|e| io(&path, e))?;
        self.entries.push((name.to_string(), [rows, cols]));
        Ok(())
    }

    /// Writes `index.json`: `[{"name": ..., "shape": [r, c], "file": ...}, ...]` in compute order.
    pub fn finish(self) -> Result<()> {
        let path = self.dir.join("index.json");
        let mut f = std::fs::File::create(&path).map_err(|e| io(&path, e))?;
        let items: Vec<String> = self
            .entries
            .iter()
            .map(|(n, [r, c])| {
                format!("  {{\"name\": \"{n}\", \"shape\": [{r}, {c}], \"file\": \"{n}.npy\"}}")
            })
            .collect();
        writeln!(f, "[\n{}\n]", items.join(",\n")).map_err(|e| io(&path, e))
    }
}
