//! What each write does to a quest, decided here and only executed by the
//! stores: who may act on a lease, what a verdict, a lapse, the AI verifiers'
//! decision or a reviewer's decision sets, and the words of every refusal.
//!
//! A store reads the rows involved, calls one of these functions and writes
//! what it returns; no store decides anything itself.

use crate::domain::ids::{LeaseId, QuestId, TokenId};
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use super::{DecidedBy, Decision, Fact, Phase, QuestStatus, Role, State, Transition, Verdict};

/// Who holds a lease: an agent name under the token that leased it.
/// Many agents may share one token; a lease belongs to exactly one of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentId {
    pub token: TokenId,
    pub name: String,
}

impl AgentId {
    /// The agent `name` of `token`.
    pub fn new(token: TokenId, name: impl Into<String>) -> AgentId {
        AgentId {
            token,
            name: name.into(),
        }
    }

    /// Whether this agent acts under `token`.
    pub fn belongs_to(&self, token: TokenId) -> bool {
        self.token == token
    }
}

/// Stored as `<token id>/<name>`.
impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.token, self.name)
    }
}

impl FromStr for AgentId {
    type Err = super::UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || super::UnknownValue {
            kind: "agent",
            value: s.to_owned(),
        };
        let (token, name) = s.split_once('/').ok_or_else(bad)?;
        Ok(AgentId {
            token: token.parse::<TokenId>().map_err(|_| bad())?,
            name: name.to_owned(),
        })
    }
}

/// Why a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Its holder gave it back.
    Released,
    /// It ran out (a lapse).
    Expired,
    /// The quest's verdict ended the agent's part.
    Decided,
}
text_enum!(LeaseEnd { Released => "released", Expired => "expired", Decided => "decided" });

/// A lease as the hold rules see it.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseFacts {
    pub id: LeaseId,
    pub quest_id: QuestId,
    pub agent: AgentId,
    /// When it was granted: renewals never carry it past `max_hold_seconds` from then.
    pub granted_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub ended: Option<LeaseEnd>,
}

/// A request the quest's state refuses. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    QuestLocked(State),
    QuestVerifying,
    LeaseLost,
    LeaseExpired,
    /// A release while the gate checks the holder's submission.
    QuestChecking,
    /// A new result while the gate checks the previous one.
    SubmissionInProgress,
    NotInReview(State),
    ReviewClaimed {
        by: String,
        until: DateTime<Utc>,
        /// The claim is another token's under the asker's own name (a token
        /// that was revoked and replaced).
        same_name: bool,
    },
    /// A reviewer who already gave the quest a look, of the `required` it needs.
    AlreadyLooked {
        required: u32,
    },
    /// The quest's reviewers disagree: only an adjudicator who gave it no
    /// look decides it now.
    AdjudicationNeeded {
        gave_look: bool,
    },
    /// A held decision whose quest changed stage before it was due (its
    /// looks disagreed meanwhile): it is not recorded as something else.
    ReviewChanged,
    /// A post-hoc audit that has its label already: a label is final.
    AuditLabelled,
    /// An L2 answer for a quest that is no longer verified for that job.
    NotVerifying,
    /// The token already holds as many leases as its cap allows.
    LeaseCap {
        cap: u32,
    },
    /// The move is not in the state machine.
    Illegal(String),
    /// The database's own rules (a constraint or a ratchet trigger) refused
    /// the write, in the database's words.
    Ratchet(String),
    /// The token was revoked while the request ran.
    TokenRevoked,
    /// A live token already has this name.
    NameTaken(String),
    /// The bootstrap admin token is the configuration's to manage.
    BootstrapToken,
    /// A backup of a store that the server does not keep in a file.
    BackupUnsupported,
    /// A re-check run of the session is unfinished.
    RecheckRunning,
    /// A re-check of a session without PASS quests.
    NothingToRecheck,
    /// A re-check record for a quest that awaits none of that run.
    RecheckNotDue,
    /// The token is paused in the session (its quests there kept ending DONE).
    AgentPaused(Box<crate::domain::pause::Pause>),
    /// A resume of a token that is not paused in the session.
    NotPaused,
    /// An `Idempotency-Key` the token already used for another quest or result.
    IdempotencyKeyReused,
}

