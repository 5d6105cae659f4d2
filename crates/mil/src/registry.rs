//! The ANE capability registry: for each MIL op (and the argument spellings
//! that matter), per runtime path, what the hardware evidence says.
//!
//! Nothing here is typed by hand. The registry is derived, at first use, from
//! the evidence files in `crates/mil/evidence/` (copies of
//! `shared/fixtures/ane-evidence/`, checked equal by a test):
//!
//! | file | path | what becomes evidence |
//! |---|---|---|
//! | `aneforge-mil-sweep.tsv` | e5rt | every row: `reachable+correct` (with its measured relerr), `reachable`, `not-implemented-on-ANE`, `compile-walled` |
//! | `aneforge-capabilities.tsv` | e5rt | rows naming a MIL op: `fused` / `reachable` (reachable; works where the row carries a relerr), `arch-gated-negative` / `not-authorable` (rejected); bridges and netplist layers are not MIL-path evidence |
//! | `anedvd-zig-mil/*.mil` | inmem | every op of the programs ANEDVD ran on an A18 Pro (parsed with this crate's parser) |
//! | `claims.tsv` | both | claims the docs make in prose, one row each, with the doc and a verbatim quote (a test checks each quote is in the doc) |
//! | `mil-ops-ios18.txt` | — | the MIL op names of coremltools' iOS18 opset (`scripts/list-mil-ops.py`): only these are ops |
//!
//! A path's status for an op combines its evidence: all positive → works
//! ([`Status::Correct`] if some source checked the numbers, else
//! [`Status::Reachable`]); all negative → [`Status::Rejected`]; both →
//! [`Status::Contested`]; none → [`Status::Untested`]. Contested is never
//! read as "works": the rule check reports it (see [`crate::rules`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

/// A runtime path into the ANE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuntimePath {
    /// `_ANEInMemoryModel` with MIL text (AppleNeuralEngine.framework).
    InMemory,
    /// Espresso's `e5rt_*` C API with device mask 0x4.
    E5rt,
}

impl RuntimePath {
    /// Both paths, in display order.
    pub const ALL: [RuntimePath; 2] = [RuntimePath::InMemory, RuntimePath::E5rt];

    /// The short name (`inmem`, `e5rt`).
    pub fn name(self) -> &'static str {
        match self {
            RuntimePath::InMemory => "inmem",
            RuntimePath::E5rt => "e5rt",
        }
    }

    /// Parses a short name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }
}

impl fmt::Display for RuntimePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one piece of evidence says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Compiled, ran and matched a reference.
    Works,
    /// Compiled and ran; the numbers were not checked.
    Reachable,
    /// Refused at parse, compile, load or evaluation.
    Rejected,
    /// Ran and gave wrong numbers.
    WrongResults,
}

impl Outcome {
    fn positive(self) -> bool {
        matches!(self, Outcome::Works | Outcome::Reachable)
    }

    /// The spelling used in `claims.tsv` and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Works => "works",
            Outcome::Reachable => "reachable",
            Outcome::Rejected => "rejected",
            Outcome::WrongResults => "wrong-results",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        [
            Outcome::Works,
            Outcome::Reachable,
            Outcome::Rejected,
            Outcome::WrongResults,
        ]
        .into_iter()
        .find(|o| o.name() == s)
    }
}

/// One piece of evidence about an op on a path.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    /// The runtime path it was observed on.
    pub path: RuntimePath,
    /// What happened.
    pub outcome: Outcome,
    /// Measured relative error, where the source gives one.
    pub relerr: Option<f64>,
    /// Source tags of `shared/docs/ane-evidence.md` §0 / `ane-spec.md` §0.
    pub source: String,
    /// The evidence file and row or quote it came from.
    pub detail: String,
}

/// The registry's verdict for one op on one path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    /// Reachable and numerically correct; the smallest measured relerr, if any.
    Correct {
        /// Relative error measured against a reference.
        relerr: Option<f64>,
    },
    /// Compiles and runs; no source checked the numbers.
    Reachable,
    /// Every source saw it refused or wrong.
    Rejected,
    /// Sources disagree.
    Contested,
    /// No evidence on this path.
    Untested,
}

