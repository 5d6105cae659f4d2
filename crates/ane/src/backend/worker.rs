//! The runtime worker: one thread that owns a driver and its prepared programs.
//!
//! The private driver holds Objective-C objects and is not `Send`, while an
//! `Executable` must be `Send + Sync`. So the driver is created *on* a
//! dedicated thread and never leaves it: the executable keeps only the
//! sending end of a channel (behind a `Mutex`), and every dispatch is a
//! message carrying plain `Vec<f32>` data and a reply channel. Dropping the
//! worker closes the channel; the thread then releases every program
//! (unload, surfaces, temp directories) on the thread that created them and
//! is joined. The simulated drivers take the same path, so what the tests
//! exercise on Linux is the code that runs on a Mac.
//!
//! Two runtime paths share the thread: the in-memory one
//! ([`Programs`] on a [`Driver`]) and e5rt ([`E5rtPrograms`] on an
//! [`E5rtApi`]); the lowered kernels (one input `x: [1, C, 1, W]`, one
//! output) run the same on both, since row-major `[C, W]` is both the
//! in-memory path's unpacked layout and e5rt's dense one.
//!
//! The resident variant's programs (named ports, caches aliased) are
//! compiled once when the model loads ([`Opened::prepare`]'s `ported`):
//! each becomes an [`E5rtFunction`]. A session ([`Worker::open_ported`])
//! then only instantiates its operations, ports and buffers from those
//! functions, so its caches are its own while no session recompiles;
//! closing a session releases its operations and buffers, and the
//! functions (and libraries) go when the worker drops.

use super::Error;
use crate::lower::RuntimePath;
use crate::runtime::e5rt::{
    E5rtApi, E5rtFunction, E5rtPrivate, E5rtProgram, E5rtPrograms, E5rtRuntime, E5rtSim,
};
use crate::runtime::{
    self, Driver, KernelStats, PrivateDriver, ProgramSource, Programs, Runtime, RuntimeStats,
    SimDriver,
};
use std::collections::BTreeSet;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Which driver runs the programs of an [`AneBackend`](crate::AneBackend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DriverKind {
    /// The simulated in-memory driver (`anedvd_ane::runtime::SimDriver`):
    /// hardware-like strides, binding and compile budget over the MIL
    /// simulator; any OS. For programs lowered for the e5rt path the backend
    /// runs [`DriverKind::E5rtSim`] instead (see [`DriverKind::for_path`]).
    Sim,
    /// `AppleNeuralEngine.framework` (`anedvd_ane::runtime::PrivateDriver`),
    /// the in-memory path; elsewhere compiling fails with `ANE unavailable: …`.
    #[default]
    Private,
    /// The simulated e5rt driver (`anedvd_ane::runtime::e5rt::E5rtSim`):
    /// named dense ports, the e5rt rule check and loaded-program budget over
    /// the MIL simulator; any OS.
    E5rtSim,
    /// Espresso's e5rt C API (`anedvd_ane::runtime::e5rt::E5rtPrivate`);
    /// elsewhere compiling fails with `ANE unavailable: …`.
    E5rt,
}

impl DriverKind {
    /// The driver's command-line name (`sim`, `ane`, `e5rt-sim`, `e5rt`).
    pub fn name(self) -> &'static str {
        match self {
            DriverKind::Sim => "sim",
            DriverKind::Private => "ane",
            DriverKind::E5rtSim => "e5rt-sim",
            DriverKind::E5rt => "e5rt",
        }
    }

    /// Parses `sim`, `ane` or `private`, `e5rt`, `e5rt-sim`.
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sim" => Some(DriverKind::Sim),
            "ane" | "private" => Some(DriverKind::Private),
            "e5rt" => Some(DriverKind::E5rt),
            "e5rt-sim" => Some(DriverKind::E5rtSim),
            _ => None,
        }
    }

    /// The runtime path this driver runs programs on.
    pub fn path(self) -> RuntimePath {
        match self {
            DriverKind::Sim | DriverKind::Private => RuntimePath::InMemory,
            DriverKind::E5rtSim | DriverKind::E5rt => RuntimePath::E5rt,
        }
    }

    /// Whether the driver simulates (any OS) rather than calls Apple's frameworks.
    pub fn is_simulated(self) -> bool {
        matches!(self, DriverKind::Sim | DriverKind::E5rtSim)
    }

    /// The driver that runs programs lowered for `path`: [`DriverKind::Sim`]
    /// follows the path (`--driver sim --ane-path e5rt` is the simulated
    /// e5rt driver); every other driver stays as it is, and
    /// [`DriverKind::path_refusal`] says why it cannot run another path.
    pub fn for_path(self, path: RuntimePath) -> DriverKind {
        match (self, path) {
            (DriverKind::Sim, RuntimePath::E5rt) => DriverKind::E5rtSim,
            _ => self,
        }
    }

    /// Why this driver cannot run programs lowered for `path` (`None` when it can).
    pub fn path_refusal(self, path: RuntimePath) -> Option<String> {
        if self.path() == path {
            return None;
        }
        Some(match self {
            DriverKind::Private => "--driver ane drives AppleNeuralEngine.framework's in-memory \
                                    path, which cannot run --ane-path e5rt programs; use --driver \
                                    e5rt (Espresso) or --driver sim"
                .into(),
            DriverKind::E5rt => "--driver e5rt drives Espresso's e5rt path, which runs only \
                                 --ane-path e5rt programs; add --ane-path e5rt or use --driver ane"
                .into(),
            sim => format!(
                "--driver {} simulates the {} path, not --ane-path {path}",
                sim.name(),
                sim.path()
            ),
        })
    }
}

