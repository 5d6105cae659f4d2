//! The CPU backend: runs a [`DecoderProgram`]
//! with the quantized SIMD kernels of [`qkernels`] (AVX2 / AVX-512 / NEON,
//! chosen at start-up; activations quantized once per matrix input and
//! weight format, as ggml does), weights used in place from the source bytes
//! (never copied whole; types without a kernel are decoded row by row into
//! scratch), rayon parallelism over output rows (q/k/v and gate/up share one
//! parallel region in decode), batched prefill through four-token kernels,
//! GQA, an f16 KV cache read by F16C row kernels (long decode contexts split
//! across threads), causal and sliding-window masks.
//!
//! This crate knows the graph vocabulary and ggml block formats; it never
//! sees model families or file formats.
//!
//! ```no_run
//! # fn f(program: &anedvd_graph::DecoderProgram) -> anedvd_graph::Result<()> {
//! use anedvd_graph::{Backend, LogitsMode};
//! let exe = anedvd_cpu::CpuBackend::new(2)?.compile(program)?;
//! let mut session = exe.new_session(512)?;
//! let logits = session.forward(&[2, 651, 6037], LogitsMode::Last)?;
//! assert_eq!(logits.len(), exe.vocab_size());
//! # Ok(()) }
//! ```

pub mod attention;
mod compiled;
pub mod conv;
mod forward;
pub mod kernels;
mod matmul;
pub mod moe;
pub mod norms;
pub mod packing;
#[path = "kernels/qkernels.rs"]
pub mod qkernels;
mod session;
pub mod state;

use anedvd_graph::{Backend, BatchSession, DecoderProgram, Error, Executable, Result, Session};
use std::sync::Arc;

pub use matmul::{decode_row, Acts};
pub use qkernels::IsaCap;

/// The backend's name in messages.
pub const NAME: &str = "cpu";

/// How the CPU backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuOptions {
    /// Threads (0 = one per logical CPU).
    pub threads: usize,
    /// Most capable instruction set to use.
    pub isa: IsaCap,
    /// Pack the weight types that have a packed panel layout at load
    /// (AVX-512 VNNI: Q8_0, Q4_0, Q5_0, IQ4_NL).
    pub pack: bool,
    /// Keep every position in the KV caches of sliding-window layers (as
    /// llama.cpp's `--swa-full`), instead of their window plus
    /// [`attention::WINDOW_REWIND`]: more memory, but a sequence can go
    /// back to any position it holds.
    pub swa_full: bool,
    /// How KV caches store keys and values (f16, or Q8_0 at 53% of the
    /// bytes; layers whose head width is no multiple of 32 keep f16).
    pub kv_type: attention::KvType,
}

impl Default for CpuOptions {
    /// All threads, the best ISA, packing on — unless the A/B overrides
    /// `ANEDVD_KERNELS=generic|avx2|avx512` or `ANEDVD_PACK=0` say otherwise.
    fn default() -> Self {
        CpuOptions {
            threads: 0,
            isa: IsaCap::from_env().unwrap_or_default(),
            pack: std::env::var("ANEDVD_PACK").map_or(true, |v| v != "0" && v != "off"),
            swa_full: false,
            kv_type: attention::KvType::F16,
        }
    }
}

/// The CPU backend with its own thread pool.
pub struct CpuBackend {
    pool: Arc<rayon::ThreadPool>,
    threads: usize,
    kernels: qkernels::Kernels,
    pack: bool,
    swa_full: bool,
    kv_type: attention::KvType,
}

impl CpuBackend {
    /// A backend running on `threads` threads (0 = one per logical CPU),
    /// otherwise with [`CpuOptions::default`].
    pub fn new(threads: usize) -> Result<Self> {
        Self::with_options(CpuOptions {
            threads,
            ..CpuOptions::default()
        })
    }

    /// A backend with `options`.
    pub fn with_options(options: CpuOptions) -> Result<Self> {
        let threads = options.threads;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("anedvd-cpu-{i}"))
            .build()
            .map_err(|e| Error::Backend {
                backend: NAME.into(),
                message: format!("thread pool: {e}"),
            })?;
        let threads = pool.current_num_threads();
        Ok(Self {
            pool: Arc::new(pool),
            threads,
            kernels: qkernels::Kernels::capped(options.isa),
            pack: options.pack,
            swa_full: options.swa_full,
            kv_type: options.kv_type,
        })
    }

    /// The kernel table in use (`avx512vnni`, `avx2`, ...).
    pub fn kernels_name(&self) -> &'static str {
        self.kernels.name()
    }

    /// Threads in the pool.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn compile(&self, program: &DecoderProgram) -> Result<Box<dyn Executable>> {
        program.validate()?;
        let model_bytes = program.weights.tensors().iter().map(|t| t.size_bytes).sum();
        let pack = packing::Packing::for_model(
            self.pack,
            model_bytes,
            packing::last_level_cache_bytes(),
            self.kernels.packed_streams(anedvd_base::GgmlType::Q6K),
        );
        let mut model = compiled::Model::new(program, self.kernels, pack)?;
        model.swa_full = self.swa_full;
        model.kv_type = self.kv_type;
        Ok(Box::new(CpuExecutable {
            model: Arc::new(model),
            pool: self.pool.clone(),
        }))
    }
}

/// A compiled program; sessions share its weights and thread pool.
pub struct CpuExecutable {
    model: Arc<compiled::Model>,
    pool: Arc<rayon::ThreadPool>,
}

impl Executable for CpuExecutable {
    fn new_session(&self, max_seq: usize) -> Result<Box<dyn Session>> {
        if max_seq == 0 {
            return Err(Error::InvalidArgument("max_seq must be positive".into()));
        }
        Ok(Box::new(session::CpuSession::new(
            self.model.clone(),
            self.pool.clone(),
            max_seq,
        )))
    }

    fn new_batch(&self, n_seqs: usize, max_seq: usize) -> Result<Box<dyn BatchSession>> {
        if max_seq == 0 || n_seqs == 0 {
            return Err(Error::InvalidArgument(
                "a batch needs at least one sequence of positive capacity".into(),
            ));
        }
        Ok(Box::new(session::CpuBatch::new(
            self.model.clone(),
            self.pool.clone(),
            n_seqs,
            max_seq,
        )))
    }

    fn vocab_size(&self) -> usize {
        self.model.n_vocab
    }

    fn n_ctx_train(&self) -> usize {
        self.model.n_ctx_train
    }
}
