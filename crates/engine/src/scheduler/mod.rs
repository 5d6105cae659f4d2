//! Continuous batching: slots and the request queue. `slots` sequences (each
//! with its own KV cache) are advanced together by one batch thread in a
//! single forward pass per step (requests join between steps and leave when
//! done), fed from a bounded FIFO queue. A new request goes to the free slot
//! whose cached tokens share the longest prefix with its prompt. Generation
//! runs on the batch thread (never on a caller's async runtime); the loop
//! itself is in `batcher.rs`.
//!
//! The scheduler knows no channel type: each job brings an [`EventSink`]
//! (the server's is a bounded tokio channel) and the batch thread only ever
//! calls its non-blocking [`EventSink::try_send`]. Counters of the work done
//! go to a [`SchedulerCounters`] the caller owns (and exports).

mod batcher;
mod stop;

pub use stop::{StopMatcher, StopOutcome};

use crate::prefix_cache::PrefixStats;
use crate::speculative::{check_vocabulary, DraftProposer};
use crate::{Engine, Error, GenerateParams};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Why [`EventSink::try_send`] did not deliver.
#[derive(Debug)]
pub enum SendError {
    /// The receiver is not keeping up; the event is handed back to retry
    /// later (only that sequence waits).
    Full(Event),
    /// The receiver is gone: the job is cancelled.
    Closed,
}

/// Where a job's events go. Implementations must not block: a full sink
/// pauses its own sequence, never the batch.
pub trait EventSink: Send {
    /// Delivers `event` now, or says why not.
    fn try_send(&self, event: Event) -> Result<(), SendError>;
    /// True once the receiver is gone.
    fn is_closed(&self) -> bool;
}

/// Counters (monotonic) of the scheduler's work, shared with whoever exports
/// them (the server's `/metrics`).
#[derive(Debug, Default)]
pub struct SchedulerCounters {
    /// Jobs refused because the queue was full.
    pub rejected_queue_full: AtomicU64,
    /// Generations cancelled (receiver gone or [`Scheduler::cancel_all`]).
    pub cancelled: AtomicU64,
    /// Prompt tokens run through the model.
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens served from a slot's cached prefix.
    pub cached_prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Prefill time in microseconds.
    pub prefill_us: AtomicU64,
    /// Decode time in microseconds.
    pub decode_us: AtomicU64,
    /// Tokens run by decode steps (summed over sequences).
    pub decode_tokens: AtomicU64,
    /// Batched forward passes.
    pub batch_passes: AtomicU64,
    /// Sequences summed over batched forward passes.
    pub batch_sequences: AtomicU64,
    /// Speculation: passes that verified drafts (one per sequence and step).
    pub verify_passes: AtomicU64,
    /// Speculation: tokens drafted.
    pub drafted_tokens: AtomicU64,
    /// Speculation: drafted tokens accepted.
    pub accepted_tokens: AtomicU64,
    /// Panics caught on the batch thread (each failed one request, or was
    /// retried; any is a bug worth reporting).
    pub panics: AtomicU64,
}

impl SchedulerCounters {
    /// Adds a duration to a microsecond counter.
    pub fn add_time(counter: &AtomicU64, d: Duration) {
        counter.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Values read from the scheduler at scrape time.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    /// Requests waiting for a slot.
    pub queue_depth: usize,
    /// Slots generating.
    pub slots_busy: usize,
    /// Slots in all.
    pub slots_total: usize,
    /// 1 once the model is loaded.
    pub ready: bool,
    /// Positions held in the slots' caches (busy slots, and idle ones
    /// keeping their last prompt for prefix reuse).
    pub cached_positions: usize,
    /// Of those, the positions held by busy slots.
    pub busy_positions: usize,
    /// Bytes the slots' KV caches hold (sliding-window layers keep only
    /// their window, so this grows slower than the positions).
    pub kv_cache_bytes: usize,
    /// The prefix cache's figures (all zero without one).
    pub prefix: PrefixStats,
}

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
    /// Speculation: tokens drafted.
    pub drafted_tokens: usize,
    /// Speculation: drafted tokens accepted.
    pub accepted_tokens: usize,
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
pub struct Job {
    /// Prompt ids.
    pub prompt: Vec<u32>,
    /// Generation parameters.
    pub params: GenerateParams,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Where events go (bounded: a client that stops reading pauses its
    /// sequence, not the batch); closing the receiver cancels the job.
    pub events: Box<dyn EventSink>,
}

/// Why a job was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// All slots busy and the queue is full.
    QueueFull,
    /// [`Scheduler::cancel_all`] was called (the server is shutting down).
    ShuttingDown,
    /// The batch thread stopped after an internal error
    /// ([`Scheduler::failure`] says which).
    Stopped,
}

struct State {
    /// Jobs not yet given a slot, oldest first.
    pub queue: VecDeque<Job>,
    /// Slots holding a running generation.
    pub busy: usize,
    /// Why the batch thread stopped, once it has.
    pub failure: Option<String>,
}

/// A draft model the slots may speculate with (requests whose speculation
/// names the `draft` proposer): each slot drafts with its own session of it.
pub struct DraftModel {
    /// The loaded draft model (its vocabulary is checked against the
    /// model's when the scheduler starts).
    pub engine: Arc<Engine>,
    /// Drafting stops when its top probability is below this.
    pub p_min: f32,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled when a job arrives or shutdown starts.
    pub wake: Condvar,
    pub engine: Arc<Engine>,
    pub counters: Arc<SchedulerCounters>,
    queue_capacity: usize,
    pub slots: usize,
    pub cancel_all: AtomicBool,
    pub draft: Option<DraftModel>,
    /// Positions held by all slots and by busy slots, published by the
    /// batch thread after every step.
    pub cached_positions: AtomicUsize,
    pub busy_positions: AtomicUsize,
    /// Bytes the slots' KV caches hold, published with the positions.
    pub kv_cache_bytes: AtomicUsize,
    /// The prefix cache's figures, published with the positions.
    pub prefix_stats: Mutex<PrefixStats>,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cancelled(&self) -> bool {
        self.cancel_all.load(Ordering::Relaxed)
    }

