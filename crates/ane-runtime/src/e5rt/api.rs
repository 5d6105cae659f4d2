//! The e5rt interface: one method per step of Espresso's call sequence, with handles.
//!
//! The steps are those of `shared/docs/ane-evidence.md` §c, as ANEForge
//! drives them on real machines. A driver owns every object it creates and
//! hands out plain numeric handles; dropping the driver releases whatever is
//! still alive. Unlike the in-memory path ([`crate::Driver`]), ports carry
//! **dense** data in the MIL shape (no row padding), are looked up by MIL
//! name, and a program's ports may all have different sizes.

use anedvd_mil::ir::{DType, Function};

use crate::error::{E5rtStep, Error, Result};
use crate::layout::ElemType;

/// Device mask passed to the compiler: 0x4 = ANE only. 0x7 can silently fall
/// back to BNNS when the ANE compile fails (ane-evidence.md §c, §f).
pub const DEVICE_MASK_ANE: u64 = 0x4;

/// Buffer type 0 of `e5rt_buffer_object_alloc`: a plain CPU pointer.
pub const BUFFER_TYPE_CPU: u32 = 0;

/// The function every program is compiled with and retained by (`func main<ios18>`).
pub const MAIN_FUNCTION: &str = "main";

/// Loaded programs per process e5rt is reported to hold (ane-evidence.md §c,
/// "~128 loaded programs per PID"; what exactly counts is UNVERIFIED — the
/// drivers here count live compute operations, not libraries: see
/// `E5rtSim`'s `loaded_programs` for why).
pub const PROGRAM_LIMIT: u32 = 128;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);
    };
}

handle!(
    /// A compiled program library (`e5rt_program_library`).
    LibraryId
);
handle!(
    /// A retained program function (`e5rt_program_function`).
    FunctionId
);
handle!(
    /// A precompiled compute operation (one loaded program) with its options.
    OperationId
);
handle!(
    /// A retained input or output port of an operation (`e5rt_io_port`).
    PortId
);
handle!(
    /// A buffer object (`e5rt_buffer_object`, type 0: CPU memory).
    BufferId
);
handle!(
    /// An execution stream (`e5rt_execution_stream`).
    StreamId
);

/// Espresso's e5rt C API, one method per step of ane-evidence.md §c. Every
/// method names the call(s) it stands for; [`super::E5rtSim`] reproduces the
/// documented behaviour of each, [`super::E5rtPrivate`] makes the calls.
pub trait E5rtApi {
    /// Short name (`e5rt`, `e5rt-sim`).
    fn name(&self) -> &'static str;

    /// Steps 2–4: compiler config with the cache bundle at `cache_dir`,
    /// compiler, options (device mask [`DEVICE_MASK_ANE`], forced
    /// recompilation, the `graph` segmenter), then
    /// `e5rt_e5_compiler_compile(compiler, mil, options, &library)`. The
    /// compiler reads `mil` and the weight files it references (relative to
    /// `mil`'s directory, `@model_path/…`). Compiler, config and options are
    /// released before returning.
    fn compile(&mut self, mil: &std::path::Path, cache_dir: &std::path::Path) -> Result<LibraryId>;

    /// `e5rt_program_library_retain_program_function(library, name, &fn)`.
    fn retain_function(&mut self, library: LibraryId, name: &str) -> Result<FunctionId>;

    /// Step 5: op options from the function (operation name `main`,
    /// intermediate buffers allocated by e5rt), then
    /// `…_create_precompiled_compute_operation_with_options(&op, opts)`.
    /// Each live operation is one loaded program ([`PROGRAM_LIMIT`]); one
    /// function may serve several operations, each with its own ports, and
    /// must outlive them.
    fn create_operation(&mut self, function: FunctionId) -> Result<OperationId>;

    /// `e5rt_execution_stream_operation_retain_input_port(op, name, &port)`;
    /// `name` is the MIL parameter name.
    fn retain_input_port(&mut self, op: OperationId, name: &str) -> Result<PortId>;

    /// `e5rt_execution_stream_operation_retain_output_port(op, name, &port)`;
    /// `name` is the MIL output name.
    fn retain_output_port(&mut self, op: OperationId, name: &str) -> Result<PortId>;

    /// `e5rt_buffer_object_alloc(&buf, bytes rounded up to 64, 0)` and
    /// `e5rt_buffer_object_get_data_ptr`; the buffer starts zeroed.
    fn alloc_buffer(&mut self, bytes: usize) -> Result<BufferId>;