impl Status {
    /// The status word (`correct`, `reachable`, `rejected`, `contested`, `untested`).
    pub fn name(self) -> &'static str {
        match self {
            Status::Correct { .. } => "correct",
            Status::Reachable => "reachable",
            Status::Rejected => "rejected",
            Status::Contested => "contested",
            Status::Untested => "untested",
        }
    }

    /// Whether evidence shows it compiling and running, with no source against it.
    pub fn usable(self) -> bool {
        matches!(self, Status::Correct { .. } | Status::Reachable)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Correct { relerr: Some(e) } if *e == 0.0 => write!(f, "correct (relerr 0)"),
            Status::Correct { relerr: Some(e) } => write!(f, "correct (relerr {e:.2e})"),
            other => f.write_str(other.name()),
        }
    }
}

/// An op, or one argument spelling of it, with all its evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The MIL op name.
    pub op: String,
    /// The argument spelling or condition (`bias`, `inline-literal-args`,
    /// ...); `None` for the op as such.
    pub variant: Option<String>,
    /// Every piece of evidence, in file order.
    pub evidence: Vec<Evidence>,
}

impl Entry {
    /// The verdict on `path` (see the module docs).
    pub fn status(&self, path: RuntimePath) -> Status {
        let on_path = self.evidence.iter().filter(|e| e.path == path);
        let (mut pos, mut neg, mut correct, mut best) = (false, false, false, None::<f64>);
        for e in on_path {
            if e.outcome.positive() {
                pos = true;
            } else {
                neg = true;
            }
            if e.outcome == Outcome::Works {
                correct = true;
                if let Some(r) = e.relerr {
                    best = Some(best.map_or(r, |b| b.min(r)));
                }
            }
        }
        match (pos, neg) {
            (false, false) => Status::Untested,
            (true, true) => Status::Contested,
            (false, true) => Status::Rejected,
            (true, false) if correct => Status::Correct { relerr: best },
            (true, false) => Status::Reachable,
        }
    }

    /// `op` or `op[variant]`.
    pub fn label(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}[{v}]", self.op),
            None => self.op.clone(),
        }
    }
}

/// Every op with evidence, and the MIL op names.
#[derive(Debug, Clone)]
pub struct Registry {
    entries: BTreeMap<(String, Option<String>), Entry>,
    mil_ops: Vec<String>,
}

const SWEEP: &str = include_str!("../evidence/aneforge-mil-sweep.tsv");
const CENSUS: &str = include_str!("../evidence/aneforge-capabilities.tsv");
const CLAIMS: &str = include_str!("../evidence/claims.tsv");
const MIL_OPS: &str = include_str!("../evidence/mil-ops-ios18.txt");
/// ANEDVD's kernels as MIL (file name, text), all of which ran on its A18 Pro.
const ANEDVD_PROGRAMS: [(&str, &str); 7] = [
    (
        "01_qkv_h64_w128.mil",
        include_str!("../evidence/anedvd-zig-mil/01_qkv_h64_w128.mil"),
    ),
    (
        "02_o_h64_w128.mil",
        include_str!("../evidence/anedvd-zig-mil/02_o_h64_w128.mil"),
    ),
    (
        "03_ffn_fused_h64_i128_w128.mil",
        include_str!("../evidence/anedvd-zig-mil/03_ffn_fused_h64_i128_w128.mil"),
    ),
    (
        "04a_ffn_split_gate_up_h64_i128_w128.mil",
        include_str!("../evidence/anedvd-zig-mil/04a_ffn_split_gate_up_h64_i128_w128.mil"),
    ),
    (
        "04b_ffn_split_down_i128_h64_w128.mil",
        include_str!("../evidence/anedvd-zig-mil/04b_ffn_split_down_i128_h64_w128.mil"),
    ),
    (
        "05_lm_head_h64_v256_w1.mil",
        include_str!("../evidence/anedvd-zig-mil/05_lm_head_h64_v256_w1.mil"),
    ),
    (
        "06_legacy_width1_qkv_h64.mil",
        include_str!("../evidence/anedvd-zig-mil/06_legacy_width1_qkv_h64.mil"),
    ),
];

