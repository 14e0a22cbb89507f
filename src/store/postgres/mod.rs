//! The PostgreSQL store, for several `quest serve` replicas on one database.
//!
//! Every write is one transaction on a pool ([`tx`]): it locks the rows it
//! changes (`FOR UPDATE`, claims with `SKIP LOCKED`), runs the rules of
//! [`crate::domain::work`] on what it read, writes what they return, and
//! fences each later write by the lease id it checked. The triggers of
//! `migrations/postgres` repeat the rules and keep the running counts, so every
//! replica reads the same counts from the database.
//!
//! - [`leases`]: claims, heartbeats, releases and lapses;
//! - [`verdicts`]: submissions and the gate's verdicts;
//! - [`verify`]: L2 answers and human reviews;
//! - [`writes`]: scans, tokens and browser sessions;
//! - [`reads`] and [`console`]: every read;
//! - [`jobs`]: claims on background work (gate runs, L2 questions), shared by replicas;
//! - [`events`]: the events of every replica's commits, relayed to this one's watchers;
//! - [`codec`]: how values are bound.
//!
//! The modules under `store/sql` are written once for both engines and
//! compiled here against this engine's [`codec`], [`Tx`] and SQL fragments.

// First: its macros are for the modules below.
#[macro_use]
mod dialect;

mod batch;
mod codec;
mod events;
mod gold;
mod jobs;
mod leases;
mod native;
mod open;
mod pauses;
mod saves;
/// The code both engines share, compiled here against this engine.
#[path = "../sql/mod.rs"]
#[allow(clippy::duplicate_mod)] // one body, compiled for each engine
mod sql;
mod submits;
mod tx;
mod verdicts;
mod writes;

