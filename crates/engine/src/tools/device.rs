//! The Neural Engine itself: `info` (is each runtime path reachable, and why
//! not), `probe` (one 1×1-conv matmul against the CPU) and `width`
//! (evaluation cost against activation width), on the private framework or
//! the simulated driver of the in-memory path.

use crate::{DriverKind, Error, Result};
use anedvd_ane::backend::check::pseudo_random;
use anedvd_ane::runtime::private::{self, PrivateDriver};
use anedvd_ane::runtime::{Driver, ProgramSource, Runtime, SimDriver, DEFAULT_COMPILE_BUDGET};
use anedvd_mil::blob::{BlobLayout, BlobWriter};
use anedvd_mil::builder::{program, FunctionBuilder};
use anedvd_mil::ir::DType;
use std::time::{Duration, Instant};

pub use anedvd_ane::runtime::e5rt::E5rtProbe;
pub use anedvd_ane::runtime::private::Probe as FrameworkProbe;

/// What `info` found.
#[derive(Debug)]
pub struct InfoReport {
    /// Operating system (`uname -srm`).
    pub os: String,
    /// The CPU / chip name.
    pub chip: String,
    /// Compiles allowed per process.
    pub compile_budget: u32,
    /// Compiles this process issued so far.
    pub compiles_used: u32,
    /// The in-memory path: the framework's libraries, classes and
    /// selectors, or why they could not be looked up at all.
    pub framework: Result<FrameworkProbe>,
    /// The e5rt path: Espresso's symbols, or why Espresso could not be loaded.
    pub e5rt: Result<E5rtProbe>,
}

/// Looks for both paths' frameworks (never fails itself; see
/// [`InfoReport::framework`], [`InfoReport::e5rt`] and their `missing()`).
pub fn info() -> InfoReport {
    InfoReport {
        os: command_line("uname", &["-srm"])
            .unwrap_or_else(|| format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)),
        chip: chip(),
        compile_budget: DEFAULT_COMPILE_BUDGET,
        compiles_used: private::process_compiles(),
        framework: private::probe().map_err(Error::from),
        e5rt: anedvd_ane::runtime::e5rt::private::probe().map_err(Error::from),
    }
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

/// What `probe` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeReport {
    /// The driver's name (`private`, `sim`).
    pub driver: &'static str,
    /// True on the simulated driver (times are the CPU interpreter's).
    pub simulated: bool,
    /// Channels in and out.
    pub size: usize,
    /// Activation width.
    pub width: usize,
    /// The input surface's row stride in bytes.
    pub row_stride: usize,
    /// The input surface's plane stride in bytes.
    pub plane_stride: usize,
    /// Compile and load time.
    pub prepare: Duration,
    /// Mean evaluate time.
    pub eval_mean: Duration,
    /// Fastest evaluate.
    pub eval_min: Duration,
    /// Evaluations.
    pub evals: u64,
    /// Throughput at the mean time.
    pub gflops: f64,
    /// Largest |ANE − CPU|.
    pub max_abs_err: f32,
    /// Largest |ANE − CPU| / Σ|w·x|.
    pub max_rel_err: f32,
    /// Outputs outside the fp16 tolerance.
    pub bad: usize,
    /// Outputs compared.
    pub outputs: usize,
}

/// Compiles `y = W·x` (N×N, 1×1 conv, width W) on `driver`, evaluates it
/// `iters + 1` times and compares with an f32 CPU matmul.
pub fn probe(driver: DriverKind, size: usize, width: usize, iters: u32) -> Result<ProbeReport> {
    match driver {
        DriverKind::Private => probe_on(Runtime::new(PrivateDriver::open()?), size, width, iters),
        DriverKind::Sim => probe_on(Runtime::new(SimDriver::new()), size, width, iters),
        DriverKind::E5rt | DriverKind::E5rtSim => Err(in_memory_only(driver)),
    }
}

fn probe_on<D: Driver>(mut rt: Runtime<D>, n: usize, w: usize, iters: u32) -> Result<ProbeReport> {
    check_shape(n, w)?;
    let weights = pseudo_random(1, n * n);
    let x = pseudo_random(2, n * w);
    let src = projection(n, w, &weights)?;
    let t0 = Instant::now();
    let mut k = rt.prepare(&src)?;
    let prepare = t0.elapsed();
    let l = &k.attributes().inputs[0];
    let (row_stride, plane_stride) = (l.row_stride, l.plane_stride);
    let mut y = Vec::new();
    for _ in 0..=iters {
        y = rt.run(&mut k, &[("x", &x)])?.remove(0).1;
    }
    let (want, mag) = cpu_projection(n, w, &weights, &x);
    let (mut max_abs_err, mut max_rel_err, mut bad) = (0f32, 0f32, 0usize);
    for i in 0..want.len() {
        let err = (y[i] - want[i]).abs();
        max_abs_err = max_abs_err.max(err);
        max_rel_err = max_rel_err.max(err / (mag[i] + 1e-6));
        if err > 3e-3 * mag[i] + 1e-4 {
            bad += 1;
        }
    }
    let st = k.stats();
    let eval_mean = st.eval_mean().unwrap_or(Duration::ZERO);
    let flops = 2.0 * (n * n * w) as f64;
    let driver = rt.driver().name();
    rt.release(k);
    Ok(ProbeReport {
        driver,
        simulated: driver == "sim",
        size: n,
        width: w,
        row_stride,
        plane_stride,
        prepare,
        eval_mean,
        eval_min: st.eval_min.unwrap_or_default(),
        evals: st.evals,
        gflops: flops / eval_mean.as_secs_f64().max(1e-12) / 1e9,
        max_abs_err,
        max_rel_err,
        bad,
        outputs: want.len(),
    })
}