impl Refusal {
    /// The machine-readable code on the wire.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::QuestLocked(_) => "quest_locked",
            Refusal::QuestVerifying => "quest_verifying",
            Refusal::LeaseLost => "lease_lost",
            Refusal::LeaseExpired => "lease_expired",
            Refusal::QuestChecking => "quest_checking",
            Refusal::SubmissionInProgress => "submission_in_progress",
            Refusal::NotInReview(_) => "not_in_review",
            Refusal::ReviewClaimed { .. } => "review_claimed",
            Refusal::AlreadyLooked { .. } => "already_reviewed",
            Refusal::AdjudicationNeeded { .. } => "adjudication_needed",
            Refusal::ReviewChanged => "review_changed",
            Refusal::AuditLabelled => "audit_labelled",
            Refusal::NotVerifying => "not_verifying",
            Refusal::LeaseCap { .. } => "lease_cap",
            Refusal::Illegal(_) | Refusal::Ratchet(_) => "illegal_transition",
            Refusal::TokenRevoked => "token_revoked",
            Refusal::NameTaken(_) => "name_taken",
            Refusal::BootstrapToken => "bootstrap_token",
            Refusal::BackupUnsupported => "backup_unsupported",
            Refusal::RecheckRunning => "recheck_running",
            Refusal::NothingToRecheck => "nothing_to_recheck",
            Refusal::RecheckNotDue => "recheck_not_due",
            Refusal::AgentPaused(_) => "agent_paused",
            Refusal::NotPaused => "not_paused",
            Refusal::IdempotencyKeyReused => "idempotency_key_reused",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::QuestLocked(state) => write!(
                f,
                "the quest is {state} and can no longer change; call next for another quest"
            ),
            Refusal::QuestVerifying => f.write_str(
                "the gate passed this quest and AI verifiers are checking it; it is no longer yours: call next for another quest",
            ),
            Refusal::LeaseLost => f.write_str(
                "you do not hold this quest's lease (it was released, expired and re-leased, or belongs to another agent); call next",
            ),
            Refusal::LeaseExpired => {
                f.write_str("the lease expired before this request; call next to lease a quest again")
            }
            Refusal::QuestChecking => {
                f.write_str("the gate is checking your submission; wait for its verdict")
            }
            Refusal::SubmissionInProgress => f.write_str(
                "the gate is still checking your previous submission; poll it or wait for its verdict",
            ),
            Refusal::NotInReview(state) => write!(
                f,
                "the quest is {state}, not REVIEW; only REVIEW quests can be claimed or decided"
            ),
            Refusal::ReviewClaimed {
                by,
                until,
                same_name: false,
            } => write!(
                f,
                "{by} is reviewing this quest until {}; pick another one",
                until.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            ),
            Refusal::ReviewClaimed {
                by,
                until,
                same_name: true,
            } => write!(
                f,
                "another token named {by} (an earlier one, perhaps revoked) holds this quest's review claim \
                 until {}; claims belong to tokens, not names: pick another quest or wait for the claim to end",
                until.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            ),
            Refusal::AlreadyLooked { required } => write!(
                f,
                "you already gave this quest your look; it needs {required} reviewers' looks, so it waits for another \
                 reviewer's: pick another quest"
            ),
            Refusal::AdjudicationNeeded { gave_look: false } => f.write_str(
                "this quest's reviewers disagree, so an adjudicator decides it: an admin token, or a reviewer token \
                 made with `quest token create --adjudicate`; pick another quest",
            ),
            Refusal::AdjudicationNeeded { gave_look: true } => f.write_str(
                "this quest's reviewers disagree and you are one of them, so another adjudicator decides it; pick another quest",
            ),
            Refusal::ReviewChanged => f.write_str(
                "the quest's reviewers disagreed while your decision was held, so it is an adjudicator's now; \
                 your decision was not recorded",
            ),
            Refusal::AuditLabelled => f.write_str(
                "this audit has its label already, and a label is final; audit another quest",
            ),
            Refusal::NotVerifying => f.write_str("the quest is not being verified for this job"),
            Refusal::LeaseCap { cap } => write!(
                f,
                "this token already holds {cap} {}, its cap (max_leases = {cap}); release a quest you hold \
                 or finish it (submit until it leaves TODO) before leasing another, or ask an admin for a token \
                 with a larger cap (`quest token create --max-leases N`)",
                if *cap == 1 { "lease" } else { "leases" }
            ),
            Refusal::Illegal(what) | Refusal::Ratchet(what) => f.write_str(what),
            Refusal::TokenRevoked => f.write_str("the token was revoked; sign in with a valid one"),
            Refusal::NameTaken(name) => write!(
                f,
                "a live token is already named `{name}`: pick another name or revoke that token"
            ),
            Refusal::BootstrapToken => f.write_str(
                "the bootstrap admin token cannot be revoked over the API; rotate it with QUEST_ADMIN_TOKEN \
                 or by replacing <data-dir>/admin.token and restarting",
            ),
            Refusal::BackupUnsupported => f.write_str(
                "this server keeps its data in PostgreSQL: back it up with pg_dump (or the database's own backups)",
            ),
            Refusal::RecheckRunning => f.write_str(
                "a re-check of this session is still running; wait until status shows its `rechecked_at`, then start another",
            ),
            Refusal::NothingToRecheck => f.write_str(
                "the session has no PASS quest; a re-check looks at accepted results only, so start it once quests have passed",
            ),
            Refusal::RecheckNotDue => f.write_str(
                "the quest awaits no re-check of this run; nothing was recorded",
            ),
            Refusal::AgentPaused(pause) => pause.fmt(f),
            Refusal::NotPaused => f.write_str(
                "this token is not paused in this session; nothing was changed (the session's page lists its pauses)",
            ),
            Refusal::IdempotencyKeyReused => f.write_str(
                "this token already sent this Idempotency-Key with another quest or result; send the same key \
                 only to retry the very same request, and a fresh key (e.g. a new UUID) for each new result",
            ),
        }
    }
}

