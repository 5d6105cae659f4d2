//! The simulated e5rt driver: Espresso's documented behaviour over the MIL simulator.
//!
//! What it reproduces (ane-evidence.md §c–§d, UNVERIFIED on hardware):
//! * compile reads `model.mil` and the weight files it references from
//!   disk, parses the text back and runs the rule table for the e5rt path
//!   (`RuleConfig { path: E5rt, .. }`); symbolic dimensions do not compile
//!   (shapes are baked);
//! * ports are looked up by MIL name (unknown names are refused) and hold
//!   dense data in the MIL shape; a buffer smaller than its port is refused;
//! * binding (and so aliasing) is refused once the operation is encoded;
//!   execute refuses an operation with an unbound port;
//! * a buffer bound to several ports — an output aliased onto an input, or
//!   another operation's port (a state one program keeps and a later one
//!   reads; UNVERIFIED on hardware) — is refused for a port whose shape or
//!   type differs from a port it is already bound to (the same bytes read
//!   as another layout), and executing a port whose buffer was released
//!   fails;
//! * at most [`PROGRAM_LIMIT`] operations (loaded programs) live at once;
//!   a library and its function are compiled once and any number of
//!   operations may be created from that one function (each with its own
//!   ports and buffers), so what counts toward the limit is operations, not
//!   libraries (see [`E5rtSim::loaded_programs`](E5rtApi::loaded_programs));
//! * releasing a function while an operation created from it is live, or a
//!   library while a function retained from it is, is a misuse: the release
//!   is refused (the object stays alive) and recorded in
//!   [`E5rtSim::violations`], which tests assert empty;
//! * execute reads every input buffer before writing any output, so an
//!   output bound to its own input's buffer (aliased state) holds the new
//!   value afterwards.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anedvd_mil::ir::{Arg, Program, Value};
use anedvd_mil::registry::RuntimePath;
use anedvd_mil::rules::{self, RuleConfig};
use anedvd_mil::sim::{Data, Simulator, Tensor, Weights};
use half::f16;

use super::api::{
    port_specs, BufferId, E5rtApi, FunctionId, LibraryId, OperationId, PortId, PortSpec, StreamId,
    MAX_PORT_BYTES, PROGRAM_LIMIT,
};
use crate::error::{E5rtStep, Error, Result};
use crate::layout::{round_up_64, ElemType};
use crate::modeldir::sanitize_weight_key;

/// A parsed, rule-checked program with its weights.
#[derive(Debug)]
struct Compiled {
    program: Program,
    weights: Weights,
}

#[derive(Debug)]
struct SimFunction {
    compiled: Arc<Compiled>,
    library: LibraryId,
    name: String,
}

#[derive(Debug)]
struct SimOperation {
    compiled: Arc<Compiled>,
    /// The function the operation was created from (shared by every
    /// operation created from it).
    function: FunctionId,
    func: String,
    inputs: Vec<PortSpec>,
    outputs: Vec<PortSpec>,
    input_buffers: Vec<Option<BufferId>>,
    output_buffers: Vec<Option<BufferId>>,
    encoded: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Input,
    Output,
}

#[derive(Debug, Clone, Copy)]
struct SimPort {
    op: OperationId,
    side: Side,
    index: usize,
}

/// An [`E5rtApi`] backed by [`anedvd_mil::sim::Simulator`].
#[derive(Debug)]
pub struct E5rtSim {
    next: u64,
    libraries: BTreeMap<LibraryId, Arc<Compiled>>,
    functions: BTreeMap<FunctionId, SimFunction>,
    operations: BTreeMap<OperationId, SimOperation>,
    ports: BTreeMap<PortId, SimPort>,
    buffers: BTreeMap<BufferId, Vec<u8>>,
    streams: BTreeMap<StreamId, Vec<OperationId>>,
    program_limit: u32,
    compiles: u32,
    operations_created: u32,
    violations: Vec<String>,
}

impl Default for E5rtSim {
    fn default() -> Self {
        Self::new()
    }
}

fn refused(step: E5rtStep, message: String) -> Error {
    Error::e5rt(step, format!("{message} (simulated)"))
}

/// Every `BLOBFILE` path a program references (const values and inline arguments).
fn blob_paths(program: &Program) -> Vec<&str> {
    let mut paths: Vec<&str> = Vec::new();
    for f in &program.functions {
        for s in &f.body {
            let inline = s.args.values().filter_map(|a| match a {
                Arg::Inline(v) => Some(v),
                _ => None,
            });
            for v in s.attrs.values().chain(inline) {
                if let Value::Blob(b) = v {
                    if !paths.contains(&b.path.as_str()) {
                        paths.push(&b.path);
                    }
                }
            }
        }
    }
    paths
}

