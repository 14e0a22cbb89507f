//! The review page (`/ui/review`, filtered by `?session=` and `?check=` as
//! the API's queue is): opening a quest claims it; approve, reject with a
//! note, skip and moving on are plain forms (the script binds them to keys);
//! a bulk decision lists the quests it will decide and decides exactly those.

use crate::domain::ids::{QuestId, SessionId};
use crate::domain::work::Refusal;
use axum::extract::State;
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::auth::{Fields, Signed, SignedForm};
use super::view::{QuestView, query};
use super::{PageError, PagePath, PageQuery, templates};
use crate::domain::{Decision, State as QuestState};
use crate::http::AppState;
use crate::http::extract::Review;
use crate::service::ServiceError;
use crate::service::console::BULK_LIMIT;
use crate::service::review::{Held, held_by_other, pick_next};
use crate::store::StoreError;

/// How many quests of the queue the page lists.
const QUEUE_SHOWN: u32 = 200;

/// The review page's address: the filter, the quest to open, what just happened.
#[derive(Debug, Default, Deserialize)]
pub struct ReviewQuery {
    session: Option<SessionId>,
    check: Option<String>,
    quest: Option<QuestId>,
    /// A quest just decided, to confirm it.
    last: Option<QuestId>,
    error: Option<String>,
    decision: Option<String>,
    /// A quest whose held decision was just undone.
    undone: Option<QuestId>,
}

impl ReviewQuery {
    fn check(&self) -> Option<&str> {
        self.check.as_deref().filter(|c| !c.is_empty())
    }
}

/// `?session=..&check=..` plus `more`, for the addresses the page links to.
fn filter_query(
    session: Option<&str>,
    check: Option<&str>,
    more: &[(&str, Option<&str>)],
) -> String {
    let mut pairs = vec![("session", session), ("check", check)];
    pairs.extend_from_slice(more);
    query(&pairs)
}

/// What an error code from a decision tells the reviewer.
fn explain(code: &str) -> &'static str {
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

#[derive(Serialize)]
struct QueueItem {
    id: QuestId,
    key: String,
    session_id: SessionId,
    updated_at: DateTime<Utc>,
    held_by: Option<String>,
    current: bool,
    url: String,
    /// The result's values on one short line.
    summary: String,
    /// The first reason it is in review, and the queue filtered by it.
    reason: Option<Reason>,
}

#[derive(Serialize)]
struct Reason {
    check: String,
    field: String,
    url: String,
}

/// How many characters of a result the queue shows.
const SUMMARY_CHARS: usize = 80;

/// A result's values on one line, cut to [`SUMMARY_CHARS`].
fn summary(result: Option<&serde_json::Value>) -> String {
    let line = match result {
        Some(serde_json::Value::Object(fields)) => fields
            .values()
            .map(crate::domain::table::cell_as_text)
            .collect::<Vec<_>>()
            .join(" · "),
        Some(other) => crate::domain::table::cell_as_text(other),
        None => String::new(),
    };
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::domain::text::cut(&line, SUMMARY_CHARS).into_owned()
}

#[derive(Serialize)]
struct SessionOption {
    id: SessionId,
    name: String,
    review: u64,
    selected: bool,
}

#[derive(Serialize)]
struct LastDecision {
    id: QuestId,
    key: String,
    state: QuestState,
}

/// The reviewer's most recent held decision, which `z` undoes.
#[derive(Serialize)]
struct Undo {
    id: QuestId,
    key: String,
    decision: Decision,
    /// Whole seconds left before it is recorded.
    seconds_left: i64,
}

/// A held decision that could not be recorded when due.
#[derive(Serialize)]
struct NotRecorded {
    id: QuestId,
    key: String,
    decision: Decision,
    why: &'static str,
}

