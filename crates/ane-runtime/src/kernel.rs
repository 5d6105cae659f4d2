//! The layer above the drivers: compile-budget accounting, compiled-program
//! reuse, surface allocation, strided packing, retries and timing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::driver::{Driver, ModelAttributes, ModelId, ProgramSource, RequestId, SurfaceId};
use super::error::{Error, Op, Result};
use super::layout::{pack, unpack, TensorLayout};
use super::retry::RetryPolicy;

/// Compiles per process the runtime allows by default: the 100 that
/// maderix and Espresso budget, below the ~119 after which the compiler
/// fails (ane-spec.md §7.1).
pub const DEFAULT_COMPILE_BUDGET: u32 = 100;

/// Timing of one kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KernelStats {
    /// Evaluations so far.
    pub evals: u64,
    /// Time in `evaluate` (driver call only), summed.
    pub eval_total: Duration,
    /// Fastest evaluate.
    pub eval_min: Option<Duration>,
    /// Time packing inputs and unpacking outputs (incl. surface locks), summed.
    pub io_total: Duration,
    /// Transient errors retried during evaluation.
    pub retries: u32,
}

impl KernelStats {
    /// Adds `other`'s evaluations and times to these (the same program run
    /// as several operations: one per session).
    pub fn merge(&mut self, other: &KernelStats) {
        self.evals += other.evals;
        self.eval_total += other.eval_total;
        self.eval_min = match (self.eval_min, other.eval_min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.io_total += other.io_total;
        self.retries += other.retries;
    }

    /// Mean evaluate time.
    pub fn eval_mean(&self) -> Option<Duration> {
        u32::try_from(self.evals)
            .ok()
            .filter(|&n| n > 0)
            .map(|n| self.eval_total / n)
    }
}

/// A compiled, loaded program with its surfaces and one reusable request.
/// Obtained from [`Runtime::prepare`], returned with [`Runtime::release`].
#[derive(Debug)]
pub struct Kernel {
    digest: u64,
    model: ModelId,
    attrs: ModelAttributes,
    inputs: Vec<SurfaceId>,
    outputs: Vec<SurfaceId>,
    request: RequestId,
    in_size: usize,
    out_size: usize,
    buf: Vec<u8>,
    stats: KernelStats,
}

impl Kernel {
    /// The layouts the loaded model reported (binding order).
    pub fn attributes(&self) -> &ModelAttributes {
        &self.attrs
    }

    /// Timing so far.
    pub fn stats(&self) -> KernelStats {
        self.stats
    }

    /// Size of every input surface (padded to the largest input).
    pub fn input_surface_size(&self) -> usize {
        self.in_size
    }

    /// Size of every output surface (padded to the largest output).
    pub fn output_surface_size(&self) -> usize {
        self.out_size
    }
}

/// Counters of a [`Runtime`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Compile calls issued (each attempt counts).
    pub compiles: u32,
    /// [`Runtime::prepare`] calls served by an already compiled program.
    pub cache_hits: u32,
    /// Transient errors retried during compile/load.
    pub retries: u32,
}

struct Cached {
    model: ModelId,
    refs: u32,
}

/// Drives a [`Driver`] (`Send` when the driver is: the simulated one is,
/// the private one is confined to its thread). The budget strategy is "compile each distinct
/// program once per process, share it between kernels, refuse past the cap"
/// (restarting the process is the caller's remedy, as in maderix).
pub struct Runtime<D: Driver> {
    driver: D,
    budget_limit: u32,
    retry: RetryPolicy,
    sleep: Box<dyn FnMut(Duration) + Send>,
    cache: HashMap<u64, Cached>,
    stats: RuntimeStats,
}