fn dense_tensor(spec: &PortSpec, bytes: &[u8]) -> Result<Tensor> {
    let src = bytes.get(..spec.bytes()).ok_or_else(|| {
        refused(
            E5rtStep::Execute,
            format!("buffer of port `{}` shorter than the port", spec.name),
        )
    })?;
    let data = match spec.elem {
        ElemType::F16 => Data::F16(
            src.chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]))
                .collect(),
        ),
        ElemType::F32 => Data::F32(
            src.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ),
    };
    Ok(Tensor {
        shape: spec.shape.clone(),
        data,
    })
}

fn write_dense(spec: &PortSpec, t: &Tensor, dst: &mut [u8]) -> Result<()> {
    if t.shape != spec.shape {
        return Err(refused(
            E5rtStep::Execute,
            format!(
                "output `{}` has shape {:?}, its port {:?}",
                spec.name, t.shape, spec.shape
            ),
        ));
    }
    let dst = dst.get_mut(..spec.bytes()).ok_or_else(|| {
        refused(
            E5rtStep::Execute,
            format!("buffer of port `{}` shorter than the port", spec.name),
        )
    })?;
    match (&t.data, spec.elem) {
        (Data::F16(v), ElemType::F16) => {
            for (d, x) in dst.chunks_exact_mut(2).zip(v) {
                d.copy_from_slice(&x.to_le_bytes());
            }
        }
        (_, ElemType::F16) => {
            for (d, x) in dst.chunks_exact_mut(2).zip(t.to_f32()) {
                d.copy_from_slice(&f16::from_f32(x).to_le_bytes());
            }
        }
        (_, ElemType::F32) => {
            for (d, x) in dst.chunks_exact_mut(4).zip(t.to_f32()) {
                d.copy_from_slice(&x.to_le_bytes());
            }
        }
    }
    Ok(())
}

impl E5rtSim {
    /// A simulated driver allowing [`PROGRAM_LIMIT`] live operations.
    pub fn new() -> Self {
        E5rtSim {
            next: 1,
            libraries: BTreeMap::new(),
            functions: BTreeMap::new(),
            operations: BTreeMap::new(),
            ports: BTreeMap::new(),
            buffers: BTreeMap::new(),
            streams: BTreeMap::new(),
            program_limit: PROGRAM_LIMIT,
            compiles: 0,
            operations_created: 0,
            violations: Vec::new(),
        }
    }

    /// Changes how many operations (loaded programs) may live at once.
    pub fn with_program_limit(mut self, limit: u32) -> Self {
        self.program_limit = limit;
        self
    }

    /// Compile calls that produced a library.
    pub fn compiles(&self) -> u32 {
        self.compiles
    }

    /// Operations created so far (live or released): with a compiled
    /// function shared by several operations, more than [`E5rtSim::compiles`].
    pub fn operations_created(&self) -> u32 {
        self.operations_created
    }

    /// Operations alive that were created from `function`.
    pub fn operations_from(&self, function: FunctionId) -> usize {
        self.operations
            .values()
            .filter(|o| o.function == function)
            .count()
    }

    /// Releases the driver refused because the object was still in use (a
    /// function with live operations, a library with live functions), in
    /// order. The real driver's behaviour there is unknown; a correct
    /// caller never does it, so tests assert this is empty.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Objects of every kind still alive (0 once everything is released).
    pub fn live_objects(&self) -> usize {
        self.libraries.len()
            + self.functions.len()
            + self.operations.len()
            + self.ports.len()
            + self.buffers.len()
            + self.streams.len()
    }

