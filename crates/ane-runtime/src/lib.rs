//! The ANE runtime: a driver interface, the private-framework driver and a simulated driver.
//!
//! Status: **implemented, unproven on hardware.** Nothing here has run on a
//! Mac yet; the private driver is type-checked everywhere and fails with
//! `ANE unavailable: …` where the framework cannot be loaded. See the crate's
//! `README.md` for building and running on macOS. Its own crate so the
//! graph API (`anedvd-forge`) can run programs on it without the model
//! lowering; `anedvd_ane::runtime` re-exports it.
//!
//! Layers, bottom up:
//! * [`driver::Driver`]: one method per private-API step (compile, load,
//!   attributes, surfaces, request, evaluate, unload), with handles.
//!   [`private::PrivateDriver`] talks to `AppleNeuralEngine.framework`
//!   through `objc_msgSend` resolved at run time; [`sim::SimDriver`]
//!   reproduces the documented behaviour over the MIL simulator.
//! * [`layout`]: strided fp16/fp32 scatter/gather against the layouts the
//!   loaded model reports (planar 64-byte rows vs the flat style).
//! * [`kernel::Runtime`]: compile-budget cap, compiled-program reuse,
//!   uniform surface allocation, one request per kernel, retry with
//!   exponential backoff ([`retry`]) and per-kernel timing.
//! * [`programs::Programs`]: lowered single-input programs prepared once
//!   and dispatched by name (what a backend holds).
//!
//! A second path, [`e5rt`], drives Espresso's `e5rt_*` C API instead of
//! `_ANEInMemoryModel`: [`e5rt::E5rtApi`] (one method per step),
//! [`e5rt::E5rtPrivate`] (Espresso resolved at run time) and
//! [`e5rt::E5rtSim`] (over the MIL simulator), [`e5rt::E5rtRuntime`]
//! (several named inputs and outputs of any sizes, dense fp16, state
//! aliased output → input) and [`e5rt::E5rtPrograms`]. Also unproven on
//! hardware.
//!
//! ```
//! use anedvd_ane_runtime::{ProgramSource, Runtime, SimDriver};
//! let mil = "program(1.3)\n{\n  func main<ios18>(tensor<fp16, [1, 2, 1, 4]> x) {\n    \
//!            tensor<fp16, [1, 2, 1, 4]> y = relu(x = x)[name = string(\"y\")];\n  } -> (y);\n}\n";
//! let mut rt = Runtime::new(SimDriver::new());
//! let mut k = rt.prepare(&ProgramSource::new(mil))?;
//! let out = rt.run(&mut k, &[("x", &[-1.0, 2.0, -3.0, 4.0, 5.0, -6.0, 7.0, -8.0])])?;
//! assert_eq!(out[0].1, [0.0, 2.0, 0.0, 4.0, 5.0, 0.0, 7.0, 0.0]);
//! rt.release(k);
//! # Ok::<(), anedvd_ane_runtime::Error>(())
//! ```

pub mod attrs;
pub mod driver;
pub mod e5rt;
mod error;
pub mod kernel;
pub mod layout;
pub mod modeldir;
pub mod private;
pub mod programs;
pub mod retry;
pub mod sim;

pub use driver::{Driver, ModelAttributes, ModelId, ProgramSource, RequestId, SurfaceId, QOS};
pub use error::{E5rtStep, Error, Op, Result};
pub use kernel::{Kernel, KernelStats, Runtime, RuntimeStats, DEFAULT_COMPILE_BUDGET};
pub use layout::{ElemType, TensorLayout};
pub use private::PrivateDriver;
pub use programs::Programs;
pub use retry::RetryPolicy;
pub use sim::SimDriver;
