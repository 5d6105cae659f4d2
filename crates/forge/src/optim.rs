//! Optimizers whose update is inside the compiled training step, and the
//! trainer that carries weights and optimizer state between steps.

use std::collections::HashMap;

use crate::error::{shape_err, Error, Result};
use crate::exec::{compile, Executable, Output};
use crate::graph::{Op, Tensor};
use crate::lower::{CompileOptions, ParamMode};

/// An optimizer; its update is graph ops in the step program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// `v ← μ·v + g;  w ← w − lr·v` (plain SGD when μ = 0).
    Sgd {
        /// Learning rate.
        lr: f32,
        /// Momentum μ.
        momentum: f32,
    },
    /// Adam with bias correction (the step's `lr·√(1−β₂ᵗ)/(1−β₁ᵗ)` is an
    /// input of the program, computed on the host each step). `eps` must be
    /// representable in fp16: 1e-8 rounds to 0 there, so 1e-4 is the default.
    Adam {
        /// Learning rate.
        lr: f32,
        /// β₁.
        beta1: f32,
        /// β₂.
        beta2: f32,
        /// ε added to √v.
        eps: f32,
    },
}

impl Optimizer {
    /// Adam with β₁ 0.9, β₂ 0.999, ε 1e-4.
    pub fn adam(lr: f32) -> Self {
        Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-4,
        }
    }

    /// SGD with momentum.
    pub fn sgd(lr: f32, momentum: f32) -> Self {
        Optimizer::Sgd { lr, momentum }
    }
}

/// Name of the per-step learning-rate input.
const LR_INPUT: &str = "forge_step_lr";

/// Trains the params of a graph by compiled steps: one program computes the
/// loss, the gradients and the optimizer update; the new weights and state
/// are its outputs, aliased to its inputs for the next step.
#[derive(Debug)]
pub struct Trainer {
    exe: Executable,
    params: Vec<(String, Tensor)>,
    opt: Optimizer,
    /// The step program's learning-rate input.
    lr_input: String,
    step: u64,
    opts: CompileOptions,
    /// Inference programs compiled on demand, by output node ids.
    eval: HashMap<Vec<usize>, Executable>,
}

impl Trainer {
    /// A trainer minimising `loss` (one element) over `params` (all params
    /// the loss depends on when empty).
    pub fn new(
        loss: &Tensor,
        params: &[&Tensor],
        opt: Optimizer,
        opts: &CompileOptions,
    ) -> Result<Trainer> {
        let g = loss.graph().clone();
        let params: Vec<Tensor> = if params.is_empty() {
            crate::lower::live_nodes(&g, &[loss.id()])
                .into_iter()
                .filter(|&i| g.node(i).is_some_and(|n| n.op == Op::Param))
                .filter_map(|i| g.tensor(i))
                .collect()
        } else {
            params.iter().map(|&t| t.clone()).collect()
        };
        if params.is_empty() {
            return Err(shape_err("trainer", "the loss depends on no param"));
        }
        if let Some(p) = params.iter().find(|p| p.op() != Op::Param) {
            return Err(shape_err(
                "trainer",
                format!("`{}` is not a param", p.name()),
            ));
        }
        let refs: Vec<&Tensor> = params.iter().collect();
        let grads = crate::autograd::grad(loss, &refs)?;
        let lr = g.input(&g.fresh_name(LR_INPUT), &[])?;
        let mut outputs = vec![loss.clone()];
        let mut state: Vec<(String, Vec<f32>, usize)> = Vec::new(); // input, initial, output index
        for (p, gr) in params.iter().zip(&grads) {
            let shape = p.shape();
            let init = g
                .values(p.id())
                .map(|v| v.as_ref().clone())
                .unwrap_or_default();
            let zeros = vec![0.0; init.len()];
            let pname = p.name();
            let new_w = match opt {
                Optimizer::Sgd { momentum: 0.0, .. } => p.sub(&gr.mul(&lr)?)?,
                Optimizer::Sgd { momentum, .. } => {
                    let v = g.input(&g.fresh_name(&format!("{pname}_velocity")), &shape)?;
                    let v2 = v.mul_scalar(momentum)?.add(gr)?;
                    outputs.push(v2.clone());
                    state.push((v.name(), zeros.clone(), outputs.len() - 1));
                    p.sub(&v2.mul(&lr)?)?
                }
                Optimizer::Adam {
                    beta1, beta2, eps, ..
                } => {
                    let m = g.input(&g.fresh_name(&format!("{pname}_m")), &shape)?;
                    let v = g.input(&g.fresh_name(&format!("{pname}_v")), &shape)?;
                    let m2 = m.mul_scalar(beta1)?.add(&gr.mul_scalar(1.0 - beta1)?)?;
                    let v2 = v
                        .mul_scalar(beta2)?
                        .add(&gr.square()?.mul_scalar(1.0 - beta2)?)?;
                    outputs.push(m2.clone());
                    state.push((m.name(), zeros.clone(), outputs.len() - 1));
                    outputs.push(v2.clone());
                    state.push((v.name(), zeros.clone(), outputs.len() - 1));
                    p.sub(&m2.mul(&lr)?.div(&v2.sqrt()?.add_scalar(eps)?)?)?
                }
            };
            outputs.push(new_w);
            state.push((pname, init, outputs.len() - 1));
        }
        let opts = CompileOptions {
            params: ParamMode::Inputs,
            ..opts.clone()
        };
        let refs: Vec<&Tensor> = outputs.iter().collect();
        let mut exe = compile(&refs, &opts)?;
        for (input, init, out) in &state {
            let out_name = outputs[*out].name();
            exe.bind_state(input, init, &out_name)?;
        }
        Ok(Trainer {
            exe,
            params: params.iter().map(|p| (p.name(), p.clone())).collect(),
            opt,
            lr_input: lr.name(),
            step: 0,
            opts,
            eval: HashMap::new(),
        })
    }

