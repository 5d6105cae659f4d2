//! `anedvd bench`: prompt-processing and generation throughput in the spirit of
//! llama-bench (same test names, same JSON field names).
//!
//! As in llama-bench, prompts are random token ids (after BOS) and generation
//! feeds random ids one at a time, so the figures measure the forward pass,
//! not the sampler. `-d` first fills the context with that many tokens
//! (untimed) and measures the test on top of it. `--parallel N` runs N
//! sequences together through the batched forward pass (as the server does
//! with `--parallel`) and reports their aggregate tokens per second.
//!
//! `--spec ngram|draft --spec-prompt FILE` measures speculative decoding
//! instead: greedy generation of `-n` tokens after the file's text, plain
//! and speculative runs interleaved, with the drafts' acceptance rate and
//! the tokens each verify pass produced (the outputs must be identical).

use crate::common::{BackendArgs, ModelArgs, SpecArgs, Speculation};
use anedvd_engine::speculative::Proposer;
use anedvd_engine::tools::kernels;
use anedvd_engine::{
    generate_speculative, BackendChoice, BatchItem, Engine, EngineBatch, EngineSession,
    GenerateParams, Generation, LogitsMode, SamplingParams,
};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Arguments of `anedvd bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// Prompt lengths to test (prompt processing, "ppN"); 0 skips.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    n_prompt: Vec<usize>,
    /// Generation lengths to test ("tgN"); 0 skips.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    n_gen: Vec<usize>,
    /// Context depths to run each test at ("@ dN").
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    n_depth: Vec<usize>,
    /// Sequences run together in one batched forward pass (aggregate t/s).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    parallel: Vec<usize>,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 5)]
    repetitions: usize,
    /// Print llama-bench's markdown table (the default).
    #[arg(long, conflicts_with = "json")]
    md: bool,
    /// Print a JSON array of results with llama-bench's field names.
    #[arg(long)]
    json: bool,
    /// Skip the warm-up run.
    #[arg(long)]
    no_warmup: bool,
    #[command(flatten)]
    spec: SpecArgs,
    /// With --spec: the prompt text (a workload, e.g. scripts/spec-workloads/copy.txt).
    #[arg(long, value_name = "FILE")]
    spec_prompt: Option<PathBuf>,
}

struct TestResult {
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    n_parallel: usize,
    samples_ns: Vec<u64>,
}

impl TestResult {
    fn tokens(&self) -> usize {
        self.n_parallel * (self.n_prompt + self.n_gen)
    }
    fn samples_ts(&self) -> Vec<f64> {
        self.samples_ns
            .iter()
            .map(|&ns| self.tokens() as f64 * 1e9 / ns.max(1) as f64)
            .collect()
    }
    fn name(&self) -> String {
        let base = if self.n_prompt > 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
        };
        let base = if self.n_parallel > 1 {
            format!("{base} x{}", self.n_parallel)
        } else {
            base
        };
        if self.n_depth > 0 {
            format!("{base} @ d{}", self.n_depth)
        } else {
            base
        }
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// llama-bench's generator is `std::rand()`; any uniform ids will do, ours is
/// a fixed LCG so runs are comparable.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n.max(1) as u64) as u32
    }
}

fn random_tokens(engine: &Engine, rng: &mut Lcg, n: usize, with_bos: bool) -> Vec<u32> {
    let vocab = engine.vocab_size();
    let mut v: Vec<u32> = (0..n).map(|_| rng.next(vocab)).collect();
    if with_bos {
        if let (Some(first), Some(bos)) = (v.first_mut(), engine.tokenizer.bos_id()) {
            *first = bos;
        }
    }
    v
}

fn run_once(
    engine: &Engine,
    session: &mut EngineSession,
    rng: &mut Lcg,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
) -> Result<u64> {
    session.reset();
    if n_depth > 0 {
        let fill = random_tokens(engine, rng, n_depth, true);
        for chunk in fill.chunks(512) {
            session.forward(chunk, LogitsMode::None)?;
        }
    }
    let start = Instant::now();
    if n_prompt > 0 {
        let prompt = random_tokens(engine, rng, n_prompt, n_depth == 0);
        for chunk in prompt.chunks(512) {
            session.forward(chunk, LogitsMode::Last)?;
        }
    }
    if n_gen > 0 {
        let mut token = random_tokens(engine, rng, 1, n_depth == 0)[0];
        for _ in 0..n_gen {
            session.forward(&[token], LogitsMode::Last)?;
            token = rng.next(engine.vocab_size());
        }
    }
    Ok(start.elapsed().as_nanos() as u64)
}

/// [`run_once`] for `batch.n_seqs()` sequences advancing together.
fn run_once_batched(
    engine: &Engine,
    batch: &mut EngineBatch,
    rng: &mut Lcg,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
) -> Result<u64> {
    let n = batch.n_seqs();
    for seq in 0..n {
        batch.truncate(seq, 0);
    }
    let step = |batch: &mut EngineBatch, inputs: &[Vec<u32>], logits: LogitsMode| {
        let items: Vec<BatchItem<'_>> = inputs
            .iter()
            .enumerate()
            .map(|(seq, tokens)| BatchItem {
                seq,
                tokens,
                logits,
            })
            .collect();
        batch.forward(&items).map(|_| ())
    };
    if n_depth > 0 {
        let fill: Vec<Vec<u32>> = (0..n)
            .map(|_| random_tokens(engine, rng, n_depth, true))
            .collect();
        for start in (0..n_depth).step_by(512) {
            let end = (start + 512).min(n_depth);
            let part: Vec<Vec<u32>> = fill.iter().map(|f| f[start..end].to_vec()).collect();
            step(batch, &part, LogitsMode::None)?;
        }
    }
    let start = Instant::now();
    if n_prompt > 0 {
        let prompts: Vec<Vec<u32>> = (0..n)
            .map(|_| random_tokens(engine, rng, n_prompt, n_depth == 0))
            .collect();
        step(batch, &prompts, LogitsMode::Last)?;
    }
    if n_gen > 0 {
        let mut tokens: Vec<Vec<u32>> = (0..n)
            .map(|_| random_tokens(engine, rng, 1, n_depth == 0))
            .collect();
        for _ in 0..n_gen {
            step(batch, &tokens, LogitsMode::Last)?;
            for t in &mut tokens {
                t[0] = rng.next(engine.vocab_size());
            }
        }
    }
    Ok(start.elapsed().as_nanos() as u64)
}

/// Runs `anedvd bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    if args.repetitions == 0 {
        bail!("--repetitions must be at least 1");
    }
    let engine = args.model.load(&args.backend, true)?;
    let speculation = args.spec.resolve(&args.model, &args.backend, true)?;
    if !matches!(speculation, Speculation::Off) {
        return run_spec(args, &engine, &speculation);
    }
    if args.spec_prompt.is_some() {
        bail!("--spec-prompt is for --spec ngram|draft");
    }
    let mut tests = Vec::new();
    for &d in &args.n_depth {
        tests.extend(args.n_prompt.iter().filter(|&&p| p > 0).map(|&p| (p, 0, d)));
        tests.extend(args.n_gen.iter().filter(|&&g| g > 0).map(|&g| (0, g, d)));
    }
    let need = tests.iter().map(|(p, g, d)| p + g + d).max().unwrap_or(0);
    if need > engine.n_ctx_train() {
        bail!(
            "a test needs {need} positions but the model's context is {}",
            engine.n_ctx_train()
        );
    }
    if args.parallel.contains(&0) {
        bail!("--parallel values must be at least 1");
    }
    let mut session = engine.new_session(need.max(1))?;
    let mut rng = Lcg(1234);
    let threads = args.model.threads();
    let mut results = Vec::new();
    for &n_parallel in &args.parallel {
        let mut batch = if n_parallel > 1 {
            Some(engine.new_batch(n_parallel, need.max(1))?)
        } else {
            None
        };
        let mut once = |rng: &mut Lcg, p: usize, g: usize, d: usize| match batch.as_mut() {
            Some(b) => run_once_batched(&engine, b, rng, p, g, d),
            None => run_once(&engine, &mut session, rng, p, g, d),
        };
        for &(n_prompt, n_gen, n_depth) in &tests {
            if !args.no_warmup {
                once(&mut rng, n_prompt.min(32), n_gen.min(4), 0)?;
            }
            let mut samples_ns = Vec::with_capacity(args.repetitions);
            for _ in 0..args.repetitions {
                samples_ns.push(once(&mut rng, n_prompt, n_gen, n_depth)?);
            }
            let r = TestResult {
                n_prompt,
                n_gen,
                n_depth,
                n_parallel,
                samples_ns,
            };
            if !args.json {
                eprintln!("{}: {:.2} t/s", r.name(), mean_sd(&r.samples_ts()).0);
            }
            results.push(r);
        }
    }
    let model_type = model_type(&engine);
    let label = backend_label(args)?;
    if args.json {
        print_json(&engine, &model_type, &label, threads, &results)?;
    } else {
        print_md(&engine, &model_type, &label, threads, &results);
        if args.backend.choice()?.is_ane() {
            print_predicted(args, &results)?;
        }
    }
    Ok(())
}