/// Evidence names that are one spelling or condition of a MIL op: the sweep
/// and census write gelu's modes as ops of their own, and the census names a
/// few walls after the op and its failing condition.
const SPELLINGS: [(&str, &str, &str); 7] = [
    ("gelu_exact", "gelu", "mode=EXACT"),
    ("gelu_sigmoid_approx", "gelu", "mode=SIGMOID_APPROXIMATION"),
    ("gelu_tanh_approx", "gelu", "mode=TANH_APPROXIMATION"),
    ("conv_kernel_ge16", "conv", "kernel-width>=16"),
    ("topk_k3_k4", "topk", "k=3|4"),
    ("lrn_channels_ge16", "local_response_norm", "channels>=16"),
    (
        "batch_to_space_indivisible",
        "batch_to_space",
        "indivisible",
    ),
];

/// `(op, variant)` for an evidence file's name.
fn op_and_spelling(name: &str) -> (&str, Option<&str>) {
    SPELLINGS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or((name, None), |(_, op, v)| (op, Some(v)))
}

/// The registry built from the embedded evidence (once per process).
///
/// Fails only if the embedded files are malformed, which the crate's tests
/// rule out; the error names the file and line.
pub fn registry() -> Result<&'static Registry, String> {
    static REGISTRY: OnceLock<Result<Registry, String>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| Registry::from_sources(SWEEP, CENSUS, CLAIMS, MIL_OPS, &ANEDVD_PROGRAMS))
        .as_ref()
        .map_err(Clone::clone)
}

/// The raw text of `claims.tsv` (for the quote check in the tests).
pub fn claims_text() -> &'static str {
    CLAIMS
}

/// Tab-separated rows after the header, `#` comment lines skipped; each row
/// with its 1-based line number, checked to have `columns` fields.
fn rows<'a>(
    file: &'a str,
    text: &'a str,
    columns: usize,
) -> Result<Vec<(usize, Vec<&'a str>)>, String> {
    let mut out = Vec::new();
    let mut header = true;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if std::mem::take(&mut header) {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != columns {
            return Err(format!(
                "{file} line {}: {} fields, expected {columns}",
                i + 1,
                f.len()
            ));
        }
        out.push((i + 1, f));
    }
    Ok(out)
}

/// Evidence from one of ANEForge's e5rt files.
fn e5rt(outcome: Outcome, relerr: Option<f64>, source: &str, detail: String) -> Evidence {
    Evidence {
        path: RuntimePath::E5rt,
        outcome,
        relerr,
        source: source.into(),
        detail,
    }
}

