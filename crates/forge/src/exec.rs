//! Compiled programs and the unit that runs them.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use anedvd_ane_runtime::e5rt::{E5rtApi, E5rtProgram, E5rtRuntime};
use anedvd_ane_runtime::{Driver, Kernel, ProgramSource, Runtime};
use anedvd_mil::registry::RuntimePath;
use anedvd_mil::rules::{self, RuleConfig, Violation};
use anedvd_mil::sim::{Simulator, Tensor as SimTensor};

use crate::error::{Error, Result};
use crate::graph::{Graph, Tensor};
use crate::lower::{self, CompileOptions, Lowered};

/// What executes a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// anedvd's fp16 MIL simulator on the CPU, after the rule checks of `path`.
    Simulator {
        /// The path whose rules the program passed.
        path: RuntimePath,
    },
    /// A runtime driver: of the in-memory path ([`Executable::load`]),
    /// `sim` (the runtime's binding and layout rules over the MIL
    /// simulator) or `private` (the ANE, through AppleNeuralEngine.framework);
    /// of the e5rt path ([`Executable::load_e5rt`]), `e5rt-sim` or `e5rt`
    /// (Espresso).
    Driver {
        /// The driver's name.
        name: &'static str,
    },
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unit::Simulator { path } => write!(
                f,
                "the fp16 MIL simulator on the CPU (checked against the {} path's rules; not the ANE)",
                path.name()
            ),
            Unit::Driver { name: "private" } => {
                f.write_str("the ANE, through AppleNeuralEngine.framework (in-memory path)")
            }
            Unit::Driver { name: "e5rt" } => {
                f.write_str("the ANE, through Espresso's e5rt (e5rt path)")
            }
            Unit::Driver { name: "e5rt-sim" } => f.write_str(
                "the `e5rt-sim` runtime driver (the e5rt path's ports, aliasing and refusals over the MIL simulator; not the ANE)",
            ),
            Unit::Driver { name } => write!(
                f,
                "the `{name}` runtime driver (the in-memory path's binding rules over the MIL simulator; not the ANE)"
            ),
        }
    }
}

/// One output of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The node's name.
    pub name: String,
    /// Its graph shape (`[]` for a scalar).
    pub shape: Vec<usize>,
    /// Row-major values (fp16 results widened to f32).
    pub values: Vec<f32>,
}

/// A rule violation mapped to the graph node that caused it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeViolation {
    /// The node's name (or `inputs`/`outputs` for the function's interface).
    pub node: String,
    /// The node's op.
    pub op: String,
    /// The rule broken.
    pub rule: Violation,
}

impl NodeViolation {
    fn into_error(self, path: RuntimePath) -> Error {
        Error::Invalid {
            node: self.node,
            op: self.op,
            path: path.name(),
            rule: self.rule.rule.code(),
            detail: self.rule.detail,
            rule_id: self.rule.rule,
        }
    }
}

fn rule_config(path: RuntimePath) -> RuleConfig {
    RuleConfig {
        path,
        ..RuleConfig::default()
    }
}

/// Every rule of `opts.path` the program for `outputs` breaks, by node
/// (contested ops included: they are reported, never assumed to work).
pub fn violations(outputs: &[&Tensor], opts: &CompileOptions) -> Result<Vec<NodeViolation>> {
    let l = lower::lower(outputs, opts)?;
    Ok(node_violations(outputs[0].graph(), &l, opts.path))
}

fn node_violations(graph: &Graph, l: &Lowered, path: RuntimePath) -> Vec<NodeViolation> {
    rules::check(&l.program, Some(&l.weights), &rule_config(path))
        .into_iter()
        .map(|v| {
            let stmt = v
                .location
                .rsplit(['/', ':'])
                .next()
                .unwrap_or("")
                .to_string();
            let (node, op) = match l.origin.get(&stmt).and_then(|&id| graph.node(id)) {
                Some(n) => (n.name, n.op.name().to_string()),
                None => (stmt, "interface".to_string()),
            };
            NodeViolation { node, op, rule: v }
        })
        .collect()
}

/// Checks the program for `outputs` against `opts.path`'s rules before
/// anything is compiled: the first refused node as [`Error::Invalid`].
pub fn validate(outputs: &[&Tensor], opts: &CompileOptions) -> Result<()> {
    let l = lower::lower(outputs, opts)?;
    first_refusal(outputs[0].graph(), &l, opts.path)
}

pub(crate) fn first_refusal(graph: &Graph, l: &Lowered, path: RuntimePath) -> Result<()> {
    match node_violations(graph, l, path)
        .into_iter()
        .find(|v| v.rule.rule != rules::RuleId::ContestedOp)
    {
        Some(v) => Err(v.into_error(path)),
        None => Ok(()),
    }
}

