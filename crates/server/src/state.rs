//! Shared server state: configuration, the model (loading or ready), the
//! scheduler and the metrics.

use crate::error::{ApiError, Dialect, Error, ErrorKind};
use crate::metrics::Metrics;
use crate::metrics::RequestGuard;
use crate::request::Generation;
use anedvd_engine::scheduler::{
    DraftModel, Event, EventSink, Gauges, Job, Scheduler, SendError, SubmitError,
};
use anedvd_engine::speculative::{ProposerKind, SpecParams};
use anedvd_engine::{Engine, GenerateParams, Pooling, SamplingParams};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{channel, Sender};

/// Events a slot may run ahead of its client before it waits.
const EVENT_BUFFER: usize = 32;

/// A job's events as the scheduler sends them: into a bounded tokio channel
/// whose receiver streams them to the client (dropping it cancels the job).
pub struct ChannelSink(pub Sender<Event>);

impl EventSink for ChannelSink {
    fn try_send(&self, event: Event) -> Result<(), SendError> {
        self.0.try_send(event).map_err(|e| match e {
            TrySendError::Full(event) => SendError::Full(event),
            TrySendError::Closed(_) => SendError::Closed,
        })
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The model id reported by `/v1/models` and in replies.
    pub model_id: String,
    /// Accepted API keys; empty = no authentication.
    pub api_keys: Vec<String>,
    /// Allowed CORS origins (`*` = any); empty = no CORS headers.
    pub cors_origins: Vec<String>,
    /// Concurrent sequences (slots).
    pub parallel: usize,
    /// Context positions per slot.
    pub max_seq: usize,
    /// Requests that may wait beyond the busy slots.
    pub queue_capacity: usize,
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// Sampling used for fields a request leaves out (its seed is used when
    /// `fixed_seed` is set, else each request draws a fresh one).
    pub sampling: SamplingParams,
    /// Use `sampling.seed` for requests without a seed.
    pub fixed_seed: bool,
    /// Speculation for requests that do not say (`--spec`).
    pub speculative: Option<SpecParams>,
    /// Wall time a request may take from arrival to its last byte
    /// (`--request-timeout`); `None` = unlimited.
    pub request_timeout: Option<Duration>,
    /// Concurrent client connections; more are answered 503 and closed.
    pub max_connections: usize,
    /// Bytes of a request's line and headers (hyper answers 431 beyond).
    pub max_header_bytes: usize,
    /// Time a client has to send a request's headers (also how long an
    /// idle keep-alive connection is held).
    pub header_timeout: Duration,
    /// Most bytes the slots' KV caches may take together (`--kv-budget`):
    /// a `--parallel` x context that could take more is refused at start.
    pub kv_budget_bytes: Option<u64>,
    /// Bytes of the prefix cache the slots share (`--cache-ram`; 0: none):
    /// KV blocks of earlier prompts, so a repeated system prompt or
    /// document is not prefilled again.
    pub cache_ram_bytes: usize,
    /// How `/v1/embeddings` pools a text's hidden states (`--pooling`).
    pub pooling: Pooling,
    /// Tokens a request generates when it sets no `max_tokens` /
    /// `n_predict` (`--n-predict`); `None` = until EOS or the context's end.
    pub default_max_tokens: Option<usize>,
    /// Every chat reply carries `__verbose` with its rendered prompt
    /// (`serve --verbose`, as llama-server's).
    pub verbose_replies: bool,
    /// The `enable_thinking` every template gets unless the request's
    /// `chat_template_kwargs` says otherwise (`serve --reasoning on|off`).
    pub thinking: bool,
    /// `serve --context-shift`: a chat whose prompt does not fit loses its
    /// oldest exchanges, a raw prompt is cut in the middle (see
    /// `shift.rs`); off, such a request is refused.
    pub context_shift: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            model_id: "anedvd".into(),
            api_keys: Vec::new(),
            cors_origins: Vec::new(),
            parallel: 1,
            max_seq: 4096,
            queue_capacity: 64,
            max_body_bytes: 4 * 1024 * 1024,
            sampling: SamplingParams::default(),
            fixed_seed: false,
            speculative: None,
            request_timeout: Some(Duration::from_secs(600)),
            max_connections: 512,
            max_header_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(30),
            kv_budget_bytes: None,
            cache_ram_bytes: 2048 * 1024 * 1024,
            pooling: Pooling::Mean,
            default_max_tokens: None,
            verbose_replies: false,
            thinking: true,
            context_shift: false,
        }
    }
}

