//! Slots and the request queue: `--parallel` worker threads, each owning an
//! engine session (its own KV cache), fed from a bounded FIFO queue. A new
//! request goes to the free slot whose cached tokens share the longest prefix
//! with its prompt. Generation runs on these threads, never on the async
//! runtime. Sequences run concurrently on threads; there is no batched
//! multi-sequence forward pass yet.

use crate::error::Error;
use crate::metrics::{Gauges, Metrics};
use crate::stop::{StopMatcher, StopOutcome};
use anedvd_engine::{generate, Engine, EngineSession, FinishReason, GenerateParams, TokenEvent};
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::mpsc::Sender;

/// One generated token with its log-probabilities (when requested).
#[derive(Debug, Clone)]
pub struct TokenInfo {
    /// Token id.
    pub id: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// The most likely alternatives at that step.
    pub top: Vec<(u32, f32)>,
}

/// Why a generation ended, in API terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// End-of-generation token.
    Eos,
    /// A stop string matched.
    StopSequence,
    /// `max_tokens` reached.
    Length,
    /// The context is full.
    ContextFull,
    /// The client went away or the server is shutting down.
    Cancelled,
}

/// Totals of a finished generation.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Why it ended.
    pub finish: Finish,
    /// The stop string that matched, if any.
    pub stop_sequence: Option<String>,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the slot's cache.
    pub cached_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Prefill plus decode time in seconds.
    pub seconds: f64,
    /// Decode tokens per second.
    pub decode_tps: f64,
}

/// What a slot sends back while serving a job.
#[derive(Debug, Clone)]
pub enum Event {
    /// New text (never part of a stop string) and the tokens that produced it.
    Delta {
        /// Text.
        text: String,
        /// Tokens with log-probabilities (empty unless requested).
        tokens: Vec<TokenInfo>,
    },
    /// Generation ended.
    Done(Summary),
    /// The engine failed.
    Error(String),
}

/// A generation request ready to run.
#[derive(Debug)]
pub struct Job {
    /// Prompt ids.
    pub prompt: Vec<u32>,
    /// Generation parameters.
    pub params: GenerateParams,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Where events go (bounded: a client that stops reading pauses its
    /// slot); closing the receiver cancels the job.
    pub events: Sender<Event>,
}

/// Why a job was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// All slots busy and the queue is full.
    QueueFull,
    /// The server is shutting down.
    ShuttingDown,
}

struct FreeSlot {
    cached: Vec<u32>,
    tx: mpsc::Sender<Job>,
}

struct State {
    free: Vec<FreeSlot>,
    queue: VecDeque<Job>,
}

