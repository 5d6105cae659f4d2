//! The Apple Neural Engine backend: lowers a decoder program into MIL programs
//! and weight blobs ([`lower`]), and compiles, loads and evaluates them through
//! Apple's private framework or a simulated driver ([`runtime`]).

pub mod lower;
pub mod runtime;
