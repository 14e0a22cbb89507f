//! Submissions and verdicts: a submit records a result (PENDING, or with the
//! verdict of a gate that ran in the request), and the gate runner's verdict
//! decides a PENDING one. Each kind is one group of multi-row statements.

use crate::domain::ids::{L2JobId, LeaseId, QuestId, SessionId, SubmissionId, TokenId};
use std::collections::HashMap;

use serde_json::{Value, json};

use super::codec::*;
use super::leases::{end_leases, renew_leases, save_quests};
use super::writer::{GroupError, GroupResult, Kind, Ranked, WriteCtx, expect_rows};
use crate::domain::EventKind;
use crate::domain::replay::{self, IdempotencyKey, Replay};
use crate::domain::work::{self, LeaseEnd, LeaseFacts};
use crate::store::common::{incoming, pending_submission, recorded as common_recorded};
use crate::store::decision::{self, LeaseWrite};
use crate::store::{
    Counts, Decided, GateDecision, LeaseRow, NewSubmission, QuestRow, SessionRow, StoreError,
    SubmissionRow, SubmissionView, SubmitOutcome,
};

/// A result for a held quest, with the verdict when the gate already ran.
pub struct Submit {
    pub new: NewSubmission,
    pub decision: Option<GateDecision>,
}

/// The gate runner's verdict on a PENDING submission.
pub struct Decide {
    pub submission: SubmissionId,
    pub decision: GateDecision,
}

impl Ranked for Decide {
    const RANK: u8 = 3;
}
impl Ranked for Submit {
    const RANK: u8 = 4;
}

/// What one group writes, gathered so that each table gets one statement.
#[derive(Default)]
struct Writes {
    new_submissions: Vec<Value>,
    decided_submissions: Vec<Value>,
    quests: Vec<QuestRow>,
    ended: Vec<(LeaseId, LeaseEnd)>,
    renewed: Vec<(LeaseId, chrono::DateTime<chrono::Utc>)>,
    l2_jobs: Vec<Value>,
}

impl Writes {
    async fn apply(self, ctx: &mut WriteCtx) -> Result<(), GroupError> {
        // Submissions first: the triggers accept a verdict on a quest only
        // with its decided submission in place.
        if !self.new_submissions.is_empty() {
            let n = ctx
                .exec(
                    sqlx::query(
                        "INSERT INTO submissions (id, quest_id, session_id, lease_id, agent, result, result_hash,
                           verdict, facts, evidence, gate, gate_version, receipt, state_after, tries_after,
                           created_at, decided_at, idempotency_token, idempotency_key, repeats)
                         SELECT j.value->>'id', j.value->>'quest_id', j.value->>'session_id', j.value->>'lease_id',
                           j.value->>'agent', j.value->>'result', j.value->>'result_hash', j.value->>'verdict',
                           j.value->>'facts', j.value->>'evidence', j.value->>'gate', j.value->>'gate_version',
                           j.value->>'receipt', j.value->>'state_after', j.value->>'tries_after',
                           j.value->>'created_at', j.value->>'decided_at', j.value->>'idempotency_token',
                           j.value->>'idempotency_key', j.value->>'repeats'
                         FROM json_each(?1) j",
                    )
                    .bind(json(&self.new_submissions)),
                )
                .await?;
            expect_rows("the new submissions", n, self.new_submissions.len())?;
        }
        if !self.decided_submissions.is_empty() {
            let n = ctx
                .exec(
                    sqlx::query(
                        "UPDATE submissions SET verdict = j.value->>'verdict', facts = j.value->>'facts',
                           evidence = j.value->>'evidence', gate = j.value->>'gate',
                           gate_version = j.value->>'gate_version', receipt = j.value->>'receipt',
                           state_after = j.value->>'state_after', tries_after = j.value->>'tries_after',
                           decided_at = j.value->>'decided_at'
                         FROM json_each(?1) j
                         WHERE submissions.id = j.value->>'id' AND submissions.verdict = 'PENDING'",
                    )
                    .bind(json(&self.decided_submissions)),
                )
                .await?;
            expect_rows("the decided submissions", n, self.decided_submissions.len())?;
        }
        save_quests(ctx, &self.quests).await?;
        end_leases(ctx, &self.ended).await?;
        renew_leases(ctx, &self.renewed).await?;
        if !self.l2_jobs.is_empty() {
            let n = ctx
                .exec(
                    sqlx::query(
                        "INSERT INTO l2_jobs (id, submission_id, quest_id, session_id, verifier, question_index,
                           question, flag_on, request, created_at)
                         SELECT j.value->>'id', j.value->>'submission_id', j.value->>'quest_id',
                           j.value->>'session_id', j.value->>'verifier', j.value->>'question_index',
                           j.value->>'question', j.value->>'flag_on', j.value->>'request', ?1
                         FROM json_each(?2) j",
                    )
                    .bind(ts(ctx.now))
                    .bind(json(&self.l2_jobs)),
                )
                .await?;
            expect_rows("the L2 jobs", n, self.l2_jobs.len())?;
        }
        Ok(())
    }
}

