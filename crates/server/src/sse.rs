//! Server-sent event streams: turns a slot's events into a dialect's SSE
//! events. Dropping the response (client gone) drops the receiver, which the
//! slot sees as a cancellation at its next token.

use crate::metrics::{Outcome, RequestGuard};
use crate::request::{Generation, Received};
use anedvd_engine::scheduler::{Event, Finish, Summary, TokenInfo};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, StreamExt};
use std::convert::Infallible;

/// Told to a client whose generation was cancelled under it (server shutdown);
/// a client that disconnected is not told anything.
pub const CANCELLED: &str = "the generation was cancelled: the server is shutting down";

/// Turns generation events into SSE events for one dialect.
pub trait Transcoder: Send + 'static {
    /// Events for new text.
    fn delta(&mut self, text: &str, tokens: &[TokenInfo]) -> Vec<SseEvent>;
    /// Closing events.
    fn done(&mut self, summary: &Summary) -> Vec<SseEvent>;
    /// Closing events of one choice of several (`n` > 1): what [`Self::done`]
    /// sends for this choice alone (by default all of it). `choice_done`
    /// then `all_done` of one summary must be what `done` sends: a single
    /// generation streams that way.
    fn choice_done(&mut self, summary: &Summary) -> Vec<SseEvent> {
        self.done(summary)
    }
    /// What ends a stream of several choices once every one is done (usage
    /// over all of them, an end marker).
    fn all_done(&mut self, summaries: &[Summary]) -> Vec<SseEvent> {
        let _ = summaries;
        Vec::new()
    }
    /// An error event (mid-stream failure).
    fn error(&mut self, message: &str) -> Vec<SseEvent>;
}

/// A JSON data event, optionally named.
pub fn json_event(name: Option<&str>, data: &serde_json::Value) -> SseEvent {
    let ev = SseEvent::default().data(data.to_string());
    match name {
        Some(n) => ev.event(n),
        None => ev,
    }
}

/// An SSE response: `first` events, then the transcoded generation. The
/// request's `guard` settles when the stream ends (completed or errored),
/// or as cancelled when the client drops the stream first.
pub fn sse_response<T: Transcoder>(
    first: Vec<SseEvent>,
    generation: Generation,
    transcoder: T,
    guard: RequestGuard,
) -> Response {
    // One choice: its `choice_done` then `all_done` are what `done` sends.
    sse_response_choices(first, vec![generation], vec![transcoder], guard)
}

/// An SSE response over several choices of one request (`n` > 1): `first`
/// events, then every choice's events as they come, each through its own
/// transcoder (built for its index); once all are done, the first
/// transcoder's [`Transcoder::all_done`]. An error in any choice ends the
/// stream (dropping the others cancels them).
pub fn sse_response_choices<T: Transcoder>(
    first: Vec<SseEvent>,
    generations: Vec<Generation>,
    transcoders: Vec<T>,
    guard: RequestGuard,
) -> Response {
    let n = generations.len();
    let tagged: Vec<BoxStream<'static, (usize, Received)>> = generations
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            stream::unfold(Some(g), move |g| async move {
                let mut g = g?;
                let r = g.recv().await;
                let last = !matches!(r, Received::Event(Event::Delta { .. }));
                Some(((i, r), (!last).then_some(g)))
            })
            .boxed()
        })
        .collect();
    struct Merged<T> {
        events: stream::SelectAll<BoxStream<'static, (usize, Received)>>,
        transcoders: Vec<T>,
        summaries: Vec<Option<Summary>>,
        guard: RequestGuard,
    }
    let merged = Merged {
        events: stream::select_all(tagged),
        transcoders,
        summaries: vec![None; n],
        guard,
    };
    let init = Some((merged, Some(first)));
    let stream = stream::unfold(init, |st| async move {
        let (mut m, first) = st?;
        if let Some(f) = first {
            return Some((f, Some((m, None))));
        }
        let Some((i, received)) = m.events.next().await else {
            // Every choice ended with its summary before this point.
            return None;
        };
        let t = &mut m.transcoders[i];
        let (events, outcome) = match received {
            Received::Event(Event::Delta { text, tokens }) => {
                return Some((t.delta(&text, &tokens), Some((m, None))));
            }
            Received::Event(Event::Done(s)) if s.finish == Finish::Cancelled => {
                (t.error(CANCELLED), Outcome::Errored)
            }
            Received::Event(Event::Done(s)) => {
                let mut evs = t.choice_done(&s);
                m.summaries[i] = Some(s);
                if m.summaries.iter().any(Option::is_none) {
                    return Some((evs, Some((m, None))));
                }
                let all: Vec<Summary> = m.summaries.iter().flatten().cloned().collect();
                evs.extend(m.transcoders[0].all_done(&all));
                (evs, Outcome::Completed)
            }
            Received::Event(Event::Error(msg)) | Received::TimedOut(msg) => {
                (t.error(&msg), Outcome::Errored)
            }
            Received::Ended => (
                t.error("the generation ended without a result"),
                Outcome::Errored,
            ),
        };
        m.guard.settle(outcome);
        Some((events, None))
    })
    .flat_map(|evs| stream::iter(evs.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
