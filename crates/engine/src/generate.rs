//! The generation loop: prefill (reusing the cached prefix), then sample and
//! decode one token at a time, streaming text through a callback.

use crate::constrain::{CompiledGrammar, Constraint};
use crate::sampler::{token_logprob, top_logprobs, Sampler, SamplingParams};
use crate::session::EngineSession;
use crate::speculative::{NgramProposer, Proposer, ProposerKind, SpecParams};
use crate::{Error, Result};
use anedvd_graph::LogitsMode;
use anedvd_tokenizer::{StreamDecoder, Tokenizer};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// Tokens fed to the backend per prefill call: large enough to amortise weight
/// reads over the batch, small enough to bound scratch memory.
const PREFILL_CHUNK: usize = 512;

/// What to generate and how to sample it.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    /// Upper bound on generated tokens.
    pub max_tokens: usize,
    /// Sampler settings.
    pub sampling: SamplingParams,
    /// Keep going through end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report the `k` most likely tokens at every step (0 = off).
    pub top_logprobs: usize,
    /// Speculative decoding, if set (a draft model is the caller's to
    /// provide: [`generate_speculative`], the scheduler's draft model).
    pub speculative: Option<SpecParams>,
    /// Constrained decoding: only tokens this grammar allows are sampled,
    /// and the output ends when it is complete
    /// ([`crate::Engine::compile_grammar`]).
    pub grammar: Option<CompiledGrammar>,
    /// Render special tokens (e.g. tool-call markers) in the text instead
    /// of hiding them; end-of-generation tokens are never rendered.
    pub render_special: bool,
    /// More tokens that end the generation as an end-of-generation token
    /// does (not rendered; vLLM's `stop_token_ids`).
    pub stop_tokens: Vec<u32>,
    /// Start from a cached prefix of the prompt where a slot holds one
    /// (false: prefill the whole prompt afresh; llama-server's
    /// `cache_prompt: false`). Sessions driven by the caller ignore it.
    pub reuse_prefix: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            ignore_eos: false,
            top_logprobs: 0,
            speculative: None,
            grammar: None,
            render_special: false,
            stop_tokens: Vec::new(),
            reuse_prefix: true,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token was sampled.
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The session's context is full.
    ContextFull,
    /// The caller's callback asked to stop.
    Cancelled,
}

impl FinishReason {
    /// OpenAI-style name: `stop`, `length`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length | FinishReason::ContextFull => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Timing figures of one generation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Prompt tokens served from the cached prefix.
    pub reused_tokens: usize,
    /// Prompt tokens run through the model.
    pub prefill_tokens: usize,
    /// Time spent on them.
    pub prefill: Duration,
    /// Tokens produced by decode steps (excludes the one sampled from prefill logits).
    pub decode_tokens: usize,
    /// Time spent on decode steps.
    pub decode: Duration,
    /// Speculation: batched passes that verified drafts.
    pub verify_passes: usize,
    /// Speculation: tokens drafted.
    pub drafted_tokens: usize,
    /// Speculation: drafted tokens accepted.
    pub accepted_tokens: usize,
}

