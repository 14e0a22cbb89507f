//! The review page (`/ui/review`, filtered by `?session=` and `?check=` as
//! the API's queue is): opening a quest claims it; approve, reject with a
//! note, skip and moving on are plain forms (the script binds them to keys);
//! a bulk decision ([`super::bulk`]) lists the quests it will decide and decides exactly those.

use crate::domain::ids::{QuestId, SessionId};
use axum::extract::State;
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth::{Fields, Signed, SignedForm};
use super::review_page;
use super::view::query;
use super::{PageError, PagePath, PageQuery, templates};
use crate::domain::Decision;
use crate::http::AppState;
use crate::http::extract::Review;
use crate::service::ServiceError;
use crate::service::review::Held;
use crate::store::StoreError;

/// How many quests of the queue the page lists.
pub(super) const QUEUE_SHOWN: u32 = 200;

/// The review page's address: the filter, the quest to open, what just happened.
#[derive(Debug, Default, Deserialize)]
pub struct ReviewQuery {
    pub(super) session: Option<SessionId>,
    pub(super) check: Option<String>,
    pub(super) quest: Option<QuestId>,
    /// A quest just decided, to confirm it.
    pub(super) last: Option<QuestId>,
    pub(super) error: Option<String>,
    pub(super) decision: Option<String>,
    /// A quest whose held decision was just undone.
    pub(super) undone: Option<QuestId>,
}

impl ReviewQuery {
    pub(super) fn check(&self) -> Option<&str> {
        self.check.as_deref().filter(|c| !c.is_empty())
    }
}

/// `?session=..&check=..` plus `more`, for the addresses the page links to.
pub(super) fn filter_query(
    session: Option<&str>,
    check: Option<&str>,
    more: &[(&str, Option<&str>)],
) -> String {
    let mut pairs = vec![("session", session), ("check", check)];
    pairs.extend_from_slice(more);
    query(&pairs)
}

/// What an error code from a decision tells the reviewer.
pub(super) fn explain(code: &str) -> &'static str {
    match code {
        "note_required" => {
            "A rejection needs a note: say what is wrong, for the record and the export."
        }
        "invalid_note" => "The note is too long: 10 000 bytes at most.",
        "review_claimed" => "Another reviewer holds this quest now; it is theirs to decide.",
        "not_in_review" => "That quest is no longer in review: it was decided meanwhile.",
        "already_reviewed" => {
            "You gave that quest your look already; it waits for another reviewer's."
        }
        "adjudication_needed" => {
            "That quest's reviewers disagree: an adjudicator decides it, and not one of its reviewers."
        }
        "review_changed" => "Its reviewers disagreed meanwhile, so an adjudicator decides it now.",
        "undo_too_late" => "Too late to undo: that decision is recorded, or being recorded now.",
        "token_revoked" => "Your token was revoked meanwhile.",
        _ => "That did not work; try again.",
    }
}

/// The review page: the queue, and the current quest opened (and claimed).
pub async fn page(
    State(state): State<AppState>,
    signed: Signed<Review>,
    PageQuery(q): PageQuery<ReviewQuery>,
) -> Result<Html<String>, PageError> {
    let page = review_page::build(&state.service, &signed.me, &q).await?;
    templates::page("review.html", &signed.me, page)
}

/// The filter a form carries back, as a query with `more` added.
pub(super) fn back(fields: &Fields, more: &[(&str, Option<&str>)]) -> String {
    filter_query(
        fields.get("session"),
        fields.get("check").filter(|c| !c.is_empty()),
        more,
    )
}

pub(super) fn decision(fields: &Fields) -> Result<Decision, PageError> {
    match fields.get("decision") {
        Some("approve") => Ok(Decision::Approve),
        Some("reject") => Ok(Decision::Reject),
        _ => Err(PageError::bad_request(
            "The decision is `approve` or `reject`.",
        )),
    }
}

/// Approves or rejects one quest, then opens the next. A decision made with
/// the page's keys (`held=1`) is held for the session's undo window.
pub async fn decide(
    State(state): State<AppState>,
    PagePath(id): PagePath<QuestId>,
    form: SignedForm<Review>,
) -> Result<Response, PageError> {
    let decision = decision(&form.fields)?;
    let note = form.fields.get("note").unwrap_or_default();
    let me = &form.me.reviewer();
    let id_text = id.to_string();
    let done = if form.fields.get("held") == Some("1") {
        state
            .service
            .hold_review(me, id, decision, note)
            .await
            .map(|held| match held {
                // The undo notice confirms it.
                Held::Until(_) => None,
                Held::Recorded => Some(id_text.as_str()),
            })
    } else {
        state
            .service
            .decide_review(&form.me.viewer(), me, id, decision, note)
            .await
            .map(|_| Some(id_text.as_str()))
    };
    let to = match done {
        Ok(last) => back(&form.fields, &[("last", last)]),
        Err(ServiceError::Invalid { code, .. }) => back(
            &form.fields,
            &[("quest", Some(&id_text)), ("error", Some(code))],
        ),
        Err(ServiceError::Store(StoreError::Refused(refusal))) => back(
            &form.fields,
            &[("quest", Some(&id_text)), ("error", Some(refusal.code()))],
        ),
        Err(e) => return Err(e.into()),
    };
    Ok(Redirect::to(&format!("/ui/review{to}")).into_response())
}

/// Undoes a held decision before it is recorded (`z`), and opens its quest again.
pub async fn undo(
    State(state): State<AppState>,
    PagePath(id): PagePath<QuestId>,
    form: SignedForm<Review>,
) -> Result<Response, PageError> {
    let id_text = id.to_string();
    let more = if state.service.undo_review(&form.me.reviewer(), id).await? {
        [
            ("quest", Some(id_text.as_str())),
            ("undone", Some(id_text.as_str())),
        ]
    } else {
        [("quest", None), ("error", Some("undo_too_late"))]
    };
    Ok(Redirect::to(&format!("/ui/review{}", back(&form.fields, &more))).into_response())
}

/// Gives the claim back and opens `to` (moving to another quest), or, with
/// `skip`, skips the quest for this browser session and opens what
/// [`crate::service::review::pick_next`] picks.
pub async fn release(
    State(state): State<AppState>,
    PagePath(id): PagePath<QuestId>,
    form: SignedForm<Review>,
) -> Result<Response, PageError> {
    if form.fields.get("skip").is_some() {
        let me = &form.me;
        state
            .service
            .skip_review(&me.reviewer(), &me.browser_session, id)
            .await?;
        let to = back(&form.fields, &[("quest", None)]);
        return Ok(Redirect::to(&format!("/ui/review{to}")).into_response());
    }
    state
        .service
        .give_back_review(&form.me.reviewer(), id)
        .await?;
    let to = form
        .fields
        .get("to")
        .and_then(|t| t.parse::<QuestId>().ok())
        .map(|t| t.to_string());
    let more = [("quest", to.as_deref())];
    Ok(Redirect::to(&format!("/ui/review{}", back(&form.fields, &more))).into_response())
}
