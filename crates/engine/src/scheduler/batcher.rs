//! The batch thread: continuous batching over the slots of one
//! [`EngineBatch`]. Each step admits queued jobs into free slots, feeds every
//! decoding sequence its last token (and, when it speculates, its drafts)
//! and prefilling sequences a share of their prompts, runs ONE forward pass
//! for all of them, samples (or verifies) each row and streams the text. A
//! client that disconnects is dropped at the next step; one that reads
//! slowly pauses only its own sequence.
//!
//! Speculation composes with batching: a speculating sequence's item asks
//! for every row's logits, so the drafts of several sequences are verified
//! in the same pass; its cache then drops the rejected drafts. N-gram
//! drafts cost nothing; a draft model runs per slot (its own session per
//! slot, kept across requests for prefix reuse) before the pass.
//!
//! A panic serving one request fails that request only. Per-sequence work
//! (admission, drafting, sampling, finishing) runs under `catch_unwind` and
//! a panic there ends just that sequence with an error. A panic inside the
//! shared forward pass cannot be pinned on one sequence, so every sequence
//! of that pass is rolled back to where it was and retried alone, one pass
//! each (a quarantine); the one that panics alone fails, the rest go on. A
//! panic anywhere else stops the thread, and the scheduler then refuses new
//! work with the panic's message instead of hanging.

use super::stop::{StopMatcher, StopOutcome};
use super::{
    Event, EventSink, Finish, Job, SchedulerCounters, SendError, Shared, Summary, TokenInfo,
};
use crate::generate::while_preparing;
use crate::prefix_cache::BLOCK;
use crate::speculative::{DraftProposer, NgramProposer, Proposer, ProposerKind};
use crate::{
    check_request, BatchItem, Decoding, EngineBatch, FinishReason, LogitsMode, Step, Timings,
    TokenEvent,
};
use std::any::Any;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows per step (decode tokens first, then prompt pieces): one pass of the
/// CPU backend, so a long prompt delays decoding sequences by at most one
/// pass per step.
const PREFILL_BUDGET: usize = 256;

/// How long an idle batch thread sleeps before rechecking for shutdown.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Pause between steps when every sequence waits on a slow client.
const BACKPRESSURE_WAIT: Duration = Duration::from_millis(2);

/// Events a finished generation still has to deliver, and where.
struct Outbox {
    events: Box<dyn EventSink>,
    queue: VecDeque<Event>,
}

impl Outbox {
    /// Sends what the channel takes now. `false` once the client is gone.
    fn flush(&mut self) -> bool {
        while let Some(ev) = self.queue.pop_front() {
            match self.events.try_send(ev) {
                Ok(()) => {}
                Err(SendError::Full(ev)) => {
                    self.queue.push_front(ev);
                    return true;
                }
                Err(SendError::Closed) => return false,
            }
        }
        true
    }
}

/// Stop-string matching and event assembly of one generation.
struct Stream {
    out: Outbox,
    matcher: StopMatcher,
    pending: Vec<TokenInfo>,
    stopped: Option<String>,
    want_logprobs: bool,
}

impl Stream {
    fn emit(&mut self, text: String) {
        if !text.is_empty() {
            let tokens = std::mem::take(&mut self.pending);
            self.out.queue.push_back(Event::Delta { text, tokens });
        }
    }

    /// Takes one token event; `Break` once a stop string matched.
    fn on_token(&mut self, ev: &TokenEvent<'_>, is_eog: bool) -> ControlFlow<()> {
        if self.stopped.is_some() {
            return ControlFlow::Break(());
        }
        if self.want_logprobs && ev.id != u32::MAX && !is_eog {
            self.pending.push(TokenInfo {
                id: ev.id,
                logprob: ev.logprob.unwrap_or(f32::NEG_INFINITY),
                top: ev.top_logprobs.to_vec(),
            });
        }
        match self.matcher.push(ev.text) {
            StopOutcome::Continue(text) => {
                self.emit(text);
                ControlFlow::Continue(())
            }
            StopOutcome::Stopped { text, stop } => {
                self.emit(text);
                self.stopped = Some(stop);
                ControlFlow::Break(())
            }
        }
    }
}

