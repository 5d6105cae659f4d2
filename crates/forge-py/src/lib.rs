//! Python bindings of `anedvd-forge`: the native half of `anedvd.forge`.
//!
//! Arrays cross the boundary as little-endian float32 bytes plus a shape;
//! the Python half (`python/anedvd/forge.py`) turns them into numpy arrays
//! and adds the operators. Every error becomes a Python `ValueError` with
//! the forge message (which names the op or node).

use std::collections::BTreeMap;

use af::{Choice, CompileOptions, MatmulStyle, RuntimePath, WeightFormat};
use anedvd_forge as af;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

fn err(e: af::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn floats(data: &[u8]) -> PyResult<Vec<f32>> {
    if !data.len().is_multiple_of(4) {
        return Err(PyValueError::new_err("data is not float32 bytes"));
    }
    Ok(data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn to_bytes<'py>(py: Python<'py>, v: &[f32]) -> Bound<'py, PyBytes> {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &b)
}

fn choice(s: &str) -> PyResult<Choice> {
    match s {
        "auto" => Ok(Choice::Auto),
        "native" => Ok(Choice::Native),
        "decomposed" => Ok(Choice::Decomposed),
        o => Err(PyValueError::new_err(format!(
            "{o:?}: expected auto, native or decomposed"
        ))),
    }
}

/// Compile options from a dict (missing keys keep their defaults).
fn options(d: Option<&Bound<'_, PyDict>>) -> PyResult<CompileOptions> {
    let mut o = CompileOptions::default();
    let Some(d) = d else { return Ok(o) };
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        match k.as_str() {
            "path" => {
                let s: String = v.extract()?;
                o.path = RuntimePath::from_name(&s).ok_or_else(|| {
                    PyValueError::new_err(format!("path {s:?}: expected inmem or e5rt"))
                })?;
            }
            "softmax" => o.softmax = choice(&v.extract::<String>()?)?,
            "reduce" => o.reduce = choice(&v.extract::<String>()?)?,
            "attention" => o.attention = choice(&v.extract::<String>()?)?,
            "matmul" => {
                o.matmul = match v.extract::<String>()?.as_str() {
                    "matmul" => MatmulStyle::Matmul,
                    "conv" => MatmulStyle::Conv,
                    s => {
                        return Err(PyValueError::new_err(format!(
                            "matmul {s:?}: expected matmul or conv"
                        )))
                    }
                }
            }
            "compress" => o.compress = compress(&v.extract::<String>()?)?,
            "compress_param" => {
                let m: BTreeMap<String, String> = v.extract()?;
                for (p, c) in m {
                    o.compress_param.insert(p, compress(&c)?);
                }
            }
            other => return Err(PyValueError::new_err(format!("unknown option {other:?}"))),
        }
    }
    Ok(o)
}

fn compress(s: &str) -> PyResult<WeightFormat> {
    WeightFormat::from_name(s).ok_or_else(|| {
        PyValueError::new_err(format!(
            "compress {s:?}: expected fp16, int8, lut8, lut6 or lut4"
        ))
    })
}

fn options_dict<'py>(py: Python<'py>, o: &CompileOptions) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("path", o.path.name())?;
    d.set_item("softmax", o.softmax.name())?;
    d.set_item("attention", o.attention.name())?;
    d.set_item("reduce", o.reduce.name())?;
    d.set_item(
        "matmul",
        if o.matmul == MatmulStyle::Conv {
            "conv"
        } else {
            "matmul"
        },
    )?;
    d.set_item("compress", o.compress.name())?;
    Ok(d)
}

/// A lazy graph.
#[pyclass(name = "Graph", module = "anedvd._forge")]
struct PyGraph(af::Graph);

/// One node of a graph.
#[pyclass(name = "Tensor", module = "anedvd._forge")]
#[derive(Clone)]
struct PyTensor(af::Tensor);