    fn id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    fn compile_files(&self, mil: &Path) -> Result<Compiled> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        let text = std::fs::read_to_string(mil).map_err(io(mil))?;
        let program = anedvd_mil::parse(&text).map_err(|e| match &e {
            // Our parser refuses symbolic dimensions outright; e5rt parses
            // them and fails to compile (ane-evidence.md §c).
            anedvd_mil::Error::Parse { msg, .. } if msg.contains("static dimension") => refused(
                E5rtStep::Compile,
                format!(
                    "shapes are baked at compile time; symbolic or zero dimensions do not \
                     compile: {e}"
                ),
            ),
            _ => refused(E5rtStep::Compile, format!("InvalidMILProgram: {e}")),
        })?;
        let dir = mil.parent().unwrap_or(Path::new("."));
        let mut weights = Weights::new();
        for key in blob_paths(&program) {
            let file = dir.join(sanitize_weight_key(key)?);
            let bytes = std::fs::read(&file).map_err(|e| {
                refused(
                    E5rtStep::Compile,
                    format!("weight file {} for `{key}`: {e}", file.display()),
                )
            })?;
            weights.insert(key, bytes);
        }
        let cfg = RuleConfig {
            path: RuntimePath::E5rt,
            ..RuleConfig::default()
        };
        rules::enforce(&program, Some(&weights), &cfg)
            .map_err(|e| refused(E5rtStep::Compile, format!("ANE compile rejected: {e}")))?;
        Ok(Compiled { program, weights })
    }

    fn operation(&self, op: OperationId) -> Result<&SimOperation> {
        self.operations.get(&op).ok_or(Error::Handle {
            kind: "operation",
            id: op.0,
        })
    }

    fn buffer(&self, b: BufferId) -> Result<&Vec<u8>> {
        self.buffers.get(&b).ok_or(Error::Handle {
            kind: "buffer",
            id: b.0,
        })
    }

    fn retain_port(&mut self, op: OperationId, name: &str, side: Side) -> Result<PortId> {
        let o = self.operation(op)?;
        let specs = match side {
            Side::Input => &o.inputs,
            Side::Output => &o.outputs,
        };
        let Some(index) = specs.iter().position(|s| s.name == name) else {
            let what = if side == Side::Input {
                "input"
            } else {
                "output"
            };
            let known: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return Err(refused(
                E5rtStep::RetainPort,
                format!(
                    "the operation has no {what} port `{name}` (its {what}s: {})",
                    known.join(", ")
                ),
            ));
        };
        let id = PortId(self.id());
        self.ports.insert(id, SimPort { op, side, index });
        Ok(id)
    }

    /// The ports of every live operation but `port` bound to `buffer`.
    fn bound_to(&self, buffer: BufferId, port: PortId) -> impl Iterator<Item = &PortSpec> + '_ {
        let this = self.ports.get(&port).map(|p| (p.op, p.side, p.index));
        self.operations.iter().flat_map(move |(op, o)| {
            let inputs = o.inputs.iter().zip(&o.input_buffers).enumerate();
            let outputs = o.outputs.iter().zip(&o.output_buffers).enumerate();
            let side = |s: Side| move |(i, x)| ((*op, s, i), x);
            inputs
                .map(side(Side::Input))
                .chain(outputs.map(side(Side::Output)))
                .filter(move |(at, (_, b))| **b == Some(buffer) && Some(*at) != this)
                .map(|(_, (spec, _))| spec)
        })
    }

    /// Runs one encoded operation: gathers every input, then writes every output.
    fn run_operation(&mut self, op: OperationId) -> Result<()> {
        let o = self.operation(op)?;
        let unbound = |specs: &[PortSpec], bound: &[Option<BufferId>]| {
            specs
                .iter()
                .zip(bound)
                .find(|(_, b)| b.is_none())
                .map(|(s, _)| s.name.clone())
        };
        if let Some(name) =
            unbound(&o.inputs, &o.input_buffers).or_else(|| unbound(&o.outputs, &o.output_buffers))
        {
            return Err(refused(
                E5rtStep::Execute,
                format!("port `{name}` has no buffer bound; bind every port before executing"),
            ));
        }
        let mut named = Vec::with_capacity(o.inputs.len());
        for (spec, b) in o.inputs.iter().zip(&o.input_buffers) {
            let b = b.ok_or_else(|| refused(E5rtStep::Execute, "unbound input".into()))?;
            named.push((spec.name.as_str(), dense_tensor(spec, self.buffer(b)?)?));
        }
        let sim = Simulator::new_unchecked(&o.compiled.program, &o.compiled.weights);
        let outs = sim
            .run(&o.func, &named)
            .map_err(|e| refused(E5rtStep::Execute, e.to_string()))?;
        let mut writes = Vec::with_capacity(o.outputs.len());
        for (spec, b) in o.outputs.iter().zip(&o.output_buffers) {
            let b = b.ok_or_else(|| refused(E5rtStep::Execute, "unbound output".into()))?;
            let (_, t) = outs
                .iter()
                .find(|(n, _)| *n == spec.name)
                .ok_or_else(|| refused(E5rtStep::Execute, format!("no output `{}`", spec.name)))?;
            writes.push((spec.clone(), b, t));
        }
        for (spec, b, t) in writes {
            let dst = self.buffers.get_mut(&b).ok_or(Error::Handle {
                kind: "buffer",
                id: b.0,
            })?;
            write_dense(&spec, t, dst)?;
        }
        Ok(())
    }
}