/// A submission as the insert reads it; `key` is the idempotency key it was
/// sent with, kept under the sender's token.
fn submission_json(s: &SubmissionRow, result_hash: &str, key: Option<&IdempotencyKey>) -> Value {
    json!({
        "idempotency_token": key.map(|_| s.agent.token.to_string()),
        "idempotency_key": key.map(IdempotencyKey::as_str),
        "repeats": s.repeats.map(|id| id.to_string()),
        "id": s.id.to_string(),
        "quest_id": s.quest_id.to_string(),
        "session_id": s.session_id.to_string(),
        "lease_id": s.lease_id.to_string(),
        "agent": s.agent.to_string(),
        "result": json(&s.result),
        "result_hash": result_hash,
        "verdict": s.verdict.as_str(),
        "facts": json(&s.facts),
        "evidence": json(&s.evidence),
        "gate": s.gate,
        "gate_version": s.gate_version,
        "receipt": s.receipt,
        "state_after": s.state_after.map(|st| st.as_str()),
        "tries_after": s.tries_after,
        "created_at": ts(s.created_at),
        "decided_at": s.decided_at.map(ts),
    })
}

/// Applies `d` to `quest` through `submission` (PENDING until now), as
/// [`decision::decide`] says, and gathers their writes. Returns the lease
/// the holder keeps, if any, and the L2 jobs created.
fn decide(
    ctx: &mut WriteCtx,
    writes: &mut Writes,
    session: &SessionRow,
    quest: &mut QuestRow,
    submission: &mut SubmissionRow,
    lease: &LeaseFacts,
    d: GateDecision,
) -> Result<(Option<LeaseRow>, Vec<L2JobId>), StoreError> {
    let decided = decision::decide(ctx.now, session, quest, submission, lease, d)?;
    match decided.lease {
        LeaseWrite::Renewed(id, until) => writes.renewed.push((id, until)),
        LeaseWrite::Ended(id, end) => writes.ended.push((id, end)),
    }
    let mut jobs = Vec::with_capacity(decided.l2_jobs.len());
    for job in decided.l2_jobs {
        jobs.push(job.id);
        writes.l2_jobs.push(json!({
            "id": job.id.to_string(),
            "submission_id": job.submission_id.to_string(),
            "quest_id": job.quest_id.to_string(),
            "session_id": job.session_id.to_string(),
            "verifier": job.verifier,
            "question_index": job.index,
            "question": job.question,
            "flag_on": job.flag_on,
            "request": job.request,
        }));
    }
    ctx.moved_from(EventKind::Decided, quest, decided.before, Some(submission));
    Ok((decided.kept, jobs))
}

