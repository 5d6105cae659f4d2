//! Memory and time of each tokenizer load stage (Linux): `cargo run
//! --release -p anedvd-tokenizer --example mem_stages -- MODEL.gguf`. Prints
//! VmRSS (anonymous / file-backed) and VmHWM from /proc/self/status after opening the GGUF (metadata
//! parsed), after building the tokenizer, and after dropping the file.

use anedvd_tokenizer::Tokenizer;
use std::time::Instant;

fn status() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .map(|l| l[k.len()..].trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "VmRSS {:>10} (anon {:>10}, file {:>10})  VmHWM {:>10}",
        field("VmRSS:"),
        field("RssAnon:"),
        field("RssFile:"),
        field("VmHWM:")
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = std::env::args()
        .nth(1)
        .ok_or("usage: mem_stages MODEL.gguf")?;
    println!("{:<28} {}", "start", status());
    let t = Instant::now();
    let file = anedvd_gguf::GgufFile::open(&model)?;
    let open = t.elapsed();
    println!(
        "{:<28} {}  ({:.1} ms)",
        "gguf opened",
        status(),
        open.as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let tok = Tokenizer::from_gguf_metadata(file.metadata())?;
    let build = t.elapsed();
    println!(
        "{:<28} {}  ({:.1} ms)",
        "tokenizer built",
        status(),
        build.as_secs_f64() * 1e3
    );
    drop(file);
    println!("{:<28} {}", "gguf dropped", status());
    let ids = tok.encode("Hello world", true, false)?;
    println!(
        "{} ids; vocab {}; tokenizer heap {:.1} MB",
        ids.len(),
        tok.vocab_size(),
        tok.heap_bytes() as f64 / 1e6
    );
    Ok(())
}
