//! `anedvd serve`: the OpenAI/Anthropic-compatible HTTP server with its WebUI.

use crate::common::{error_chain, load_engine, BackendArgs, ModelArgs, SamplingArgs, SpecArgs};
use anedvd_engine::scheduler::DraftModel;
use anedvd_engine::Engine;
use anedvd_server::{AppState, ServerConfig};
use anyhow::{Context, Result};
use clap::Args;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `anedvd serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// Address to bind (loopback by default; use 0.0.0.0 to expose it).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 = any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences generated concurrently (slots, each with its own KV cache).
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Context size per slot in tokens (capped at the model's training context).
    #[arg(long, default_value_t = 4096)]
    max_seq: usize,
    /// Requests allowed to wait for a slot; beyond that the server answers 503.
    #[arg(long, default_value_t = 64)]
    queue: usize,
    /// Require this API key (`Authorization: Bearer` or `x-api-key`); repeatable.
    #[arg(long = "api-key", value_name = "KEY")]
    api_keys: Vec<String>,
    /// Allow browser requests from this origin (`*` = any); repeatable.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// Name reported by /v1/models (default: the model's name).
    #[arg(long)]
    alias: Option<String>,
    /// Largest accepted request body in bytes.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    max_body: usize,
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 10)]
    shutdown_grace: u64,
    /// Seconds a request may take from arrival to its last byte (streams
    /// included); past it the generation is cancelled and the client gets
    /// a 504 (or an error event mid-stream). 0 = no limit.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    request_timeout: u64,
    /// Client connections served at once; one more is answered 503 with
    /// Retry-After and closed.
    #[arg(long, default_value_t = 512, value_name = "N")]
    max_connections: usize,
    /// Largest request line plus headers in bytes (431 beyond; at least 8192).
    #[arg(long, default_value_t = 64 * 1024, value_name = "BYTES")]
    max_header_bytes: usize,
    /// Seconds a client has to send a request's headers; also how long an
    /// idle keep-alive connection is kept.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    header_timeout: u64,
    /// Most MiB the slots' KV caches may take together: a --parallel x
    /// --max-seq that could need more is refused at start (default: no
    /// limit; the worst case is printed at start and exported at /metrics).
    #[arg(long, value_name = "MIB")]
    kv_budget: Option<u64>,
    /// MiB of the prefix cache the slots share (0 disables it): the KV
    /// blocks (64 tokens each) of earlier prompts and replies, so a request
    /// that repeats a system prompt or document loads it instead of
    /// prefilling it again. Least recently used blocks are dropped first.
    /// Hits are exported at /metrics. Not counted in --kv-budget.
    #[arg(long, default_value_t = 2048, value_name = "MIB")]
    cache_ram: usize,
    /// How /v1/embeddings pools a text's final hidden states: `mean` over
    /// its tokens or the `last` token's (then scaled to unit length). They
    /// are the loaded model's states, not a trained embedding model's.
    #[arg(long, default_value = "mean", value_name = "mean|last")]
    pooling: anedvd_engine::Pooling,
    /// Tokens a request generates when it sets no max_tokens / n_predict
    /// (llama-server's --n-predict). Default: until EOS or the context's end.
    #[arg(long, short = 'n', value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    n_predict: Option<u64>,
    /// Every (non-streamed) chat reply carries a `__verbose` object with the
    /// prompt the chat template rendered, as llama-server's --verbose; for
    /// debugging templates. One request asks for it with `"verbose": true`.
    #[arg(long)]
    verbose: bool,
    /// Whether reasoning models think: the `enable_thinking` variable every
    /// chat template gets (as llama-server's --reasoning; a request's
    /// `chat_template_kwargs` overrides it). The thinking text is part of the
    /// reply's content (no `reasoning_content` split).
    #[arg(long, default_value = "on", value_name = "on|off")]
    reasoning: Toggle,
    /// Fit requests that outgrow a slot's context instead of refusing them
    /// (off by default, as in llama-server). A chat request (chat
    /// completions, Responses, Anthropic Messages) whose rendered prompt
    /// leaves less than its max_tokens (at most a quarter of the context)
    /// for the reply loses its oldest exchanges, every system message and
    /// the last user message kept; a raw prompt (/v1/completions,
    /// /completion) that fills the context keeps its first `n_keep` tokens
    /// and its end, as llama-server cuts it. The response then carries an
    /// `anedvd-context-shift: messages=M, tokens=T` header (and
    /// `truncated: true` on /completion), a line is logged and
    /// anedvd_context_shifts_total counts it. Without the flag such a
    /// prompt gets the exceed_context_size_error.
    #[arg(long)]
    context_shift: bool,
    /// Default sampling for fields a request leaves out.
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Default speculation for requests without a `speculative` field (a
    /// request may also turn it on, off, or change n and m).
    #[command(flatten)]
    spec: SpecArgs,
}

/// Runs `anedvd serve` until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<()> {
    let sampling = args.sampling.params()?;
    let path = args.model.path()?;
    let model_id = args.alias.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "anedvd".into())
    });
    let config = ServerConfig {
        model_id,
        api_keys: args.api_keys.clone(),
        cors_origins: args.cors_origins.clone(),
        parallel: args.parallel.max(1),
        max_seq: args.max_seq,
        queue_capacity: args.queue,
        max_body_bytes: args.max_body,
        sampling,
        fixed_seed: args.sampling.seed.is_some(),
        speculative: args.spec.params()?,
        request_timeout: (args.request_timeout > 0)
            .then(|| Duration::from_secs(args.request_timeout)),
        max_connections: args.max_connections,
        max_header_bytes: args.max_header_bytes,
        header_timeout: Duration::from_secs(args.header_timeout),
        kv_budget_bytes: args.kv_budget.map(|m| m.saturating_mul(1024 * 1024)),
        cache_ram_bytes: args.cache_ram.saturating_mul(1024 * 1024),
        pooling: args.pooling,
        default_max_tokens: args
            .n_predict
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        verbose_replies: args.verbose,
        thinking: args.reasoning == Toggle::On,
        context_shift: args.context_shift,
    };

    if args.max_connections == 0 {
        anyhow::bail!("--max-connections must be at least 1");
    }
    if args.max_header_bytes < 8192 {
        anyhow::bail!("--max-header-bytes must be at least 8192 (hyper's smallest read buffer)");
    }
    if args.header_timeout == 0 {
        anyhow::bail!("--header-timeout must be at least 1 second");
    }
    init_logging();
    let state = AppState::new(config);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args, state))
}

async fn serve(args: &ServeArgs, state: AppState) -> Result<()> {
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    eprintln!(
        "anedvd: listening on http://{local} (loading the model; /health answers 503 until ready)"
    );

    let loader_state = state.clone();
    let path = args.model.path()?;
    let options = args.model.load_options(&args.backend)?;
    let (spec, model, backend) = (args.spec.clone(), args.model.clone(), args.backend.clone());
    let load = move || -> Result<(Engine, Option<DraftModel>)> {
        let engine = load_engine(&path, &options, true)?;
        let draft = spec
            .load_draft(&model, &backend, true)?
            .map(|d| DraftModel {
                engine: Arc::new(d),
                p_min: spec.draft_p_min,
            });
        Ok((engine, draft))
    };
    std::thread::Builder::new()
        .name("anedvd-load".into())
        .spawn(move || match load() {
            Ok((engine, draft)) => {
                let name = engine.name.clone();
                let secs = engine.load_time.as_secs_f64();
                let per_position = engine.kv_bytes_per_position();
                match loader_state.set_engine(engine, draft) {
                    Ok(()) => {
                        let c = loader_state.config();
                        let positions = loader_state
                            .status()
                            .ok()
                            .flatten()
                            .map_or(c.max_seq, |r| r.max_seq);
                        let kv = (c.parallel * positions * per_position) as f64 / (1024.0 * 1024.0);
                        eprintln!(
                            "anedvd: model {name} ready ({secs:.2} s); KV cache up to {kv:.1} MiB ({} slots x {positions} positions); open http://{local}/",
                            c.parallel
                        )
                    }
                    Err(e) => {
                        eprintln!("anedvd: starting slots failed: {e}");
                        loader_state.set_failed(e.to_string());
                    }
                }
            }
            Err(e) => {
                let message = error_chain(&e);
                eprintln!("anedvd: loading failed: {message}");
                loader_state.set_failed(message);
            }
        })
        .context("spawning the loader thread")?;

    let grace = Duration::from_secs(args.shutdown_grace);
    let shutdown_state = state.clone();
    let shutdown = async move {
        wait_for_signal().await;
        eprintln!(
            "anedvd: shutting down; in-flight requests get {} s",
            grace.as_secs()
        );
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            shutdown_state.cancel_all();
        });
    };
    anedvd_server::serve(listener, state, shutdown)
        .await
        .context("serving")?;
    eprintln!("anedvd: stopped");
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Request events the server logs (a context shift) go to stderr, filtered
/// by `ANEDVD_LOG` (tracing's env-filter syntax; default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ANEDVD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second install (tests) keeps the first.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// An on/off switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Toggle {
    On,
    Off,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn bad_serve_flag_values_are_refused_by_name() {
        for (args, flag) in [
            (&["--n-predict", "0"][..], "--n-predict"),
            // clap reads a negative number as an unknown flag, and says so.
            (&["--n-predict", "-3"][..], "'-3'"),
            (&["--reasoning", "maybe"][..], "--reasoning"),
        ] {
            let err = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .err()
                .unwrap_or_else(|| panic!("{args:?} was accepted"))
                .to_string();
            assert!(err.contains(flag), "{args:?}: {err}");
        }
        let ok = Cli::try_parse_from(["serve", "--n-predict", "64", "--reasoning", "off"]).unwrap();
        assert_eq!(ok.serve.n_predict, Some(64));
        assert_eq!(ok.serve.reasoning, Toggle::Off);
        assert!(
            !ok.serve.context_shift,
            "off by default, as in llama-server"
        );
        let on = Cli::try_parse_from(["serve", "--context-shift"]).unwrap();
        assert!(on.serve.context_shift);
    }
}