/// The cap on concurrent leases an agent token gets when none is asked for.
pub const DEFAULT_MAX_LEASES: u32 = 64;
/// The largest cap a token may be given.
pub const MAX_MAX_LEASES: u32 = 1_000_000;
/// Ended leases kept per quest besides those a submission was made under
/// (always kept: the submission names its lease). Older ones are pruned; the
/// quest keeps the count of every lease it was ever granted.
pub const ENDED_LEASES_KEPT: u32 = 8;

/// Whether a token that holds `held` live leases may take one more under its
/// cap (`None`: no cap).
pub fn check_lease_cap(held: u32, cap: Option<u32>) -> Result<(), Refusal> {
    match cap {
        Some(cap) if held >= cap => Err(Refusal::LeaseCap { cap }),
        _ => Ok(()),
    }
}

/// The lease cap a new token of `role` gets: the one asked for, else
/// [`DEFAULT_MAX_LEASES`] for an agent and none for an admin. Reviewers and
/// viewers lease nothing, so a cap for them is a mistake worth saying.
pub fn lease_cap_for(role: Role, asked: Option<u32>) -> Result<Option<u32>, String> {
    match (role, asked) {
        (Role::Reviewer | Role::Viewer, Some(_)) => Err(format!(
            "a {role} token leases no quests; leave max_leases out, or give it to an agent or admin token"
        )),
        (_, Some(n)) if !(1..=MAX_MAX_LEASES).contains(&n) => Err(format!(
            "max_leases must be between 1 and {MAX_MAX_LEASES}; leave it out for the default"
        )),
        (_, Some(n)) => Ok(Some(n)),
        (Role::Agent, None) => Ok(Some(DEFAULT_MAX_LEASES)),
        (_, None) => Ok(None),
    }
}

/// Applies a transition, naming an illegal one as a refusal.
pub fn step(status: QuestStatus, t: Transition) -> Result<QuestStatus, Refusal> {
    status.apply(t).map_err(|e| Refusal::Illegal(e.to_string()))
}

/// Whether an agent of `token` holds `lease_id` on this quest now: the check
/// behind every submit, heartbeat and release. `lease` is the lease row with
/// that id on this quest, if there is one.
pub fn check_hold(
    status: QuestStatus,
    quest_lease: Option<LeaseId>,
    lease: Option<&LeaseFacts>,
    lease_id: LeaseId,
    token: TokenId,
    now: DateTime<Utc>,
) -> Result<(), Refusal> {
    if status.state.is_terminal() {
        return Err(Refusal::QuestLocked(status.state));
    }
    if status.phase == Some(Phase::Verifying) {
        return Err(Refusal::QuestVerifying);
    }
    let Some(lease) = lease else {
        return Err(Refusal::LeaseLost);
    };
    if lease.ended == Some(LeaseEnd::Expired) {
        return Err(Refusal::LeaseExpired);
    }
    if quest_lease != Some(lease_id) || !lease.agent.belongs_to(token) {
        return Err(Refusal::LeaseLost);
    }
    if lease.expires_at <= now && status.phase == Some(Phase::Leased) {
        return Err(Refusal::LeaseExpired);
    }
    Ok(())
}

