//! The second ANE runtime path: Espresso's `e5rt_*` C API (ane-evidence.md §c–§d).
//!
//! Status: **implemented, unproven on hardware.** Nothing here has run on a
//! Mac; the call sequence and signatures are transcribed from ANEForge,
//! which drives e5rt on M1 Max and M5 Pro.
//!
//! How it differs from the in-memory path ([`crate::Driver`]):
//! * a program is compiled from a file (`model.mil` + weight files) into a
//!   library once, and its function `main` can become any number of
//!   precompiled compute operations (each one loaded program, ~128 per
//!   process, with its own ports and buffers);
//! * ports are looked up by MIL name and hold **dense** data in the MIL
//!   shape (no 64-byte row padding); inputs and outputs may be several, of
//!   different sizes;
//! * an input port can be bound to an output's buffer before the first
//!   encode, so a state (KV cache, optimiser moments) stays resident across
//!   executes.
//!
//! Layers, bottom up: [`E5rtApi`] (one method per call-sequence step, plain
//! handles), with [`E5rtPrivate`] (Espresso resolved at run time) and
//! [`E5rtSim`] (the documented behaviour over the MIL simulator);
//! [`E5rtRuntime`] / [`E5rtFunction`] / [`E5rtProgram`] (compile a
//! [`crate::ProgramSource`] once, instantiate programs from it, or prepare
//! both at once; alias, write/read f32 by port name, execute, timing,
//! release);
//! [`E5rtPrograms`] (single-input programs by name, what a backend holds).
//!
//! ```
//! use anedvd_ane_runtime::e5rt::{E5rtRuntime, E5rtSim};
//! use anedvd_ane_runtime::ProgramSource;
//! // s' = s + x, with the state aliased: each execute accumulates in place.
//! let mil = "program(1.3)\n{\n  func main<ios18>(tensor<fp16, [1, 4]> s, tensor<fp16, [1, 4]> x) {\n    \
//!            tensor<fp16, [1, 4]> s_next = add(x = s, y = x)[name = string(\"s_next\")];\n  \
//!            } -> (s_next);\n}\n";
//! let mut rt = E5rtRuntime::new(E5rtSim::new());
//! let mut p = rt.prepare(&ProgramSource::new(mil))?;
//! rt.alias(&mut p, "s_next", "s")?;
//! rt.write(&mut p, "x", &[1.0, 2.0, 3.0, 4.0])?;
//! rt.execute(&mut p)?;
//! rt.execute(&mut p)?;
//! assert_eq!(rt.read(&mut p, "s")?, [2.0, 4.0, 6.0, 8.0]);
//! rt.release(p);
//! # Ok::<(), anedvd_ane_runtime::Error>(())
//! ```

mod api;
pub mod private;
mod program;
mod programs;
mod sim;

pub use api::{
    port_specs, BufferId, E5rtApi, FunctionId, LibraryId, OperationId, PortId, PortSpec, StreamId,
    BUFFER_TYPE_CPU, DEVICE_MASK_ANE, MAIN_FUNCTION, MAX_PORT_BYTES, PROGRAM_LIMIT,
};
pub use private::{E5rtPrivate, E5rtProbe};
pub use program::{E5rtFunction, E5rtProgram, E5rtRuntime, DEFAULT_PROGRAM_BUDGET};
pub use programs::E5rtPrograms;
pub use sim::E5rtSim;