/// Validates and compiles `outputs` into one program.
pub fn compile(outputs: &[&Tensor], opts: &CompileOptions) -> Result<Executable> {
    let lowered = lower::lower(outputs, opts)?;
    first_refusal(outputs[0].graph(), &lowered, opts.path)?;
    Ok(Executable {
        lowered,
        unit: Unit::Simulator { path: opts.path },
        state: HashMap::new(),
        aliases: Vec::new(),
    })
}

/// A compiled program: one MIL function, one weight file, one dispatch per run.
#[derive(Debug, Clone)]
pub struct Executable {
    lowered: Lowered,
    unit: Unit,
    /// Values of inputs carried between runs.
    state: HashMap<String, SimTensor>,
    /// (output index, input name): after a run the output becomes the input's state.
    aliases: Vec<(usize, String)>,
}

impl Executable {
    /// The unit that runs it.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// Dispatches per run (one: the whole graph is one program).
    pub fn dispatches(&self) -> usize {
        self.lowered.program.functions.len()
    }

    /// The MIL text.
    pub fn mil(&self) -> String {
        anedvd_mil::print(&self.lowered.program)
    }

    /// The lowered program, weights and maps.
    pub fn lowered(&self) -> &Lowered {
        &self.lowered
    }

    /// Number of MIL statements (ops and consts).
    pub fn statements(&self) -> usize {
        self.lowered
            .program
            .functions
            .iter()
            .map(|f| f.body.len())
            .sum()
    }

    /// Inputs the caller supplies (state inputs excluded): name and shape.
    pub fn inputs(&self) -> Vec<(String, Vec<usize>)> {
        self.lowered
            .inputs
            .iter()
            .filter(|(n, _)| !self.state.contains_key(n))
            .cloned()
            .collect()
    }

    /// Outputs: name and shape.
    pub fn outputs(&self) -> &[(String, Vec<usize>)] {
        &self.lowered.outputs
    }

    /// Compiles and loads the program on a runtime driver of the in-memory
    /// path, ready to run (state inputs are not carried there: its one
    /// input and one output cannot alias; see [`Executable::load_e5rt`]).
    pub fn load<D: Driver>(self, driver: D) -> Result<Loaded<D>> {
        match self.unit {
            Unit::Simulator { path: RuntimePath::InMemory } => {}
            _ => {
                return Err(Error::Feed {
                    name: "path".into(),
                    detail: "this driver runs the inmem path; programs compiled for the e5rt path load with load_e5rt".into(),
                })
            }
        }
        let unit = Unit::Driver {
            name: driver.name(),
        };
        let mut runtime = Runtime::new(driver);
        let source = ProgramSource::from_program(&self.lowered.program, &self.lowered.weights);
        let kernel = runtime.prepare(&source)?;
        Ok(Loaded {
            exe: self,
            runtime,
            kernel: Some(kernel),
            unit,
        })
    }

