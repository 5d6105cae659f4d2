//! The real e5rt driver: Espresso's C API, every symbol resolved at run time.
//!
//! Nothing is linked: [`E5rtPrivate::open`] loads
//! `/System/Library/PrivateFrameworks/Espresso.framework/Espresso` with
//! `libloading` and resolves each symbol as `name`, then `_name`; where the
//! framework or a symbol is missing (Linux, an OS without it) it returns
//! `ANE unavailable: <reason>`. Signatures follow ANEForge's `e5rt_api.h`
//! (every call returns int64, 0 = success; creates take the out-pointer
//! first, `compile` and the `retain_*` calls last; releases take a pointer
//! to the handle). Unproven on hardware.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use libloading::Library;

use super::api::{
    BufferId, E5rtApi, FunctionId, LibraryId, OperationId, PortId, StreamId, BUFFER_TYPE_CPU,
    DEVICE_MASK_ANE, MAIN_FUNCTION, MAX_PORT_BYTES,
};
use crate::error::{E5rtStep, Error, Result};
use crate::layout::round_up_64;

/// Where Espresso lives.
pub const ESPRESSO: &str = "/System/Library/PrivateFrameworks/Espresso.framework/Espresso";

/// Operations alive through Espresso in this process (all drivers).
static LIVE_OPERATIONS: AtomicU32 = AtomicU32::new(0);

/// An e5rt object pointer.
type Obj = *mut c_void;
/// `e5rt_error_code_t`: 0 = success.
type Code = i64;

type Create = unsafe extern "C" fn(*mut Obj) -> Code;
type Release = unsafe extern "C" fn(*mut Obj) -> Code;
type CreateFrom = unsafe extern "C" fn(*mut Obj, Obj) -> Code;
type SetStr = unsafe extern "C" fn(Obj, *const c_char) -> Code;
type SetU64 = unsafe extern "C" fn(Obj, u64) -> Code;
type SetInt = unsafe extern "C" fn(Obj, c_int) -> Code;
type Compile = unsafe extern "C" fn(Obj, *const c_char, Obj, *mut Obj) -> Code;
type RetainNamed = unsafe extern "C" fn(Obj, *const c_char, *mut Obj) -> Code;
type Alloc = unsafe extern "C" fn(*mut Obj, u64, u32) -> Code;
type DataPtr = unsafe extern "C" fn(Obj, *mut *mut c_void) -> Code;
type Pair = unsafe extern "C" fn(Obj, Obj) -> Code;
type Single = unsafe extern "C" fn(Obj) -> Code;

/// Resolves `name`, then `_name`, as a value of type `T`.
///
/// # Safety
/// `T` must be the symbol's true C signature.
unsafe fn lookup<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    [name.to_string(), format!("_{name}")]
        .into_iter()
        .find_map(|n| {
            let mut bytes = n.into_bytes();
            bytes.push(0);
            // SAFETY: forwarded from this function's contract.
            unsafe { lib.get::<T>(&bytes) }.ok().map(|s| *s)
        })
}

macro_rules! symbols {
    ($($name:ident: $ty:ty,)*) => {
        /// Every Espresso symbol the driver calls (the ~30 of ane-evidence.md §c).
        pub const SYMBOLS: &[&str] = &[$(stringify!($name)),*];

        #[allow(non_snake_case)]
        struct Symbols {
            $($name: $ty,)*
            /// Keeps Espresso loaded while the pointers above are used.
            _lib: Library,
        }

        impl Symbols {
            fn load(lib: Library) -> Result<Symbols> {
                let missing = |n: &str| Error::Unavailable {
                    reason: format!("symbol {n} (or _{n}) missing from {ESPRESSO}"),
                };
                // SAFETY: each type is the C signature ANEForge's e5rt_api.h
                // recovered for that symbol (and calls on real machines).
                unsafe {
                    Ok(Symbols {
                        $($name: lookup(&lib, stringify!($name))
                            .ok_or_else(|| missing(stringify!($name)))?,)*
                        _lib: lib,
                    })
                }
            }
        }
    };
}

