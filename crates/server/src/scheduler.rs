//! Slots and the request queue: `--parallel` sequences (each with its own KV
//! cache) advanced together by one batch thread in a single forward pass per
//! step (continuous batching: requests join between steps and leave when
//! done), fed from a bounded FIFO queue. A new request goes to the free slot
//! whose cached tokens share the longest prefix with its prompt. Generation
//! runs on the batch thread, never on the async runtime; the loop itself is
//! in [`crate::batcher`].

use crate::error::Error;
use crate::metrics::{Gauges, Metrics};
use anedvd_engine::{Engine, GenerateParams};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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
    /// sequence, not the batch); closing the receiver cancels the job.
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

pub(crate) struct State {
    /// Jobs not yet given a slot, oldest first.
    pub queue: VecDeque<Job>,
    /// Slots holding a running generation.
    pub busy: usize,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// Signalled when a job arrives or shutdown starts.
    pub wake: Condvar,
    pub engine: Arc<Engine>,
    pub metrics: Arc<Metrics>,
    queue_capacity: usize,
    pub slots: usize,
    pub cancel_all: AtomicBool,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn cancelled(&self) -> bool {
        self.cancel_all.load(Ordering::Relaxed)
    }
}

/// The slots and the queue.
pub struct Scheduler {
    shared: Arc<Shared>,
}

impl Scheduler {
    /// Opens a batch of `slots` sequences of `max_seq` positions and starts
    /// the batch thread; at most `queue_capacity` jobs wait beyond the slots.
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
        let batch = engine.new_batch(slots, max_seq)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                busy: 0,
            }),
            wake: Condvar::new(),
            engine,
            metrics,
            queue_capacity,
            slots,
            cancel_all: AtomicBool::new(false),
        });
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("anedvd-batch".into())
            .spawn(move || crate::batcher::run(sh, batch))
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
        let free = self.shared.slots - st.busy.min(self.shared.slots);
        if st.queue.len() >= self.shared.queue_capacity + free {
            drop(st);
            self.shared
                .metrics
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