impl Timings {
    /// Prefill throughput in tokens per second.
    pub fn prefill_tps(&self) -> f64 {
        rate(self.prefill_tokens, self.prefill)
    }
    /// Decode throughput in tokens per second.
    pub fn decode_tps(&self) -> f64 {
        rate(self.decode_tokens, self.decode)
    }
    /// Share of drafted tokens accepted (0 without drafts).
    pub fn acceptance(&self) -> f64 {
        if self.drafted_tokens == 0 {
            0.0
        } else {
            self.accepted_tokens as f64 / self.drafted_tokens as f64
        }
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

/// One generated token, as handed to the streaming callback.
#[derive(Debug, Clone)]
pub struct TokenEvent<'a> {
    /// Token id.
    pub id: u32,
    /// Newly completed text (may be empty while a UTF-8 sequence is incomplete).
    pub text: &'a str,
    /// The most likely tokens at this step when requested.
    pub top_logprobs: &'a [(u32, f32)],
    /// This token's log-probability under the model's distribution (before
    /// penalties and filters); `Some` only when `top_logprobs` was requested.
    pub logprob: Option<f32>,
}

/// The outcome of [`generate`].
#[derive(Debug, Clone)]
pub struct Generation {
    /// The prompt ids.
    pub prompt_tokens: Vec<u32>,
    /// Generated ids (an end-of-generation token that stopped it is included).
    pub tokens: Vec<u32>,
    /// Generated text (end-of-generation tokens are not rendered).
    pub text: String,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Timings.
    pub timings: Timings,
    /// Per step, the most likely tokens with log-probabilities (empty unless requested).
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
}

/// The checks made before a prompt is run: not empty, valid sampling
/// parameters, at most `max_seq` tokens.
pub fn check_request(prompt: &[u32], params: &GenerateParams, max_seq: usize) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::EmptyPrompt);
    }
    params.sampling.validate().map_err(Error::BadParams)?;
    if let Some(s) = &params.speculative {
        s.validate().map_err(Error::BadSpeculation)?;
    }
    if prompt.len() > max_seq {
        return Err(Error::PromptTooLong {
            prompt: prompt.len(),
            max_seq,
        });
    }
    Ok(())
}

/// Runs `prompt` through `session` (reusing its cached prefix) and generates.
/// `on_token` sees every token as it is produced; returning
/// `ControlFlow::Break(())` stops generation (finish reason `Cancelled`).
/// With `params.speculative` set, the n-gram proposer drafts.
pub fn generate(
    session: &mut EngineSession,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
) -> Result<Generation> {
    generate_speculative(session, tokenizer, prompt, params, None, on_token)
}

/// [`generate`] with drafts from `proposer` (e.g. a
/// [`crate::speculative::DraftProposer`]) when given, else from the n-gram
/// proposer when `params.speculative` is set, else none.
pub fn generate_speculative(
    session: &mut EngineSession,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    proposer: Option<&mut dyn Proposer>,
    mut on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
) -> Result<Generation> {
    let max_seq = session.max_seq();
    check_request(prompt, params, max_seq)?;
    let mut timings = Timings::default();

    let start = Instant::now();
    let reused = session.reuse_prefix(prompt);
    timings.reused_tokens = reused;
    let suffix = &prompt[reused..];
    timings.prefill_tokens = suffix.len();
    let mut logits = Vec::new();
    let chunks: Vec<&[u32]> = suffix.chunks(PREFILL_CHUNK).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let mode = if i + 1 == chunks.len() {
            LogitsMode::Last
        } else {
            LogitsMode::None
        };
        let out = session.forward(chunk, mode)?;
        if mode == LogitsMode::Last {
            logits.clear();
            logits.extend_from_slice(out);
        }
    }
    timings.prefill = start.elapsed();

    let mut decoding = Decoding::new(tokenizer, prompt, params, timings);
    let decode_start = Instant::now();
    let mut ngram = None;
    let proposer: Option<&mut dyn Proposer> = match (proposer, params.speculative) {
        (Some(p), _) => Some(p),
        (None, None) => None,
        (None, Some(p)) if p.proposer == ProposerKind::Ngram => {
            Some(ngram.insert(NgramProposer::new(p)) as &mut dyn Proposer)
        }
        (None, Some(_)) => {
            return Err(Error::BadSpeculation(
                "draft-model speculation needs a draft model (--draft-model)".into(),
            ))
        }
    };
    if let Some(proposer) = proposer {
        let finish = speculate(session, &mut decoding, &mut logits, proposer, &mut on_token)?;
        let t = &mut decoding.out.timings;
        t.decode = decode_start.elapsed();
        t.decode_tokens = decoding.out.tokens.len().saturating_sub(1);
        return Ok(decoding.finish(finish, on_token));
    }
    let finish = loop {
        let room = session.position() < max_seq;
        match decoding.step(&mut logits, room, &mut on_token)? {
            Step::Finished(reason) => break reason,
            Step::Next(id) => {
                let next = while_preparing(vec![&mut decoding], || {
                    session
                        .forward(&[id], LogitsMode::Last)
                        .map(<[f32]>::to_vec)
                })?;
                logits.clear();
                logits.extend_from_slice(&next);
                decoding.out.timings.decode_tokens += 1;
            }
        }
    };
    decoding.out.timings.decode = decode_start.elapsed();
    Ok(decoding.finish(finish, on_token))
}

