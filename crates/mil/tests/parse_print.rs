//! Every fixture .mil parses; print → parse → print is a fixed point.

use std::path::{Path, PathBuf};

use anedvd_mil::{parse, print};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn mil_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in ["espresso", "coremltools", "generated"] {
        let dir = fixture_dir().join(sub);
        let rd = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "mil") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn all_fixtures_parse_and_print_is_a_fixed_point() {
    let files = mil_files();
    assert_eq!(
        files.len(),
        32,
        "expected 29 espresso + 1 coremltools + 2 generated fixtures"
    );
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let p = parse(&src).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let once = print(&p);
        let p2 = parse(&once).unwrap_or_else(|e| panic!("{} reprint: {e}\n{once}", f.display()));
        assert_eq!(p2, p, "{}: parse(print(p)) != p", f.display());
        assert_eq!(print(&p2), once, "{}: not a fixed point", f.display());
    }
}
