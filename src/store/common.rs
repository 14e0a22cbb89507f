//! What both backends share below the [`Store`](super::Store) trait: moving a
//! quest's status in and out of its row, the event and count buckets of a
//! move, and the constant-time match of secret digests. Nothing here knows SQL.

use std::collections::HashMap;

use crate::domain::ids::{QuestId, RecheckRunId, SessionId, SubmissionId, TokenId};
use chrono::{DateTime, Utc};

use crate::domain::replay;
use crate::domain::work::{self, AgentId, LeaseFacts, Refusal};
use crate::domain::{EventKind, QuestEvent, QuestStatus, SubmissionVerdict, Verdict};
use crate::store::{
    Counts, LeaseRow, NewSubmission, QuestRow, RecheckRow, StoreError, SubmissionRow,
};

/// Writes that replicas must make one at a time. PostgreSQL takes a lock
/// for each; SQLite's single writer already runs every write alone.
#[derive(Debug, Clone, Copy)]
pub enum Turn<'a> {
    /// Starting a re-check run of a session.
    RecheckStart(SessionId),
    /// Finishing a re-check run, once its last quest is recorded.
    RecheckRun(RecheckRunId),
    /// Judging a session's verifiers again after a label.
    Calibration(SessionId),
    /// Deciding whether a token is paused in a session.
    Pause(SessionId, TokenId),
    /// Reading whether a token is paused in a session before leasing it a
    /// quest there (shared: many `next`s read at once; a pause waits).
    PauseRead(SessionId, TokenId),
    /// Pausing a token in every session (a canary passed).
    TokenPause(TokenId),
    /// Ensuring the token of a name (replicas starting together).
    Token(&'a str),
    /// Adding gold items to a session (and its companion, once).
    GoldItems(SessionId),
    /// Handing a gold quest to a token in a session.
    GoldHandOut(SessionId, TokenId),
}

/// A token's scope as stored: the JSON array of its session ids, or NULL
/// for every session.
pub fn scope_text(sessions: Option<&[SessionId]>) -> Option<String> {
    sessions.map(|ids| serde_json::to_string(ids).expect("ids serialise"))
}

/// A token's scope read back from [`scope_text`].
pub fn scope_of(text: Option<String>) -> Result<Option<Vec<SessionId>>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| StoreError::Corrupt(format!("a token's sessions: {e}")))
    })
    .transpose()
}

/// The agent name under which a release keeps a token's console figures of
/// idle agents it folded away (`<token id>/*`).
pub const FOLDED_AGENTS: &str = "*";

/// What a claim or review decision of a token revoked mid-request hears.
pub const REVOKED: &str = "the token is revoked or unknown; ask an admin for a valid one";

pub fn status_of(q: &QuestRow) -> QuestStatus {
    QuestStatus {
        state: q.state,
        phase: q.phase,
        tries: q.tries,
        lapses: q.lapses,
    }
}

/// Writes `status` into the row.
pub fn set_status(q: &mut QuestRow, status: QuestStatus) {
    q.state = status.state;
    q.phase = status.phase;
    q.tries = status.tries;
    q.lapses = status.lapses;
}

pub fn lease_of(l: &LeaseFacts) -> LeaseRow {
    LeaseRow {
        id: l.id,
        quest_id: l.quest_id,
        agent: l.agent.clone(),
        expires_at: l.expires_at,
    }
}

/// The event of `quest` having moved (its status as it is now), by `submission`.
pub fn quest_event(
    kind: EventKind,
    quest: &QuestRow,
    submission: Option<&SubmissionRow>,
    at: DateTime<Utc>,
) -> QuestEvent {
    QuestEvent {
        kind,
        session_id: quest.session_id,
        quest_id: Some(quest.id),
        submission_id: submission.map(|s| s.id),
        state: Some(quest.state),
        phase: quest.phase,
        verdict: submission.and_then(|s| match s.verdict {
            SubmissionVerdict::Pass => Some(Verdict::Pass),
            SubmissionVerdict::Fail => Some(Verdict::Fail),
            SubmissionVerdict::Review => Some(Verdict::Review),
            SubmissionVerdict::Pending => None,
        }),
        mark: None,
        at,
    }
}

/// The event of a PASS quest re-checked: its state is unchanged, the
/// verdict is the re-check's, and the mark is what it left.
pub fn recheck_event(quest: &QuestRow, recheck: &RecheckRow) -> QuestEvent {
    QuestEvent {
        kind: EventKind::Rechecked,
        session_id: quest.session_id,
        quest_id: Some(quest.id),
        submission_id: recheck.submission_id,
        state: Some(quest.state),
        phase: quest.phase,
        verdict: Some(recheck.verdict),
        mark: recheck.mark,
        at: recheck.created_at,
    }
}

/// The event of a change beside a PASS quest that leaves its state as it
/// is: a canary that passed, a suspect mark, an audit's rejection.
pub fn pass_event(
    kind: EventKind,
    session: SessionId,
    quest: QuestId,
    at: DateTime<Utc>,
) -> QuestEvent {
    QuestEvent {
        kind,
        session_id: session,
        quest_id: Some(quest),
        submission_id: None,
        state: Some(crate::domain::State::Pass),
        phase: None,
        verdict: None,
        mark: None,
        at,
    }
}

/// The quests, with their sessions, that these events moved into `state`
/// (a re-check's event moves none: its state is the quest's own).
pub fn ended_in(events: &[QuestEvent], state: crate::domain::State) -> Vec<(SessionId, QuestId)> {
    (events.iter())
        .filter(|e| e.state == Some(state) && e.kind != EventKind::Rechecked)
        .filter_map(|e| e.quest_id.map(|q| (e.session_id, q)))
        .collect()
}

