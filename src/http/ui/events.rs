//! The console's one event stream (`/ui/events?session=..&session=..`):
//! cookie-authenticated (an `EventSource` cannot send a bearer header), and
//! one per page whatever number of sessions the page shows, since a browser
//! keeps only about six connections per origin. It sends a session's status
//! when the session changes, at most every [`THROTTLE`], and ends when the
//! browser session does.

use crate::domain::ids::SessionId;
use std::collections::HashSet;
use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::Uri;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::PageError;
use super::auth::Signed;
use super::view::{Live, LiveStatus};
use crate::domain::{EventKind, QuestEvent, Role};
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
            if signed.me.role == Role::Agent && state.service.has_gold(*id).await? {
                return Err(PageError::new(
                    axum::http::StatusCode::FORBIDDEN,
                    "Not allowed",
                    "This session measures its agents with known answers: an agent token may \
                     not follow it. Sign in with a viewer token or above.",
                ));
            }
        }
        Some(ids)
    };
    let (tx, rx) = mpsc::channel(64);
    let role = signed.me.role;
    tokio::spawn(pump(
        state.service.clone(),
        signed.cookie,
        watched,
        role,
        tx,
    ));
    Ok(Sse::new(ReceiverStream::new(rx).map(Ok)).keep_alive(KeepAlive::default()))
}

/// Feeds one stream until its reader goes away, its browser session ends or the server stops.
async fn pump(
    service: Arc<Service>,
    cookie: String,
    watched: Option<HashSet<SessionId>>,
    role: Role,
    tx: mpsc::Sender<Event>,
) {
    let mut events = service.subscribe();
    let shutdown = service.shutdown().clone();
    let mut pump = Pump {
        service,
        cookie,
        watched,
        role,
        tx,
        dirty: HashSet::new(),
        flush_at: None,
    };
    // The first update goes out at once: the page may have been drawn a while ago.
    pump.dirty = pump.everything().await;
    pump.flush_at = Some(Instant::now());
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.tick().await;
    let mut flow = pump.send(Event::default().event("ready").data("{}")).await;
    while flow.is_continue() {
        flow = tokio::select! {
            _ = shutdown.cancelled() => Flow::Break(()),
            _ = pump.tx.closed() => Flow::Break(()),
            _ = recheck.tick() => pump.check_sign_in().await,
            _ = sleep_until(pump.flush_at) => pump.flush().await,
            event = events.recv() => pump.on_event(event).await,
        };
    }
}

/// Whether a stream goes on.
type Flow = ControlFlow<()>;

/// One stream's state: what it watches, and the sessions changed since its last update.
struct Pump {
    service: Arc<Service>,
    cookie: String,
    /// The sessions it follows; every session when `None`.
    watched: Option<HashSet<SessionId>>,
    /// The signed-in token's role (an agent's "every session" leaves out those with gold).
    role: Role,
    tx: mpsc::Sender<Event>,
    dirty: HashSet<SessionId>,
    /// When the changed sessions' statuses go out; `None` while nothing changed.
    flush_at: Option<Instant>,
}

impl Pump {
    async fn send(&self, event: Event) -> Flow {
        match self.tx.send(event).await {
            Ok(()) => Flow::Continue(()),
            Err(_) => Flow::Break(()),
        }
    }

    /// Every session it follows.
    async fn everything(&self) -> HashSet<SessionId> {
        match &self.watched {
            Some(ids) => ids.clone(),
            None => self
                .service
                .list_sessions(None, self.role)
                .await
                .map(|all| all.into_iter().map(|s| s.id).collect())
                .unwrap_or_default(),
        }
    }

    /// Ends the stream, saying so, once its browser session is over.
    async fn check_sign_in(&self) -> Flow {
        match self.service.browser_session(&self.cookie).await {
            Ok(Some(_)) => Flow::Continue(()),
            Ok(None) => {
                let _ = self
                    .send(Event::default().event("signed_out").data("{}"))
                    .await;
                Flow::Break(())
            }
            // A store that fails for a moment signs no one out: check again next time.
            Err(e) => {
                tracing::warn!(error = %e, "a console stream could not check its browser session");
                Flow::Continue(())
            }
        }
    }

    /// Sends the status, with its live figures, of every session changed since the last update.
    async fn flush(&mut self) -> Flow {
        self.flush_at = None;
        for id in std::mem::take(&mut self.dirty) {
            let Ok(status) = self.service.get_session_status(id).await else {
                continue;
            };
            let live = LiveStatus {
                live: Live::of(&status),
                status: &status,
            };
            let Ok(event) = Event::default().event("status").json_data(&live) else {
                continue;
            };
            self.send(event).await?;
        }
        Flow::Continue(())
    }

    /// Notes what an event changed; a new session is announced at once.
    async fn on_event(&mut self, event: Result<QuestEvent, RecvError>) -> Flow {
        match event {
            Ok(e) if e.kind == EventKind::SessionCreated => {
                let data = serde_json::json!({ "session_id": e.session_id });
                return self
                    .send(Event::default().event("created").data(data.to_string()))
                    .await;
            }
            Ok(e)
                if self
                    .watched
                    .as_ref()
                    .is_none_or(|w| w.contains(&e.session_id)) =>
            {
                // Never a gold companion, nor, for an agent, a session with
                // gold (their moves would tell gold apart).
                if (self.service)
                    .console_may_follow(self.role, e.session_id)
                    .await
                {
                    self.dirty.insert(e.session_id);
                }
            }
            Ok(_) => return Flow::Continue(()),
            // Missed events: every session may have changed.
            Err(RecvError::Lagged(_)) => {
                let all = self.everything().await;
                self.dirty.extend(all);
            }
            Err(RecvError::Closed) => return Flow::Break(()),
        }
        self.flush_at
            .get_or_insert_with(|| Instant::now() + THROTTLE);
        Flow::Continue(())
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
