//! The compiled model: kernels printed → parsed → rule-checked, plus the CPU-side vectors.

use super::batch::AneBatch;
use super::resident::ResidentSession;
use super::session::AneSession;
use super::worker::{CompileReport, DriverKind, Opened, PortedSource, Worker};
use super::Error;
use crate::lower::{
    self, tensors, FfnView, KernelKind, LowerOptions, Lowered, MixerView, Port, PortRole, Variant,
};
use crate::runtime::{KernelStats, ProgramSource};
use anedvd_base::WeightSource;
use anedvd_cpu::moe::{MoeLayer, Shared};
use anedvd_cpu::norms::{finish_per_layer_inputs, norm_weights, LayerNorms};
use anedvd_cpu::packing::Packing;
use anedvd_cpu::qkernels::Kernels;
use anedvd_cpu::IsaCap;
use anedvd_graph::{
    Attention, BatchSession, DecoderProgram, Executable, Result, SequentialBatch, Session,
};
use anedvd_mil::ir::Program;
use anedvd_mil::rules::RuleConfig;
use anedvd_mil::sim::{Simulator, Tensor, Weights};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A kernel's program as the simulator runs it directly.
pub(crate) struct Direct {
    /// Parsed back from the printed text.
    pub program: Program,
    pub weights: Weights,
}

/// One kernel of the lowering.
pub(crate) struct SimKernel {
    pub name: String,
    pub kind: KernelKind,
    pub in_channels: usize,
    pub out_channels: usize,
    /// Position in [`Model::kernels`] (the worker's program index).
    pub index: usize,
    /// Inputs after `x` and outputs after the first (resident variant).
    pub ports: (Vec<Port>, Vec<Port>),
    /// The name of its first output.
    pub output: String,
    /// `Some` on the direct path; `None` when a runtime worker holds the program.
    pub direct: Option<Direct>,
}

/// How kernels are executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exec {
    /// Straight on the MIL simulator (`ane-sim`).
    Direct,
    /// Through `crate::runtime::Programs` on a driver, with a compile budget.
    Runtime(DriverKind, u32),
}

impl Exec {
    /// The backend's name in messages.
    pub fn backend_name(self) -> &'static str {
        match self {
            Exec::Direct => "ane-sim",
            Exec::Runtime(..) => "ane",
        }
    }
}

/// What the host runs between a layer's input projection and its output
/// side.
#[allow(clippy::large_enum_variant)] // one per layer, built once
pub(crate) enum HostMixer {
    /// q/k norm, RoPE, KV cache, attention.
    Attention(Attention),
    /// `u = B·X` into the history and the carry of the previous rows.
    ShortConv {
        /// Taps `K`.
        kernel: usize,
        /// Tap-major weights `taps[k * n_embd + c]`.
        taps: Vec<f32>,
    },
}

/// The host's part of a mixture of experts: the router and the routed
/// experts (the CPU backend's, read in place), and the shared expert's gate
/// (its FFN runs on the ANE).
pub(crate) struct HostMoe {
    pub routed: MoeLayer,
    pub shared: Option<Shared>,
}

/// Host-side per-layer data.
pub(crate) struct CpuLayer {
    pub mixer: HostMixer,
    pub norms: LayerNorms,
    pub moe: Option<HostMoe>,
    /// Gemma 4: the per-layer input's width and the norm after its
    /// projection (split variant: the host norms and adds it).
    pub per_layer: Option<(usize, Vec<f32>)>,
    /// Gemma 4: the residual scale after the layer (split variant, and a
    /// fused mixture-of-experts layer, which the host finishes).
    pub scale: Option<f32>,
}

/// Gemma 4's per-layer input embeddings on the host: the token table's
/// rows and the norm of the `ple` program's projection.
pub(crate) struct HostPle {
    pub width: usize,
    pub token_table: String,
    pub token_scale: f32,
    pub proj_norm: Vec<f32>,
    pub combine_scale: f32,
}

