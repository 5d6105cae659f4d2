//! Hugging Face model directories: `config.json` plus `model.safetensors` or a
//! sharded `model.safetensors.index.json`.

use crate::config::flatten_config;
use crate::safetensors::{base_metadata, SafetensorsSource};
use crate::{Error, Result};
use anedvd_base::WeightSource;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// File name of the single-file checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";
/// File name of the shard index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Opens the Hugging Face model directory `dir`.
pub fn open_dir(dir: &Path) -> Result<SafetensorsSource> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        return Err(Error::MissingConfig {
            dir: dir.to_path_buf(),
        });
    }
    let config = read_json(&config_path)?;
    let Value::Object(config) = config else {
        return Err(Error::BadConfig {
            path: config_path,
            reason: "top level is not a JSON object".into(),
        });
    };
    let mut metadata = base_metadata();
    flatten_config(&config, &mut metadata);

    let index_path = dir.join(INDEX_FILE);
    let single = dir.join(SINGLE_FILE);
    if index_path.is_file() {
        open_sharded(dir, &index_path, metadata)
    } else if single.is_file() {
        SafetensorsSource::open_files(&[single], metadata)
    } else {
        Err(Error::NoWeights {
            dir: dir.to_path_buf(),
        })
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| Error::BadConfig {
        path: path.to_path_buf(),
        reason: format!("invalid JSON: {e}"),
    })
}

fn open_sharded(
    dir: &Path,
    index_path: &Path,
    metadata: anedvd_base::Metadata,
) -> Result<SafetensorsSource> {
    let bad = |reason: String| Error::BadIndex {
        path: index_path.to_path_buf(),
        reason,
    };
    let index = read_json(index_path).map_err(|e| match e {
        Error::BadConfig { reason, .. } => bad(reason),
        other => other,
    })?;
    let Some(map) = index.get("weight_map").and_then(Value::as_object) else {
        return Err(bad("no `weight_map` object".into()));
    };
    let mut entries = Vec::with_capacity(map.len());
    for (tensor, file) in map {
        let Some(file) = file.as_str() else {
            return Err(bad(format!("shard of `{tensor}` is not a string")));
        };
        // Shards must be plain names inside the directory.
        let rel = Path::new(file);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(bad(format!(
                "shard path `{file}` leaves the model directory"
            )));
        }
        entries.push((tensor.as_str(), dir.join(rel)));
    }
    let shards: Vec<PathBuf> = entries
        .iter()
        .map(|(_, p)| p.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if shards.is_empty() {
        return Err(bad("`weight_map` is empty".into()));
    }
    for shard in &shards {
        if !shard.is_file() {
            return Err(Error::MissingShard {
                shard: shard.clone(),
                index: index_path.to_path_buf(),
            });
        }
    }
    let source = SafetensorsSource::open_files(&shards, metadata)?;
    for (tensor, shard) in &entries {
        if source.shard_of(tensor) != Some(shard.as_path()) || source.tensor(tensor).is_none() {
            return Err(Error::TensorNotInShard {
                tensor: tensor.to_string(),
                shard: shard.clone(),
            });
        }
    }
    Ok(source)
}
