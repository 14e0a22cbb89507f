//! Durable state behind one trait, [`Store`]. All SQL lives below this module;
//! [`sqlite`] is the embedded default. Stores decide nothing: every write
//! executes what [`crate::domain::work`] returns for it, and the database's
//! triggers repeat those rules.
//!
//! Callers pass no clock: each store takes "now" from its own [`Clock`], so a
//! scale-out backend can take it from the database instead.
//!
//! ## One body of code, two engines
//!
//! What both engines do the same way is written once, in `store/sql/`, and
//! compiled into each engine's module tree (`#[path = "../sql/mod.rs"] mod
//! sql;` in [`sqlite`] and [`postgres`]). A shared module names only what
//! its engine supplies under the same names:
//!
//! - `super::Tx`, the write transaction: `row`, `rows`, `exec`, `now`,
//!   `session`, `publish`, `moved_from` and `take_turns` (a [`Turn`]: a
//!   lock on PostgreSQL, nothing on SQLite's single writer);
//! - `super::codec`: `Pool` and `Conn`, and how a time (`at`) and plain data
//!   (`doc`) are bound; ids bind and decode alike on both (`columns.rs`),
//!   and rows are read by meaning through [`columns::Columns`];
//! - SQL fragments as macros for `concat!`, defined in each engine's
//!   `mod.rs`: `for_update!`, `for_share!`, `indexed_by!`, `position!`,
//!   `json_elements!`, `token_of_agent!`;
//! - `super::native`: the reads each engine writes in its own dialect.
//!
//! Statements use `$N` placeholders, which sqlx binds by number on SQLite
//! too. What differs for real stays per engine: the hot write path (SQLite's
//! grouped statements on one writer, PostgreSQL's batcher with `unnest` and
//! `SKIP LOCKED`), locks, and the dialects' JSON and array functions.
//! sqlx's `Any` driver was not the way (it loses the uuid, time and JSON
//! types), nor generic functions over `sqlx::Database` (a bound for every
//! associated type, on every function).
//!
//! The known-answer part of the trait is [`GoldStore`], a supertrait that
//! each engine implements in its own `gold` module over `store/sql/gold.rs`.
//!
//! [`Clock`]: crate::domain::Clock
//! [`Turn`]: common::Turn

mod columns;
mod common;
#[macro_use]
mod decode;
mod check_rows;
mod decision;
mod gold;
pub mod postgres;
mod rows;
pub mod sqlite;

pub use check_rows::*;
pub use gold::*;
pub use rows::*;

use crate::domain::ids::{
    L2JobId, LeaseId, QuestId, RecheckRunId, SessionId, SubmissionId, TokenId,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::pause::Pause;
use crate::domain::review::Viewer;
use crate::domain::work::{AgentId, CheckFilter, Refusal, ReviewerId};
use crate::domain::{Decision, Role};

/// The size of one stored piece of an uploaded file.
pub const SOURCE_CHUNK: usize = 1 << 20;
pub use sqlite::SqliteStore;

/// Why a store call did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The named thing does not exist.
    #[error("no such {0}")]
    NotFound(&'static str),
    /// The request conflicts with the current state, as a rule of the domain
    /// (or the database's repetition of it) says; nothing was changed. It
    /// travels as this variant up to the HTTP layer and the console, which
    /// match on it rather than on its wire code.
    #[error("{0}")]
    Refused(Refusal),
    /// The caller's token was revoked while the request ran; nothing was changed.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The database failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Migrations failed at start-up.
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Stored data could not be read back (a bug or a hand-edited database).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The writer is gone (shutting down) or could not start a transaction.
    #[error("the database is unavailable")]
    Unavailable,
}

impl From<Refusal> for StoreError {
    fn from(r: Refusal) -> Self {
        StoreError::Refused(r)
    }
}

/// Whether `name` is a plain result field name (letters, digits, `_`), the
/// only kind [`Store::result_holders`] looks up.
pub fn is_plain_field(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Background work a worker claims before doing it, so that of several
/// replicas sharing one database exactly one does it while its claim lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Job {
    /// Running the gate on a PENDING submission.
    Gate(SubmissionId),
    /// Asking an AI verifier one question.
    Verify(L2JobId),
    /// Re-checking one PASS quest in one re-check run.
    Recheck(RecheckRunId, QuestId),
}

/// One claim on a [`Job`]: renewals and the release name it, so that a holder
/// whose claim lapsed and was taken over (by another replica, or by another
/// runner of its own) can no longer act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobClaim {
    pub job: Job,
    id: Uuid,
}

