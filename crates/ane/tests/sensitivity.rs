//! Per-block precision from measured sensitivity (`--ane-keep-fp16`): the
//! ranking predicts what the simulator measures, and the kept blocks are
//! stored fp16. (That the measurement compresses weights exactly as the
//! programs do is tested beside the emitter.)
#![allow(clippy::unwrap_used)]

use anedvd_ane::backend::selftest::cosine;
use anedvd_ane::lower::sensitivity::{self, BlockMask, ProjBlock};
use anedvd_ane::lower::{self, LowerOptions};
use anedvd_ane::{AneSimBackend, RuntimePath, Variant, WeightFormat};
use anedvd_cpu::CpuBackend;
use anedvd_graph::{Backend, DecoderProgram, LogitsMode};
use anedvd_testkit::fixtures::{self, Format};

fn last_logits(backend: &dyn Backend, p: &DecoderProgram, prompt: &[u32]) -> Vec<f32> {
    let exe = backend.compile(p).unwrap();
    let mut s = exe.new_session(64).unwrap();
    s.forward(prompt, LogitsMode::Last).unwrap().to_vec()
}

/// Keeping the most sensitive blocks fp16 brings the simulated program
/// closer to the CPU than keeping as many of the least sensitive ones, and
/// the kept blocks are the ones stored fp16.
#[test]
fn the_ranking_predicts_the_simulator() {
    let format = WeightFormat::Lut { bits: 4 };
    for family in ["llama", "qwen3"] {
        let p = fixtures::program(family, Format::GgufF32);
        let ranked = sensitivity::measure(&p, format).unwrap();
        assert_eq!(ranked.len(), 2 * p.layers.len() + 1, "{family}");
        assert!(ranked.windows(2).all(|w| w[0].distance >= w[1].distance));
        let k = 3;
        let mask = |blocks: &[sensitivity::Sensitivity]| {
            let mut m = BlockMask::default();
            blocks.iter().for_each(|s| assert!(m.insert(s.block)));
            m
        };
        let (top, bottom) = (mask(&ranked[..k]), mask(&ranked[ranked.len() - k..]));
        let prompt = fixtures::reference(family).prompt;
        let want = last_logits(&CpuBackend::new(1).unwrap(), &p, &prompt);
        let run = |m: BlockMask| {
            let o = LowerOptions {
                weights: format,
                path: RuntimePath::E5rt,
                variant: Variant::Fused,
                fp16_blocks: m,
                ..Default::default()
            };
            cosine(&last_logits(&AneSimBackend::new(o), &p, &prompt), &want)
        };
        let (c_top, c_bottom, c_none) = (run(top), run(bottom), run(BlockMask::default()));
        println!("{family}: none {c_none:.6}, least sensitive {c_bottom:.6}, most {c_top:.6}");
        assert!(c_top > c_bottom, "{family}: {c_top} vs {c_bottom}");
        // the kept blocks are stored fp16: fewer compressed bytes go
        let bytes = |m: BlockMask| {
            let o = LowerOptions {
                weights: format,
                path: RuntimePath::E5rt,
                fp16_blocks: m,
                ..Default::default()
            };
            lower::lower(&p, &o).unwrap().weight_bytes()
        };
        assert!(bytes(top) > bytes(BlockMask::default()));
        // keep_fp16 resolves to the same blocks
        let o = LowerOptions {
            weights: format,
            keep_fp16: anedvd_ane::KeepFp16::Count(k as u16),
            ..Default::default()
        };
        assert_eq!(lower::resolve_precision(&p, &o).unwrap().fp16_blocks, top);
    }
}

#[test]
fn block_masks_hold_what_they_are_given() {
    let mut m = BlockMask::default();
    assert!(m.is_empty());
    assert!(m.insert(ProjBlock::Ffn(3)) && m.insert(ProjBlock::LmHead));
    assert!(m.insert(ProjBlock::Attention(127)));
    assert!(!m.insert(ProjBlock::Attention(128)));
    assert_eq!(m.len(), 3);
    let listed: Vec<String> = m.iter().map(|b| b.to_string()).collect();
    assert_eq!(listed, ["blk.3.ffn", "blk.127.attn", "lm_head"]);
    assert_eq!(
        m.format(ProjBlock::Ffn(3), WeightFormat::Int8),
        WeightFormat::Fp16
    );
    assert_eq!(
        m.format(ProjBlock::Ffn(2), WeightFormat::Int8),
        WeightFormat::Int8
    );
}
