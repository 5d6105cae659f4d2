//! The two backends that run the ANE lowering (`crate::lower`) behind the
//! same `Backend` trait as the CPU backend: `ane-sim` executes every program
//! on the MIL fp16 simulator (`anedvd_mil::sim`), `ane` goes through the ANE
//! runtime on a driver.
//!
//! # The split between "ANE" and CPU
//!
//! This is exactly the split the real ANE backend uses:
//!
//! | where | what |
//! |---|---|
//! | ANE (simulated) | every lowered program: q/k/v, output and FFN projections as 1×1 convs (biases added inside), the gated activation; in the fused variant also every RMSNorm (attention, FFN, post-attention, post-FFN, final), both residual adds, and the lm_head slices |
//! | CPU (f32, f16 KV cache) | token-embedding lookup and its scale, per-head q/k RMSNorm, RoPE, the KV cache, attention scores, soft-cap, softmax over keys and the weighted sum of values; the final-logit soft-cap; in the split variant also the RMSNorms and residual adds |
//!
//! Each program is printed to MIL text, parsed back and checked against the
//! ANE rule table when the executable is compiled, so what runs is what the
//! text says. A forward call processes tokens in chunks of W (the lowering's
//! width, default 64): each chunk dispatches every kernel once, with the
//! chunk's tokens in columns `0..n` of the `[1, C, 1, W]` input (decode fills
//! column 0) and the other columns zero.
//!
//! The host side is the CPU backend's own code, not a copy: q/k norm and
//! RoPE (`anedvd_cpu::attention::encode_positions`), the f16 KV cache and
//! attention (`KvCache`, `attend`), the norm weights (`anedvd_cpu::norms`)
//! and row ops (`anedvd_cpu::kernels`), on the kernels of
//! [`AneSimBackend::host_isa`] / [`AneBackend::host_isa`].
//!
//! In the fused variant the residual stream crosses the ANE divided by
//! `LowerOptions::residual_scale` (fp16 overflows on real residuals); the
//! session scales embeddings down before `entry` and dumps unscaled values.
//!
//! Also here: [`check`] (each layer-0 kernel against f32 matmuls),
//! [`selftest`] (random tiny transformers against the CPU backend) and
//! [`reference`](mod@reference) (weights dequantized to f32, so the CPU backend gives the
//! exact function to measure the ANE path against).
//!
//! # Two ways to run the kernels
//!
//! [`AneSimBackend`] (`--backend ane-sim`) runs each printed → parsed →
//! rule-checked program directly on the simulator. [`AneBackend`]
//! (`--backend ane --driver sim|ane`) runs the same kernels through the ANE
//! runtime (`anedvd_ane::runtime::Programs`): every program is compiled and
//! loaded once at `compile()` time, within the runtime's compile budget
//! (a model needing more distinct programs than the budget allows is
//! refused up front, naming the budget), and each dispatch packs the
//! activations into surfaces at the strides the driver reports. The driver
//! lives on one dedicated thread ([`worker`]); with
//! [`DriverKind::Private`] off macOS, `compile()` fails with
//! `ANE unavailable: …`. With `--ane-path e5rt` the kernels run on the
//! e5rt runtime instead (`anedvd_ane::runtime::e5rt`: named dense ports):
//! `--driver e5rt` is Espresso ([`DriverKind::E5rt`], `ANE unavailable`
//! off macOS), `--driver sim` its simulation ([`DriverKind::E5rtSim`]).
//! A real driver of the other path is refused with the reason.
//!
//! This crate knows the graph vocabulary and the lowering; it never sees
//! file formats or model families.
//!
//! ```no_run
//! # fn f(program: &anedvd_graph::DecoderProgram) -> anedvd_graph::Result<()> {
//! use anedvd_graph::{Backend, LogitsMode};
//! let exe = anedvd_ane::AneSimBackend::default().compile(program)?;
//! let mut session = exe.new_session(256)?;
//! let logits = session.forward(&[2, 651, 6037], LogitsMode::Last)?;
//! assert_eq!(logits.len(), exe.vocab_size());
//! # Ok(()) }
//! ```

mod batch;
pub mod check;
mod model;
pub mod reference;
mod resident;
pub mod selftest;
mod session;
pub mod worker;

pub use crate::lower::{LowerOptions, Variant};
pub use crate::runtime::DEFAULT_COMPILE_BUDGET;
pub use model::AneExecutable;
pub use worker::{CompileReport, DriverKind};

use model::Exec;

use anedvd_cpu::IsaCap;
use anedvd_graph::{Backend, DecoderProgram, Executable, Result};