impl Kind for Submit {
    type Out = SubmitOutcome;
    type Key = QuestId;
    fn key(&self) -> QuestId {
        self.new.quest_id
    }
    async fn run<'a>(ctx: &'a mut WriteCtx, reqs: &'a [Self]) -> GroupResult<SubmitOutcome> {
        let wanted: Vec<Value> = reqs
            .iter()
            .map(|r| json!({"q": r.new.quest_id.to_string(), "l": r.new.lease_id.to_string()}))
            .collect();
        let sql = format!(
            "SELECT j.key AS i, q.*, {LEASE_PREFIXED}, ls.id AS s_id
             FROM json_each(?1) j
             JOIN quests q ON q.id = j.value->>'q'
             LEFT JOIN leases l ON l.id = j.value->>'l' AND l.quest_id = q.id
             LEFT JOIN submissions ls ON ls.id = (
                 SELECT id FROM submissions WHERE quest_id = q.id ORDER BY created_at DESC, id DESC LIMIT 1)"
        );
        let mut found = HashMap::new();
        let mut latest_ids = Vec::new();
        for row in ctx
            .rows(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(json(&wanted)))
            .await?
        {
            let latest = row.opt_str("s_id")?;
            latest_ids.extend(latest.clone());
            let latest = latest.map(|id| uuid::<SubmissionId>(&id)).transpose()?;
            found.insert(
                row.int("i")? as usize,
                (quest_row(&row)?, prefixed_lease(&row)?, latest),
            );
        }
        let recorded = recorded_submissions(ctx, reqs, &latest_ids).await?;
        let mut writes = Writes::default();
        let mut out = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            let Some((quest, lease, latest)) = found.remove(&i) else {
                out.push(Err(StoreError::NotFound("quest")));
                continue;
            };
            let new = &r.new;
            let by_key = new
                .idempotency_key
                .as_ref()
                .and_then(|k| recorded.by_key.get(&(new.token_id, k.as_str().to_owned())));
            let latest = latest.and_then(|id| recorded.by_id.get(&id));
            let rule = replay::decide(
                incoming(new),
                by_key.map(|(s, h)| common_recorded(s, h)),
                latest.map(|(s, h)| common_recorded(s, h)),
            );
            out.push(match rule {
                Err(refusal) => Err(refusal.into()),
                Ok(Replay::Answer(id)) => {
                    match [by_key, latest]
                        .into_iter()
                        .flatten()
                        .find(|(s, _)| s.id == id)
                    {
                        Some((s, _)) => replayed(ctx, s.clone(), quest, lease).await,
                        None => Err(StoreError::NotFound("submission")),
                    }
                }
                Ok(Replay::New { repeats }) => {
                    record(ctx, &mut writes, r, quest, lease, repeats).await
                }
            });
        }
        writes.apply(ctx).await?;
        Ok(out)
    }

    fn finish(out: &mut SubmitOutcome, counts: &HashMap<SessionId, Counts>) {
        let view = match out {
            SubmitOutcome::Recorded { view, .. } | SubmitOutcome::Replayed(view) => view,
        };
        view.remaining = counts
            .get(&view.quest.session_id)
            .map_or(0, Counts::remaining);
    }
}

/// The submissions a group's rule looks at, each with its result's digest:
/// the quests' latest (by id) and those recorded under the requests' keys
/// (by token and key), read in one statement.
#[derive(Default)]
struct RecordedSubmissions {
    by_id: HashMap<SubmissionId, (SubmissionRow, String)>,
    by_key: HashMap<(TokenId, String), (SubmissionRow, String)>,
}

async fn recorded_submissions(
    ctx: &mut WriteCtx,
    reqs: &[Submit],
    latest: &[String],
) -> Result<RecordedSubmissions, GroupError> {
    let keys: Vec<Value> = reqs
        .iter()
        .filter_map(|r| {
            let key = r.new.idempotency_key.as_ref()?;
            Some(json!({"t": r.new.token_id.to_string(), "k": key.as_str()}))
        })
        .collect();
    let mut out = RecordedSubmissions::default();
    if keys.is_empty() && latest.is_empty() {
        return Ok(out);
    }
    let rows = ctx
        .rows(
            sqlx::query(
                "SELECT * FROM submissions WHERE id IN (SELECT value FROM json_each(?1))
                 UNION
                 SELECT s.* FROM json_each(?2) j JOIN submissions s
                   ON s.idempotency_token = j.value->>'t' AND s.idempotency_key = j.value->>'k'",
            )
            .bind(json(&latest))
            .bind(json(&keys)),
        )
        .await?;
    for row in &rows {
        let s = submission_row(row)?;
        let hash = row.str("result_hash")?;
        if let (Some(token), Some(key)) = (
            row.opt_str("idempotency_token")?,
            row.opt_str("idempotency_key")?,
        ) {
            out.by_key
                .insert((uuid(&token)?, key), (s.clone(), hash.clone()));
        }
        out.by_id.insert(s.id, (s, hash));
    }
    Ok(out)
}

/// A recorded submission answers the submit: its record as it stands.
async fn replayed(
    ctx: &mut WriteCtx,
    submission: SubmissionRow,
    quest: QuestRow,
    lease: Option<LeaseFacts>,
) -> Result<SubmitOutcome, StoreError> {
    let session = ctx.session(quest.session_id).await?;
    // Only the quest's own live lease is shown (a keyed retry may come after it ended).
    let lease = lease.filter(|l| l.ended.is_none() && quest.lease_id == Some(l.id));
    Ok(SubmitOutcome::Replayed(SubmissionView {
        submission,
        max_tries: session.config.max_tries,
        remaining: 0,
        lease: lease.as_ref().map(lease_of),
        quest,
    }))
}

