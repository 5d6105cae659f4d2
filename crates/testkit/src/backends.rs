//! Every backend under test.

use anedvd_ane::{AneBackend, AneSimBackend, DriverKind, LowerOptions, Variant};
use anedvd_cpu::CpuBackend;
use anedvd_graph::Backend;

/// A backend of the conformance suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestBackend {
    /// The CPU backend (2 threads).
    Cpu,
    /// The ANE lowering run directly by the MIL simulator.
    AneSim(Variant),
    /// The ANE lowering through the ANE runtime on the simulated driver.
    AneSimDriver(Variant),
}

impl TestBackend {
    /// Every backend and lowering variant.
    pub const ALL: [TestBackend; 5] = [
        TestBackend::Cpu,
        TestBackend::AneSim(Variant::Split),
        TestBackend::AneSim(Variant::Fused),
        TestBackend::AneSimDriver(Variant::Split),
        TestBackend::AneSimDriver(Variant::Fused),
    ];

    /// `cpu`, `ane-sim/fused`, `ane+sim/split`, ...
    pub fn name(self) -> String {
        match self {
            TestBackend::Cpu => "cpu".into(),
            TestBackend::AneSim(v) => format!("ane-sim/{}", v.name()),
            TestBackend::AneSimDriver(v) => format!("ane+sim/{}", v.name()),
        }
    }

    /// The backend's own name, as its error messages say it.
    pub fn backend_name(self) -> &'static str {
        match self {
            TestBackend::Cpu => anedvd_cpu::NAME,
            TestBackend::AneSim(_) => "ane-sim",
            TestBackend::AneSimDriver(_) => "ane",
        }
    }

    /// True for the backends that run the ANE lowering (fp16).
    pub fn is_ane(self) -> bool {
        !matches!(self, TestBackend::Cpu)
    }

    /// Builds it.
    pub fn build(self) -> Box<dyn Backend> {
        let lowering = |variant| LowerOptions {
            variant,
            ..Default::default()
        };
        match self {
            TestBackend::Cpu => Box::new(CpuBackend::new(2).expect("a 2-thread pool")),
            TestBackend::AneSim(v) => Box::new(AneSimBackend::new(lowering(v))),
            TestBackend::AneSimDriver(v) => Box::new(AneBackend::new(lowering(v), DriverKind::Sim)),
        }
    }
}
