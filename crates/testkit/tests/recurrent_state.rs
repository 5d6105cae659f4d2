//! LFM2's recurrent convolution state under prefix reuse: a session that
//! goes back to a shorter prefix (`truncate`) and continues must produce the
//! logits a fresh session computes for the same tokens — at positions the
//! history still holds, at snapshots, and (falling back) from position 0.
#![allow(clippy::unwrap_used)]

use anedvd_ane::Variant;
use anedvd_graph::{Executable, LogitsMode};
use anedvd_testkit::backends::TestBackend;
use anedvd_testkit::fixtures::{self, Format};
use anedvd_testkit::{argmax, cosine};

fn fresh_last(exe: &dyn Executable, tokens: &[u32]) -> Vec<f32> {
    let mut s = exe.new_session(256).unwrap();
    s.forward(tokens, LogitsMode::Last).unwrap().to_vec()
}

#[test]
fn truncated_sessions_continue_like_fresh_ones() {
    // The CPU backend, and the ANE backends' host side (the same state
    // rules around the lowered depthwise conv), split and fused.
    for (backend, min_cos) in [
        (TestBackend::Cpu, 0.999999),
        (TestBackend::AneSim(Variant::Split), 0.9999),
        (TestBackend::AneSim(Variant::Fused), 0.9999),
    ] {
        walk(backend, min_cos);
    }
}

fn walk(backend: TestBackend, min_cos: f64) {
    let tag = backend.name();
    let r = fixtures::reference("lfm2");
    let p = fixtures::program("lfm2", Format::GgufF32);
    let exe = backend.build().compile(&p).unwrap();
    let prompt = &r.prompt;
    // The prompt, then 60 greedy steps (more than the history keeps).
    let mut s = exe.new_session(256).unwrap();
    let mut tokens = prompt.clone();
    let mut next = argmax(s.forward(prompt, LogitsMode::Last).unwrap()) as u32;
    for _ in 0..60 {
        tokens.push(next);
        next = argmax(s.forward(&[next], LogitsMode::Last).unwrap()) as u32;
    }
    let end = tokens.len();
    let n = prompt.len();
    // (asked, allowed results): the history holds at least the last 16
    // steps (up to twice that before it is trimmed); the prompt's last two
    // positions have snapshots; anything else falls back to the latest
    // snapshot before it (the prompt's end) or to 0.
    for (ask, allowed) in [
        (end, vec![end]),
        (end - 3, vec![end - 3]),
        (end - 16, vec![end - 16]),
        (end - 20, vec![end - 20, n]),
        (n, vec![n]),
        (n - 1, vec![n - 1]),
        (n + 2, vec![n]),
        (n - 5, vec![0]),
    ] {
        let kept = s.reusable(ask);
        assert!(allowed.contains(&kept), "{tag}: reusable({ask}) = {kept}");
    }
    // Go back step by step from the end, continue with the recorded tokens
    // (and one new one), and compare with fresh sessions.
    for ask in [end - 3, end - 16, n + 3, n, n - 1, n - 5] {
        s.truncate(ask);
        let kept = s.position();
        let mut rest: Vec<u32> = tokens[kept..ask.max(kept)].to_vec();
        rest.push(tokens[ask.min(end - 1)]);
        let mut want_tokens = tokens[..kept].to_vec();
        want_tokens.extend_from_slice(&rest);
        let got = s.forward(&rest, LogitsMode::Last).unwrap().to_vec();
        let want = fresh_last(exe.as_ref(), &want_tokens);
        let c = cosine(&got, &want);
        assert!(
            c > min_cos,
            "{tag}: truncate({ask}) kept {kept}: cosine {c}"
        );
        assert_eq!(argmax(&got), argmax(&want), "{tag}: truncate({ask})");
    }
}
