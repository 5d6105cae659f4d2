//! The driver interface: one method per step of the private-API call sequence.
//!
//! A driver owns every framework object it creates and hands out plain
//! numeric handles ([`ModelId`], [`SurfaceId`], [`RequestId`]); dropping the
//! driver releases whatever is still alive. The interface is object safe, so
//! callers can pick a driver at run time (`Box<dyn Driver>`).

use std::collections::BTreeMap;

use anedvd_mil::ir::Program;
use anedvd_mil::sim::Weights;

use super::error::Result;
use super::layout::TensorLayout;

/// QoS passed to compile/load/evaluate/unload (21 everywhere in the prior art).
pub const QOS: u32 = 21;

/// A program to compile: MIL text plus its weight files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgramSource {
    /// UTF-8 MIL text (`program(1.3) …`).
    pub mil: String,
    /// Weight files keyed by their MIL path (`@model_path/weights/w.bin`).
    pub weights: BTreeMap<String, Vec<u8>>,
}

impl ProgramSource {
    /// A source with no weights.
    pub fn new(mil: impl Into<String>) -> Self {
        ProgramSource {
            mil: mil.into(),
            weights: BTreeMap::new(),
        }
    }

    /// Prints `program` to MIL text and copies its weight files (the form
    /// `anedvd_ane::lower` produces kernels in).
    pub fn from_program(program: &Program, weights: &Weights) -> Self {
        ProgramSource {
            mil: anedvd_mil::print(program),
            weights: weights
                .paths()
                .filter_map(|p| weights.get(p).map(|b| (p.to_string(), b.to_vec())))
                .collect(),
        }
    }

    /// Adds a weight file.
    pub fn with_weight(mut self, key: impl Into<String>, bytes: Vec<u8>) -> Self {
        self.weights.insert(key.into(), bytes);
        self
    }

    /// A 64-bit FNV-1a digest of the MIL text and weight keys and bytes, used
    /// as the runtime's compiled-program cache key.
    pub fn digest(&self) -> u64 {
        let mut h = Fnv::new();
        h.write(self.mil.as_bytes());
        for (k, v) in &self.weights {
            h.write(&[0xff]);
            h.write(k.as_bytes());
            h.write(&[0xfe]);
            h.write(&(v.len() as u64).to_le_bytes());
            h.write(v);
        }
        h.0
    }
}

pub(crate) struct Fnv(pub(crate) u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A compiled (and possibly loaded) model of a driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelId(pub u64);

/// An I/O surface of a driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SurfaceId(pub u64);

/// A request (bound inputs and outputs) of a driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// What a loaded model reports about its I/O (`NetworkStatusList[0]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelAttributes {
    /// `LiveInputList`, in binding order (request input index = position).
    pub inputs: Vec<TensorLayout>,
    /// `LiveOutputList`, in binding order.
    pub outputs: Vec<TensorLayout>,
}

/// The private API, one method per step (ane-spec.md §5.3). Every method
/// maps to the framework call(s) named in its docs; the simulated driver
/// reproduces the documented behaviour of each.
pub trait Driver {
    /// Short name (`private`, `sim`).
    fn name(&self) -> &'static str;

    /// Builds the descriptor and in-memory model, writes `model.mil` and the
    /// weight files under `$TMPDIR/<hexStringIdentifier>/` and compiles with
    /// QoS 21. Every call counts against the process's compile budget.
    fn compile(&mut self, src: &ProgramSource) -> Result<ModelId>;

    /// `loadWithQoS:21`.
    fn load(&mut self, model: ModelId) -> Result<()>;

    /// Reads `LiveInputList`/`LiveOutputList` of procedure 0 of a loaded model.
    fn attributes(&mut self, model: ModelId) -> Result<ModelAttributes>;

    /// Creates a surface of `bytes` bytes wrapped for the framework.
    fn create_surface(&mut self, bytes: usize) -> Result<SurfaceId>;

    /// Size in bytes of a surface.
    fn surface_len(&self, surface: SurfaceId) -> Result<usize>;

    /// Locks the surface, copies `data` to its start, unlocks.
    fn write_surface(&mut self, surface: SurfaceId, data: &[u8]) -> Result<()>;

    /// Locks the surface read-only, copies its start into `out`, unlocks.
    fn read_surface(&mut self, surface: SurfaceId, out: &mut [u8]) -> Result<()>;

    /// Builds one reusable request binding `inputs[i]` to input index `i`
    /// and `outputs[j]` to output index `j` (procedure 0).
    fn build_request(
        &mut self,
        model: ModelId,
        inputs: &[SurfaceId],
        outputs: &[SurfaceId],
    ) -> Result<RequestId>;

    /// `evaluateWithQoS:21 options:@{} request:error:` (synchronous).
    fn evaluate(&mut self, model: ModelId, request: RequestId) -> Result<()>;

    /// `unloadWithQoS:21 error:`.
    fn unload(&mut self, model: ModelId) -> Result<()>;

    /// Releases a request.
    fn release_request(&mut self, request: RequestId);

    /// Releases a surface.
    fn release_surface(&mut self, surface: SurfaceId);

    /// Unloads (if loaded) and releases a model and deletes its temp directory.
    fn release_model(&mut self, model: ModelId);

    /// Compiles this driver has issued in this process.
    fn compiles(&self) -> u32;
}
