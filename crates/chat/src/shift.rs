//! Context shift for conversations: dropping the oldest exchanges until the
//! rendered prompt fits a token budget, keeping every system message and the
//! turn being answered.
//!
//! An *exchange* starts at a `user` message and runs up to the next one (the
//! assistant's reply, its tool calls and their results go with it); a
//! conversation that opens with another role before its first `user`
//! message has that opening as its first exchange. `system` and `developer`
//! messages are never dropped, wherever they stand, and neither is the last
//! `user` message nor anything after it (an assistant prefill, the calls and
//! results of the turn in progress). Dropping whole exchanges keeps the
//! user/assistant alternation templates insist on.
//!
//! The caller renders: this module knows messages, not templates or tokens.

use crate::Message;

/// What [`drop_oldest_exchanges`] kept and rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// The rendering of the messages kept (the caller's prompt ids).
    pub prompt: Vec<u32>,
    /// The length of the whole conversation's rendering (before any drop).
    pub before: usize,
    /// Whole exchanges dropped, oldest first.
    pub exchanges: usize,
    /// Messages dropped (those exchanges' messages).
    pub messages: usize,
    /// Whether `prompt` fits the budget; `false` when even dropping every
    /// exchange that may be dropped leaves it too long.
    pub fits: bool,
}

/// Whether a message of `role` is always kept (`system`, `developer`).
pub fn is_pinned(role: &str) -> bool {
    role == "system" || role == "developer"
}

/// Where each droppable exchange of `messages` starts, oldest first, followed
/// by the index of the first message that is never dropped (the last `user`
/// message). Empty when nothing may be dropped; otherwise exchange `k` is the
/// unpinned messages in `starts[k]..starts[k + 1]`.
pub fn exchange_starts(messages: &[Message]) -> Vec<usize> {
    let last_user = messages.iter().rposition(|m| m.role == "user");
    // Without a user message the last unpinned message is the turn in progress.
    let Some(tail) = last_user.or_else(|| messages.iter().rposition(|m| !is_pinned(&m.role)))
    else {
        return Vec::new();
    };
    let mut starts = Vec::new();
    for (i, m) in messages[..tail].iter().enumerate() {
        if is_pinned(&m.role) {
            continue;
        }
        if starts.is_empty() || m.role == "user" {
            starts.push(i);
        }
    }
    if !starts.is_empty() {
        starts.push(tail);
    }
    starts
}