struct Shared {
    state: Mutex<State>,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    queue_capacity: usize,
    slots: usize,
    cancel_all: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The slots and the queue.
pub struct Scheduler {
    shared: Arc<Shared>,
}

impl Scheduler {
    /// Opens `slots` sessions of `max_seq` positions and starts one worker
    /// thread per slot; at most `queue_capacity` jobs wait beyond them.
    pub fn start(
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        slots: usize,
        max_seq: usize,
        queue_capacity: usize,
    ) -> Result<Scheduler, Error> {
        if slots == 0 {
            return Err(Error::Config("--parallel must be at least 1".into()));
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                free: Vec::new(),
                queue: VecDeque::new(),
            }),
            engine: engine.clone(),
            metrics,
            queue_capacity,
            slots,
            cancel_all: AtomicBool::new(false),
        });
        for slot in 0..slots {
            let session = engine.new_session(max_seq)?;
            let (tx, rx) = mpsc::channel::<Job>();
            shared.lock().free.push(FreeSlot {
                cached: Vec::new(),
                tx: tx.clone(),
            });
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("anedvd-slot-{slot}"))
                .spawn(move || worker(sh, session, rx, tx))
                .map_err(|source| Error::Spawn { slot, source })?;
        }
        Ok(Scheduler { shared })
    }

    /// Hands `job` to the free slot sharing the longest cached prefix with its
    /// prompt, or queues it.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        if self.shared.cancel_all.load(Ordering::Relaxed) {
            return Err(SubmitError::ShuttingDown);
        }
        let mut st = self.shared.lock();
        let best = st
            .free
            .iter()
            .enumerate()
            .max_by_key(|(i, s)| (common_prefix(&s.cached, &job.prompt), usize::MAX - i))
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let slot = st.free.swap_remove(i);
                drop(st);
                // The worker holds its receiver for the life of the process.
                let _ = slot.tx.send(job);
                Ok(())
            }
            None if st.queue.len() < self.shared.queue_capacity => {
                st.queue.push_back(job);
                Ok(())
            }
            None => {
                self.shared
                    .metrics
                    .rejected_queue_full
                    .fetch_add(1, Ordering::Relaxed);
                Err(SubmitError::QueueFull)
            }
        }
    }

    /// The engine the slots run.
    pub fn engine(&self) -> Arc<Engine> {
        self.shared.engine.clone()
    }

    /// Queue depth, busy and total slots.
    pub fn gauges(&self) -> Gauges {
        let st = self.shared.lock();
        Gauges {
            queue_depth: st.queue.len(),
            slots_busy: self.shared.slots - st.free.len(),
            slots_total: self.shared.slots,
            ready: true,
        }
    }

    /// Cancels every running and queued generation and refuses new ones.
    pub fn cancel_all(&self) {
        self.shared.cancel_all.store(true, Ordering::Relaxed);
        let queued: Vec<Job> = self.shared.lock().queue.drain(..).collect();
        for job in queued {
            let _ = job
                .events
                .try_send(Event::Error("the server is shutting down".into()));
        }
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn worker(
    sh: Arc<Shared>,
    mut session: EngineSession,
    rx: mpsc::Receiver<Job>,
    tx: mpsc::Sender<Job>,
) {
    while let Ok(first) = rx.recv() {
        let mut job = first;
        loop {
            run_job(&sh, &mut session, job);
            let mut st = sh.lock();
            match st.queue.pop_front() {
                Some(next) => job = next,
                None => {
                    st.free.push(FreeSlot {
                        cached: session.cached_tokens().to_vec(),
                        tx: tx.clone(),
                    });
                    break;
                }
            }
        }
    }
}

fn run_job(sh: &Shared, session: &mut EngineSession, job: Job) {
    let metrics = &sh.metrics;
    if job.events.is_closed() || sh.cancel_all.load(Ordering::Relaxed) {
        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let tokenizer = &sh.engine.tokenizer;
    let want_logprobs = job.params.top_logprobs > 0;
    let mut matcher = StopMatcher::new(job.stop);
    let mut pending: Vec<TokenInfo> = Vec::new();
    let mut stopped: Option<String> = None;
    let events = &job.events;
    let send = |text: String, tokens: &mut Vec<TokenInfo>| {
        if !text.is_empty() {
            // Fails only when the client is gone; the next check cancels.
            let _ = events.blocking_send(Event::Delta {
                text,
                tokens: std::mem::take(tokens),
            });
        }
    };
    let started = Instant::now();
    let result = generate(
        session,
        tokenizer,
        &job.prompt,
        &job.params,
        |ev: &TokenEvent<'_>| {
            if stopped.is_some() {
                return ControlFlow::Break(());
            }
            if want_logprobs && ev.id != u32::MAX && !tokenizer.is_eog(ev.id) {
                pending.push(TokenInfo {
                    id: ev.id,
                    logprob: ev.logprob.unwrap_or(f32::NEG_INFINITY),
                    top: ev.top_logprobs.to_vec(),
                });
            }
            match matcher.push(ev.text) {
                StopOutcome::Continue(text) => send(text, &mut pending),
                StopOutcome::Stopped { text, stop } => {
                    send(text, &mut pending);
                    stopped = Some(stop);
                    return ControlFlow::Break(());
                }
            }
            if events.is_closed() || sh.cancel_all.load(Ordering::Relaxed) {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        },
    );
    match result {
        Ok(gen) => {
            if stopped.is_none() {
                let rest = matcher.finish();
                send(rest, &mut pending);
            }
            let t = gen.timings;
            metrics
                .prompt_tokens
                .fetch_add(t.prefill_tokens as u64, Ordering::Relaxed);
            metrics
                .cached_prompt_tokens
                .fetch_add(t.reused_tokens as u64, Ordering::Relaxed);
            metrics
                .generated_tokens
                .fetch_add(gen.tokens.len() as u64, Ordering::Relaxed);
            metrics
                .decode_tokens
                .fetch_add(t.decode_tokens as u64, Ordering::Relaxed);
            Metrics::add_time(&metrics.prefill_us, t.prefill);
            Metrics::add_time(&metrics.decode_us, t.decode);
            let finish = match (&stopped, gen.finish_reason) {
                (Some(_), _) => Finish::StopSequence,
                (None, FinishReason::Stop) => Finish::Eos,
                (None, FinishReason::Length) => Finish::Length,
                (None, FinishReason::ContextFull) => Finish::ContextFull,
                (None, FinishReason::Cancelled) => Finish::Cancelled,
            };
            if finish == Finish::Cancelled {
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
            let _ = events.blocking_send(Event::Done(Summary {
                finish,
                stop_sequence: stopped,
                prompt_tokens: gen.prompt_tokens.len(),
                cached_tokens: t.reused_tokens,
                completion_tokens: gen.tokens.len(),
                seconds: started.elapsed().as_secs_f64(),
                decode_tps: t.decode_tps(),
            }));
        }
        Err(e) => {
            // The session may hold a partial prefill; start clean next time.
            session.reset();
            let _ = events.blocking_send(Event::Error(e.to_string()));
        }
    }
}
