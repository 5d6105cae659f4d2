//! The simulated driver: the private API's documented behaviour over the MIL simulator.
//!
//! What it reproduces (ane-spec.md §6–§7, UNVERIFIED on hardware):
//! * compile parses the MIL and runs the rule table (strided surfaces, so
//!   `ANE-SURFACE-ALIGN` is lifted; uniform sizes are checked on the
//!   surfaces, not the program); every compile call counts, and past
//!   [`SimDriver::DEFAULT_COMPILE_LIMIT`] compiles fail as the leaking
//!   compiler does;
//! * attributes report the hardware layout: rows padded to 64 bytes, one
//!   plane per channel, inputs and outputs in alphabetical symbol order;
//! * evaluate fails with status `0x1d` when input (or output) surfaces
//!   differ in size or are too small, `0x2` on a wrong surface count, and
//!   reads/writes tensors at the reported strides;
//! * transient "no ANE resources" errors can be injected per operation.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anedvd_mil::ir::{DType, Program, TensorType};
use anedvd_mil::rules::{self, RuleConfig, RuleId, SurfaceStyle};
use anedvd_mil::sim::{Simulator, Tensor, Weights};
use half::f16;

use super::driver::{Driver, Fnv, ModelAttributes, ModelId, ProgramSource, RequestId, SurfaceId};
use super::error::{Error, Op, Result};
use super::layout::{chw_of_shape, ElemType, TensorLayout};
use super::modeldir::{check_weight_keys, ModelDir};

/// The message of an injected transient error.
pub const NO_RESOURCES: &str = "No ANE resources available (simulated)";

/// Largest surface the simulated driver allocates (1 GiB).
pub const MAX_SURFACE_BYTES: usize = 1 << 30;

#[derive(Debug)]
struct SimModel {
    program: Program,
    weights: Weights,
    func: String,
    hex: String,
    loaded: bool,
    attrs: ModelAttributes,
    dir: Option<ModelDir>,
}

#[derive(Debug)]
struct SimRequest {
    model: ModelId,
    inputs: Vec<SurfaceId>,
    outputs: Vec<SurfaceId>,
}

/// A [`Driver`] backed by [`anedvd_mil::sim::Simulator`].
#[derive(Debug)]
pub struct SimDriver {
    next: u64,
    models: BTreeMap<ModelId, SimModel>,
    surfaces: BTreeMap<SurfaceId, Vec<u8>>,
    requests: BTreeMap<RequestId, SimRequest>,
    compiles: u32,
    compile_limit: u32,
    faults: BTreeMap<Op, u32>,
    model_dir: Option<PathBuf>,
    rules: RuleConfig,
}

impl Default for SimDriver {
    fn default() -> Self {
        Self::new()
    }
}

fn status(op: Op, code: i64, what: &str) -> Error {
    Error::Driver {
        op,
        code: Some(code),
        message: format!(
            "ANEProgramProcessRequestDirect() Failed with status=0x{code:x} : Program Inference error ({what})"
        ),
        transient: false,
    }
}

fn elem_of(t: &TensorType, name: &str) -> Result<ElemType> {
    match t.dtype {
        DType::Fp16 => Ok(ElemType::F16),
        DType::Fp32 => Ok(ElemType::F32),
        d => Err(Error::driver(
            Op::Compile,
            format!("I/O tensor `{name}` has dtype {d}; only fp16/fp32 surfaces exist"),
        )),
    }
}

impl SimDriver {
    /// The compile count after which compiles fail (ane-spec.md §7.1).
    pub const DEFAULT_COMPILE_LIMIT: u32 = rules::CompileBudget::OBSERVED_LIMIT;

    /// A simulated driver with the default rule table and compile limit.
    pub fn new() -> Self {
        SimDriver {
            next: 1,
            models: BTreeMap::new(),
            surfaces: BTreeMap::new(),
            requests: BTreeMap::new(),
            compiles: 0,
            compile_limit: Self::DEFAULT_COMPILE_LIMIT,
            faults: BTreeMap::new(),
            model_dir: None,
            rules: RuleConfig {
                surface: SurfaceStyle::Strided,
                waived: vec![RuleId::IoUniform],
                ..RuleConfig::default()
            },
        }
    }

    /// Also writes each program's model directory under `base/<hex>/`, as the
    /// private driver does (removed when the model is released).
    pub fn with_model_dir(mut self, base: impl Into<PathBuf>) -> Self {
        self.model_dir = Some(base.into());
        self
    }