#[pymethods]
impl PyGraph {
    #[new]
    fn new() -> Self {
        PyGraph(af::Graph::new())
    }
    fn input(&self, name: &str, shape: Vec<usize>) -> PyResult<PyTensor> {
        self.0.input(name, &shape).map(PyTensor).map_err(err)
    }
    fn param(&self, name: &str, shape: Vec<usize>, data: &[u8]) -> PyResult<PyTensor> {
        self.0
            .param(name, &shape, floats(data)?)
            .map(PyTensor)
            .map_err(err)
    }
    fn constant(&self, shape: Vec<usize>, data: &[u8]) -> PyResult<PyTensor> {
        self.0
            .constant(&shape, floats(data)?)
            .map(PyTensor)
            .map_err(err)
    }
    fn scalar(&self, v: f32) -> PyResult<PyTensor> {
        self.0.scalar(v).map(PyTensor).map_err(err)
    }
    fn concat(&self, xs: Vec<PyTensor>, axis: isize) -> PyResult<PyTensor> {
        let refs: Vec<&af::Tensor> = xs.iter().map(|t| &t.0).collect();
        self.0.concat(&refs, axis).map(PyTensor).map_err(err)
    }
    fn __len__(&self) -> usize {
        self.0.len()
    }
}

#[pymethods]
impl PyTensor {
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.0.shape()
    }
    #[getter]
    fn name(&self) -> String {
        self.0.name()
    }
    #[getter]
    fn op(&self) -> &'static str {
        self.0.op().name()
    }
    fn graph(&self) -> PyGraph {
        PyGraph(self.0.graph().clone())
    }
    fn named(&self, name: &str) -> PyResult<PyTensor> {
        self.0.clone().named(name).map(PyTensor).map_err(err)
    }
    fn unary(&self, op: &str) -> PyResult<PyTensor> {
        let t = &self.0;
        let r = match op {
            "exp" => t.exp(),
            "log" => t.log(),
            "sqrt" => t.sqrt(),
            "rsqrt" => t.rsqrt(),
            "relu" => t.relu(),
            "sigmoid" => t.sigmoid(),
            "tanh" => t.tanh(),
            "abs" => t.abs(),
            "sign" => t.sign(),
            "square" => t.square(),
            "neg" => t.neg(),
            "silu" => t.silu(),
            "gelu" => t.gelu(),
            "t" => t.t(),
            o => return Err(PyValueError::new_err(format!("unknown unary op {o:?}"))),
        };
        r.map(PyTensor).map_err(err)
    }
    fn binary(&self, op: &str, y: &PyTensor) -> PyResult<PyTensor> {
        let (t, y) = (&self.0, &y.0);
        let r = match op {
            "add" => t.add(y),
            "sub" => t.sub(y),
            "mul" => t.mul(y),
            "div" => t.div(y),
            "maximum" => t.maximum(y),
            "minimum" => t.minimum(y),
            o => return Err(PyValueError::new_err(format!("unknown binary op {o:?}"))),
        };
        r.map(PyTensor).map_err(err)
    }
    #[pyo3(signature = (y, tx=false, ty=false))]
    fn matmul(&self, y: &PyTensor, tx: bool, ty: bool) -> PyResult<PyTensor> {
        self.0.matmul_t(&y.0, tx, ty).map(PyTensor).map_err(err)
    }
    fn conv2d(
        &self,
        w: &PyTensor,
        stride: [usize; 2],
        pad: [usize; 4],
        groups: usize,
    ) -> PyResult<PyTensor> {
        self.0
            .conv2d(&w.0, stride, pad, groups)
            .map(PyTensor)
            .map_err(err)
    }
    fn reduce(&self, kind: &str, axes: Vec<isize>, keep: bool) -> PyResult<PyTensor> {
        let r = match kind {
            "sum" => self.0.sum(&axes, keep),
            "mean" => self.0.mean(&axes, keep),
            "max" => self.0.max(&axes, keep),
            o => return Err(PyValueError::new_err(format!("unknown reduction {o:?}"))),
        };
        r.map(PyTensor).map_err(err)
    }
    fn softmax(&self, axis: isize) -> PyResult<PyTensor> {
        self.0.softmax(axis).map(PyTensor).map_err(err)
    }
    fn reshape(&self, shape: Vec<isize>) -> PyResult<PyTensor> {
        self.0.reshape(&shape).map(PyTensor).map_err(err)
    }
    fn transpose(&self, perm: Vec<usize>) -> PyResult<PyTensor> {
        self.0.transpose(&perm).map(PyTensor).map_err(err)
    }
    fn slice(&self, begin: Vec<usize>, size: Vec<usize>) -> PyResult<PyTensor> {
        self.0.slice(&begin, &size).map(PyTensor).map_err(err)
    }
    fn tile(&self, reps: Vec<usize>) -> PyResult<PyTensor> {
        self.0.tile(&reps).map(PyTensor).map_err(err)
    }
    fn pad(&self, pads: Vec<[usize; 2]>) -> PyResult<PyTensor> {
        self.0.pad(&pads).map(PyTensor).map_err(err)
    }
    fn reverse(&self, axes: Vec<isize>) -> PyResult<PyTensor> {
        self.0.reverse(&axes).map(PyTensor).map_err(err)
    }
    fn broadcast_to(&self, shape: Vec<usize>) -> PyResult<PyTensor> {
        self.0.broadcast_to(&shape).map(PyTensor).map_err(err)
    }
    fn attention(&self, k: &PyTensor, v: &PyTensor, causal: bool) -> PyResult<PyTensor> {
        self.0
            .attention(&k.0, &v.0, causal)
            .map(PyTensor)
            .map_err(err)
    }
    fn cross_entropy(&self, targets: &PyTensor) -> PyResult<PyTensor> {
        self.0.cross_entropy(&targets.0).map(PyTensor).map_err(err)
    }
    #[pyo3(signature = (axes, gamma=None, beta=None, eps=1e-5))]
    fn layer_norm(
        &self,
        axes: Vec<isize>,
        gamma: Option<PyTensor>,
        beta: Option<PyTensor>,
        eps: f32,
    ) -> PyResult<PyTensor> {
        self.0
            .layer_norm(
                &axes,
                gamma.as_ref().map(|t| &t.0),
                beta.as_ref().map(|t| &t.0),
                eps,
            )
            .map(PyTensor)
            .map_err(err)
    }
    #[pyo3(signature = (axes, gamma=None, eps=1e-6))]
    fn rms_norm(&self, axes: Vec<isize>, gamma: Option<PyTensor>, eps: f32) -> PyResult<PyTensor> {
        self.0
            .rms_norm(&axes, gamma.as_ref().map(|t| &t.0), eps)
            .map(PyTensor)
            .map_err(err)
    }
    #[pyo3(signature = (groups, gamma=None, beta=None, eps=1e-5))]
    fn group_norm(
        &self,
        groups: usize,
        gamma: Option<PyTensor>,
        beta: Option<PyTensor>,
        eps: f32,
    ) -> PyResult<PyTensor> {
        self.0
            .group_norm(
                groups,
                gamma.as_ref().map(|t| &t.0),
                beta.as_ref().map(|t| &t.0),
                eps,
            )
            .map(PyTensor)
            .map_err(err)
    }
}