/// Renders `messages` and, while the prompt is longer than `budget` tokens,
/// drops the oldest whole exchanges (see the module doc for what is kept);
/// `messages` is left holding what was kept. The fewest exchanges that make
/// it fit are found by bisection (a few renders however long the
/// conversation), which assumes a shorter conversation never renders longer.
/// An error of `render` is returned as is, with `messages` unchanged.
pub fn drop_oldest_exchanges<E>(
    messages: &mut Vec<Message>,
    budget: usize,
    mut render: impl FnMut(&[Message]) -> Result<Vec<u32>, E>,
) -> Result<Fitted, E> {
    let prompt = render(messages)?;
    let starts = exchange_starts(messages);
    let before = prompt.len();
    if before <= budget || starts.len() < 2 {
        return Ok(Fitted {
            fits: before <= budget,
            before,
            prompt,
            exchanges: 0,
            messages: 0,
        });
    }
    let n = starts.len() - 1;
    // The conversation without its `k` oldest exchanges.
    let without = |k: usize| -> Vec<Message> {
        messages
            .iter()
            .enumerate()
            .filter(|(i, m)| *i >= starts[k] || is_pinned(&m.role))
            .map(|(_, m)| m.clone())
            .collect()
    };
    // Bisect for the fewest exchanges (1..=n) whose dropping makes it fit.
    let (mut lo, mut hi) = (1, n);
    let mut best: Option<(usize, Vec<Message>, Vec<u32>)> = None;
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        let kept = without(mid);
        let prompt = render(&kept)?;
        if prompt.len() <= budget {
            best = Some((mid, kept, prompt));
            hi = mid - 1;
        } else {
            lo = mid + 1;
        }
    }
    let (k, kept, prompt, fits) = match best {
        Some((k, kept, prompt)) => (k, kept, prompt, true),
        None => {
            let kept = without(n);
            let prompt = render(&kept)?;
            (n, kept, prompt, false)
        }
    };
    let dropped = messages.len() - kept.len();
    *messages = kept;
    Ok(Fitted {
        prompt,
        before,
        exchanges: k,
        messages: dropped,
        fits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// One "token" per byte of `role:text|` per message: a render whose
    /// length is easy to reason about.
    fn render(messages: &[Message]) -> Result<Vec<u32>, Infallible> {
        let text: String = messages
            .iter()
            .map(|m| format!("{}:{}|", m.role, m.text()))
            .collect();
        Ok(text.bytes().map(u32::from).collect())
    }

    fn len(messages: &[Message]) -> usize {
        render(messages).map(|p| p.len()).unwrap_or(0)
    }

    fn texts(messages: &[Message]) -> Vec<String> {
        messages.iter().map(Message::text).collect()
    }

    fn chat() -> Vec<Message> {
        vec![
            Message::system("S"),
            Message::user("u1"),
            Message::assistant("a1"),
            Message::user("u2"),
            Message::assistant("a2"),
            Message::user("u3"),
            Message::assistant("a3"),
            Message::user("u4"),
        ]
    }

    #[test]
    fn a_prompt_that_fits_is_left_alone() -> Result<(), Infallible> {
        let mut m = chat();
        let f = drop_oldest_exchanges(&mut m, 1000, render)?;
        assert_eq!((f.exchanges, f.messages, f.fits), (0, 0, true));
        assert_eq!(m, chat());
        assert_eq!(f.prompt, render(&chat())?);
        Ok(())
    }

    #[test]
    fn the_oldest_exchanges_go_first_and_the_system_prompt_stays() -> Result<(), Infallible> {
        let mut m = chat();
        // Room for the system message, two exchanges and the last question.
        let budget = len(&chat()) - len(&chat()[1..3]);
        let f = drop_oldest_exchanges(&mut m, budget, render)?;
        assert_eq!((f.exchanges, f.messages, f.fits), (1, 2, true));
        assert_eq!(texts(&m), ["S", "u2", "a2", "u3", "a3", "u4"]);
        assert_eq!((f.before, f.prompt.len()), (len(&chat()), budget));
        assert_eq!(f.prompt, render(&m)?);
        // The fewest exchanges: one byte less needs a second one dropped.
        let mut m = chat();
        let f = drop_oldest_exchanges(&mut m, budget - 1, render)?;
        assert_eq!((f.exchanges, f.messages), (2, 4));
        assert_eq!(texts(&m), ["S", "u3", "a3", "u4"]);
        Ok(())
    }

    #[test]
    fn the_last_user_message_and_what_follows_it_are_never_dropped() -> Result<(), Infallible> {
        let mut m = chat();
        m.push(Message::assistant("prefill"));
        let f = drop_oldest_exchanges(&mut m, 1, render)?;
        assert!(!f.fits);
        assert_eq!((f.exchanges, f.messages), (3, 6));
        assert_eq!(texts(&m), ["S", "u4", "prefill"]);
        assert_eq!(f.prompt, render(&m)?);
        Ok(())
    }

    #[test]
    fn pinned_messages_anywhere_are_kept_and_tool_turns_go_whole() -> Result<(), Infallible> {
        let mut call = Message::assistant("");
        call.content = None;
        let mut m = vec![
            Message::assistant("greeting"),
            Message::user("u1"),
            call,
            Message::tool("c1", "result"),
            Message::new("developer", "D"),
            Message::assistant("a1"),
            Message::user("u2"),
        ];
        assert_eq!(exchange_starts(&m), [0, 1, 6]);
        let f = drop_oldest_exchanges(&mut m, 1, render)?;
        assert_eq!((f.exchanges, f.messages, f.fits), (2, 5, false));
        assert_eq!(texts(&m), ["D", "u2"]);
        Ok(())
    }

    #[test]
    fn nothing_to_drop() -> Result<(), Infallible> {
        assert!(exchange_starts(&[]).is_empty());
        assert!(exchange_starts(&[Message::system("S"), Message::user("u")]).is_empty());
        // Without a user message the last unpinned one is kept.
        let only = [
            Message::system("S"),
            Message::assistant("a"),
            Message::assistant("b"),
        ];
        assert_eq!(exchange_starts(&only), [1, 2]);
        let mut m = vec![Message::system("S"), Message::user("long question")];
        let f = drop_oldest_exchanges(&mut m, 3, render)?;
        assert_eq!((f.exchanges, f.messages, f.fits), (0, 0, false));
        assert_eq!(m.len(), 2);
        Ok(())
    }

    #[test]
    fn a_render_error_leaves_the_conversation_as_it_was() {
        let mut m = chat();
        let mut calls = 0;
        let r = drop_oldest_exchanges(&mut m, 1, |x| {
            calls += 1;
            if calls > 1 {
                Err("template failed")
            } else {
                Ok(vec![0; x.len() * 10])
            }
        });
        assert_eq!(r, Err("template failed"));
        assert_eq!(m, chat());
    }
}
