//! A bulk decision (`/ui/review/bulk`): a confirmation that lists every quest
//! the review page's filter matches, then a form that decides exactly those.

use axum::extract::State;
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Serialize;

use super::auth::{Signed, SignedForm};
use super::review::{ReviewQuery, back, decision, explain, filter_query};
use super::{PageError, PageQuery, templates};
use crate::domain::Decision;
use crate::domain::ids::{QuestId, SessionId};
use crate::http::AppState;
use crate::http::extract::Review;
use crate::service::ServiceError;
use crate::service::console::{BULK_LIMIT, BulkOutcome};
use crate::service::review::held_by_other;

#[derive(Serialize)]
struct Listed {
    id: QuestId,
    key: String,
    held_by: Option<String>,
}

#[derive(Serialize)]
struct BulkPage {
    decision: Decision,
    /// Confirmation: the quests it will decide, and those left to others.
    eligible: Vec<Listed>,
    held: Vec<Listed>,
    limit_reached: bool,
    limit: u32,
    /// After the run: what happened.
    done: bool,
    decided: Vec<Listed>,
    gone: usize,
    session: Option<SessionId>,
    check: String,
    filter: String,
    error: Option<&'static str>,
}

impl BulkPage {
    /// An empty page of `decision` over the quests of `session` and `check`.
    fn new(decision: Decision, session: Option<SessionId>, check: &str, filter: String) -> Self {
        BulkPage {
            decision,
            eligible: Vec::new(),
            held: Vec::new(),
            limit_reached: false,
            limit: BULK_LIMIT,
            done: false,
            decided: Vec::new(),
            gone: 0,
            session,
            check: check.to_owned(),
            filter,
            error: None,
        }
    }

    /// What a run did: decided, left to the reviewers holding them, gone.
    fn outcome(mut self, outcome: BulkOutcome) -> Self {
        let listed = |(id, key, held_by)| Listed { id, key, held_by };
        self.done = true;
        self.held = outcome
            .claimed
            .into_iter()
            .map(|(id, key, by)| listed((id, key, Some(by))))
            .collect();
        self.decided = outcome
            .decided
            .into_iter()
            .map(|(id, key)| listed((id, key, None)))
            .collect();
        self.gone = outcome.gone.len();
        self
    }
}

/// Lists every quest the filter matches and asks to confirm deciding them.
pub async fn confirm(
    State(state): State<AppState>,
    signed: Signed<Review>,
    PageQuery(q): PageQuery<ReviewQuery>,
) -> Result<Html<String>, PageError> {
    let decision = match q.decision.as_deref() {
        Some("reject") => Decision::Reject,
        Some("approve") | None => Decision::Approve,
        Some(_) => {
            return Err(PageError::bad_request(
                "The decision is `approve` or `reject`.",
            ));
        }
    };
    let (me, scope) = (signed.me.reviewer(), signed.me.sessions.as_deref());
    let list = (state.service)
        .review_list(&signed.me.viewer(), scope, q.session, q.check(), BULK_LIMIT)
        .await?;
    let now = state.service.now();
    let session_text = q.session.map(|s| s.to_string());
    let filter = filter_query(session_text.as_deref(), q.check(), &[]);
    let mut page = BulkPage::new(decision, q.session, q.check().unwrap_or_default(), filter);
    page.limit_reached = list.len() as u32 >= BULK_LIMIT;
    page.error = q.error.as_deref().map(explain);
    (page.held, page.eligible) = list
        .iter()
        .map(|r| Listed {
            id: r.quest.id,
            key: r.quest.key.clone(),
            held_by: held_by_other(r, &me, now),
        })
        .partition(|l| l.held_by.is_some());
    templates::page("bulk.html", &signed.me, page)
}

/// Decides exactly the quests the confirmation listed.
pub async fn decide(
    State(state): State<AppState>,
    form: SignedForm<Review>,
) -> Result<Response, PageError> {
    let decision = decision(&form.fields)?;
    let note = form.fields.get("note").unwrap_or_default();
    let ids = form
        .fields
        .all("quest")
        .map(str::parse::<QuestId>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| PageError::bad_request("A listed quest id is not a UUID."))?;
    let outcome = match state
        .service
        .bulk_decide(&form.me.reviewer(), &ids, decision, note)
        .await
    {
        Ok(outcome) => outcome,
        Err(ServiceError::Invalid { code, .. }) => {
            let more = [("decision", Some(decision.as_str())), ("error", Some(code))];
            let to = format!("/ui/review/bulk{}", back(&form.fields, &more));
            return Ok(Redirect::to(&to).into_response());
        }
        Err(e) => return Err(e.into()),
    };
    let session = form.fields.get("session").and_then(|s| s.parse().ok());
    let check = form.fields.get("check").unwrap_or_default();
    let page = BulkPage::new(decision, session, check, back(&form.fields, &[])).outcome(outcome);
    Ok(templates::page("bulk.html", &form.me, page)?.into_response())
}