impl E5rtApi for E5rtSim {
    fn name(&self) -> &'static str {
        "e5rt-sim"
    }

    fn compile(&mut self, mil: &Path, _cache_dir: &Path) -> Result<LibraryId> {
        let compiled = self.compile_files(mil)?;
        self.compiles += 1;
        let id = LibraryId(self.id());
        self.libraries.insert(id, Arc::new(compiled));
        Ok(id)
    }

    fn retain_function(&mut self, library: LibraryId, name: &str) -> Result<FunctionId> {
        let compiled = self.libraries.get(&library).ok_or(Error::Handle {
            kind: "library",
            id: library.0,
        })?;
        if compiled.program.function(name).is_none() {
            return Err(refused(
                E5rtStep::RetainFunction,
                format!("the library has no function `{name}`"),
            ));
        }
        let f = SimFunction {
            compiled: compiled.clone(),
            library,
            name: name.to_string(),
        };
        let id = FunctionId(self.id());
        self.functions.insert(id, f);
        Ok(id)
    }

    fn create_operation(&mut self, function: FunctionId) -> Result<OperationId> {
        let f = self.functions.get(&function).ok_or(Error::Handle {
            kind: "function",
            id: function.0,
        })?;
        let loaded = self.operations.len();
        if loaded >= self.program_limit as usize {
            return Err(refused(
                E5rtStep::CreateOperation,
                format!(
                    "{loaded} programs already loaded; e5rt holds about {} per process",
                    self.program_limit
                ),
            ));
        }
        let func = f
            .compiled
            .program
            .function(&f.name)
            .ok_or_else(|| refused(E5rtStep::CreateOperation, "function vanished".into()))?;
        let (inputs, outputs) = port_specs(func)?;
        let op = SimOperation {
            compiled: f.compiled.clone(),
            function,
            func: f.name.clone(),
            input_buffers: vec![None; inputs.len()],
            output_buffers: vec![None; outputs.len()],
            inputs,
            outputs,
            encoded: false,
        };
        let id = OperationId(self.id());
        self.operations.insert(id, op);
        self.operations_created += 1;
        Ok(id)
    }

    fn retain_input_port(&mut self, op: OperationId, name: &str) -> Result<PortId> {
        self.retain_port(op, name, Side::Input)
    }

    fn retain_output_port(&mut self, op: OperationId, name: &str) -> Result<PortId> {
        self.retain_port(op, name, Side::Output)
    }

    fn alloc_buffer(&mut self, bytes: usize) -> Result<BufferId> {
        let size = round_up_64(bytes).filter(|&n| bytes > 0 && n <= MAX_PORT_BYTES);
        let Some(size) = size else {
            return Err(refused(
                E5rtStep::AllocBuffer,
                format!("bad buffer size {bytes}"),
            ));
        };
        let id = BufferId(self.id());
        self.buffers.insert(id, vec![0; size]);
        Ok(id)
    }

    fn buffer_len(&self, buffer: BufferId) -> Result<usize> {
        Ok(self.buffer(buffer)?.len())
    }

    fn write_buffer(&mut self, buffer: BufferId, data: &[u8]) -> Result<()> {
        let b = self.buffers.get_mut(&buffer).ok_or(Error::Handle {
            kind: "buffer",
            id: buffer.0,
        })?;
        let len = b.len();
        let dst = b.get_mut(..data.len()).ok_or_else(|| {
            Error::e5rt(
                E5rtStep::BufferIo,
                format!("{} bytes into a buffer of {len}", data.len()),
            )
        })?;
        dst.copy_from_slice(data);
        Ok(())
    }

    fn read_buffer(&mut self, buffer: BufferId, out: &mut [u8]) -> Result<()> {
        let b = self.buffer(buffer)?;
        let src = b.get(..out.len()).ok_or_else(|| {
            Error::e5rt(
                E5rtStep::BufferIo,
                format!("{} bytes from a buffer of {}", out.len(), b.len()),
            )
        })?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn bind(&mut self, port: PortId, buffer: BufferId) -> Result<()> {
        let p = *self.ports.get(&port).ok_or(Error::Handle {
            kind: "port",
            id: port.0,
        })?;
        let len = self.buffer(buffer)?.len();
        let o = self.operation(p.op)?;
        let spec = match p.side {
            Side::Input => &o.inputs[p.index],
            Side::Output => &o.outputs[p.index],
        };
        if o.encoded {
            return Err(refused(
                E5rtStep::Bind,
                format!(
                    "cannot bind port `{}`: the operation is already encoded; bind and alias \
                     ports before the first encode",
                    spec.name
                ),
            ));
        }
        if len < spec.bytes() {
            return Err(refused(
                E5rtStep::Bind,
                format!(
                    "buffer of {len} bytes is smaller than port `{}` ({} bytes, shape {:?})",
                    spec.name,
                    spec.bytes(),
                    spec.shape
                ),
            ));
        }
        if let Some(other) = self
            .bound_to(buffer, port)
            .find(|s| s.shape != spec.shape || s.elem != spec.elem)
        {
            return Err(refused(
                E5rtStep::Bind,
                format!(
                    "cannot bind port `{}` ({:?} {:?}) to the buffer of port `{}` ({:?} {:?}): \
                     ports sharing a buffer must have one shape and type",
                    spec.name, spec.elem, spec.shape, other.name, other.elem, other.shape
                ),
            ));
        }
        let o = self.operations.get_mut(&p.op).ok_or(Error::Handle {
            kind: "operation",
            id: p.op.0,
        })?;
        let slot = match p.side {
            Side::Input => &mut o.input_buffers[p.index],
            Side::Output => &mut o.output_buffers[p.index],
        };
        *slot = Some(buffer);
        Ok(())
    }

    fn create_stream(&mut self) -> Result<StreamId> {
        let id = StreamId(self.id());
        self.streams.insert(id, Vec::new());
        Ok(id)
    }

    fn encode(&mut self, stream: StreamId, op: OperationId) -> Result<()> {
        if !self.streams.contains_key(&stream) {
            return Err(Error::Handle {
                kind: "stream",
                id: stream.0,
            });
        }
        let o = self.operations.get_mut(&op).ok_or(Error::Handle {
            kind: "operation",
            id: op.0,
        })?;
        if o.encoded {
            return Err(refused(
                E5rtStep::Encode,
                "the operation is already encoded".into(),
            ));
        }
        o.encoded = true;
        if let Some(s) = self.streams.get_mut(&stream) {
            s.push(op);
        }
        Ok(())
    }

    fn execute(&mut self, stream: StreamId) -> Result<()> {
        let ops = self.streams.get(&stream).cloned().ok_or(Error::Handle {
            kind: "stream",
            id: stream.0,
        })?;
        if ops.is_empty() {
            return Err(refused(
                E5rtStep::Execute,
                "no operation is encoded on the stream".into(),
            ));
        }
        for op in ops {
            self.run_operation(op)?;
        }
        Ok(())
    }

    fn release_stream(&mut self, stream: StreamId) {
        self.streams.remove(&stream);
    }

    fn release_buffer(&mut self, buffer: BufferId) {
        self.buffers.remove(&buffer);
    }

    fn release_port(&mut self, port: PortId) {
        self.ports.remove(&port);
    }

    fn release_operation(&mut self, op: OperationId) {
        self.operations.remove(&op);
        for s in self.streams.values_mut() {
            s.retain(|o| *o != op);
        }
    }

    fn release_function(&mut self, function: FunctionId) {
        let live = self.operations_from(function);
        if live > 0 {
            self.violations.push(format!(
                "function {} released while {live} operation(s) created from it are live; \
                 release the operations first",
                function.0
            ));
            return;
        }
        self.functions.remove(&function);
    }

    fn release_library(&mut self, library: LibraryId) {
        let live = self
            .functions
            .values()
            .filter(|f| f.library == library)
            .count();
        if live > 0 {
            self.violations.push(format!(
                "library {} released while {live} function(s) retained from it are live; \
                 release the functions first",
                library.0
            ));
            return;
        }
        self.libraries.remove(&library);
    }

    /// Live operations, not libraries. ane-evidence.md §c gives the call
    /// sequence as compile → library (step 4, "cached per PID": a compiled
    /// artefact), retain `main` → function, then create the precompiled
    /// compute operation (step 5), and the limit as "~128 loaded programs
    /// per PID". ANEForge creates one operation per library, so the
    /// measurement cannot tell the two apart (UNVERIFIED); the operation is
    /// what is set up to run. Counting operations is also the larger count
    /// whenever each compiled library has at least one operation (the
    /// resident variant: one per open session), so a budget on operations
    /// holds under either reading then; a library compiled with no
    /// operation yet is not counted.
    fn loaded_programs(&self) -> u32 {
        u32::try_from(self.operations.len()).unwrap_or(u32::MAX)
    }
}