pub(crate) struct Model {
    pub options: LowerOptions,
    pub exec: Exec,
    pub n_embd: usize,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub eps: f32,
    pub embd_scale: f32,
    pub final_softcap: Option<f32>,
    pub token_embd: String,
    pub source: Arc<dyn WeightSource>,
    pub layers: Vec<CpuLayer>,
    pub ple: Option<HostPle>,
    pub output_norm: Vec<f32>,
    pub kernels: Vec<SimKernel>,
    /// The CPU kernels of the host-side attention.
    pub host: Kernels,
    /// Dispatches executed by every session of this executable.
    pub dispatches: Arc<AtomicU64>,
    /// Resident variant on a runtime: the layer groups each session opens
    /// as its own set (their caches aliased; instantiated from programs
    /// the worker compiled once at load), and the set holding the
    /// stateless programs every session shares: the lm_head (program 0)
    /// and Gemma 4's `ple`, whose kernel indices `shared` lists in order.
    pub ported: Vec<PortedSource>,
    pub shared_set: Option<u64>,
    pub shared: Vec<usize>,
    /// The runtime thread (`Exec::Runtime`); declared last so it is
    /// dropped (and joined) after everything else.
    pub worker: Option<Worker>,
}

pub(crate) fn mil_err(kernel: &str) -> impl Fn(anedvd_mil::Error) -> Error + '_ {
    move |source| Error::Mil {
        kernel: kernel.to_string(),
        source,
    }
}