/// Errors of this crate (converted to `anedvd_graph::Error::Backend` at the trait boundary).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Lowering the program failed.
    #[error("lowering: {0}")]
    Lower(#[from] crate::lower::Error),
    /// A program failed to parse, broke an ANE rule, or failed in the simulator.
    #[error("kernel {kernel}: {source}")]
    Mil {
        /// Kernel name.
        kernel: String,
        /// The MIL error.
        source: anedvd_mil::Error,
    },
    /// A kernel returned something other than its declared output.
    #[error("kernel {kernel}: {msg}")]
    Output {
        /// Kernel name.
        kernel: String,
        /// What is wrong.
        msg: String,
    },
    /// The runtime or driver failed outside any one kernel (e.g. `ANE
    /// unavailable: …` when the driver cannot be opened).
    #[error(transparent)]
    Runtime(crate::runtime::Error),
    /// Compiling, loading or running one kernel through the runtime failed.
    #[error("kernel {kernel}: {source}")]
    Dispatch {
        /// Kernel name.
        kernel: String,
        /// The runtime error.
        source: crate::runtime::Error,
    },
    /// The model needs more distinct programs than the compile budget allows.
    #[error(
        "the model needs {needed} ANE programs but the compile budget allows {left} more \
         (budget {budget} compiles per process); use the fused variant or a larger \
         vocabulary slice, or raise the budget"
    )]
    OverBudget {
        /// Distinct programs of the lowering.
        needed: usize,
        /// Compiles left in the budget.
        left: u32,
        /// The budget.
        budget: u32,
    },
    /// The runtime thread could not be started or has stopped.
    #[error("ANE runtime thread: {0}")]
    Worker(String),
}

impl From<Error> for anedvd_graph::Error {
    fn from(e: Error) -> Self {
        let backend = match e {
            Error::Runtime(_)
            | Error::Dispatch { .. }
            | Error::OverBudget { .. }
            | Error::Worker(_) => "ane",
            _ => "ane-sim",
        };
        anedvd_graph::Error::Backend {
            backend: backend.into(),
            message: e.to_string(),
        }
    }
}

/// The ane-sim backend.
#[derive(Debug, Clone, Copy)]
pub struct AneSimBackend {
    /// Lowering options (width, variant, vocabulary slice).
    pub options: LowerOptions,
    /// Most capable instruction set of the host-side CPU kernels.
    pub host_isa: IsaCap,
}

impl AneSimBackend {
    /// A backend lowering with `options`; host kernels per `ANEDVD_KERNELS`,
    /// else the best this CPU has.
    pub fn new(options: LowerOptions) -> Self {
        AneSimBackend {
            options,
            host_isa: IsaCap::from_env().unwrap_or_default(),
        }
    }

    /// Sets the host kernels' instruction-set cap.
    pub fn with_host_isa(mut self, isa: IsaCap) -> Self {
        self.host_isa = isa;
        self
    }

    /// Like [`Backend::compile`] but returns the concrete executable (for
    /// its dispatch counters).
    pub fn compile_sim(&self, program: &DecoderProgram) -> Result<AneExecutable> {
        program.validate()?;
        AneExecutable::new(program, &self.options, Exec::Direct, self.host_isa)
    }
}

impl Default for AneSimBackend {
    /// Default lowering options, host kernels as [`AneSimBackend::new`].
    fn default() -> Self {
        Self::new(LowerOptions::default())
    }
}

impl Backend for AneSimBackend {
    fn name(&self) -> &str {
        "ane-sim"
    }

    fn compile(&self, program: &DecoderProgram) -> Result<Box<dyn Executable>> {
        Ok(Box::new(self.compile_sim(program)?))
    }
}

/// The ANE backend: the lowering's kernels run through the ANE runtime on
/// a driver ([`DriverKind::Sim`] anywhere, [`DriverKind::Private`] or
/// [`DriverKind::E5rt`] on a Mac); attention, RoPE and the KV cache on the CPU.
#[derive(Debug, Clone, Copy)]
pub struct AneBackend {
    /// Lowering options (width, variant, vocabulary slice).
    pub options: LowerOptions,
    /// The driver ([`DriverKind::Sim`] simulates whichever path the
    /// options lower for).
    pub driver: DriverKind,
    /// Compiles this backend's runtime allows (counted from the driver's
    /// compiles so far; the private driver counts the whole process).
    pub compile_budget: u32,
    /// Most capable instruction set of the host-side CPU kernels.
    pub host_isa: IsaCap,
}

impl AneBackend {
    /// A backend lowering with `options` and running on `driver`, with
    /// [`DEFAULT_COMPILE_BUDGET`].
    pub fn new(options: LowerOptions, driver: DriverKind) -> Self {
        AneBackend {
            options,
            driver,
            compile_budget: DEFAULT_COMPILE_BUDGET,
            host_isa: IsaCap::from_env().unwrap_or_default(),
        }
    }

    /// Sets the host kernels' instruction-set cap.
    pub fn with_host_isa(mut self, isa: IsaCap) -> Self {
        self.host_isa = isa;
        self
    }

    /// Sets the compile budget.
    pub fn with_compile_budget(mut self, budget: u32) -> Self {
        self.compile_budget = budget;
        self
    }

    /// Like [`Backend::compile`] but returns the concrete executable (for
    /// its dispatch counters and [`AneExecutable::compile_report`]). Every
    /// program is compiled and loaded here, on the runtime thread. The
    /// simulated driver follows the lowering's path ([`DriverKind::for_path`]);
    /// a real driver of the other path is refused.
    pub fn compile_ane(&self, program: &DecoderProgram) -> Result<AneExecutable> {
        program.validate()?;
        let driver = self.driver.for_path(self.options.path);
        AneExecutable::new(
            program,
            &self.options,
            Exec::Runtime(driver, self.compile_budget),
            self.host_isa,
        )
    }
}

impl Backend for AneBackend {
    fn name(&self) -> &str {
        "ane"
    }

    fn compile(&self, program: &DecoderProgram) -> Result<Box<dyn Executable>> {
        Ok(Box::new(self.compile_ane(program)?))
    }
}