symbols! {
    e5rt_e5_compiler_config_options_create: Create,
    e5rt_e5_compiler_config_options_release: Release,
    e5rt_e5_compiler_config_options_set_cache_bundle_location: SetStr,
    e5rt_e5_compiler_create_with_config: CreateFrom,
    e5rt_e5_compiler_release: Release,
    e5rt_e5_compiler_options_create: Create,
    e5rt_e5_compiler_options_release: Release,
    e5rt_e5_compiler_options_set_compute_device_types_mask: SetU64,
    e5rt_e5_compiler_options_set_force_recompilation: SetInt,
    e5rt_e5_compiler_options_set_segmenter: SetStr,
    e5rt_e5_compiler_compile: Compile,
    e5rt_program_library_retain_program_function: RetainNamed,
    e5rt_program_library_release: Release,
    e5rt_program_function_release: Release,
    e5rt_precompiled_compute_op_create_options_create_with_program_function: CreateFrom,
    e5rt_precompiled_compute_op_create_options_release: Release,
    e5rt_precompiled_compute_op_create_options_set_operation_name: SetStr,
    e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers: SetInt,
    e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options: CreateFrom,
    e5rt_execution_stream_operation_release: Release,
    e5rt_execution_stream_operation_retain_input_port: RetainNamed,
    e5rt_execution_stream_operation_retain_output_port: RetainNamed,
    e5rt_io_port_bind_buffer_object: Pair,
    e5rt_io_port_release: Release,
    e5rt_buffer_object_alloc: Alloc,
    e5rt_buffer_object_release: Release,
    e5rt_buffer_object_get_data_ptr: DataPtr,
    e5rt_execution_stream_create: Create,
    e5rt_execution_stream_release: Release,
    e5rt_execution_stream_encode_operation: Pair,
    e5rt_execution_stream_execute_sync: Single,
}

/// What `anedvd info` shows for the e5rt path: which symbols resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E5rtProbe {
    /// The framework loaded.
    pub library: &'static str,
    /// `(symbol, found as name or _name)`.
    pub symbols: Vec<(&'static str, bool)>,
}

impl E5rtProbe {
    /// The first missing symbol, as a one-line reason.
    pub fn missing(&self) -> Option<String> {
        self.symbols
            .iter()
            .find(|(_, ok)| !ok)
            .map(|(s, _)| format!("symbol {s} (or _{s}) missing from {}", self.library))
    }
}

/// Loads Espresso and looks up every symbol without calling any.
/// `Err(Unavailable)` when the framework cannot be loaded.
pub fn probe() -> Result<E5rtProbe> {
    let lib = crate::private::ffi::open(ESPRESSO)?;
    let symbols = SYMBOLS
        .iter()
        .map(|s| {
            // SAFETY: the pointer is only tested for presence, never called
            // or dereferenced, so any pointer type is sound.
            let found = unsafe { lookup::<*const c_void>(&lib, s) }.is_some();
            (*s, found)
        })
        .collect();
    Ok(E5rtProbe {
        library: ESPRESSO,
        symbols,
    })
}

/// Operations alive through Espresso in this process so far.
pub fn process_loaded_programs() -> u32 {
    LIVE_OPERATIONS.load(Ordering::Relaxed)
}

fn check(step: E5rtStep, call: &str, code: Code) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    Err(Error::E5rt {
        step,
        code: Some(code),
        message: format!("{call} returned {code} (Espresso logs the reason on stderr)"),
    })
}

fn non_null(step: E5rtStep, call: &str, obj: Obj) -> Result<Obj> {
    if obj.is_null() {
        return Err(Error::e5rt(step, format!("{call} returned a null object")));
    }
    Ok(obj)
}

fn c_string(step: E5rtStep, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::e5rt(step, format!("NUL byte in {s:?}")))
}

fn c_path(step: E5rtStep, p: &Path) -> Result<CString> {
    let s = p
        .to_str()
        .ok_or_else(|| Error::e5rt(step, format!("path {} is not UTF-8", p.display())))?;
    c_string(step, s)
}

struct PBuffer {
    obj: Obj,
    data: *mut u8,
    len: usize,
}

