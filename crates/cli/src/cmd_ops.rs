//! `anedvd ops`: what the hardware evidence says about each MIL op on each
//! ANE runtime path (the capability registry the rule checks read).

use anedvd_engine::tools::ops::{self, OpRow, OpsQuery, RuntimePath, Status};
use anyhow::Result;
use clap::Args;
use std::io::Write;

/// Arguments of `anedvd ops`.
#[derive(Debug, Args)]
#[command(after_help = "\
Statuses: correct (compiled, ran and matched a reference; the smallest measured relerr), \
reachable (compiled and ran, numbers unchecked), rejected (every source saw it refused or wrong), \
contested (sources disagree: never assumed to work), untested (no evidence on that path).

Paths: inmem is _ANEInMemoryModel (what `--backend ane` drives today); e5rt is Espresso's C API. \
The evidence comes from two projects that ran on Apple silicon (shared/docs/ane-evidence.md); \
nothing in this registry was measured by anedvd.

Examples:
  anedvd ops --path inmem                 # every op with evidence, in-memory path only
  anedvd ops --op concat                  # one op, its spellings and every source
  anedvd ops --status contested --path e5rt
  anedvd ops --json > registry.json")]
pub struct OpsArgs {
    /// Show one runtime path only.
    #[arg(long, value_name = "inmem|e5rt", value_parser = ["inmem", "e5rt"])]
    pub path: Option<String>,
    /// Show one MIL op with its argument spellings and every piece of evidence.
    #[arg(long, value_name = "NAME")]
    pub op: Option<String>,
    /// Only ops with this status (on --path, or on either path).
    #[arg(long, value_name = "STATUS", value_parser = ops::STATUS_WORDS)]
    pub status: Option<String>,
    /// Also list argument spellings and conditions (e.g. conv[bias]).
    #[arg(long)]
    pub spellings: bool,
    /// Print JSON (every entry with its statuses and evidence) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `anedvd ops`, printing to stdout.
pub fn run(a: &OpsArgs) -> Result<()> {
    let stdout = std::io::stdout();
    crate::common::ignore_broken_pipe(run_to(a, &mut stdout.lock()))
}

/// Runs `anedvd ops`, printing to `out`.
pub fn run_to(a: &OpsArgs, out: &mut dyn Write) -> Result<()> {
    let path = a.path.as_deref().and_then(RuntimePath::from_name);
    let rows = ops::list(&OpsQuery {
        op: a.op.clone(),
        status: a.status.clone(),
        path,
        spellings: a.spellings,
    })?;
    let paths: Vec<RuntimePath> = path.map_or(RuntimePath::ALL.to_vec(), |p| vec![p]);
    if a.json {
        let items: Vec<serde_json::Value> = rows.iter().map(|r| row_json(r, &paths)).collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&items)?)?;
        return Ok(());
    }
    if a.op.is_some() {
        for r in &rows {
            print_detail(out, r, &paths)?;
        }
        return Ok(());
    }
    let width = rows
        .iter()
        .map(|r| r.entry.label().len())
        .max()
        .unwrap_or(2)
        .max(2);
    let header: Vec<String> = paths.iter().map(|p| format!("{:<26}", p.name())).collect();
    writeln!(out, "{:<width$}  {}", "op", header.join(" ").trim_end())?;
    for r in &rows {
        let cols: Vec<String> = paths
            .iter()
            .map(|p| format!("{:<26}", status_of(r, *p).to_string()))
            .collect();
        writeln!(
            out,
            "{:<width$}  {}",
            r.entry.label(),
            cols.join(" ").trim_end()
        )?;
    }
    let mut counts = Vec::new();
    for p in &paths {
        let mut by: Vec<(&str, usize)> = ops::STATUS_WORDS.iter().map(|w| (*w, 0)).collect();
        for r in &rows {
            let w = status_of(r, *p).name();
            if let Some(c) = by.iter_mut().find(|(n, _)| *n == w) {
                c.1 += 1;
            }
        }
        let by: Vec<String> = by
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(w, n)| format!("{n} {w}"))
            .collect();
        counts.push(format!("{}: {}", p.name(), by.join(", ")));
    }
    writeln!(out, "\n{} entries; {}", rows.len(), counts.join("; "))?;
    writeln!(
        out,
        "`anedvd ops --op NAME` lists the evidence; nothing here was measured by anedvd."
    )?;
    Ok(())
}

