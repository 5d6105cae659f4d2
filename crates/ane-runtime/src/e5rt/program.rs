//! The layer a backend holds: programs prepared from MIL text, one buffer per
//! port, aliasing, fp16 conversion, timing and release.
//!
//! Two steps, which [`E5rtRuntime::prepare`] runs together:
//! * [`E5rtRuntime::compile`] writes `model.mil` and the weight files to a
//!   model directory, compiles it into a library and retains `main`: an
//!   [`E5rtFunction`], the runtime's until [`E5rtRuntime::release_function`]
//!   or the runtime drops;
//! * [`E5rtRuntime::instantiate`] creates a compute operation from such a
//!   function, retains every port by its MIL name, binds each to its own
//!   zeroed buffer and creates a stream: an [`E5rtProgram`], released with
//!   [`E5rtRuntime::release`] (its operation, ports, buffers, stream — not
//!   the function).
//!
//! So one compiled function serves any number of programs with separate
//! buffers (the resident variant: each session's KV caches), compiled and
//! its weights copied once; a function is not released while a program
//! created from it is live. Encoding is deferred to the first
//! [`E5rtRuntime::execute`] (as ANEForge does), so [`E5rtRuntime::alias`]
//! can still rebind an input port onto an output's buffer: that is how a
//! state (a KV cache) stays resident — after each execute the input reads
//! what the output wrote, with no host copy. [`E5rtRuntime::bind_from`]
//! binds an input to another program's output buffer the same way, so a
//! later program reads a state an earlier one keeps (UNVERIFIED on
//! hardware: ANEForge aliases within one program only).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use half::f16;

use super::api::{
    port_specs, BufferId, E5rtApi, FunctionId, LibraryId, OperationId, PortId, PortSpec, StreamId,
    MAIN_FUNCTION,
};
use crate::driver::ProgramSource;
use crate::error::{E5rtStep, Error, Result};
use crate::kernel::KernelStats;
use crate::layout::ElemType;
use crate::modeldir::{check_weight_keys, ModelDir};

/// Programs a runtime lets live at once by default: below the ~128 e5rt
/// is reported to hold per process, like the in-memory path's 100 compiles.
pub const DEFAULT_PROGRAM_BUDGET: u32 = 100;

/// Distinguishes the work directories of runtimes in one process.
static NEXT_RUNTIME: AtomicU64 = AtomicU64::new(0);

/// One port of a prepared program and the buffer it is bound to.
#[derive(Debug, Clone)]
struct BoundPort {
    spec: PortSpec,
    port: PortId,
    buffer: BufferId,
}

/// A program compiled once: a library and its retained function `main`,
/// from which [`E5rtRuntime::instantiate`] creates programs. A handle into
/// the runtime that compiled it (the runtime releases it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct E5rtFunction(FunctionId);

/// What the runtime keeps of a compiled function.
#[derive(Debug)]
struct Compiled {
    dir: ModelDir,
    library: LibraryId,
    inputs: Vec<PortSpec>,
    outputs: Vec<PortSpec>,
    /// Programs created from it and not released yet.
    live: u32,
}

/// The driver objects one program owns (not its function), released in
/// ANEForge's order.
#[derive(Debug, Default)]
struct Handles {
    operation: Option<OperationId>,
    stream: Option<StreamId>,
    ports: Vec<PortId>,
    buffers: Vec<BufferId>,
}

impl Handles {
    fn release<A: E5rtApi>(self, api: &mut A) {
        if let Some(s) = self.stream {
            api.release_stream(s);
        }
        for b in self.buffers {
            api.release_buffer(b);
        }
        for p in self.ports {
            api.release_port(p);
        }
        if let Some(o) = self.operation {
            api.release_operation(o);
        }
    }
}

