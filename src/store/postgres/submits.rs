//! `submit`, for a batch of concurrent requests (see [`super::batch`]): their
//! quests locked in one statement (in id order, so that batches on several
//! replicas never deadlock), the latest submission of each in another, the
//! rules of [`crate::domain::work`] run on each in turn, then one statement
//! per kind of row written. A request the rules refuse writes nothing and
//! publishes nothing; the others go on.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::Row;
use sqlx::postgres::PgRow;

use super::batch::{Answers, Keyed};
use super::codec::*;
use super::saves::insert_submissions;
use super::tx::Tx;
use super::verdicts::{Writes, decide, remaining};
use crate::domain::EventKind;
use crate::domain::ids::{LeaseId, QuestId, SessionId, TokenId};
use crate::domain::replay::{self, IdempotencyKey, Replay};
use crate::domain::work;
use crate::store::common::{
    incoming, lease_of, pending_submission, recorded, set_status, status_of,
};
use crate::store::{
    GateDecision, LeaseRow, NewSubmission, QuestRow, StoreError, SubmissionRow, SubmissionView,
    SubmitOutcome,
};

/// A submit: the new result, and the verdict of a gate that ran in the request.
pub type Submit = Arc<(NewSubmission, Option<GateDecision>)>;

impl Keyed for Submit {
    type Key = QuestId;
    fn key(&self) -> QuestId {
        self.0.quest_id
    }
}

/// What a submit answers, but for the session's `remaining`, read once all
/// of the batch is written.
enum Answer {
    Replayed(Partial),
    Recorded(Partial, Vec<crate::domain::ids::L2JobId>),
}

struct Partial {
    submission: SubmissionRow,
    quest: QuestRow,
    lease: Option<LeaseRow>,
    max_tries: u32,
}

/// The rows a batch reads before it decides.
struct Read {
    /// Each quest, locked, with the lease its request names (if it is the quest's).
    quests: HashMap<QuestId, PgRow>,
    /// The latest submission of each quest, with its result's digest.
    latest: HashMap<QuestId, (SubmissionRow, String)>,
    /// The submissions recorded under the requests' (token, key), with their digests.
    by_key: HashMap<(TokenId, String), (SubmissionRow, String)>,
}

pub async fn submit_many(
    tx: &mut Tx,
    reqs: &[Submit],
) -> Result<Answers<SubmitOutcome>, StoreError> {
    let read = read(tx, reqs).await?;
    let mut writes = Writes::default();
    let mut new: Vec<(SubmissionRow, String, Option<IdempotencyKey>)> = Vec::new();
    let mut answers = Vec::with_capacity(reqs.len());
    for req in reqs {
        let events = tx.events.len();
        let mut own = Writes::default();
        match one(tx, &read, req, &mut own).await {
            Ok((answer, submission)) => {
                writes.extend(own);
                new.extend(
                    submission
                        .map(|s| (s, req.0.result_hash.clone(), req.0.idempotency_key.clone())),
                );
                answers.push(Ok(answer));
            }
            Err(e) => {
                // Refused: nothing of it is written, and its events go too.
                tx.events.truncate(events);
                answers.push(Err(e));
            }
        }
    }
    let rows: Vec<(&SubmissionRow, &str, Option<&IdempotencyKey>)> = new
        .iter()
        .map(|(s, h, k)| (s, h.as_str(), k.as_ref()))
        .collect();
    insert_submissions(tx, &rows).await?;
    writes.apply(tx).await?;
    let mut left: HashMap<SessionId, u64> = HashMap::new();
    let mut out = Vec::with_capacity(answers.len());
    for answer in answers {
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                out.push(Err(e));
                continue;
            }
        };
        let (Answer::Replayed(p) | Answer::Recorded(p, _)) = &answer;
        let session_id = p.quest.session_id;
        let remaining = match left.get(&session_id) {
            Some(n) => *n,
            None => *left
                .entry(session_id)
                .or_insert(remaining(tx, session_id).await?),
        };
        out.push(Ok(match answer {
            Answer::Replayed(p) => SubmitOutcome::Replayed(view(p, remaining)),
            Answer::Recorded(p, l2_jobs) => SubmitOutcome::Recorded {
                view: view(p, remaining),
                l2_jobs,
            },
        }));
    }
    Ok(out)
}

fn view(p: Partial, remaining: u64) -> SubmissionView {
    SubmissionView {
        submission: p.submission,
        max_tries: p.max_tries,
        remaining,
        lease: p.lease,
        quest: p.quest,
    }
}