/// One width measured by `width`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WidthRow {
    /// Activation width.
    pub width: usize,
    /// The input surface's row stride in bytes.
    pub row_stride: usize,
    /// Mean evaluate time in µs.
    pub mean_us: f64,
    /// Throughput.
    pub gflops: f64,
}

/// What `width` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct WidthReport {
    /// True on the simulated driver (times are the CPU interpreter's).
    pub simulated: bool,
    /// One row per width, in the order given.
    pub rows: Vec<WidthRow>,
}

/// Compiles the N×N projection once per width on `driver` and times
/// `iters` evaluations of each (after one untimed warm-up).
pub fn width(driver: DriverKind, size: usize, widths: &[usize], iters: u32) -> Result<WidthReport> {
    match driver {
        DriverKind::Private => width_on(Runtime::new(PrivateDriver::open()?), size, widths, iters),
        DriverKind::Sim => width_on(Runtime::new(SimDriver::new()), size, widths, iters),
        DriverKind::E5rt | DriverKind::E5rtSim => Err(in_memory_only(driver)),
    }
}

fn width_on<D: Driver>(
    mut rt: Runtime<D>,
    n: usize,
    widths: &[usize],
    iters: u32,
) -> Result<WidthReport> {
    if widths.is_empty() {
        return Err(Error::Invalid("no widths given".into()));
    }
    if widths.len() as u64 > u64::from(rt.compiles_left()) {
        return Err(Error::Invalid(format!(
            "{} widths need {} compiles; {} left in this process's budget",
            widths.len(),
            widths.len(),
            rt.compiles_left()
        )));
    }
    let simulated = rt.driver().name() == "sim";
    let weights = pseudo_random(1, n * n);
    let mut rows = Vec::with_capacity(widths.len());
    for &w in widths {
        check_shape(n, w)?;
        let x = pseudo_random(2, n * w);
        let mut k = rt.prepare(&projection(n, w, &weights)?)?;
        rt.run(&mut k, &[("x", &x)])?; // warm-up, not timed below
        let warm = k.stats();
        for _ in 0..iters.max(1) {
            rt.run(&mut k, &[("x", &x)])?;
        }
        let st = k.stats();
        let evals = u32::try_from(st.evals - warm.evals).unwrap_or(1).max(1);
        let mean = (st.eval_total - warm.eval_total) / evals;
        rows.push(WidthRow {
            width: w,
            row_stride: k.attributes().inputs[0].row_stride,
            mean_us: mean.as_secs_f64() * 1e6,
            gflops: 2.0 * (n * n * w) as f64 / mean.as_secs_f64().max(1e-12) / 1e9,
        });
        rt.release(k);
    }
    Ok(WidthReport { simulated, rows })
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

fn in_memory_only(driver: DriverKind) -> Error {
    Error::Invalid(format!(
        "probe and width measure the in-memory path's drivers (ane, sim), not {}; run a model \
         on e5rt with --backend ane --driver e5rt --ane-path e5rt",
        driver.name()
    ))
}

fn check_shape(n: usize, w: usize) -> Result<()> {
    if n == 0 || w == 0 || n > 16384 || w > 16384 {
        return Err(Error::Invalid(format!(
            "size and width must be in 1..=16384 (got {n}, {w})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_through_the_simulator_passes() {
        let r = probe(DriverKind::Sim, 32, 16, 1);
        assert!(r.as_ref().is_ok_and(|r| r.bad == 0 && r.simulated), "{r:?}");
    }

    #[test]
    fn probe_and_width_name_the_drivers_they_measure() {
        for d in [DriverKind::E5rt, DriverKind::E5rtSim] {
            let e = probe(d, 8, 8, 1)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("in-memory path's drivers"), "{e}");
            assert!(width(d, 8, &[8], 1).is_err());
        }
    }

    #[test]
    fn width_through_the_simulator_runs() {
        let r = width(DriverKind::Sim, 16, &[1, 32], 1);
        assert!(r.as_ref().is_ok_and(|r| r.rows.len() == 2), "{r:?}");
    }
}
