//! RoPE frequency rules against HF transformers' `ROPE_INIT_FUNCTIONS`
//! (tests/data/rope_goldens.json, written by tests/data/gen_rope_goldens.py).
#![allow(clippy::unwrap_used)]

use anedvd_model::{
    base_inv_freq, llama3_inv_freq, longrope_attention_factor, longrope_inv_freq, yarn_inv_freq,
};
use serde_json::Value;

#[test]
fn frequencies_match_transformers() {
    let text = include_str!("data/rope_goldens.json");
    let v: Value = serde_json::from_str(text).unwrap();
    for case in v["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let p = &case["rope"];
        let partial = case["partial_rotary_factor"].as_f64().unwrap_or(1.0);
        let n_rot = (case["head_dim"].as_f64().unwrap() * partial) as usize;
        let theta = p["rope_theta"].as_f64().unwrap();
        let f = |k: &str| p[k].as_f64();
        let (got, attn) = match p["rope_type"].as_str().unwrap() {
            "yarn" => yarn_inv_freq(
                theta,
                n_rot,
                f("factor").unwrap(),
                f("original_max_position_embeddings").unwrap(),
                (
                    f("beta_fast").unwrap_or(32.0),
                    f("beta_slow").unwrap_or(1.0),
                ),
                f("attention_factor"),
                true,
            ),
            "llama3" => (
                llama3_inv_freq(
                    &base_inv_freq(theta, n_rot),
                    f("factor").unwrap(),
                    f("low_freq_factor").unwrap(),
                    f("high_freq_factor").unwrap(),
                    f("original_max_position_embeddings").unwrap(),
                ),
                1.0,
            ),
            "linear" => (
                base_inv_freq(theta, n_rot)
                    .iter()
                    .map(|x| x / f("factor").unwrap())
                    .collect(),
                1.0,
            ),
            "longrope" => {
                let factors: Vec<f64> = p["short_factor"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect();
                let ctx = |k: &str| case[k].as_f64().unwrap();
                (
                    longrope_inv_freq(theta, n_rot, &factors),
                    longrope_attention_factor(ctx("max_pos"), ctx("original_max_pos"), None),
                )
            }
            other => panic!("unknown case {other}"),
        };
        let want: Vec<f64> = case["inv_freq"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(got.len(), want.len(), "{name}");
        // transformers computes in float32: relative 1e-6.
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 2e-6 * w.abs(), "{name}[{i}]: {g} vs {w}");
        }
        let want_attn = case["attention_factor"].as_f64().unwrap();
        assert!(
            (attn - want_attn).abs() < 1e-9,
            "{name}: attention factor {attn} vs {want_attn}"
        );
    }
}