fn feeds(d: &Bound<'_, PyDict>) -> PyResult<Vec<(String, Vec<f32>)>> {
    d.iter()
        .map(|(k, v)| Ok((k.extract::<String>()?, floats(&v.extract::<Vec<u8>>()?)?)))
        .collect()
}

type Outputs<'py> = Vec<(String, Vec<usize>, Bound<'py, PyBytes>)>;

fn outputs<'py>(py: Python<'py>, outs: Vec<af::Output>) -> Outputs<'py> {
    outs.into_iter()
        .map(|o| (o.name, o.shape, to_bytes(py, &o.values)))
        .collect()
}

/// A compiled program.
#[pyclass(name = "Program", module = "anedvd._forge")]
struct PyProgram(af::Executable);

#[pymethods]
impl PyProgram {
    fn run<'py>(&mut self, py: Python<'py>, inputs: &Bound<'py, PyDict>) -> PyResult<Outputs<'py>> {
        let f = feeds(inputs)?;
        let refs: Vec<(&str, &[f32])> = f.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let outs = self.0.run(&refs).map_err(err)?;
        Ok(outputs(py, outs))
    }
    fn mil(&self) -> String {
        self.0.mil()
    }
    /// Loads the program on a runtime driver of its path: `sim` (the
    /// simulated driver of the in-memory or e5rt path) or `ane` (the ANE:
    /// AppleNeuralEngine.framework or Espresso's e5rt; an error where there
    /// is none). On the e5rt path state inputs stay in aliased buffers.
    #[pyo3(signature = (driver="sim"))]
    fn load(&self, driver: &str) -> PyResult<PyLoaded> {
        let exe = self.0.clone();
        let e5rt = exe.unit()
            == (af::Unit::Simulator {
                path: af::RuntimePath::E5rt,
            });
        let loaded = match (driver, e5rt) {
            ("sim", false) => AnyLoaded::Sim(exe.load(af::SimDriver::new()).map_err(err)?),
            ("sim", true) => AnyLoaded::E5rtSim(exe.load_e5rt(af::E5rtSim::new()).map_err(err)?),
            ("ane", false) => {
                let d = af::PrivateDriver::open().map_err(|e| err(e.into()))?;
                AnyLoaded::Private(exe.load(d).map_err(err)?)
            }
            ("ane", true) => {
                let api = af::E5rtPrivate::open().map_err(|e| err(e.into()))?;
                AnyLoaded::E5rt(exe.load_e5rt(api).map_err(err)?)
            }
            (o, _) => {
                return Err(PyValueError::new_err(format!(
                    "driver {o:?}: expected sim or ane"
                )))
            }
        };
        Ok(PyLoaded(loaded))
    }
    fn save(&self, dir: std::path::PathBuf) -> PyResult<()> {
        self.0.save(&dir).map_err(err)
    }
    fn unit(&self) -> String {
        self.0.unit().to_string()
    }
    fn dispatches(&self) -> usize {
        self.0.dispatches()
    }
    fn statements(&self) -> usize {
        self.0.statements()
    }
    fn inputs(&self) -> Vec<(String, Vec<usize>)> {
        self.0.inputs()
    }
    fn outputs(&self) -> Vec<(String, Vec<usize>)> {
        self.0.outputs().to_vec()
    }
    fn choices(&self) -> Vec<(String, &'static str)> {
        self.0.lowered().choices.clone()
    }
}