/// The [`E5rtApi`] over Espresso. Not `Send`: e5rt objects stay on the
/// thread that created them (their thread-safety is undocumented).
pub struct E5rtPrivate {
    sym: Symbols,
    next: u64,
    libraries: BTreeMap<LibraryId, Obj>,
    functions: BTreeMap<FunctionId, Obj>,
    /// The operation and its create options (released together).
    operations: BTreeMap<OperationId, (Obj, Obj)>,
    ports: BTreeMap<PortId, Obj>,
    buffers: BTreeMap<BufferId, PBuffer>,
    streams: BTreeMap<StreamId, Obj>,
}

impl std::fmt::Debug for E5rtPrivate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E5rtPrivate")
            .field("operations", &self.operations.len())
            .field("buffers", &self.buffers.len())
            .finish()
    }
}

impl E5rtPrivate {
    /// Loads Espresso and resolves every symbol the driver calls.
    pub fn open() -> Result<E5rtPrivate> {
        let lib = crate::private::ffi::open(ESPRESSO)?;
        Ok(E5rtPrivate {
            sym: Symbols::load(lib)?,
            next: 1,
            libraries: BTreeMap::new(),
            functions: BTreeMap::new(),
            operations: BTreeMap::new(),
            ports: BTreeMap::new(),
            buffers: BTreeMap::new(),
            streams: BTreeMap::new(),
        })
    }

    fn id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    fn release(&self, f: Release, obj: Obj) {
        let mut obj = obj;
        if !obj.is_null() {
            // SAFETY: `obj` is a live object this driver created with the
            // matching create call and releases exactly once; the release
            // functions take a pointer to the handle (e5rt_api.h).
            unsafe { f(&mut obj) };
        }
    }

    fn compile_library(&self, mil: &CString, cache: &CString) -> Result<Obj> {
        let s = &self.sym;
        let step = E5rtStep::Compile;
        let (mut config, mut compiler, mut options, mut library): (Obj, Obj, Obj, Obj) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        let graph = c_string(step, "graph")?;
        let mut run = || -> Result<()> {
            // SAFETY: for every call in this block, the signatures are those
            // of e5rt_api.h; out-pointers are valid locals; object arguments
            // were created (and checked non-null) just above; strings are
            // NUL-terminated CStrings alive for the call.
            unsafe {
                let create = s.e5rt_e5_compiler_config_options_create;
                check(step, "config_options_create", create(&mut config))?;
                non_null(step, "config_options_create", config)?;
                let set_cache = s.e5rt_e5_compiler_config_options_set_cache_bundle_location;
                check(
                    step,
                    "set_cache_bundle_location",
                    set_cache(config, cache.as_ptr()),
                )?;
                let create_compiler = s.e5rt_e5_compiler_create_with_config;
                check(
                    step,
                    "compiler_create_with_config",
                    create_compiler(&mut compiler, config),
                )?;
                non_null(step, "compiler_create_with_config", compiler)?;
                let create_options = s.e5rt_e5_compiler_options_create;
                check(
                    step,
                    "compiler_options_create",
                    create_options(&mut options),
                )?;
                non_null(step, "compiler_options_create", options)?;
                let mask = s.e5rt_e5_compiler_options_set_compute_device_types_mask;
                check(
                    step,
                    "set_compute_device_types_mask",
                    mask(options, DEVICE_MASK_ANE),
                )?;
                let force = s.e5rt_e5_compiler_options_set_force_recompilation;
                check(step, "set_force_recompilation", force(options, 1))?;
                let segmenter = s.e5rt_e5_compiler_options_set_segmenter;
                check(step, "set_segmenter", segmenter(options, graph.as_ptr()))?;
                let compile = s.e5rt_e5_compiler_compile;
                check(
                    step,
                    "e5_compiler_compile",
                    compile(compiler, mil.as_ptr(), options, &mut library),
                )?;
            }
            non_null(step, "e5_compiler_compile", library).map(|_| ())
        };
        let result = run();
        self.release(s.e5rt_e5_compiler_options_release, options);
        self.release(s.e5rt_e5_compiler_release, compiler);
        self.release(s.e5rt_e5_compiler_config_options_release, config);
        match result {
            Ok(()) => Ok(library),
            Err(e) => {
                self.release(s.e5rt_program_library_release, library);
                Err(e)
            }
        }
    }