impl Registry {
    /// Builds the registry from the evidence texts (see the module docs).
    pub fn from_sources(
        sweep: &str,
        census: &str,
        claims: &str,
        mil_ops: &str,
        programs: &[(&str, &str)],
    ) -> Result<Self, String> {
        let mut mil_ops: Vec<String> = mil_ops
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect();
        // `is_mil_op` binary-searches
        mil_ops.sort_unstable();
        mil_ops.dedup();
        let mut reg = Registry {
            entries: BTreeMap::new(),
            mil_ops,
        };
        for (line, f) in rows("aneforge-mil-sweep.tsv", sweep, 7)? {
            let (op, relerr, klass) = (f[0], f[4], f[5]);
            let outcome = match klass {
                "reachable+correct" => Outcome::Works,
                "reachable" => Outcome::Reachable,
                "not-implemented-on-ANE" | "compile-walled" => Outcome::Rejected,
                other => {
                    return Err(format!(
                        "aneforge-mil-sweep.tsv line {line}: unknown klass `{other}`"
                    ))
                }
            };
            let relerr = relerr.parse::<f64>().ok();
            let (op, variant) = op_and_spelling(op);
            let relerr = relerr.filter(|_| outcome == Outcome::Works);
            let detail = format!("aneforge-mil-sweep.tsv line {line}: {klass}");
            reg.add(op, variant, e5rt(outcome, relerr, "F-SW", detail))?;
        }
        for (line, f) in rows("aneforge-capabilities.tsv", census, 7)? {
            let (name, status) = (f[0], f[1]);
            let outcome = match status {
                "fused" | "reachable" => Some(Outcome::Works),
                "arch-gated-negative" | "not-authorable" => Some(Outcome::Rejected),
                // Netplist bridges, cracked layers and predictions are not
                // evidence about the op inside one e5rt MIL program.
                "bridge" | "cracked" | "predicted" => None,
                other => {
                    return Err(format!(
                        "aneforge-capabilities.tsv line {line}: unknown status `{other}`"
                    ))
                }
            };
            let (op, variant) = op_and_spelling(name);
            let Some(outcome) = outcome.filter(|_| reg.is_mil_op(op)) else {
                continue;
            };
            // The census's "fused" and "reachable" say the op compiled and ran
            // in one program; only a relerr in its evidence says the numbers
            // were checked.
            let relerr = f[5]
                .split("relerr=")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .and_then(|s| s.parse::<f64>().ok());
            let outcome = match (outcome, relerr) {
                (Outcome::Works, None) => Outcome::Reachable,
                _ => outcome,
            };
            let detail = format!("aneforge-capabilities.tsv line {line}: {status}");
            reg.add(op, variant, e5rt(outcome, relerr, "F-CJ", detail))?;
        }
        for (file, text) in programs {
            let body: String = text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n");
            let program = crate::parse(&body).map_err(|e| format!("anedvd-zig-mil/{file}: {e}"))?;
            let mut ops: Vec<&str> = program
                .functions
                .iter()
                .flat_map(|f| f.body.iter().map(|s| s.op.as_str()))
                .collect();
            ops.sort_unstable();
            ops.dedup();
            for op in ops {
                reg.add(
                    op,
                    None,
                    Evidence {
                        path: RuntimePath::InMemory,
                        outcome: Outcome::Works,
                        relerr: None,
                        source: "D-MIL D-RES".into(),
                        detail: format!(
                            "anedvd-zig-mil/{file}: in a kernel ANEDVD ran and checked on an A18 Pro"
                        ),
                    },
                )?;
            }
        }
        for (line, f) in rows("claims.tsv", claims, 8)? {
            let bad = |what: &str| format!("claims.tsv line {line}: {what}");
            let path = RuntimePath::from_name(f[2]).ok_or_else(|| bad("unknown path"))?;
            let outcome = Outcome::from_name(f[3]).ok_or_else(|| bad("unknown outcome"))?;
            let relerr = match f[4] {
                "" => None,
                s => Some(s.parse::<f64>().map_err(|_| bad("bad relerr"))?),
            };
            let variant = Some(f[1]).filter(|v| !v.is_empty());
            reg.add(
                f[0],
                variant,
                Evidence {
                    path,
                    outcome,
                    relerr,
                    source: f[5].into(),
                    detail: format!("{}: \"{}\"", f[6], f[7]),
                },
            )?;
        }
        Ok(reg)
    }

    fn add(&mut self, op: &str, variant: Option<&str>, e: Evidence) -> Result<(), String> {
        if !self.is_mil_op(op) {
            return Err(format!(
                "`{op}` ({}) is not a MIL op of the iOS18 opset",
                e.detail
            ));
        }
        let key = (op.to_string(), variant.map(String::from));
        self.entries
            .entry(key)
            .or_insert_with(|| Entry {
                op: op.into(),
                variant: variant.map(String::from),
                evidence: Vec::new(),
            })
            .evidence
            .push(e);
        Ok(())
    }

    /// Whether `op` is an op of coremltools' iOS18 MIL opset.
    pub fn is_mil_op(&self, op: &str) -> bool {
        self.mil_ops
            .binary_search_by(|o| o.as_str().cmp(op))
            .is_ok()
    }

    /// The entry of `op` (`variant` `None`) or of one of its spellings.
    pub fn entry(&self, op: &str, variant: Option<&str>) -> Option<&Entry> {
        self.entries
            .get(&(op.to_string(), variant.map(String::from)))
    }

    /// The verdict for `op` (or its `variant`) on `path`; untested without evidence.
    pub fn status(&self, op: &str, variant: Option<&str>, path: RuntimePath) -> Status {
        self.entry(op, variant)
            .map_or(Status::Untested, |e| e.status(path))
    }

    /// Every entry, ordered by op then variant (the op itself first).
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }
}
