//! Server-sent event streams: turns a slot's events into a dialect's SSE
//! events. Dropping the response (client gone) drops the receiver, which the
//! slot sees as a cancellation at its next token.

use crate::metrics::{Outcome, RequestGuard};
use crate::request::{Generation, Received};
use anedvd_engine::scheduler::{Event, Finish, Summary, TokenInfo};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
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
    struct Live<T> {
        generation: Generation,
        transcoder: T,
        guard: RequestGuard,
    }
    type St<T> = Option<(Live<T>, Option<Vec<SseEvent>>)>;
    let live = Live {
        generation,
        transcoder,
        guard,
    };
    let init: St<T> = Some((live, Some(first)));
    let stream = stream::unfold(init, |st| async move {
        let (mut live, first) = st?;
        if let Some(f) = first {
            return Some((f, Some((live, None))));
        }
        let t = &mut live.transcoder;
        let (events, outcome) = match live.generation.recv().await {
            Received::Event(Event::Delta { text, tokens }) => {
                let evs = t.delta(&text, &tokens);
                return Some((evs, Some((live, None))));
            }
            Received::Event(Event::Done(s)) if s.finish == Finish::Cancelled => {
                (t.error(CANCELLED), Outcome::Errored)
            }
            Received::Event(Event::Done(s)) => (t.done(&s), Outcome::Completed),
            Received::Event(Event::Error(m)) | Received::TimedOut(m) => {
                (t.error(&m), Outcome::Errored)
            }
            Received::Ended => (
                t.error("the generation ended without a result"),
                Outcome::Errored,
            ),
        };
        live.guard.settle(outcome);
        Some((events, None))
    })
    .flat_map(|evs| stream::iter(evs.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