    fn create_op(&self, function: Obj) -> Result<(Obj, Obj)> {
        let s = &self.sym;
        let step = E5rtStep::CreateOperation;
        let name = c_string(step, MAIN_FUNCTION)?;
        let (mut opts, mut op): (Obj, Obj) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut run = || -> Result<()> {
            // SAFETY: every call in this block has its e5rt_api.h signature;
            // `function` is a live retained function; out-pointers are valid
            // locals; `name` outlives the call.
            unsafe {
                let create =
                    s.e5rt_precompiled_compute_op_create_options_create_with_program_function;
                check(
                    step,
                    "op_create_options_create",
                    create(&mut opts, function),
                )?;
                non_null(step, "op_create_options_create", opts)?;
                let set_name = s.e5rt_precompiled_compute_op_create_options_set_operation_name;
                check(step, "set_operation_name", set_name(opts, name.as_ptr()))?;
                let alloc =
                    s.e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers;
                check(step, "set_allocate_intermediate_buffers", alloc(opts, 1))?;
                let create_op = s
                    .e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options;
                check(
                    step,
                    "create_precompiled_compute_operation",
                    create_op(&mut op, opts),
                )?;
            }
            non_null(step, "create_precompiled_compute_operation", op).map(|_| ())
        };
        match run() {
            Ok(()) => Ok((op, opts)),
            Err(e) => {
                self.release(s.e5rt_execution_stream_operation_release, op);
                self.release(s.e5rt_precompiled_compute_op_create_options_release, opts);
                Err(e)
            }
        }
    }

    fn retain_port(&mut self, op: OperationId, name: &str, input: bool) -> Result<PortId> {
        let (obj, _) = *self.operations.get(&op).ok_or(Error::Handle {
            kind: "operation",
            id: op.0,
        })?;
        let step = E5rtStep::RetainPort;
        let c_name = c_string(step, name)?;
        let (f, call) = if input {
            let f = self.sym.e5rt_execution_stream_operation_retain_input_port;
            (f, "retain_input_port")
        } else {
            let f = self.sym.e5rt_execution_stream_operation_retain_output_port;
            (f, "retain_output_port")
        };
        let mut port: Obj = std::ptr::null_mut();
        // SAFETY: e5rt_api.h signature; `obj` is a live operation, the name
        // a NUL-terminated string alive for the call, `port` a valid out slot.
        let code = unsafe { f(obj, c_name.as_ptr(), &mut port) };
        check(step, &format!("{call}(`{name}`)"), code)?;
        non_null(step, call, port)?;
        let id = PortId(self.id());
        self.ports.insert(id, port);
        Ok(id)
    }

    fn buffer(&self, b: BufferId) -> Result<&PBuffer> {
        self.buffers.get(&b).ok_or(Error::Handle {
            kind: "buffer",
            id: b.0,
        })
    }
}

