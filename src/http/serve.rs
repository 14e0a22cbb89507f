//! The accept loop: the server's own, because `axum::serve` installs no timer
//! (so a header timeout set through it is inert) and accepts without bound.
//!
//! Each accepted connection holds one of `max_connections` permits until it
//! closes; at the cap the loop stops accepting (new connections wait in the
//! kernel's backlog) and says so once a minute. HTTP/1 with hyper's timer:
//! a request's headers must arrive within `header_read_timeout`, and hyper
//! runs the same timer while a kept-alive connection waits for its next
//! request, so an idle connection is closed after that long too. Event
//! streams and long polls are requests in flight, not idle: they count under
//! the cap and are never cut by the timer.
//!
//! Only HTTP/1.1 is served. HTTP/2 in clear text has no client here (browsers
//! speak it over TLS only, and a proxy in front speaks HTTP/1.1 to us), and
//! hyper-util's auto builder, which tells the two apart, waits for the first
//! bytes without a timer: a socket that sends nothing would escape the
//! header timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a connection may take to send a request's headers, and stay idle between requests.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, past which the server stops accepting.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// How often the server says it is at its connection cap, at most.
const CAP_WARNING_EVERY: Duration = Duration::from_secs(60);

/// What one client connection may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting and waits for the open connections to finish their requests
/// (the caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let mut warned_at: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = take_permit(&permits, limits.max_connections, &mut warned_at) => permit,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small answers go out at once rather than waiting for more to send.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = connection.await {
                // A client that went away or was too slow is not the server's fault.
                tracing::debug!(error = %e, "a connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A permit for one more connection; at the cap, waits for one to close,
/// saying so at most once a minute.
async fn take_permit(
    permits: &Arc<Semaphore>,
    cap: usize,
    warned_at: &mut Option<Instant>,
) -> OwnedSemaphorePermit {
    if let Ok(permit) = permits.clone().try_acquire_owned() {
        return permit;
    }
    if warned_at.is_none_or(|at| at.elapsed() >= CAP_WARNING_EVERY) {
        *warned_at = Some(Instant::now());
        let open = cap - permits.available_permits();
        tracing::warn!(
            open,
            cap,
            "{open} connections are open, the cap (--max-connections) is {cap}: new connections wait until one closes"
        );
    }
    permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed")
}

/// An accept that failed: a connection the peer dropped before it was
/// accepted is nothing; anything else (no descriptors left) is logged and
/// given a moment to pass, rather than spinning.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(%error, "cannot accept a connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
