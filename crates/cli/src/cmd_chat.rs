//! `anedvd chat`: an interactive conversation that keeps the KV cache across
//! turns and prefills only what is new. A turn that outgrows the context is
//! refused, or with `--context-shift` makes room by dropping the oldest
//! exchanges ([`plan_turn`]).

use crate::common::{BackendArgs, GrammarArgs, ModelArgs, SamplingArgs, SpecArgs};
use anedvd_chat::shift::{drop_oldest_exchanges, exchange_starts, Fitted};
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
    /// When a turn does not fit the context (the conversation so far, the
    /// new message and room for the reply: -n tokens, at most a quarter of
    /// the context), drop the oldest exchanges until it does, saying so on
    /// stderr; the system message is always kept. Without it such a turn is
    /// refused with the sizes and the conversation is left as it was (/clear
    /// starts over).
    #[arg(long)]
    context_shift: bool,
}

const HELP: &str = "commands:
  /help            this text
  /clear, /reset   forget the conversation (keeps the system message)
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
        let proposer = draft.as_mut().map(|d| d as &mut dyn Proposer);
        // A failed turn leaves the conversation as it was.
        if let Err(e) = turn(
            &engine,
            (&mut session, proposer),
            &params,
            (&system, &mut history, input),
            (max_seq, args.context_shift),
        ) {
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
        "reset" | "clear" => {
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

/// A turn ready to generate: the conversation with the new message (the
/// oldest exchanges dropped when shifting), its prompt and the reply's limit.
#[derive(Debug)]
struct Planned {
    history: Vec<Message>,
    prompt: Vec<u32>,
    /// Exchanges dropped to make room.
    dropped: usize,
    max_tokens: usize,
}

/// Plans the turn that answers `input` after `history` in `max_seq`
/// positions, `render` making the prompt of a conversation (the system
/// message is the caller's: it is never in `history`, so never dropped).
/// The prompt must leave room for the reply: `max_tokens`, at most a quarter
/// of the context. When it does not, `context_shift` drops the oldest
/// exchanges until it does (or nothing is left to drop); without it the
/// turn is refused with the sizes, unless there is nothing to drop (the
/// reply then gets what is left). A prompt that leaves no position at all
/// is refused either way.
fn plan_turn(
    history: &[Message],
    input: &str,
    (max_tokens, max_seq): (usize, usize),
    context_shift: bool,
    mut render: impl FnMut(&[Message]) -> Result<Vec<u32>>,
) -> Result<Planned> {
    let mut messages = history.to_vec();
    messages.push(Message::user(input));
    let room = max_tokens.min(max_seq / 4).max(1);
    let budget = max_seq.saturating_sub(room);
    let fitted = if context_shift {
        drop_oldest_exchanges(&mut messages, budget, render)?
    } else {
        let prompt = render(&messages)?;
        let droppable = exchange_starts(&messages).len() > 1;
        if prompt.len() > budget && droppable {
            bail!(
                "context full: this turn needs {} tokens ({} of conversation and the new message, {room} for the reply) but the context holds {max_seq}; \
                 /clear to start over, or restart with --context-shift to drop the oldest exchanges",
                prompt.len() + room,
                prompt.len()
            );
        }
        Fitted {
            before: prompt.len(),
            fits: prompt.len() <= budget,
            prompt,
            exchanges: 0,
            messages: 0,
        }
    };
    if fitted.prompt.len() >= max_seq {
        bail!(
            "this message alone needs {} tokens; the context holds {max_seq}",
            fitted.prompt.len()
        );
    }
    Ok(Planned {
        history: messages,
        max_tokens: max_tokens.min(max_seq - fitted.prompt.len()),
        prompt: fitted.prompt,
        dropped: fitted.exchanges,
    })
}

/// Answers `input`; `history` gets the message and the reply only when the
/// turn succeeds (and loses the exchanges a context shift dropped).
fn turn(
    engine: &Engine,
    (session, proposer): (&mut EngineSession, Option<&mut dyn Proposer>),
    params: &GenerateParams,
    (system, history, input): (&Option<String>, &mut Vec<Message>, &str),
    (max_seq, context_shift): (usize, bool),
) -> Result<()> {
    let planned = plan_turn(
        history,
        input,
        (params.max_tokens, max_seq),
        context_shift,
        |m| render(engine, system, m),
    )?;
    if planned.dropped > 0 {
        eprintln!(
            "[context full: dropped the {} oldest exchange(s)]",
            planned.dropped
        );
    }
    let prompt = planned.prompt;
    let mut params = params.clone();
    params.max_tokens = planned.max_tokens;
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
    *history = planned.history;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for the template and tokenizer: one id per byte of
    /// `role:text|`, the system message first.
    fn render(system: &str, messages: &[Message]) -> Vec<u32> {
        let mut text = format!("system:{system}|");
        for m in messages {
            text.push_str(&format!("{}:{}|", m.role, m.text()));
        }
        text.bytes().map(u32::from).collect()
    }

    fn text(ids: &[u32]) -> String {
        ids.iter().map(|&b| char::from(b as u8)).collect()
    }

    fn history() -> Vec<Message> {
        vec![
            Message::user("first question"),
            Message::assistant("first answer"),
            Message::user("second question"),
            Message::assistant("second answer"),
        ]
    }

    #[test]
    fn a_turn_that_fits_keeps_the_whole_conversation() -> Result<()> {
        let p = plan_turn(&history(), "third", (16, 1000), false, |m| {
            Ok(render("S", m))
        })?;
        assert_eq!(p.dropped, 0);
        assert_eq!(p.history.len(), 5);
        assert_eq!(p.max_tokens, 16);
        assert!(text(&p.prompt).starts_with("system:S|user:first question|"));
        Ok(())
    }

    #[test]
    fn without_context_shift_a_full_context_is_refused_with_the_sizes() {
        let full = render("S", &history()).len() + "|user:third".len() + 8;
        let err = plan_turn(&history(), "third", (16, full), false, |m| {
            Ok(render("S", m))
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        let needed = render("S", &[history(), vec![Message::user("third")]].concat()).len() + 16;
        assert!(err.contains("context full"), "{err}");
        assert!(err.contains(&format!("needs {needed} tokens")), "{err}");
        assert!(err.contains(&format!("holds {full}")), "{err}");
        assert!(
            err.contains("/clear") && err.contains("--context-shift"),
            "{err}"
        );
    }

    #[test]
    fn context_shift_drops_the_oldest_exchange_and_keeps_the_system_message() -> Result<()> {
        let full = render("S", &history()).len() + "|user:third".len() + 8;
        let h = history();
        let p = plan_turn(&h, "third", (16, full), true, |m| Ok(render("S", m)))?;
        assert_eq!(p.dropped, 1);
        let kept: Vec<String> = p.history.iter().map(Message::text).collect();
        assert_eq!(kept, ["second question", "second answer", "third"]);
        let prompt = text(&p.prompt);
        assert!(
            prompt.starts_with("system:S|user:second question|"),
            "{prompt}"
        );
        assert!(!prompt.contains("first"), "{prompt}");
        assert!(p.prompt.len() + 16 <= full);
        // The history handed in is not touched: the caller commits on success.
        assert_eq!(h, history());
        Ok(())
    }

    #[test]
    fn a_message_that_cannot_fit_is_refused_either_way() {
        for shift in [false, true] {
            let err = plan_turn(&history(), &"x".repeat(300), (16, 200), shift, |m| {
                Ok(render("S", m))
            })
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
            let want = if shift {
                "this message alone needs"
            } else {
                "context full"
            };
            assert!(err.contains(want), "shift {shift}: {err}");
        }
    }

    #[test]
    fn with_nothing_to_drop_the_reply_gets_what_is_left() -> Result<()> {
        let alone = render("S", &[Message::user("hello")]).len();
        let p = plan_turn(&[], "hello", (64, alone + 5), false, |m| Ok(render("S", m)))?;
        assert_eq!((p.dropped, p.max_tokens), (0, 5));
        Ok(())
    }

    #[test]
    fn a_render_error_is_reported() {
        let r = plan_turn(&history(), "third", (16, 1000), true, |_| {
            anyhow::bail!("template failed")
        });
        assert!(r.is_err());
    }
}