/// What preparing the programs cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileReport {
    /// Compiles issued (in-memory: one per distinct program; e5rt: one per
    /// program, the resident variant's layer groups and shared programs
    /// included, once however many sessions open).
    pub compiles: u32,
    /// Programs served by an already compiled identical program (in-memory only).
    pub cache_hits: u32,
    /// What is left in the budget afterwards: compiles (in-memory), or
    /// programs that may still be loaded (e5rt, ~128 per process; each
    /// resident session loads one per layer group).
    pub compiles_left: u32,
    /// The budget the runtime enforced.
    pub budget: u32,
}

enum Job {
    Run {
        kernel: usize,
        x: Vec<f32>,
        reply: Sender<runtime::Result<Vec<f32>>>,
    },
    Stats {
        reply: Sender<Vec<(String, KernelStats)>>,
    },
    Report {
        reply: Sender<CompileReport>,
    },
    Open {
        programs: Vec<PortedSource>,
        reply: Sender<runtime::Result<u64>>,
    },
    RunPorts {
        set: u64,
        program: usize,
        inputs: Vec<(String, Vec<f32>)>,
        outputs: Vec<String>,
        reply: Sender<runtime::Result<Vec<Vec<f32>>>>,
    },
    Close {
        set: u64,
    },
}

/// A program with named ports of any size, and the `(output, input)` pairs
/// aliased onto one buffer (state that stays resident across executes).
#[derive(Clone)]
pub(crate) struct PortedSource {
    /// Which of the programs the worker compiled at load
    /// ([`Opened::prepare`]'s `ported`, by index) this one instantiates.
    pub program: usize,
    pub aliases: Vec<(String, String)>,
    /// `(program, its output, this program's input)`: inputs bound to the
    /// buffer of an earlier program of the set (a state that one keeps and
    /// this one reads: Gemma 4's K/V shared across layers).
    pub bound: Vec<(usize, String, String)>,
}

/// The handle an executable keeps: a channel to the thread that owns the runtime.
pub(crate) struct Worker {
    tx: Option<Mutex<Sender<Job>>>,
    thread: Option<JoinHandle<()>>,
    report: CompileReport,
}

/// What the worker thread holds: named single-input, single-output
/// programs on one runtime path.
trait ProgramSet {
    /// Programs the runtime needs for `sources` (the in-memory runtime
    /// shares identical programs; e5rt loads each one).
    fn needed(&self, sources: &[(String, ProgramSource)]) -> usize;
    /// Compiles (in-memory) or loaded programs (e5rt) left in the budget.
    fn left(&self) -> u32;
    fn add(&mut self, name: &str, src: &ProgramSource) -> runtime::Result<()>;
    fn run(&mut self, name: &str, x: &[f32]) -> runtime::Result<Vec<f32>>;
    fn stats(&self, name: &str) -> Option<KernelStats>;
    fn report(&self, budget: u32) -> CompileReport;
    /// Compiles the programs sets are opened from, once (e5rt only: the
    /// in-memory path binds one input and one output).
    fn compile_ported(&mut self, sources: &[(String, ProgramSource)]) -> runtime::Result<()> {
        if sources.is_empty() {
            return Ok(());
        }
        Err(ported_refused())
    }
    /// Opens `programs` as one set, instantiated from the compiled ones
    /// with their own buffers and aliases.
    fn open_ported(&mut self, programs: &[PortedSource]) -> runtime::Result<u64> {
        let _ = programs;
        Err(ported_refused())
    }
    /// Writes `inputs`, executes program `program` of set `set`, reads `outputs`.
    fn run_ported(
        &mut self,
        set: u64,
        program: usize,
        inputs: &[(String, Vec<f32>)],
        outputs: &[String],
    ) -> runtime::Result<Vec<Vec<f32>>> {
        let _ = (set, program, inputs, outputs);
        Err(ported_refused())
    }
    /// Releases set `set`.
    fn close_ported(&mut self, set: u64) {
        let _ = set;
    }
    /// Kernel names of the compiled ported programs, in compile order.
    fn ported_names(&self) -> Vec<String> {
        Vec::new()
    }
}