    /// The compiled step program.
    pub fn program(&self) -> &Executable {
        &self.exe
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// One training step on the data `feeds`; returns the loss before the update.
    pub fn step(&mut self, feeds: &[(&str, &[f32])]) -> Result<f32> {
        self.step += 1;
        let lr = match self.opt {
            Optimizer::Sgd { lr, .. } => lr,
            Optimizer::Adam {
                lr, beta1, beta2, ..
            } => {
                let t = self.step as i32;
                lr * (1.0 - beta2.powi(t)).sqrt() / (1.0 - beta1.powi(t))
            }
        };
        let lr_v = [lr];
        let mut all: Vec<(&str, &[f32])> = feeds.to_vec();
        all.push((self.lr_input.as_str(), &lr_v));
        let out = self.exe.run(&all)?;
        let loss = out[0].values[0];
        if !loss.is_finite() {
            return Err(Error::Feed {
                name: "loss".into(),
                detail: format!("is {loss} at step {} (lower the learning rate)", self.step),
            });
        }
        Ok(loss)
    }

    /// The current values of param `name`.
    pub fn param(&self, name: &str) -> Option<Vec<f32>> {
        self.exe.state(name)
    }

    /// Names of the trained params.
    pub fn param_names(&self) -> Vec<String> {
        self.params.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Runs `outputs` of the same graph with the current weights (an
    /// inference program compiled once per output set).
    pub fn run(&mut self, outputs: &[&Tensor], feeds: &[(&str, &[f32])]) -> Result<Vec<Output>> {
        let key: Vec<usize> = outputs.iter().map(|t| t.id()).collect();
        if !self.eval.contains_key(&key) {
            let exe = compile(outputs, &self.opts)?;
            self.eval.insert(key.clone(), exe);
        }
        let exe = self
            .eval
            .get_mut(&key)
            .ok_or_else(|| shape_err("trainer", "inference program missing"))?;
        let weights: Vec<(String, Vec<f32>)> = exe
            .inputs()
            .into_iter()
            .filter_map(|(n, _)| self.exe.state(&n).map(|v| (n, v)))
            .filter(|(n, _)| self.params.iter().any(|(p, _)| p == n))
            .collect();
        let mut all: Vec<(&str, &[f32])> = feeds.to_vec();
        all.extend(weights.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
        exe.run(&all)
    }
}