impl JobClaim {
    /// A new claim on `job`, with an id of its own.
    pub fn new(job: Job) -> JobClaim {
        JobClaim {
            job,
            id: Uuid::new_v4(),
        }
    }

    /// The claim's id, unique to this claim.
    pub fn id(&self) -> Uuid {
        self.id
    }
}

#[async_trait]
pub trait Store: GoldStore + Send + Sync + 'static {
    /// Whether the database answers.
    async fn ping(&self) -> Result<(), StoreError>;
    /// A consistent copy of the whole database, made while the store keeps serving.
    async fn backup(&self) -> Result<Backup, StoreError>;

    /// Stores a session with all its quests, all or nothing.
    async fn create_session(&self, session: NewSession) -> Result<SessionRow, StoreError>;
    /// Every session, newest first.
    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError>;
    async fn get_session(&self, id: SessionId) -> Result<SessionRow, StoreError>;
    /// The uploaded file: name, media type, bytes.
    async fn session_source(&self, id: SessionId) -> Result<(String, String, Vec<u8>), StoreError>;
    async fn session_status(&self, id: SessionId) -> Result<SessionStatus, StoreError>;

    /// Leases the agent's held quest, or the first open one in upload order.
    /// Expired leases of the session are swept first, inside the same transaction.
    async fn lease_next(
        &self,
        session_id: SessionId,
        agent: &AgentId,
    ) -> Result<LeaseOutcome, StoreError>;
    /// Extends a live lease by the session's lease time. The lease's agent must
    /// belong to `token_id` (agents are `<token id>/<name>`).
    async fn heartbeat(
        &self,
        quest_id: QuestId,
        lease_id: LeaseId,
        token_id: TokenId,
    ) -> Result<LeaseRow, StoreError>;
    /// Gives a leased quest back without a try or a lapse.
    async fn release(
        &self,
        quest_id: QuestId,
        lease_id: LeaseId,
        token_id: TokenId,
    ) -> Result<(), StoreError>;
    /// Returns expired leases to `open` (or DONE after `max_lapses`); the number swept.
    async fn sweep_expired(&self) -> Result<u64, StoreError>;

    /// Records a submission. Without a decision it is PENDING (phase
    /// `checking`) until the gate runner applies one; with the decision of a
    /// gate that ran in the request, the submission and its verdict are one write.
    async fn submit(
        &self,
        submission: NewSubmission,
        decision: Option<GateDecision>,
    ) -> Result<SubmitOutcome, StoreError>;
    /// Applies a gate's decision in one transaction. Applying to an already decided
    /// submission changes nothing and returns the record.
    async fn apply_verdict(
        &self,
        submission_id: SubmissionId,
        decision: GateDecision,
    ) -> Result<Decided, StoreError>;
    /// Submissions still PENDING, oldest first (re-run after a restart).
    async fn pending_submissions(&self) -> Result<Vec<SubmissionId>, StoreError>;
    /// Everything the gate needs to decide a submission.
    async fn gate_job(&self, submission_id: SubmissionId) -> Result<GateJob, StoreError>;
    async fn get_submission(&self, id: SubmissionId) -> Result<SubmissionRow, StoreError>;
    /// The keys of the session's quests other than `except` whose result holds
    /// `value` at the top-level `field` (ASCII letter case ignored), in upload
    /// order, at most `limit`. A result counts while it is accepted (PASS),
    /// awaiting a decision (REVIEW, verifying) or in a submission still being
    /// checked (PENDING). `field` is a plain name (letters, digits, `_`).
    async fn result_holders(
        &self,
        session_id: SessionId,
        except: QuestId,
        field: &str,
        value: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError>;
    /// A submission, its quest, the session's limit, `remaining` and the live lease.
    async fn submission_view(&self, id: SubmissionId) -> Result<SubmissionView, StoreError>;

    /// L2 jobs not answered yet, oldest first (re-run after a restart).
    async fn pending_l2_jobs(&self) -> Result<Vec<L2JobId>, StoreError>;
    async fn l2_job(&self, id: L2JobId) -> Result<L2Job, StoreError>;
    /// Records a verifier's outcome. When it is the submission's last, applies the
    /// decision (PASS or REVIEW, never tries) in the same transaction. Recording
    /// an already answered job changes nothing and returns its answer.
    async fn record_l2_answer(&self, answer: NewL2Answer) -> Result<L2Recorded, StoreError>;
    /// Every L2 answer about a quest, oldest first.
    async fn l2_answers(&self, quest_id: QuestId) -> Result<Vec<L2AnswerRow>, StoreError>;

    async fn get_quest(&self, id: QuestId) -> Result<QuestRow, StoreError>;
    /// A quest's submissions (oldest first) and review decisions.
    async fn quest_history(
        &self,
        id: QuestId,
    ) -> Result<(Vec<SubmissionRow>, Vec<ReviewDecisionRow>), StoreError>;

    /// Quests in REVIEW, oldest first, optionally only of `sessions`, optionally
    /// only those whose last facts include a fact of `check` (a trailing `*`
    /// matches a prefix, e.g. `l2:*`). A fact of an AI verifier (`l2:<name>`)
    /// counts only when that verifier raised a doubt: a flag or no answer.
    async fn review_queue(
        &self,
        sessions: Option<&[SessionId]>,
        check: Option<&CheckFilter>,
        limit: u32,
        viewer: &Viewer,
    ) -> Result<Vec<QueuedQuest>, StoreError>;
    /// Gives a reviewer a time-limited claim on a quest in REVIEW; when it ends.
    async fn claim_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        seconds: u32,
    ) -> Result<DateTime<Utc>, StoreError>;
    /// Gives a reviewer's claim back (a skip), so that others can take the quest at once.
    async fn release_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
    ) -> Result<(), StoreError>;
    /// Approves (→ PASS) or rejects (→ DONE) a quest in REVIEW.
    async fn decide_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, StoreError>;
    /// [`Store::decide_review`] for one quest of a bulk decision: recorded as
    /// bulk, so that it is no label of any AI verifier.
    async fn decide_review_in_bulk(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, StoreError>;
    /// The server's secret `name`, kept as `candidate` on first use.
    async fn server_secret(&self, name: &str, candidate: &str) -> Result<String, StoreError>;
    /// A session's review decisions on its decided quests (for its reviewers' agreement).
    async fn decided_reviews(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<crate::domain::agreement::Decided>, StoreError>;
    /// What the session's random audits found, and its PASS rows.
    async fn quality_counts(&self, session_id: SessionId) -> Result<QualityCounts, StoreError>;
    /// Draws up to `count` unaudited machine-decided PASS quests of the
    /// session, uniformly, for post-hoc audits; their ids.
    async fn draw_audits(
        &self,
        session_id: SessionId,
        count: u32,
    ) -> Result<Vec<QuestId>, StoreError>;
    /// The label-only audits waiting for a label in a session (or every
    /// session), oldest first.
    async fn pending_audits(
        &self,
        session_id: Option<SessionId>,
        limit: u32,
    ) -> Result<Vec<QuestRow>, StoreError>;
    /// Labels a post-hoc audit (once); the quest's state never changes.
    async fn decide_audit(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<(), StoreError>;
    /// Holds a reviewer's decision for `seconds` (the review page's undo
    /// window), keeping their claim on the quest at least that long.
    async fn hold_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
        seconds: u32,
    ) -> Result<HeldDecisionRow, StoreError>;
    /// Deletes a reviewer's held decision on a quest that is not yet due:
    /// whether there was one.
    async fn undo_review(&self, quest_id: QuestId, token: TokenId) -> Result<bool, StoreError>;
    /// Takes up to `limit` held decisions that are due, for this worker to record.
    async fn take_due_reviews(&self, limit: u32) -> Result<Vec<HeldDecisionRow>, StoreError>;
    /// Records a taken held decision through [`Store::decide_review`] and
    /// deletes it, in one transaction.
    async fn record_held_review(
        &self,
        quest_id: QuestId,
        token: TokenId,
    ) -> Result<QuestRow, StoreError>;
    /// Keeps why a held decision could not be recorded (a refusal's code).
    async fn drop_held_review(
        &self,
        quest_id: QuestId,
        token: TokenId,
        outcome: &str,
    ) -> Result<(), StoreError>;
    /// A reviewer's held decisions, newest first, with those that could not be recorded.
    async fn held_reviews(&self, token: TokenId) -> Result<Vec<HeldDecisionRow>, StoreError>;
    /// Forgets a reviewer's held decisions that could not be recorded.
    async fn forget_held_outcomes(&self, token: TokenId) -> Result<(), StoreError>;
    /// When the next held decision falls due.
    async fn next_held_review(&self) -> Result<Option<DateTime<Utc>>, StoreError>;
    /// The AI verifiers' calibration against the non-bulk review decisions,
    /// of one session or (`None`) of the whole server, with at most
    /// `disagreements` of the answers where verifier and reviewer disagreed.
    async fn calibration(
        &self,
        session_id: Option<SessionId>,
        disagreements: u32,
    ) -> Result<Calibration, StoreError>;

    /// The result fields of a session's PASS and REVIEW quests, in first-seen order.
    async fn result_fields(&self, session_id: SessionId) -> Result<Vec<String>, StoreError>;
    /// Up to `limit` export rows after `after_row` (exclusive), in upload order.
    async fn export_page(
        &self,
        session_id: SessionId,
        after_row: Option<u64>,
        limit: u32,
        reviews: bool,
    ) -> Result<Vec<ExportRow>, StoreError>;

    /// Stores a token by the SHA-256 of its secret, with the most leases it
    /// may hold at once (`None`: no cap) and the sessions it is limited to
    /// (`None`: every session).
    async fn create_token(&self, token: NewToken) -> Result<TokenRow, StoreError>;
    /// Makes `hash` the one live token named `name` (the bootstrap admin): a token
    /// with this hash is revived, other live tokens of that name are revoked.
    /// With `replace` false a live token of that name with another hash stays
    /// the one, nothing is written, and the answer is false.
    async fn ensure_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
        replace: bool,
    ) -> Result<bool, StoreError>;
    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError>;
    async fn revoke_token(&self, id: TokenId) -> Result<TokenRow, StoreError>;
    /// The live (not revoked) token with this hash, compared in constant time.
    async fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError>;

    /// The uploaded file's name, media type, size and number of pieces.
    async fn source_info(&self, id: SessionId) -> Result<SourceInfo, StoreError>;
    /// Piece `seq` (0-based, [`SOURCE_CHUNK`] bytes) of the uploaded file; `None` past the end.
    async fn source_chunk(&self, id: SessionId, seq: u64) -> Result<Option<Vec<u8>>, StoreError>;

    /// The unexpired lease `agent` (`<token id>/<name>`) holds in a session, read
    /// without changing anything (no sweep, no renewal).
    async fn agent_lease(
        &self,
        session_id: SessionId,
        agent: &AgentId,
    ) -> Result<Option<AgentLeaseRow>, StoreError>;

    // The console ------------------------------------------------------------------

    /// Starts a browser session for a live token: the SHA-256 of its cookie id,
    /// its CSRF token, and how long it lives.
    async fn create_browser_session(
        &self,
        hash: &str,
        token_id: TokenId,
        csrf: &str,
        seconds: u32,
    ) -> Result<BrowserSessionRow, StoreError>;
    /// The browser session with this digest, while it has not ended or expired
    /// and its token is not revoked; compared in constant time.
    async fn find_browser_session(
        &self,
        hash: &str,
    ) -> Result<Option<BrowserSessionRow>, StoreError>;
    /// Ends a browser session (a sign-out), and its review skips. Ending an
    /// ended one changes nothing.
    async fn end_browser_session(&self, hash: &str) -> Result<(), StoreError>;
    /// Remembers that the browser session `hash` skipped `quest` now (again:
    /// the skip moves to now).
    async fn skip_review(&self, hash: &str, quest: QuestId) -> Result<(), StoreError>;
    /// The quests the browser session `hash` skipped, with when.
    async fn review_skips(&self, hash: &str) -> Result<Vec<(QuestId, DateTime<Utc>)>, StoreError>;
    /// The running figures of every agent of a session, most recently seen first.
    async fn agent_stats(&self, session_id: SessionId) -> Result<Vec<AgentStatsRow>, StoreError>;
    /// The checks whose facts come with most FAIL (or REVIEW) verdicts, at
    /// most `limit`, each with at least one.
    async fn failing_checks(
        &self,
        session_id: SessionId,
        tally: Tally,
        limit: u32,
    ) -> Result<Vec<FailingCheckRow>, StoreError>;
    /// Quests decided per minute over the last `minutes` minutes (the current one included).
    async fn throughput(
        &self,
        session_id: SessionId,
        minutes: u32,
    ) -> Result<Throughput, StoreError>;
    /// A page of a session's quests matching `query`, in upload order.
    async fn quest_page(
        &self,
        session_id: SessionId,
        query: &QuestQuery,
    ) -> Result<QuestPage, StoreError>;
    /// Claims `job` for `seconds` unless a live claim already holds it (one of
    /// this process's included): the claim when the caller may do it now,
    /// `None` when another holds it. A store that one process alone uses
    /// needs no claims and always grants one.
    async fn claim_job(&self, job: Job, seconds: u32) -> Result<Option<JobClaim>, StoreError> {
        let _ = seconds;
        Ok(Some(JobClaim::new(job)))
    }
    /// Extends `claim` to `seconds` from now, if it still lives: whether the
    /// holder still owns its job. A claim that expired (taken over or not) or
    /// was released is not renewed, and its holder must not record a result.
    async fn renew_job(&self, claim: &JobClaim, seconds: u32) -> Result<bool, StoreError> {
        let _ = (claim, seconds);
        Ok(true)
    }
    /// Gives `claim` up once its job is done, so that it holds nothing back.
    async fn release_job(&self, claim: &JobClaim) -> Result<(), StoreError> {
        let _ = claim;
        Ok(())
    }
    /// Gives back this process's claims when it shuts down, so that the next
    /// start (or another replica) takes its unfinished work over at once.
    async fn release_jobs(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Work nobody holds: PENDING submissions and unanswered L2 jobs at least
    /// `grace_seconds` old without a live claim, such as those of a replica
    /// that died. A store that one process alone uses re-queues its work at
    /// start instead, and has none.
    async fn orphaned_jobs(&self, grace_seconds: u32) -> Result<Vec<Job>, StoreError> {
        let _ = grace_seconds;
        Ok(Vec::new())
    }

    // Re-checks ----------------------------------------------------------------------

    /// Starts a re-check run over the session's PASS quests, started by `by`
    /// (a token name or `schedule`). Refused when the session has no PASS
    /// quest or a run of it is unfinished. With `not_since`, nothing is
    /// started (`None`) when a run started at or after it: of several
    /// replicas following one schedule, one starts the run.
    async fn start_recheck(
        &self,
        session_id: SessionId,
        by: &str,
        not_since: Option<DateTime<Utc>>,
    ) -> Result<Option<RecheckRunRow>, StoreError>;
    /// The session's re-check figures: marks and the latest run.
    async fn recheck_summary(&self, session_id: SessionId) -> Result<RecheckSummary, StoreError>;
    /// PASS quests awaiting a re-check in an unfinished run, oldest run first, at most `limit`.
    async fn due_rechecks(&self, limit: u32) -> Result<Vec<(RecheckRunId, QuestId)>, StoreError>;
    /// What the gate needs to re-check a quest; `None` when it awaits no re-check.
    async fn recheck_job(&self, quest_id: QuestId) -> Result<Option<RecheckJob>, StoreError>;
    /// Records a re-check and sets the quest's mark, in one transaction; the
    /// run's last record finishes the run. Recording a quest already
    /// re-checked in that run changes nothing and returns the earlier record.
    async fn record_recheck(&self, recheck: NewRecheck) -> Result<RecheckRecorded, StoreError>;
    /// Every re-check of a quest, oldest first.
    async fn rechecks(&self, quest_id: QuestId) -> Result<Vec<RecheckRow>, StoreError>;
    /// Per agent of a session: its PASS quests and how many of them are stale.
    async fn agent_staleness(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<AgentStalenessRow>, StoreError>;

    // Pauses ---------------------------------------------------------------------------

    /// Every pause of a session's tokens, newest first. A pause is decided
    /// where the DONE that makes it is recorded, in the same transaction.
    async fn pauses(&self, session_id: SessionId) -> Result<Vec<Pause>, StoreError>;
    /// Resumes the token's live pause in the session, by the token named
    /// `by`: `next` leases to it again, and its run of DONEs counts anew.
    /// Refused with [`Refusal::NotPaused`] when it is not paused there.
    async fn resume_pause(
        &self,
        session_id: SessionId,
        token_id: TokenId,
        by: &str,
    ) -> Result<Pause, StoreError>;

    /// The store's own "now", so that pages judge claims and ages by the same
    /// clock the store writes with.
    fn now(&self) -> DateTime<Utc>;
}