/// Locks the batch's quests and reads their latest submissions.
async fn read(tx: &mut Tx, reqs: &[Submit]) -> Result<Read, StoreError> {
    let ids: Vec<QuestId> = reqs.iter().map(|r| r.0.quest_id).collect();
    let leases: Vec<LeaseId> = reqs.iter().map(|r| r.0.lease_id).collect();
    let sql = format!(
        "SELECT q.*, {LEASE_PREFIXED} FROM quests q
         JOIN unnest($1::uuid[], $2::uuid[]) AS u(quest, lease) ON q.id = u.quest
         LEFT JOIN leases l ON l.id = u.lease AND l.quest_id = q.id
         ORDER BY q.id FOR UPDATE OF q"
    );
    let mut quests = HashMap::with_capacity(reqs.len());
    for row in sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(&ids)
        .bind(&leases)
        .fetch_all(tx.db())
        .await?
    {
        quests.insert(row.try_get::<QuestId, _>("id")?, row);
    }
    let mut latest = HashMap::with_capacity(reqs.len());
    for row in sqlx::query(
        "SELECT DISTINCT ON (quest_id) * FROM submissions WHERE quest_id = ANY($1)
         ORDER BY quest_id, created_at DESC, id DESC",
    )
    .bind(&ids)
    .fetch_all(tx.db())
    .await?
    {
        let hash: String = row.try_get("result_hash")?;
        let s = submission_row(&row)?;
        latest.insert(s.quest_id, (s, hash));
    }
    let (tokens, keys): (Vec<TokenId>, Vec<&str>) = reqs
        .iter()
        .filter_map(|r| Some((r.0.token_id, r.0.idempotency_key.as_ref()?.as_str())))
        .unzip();
    let mut by_key = HashMap::new();
    if !keys.is_empty() {
        for row in sqlx::query(
            "SELECT s.* FROM unnest($1::uuid[], $2::text[]) AS k(token, key)
             JOIN submissions s ON s.idempotency_token = k.token AND s.idempotency_key = k.key",
        )
        .bind(&tokens)
        .bind(&keys)
        .fetch_all(tx.db())
        .await?
        {
            let token: TokenId = row.try_get("idempotency_token")?;
            let key: String = row.try_get("idempotency_key")?;
            let hash: String = row.try_get("result_hash")?;
            by_key.insert((token, key), (submission_row(&row)?, hash));
        }
    }
    Ok(Read {
        quests,
        latest,
        by_key,
    })
}

/// One submit of the batch, decided by [`replay::decide`]: its answer, and
/// the submission to insert (none when a recorded one answers). Its other writes go to `writes`.
async fn one(
    tx: &mut Tx,
    read: &Read,
    req: &Submit,
    writes: &mut Writes,
) -> Result<(Answer, Option<SubmissionRow>), StoreError> {
    let (new, decision) = &**req;
    let row = read
        .quests
        .get(&new.quest_id)
        .ok_or(StoreError::NotFound("quest"))?;
    let (mut quest, lease) = (quest_row(row)?, prefixed_lease(row)?);
    let by_key = new
        .idempotency_key
        .as_ref()
        .and_then(|k| read.by_key.get(&(new.token_id, k.as_str().to_owned())));
    let latest = read.latest.get(&quest.id);
    let repeats = match replay::decide(
        incoming(new),
        by_key.map(|(s, h)| recorded(s, h)),
        latest.map(|(s, h)| recorded(s, h)),
    )? {
        Replay::New { repeats } => repeats,
        Replay::Answer(id) => {
            let (answer, _) = [by_key, latest]
                .into_iter()
                .flatten()
                .find(|(s, _)| s.id == id)
                .ok_or(StoreError::NotFound("submission"))?;
            let s = tx.session(quest.session_id).await?;
            // Only the quest's own live lease is shown (a keyed retry may come after it ended).
            let lease = lease.filter(|l| l.ended.is_none() && quest.lease_id == Some(l.id));
            let partial = Partial {
                submission: answer.clone(),
                quest,
                lease: lease.as_ref().map(lease_of),
                max_tries: s.config.max_tries,
            };
            return Ok((Answer::Replayed(partial), None));
        }
    };
    work::check_hold(
        status_of(&quest),
        quest.lease_id,
        lease.as_ref(),
        new.lease_id,
        new.token_id,
        tx.now,
    )?;
    let lease = lease.ok_or(StoreError::NotFound("lease"))?;
    let s = tx.session(quest.session_id).await?;
    let checking = work::check_submit(status_of(&quest))?;
    let mut submission = pending_submission(&quest, new, &lease.agent, repeats, tx.now);
    // Watchers see the same two steps whether the gate ran here or on the runner.
    set_status(&mut quest, checking);
    quest.updated_at = tx.now;
    tx.moved(EventKind::Submitted, &quest, Some(&submission));
    let (kept, l2_jobs) = match decision.clone() {
        Some(d) => decide(tx, writes, &s, &mut quest, &mut submission, &lease, d)?,
        None => {
            writes.quests.push((quest.clone(), lease.id));
            (Some(lease_of(&lease)), Vec::new())
        }
    };
    let partial = Partial {
        submission: submission.clone(),
        quest,
        lease: kept,
        max_tries: s.config.max_tries,
    };
    Ok((Answer::Recorded(partial, l2_jobs), Some(submission)))
}