    /// Size in bytes of a buffer (its allocation, a multiple of 64).
    fn buffer_len(&self, buffer: BufferId) -> Result<usize>;

    /// Copies `data` to the start of the buffer's data pointer.
    fn write_buffer(&mut self, buffer: BufferId, data: &[u8]) -> Result<()>;

    /// Copies the start of the buffer's data pointer into `out`.
    fn read_buffer(&mut self, buffer: BufferId, out: &mut [u8]) -> Result<()>;

    /// `e5rt_io_port_bind_buffer_object(port, buffer)`. Binding an input
    /// port to the buffer an output port is bound to aliases them (ANEForge's
    /// `share_buffer`); binding is refused once the operation is encoded.
    fn bind(&mut self, port: PortId, buffer: BufferId) -> Result<()>;

    /// `e5rt_execution_stream_create(&stream)`.
    fn create_stream(&mut self) -> Result<StreamId>;

    /// `e5rt_execution_stream_encode_operation(stream, op)`.
    fn encode(&mut self, stream: StreamId, op: OperationId) -> Result<()>;

    /// `e5rt_execution_stream_execute_sync(stream)`: runs every encoded
    /// operation, reading inputs from and writing outputs to the bound buffers.
    fn execute(&mut self, stream: StreamId) -> Result<()>;

    /// `e5rt_execution_stream_release`.
    fn release_stream(&mut self, stream: StreamId);

    /// `e5rt_buffer_object_release`.
    fn release_buffer(&mut self, buffer: BufferId);

    /// `e5rt_io_port_release`.
    fn release_port(&mut self, port: PortId);

    /// `e5rt_execution_stream_operation_release` and the op options'
    /// release (frees one loaded-program slot).
    fn release_operation(&mut self, op: OperationId);

    /// `e5rt_program_function_release`.
    fn release_function(&mut self, function: FunctionId);

    /// `e5rt_program_library_release`.
    fn release_library(&mut self, library: LibraryId);

    /// Operations (loaded programs) alive: in this process for the real
    /// driver, in this driver for the simulated one.
    fn loaded_programs(&self) -> u32;
}

/// One port of a program as its MIL declares it. e5rt ports hold dense
/// row-major data in exactly this shape: the shape is baked at compile time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The MIL parameter (input) or returned value (output) name.
    pub name: String,
    /// Element type (fp16 normally; fp32 where the MIL declares it).
    pub elem: ElemType,
    /// The MIL shape, outermost first.
    pub shape: Vec<usize>,
}

impl PortSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Dense size in bytes (what a buffer bound to the port must hold).
    pub fn bytes(&self) -> usize {
        self.numel() * self.elem.size()
    }
}

/// Largest port the e5rt layer accepts (1 GiB dense), so a hostile shape
/// cannot make it allocate without bound.
pub const MAX_PORT_BYTES: usize = 1 << 30;

fn port_spec(name: &str, dtype: DType, shape: &[usize]) -> Result<PortSpec> {
    let elem = match dtype {
        DType::Fp16 => ElemType::F16,
        DType::Fp32 => ElemType::F32,
        d => {
            return Err(Error::e5rt(
                E5rtStep::Compile,
                format!("port `{name}` has dtype {d}; only fp16/fp32 ports are supported"),
            ))
        }
    };
    let bytes = shape
        .iter()
        .try_fold(elem.size(), |n, &d| n.checked_mul(d))
        .filter(|&n| n <= MAX_PORT_BYTES);
    if bytes.is_none() {
        return Err(Error::e5rt(
            E5rtStep::Compile,
            format!("port `{name}` of shape {shape:?} exceeds {MAX_PORT_BYTES} bytes"),
        ));
    }
    Ok(PortSpec {
        name: name.to_string(),
        elem,
        shape: shape.to_vec(),
    })
}

/// The input and output ports of a MIL function, in declaration and return order.
pub fn port_specs(f: &Function) -> Result<(Vec<PortSpec>, Vec<PortSpec>)> {
    let inputs = f
        .inputs
        .iter()
        .map(|(n, t)| port_spec(n, t.dtype, &t.shape))
        .collect::<Result<Vec<_>>>()?;
    let mut outputs = Vec::with_capacity(f.outputs.len());
    for o in &f.outputs {
        let t = f
            .value_type(o)
            .and_then(|v| v.as_tensor().cloned())
            .ok_or_else(|| {
                Error::e5rt(
                    E5rtStep::Compile,
                    format!("output `{o}` is not a tensor value"),
                )
            })?;
        outputs.push(port_spec(o, t.dtype, &t.shape)?);
    }
    Ok((inputs, outputs))
}
