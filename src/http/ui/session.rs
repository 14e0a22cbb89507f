//! A session's page (`/ui/sessions/{id}`): live counts, throughput, ETA, the
//! pauses of its tokens (see [`super::pauses`]), the agents table, the checks that fail most, the quest table (filtered by
//! state or re-check mark, searched by key, paged by upload order) and the exports.

use crate::domain::ids::{QuestId, SessionId};
use axum::extract::State;
use axum::response::{Html, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::auth::Signed;
use super::chart::{self, Chart};
use super::pauses::PauseView;
use super::view::{self, SessionView, query};
use super::{PageError, PagePath, PageQuery, templates};
use crate::domain::recheck::Mark;
use crate::domain::{Phase, State as QuestState};
use crate::export::ExportFormat;
use crate::http::AppState;
use crate::http::extract::Read;
use crate::store::QuestQuery;

/// Quests per page of the table.
const PAGE_SIZE: u32 = 50;

/// The quest table's filter and position, as the address carries them.
#[derive(Debug, Default, Deserialize)]
pub struct TableQuery {
    state: Option<String>,
    q: Option<String>,
    check: Option<String>,
    field: Option<String>,
    /// `stale` or `unconfirmed`: PASS quests a re-check marked.
    mark: Option<String>,
    after: Option<u64>,
    before: Option<u64>,
}

#[derive(Serialize)]
struct AgentView {
    name: String,
    token_name: Option<String>,
    leased: u64,
    submissions: u64,
    pass: u64,
    pass_first: u64,
    fail: u64,
    review: u64,
    done: u64,
    lapses: u64,
    mean_tries: Option<String>,
    /// The share of its PASS quests that later went stale, e.g. `25%`.
    stale_share: Option<String>,
    stale: u64,
    pass_now: u64,
    last_seen: DateTime<Utc>,
    last_seen_ago: String,
}

#[derive(Serialize)]
struct FailingView {
    check: String,
    field: String,
    fails: u64,
    reviews: u64,
    expected: String,
    actual: String,
    hint: String,
    quest_id: QuestId,
    quest_key: String,
    quests_url: String,
}

#[derive(Serialize)]
struct QuestLine {
    id: QuestId,
    row: u64,
    key: String,
    state: QuestState,
    phase: Option<Phase>,
    tries: u32,
    lapses: u32,
    decided_by: Option<String>,
    updated_at: DateTime<Utc>,
    mark: Option<Mark>,
}

#[derive(Serialize)]
struct Chip {
    label: &'static str,
    count: u64,
    url: String,
    active: bool,
}

#[derive(Serialize)]
struct SessionPage {
    session: SessionView,
    chart: Chart,
    agents: Vec<AgentView>,
    failing: Vec<FailingView>,
    review_reasons: Vec<FailingView>,
    quests: Vec<QuestLine>,
    chips: Vec<Chip>,
    q: String,
    state: String,
    check: String,
    field: String,
    mark: String,
    previous_url: Option<String>,
    next_url: Option<String>,
    filtered: bool,
    verifiers: Option<crate::api::Verifiers>,
    pauses: Vec<PauseView>,
    reviewers: crate::api::Reviewers,
}

fn parse_mark(s: Option<&str>) -> Result<Option<Mark>, PageError> {
    match s.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s.to_ascii_lowercase().parse().map(Some).map_err(|_| {
            PageError::bad_request(format!("Unknown mark `{s}`: use stale or unconfirmed."))
        }),
    }
}

fn parse_state(s: Option<&str>) -> Result<Option<QuestState>, PageError> {
    match s.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s.to_ascii_uppercase().parse().map(Some).map_err(|_| {
            PageError::bad_request(format!(
                "Unknown state `{s}`: use TODO, PASS, REVIEW or DONE."
            ))
        }),
    }
}

