//! Arbitrary bytes as an HF `config.json`, flattened the way
//! `anedvd_weights::open_dir` does and resolved into a `DecoderConfig` by
//! `anedvd_model::resolve_config` (family detection and every hyperparameter
//! check; no program build).
//!
//! The source is an in-memory `WeightSource` holding only what resolution
//! reads: the token embedding, whose name and expected width are learnt from
//! the resolver's own errors (first `MissingTensor`, then the shape error),
//! with `1 + len % 7` rows. A config that sets `general.architecture` is
//! presented as a GGUF source (GGUF key naming) instead. Each input is
//! resolved as detected and once more with a forced family
//! (`--family`, picked by input length).
//!
//! Asserts: no panic, no allocation past `-rss_limit_mb`, and for an
//! accepted config the invariants `DecoderConfig` documents: positive
//! counts under the caps, one entry per layer in every per-layer vector,
//! convolution layers have no K/V heads (and a kernel), MoE layers only with
//! a MoE config (`1 <= used <= experts`), `n_ff == n_ff_layers[0]`, even
//! rotary dims within the head dim, K/V shared only from an earlier
//! own-cache layer of the same type, sliding layers only with a window, and
//! `n_vocab` equal to the embedding rows.
#![no_main]

use anedvd_base::{GgmlType, Metadata, TensorInfo, TensorRef, WeightSource};
use anedvd_model::{resolve_config, ConfigOverrides, DecoderConfig, Error};
use libfuzzer_sys::fuzz_target;

const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 4096;

struct Src {
    md: Metadata,
    gguf: bool,
    tensors: Vec<TensorInfo>,
    data: Vec<u8>,
}

impl WeightSource for Src {
    fn metadata(&self) -> &Metadata {
        &self.md
    }
    fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        let info = self.tensors.iter().find(|t| t.name == name)?;
        Some(TensorRef {
            info,
            data: &self.data[..info.size_bytes as usize],
        })
    }
    fn format_name(&self) -> &'static str {
        if self.gguf {
            "gguf"
        } else {
            "safetensors"
        }
    }
}

impl Src {
    fn set_embedding(&mut self, name: &str, shape: [u64; 2]) {
        let size = GgmlType::I8.tensor_bytes(&shape).unwrap();
        self.data.resize(size as usize, 0);
        self.tensors = vec![TensorInfo {
            name: name.to_string(),
            dtype: GgmlType::I8,
            shape: shape.to_vec(),
            size_bytes: size,
        }];
    }
}

fn resolve(src: &mut Src, rows: u64, ov: &ConfigOverrides) {
    src.tensors.clear();
    let mut res = resolve_config(src, ov);
    // Learn the embedding's name, then its width, from the resolver.
    for _ in 0..2 {
        match &res {
            Err(Error::MissingTensor(name)) => {
                let name = name.clone();
                src.set_embedding(&name, [1, rows]);
            }
            Err(Error::Program(anedvd_graph::Error::Shape { expected, .. })) => {
                let Some(name) = src.tensors.first().map(|t| t.name.clone()) else {
                    return;
                };
                let width = expected.first().copied().unwrap_or(0);
                if width == 0 || width > MAX_DIM as u64 {
                    return;
                }
                src.set_embedding(&name, [width, rows]);
            }
            _ => break,
        }
        res = resolve_config(src, ov);
    }
    if let Ok(cfg) = res {
        check(&cfg, rows as usize);
    }
}

