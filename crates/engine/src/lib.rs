//! The composition root of anedvd: loads weights, tokenizer and chat template,
//! picks a backend, runs prefill and decode, samples, and reports timings.
//!
//! The CLI and the server are thin layers over this crate. It is the only crate
//! that knows both models and backends: [`build_backend`] makes any backend
//! from a [`BackendChoice`] and [`BackendOptions`] (CPU threads, ISA cap and
//! packing; the ANE lowering and compile budget). Beside loading and
//! generating it holds the continuous-batching [`scheduler`] the server runs
//! (channel-agnostic: jobs bring an [`scheduler::EventSink`]) and the
//! diagnostic [`tools`] (verify, check, kernels and `--emit`, selftest,
//! inspect, tokenizer loading, ANE info/probe/width) returning typed reports.
//!
//! ```no_run
//! use anedvd_engine::{generate, Engine, GenerateParams, LoadOptions};
//! let engine = Engine::load("model.gguf", &LoadOptions::default(), |_| {})?;
//! let mut session = engine.new_session(2048)?;
//! let prompt = engine.raw_prompt("The capital of France is")?;
//! let out = generate(&mut session, &engine.tokenizer, &prompt, &GenerateParams::default(), |_| {
//!     std::ops::ControlFlow::Continue(())
//! })?;
//! println!("{}", out.text);
//! # Ok::<(), anedvd_engine::Error>(())
//! ```

mod backends;
mod batch;
pub mod constrain;
mod embed;
mod error;
mod generate;
mod load;
pub mod prefix_cache;
pub mod sampler;
pub mod scheduler;
mod session;
pub mod speculative;
pub mod stats;
pub mod tool_format;
pub mod tools;

pub use anedvd_ane::{
    DriverKind, KeepFp16, LowerOptions, RuntimePath, Variant, WeightFormat, DEFAULT_COMPILE_BUDGET,
};
pub use anedvd_chat::{
    Content, ContentPart, FunctionCall, Message, RenderOptions, Timestamp, ToolCall,
};
pub use anedvd_cpu::attention::KvType;
pub use anedvd_cpu::{CpuOptions, IsaCap};
pub use anedvd_graph::{BatchItem, LogitsMode, RopePairing};
pub use anedvd_model::ConfigOverrides;

/// Names of every model family this build reads (for `--family`).
pub fn family_names() -> Vec<&'static str> {
    anedvd_model::family::all().iter().map(|f| f.name).collect()
}
pub use anedvd_chat::BuiltinTemplate;
pub use anedvd_tokenizer::Tokenizer;
pub use backends::{build_backend, BackendChoice, BackendOptions};
pub use batch::EngineBatch;
pub use embed::Pooling;
pub use error::{Error, Result};
pub use generate::{
    check_request, generate, generate_speculative, Decoding, FinishReason, GenerateParams,
    Generation, Step, Timings, TokenEvent,
};
pub use load::{check_tensors, Engine, LoadOptions, LoadStage, TemplateOrigin, TemplateOverride};
pub use sampler::{Sampler, SamplingParams};
pub use session::EngineSession;