/// The session's page.
pub async fn page(
    State(state): State<AppState>,
    signed: Signed<Read>,
    PagePath(id): PagePath<SessionId>,
    PageQuery(t): PageQuery<TableQuery>,
) -> Result<Html<String>, PageError> {
    let quest_state = parse_state(t.state.as_deref())?;
    let mark = parse_mark(t.mark.as_deref())?;
    let search = t.q.clone().filter(|q| !q.trim().is_empty());
    let table = QuestQuery {
        state: quest_state,
        search: search.clone(),
        check: t.check.clone().filter(|c| !c.is_empty()),
        field: t.field.clone().filter(|c| !c.is_empty()),
        mark,
        cursor: t.before.or(t.after),
        backwards: t.before.is_some(),
        limit: PAGE_SIZE,
    };
    let o = state.service.session_overview(id, &table).await?;
    let reviewers = state.service.get_session_reviewers(id).await?;
    let now = state.service.now();
    let base = format!("/ui/sessions/{id}");
    let state_text = quest_state.map(|s| s.as_str());
    let mark_text = mark.map(|m| m.as_str());
    let url_with = |state: Option<&str>, mark: Option<&str>, cursor: Option<(&str, u64)>| {
        let cursor = cursor.map(|(k, v)| (k, v.to_string()));
        let pairs = [
            ("state", state),
            ("mark", mark),
            ("q", search.as_deref()),
            ("check", table.check.as_deref()),
            ("field", table.field.as_deref()),
            cursor
                .as_ref()
                .map_or(("", None), |(k, v)| (*k, Some(v.as_str()))),
        ];
        format!("{base}{}", query(&pairs))
    };
    let url = |state: Option<&str>, cursor: Option<(&str, u64)>| url_with(state, mark_text, cursor);
    let quests = &o.quests;
    let previous_url = quests
        .quests
        .first()
        .filter(|_| quests.has_previous)
        .map(|q| url(state_text, Some(("before", q.row_index))));
    let next_url = quests
        .quests
        .last()
        .filter(|_| quests.has_next)
        .map(|q| url(state_text, Some(("after", q.row_index))));
    let st = &o.session.status;
    let chips = [
        ("All", None, st.total),
        ("TODO", Some(QuestState::Todo), st.remaining),
        ("PASS", Some(QuestState::Pass), st.pass),
        ("REVIEW", Some(QuestState::Review), st.review),
        ("DONE", Some(QuestState::Done), st.done),
    ]
    .into_iter()
    .map(|(label, s, count)| Chip {
        label,
        count,
        url: url_with(s.map(|s| s.as_str()), None, None),
        active: s == quest_state && mark.is_none(),
    })
    .chain(
        [
            ("Stale", Mark::Stale, st.stale),
            ("Unconfirmed", Mark::Unconfirmed, st.unconfirmed),
        ]
        .into_iter()
        .map(|(label, m, count)| Chip {
            label,
            count,
            url: url_with(None, Some(m.as_str()), None),
            active: mark == Some(m),
        }),
    )
    .collect::<Vec<_>>();
    let page = SessionPage {
        chart: chart::throughput(&o.throughput),
        agents: o
            .agents
            .into_iter()
            .map(|a| AgentView {
                stale_share: a.stale_share().map(|s| format!("{:.0}%", s * 100.0)),
                name: a.name,
                token_name: a.token_name,
                leased: a.stats.leased,
                submissions: a.stats.submissions,
                pass: a.stats.pass,
                pass_first: a.stats.pass_first,
                fail: a.stats.fail,
                review: a.stats.review,
                done: a.stats.done,
                lapses: a.stats.lapses,
                mean_tries: a.mean_tries_to_pass.map(|m| format!("{m:.1}")),
                stale: a.stale,
                pass_now: a.pass_now,
                last_seen_ago: view::ago(now, a.stats.last_seen),
                last_seen: a.stats.last_seen,
            })
            .collect(),
        failing: o
            .failing
            .into_iter()
            .map(|f| failing_view(&base, f))
            .collect(),
        review_reasons: o
            .review_reasons
            .into_iter()
            .map(|f| failing_view(&base, f))
            .collect(),
        quests: o
            .quests
            .quests
            .into_iter()
            .map(|q| QuestLine {
                id: q.id,
                row: q.row_index,
                key: q.key,
                state: q.state,
                phase: q.phase,
                tries: q.tries,
                lapses: q.lapses,
                decided_by: q.decided_by,
                updated_at: q.updated_at,
                mark: q.recheck_mark,
            })
            .collect(),
        chips,
        filtered: quest_state.is_some()
            || search.is_some()
            || table.check.is_some()
            || mark.is_some(),
        q: search.unwrap_or_default(),
        state: state_text.unwrap_or_default().to_owned(),
        check: table.check.clone().unwrap_or_default(),
        field: table.field.clone().unwrap_or_default(),
        mark: mark_text.unwrap_or_default().to_owned(),
        previous_url,
        next_url,
        verifiers: o.verifiers,
        pauses: o.pauses.into_iter().map(PauseView::from).collect(),
        reviewers,
        session: SessionView::from(&o.session),
    };
    templates::page("session.html", &signed.me, page)
}

/// The export's query.
#[derive(Debug, Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
}

/// The session's export, as the API gives it, for a signed-in browser.
pub async fn export(
    State(state): State<AppState>,
    signed: Signed<Read>,
    PagePath(id): PagePath<SessionId>,
    PageQuery(q): PageQuery<ExportQuery>,
) -> Result<Response, PageError> {
    let requested = q.format.as_deref().unwrap_or("csv");
    let format = ExportFormat::parse(requested).ok_or_else(|| {
        PageError::bad_request(format!(
            "Unknown format `{requested}`: use csv, jsonl or xlsx."
        ))
    })?;
    let (media_type, ext) = format.media_type();
    let export = state
        .service
        .export_session(id, format, signed.me.token_id)
        .await?;
    let body = crate::http::sessions::export_body(export);
    Ok(crate::http::sessions::attachment(
        media_type,
        &format!("session-{id}.{ext}"),
        body,
    ))
}

/// One check of a tally, with the link to its quests.
fn failing_view(base: &str, f: crate::store::FailingCheckRow) -> FailingView {
    FailingView {
        quests_url: format!(
            "{base}{}#quests",
            query(&[("check", Some(&f.check)), ("field", Some(&f.field))])
        ),
        check: f.check,
        field: f.field,
        fails: f.fails,
        reviews: f.reviews,
        expected: f.example.expected,
        actual: f.example.actual,
        hint: f.example.hint,
        quest_id: f.quest_id,
        quest_key: f.quest_key,
    }
}
