//! Gemma 4's per-layer metadata that must be refused with an error naming
//! the key (or the unsupported feature), on copies of the tiny fixture with
//! one value changed.
#![allow(clippy::unwrap_used)]

use anedvd_base::{MetadataValue as V, WeightSource};
use anedvd_graph::MemorySource;
use anedvd_model::{load, ConfigOverrides, Error};
use anedvd_testkit::fixtures::{self, Format};
use std::sync::Arc;

/// The fixture in `format`, copied into memory with `edit` applied to its
/// metadata.
fn edited(format: Format, edit: impl Fn(&mut anedvd_base::Metadata)) -> Arc<dyn WeightSource> {
    filtered(format, |_| true, edit)
}

/// [`edited`], keeping only the metadata keys `keep` accepts.
fn filtered(
    format: Format,
    keep: impl Fn(&str) -> bool,
    edit: impl Fn(&mut anedvd_base::Metadata),
) -> Arc<dyn WeightSource> {
    filtered_from("gemma4", format, keep, edit)
}

/// [`filtered`] of another Gemma 4 fixture.
fn filtered_from(
    fixture: &str,
    format: Format,
    keep: impl Fn(&str) -> bool,
    edit: impl Fn(&mut anedvd_base::Metadata),
) -> Arc<dyn WeightSource> {
    let src = anedvd_weights::open(fixtures::path(fixture, format))
        .unwrap()
        .source;
    let name = if format == Format::Hf {
        "safetensors"
    } else {
        "gguf"
    };
    let mut m = MemorySource::new(name);
    for (k, v) in src.metadata().iter().filter(|(k, _)| keep(k)) {
        m.metadata_mut().insert(k, v.clone());
    }
    for info in src.tensors() {
        let t = src.tensor(&info.name).unwrap();
        m.insert_raw(&info.name, info.dtype, &info.shape, t.data.to_vec());
    }
    edit(m.metadata_mut());
    Arc::new(m)
}