enum AnyLoaded {
    Sim(af::Loaded<af::SimDriver>),
    Private(af::Loaded<af::PrivateDriver>),
    E5rtSim(af::LoadedE5rt<af::E5rtSim>),
    E5rt(af::LoadedE5rt<af::E5rtPrivate>),
}

/// A program loaded on a runtime driver (bound to the thread that loaded it:
/// the private driver's handles are not thread-safe).
#[pyclass(name = "Loaded", module = "anedvd._forge", unsendable)]
struct PyLoaded(AnyLoaded);

#[pymethods]
impl PyLoaded {
    fn run<'py>(&mut self, py: Python<'py>, inputs: &Bound<'py, PyDict>) -> PyResult<Outputs<'py>> {
        let f = feeds(inputs)?;
        let refs: Vec<(&str, &[f32])> = f.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let outs = match &mut self.0 {
            AnyLoaded::Sim(l) => l.run(&refs),
            AnyLoaded::Private(l) => l.run(&refs),
            AnyLoaded::E5rtSim(l) => l.run(&refs),
            AnyLoaded::E5rt(l) => l.run(&refs),
        }
        .map_err(err)?;
        Ok(outputs(py, outs))
    }
    fn unit(&self) -> String {
        match &self.0 {
            AnyLoaded::Sim(l) => l.unit().to_string(),
            AnyLoaded::Private(l) => l.unit().to_string(),
            AnyLoaded::E5rtSim(l) => l.unit().to_string(),
            AnyLoaded::E5rt(l) => l.unit().to_string(),
        }
    }
    /// The current value of a state input (e5rt path: read from its
    /// aliased buffer; the in-memory path carries no state).
    fn state(&mut self, name: &str) -> PyResult<Vec<f32>> {
        match &mut self.0 {
            AnyLoaded::E5rtSim(l) => l.state(name).map_err(err),
            AnyLoaded::E5rt(l) => l.state(name).map_err(err),
            _ => Err(PyValueError::new_err(
                "programs of the inmem path carry no state on a driver",
            )),
        }
    }
}

