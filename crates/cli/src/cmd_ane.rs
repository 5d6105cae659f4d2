//! `anedvd ane …`: `info` (is the Neural Engine reachable), `probe` (one 1×1
//! conv matmul vs the CPU) and `width` (evaluate cost vs activation width),
//! on the private framework or the simulated driver.

use std::time::{Duration, Instant};

use anedvd_ane::runtime::private::{self, PrivateDriver};
use anedvd_ane::runtime::{Driver, ProgramSource, Runtime, SimDriver, DEFAULT_COMPILE_BUDGET};
use anedvd_mil::blob::{BlobLayout, BlobWriter};
use anedvd_mil::builder::{program, FunctionBuilder};
use anedvd_mil::ir::DType;
use anyhow::{bail, Context, Result};

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

fn command_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn chip() -> String {
    if let Some(s) = command_line("sysctl", &["-n", "machdep.cpu.brand_string"]) {
        return s;
    }
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Runs `anedvd info`: OS, chip, compile budget, then which libraries,
/// classes and selectors resolved. Fails (one line) when the ANE is unreachable.
pub fn run_info(_: &InfoArgs) -> Result<()> {
    let os = command_line("uname", &["-srm"])
        .unwrap_or_else(|| format!("{} {}", std::env::consts::OS, std::env::consts::ARCH));
    println!("os: {os}");
    println!("chip: {}", chip());
    println!(
        "compile budget: {DEFAULT_COMPILE_BUDGET} per process (the compiler fails after ~119); used: {}",
        private::process_compiles()
    );
    println!("status: implemented, unproven on hardware");
    let probe = match private::probe() {
        Ok(p) => p,
        Err(e) => {
            println!("ane: unreachable");
            return Err(e.into());
        }
    };
    for l in &probe.libraries {
        println!("library: {l} loaded");
    }
    let mark = |ok: bool| if ok { "ok" } else { "MISSING" };
    for (c, ok) in &probe.classes {
        println!("class: {c} {}", mark(*ok));
    }
    for (c, s, ok) in &probe.selectors {
        println!("selector: {c} {s} {}", mark(*ok));
    }
    if let Some(reason) = probe.missing() {
        println!("ane: unreachable");
        bail!("ANE unavailable: {reason}");
    }
    println!("ane: reachable (private framework)");
    Ok(())
}

/// Deterministic values in [-1, 1).
fn lcg(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The probe program: `y[1, n, 1, w] = W[n, n] · x[1, n, 1, w]` as a 1×1 conv.
fn projection(n: usize, w: usize, weights: &[f32]) -> Result<ProgramSource> {
    const KEY: &str = "@model_path/weights/w.bin";
    let mut blob = BlobWriter::new(BlobLayout::Aligned);
    let off = blob.add_f32_as_f16(weights);
    let mut b = FunctionBuilder::new("main");
    let x = b.input("x", DType::Fp16, &[1, n, 1, w])?;
    let wv = b.const_blob("w", DType::Fp16, &[n, n, 1, 1], KEY, off)?;
    let y = b.conv("y", &x, &wv)?;
    b.output(&y);
    let text = anedvd_mil::print(&program(vec![b.finish()]));
    Ok(ProgramSource::new(text).with_weight(KEY, blob.finish()))
}

/// f32 CPU reference: `(y, Σ|w·x|)` per output element.
fn cpu_projection(n: usize, w: usize, wt: &[f32], x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut y = vec![0f32; n * w];
    let mut mag = vec![0f32; n * w];
    for o in 0..n {
        for i in 0..n {
            let a = wt[o * n + i];
            for t in 0..w {
                y[o * w + t] += a * x[i * w + t];
                mag[o * w + t] += (a * x[i * w + t]).abs();
            }
        }
    }
    (y, mag)
}

fn check_shape(n: usize, w: usize) -> Result<()> {
    if n == 0 || w == 0 || n > 16384 || w > 16384 {
        bail!("size and width must be in 1..=16384 (got {n}, {w})");
    }
    Ok(())
}

fn probe_on<D: Driver>(mut rt: Runtime<D>, a: &ProbeArgs) -> Result<()> {
    let (n, w) = (a.size, a.width);
    check_shape(n, w)?;
    let sim = rt.driver().name() == "sim";
    let label = if sim { " (simulated)" } else { "" };
    let weights = lcg(1, n * n);
    let x = lcg(2, n * w);
    let src = projection(n, w, &weights)?;
    let t0 = Instant::now();
    let mut k = rt.prepare(&src).context("compile/load")?;
    let prep = t0.elapsed();
    let l = &k.attributes().inputs[0];
    println!(
        "driver: {}{label}; program: {n}x{n} 1x1 conv, width {w}; input row stride {} B, plane stride {} B",
        rt.driver().name(),
        l.row_stride,
        l.plane_stride
    );
    println!("compile+load: {:.1} ms", prep.as_secs_f64() * 1e3);
    let mut y = Vec::new();
    for _ in 0..=a.iters {
        y = rt.run(&mut k, &[("x", &x)])?.remove(0).1;
    }
    let (want, mag) = cpu_projection(n, w, &weights, &x);
    let (mut worst_abs, mut worst_rel, mut bad) = (0f32, 0f32, 0usize);
    for i in 0..want.len() {
        let err = (y[i] - want[i]).abs();
        worst_abs = worst_abs.max(err);
        worst_rel = worst_rel.max(err / (mag[i] + 1e-6));
        if err > 3e-3 * mag[i] + 1e-4 {
            bad += 1;
        }
    }
    let st = k.stats();
    let mean = st.eval_mean().unwrap_or(Duration::ZERO);
    let flops = 2.0 * (n * n * w) as f64;
    println!(
        "evaluate{label}: mean {:.1} us, min {:.1} us over {} calls ({:.2} GFLOP/s)",
        mean.as_secs_f64() * 1e6,
        st.eval_min.unwrap_or_default().as_secs_f64() * 1e6,
        st.evals,
        flops / mean.as_secs_f64().max(1e-12) / 1e9
    );
    println!(
        "vs CPU f32: max abs err {worst_abs:.3e}, max err/Σ|w·x| {worst_rel:.3e}, {bad} of {} outside fp16 tolerance",
        want.len()
    );
    rt.release(k);
    if bad > 0 {
        bail!("probe mismatch: {bad} outputs differ from the CPU reference");
    }
    println!("probe: ok");
    Ok(())
}

/// Runs `anedvd probe`.
pub fn run_probe(a: &ProbeArgs) -> Result<()> {
    match a.driver {
        DriverKind::Private => probe_on(Runtime::new(PrivateDriver::open()?), a),
        DriverKind::Sim => probe_on(Runtime::new(SimDriver::new()), a),
    }
}

fn width_on<D: Driver>(mut rt: Runtime<D>, a: &WidthArgs) -> Result<()> {
    let n = a.size;
    if a.widths.is_empty() {
        bail!("no widths given");
    }
    if a.widths.len() as u64 > u64::from(rt.compiles_left()) {
        bail!(
            "{} widths need {} compiles; {} left in this process's budget",
            a.widths.len(),
            a.widths.len(),
            rt.compiles_left()
        );
    }
    let sim = rt.driver().name() == "sim";
    if sim {
        println!("SIMULATED: times are the CPU interpreter's, not the Neural Engine's");
    }
    println!("| width | row stride B | mean us | us/column | GFLOP/s |");
    println!("|---:|---:|---:|---:|---:|");
    let weights = lcg(1, n * n);
    for &w in &a.widths {
        check_shape(n, w)?;
        let x = lcg(2, n * w);
        let mut k = rt.prepare(&projection(n, w, &weights)?)?;
        rt.run(&mut k, &[("x", &x)])?; // warm-up, not timed below
        let warm = k.stats();
        for _ in 0..a.iters.max(1) {
            rt.run(&mut k, &[("x", &x)])?;
        }
        let st = k.stats();
        let evals = u32::try_from(st.evals - warm.evals).unwrap_or(1).max(1);
        let mean = (st.eval_total - warm.eval_total) / evals;
        let us = mean.as_secs_f64() * 1e6;
        let gflops = 2.0 * (n * n * w) as f64 / mean.as_secs_f64().max(1e-12) / 1e9;
        println!(
            "| {w} | {} | {us:.1} | {:.2} | {gflops:.2} |",
            k.attributes().inputs[0].row_stride,
            us / w as f64
        );
        rt.release(k);
    }
    Ok(())
}

/// Runs `anedvd width`.
pub fn run_width(a: &WidthArgs) -> Result<()> {
    match a.driver {
        DriverKind::Private => width_on(Runtime::new(PrivateDriver::open()?), a),
        DriverKind::Sim => width_on(Runtime::new(SimDriver::new()), a),
    }
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
        assert!(e.starts_with("ANE unavailable: "), "{e}");
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