    /// Writes the program as the ANE compiler reads it: `dir/model.mil` and
    /// `dir/weights/weight.bin` (the one weight file). `dir` must be absent
    /// or empty, so nothing is overwritten.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        if let Ok(mut entries) = std::fs::read_dir(dir) {
            if entries.next().is_some() {
                return Err(Error::Io {
                    path: dir.to_path_buf(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        "directory is not empty",
                    ),
                });
            }
        }
        let weights_dir = dir.join("weights");
        std::fs::create_dir_all(&weights_dir).map_err(io(&weights_dir))?;
        let mil = dir.join("model.mil");
        std::fs::write(&mil, self.mil()).map_err(io(&mil))?;
        let file = weights_dir.join("weight.bin");
        let bytes = self
            .lowered
            .weights
            .get(lower::WEIGHT_FILE)
            .unwrap_or_default();
        std::fs::write(&file, bytes).map_err(io(&file))
    }

    /// Makes input `input` state: it starts at `values`, and after every run
    /// takes the value of output `output` (output-to-input aliasing, as the
    /// runtime binds one buffer to both).
    pub fn bind_state(&mut self, input: &str, values: &[f32], output: &str) -> Result<()> {
        let feed_err = |detail: String| Error::Feed {
            name: input.to_string(),
            detail,
        };
        let (_, shape) = self
            .lowered
            .inputs
            .iter()
            .find(|(n, _)| n == input)
            .ok_or_else(|| feed_err("no such input".into()))?;
        let out = self
            .lowered
            .outputs
            .iter()
            .position(|(n, s)| n == output && s == shape)
            .ok_or_else(|| feed_err(format!("no output `{output}` of shape {shape:?} to alias")))?;
        // one output buffer can alias one input (the runtime binds it once)
        if self.aliases.iter().any(|(o, n)| *o == out && n != input) {
            return Err(feed_err(format!(
                "output `{output}` already carries another state"
            )));
        }
        let t = sim_tensor(input, shape, values)?;
        self.state.insert(input.to_string(), t);
        self.aliases.retain(|(_, n)| n != input);
        self.aliases.push((out, input.to_string()));
        Ok(())
    }

    /// The current value of a state input.
    pub fn state(&self, input: &str) -> Option<Vec<f32>> {
        self.state.get(input).map(SimTensor::to_f32)
    }

    /// Replaces the value of a state input.
    pub fn set_state(&mut self, input: &str, values: &[f32]) -> Result<()> {
        let shape = self
            .lowered
            .inputs
            .iter()
            .find(|(n, _)| n == input && self.state.contains_key(n))
            .map(|(_, s)| s.clone())
            .ok_or_else(|| Error::Feed {
                name: input.to_string(),
                detail: "not a state input".into(),
            })?;
        self.state
            .insert(input.to_string(), sim_tensor(input, &shape, values)?);
        Ok(())
    }

    /// Checks `feeds` against the inputs: every feed names an input and has
    /// its element count; every input is fed, or (`carried`) is a state
    /// input whose value the runner holds.
    fn check_feeds(&self, feeds: &[(&str, &[f32])], carried: bool) -> Result<()> {
        if let Some((name, _)) = feeds
            .iter()
            .find(|(f, _)| !self.lowered.inputs.iter().any(|(n, _)| n == f))
        {
            return Err(Error::Feed {
                name: name.to_string(),
                detail: "the program has no such input".into(),
            });
        }
        for (name, shape) in &self.lowered.inputs {
            let n: usize = shape.iter().product();
            match feeds.iter().find(|(f, _)| f == name) {
                Some((_, v)) if v.len() != n => {
                    return Err(Error::Feed {
                        name: name.clone(),
                        detail: format!("{} values for shape {shape:?}", v.len()),
                    })
                }
                None if !(carried && self.state.contains_key(name)) => {
                    return Err(Error::Feed {
                        name: name.clone(),
                        detail: format!("not supplied (shape {shape:?})"),
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Runs once on named inputs (row-major f32, rounded to fp16); state
    /// inputs are supplied from the carried values and updated after.
    pub fn run(&mut self, feeds: &[(&str, &[f32])]) -> Result<Vec<Output>> {
        self.check_feeds(feeds, true)?;
        let mut args: Vec<(String, SimTensor)> = Vec::with_capacity(self.lowered.inputs.len());
        for (name, shape) in &self.lowered.inputs {
            let t = match (feeds.iter().find(|(n, _)| n == name), self.state.get(name)) {
                (Some((_, v)), _) => sim_tensor(name, shape, v)?,
                (None, Some(t)) => t.clone(),
                (None, None) => {
                    return Err(Error::Feed {
                        name: name.clone(),
                        detail: format!("not supplied (shape {shape:?})"),
                    })
                }
            };
            args.push((name.clone(), t));
        }
        let refs: Vec<(&str, SimTensor)> =
            args.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        // the rules were checked at compile time
        let sim = Simulator::new_unchecked(&self.lowered.program, &self.lowered.weights);
        let results = sim.run("main", &refs)?;
        let by_name: HashMap<&str, &SimTensor> =
            results.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let mut outs = Vec::with_capacity(self.lowered.outputs.len());
        for (name, shape) in &self.lowered.outputs {
            let t = by_name.get(name.as_str()).ok_or_else(|| Error::Feed {
                name: name.clone(),
                detail: "output missing from the run".into(),
            })?;
            outs.push(Output {
                name: name.clone(),
                shape: shape.clone(),
                values: t.to_f32(),
            });
        }
        for (i, input) in &self.aliases {
            if let Some(t) = by_name.get(self.lowered.outputs[*i].0.as_str()) {
                self.state.insert(input.clone(), (*t).clone());
            }
        }
        Ok(outs)
    }
}

impl Executable {
    /// Compiles and loads the program on an e5rt runtime (`E5rtSim`, or
    /// `E5rtPrivate` for Espresso): every input and output its own dense
    /// buffer, each state input ([`Executable::bind_state`]) aliased onto
    /// its output's buffer and written with its current value, so training
    /// state stays on the device between runs, read back with
    /// [`LoadedE5rt::state`].
    pub fn load_e5rt<A: E5rtApi>(self, api: A) -> Result<LoadedE5rt<A>> {
        if self.unit
            != (Unit::Simulator {
                path: RuntimePath::E5rt,
            })
        {
            return Err(Error::Feed {
                name: "path".into(),
                detail: "this driver runs the e5rt path; programs compiled for the inmem path load with load".into(),
            });
        }
        let unit = Unit::Driver { name: api.name() };
        let mut rt = E5rtRuntime::new(api);
        let source = ProgramSource::from_program(&self.lowered.program, &self.lowered.weights);
        let mut program = rt.prepare(&source)?;
        let mut bound = || -> Result<()> {
            for (out, input) in &self.aliases {
                rt.alias(&mut program, &self.lowered.outputs[*out].0, input)?;
                if let Some(t) = self.state.get(input) {
                    rt.write(&mut program, input, &t.to_f32())?;
                }
            }
            Ok(())
        };
        if let Err(e) = bound() {
            rt.release(program);
            return Err(e);
        }
        Ok(LoadedE5rt {
            exe: self,
            rt,
            program: Some(program),
            unit,
        })
    }
}

/// A program loaded on an e5rt runtime; released on drop.
pub struct LoadedE5rt<A: E5rtApi> {
    exe: Executable,
    rt: E5rtRuntime<A>,
    program: Option<E5rtProgram>,
    unit: Unit,
}

impl<A: E5rtApi> std::fmt::Debug for LoadedE5rt<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoadedE5rt({})", self.unit)
    }
}

impl<A: E5rtApi> LoadedE5rt<A> {
    /// The unit that runs it.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// Runs once: writes `feeds` (every input but the state inputs, which
    /// hold what the last run left; feeding one replaces it), executes, and
    /// returns every output.
    pub fn run(&mut self, feeds: &[(&str, &[f32])]) -> Result<Vec<Output>> {
        self.exe.check_feeds(feeds, true)?;
        let mut program = self.program.take().ok_or_else(released)?;
        let result = (|| {
            for (name, values) in feeds {
                self.rt.write(&mut program, name, values)?;
            }
            self.rt.execute(&mut program)?;
            self.exe
                .lowered
                .outputs
                .iter()
                .map(|(name, shape)| {
                    Ok(Output {
                        name: name.clone(),
                        shape: shape.clone(),
                        values: self.rt.read(&mut program, name)?,
                    })
                })
                .collect()
        })();
        self.program = Some(program);
        result
    }

    /// The current value of a state input (what the program's aliased
    /// buffer holds).
    pub fn state(&mut self, input: &str) -> Result<Vec<f32>> {
        if !self.exe.state.contains_key(input) {
            return Err(Error::Feed {
                name: input.to_string(),
                detail: "not a state input".into(),
            });
        }
        let mut program = self.program.take().ok_or_else(released)?;
        let values = self.rt.read(&mut program, input);
        self.program = Some(program);
        Ok(values?)
    }
}

impl<A: E5rtApi> Drop for LoadedE5rt<A> {
    fn drop(&mut self) {
        if let Some(p) = self.program.take() {
            self.rt.release(p);
        }
    }
}

/// A program loaded on a runtime driver; its kernel is released on drop.
pub struct Loaded<D: Driver> {
    exe: Executable,
    runtime: Runtime<D>,
    kernel: Option<Kernel>,
    unit: Unit,
}

impl<D: Driver> std::fmt::Debug for Loaded<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Loaded({})", self.unit)
    }
}

impl<D: Driver> Loaded<D> {
    /// The unit that runs it.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// The compiled program.
    pub fn executable(&self) -> &Executable {
        &self.exe
    }

    /// Runs once on named inputs (row-major f32, rounded to fp16 on the
    /// surfaces): one evaluation of the loaded program.
    pub fn run(&mut self, feeds: &[(&str, &[f32])]) -> Result<Vec<Output>> {
        self.exe.check_feeds(feeds, false)?;
        let kernel = self.kernel.as_mut().ok_or_else(released)?;
        let got = self.runtime.run(kernel, feeds)?;
        self.exe
            .lowered
            .outputs
            .iter()
            .map(|(name, shape)| {
                let values = got
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| Error::Feed {
                        name: name.clone(),
                        detail: "output missing from the driver's result".into(),
                    })?;
                Ok(Output {
                    name: name.clone(),
                    shape: shape.clone(),
                    values,
                })
            })
            .collect()
    }
}

impl<D: Driver> Drop for Loaded<D> {
    fn drop(&mut self) {
        if let Some(k) = self.kernel.take() {
            self.runtime.release(k);
        }
    }
}

/// The error of a run after the program was released.
fn released() -> Error {
    Error::Feed {
        name: "program".into(),
        detail: "released".into(),
    }
}

fn sim_tensor(name: &str, shape: &[usize], values: &[f32]) -> Result<SimTensor> {
    let n: usize = shape.iter().product();
    if values.len() != n {
        return Err(Error::Feed {
            name: name.to_string(),
            detail: format!("{} values for shape {shape:?}", values.len()),
        });
    }
    Ok(SimTensor::f16(&lower::mil_shape(shape), values)?)
}