/// How a generation drafts.
enum Drafting {
    /// It does not.
    Off,
    /// From its own history.
    Ngram(NgramProposer),
    /// With the slot's draft-model session, up to `m` tokens.
    Model { m: usize },
}

/// A generation holding a slot.
struct Active<'e> {
    slot: usize,
    /// Prompt tokens already in the slot's cache.
    fed: usize,
    /// The token to feed next once decoding.
    next: Option<u32>,
    /// Emitted tokens to run again before `next`: those a cache without a
    /// recurrent-state snapshot dropped when drafts were rejected.
    replay: Vec<u32>,
    drafting: Drafting,
    /// This step's drafts, fed after `next`.
    drafts: Vec<u32>,
    decoding: Decoding<'e>,
    stream: Stream,
    started: Instant,
    decode_started: Option<Instant>,
}

impl Active<'_> {
    fn prompt(&self) -> &[u32] {
        &self.decoding.out.prompt_tokens
    }

    fn prefilling(&self) -> bool {
        self.fed < self.prompt().len()
    }
}

/// Runs until the process exits. Should the loop itself panic (a bug
/// outside the per-sequence guards), the scheduler is marked failed: queued
/// and later jobs get an error, running ones see their stream end.
pub(super) fn run(sh: Arc<Shared>, batch: EngineBatch) {
    let result = catch_unwind(AssertUnwindSafe(|| run_loop(&sh, batch)));
    if let Err(panic) = result {
        sh.counters.panics.fetch_add(1, Ordering::Relaxed);
        sh.fail(format!(
            "the batch thread stopped after an internal error: {}",
            panic_message(&*panic)
        ));
    }
}

fn run_loop(sh: &Shared, mut batch: EngineBatch) {
    let engine = sh.engine.clone();
    let tokenizer = &engine.tokenizer;
    let mut slots: Vec<Option<Active<'_>>> = (0..batch.n_seqs()).map(|_| None).collect();
    let mut drafters: Vec<Option<DraftProposer>> = (0..slots.len()).map(|_| None).collect();
    let mut draining: Vec<Outbox> = Vec::new();
    let mut tokens: Vec<u32> = Vec::new();
    let mut last_used = vec![0u64; slots.len()];
    // Sequences of a pass that panicked, to be run alone one pass each.
    let mut quarantine: VecDeque<usize> = VecDeque::new();
    loop {
        fail::fail_point!("batch-loop");
        admit(sh, &mut batch, &mut slots, &mut last_used, tokenizer);
        draining.retain_mut(|o| o.flush() && !o.queue.is_empty());
        let cancel_all = sh.cancelled();
        // Deliver what earlier steps produced; drop sequences whose client left.
        for slot in slots.iter_mut() {
            let Some(a) = slot else { continue };
            let alive = a.stream.out.flush() && !a.stream.out.events.is_closed();
            if !alive || cancel_all {
                finish(sh, slot, FinishReason::Cancelled, &mut draining);
            }
        }
        quarantine.retain(|&s| slots[s].is_some());
        publish_positions(sh, &batch, &slots);
        propose(sh, &batch, &mut slots, &mut drafters);
        // Prompt pieces end at block boundaries where recurrent state is
        // only held at a forward call's end and blocks are being saved.
        let align = batch.prefix_stats().is_some() && !batch.can_copy_prefix();
        let planned = plan(&slots, &mut tokens, quarantine.front().copied(), align);
        if planned.is_empty() {
            if slots.iter().any(Option::is_some) || !draining.is_empty() {
                std::thread::sleep(BACKPRESSURE_WAIT);
            } else {
                wait_for_work(sh);
            }
            continue;
        }
        let items: Vec<BatchItem<'_>> = planned
            .iter()
            .map(|&(seq, start, len, logits)| BatchItem {
                seq,
                tokens: &tokens[start..start + len],
                logits,
            })
            .collect();
        match step(sh, &mut batch, &mut slots, &items, &mut draining) {
            Pass::Done if quarantine.front() == Some(&items[0].seq) => {
                quarantine.pop_front();
            }
            Pass::Done => {}
            Pass::Panicked(seqs) => quarantine.extend(seqs),
        }
    }
}