/// Trains a graph's params by compiled steps.
#[pyclass(name = "Trainer", module = "anedvd._forge")]
struct PyTrainer(af::Trainer);

#[pymethods]
impl PyTrainer {
    #[new]
    #[pyo3(signature = (loss, params=None, optimizer="sgd", lr=0.1, momentum=0.0, options=None))]
    fn new(
        loss: &PyTensor,
        params: Option<Vec<PyTensor>>,
        optimizer: &str,
        lr: f32,
        momentum: f32,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let opt = match optimizer {
            "sgd" => af::Optimizer::sgd(lr, momentum),
            "adam" => af::Optimizer::adam(lr),
            o => {
                return Err(PyValueError::new_err(format!(
                    "optimizer {o:?}: expected sgd or adam"
                )))
            }
        };
        let params = params.unwrap_or_default();
        let refs: Vec<&af::Tensor> = params.iter().map(|t| &t.0).collect();
        af::Trainer::new(&loss.0, &refs, opt, &self::options(options)?)
            .map(PyTrainer)
            .map_err(err)
    }
    fn step(&mut self, inputs: &Bound<'_, PyDict>) -> PyResult<f32> {
        let f = feeds(inputs)?;
        let refs: Vec<(&str, &[f32])> = f.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        self.0.step(&refs).map_err(err)
    }
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        outs: Vec<PyTensor>,
        inputs: &Bound<'py, PyDict>,
    ) -> PyResult<Outputs<'py>> {
        let f = feeds(inputs)?;
        let refs: Vec<(&str, &[f32])> = f.iter().map(|(n, v)| (n.as_str(), v.as_slice())).collect();
        let o: Vec<&af::Tensor> = outs.iter().map(|t| &t.0).collect();
        Ok(outputs(py, self.0.run(&o, &refs).map_err(err)?))
    }
    fn param<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyBytes>> {
        let v = self
            .0
            .param(name)
            .ok_or_else(|| PyValueError::new_err(format!("no param {name:?}")))?;
        Ok(to_bytes(py, &v))
    }
    fn save_step(&self, dir: std::path::PathBuf) -> PyResult<()> {
        self.0.program().save(&dir).map_err(err)
    }
    fn param_names(&self) -> Vec<String> {
        self.0.param_names()
    }
    fn steps(&self) -> u64 {
        self.0.steps()
    }
    fn program(&self) -> (usize, usize, String) {
        let p = self.0.program();
        (p.dispatches(), p.statements(), p.unit().to_string())
    }
}

fn refs(ts: &[PyTensor]) -> Vec<&af::Tensor> {
    ts.iter().map(|t| &t.0).collect()
}

#[pyfunction]
#[pyo3(signature = (outputs, options=None))]
fn compile(outputs: Vec<PyTensor>, options: Option<&Bound<'_, PyDict>>) -> PyResult<PyProgram> {
    af::compile(&refs(&outputs), &self::options(options)?)
        .map(PyProgram)
        .map_err(err)
}

#[pyfunction]
#[pyo3(signature = (outputs, options=None))]
fn validate(outputs: Vec<PyTensor>, options: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    af::validate(&refs(&outputs), &self::options(options)?).map_err(err)
}