fn ported_refused() -> runtime::Error {
    runtime::Error::Binding {
        name: "ported programs".into(),
        msg: "the in-memory path binds one input and one output per program".into(),
    }
}

/// The e5rt runtime's single-I/O programs plus sets of ported programs
/// (the resident variant's: one set per session, its caches aliased),
/// instantiated from functions compiled once.
struct E5rtSet<A: E5rtApi> {
    programs: E5rtPrograms<A>,
    /// The ported programs compiled at load, with their kernel names.
    compiled: Vec<(String, E5rtFunction)>,
    /// Open sets: per program, its index in `compiled` and the program.
    ported: std::collections::BTreeMap<u64, Vec<(usize, E5rtProgram)>>,
    /// Timing of the sets already closed, per compiled program.
    closed: Vec<KernelStats>,
    next: u64,
}

impl<A: E5rtApi> Drop for E5rtSet<A> {
    fn drop(&mut self) {
        for (_, set) in std::mem::take(&mut self.ported) {
            release_set(self.programs.runtime_mut(), set, &mut self.closed);
        }
        // every program from them is released: the functions (and their
        // libraries) go now, before the runtime and its driver
        let rt = self.programs.runtime_mut();
        for (_, f) in std::mem::take(&mut self.compiled) {
            // cannot be refused: no program from `f` is live any more
            let _ = rt.release_function(f);
        }
    }
}

/// Releases a set's programs last first (ane-evidence.md §c: release in
/// reverse), so no program outlives the buffers it is bound to, keeping
/// their timing in `closed`. Their compiled functions stay.
fn release_set<A: E5rtApi>(
    rt: &mut E5rtRuntime<A>,
    set: Vec<(usize, E5rtProgram)>,
    closed: &mut [KernelStats],
) {
    for (i, p) in set.into_iter().rev() {
        if let Some(st) = closed.get_mut(i) {
            st.merge(&p.stats());
        }
        rt.release(p);
    }
}

impl<D: Driver> ProgramSet for Programs<D> {
    fn needed(&self, sources: &[(String, ProgramSource)]) -> usize {
        let distinct: BTreeSet<u64> = sources.iter().map(|(_, s)| s.digest()).collect();
        distinct.len()
    }

    fn left(&self) -> u32 {
        self.runtime().compiles_left()
    }

    fn add(&mut self, name: &str, src: &ProgramSource) -> runtime::Result<()> {
        Programs::add(self, name, src)
    }

    fn run(&mut self, name: &str, x: &[f32]) -> runtime::Result<Vec<f32>> {
        Programs::run(self, name, x)
    }

    fn stats(&self, name: &str) -> Option<KernelStats> {
        Programs::stats(self, name)
    }

    fn report(&self, budget: u32) -> CompileReport {
        let s: RuntimeStats = self.runtime().stats();
        CompileReport {
            compiles: s.compiles,
            cache_hits: s.cache_hits,
            compiles_left: self.left(),
            budget,
        }
    }
}

impl<A: E5rtApi> ProgramSet for E5rtSet<A> {
    fn needed(&self, sources: &[(String, ProgramSource)]) -> usize {
        sources.len()
    }

    fn left(&self) -> u32 {
        self.programs.runtime().programs_left()
    }

    fn add(&mut self, name: &str, src: &ProgramSource) -> runtime::Result<()> {
        self.programs.add(name, src)
    }

    fn run(&mut self, name: &str, x: &[f32]) -> runtime::Result<Vec<f32>> {
        self.programs.run(name, x)
    }

