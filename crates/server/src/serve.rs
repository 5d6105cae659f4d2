//! The accept loop: HTTP/1.1 connections served by hyper with the server's
//! connection limits (axum's own `serve` exposes none of them).
//!
//! - At most `max_connections` connections are served at once; one more is
//!   answered `503` with `Retry-After` in the dialect of the path it asked
//!   for, then closed.
//! - A request's line and headers are capped at `max_header_bytes` (hyper
//!   answers `431` beyond) and must arrive within `header_timeout`, which is
//!   also how long an idle keep-alive connection is held.
//! - On shutdown the listener closes, connections finish the request they
//!   are serving (streams included) and then close.

use crate::error::{ApiError, Dialect, ErrorKind};
use crate::{router, AppState};
use axum::body::Body;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// Headers a request may carry (hyper's default is 100).
const MAX_HEADERS: usize = 128;

/// How long a refused connection gets to send its request line (read only
/// to pick the dialect of the 503) before it is answered anyway.
const REFUSAL_READ: Duration = Duration::from_millis(500);

/// Serves `state`'s routes on `listener` until `shutdown` completes, then
/// waits for open connections to finish what they are serving.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let config = state.config().clone();
    let app = router(state);
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .max_headers(MAX_HEADERS)
        // hyper's read buffer must hold the headers and cannot go below 8 KiB.
        .max_buf_size(config.max_header_bytes.max(8192))
        .max_header_size(config.max_header_bytes);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                // Out of file descriptors and the like: the connection is
                // lost, the server is not; back off a moment.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, config.max_connections));
            continue;
        };
        let service = app
            .clone()
            .map_request(|req: Request<Incoming>| req.map(Body::new));
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A connection's errors (reset, timeout, malformed request) end
            // that connection only.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Answers a connection over the limit with a 503 (the dialect picked from
/// its request line when that arrives quickly) and closes it.
async fn refuse(mut stream: TcpStream, limit: usize) {
    let mut head = [0u8; 256];
    let n = tokio::time::timeout(REFUSAL_READ, stream.read(&mut head))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    let line = String::from_utf8_lossy(&head[..n]);
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let error = ApiError::new(
        Dialect::of_path(path),
        ErrorKind::Overloaded,
        format!(
            "the server is at its limit of {limit} connections (--max-connections); retry later"
        ),
    );
    let body = error.body().to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        crate::error::RETRY_AFTER_SECS,
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}