/// Publishes the positions the slots' caches hold and their bytes (for
/// `/metrics`).
fn publish_positions(sh: &Shared, batch: &EngineBatch, slots: &[Option<Active<'_>>]) {
    let held = |i: usize| batch.position(i);
    let all: usize = (0..slots.len()).map(held).sum();
    let busy: usize = slots.iter().flatten().map(|a| held(a.slot)).sum();
    sh.cached_positions.store(all, Ordering::Relaxed);
    sh.busy_positions.store(busy, Ordering::Relaxed);
    sh.kv_cache_bytes
        .store(batch.cache_bytes(), Ordering::Relaxed);
    if let Some(stats) = batch.prefix_stats() {
        *sh.prefix_stats.lock().unwrap_or_else(|e| e.into_inner()) = stats;
    }
}

/// The text of a caught panic.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// The error a request gets when serving it panicked.
/// (Every caught panic is described once, here, and counted.)
fn internal_error(sh: &Shared, panic: &(dyn Any + Send)) -> String {
    sh.counters.panics.fetch_add(1, Ordering::Relaxed);
    format!(
        "internal error while serving this request (a bug; other requests are unaffected): {}",
        panic_message(panic)
    )
}

/// Sleeps until a job is queued (or shutdown begins, or a timeout).
fn wait_for_work(sh: &Shared) {
    let st = sh.lock();
    if st.queue.is_empty() && !sh.cancelled() {
        let _ = sh.wake.wait_timeout(st, IDLE_WAIT);
    }
}

/// Moves queued jobs into free slots, each to the free slot that can reuse
/// the longest prefix of its prompt (shared tokens the backend can return
/// to: recurrent state only at its snapshots; ties: the slot used longest
/// ago, so other slots' caches survive for their own follow-ups).
fn admit<'e>(
    sh: &Shared,
    batch: &mut EngineBatch,
    slots: &mut [Option<Active<'e>>],
    last_used: &mut [u64],
    tokenizer: &'e crate::Tokenizer,
) {
    let mut st = sh.lock();
    loop {
        let free: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].is_none()).collect();
        if free.is_empty() {
            break;
        }
        let Some(job) = st.queue.pop_front() else {
            break;
        };
        if job.params.reuse_prefix && waits_for_shared_prefill(batch, slots, &job.prompt) {
            // Admitted once that prefill is done (FIFO: nothing overtakes it).
            st.queue.push_front(job);
            break;
        }
        if job.events.is_closed() {
            sh.counters.cancelled.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let Job {
            prompt,
            params,
            stop,
            events,
        } = job;
        let drafting = match params.speculative {
            None => Drafting::Off,
            Some(p) if p.proposer == ProposerKind::Ngram => Drafting::Ngram(NgramProposer::new(p)),
            Some(_) if sh.draft.is_none() => {
                let _ = events.try_send(Event::Error(
                    "this server has no draft model (start it with --spec draft --draft-model PATH)"
                        .into(),
                ));
                continue;
            }
            Some(p) => Drafting::Model { m: p.m },
        };
        let placed = catch_unwind(AssertUnwindSafe(|| {
            fail::fail_point!("batch-admit");
            check_request(&prompt, &params, batch.max_seq()).map_err(|e| e.to_string())?;
            let slot = free
                .iter()
                .copied()
                .max_by_key(|&i| {
                    // A job that refuses its cached prefix takes the slot
                    // used longest ago, sparing the others' caches.
                    let reusable = if params.reuse_prefix {
                        batch.reusable_for(i, &prompt)
                    } else {
                        0
                    };
                    (reusable, u64::MAX - last_used[i])
                })
                .unwrap_or(free[0]);
            // A busy slot, or the prefix cache, may hold more of the prompt
            // than any free slot: copy that into the free slot used
            // longest ago.
            let own = batch.reusable_for(slot, &prompt);
            let source = (0..slots.len())
                .filter(|&i| slots[i].is_some())
                .map(|i| (batch.copyable_for(i, &prompt), i))
                .max();
            let from_cache = if params.reuse_prefix {
                batch.prefix_lookup(&prompt)
            } else {
                0
            };
            let oldest = free
                .iter()
                .copied()
                .min_by_key(|&i| last_used[i])
                .unwrap_or(slot);
            let copied = match source {
                _ if !params.reuse_prefix => None,
                Some((shared, src)) if shared > own && shared >= from_cache => {
                    match batch.copy_prefix(src, oldest, &prompt) {
                        0 if from_cache > own => {
                            Some((oldest, batch.load_cached_prefix(oldest, &prompt)))
                        }
                        n => Some((oldest, n)),
                    }
                }
                _ if from_cache > own => Some((oldest, batch.load_cached_prefix(oldest, &prompt))),
                _ => None,
            };
            let (slot, reused) = match copied {
                Some((dst, n)) if n > 0 => (dst, n),
                _ if !params.reuse_prefix => (slot, batch.truncate(slot, 0)),
                _ => (slot, batch.reuse_prefix(slot, &prompt)),
            };
            let timings = Timings {
                reused_tokens: reused,
                prefill_tokens: prompt.len() - reused,
                ..Timings::default()
            };
            let decoding = Decoding::new(tokenizer, &prompt, &params, timings);
            Ok::<_, String>((slot, reused, decoding))
        }));
        let (slot, reused, decoding) = match placed {
            Ok(Ok(placed)) => placed,
            Ok(Err(message)) => {
                let _ = events.try_send(Event::Error(message));
                continue;
            }
            Err(panic) => {
                let _ = events.try_send(Event::Error(internal_error(sh, &*panic)));
                continue;
            }
        };
        last_used[slot] = last_used.iter().max().map_or(1, |m| m + 1);
        let want_logprobs = params.top_logprobs > 0;
        slots[slot] = Some(Active {
            slot,
            decoding,
            fed: reused,
            next: None,
            replay: Vec::new(),
            drafting,
            drafts: Vec::new(),
            stream: Stream {
                out: Outbox {
                    events,
                    queue: VecDeque::new(),
                },
                matcher: StopMatcher::new(stop),
                pending: Vec::new(),
                stopped: None,
                want_logprobs,
            },
            started: Instant::now(),
            decode_started: None,
        });
        st.busy += 1;
    }
}