    fn stats(&self, name: &str) -> Option<KernelStats> {
        if let Some(st) = self.programs.stats(name) {
            return Some(st);
        }
        // a ported program: every session's operations together
        let i = self.compiled.iter().position(|(n, _)| n == name)?;
        let mut st = self.closed.get(i).copied().unwrap_or_default();
        for set in self.ported.values() {
            for (_, p) in set.iter().filter(|(j, _)| *j == i) {
                st.merge(&p.stats());
            }
        }
        Some(st)
    }

    fn ported_names(&self) -> Vec<String> {
        self.compiled.iter().map(|(n, _)| n.clone()).collect()
    }

    fn report(&self, budget: u32) -> CompileReport {
        CompileReport {
            // the ported programs' compiles included: `compile_ported` ran
            compiles: self.programs.runtime().compiles(),
            cache_hits: 0,
            compiles_left: self.left(),
            budget,
        }
    }

    fn compile_ported(&mut self, sources: &[(String, ProgramSource)]) -> runtime::Result<()> {
        let rt = self.programs.runtime_mut();
        for (name, src) in sources {
            let f = rt.compile(src)?;
            self.compiled.push((name.clone(), f));
            self.closed.push(KernelStats::default());
        }
        Ok(())
    }

    fn open_ported(&mut self, programs: &[PortedSource]) -> runtime::Result<u64> {
        let E5rtSet {
            programs: single,
            compiled,
            closed,
            ..
        } = self;
        let rt = single.runtime_mut();
        let mut set: Vec<(usize, E5rtProgram)> = Vec::with_capacity(programs.len());
        let mut prepared = || -> runtime::Result<()> {
            for p in programs {
                let (_, f) = compiled
                    .get(p.program)
                    .ok_or_else(|| runtime::Error::Binding {
                        name: format!("ported program {}", p.program),
                        msg: format!("only {} programs were compiled at load", compiled.len()),
                    })?;
                let mut prog = rt.instantiate(*f)?;
                for (out, input) in &p.aliases {
                    if let Err(e) = rt.alias(&mut prog, out, input) {
                        rt.release(prog);
                        return Err(e);
                    }
                }
                for (from, out, input) in &p.bound {
                    let bound = match set.get(*from) {
                        Some((_, src)) => rt.bind_from(src, out, &mut prog, input),
                        None => Err(runtime::Error::Binding {
                            name: input.clone(),
                            msg: format!("no earlier program {from} in the set"),
                        }),
                    };
                    if let Err(e) = bound {
                        rt.release(prog);
                        return Err(e);
                    }
                }
                set.push((p.program, prog));
            }
            Ok(())
        };
        if let Err(e) = prepared() {
            release_set(rt, set, closed);
            return Err(e);
        }
        self.next += 1;
        self.ported.insert(self.next, set);
        Ok(self.next)
    }

    fn run_ported(
        &mut self,
        set: u64,
        program: usize,
        inputs: &[(String, Vec<f32>)],
        outputs: &[String],
    ) -> runtime::Result<Vec<Vec<f32>>> {
        let rt = self.programs.runtime_mut();
        let p = self
            .ported
            .get_mut(&set)
            .and_then(|s| s.get_mut(program))
            .map(|(_, p)| p)
            .ok_or_else(|| runtime::Error::Binding {
                name: format!("set {set} program {program}"),
                msg: "no such ported program".into(),
            })?;
        for (name, values) in inputs {
            rt.write(p, name, values)?;
        }
        rt.execute(p)?;
        outputs.iter().map(|name| rt.read(p, name)).collect()
    }

    fn close_ported(&mut self, set: u64) {
        if let Some(programs) = self.ported.remove(&set) {
            release_set(self.programs.runtime_mut(), programs, &mut self.closed);
        }
    }
}

fn in_memory<D: Driver>(driver: D, budget: u32) -> Programs<D> {
    Programs::new(Runtime::new(driver).with_compile_budget(budget))
}

fn e5rt<A: E5rtApi>(api: A, budget: u32) -> E5rtSet<A> {
    E5rtSet {
        programs: E5rtPrograms::new(E5rtRuntime::new(api).with_program_budget(budget)),
        compiled: Vec::new(),
        ported: std::collections::BTreeMap::new(),
        closed: Vec::new(),
        next: 0,
    }
}