#[derive(Serialize)]
struct ReviewPage {
    quest: Option<QuestView>,
    /// Set when another reviewer holds the current quest: no decision is offered.
    held_by: Option<String>,
    queue: Vec<QueueItem>,
    more: bool,
    previous: Option<QuestId>,
    next: Option<QuestId>,
    sessions: Vec<SessionOption>,
    session: Option<SessionId>,
    check: String,
    filter: String,
    last: Option<LastDecision>,
    error: Option<&'static str>,
    notice: Option<&'static str>,
    undo: Option<Undo>,
    not_recorded: Vec<NotRecorded>,
    undone: Option<String>,
}

/// The review page: the queue, and the current quest opened (and claimed).
pub async fn page(
    State(state): State<AppState>,
    signed: Signed<Review>,
    PageQuery(q): PageQuery<ReviewQuery>,
) -> Result<Html<String>, PageError> {
    let service = &state.service;
    let me = &signed.me.reviewer();
    // One more than is shown, to know whether there are more.
    let mut list = service
        .review_list(
            &signed.me.viewer(),
            signed.me.sessions.as_deref(),
            q.session,
            q.check(),
            QUEUE_SHOWN + 1,
        )
        .await?;
    let now = service.now();
    // A quest whose decision I hold is decided, as far as my page goes.
    let (waiting, dropped): (Vec<_>, Vec<_>) = service
        .held_reviews(me)
        .await?
        .into_iter()
        .partition(|h| h.outcome.is_none());
    list.retain(|r| !waiting.iter().any(|h| h.quest_id == r.id));
    let more = list.len() as u32 > QUEUE_SHOWN;
    list.truncate(QUEUE_SHOWN as usize);
    let skips = service.review_skips(&signed.me.browser_session).await?;
    let requested = q.quest.filter(|id| list.iter().any(|r| r.id == *id));
    let pick = pick_next(&list, requested, me, &skips, now);
    let notice = (q.quest.is_some() && requested.is_none()).then_some(
        "That quest is no longer in review, or not in this filter; here is the next one.",
    );
    let mut held_by = None;
    let mut quest = None;
    if let Some(i) = pick {
        let row = &list[i];
        held_by = held_by_other(row, me, now);
        if held_by.is_none() {
            match service.claim_review(me, row.id).await {
                Ok(_) => {}
                // Taken between the listing and the claim.
                Err(ServiceError::Store(StoreError::Refused(Refusal::ReviewClaimed {
                    by,
                    ..
                }))) => held_by = Some(by),
                Err(e) => return Err(e.into()),
            }
        }
        quest = Some(QuestView::new(
            service.get_quest_for(&signed.me.viewer(), row.id).await?,
            service.now(),
            me.token,
        ));
    }
    let session_text = q.session.map(|s| s.to_string());
    let filter = filter_query(session_text.as_deref(), q.check(), &[]);
    let id_at = |i: Option<usize>| i.and_then(|i| list.get(i)).map(|r| r.id);
    let next = id_at(pick.map(|i| i + 1));
    let last = match q.last {
        Some(id) => service.get_quest(id).await.ok().map(|l| LastDecision {
            id,
            key: l.key,
            state: l.state,
        }),
        None => None,
    };
    let sessions = service
        .list_sessions(signed.me.sessions.as_deref())
        .await?
        .into_iter()
        .map(|s| SessionOption {
            selected: Some(s.id) == q.session,
            id: s.id,
            name: s.name,
            review: s.status.review,
        })
        .collect();
    let queue = list
        .iter()
        .enumerate()
        .map(|(i, r)| QueueItem {
            id: r.id,
            key: r.key.clone(),
            session_id: r.session_id,
            updated_at: r.updated_at,
            held_by: held_by_other(r, me, now),
            current: Some(i) == pick,
            url: format!(
                "/ui/review{}",
                filter_query(
                    session_text.as_deref(),
                    q.check(),
                    &[("quest", Some(&r.id.to_string()))]
                )
            ),
            summary: summary(r.result.as_ref()),
            reason: r.last_facts.first().map(|f| Reason {
                url: format!(
                    "/ui/review{}",
                    filter_query(session_text.as_deref(), Some(&f.check), &[])
                ),
                check: f.check.clone(),
                field: f.field.clone(),
            }),
        })
        .collect();
    let page = ReviewPage {
        previous: pick
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| id_at(Some(i))),
        next,
        more,
        quest,
        held_by,
        queue,
        sessions,
        session: q.session,
        check: q.check().unwrap_or_default().to_owned(),
        filter,
        last,
        error: q.error.as_deref().map(explain),
        notice,
        undo: match waiting.first() {
            Some(h) => Some(Undo {
                id: h.quest_id,
                key: service.get_quest(h.quest_id).await?.key,
                decision: h.decision,
                seconds_left: (h.effective_at - now).num_seconds().max(0) + 1,
            }),
            None => None,
        },
        not_recorded: {
            let mut out = Vec::new();
            for h in &dropped {
                out.push(NotRecorded {
                    id: h.quest_id,
                    key: service.get_quest(h.quest_id).await?.key,
                    decision: h.decision,
                    why: explain(h.outcome.as_deref().unwrap_or_default()),
                });
            }
            out
        },
        undone: match q.undone {
            Some(id) => service.get_quest(id).await.ok().map(|u| u.key),
            None => None,
        },
    };
    templates::page("review.html", &signed.me, page)
}

