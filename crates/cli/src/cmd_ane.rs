//! `anedvd ane …`: `info` (is the Neural Engine reachable, on each runtime
//! path), `probe` (one 1×1 conv matmul vs the CPU) and `width` (evaluate
//! cost vs activation width), on the private framework or the simulated driver.

use anedvd_engine::tools::device;
use anyhow::{bail, Result};

/// Which driver runs the programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverKind {
    /// AppleNeuralEngine.framework (macOS on Apple silicon); also spelled `ane`.
    #[value(alias = "ane")]
    Private,
    /// The MIL simulator on the CPU (any OS; timings are not ANE timings).
    Sim,
}

/// Arguments of `anedvd info`.
#[derive(Debug, Clone, clap::Args)]
pub struct InfoArgs {}

/// Arguments of `anedvd probe`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// Channels in and out of the N×N projection.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub size: usize,
    /// Activation width (tokens per evaluation).
    #[arg(long, default_value_t = 64)]
    pub width: usize,
    /// Timed evaluations after the first.
    #[arg(long, default_value_t = 10)]
    pub iters: u32,
    /// Driver.
    #[arg(long, value_enum, default_value_t = DriverKind::Private)]
    pub driver: DriverKind,
}

/// Arguments of `anedvd width`.
#[derive(Debug, Clone, clap::Args)]
pub struct WidthArgs {
    /// Channels in and out of the N×N projection.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub size: usize,
    /// Widths to measure (one compile each).
    #[arg(long, value_delimiter = ',', default_value = "1,8,16,32,64,128,256")]
    pub widths: Vec<usize>,
    /// Timed evaluations per width.
    #[arg(long, default_value_t = 20)]
    pub iters: u32,
    /// Driver.
    #[arg(long, value_enum, default_value_t = DriverKind::Private)]
    pub driver: DriverKind,
}

impl DriverKind {
    fn engine(self) -> anedvd_engine::DriverKind {
        match self {
            DriverKind::Private => anedvd_engine::DriverKind::Private,
            DriverKind::Sim => anedvd_engine::DriverKind::Sim,
        }
    }
}

/// Runs `anedvd info`: OS, chip, compile budget, then for each runtime path
/// which libraries, classes, selectors or symbols resolved. Fails (one line
/// naming both reasons) when neither path is reachable.
pub fn run_info(_: &InfoArgs) -> Result<()> {
    let r = device::info();
    println!("os: {}", r.os);
    println!("chip: {}", r.chip);
    println!(
        "compile budget: {} per process (the compiler fails after ~119); used: {}",
        r.compile_budget, r.compiles_used
    );
    println!("status: implemented, unproven on hardware");
    let mark = |ok: bool| if ok { "ok" } else { "MISSING" };
    println!("path inmem (_ANEInMemoryModel, --driver ane):");
    let inmem = match &r.framework {
        Ok(probe) => {
            for l in &probe.libraries {
                println!("  library: {l} loaded");
            }
            for (c, ok) in &probe.classes {
                println!("  class: {c} {}", mark(*ok));
            }
            for (c, s, ok) in &probe.selectors {
                println!("  selector: {c} {s} {}", mark(*ok));
            }
            probe.missing()
        }
        Err(e) => Some(unavailable_reason(e)),
    };
    print_reachability("inmem", inmem.as_deref());
    println!("path e5rt (Espresso e5rt_* C API, --driver e5rt --ane-path e5rt):");
    let e5rt = match &r.e5rt {
        Ok(probe) => {
            println!("  library: {} loaded", probe.library);
            for (s, ok) in &probe.symbols {
                println!("  symbol: {s} {}", mark(*ok));
            }
            probe.missing()
        }
        Err(e) => Some(unavailable_reason(e)),
    };
    print_reachability("e5rt", e5rt.as_deref());
    match (inmem, e5rt) {
        (Some(a), Some(b)) => {
            println!("ane: unreachable");
            bail!("ANE unavailable: inmem: {a}; e5rt: {b}")
        }
        _ => {
            println!("ane: reachable");
            Ok(())
        }
    }
}

