//! Server-sent event streams: turns a slot's events into a dialect's SSE
//! events. Dropping the response (client gone) drops the receiver, which the
//! slot sees as a cancellation at its next token.

use anedvd_engine::scheduler::{Event, Finish, Summary, TokenInfo};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use std::convert::Infallible;
use tokio::sync::mpsc::Receiver;

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

/// An SSE response: `first` events, then the transcoded generation.
pub fn sse_response<T: Transcoder>(
    first: Vec<SseEvent>,
    rx: Receiver<Event>,
    transcoder: T,
) -> Response {
    type St<T> = Option<(Receiver<Event>, T, Option<Vec<SseEvent>>)>;
    let init: St<T> = Some((rx, transcoder, Some(first)));
    let stream = stream::unfold(init, |st| async move {
        let (mut rx, mut t, first) = st?;
        if let Some(f) = first {
            return Some((f, Some((rx, t, None))));
        }
        match rx.recv().await {
            Some(Event::Delta { text, tokens }) => {
                let evs = t.delta(&text, &tokens);
                Some((evs, Some((rx, t, None))))
            }
            Some(Event::Done(s)) if s.finish == Finish::Cancelled => {
                Some((t.error(CANCELLED), None))
            }
            Some(Event::Done(s)) => Some((t.done(&s), None)),
            Some(Event::Error(m)) => Some((t.error(&m), None)),
            None => Some((t.error("the generation ended without a result"), None)),
        }
    })
    .flat_map(|evs| stream::iter(evs.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
