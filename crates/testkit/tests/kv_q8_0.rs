//! `--cache-type q8_0`: the CPU backend with Q8_0 KV caches against
//! transformers' logits on the fixture families whose head width Q8_0
//! holds (32), at every prompt position, and its cache at 34 bytes per
//! 32 values.
#![allow(clippy::unwrap_used)]

use anedvd_cpu::attention::KvType;
use anedvd_cpu::{CpuBackend, CpuOptions};
use anedvd_graph::{Backend, LogitsMode};
use anedvd_testkit::fixtures::{self, Format};
use anedvd_testkit::{argmax, cosine};

#[test]
fn q8_0_kv_caches_stay_close_to_transformers() {
    for family in ["gemma3", "qwen3", "qwen3_moe"] {
        let r = fixtures::reference(family);
        let p = fixtures::program(family, Format::Hf);
        let mut bytes = Vec::new();
        for kv_type in [KvType::F16, KvType::Q8_0] {
            let options = CpuOptions {
                threads: 2,
                kv_type,
                ..CpuOptions::default()
            };
            let exe = CpuBackend::with_options(options)
                .unwrap()
                .compile(&p)
                .unwrap();
            let mut s = exe.new_session(r.prompt.len()).unwrap();
            let all = s.forward(&r.prompt, LogitsMode::All).unwrap().to_vec();
            bytes.push(s.cache_bytes());
            let n_vocab = all.len() / r.prompt.len();
            for (i, (got, want)) in all.chunks_exact(n_vocab).zip(&r.all).enumerate() {
                let c = cosine(got, want);
                assert!(c > 0.999, "{family} {kv_type:?} position {i}: cosine {c}");
            }
            let last = &all[all.len() - n_vocab..];
            assert_eq!(argmax(last), argmax(&r.last), "{family} {kv_type:?}");
        }
        assert_eq!(bytes[1] * 64, bytes[0] * 34, "{family}: {bytes:?}");
    }
}