/// The backend column: `CPU`, or the ANE backend with its variant and path.
fn backend_label(args: &BenchArgs) -> Result<String> {
    let choice = args.backend.choice()?;
    if !choice.is_ane() {
        return Ok("CPU".into());
    }
    let o = args.backend.lowering.options()?;
    let driver = match choice {
        BackendChoice::Ane(d) => format!("+{}", d.name()),
        _ => String::new(),
    };
    Ok(format!(
        "{}{driver} {} {}",
        args.backend.backend,
        o.variant.name(),
        o.path
    ))
}

/// What the cost model (`anedvd kernels`) predicts for each test on an ANE:
/// every pass of at most W columns costs one decode token's programs
/// (columns are nearly free: 128 cost ~1.05× one, ane-evidence.md §b), so
/// N sequences decode in one pass per step and a prompt takes one pass per
/// W tokens of all sequences together. Simulator wall time says nothing
/// about an ANE.
fn print_predicted(args: &BenchArgs, results: &[TestResult]) -> Result<()> {
    let o = args.backend.lowering.options()?;
    let (path, overrides) = (args.model.path_checked()?, args.model.overrides()?);
    let cost = kernels::CostModel::default();
    let plan = kernels::plan(&path, &overrides, &o, &cost)?;
    let Some(v) = plan.variants.first() else {
        return Ok(());
    };
    println!(
        "\npredicted on an ANE (cost model of `anedvd kernels`: {} dispatches, {:.3} ms per pass of W = {} columns; not measured):",
        v.dispatches_per_token, v.per_token_ms, o.width
    );
    println!("| test | passes | predicted ms | predicted t/s |");
    println!("| ---: | ---: | ---: | ---: |");
    for r in results {
        let tokens = r.n_parallel * (r.n_prompt + r.n_gen);
        let passes = if r.n_gen > 0 {
            // one pass per step while every sequence fits W columns
            r.n_gen * r.n_parallel.div_ceil(o.width)
        } else {
            tokens.div_ceil(o.width)
        };
        let ms = passes as f64 * v.per_token_ms;
        println!(
            "| {} | {passes} | {ms:.3} | {:.1} |",
            r.name(),
            tokens as f64 / ms * 1e3
        );
    }
    Ok(())
}

