//! `anedvd chat`: an interactive conversation that keeps the KV cache across
//! turns and prefills only what is new.

use crate::common::{BackendArgs, GrammarArgs, ModelArgs, SamplingArgs, SpecArgs};
use anedvd_engine::speculative::Proposer;
use anedvd_engine::stats::{current_rss_bytes, format_bytes};
use anedvd_engine::{
    generate_speculative, Engine, EngineSession, GenerateParams, Message, TemplateOrigin,
};
use anyhow::{bail, Result};
use clap::Args;
use std::io::{BufRead, Write};
use std::ops::ControlFlow;

/// Arguments of `anedvd chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    backend: BackendArgs,
    /// System message for the conversation.
    #[arg(long)]
    system: Option<String>,
    /// Maximum tokens per reply.
    #[arg(short = 'n', long, default_value_t = 512)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    spec: SpecArgs,
    /// Every reply is kept inside this grammar or schema.
    #[command(flatten)]
    grammar: GrammarArgs,
    /// Context size in tokens for the whole conversation.
    #[arg(long, default_value_t = 4096)]
    max_seq: usize,
}

const HELP: &str = "commands:
  /help            this text
  /reset           forget the conversation (keeps the system message)
  /system [TEXT]   set (or clear) the system message and reset
  /temp T          set the temperature (0 = greedy)
  /topp P          set top-p
  /rep R           set the repetition penalty
  /exit            quit (also Ctrl-D)";

/// Runs `anedvd chat`.
pub fn run(args: &ChatArgs) -> Result<()> {
    let speculation = args.spec.resolve(&args.model, &args.backend, false)?;
    let mut params = GenerateParams {
        max_tokens: args.max_tokens,
        sampling: args.sampling.params()?,
        ..Default::default()
    };
    let engine = args.model.load(&args.backend, false)?;
    params.grammar = args.grammar.compile(&engine)?;
    let Some((_, origin)) = &engine.template else {
        bail!(
            "{} has no chat template and no built-in one matches it; use `anedvd run`",
            engine.name
        );
    };
    let max_seq = args.max_seq.min(engine.n_ctx_train().max(1));
    let mut session = engine.new_session(max_seq)?;
    let (ngram, mut draft) = speculation.parts(&engine.tokenizer, max_seq)?;
    params.speculative = ngram;
    let template_note = match origin {
        TemplateOrigin::File => "the model's own template".to_string(),
        TemplateOrigin::Builtin(name) => format!("built-in `{name}` template"),
        TemplateOrigin::Given(from) => format!("the template from {from}"),
    };
    eprintln!(
        "{} · {} · context {max_seq} · /help for commands",
        engine.name, template_note
    );
    if !engine.is_chat_model() {
        eprintln!("note: this looks like a base model (not instruction-tuned); replies may ramble");
    }
    let mut system = args.system.clone();
    let mut history: Vec<Message> = Vec::new();
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            eprintln!();
            return Ok(());
        }
        let input = line.trim_end_matches(['\n', '\r']);
        if input.trim().is_empty() {
            continue;
        }
        if let Some(cmd) = input.strip_prefix('/') {
            match command(cmd, &mut params, &mut system, &mut history, &mut session) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(msg) => eprintln!("{msg}"),
            }
            continue;
        }
        history.push(Message::user(input));
        let proposer = draft.as_mut().map(|d| d as &mut dyn Proposer);
        if let Err(e) = turn(
            &engine,
            (&mut session, proposer),
            &params,
            &system,
            &mut history,
            max_seq,
        ) {
            history.pop();
            eprintln!("error: {e:#}");
        }
    }
}

/// Handles a `/command`; `Ok(true)` means quit.
fn command(
    cmd: &str,
    params: &mut GenerateParams,
    system: &mut Option<String>,
    history: &mut Vec<Message>,
    session: &mut EngineSession,
) -> Result<bool, String> {
    let (name, arg) = cmd
        .split_once(' ')
        .map(|(a, b)| (a, b.trim()))
        .unwrap_or((cmd, ""));
    let number = |what: &str| -> Result<f32, String> {
        arg.parse::<f32>()
            .map_err(|_| format!("/{what} needs a number, e.g. /{what} 0.7"))
    };
    let s = &mut params.sampling;
    match name {
        "help" => eprintln!("{HELP}"),
        "exit" | "quit" => return Ok(true),
        "reset" => {
            history.clear();
            session.reset();
            eprintln!("conversation reset");
        }
        "system" => {
            *system = (!arg.is_empty()).then(|| arg.to_string());
            history.clear();
            session.reset();
            eprintln!(
                "system message {}; conversation reset",
                if arg.is_empty() { "cleared" } else { "set" }
            );
        }
        "temp" => s.temperature = number("temp")?,
        "topp" => s.top_p = number("topp")?,
        "rep" => s.repeat_penalty = number("rep")?,
        other => return Err(format!("unknown command /{other}; /help lists them")),
    }
    s.validate()?;
    Ok(false)
}

fn render(engine: &Engine, system: &Option<String>, history: &[Message]) -> Result<Vec<u32>> {
    let mut messages = Vec::with_capacity(history.len() + 1);
    if let Some(s) = system {
        messages.push(Message::system(s.clone()));
    }
    messages.extend_from_slice(history);
    Ok(engine.chat_prompt(&messages)?)
}

fn turn(
    engine: &Engine,
    (session, proposer): (&mut EngineSession, Option<&mut dyn Proposer>),
    params: &GenerateParams,
    system: &Option<String>,
    history: &mut Vec<Message>,
    max_seq: usize,
) -> Result<()> {
    let mut prompt = render(engine, system, history)?;
    // Drop the oldest exchanges until the prompt leaves room for a reply; say so.
    let room = params.max_tokens.min(max_seq / 4).max(1);
    let mut dropped_turns = 0;
    while prompt.len() + room > max_seq && history.len() > 1 {
        history.drain(..2.min(history.len() - 1));
        dropped_turns += 1;
        prompt = render(engine, system, history)?;
    }
    if dropped_turns > 0 {
        eprintln!("[context full: dropped the {dropped_turns} oldest exchange(s)]");
    }
    if prompt.len() >= max_seq {
        bail!(
            "this message alone needs {} tokens; the context holds {max_seq}",
            prompt.len()
        );
    }
    let mut params = params.clone();
    params.max_tokens = params.max_tokens.min(max_seq - prompt.len());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let g = generate_speculative(
        session,
        &engine.tokenizer,
        &prompt,
        &params,
        proposer,
        |ev| {
            let _ = out.write_all(ev.text.as_bytes()).and_then(|_| out.flush());
            ControlFlow::Continue(())
        },
    )?;
    let _ = writeln!(out);
    history.push(Message::assistant(g.text.trim()));
    let t = &g.timings;
    let rss = current_rss_bytes()
        .map(format_bytes)
        .unwrap_or_else(|| "n/a".into());
    eprintln!(
        "[prefill {} tok ({} reused) {:.1} tok/s · decode {} tok {:.1} tok/s · context {}/{} · {} · RSS {}]",
        t.prefill_tokens,
        t.reused_tokens,
        t.prefill_tps(),
        g.tokens.len(),
        t.decode_tps(),
        session.position(),
        max_seq,
        g.finish_reason.as_str(),
        rss
    );
    Ok(())
}