fn check(c: &DecoderConfig, rows: usize) {
    let n = c.n_layer;
    assert!((1..=MAX_LAYERS).contains(&n), "n_layer {n}");
    for (what, v) in [
        ("n_embd", c.n_embd),
        ("n_head", c.n_head),
        ("n_head_kv", c.n_head_kv),
    ] {
        assert!((1..=MAX_DIM).contains(&v), "{what} = {v}");
    }
    assert!(c.head_dim <= MAX_DIM && c.n_ff <= MAX_DIM);
    for (what, len) in [
        ("n_head_kv_layers", c.n_head_kv_layers.len()),
        ("conv_layers", c.conv_layers.len()),
        ("moe_layers", c.moe_layers.len()),
        ("head_dim_layers", c.head_dim_layers.len()),
        ("n_ff_layers", c.n_ff_layers.len()),
        ("kv_sources", c.kv_sources.len()),
        ("sliding_layers", c.sliding_layers.len()),
        ("local_layers", c.local_layers.len()),
        ("rope_layers", c.rope_layers.len()),
    ] {
        assert_eq!(len, n, "{what} has {len} entries for {n} layers");
    }
    for i in 0..n {
        assert_eq!(c.conv_layers[i], c.n_head_kv_layers[i] == 0, "layer {i} conv/heads");
        assert!(c.n_head_kv_layers[i] <= MAX_DIM);
        assert!(c.head_dim_layers[i] <= MAX_DIM && c.n_ff_layers[i] <= MAX_DIM);
        if let Some(src) = c.kv_sources[i] {
            assert!(src < i, "layer {i} reads K/V of later layer {src}");
            assert!(c.kv_sources[src].is_none(), "K/V source {src} has no cache of its own");
            assert_eq!(c.local_layers[src], c.local_layers[i], "K/V source of another type");
        }
    }
    if let Some(i) = c.conv_layers.iter().position(|x| !x) {
        assert_eq!(c.n_head_kv, c.n_head_kv_layers[i]);
    }
    assert_eq!(c.conv_kernel.is_some(), c.conv_layers.contains(&true));
    if let Some(k) = c.conv_kernel {
        assert!((1..=anedvd_model::MAX_CONV_KERNEL).contains(&k));
    }
    if c.moe_layers.contains(&true) {
        assert!(c.moe.is_some());
    }
    if let Some(m) = &c.moe {
        assert!(1 <= m.n_expert_used && m.n_expert_used <= m.n_expert && m.n_expert <= 4096);
        assert!(m.n_ff_expert > 0 && m.n_ff_expert <= MAX_DIM);
    }
    assert_eq!(c.n_ff, c.n_ff_layers[0]);
    if let Some(i) = c.local_layers.iter().position(|x| !x) {
        assert_eq!(c.head_dim, c.head_dim_layers[i]);
    }
    assert!(c.rope.n_rot % 2 == 0 && c.rope.n_rot <= c.head_dim, "n_rot {}", c.rope.n_rot);
    if let Some(r) = c.rope.n_rot_local {
        let hd = c
            .local_layers
            .iter()
            .position(|x| *x)
            .map_or(c.head_dim, |i| c.head_dim_layers[i]);
        assert!(r % 2 == 0 && r <= hd, "n_rot_local {r} head dim {hd}");
    }
    if c.sliding_layers.contains(&true) {
        assert!(c.sliding_window.is_some_and(|w| w > 0));
    }
    if let Some(w) = c.per_layer_input {
        assert!(w > 0 && w <= MAX_DIM);
    }
    assert_eq!(c.n_vocab, rows);
}

fuzz_target!(|data: &[u8]| {
    let Ok(serde_json::Value::Object(obj)) = serde_json::from_slice(data) else {
        return;
    };
    let gguf = obj.contains_key("general.architecture");
    let mut md = if gguf {
        Metadata::new()
    } else {
        anedvd_weights::base_metadata()
    };
    anedvd_weights::flatten_config(&obj, &mut md);
    let rows = 1 + (data.len() % 7) as u64;
    let mut src = Src {
        md,
        gguf,
        tensors: Vec::new(),
        data: Vec::new(),
    };
    resolve(&mut src, rows, &ConfigOverrides::default());
    let families = anedvd_model::family::all();
    let forced = ConfigOverrides {
        family: Some(families[data.len() % families.len()].name.to_string()),
        ..Default::default()
    };
    resolve(&mut src, rows, &forced);
});
