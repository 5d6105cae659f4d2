//! MIL (Core ML Model Intermediate Language) for the Apple Neural Engine.
//!
//! Placeholder docs; see the full crate docs below.

mod error;
pub mod blob;
pub mod ir;
mod lex;
pub mod parse;
pub mod print;

pub use error::{Error, Result};
pub use ir::*;
pub use parse::parse;
pub use print::print;

pub mod rules {
    //! stub
    /// stub
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct RuleId;
    impl std::fmt::Display for RuleId {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("x") }
    }
}