/// A loaded e5rt program (an operation) with a buffer bound to every port.
/// Obtained from [`E5rtRuntime::prepare`] or [`E5rtRuntime::instantiate`],
/// returned with [`E5rtRuntime::release`].
#[derive(Debug)]
pub struct E5rtProgram {
    dir: ModelDir,
    function: E5rtFunction,
    /// Made by [`E5rtRuntime::prepare`]: its function goes with it.
    owns_function: bool,
    handles: Handles,
    operation: OperationId,
    stream: StreamId,
    inputs: Vec<BoundPort>,
    outputs: Vec<BoundPort>,
    aliases: Vec<(String, String)>,
    encoded: bool,
    scratch: Vec<u8>,
    stats: KernelStats,
}

impl E5rtProgram {
    /// Input ports in MIL declaration order.
    pub fn inputs(&self) -> impl Iterator<Item = &PortSpec> {
        self.inputs.iter().map(|p| &p.spec)
    }

    /// Output ports in MIL return order.
    pub fn outputs(&self) -> impl Iterator<Item = &PortSpec> {
        self.outputs.iter().map(|p| &p.spec)
    }

    /// `(output, input)` pairs sharing one buffer.
    pub fn aliases(&self) -> &[(String, String)] {
        &self.aliases
    }

    /// Whether the operation is encoded (after the first execute; no more aliasing).
    pub fn is_encoded(&self) -> bool {
        self.encoded
    }

    /// Timing so far: `eval_*` is `execute_sync`, `io_total` the writes and reads.
    pub fn stats(&self) -> KernelStats {
        self.stats
    }

    /// The model directory the program was compiled from (its function's).
    pub fn dir(&self) -> &ModelDir {
        &self.dir
    }

    /// Index of input `name` in `inputs`.
    fn input_index(&self, name: &str) -> Result<usize> {
        self.inputs
            .iter()
            .position(|p| p.spec.name == name)
            .ok_or_else(|| {
                let msg = if self.outputs.iter().any(|p| p.spec.name == name) {
                    "is an output; outputs are written by the program".to_string()
                } else {
                    format!("no such input (inputs: {})", names(&self.inputs))
                };
                Error::Binding {
                    name: name.to_string(),
                    msg,
                }
            })
    }

    /// Index of output `name` in `outputs`.
    fn output_index(&self, name: &str) -> Result<usize> {
        self.outputs
            .iter()
            .position(|p| p.spec.name == name)
            .ok_or_else(|| Error::Binding {
                name: name.to_string(),
                msg: format!("no such output (outputs: {})", names(&self.outputs)),
            })
    }
}

fn names(ports: &[BoundPort]) -> String {
    let v: Vec<&str> = ports.iter().map(|p| p.spec.name.as_str()).collect();
    v.join(", ")
}

