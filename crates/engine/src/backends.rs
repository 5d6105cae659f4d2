//! Building a backend from load options: the one place that knows every
//! backend crate and how its options map to a constructor.

use crate::Result;
use anedvd_ane::{AneBackend, AneSimBackend, DriverKind, LowerOptions, DEFAULT_COMPILE_BUDGET};
use anedvd_cpu::{CpuBackend, CpuOptions};
use anedvd_graph::Backend;

/// Which backend runs the decoder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// The CPU backend (the default, and the reference).
    #[default]
    Cpu,
    /// The ANE lowering run directly by the MIL fp16 simulator.
    AneSim,
    /// The ANE lowering through the ANE runtime with the given driver
    /// (`Private` and `E5rt` need macOS with an ANE; `Sim` is the simulated
    /// driver of the lowering's path).
    Ane(DriverKind),
}

impl BackendChoice {
    /// Parses `cpu`, `ane-sim`, or `ane` with a driver name (`ane`/`private`,
    /// `e5rt`, `sim`).
    pub fn parse(backend: &str, driver: &str) -> Option<BackendChoice> {
        match backend {
            "cpu" => Some(BackendChoice::Cpu),
            "ane-sim" => Some(BackendChoice::AneSim),
            "ane" => DriverKind::from_name(driver).map(BackendChoice::Ane),
            _ => None,
        }
    }

    /// True for the backends that run the ANE lowering.
    pub fn is_ane(self) -> bool {
        !matches!(self, BackendChoice::Cpu)
    }
}

/// How each backend is configured; a backend reads only its own part.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackendOptions {
    /// The CPU backend: threads, instruction-set cap, weight packing.
    pub cpu: CpuOptions,
    /// The ANE backends: how the decoder is lowered to MIL programs.
    pub lowering: LowerOptions,
    /// Compiles the ANE runtime may use in this process (the ANE compiler
    /// fails after ~119 per process).
    pub compile_budget: u32,
}

impl Default for BackendOptions {
    fn default() -> Self {
        BackendOptions {
            cpu: CpuOptions::default(),
            lowering: LowerOptions::default(),
            compile_budget: DEFAULT_COMPILE_BUDGET,
        }
    }
}

impl BackendOptions {
    /// The defaults with `threads` CPU threads (0 = one per logical CPU).
    pub fn with_threads(threads: usize) -> Self {
        let mut options = BackendOptions::default();
        options.cpu.threads = threads;
        options
    }
}

/// The ANE runtime backend on `driver` configured by `options` (its host
/// side on the CPU options' instruction set).
pub fn ane_backend(driver: DriverKind, options: &BackendOptions) -> AneBackend {
    AneBackend::new(options.lowering, driver)
        .with_compile_budget(options.compile_budget)
        .with_host_isa(options.cpu.isa)
}

/// Builds the backend `choice` configured by `options`.
pub fn build_backend(choice: BackendChoice, options: &BackendOptions) -> Result<Box<dyn Backend>> {
    Ok(match choice {
        BackendChoice::Cpu => Box::new(CpuBackend::with_options(options.cpu)?),
        BackendChoice::AneSim => {
            Box::new(AneSimBackend::new(options.lowering).with_host_isa(options.cpu.isa))
        }
        BackendChoice::Ane(driver) => Box::new(ane_backend(driver, options)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!(BackendChoice::parse("cpu", "ane"), Some(BackendChoice::Cpu));
        assert_eq!(
            BackendChoice::parse("ane", "sim"),
            Some(BackendChoice::Ane(DriverKind::Sim))
        );
        assert_eq!(
            BackendChoice::parse("ane", "e5rt"),
            Some(BackendChoice::Ane(DriverKind::E5rt))
        );
        assert_eq!(BackendChoice::parse("gpu", "ane"), None);
        assert_eq!(BackendChoice::parse("ane", "gpu"), None);
    }

    #[test]
    fn every_choice_builds() {
        let options = BackendOptions::with_threads(1);
        for choice in [
            BackendChoice::Cpu,
            BackendChoice::AneSim,
            BackendChoice::Ane(DriverKind::Sim),
        ] {
            assert!(build_backend(choice, &options).is_ok(), "{choice:?}");
        }
    }
}
