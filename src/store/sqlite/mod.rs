//! The embedded SQLite store (WAL, `synchronous=FULL`).
//!
//! - [`writer`]: the single owner of the write connection, which groups the
//!   queued writes of many requests into one durable commit;
//! - [`leases`] and [`verdicts`]: the agents' loop as grouped writes;
//! - [`verify`] and [`sessions`]: the rare writes (L2 answers, reviews, scans, tokens);
//! - [`reads`]: every read, on a pool of read-only connections;
//! - [`codec`]: how rows are encoded and decoded;
//! - [`console`]: the web console's browser sessions and the reads of its pages.
//!
//! The modules under `store/sql` are written once for both engines and
//! compiled here against this engine's [`codec`], [`Tx`] and SQL fragments.
//!
//! The live counts of every session are kept in memory by the writer from
//! what it commits, so `status` and `remaining` read no table.

// First: its macros are for the modules below.
#[macro_use]
mod dialect;

mod codec;
mod leases;
mod native;
mod open;
mod pauses;
mod sessions;
/// The code both engines share, compiled here against this engine.
#[path = "../sql/mod.rs"]
#[allow(clippy::duplicate_mod)] // one body, compiled for each engine
mod sql;
mod verdicts;
mod writer;

use sql::{
    calibration, console, held, inputs, pause_rule, quality, reads, rechecks, review, secrets,
    tokens, verify,
};

use writer::WriteCtx as Tx;

use crate::domain::ids::{
    L2JobId, LeaseId, QuestId, RecheckRunId, SessionId, SubmissionId, TokenId,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
pub use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::{SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, SqlitePool};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::*;
use crate::domain::review::Viewer;
use crate::domain::{Clock, QuestEvent};
use leases::{Heartbeat, Hold, Lease, Release};
use verdicts::{Decide, Submit};
use writer::{Counters, Finish, GroupError, Kind, Op, Ranked, Request, Single, WriteCtx, Writer};

pub use writer::{MAX_BATCH, WalPolicy};

/// What may be changed about how the store uses SQLite.
pub struct Tuning {
    /// Changes to the connection options.
    pub connect: Box<dyn FnOnce(SqliteConnectOptions) -> SqliteConnectOptions + Send>,
    /// How the writer keeps the WAL bounded.
    pub wal: WalPolicy,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            connect: Box::new(|o| o),
            wal: WalPolicy::default(),
        }
    }
}