    /// Changes the compile count after which compiles fail.
    pub fn with_compile_limit(mut self, limit: u32) -> Self {
        self.compile_limit = limit;
        self
    }

    /// Lets `op` fail transiently ("no ANE resources") on its next `times` calls.
    pub fn inject_transient(&mut self, op: Op, times: u32) {
        *self.faults.entry(op).or_insert(0) += times;
    }

    /// The simulated `hexStringIdentifier` of a loaded model.
    pub fn hex_identifier(&self, model: ModelId) -> Result<&str> {
        Ok(&self.model(model)?.hex)
    }

    /// The model directory written for a model, if any.
    pub fn model_dir(&self, model: ModelId) -> Result<Option<&ModelDir>> {
        Ok(self.model(model)?.dir.as_ref())
    }

    fn fault(&mut self, op: Op) -> Result<()> {
        if let Some(n) = self.faults.get_mut(&op) {
            if *n > 0 {
                *n -= 1;
                return Err(Error::Driver {
                    op,
                    code: None,
                    message: NO_RESOURCES.into(),
                    transient: true,
                });
            }
        }
        Ok(())
    }

    fn id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    fn model(&self, m: ModelId) -> Result<&SimModel> {
        self.models.get(&m).ok_or(Error::Handle {
            kind: "model",
            id: m.0,
        })
    }

    fn surface(&self, s: SurfaceId) -> Result<&Vec<u8>> {
        self.surfaces.get(&s).ok_or(Error::Handle {
            kind: "surface",
            id: s.0,
        })
    }

    fn attributes_of(program: &Program, func: &str) -> Result<ModelAttributes> {
        let f = program
            .function(func)
            .ok_or_else(|| Error::driver(Op::Compile, format!("no function `{func}`")))?;
        let layout = |name: &str, t: &TensorType| -> Result<TensorLayout> {
            let (c, h, w) = chw_of_shape(&t.shape);
            Ok(TensorLayout::planar(name, elem_of(t, name)?, c, h, w))
        };
        let mut inputs = f
            .inputs
            .iter()
            .map(|(n, t)| layout(n, t))
            .collect::<Result<Vec<_>>>()?;
        let mut outputs = Vec::new();
        for o in &f.outputs {
            let t = f
                .value_type(o)
                .and_then(|v| v.as_tensor().cloned())
                .ok_or_else(|| Error::driver(Op::Compile, format!("output `{o}` not a tensor")))?;
            outputs.push(layout(o, &t)?);
        }
        // The compiled symbol order is alphabetical (ane-spec.md §6.4).
        inputs.sort_by(|a, b| a.symbol.cmp(&b.symbol));
        outputs.sort_by(|a, b| a.symbol.cmp(&b.symbol));
        Ok(ModelAttributes { inputs, outputs })
    }

    /// Reads a tensor out of a surface at `l`'s strides (the simulated
    /// hardware's own gather, independent of [`super::layout::unpack`]).
    fn gather(l: &TensorLayout, shape: &[usize], dtype: DType, bytes: &[u8]) -> Result<Tensor> {
        let mut v = Vec::with_capacity(l.numel());
        for c in 0..l.channels {
            for h in 0..l.height {
                for w in 0..l.width {
                    let at = c * l.plane_stride + h * l.row_stride;
                    v.push(match l.elem {
                        ElemType::F16 => {
                            let a = at + 2 * w;
                            f16::from_le_bytes([bytes[a], bytes[a + 1]]).to_f32()
                        }
                        ElemType::F32 => {
                            let a = at + 4 * w;
                            f32::from_le_bytes([bytes[a], bytes[a + 1], bytes[a + 2], bytes[a + 3]])
                        }
                    });
                }
            }
        }
        Ok(Tensor::from_f32(dtype, shape, &v)?)
    }

    fn scatter(l: &TensorLayout, t: &Tensor, bytes: &mut [u8]) {
        let v = t.to_f32();
        let mut i = 0;
        for c in 0..l.channels {
            for h in 0..l.height {
                for w in 0..l.width {
                    let at = c * l.plane_stride + h * l.row_stride;
                    match l.elem {
                        ElemType::F16 => {
                            let a = at + 2 * w;
                            bytes[a..a + 2].copy_from_slice(&f16::from_f32(v[i]).to_le_bytes());
                        }
                        ElemType::F32 => {
                            let a = at + 4 * w;
                            bytes[a..a + 4].copy_from_slice(&v[i].to_le_bytes());
                        }
                    }
                    i += 1;
                }
            }
        }
    }

