//! The runtime's error type.

use std::fmt;
use std::path::PathBuf;

/// A driver-level operation, named after the private-API step it stands for
/// (`shared/docs/ane-spec.md` §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `modelWithMILText:…` + `inMemoryModelWithDescriptor:` + `compileWithQoS:`.
    Compile,
    /// `loadWithQoS:`.
    Load,
    /// `[[model model] modelAttributes]`.
    Attributes,
    /// `IOSurfaceCreate` + `objectWithIOSurface:`.
    CreateSurface,
    /// `IOSurfaceLock` + copy + `IOSurfaceUnlock`.
    SurfaceIo,
    /// `requestWithInputs:…procedureIndex:`.
    BuildRequest,
    /// `evaluateWithQoS:options:request:error:`.
    Evaluate,
    /// `unloadWithQoS:error:`.
    Unload,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Compile => "compile",
            Op::Load => "load",
            Op::Attributes => "model attributes",
            Op::CreateSurface => "surface creation",
            Op::SurfaceIo => "surface I/O",
            Op::BuildRequest => "request creation",
            Op::Evaluate => "evaluate",
            Op::Unload => "unload",
        })
    }
}

/// A step of the e5rt call sequence (`shared/docs/ane-evidence.md` §c), named
/// in [`Error::E5rt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum E5rtStep {
    /// Compiler config, compiler, options and `e5rt_e5_compiler_compile`.
    Compile,
    /// `e5rt_program_library_retain_program_function`.
    RetainFunction,
    /// Op options and `…_create_precompiled_compute_operation_with_options`.
    CreateOperation,
    /// `e5rt_execution_stream_operation_retain_input_port` / `…_output_port`.
    RetainPort,
    /// `e5rt_buffer_object_alloc` + `…_get_data_ptr`.
    AllocBuffer,
    /// Copying into or out of a buffer object's data pointer.
    BufferIo,
    /// `e5rt_io_port_bind_buffer_object`.
    Bind,
    /// `e5rt_execution_stream_create`.
    CreateStream,
    /// `e5rt_execution_stream_encode_operation`.
    Encode,
    /// `e5rt_execution_stream_execute_sync`.
    Execute,
    /// `e5rt_program_function_release` / `e5rt_program_library_release`
    /// (refused while something created from the object is live).
    Release,
}

impl fmt::Display for E5rtStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            E5rtStep::Compile => "compile",
            E5rtStep::RetainFunction => "retain function",
            E5rtStep::CreateOperation => "operation creation",
            E5rtStep::RetainPort => "retain port",
            E5rtStep::AllocBuffer => "buffer allocation",
            E5rtStep::BufferIo => "buffer I/O",
            E5rtStep::Bind => "port binding",
            E5rtStep::CreateStream => "stream creation",
            E5rtStep::Encode => "encode",
            E5rtStep::Execute => "execute",
            E5rtStep::Release => "release",
        })
    }
}

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The framework, the Objective-C runtime or a required class/selector
    /// cannot be reached (not macOS, framework missing, API changed).
    #[error("ANE unavailable: {reason}")]
    Unavailable {
        /// One-line reason (the failing library, class or selector).
        reason: String,
    },
    /// A driver call failed.
    #[error("ANE {op} failed{}: {message}", code.map(|c| format!(" (code {c})")).unwrap_or_default())]
    Driver {
        /// The failing step.
        op: Op,
        /// `NSError` code or hardware status, when known.
        code: Option<i64>,
        /// The driver's message (`NSError` description or simulated text).
        message: String,
        /// Whether retrying may help ("no ANE resources", slot reclamation).
        transient: bool,
    },
    /// A transient failure persisted through every retry.
    #[error("ANE {op} still failing after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// The failing step.
        op: Op,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: Box<Error>,
    },
    /// The per-process compile budget is spent (ane-spec.md §7.1).
    #[error(
        "ANE compile budget exhausted: {used} of {limit} compiles used in this process \
         (the compiler leaks after ~119); reuse compiled programs or restart the process"
    )]
    CompileBudget {
        /// Compiles charged so far.
        used: u32,
        /// The cap.
        limit: u32,
    },
    /// An e5rt call failed (non-zero return code, or refused by the
    /// simulated driver as the real one is reported to refuse it).
    #[error("e5rt {step} failed{}: {message}", code.map(|c| format!(" (code {c})")).unwrap_or_default())]
    E5rt {
        /// The failing step.
        step: E5rtStep,
        /// The call's non-zero return code, when a real call returned one.
        code: Option<i64>,
        /// What failed (the call and its arguments, or the simulated reason).
        message: String,
    },
    /// The e5rt loaded-program budget is spent (~128 per process,
    /// `shared/docs/ane-evidence.md` §c).
    #[error(
        "e5rt program budget exhausted: {loaded} of {limit} programs loaded in this process \
         (e5rt holds ~128 per process); release programs or restart the process"
    )]
    ProgramBudget {
        /// Programs loaded now.
        loaded: u32,
        /// The cap.
        limit: u32,
    },
    /// A weight-file key is not a safe relative path under `@model_path/`.
    #[error("weight key `{key}` rejected: {reason}")]
    WeightKey {
        /// The offending key.
        key: String,
        /// Why.
        reason: String,
    },
    /// Writing or removing the model directory failed.
    #[error("I/O error at {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A reported layout is inconsistent, or data does not fit it.
    #[error("layout of `{tensor}`: {msg}")]
    Layout {
        /// Tensor (symbol) name.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// Inputs given to a kernel do not match its signature.
    #[error("binding `{name}`: {msg}")]
    Binding {
        /// Input or output name.
        name: String,
        /// What is wrong.
        msg: String,
    },
    /// A MIL-level error (simulated driver: tensor construction).
    #[error("MIL: {0}")]
    Mil(#[from] anedvd_mil::Error),
    /// A handle does not name a live object of this driver.
    #[error("unknown {kind} handle {id}")]
    Handle {
        /// `model`, `surface`, `request`, or an e5rt kind (`library`, `function`,
        /// `operation`, `port`, `buffer`, `stream`).
        kind: &'static str,
        /// The handle value.
        id: u64,
    },
}

impl Error {
    /// Whether the operation may succeed if retried.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Driver {
                transient: true,
                ..
            }
        )
    }

    /// A non-transient driver error.
    pub fn driver(op: Op, message: impl Into<String>) -> Self {
        Error::Driver {
            op,
            code: None,
            message: message.into(),
            transient: false,
        }
    }

    /// An e5rt error without a return code.
    pub fn e5rt(step: E5rtStep, message: impl Into<String>) -> Self {
        Error::E5rt {
            step,
            code: None,
            message: message.into(),
        }
    }

    pub(crate) fn layout(tensor: &str, msg: impl Into<String>) -> Self {
        Error::Layout {
            tensor: tensor.to_string(),
            msg: msg.into(),
        }
    }
}

/// Result alias of the runtime.
pub type Result<T> = std::result::Result<T, Error>;
