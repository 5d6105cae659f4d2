//! Backend-neutral description of a decoder-only transformer, and the traits
//! every backend implements.
//!
//! A [`DecoderProgram`] is fully resolved: every layer is a [`Block`] of typed
//! variants (a [`Mixer`]: attention with its own head counts, scale, window and
//! RoPE, or a short convolution; a [`FeedForward`]: dense or a mixture of
//! experts; a [`NormPlacement`]), each naming its tensors in a
//! [`WeightSource`](anedvd_base::WeightSource).
//! A backend therefore never needs to know which model family it runs, and this
//! crate knows nothing about file formats or family names (the `model` crate
//! builds programs from family tables).
//!
//! Backends compile then run: [`Backend::compile`] gives an [`Executable`], an
//! executable opens [`Session`]s, and a session owns its KV cache and turns
//! token batches into logits.
//!
//! Every intermediate a backend computes is named `blk.{i}.{name}` (see
//! [`intermediate`]) so activations can be dumped and compared layer by layer.
//!
//! ```
//! use anedvd_graph::{Role, RopePairing};
//! assert_eq!(Role::AttnQ.name(), "attn_q");
//! assert_eq!(RopePairing::Neox.name(), "neox");
//! ```

mod batch;
mod block;
pub mod dump;
mod error;
pub mod intermediate;
mod memory;
mod program;
mod traits;

pub use batch::{
    validate_batch, validate_forward, BatchItem, BatchSession, SavedRows, SequentialBatch,
};
pub use block::{
    Activation, Attention, AttentionBias, Block, DenseFfn, ExpertTensors, FeedForward, Gating,
    Mixer, MoeFfn, NormPlacement, PerLayerInput, SharedExpert, ShortConv,
};
pub use error::{Error, Result};
pub use memory::MemorySource;
pub use program::{DecoderProgram, NormSpec, PerLayerEmbedding, Role, Rope, RopePairing};
pub use traits::{Backend, Executable, LogitsMode, Session};
