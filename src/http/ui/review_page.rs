//! The review page's view model, built in one place ([`build`]): the queue
//! (without the quests whose decision the reviewer holds), the quest the
//! picker opens and claims, the notices of held decisions, and the filter.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::PageError;
use super::auth::Me;
use super::review::{QUEUE_SHOWN, ReviewQuery, explain, filter_query};
use super::view::{Claim, QuestView};
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::work::{Refusal, ReviewerId};
use crate::domain::{Decision, State as QuestState};
use crate::service::review::{held_by_other, pick_next};
use crate::service::{Service, ServiceError};
use crate::store::{HeldDecisionRow, QueuedQuest, StoreError};

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
pub struct ReviewPage {
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

/// The review page of `me` at the address `q`.
pub async fn build(service: &Service, me: &Me, q: &ReviewQuery) -> Result<ReviewPage, PageError> {
    let reviewer = me.reviewer();
    let now = service.now();
    // A quest whose decision the reviewer holds is decided, as far as the page goes.
    let (waiting, dropped): (Vec<_>, Vec<_>) = service
        .held_reviews(&reviewer)
        .await?
        .into_iter()
        .partition(|h| h.outcome.is_none());
    // One more than is shown (besides the held ones), to know whether there are more.
    let mut list = service
        .review_list(
            &me.viewer(),
            me.sessions.as_deref(),
            q.session,
            q.check(),
            QUEUE_SHOWN + 1 + waiting.len() as u32,
        )
        .await?;
    list.retain(|r| !waiting.iter().any(|h| h.quest_id == r.quest.id));
    let more = list.len() as u32 > QUEUE_SHOWN;
    list.truncate(QUEUE_SHOWN as usize);
    let skips = service.review_skips(&me.browser_session).await?;
    let requested = q.quest.filter(|id| list.iter().any(|r| r.quest.id == *id));
    let pick = pick_next(&list, requested, &reviewer, &skips, now);
    let (quest, held_by) = match pick {
        Some(i) => open(service, me, &list[i]).await?,
        None => (None, None),
    };
    let id_at = |i: Option<usize>| i.and_then(|i| list.get(i)).map(|r| r.quest.id);
    Ok(ReviewPage {
        previous: id_at(pick.and_then(|i| i.checked_sub(1))),
        next: id_at(pick.map(|i| i + 1)),
        more,
        quest,
        held_by,
        queue: queue(&list, pick, &reviewer, q, now),
        sessions: sessions(service, me, q.session).await?,
        session: q.session,
        check: q.check().unwrap_or_default().to_owned(),
        filter: filter_query(q.session.map(|s| s.to_string()).as_deref(), q.check(), &[]),
        last: match q.last {
            Some(id) => service.get_quest(id).await.ok().map(|l| LastDecision {
                id,
                key: l.key,
                state: l.state,
            }),
            None => None,
        },
        error: q.error.as_deref().map(explain),
        notice: (q.quest.is_some() && requested.is_none()).then_some(
            "That quest is no longer in review, or not in this filter; here is the next one.",
        ),
        undo: match waiting.first() {
            Some(h) => Some(undo(service, h, now).await?),
            None => None,
        },
        not_recorded: not_recorded(service, &dropped).await?,
        undone: match q.undone {
            Some(id) => service.get_quest(id).await.ok().map(|u| u.key),
            None => None,
        },
    })
}

/// Opens the picked quest: claimed for `me` unless another holds it (then
/// who, and no decision is offered).
async fn open(
    service: &Service,
    me: &Me,
    queued: &QueuedQuest,
) -> Result<(Option<QuestView>, Option<String>), PageError> {
    let row = &queued.quest;
    let reviewer = me.reviewer();
    let now = service.now();
    let mut held_by = held_by_other(queued, &reviewer, now);
    let mut claimed = None;
    if held_by.is_none() {
        match service.claim_review(&reviewer, row.id).await {
            Ok(claim) => claimed = Some(claim.expires_at),
            // Taken between the listing and the claim.
            Err(ServiceError::Store(StoreError::Refused(Refusal::ReviewClaimed {
                by, ..
            }))) => held_by = Some(by),
            Err(e) => return Err(e.into()),
        }
    }
    let mut view = QuestView::new(
        service.get_quest_for(&me.viewer(), row.id).await?,
        now,
        me.token_id,
    );
    // A look's claim is kept apart from the quest's own: say it all the same.
    if let (None, Some(until)) = (&view.claim, claimed) {
        view.claim = Some(Claim {
            by: me.name.clone(),
            until,
            mine: true,
        });
    }
    Ok((Some(view), held_by))
}

/// The queue as listed, with the current one marked.
fn queue(
    list: &[QueuedQuest],
    pick: Option<usize>,
    me: &ReviewerId,
    q: &ReviewQuery,
    now: DateTime<Utc>,
) -> Vec<QueueItem> {
    let session = q.session.map(|s| s.to_string());
    let url = |check: Option<&str>, quest: Option<&str>| {
        format!(
            "/ui/review{}",
            filter_query(session.as_deref(), check, &[("quest", quest)])
        )
    };
    list.iter()
        .enumerate()
        .map(|(i, queued)| (i, queued, &queued.quest))
        .map(|(i, queued, r)| QueueItem {
            id: r.id,
            key: r.key.clone(),
            session_id: r.session_id,
            updated_at: r.updated_at,
            held_by: held_by_other(queued, me, now),
            current: Some(i) == pick,
            url: url(q.check(), Some(&r.id.to_string())),
            summary: summary(r.result.as_ref()),
            reason: r.last_facts.first().map(|f| Reason {
                url: url(Some(&f.check), None),
                check: f.check.clone(),
                field: f.field.clone(),
            }),
        })
        .collect()
}

/// The sessions `me` may filter by, with how many quests each has in review.
async fn sessions(
    service: &Service,
    me: &Me,
    selected: Option<SessionId>,
) -> Result<Vec<SessionOption>, PageError> {
    Ok(service
        .list_sessions(me.sessions.as_deref(), me.role)
        .await?
        .into_iter()
        .map(|s| SessionOption {
            selected: Some(s.id) == selected,
            id: s.id,
            name: s.name,
            review: s.status.review,
        })
        .collect())
}

/// The notice of the most recent held decision, which `z` undoes.
async fn undo(
    service: &Service,
    h: &HeldDecisionRow,
    now: DateTime<Utc>,
) -> Result<Undo, PageError> {
    Ok(Undo {
        id: h.quest_id,
        key: service.get_quest(h.quest_id).await?.key,
        decision: h.decision,
        seconds_left: (h.effective_at - now).num_seconds().max(0) + 1,
    })
}

/// What the held decisions that could not be recorded say, once.
async fn not_recorded(
    service: &Service,
    dropped: &[HeldDecisionRow],
) -> Result<Vec<NotRecorded>, PageError> {
    let mut out = Vec::new();
    for h in dropped {
        out.push(NotRecorded {
            id: h.quest_id,
            key: service.get_quest(h.quest_id).await?.key,
            decision: h.decision,
            why: explain(h.outcome.as_deref().unwrap_or_default()),
        });
    }
    Ok(out)
}
