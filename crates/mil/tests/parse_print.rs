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

fn read(rel: &str) -> String {
    let p = fixture_dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Files already written in the canonical (spaced, alphabetical) form print back byte for byte.
#[test]
fn canonical_fixtures_print_identically() {
    for f in [
        "generated/swiglu_ffn.mil",
        "generated/ffn_up_aligned.mil",
        "espresso/conv.mil",
        "espresso/matmul.mil",
    ] {
        let src = read(f);
        let p = parse(&src).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(print(&p), src, "{f}");
    }
}

/// Rewrites whitespace outside string literals: drops spaces next to
/// punctuation and turns the remaining ones into newline + tab.
fn rewhitespace(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let punct = |c: Option<&char>| c.is_some_and(|c| "()[]{}<>,=;".contains(*c));
    let mut out = String::new();
    let mut in_str = false;
    for (i, &c) in chars.iter().enumerate() {
        if c == '"' && (i == 0 || chars[i - 1] != '\\') {
            in_str = !in_str;
        }
        if !in_str && (c == ' ' || c == '\n') {
            let prev = chars[..i].iter().rev().find(|c| !c.is_whitespace());
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if !(punct(prev) || punct(next) || out.ends_with("\n\t")) {
                out.push_str("\n\t");
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[test]
fn any_whitespace_parses_the_same() {
    for f in mil_files() {
        let src = std::fs::read_to_string(&f).unwrap_or_default();
        let a = parse(&src).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let squeezed = rewhitespace(&src);
        assert_ne!(squeezed, src);
        let b = parse(&squeezed)
            .unwrap_or_else(|e| panic!("{} squeezed: {e}\n{squeezed}", f.display()));
        assert_eq!(a, b, "{}", f.display());
    }
}

#[test]
fn literal_forms() {
    let src = r#"program(1.3) { func main<ios18>(tensor<fp16, [1, 2]> x) {
        fp16 a = const()[name = string("a"), val = fp16(0x1p-3)];
        fp16 b = const()[name = string("b"), val = fp16(0.000001)];
        tensor<fp16, [2, 2]> c = const()[name = string("lbl"), val = tensor<fp16, [2, 2]>([[1.5, -2], [0.25, 65504]])];
        string s = const()[name = string("s"), val = string("q\"uote")];
    } -> (x); }"#;
    let p = parse(src).unwrap_or_else(|e| panic!("{e}"));
    let body = &p.functions[0].body;
    use anedvd_mil::ir::{Scalar, Value};
    assert_eq!(
        body[0].const_val(),
        Some(&Value::Scalar(Scalar::fp16(0.125)))
    );
    assert_eq!(body[2].label, "lbl");
    let text = print(&p);
    assert!(text.contains("fp16(0.125)"), "{text}");
    assert!(text.contains("([[1.5, -2.0], [0.25, 65500.0]])"), "{text}");
    assert!(text.contains(r#"string("q\"uote")"#), "{text}");
    // 1e-6 is an fp16 subnormal; it must survive print/parse
    assert_eq!(parse(&text).map(|q| q == p), Ok(true));
}

#[test]
fn malformed_text_is_a_typed_error() {
    use anedvd_mil::Error;
    let bad = [
        "",
        "program(1.3) {",
        "program(1.3) { func main<ios18>(tensor<fp16, [1, 0]> x) { } -> (x); }",
        "program(1.3) { func main<ios18>(tensor<fp99, [1]> x) { } -> (x); }",
        "program(1.3) { func main<ios18>(tensor<fp16, [1]> x) { int32 a = const()[name = string(\"a\"), val = int32(3000000000)]; } -> (x); }",
        "program(1.3) { func main<ios18>(tensor<fp16, [1]> x) { tensor<int32, [3]> a = const()[name = string(\"a\"), val = tensor<int32, [3]>([1, 2])]; } -> (x); }",
        "program(1.3) { func main<ios18>(tensor<fp16, [1]> x) { string a = const()[name = string(\"a), val = string(\"b\")]; } -> (x); }",
        "program(1.3) { func main<ios18>(tensor<fp16, [1]> x) { tensor<fp16, [1]> y = relu(x = x, x = x)[name = string(\"y\")]; } -> (y); }",
        "program(1.3) { func main<ios18>(tensor<fp16, [1]> x) { } -> (x); } trailing",
        "program(1.3) { func main<ios18>(tensor<fp16, [1]> x) { } -> (x); } \u{7}",
    ];
    for b in bad {
        assert!(
            matches!(parse(b), Err(Error::Parse { .. })),
            "{b:?} -> {:?}",
            parse(b)
        );
    }
    // every truncation of a real file fails cleanly
    let src = read("espresso/ffn_fwd_taps.mil");
    for cut in (0..src.len() - 3).step_by(5) {
        if src.is_char_boundary(cut) {
            assert!(parse(&src[..cut]).is_err(), "prefix {cut} parsed");
        }
    }
    // deep nesting is bounded
    let deep = format!("program(1.3) {{ func main<ios18>(tensor<fp16, [1]> x) {{ tensor<int32, [1]> a = const()[name = string(\"a\"), val = tensor<int32, [1]>({}1{})]; }} -> (x); }}", "[".repeat(100), "]".repeat(100));
    assert!(parse(&deep).is_err());
}

/// The copies under tests/fixtures equal shared/fixtures/ane when that folder
/// is beside the repository (it is on the dev machine and in CI clones).
#[test]
fn fixture_copies_match_shared_folder() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/ane");
    if !shared.is_dir() {
        println!("skipping: {} not present", shared.display());
        return;
    }
    let mut n = 0;
    for sub in ["espresso", "coremltools", "generated"] {
        for e in std::fs::read_dir(shared.join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = e.file_name();
            let ours = fixture_dir().join(sub).join(&name);
            let a = std::fs::read(e.path()).unwrap_or_default();
            let b = std::fs::read(&ours).unwrap_or_else(|err| panic!("{}: {err}", ours.display()));
            assert_eq!(
                a,
                b,
                "{sub}/{} differs from the shared copy",
                name.to_string_lossy()
            );
            n += 1;
        }
    }
    assert!(n >= 39, "only {n} shared files");
}