/// Single-I/O programs (kernel `i` is the `i`-th) and the ported programs
/// to compile once, each with its kernel name.
type Sources = (Vec<(String, ProgramSource)>, Vec<(String, ProgramSource)>);

/// The worker thread's channels.
struct Channels {
    opened: Sender<Result<(), Error>>,
    sources: Receiver<Sources>,
    ready: Sender<Result<CompileReport, Error>>,
    jobs: Receiver<Job>,
}

/// On the worker thread: reports whether the driver opened, then prepares
/// every program it is sent, reports, and serves jobs.
fn serve<P: ProgramSet>(programs: runtime::Result<P>, budget: u32, ch: Channels) {
    let mut programs = match programs {
        Ok(p) => p,
        Err(e) => {
            let _ = ch.opened.send(Err(Error::Runtime(e)));
            return;
        }
    };
    if ch.opened.send(Ok(())).is_err() {
        return;
    }
    let Ok((sources, ported)) = ch.sources.recv() else {
        return;
    };
    let ready = ch.ready;
    // Refuse up front rather than compile part of the model and fail; the
    // ported programs count once each (one session's operations; further
    // sessions are checked as they open).
    let needed = programs.needed(&sources) + ported.len();
    let left = programs.left();
    if needed as u64 > u64::from(left) {
        let _ = ready.send(Err(Error::OverBudget {
            needed,
            left,
            budget,
        }));
        return;
    }
    for (name, src) in &sources {
        if let Err(source) = programs.add(name, src) {
            let _ = ready.send(Err(Error::Dispatch {
                kernel: name.clone(),
                source,
            }));
            return;
        }
    }
    if let Err(source) = programs.compile_ported(&ported) {
        let _ = ready.send(Err(Error::Dispatch {
            kernel: "compiling the resident programs".into(),
            source,
        }));
        return;
    }
    drop(ported);
    let mut names: Vec<String> = sources.into_iter().map(|(n, _)| n).collect();
    // kernel `i` is `names[i]` for `Job::Run`; the ported names follow for
    // the stats only
    let single = names.len();
    names.extend(programs.ported_names());
    if ready.send(Ok(programs.report(budget))).is_err() {
        return;
    }
    while let Ok(job) = ch.jobs.recv() {
        match job {
            Job::Run { kernel, x, reply } => {
                let out = match names[..single].get(kernel) {
                    Some(name) => programs.run(name, &x),
                    None => Err(runtime::Error::Binding {
                        name: format!("#{kernel}"),
                        msg: "no such program".into(),
                    }),
                };
                let _ = reply.send(out);
            }
            Job::Open { programs: p, reply } => {
                let _ = reply.send(programs.open_ported(&p));
            }
            Job::RunPorts {
                set,
                program,
                inputs,
                outputs,
                reply,
            } => {
                let _ = reply.send(programs.run_ported(set, program, &inputs, &outputs));
            }
            Job::Close { set } => programs.close_ported(set),
            Job::Report { reply } => {
                let _ = reply.send(programs.report(budget));
            }
            Job::Stats { reply } => {
                let all = names
                    .iter()
                    .filter_map(|n| programs.stats(n).map(|s| (n.clone(), s)))
                    .collect();
                let _ = reply.send(all);
            }
        }
    }
    // `programs` drops here, on the thread that created the driver.
}

/// A worker whose driver is open but whose programs are not prepared yet.
pub(crate) struct Opened {
    thread: JoinHandle<()>,
    sources: Sender<Sources>,
    ready: Receiver<Result<CompileReport, Error>>,
    tx: Sender<Job>,
}

fn dead() -> Error {
    Error::Worker("the runtime thread has stopped".into())
}

fn stopped(thread: JoinHandle<()>, when: &str) -> Error {
    let _ = thread.join();
    Error::Worker(format!("the runtime thread stopped while {when}"))
}