/// A new submission on a held lease: PENDING, or decided with its verdict.
async fn record(
    ctx: &mut WriteCtx,
    writes: &mut Writes,
    r: &Submit,
    mut quest: QuestRow,
    lease: Option<LeaseFacts>,
    repeats: Option<SubmissionId>,
) -> Result<SubmitOutcome, StoreError> {
    let new = &r.new;
    work::check_hold(
        status_of(&quest),
        quest.lease_id,
        lease.as_ref(),
        new.lease_id,
        new.token_id,
        ctx.now,
    )?;
    let lease = lease.ok_or(StoreError::NotFound("lease"))?;
    let session = ctx.session(quest.session_id).await?;
    let before = status_of(&quest);
    let checking = work::check_submit(before)?;
    let mut submission = pending_submission(&quest, new, &lease.agent, repeats, ctx.now);
    ctx.submitted(quest.session_id);
    // Watchers see the same two steps whether the gate ran here or on the runner.
    set_status(&mut quest, checking);
    quest.updated_at = ctx.now;
    ctx.moved_from(EventKind::Submitted, &quest, before, Some(&submission));
    let (kept, l2_jobs) = match r.decision.clone() {
        Some(d) => {
            quest.lease_id = Some(lease.id);
            decide(
                ctx,
                writes,
                &session,
                &mut quest,
                &mut submission,
                &lease,
                d,
            )?
        }
        None => (Some(lease_of(&lease)), Vec::new()),
    };
    writes.new_submissions.push(submission_json(
        &submission,
        &new.result_hash,
        new.idempotency_key.as_ref(),
    ));
    writes.quests.push(quest.clone());
    Ok(SubmitOutcome::Recorded {
        view: SubmissionView {
            submission,
            quest,
            max_tries: session.config.max_tries,
            remaining: 0,
            lease: kept,
        },
        l2_jobs,
    })
}

impl Kind for Decide {
    type Out = Decided;
    type Key = SubmissionId;
    fn key(&self) -> SubmissionId {
        self.submission
    }
    async fn run<'a>(ctx: &'a mut WriteCtx, reqs: &'a [Self]) -> GroupResult<Decided> {
        let ids: Vec<String> = reqs.iter().map(|r| r.submission.to_string()).collect();
        let mut submissions = HashMap::new();
        for row in ctx
            .rows(
                sqlx::query("SELECT s.* FROM json_each(?1) j JOIN submissions s ON s.id = j.value")
                    .bind(json(&ids)),
            )
            .await?
        {
            let s = submission_row(&row)?;
            submissions.insert(s.id, s);
        }
        let quest_ids: Vec<String> = submissions
            .values()
            .map(|s| s.quest_id.to_string())
            .collect();
        let sql = format!(
            "SELECT q.*, {LEASE_PREFIXED} FROM json_each(?1) j JOIN quests q ON q.id = j.value
             LEFT JOIN leases l ON l.id = q.lease_id"
        );
        let mut quests = HashMap::new();
        for row in ctx
            .rows(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(json(&quest_ids)))
            .await?
        {
            let q = quest_row(&row)?;
            quests.insert(q.id, (q, prefixed_lease(&row)?));
        }
        let mut writes = Writes::default();
        let mut out = Vec::with_capacity(reqs.len());
        for r in reqs {
            out.push(decide_pending(ctx, &mut writes, r, &mut submissions, &mut quests).await);
        }
        writes.apply(ctx).await?;
        Ok(out)
    }
}

async fn decide_pending(
    ctx: &mut WriteCtx,
    writes: &mut Writes,
    r: &Decide,
    submissions: &mut HashMap<SubmissionId, SubmissionRow>,
    quests: &mut HashMap<QuestId, (QuestRow, Option<LeaseFacts>)>,
) -> Result<Decided, StoreError> {
    let mut submission = submissions
        .remove(&r.submission)
        .ok_or(StoreError::NotFound("submission"))?;
    let (mut quest, lease) = quests
        .remove(&submission.quest_id)
        .ok_or(StoreError::NotFound("quest"))?;
    let Some(lease) = decision::checking_lease(&quest, &submission, lease)? else {
        return Ok(Decided {
            submission,
            quest,
            l2_jobs: Vec::new(),
        });
    };
    let session = ctx.session(quest.session_id).await?;
    let (_, l2_jobs) = decide(
        ctx,
        writes,
        &session,
        &mut quest,
        &mut submission,
        &lease,
        r.decision.clone(),
    )?;
    writes
        .decided_submissions
        .push(submission_json(&submission, "", None));
    writes.quests.push(quest.clone());
    Ok(Decided {
        submission,
        quest,
        l2_jobs,
    })
}
