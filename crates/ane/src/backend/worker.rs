//! The runtime worker: one thread that owns a driver and its prepared programs.
//!
//! The private driver holds Objective-C objects and is not `Send`, while an
//! `Executable` must be `Send + Sync`. So the driver is created *on* a
//! dedicated thread and never leaves it: the executable keeps only the
//! sending end of a channel (behind a `Mutex`), and every dispatch is a
//! message carrying plain `Vec<f32>` data and a reply channel. Dropping the
//! worker closes the channel; the thread then releases every program
//! (unload, surfaces, temp directories) on the thread that created them and
//! is joined. The simulated driver takes the same path, so what the tests
//! exercise on Linux is the code that runs on a Mac.

use super::Error;
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
    /// The simulated driver (`anedvd_ane::runtime::SimDriver`): hardware-like
    /// strides, binding and compile budget over the MIL simulator; any OS.
    Sim,
    /// `AppleNeuralEngine.framework` (`anedvd_ane::runtime::PrivateDriver`);
    /// elsewhere compiling fails with `ANE unavailable: …`.
    #[default]
    Private,
}

impl DriverKind {
    /// The driver's command-line name (`sim`, `ane`).
    pub fn name(self) -> &'static str {
        match self {
            DriverKind::Sim => "sim",
            DriverKind::Private => "ane",
        }
    }

    /// Parses `sim`, `ane` or `private`.
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sim" => Some(DriverKind::Sim),
            "ane" | "private" => Some(DriverKind::Private),
            _ => None,
        }
    }
}

/// What preparing the programs cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompileReport {
    /// Compiles issued (one per distinct program).
    pub compiles: u32,
    /// Programs served by an already compiled identical program.
    pub cache_hits: u32,
    /// Compiles left in the budget afterwards.
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
}

/// The handle an executable keeps: a channel to the thread that owns the runtime.
pub(crate) struct Worker {
    tx: Option<Mutex<Sender<Job>>>,
    thread: Option<JoinHandle<()>>,
    report: CompileReport,
}

fn stats_report<D: Driver>(p: &Programs<D>, budget: u32) -> CompileReport {
    let s: RuntimeStats = p.runtime().stats();
    CompileReport {
        compiles: s.compiles,
        cache_hits: s.cache_hits,
        compiles_left: p.runtime().compiles_left(),
        budget,
    }
}

/// The worker thread's channels.
struct Channels {
    opened: Sender<Result<(), Error>>,
    sources: Receiver<Vec<(String, ProgramSource)>>,
    ready: Sender<Result<CompileReport, Error>>,
    jobs: Receiver<Job>,
}

/// On the worker thread: reports whether the driver opened, then prepares
/// every program it is sent, reports, and serves jobs.
fn serve<D: Driver>(driver: runtime::Result<D>, budget: u32, ch: Channels) {
    let driver = match driver {
        Ok(d) => d,
        Err(e) => {
            let _ = ch.opened.send(Err(Error::Runtime(e)));
            return;
        }
    };
    if ch.opened.send(Ok(())).is_err() {
        return;
    }
    let Ok(sources) = ch.sources.recv() else {
        return;
    };
    let ready = ch.ready;
    let mut programs = Programs::new(Runtime::new(driver).with_compile_budget(budget));
    // Refuse up front rather than compile part of the model and fail.
    let distinct: BTreeSet<u64> = sources.iter().map(|(_, s)| s.digest()).collect();
    let left = programs.runtime().compiles_left();
    if distinct.len() as u64 > u64::from(left) {
        let _ = ready.send(Err(Error::OverBudget {
            needed: distinct.len(),
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
    let names: Vec<String> = sources.into_iter().map(|(n, _)| n).collect();
    if ready.send(Ok(stats_report(&programs, budget))).is_err() {
        return;
    }
    while let Ok(job) = ch.jobs.recv() {
        match job {
            Job::Run { kernel, x, reply } => {
                let out = match names.get(kernel) {
                    Some(name) => programs.run(name, &x),
                    None => Err(runtime::Error::Binding {
                        name: format!("#{kernel}"),
                        msg: "no such program".into(),
                    }),
                };
                let _ = reply.send(out);
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
    sources: Sender<Vec<(String, ProgramSource)>>,
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
                DriverKind::Sim => serve(Ok(SimDriver::new()), budget, ch),
                DriverKind::Private => serve(PrivateDriver::open(), budget, ch),
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

    /// Prepares `sources` (kernel `i` is `sources[i]`) and waits until they
    /// are compiled and loaded.
    pub fn prepare(self, sources: Vec<(String, ProgramSource)>) -> Result<Worker, Error> {
        let Opened {
            thread,
            sources: send,
            ready,
            tx,
        } = self;
        if send.send(sources).is_err() {
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
    /// What compiling cost.
    pub fn report(&self) -> CompileReport {
        self.report
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