impl Model {
    fn new(p: &DecoderProgram, options: &LowerOptions, exec: Exec, host: IsaCap) -> Result<Self> {
        // refuse what the lowering cannot run before opening anything,
        // naming this backend
        let views = lower::layer_views(p, exec.backend_name())?;
        // a real driver runs one path only (the simulated one was matched
        // to the path by `AneBackend::compile_ane`)
        if let Exec::Runtime(driver, _) = exec {
            if let Some(message) = driver.path_refusal(options.path) {
                let backend = exec.backend_name().into();
                return Err(anedvd_graph::Error::Backend { backend, message });
            }
        }
        if options.variant == Variant::Resident {
            if let Some((part, what, layer)) = lower::resident::refusal(&views) {
                let name = exec.backend_name();
                return Err(anedvd_graph::Error::unsupported(name, part, what, layer));
            }
        }
        // open the driver first: `ANE unavailable` before any lowering work
        let opened = match exec {
            Exec::Direct => None,
            Exec::Runtime(driver, budget) => Some(Opened::open(driver, budget)?),
        };
        // lowering errors name the backend that lowers
        let lowered: Lowered =
            lower::lower_views(p, &views, options).map_err(|e| anedvd_graph::Error::Backend {
                backend: exec.backend_name().into(),
                message: format!("lowering: {e}"),
            })?;
        let mut kernels = Vec::with_capacity(lowered.kernels.len());
        let mut sources = Vec::new();
        let mut ported = Vec::new();
        // the cache outputs of the layer groups so far
        let mut kept = Vec::new();
        for (index, k) in lowered.kernels.into_iter().enumerate() {
            let direct = match exec {
                Exec::Direct => {
                    // the text path: what runs is what the printed MIL says
                    let text = anedvd_mil::print(&k.program);
                    let program = anedvd_mil::parse(&text).map_err(mil_err(&k.name))?;
                    let rules = RuleConfig {
                        path: options.path,
                        ..RuleConfig::default()
                    };
                    Simulator::new(&program, &k.weights, &rules).map_err(mil_err(&k.name))?;
                    Some(Direct {
                        program,
                        weights: k.weights,
                    })
                }
                Exec::Runtime(..) if options.variant == Variant::Resident => {
                    // ported programs: the groups open per session (their
                    // caches resident), the lm_head and `ple` once below
                    let group = ported
                        .iter()
                        .filter(|(_, kind, _)| matches!(kind, KernelKind::Resident { .. }))
                        .count();
                    let bound = bound_caches(group, (&k.inputs, &k.outputs), &mut kept)?;
                    let source = ProgramSource::from_program(&k.program, &k.weights);
                    let aliases = cache_aliases(&k.inputs, &k.outputs);
                    ported.push((index, k.kind, (k.name.clone(), source, aliases, bound)));
                    None
                }
                Exec::Runtime(..) => {
                    // the driver compiles the printed text (the simulated
                    // driver parses it back and runs the rule table)
                    sources.push((
                        k.name.clone(),
                        ProgramSource::from_program(&k.program, &k.weights),
                    ));
                    None
                }
            };
            let output = k
                .program
                .functions
                .first()
                .and_then(|f| f.outputs.first())
                .cloned()
                .unwrap_or_default();
            kernels.push(SimKernel {
                name: k.name,
                kind: k.kind,
                in_channels: k.in_channels,
                out_channels: k.out_channels,
                index,
                ports: (k.inputs, k.outputs),
                output,
                direct,
            });
        }
        // the resident variant's stateless programs (the lm_head first,
        // then Gemma 4's `ple`): one set every session shares
        let (mut stateless, groups): (Vec<_>, Vec<_>) = ported
            .into_iter()
            .partition(|(_, kind, _)| !matches!(kind, KernelKind::Resident { .. }));
        stateless.sort_by_key(|(_, kind, _)| !matches!(kind, KernelKind::LmHead { .. }));
        let shared: Vec<usize> = stateless.iter().map(|(i, _, _)| *i).collect();
        // every ported program is compiled once, at load (groups first):
        // a session only instantiates its operations and buffers from them
        let mut compiled = Vec::with_capacity(groups.len() + stateless.len());
        let mut compile_once = |(_, _, (name, source, aliases, bound))| {
            compiled.push((name, source));
            PortedSource {
                program: compiled.len() - 1,
                aliases,
                bound,
            }
        };
        let ported: Vec<PortedSource> = groups.into_iter().map(&mut compile_once).collect();
        let stateless: Vec<PortedSource> = stateless.into_iter().map(compile_once).collect();
        let worker = opened.map(|o| o.prepare(sources, compiled)).transpose()?;
        let mut shared_set = None;
        if let (Some(w), false) = (&worker, stateless.is_empty()) {
            shared_set = Some(w.open_ported(stateless)?);
        }
        let layers = p
            .layers
            .iter()
            .zip(&views)
            .map(|(b, l)| {
                let (mixer, attn) = match l.mixer {
                    MixerView::Attention(a) => (HostMixer::Attention(a.clone()), Some(a)),
                    MixerView::ShortConv(c) => {
                        let d = p.n_embd;
                        let w = tensors::elements(p.weights.as_ref(), &c.conv, c.kernel * d)
                            .map_err(Error::from)?;
                        let taps = anedvd_cpu::conv::tap_major(&w, c.kernel, d);
                        let kernel = c.kernel;
                        (HostMixer::ShortConv { kernel, taps }, None)
                    }
                };
                let moe = match l.ffn {
                    FfnView::Dense(_) => None,
                    FfnView::Moe(m) => {
                        let kernels = Kernels::capped(host);
                        let mut routed =
                            MoeLayer::compile(p.weights.as_ref(), m, kernels, Packing::None)?;
                        let shared = routed.shared.take();
                        Some(HostMoe { routed, shared })
                    }
                };
                let per_layer = l
                    .per_layer
                    .map(|pl| {
                        Ok::<_, anedvd_graph::Error>((
                            pl.width,
                            norm_weights(p, &pl.norm, p.n_embd)?,
                        ))
                    })
                    .transpose()?;
                let scale = l
                    .layer_scale
                    .map(|name| lower::layer_scale(p, name))
                    .transpose()
                    .map_err(Error::from)?;
                Ok(CpuLayer {
                    mixer,
                    norms: LayerNorms::load(p, &b.norms, attn)?,
                    moe,
                    per_layer,
                    scale,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Model {
            options: *options,
            exec,
            n_embd: p.n_embd,
            n_vocab: p.n_vocab,
            n_ctx_train: p.n_ctx_train,
            eps: p.norm.eps,
            embd_scale: p.embd_scale,
            final_softcap: p.final_softcap,
            token_embd: p.token_embd.clone(),
            source: p.weights.clone(),
            layers,
            ple: p
                .per_layer_embd
                .as_ref()
                .map(|e| {
                    Ok::<_, anedvd_graph::Error>(HostPle {
                        width: e.width,
                        token_table: e.token_table.clone(),
                        token_scale: e.token_scale,
                        proj_norm: norm_weights(p, &e.proj_norm, e.width)?,
                        combine_scale: e.combine_scale,
                    })
                })
                .transpose()?,
            output_norm: norm_weights(p, &p.output_norm, p.n_embd)?,
            kernels,
            host: Kernels::capped(host),
            dispatches: Arc::new(AtomicU64::new(0)),
            ported,
            shared_set,
            shared,
            worker,
        })
    }

    /// Zero rows between two sequences in one pass: a short convolution's
    /// program taps the `K - 1` columns before each one, so a sequence
    /// must see zeros there, as it does alone (0 without short
    /// convolutions).
    pub fn segment_gap(&self) -> usize {
        self.layers
            .iter()
            .filter_map(|l| match l.mixer {
                HostMixer::ShortConv { kernel, .. } => Some(kernel.saturating_sub(1)),
                HostMixer::Attention(_) => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The kernel satisfying `pred`.
    pub fn find(&self, pred: impl Fn(&KernelKind) -> bool) -> Result<&SimKernel> {
        self.kernels
            .iter()
            .find(|k| pred(&k.kind))
            .ok_or_else(|| anedvd_graph::Error::InvalidProgram("lowering lacks a kernel".into()))
    }

    /// The lm_head slices in vocabulary order.
    pub fn lm_heads(&self) -> impl Iterator<Item = (&SimKernel, usize)> {
        self.kernels.iter().filter_map(|k| match k.kind {
            KernelKind::LmHead { first, .. } => Some((k, first)),
            _ => None,
        })
    }

    /// Runs kernel `k` on `n` rows (`n × in_channels`, row-major, n ≤ W):
    /// rows become columns `0..n` of `[1, C, 1, W]`; returns `n × out_channels`.
    pub fn dispatch(&self, k: &SimKernel, rows: &[f32], n: usize) -> Result<Vec<f32>> {
        let (w, cin, cout) = (self.options.width, k.in_channels, k.out_channels);
        let bad = |msg: String| Error::Output {
            kernel: k.name.clone(),
            msg,
        };
        if n > w || rows.len() != n * cin {
            return Err(bad(format!("{} values for {n} rows of {cin}", rows.len())).into());
        }
        let mut cols = vec![0f32; cin * w];
        for (t, row) in rows.chunks_exact(cin).enumerate() {
            for (c, &v) in row.iter().enumerate() {
                cols[c * w + t] = v;
            }
        }
        let y = match (&k.direct, &self.worker) {
            (Some(d), _) => {
                let x = Tensor::f16(&[1, cin, 1, w], &cols).map_err(mil_err(&k.name))?;
                let sim = Simulator::new_unchecked(&d.program, &d.weights);
                let out = sim.run("main", &[("x", x)]).map_err(mil_err(&k.name))?;
                match out.as_slice() {
                    [(_, t)] if t.shape == [1, cout, 1, w] => t.to_f32(),
                    _ => return Err(bad("unexpected outputs".into()).into()),
                }
            }
            (None, Some(worker)) => {
                let y = match self.shared_program(k) {
                    // a resident variant's stateless program (`ple`)
                    Some(at) => {
                        let out = vec![k.output.clone()];
                        let y = worker.run_ported(at, vec![("x".into(), cols)], out)?;
                        y.into_iter().next().unwrap_or_default()
                    }
                    None => worker.run(k.index, &k.name, cols)?,
                };
                if y.len() != cout * w {
                    return Err(bad(format!("{} outputs, expected {cout}×{w}", y.len())).into());
                }
                y
            }
            (None, None) => return Err(bad("no program to run".into()).into()),
        };
        self.dispatches.fetch_add(1, Ordering::Relaxed);
        let mut res = vec![0f32; n * cout];
        for (t, row) in res.chunks_exact_mut(cout).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                *v = y[c * w + t];
            }
        }
        Ok(res)
    }

    /// Where kernel `k` runs in the shared set of ported programs, if it
    /// is there.
    fn shared_program<'k>(&self, k: &'k SimKernel) -> Option<(u64, usize, &'k str)> {
        let at = self.shared.iter().position(|i| *i == k.index)?;
        Some((self.shared_set?, at, &k.name))
    }

    /// Runs kernel `k` on named whole inputs (`x` and its ports), returning
    /// its outputs by name in program order (resident variant; the direct
    /// simulator path only).
    pub fn run_ports(
        &self,
        k: &SimKernel,
        inputs: &[(&str, Tensor)],
    ) -> Result<Vec<(String, Tensor)>> {
        let Some(d) = &k.direct else {
            let msg = "ports run on the simulator only".to_string();
            return Err(Error::Output {
                kernel: k.name.clone(),
                msg,
            }
            .into());
        };
        let sim = Simulator::new_unchecked(&d.program, &d.weights);
        let out = sim.run("main", inputs).map_err(mil_err(&k.name))?;
        self.dispatches.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Runs program `program` of the worker's ported set `set` (kernel
    /// `k`): writes `inputs`, executes, returns `outputs` in order.
    pub fn run_on_worker(
        &self,
        (set, program, k): (u64, usize, &SimKernel),
        inputs: Vec<(String, Vec<f32>)>,
        outputs: Vec<String>,
    ) -> Result<Vec<Vec<f32>>> {
        let w = self.worker.as_ref().ok_or_else(|| Error::Output {
            kernel: k.name.clone(),
            msg: "no runtime worker".into(),
        })?;
        let out = w.run_ported((set, program, &k.name), inputs, outputs)?;
        self.dispatches.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Gemma 4's per-layer inputs of the `n` rows of scaled token
    /// embeddings `x` (`n_layer · width` each): the `ple` program's
    /// projection normed per layer slice, plus the token table's row,
    /// times the combine scale.
    pub fn per_layer_inputs(&self, tokens: &[u32], x: &[f32]) -> Result<Option<Vec<f32>>> {
        let Some(t) = &self.ple else {
            return Ok(None);
        };
        let n = tokens.len();
        let mut e = self.dispatch(self.find(|k| *k == KernelKind::PleProj)?, x, n)?;
        let lw = t.width * self.layers.len();
        finish_per_layer_inputs(
            &mut e,
            lw,
            tokens.iter().copied(),
            (&t.proj_norm, self.eps),
            (t.token_scale, t.combine_scale),
            |tok, dst| {
                let r = tok as usize;
                let (table, _) = tensors::rows(self.source.as_ref(), &t.token_table, r, r + 1)
                    .map_err(Error::from)?;
                dst.copy_from_slice(&table);
                Ok(())
            },
            &mut Vec::new(),
        )?;
        Ok(Some(e))
    }

    /// The token embedding row of `tok`, scaled.
    pub fn embed(&self, tok: u32, out: &mut [f32]) -> Result<()> {
        let t = tok as usize;
        let (row, _) =
            tensors::rows(self.source.as_ref(), &self.token_embd, t, t + 1).map_err(Error::from)?;
        for (o, v) in out.iter_mut().zip(&row) {
            *o = v * self.embd_scale;
        }
        Ok(())
    }
}

/// The cache inputs of layer group `g` (its `(inputs, outputs)`) that read
/// a cache an earlier group keeps (Gemma 4's shared K/V), as `(group, its
/// output, this input)`; records `g`'s own cache outputs in `kept`.
fn bound_caches(
    g: usize,
    (inputs, outputs): (&[Port], &[Port]),
    kept: &mut Vec<(PortRole, usize, String)>,
) -> Result<Vec<(usize, String, String)>> {
    let mut bound = Vec::new();
    let own = |role: PortRole| outputs.iter().any(|o| o.role == role);
    for i in inputs {
        if !i.role.is_cache() || own(i.role) {
            continue;
        }
        let Some((_, from, out)) = kept.iter().find(|(role, _, _)| *role == i.role) else {
            let what = format!("no earlier program keeps the cache `{}` reads", i.name);
            return Err(anedvd_graph::Error::InvalidProgram(what));
        };
        bound.push((*from, out.clone(), i.name.clone()));
    }
    for o in outputs {
        if o.role.is_cache() {
            kept.push((o.role, g, o.name.clone()));
        }
    }
    Ok(bound)
}

/// Each cache output aliased onto the cache input of the same role.
fn cache_aliases(inputs: &[Port], outputs: &[Port]) -> Vec<(String, String)> {
    outputs
        .iter()
        .filter(|o| o.role.is_cache())
        .filter_map(|o| {
            let i = inputs.iter().find(|i| i.role == o.role)?;
            Some((o.name.clone(), i.name.clone()))
        })
        .collect()
}

/// A compiled ane-sim program.
pub struct AneExecutable {
    model: Arc<Model>,
}

impl AneExecutable {
    pub(crate) fn new(
        p: &DecoderProgram,
        options: &LowerOptions,
        exec: Exec,
        host: IsaCap,
    ) -> Result<Self> {
        Ok(AneExecutable {
            model: Arc::new(Model::new(p, options, exec, host)?),
        })
    }

    /// The driver the kernels run on (`None`: directly on the simulator).
    pub fn driver(&self) -> Option<DriverKind> {
        match self.model.exec {
            Exec::Direct => None,
            Exec::Runtime(d, _) => Some(d),
        }
    }

    /// Compiles used so far and the budget left now (`None` on the direct
    /// simulator path, which compiles nothing). On e5rt the resident
    /// variant's programs are compiled once at load, however many sessions
    /// open; each open session's programs count against what is left.
    pub fn compile_report(&self) -> Option<CompileReport> {
        self.model.worker.as_ref().map(Worker::report)
    }

    /// Per-kernel evaluate and surface I/O timing from the runtime, in
    /// dispatch order (`Ok(None)` on the direct simulator path).
    pub fn kernel_stats(&self) -> Result<Option<Vec<(String, KernelStats)>>> {
        match &self.model.worker {
            Some(w) => Ok(Some(w.stats()?)),
            None => Ok(None),
        }
    }

    /// The lowering variant.
    pub fn variant(&self) -> Variant {
        self.model.options.variant
    }

    /// ANE dispatches per decode token (every kernel once).
    pub fn dispatches_per_token(&self) -> usize {
        self.model.kernels.len()
    }

    /// Dispatches executed so far by all sessions.
    pub fn dispatches_executed(&self) -> u64 {
        self.model.dispatches.load(Ordering::Relaxed)
    }

    /// Kernel names in dispatch order.
    pub fn kernel_names(&self) -> Vec<&str> {
        self.model.kernels.iter().map(|k| k.name.as_str()).collect()
    }
}

impl Executable for AneExecutable {
    fn new_session(&self, max_seq: usize) -> Result<Box<dyn Session>> {
        if self.model.options.variant == Variant::Resident {
            let s = ResidentSession::new(self.model.clone(), max_seq)?;
            return Ok(Box::new(s));
        }
        Ok(Box::new(AneSession::new(self.model.clone(), max_seq)))
    }

    fn vocab_size(&self) -> usize {
        self.model.n_vocab
    }

    /// Sequences as columns of the same dispatches (`super::batch`); the
    /// resident variant runs them one after another.
    fn new_batch(&self, n_seqs: usize, max_seq: usize) -> Result<Box<dyn BatchSession>> {
        if self.model.options.variant == Variant::Resident {
            let sessions = (0..n_seqs)
                .map(|_| self.new_session(max_seq))
                .collect::<Result<Vec<_>>>()?;
            return Ok(Box::new(SequentialBatch::new(sessions, self.model.n_vocab)));
        }
        Ok(Box::new(AneBatch::new(self.model.clone(), n_seqs, max_seq)))
    }

    /// The model's training context; a resident lowering holds at most
    /// its cache length.
    fn n_ctx_train(&self) -> usize {
        match self.model.options.variant {
            Variant::Resident => self.model.n_ctx_train.min(self.model.options.context),
            _ => self.model.n_ctx_train,
        }
    }
}