/// The SQLite implementation of [`Store`].
#[derive(Clone)]
pub struct SqliteStore {
    path: std::path::PathBuf,
    read: SqlitePool,
    queue: mpsc::Sender<Op>,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

/// Runs a closure alone on the writer: `single!(self, |ctx| body)`.
macro_rules! single {
    ($store:expr, |$ctx:ident| $body:expr) => {
        $store
            .single(move |$ctx: &mut WriteCtx| Box::pin(async move { $body }))
            .await
    };
}

// After `single!`, which it uses.
mod gold;

#[async_trait]
impl Store for SqliteStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        // A server whose writer is gone cannot write; asking it would queue
        // a job behind every write of the moment.
        if self.queue.is_closed() {
            return Err(StoreError::Unavailable);
        }
        Ok(())
    }

    async fn backup(&self) -> Result<Backup, StoreError> {
        // Next to the database, on its disk: a copy can be as large as the original.
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let scratch = tempfile::Builder::new()
            .prefix(".backup-")
            .tempdir_in(dir)
            .map_err(|e| StoreError::Corrupt(format!("no room for a backup: {e}")))?;
        let backup = Backup::new(scratch, "quest.db");
        // VACUUM INTO reads one snapshot on a read connection: the writer goes on.
        sqlx::query("VACUUM INTO ?")
            .bind(backup.path.to_string_lossy().into_owned())
            .execute(&self.read)
            .await?;
        Ok(backup)
    }

    async fn create_session(&self, session: NewSession) -> Result<SessionRow, StoreError> {
        let id = single!(self, |ctx| sessions::create_session(ctx, session).await)?;
        self.get_session(id).await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        reads::list_sessions(&self.read).await
    }

    async fn get_session(&self, id: SessionId) -> Result<SessionRow, StoreError> {
        reads::get_session(&self.read, id).await
    }

    async fn session_source(&self, id: SessionId) -> Result<(String, String, Vec<u8>), StoreError> {
        inputs::whole_source(&self.read, id).await
    }

    async fn session_status(&self, id: SessionId) -> Result<SessionStatus, StoreError> {
        reads::session_status(&self.read, id, self.clock.now(), &self.counters).await
    }

    async fn lease_next(
        &self,
        session: SessionId,
        agent: &AgentId,
    ) -> Result<LeaseOutcome, StoreError> {
        let agent = agent.clone();
        self.group(Lease { session, agent }).await
    }

    async fn heartbeat(
        &self,
        quest: QuestId,
        lease: LeaseId,
        token: TokenId,
    ) -> Result<LeaseRow, StoreError> {
        self.group(Heartbeat(Hold {
            quest,
            lease,
            token,
        }))
        .await
    }

    async fn release(
        &self,
        quest: QuestId,
        lease: LeaseId,
        token: TokenId,
    ) -> Result<(), StoreError> {
        self.group(Release(Hold {
            quest,
            lease,
            token,
        }))
        .await
    }

    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        single!(self, |ctx| leases::sweep(ctx).await.map_err(|e| match e {
            GroupError::Refused(e) => e,
            GroupError::Fatal(_) => StoreError::Unavailable,
        }))
    }

    async fn submit(
        &self,
        new: NewSubmission,
        decision: Option<GateDecision>,
    ) -> Result<SubmitOutcome, StoreError> {
        self.group(Submit { new, decision }).await
    }

    async fn apply_verdict(
        &self,
        submission: SubmissionId,
        decision: GateDecision,
    ) -> Result<Decided, StoreError> {
        self.group(Decide {
            submission,
            decision,
        })
        .await
    }

    async fn pending_submissions(&self) -> Result<Vec<SubmissionId>, StoreError> {
        reads::pending_submissions(&self.read).await
    }

    async fn gate_job(&self, submission_id: SubmissionId) -> Result<GateJob, StoreError> {
        reads::gate_job(&self.read, submission_id).await
    }

    async fn get_submission(&self, id: SubmissionId) -> Result<SubmissionRow, StoreError> {
        reads::get_submission(&self.read, id).await
    }

    async fn result_holders(
        &self,
        session_id: SessionId,
        except: QuestId,
        field: &str,
        value: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        reads::result_holders(&self.read, session_id, except, field, value, limit).await
    }

    async fn submission_view(&self, id: SubmissionId) -> Result<SubmissionView, StoreError> {
        reads::submission_view(&self.read, id, &self.counters).await
    }

    async fn pending_l2_jobs(&self) -> Result<Vec<L2JobId>, StoreError> {
        reads::pending_l2_jobs(&self.read).await
    }

    async fn l2_job(&self, id: L2JobId) -> Result<L2Job, StoreError> {
        reads::l2_job(&self.read, id).await
    }

    async fn record_l2_answer(&self, answer: NewL2Answer) -> Result<L2Recorded, StoreError> {
        single!(self, |ctx| verify::record_l2_answer(ctx, Arc::new(answer))
            .await)
    }

    async fn l2_answers(&self, quest_id: QuestId) -> Result<Vec<L2AnswerRow>, StoreError> {
        reads::l2_answers(&self.read, quest_id).await
    }

    async fn get_quest(&self, id: QuestId) -> Result<QuestRow, StoreError> {
        reads::get_quest(&self.read, id).await
    }

    async fn quest_history(
        &self,
        id: QuestId,
    ) -> Result<(Vec<SubmissionRow>, Vec<ReviewDecisionRow>), StoreError> {
        reads::quest_history(&self.read, id).await
    }

    async fn review_queue(
        &self,
        sessions: Option<&[SessionId]>,
        check: Option<&CheckFilter>,
        limit: u32,
        viewer: &Viewer,
    ) -> Result<Vec<QueuedQuest>, StoreError> {
        reads::review_queue(&self.read, sessions, check, limit, viewer).await
    }

    async fn claim_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        seconds: u32,
    ) -> Result<DateTime<Utc>, StoreError> {
        let reviewer = reviewer.clone();
        single!(self, |ctx| review::claim_review(
            ctx, quest_id, reviewer, seconds
        )
        .await)
    }

    async fn release_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
    ) -> Result<(), StoreError> {
        let reviewer = reviewer.clone();
        single!(self, |ctx| review::release_review(ctx, quest_id, reviewer)
            .await)
    }

    async fn decide_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, StoreError> {
        let (reviewer, note) = (reviewer.clone(), note.to_owned());
        single!(self, |ctx| review::decide_review(
            ctx,
            quest_id,
            reviewer,
            decision,
            note,
            review::Kind::Single
        )
        .await)
    }

    async fn decide_review_in_bulk(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, StoreError> {
        let (reviewer, note) = (reviewer.clone(), note.to_owned());
        single!(self, |ctx| review::decide_review(
            ctx,
            quest_id,
            reviewer,
            decision,
            note,
            review::Kind::Bulk
        )
        .await)
    }

    async fn server_secret(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        let (name, candidate) = (name.to_owned(), candidate.to_owned());
        single!(self, |ctx| secrets::server_secret(ctx, name, candidate)
            .await)
    }

    async fn quality_counts(&self, session_id: SessionId) -> Result<QualityCounts, StoreError> {
        quality::quality_counts(&self.read, session_id).await
    }

    async fn draw_audits(
        &self,
        session_id: SessionId,
        count: u32,
    ) -> Result<Vec<QuestId>, StoreError> {
        single!(self, |ctx| quality::draw_audits(ctx, session_id, count)
            .await)
    }

    async fn pending_audits(
        &self,
        session_id: Option<SessionId>,
        limit: u32,
    ) -> Result<Vec<QuestRow>, StoreError> {
        quality::pending_audits(&self.read, session_id, limit).await
    }

    async fn decide_audit(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<(), StoreError> {
        let (reviewer, note) = (reviewer.clone(), note.to_owned());
        single!(self, |ctx| quality::decide_audit(
            ctx, quest_id, reviewer, decision, note
        )
        .await)
    }

    async fn decided_reviews(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<crate::domain::agreement::Decided>, StoreError> {
        reads::decided_reviews(&self.read, session_id).await
    }

    async fn hold_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
        seconds: u32,
    ) -> Result<HeldDecisionRow, StoreError> {
        let (reviewer, note) = (reviewer.clone(), note.to_owned());
        single!(self, |ctx| held::hold_review(
            ctx, quest_id, reviewer, decision, note, seconds
        )
        .await)
    }

    async fn undo_review(&self, quest_id: QuestId, token: TokenId) -> Result<bool, StoreError> {
        single!(self, |ctx| held::undo_review(ctx, quest_id, token).await)
    }

    async fn take_due_reviews(&self, limit: u32) -> Result<Vec<HeldDecisionRow>, StoreError> {
        single!(self, |ctx| held::take_due_reviews(ctx, limit).await)
    }

    async fn record_held_review(
        &self,
        quest_id: QuestId,
        token: TokenId,
    ) -> Result<QuestRow, StoreError> {
        single!(self, |ctx| held::record_held_review(ctx, quest_id, token)
            .await)
    }

    async fn drop_held_review(
        &self,
        quest_id: QuestId,
        token: TokenId,
        outcome: &str,
    ) -> Result<(), StoreError> {
        let outcome = outcome.to_owned();
        single!(self, |ctx| held::drop_held_review(
            ctx, quest_id, token, outcome
        )
        .await)
    }

    async fn held_reviews(&self, token: TokenId) -> Result<Vec<HeldDecisionRow>, StoreError> {
        held::held_reviews(&self.read, token).await
    }

    async fn forget_held_outcomes(&self, token: TokenId) -> Result<(), StoreError> {
        single!(self, |ctx| held::forget_held_outcomes(ctx, token).await)
    }

    async fn next_held_review(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        held::next_held_review(&self.read).await
    }

    async fn calibration(
        &self,
        session_id: Option<SessionId>,
        disagreements: u32,
    ) -> Result<Calibration, StoreError> {
        calibration::calibration(&self.read, session_id, disagreements).await
    }

    async fn result_fields(&self, session_id: SessionId) -> Result<Vec<String>, StoreError> {
        reads::result_fields(&self.read, session_id).await
    }

    async fn export_page(
        &self,
        session_id: SessionId,
        after_row: Option<u64>,
        limit: u32,
        reviews: bool,
    ) -> Result<Vec<ExportRow>, StoreError> {
        reads::export_page(&self.read, session_id, after_row, limit, reviews).await
    }

    async fn create_token(&self, token: NewToken) -> Result<TokenRow, StoreError> {
        single!(self, |ctx| tokens::create_token(ctx, token).await)
    }

    async fn ensure_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
        replace: bool,
    ) -> Result<bool, StoreError> {
        let (name, hash) = (name.to_owned(), hash.to_owned());
        single!(self, |ctx| tokens::ensure_token(
            ctx, name, role, hash, replace
        )
        .await)
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        reads::list_tokens(&self.read).await
    }

    async fn revoke_token(&self, id: TokenId) -> Result<TokenRow, StoreError> {
        single!(self, |ctx| tokens::revoke_token(ctx, id).await)
    }

    async fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        reads::find_token(&self.read, hash).await
    }

    async fn source_info(&self, id: SessionId) -> Result<SourceInfo, StoreError> {
        inputs::source_info(&self.read, id).await
    }

    async fn source_chunk(&self, id: SessionId, seq: u64) -> Result<Option<Vec<u8>>, StoreError> {
        inputs::source_chunk(&self.read, id, seq).await
    }

    async fn agent_lease(
        &self,
        session_id: SessionId,
        agent: &AgentId,
    ) -> Result<Option<AgentLeaseRow>, StoreError> {
        reads::agent_lease(&self.read, session_id, agent, self.clock.now()).await
    }

    async fn create_browser_session(
        &self,
        hash: &str,
        token_id: TokenId,
        csrf: &str,
        seconds: u32,
    ) -> Result<BrowserSessionRow, StoreError> {
        let (hash, csrf) = (hash.to_owned(), csrf.to_owned());
        single!(self, |ctx| console::create_browser_session(
            ctx, hash, token_id, csrf, seconds
        )
        .await)
    }

    async fn find_browser_session(
        &self,
        hash: &str,
    ) -> Result<Option<BrowserSessionRow>, StoreError> {
        console::find_browser_session(&self.read, self.clock.now(), hash).await
    }

    async fn end_browser_session(&self, hash: &str) -> Result<(), StoreError> {
        let hash = hash.to_owned();
        single!(self, |ctx| console::end_browser_session(ctx, hash).await)
    }

    async fn skip_review(&self, hash: &str, quest: QuestId) -> Result<(), StoreError> {
        let hash = hash.to_owned();
        single!(self, |ctx| console::skip_review(ctx, hash, quest).await)
    }

    async fn review_skips(&self, hash: &str) -> Result<Vec<(QuestId, DateTime<Utc>)>, StoreError> {
        console::review_skips(&self.read, hash).await
    }

    async fn agent_stats(&self, session_id: SessionId) -> Result<Vec<AgentStatsRow>, StoreError> {
        console::agent_stats(&self.read, session_id).await
    }

    async fn failing_checks(
        &self,
        session_id: SessionId,
        tally: Tally,
        limit: u32,
    ) -> Result<Vec<FailingCheckRow>, StoreError> {
        console::failing_checks(&self.read, session_id, tally, limit).await
    }

    async fn throughput(
        &self,
        session_id: SessionId,
        minutes: u32,
    ) -> Result<Throughput, StoreError> {
        console::throughput(&self.read, self.clock.now(), session_id, minutes).await
    }

    async fn quest_page(
        &self,
        session_id: SessionId,
        query: &QuestQuery,
    ) -> Result<QuestPage, StoreError> {
        console::quest_page(&self.read, session_id, query).await
    }

    async fn start_recheck(
        &self,
        session_id: SessionId,
        by: &str,
        not_since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Option<RecheckRunRow>, StoreError> {
        let by = by.to_owned();
        single!(self, |ctx| rechecks::start_recheck(
            ctx, session_id, by, not_since
        )
        .await)
    }

    async fn recheck_summary(&self, session_id: SessionId) -> Result<RecheckSummary, StoreError> {
        rechecks::recheck_summary(&self.read, session_id).await
    }

    async fn due_rechecks(&self, limit: u32) -> Result<Vec<(RecheckRunId, QuestId)>, StoreError> {
        rechecks::due_rechecks(&self.read, limit).await
    }

    async fn recheck_job(&self, quest_id: QuestId) -> Result<Option<RecheckJob>, StoreError> {
        rechecks::recheck_job(&self.read, quest_id).await
    }

    async fn record_recheck(&self, recheck: NewRecheck) -> Result<RecheckRecorded, StoreError> {
        single!(self, |ctx| rechecks::record_recheck(ctx, recheck).await)
    }

    async fn rechecks(&self, quest_id: QuestId) -> Result<Vec<RecheckRow>, StoreError> {
        rechecks::rechecks(&self.read, quest_id).await
    }

    async fn agent_staleness(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<AgentStalenessRow>, StoreError> {
        rechecks::agent_staleness(&self.read, session_id).await
    }

    async fn pauses(&self, session_id: SessionId) -> Result<Vec<Pause>, StoreError> {
        pause_rule::list(&self.read, session_id).await
    }

    async fn resume_pause(
        &self,
        session_id: SessionId,
        token_id: TokenId,
        by: &str,
    ) -> Result<Pause, StoreError> {
        let by = by.to_owned();
        single!(self, |ctx| pause_rule::resume(
            ctx, session_id, token_id, by
        )
        .await)
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.clock.now()
    }
}