/// The decode loop with speculation: after each sampled token the proposer
/// drafts continuations, one forward pass runs the token and its drafts
/// (one logits row each), and each draft is checked in order
/// ([`Sampler::verify`]) until one is replaced; the cache then keeps what
/// was emitted and the replacement (or, all accepted, the bonus token
/// sampled from the last row) is fed next.
fn speculate(
    session: &mut EngineSession,
    decoding: &mut Decoding<'_>,
    logits: &mut [f32],
    proposer: &mut dyn Proposer,
    on_token: &mut impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
) -> Result<FinishReason> {
    let max_seq = session.max_seq();
    let mut pending = match decoding.step(logits, session.position() < max_seq, &mut *on_token)? {
        Step::Finished(r) => return Ok(r),
        Step::Next(id) => id,
    };
    let mut draft = Vec::new();
    loop {
        let pos0 = session.position();
        // room for the pending token and the drafts in the context, and no
        // more drafts than tokens left to generate
        let left = decoding.tokens_left();
        let room = max_seq.saturating_sub(pos0 + 1);
        draft.clear();
        proposer.draft(&decoding.history, left.min(room), &mut draft)?;
        if draft.is_empty() {
            logits.copy_from_slice(session.forward(&[pending], LogitsMode::Last)?);
            match decoding.step(logits, session.position() < max_seq, &mut *on_token)? {
                Step::Finished(r) => return Ok(r),
                Step::Next(id) => pending = id,
            }
            continue;
        }
        let mut feed = Vec::with_capacity(draft.len() + 1);
        feed.push(pending);
        feed.extend_from_slice(&draft);
        let mut rows = session.forward(&feed, LogitsMode::All)?.to_vec();
        let verdict = decoding.verify_pass(&mut rows, &draft, pos0, max_seq, &mut *on_token)?;
        let kept = session.truncate(verdict.keep);
        match verdict.step {
            Step::Finished(r) => return Ok(r),
            Step::Next(id) => {
                if kept < verdict.keep {
                    // recurrent state without a snapshot there: run the
                    // dropped tokens again
                    let redo = decoding.replay(verdict.keep - kept).to_vec();
                    session.forward(&redo, LogitsMode::None)?;
                }
                pending = id;
            }
        }
    }
}

/// Runs `work` (a forward pass) on this thread while another computes the
/// grammar masks the `decodings` will need next: the mask depends only on
/// the tokens already emitted, so its cost hides behind the pass.
pub fn while_preparing<R>(decodings: Vec<&mut Decoding<'_>>, work: impl FnOnce() -> R) -> R {
    let mut constrained: Vec<&mut Decoding<'_>> = decodings
        .into_iter()
        .filter(|d| d.constraint.is_some())
        .collect();
    if constrained.is_empty() {
        return work();
    }
    std::thread::scope(|scope| {
        let masks = scope.spawn(move || {
            for d in constrained.iter_mut() {
                // an error shows again (and is reported) when the mask is used
                let _ = d.prepare_constraint();
            }
        });
        let out = work();
        // a panic there also shows again where the mask is used
        let _ = masks.join();
        out
    })
}

/// What [`Decoding::verify_pass`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Go on with this token, or stop.
    pub step: Step,
    /// Positions the sequence's cache keeps: those of the tokens emitted
    /// before the one `step` names (accepted drafts stay, the rest go).
    pub keep: usize,
}

/// What [`Decoding::step`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Feed this token (already reported) and call `step` again with its logits.
    Next(u32),
    /// Generation ended.
    Finished(FinishReason),
}