/// Whether a job for `prompt` should wait: a busy slot is prefilling a
/// prompt that shares with this one all of its prefix (`n` > 1 choices, a
/// retried request) or at least half of it and two prefix-cache blocks (a
/// common system prompt or document), and copying its cache once it is
/// done saves running the same tokens twice. Not on backends that cannot
/// copy a cache.
fn waits_for_shared_prefill(
    batch: &EngineBatch,
    slots: &[Option<Active<'_>>],
    prompt: &[u32],
) -> bool {
    let wanted = prompt.len().saturating_sub(1);
    if wanted == 0 || !batch.can_copy_prefix() {
        return false;
    }
    slots.iter().flatten().any(|a| {
        let shared = crate::batch::reusable_prefix(a.prompt(), prompt);
        let worth = shared == wanted || (shared >= 2 * BLOCK && 2 * shared >= prompt.len());
        a.prefilling() && worth && batch.shareable_for(a.slot, prompt) < shared
    })
}

/// Drafts for every decoding sequence that speculates and waits on no
/// client, within the step's row budget (drafts are rows of the pass). A
/// draft model that fails turns drafting off for that generation (its
/// output does not depend on drafts).
fn propose(
    sh: &Shared,
    batch: &EngineBatch,
    slots: &mut [Option<Active<'_>>],
    drafters: &mut [Option<DraftProposer>],
) {
    let decoding = slots
        .iter()
        .flatten()
        .filter(|a| a.next.is_some() && a.stream.out.queue.is_empty())
        .count();
    let mut budget = PREFILL_BUDGET.saturating_sub(decoding);
    let max_seq = batch.max_seq();
    for a in slots.iter_mut().flatten() {
        a.drafts.clear();
        if a.next.is_none() || !a.replay.is_empty() || !a.stream.out.queue.is_empty() {
            continue;
        }
        // room for the pending token and the drafts, no more drafts than
        // tokens left to generate
        let room = max_seq.saturating_sub(batch.position(a.slot) + 1);
        let max = a.decoding.tokens_left().min(room).min(budget);
        if max == 0 {
            continue;
        }
        let history = a.decoding.history();
        let drafter = &mut drafters[a.slot];
        let result = catch_unwind(AssertUnwindSafe(|| match &mut a.drafting {
            Drafting::Off => Ok(()),
            Drafting::Ngram(p) => p.draft(history, max, &mut a.drafts),
            Drafting::Model { m } => match (&mut *drafter, &sh.draft) {
                (Some(p), _) => p.draft(history, max.min(*m), &mut a.drafts),
                // The slot's proposer outlives this request: its length
                // cap is each call's `max` (this request's m), not its own.
                (slot @ None, Some(d)) => DraftProposer::new(
                    &d.engine,
                    &sh.engine.tokenizer,
                    max_seq,
                    usize::MAX,
                    d.p_min,
                )
                .and_then(|p| slot.insert(p).draft(history, max.min(*m), &mut a.drafts)),
                (None, None) => Ok(()),
            },
        }));
        // Drafts never change the output, so a drafter that fails (or
        // panics: its session may be half-advanced, so it is dropped) only
        // turns drafting off for this generation.
        if !matches!(result, Ok(Ok(()))) {
            if result.is_err() {
                sh.counters.panics.fetch_add(1, Ordering::Relaxed);
                *drafter = None;
            }
            a.drafting = Drafting::Off;
            a.drafts.clear();
        }
        a.drafts.truncate(max);
        budget -= a.drafts.len();
    }
}

/// One sequence's share of a step: slot, tokens (in the step's token
/// buffer, from `start`, `len` of them) and which logits rows it wants.
type Planned = (usize, usize, usize, LogitsMode);

/// This step's batch: every decoding sequence's next token (after any
/// replay, before its drafts), then prompt pieces within
/// [`PREFILL_BUDGET`]; sequences whose client is behind wait. With `solo`,
/// only that sequence runs (a quarantined one, see [`run`]); with `align`,
/// prompt pieces end at prefix-cache block boundaries ([`prefill_piece`]).
/// Tokens are copied into `tokens` so the batch does not borrow the slots.
fn plan(
    slots: &[Option<Active<'_>>],
    tokens: &mut Vec<u32>,
    solo: Option<usize>,
    align: bool,
) -> Vec<Planned> {
    tokens.clear();
    let ready = slots
        .iter()
        .flatten()
        .filter(|a| solo.is_none_or(|s| s == a.slot))
        .filter(|a| a.stream.out.queue.is_empty());
    let mut planned = Vec::new();
    // Decode rows count against the budget too: the whole step stays one pass.
    let decoding: usize = ready
        .clone()
        .filter(|a| a.next.is_some())
        .map(|a| 1 + a.replay.len() + a.drafts.len())
        .sum();
    let mut budget = PREFILL_BUDGET.saturating_sub(decoding);
    for a in ready {
        let start = tokens.len();
        if let Some(next) = a.next {
            tokens.extend_from_slice(&a.replay);
            tokens.push(next);
            tokens.extend_from_slice(&a.drafts);
            let mode = if a.drafts.is_empty() {
                LogitsMode::Last
            } else {
                LogitsMode::All
            };
            planned.push((a.slot, start, tokens.len() - start, mode));
        } else if a.prefilling() && budget > 0 {
            let prompt = a.prompt();
            let left = prompt.len() - a.fed;
            let take = if align {
                prefill_piece(a.fed, left, budget)
            } else {
                left.min(budget)
            };
            budget -= take;
            tokens.extend_from_slice(&prompt[a.fed..a.fed + take]);
            let mode = if a.fed + take == prompt.len() {
                LogitsMode::Last
            } else {
                LogitsMode::None
            };
            planned.push((a.slot, start, take, mode));
        }
    }
    planned
}

/// Prompt tokens to feed from position `fed` with `left` to go and
/// `budget` rows free: all that fit, but a piece that stops short of the
/// prompt's end stops at a prefix-cache block boundary where it can, so
/// recurrent state is held at a block's end when the block is saved (and
/// a later prompt can resume there).
fn prefill_piece(fed: usize, left: usize, budget: usize) -> usize {
    if left <= budget {
        return left;
    }
    let aligned = (fed + budget) / BLOCK * BLOCK;
    if aligned > fed {
        aligned - fed
    } else {
        budget
    }
}

/// One sequence's part of a pass.
struct Fed {
    seq: usize,
    /// Tokens fed.
    n: usize,
    /// Which logits rows come back.
    wants: LogitsMode,
    /// Its position before the pass.
    pos0: usize,
}

/// How a pass went.
enum Pass {
    /// It ran (sequences whose own work panicked have been failed).
    Done,
    /// The forward pass of several sequences panicked: they are rolled back
    /// and are to be retried alone.
    Panicked(Vec<usize>),
}

/// Runs one forward pass over `items` and advances every sequence in it.
fn step(
    sh: &Shared,
    batch: &mut EngineBatch,
    slots: &mut [Option<Active<'_>>],
    items: &[BatchItem<'_>],
    draining: &mut Vec<Outbox>,
) -> Pass {
    // Copy what is needed of the plan (`items` borrows the slots), with
    // each sequence's position (the rows borrow `batch` until every
    // sequence is sampled).
    let max_seq = batch.max_seq();
    let fed: Vec<Fed> = items
        .iter()
        .map(|i| Fed {
            seq: i.seq,
            n: i.tokens.len(),
            wants: i.logits,
            pos0: batch.position(i.seq),
        })
        .collect();
    let started = Instant::now();
    let pass: &mut EngineBatch = batch;
    // Grammar masks for the next tokens are computed while the pass runs.
    let decodings = slots
        .iter_mut()
        .flatten()
        .map(|a| &mut a.decoding)
        .collect();
    let result = while_preparing(decodings, || {
        catch_unwind(AssertUnwindSafe(move || {
            fail::fail_point!("batch-forward");
            fail::fail_point!("batch-forward-shared", items.len() > 1, |_| {
                panic!("injected panic in a shared pass")
            });
            { pass }.forward(items)
        }))
    });
    let elapsed = started.elapsed();
    let logits = match result {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => {
            fail_all(sh, batch, slots, &fed, &e.to_string(), draining);
            return Pass::Done;
        }
        Err(panic) => return roll_back(sh, batch, slots, &fed, &*panic, draining),
    };
    account_time(&sh.counters, slots, &fed, elapsed);
    let n_vocab = sh.engine.vocab_size();
    let mut row = 0;
    // Caches to cut back to the accepted drafts once the rows are done with.
    let mut keep = Vec::new();
    // Sequences whose own work panicked (failed once the rows are released).
    let mut panicked = Vec::new();
    for &Fed {
        seq,
        n,
        wants,
        pos0,
    } in &fed
    {
        let slot = &mut slots[seq];
        let Some(a) = slot.as_mut() else { continue };
        let n_rows = match wants {
            LogitsMode::None => 0,
            LogitsMode::Last => 1,
            LogitsMode::All => n,
        };
        let rows = &mut logits[row * n_vocab..(row + n_rows) * n_vocab];
        row += n_rows;
        let tokenizer = &sh.engine.tokenizer;
        let advanced = catch_unwind(AssertUnwindSafe(|| {
            fail::fail_point!("batch-sample");
            advance(a, rows, wants, n, pos0, max_seq, tokenizer)
        }));
        match advanced {
            Ok(None) => {}
            Ok(Some((outcome, verified))) => {
                if let Some(k) = verified {
                    keep.push((seq, k));
                }
                match outcome {
                    Ok(Step::Next(id)) => a.next = Some(id),
                    Ok(Step::Finished(reason)) => finish(sh, slot, reason, draining),
                    Err(e) => {
                        a.stream.out.queue.push_back(Event::Error(e.to_string()));
                        finish(sh, slot, FinishReason::Cancelled, draining);
                    }
                }
            }
            Err(panic) => panicked.push((seq, internal_error(sh, &*panic))),
        }
    }
    for (seq, message) in panicked {
        abandon(sh, batch, slots, seq, message, draining);
    }
    for (seq, keep) in keep {
        let kept = batch.truncate(seq, keep);
        if let Some(a) = slots[seq].as_mut() {
            if kept < keep {
                a.replay = a.decoding.replay(keep - kept).to_vec();
            }
        }
    }
    Pass::Done
}

/// Advances one sequence past its part of a pass: prompt bookkeeping, then
/// sampling (or verifying drafts) where it asked for logits. Returns the
/// step's outcome and, after a verify pass, the positions to keep; `None`
/// for a prompt piece without logits.
type Advanced = (crate::Result<Step>, Option<usize>);
fn advance(
    a: &mut Active<'_>,
    rows: &mut [f32],
    wants: LogitsMode,
    n: usize,
    pos0: usize,
    max_seq: usize,
    tokenizer: &crate::Tokenizer,
) -> Option<Advanced> {
    let decode = a.next.take().is_some();
    if decode {
        a.replay.clear();
    } else {
        a.fed += n;
        if !a.prefilling() {
            a.decoding.out.timings.prefill = a.started.elapsed();
            a.decode_started = Some(Instant::now());
        }
    }
    if wants == LogitsMode::None {
        return None;
    }
    let Active {
        decoding,
        stream,
        drafts,
        ..
    } = a;
    let emitted = decoding.out.tokens.len();
    let on_token = |ev: &TokenEvent<'_>| stream.on_token(ev, tokenizer.is_eog(ev.id));
    let mut verified = None;
    let outcome = if drafts.is_empty() {
        let room = pos0 + n < max_seq;
        decoding.step(rows, room, on_token)
    } else {
        decoding
            .verify_pass(rows, drafts, pos0, max_seq, on_token)
            .map(|verdict| {
                verified = Some(verdict.keep);
                verdict.step
            })
    };
    if decode {
        a.decoding.out.timings.decode_tokens += a.decoding.out.tokens.len() - emitted;
    }
    Some((outcome, verified))
}

/// After a forward pass panicked: every sequence in it goes back to where
/// it was before the pass. Alone in the pass, the sequence is the cause and
/// fails; otherwise all are retried alone ([`Pass::Panicked`]). A sequence
/// whose recurrent state cannot return to its position fails too.
fn roll_back(
    sh: &Shared,
    batch: &mut EngineBatch,
    slots: &mut [Option<Active<'_>>],
    fed: &[Fed],
    panic: &(dyn Any + Send),
    draining: &mut Vec<Outbox>,
) -> Pass {
    let message = internal_error(sh, panic);
    let mut retry = Vec::new();
    for f in fed {
        if slots[f.seq].is_none() {
            continue;
        }
        let restored = batch.truncate(f.seq, f.pos0) == f.pos0;
        if restored && fed.len() > 1 {
            retry.push(f.seq);
        } else {
            abandon(sh, batch, slots, f.seq, message.clone(), draining);
        }
    }
    if retry.is_empty() {
        Pass::Done
    } else {
        Pass::Panicked(retry)
    }
}

/// Fails the generation in `seq` with `message` without running any more of
/// its code (which may be what panicked): the client gets the error and the
/// slot starts clean.
fn abandon(
    sh: &Shared,
    batch: &mut EngineBatch,
    slots: &mut [Option<Active<'_>>],
    seq: usize,
    message: String,
    draining: &mut Vec<Outbox>,
) {
    let Some(a) = slots[seq].take() else { return };
    batch.truncate(seq, 0);
    let mut out = a.stream.out;
    out.queue.push_back(Event::Error(message));
    if out.flush() && !out.queue.is_empty() {
        draining.push(out);
    }
    sh.lock().busy -= 1;
}

/// Ends every sequence of a failed pass with `message` (their slots may
/// hold partial prefills, so they start clean).
fn fail_all(
    sh: &Shared,
    batch: &mut EngineBatch,
    slots: &mut [Option<Active<'_>>],
    fed: &[Fed],
    message: &str,
    draining: &mut Vec<Outbox>,
) {
    for f in fed {
        abandon(sh, batch, slots, f.seq, message.to_string(), draining);
    }
}

/// Splits the step's time between prefill and decode by token share.
fn account_time(
    counters: &SchedulerCounters,
    slots: &[Option<Active<'_>>],
    fed: &[Fed],
    elapsed: Duration,
) {
    let (mut prefill, mut decode) = (0usize, 0usize);
    for f in fed {
        match &slots[f.seq] {
            Some(a) if a.next.is_some() => decode += f.n,
            Some(_) => prefill += f.n,
            None => {}
        }
    }
    let total = (prefill + decode).max(1) as f64;
    SchedulerCounters::add_time(
        &counters.prefill_us,
        elapsed.mul_f64(prefill as f64 / total),
    );
    SchedulerCounters::add_time(&counters.decode_us, elapsed.mul_f64(decode as f64 / total));
    counters
        .decode_tokens
        .fetch_add(decode as u64, Ordering::Relaxed);
    counters.batch_passes.fetch_add(1, Ordering::Relaxed);
    counters
        .batch_sequences
        .fetch_add(fed.len() as u64, Ordering::Relaxed);
}

/// Ends the generation in `slot`: flushes held-back text, records metrics,
/// queues the summary and frees the slot (its cache stays for prefix reuse).
fn finish(
    sh: &Shared,
    slot: &mut Option<Active<'_>>,
    reason: FinishReason,
    draining: &mut Vec<Outbox>,
) {
    let Some(a) = slot.take() else { return };
    sh.lock().busy -= 1;
    let Active {
        decoding,
        fed,
        mut stream,
        started,
        decode_started,
        ..
    } = a;
    let summed = catch_unwind(AssertUnwindSafe(|| {
        let tokenizer = &sh.engine.tokenizer;
        let mut generation =
            decoding.finish(reason, |ev| stream.on_token(ev, tokenizer.is_eog(ev.id)));
        if stream.stopped.is_none() {
            let rest = stream.matcher.finish();
            stream.emit(rest);
        }
        if let Some(t) = decode_started {
            generation.timings.decode = t.elapsed();
        }
        let timings = generation.timings;
        let m = &sh.counters;
        let prefilled = fed - timings.reused_tokens;
        m.prompt_tokens
            .fetch_add(prefilled as u64, Ordering::Relaxed);
        m.cached_prompt_tokens
            .fetch_add(timings.reused_tokens as u64, Ordering::Relaxed);
        m.generated_tokens
            .fetch_add(generation.tokens.len() as u64, Ordering::Relaxed);
        m.verify_passes
            .fetch_add(timings.verify_passes as u64, Ordering::Relaxed);
        m.drafted_tokens
            .fetch_add(timings.drafted_tokens as u64, Ordering::Relaxed);
        m.accepted_tokens
            .fetch_add(timings.accepted_tokens as u64, Ordering::Relaxed);
        let finish = match (&stream.stopped, reason) {
            (Some(_), _) => Finish::StopSequence,
            (None, FinishReason::Stop) => Finish::Eos,
            (None, FinishReason::Length) => Finish::Length,
            (None, FinishReason::ContextFull) => Finish::ContextFull,
            (None, FinishReason::Cancelled) => Finish::Cancelled,
        };
        if finish == Finish::Cancelled {
            m.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        Event::Done(Summary {
            finish,
            stop_sequence: stream.stopped.take(),
            prompt_tokens: generation.prompt_tokens.len(),
            cached_tokens: timings.reused_tokens,
            completion_tokens: generation.tokens.len(),
            seconds: started.elapsed().as_secs_f64(),
            decode_tps: timings.decode_tps(),
            drafted_tokens: timings.drafted_tokens,
            accepted_tokens: timings.accepted_tokens,
        })
    }));
    // A summary that could not be built is an error to the client.
    let last = summed.unwrap_or_else(|panic| Event::Error(internal_error(sh, &*panic)));
    stream.out.queue.push_back(last);
    if stream.out.flush() && !stream.out.queue.is_empty() {
        draining.push(stream.out);
    }
}

#[cfg(test)]
mod tests {
    use super::{prefill_piece, BLOCK};

    #[test]
    fn prefill_pieces_end_at_block_boundaries_when_cut() {
        // The rest fits: all of it.
        assert_eq!(prefill_piece(10, 100, 256), 100);
        // Cut by the budget: up to the last boundary within it.
        assert_eq!(prefill_piece(0, 1000, 253), 3 * BLOCK);
        assert_eq!(prefill_piece(3 * BLOCK, 1000, 253), 3 * BLOCK);
        assert_eq!(prefill_piece(10, 1000, 256), 4 * BLOCK - 10);
        // No boundary within the budget: the whole budget.
        assert_eq!(prefill_piece(BLOCK + 1, 1000, 20), 20);
    }
}