/// What the holder may do with a held lease beyond holding it.
pub fn check_release(status: QuestStatus) -> Result<QuestStatus, Refusal> {
    if status.phase == Some(Phase::Checking) {
        return Err(Refusal::QuestChecking);
    }
    step(status, Transition::Release)
}

/// A new result on a held lease: refused while the previous one is checked.
pub fn check_submit(status: QuestStatus) -> Result<QuestStatus, Refusal> {
    if status.phase == Some(Phase::Checking) {
        return Err(Refusal::SubmissionInProgress);
    }
    step(status, Transition::Submit)
}

/// The limits of a session that a verdict needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_tries: u32,
    /// Whether the session has AI verifiers, which look at every L1 PASS.
    pub verify: bool,
}

/// What happens to the lease when a verdict is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAfter {
    /// A FAIL that leaves tries: the holder keeps the lease, renewed.
    Renewed,
    /// The agent's part is over (decided, or on to the verifiers).
    Ended(LeaseEnd),
}

/// Everything a gate's verdict sets on its quest.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictEffects {
    pub status: QuestStatus,
    /// Whether the submitted result is kept on the quest (accepted, under
    /// review, or awaiting the verifiers).
    pub keeps_result: bool,
    /// Whether the submission's receipt becomes the quest's.
    pub keeps_receipt: bool,
    pub decided_by: Option<DecidedBy>,
    pub lease: LeaseAfter,
    /// The FAIL repeats the facts of the FAIL before it (a doom loop).
    pub repeated_failure: bool,
    /// Whether the verifiers must now be asked (one job per verifier and question).
    pub asks_verifiers: bool,
}

/// The quest a verdict lands on, as it was before.
#[derive(Debug, Clone, Copy)]
pub struct Before<'a> {
    /// `checking` when the gate ran after a PENDING record, `leased` when the
    /// gate decided inside the request and the verdict is recorded with its submission.
    pub status: QuestStatus,
    pub last_facts: &'a [Fact],
    /// Whether a decided submission came before (so `last_facts` are a FAIL's).
    pub decided_before: bool,
}

/// What `verdict` with `facts` does to the quest.
pub fn on_verdict(
    before: Before<'_>,
    verdict: Verdict,
    facts: &[Fact],
    limits: Limits,
) -> Result<VerdictEffects, Refusal> {
    let checking = if before.status.phase == Some(Phase::Leased) {
        check_submit(before.status)?
    } else {
        before.status
    };
    let verify = limits.verify && verdict == Verdict::Pass;
    let status = step(
        checking,
        Transition::Decide {
            verdict,
            max_tries: limits.max_tries,
            verify,
        },
    )?;
    let (keeps_result, keeps_receipt, decided_by) = match (status.state, status.phase) {
        (State::Pass, _) => (true, true, Some(DecidedBy::Gate)),
        // REVIEW, or verifying: the result is kept, not yet accepted.
        (State::Review, _) | (State::Todo, Some(Phase::Verifying)) => (true, false, None),
        (State::Done, _) => (false, false, Some(DecidedBy::Limit)),
        (State::Todo, _) => (false, false, None),
    };
    let lease = if status.phase == Some(Phase::Leased) {
        LeaseAfter::Renewed
    } else {
        LeaseAfter::Ended(LeaseEnd::Decided)
    };
    Ok(VerdictEffects {
        status,
        keeps_result,
        keeps_receipt,
        decided_by,
        lease,
        repeated_failure: verdict == Verdict::Fail
            && before.decided_before
            && super::replay::same_facts(before.last_facts, facts),
        asks_verifiers: status.phase == Some(Phase::Verifying),
    })
}

/// Until when a lease renewed at `now` lasts: `lease_seconds` from now, but
/// never past `max_hold_seconds` after it was granted, however often it is
/// renewed (by a heartbeat, a `next` that renews it, a FAIL). At that point it
/// lapses like any lease that expired.
pub fn renewed_until(
    granted_at: DateTime<Utc>,
    now: DateTime<Utc>,
    lease_seconds: u32,
    max_hold_seconds: u32,
) -> DateTime<Utc> {
    let wanted = now + chrono::Duration::seconds(i64::from(lease_seconds));
    let cap = granted_at + chrono::Duration::seconds(i64::from(max_hold_seconds));
    wanted.min(cap)
}

