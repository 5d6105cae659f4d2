//! Program validation: hyperparameter consistency, tensor presence and shapes.
#![allow(clippy::unwrap_used)]

use anedvd_graph::{
    Activation, DecoderProgram, Error, LayerSpec, MemorySource, NormSpec, Role, Rope, RopePairing,
};
use std::sync::Arc;

fn program(mut edit: impl FnMut(&mut MemorySource, &mut LayerSpec)) -> DecoderProgram {
    let (d, hd, nh, nkv, ff, v) = (8u64, 4u64, 2u64, 1u64, 16u64, 10u64);
    let mut s = MemorySource::new("gguf");
    let mut put = |name: &str, shape: &[u64]| {
        s.insert_f32(
            name,
            shape,
            &vec![0.0; shape.iter().product::<u64>() as usize],
        );
    };
    put("tok", &[d, v]);
    put("onorm", &[d]);
    put("an", &[d]);
    put("q", &[d, nh * hd]);
    put("k", &[d, nkv * hd]);
    put("v", &[d, nkv * hd]);
    put("o", &[nh * hd, d]);
    put("fn", &[d]);
    put("g", &[d, ff]);
    put("u", &[d, ff]);
    put("dn", &[ff, d]);
    let mut layer = LayerSpec {
        n_head: 2,
        n_head_kv: 1,
        head_dim: 4,
        n_ff: 16,
        attn_scale: 0.5,
        attn_softcap: None,
        sliding_window: None,
        rope: Rope {
            pairing: RopePairing::Neox,
            n_rot: 4,
            inv_freq: vec![1.0, 0.01],
            attn_factor: 1.0,
        },
        tensors: [
            (Role::AttnNorm, "an"),
            (Role::AttnQ, "q"),
            (Role::AttnK, "k"),
            (Role::AttnV, "v"),
            (Role::AttnOutput, "o"),
            (Role::FfnNorm, "fn"),
            (Role::FfnGate, "g"),
            (Role::FfnUp, "u"),
            (Role::FfnDown, "dn"),
        ]
        .into_iter()
        .map(|(r, n)| (r, n.to_string()))
        .collect(),
    };
    edit(&mut s, &mut layer);
    DecoderProgram {
        family: "test".into(),
        n_embd: 8,
        n_vocab: 10,
        n_ctx_train: 64,
        norm: NormSpec {
            eps: 1e-6,
            weight_offset: 0.0,
        },
        activation: Activation::Silu,
        embd_scale: 1.0,
        final_softcap: None,
        token_embd: "tok".into(),
        output_norm: "onorm".into(),
        output: None,
        layers: vec![layer],
        weights: Arc::new(s),
    }
}

#[test]
fn valid_program_passes() {
    program(|_, _| {}).validate().unwrap();
}

#[test]
fn errors_name_the_problem() {
    let e = program(|s, _| s.insert_f32("k", &[8, 8], &[0.0; 64]))
        .validate()
        .unwrap_err();
    assert_eq!(e.to_string(), "tensor k: expected [8, 4], found [8, 8]");
    let e = program(|s, _| s.remove("dn")).validate().unwrap_err();
    assert!(matches!(e, Error::MissingTensor(ref n) if n == "dn"), "{e}");
    let e = program(|_, l| l.n_head_kv = 3).validate().unwrap_err();
    assert!(e.to_string().contains("not a multiple"), "{e}");
    let e = program(|_, l| l.rope.n_rot = 6).validate().unwrap_err();
    assert!(e.to_string().contains("n_rot"), "{e}");
    let e = program(|_, l| l.rope.inv_freq.pop().map(|_| ()).unwrap_or(()))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("rope frequencies"), "{e}");
    let e = program(|_, l| l.tensors.retain(|(r, _)| *r != Role::FfnUp))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("ffn_up"), "{e}");
    let e = program(|_, l| l.sliding_window = Some(0))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("sliding window"), "{e}");
    let e = program(|_, l| l.tensors.push((Role::TokenEmbd, "tok".into())))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("global role"), "{e}");
}

#[test]
fn role_names_are_unique() {
    let mut names: Vec<_> = Role::ALL.iter().map(|r| r.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Role::ALL.len());
}
