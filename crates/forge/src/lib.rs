//! `anedvd-forge`: a lazy operator graph compiled to one ANE program.
//!
//! Build a graph with [`Graph`] and [`Tensor`] methods (shapes are inferred
//! and checked as you build), then [`compile`] the outputs into a single MIL
//! function and weight file: one program, one dispatch. [`validate`] runs
//! the chosen runtime path's rules first and names the refused node;
//! [`grad`] adds reverse-mode gradients as ordinary graph ops, so a training
//! step ([`Trainer`]) is one program too, with the weights and optimizer
//! state carried between runs by output-to-input aliasing.
//!
//! **The engine here is the simulator**: every program runs on anedvd's fp16
//! MIL simulator on the CPU ([`Unit::Simulator`]), after the rule checks of
//! the chosen path (by default e5rt, whose op surface the evidence covers
//! best). Nothing in this crate has run on an ANE.
//!
//! ```
//! use anedvd_forge::{compile, CompileOptions, Graph};
//! let g = Graph::new();
//! let x = g.input("x", &[2, 3])?;
//! let w = g.param("w", &[3, 2], vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0])?;
//! let y = x.matmul(&w)?.relu()?;
//! let mut exe = compile(&[&y], &CompileOptions::default())?;
//! let out = exe.run(&[("x", &[1.0, 2.0, 3.0, -4.0, 0.0, 1.0][..])])?;
//! assert_eq!(out[0].values, vec![4.0, 5.0, 0.0, 1.0]);
//! assert_eq!(exe.dispatches(), 1);
//! # Ok::<(), anedvd_forge::Error>(())
//! ```

pub mod autograd;
pub mod compress;
pub mod cost;
mod error;
mod exec;
pub mod graph;
pub mod lower;
pub mod numeric;
pub mod optim;

pub use anedvd_ane_runtime::e5rt::{E5rtPrivate, E5rtSim};
pub use anedvd_ane_runtime::{PrivateDriver, SimDriver};
pub use anedvd_mil::quantize::WeightFormat;
pub use anedvd_mil::registry;
pub use anedvd_mil::registry::RuntimePath;
pub use autograd::grad;
pub use error::{Error, Result};
pub use exec::{
    compile, validate, violations, Executable, Loaded, LoadedE5rt, NodeViolation, Output, Unit,
};
pub use graph::{Graph, Tensor};
pub use lower::{Choice, CompileOptions, MatmulStyle, ParamMode};
pub use optim::{Optimizer, Trainer};