/// What an expired lease does: the quest opens again, or ends after `max_lapses`.
#[derive(Debug, Clone, PartialEq)]
pub struct LapseEffects {
    pub status: QuestStatus,
    /// Set when the lapse ended the quest.
    pub decided: Option<(DecidedBy, Fact)>,
}

/// One lapse of a leased quest.
pub fn on_lapse(status: QuestStatus, max_lapses: u32) -> Result<LapseEffects, Refusal> {
    let next = step(status, Transition::Lapse { max_lapses })?;
    let decided = (next.state == State::Done).then(|| {
        (
            DecidedBy::Limit,
            Fact::new(
                "lapses",
                "",
                format!("a submission before the lease expires (at most {max_lapses} expiries)"),
                format!("the lease expired {} times", next.lapses),
                "the quest was abandoned too often and has ended; a person can look at it in the export",
            ),
        )
    });
    Ok(LapseEffects {
        status: next,
        decided,
    })
}

/// How long an agent that got nothing should wait: until the next lease of
/// the session may expire, between 1 and 30 seconds (5 without any lease).
pub fn wait_seconds(next_expiry: Option<DateTime<Utc>>, now: DateTime<Utc>) -> u32 {
    next_expiry
        .map(|t| (t - now).num_seconds().max(1) as u32)
        .unwrap_or(5)
        .clamp(1, 30)
}

/// What the verifiers' decision sets: PASS with the gate as decider, or REVIEW.
pub fn on_verified(
    status: QuestStatus,
    flagged: bool,
) -> Result<(QuestStatus, Option<DecidedBy>), Refusal> {
    let next = step(status, Transition::Verified { flagged })?;
    let decided_by = (next.state == State::Pass).then_some(DecidedBy::Gate);
    Ok((next, decided_by))
}

/// Who reviews: the token that acts, under the name it bore then, stored as
/// `<token id>/<name>` like an agent. Claims and decisions belong to the
/// token: a new token that reuses a revoked reviewer's name is someone else.
pub type ReviewerId = AgentId;

impl AgentId {
    /// Whether this identity and `other` act under the same token.
    pub fn same_token(&self, other: &AgentId) -> bool {
        self.token == other.token
    }
}

/// A reviewer's standing on a quest: it must be in REVIEW and not claimed by
/// another reviewer (another token) whose claim is still alive.
pub fn check_reviewable(
    state: State,
    claimed_by: Option<&ReviewerId>,
    claim_expires: Option<DateTime<Utc>>,
    reviewer: &ReviewerId,
    now: DateTime<Utc>,
) -> Result<(), Refusal> {
    if state != State::Review {
        return Err(Refusal::NotInReview(state));
    }
    match (claimed_by, claim_expires) {
        (Some(by), Some(until)) if !by.same_token(reviewer) && until > now => {
            Err(Refusal::ReviewClaimed {
                by: by.name.clone(),
                until,
                same_name: by.name == reviewer.name,
            })
        }
        _ => Ok(()),
    }
}

/// What the decision that decides a quest in REVIEW sets: the new status,
/// and whether the accepted submission's receipt becomes the quest's (who
/// decided is [`super::review::judge`]'s to say).
pub fn on_review(status: QuestStatus, decision: Decision) -> Result<(QuestStatus, bool), Refusal> {
    let next = step(status, Transition::Reviewed(decision))?;
    Ok((next, decision == Decision::Approve))
}

/// Which fact check a review-queue filter asks for: one check by name, or
/// every check under a prefix (`l2:*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckFilter {
    Exact(String),
    Prefix(String),
}

impl CheckFilter {
    /// Reads `name` or `prefix*`.
    pub fn parse(text: &str) -> Result<CheckFilter, Refusal> {
        if text.is_empty() || text.len() > 200 {
            return Err(Refusal::Illegal(
                "check names a fact check, e.g. `l2:alpha` or `l2:*`".into(),
            ));
        }
        Ok(match text.strip_suffix('*') {
            Some(prefix) => CheckFilter::Prefix(prefix.to_owned()),
            None => CheckFilter::Exact(text.to_owned()),
        })
    }
}

#[cfg(test)]
#[path = "work_tests.rs"]
mod tests;
