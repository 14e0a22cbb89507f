//! The dashboard (`/ui`): every session with its bar and counts, kept live by
//! the page's one event stream.

use axum::extract::State;
use axum::response::Html;
use serde::Serialize;

use super::auth::Signed;
use super::view::SessionView;
use super::{PageError, templates};
use crate::http::AppState;
use crate::http::extract::Read;

#[derive(Serialize)]
struct Dashboard {
    sessions: Vec<SessionView>,
    /// REVIEW quests over all sessions.
    in_review: u64,
    remaining: u64,
    agents_active: u64,
}

/// Every session, newest first.
pub async fn page(
    State(state): State<AppState>,
    signed: Signed<Read>,
) -> Result<Html<String>, PageError> {
    let sessions: Vec<SessionView> = state
        .service
        .list_sessions(signed.me.sessions.as_deref(), signed.me.role)
        .await?
        .iter()
        .map(SessionView::from)
        .collect();
    let sum = |f: fn(&SessionView) -> u64| sessions.iter().map(f).sum();
    let page = Dashboard {
        in_review: sum(|s| s.status.review),
        remaining: sum(|s| s.status.remaining),
        agents_active: sum(|s| s.status.agents_active),
        sessions,
    };
    templates::page("dashboard.html", &signed.me, page)
}