/// The sampling side of one generation, after its prompt has been run:
/// turns each logits row into a token, its text and, eventually, a finish
/// reason. [`generate`] drives it over one session; the server drives many
/// of them over one batched forward pass.
pub struct Decoding<'t> {
    tokenizer: &'t Tokenizer,
    params: GenerateParams,
    sampler: Sampler,
    decoder: StreamDecoder<'t>,
    history: Vec<u32>,
    constraint: Option<Constraint>,
    /// The generation so far (timings are the caller's to fill).
    pub out: Generation,
}

impl<'t> Decoding<'t> {
    /// Starts generating after `prompt` with `params`.
    pub fn new(
        tokenizer: &'t Tokenizer,
        prompt: &[u32],
        params: &GenerateParams,
        timings: Timings,
    ) -> Self {
        Self {
            tokenizer,
            params: params.clone(),
            sampler: Sampler::new(params.sampling.clone()),
            // Generated text continues the prompt: its first token keeps its leading space.
            decoder: tokenizer
                .stream_decoder(!params.render_special)
                .continuing(),
            history: prompt.to_vec(),
            constraint: params.grammar.as_ref().map(CompiledGrammar::start),
            out: Generation {
                prompt_tokens: prompt.to_vec(),
                tokens: Vec::new(),
                text: String::new(),
                finish_reason: FinishReason::Length,
                timings,
                top_logprobs: Vec::new(),
            },
        }
    }

    /// Samples the next token from `logits` (modified in place by the
    /// sampler) and reports it to `on_token`. `room` says whether the
    /// sequence can take one more position.
    pub fn step(
        &mut self,
        logits: &mut [f32],
        room: bool,
        on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
    ) -> Result<Step> {
        Ok(self.choose(logits, None, room, on_token)?.0)
    }

    /// [`Decoding::step`] for a position whose token was drafted: the
    /// token comes from [`Sampler::verify`]; also says whether it is the
    /// draft.
    pub fn step_verified(
        &mut self,
        logits: &mut [f32],
        draft: u32,
        room: bool,
        on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
    ) -> Result<(Step, bool)> {
        self.choose(logits, Some(draft), room, on_token)
    }

    /// Checks a verify pass: the pending token (at position `pos0`) then
    /// `draft` were fed, `rows` holds one logits row per fed token (row j:
    /// the distribution after the j-th). Drafts are verified in order
    /// ([`Sampler::verify`]) until one is replaced; all accepted, a bonus
    /// token is sampled from the last row. `max_seq` bounds the sequence.
    pub fn verify_pass(
        &mut self,
        rows: &mut [f32],
        draft: &[u32],
        pos0: usize,
        max_seq: usize,
        mut on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
    ) -> Result<Verdict> {
        let n = draft.len() + 1;
        if rows.is_empty() || !rows.len().is_multiple_of(n) {
            return Err(Error::Invalid(format!(
                "a verify pass of {n} tokens returned {} logits",
                rows.len()
            )));
        }
        let vocab = rows.len() / n;
        let t = &mut self.out.timings;
        t.verify_passes += 1;
        t.drafted_tokens += draft.len();
        for (j, row) in rows.chunks_exact_mut(vocab).enumerate() {
            // the token chosen here would be fed at position pos0 + j + 1
            let room = pos0 + j + 1 < max_seq;
            let (step, accepted) = match draft.get(j) {
                Some(&d) => self.step_verified(row, d, room, &mut on_token)?,
                None => (self.step(row, room, &mut on_token)?, false),
            };
            if accepted {
                self.out.timings.accepted_tokens += 1;
            }
            match step {
                // an accepted draft is in the cache already: check the next
                Step::Next(_) if accepted => continue,
                step => {
                    return Ok(Verdict {
                        step,
                        keep: pos0 + j + 1,
                    })
                }
            }
        }
        // unreachable: the last row has no draft, so it always returns
        Err(Error::Invalid("a verify pass ended without a token".into()))
    }