impl<D: Driver> std::fmt::Debug for Runtime<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("driver", &self.driver.name())
            .field("budget_limit", &self.budget_limit)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<D: Driver> Runtime<D> {
    /// A runtime over `driver` with [`DEFAULT_COMPILE_BUDGET`] and the
    /// default [`RetryPolicy`], sleeping with `std::thread::sleep`.
    pub fn new(driver: D) -> Self {
        Runtime {
            driver,
            budget_limit: DEFAULT_COMPILE_BUDGET,
            retry: RetryPolicy::default(),
            sleep: Box::new(std::thread::sleep),
            cache: HashMap::new(),
            stats: RuntimeStats::default(),
        }
    }

    /// Sets the compile cap (counted from the driver's compiles so far).
    pub fn with_compile_budget(mut self, limit: u32) -> Self {
        self.budget_limit = limit;
        self
    }

    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Replaces the sleep used between retries (tests record instead).
    pub fn with_sleep(mut self, sleep: impl FnMut(Duration) + Send + 'static) -> Self {
        self.sleep = Box::new(sleep);
        self
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The driver, mutably (e.g. to inject simulated faults).
    pub fn driver_mut(&mut self) -> &mut D {
        &mut self.driver
    }

    /// Counters.
    pub fn stats(&self) -> RuntimeStats {
        self.stats
    }

    /// Compiles left before [`Error::CompileBudget`].
    pub fn compiles_left(&self) -> u32 {
        self.budget_limit.saturating_sub(self.driver.compiles())
    }

    fn charge(&self) -> Result<()> {
        let used = self.driver.compiles();
        if used >= self.budget_limit {
            return Err(Error::CompileBudget {
                used,
                limit: self.budget_limit,
            });
        }
        Ok(())
    }

    fn compile_load(&mut self, src: &ProgramSource) -> Result<ModelId> {
        let (model, r1) = {
            let Runtime {
                driver,
                retry,
                sleep,
                budget_limit,
                stats,
                ..
            } = self;
            retry.run(Op::Compile, sleep.as_mut(), || {
                let used = driver.compiles();
                if used >= *budget_limit {
                    return Err(Error::CompileBudget {
                        used,
                        limit: *budget_limit,
                    });
                }
                stats.compiles += 1;
                driver.compile(src)
            })?
        };
        self.stats.retries += r1;
        let Runtime {
            driver,
            retry,
            sleep,
            ..
        } = self;
        match retry.run(Op::Load, sleep.as_mut(), || driver.load(model)) {
            Ok(((), r2)) => {
                self.stats.retries += r2;
                Ok(model)
            }
            Err(e) => {
                driver.release_model(model);
                Err(e)
            }
        }
    }

    /// Compiles (or reuses) and loads `src`, reads its layouts, allocates
    /// uniform input and output surfaces and builds the request.
    pub fn prepare(&mut self, src: &ProgramSource) -> Result<Kernel> {
        let digest = src.digest();
        let model = match self.cache.get_mut(&digest) {
            Some(c) => {
                c.refs += 1;
                self.stats.cache_hits += 1;
                c.model
            }
            None => {
                self.charge()?;
                let model = self.compile_load(src)?;
                self.cache.insert(digest, Cached { model, refs: 1 });
                model
            }
        };
        match self.attach(digest, model) {
            Ok(k) => Ok(k),
            Err(e) => {
                self.unref(digest);
                Err(e)
            }
        }
    }

    fn attach(&mut self, digest: u64, model: ModelId) -> Result<Kernel> {
        let attrs = self.driver.attributes(model)?;
        for l in attrs.inputs.iter().chain(&attrs.outputs) {
            l.validate()?;
        }
        if attrs.outputs.is_empty() {
            return Err(Error::driver(Op::Attributes, "model reports no outputs"));
        }
        let max = |ls: &[TensorLayout]| ls.iter().map(TensorLayout::alloc_size).max().unwrap_or(0);
        let in_size = max(&attrs.inputs);
        let out_size = max(&attrs.outputs);
        let mut made = Vec::new();
        let mut make = |d: &mut D, n: usize, size: usize| -> Result<Vec<SurfaceId>> {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                let s = d.create_surface(size)?;
                made.push(s);
                v.push(s);
            }
            Ok(v)
        };
        let built = make(&mut self.driver, attrs.inputs.len(), in_size).and_then(|ins| {
            let outs = make(&mut self.driver, attrs.outputs.len(), out_size)?;
            Ok((ins, outs))
        });
        let built = built.and_then(|(ins, outs)| {
            let r = self.driver.build_request(model, &ins, &outs)?;
            Ok((ins, outs, r))
        });
        match built {
            Ok((inputs, outputs, request)) => Ok(Kernel {
                digest,
                model,
                buf: vec![0; in_size.max(out_size)],
                attrs,
                inputs,
                outputs,
                request,
                in_size,
                out_size,
                stats: KernelStats::default(),
            }),
            Err(e) => {
                for s in made {
                    self.driver.release_surface(s);
                }
                Err(e)
            }
        }
    }

    /// Runs `kernel` on named inputs (row-major `[C, H, W]` values each) and
    /// returns every output by name, in binding order. Inputs are matched to
    /// the model's reported layouts by name, so declaration order is irrelevant.
    pub fn run(
        &mut self,
        kernel: &mut Kernel,
        inputs: &[(&str, &[f32])],
    ) -> Result<Vec<(String, Vec<f32>)>> {
        for (n, _) in inputs {
            if !kernel
                .attrs
                .inputs
                .iter()
                .any(|l| l.name == *n || l.symbol == *n)
            {
                return Err(Error::Binding {
                    name: (*n).to_string(),
                    msg: "the model has no such input".into(),
                });
            }
        }
        let t0 = Instant::now();
        for (l, s) in kernel.attrs.inputs.iter().zip(&kernel.inputs) {
            let (_, v) = inputs
                .iter()
                .find(|(n, _)| *n == l.name || *n == l.symbol)
                .ok_or_else(|| Error::Binding {
                    name: l.name.clone(),
                    msg: "input not supplied".into(),
                })?;
            let buf = &mut kernel.buf[..kernel.in_size];
            pack(l, v, buf)?;
            self.driver.write_surface(*s, buf)?;
        }
        let t1 = Instant::now();
        let Runtime {
            driver,
            retry,
            sleep,
            ..
        } = self;
        let ((), retries) = retry.run(Op::Evaluate, sleep.as_mut(), || {
            driver.evaluate(kernel.model, kernel.request)
        })?;
        let t2 = Instant::now();
        let mut out = Vec::with_capacity(kernel.outputs.len());
        for (l, s) in kernel.attrs.outputs.iter().zip(&kernel.outputs) {
            let buf = &mut kernel.buf[..kernel.out_size];
            self.driver.read_surface(*s, buf)?;
            out.push((l.name.clone(), unpack(l, buf)?));
        }
        let t3 = Instant::now();
        let st = &mut kernel.stats;
        let eval = t2 - t1;
        st.evals += 1;
        st.eval_total += eval;
        st.eval_min = Some(st.eval_min.map_or(eval, |m| m.min(eval)));
        st.io_total += (t1 - t0) + (t3 - t2);
        st.retries += retries;
        Ok(out)
    }

    fn unref(&mut self, digest: u64) {
        let drop_it = match self.cache.get_mut(&digest) {
            Some(c) => {
                c.refs = c.refs.saturating_sub(1);
                (c.refs == 0).then_some(c.model)
            }
            None => None,
        };
        if let Some(m) = drop_it {
            self.cache.remove(&digest);
            self.driver.release_model(m);
        }
    }

    /// Releases a kernel's request and surfaces; the compiled program is
    /// unloaded when no other kernel shares it.
    pub fn release(&mut self, kernel: Kernel) {
        self.driver.release_request(kernel.request);
        for s in kernel.inputs.iter().chain(&kernel.outputs) {
            self.driver.release_surface(*s);
        }
        self.unref(kernel.digest);
    }
}