impl E5rtApi for E5rtPrivate {
    fn name(&self) -> &'static str {
        "e5rt"
    }

    fn compile(&mut self, mil: &Path, cache_dir: &Path) -> Result<LibraryId> {
        let step = E5rtStep::Compile;
        let library = self.compile_library(&c_path(step, mil)?, &c_path(step, cache_dir)?)?;
        let id = LibraryId(self.id());
        self.libraries.insert(id, library);
        Ok(id)
    }

    fn retain_function(&mut self, library: LibraryId, name: &str) -> Result<FunctionId> {
        let lib = *self.libraries.get(&library).ok_or(Error::Handle {
            kind: "library",
            id: library.0,
        })?;
        let step = E5rtStep::RetainFunction;
        let c_name = c_string(step, name)?;
        let mut function: Obj = std::ptr::null_mut();
        let retain = self.sym.e5rt_program_library_retain_program_function;
        // SAFETY: e5rt_api.h signature; `lib` is a live library, the name a
        // NUL-terminated string alive for the call, `function` a valid out slot.
        let code = unsafe { retain(lib, c_name.as_ptr(), &mut function) };
        check(step, &format!("retain_program_function(`{name}`)"), code)?;
        non_null(step, "retain_program_function", function)?;
        let id = FunctionId(self.id());
        self.functions.insert(id, function);
        Ok(id)
    }

    fn create_operation(&mut self, function: FunctionId) -> Result<OperationId> {
        let f = *self.functions.get(&function).ok_or(Error::Handle {
            kind: "function",
            id: function.0,
        })?;
        let pair = self.create_op(f)?;
        LIVE_OPERATIONS.fetch_add(1, Ordering::Relaxed);
        let id = OperationId(self.id());
        self.operations.insert(id, pair);
        Ok(id)
    }

    fn retain_input_port(&mut self, op: OperationId, name: &str) -> Result<PortId> {
        self.retain_port(op, name, true)
    }

    fn retain_output_port(&mut self, op: OperationId, name: &str) -> Result<PortId> {
        self.retain_port(op, name, false)
    }

    fn alloc_buffer(&mut self, bytes: usize) -> Result<BufferId> {
        let step = E5rtStep::AllocBuffer;
        let len = round_up_64(bytes)
            .filter(|&n| bytes > 0 && n <= MAX_PORT_BYTES)
            .ok_or_else(|| Error::e5rt(step, format!("bad buffer size {bytes}")))?;
        let s = &self.sym;
        let mut obj: Obj = std::ptr::null_mut();
        let alloc = s.e5rt_buffer_object_alloc;
        // SAFETY: e5rt_api.h signature; `obj` is a valid out slot; type 0 is
        // a plain CPU buffer.
        let code = unsafe { alloc(&mut obj, len as u64, BUFFER_TYPE_CPU) };
        check(step, &format!("buffer_object_alloc({len})"), code)?;
        non_null(step, "buffer_object_alloc", obj)?;
        let mut data: *mut c_void = std::ptr::null_mut();
        let get = s.e5rt_buffer_object_get_data_ptr;
        // SAFETY: `obj` is the live buffer just allocated; `data` a valid out slot.
        let code = unsafe { get(obj, &mut data) };
        if let Err(e) = check(step, "buffer_object_get_data_ptr", code)
            .and_then(|()| non_null(step, "buffer_object_get_data_ptr", data))
        {
            self.release(s.e5rt_buffer_object_release, obj);
            return Err(e);
        }
        // SAFETY: the buffer holds `len` bytes at `data` (allocated with
        // that size above); zeroing them is what ANEForge does after alloc.
        unsafe { std::ptr::write_bytes(data.cast::<u8>(), 0, len) };
        let id = BufferId(self.id());
        let data = data.cast();
        self.buffers.insert(id, PBuffer { obj, data, len });
        Ok(id)
    }

    fn buffer_len(&self, buffer: BufferId) -> Result<usize> {
        Ok(self.buffer(buffer)?.len)
    }

    fn write_buffer(&mut self, buffer: BufferId, data: &[u8]) -> Result<()> {
        let b = self.buffer(buffer)?;
        if data.len() > b.len {
            return Err(Error::e5rt(
                E5rtStep::BufferIo,
                format!("{} bytes into a buffer of {}", data.len(), b.len),
            ));
        }
        // SAFETY: the live buffer holds `b.len >= data.len()` bytes at
        // `b.data`; `data` is a separate Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), b.data, data.len()) };
        Ok(())
    }

    fn read_buffer(&mut self, buffer: BufferId, out: &mut [u8]) -> Result<()> {
        let b = self.buffer(buffer)?;
        if out.len() > b.len {
            return Err(Error::e5rt(
                E5rtStep::BufferIo,
                format!("{} bytes from a buffer of {}", out.len(), b.len),
            ));
        }
        // SAFETY: the live buffer holds `b.len >= out.len()` bytes at
        // `b.data`; `out` is a separate Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(b.data.cast_const(), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn bind(&mut self, port: PortId, buffer: BufferId) -> Result<()> {
        let p = *self.ports.get(&port).ok_or(Error::Handle {
            kind: "port",
            id: port.0,
        })?;
        let b = self.buffer(buffer)?.obj;
        let bind = self.sym.e5rt_io_port_bind_buffer_object;
        // SAFETY: e5rt_api.h signature; a live port and a live buffer.
        let code = unsafe { bind(p, b) };
        check(E5rtStep::Bind, "io_port_bind_buffer_object", code)
    }

    fn create_stream(&mut self) -> Result<StreamId> {
        let step = E5rtStep::CreateStream;
        let mut stream: Obj = std::ptr::null_mut();
        let create = self.sym.e5rt_execution_stream_create;
        // SAFETY: e5rt_api.h signature; `stream` is a valid out slot.
        let code = unsafe { create(&mut stream) };
        check(step, "execution_stream_create", code)?;
        non_null(step, "execution_stream_create", stream)?;
        let id = StreamId(self.id());
        self.streams.insert(id, stream);
        Ok(id)
    }

    fn encode(&mut self, stream: StreamId, op: OperationId) -> Result<()> {
        let s = *self.streams.get(&stream).ok_or(Error::Handle {
            kind: "stream",
            id: stream.0,
        })?;
        let (o, _) = *self.operations.get(&op).ok_or(Error::Handle {
            kind: "operation",
            id: op.0,
        })?;
        let encode = self.sym.e5rt_execution_stream_encode_operation;
        // SAFETY: e5rt_api.h signature; a live stream and a live operation.
        let code = unsafe { encode(s, o) };
        check(E5rtStep::Encode, "execution_stream_encode_operation", code)
    }

    fn execute(&mut self, stream: StreamId) -> Result<()> {
        let s = *self.streams.get(&stream).ok_or(Error::Handle {
            kind: "stream",
            id: stream.0,
        })?;
        let execute = self.sym.e5rt_execution_stream_execute_sync;
        // SAFETY: e5rt_api.h signature; a live stream whose operations are
        // encoded with every port bound to a live buffer (the caller's job).
        let code = unsafe { execute(s) };
        check(E5rtStep::Execute, "execution_stream_execute_sync", code)
    }

    fn release_stream(&mut self, stream: StreamId) {
        if let Some(s) = self.streams.remove(&stream) {
            self.release(self.sym.e5rt_execution_stream_release, s);
        }
    }

    fn release_buffer(&mut self, buffer: BufferId) {
        if let Some(b) = self.buffers.remove(&buffer) {
            self.release(self.sym.e5rt_buffer_object_release, b.obj);
        }
    }

    fn release_port(&mut self, port: PortId) {
        if let Some(p) = self.ports.remove(&port) {
            self.release(self.sym.e5rt_io_port_release, p);
        }
    }

    fn release_operation(&mut self, op: OperationId) {
        if let Some((o, opts)) = self.operations.remove(&op) {
            self.release(self.sym.e5rt_execution_stream_operation_release, o);
            let release_opts = self.sym.e5rt_precompiled_compute_op_create_options_release;
            self.release(release_opts, opts);
            LIVE_OPERATIONS.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn release_function(&mut self, function: FunctionId) {
        if let Some(f) = self.functions.remove(&function) {
            self.release(self.sym.e5rt_program_function_release, f);
        }
    }

    fn release_library(&mut self, library: LibraryId) {
        if let Some(l) = self.libraries.remove(&library) {
            self.release(self.sym.e5rt_program_library_release, l);
        }
    }

    fn loaded_programs(&self) -> u32 {
        process_loaded_programs()
    }
}

impl Drop for E5rtPrivate {
    /// Releases what is still alive in ANEForge's teardown order: streams,
    /// buffers, ports, operations, functions, libraries.
    fn drop(&mut self) {
        let streams: Vec<StreamId> = self.streams.keys().copied().collect();
        for s in streams {
            self.release_stream(s);
        }
        let buffers: Vec<BufferId> = self.buffers.keys().copied().collect();
        for b in buffers {
            self.release_buffer(b);
        }
        let ports: Vec<PortId> = self.ports.keys().copied().collect();
        for p in ports {
            self.release_port(p);
        }
        let ops: Vec<OperationId> = self.operations.keys().copied().collect();
        for o in ops {
            self.release_operation(o);
        }
        let functions: Vec<FunctionId> = self.functions.keys().copied().collect();
        for f in functions {
            self.release_function(f);
        }
        let libraries: Vec<LibraryId> = self.libraries.keys().copied().collect();
        for l in libraries {
            self.release_library(l);
        }
    }
}
