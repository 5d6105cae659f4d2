//! The `anedvd` command-line tool: thin subcommands over the engine.

mod cmd_ane;
mod cmd_bench;
mod cmd_chat;
mod cmd_inspect;
mod cmd_ops;
mod cmd_pull;
mod cmd_run;
mod cmd_serve;
mod cmd_tokenize;
mod cmd_verify;
mod common;

use clap::{Parser, Subcommand};

/// anedvd: run LLMs locally. GGUF and Hugging Face models on a fast CPU
/// backend; an Apple Neural Engine backend that writes its own MIL programs
/// (verified here by an fp16 simulator; not yet run on real hardware).
///
/// Start with `anedvd run --prompt "..."` (uses the default model fetched by
/// scripts/fetch-model.sh), `anedvd chat`, or `anedvd serve`; `anedvd pull
/// ORG/REPO[:QUANT]` or `--model hf://ORG/REPO[:FILE]` fetch models from the
/// Hugging Face hub.
#[derive(Debug, Parser)]
#[command(name = "anedvd", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text from a prompt (streams to stdout, stats to stderr).
    Run(cmd_run::RunArgs),
    /// Chat interactively; the KV cache is kept across turns.
    Chat(cmd_chat::ChatArgs),
    /// Serve an OpenAI- and Anthropic-compatible HTTP API and a web UI.
    Serve(cmd_serve::ServeArgs),
    /// Measure prompt and generation throughput (llama-bench compatible output).
    Bench(cmd_bench::BenchArgs),
    /// Download a model from the Hugging Face hub into its cache; prints the path.
    #[command(long_about = cmd_pull::LONG_ABOUT)]
    Pull(cmd_pull::PullArgs),
    /// Show a model file's metadata, tensors and summaries (like gguf-dump).
    Inspect(cmd_inspect::InspectArgs),
    /// Tokenize text with a model's tokenizer (JSON array of ids).
    Tokenize(cmd_tokenize::TokenizeArgs),
    /// Turn token ids back into text.
    Detokenize(cmd_tokenize::DetokenizeArgs),
    /// Compare a backend (ane-sim, or ane with --driver sim|ane) with the CPU reference.
    Verify(cmd_verify::VerifyArgs),
    /// Compare every ANE kernel of layer 0 with a CPU matmul.
    Check(cmd_verify::CheckArgs),
    /// List the ANE programs of a model with a predicted time per token.
    Kernels(cmd_verify::KernelsArgs),
    /// Build a tiny random transformer and compare ane-sim with the CPU.
    Selftest(cmd_verify::SelftestArgs),
    /// What the hardware evidence says about each MIL op on each ANE runtime path.
    Ops(cmd_ops::OpsArgs),
    /// Report whether the Apple Neural Engine is reachable, and why not.
    Info(cmd_ane::InfoArgs),
    /// Compile and run a 1x1-conv matmul on the ANE and compare with the CPU.
    Probe(cmd_ane::ProbeArgs),
    /// Measure ANE cost against activation width.
    Width(cmd_ane::WidthArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Rust starts a program with SIGPIPE ignored, so a `println!` to a
    // closed stdout (`anedvd kernels | head`) panics. The one-shot commands
    // take the Unix default instead and end quietly when their reader goes,
    // as `cat` does. `serve` keeps it ignored: a closed client socket must
    // fail that write (EPIPE), not end the server.
    if !matches!(cli.command, Command::Serve(_)) {
        sigpipe::reset();
    }
    let result = match &cli.command {
        Command::Run(a) => cmd_run::run(a),
        Command::Chat(a) => cmd_chat::run(a),
        Command::Serve(a) => cmd_serve::run(a),
        Command::Bench(a) => cmd_bench::run(a),
        Command::Pull(a) => cmd_pull::run(a),
        Command::Inspect(a) => cmd_inspect::run(a),
        Command::Tokenize(a) => cmd_tokenize::run_tokenize(a),
        Command::Detokenize(a) => cmd_tokenize::run_detokenize(a),
        Command::Verify(a) => cmd_verify::run_verify(a),
        Command::Check(a) => cmd_verify::run_check(a),
        Command::Kernels(a) => cmd_verify::run_kernels(a),
        Command::Selftest(a) => cmd_verify::run_selftest(a),
        Command::Ops(a) => cmd_ops::run(a),
        Command::Info(a) => cmd_ane::run_info(a),
        Command::Probe(a) => cmd_ane::run_probe(a),
        Command::Width(a) => cmd_ane::run_width(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", common::error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_subcommand_definition_is_valid() {
        // Catches duplicate flags between flattened argument groups.
        <super::Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn error_chain_drops_quoted_causes() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(inner)
            .context("x.gguf: no such file")
            .context("loading x.gguf");
        assert_eq!(
            crate::common::error_chain(&e),
            "loading x.gguf: x.gguf: no such file"
        );
    }
}
