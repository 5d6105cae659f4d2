//! Every backend under test.

use anedvd_ane::lower::{layer_views, resident, RuntimePath};
use anedvd_ane::{AneBackend, AneSimBackend, DriverKind, LowerOptions, Variant};
use anedvd_cpu::CpuBackend;
use anedvd_graph::{Backend, DecoderProgram};

/// Positions of the resident variant's caches in the suites: above every
/// fixture's and oracle case's prompt plus greedy tokens.
pub const RESIDENT_CONTEXT: usize = 128;

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
    pub const ALL: [TestBackend; 7] = [
        TestBackend::Cpu,
        TestBackend::AneSim(Variant::Split),
        TestBackend::AneSim(Variant::Fused),
        TestBackend::AneSim(Variant::Resident),
        TestBackend::AneSimDriver(Variant::Split),
        TestBackend::AneSimDriver(Variant::Fused),
        TestBackend::AneSimDriver(Variant::Resident),
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

    /// Whether it runs `p`: the resident variant refuses what
    /// `resident::refusal` names (by name, at compile time; today only K/V
    /// shared between layers whose RoPE pairs elements differently); every
    /// other backend runs every family.
    pub fn holds(self, p: &DecoderProgram) -> bool {
        match self {
            TestBackend::AneSim(Variant::Resident)
            | TestBackend::AneSimDriver(Variant::Resident) => {
                layer_views(p, "ane-sim").is_ok_and(|v| resident::refusal(&v).is_none())
            }
            _ => true,
        }
    }

    /// Builds it.
    pub fn build(self) -> Box<dyn Backend> {
        let lowering = |variant| match variant {
            // the variant of the e5rt path, two layers per program so
            // the programs' hand-over is exercised too
            Variant::Resident => LowerOptions {
                variant,
                path: RuntimePath::E5rt,
                layers_per_program: 2,
                context: RESIDENT_CONTEXT,
                ..Default::default()
            },
            _ => LowerOptions {
                variant,
                ..Default::default()
            },
        };
        match self {
            TestBackend::Cpu => Box::new(CpuBackend::new(2).expect("a 2-thread pool")),
            TestBackend::AneSim(v) => Box::new(AneSimBackend::new(lowering(v))),
            TestBackend::AneSimDriver(v) => Box::new(AneBackend::new(lowering(v), DriverKind::Sim)),
        }
    }
}
