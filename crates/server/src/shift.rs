//! `serve --context-shift`: what happens to a request whose prompt outgrows a
//! slot's context. Off (the default, as in llama-server), nothing here
//! changes a prompt and [`AppState::submit`] refuses one that does not fit
//! with llama-server's `exceed_context_size_error`. On:
//!
//! - chat routes (OpenAI chat completions, Responses, Anthropic Messages)
//!   drop the oldest whole exchanges of the conversation, keeping every
//!   system message and the last user message with what follows it
//!   ([`anedvd_chat::shift`]), until the rendered prompt leaves
//!   [`reply_room`] for the reply;
//! - raw-prompt routes (`/v1/completions`, llama-server's `/completion`) cut
//!   a prompt that fills the context as llama-server does: the first
//!   `n_keep` tokens are kept and whole blocks of half the remaining context
//!   are dropped after them ([`truncate_middle`]).
//!
//! A shifted request is logged (tracing, `info`), counted at `/metrics`
//! (`anedvd_context_shifts_total`, `anedvd_context_shift_dropped_tokens_total`)
//! and its response carries the [`HEADER`] header; `/completion` also says
//! `truncated: true`. The generation itself is not shifted: it stops when
//! the context is full (`finish_reason: length`).

use crate::error::ApiError;
use crate::state::AppState;
use anedvd_chat::shift::drop_oldest_exchanges;
use anedvd_engine::Message;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;

/// The response header of a shifted request: `messages=M, tokens=T`, the
/// messages dropped (0 for a raw prompt) and the prompt tokens dropped.
pub const HEADER: &str = "anedvd-context-shift";

/// What a context shift dropped from one request's prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shift {
    /// Messages dropped (whole exchanges; 0 for a raw prompt).
    pub messages: usize,
    /// Prompt tokens dropped.
    pub tokens: usize,
}

/// Positions a chat prompt must leave for the reply: the request's
/// `max_tokens`, at most a quarter of the context (so a large or absent
/// `max_tokens` does not cost the whole conversation), at least one.
pub fn reply_room(max_tokens: usize, n_ctx: usize) -> usize {
    max_tokens.min(n_ctx / 4).max(1)
}

/// Renders a chat request's `messages` with `render`. With
/// `--context-shift`, a prompt that leaves less than [`reply_room`] of the
/// `n_ctx` positions loses its oldest exchanges (from `messages` too) until
/// it does, or until only what is never dropped is left; the request is then
/// logged and counted. Without the flag the prompt is rendered as is.
pub(crate) fn fit_chat(
    state: &AppState,
    endpoint: &str,
    n_ctx: usize,
    max_tokens: usize,
    messages: &mut Vec<Message>,
    mut render: impl FnMut(&[Message]) -> Result<Vec<u32>, ApiError>,
) -> Result<(Vec<u32>, Option<Shift>), ApiError> {
    if !state.config().context_shift {
        return Ok((render(messages)?, None));
    }
    let budget = n_ctx.saturating_sub(reply_room(max_tokens, n_ctx));
    let f = drop_oldest_exchanges(messages, budget, render)?;
    if f.exchanges == 0 {
        return Ok((f.prompt, None));
    }
    let shift = Shift {
        messages: f.messages,
        tokens: f.before.saturating_sub(f.prompt.len()),
    };
    tracing::info!(
        endpoint,
        n_ctx,
        exchanges = f.exchanges,
        messages = f.messages,
        prompt_tokens_before = f.before,
        prompt_tokens = f.prompt.len(),
        fits = f.fits,
        "context shift: dropped the oldest exchanges of a conversation"
    );
    state.metrics().count_context_shift(shift.tokens);
    Ok((f.prompt, Some(shift)))
}

