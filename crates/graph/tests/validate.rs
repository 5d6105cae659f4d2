//! Program validation: hyperparameter consistency, tensor presence and shapes.
#![allow(clippy::unwrap_used)]

use anedvd_graph::{
    Activation, Attention, AttentionBias, Block, DecoderProgram, DenseFfn, Error, ExpertTensors,
    FeedForward, Gating, MemorySource, Mixer, MoeFfn, NormPlacement, NormSpec, Role, Rope,
    RopePairing, ShortConv,
};
use std::sync::Arc;

fn program(mut edit: impl FnMut(&mut MemorySource, &mut Block)) -> DecoderProgram {
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
    let mut layer = Block {
        norms: NormPlacement::Pre {
            mixer: "an".into(),
            ffn: "fn".into(),
        },
        mixer: Mixer::Attention(Attention {
            n_head: 2,
            n_head_kv: 1,
            head_dim: 4,
            scale: 0.5,
            softcap: None,
            window: None,
            rope: Some(Rope {
                pairing: RopePairing::Neox,
                n_rot: 4,
                inv_freq: vec![1.0, 0.01],
                attn_factor: 1.0,
            }),
            kv_source: None,
            wq: "q".into(),
            wk: "k".into(),
            wv: "v".into(),
            wo: "o".into(),
            bias: AttentionBias::default(),
            q_norm: None,
            k_norm: None,
            v_norm: false,
        }),
        ffn: FeedForward::Dense(DenseFfn {
            n_ff: 16,
            activation: Activation::Silu,
            gate: "g".into(),
            up: "u".into(),
            down: "dn".into(),
        }),
        per_layer_input: None,
        layer_scale: None,
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
        embd_scale: 1.0,
        final_softcap: None,
        token_embd: "tok".into(),
        output_norm: "onorm".into(),
        output: None,
        layers: vec![layer],
        per_layer_embd: None,
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
    fn attn(l: &mut Block) -> &mut Attention {
        l.attention_mut().unwrap()
    }
    let e = program(|_, l| attn(l).n_head_kv = 3)
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("not a multiple"), "{e}");
    let e = program(|_, l| attn(l).rope.as_mut().unwrap().n_rot = 6)
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("n_rot"), "{e}");
    let e = program(|_, l| {
        attn(l).rope.as_mut().unwrap().inv_freq.pop();
    })
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("rope frequencies"), "{e}");
    let e = program(|_, l| attn(l).window = Some(0))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("sliding window"), "{e}");
    let e = program(|_, l| attn(l).kv_source = Some(0))
        .validate()
        .unwrap_err();
    assert!(
        e.to_string().contains("not an earlier attention layer"),
        "{e}"
    );
    let e = program(|_, l| attn(l).bias.q = Some("k".into()))
        .validate()
        .unwrap_err();
    assert_eq!(e.to_string(), "tensor k: expected [8], found [8, 4]");
    // Gemma 4's parts: a per-layer input needs the program's embedding,
    // a layer scale is one value.
    let e = program(|s, l| {
        s.insert_f32("plg", &[8, 4], &[0.0; 32]);
        s.insert_f32("plp", &[4, 8], &[0.0; 32]);
        l.per_layer_input = Some(anedvd_graph::PerLayerInput {
            width: 4,
            activation: anedvd_graph::Activation::GeluTanh,
            gate: "plg".into(),
            proj: "plp".into(),
            norm: "an".into(),
        });
    })
    .validate()
    .unwrap_err();
    assert!(
        e.to_string().contains("per-layer embedding is None wide"),
        "{e}"
    );
    let e = program(|_, l| l.layer_scale = Some("an".into()))
        .validate()
        .unwrap_err();
    assert_eq!(e.to_string(), "tensor an: expected [1], found [8]");
    // A NoPE layer needs no frequencies.
    program(|_, l| attn(l).rope = None).validate().unwrap();
}

