//! Arbitrary text to `anedvd_mil::parse`; whatever parses is printed and must
//! parse back to an equal program, and printing that must give the same
//! text (`print ∘ parse` is a fixed point, as the crate documents).
#![no_main]

use anedvd_mil::{parse, print};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(program) = parse(src) else {
        return;
    };
    let once = print(&program);
    let again = parse(&once).unwrap_or_else(|e| panic!("printed program does not parse: {e}\n{once}"));
    assert_eq!(again, program, "parse(print(p)) != p\n{once}");
    assert_eq!(print(&again), once, "print is not a fixed point");
});