#[pyfunction]
fn grad(y: &PyTensor, wrt: Vec<PyTensor>) -> PyResult<Vec<PyTensor>> {
    Ok(af::grad(&y.0, &refs(&wrt))
        .map_err(err)?
        .into_iter()
        .map(PyTensor)
        .collect())
}

/// `(op, inmem status, e5rt status)` for every op and spelling with evidence.
#[pyfunction]
fn capabilities() -> PyResult<Vec<(String, String, String)>> {
    let r = anedvd_forge_registry()?;
    Ok(r.entries()
        .map(|e| {
            (
                e.label(),
                e.status(RuntimePath::InMemory).to_string(),
                e.status(RuntimePath::E5rt).to_string(),
            )
        })
        .collect())
}

fn anedvd_forge_registry() -> PyResult<&'static af::registry::Registry> {
    af::registry::registry().map_err(PyValueError::new_err)
}

#[pyfunction]
#[pyo3(signature = (outputs, options=None, allow_compression=false, tolerance=1e-2))]
fn tune<'py>(
    py: Python<'py>,
    outputs: Vec<PyTensor>,
    options: Option<&Bound<'py, PyDict>>,
    allow_compression: bool,
    tolerance: f64,
) -> PyResult<(Bound<'py, PyDict>, Vec<Bound<'py, PyDict>>, bool)> {
    let t = af::cost::TuneOptions {
        allow_compression,
        tolerance,
        ..Default::default()
    };
    let tuned = af::cost::tune(&refs(&outputs), &self::options(options)?, &t).map_err(err)?;
    let mut report = Vec::new();
    for c in &tuned.candidates {
        let d = options_dict(py, &c.options)?;
        d.set_item("estimate_us", c.estimate.micros)?;
        d.set_item("measured_us", c.measured_us)?;
        d.set_item("error", c.error)?;
        d.set_item("dropped", c.dropped.clone())?;
        report.push(d);
    }
    Ok((options_dict(py, &tuned.options)?, report, tuned.cached))
}

#[pyfunction]
fn cg(a: &PyTensor, b: &PyTensor, iterations: usize) -> PyResult<PyTensor> {
    af::numeric::conjugate_gradient(&a.0, &b.0, iterations)
        .map(PyTensor)
        .map_err(err)
}

#[pyfunction]
fn bicgstab(a: &PyTensor, b: &PyTensor, iterations: usize) -> PyResult<PyTensor> {
    af::numeric::bicgstab(&a.0, &b.0, iterations)
        .map(PyTensor)
        .map_err(err)
}

#[pyfunction]
fn fft(re: &PyTensor, im: &PyTensor) -> PyResult<(PyTensor, PyTensor)> {
    let (r, i) = af::numeric::fft(&re.0, &im.0).map_err(err)?;
    Ok((PyTensor(r), PyTensor(i)))
}

#[pyfunction]
fn fft2(re: &PyTensor, im: &PyTensor) -> PyResult<(PyTensor, PyTensor)> {
    let (r, i) = af::numeric::fft2(&re.0, &im.0).map_err(err)?;
    Ok((PyTensor(r), PyTensor(i)))
}

/// The native module.
#[pymodule]
fn _forge(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGraph>()?;
    m.add_class::<PyTensor>()?;
    m.add_class::<PyProgram>()?;
    m.add_class::<PyTrainer>()?;
    m.add_class::<PyLoaded>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(grad, m)?)?;
    m.add_function(wrap_pyfunction!(capabilities, m)?)?;
    m.add_function(wrap_pyfunction!(tune, m)?)?;
    m.add_function(wrap_pyfunction!(cg, m)?)?;
    m.add_function(wrap_pyfunction!(bicgstab, m)?)?;
    m.add_function(wrap_pyfunction!(fft, m)?)?;
    m.add_function(wrap_pyfunction!(fft2, m)?)?;
    Ok(())
}