fn encode_values(spec: &PortSpec, values: &[f32], out: &mut Vec<u8>) {
    out.clear();
    match spec.elem {
        ElemType::F16 => {
            for &v in values {
                out.extend_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        ElemType::F32 => {
            for &v in values {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

fn decode_values(spec: &PortSpec, bytes: &[u8]) -> Vec<f32> {
    match spec.elem {
        ElemType::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        ElemType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    }
}

/// Drives an [`E5rtApi`]: a loaded-program budget, one model directory per
/// program under a work directory, and the calls of ane-evidence.md §c in order.
pub struct E5rtRuntime<A: E5rtApi> {
    api: A,
    base: PathBuf,
    owns_base: bool,
    budget: u32,
    compiles: u32,
    next_dir: u64,
    functions: std::collections::BTreeMap<FunctionId, Compiled>,
}

impl<A: E5rtApi> std::fmt::Debug for E5rtRuntime<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5rtRuntime")
            .field("api", &self.api.name())
            .field("base", &self.base)
            .field("budget", &self.budget)
            .field("compiles", &self.compiles)
            .field("functions", &self.functions.len())
            .finish()
    }
}

impl<A: E5rtApi> E5rtRuntime<A> {
    /// A runtime over `api` with [`DEFAULT_PROGRAM_BUDGET`], writing model
    /// directories under a fresh `$TMPDIR/anedvd-e5rt-<pid>-<n>/` (removed on drop).
    pub fn new(api: A) -> Self {
        let n = NEXT_RUNTIME.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("anedvd-e5rt-{}-{n}", std::process::id()));
        E5rtRuntime {
            api,
            base,
            owns_base: true,
            budget: DEFAULT_PROGRAM_BUDGET,
            compiles: 0,
            next_dir: 0,
            functions: std::collections::BTreeMap::new(),
        }
    }

    /// Writes model directories under `dir` instead (left in place on drop;
    /// each program's own directory is removed when it is released).
    pub fn with_work_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base = dir.into();
        self.owns_base = false;
        self
    }

    /// Sets how many programs may be loaded at once (counted by the driver:
    /// the whole process for the real one).
    pub fn with_program_budget(mut self, limit: u32) -> Self {
        self.budget = limit;
        self
    }

    /// The driver.
    pub fn api(&self) -> &A {
        &self.api
    }

    /// The driver, mutably.
    pub fn api_mut(&mut self) -> &mut A {
        &mut self.api
    }

    /// The loaded-program budget.
    pub fn budget(&self) -> u32 {
        self.budget
    }

    /// Programs that may still be prepared before [`Error::ProgramBudget`].
    pub fn programs_left(&self) -> u32 {
        self.budget.saturating_sub(self.api.loaded_programs())
    }

    /// Compile calls this runtime issued (one per [`E5rtRuntime::compile`],
    /// so one per prepared program, none per instantiated one).
    pub fn compiles(&self) -> u32 {
        self.compiles
    }

    /// Compiled functions alive (prepared programs' included).
    pub fn functions(&self) -> usize {
        self.functions.len()
    }

    /// Programs created from `f` and not released yet (`None`: no such
    /// function in this runtime).
    pub fn programs_from(&self, f: E5rtFunction) -> Option<u32> {
        self.functions.get(&f.0).map(|c| c.live)
    }

    /// Input and output ports of `f`, in MIL declaration and return order.
    pub fn function_ports(&self, f: E5rtFunction) -> Result<(&[PortSpec], &[PortSpec])> {
        let c = self.compiled(f)?;
        Ok((&c.inputs, &c.outputs))
    }

    fn compiled(&self, f: E5rtFunction) -> Result<&Compiled> {
        self.functions.get(&f.0).ok_or(Error::Handle {
            kind: "function",
            id: (f.0).0,
        })
    }

    fn check_budget(&self) -> Result<()> {
        let loaded = self.api.loaded_programs();
        if loaded >= self.budget {
            return Err(Error::ProgramBudget {
                loaded,
                limit: self.budget,
            });
        }
        Ok(())
    }

    /// Writes, compiles and loads `src` (its function `main`), binds every
    /// port to its own zeroed buffer and creates the stream:
    /// [`E5rtRuntime::compile`] and [`E5rtRuntime::instantiate`] in one,
    /// the function released with the program.
    pub fn prepare(&mut self, src: &ProgramSource) -> Result<E5rtProgram> {
        // refuse before compiling: the program could not be loaded anyway
        self.check_budget()?;
        let f = self.compile(src)?;
        match self.instantiate(f) {
            Ok(mut p) => {
                p.owns_function = true;
                Ok(p)
            }
            Err(e) => {
                // nothing was created from `f`, so this cannot be refused
                let _ = self.release_function(f);
                Err(e)
            }
        }
    }

    /// Writes `src` to a model directory, compiles it into a library and
    /// retains its function `main`, once: [`E5rtRuntime::instantiate`]
    /// creates programs from it, each with its own buffers. Loads nothing,
    /// so the program budget is checked when instantiating.
    pub fn compile(&mut self, src: &ProgramSource) -> Result<E5rtFunction> {
        check_weight_keys(src)?;
        // The caller must know every port's name and shape (e5rt does not
        // report them); they come from the MIL text itself.
        let program = anedvd_mil::parse(&src.mil)?;
        let main = program
            .function(MAIN_FUNCTION)
            .ok_or_else(|| Error::e5rt(E5rtStep::Compile, "the program has no function `main`"))?;
        let (inputs, outputs) = port_specs(main)?;
        let name = format!("{:016x}-{}", src.digest(), self.next_dir);
        self.next_dir += 1;
        let dir = ModelDir::write(&self.base, &name, src)?;
        match self.compile_dir(&dir) {
            Ok((library, function)) => {
                let compiled = Compiled {
                    dir,
                    library,
                    inputs,
                    outputs,
                    live: 0,
                };
                self.functions.insert(function, compiled);
                Ok(E5rtFunction(function))
            }
            Err(e) => {
                // Best effort: the error that matters is `e`.
                let _ = dir.remove();
                Err(e)
            }
        }
    }

    /// Compiles `dir/model.mil` and retains `main`; releases the library
    /// again when retaining fails.
    fn compile_dir(&mut self, dir: &ModelDir) -> Result<(LibraryId, FunctionId)> {
        let cache = dir.path.join("cache");
        std::fs::create_dir_all(&cache).map_err(|source| Error::Io {
            path: cache.clone(),
            source,
        })?;
        self.compiles += 1;
        let library = self.api.compile(&dir.path.join("model.mil"), &cache)?;
        match self.api.retain_function(library, MAIN_FUNCTION) {
            Ok(function) => Ok((library, function)),
            Err(e) => {
                self.api.release_library(library);
                Err(e)
            }
        }
    }

    /// Creates a program from `f` (compiled by [`E5rtRuntime::compile`]):
    /// the compute operation, every port bound to its own zeroed buffer, a
    /// stream. Compiles nothing; counts against the program budget.
    pub fn instantiate(&mut self, f: E5rtFunction) -> Result<E5rtProgram> {
        let c = self.compiled(f)?;
        let (dir, inputs, outputs) = (c.dir.clone(), c.inputs.clone(), c.outputs.clone());
        self.check_budget()?;
        let mut handles = Handles::default();
        match self.build(f.0, &mut handles, inputs, outputs) {
            Ok((operation, stream, inputs, outputs)) => {
                if let Some(c) = self.functions.get_mut(&f.0) {
                    c.live += 1;
                }
                let largest = inputs.iter().chain(&outputs).map(|p| p.spec.bytes());
                let scratch = Vec::with_capacity(largest.max().unwrap_or(0));
                Ok(E5rtProgram {
                    dir,
                    function: f,
                    owns_function: false,
                    handles,
                    operation,
                    stream,
                    inputs,
                    outputs,
                    aliases: Vec::new(),
                    encoded: false,
                    scratch,
                    stats: KernelStats::default(),
                })
            }
            Err(e) => {
                handles.release(&mut self.api);
                Err(e)
            }
        }
    }

    /// The calls of [`E5rtRuntime::instantiate`]; every object made is
    /// recorded in `h` so a failure part-way releases exactly what exists.
    #[allow(clippy::type_complexity)]
    fn build(
        &mut self,
        function: FunctionId,
        h: &mut Handles,
        inputs: Vec<PortSpec>,
        outputs: Vec<PortSpec>,
    ) -> Result<(OperationId, StreamId, Vec<BoundPort>, Vec<BoundPort>)> {
        let api = &mut self.api;
        let op = api.create_operation(function)?;
        h.operation = Some(op);
        let mut bind_all = |specs: Vec<PortSpec>, input: bool| -> Result<Vec<BoundPort>> {
            let mut bound = Vec::with_capacity(specs.len());
            for spec in specs {
                let port = if input {
                    api.retain_input_port(op, &spec.name)?
                } else {
                    api.retain_output_port(op, &spec.name)?
                };
                h.ports.push(port);
                let buffer = api.alloc_buffer(spec.bytes())?;
                h.buffers.push(buffer);
                api.bind(port, buffer)?;
                bound.push(BoundPort { spec, port, buffer });
            }
            Ok(bound)
        };
        let inputs = bind_all(inputs, true)?;
        let outputs = bind_all(outputs, false)?;
        let stream = api.create_stream()?;
        h.stream = Some(stream);
        Ok((op, stream, inputs, outputs))
    }

    /// Releases a compiled function (the function, then its library) and
    /// removes its model directory. Refused while a program created from it
    /// is live: release those first (ane-evidence.md §c: release in reverse).
    pub fn release_function(&mut self, f: E5rtFunction) -> Result<()> {
        let live = self.compiled(f)?.live;
        if live > 0 {
            return Err(Error::e5rt(
                E5rtStep::Release,
                format!(
                    "function {} still has {live} live program(s) created from it; release \
                     them first",
                    (f.0).0
                ),
            ));
        }
        if let Some(c) = self.functions.remove(&f.0) {
            self.api.release_function(f.0);
            self.api.release_library(c.library);
            // Best effort, like the framework's own temp cleanup.
            let _ = c.dir.remove();
        }
        Ok(())
    }

    /// Aliases `output` onto `input` (ANEForge's `share_buffer`): the input
    /// port is rebound to the output's buffer and its own buffer released,
    /// so each execute reads the state the previous one wrote. Both ports
    /// must have the same shape and type; only before the first execute.
    pub fn alias(&mut self, p: &mut E5rtProgram, output: &str, input: &str) -> Result<()> {
        let out = p.outputs[p.output_index(output)?].clone();
        self.rebind(p, input, &out, &format!("alias output `{output}` onto it"))?;
        p.aliases.push((output.to_string(), input.to_string()));
        Ok(())
    }

    /// Binds input `input` of `p` to the buffer that output `output` of
    /// another program `from` of this runtime is bound to (an aliased state
    /// of `from`, say) and releases the input's own: each execute of `p`
    /// reads what `from` last wrote there, with no host copy. The same call as
    /// [`E5rtRuntime::alias`] (`e5rt_io_port_bind_buffer_object` of one
    /// buffer to a second port), across two operations — UNVERIFIED on
    /// hardware (ane-evidence.md §c/§d show it within one program only).
    /// Both ports must have the same shape and type, `p` must not be encoded
    /// yet, and `from` keeps the buffer: release `p` first.
    pub fn bind_from(
        &mut self,
        from: &E5rtProgram,
        output: &str,
        p: &mut E5rtProgram,
        input: &str,
    ) -> Result<()> {
        let out = from.outputs[from.output_index(output)?].clone();
        let what = format!("bind another program's output `{output}` to it");
        self.rebind(p, input, &out, &what)
    }

    /// Rebinds input `input` of `p` to the buffer of `out` (an output of
    /// `p` or of another program; `what` names the act in errors) and
    /// releases the input's own buffer unless `p` still binds it. A buffer
    /// `p` holds from another program is that program's: never released
    /// here.
    fn rebind(
        &mut self,
        p: &mut E5rtProgram,
        input: &str,
        out: &BoundPort,
        what: &str,
    ) -> Result<()> {
        let in_index = p.input_index(input)?;
        let inp = p.inputs[in_index].clone();
        if p.encoded {
            return Err(Error::Binding {
                name: input.to_string(),
                msg: format!(
                    "cannot {what} after the first execute (the operation is encoded); do it \
                     before executing"
                ),
            });
        }
        if out.spec.shape != inp.spec.shape || out.spec.elem != inp.spec.elem {
            return Err(Error::Binding {
                name: input.to_string(),
                msg: format!(
                    "cannot {what} ({:?} {:?} onto {:?} {:?}): shapes or types differ",
                    out.spec.elem, out.spec.shape, inp.spec.elem, inp.spec.shape
                ),
            });
        }
        self.api.bind(inp.port, out.buffer)?;
        let old = inp.buffer;
        p.inputs[in_index].buffer = out.buffer;
        let still_used = p.inputs.iter().chain(&p.outputs).any(|b| b.buffer == old);
        if !still_used && p.handles.buffers.contains(&old) {
            p.handles.buffers.retain(|b| *b != old);
            self.api.release_buffer(old);
        }
        p.aliases.retain(|(_, i)| i != input);
        Ok(())
    }

    /// Writes `values` (row-major, the port's MIL shape) into input `name`,
    /// converted to the port's type (fp16: round to nearest even).
    pub fn write(&mut self, p: &mut E5rtProgram, name: &str, values: &[f32]) -> Result<()> {
        let t0 = Instant::now();
        let i = p.input_index(name)?;
        let E5rtProgram {
            inputs, scratch, ..
        } = &mut *p;
        let port = &inputs[i];
        let n = port.spec.numel();
        if values.len() != n {
            return Err(Error::Binding {
                name: name.to_string(),
                msg: format!(
                    "the port holds {n} values (shape {:?}, baked at compile); got {}",
                    port.spec.shape,
                    values.len()
                ),
            });
        }
        encode_values(&port.spec, values, scratch);
        self.api.write_buffer(port.buffer, scratch)?;
        p.stats.io_total += t0.elapsed();
        Ok(())
    }

    /// Reads port `name` (an output, or else an input: an aliased state
    /// can be read under either name) as f32, row-major in its MIL shape.
    pub fn read(&mut self, p: &mut E5rtProgram, name: &str) -> Result<Vec<f32>> {
        let t0 = Instant::now();
        let E5rtProgram {
            inputs,
            outputs,
            scratch,
            ..
        } = &mut *p;
        let port = match outputs.iter().find(|b| b.spec.name == name) {
            Some(o) => o,
            None => inputs
                .iter()
                .find(|b| b.spec.name == name)
                .ok_or_else(|| Error::Binding {
                    name: name.to_string(),
                    msg: format!(
                        "no such port (outputs: {}; inputs: {})",
                        names(outputs),
                        names(inputs)
                    ),
                })?,
        };
        scratch.clear();
        scratch.resize(port.spec.bytes(), 0);
        self.api.read_buffer(port.buffer, scratch)?;
        let values = decode_values(&port.spec, scratch);
        p.stats.io_total += t0.elapsed();
        Ok(values)
    }

    /// Encodes the operation on the first call, then `execute_sync`.
    pub fn execute(&mut self, p: &mut E5rtProgram) -> Result<()> {
        if !p.encoded {
            self.api.encode(p.stream, p.operation)?;
            p.encoded = true;
        }
        let t0 = Instant::now();
        self.api.execute(p.stream)?;
        let dt = t0.elapsed();
        let st = &mut p.stats;
        st.evals += 1;
        st.eval_total += dt;
        st.eval_min = Some(st.eval_min.map_or(dt, |m| m.min(dt)));
        Ok(())
    }

    /// Writes every named input, executes once and reads every output, in
    /// MIL return order.
    pub fn run(
        &mut self,
        p: &mut E5rtProgram,
        inputs: &[(&str, &[f32])],
    ) -> Result<Vec<(String, Vec<f32>)>> {
        for (name, values) in inputs {
            self.write(p, name, values)?;
        }
        self.execute(p)?;
        let names: Vec<String> = p.outputs.iter().map(|o| o.spec.name.clone()).collect();
        names
            .into_iter()
            .map(|n| self.read(p, &n).map(|v| (n, v)))
            .collect()
    }

    /// Releases the program's objects (stream, buffers, ports, operation).
    /// Its function stays for other programs unless the program came from
    /// [`E5rtRuntime::prepare`]: then the function, library and model
    /// directory go too.
    pub fn release(&mut self, p: E5rtProgram) {
        p.handles.release(&mut self.api);
        if let Some(c) = self.functions.get_mut(&p.function.0) {
            c.live = c.live.saturating_sub(1);
        }
        if p.owns_function {
            // `prepare` hands out no handle to its function, so nothing
            // else was created from it and the release cannot be refused.
            let _ = self.release_function(p.function);
        }
    }
}

impl<A: E5rtApi> Drop for E5rtRuntime<A> {
    /// Releases every compiled function no live program uses (the
    /// libraries go with them); the driver's own drop releases whatever a
    /// program never returned still holds, operations first.
    fn drop(&mut self) {
        let idle: Vec<E5rtFunction> = self
            .functions
            .iter()
            .filter(|(_, c)| c.live == 0)
            .map(|(f, _)| E5rtFunction(*f))
            .collect();
        for f in idle {
            // idle: cannot be refused
            let _ = self.release_function(f);
        }
        if self.owns_base {
            // Best effort: only directories of programs never released remain.
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }
}