/// llama-server's cut of a prompt that fills the context (`n_ctx` positions
/// or more; `None` otherwise): the first `n_keep` tokens are kept (all of
/// them for a negative `n_keep`, at most `n_ctx - 4`), then as many whole
/// blocks of half the remaining context as needed are dropped right after
/// them, so the rest (the prompt's end) leaves at least one position free.
pub fn truncate_middle(prompt: &[u32], n_keep: i64, n_ctx: usize) -> Option<Vec<u32>> {
    let n = prompt.len();
    if n < n_ctx {
        return None;
    }
    let keep = usize::try_from(n_keep).unwrap_or(n);
    let keep = keep.min(n_ctx.saturating_sub(4));
    // n_ctx ≥ 2, and keep ≤ n_ctx - 4 where n_ctx ≥ 4: left ≥ 2, block ≥ 1.
    let left = n_ctx - keep;
    let block = (left / 2).max(1);
    // n ≥ n_ctx = keep + left > keep + block: no underflow. What is left
    // after the dropped blocks is in [block, 2 * block), under `left`.
    let erased = (n - keep - block) / block;
    let mut out = Vec::with_capacity(n - erased * block);
    out.extend_from_slice(&prompt[..keep]);
    out.extend_from_slice(&prompt[keep + erased * block..]);
    Some(out)
}

/// [`truncate_middle`] of a raw prompt under `--context-shift` (logged and
/// counted); without the flag, or when the prompt fits, it is returned as is.
pub(crate) fn fit_raw(
    state: &AppState,
    endpoint: &str,
    n_ctx: usize,
    n_keep: i64,
    prompt: Vec<u32>,
) -> (Vec<u32>, Option<Shift>) {
    if !state.config().context_shift {
        return (prompt, None);
    }
    let Some(cut) = truncate_middle(&prompt, n_keep, n_ctx) else {
        return (prompt, None);
    };
    let shift = Shift {
        messages: 0,
        tokens: prompt.len() - cut.len(),
    };
    tracing::info!(
        endpoint,
        n_ctx,
        n_keep,
        prompt_tokens_before = prompt.len(),
        prompt_tokens = cut.len(),
        "context shift: truncated a prompt longer than the context"
    );
    state.metrics().count_context_shift(shift.tokens);
    (cut, Some(shift))
}

/// Adds the [`HEADER`] header to the response of a shifted request.
pub(crate) fn mark(mut resp: Response, shift: Option<Shift>) -> Response {
    if let Some(s) = shift {
        let value = format!("messages={}, tokens={}", s.messages, s.tokens);
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut()
                .insert(HeaderName::from_static(HEADER), v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<u32> {
        (0..n).collect()
    }

    #[test]
    fn truncation_matches_llama_server() {
        // tests/unit/test_ctx_shift.py: 301 prompt tokens, a 128-token
        // slot, n_keep 0: three blocks of 64 go, the last 109 tokens stay.
        let cut = truncate_middle(&ids(301), 0, 128).unwrap_or_default();
        assert_eq!(cut, (192..301).collect::<Vec<u32>>());
        // n_keep tokens stay in front; the rest is the prompt's end.
        let cut = truncate_middle(&ids(301), 10, 128).unwrap_or_default();
        assert_eq!(&cut[..10], &ids(10)[..]);
        assert_eq!(cut.len(), 10 + (301 - 10 - 3 * 59));
        assert_eq!(cut.last(), Some(&300));
        // -1 keeps as much as may be kept: n_ctx - 4.
        let cut = truncate_middle(&ids(301), -1, 128).unwrap_or_default();
        assert_eq!(&cut[..124], &ids(124)[..]);
        assert_eq!(cut.len(), 127);
    }

    #[test]
    fn truncation_always_leaves_a_free_position() {
        for n_ctx in 2..40 {
            for n in n_ctx..3 * n_ctx {
                for keep in [-1, 0, 1, 3, 100] {
                    let p = ids(n as u32);
                    let cut = truncate_middle(&p, keep, n_ctx).unwrap_or_default();
                    assert!(
                        !cut.is_empty() && cut.len() < n_ctx,
                        "{n} tokens, n_ctx {n_ctx}, n_keep {keep}: {}",
                        cut.len()
                    );
                    assert_eq!(cut.last(), p.last());
                }
            }
            assert_eq!(truncate_middle(&ids(n_ctx as u32 - 1), 0, n_ctx), None);
        }
    }

    #[test]
    fn room_for_the_reply() {
        assert_eq!(reply_room(usize::MAX, 256), 64);
        assert_eq!(reply_room(16, 256), 16);
        assert_eq!(reply_room(0, 256), 1);
        assert_eq!(reply_room(100, 2), 1);
    }
}