/// One speculative run and its plain twin.
struct SpecSample {
    plain_ts: f64,
    spec: Generation,
}

/// `bench --spec`: plain and speculative greedy generation after the
/// `--spec-prompt` text, interleaved, `-r` times.
fn run_spec(args: &BenchArgs, engine: &Engine, speculation: &Speculation) -> Result<()> {
    let Some(path) = &args.spec_prompt else {
        bail!("--spec needs --spec-prompt FILE (the workload's prompt text)");
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    let prompt = engine.raw_prompt(text.trim_end_matches('\n'))?;
    let n_gen = match args.n_gen.as_slice() {
        [n] if *n > 0 => *n,
        _ => bail!("--spec takes one generation length (-n N)"),
    };
    let max_seq = prompt.len() + n_gen + 1;
    if max_seq > engine.n_ctx_train() {
        bail!(
            "the prompt ({} tokens) and -n {n_gen} need {max_seq} positions; the model's context is {}",
            prompt.len(),
            engine.n_ctx_train()
        );
    }
    let (ngram, mut draft) = speculation.parts(&engine.tokenizer, max_seq)?;
    let params = |spec| GenerateParams {
        max_tokens: n_gen,
        sampling: SamplingParams::greedy(),
        ignore_eos: true,
        top_logprobs: 0,
        speculative: spec,
        ..GenerateParams::default()
    };
    let mut once = |spec: bool| -> Result<Generation> {
        // a fresh session each time: nothing reused from the previous run
        let mut session = engine.new_session(max_seq)?;
        let proposer = if spec {
            draft.as_mut().map(|d| d as &mut dyn Proposer)
        } else {
            None
        };
        let p = params(if spec { ngram } else { None });
        Ok(generate_speculative(
            &mut session,
            &engine.tokenizer,
            &prompt,
            &p,
            proposer,
            |_| ControlFlow::Continue(()),
        )?)
    };
    if !args.no_warmup {
        once(false)?;
        once(true)?;
    }
    let mut samples = Vec::with_capacity(args.repetitions);
    for _ in 0..args.repetitions {
        let plain = once(false)?;
        let spec = once(true)?;
        if spec.tokens != plain.tokens {
            bail!("speculation changed the greedy output (a bug: please report it)");
        }
        samples.push(SpecSample {
            plain_ts: plain.timings.decode_tps(),
            spec,
        });
    }
    let plain: Vec<f64> = samples.iter().map(|s| s.plain_ts).collect();
    let spec: Vec<f64> = samples
        .iter()
        .map(|s| s.spec.timings.decode_tps())
        .collect();
    let t = &samples[0].spec.timings;
    let per_pass = if t.verify_passes == 0 {
        0.0
    } else {
        (t.accepted_tokens + t.verify_passes) as f64 / t.verify_passes as f64
    };
    let (pm, ps) = mean_sd(&plain);
    let (sm, ss) = mean_sd(&spec);
    let kind = args.spec.spec.as_deref().unwrap_or("");
    if args.json {
        let row = json!({
            "model_filename": engine.path.display().to_string(),
            "spec": kind,
            "spec_prompt": path.display().to_string(),
            "n_prompt": prompt.len(),
            "n_gen": n_gen,
            "plain_avg_ts": pm,
            "plain_stddev_ts": ps,
            "spec_avg_ts": sm,
            "spec_stddev_ts": ss,
            "speedup": if pm > 0.0 { sm / pm } else { 0.0 },
            "drafted": t.drafted_tokens,
            "accepted": t.accepted_tokens,
            "acceptance": t.acceptance(),
            "verify_passes": t.verify_passes,
            "tokens_per_pass": per_pass,
            "samples_plain_ts": plain,
            "samples_spec_ts": spec,
        });
        println!("{}", serde_json::to_string_pretty(&row)?);
    } else {
        println!("| test | t/s | acceptance | tokens / verify pass |");
        println!("| ---: | ---: | ---: | ---: |");
        println!("| tg{n_gen} | {pm:.2} ± {ps:.2} | | |");
        println!(
            "| tg{n_gen} --spec {kind} | {sm:.2} ± {ss:.2} | {}/{} ({:.0}%) | {per_pass:.2} |",
            t.accepted_tokens,
            t.drafted_tokens,
            100.0 * t.acceptance()
        );
    }
    Ok(())
}

fn model_type(engine: &Engine) -> String {
    let size = engine.metadata_str("general.size_label").unwrap_or("");
    format!("{} {size}", engine.config.family)
        .trim()
        .to_string()
}

fn print_md(
    engine: &Engine,
    model_type: &str,
    backend: &str,
    threads: usize,
    results: &[TestResult],
) {
    println!("| model | size | params | backend | threads | test | t/s |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let size = engine.weight_bytes() as f64 / (1024.0 * 1024.0);
    let params = engine.n_params() as f64 / 1e6;
    for r in results {
        let (m, sd) = mean_sd(&r.samples_ts());
        println!(
            "| {model_type} | {size:.2} MiB | {params:.2} M | {backend} | {threads} | {} | {m:.2} ± {sd:.2} |",
            r.name()
        );
    }
}

fn print_json(
    engine: &Engine,
    model_type: &str,
    backend: &str,
    threads: usize,
    results: &[TestResult],
) -> Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let rows: Vec<_> = results
        .iter()
        .map(|r| {
            let ts = r.samples_ts();
            let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
            let (avg_ts, sd_ts) = mean_sd(&ts);
            let (avg_ns, sd_ns) = mean_sd(&ns);
            json!({
                "build_commit": env!("CARGO_PKG_VERSION"),
                "build_number": 0,
                "cpu_info": "",
                "gpu_info": "",
                "backends": backend,
                "model_filename": engine.path.display().to_string(),
                "model_type": model_type,
                "model_size": engine.weight_bytes(),
                "model_n_params": engine.n_params(),
                "n_batch": 512,
                "n_ubatch": 512,
                "n_threads": threads,
                "type_k": "f16",
                "type_v": "f16",
                "n_gpu_layers": 0,
                "flash_attn": false,
                "use_mmap": true,
                "embeddings": false,
                "n_prompt": r.n_prompt,
                "n_gen": r.n_gen,
                "n_depth": r.n_depth,
                "n_parallel": r.n_parallel,
                "test_time": now,
                "avg_ns": avg_ns as u64,
                "stddev_ns": sd_ns as u64,
                "avg_ts": avg_ts,
                "stddev_ts": sd_ts,
                "samples_ns": r.samples_ns,
                "samples_ts": ts,
            })
        })
        .collect();
    println!("{}", serde_json::to_string_pretty(&rows)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn bench(extra: &[&str]) -> Result<()> {
        let model = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/models/qwen2/model-f32.gguf"
        );
        let mut argv = vec!["bench", "--model", model, "-t", "1"];
        argv.extend_from_slice(extra);
        run(&Wrap::try_parse_from(argv)?.args)
    }

    #[test]
    fn bad_flags_are_refused_with_their_names() {
        let e = bench(&["--parallel", "2,0", "-p", "4", "-n", "2", "-r", "1"]).unwrap_err();
        assert!(e.to_string().contains("--parallel"), "{e}");
        let e = bench(&["-r", "0"]).unwrap_err();
        assert!(e.to_string().contains("must be at least 1"), "{e}");
        let e = bench(&["-p", "300", "-n", "0", "-r", "1"]).unwrap_err();
        assert!(e.to_string().contains("context"), "{e}");
        // backend options: named in the error, checked before any work
        let chain = |e: anyhow::Error| format!("{e:#}");
        let e = chain(bench(&["--isa", "avx9", "-r", "1"]).unwrap_err());
        assert!(
            e.contains(
                "--isa must be best, avx512, avx2, neon-dotprod, neon or generic, not `avx9`"
            ),
            "{e}"
        );
        let e =
            chain(bench(&["--backend", "ane-sim", "--variant", "both", "-r", "1"]).unwrap_err());
        assert!(
            e.contains("--variant must be `fused`, `split` or `resident`, not `both`"),
            "{e}"
        );
        let e = chain(bench(&["--backend", "ane-sim", "--width", "48", "-r", "1"]).unwrap_err());
        assert!(
            e.contains("width 48 must be a positive multiple of 32"),
            "{e}"
        );
        let e = chain(bench(&["--sliding-window", "x", "-r", "1"]).unwrap_err());
        assert!(e.contains("--sliding-window"), "{e}");
        // speculation: a workload is needed, and sane sizes
        let e = chain(bench(&["--spec", "ngram", "-n", "8", "-r", "1"]).unwrap_err());
        assert!(e.contains("--spec-prompt"), "{e}");
        let e = chain(bench(&["--spec", "ngram", "--spec-m", "0", "-r", "1"]).unwrap_err());
        assert!(e.contains("--spec-m"), "{e}");
        let e = chain(bench(&["--spec", "tree", "-r", "1"]).unwrap_err());
        assert!(e.contains("unknown --spec `tree`"), "{e}");
        let e = chain(bench(&["--spec", "ngram", "--spec-n", "0", "-r", "1"]).unwrap_err());
        assert!(e.contains("--spec-n"), "{e}");
        let e = chain(bench(&["--spec", "draft", "-r", "1"]).unwrap_err());
        assert!(e.contains("--spec draft needs --draft-model"), "{e}");
        let draft = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/models/qwen2/model-q8_0.gguf"
        );
        let e = chain(bench(&["--draft-model", draft, "-r", "1"]).unwrap_err());
        assert!(e.contains("--draft-model is for --spec draft"), "{e}");
        let missing = "/nonexistent/workload.txt";
        let e = chain(
            bench(&[
                "--spec",
                "ngram",
                "--spec-prompt",
                missing,
                "-n",
                "4",
                "-r",
                "1",
            ])
            .unwrap_err(),
        );
        assert!(e.contains("reading /nonexistent/workload.txt"), "{e}");
        // A speculative run on a prompt that repeats itself.
        let prompt = std::env::temp_dir().join(format!("anedvd-spec-{}.txt", std::process::id()));
        std::fs::write(
            &prompt,
            "one two three four five six one two three four five six one two",
        )
        .unwrap();
        let p = prompt.to_string_lossy().to_string();
        let spec = [
            "--spec",
            "ngram",
            "--spec-n",
            "2",
            "--spec-prompt",
            &p,
            "-n",
            "16",
            "-r",
            "2",
        ];
        bench(&spec).unwrap();
        let draft = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/models/qwen2/model-q8_0.gguf"
        );
        let mut drafted = vec!["--spec", "draft", "--draft-model", draft];
        drafted.extend_from_slice(&["--spec-prompt", &p, "-n", "8", "-r", "1"]);
        bench(&drafted).unwrap();
        drafted.extend_from_slice(&["--draft-p-min", "2"]);
        let e = format!("{:#}", bench(&drafted).unwrap_err());
        assert!(e.contains("probability floor 2 is not in 0..=1"), "{e}");
        std::fs::remove_file(&prompt).unwrap();
        // The same model runs batched, with a depth fill.
        bench(&[
            "--parallel",
            "1,3",
            "-p",
            "4",
            "-n",
            "2",
            "-d",
            "0,5",
            "-r",
            "1",
        ])
        .unwrap();
    }

    #[test]
    fn stats_and_names() {
        let (m, sd) = mean_sd(&[1.0, 2.0, 3.0]);
        assert!((m - 2.0).abs() < 1e-12 && (sd - 1.0).abs() < 1e-12);
        let r = TestResult {
            n_prompt: 0,
            n_gen: 128,
            n_depth: 1024,
            n_parallel: 1,
            samples_ns: vec![1_000_000_000],
        };
        assert_eq!(r.name(), "tg128 @ d1024");
        assert_eq!(r.samples_ts(), vec![128.0]);
        let r = TestResult { n_parallel: 4, ..r };
        assert_eq!(r.name(), "tg128 x4 @ d1024");
        assert_eq!(r.samples_ts(), vec![512.0]);
    }
}
