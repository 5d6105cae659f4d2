#!/usr/bin/env python3
"""Check the dependency arrows between our crates against docs/architecture.md.

The allowed arrows live in docs/architecture.md, in a fenced code block
between the lines `<!-- layering:begin -->` and `<!-- layering:end -->`.
Each line of the block reads `crate -> dep, dep, ...` (names are the
directory names under crates/); `crate ->` alone means no internal
dependencies; `#` starts a comment.

The actual arrows come from `cargo metadata --format-version 1 --no-deps`:
every normal and build dependency (dev-dependencies are not checked) of a
workspace package on another workspace package. The check fails (exit 1),
with one line per problem, when:
  - an arrow is used that the table does not allow;
  - a workspace crate has no line in the table, or the table names a crate
    that is not in the workspace;
  - an arrow the table allows is not used (the table is stale: the doc must
    describe the graph as built).

Options:
  --metadata FILE  read cargo metadata JSON from FILE instead of running cargo
  --doc FILE       read the table from FILE instead of docs/architecture.md
  --self-test      run the check on small synthetic graphs and verify that it
                   passes and fails where it should (does not read the
                   workspace)

Python 3 standard library only.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

BEGIN = "<!-- layering:begin -->"
END = "<!-- layering:end -->"
DOC_REL = "docs/architecture.md"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TableError(Exception):
    pass


def parse_table(text, doc_name=DOC_REL):
    """Return ({crate: set(deps)}, [errors]) from the marked block of `text`."""
    lines = text.splitlines()
    try:
        begin = next(i for i, l in enumerate(lines) if l.strip() == BEGIN)
    except StopIteration:
        raise TableError(f"no `{BEGIN}` marker line in {doc_name}")
    try:
        end = next(i for i, l in enumerate(lines) if i > begin and l.strip() == END)
    except StopIteration:
        raise TableError(f"no `{END}` marker line after `{BEGIN}` in {doc_name}")
    block = lines[begin + 1 : end]
    fences = [i for i, l in enumerate(block) if l.strip().startswith("```")]
    if len(fences) < 2:
        raise TableError(
            f"no fenced code block between the layering markers in {doc_name}"
        )
    body = block[fences[0] + 1 : fences[1]]
    first_line = begin + 1 + fences[0] + 2  # 1-based line number of body[0]

    table = {}
    errors = []
    for n, raw in enumerate(body, start=first_line):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if "->" not in line:
            errors.append(f"{doc_name}:{n}: expected `crate -> dep, dep`, got `{raw.strip()}`")
            continue
        lhs, rhs = line.split("->", 1)
        crate = lhs.strip()
        if not crate or len(crate.split()) != 1:
            errors.append(f"{doc_name}:{n}: expected one crate name before `->`, got `{lhs.strip()}`")
            continue
        deps = [d.strip() for d in rhs.split(",")]
        if rhs.strip() == "":
            deps = []
        if any(not d or len(d.split()) != 1 for d in deps):
            errors.append(f"{doc_name}:{n}: expected a comma-separated list of crate names after `->`, got `{rhs.strip()}`")
            continue
        if crate in table:
            errors.append(f"{doc_name}:{n}: `{crate}` has more than one line")
            continue
        if crate in deps:
            errors.append(f"{doc_name}:{n}: `{crate}` lists itself as a dependency")
        dupes = sorted({d for d in deps if deps.count(d) > 1})
        if dupes:
            errors.append(f"{doc_name}:{n}: `{crate}` lists {', '.join(dupes)} more than once")
        table[crate] = set(deps)
    if not table and not errors:
        errors.append(f"{doc_name}: the layering table is empty")
    return table, errors


# The HTTP/async stack stays above the engine: only these crates may depend
# (normal or build) on these external packages (docs/architecture.md says so).
ASYNC_PACKAGES = {"tokio", "axum", "hyper", "tower", "tower-http"}
ASYNC_CRATES = {"server", "cli"}


def async_violations(metadata, doc_name=DOC_REL):
    """Lines for crates outside ASYNC_CRATES that depend on ASYNC_PACKAGES."""
    members = set(metadata.get("workspace_members") or [])
    errors = []
    for p in metadata["packages"]:
        if members and p["id"] not in members:
            continue
        crate = crate_dir_name(p["manifest_path"])
        if crate in ASYNC_CRATES:
            continue
        for dep in p.get("dependencies", []):
            if dep.get("kind") in (None, "build") and dep["name"] in ASYNC_PACKAGES:
                errors.append(
                    f"layering: {crate} -> {dep['name']}: only {', '.join(sorted(ASYNC_CRATES))} "
                    f"may use the async/HTTP stack; see {doc_name}"
                )
    return sorted(errors)


def crate_dir_name(manifest_path):
    return os.path.basename(os.path.dirname(os.path.abspath(manifest_path)))


def actual_graph(metadata):
    """Return {crate: set(deps)} over workspace members, normal + build deps only."""
    members = set(metadata.get("workspace_members") or [])
    packages = [p for p in metadata["packages"] if not members or p["id"] in members]
    by_name = {}
    by_dir = {}
    for p in packages:
        d = crate_dir_name(p["manifest_path"])
        by_name[p["name"]] = d
        by_dir[os.path.dirname(os.path.abspath(p["manifest_path"]))] = d
    graph = {}
    for p in packages:
        crate = crate_dir_name(p["manifest_path"])
        deps = graph.setdefault(crate, set())
        for dep in p.get("dependencies", []):
            if dep.get("kind") not in (None, "build"):
                continue
            target = None
            if dep.get("path"):
                target = by_dir.get(os.path.abspath(dep["path"]))
            if target is None and dep.get("source") is None:
                target = by_name.get(dep["name"])
            if target is not None and target != crate:
                deps.add(target)
    return graph


def check(table, graph, doc_name=DOC_REL):
    """Return the list of violation lines (empty when the graph matches)."""
    errors = []
    see = f"see {doc_name}"
    for crate in sorted(graph):
        if crate not in table:
            errors.append(f"layering: workspace crate `{crate}` has no line in the table; {see}")
    for crate in sorted(table):
        if crate not in graph:
            errors.append(f"layering: the table names `{crate}`, which is not a workspace crate; {see}")
        for dep in sorted(table[crate]):
            if dep not in graph and dep not in table:
                errors.append(f"layering: the table allows {crate} -> {dep}, but `{dep}` is not a workspace crate; {see}")
    for crate in sorted(graph):
        if crate not in table:
            continue
        allowed = table[crate]
        shown = ", ".join(sorted(allowed)) if allowed else "none"
        for dep in sorted(graph[crate] - allowed):
            errors.append(
                f"layering: {crate} -> {dep} is not allowed (allowed for {crate}: {shown}); {see}"
            )
        for dep in sorted(allowed - graph[crate]):
            if dep in graph:
                errors.append(
                    f"layering: {crate} -> {dep} is allowed but not used (stale table: remove it or add the dependency); {see}"
                )
    return errors


def run(metadata, doc_text, doc_name=DOC_REL):
    """Return (ok, lines) for one check."""
    try:
        table, errors = parse_table(doc_text, doc_name)
    except TableError as e:
        return False, [f"layering: {e}"]
    errors = [f"layering: {e}" for e in errors]
    graph = actual_graph(metadata)
    errors += check(table, graph, doc_name)
    errors += async_violations(metadata, doc_name)
    if errors:
        return False, errors
    arrows = sum(len(d) for d in graph.values())
    return True, [f"layering: OK ({len(graph)} crates, {arrows} arrows match {doc_name})"]


def load_metadata(path):
    if path:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=REPO_ROOT,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout
    return json.loads(out)


# ---------------------------------------------------------------- self-test


def synthetic_metadata(root, graph, dev=None):
    """Cargo-metadata-shaped JSON for `graph` ({dir: [deps]}), with `dev`
    ({dir: [deps]}) as dev-dependencies and one external dependency each."""
    dev = dev or {}

    def pkg_name(d):
        return "anedvd" if d == "cli" else f"anedvd-{d}"

    def pkg_id(d):
        return f"path+file://{root}/crates/{d}#{pkg_name(d)}@0.1.0"

    packages = []
    for d, deps in graph.items():
        dependencies = [
            {"name": pkg_name(x), "source": None, "kind": None,
             "path": f"{root}/crates/{x}", "target": None}
            for x in deps
        ]
        dependencies += [
            {"name": pkg_name(x), "source": None, "kind": "dev",
             "path": f"{root}/crates/{x}", "target": None}
            for x in dev.get(d, [])
        ]
        dependencies.append(
            {"name": "anyhow", "source": "registry+https://github.com/rust-lang/crates.io-index",
             "kind": None, "target": None}
        )
        packages.append({
            "name": pkg_name(d), "id": pkg_id(d),
            "manifest_path": f"{root}/crates/{d}/Cargo.toml",
            "dependencies": dependencies,
        })
    return {"packages": packages, "workspace_members": [pkg_id(d) for d in graph],
            "workspace_root": root, "version": 1}


def synthetic_doc(rows):
    body = "\n".join(rows)
    return (
        "# Architecture\n\nSome text.\n\n"
        f"{BEGIN}\n```\n# comment line\n{body}\n```\n{END}\n\nMore text.\n"
    )


def self_test():
    root = "/nonexistent/ws"
    good_graph = {
        "base": [],
        "gguf": ["base"],
        "graph": ["base"],
        "cpu": ["base", "graph"],
        "cli": ["cpu", "gguf"],
    }
    good_rows = [
        "base ->",
        "gguf -> base   # trailing comment",
        "graph -> base",
        "cpu -> base, graph",
        "cli -> cpu, gguf",
    ]
    failures = []

    def expect(label, metadata, doc, want_ok, want_substrings=()):
        # Round-trip through temp files, as --metadata/--doc would.
        with tempfile.TemporaryDirectory() as tmp:
            mpath = os.path.join(tmp, "metadata.json")
            dpath = os.path.join(tmp, "architecture.md")
            with open(mpath, "w", encoding="utf-8") as f:
                json.dump(metadata, f)
            with open(dpath, "w", encoding="utf-8") as f:
                f.write(doc)
            with open(dpath, encoding="utf-8") as f:
                ok, lines = run(load_metadata(mpath), f.read(), "architecture.md")
        status = "pass" if ok else "fail"
        print(f"self-test: {label}: {status}")
        for l in lines:
            print(f"    {l}")
        if ok != want_ok:
            failures.append(f"{label}: expected {'pass' if want_ok else 'fail'}, got {status}")
        for s in want_substrings:
            if not any(s in l for l in lines):
                failures.append(f"{label}: no output line contains `{s}`")
        if not want_ok and len(lines) != max(1, len(want_substrings)):
            failures.append(f"{label}: expected {len(want_substrings)} line(s), got {len(lines)}")

    # 1. Matching graph passes; a dev-dependency outside the table is ignored.
    expect("matching graph", synthetic_metadata(root, good_graph, dev={"base": ["cpu"]}),
           synthetic_doc(good_rows), True, ["layering: OK (5 crates, 6 arrows"])

    # 2. Forbidden arrow: cli -> base is not in the table.
    g = dict(good_graph, cli=["cpu", "gguf", "base"])
    expect("forbidden arrow", synthetic_metadata(root, g), synthetic_doc(good_rows), False,
           ["layering: cli -> base is not allowed (allowed for cli: cpu, gguf); see architecture.md"])

    # 2b. A build-dependency is checked like a normal one.
    m = synthetic_metadata(root, good_graph)
    cpu = next(p for p in m["packages"] if p["name"] == "anedvd-cpu")
    cpu["dependencies"].append({"name": "anedvd-gguf", "source": None, "kind": "build",
                                "path": f"{root}/crates/gguf", "target": None})
    expect("forbidden build arrow", m, synthetic_doc(good_rows), False,
           ["layering: cpu -> gguf is not allowed (allowed for cpu: base, graph)"])

    # 3. Missing crate: the workspace has `server`, the table does not.
    g = dict(good_graph, server=["cpu"])
    expect("crate missing from table", synthetic_metadata(root, g), synthetic_doc(good_rows), False,
           ["layering: workspace crate `server` has no line in the table"])

    # 3b. The table names a crate that does not exist.
    expect("unknown crate in table", synthetic_metadata(root, good_graph),
           synthetic_doc(good_rows + ["testkit -> base"]), False,
           ["layering: the table names `testkit`, which is not a workspace crate"])

    # 4. Stale arrow: the table allows cli -> graph, nothing uses it.
    rows = good_rows[:-1] + ["cli -> cpu, gguf, graph"]
    expect("stale arrow", synthetic_metadata(root, good_graph), synthetic_doc(rows), False,
           ["layering: cli -> graph is allowed but not used"])

    # 4b. The async stack below server/cli.
    m = synthetic_metadata(root, good_graph)
    cpu = next(p for p in m["packages"] if p["name"] == "anedvd-cpu")
    cpu["dependencies"].append({"name": "tokio", "source": "registry+https://github.com/rust-lang/crates.io-index",
                                "kind": None, "target": None})
    expect("tokio below the server", m, synthetic_doc(good_rows), False,
           ["layering: cpu -> tokio: only cli, server may use the async/HTTP stack"])

    # 5. No marker block at all.
    expect("missing markers", synthetic_metadata(root, good_graph), "# Architecture\n", False,
           ["layering: no `<!-- layering:begin -->` marker line"])

    if failures:
        for f in failures:
            print(f"self-test FAILED: {f}", file=sys.stderr)
        return 1
    print("self-test: all expectations held")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metadata", metavar="FILE",
                    help="cargo metadata JSON to read instead of running cargo")
    ap.add_argument("--doc", metavar="FILE",
                    help=f"file holding the layering table (default {DOC_REL})")
    ap.add_argument("--self-test", action="store_true",
                    help="check the checker on synthetic graphs")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    doc_path = args.doc or os.path.join(REPO_ROOT, DOC_REL)
    doc_name = args.doc or DOC_REL
    try:
        with open(doc_path, encoding="utf-8") as f:
            doc_text = f.read()
        metadata = load_metadata(args.metadata)
    except (OSError, subprocess.CalledProcessError, json.JSONDecodeError) as e:
        print(f"layering: {e}", file=sys.stderr)
        return 1
    ok, lines = run(metadata, doc_text, doc_name)
    for l in lines:
        print(l, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