/// The reason of an `ANE unavailable: <reason>` error (else the whole message).
fn unavailable_reason(e: &anedvd_engine::Error) -> String {
    let s = e.to_string();
    s.strip_prefix("ANE unavailable: ")
        .unwrap_or(&s)
        .to_string()
}

fn print_reachability(path: &str, missing: Option<&str>) {
    match missing {
        None => println!("  {path}: reachable"),
        Some(reason) => println!("  {path}: unreachable ({reason})"),
    }
}

/// Runs `anedvd probe`.
pub fn run_probe(a: &ProbeArgs) -> Result<()> {
    let r = device::probe(a.driver.engine(), a.size, a.width, a.iters)?;
    let label = if r.simulated { " (simulated)" } else { "" };
    let n = r.size;
    println!(
        "driver: {}{label}; program: {n}x{n} 1x1 conv, width {}; input row stride {} B, plane stride {} B",
        r.driver, r.width, r.row_stride, r.plane_stride
    );
    println!("compile+load: {:.1} ms", r.prepare.as_secs_f64() * 1e3);
    println!(
        "evaluate{label}: mean {:.1} us, min {:.1} us over {} calls ({:.2} GFLOP/s)",
        r.eval_mean.as_secs_f64() * 1e6,
        r.eval_min.as_secs_f64() * 1e6,
        r.evals,
        r.gflops
    );
    println!(
        "vs CPU f32: max abs err {:.3e}, max err/Σ|w·x| {:.3e}, {} of {} outside fp16 tolerance",
        r.max_abs_err, r.max_rel_err, r.bad, r.outputs
    );
    if r.bad > 0 {
        bail!(
            "probe mismatch: {} outputs differ from the CPU reference",
            r.bad
        );
    }
    println!("probe: ok");
    Ok(())
}

/// Runs `anedvd width`.
pub fn run_width(a: &WidthArgs) -> Result<()> {
    let r = device::width(a.driver.engine(), a.size, &a.widths, a.iters)?;
    if r.simulated {
        println!("SIMULATED: times are the CPU interpreter's, not the Neural Engine's");
    }
    println!("| width | row stride B | mean us | us/column | GFLOP/s |");
    println!("|---:|---:|---:|---:|---:|");
    for row in &r.rows {
        println!(
            "| {} | {} | {:.1} | {:.2} | {:.2} |",
            row.width,
            row.row_stride,
            row.mean_us,
            row.mean_us / row.width as f64,
            row.gflops
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_through_the_simulator_passes() {
        let a = ProbeArgs {
            size: 32,
            width: 16,
            iters: 1,
            driver: DriverKind::Sim,
        };
        assert!(run_probe(&a).is_ok());
    }

    #[test]
    fn width_through_the_simulator_runs() {
        let a = WidthArgs {
            size: 16,
            widths: vec![1, 32],
            iters: 1,
            driver: DriverKind::Sim,
        };
        assert!(run_width(&a).is_ok());
    }

    #[test]
    fn driver_ane_is_an_alias_of_private() {
        use clap::ValueEnum;
        assert_eq!(
            DriverKind::from_str("ane", false).ok(),
            Some(DriverKind::Private)
        );
        assert_eq!(
            DriverKind::from_str("sim", false).ok(),
            Some(DriverKind::Sim)
        );
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn private_commands_fail_with_one_line_off_macos() {
        let e = run_info(&InfoArgs {}).err().map(|e| format!("{e:#}"));
        let e = e.unwrap_or_default();
        assert!(e.starts_with("ANE unavailable: inmem: cannot load "), "{e}");
        assert!(e.contains("; e5rt: cannot load /System/Library/PrivateFrameworks/Espresso"));
        assert!(!e.contains('\n'));
        let p = ProbeArgs {
            size: 8,
            width: 8,
            iters: 1,
            driver: DriverKind::Private,
        };
        let e = run_probe(&p)
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(e.starts_with("ANE unavailable: "), "{e}");
    }
}
