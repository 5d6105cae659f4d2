//! The Apple Neural Engine backend: lowers a decoder program into MIL programs
//! and weight blobs ([`lower`]), compiles, loads and evaluates them through
//! Apple's private framework or a simulated driver ([`runtime`]), and runs
//! decoders on them behind the `graph` backend traits ([`backend`]:
//! [`AneSimBackend`] executes every program on the MIL simulator,
//! [`AneBackend`] through the runtime on a driver). The host-side work
//! (embedding, q/k norm, RoPE, the KV cache, attention) calls the CPU
//! backend's exported ops (`anedvd_cpu::attention`, `anedvd_cpu::kernels`).

pub mod backend;
pub mod lower;
pub use anedvd_ane_runtime as runtime;

pub use backend::{
    AneBackend, AneExecutable, AneSimBackend, CompileReport, DriverKind, LowerOptions, Variant,
    DEFAULT_COMPILE_BUDGET,
};
pub use lower::sensitivity::KeepFp16;
pub use lower::{RuntimePath, WeightFormat};
