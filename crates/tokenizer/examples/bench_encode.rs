//! Encode throughput: `cargo run --release -p anedvd-tokenizer --example
//! bench_encode -- MODEL.gguf|tokenizer.json [TEXT_FILE]`. Without a text
//! file, 1 MiB of English prose is built from the paragraphs below (varied so
//! the per-call word cache does not see one text over and over).

use anedvd_tokenizer::Tokenizer;
use std::time::Instant;

const PARAGRAPHS: &[&str] = &[
    "The history of the printing press is a story of small improvements that added up to a revolution. \
     Movable type had existed for centuries, but it was the combination of a screw press, oil-based ink \
     and a reliable way of casting metal letters that made books cheap enough for ordinary readers.",
    "When the weather turned cold in the middle of October, the villagers gathered the last of the apples, \
     stacked firewood against the northern walls and argued, as they did every year, about whether the \
     river would freeze before the first week of December.",
    "Engineers measuring the performance of a new bridge design recorded the deflection of each span under \
     load, compared it with the predictions of their model, and found that the difference was smaller than \
     three millimetres in every case they tested.",
    "She opened the letter slowly, read it twice, and then folded it back into its envelope without saying a \
     word; outside, a dog was barking at something nobody else could see, and the kettle had started to sing.",
];

fn english(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 1024);
    let mut i = 0usize;
    while s.len() < bytes {
        s.push_str(PARAGRAPHS[i % PARAGRAPHS.len()]);
        s.push_str(&format!(
            " (Section {}, page {}.)\n\n",
            i / 7 + 1,
            i * 13 % 977
        ));
        i += 1;
    }
    s.truncate(bytes);
    while !s.is_char_boundary(s.len()) {
        s.pop();
    }
    s
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let model = args.get(1).ok_or("usage: bench_encode MODEL [TEXT_FILE]")?;
    let t0 = Instant::now();
    let tok = if model.ends_with(".json") {
        Tokenizer::from_tokenizer_json(&std::fs::read_to_string(model)?, None)?
    } else {
        let file = anedvd_gguf::GgufFile::open(model)?;
        Tokenizer::from_gguf_metadata(file.metadata())?
    };
    let load = t0.elapsed();
    let text = match args.get(2) {
        Some(p) => std::fs::read_to_string(p)?,
        None => english(1 << 20),
    };
    let mut best = f64::INFINITY;
    let mut n = 0;
    for _ in 0..3 {
        let t = Instant::now();
        n = tok.encode(&text, true, false)?.len();
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{model}: load {:.3} s; {} bytes -> {n} tokens in {:.3} s ({:.2} MB/s, best of 3)",
        load.as_secs_f64(),
        text.len(),
        best,
        text.len() as f64 / best / 1e6
    );
    Ok(())
}