/// Counts what a committed event says the operators alert on: each canary
/// that ended PASS (`quest_canary_passes_total`). Called where each engine
/// publishes the events its own transactions committed, so that a relayed
/// event is counted once, by the replica that wrote it.
pub fn count_committed(event: &QuestEvent) {
    if event.kind == EventKind::CanaryPassed {
        metrics::counter!("quest_canary_passes_total").increment(1);
    }
}

/// The event of a new session.
pub fn session_event(session: SessionId, at: DateTime<Utc>) -> QuestEvent {
    QuestEvent {
        kind: EventKind::SessionCreated,
        session_id: session,
        quest_id: None,
        submission_id: None,
        state: None,
        phase: None,
        verdict: None,
        mark: None,
        at,
    }
}

/// Sets the count of one stored bucket (`TODO/<phase>`, `PASS`, `REVIEW`,
/// `DONE`, `submissions`), as the count triggers of both backends name them.
pub fn set_bucket(c: &mut Counts, bucket: &str, n: u64) -> Result<(), StoreError> {
    let slot = match bucket {
        "TODO/open" => &mut c.open,
        "TODO/leased" => &mut c.leased,
        "TODO/checking" => &mut c.checking,
        "TODO/verifying" => &mut c.verifying,
        "PASS" => &mut c.pass,
        "REVIEW" => &mut c.review,
        "DONE" => &mut c.done,
        "submissions" => &mut c.submissions,
        other => {
            return Err(StoreError::Corrupt(format!(
                "unknown count bucket `{other}`"
            )));
        }
    };
    *slot = n;
    Ok(())
}

/// Whether two digests are equal, compared in constant time.
pub fn same_digest(stored: &str, given: &str) -> bool {
    bool::from(subtle::ConstantTimeEq::ct_eq(
        stored.as_bytes(),
        given.as_bytes(),
    ))
}

/// A token's lease cap and the live leases it holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cap {
    pub max: Option<u32>,
    pub held: u32,
}

/// Splits the `next`s of agents that hold nothing (their tokens in order)
/// into the positions a claim may serve and those their token's cap refuses,
/// as if they ran one by one: each admitted request counts against its token.
pub fn admit(
    tokens: impl IntoIterator<Item = (usize, TokenId)>,
    caps: &HashMap<TokenId, Cap>,
) -> (Vec<usize>, Vec<(usize, Refusal)>) {
    let (mut admitted, mut capped) = (Vec::new(), Vec::new());
    let mut asked: HashMap<TokenId, u32> = HashMap::new();
    for (i, token) in tokens {
        let cap = caps.get(&token).copied().unwrap_or_default();
        let asked = asked.entry(token).or_default();
        match work::check_lease_cap(cap.held + *asked, cap.max) {
            Ok(()) => {
                *asked += 1;
                admitted.push(i);
            }
            Err(refusal) => capped.push((i, refusal)),
        }
    }
    (admitted, capped)
}

/// The PENDING submission `new` makes on `quest` for the lease's `agent`.
pub fn pending_submission(
    quest: &QuestRow,
    new: &NewSubmission,
    agent: &AgentId,
    repeats: Option<SubmissionId>,
    now: DateTime<Utc>,
) -> SubmissionRow {
    SubmissionRow {
        id: SubmissionId::new(),
        quest_id: quest.id,
        session_id: quest.session_id,
        lease_id: new.lease_id,
        agent: agent.clone(),
        result: new.result.clone(),
        verdict: SubmissionVerdict::Pending,
        facts: Vec::new(),
        evidence: Vec::new(),
        gate: None,
        gate_version: None,
        receipt: None,
        state_after: None,
        tries_after: None,
        created_at: now,
        decided_at: None,
        repeats,
    }
}

/// A submission as the replay rule sees it, with its result's digest.
pub fn recorded<'a>(s: &SubmissionRow, result_hash: &'a str) -> replay::Recorded<'a> {
    replay::Recorded {
        id: s.id,
        quest_id: s.quest_id,
        lease_id: s.lease_id,
        token: s.agent.token,
        result_hash,
        verdict: s.verdict,
        state_after: s.state_after,
    }
}

/// A submit as the replay rule sees it.
pub fn incoming(new: &NewSubmission) -> replay::Incoming<'_> {
    replay::Incoming {
        quest_id: new.quest_id,
        lease_id: new.lease_id,
        token: new.token_id,
        result_hash: &new.result_hash,
    }
}

/// The facts a verdict on `submission` keeps (see [`replay::verdict_facts`]).
pub fn verdict_facts(
    submission: &SubmissionRow,
    verdict: Verdict,
    facts: Vec<crate::domain::Fact>,
) -> Vec<crate::domain::Fact> {
    replay::verdict_facts(facts, verdict == Verdict::Fail, submission.repeats)
}

/// Until when a lease renewed now lasts (see [`work::renewed_until`]).
pub fn renewal(
    lease: &LeaseFacts,
    session: &crate::store::SessionRow,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    work::renewed_until(
        lease.granted_at,
        now,
        session.config.lease_seconds,
        session.config.max_hold_seconds(),
    )
}

/// Fails unless a statement touched exactly `expected` rows: a write that
/// found other rows than it checked changes nothing.
pub fn expect_touched(what: &str, touched: u64, expected: u64) -> Result<(), StoreError> {
    if touched == expected {
        Ok(())
    } else {
        Err(Refusal::Illegal(format!(
            "{what} touched {touched} rows instead of {expected}; nothing was changed"
        ))
        .into())
    }
}
