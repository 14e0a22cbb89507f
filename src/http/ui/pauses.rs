//! The pauses on a session's page, and its Resume button: a plain form (it
//! works without the script) that an admin sends with the browser session's
//! CSRF token, resumed through the same use case as
//! `POST /v1/sessions/{id}/tokens/{token_id}/resume`.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::PageError;
use super::PagePath;
use super::auth::SignedForm;
use crate::domain::ids::{SessionId, TokenId};
use crate::domain::pause::PauseReason;
use crate::domain::work::Refusal;
use crate::http::AppState;
use crate::http::extract::Administer;
use crate::service::ServiceError;
use crate::service::console::NamedPause;
use crate::store::StoreError;

/// One figure of a pause, e.g. `consecutive_done` 5.
#[derive(Debug, Serialize)]
pub struct Figure {
    name: String,
    value: String,
}

/// A pause as a row of the session's page.
#[derive(Debug, Serialize)]
pub struct PauseView {
    /// Where it was made: a canary's pause, listed in every session its
    /// token worked in, is resumed there.
    session_id: SessionId,
    token_id: TokenId,
    token_name: Option<String>,
    agent: String,
    reason: PauseReason,
    /// The reason in words.
    why: String,
    figures: Vec<Figure>,
    created_at: DateTime<Utc>,
    resumed_at: Option<DateTime<Utc>>,
    resumed_by: Option<String>,
    /// Not resumed yet: the token's `next` is refused in this session.
    live: bool,
}

impl From<NamedPause> for PauseView {
    fn from(
        NamedPause {
            pause: p,
            token_name,
        }: NamedPause,
    ) -> Self {
        let why = match p.reason {
            PauseReason::ConsecutiveDone => format!(
                "its last {} quests here all ended DONE (out of tries or lapsed)",
                p.figures["consecutive_done"]
            ),
            PauseReason::Unqualified => format!(
                "its gold answers were right {} times in {}: at least {:.1}% with 95% confidence, \
                 under the floor of {:.1}%",
                p.figures["correct"],
                p.figures["answered"],
                p.figures["accuracy_lower_bound"].as_f64().unwrap_or(0.0) * 100.0,
                p.figures["min_accuracy"].as_f64().unwrap_or(0.0) * 100.0
            ),
            PauseReason::Canary => format!(
                "a canary it answered in session {} (an item no honest result can pass) ended \
                 PASS: it is paused in every session",
                p.session_id
            ),
        };
        let figures = match &p.figures {
            Value::Object(map) => map
                .iter()
                .map(|(name, value)| Figure {
                    name: name.clone(),
                    value: value.to_string(),
                })
                .collect(),
            _ => Vec::new(),
        };
        PauseView {
            session_id: p.session_id,
            live: p.resumed_at.is_none(),
            token_id: p.token_id,
            token_name,
            agent: p.agent,
            reason: p.reason,
            why,
            figures,
            created_at: p.created_at,
            resumed_at: p.resumed_at,
            resumed_by: p.resumed_by,
        }
    }
}

/// Resumes a token paused in the session, then goes back to the session's page.
pub async fn resume(
    State(state): State<AppState>,
    PagePath((id, token_id)): PagePath<(SessionId, TokenId)>,
    form: SignedForm<Administer>,
) -> Result<Response, PageError> {
    match state
        .service
        .resume_token(id, token_id, &form.me.name)
        .await
    {
        // Resumed meanwhile (a second click, another admin): the page says by whom.
        Ok(_) | Err(ServiceError::Store(StoreError::Refused(Refusal::NotPaused))) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Redirect::to(&format!("/ui/sessions/{id}#pauses")).into_response())
}