    /// Marks the batch thread stopped: queued jobs get `message` as their
    /// error and later ones are refused.
    pub fn fail(&self, message: String) {
        let queued: Vec<Job> = {
            let mut st = self.lock();
            st.busy = 0;
            st.failure = Some(message.clone());
            st.queue.drain(..).collect()
        };
        for job in queued {
            let _ = job.events.try_send(Event::Error(message.clone()));
        }
    }
}

/// The slots and the queue.
pub struct Scheduler {
    shared: Arc<Shared>,
}

impl Scheduler {
    /// Opens a batch of `slots` sequences of `max_seq` positions and starts
    /// the batch thread; at most `queue_capacity` jobs wait beyond the slots.
    /// With `draft`, requests may speculate with that draft model. The
    /// slots share a prefix cache of `prefix_cache_bytes` (0: none).
    pub fn start(
        engine: Arc<Engine>,
        counters: Arc<SchedulerCounters>,
        (slots, max_seq): (usize, usize),
        queue_capacity: usize,
        draft: Option<DraftModel>,
        prefix_cache_bytes: usize,
    ) -> Result<Scheduler, Error> {
        if slots == 0 {
            return Err(Error::Invalid("--parallel must be at least 1".into()));
        }
        if let Some(d) = &draft {
            DraftProposer::check_p_min(d.p_min)?;
            check_vocabulary(&d.engine, &engine.tokenizer)?;
        }
        let batch = engine
            .new_batch(slots, max_seq)?
            .with_prefix_cache(prefix_cache_bytes);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                busy: 0,
                failure: None,
            }),
            wake: Condvar::new(),
            engine,
            counters,
            queue_capacity,
            slots,
            cancel_all: AtomicBool::new(false),
            draft,
            cached_positions: AtomicUsize::new(0),
            busy_positions: AtomicUsize::new(0),
            kv_cache_bytes: AtomicUsize::new(0),
            prefix_stats: Mutex::new(PrefixStats::default()),
        });
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("anedvd-batch".into())
            .spawn(move || batcher::run(sh, batch))
            .map_err(Error::Spawn)?;
        Ok(Scheduler { shared })
    }

    /// Queues `job` for the next free slot, or refuses it when every slot is
    /// busy and `queue_capacity` jobs already wait.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        if self.shared.cancelled() {
            return Err(SubmitError::ShuttingDown);
        }
        let mut st = self.shared.lock();
        if st.failure.is_some() {
            return Err(SubmitError::Stopped);
        }
        let free = self.shared.slots - st.busy.min(self.shared.slots);
        if st.queue.len() >= self.shared.queue_capacity + free {
            drop(st);
            self.shared
                .counters
                .rejected_queue_full
                .fetch_add(1, Ordering::Relaxed);
            return Err(SubmitError::QueueFull);
        }
        st.queue.push_back(job);
        drop(st);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// The engine the slots run.
    pub fn engine(&self) -> Arc<Engine> {
        self.shared.engine.clone()
    }

    /// Whether requests may speculate with a draft model.
    pub fn has_draft_model(&self) -> bool {
        self.shared.draft.is_some()
    }

    /// Why the batch thread stopped, if it has (a bug: every request is
    /// refused from then on).
    pub fn failure(&self) -> Option<String> {
        self.shared.lock().failure.clone()
    }

    /// Queue depth, busy and total slots.
    pub fn gauges(&self) -> Gauges {
        let st = self.shared.lock();
        let busy = st.busy.min(self.shared.slots);
        // Jobs about to take a free slot are not waiting.
        let free = self.shared.slots - busy;
        Gauges {
            queue_depth: st.queue.len().saturating_sub(free),
            slots_busy: busy,
            slots_total: self.shared.slots,
            ready: true,
            cached_positions: self.shared.cached_positions.load(Ordering::Relaxed),
            busy_positions: self.shared.busy_positions.load(Ordering::Relaxed),
            kv_cache_bytes: self.shared.kv_cache_bytes.load(Ordering::Relaxed),
            prefix: *self
                .shared
                .prefix_stats
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
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
        self.shared.wake.notify_all();
    }
}
