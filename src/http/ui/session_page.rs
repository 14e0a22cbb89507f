//! The session page's view model, built in one place ([`build`]): the live
//! head, throughput, the agents table, the checks that fail most, the quest
//! table (filtered by state or re-check mark, searched by key, paged by upload
//! order) with its chips and links, the pauses and the reviewers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::PageError;
use super::chart::{self, Chart};
use super::pauses::PauseView;
use super::view::{self, SessionView, query};
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::recheck::Mark;
use crate::domain::{Phase, State as QuestState};
use crate::service::console::{AgentFigures, SessionOverview};
use crate::store::{FailingCheckRow, QuestQuery, QuestRow};

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
    /// Its token's gold answers: right of answered and the lower bound, e.g. `35 of 38 · ≥ 81%`.
    gold: Option<String>,
    gold_answered: u64,
    gold_correct: u64,
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
pub struct SessionPage {
    session: SessionView,
    chart: Chart,
    agents: Vec<AgentView>,
    /// Whether the session has gold (the agents table shows each token's score).
    has_gold: bool,
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
    quality: crate::domain::quality::Quality,
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

/// The table's filter, checked: what the store is asked for.
pub struct Filter {
    state: Option<QuestState>,
    mark: Option<Mark>,
    search: Option<String>,
    check: Option<String>,
    field: Option<String>,
    after: Option<u64>,
    before: Option<u64>,
}

impl Filter {
    /// The filter of an address, or a page saying which value is wrong.
    pub fn parse(t: TableQuery) -> Result<Filter, PageError> {
        let given = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
        Ok(Filter {
            state: parse_state(t.state.as_deref())?,
            mark: parse_mark(t.mark.as_deref())?,
            search: given(t.q),
            check: given(t.check),
            field: given(t.field),
            after: t.after,
            before: t.before,
        })
    }

    /// The store's query for one page of the table.
    pub fn query(&self) -> QuestQuery {
        QuestQuery {
            state: self.state,
            search: self.search.clone(),
            check: self.check.clone(),
            field: self.field.clone(),
            mark: self.mark,
            cursor: self.before.or(self.after),
            backwards: self.before.is_some(),
            limit: PAGE_SIZE,
        }
    }

    /// The session's address with this search, the given state and mark, and a cursor.
    fn url(
        &self,
        base: &str,
        state: Option<QuestState>,
        mark: Option<Mark>,
        cursor: Option<(&str, u64)>,
    ) -> String {
        let cursor = cursor.map(|(k, v)| (k, v.to_string()));
        let pairs = [
            ("state", state.map(|s| s.as_str())),
            ("mark", mark.map(|m| m.as_str())),
            ("q", self.search.as_deref()),
            ("check", self.check.as_deref()),
            ("field", self.field.as_deref()),
            cursor
                .as_ref()
                .map_or(("", None), |(k, v)| (*k, Some(v.as_str()))),
        ];
        format!("{base}{}", query(&pairs))
    }

    /// The chips over the table: one per state, one per re-check mark.
    fn chips(&self, base: &str, st: &crate::api::Status) -> Vec<Chip> {
        let states = [
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
            url: self.url(base, s, None, None),
            active: s == self.state && self.mark.is_none(),
        });
        let marks = [
            ("Stale", Mark::Stale, st.stale),
            ("Unconfirmed", Mark::Unconfirmed, st.unconfirmed),
        ]
        .into_iter()
        .map(|(label, m, count)| Chip {
            label,
            count,
            url: self.url(base, None, Some(m), None),
            active: self.mark == Some(m),
        });
        states.chain(marks).collect()
    }
}

/// The session page from the store's overview of it.
pub fn build(
    id: SessionId,
    filter: Filter,
    o: SessionOverview,
    reviewers: crate::api::Reviewers,
    quality: crate::domain::quality::Quality,
    now: DateTime<Utc>,
) -> SessionPage {
    let base = format!("/ui/sessions/{id}");
    let quests = &o.quests;
    let page_url = |q: Option<&QuestRow>, more: bool, key: &str| {
        q.filter(|_| more)
            .map(|q| filter.url(&base, filter.state, filter.mark, Some((key, q.row_index))))
    };
    let previous_url = page_url(quests.quests.first(), quests.has_previous, "before");
    let next_url = page_url(quests.quests.last(), quests.has_next, "after");
    let failing =
        |rows: Vec<FailingCheckRow>| rows.into_iter().map(|f| failing_view(&base, f)).collect();
    SessionPage {
        chart: chart::throughput(&o.throughput),
        chips: filter.chips(&base, &o.session.status),
        has_gold: o.session.config.gold.is_some(),
        agents: o.agents.into_iter().map(|a| agent_view(now, a)).collect(),
        failing: failing(o.failing),
        review_reasons: failing(o.review_reasons),
        quests: o.quests.quests.into_iter().map(QuestLine::from).collect(),
        filtered: filter.state.is_some()
            || filter.search.is_some()
            || filter.check.is_some()
            || filter.mark.is_some(),
        state: filter
            .state
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_owned(),
        mark: filter
            .mark
            .map(|m| m.as_str())
            .unwrap_or_default()
            .to_owned(),
        q: filter.search.unwrap_or_default(),
        check: filter.check.unwrap_or_default(),
        field: filter.field.unwrap_or_default(),
        previous_url,
        next_url,
        verifiers: o.verifiers,
        pauses: o.pauses.into_iter().map(PauseView::from).collect(),
        reviewers,
        quality,
        session: SessionView::from(&o.session),
    }
}

fn agent_view(now: DateTime<Utc>, a: AgentFigures) -> AgentView {
    AgentView {
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
        gold: a.gold.as_ref().map(|g| match g.accuracy_lower_bound {
            Some(b) => format!("{} of {} · ≥ {:.0}%", g.correct, g.answered, b * 100.0),
            None => "no answer yet".to_owned(),
        }),
        gold_answered: a.gold.as_ref().map_or(0, |g| g.answered),
        gold_correct: a.gold.as_ref().map_or(0, |g| g.correct),
    }
}

impl From<QuestRow> for QuestLine {
    fn from(q: QuestRow) -> QuestLine {
        QuestLine {
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
        }
    }
}

/// One check of a tally, with the link to its quests.
fn failing_view(base: &str, f: FailingCheckRow) -> FailingView {
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
