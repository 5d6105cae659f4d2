//! The `anedvd` command-line tool: thin subcommands over the engine.

mod cmd_bench;
mod cmd_chat;
mod cmd_inspect;
mod cmd_run;
mod common;

use clap::{Parser, Subcommand};

/// anedvd: run LLMs locally — GGUF and Hugging Face models on a fast CPU
/// backend, with an Apple Neural Engine backend in the works.
#[derive(Debug, Parser)]
#[command(name = "anedvd", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Generate text from a prompt (streams to stdout, stats to stderr).
    Run(cmd_run::RunArgs),
    /// Measure prompt and generation throughput (llama-bench compatible output).
    Bench(cmd_bench::BenchArgs),
    /// Show a model file's metadata, tensors and summaries (like gguf-dump).
    Inspect(cmd_inspect::InspectArgs),
    /// Chat interactively; the KV cache is kept across turns.
    Chat(cmd_chat::ChatArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(a) => cmd_run::run(a),
        Command::Chat(a) => cmd_chat::run(a),
        Command::Bench(a) => cmd_bench::run(a),
        Command::Inspect(a) => cmd_inspect::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