use sql::{
    calibration, console, held, inputs, pause_rule, quality, reads, rechecks, review, secrets,
    tokens, verify,
};

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::ids::{
    L2JobId, LeaseId, QuestId, RecheckRunId, SessionId, SubmissionId, TokenId,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::broadcast;
use tokio_util::sync::{CancellationToken, DropGuard};
use uuid::Uuid;

use super::*;
use crate::domain::review::Viewer;
use crate::domain::work::ReviewerId;
use crate::domain::{Clock, QuestEvent};
use batch::Batcher;
pub use open::describe_open_error;
use tx::{Db, Op, Tx};

/// The key of the advisory lock under which replicas starting together run
/// the migrations one at a time ("quest" in ASCII).
const MIGRATION_LOCK: i64 = 0x0071_7565_7374;

/// How long the first connection, and a connection from the pool, may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Where the store takes "now" from.
#[derive(Clone)]
pub enum TimeSource {
    /// The database's `now()`, read once per transaction: one clock for every replica.
    Database,
    /// An injected clock (tests move it instead of sleeping).
    Clock(Arc<dyn Clock>),
}

/// The PostgreSQL implementation of [`Store`].
#[derive(Clone)]
pub struct PgStore {
    db: Db,
    /// Concurrent `next`s of this replica, claimed together.
    nexts: Batcher<(SessionId, AgentId), LeaseOutcome>,
    /// Concurrent submits of this replica, recorded together.
    submits: Batcher<submits::Submit, SubmitOutcome>,
    /// Stops the event relay when the last clone of the store is dropped.
    _relay: Arc<DropGuard>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for PgStore {
    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.db.pool).await?;
        Ok(())
    }

    async fn backup(&self) -> Result<Backup, StoreError> {
        Err(Refusal::BackupUnsupported.into())
    }

    async fn create_session(&self, session: NewSession) -> Result<SessionRow, StoreError> {
        let id = self
            .write(Arc::new(session), |tx, s| {
                Box::pin(writes::create_session(tx, s))
            })
            .await?;
        self.get_session(id).await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        reads::list_sessions(&self.db.pool).await
    }

    async fn get_session(&self, id: SessionId) -> Result<SessionRow, StoreError> {
        reads::get_session(&self.db.pool, id).await
    }

    async fn session_source(&self, id: SessionId) -> Result<(String, String, Vec<u8>), StoreError> {
        inputs::whole_source(&self.db.pool, id).await
    }

    async fn session_status(&self, id: SessionId) -> Result<SessionStatus, StoreError> {
        reads::session_status(&self.db.pool, id, self.read_now().await?, &()).await
    }

    async fn lease_next(
        &self,
        session: SessionId,
        agent: &AgentId,
    ) -> Result<LeaseOutcome, StoreError> {
        self.nexts.run((session, agent.clone())).await
    }

    async fn heartbeat(
        &self,
        quest: QuestId,
        lease: LeaseId,
        token: TokenId,
    ) -> Result<LeaseRow, StoreError> {
        self.write((quest, lease, token), |tx, (q, l, t)| {
            Box::pin(leases::heartbeat(tx, q, l, t))
        })
        .await
    }

    async fn release(
        &self,
        quest: QuestId,
        lease: LeaseId,
        token: TokenId,
    ) -> Result<(), StoreError> {
        self.write((quest, lease, token), |tx, (q, l, t)| {
            Box::pin(leases::release(tx, q, l, t))
        })
        .await
    }

    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        self.write((), |tx, ()| Box::pin(leases::sweep(tx, None)))
            .await
    }

    async fn submit(
        &self,
        new: NewSubmission,
        decision: Option<GateDecision>,
    ) -> Result<SubmitOutcome, StoreError> {
        self.submits.run(Arc::new((new, decision))).await
    }

    async fn apply_verdict(
        &self,
        submission: SubmissionId,
        decision: GateDecision,
    ) -> Result<Decided, StoreError> {
        self.write(Arc::new((submission, decision)), |tx, a| {
            Box::pin(verdicts::apply_verdict(tx, a))
        })
        .await
    }

    async fn pending_submissions(&self) -> Result<Vec<SubmissionId>, StoreError> {
        reads::pending_submissions(&self.db.pool).await
    }

    async fn gate_job(&self, submission_id: SubmissionId) -> Result<GateJob, StoreError> {
        reads::gate_job(&self.db.pool, submission_id).await
    }

    async fn get_submission(&self, id: SubmissionId) -> Result<SubmissionRow, StoreError> {
        reads::get_submission(&self.db.pool, id).await
    }

    async fn result_holders(
        &self,
        session_id: SessionId,
        except: QuestId,
        field: &str,
        value: &str,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        reads::result_holders(&self.db.pool, session_id, except, field, value, limit).await
    }

    async fn submission_view(&self, id: SubmissionId) -> Result<SubmissionView, StoreError> {
        reads::submission_view(&self.db.pool, id, &()).await
    }

    async fn pending_l2_jobs(&self) -> Result<Vec<L2JobId>, StoreError> {
        reads::pending_l2_jobs(&self.db.pool).await
    }

    async fn l2_job(&self, id: L2JobId) -> Result<L2Job, StoreError> {
        reads::l2_job(&self.db.pool, id).await
    }

    async fn record_l2_answer(&self, answer: NewL2Answer) -> Result<L2Recorded, StoreError> {
        self.write(Arc::new(answer), |tx, a| {
            Box::pin(verify::record_l2_answer(tx, a))
        })
        .await
    }

    async fn l2_answers(&self, quest_id: QuestId) -> Result<Vec<L2AnswerRow>, StoreError> {
        reads::l2_answers(&self.db.pool, quest_id).await
    }

    async fn get_quest(&self, id: QuestId) -> Result<QuestRow, StoreError> {
        reads::get_quest(&self.db.pool, id).await
    }

    async fn quest_history(
        &self,
        id: QuestId,
    ) -> Result<(Vec<SubmissionRow>, Vec<ReviewDecisionRow>), StoreError> {
        reads::quest_history(&self.db.pool, id).await
    }

    async fn review_queue(
        &self,
        sessions: Option<&[SessionId]>,
        check: Option<&CheckFilter>,
        limit: u32,
        viewer: &Viewer,
    ) -> Result<Vec<QueuedQuest>, StoreError> {
        reads::review_queue(&self.db.pool, sessions, check, limit, viewer).await
    }

    async fn claim_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        seconds: u32,
    ) -> Result<DateTime<Utc>, StoreError> {
        self.write((quest_id, reviewer.clone(), seconds), |tx, (q, r, s)| {
            Box::pin(review::claim_review(tx, q, r, s))
        })
        .await
    }

    async fn release_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
    ) -> Result<(), StoreError> {
        self.write((quest_id, reviewer.clone()), |tx, (q, r)| {
            Box::pin(review::release_review(tx, q, r))
        })
        .await
    }

    async fn decide_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, StoreError> {
        let args = (quest_id, reviewer.clone(), decision, note.to_owned());
        self.write(args, |tx, (q, r, d, n)| {
            Box::pin(review::decide_review(tx, q, r, d, n, review::Kind::Single))
        })
        .await
    }

    async fn decide_review_in_bulk(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<QuestRow, StoreError> {
        let args = (quest_id, reviewer.clone(), decision, note.to_owned());
        self.write(args, |tx, (q, r, d, n)| {
            Box::pin(review::decide_review(tx, q, r, d, n, review::Kind::Bulk))
        })
        .await
    }

    async fn server_secret(&self, name: &str, candidate: &str) -> Result<String, StoreError> {
        self.write((name.to_owned(), candidate.to_owned()), |tx, (n, c)| {
            Box::pin(secrets::server_secret(tx, n, c))
        })
        .await
    }

    async fn quality_counts(&self, session_id: SessionId) -> Result<QualityCounts, StoreError> {
        quality::quality_counts(&self.db.pool, session_id).await
    }

    async fn draw_audits(
        &self,
        session_id: SessionId,
        count: u32,
    ) -> Result<Vec<QuestId>, StoreError> {
        self.write((session_id, count), |tx, (s, n)| {
            Box::pin(quality::draw_audits(tx, s, n))
        })
        .await
    }

    async fn pending_audits(
        &self,
        session_id: Option<SessionId>,
        limit: u32,
    ) -> Result<Vec<QuestRow>, StoreError> {
        quality::pending_audits(&self.db.pool, session_id, limit).await
    }

    async fn decide_audit(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
    ) -> Result<(), StoreError> {
        let args = (quest_id, reviewer.clone(), decision, note.to_owned());
        self.write(args, |tx, (q, r, d, n)| {
            Box::pin(quality::decide_audit(tx, q, r, d, n))
        })
        .await
    }

    async fn decided_reviews(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<crate::domain::agreement::Decided>, StoreError> {
        reads::decided_reviews(&self.db.pool, session_id).await
    }

    async fn hold_review(
        &self,
        quest_id: QuestId,
        reviewer: &ReviewerId,
        decision: Decision,
        note: &str,
        seconds: u32,
    ) -> Result<HeldDecisionRow, StoreError> {
        let args = (
            quest_id,
            reviewer.clone(),
            decision,
            note.to_owned(),
            seconds,
        );
        self.write(args, |tx, (q, r, d, n, s)| {
            Box::pin(held::hold_review(tx, q, r, d, n, s))
        })
        .await
    }

    async fn undo_review(&self, quest_id: QuestId, token: TokenId) -> Result<bool, StoreError> {
        self.write((quest_id, token), |tx, (q, t)| {
            Box::pin(held::undo_review(tx, q, t))
        })
        .await
    }

    async fn take_due_reviews(&self, limit: u32) -> Result<Vec<HeldDecisionRow>, StoreError> {
        self.write(limit, |tx, l| Box::pin(held::take_due_reviews(tx, l)))
            .await
    }

    async fn record_held_review(
        &self,
        quest_id: QuestId,
        token: TokenId,
    ) -> Result<QuestRow, StoreError> {
        self.write((quest_id, token), |tx, (q, t)| {
            Box::pin(held::record_held_review(tx, q, t))
        })
        .await
    }

    async fn drop_held_review(
        &self,
        quest_id: QuestId,
        token: TokenId,
        outcome: &str,
    ) -> Result<(), StoreError> {
        self.write((quest_id, token, outcome.to_owned()), |tx, (q, t, o)| {
            Box::pin(held::drop_held_review(tx, q, t, o))
        })
        .await
    }

    async fn held_reviews(&self, token: TokenId) -> Result<Vec<HeldDecisionRow>, StoreError> {
        held::held_reviews(&self.db.pool, token).await
    }

    async fn forget_held_outcomes(&self, token: TokenId) -> Result<(), StoreError> {
        self.write(token, |tx, t| Box::pin(held::forget_held_outcomes(tx, t)))
            .await
    }

    async fn next_held_review(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        held::next_held_review(&self.db.pool).await
    }

    async fn calibration(
        &self,
        session_id: Option<SessionId>,
        disagreements: u32,
    ) -> Result<Calibration, StoreError> {
        calibration::calibration(&self.db.pool, session_id, disagreements).await
    }

    async fn result_fields(&self, session_id: SessionId) -> Result<Vec<String>, StoreError> {
        reads::result_fields(&self.db.pool, session_id).await
    }

    async fn export_page(
        &self,
        session_id: SessionId,
        after_row: Option<u64>,
        limit: u32,
        reviews: bool,
    ) -> Result<Vec<ExportRow>, StoreError> {
        reads::export_page(&self.db.pool, session_id, after_row, limit, reviews).await
    }

    async fn create_token(&self, token: NewToken) -> Result<TokenRow, StoreError> {
        self.write(Arc::new(token), |tx, t| {
            Box::pin(tokens::create_token(tx, (*t).clone()))
        })
        .await
    }

    async fn ensure_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
        replace: bool,
    ) -> Result<bool, StoreError> {
        let args = (name.to_owned(), role, hash.to_owned(), replace);
        self.write(args, |tx, (n, r, h, replace)| {
            Box::pin(tokens::ensure_token(tx, n, r, h, replace))
        })
        .await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        reads::list_tokens(&self.db.pool).await
    }

    async fn revoke_token(&self, id: TokenId) -> Result<TokenRow, StoreError> {
        self.write(id, |tx, id| Box::pin(tokens::revoke_token(tx, id)))
            .await
    }

    async fn find_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        reads::find_token(&self.db.pool, hash).await
    }

    async fn source_info(&self, id: SessionId) -> Result<SourceInfo, StoreError> {
        inputs::source_info(&self.db.pool, id).await
    }

    async fn source_chunk(&self, id: SessionId, seq: u64) -> Result<Option<Vec<u8>>, StoreError> {
        inputs::source_chunk(&self.db.pool, id, seq).await
    }

    async fn agent_lease(
        &self,
        session_id: SessionId,
        agent: &AgentId,
    ) -> Result<Option<AgentLeaseRow>, StoreError> {
        reads::agent_lease(&self.db.pool, session_id, agent, self.read_now().await?).await
    }

    async fn create_browser_session(
        &self,
        hash: &str,
        token_id: TokenId,
        csrf: &str,
        seconds: u32,
    ) -> Result<BrowserSessionRow, StoreError> {
        let args = (hash.to_owned(), token_id, csrf.to_owned(), seconds);
        self.write(args, |tx, (h, t, c, s)| {
            Box::pin(console::create_browser_session(tx, h, t, c, s))
        })
        .await
    }

    async fn find_browser_session(
        &self,
        hash: &str,
    ) -> Result<Option<BrowserSessionRow>, StoreError> {
        console::find_browser_session(&self.db.pool, self.read_now().await?, hash).await
    }

    async fn end_browser_session(&self, hash: &str) -> Result<(), StoreError> {
        self.write(hash.to_owned(), |tx, h| {
            Box::pin(console::end_browser_session(tx, h))
        })
        .await
    }

    async fn skip_review(&self, hash: &str, quest: QuestId) -> Result<(), StoreError> {
        self.write((hash.to_owned(), quest), |tx, (h, q)| {
            Box::pin(console::skip_review(tx, h, q))
        })
        .await
    }

    async fn review_skips(&self, hash: &str) -> Result<Vec<(QuestId, DateTime<Utc>)>, StoreError> {
        console::review_skips(&self.db.pool, hash).await
    }

    async fn agent_stats(&self, session_id: SessionId) -> Result<Vec<AgentStatsRow>, StoreError> {
        console::agent_stats(&self.db.pool, session_id).await
    }

    async fn failing_checks(
        &self,
        session_id: SessionId,
        tally: Tally,
        limit: u32,
    ) -> Result<Vec<FailingCheckRow>, StoreError> {
        console::failing_checks(&self.db.pool, session_id, tally, limit).await
    }

    async fn throughput(
        &self,
        session_id: SessionId,
        minutes: u32,
    ) -> Result<Throughput, StoreError> {
        console::throughput(&self.db.pool, self.read_now().await?, session_id, minutes).await
    }

    async fn quest_page(
        &self,
        session_id: SessionId,
        query: &QuestQuery,
    ) -> Result<QuestPage, StoreError> {
        console::quest_page(&self.db.pool, session_id, query).await
    }

    async fn claim_job(&self, job: Job, seconds: u32) -> Result<Option<JobClaim>, StoreError> {
        self.write((self.db.origin, job, seconds), |tx, (o, j, s)| {
            Box::pin(jobs::claim(tx, o, j, s))
        })
        .await
    }

    async fn renew_job(&self, claim: &JobClaim, seconds: u32) -> Result<bool, StoreError> {
        self.write((*claim, seconds), |tx, (c, s)| {
            Box::pin(jobs::renew(tx, c, s))
        })
        .await
    }

    async fn release_job(&self, claim: &JobClaim) -> Result<(), StoreError> {
        self.write(*claim, |tx, c| Box::pin(jobs::release(tx, c)))
            .await
    }

    async fn release_jobs(&self) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM job_claims WHERE holder = $1")
            .bind(self.db.origin)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    async fn orphaned_jobs(&self, grace_seconds: u32) -> Result<Vec<Job>, StoreError> {
        self.write(grace_seconds, |tx, g| Box::pin(jobs::orphaned(tx, g)))
            .await
    }

    async fn start_recheck(
        &self,
        session_id: SessionId,
        by: &str,
        not_since: Option<DateTime<Utc>>,
    ) -> Result<Option<RecheckRunRow>, StoreError> {
        self.write((session_id, by.to_owned(), not_since), |tx, (s, b, n)| {
            Box::pin(rechecks::start_recheck(tx, s, b, n))
        })
        .await
    }

    async fn recheck_summary(&self, session_id: SessionId) -> Result<RecheckSummary, StoreError> {
        rechecks::recheck_summary(&self.db.pool, session_id).await
    }

    async fn due_rechecks(&self, limit: u32) -> Result<Vec<(RecheckRunId, QuestId)>, StoreError> {
        rechecks::due_rechecks(&self.db.pool, limit).await
    }

    async fn recheck_job(&self, quest_id: QuestId) -> Result<Option<RecheckJob>, StoreError> {
        rechecks::recheck_job(&self.db.pool, quest_id).await
    }

    async fn record_recheck(&self, recheck: NewRecheck) -> Result<RecheckRecorded, StoreError> {
        self.write(Arc::new(recheck), |tx, r| {
            Box::pin(rechecks::record_recheck(tx, (*r).clone()))
        })
        .await
    }

    async fn rechecks(&self, quest_id: QuestId) -> Result<Vec<RecheckRow>, StoreError> {
        rechecks::rechecks(&self.db.pool, quest_id).await
    }

    async fn agent_staleness(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<AgentStalenessRow>, StoreError> {
        rechecks::agent_staleness(&self.db.pool, session_id).await
    }

    async fn pauses(&self, session_id: SessionId) -> Result<Vec<Pause>, StoreError> {
        pause_rule::list(&self.db.pool, session_id).await
    }

    async fn resume_pause(
        &self,
        session_id: SessionId,
        token_id: TokenId,
        by: &str,
    ) -> Result<Pause, StoreError> {
        self.write((session_id, token_id, by.to_owned()), |tx, (s, t, b)| {
            Box::pin(pause_rule::resume(tx, s, t, b))
        })
        .await
    }

    fn now(&self) -> DateTime<Utc> {
        self.db.clock()
    }
}