fn error(src: Arc<dyn WeightSource>) -> String {
    load(src, &ConfigOverrides::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

#[test]
fn the_unedited_copies_load() {
    for format in [Format::Hf, Format::GgufF32] {
        load(edited(format, |_| {}), &ConfigOverrides::default()).unwrap();
    }
}

#[test]
fn bad_per_layer_metadata_is_refused_by_key() {
    let gguf = |key: &str, v: V| {
        let key = key.to_string();
        error(edited(Format::GgufF32, move |m| {
            m.insert(key.clone(), v.clone())
        }))
    };
    let e = gguf(
        "gemma4.feed_forward_length",
        V::Array(vec![32i64, 32, 32, 32, 64].into()),
    );
    assert!(
        e.contains("gemma4.feed_forward_length") && e.contains("5 entries for 6 layers"),
        "{e}"
    );
    let e = gguf(
        "gemma4.attention.sliding_window_pattern",
        V::Array(vec![true, true, false].into()),
    );
    assert!(
        e.contains("sliding_window_pattern") && e.contains("3 entries"),
        "{e}"
    );
    let e = gguf("gemma4.attention.shared_kv_layers", V::U32(6));
    assert!(
        e.contains("`gemma4.attention.shared_kv_layers`: 6 exceeds the limit 5"),
        "{e}"
    );
    // the last two layers (sliding, full) share, but no earlier layer is full
    let e = gguf(
        "gemma4.attention.sliding_window_pattern",
        V::Array(vec![true, true, true, true, true, false].into()),
    );
    assert!(
        e.contains("gemma4.attention.shared_kv_layers")
            && e.contains("layer 5 shares K/V, but no earlier layer has its type (full)"),
        "{e}"
    );
    // the 26B-A4B expert block is not in the family's tables
    let e = error(edited(Format::GgufF32, |m| {
        m.insert("gemma4.expert_count", V::U32(4));
        m.insert("gemma4.expert_used_count", V::U32(2));
        m.insert("gemma4.expert_feed_forward_length", V::U32(32));
    }));
    assert!(e.contains("experts in a gemma4 model"), "{e}");
    let e = gguf("gemma4.embedding_length_per_layer_input", V::U32(1 << 21));
    assert!(
        e.contains("`gemma4.embedding_length_per_layer_input`: 2097152 exceeds"),
        "{e}"
    );
}

#[test]
fn hf_head_dims_and_unsupported_variants_are_checked() {
    let hf = |key: &'static str, v: V| error(edited(Format::Hf, move |m| m.insert(key, v.clone())));
    let e = hf("per_layer_config.3.head_dim", V::I64(0));
    assert!(e.contains("per_layer_config.3.head_dim"), "{e}");
    for bad in [0, 3] {
        let e = hf("per_layer_config.3.num_key_value_heads", V::I64(bad));
        let named = if bad == 0 {
            "per_layer_config.3.num_key_value_heads"
        } else {
            "do not divide"
        };
        assert!(e.contains(named), "{bad}: {e}");
    }
    let e = hf("enable_moe_block", V::Bool(true));
    assert!(e.contains("enable_moe_block"), "{e}");
    // a multimodal config's nested decoder keys win over the top level
    let e = hf("text_config.num_kv_shared_layers", V::I64(9));
    assert!(
        e.contains("`text_config.num_kv_shared_layers`: 9 exceeds"),
        "{e}"
    );
    assert!(matches!(
        load(
            edited(Format::Hf, |m| m.insert("enable_moe_block", V::Bool(true))),
            &ConfigOverrides::default()
        ),
        Err(Error::Unsupported(_))
    ));
}

/// Gemma 4 31B's `attention_k_eq_v` (fixture `gemma4_keqv`, made by
/// transformers): a hub-style config (`global_head_dim` and
/// `num_global_key_value_heads`, no `per_layer_config`) resolves to the
/// program of the `per_layer_config` transformers wrote; the flag on a
/// model whose full layers have their own `v_proj` still takes V from K;
/// and the GGUF, which has no `attn_v` on those layers, reads as the HF
/// directory does.
#[test]
fn attention_k_eq_v_takes_v_from_k_on_full_layers() {
    let want = fixtures::program("gemma4_keqv", Format::Hf);
    let hub = filtered_from(
        "gemma4_keqv",
        Format::Hf,
        |k| !k.starts_with("per_layer_config."),
        |m| {
            m.insert("global_head_dim", V::I64(32));
            m.insert("num_global_key_value_heads", V::I64(1));
        },
    );
    let (cfg, p) = load(hub, &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.n_head_kv_layers, [2, 2, 2, 1, 2, 1]);
    assert_eq!(
        cfg.v_from_k_layers,
        [false, false, false, true, false, false]
    );
    assert_eq!(p.layers, want.layers);
    // without the flag, `num_global_key_value_heads` is not read
    // (transformers gates it on `attention_k_eq_v`)
    let ungated = filtered_from(
        "gemma4_keqv",
        Format::Hf,
        |k| !k.starts_with("per_layer_config.") && k != "attention_k_eq_v",
        |m| {
            m.insert("global_head_dim", V::I64(32));
            m.insert("num_global_key_value_heads", V::I64(1));
        },
    );
    let e = error(ungated);
    assert!(
        e.contains("`model.layers.3.self_attn.v_proj.weight` not found"),
        "{e}"
    );
    // a global K/V head count that cannot group the 4 query heads
    for bad in [0, 3] {
        let e = error(filtered_from(
            "gemma4_keqv",
            Format::Hf,
            |k| !k.starts_with("per_layer_config."),
            |m| {
                m.insert("global_head_dim", V::I64(32));
                m.insert("num_global_key_value_heads", V::I64(bad));
            },
        ));
        assert!(
            e.contains("num_global_key_value_heads") && e.contains("do not divide 4"),
            "{bad}: {e}"
        );
    }
    // the flag on the plain fixture: its full layers' v_proj goes unused
    let (cfg, p) = load(
        edited(Format::Hf, |m| m.insert("attention_k_eq_v", V::Bool(true))),
        &ConfigOverrides::default(),
    )
    .unwrap();
    assert_eq!(
        cfg.v_from_k_layers,
        [false, false, false, true, false, false]
    );
    let a = p.layers[3].attention().unwrap();
    assert_eq!(a.wv, a.wk);
    let gg = fixtures::program("gemma4_keqv", Format::GgufF32);
    let a = gg.layers[3].attention().unwrap();
    assert_eq!((a.wv.as_str(), a.n_head_kv), ("blk.3.attn_k.weight", 1));
}

/// HF head dims as transformers' `Gemma4TextConfig` resolves them: a
/// `per_layer_config` wins (an unlisted layer takes `head_dim`, and
/// `global_head_dim` is ignored); without one, full-attention layers take
/// `global_head_dim`, 512 when it is absent.
#[test]
fn hf_head_dims_follow_transformers_defaults() {
    let want = fixtures::program("gemma4", Format::Hf);
    let dims = |p: &anedvd_graph::DecoderProgram| -> Vec<usize> {
        p.layers
            .iter()
            .map(|b| b.attention().unwrap().head_dim)
            .collect()
    };
    // the fixture's full layers are 32 wide, its sliding ones 16
    assert_eq!(dims(&want), [16, 16, 16, 32, 16, 32]);
    let with_global = load(
        edited(Format::Hf, |m| m.insert("global_head_dim", V::I64(999))),
        &ConfigOverrides::default(),
    );
    assert_eq!(dims(&with_global.unwrap().1), dims(&want));
    let no_list = |global: Option<i64>| {
        filtered(
            Format::Hf,
            |k| !k.starts_with("per_layer_config."),
            move |m| {
                if let Some(g) = global {
                    m.insert("global_head_dim", V::I64(g));
                }
            },
        )
    };
    let (_, p) = load(no_list(Some(32)), &ConfigOverrides::default()).unwrap();
    assert_eq!(dims(&p), dims(&want));
    // 512-wide full layers (4 heads: 2048 rows): the fixture's 32-wide
    // projections do not fit
    let e = error(no_list(None));
    assert!(
        e.contains("layers.3.self_attn.q_proj") && e.contains("[64, 2048]"),
        "{e}"
    );
}

/// A multimodal checkpoint (`Gemma4ForConditionalGeneration`): model type
/// `gemma4`, the decoder's keys under `text_config`, its weights under
/// `model.language_model.` — resolves to the same program as the text-only
/// fixture.
#[test]
fn multimodal_checkpoints_resolve_their_text_stack() {
    let src = anedvd_weights::open(fixtures::path("gemma4", Format::Hf))
        .unwrap()
        .source;
    let mut m = MemorySource::new("safetensors");
    for (k, v) in src.metadata().iter() {
        m.metadata_mut()
            .insert(format!("text_config.{k}"), v.clone());
    }
    m.metadata_mut()
        .insert("model_type", V::String("gemma4".into()));
    for info in src.tensors() {
        let t = src.tensor(&info.name).unwrap();
        let name = info.name.replacen("model.", "model.language_model.", 1);
        m.insert_raw(&name, info.dtype, &info.shape, t.data.to_vec());
    }
    let (cfg, p) = load(Arc::new(m), &ConfigOverrides::default()).unwrap();
    let (want_cfg, want) = load(Arc::from(src), &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.head_dim_layers, want_cfg.head_dim_layers);
    assert_eq!(cfg.kv_sources, want_cfg.kv_sources);
    assert_eq!(cfg.n_ff_layers, want_cfg.n_ff_layers);
    assert_eq!(p.layers.len(), want.layers.len());
    assert!(
        p.token_embd.starts_with("model.language_model."),
        "{}",
        p.token_embd
    );
}

/// `--sliding-window 0` drops the mask only: head dims, K/V sources and the
/// sliding layers' RoPE follow the layer types still.
#[test]
fn disabling_the_window_keeps_the_layer_types() {
    for format in [Format::Hf, Format::GgufF32] {
        let plain = fixtures::program("gemma4", format);
        let o = ConfigOverrides {
            sliding_window: Some(0),
            ..Default::default()
        };
        let (cfg, p) = load(edited(format, |_| {}), &o).unwrap();
        assert!(cfg.sliding_window.is_none());
        for (a, b) in p.layers.iter().zip(&plain.layers) {
            let (a, b) = (a.attention().unwrap(), b.attention().unwrap());
            assert_eq!(a.window, None);
            assert_eq!((a.head_dim, a.kv_source), (b.head_dim, b.kv_source));
            assert_eq!(a.rope, b.rope);
        }
    }
}

/// transformers forces a Gemma 4 config's last layer to full attention
/// whatever `layer_types` says; so do we, and `notes` says so.
#[test]
fn the_last_layer_is_full_attention_whatever_layer_types_says() {
    let src = edited(Format::Hf, |m| {
        // the fixture's types with the last layer sliding
        let (s, f) = ("sliding_attention", "full_attention");
        let types = anedvd_base::PackedStrings::from_strs([s, s, s, f, s, s]).unwrap();
        m.insert("layer_types", V::Array(types.into()))
    });
    let notes = anedvd_model::notes(src.as_ref(), &ConfigOverrides::default());
    assert!(notes.iter().any(|n| n.contains("last layer")), "{notes:?}");
    let (cfg, p) = load(src, &ConfigOverrides::default()).unwrap();
    assert_eq!(cfg.local_layers, [true, true, true, false, true, false]);
    let last = p.layers[5].attention().unwrap();
    assert_eq!(
        (last.window, last.head_dim, last.kv_source),
        (None, 32, Some(3))
    );
    // the unedited fixture (its last layer is already full): no note
    let plain = edited(Format::Hf, |_| {});
    assert!(anedvd_model::notes(plain.as_ref(), &ConfigOverrides::default()).is_empty());
}