fn status_of(r: &OpRow, p: RuntimePath) -> Status {
    r.statuses
        .iter()
        .find(|(q, _)| *q == p)
        .map_or(Status::Untested, |(_, s)| *s)
}

fn print_detail(out: &mut dyn Write, r: &OpRow, paths: &[RuntimePath]) -> Result<()> {
    writeln!(out, "{}", r.entry.label())?;
    for p in paths {
        writeln!(out, "  {}: {}", p.name(), status_of(r, *p))?;
        for e in r.entry.evidence.iter().filter(|e| e.path == *p) {
            let relerr = e
                .relerr
                .map(|x| format!(", relerr {x:e}"))
                .unwrap_or_default();
            writeln!(
                out,
                "    {} [{}{relerr}] {}",
                e.outcome.name(),
                e.source,
                e.detail
            )?;
        }
    }
    Ok(())
}

fn row_json(r: &OpRow, paths: &[RuntimePath]) -> serde_json::Value {
    let mut statuses = serde_json::Map::new();
    for p in paths {
        let s = status_of(r, *p);
        let relerr = match s {
            Status::Correct { relerr } => relerr,
            _ => None,
        };
        statuses.insert(
            p.name().into(),
            serde_json::json!({ "status": s.name(), "relerr": relerr }),
        );
    }
    let evidence: Vec<serde_json::Value> = r
        .entry
        .evidence
        .iter()
        .filter(|e| paths.contains(&e.path))
        .map(|e| {
            serde_json::json!({
                "path": e.path.name(),
                "outcome": e.outcome.name(),
                "relerr": e.relerr,
                "source": e.source,
                "detail": e.detail,
            })
        })
        .collect();
    serde_json::json!({
        "op": r.entry.op,
        "variant": r.entry.variant,
        "paths": statuses,
        "evidence": evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> OpsArgs {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: OpsArgs,
        }
        let m = <Cli as clap::CommandFactory>::command()
            .try_get_matches_from(std::iter::once("ops").chain(extra.iter().copied()))
            .unwrap();
        Cli::from_arg_matches(&m).unwrap().a
    }

    fn output(extra: &[&str]) -> String {
        let mut out = Vec::new();
        run_to(&args(extra), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn table_shows_each_paths_verdict() {
        let t = output(&[]);
        let line = |op: &str| {
            t.lines()
                .find(|l| l.split_whitespace().next() == Some(op))
                .unwrap_or_else(|| panic!("{op} missing:\n{t}"))
                .to_string()
        };
        assert!(line("concat").contains("contested"), "{}", line("concat"));
        assert!(line("rsqrt").contains("rejected"), "{}", line("rsqrt"));
        assert!(line("gather").contains("rejected"), "{}", line("gather"));
        assert!(t.contains("inmem") && t.contains("e5rt"));
        let inmem = output(&["--path", "inmem", "--status", "contested"]);
        assert!(
            inmem.contains("matmul") && !inmem.contains("e5rt"),
            "{inmem}"
        );
    }

    #[test]
    fn json_lists_evidence_with_sources() {
        let v: serde_json::Value =
            serde_json::from_str(&output(&["--json", "--op", "matmul"])).unwrap();
        let items = v.as_array().unwrap();
        let op = items.iter().find(|i| i["variant"].is_null()).unwrap();
        assert_eq!(op["paths"]["inmem"]["status"], "contested");
        assert_eq!(op["paths"]["e5rt"]["status"], "correct");
        assert!(op["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["source"] == "D-RDM"));
        assert!(items.iter().any(|i| i["variant"] == "inline-literal-args"));
    }

    #[test]
    fn unknown_op_is_a_clear_error() {
        let e = run_to(&args(&["--op", "frobnicate"]), &mut Vec::new()).unwrap_err();
        assert!(
            format!("{e}").contains("not an op of the iOS18 MIL opset"),
            "{e}"
        );
        // a MIL op without any evidence is untested on both paths
        let t = output(&["--op", "resample"]).replace(' ', "");
        assert!(
            t.contains("inmem:untested") && t.contains("e5rt:untested"),
            "{t}"
        );
    }
}