impl Opened {
    /// Starts the worker thread and opens `driver` on it (so `ANE
    /// unavailable` is known before any lowering work).
    pub fn open(driver: DriverKind, budget: u32) -> Result<Opened, Error> {
        let (opened, opened_rx) = channel();
        let (sources, sources_rx) = channel();
        let (ready, ready_rx) = channel();
        let (tx, jobs) = channel();
        let ch = Channels {
            opened,
            sources: sources_rx,
            ready,
            jobs,
        };
        let thread = std::thread::Builder::new()
            .name(format!("anedvd-ane-{}", driver.name()))
            .spawn(move || match driver {
                DriverKind::Sim => serve(Ok(in_memory(SimDriver::new(), budget)), budget, ch),
                DriverKind::Private => {
                    let programs = PrivateDriver::open().map(|d| in_memory(d, budget));
                    serve(programs, budget, ch)
                }
                DriverKind::E5rtSim => serve(Ok(e5rt(E5rtSim::new(), budget)), budget, ch),
                DriverKind::E5rt => serve(E5rtPrivate::open().map(|a| e5rt(a, budget)), budget, ch),
            })
            .map_err(|e| Error::Worker(format!("cannot start the runtime thread: {e}")))?;
        match opened_rx.recv() {
            Ok(Ok(())) => Ok(Opened {
                thread,
                sources,
                ready: ready_rx,
                tx,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(stopped(thread, "opening the driver")),
        }
    }

    /// Prepares `sources` (kernel `i` is `sources[i]`), compiles `ported`
    /// (the programs [`Worker::open_ported`] instantiates: [`PortedSource::program`]
    /// indexes this list) and waits until they are compiled and loaded.
    pub fn prepare(
        self,
        sources: Vec<(String, ProgramSource)>,
        ported: Vec<(String, ProgramSource)>,
    ) -> Result<Worker, Error> {
        let Opened {
            thread,
            sources: send,
            ready,
            tx,
        } = self;
        if send.send((sources, ported)).is_err() {
            return Err(stopped(thread, "waiting for programs"));
        }
        let report = match ready.recv() {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err(stopped(thread, "compiling")),
        };
        Ok(Worker {
            tx: Some(Mutex::new(tx)),
            thread: Some(thread),
            report,
        })
    }
}

impl Worker {
    /// What compiling cost so far and what is left of the budget now (the
    /// sessions open count against it on e5rt); what it was at load when
    /// the thread has stopped.
    pub fn report(&self) -> CompileReport {
        let (reply, answer) = channel();
        if self.send(Job::Report { reply }).is_err() {
            return self.report;
        }
        answer.recv().unwrap_or(self.report)
    }

    fn send(&self, job: Job) -> Result<(), Error> {
        let tx = self.tx.as_ref().ok_or_else(dead)?;
        let tx = tx.lock().map_err(|_| dead())?;
        tx.send(job).map_err(|_| dead())
    }

    /// Runs kernel `kernel` on `x` (row-major `[C, 1, W]`) on the worker thread.
    pub fn run(&self, kernel: usize, name: &str, x: Vec<f32>) -> Result<Vec<f32>, Error> {
        let (reply, answer) = channel();
        self.send(Job::Run { kernel, x, reply })?;
        answer
            .recv()
            .map_err(|_| dead())?
            .map_err(|source| Error::Dispatch {
                kernel: name.to_string(),
                source,
            })
    }

    /// Opens `programs` as one set of ported programs, instantiated from
    /// those compiled at load (own buffers, aliases bound; no compile), and
    /// returns its handle.
    pub fn open_ported(&self, programs: Vec<PortedSource>) -> Result<u64, Error> {
        let (reply, answer) = channel();
        self.send(Job::Open { programs, reply })?;
        answer
            .recv()
            .map_err(|_| dead())?
            .map_err(|source| Error::Dispatch {
                kernel: "opening a session's programs".into(),
                source,
            })
    }

    /// Writes `inputs` to program `program` of set `set`, executes it and
    /// returns `outputs` in order.
    pub fn run_ported(
        &self,
        (set, program, name): (u64, usize, &str),
        inputs: Vec<(String, Vec<f32>)>,
        outputs: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, Error> {
        let (reply, answer) = channel();
        self.send(Job::RunPorts {
            set,
            program,
            inputs,
            outputs,
            reply,
        })?;
        answer
            .recv()
            .map_err(|_| dead())?
            .map_err(|source| Error::Dispatch {
                kernel: name.to_string(),
                source,
            })
    }

    /// Releases set `set` (nothing when the thread has stopped).
    pub fn close_ported(&self, set: u64) {
        let _ = self.send(Job::Close { set });
    }

    /// Evaluate/I-O timing of every kernel so far, in dispatch order.
    pub fn stats(&self) -> Result<Vec<(String, KernelStats)>, Error> {
        let (reply, answer) = channel();
        self.send(Job::Stats { reply })?;
        answer.recv().map_err(|_| dead())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // closing the channel ends the loop; the thread releases the programs
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
