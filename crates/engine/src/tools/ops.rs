//! `anedvd ops`: the ANE capability registry ([`anedvd_mil::registry`]) as
//! rows, filtered by op and status.

use crate::{Error, Result};
pub use anedvd_mil::registry::{Entry, Evidence, Outcome, RuntimePath, Status};

/// One registry entry with its verdict on each path.
#[derive(Debug, Clone)]
pub struct OpRow {
    /// The entry (op, spelling, evidence).
    pub entry: Entry,
    /// The verdict per path, in [`RuntimePath::ALL`] order.
    pub statuses: Vec<(RuntimePath, Status)>,
}

/// What to list.
#[derive(Debug, Clone, Default)]
pub struct OpsQuery {
    /// Only this op (with its spellings); `None` for all.
    pub op: Option<String>,
    /// Only entries with this status word on `path` (or on any path).
    pub status: Option<String>,
    /// The path the status filter applies to; `None` for any.
    pub path: Option<RuntimePath>,
    /// Include argument spellings, not only ops.
    pub spellings: bool,
}

/// The status words [`OpsQuery::status`] accepts.
pub const STATUS_WORDS: [&str; 5] = ["correct", "reachable", "rejected", "contested", "untested"];

/// The registry's rows matching `q`, ordered by op then spelling.
pub fn list(q: &OpsQuery) -> Result<Vec<OpRow>> {
    let reg = anedvd_mil::registry::registry()
        .map_err(|e| Error::Invalid(format!("the capability registry is unreadable: {e}")))?;
    if let Some(s) = &q.status {
        if !STATUS_WORDS.contains(&s.as_str()) {
            return Err(Error::Invalid(format!(
                "unknown status `{s}` (one of {})",
                STATUS_WORDS.join(", ")
            )));
        }
    }
    if let Some(op) = &q.op {
        if !reg.is_mil_op(op) {
            return Err(Error::Invalid(format!(
                "`{op}` is not an op of the iOS18 MIL opset"
            )));
        }
    }
    let paths: Vec<RuntimePath> = q.path.map_or(RuntimePath::ALL.to_vec(), |p| vec![p]);
    let mut rows: Vec<OpRow> = reg
        .entries()
        .filter(|e| q.op.as_ref().is_none_or(|op| &e.op == op))
        .filter(|e| q.spellings || q.op.is_some() || e.variant.is_none())
        .map(|e| OpRow {
            entry: e.clone(),
            statuses: RuntimePath::ALL.iter().map(|&p| (p, e.status(p))).collect(),
        })
        .filter(|r| {
            q.status.as_ref().is_none_or(|want| {
                r.statuses
                    .iter()
                    .any(|(p, s)| paths.contains(p) && s.name() == want)
            })
        })
        .collect();
    // An op that is a MIL op but has no evidence at all is untested everywhere.
    let untested_wanted = q.status.as_deref().is_none_or(|s| s == "untested");
    let has_evidence = |op: &str| reg.entries().any(|e| e.op == op);
    if let (Some(op), true) = (&q.op, rows.is_empty() && untested_wanted) {
        if has_evidence(op) {
            return Ok(rows);
        }
        rows.push(OpRow {
            entry: Entry {
                op: op.clone(),
                variant: None,
                evidence: Vec::new(),
            },
            statuses: RuntimePath::ALL
                .iter()
                .map(|&p| (p, Status::Untested))
                .collect(),
        });
    }
    Ok(rows)
}
