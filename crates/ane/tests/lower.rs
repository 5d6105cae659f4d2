//! Lowering tests: every program emitted for every tiny family passes the ANE
//! rule table (with its weights; the fused variant's contested `concat`
//! aside), and the golden MIL of one layer is unchanged.

use anedvd_ane::lower::{dispatch_count, lower, LowerOptions, Variant};
use anedvd_mil::rules::{check, RuleConfig, RuleId};
use anedvd_testkit::fixtures::{self, Format};

#[test]
fn every_program_of_every_family_passes_the_rules() {
    let mut total = 0;
    for family in fixtures::ane_families() {
        for format in Format::ALL {
            let p = fixtures::program(family, format);
            for variant in [Variant::Split, Variant::Fused] {
                // a small slice forces several lm_head programs
                for vocab_slice in [32768, 128] {
                    let o = LowerOptions {
                        variant,
                        vocab_slice,
                        ..Default::default()
                    };
                    let l = lower(&p, &o).expect("lower");
                    assert_eq!(l.dispatches_per_token(), dispatch_count(variant, &p, &o));
                    for k in &l.kernels {
                        let mut v = check(&k.program, Some(&k.weights), &RuleConfig::default());
                        // The fused variant packs a layer's outputs with `concat`,
                        // contested on the in-memory path: reported by `kernels`,
                        // never assumed to work; nothing else may appear.
                        v.retain(|f| {
                            !(variant == Variant::Fused
                                && f.rule == RuleId::ContestedOp
                                && f.detail.contains("`concat`"))
                        });
                        assert!(
                            v.is_empty(),
                            "{family}/{} {} {}: {v:?}",
                            format.name(),
                            variant.name(),
                            k.name
                        );
                        // and no statement breaks a precision rule
                        let lints = anedvd_mil::precision::lint(&k.program);
                        assert!(lints.is_empty(), "{family} {}: {lints:?}", k.name);
                        // the text path: print → parse → same program
                        let text = anedvd_mil::print(&k.program);
                        assert_eq!(anedvd_mil::parse(&text).expect("parse"), k.program);
                        total += 1;
                    }
                }
            }
        }
    }
    assert!(total > 200, "only {total} programs checked");
}

#[test]
fn rejects_bad_widths_and_slices() {
    let p = fixtures::program("llama", Format::GgufF32);
    for (width, vocab_slice, residual_scale) in [
        (0, 128, 1.0),
        (48, 128, 1.0),
        (64, 0, 1.0),
        (64, 65537, 1.0),
        (64, 128, 3.0),
        (64, 128, 0.5),
    ] {
        let o = LowerOptions {
            width,
            vocab_slice,
            residual_scale,
            ..Default::default()
        };
        assert!(lower(&p, &o).is_err(), "width {width} slice {vocab_slice}");
    }
}

/// Golden MIL text of layer 0 of the tiny Gemma 3 (both variants) — a change
/// detector, see tests/golden/README.md. `ANEDVD_BLESS=1` rewrites it.
#[test]
fn golden_layer0_mil() {
    let p = fixtures::program("gemma3", Format::GgufF32);
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for (variant, names) in [
        (
            Variant::Split,
            &["blk.0.qkv", "blk.0.attn_out", "blk.0.ffn"][..],
        ),
        (Variant::Fused, &["entry", "blk.0.layer"][..]),
    ] {
        let o = LowerOptions {
            variant,
            ..Default::default()
        };
        let l = lower(&p, &o).expect("lower");
        for name in names {
            let k = l.kernel(name).expect("kernel");
            let text = anedvd_mil::print(&k.program);
            let path = dir.join(format!("gemma3-{}-{name}.mil", variant.name()));
            if std::env::var_os("ANEDVD_BLESS").is_some() {
                std::fs::write(&path, &text).expect("write golden");
            }
            let want =
                std::fs::read_to_string(&path).expect("golden file (ANEDVD_BLESS=1 writes it)");
            assert_eq!(text, want, "{} changed; review and rebless", path.display());
        }
    }
}