    /// Computes the grammar's mask for the next token now (a no-op without
    /// a grammar, or when it is known): see [`while_preparing`].
    pub fn prepare_constraint(&mut self) -> Result<()> {
        match &mut self.constraint {
            Some(c) => c.prepare(),
            None => Ok(()),
        }
    }

    /// Prompt and generated tokens so far (the last one sampled, not yet
    /// run).
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Tokens still allowed by `max_tokens`.
    pub fn tokens_left(&self) -> usize {
        self.params.max_tokens.saturating_sub(self.out.tokens.len())
    }

    /// The `n` emitted tokens before the last one: what a cache that could
    /// not keep them (recurrent state without a snapshot) runs again.
    pub fn replay(&self, n: usize) -> &[u32] {
        let end = self.history.len().saturating_sub(1);
        &self.history[end.saturating_sub(n)..end]
    }

    /// Samples (or, for a drafted position, verifies) the next token from
    /// `logits` and emits it.
    fn choose(
        &mut self,
        logits: &mut [f32],
        draft: Option<u32>,
        room: bool,
        on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
    ) -> Result<(Step, bool)> {
        let params = &self.params;
        if self.out.tokens.len() >= params.max_tokens {
            return Ok((Step::Finished(FinishReason::Length), false));
        }
        let top = if params.top_logprobs > 0 {
            top_logprobs(logits, params.top_logprobs)
        } else {
            Vec::new()
        };
        let raw = (params.top_logprobs > 0).then(|| logits.to_vec());
        if let Some(c) = &mut self.constraint {
            c.apply(logits)?;
        }
        let (id, accepted) = match draft {
            Some(d) => self.sampler.verify(logits, &self.history, d),
            None => (self.sampler.sample(logits, &self.history), false),
        };
        if let Some(c) = &mut self.constraint {
            c.commit(id)?;
        }
        let logprob = raw.as_deref().map(|l| token_logprob(l, id));
        let step = self.emit(id, top, logprob, room, on_token)?;
        // A complete grammar allows nothing more: the output ends here.
        let complete = self
            .constraint
            .as_ref()
            .is_some_and(Constraint::is_complete);
        match step {
            Step::Next(_) if complete => Ok((Step::Finished(FinishReason::Stop), accepted)),
            step => Ok((step, accepted)),
        }
    }

    /// Records `id` and reports it; decides whether generation goes on.
    fn emit(
        &mut self,
        id: u32,
        top: Vec<(u32, f32)>,
        logprob: Option<f32>,
        room: bool,
        mut on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
    ) -> Result<Step> {
        let params = &self.params;
        self.out.tokens.push(id);
        self.history.push(id);
        let eog =
            (self.tokenizer.is_eog(id) || params.stop_tokens.contains(&id)) && !params.ignore_eos;
        let piece = if eog {
            String::new()
        } else {
            self.decoder.push(id)?
        };
        self.out.text.push_str(&piece);
        let flow = on_token(&TokenEvent {
            id,
            text: &piece,
            top_logprobs: &top,
            logprob,
        });
        if params.top_logprobs > 0 {
            self.out.top_logprobs.push(top);
        }
        Ok(Step::Finished(if eog {
            FinishReason::Stop
        } else if flow.is_break() {
            FinishReason::Cancelled
        } else if self.out.tokens.len() >= params.max_tokens {
            FinishReason::Length
        } else if !room {
            FinishReason::ContextFull
        } else {
            return Ok(Step::Next(id));
        }))
    }

    /// Ends the generation: flushes text held back by the stream decoder
    /// (reported with id `u32::MAX`) and returns the result.
    pub fn finish(
        mut self,
        reason: FinishReason,
        mut on_token: impl FnMut(&TokenEvent<'_>) -> ControlFlow<()>,
    ) -> Generation {
        let tail = self.decoder.finish();
        if !tail.is_empty() {
            self.out.text.push_str(&tail);
            let _ = on_token(&TokenEvent {
                id: u32::MAX,
                text: &tail,
                top_logprobs: &[],
                logprob: None,
            });
        }
        self.out.finish_reason = reason;
        self.out
    }
}