/// A loaded model and its slots.
pub struct Ready {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The slots.
    pub scheduler: Scheduler,
    /// Context positions per slot: the configured `max_seq`, capped at the
    /// model's training context.
    pub max_seq: usize,
}

enum ModelState {
    Loading,
    Ready(Arc<Ready>),
    Failed(String),
}

struct Inner {
    config: ServerConfig,
    model: RwLock<ModelState>,
    metrics: Arc<Metrics>,
    created: u64,
}

/// Cheaply clonable handle to the server state.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

impl AppState {
    /// State with no model yet (`/health` answers 503 until [`AppState::set_engine`]).
    pub fn new(config: ServerConfig) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            inner: Arc::new(Inner {
                config,
                model: RwLock::new(ModelState::Loading),
                metrics: Arc::new(Metrics::default()),
                created,
            }),
        }
    }

    /// Installs the loaded model (and the draft model requests may
    /// speculate with): opens the slots and starts their workers.
    pub fn set_engine(&self, engine: Engine, draft: Option<DraftModel>) -> Result<(), Error> {
        let c = &self.inner.config;
        if c.max_seq < 2 {
            return Err(Error::Config("--max-seq must be at least 2".into()));
        }
        if c.parallel == 0 {
            return Err(Error::Config("--parallel must be at least 1".into()));
        }
        let max_seq = c.max_seq.min(engine.n_ctx_train().max(2));
        let kv_max = (c.parallel as u64)
            .saturating_mul(max_seq as u64)
            .saturating_mul(engine.kv_bytes_per_position() as u64);
        if let Some(budget) = c.kv_budget_bytes.filter(|&b| kv_max > b) {
            let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
            return Err(Error::Config(format!(
                "{} slots x {max_seq} positions need up to {:.1} MiB of KV cache, over --kv-budget {:.1} MiB; lower --parallel or --max-seq",
                c.parallel,
                mib(kv_max),
                mib(budget)
            )));
        }
        let engine = Arc::new(engine);
        let scheduler = Scheduler::start(
            engine.clone(),
            self.inner.metrics.scheduler.clone(),
            (c.parallel, max_seq),
            c.queue_capacity,
            draft,
            c.cache_ram_bytes,
        )?;
        let ready = Arc::new(Ready {
            engine,
            scheduler,
            max_seq,
        });
        *self.write() = ModelState::Ready(ready);
        Ok(())
    }

    /// Records that loading failed (`/health` then answers 500 with `message`).
    pub fn set_failed(&self, message: String) {
        *self.write() = ModelState::Failed(message);
    }

    /// Cancels running and queued generations and refuses new ones.
    pub fn cancel_all(&self) {
        if let Some(r) = self.ready_opt() {
            r.scheduler.cancel_all();
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Counts a request to `endpoint` and returns the guard that counts how
    /// it ends.
    pub fn begin(&self, endpoint: &str) -> RequestGuard {
        self.inner.metrics.begin(endpoint)
    }

    /// The deadline of a request arriving now (`--request-timeout`), with
    /// the limit it comes from.
    pub fn deadline(&self) -> Option<(tokio::time::Instant, Duration)> {
        self.inner
            .config
            .request_timeout
            .map(|d| (tokio::time::Instant::now() + d, d))
    }

    /// Unix time the state was created (`created` of `/v1/models`).
    pub fn created(&self) -> u64 {
        self.inner.created
    }

    /// `Ok(None)` while loading, `Err(message)` if loading failed.
    /// A server whose batch thread stopped reports its failure.
    pub fn status(&self) -> Result<Option<Arc<Ready>>, String> {
        match &*self.read() {
            ModelState::Loading => Ok(None),
            ModelState::Ready(r) => match r.scheduler.failure() {
                Some(m) => Err(m),
                None => Ok(Some(r.clone())),
            },
            ModelState::Failed(m) => Err(m.clone()),
        }
    }

    fn ready_opt(&self) -> Option<Arc<Ready>> {
        self.status().ok().flatten()
    }

    /// The loaded model, or a 503 (loading) / 500 (failed) error.
    pub fn ready(&self, dialect: Dialect) -> Result<Arc<Ready>, ApiError> {
        match self.status() {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(ApiError::new(
                dialect,
                ErrorKind::Loading,
                "the model is loading",
            )),
            Err(m) => Err(ApiError::new(
                dialect,
                ErrorKind::Internal,
                format!("the model failed to load: {m}"),
            )),
        }
    }

    /// Gauges for `/metrics`.
    pub fn gauges(&self) -> Gauges {
        self.ready_opt()
            .map(|r| r.scheduler.gauges())
            .unwrap_or_default()
    }

    /// Checks the prompt fits, then queues a generation; returns its event
    /// stream, which ends at `deadline`.
    pub fn submit(
        &self,
        dialect: Dialect,
        ready: &Ready,
        prompt: Vec<u32>,
        params: GenerateParams,
        stop: Vec<String>,
        deadline: Option<(tokio::time::Instant, Duration)>,
    ) -> Result<Generation, ApiError> {
        let max_seq = ready.max_seq;
        if prompt.is_empty() {
            return Err(ApiError::invalid(dialect, "prompt", "the prompt is empty"));
        }
        if prompt.len() >= max_seq {
            // At least one position must be left to generate.
            return Err(ApiError::context_length(dialect, prompt.len(), max_seq));
        }
        let wants_draft = params
            .speculative
            .is_some_and(|p| p.proposer == ProposerKind::Draft);
        if wants_draft && !ready.scheduler.has_draft_model() {
            return Err(ApiError::invalid(
                dialect,
                "speculative",
                "this server has no draft model (start it with --spec draft --draft-model PATH)",
            ));
        }
        let (tx, rx) = channel(EVENT_BUFFER);
        let job = Job {
            prompt,
            params,
            stop,
            events: Box::new(ChannelSink(tx)),
        };
        match ready.scheduler.submit(job) {
            Ok(()) => Ok(Generation::new(rx, deadline)),
            Err(SubmitError::QueueFull) => Err(ApiError::new(
                dialect,
                ErrorKind::Overloaded,
                "all slots are busy and the queue is full; retry later",
            )),
            Err(SubmitError::ShuttingDown) => Err(ApiError::new(
                dialect,
                ErrorKind::Overloaded,
                "the server is shutting down",
            )),
            Err(SubmitError::Stopped) => Err(ApiError::new(
                dialect,
                ErrorKind::Internal,
                ready
                    .scheduler
                    .failure()
                    .unwrap_or_else(|| "the batch thread stopped".into()),
            )),
        }
    }

    /// [`Self::submit`] `n` times for `n` choices of one prompt: choice `i`
    /// samples with the request's seed plus `i` (so a seeded request
    /// reproduces every choice, and the choices differ). The scheduler runs
    /// the prompt once and copies its cache to the other choices.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_choices(
        &self,
        dialect: Dialect,
        ready: &Ready,
        prompt: Vec<u32>,
        params: GenerateParams,
        stop: Vec<String>,
        deadline: Option<(tokio::time::Instant, Duration)>,
        n: usize,
    ) -> Result<Vec<Generation>, ApiError> {
        (0..n)
            .map(|i| {
                let mut p = params.clone();
                p.sampling.seed = params.sampling.seed.wrapping_add(i as u64);
                self.submit(dialect, ready, prompt.clone(), p, stop.clone(), deadline)
            })
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ModelState> {
        self.inner.model.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ModelState> {
        self.inner.model.write().unwrap_or_else(|p| p.into_inner())
    }
}