/// The filter a form carries back, as a query with `more` added.
fn back(fields: &Fields, more: &[(&str, Option<&str>)]) -> String {
    filter_query(
        fields.get("session"),
        fields.get("check").filter(|c| !c.is_empty()),
        more,
    )
}

fn decision(fields: &Fields) -> Result<Decision, PageError> {
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
/// [`pick_next`] picks.
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

/// Lists every quest the filter matches and asks to confirm deciding them.
pub async fn bulk_confirm(
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
    let list = state
        .service
        .review_list(
            &signed.me.viewer(),
            signed.me.sessions.as_deref(),
            q.session,
            q.check(),
            BULK_LIMIT,
        )
        .await?;
    let now = state.service.now();
    let me = &signed.me.reviewer();
    let (held, eligible): (Vec<Listed>, Vec<Listed>) = list
        .iter()
        .map(|r| Listed {
            id: r.id,
            key: r.key.clone(),
            held_by: held_by_other(r, me, now),
        })
        .partition(|l| l.held_by.is_some());
    let session_text = q.session.map(|s| s.to_string());
    let page = BulkPage {
        decision,
        limit_reached: list.len() as u32 >= BULK_LIMIT,
        limit: BULK_LIMIT,
        eligible,
        held,
        done: false,
        decided: Vec::new(),
        gone: 0,
        filter: filter_query(session_text.as_deref(), q.check(), &[]),
        session: q.session,
        check: q.check().unwrap_or_default().to_owned(),
        error: q.error.as_deref().map(explain),
    };
    templates::page("bulk.html", &signed.me, page)
}

/// Decides exactly the quests the confirmation listed.
pub async fn bulk_decide(
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
            let to = back(
                &form.fields,
                &[("decision", Some(decision.as_str())), ("error", Some(code))],
            );
            return Ok(Redirect::to(&format!("/ui/review/bulk{to}")).into_response());
        }
        Err(e) => return Err(e.into()),
    };
    let session = form
        .fields
        .get("session")
        .and_then(|s| s.parse::<SessionId>().ok());
    let check = form.fields.get("check").unwrap_or_default().to_owned();
    let page = BulkPage {
        decision,
        eligible: Vec::new(),
        held: outcome
            .claimed
            .into_iter()
            .map(|(id, key, by)| Listed {
                id,
                key,
                held_by: Some(by),
            })
            .collect(),
        limit_reached: false,
        limit: BULK_LIMIT,
        done: true,
        decided: outcome
            .decided
            .into_iter()
            .map(|(id, key)| Listed {
                id,
                key,
                held_by: None,
            })
            .collect(),
        gone: outcome.gone.len(),
        filter: back(&form.fields, &[]),
        session,
        check,
        error: None,
    };
    Ok(templates::page("bulk.html", &form.me, page)?.into_response())
}