#[test]
fn every_variant_checks_its_tensor_shapes() {
    // short conv: in_proj [d, 3d], conv [L, d], out_proj [d, d]
    let conv = |s: &mut MemorySource, l: &mut Block, conv_shape: &[u64]| {
        s.insert_f32("in", &[8, 24], &[0.0; 192]);
        s.insert_f32(
            "cv",
            conv_shape,
            &vec![0.0; conv_shape.iter().product::<u64>() as usize],
        );
        s.insert_f32("out", &[8, 8], &[0.0; 64]);
        l.mixer = Mixer::ShortConv(ShortConv {
            kernel: 3,
            in_proj: "in".into(),
            conv: "cv".into(),
            out_proj: "out".into(),
        });
    };
    program(|s, l| conv(s, l, &[3, 8])).validate().unwrap();
    // HF's Conv1d weight keeps its middle axis.
    program(|s, l| conv(s, l, &[3, 1, 8])).validate().unwrap();
    let e = program(|s, l| conv(s, l, &[4, 8])).validate().unwrap_err();
    assert_eq!(e.to_string(), "tensor cv: expected [3, 8], found [4, 8]");

    // MoE: stacked [d, ff, E] / [ff, d, E] and per-expert 2-D tensors
    let moe = |s: &mut MemorySource, l: &mut Block, experts: ExpertTensors, used: usize| {
        s.insert_f32("router", &[8, 2], &[0.0; 16]);
        s.insert_f32("ge", &[8, 4, 2], &[0.0; 64]);
        s.insert_f32("ue", &[8, 4, 2], &[0.0; 64]);
        s.insert_f32("de", &[4, 8, 2], &[0.0; 64]);
        for e in 0..2 {
            s.insert_f32(&format!("g{e}"), &[8, 4], &[0.0; 32]);
            s.insert_f32(&format!("u{e}"), &[8, 4], &[0.0; 32]);
            s.insert_f32(&format!("d{e}"), &[4, 8], &[0.0; 32]);
        }
        l.ffn = FeedForward::Moe(MoeFfn {
            n_expert: 2,
            n_expert_used: used,
            n_ff_expert: 4,
            activation: Activation::Silu,
            router: "router".into(),
            gating: Gating::Softmax,
            selection_bias: None,
            normalize_top_k: true,
            weights_scale: 1.0,
            experts,
            shared: None,
        });
    };
    let stacked = || ExpertTensors::Stacked {
        gate: "ge".into(),
        up: "ue".into(),
        down: "de".into(),
    };
    let names = |p: &str| (0..2).map(|e| format!("{p}{e}")).collect::<Vec<_>>();
    let per_expert = || ExpertTensors::PerExpert {
        gate: names("g"),
        up: names("u"),
        down: names("d"),
    };
    program(|s, l| moe(s, l, stacked(), 1)).validate().unwrap();
    program(|s, l| moe(s, l, per_expert(), 2))
        .validate()
        .unwrap();
    let e = program(|s, l| moe(s, l, stacked(), 3))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("3 of 2 experts"), "{e}");
    // a selection bias must have one entry per expert
    let e = program(|s, l| {
        moe(s, l, stacked(), 1);
        s.insert_f32("bias", &[3], &[0.0; 3]);
        if let FeedForward::Moe(m) = &mut l.ffn {
            m.selection_bias = Some("bias".into());
        }
    })
    .validate()
    .unwrap_err();
    assert_eq!(e.to_string(), "tensor bias: expected [2], found [3]");
    let swapped = || ExpertTensors::Stacked {
        gate: "de".into(),
        up: "ue".into(),
        down: "ge".into(),
    };
    let e = program(|s, l| moe(s, l, swapped(), 1))
        .validate()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "tensor de: expected [8, 4, 2], found [4, 8, 2]"
    );
    let short = || ExpertTensors::PerExpert {
        gate: names("g"),
        up: names("u"),
        down: vec!["d0".into()],
    };
    let e = program(|s, l| moe(s, l, short(), 1))
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("1 expert tensors for 2"), "{e}");
}

#[test]
fn role_names_are_unique() {
    let mut names: Vec<_> = Role::ALL.iter().map(|r| r.name()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), Role::ALL.len());
}
