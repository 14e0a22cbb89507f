//! The console's one event stream (`/ui/events?session=..&session=..`):
//! cookie-authenticated (an `EventSource` cannot send a bearer header), and
//! one per page whatever number of sessions the page shows, since a browser
//! keeps only about six connections per origin. It sends a session's status
//! when the session changes, at most every [`THROTTLE`], and ends when the
//! browser session does.

use crate::domain::ids::SessionId;
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::Uri;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::PageError;
use super::auth::Signed;
use crate::domain::EventKind;
use crate::http::AppState;
use crate::http::extract::Read;
use crate::service::Service;

/// The least time between two updates of one session: a busy session is one
/// update per tick, not one per quest.
const THROTTLE: Duration = Duration::from_millis(250);
/// How often a stream checks that its browser session is still live.
const RECHECK: Duration = Duration::from_secs(1);
/// At most this many sessions per stream.
const MAX_SESSIONS: usize = 500;

/// The stream of the sessions named in the query (all sessions when none is).
pub async fn stream(
    State(state): State<AppState>,
    signed: Signed<Read>,
    uri: Uri,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let ids = url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "session")
        .map(|(_, v)| v.parse::<SessionId>())
        .collect::<Result<HashSet<_>, _>>()
        .map_err(|_| PageError::bad_request("A `session` parameter is not a session id."))?;
    if ids.len() > MAX_SESSIONS {
        return Err(PageError::bad_request(format!(
            "Follow at most {MAX_SESSIONS} sessions per stream."
        )));
    }
    // A limited token naming another session was refused by `Signed`.
    let watched = if let (true, Some(scope)) = (ids.is_empty(), signed.me.sessions.as_deref()) {
        Some(scope.iter().copied().collect())
    } else if ids.is_empty() {
        None
    } else {
        for id in &ids {
            state.service.get_session(*id).await?;
        }
        Some(ids)
    };
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(pump(state.service.clone(), signed.cookie, watched, tx));
    Ok(Sse::new(ReceiverStream::new(rx).map(Ok)).keep_alive(KeepAlive::default()))
}

/// Feeds one stream until its reader goes away, its browser session ends or the server stops.
async fn pump(
    service: Arc<Service>,
    cookie: String,
    watched: Option<HashSet<SessionId>>,
    tx: mpsc::Sender<Event>,
) {
    let mut events = service.subscribe();
    let everything = || async {
        match &watched {
            Some(ids) => ids.clone(),
            None => service
                .list_sessions(None)
                .await
                .map(|all| all.into_iter().map(|s| s.id).collect())
                .unwrap_or_default(),
        }
    };
    // The first update goes out at once: the page may have been drawn a while ago.
    let mut dirty: HashSet<SessionId> = everything().await;
    let mut flush_at = Some(Instant::now());
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.tick().await;
    if tx
        .send(Event::default().event("ready").data("{}"))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            _ = service.shutdown().cancelled() => return,
            _ = tx.closed() => return,
            _ = recheck.tick() => {
                match service.browser_session(&cookie).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        let _ = tx.send(Event::default().event("signed_out").data("{}")).await;
                        return;
                    }
                    // A store that fails for a moment signs no one out: check again next time.
                    Err(e) => tracing::warn!(error = %e, "a console stream could not check its browser session"),
                }
            }
            _ = sleep_until(flush_at) => {
                for id in dirty.drain() {
                    let Ok(status) = service.get_session_status(id).await else { continue };
                    let live = super::view::LiveStatus { live: super::view::Live::of(&status), status: &status };
                    let Ok(event) = Event::default().event("status").json_data(&live) else { continue };
                    if tx.send(event).await.is_err() {
                        return;
                    }
                }
                flush_at = None;
            }
            event = events.recv() => {
                match event {
                    Ok(e) if e.kind == EventKind::SessionCreated => {
                        let data = serde_json::json!({ "session_id": e.session_id });
                        if tx.send(Event::default().event("created").data(data.to_string())).await.is_err() {
                            return;
                        }
                    }
                    Ok(e) if watched.as_ref().is_none_or(|w| w.contains(&e.session_id)) => {
                        dirty.insert(e.session_id);
                    }
                    Ok(_) => continue,
                    // Missed events: every session may have changed.
                    Err(broadcast::error::RecvError::Lagged(_)) => dirty.extend(everything().await),
                    Err(broadcast::error::RecvError::Closed) => return,
                }
                flush_at.get_or_insert_with(|| Instant::now() + THROTTLE);
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