    fn check_uniform(
        &self,
        op: Op,
        ids: &[SurfaceId],
        layouts: &[TensorLayout],
        what: &str,
    ) -> Result<()> {
        if ids.len() != layouts.len() {
            return Err(status(
                op,
                0x2,
                &format!(
                    "{} {what} surfaces for {} {what}s",
                    ids.len(),
                    layouts.len()
                ),
            ));
        }
        let mut size = None;
        for (id, l) in ids.iter().zip(layouts) {
            let n = self.surface(*id)?.len();
            if *size.get_or_insert(n) != n {
                return Err(status(
                    op,
                    0x1d,
                    &format!("non-uniform {what} surface sizes"),
                ));
            }
            if n < l.alloc_size() {
                return Err(status(
                    op,
                    0x1d,
                    &format!(
                        "{what} surface for `{}` too small: {n} < {}",
                        l.name,
                        l.alloc_size()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn eval_inner(&mut self, model: ModelId, request: RequestId) -> Result<()> {
        let req = self.requests.get(&request).ok_or(Error::Handle {
            kind: "request",
            id: request.0,
        })?;
        if req.model != model {
            return Err(status(Op::Evaluate, 0x2, "request built for another model"));
        }
        let m = self.model(model)?;
        if !m.loaded {
            return Err(Error::driver(Op::Evaluate, "model is not loaded"));
        }
        self.check_uniform(Op::Evaluate, &req.inputs, &m.attrs.inputs, "input")?;
        self.check_uniform(Op::Evaluate, &req.outputs, &m.attrs.outputs, "output")?;
        let f = m
            .program
            .function(&m.func)
            .ok_or_else(|| Error::driver(Op::Evaluate, "function vanished"))?;
        let mut named = Vec::new();
        for (l, s) in m.attrs.inputs.iter().zip(&req.inputs) {
            let (_, t) = f
                .inputs
                .iter()
                .find(|(n, _)| *n == l.name)
                .ok_or_else(|| Error::driver(Op::Evaluate, format!("no input `{}`", l.name)))?;
            named.push((
                l.name.as_str(),
                Self::gather(l, &t.shape, t.dtype, self.surface(*s)?)?,
            ));
        }
        let sim = Simulator::new_unchecked(&m.program, &m.weights);
        let outs = sim.run(&m.func, &named).map_err(|e| Error::Driver {
            op: Op::Evaluate,
            code: None,
            message: e.to_string(),
            transient: false,
        })?;
        let writes: Vec<(SurfaceId, TensorLayout, Tensor)> = m
            .attrs
            .outputs
            .iter()
            .zip(&req.outputs)
            .map(|(l, s)| {
                outs.iter()
                    .find(|(n, _)| *n == l.name)
                    .map(|(_, t)| (*s, l.clone(), t.clone()))
                    .ok_or_else(|| Error::driver(Op::Evaluate, format!("no output `{}`", l.name)))
            })
            .collect::<Result<_>>()?;
        for (s, l, t) in writes {
            let bytes = self.surfaces.get_mut(&s).ok_or(Error::Handle {
                kind: "surface",
                id: s.0,
            })?;
            Self::scatter(&l, &t, bytes);
        }
        Ok(())
    }
}

impl Driver for SimDriver {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn compile(&mut self, src: &ProgramSource) -> Result<ModelId> {
        check_weight_keys(src)?;
        self.compiles += 1;
        if self.compiles > self.compile_limit {
            return Err(Error::driver(
                Op::Compile,
                format!(
                    "ANECCompile() FAILED: compile {} in this process exceeds the ~{} the compiler survives (simulated)",
                    self.compiles, self.compile_limit
                ),
            ));
        }
        self.fault(Op::Compile)?;
        let compile_err = |msg: String| Error::driver(Op::Compile, msg);
        let program = anedvd_mil::parse(&src.mil)
            .map_err(|e| compile_err(format!("InvalidMILProgram: {e}")))?;
        let mut weights = Weights::new();
        for (k, v) in &src.weights {
            weights.insert(k.clone(), v.clone());
        }
        rules::enforce(&program, Some(&weights), &self.rules)
            .map_err(|e| compile_err(format!("ANECCompile() FAILED: {e}")))?;
        let func = program
            .functions
            .first()
            .map(|f| f.name.clone())
            .ok_or_else(|| compile_err("InvalidMILProgram: no function".into()))?;
        let attrs = Self::attributes_of(&program, &func)?;
        let mut h = Fnv::new();
        h.write(src.mil.as_bytes());
        for k in src.weights.keys() {
            h.write(k.as_bytes());
        }
        let hex = format!("{:016X}", h.0);
        let dir = match &self.model_dir {
            Some(base) => Some(ModelDir::write(base, &hex, src)?),
            None => None,
        };
        let id = ModelId(self.id());
        self.models.insert(
            id,
            SimModel {
                program,
                weights,
                func,
                hex,
                loaded: false,
                attrs,
                dir,
            },
        );
        Ok(id)
    }

    fn load(&mut self, model: ModelId) -> Result<()> {
        self.model(model)?;
        self.fault(Op::Load)?;
        if let Some(m) = self.models.get_mut(&model) {
            m.loaded = true;
        }
        Ok(())
    }

    fn attributes(&mut self, model: ModelId) -> Result<ModelAttributes> {
        let m = self.model(model)?;
        if !m.loaded {
            return Err(Error::driver(Op::Attributes, "model is not loaded"));
        }
        Ok(m.attrs.clone())
    }

    fn create_surface(&mut self, bytes: usize) -> Result<SurfaceId> {
        self.fault(Op::CreateSurface)?;
        if bytes == 0 || bytes > MAX_SURFACE_BYTES {
            return Err(Error::driver(
                Op::CreateSurface,
                format!("IOSurfaceCreate: bad size {bytes}"),
            ));
        }
        let id = SurfaceId(self.id());
        self.surfaces.insert(id, vec![0; bytes]);
        Ok(id)
    }

    fn surface_len(&self, surface: SurfaceId) -> Result<usize> {
        Ok(self.surface(surface)?.len())
    }

    fn write_surface(&mut self, surface: SurfaceId, data: &[u8]) -> Result<()> {
        let s = self.surfaces.get_mut(&surface).ok_or(Error::Handle {
            kind: "surface",
            id: surface.0,
        })?;
        let len = s.len();
        let dst = s.get_mut(..data.len()).ok_or_else(|| {
            Error::driver(
                Op::SurfaceIo,
                format!("{} bytes into a surface of {len}", data.len()),
            )
        })?;
        dst.copy_from_slice(data);
        Ok(())
    }

    fn read_surface(&mut self, surface: SurfaceId, out: &mut [u8]) -> Result<()> {
        let s = self.surface(surface)?;
        let src = s.get(..out.len()).ok_or_else(|| {
            Error::driver(
                Op::SurfaceIo,
                format!("{} bytes from a surface of {}", out.len(), s.len()),
            )
        })?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn build_request(
        &mut self,
        model: ModelId,
        inputs: &[SurfaceId],
        outputs: &[SurfaceId],
    ) -> Result<RequestId> {
        self.model(model)?;
        for s in inputs.iter().chain(outputs) {
            self.surface(*s)?;
        }
        let id = RequestId(self.id());
        self.requests.insert(
            id,
            SimRequest {
                model,
                inputs: inputs.to_vec(),
                outputs: outputs.to_vec(),
            },
        );
        Ok(id)
    }

    fn evaluate(&mut self, model: ModelId, request: RequestId) -> Result<()> {
        self.fault(Op::Evaluate)?;
        self.eval_inner(model, request)
    }

    fn unload(&mut self, model: ModelId) -> Result<()> {
        self.model(model)?;
        self.fault(Op::Unload)?;
        if let Some(m) = self.models.get_mut(&model) {
            m.loaded = false;
        }
        Ok(())
    }

    fn release_request(&mut self, request: RequestId) {
        self.requests.remove(&request);
    }

    fn release_surface(&mut self, surface: SurfaceId) {
        self.surfaces.remove(&surface);
    }

    fn release_model(&mut self, model: ModelId) {
        if let Some(m) = self.models.remove(&model) {
            if let Some(d) = m.dir {
                // Best effort, like the framework's own temp cleanup.
                let _ = d.remove();
            }
        }
    }

    fn compiles(&self) -> u32 {
        self.compiles
    }
}

impl Drop for SimDriver {
    fn drop(&mut self) {
        let ids: Vec<ModelId> = self.models.keys().copied().collect();
        for m in ids {
            self.release_model(m);
        }
    }
}
