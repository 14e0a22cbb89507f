//! Reads, on the pool. On SQLite each sees one committed snapshot and never
//! waits for the writer; on PostgreSQL each statement sees what every
//! replica had committed when it began, and the few reads that need one
//! snapshot run in a read-only transaction ([`snapshot`]). The reads each
//! engine writes in its own dialect are in its `native` module.

use crate::domain::agreement::Decided;
use crate::domain::review::{self, Viewer};
use serde_json::{Map, Value};

use super::codec::*;
use super::native::{Known, counts};
pub use super::native::{result_fields, snapshot};
use crate::domain::State;
use crate::domain::ids::{L2JobId, QuestId, SessionId, SubmissionId};
use crate::domain::work::{AgentId, CheckFilter};
use crate::store::*;

pub async fn fetch_quest(conn: &mut Conn, id: QuestId) -> Result<QuestRow, StoreError> {
    let row = sqlx::query("SELECT * FROM quests WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("quest"))?;
    quest_row(&row)
}

async fn fetch_submission(conn: &mut Conn, id: SubmissionId) -> Result<SubmissionRow, StoreError> {
    let row = sqlx::query("SELECT * FROM submissions WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await?
        .ok_or(StoreError::NotFound("submission"))?;
    submission_row(&row)
}

async fn fetch_session(conn: &mut Conn, id: SessionId) -> Result<SessionRow, StoreError> {
    let row = sqlx::query(concat!(
        "SELECT ",
        session_columns!(),
        " FROM sessions WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await?
    .ok_or(StoreError::NotFound("session"))?;
    session_row(&row)
}

pub async fn list_sessions(pool: &Pool) -> Result<Vec<SessionRow>, StoreError> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        session_columns!(),
        // A gold companion is part of its session, never a session of its own.
        " FROM sessions WHERE gold_of IS NULL ORDER BY created_at DESC, id DESC"
    ))
    .fetch_all(pool)
    .await?;
    rows.iter().map(session_row).collect()
}

pub async fn get_session(pool: &Pool, id: SessionId) -> Result<SessionRow, StoreError> {
    fetch_session(&mut *pool.acquire().await?, id).await
}

/// A session's progress, read in one snapshot (its counts as the engine
/// keeps them: see `native::counts`).
pub async fn session_status(
    pool: &Pool,
    id: SessionId,
    now: chrono::DateTime<chrono::Utc>,
    known: &Known,
) -> Result<SessionStatus, StoreError> {
    let mut tx = snapshot(pool).await?;
    let session = fetch_session(&mut tx, id).await?;
    let counts = counts(&mut tx, &session, known).await?;
    let agents_active = sqlx::query(
        "SELECT COUNT(DISTINCT agent) AS n FROM leases
         WHERE session_id = $1 AND ended_at IS NULL AND expires_at > $2",
    )
    .bind(id)
    .bind(at(now))
    .fetch_one(&mut *tx)
    .await?
    .count("n")?;
    let window_minutes = 5;
    // Quests finished by their gate, plus those the AI verifiers finished.
    let finished = sqlx::query(
        "SELECT (SELECT COUNT(*) FROM submissions
                 WHERE session_id = $1 AND decided_at > $2 AND state_after <> 'TODO')
              + (SELECT COUNT(*) FROM l2_decisions WHERE session_id = $1 AND decided_at > $2) AS n",
    )
    .bind(id)
    .bind(at(now - chrono::Duration::minutes(window_minutes)))
    .fetch_one(&mut *tx)
    .await?
    .count("n")?;
    // The reviewers' recent pace: quests decided over the last quarter of an hour.
    let review_window_minutes = 15;
    let reviewed = sqlx::query(
        "SELECT COUNT(*) AS n FROM review_decisions d JOIN quests q ON q.id = d.quest_id
         WHERE q.session_id = $1 AND d.created_at > $2 AND d.decides = TRUE",
    )
    .bind(id)
    .bind(at(now - chrono::Duration::minutes(review_window_minutes)))
    .fetch_one(&mut *tx)
    .await?
    .count("n")?;
    let verifiers =
        sqlx::query("SELECT * FROM l2_verifier_stats WHERE session_id = $1 ORDER BY verifier")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(VerifierStats {
                    verifier: r.text("verifier")?,
                    model: r.text("model")?,
                    answers: r.count("answers")?,
                    yes: r.count("yes")?,
                    no: r.count("no")?,
                    flags: r.count("flags")?,
                    no_answers: r.count("no_answers")?,
                    latency_ms_sum: r.count("latency_ms_sum")?,
                    latency_ms_max: r.count("latency_ms_max")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
    let agreement = sqlx::query(
        "SELECT * FROM l2_pair_stats WHERE session_id = $1 ORDER BY verifier_a, verifier_b",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(pair_stats_row)
    .collect::<Result<Vec<_>, _>>()?;
    tx.commit().await?;
    Ok(SessionStatus {
        counts,
        agents_active,
        rate_per_minute: finished as f64 / window_minutes as f64,
        reviews_per_hour: reviewed as f64 * 60.0 / review_window_minutes as f64,
        verifiers,
        agreement,
    })
}

pub async fn pending_submissions(pool: &Pool) -> Result<Vec<SubmissionId>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM submissions WHERE verdict = 'PENDING' ORDER BY created_at, id",
    )
    .fetch_all(pool)
    .await?)
}

pub async fn gate_job(pool: &Pool, submission_id: SubmissionId) -> Result<GateJob, StoreError> {
    let mut conn = pool.acquire().await?;
    let submission = fetch_submission(&mut conn, submission_id).await?;
    let quest = fetch_quest(&mut conn, submission.quest_id).await?;
    let session = fetch_session(&mut conn, quest.session_id).await?;
    Ok(GateJob {
        submission,
        key: quest.key,
        input: quest.input,
        gold: session.gold_of.is_some(),
        config: session.config,
    })
}

pub async fn result_holders(
    pool: &Pool,
    session_id: SessionId,
    except: QuestId,
    field: &str,
    value: &str,
    limit: u32,
) -> Result<Vec<String>, StoreError> {
    if !is_plain_field(field) {
        return Err(StoreError::Corrupt(format!(
            "`{field}` is not a plain result field name"
        )));
    }
    // The field is written out (not bound) so that the expression matches an
    // index on it, such as quests_result_email; it was checked above to be a
    // plain name, safe to write into SQL.
    let (held, pending) = (json_text("result", field), json_text("s.result", field));
    let keys: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT key FROM (
             SELECT row_index, key FROM quests
             WHERE session_id = $1 AND id <> $2 AND lower({held}) = lower($3)
               AND (state IN ('PASS', 'REVIEW') OR phase = 'verifying')
             UNION
             SELECT q.row_index, q.key FROM submissions s JOIN quests q ON q.id = s.quest_id
             WHERE s.verdict = 'PENDING' AND s.session_id = $1 AND s.quest_id <> $2
               AND lower({pending}) = lower($3)
         ) holders
         -- Gold quests (a gold companion's) are never holders: each is one
         -- token's copy of a known-answer item.
         WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE id = $1 AND gold_of IS NOT NULL)
         ORDER BY row_index LIMIT $4"
    )))
    .bind(session_id)
    .bind(except)
    .bind(value.to_owned())
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(keys)
}

pub async fn get_submission(pool: &Pool, id: SubmissionId) -> Result<SubmissionRow, StoreError> {
    fetch_submission(&mut *pool.acquire().await?, id).await
}

/// A submission and what its submitter needs next, in one snapshot.
pub async fn submission_view(
    pool: &Pool,
    id: SubmissionId,
    known: &Known,
) -> Result<SubmissionView, StoreError> {
    let mut tx = snapshot(pool).await?;
    let submission = fetch_submission(&mut tx, id).await?;
    let quest = fetch_quest(&mut tx, submission.quest_id).await?;
    let session = fetch_session(&mut tx, quest.session_id).await?;
    let remaining = counts(&mut tx, &session, known).await?.remaining();
    let lease = match quest.lease_id {
        Some(lease_id) => {
            sqlx::query("SELECT id, quest_id, agent, expires_at FROM leases WHERE id = $1")
                .bind(lease_id)
                .fetch_optional(&mut *tx)
                .await?
                .as_ref()
                .map(lease_row)
                .transpose()?
        }
        None => None,
    };
    tx.commit().await?;
    Ok(SubmissionView {
        submission,
        quest,
        max_tries: session.config.max_tries,
        remaining,
        lease,
    })
}

pub async fn pending_l2_jobs(pool: &Pool) -> Result<Vec<L2JobId>, StoreError> {
    Ok(
        sqlx::query_scalar(
            "SELECT id FROM l2_jobs WHERE status = 'queued' ORDER BY created_at, id",
        )
        .fetch_all(pool)
        .await?,
    )
}

pub async fn l2_job(pool: &Pool, id: L2JobId) -> Result<L2Job, StoreError> {
    let row = sqlx::query("SELECT * FROM l2_jobs WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await?
        .ok_or(StoreError::NotFound("L2 job"))?;
    l2_job_row(&row)
}

pub async fn l2_answers(pool: &Pool, quest_id: QuestId) -> Result<Vec<L2AnswerRow>, StoreError> {
    sqlx::query(
        "SELECT * FROM l2_answers WHERE quest_id = $1 ORDER BY created_at, question_index, verifier",
    )
    .bind(quest_id)
    .fetch_all(pool)
    .await?
    .iter()
    .map(l2_answer_row)
    .collect()
}

pub async fn get_quest(pool: &Pool, id: QuestId) -> Result<QuestRow, StoreError> {
    fetch_quest(&mut *pool.acquire().await?, id).await
}

pub async fn quest_history(
    pool: &Pool,
    id: QuestId,
) -> Result<(Vec<SubmissionRow>, Vec<ReviewDecisionRow>), StoreError> {
    let mut tx = snapshot(pool).await?;
    fetch_quest(&mut tx, id).await?;
    let submissions =
        sqlx::query("SELECT * FROM submissions WHERE quest_id = $1 ORDER BY created_at, id")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(submission_row)
            .collect::<Result<Vec<_>, _>>()?;
    let decisions =
        sqlx::query("SELECT * FROM review_decisions WHERE quest_id = $1 ORDER BY created_at, id")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(ReviewDecisionRow {
                    reviewer: r.text("reviewer")?,
                    reviewer_token: r.opt_id("reviewer_token")?,
                    decision: r.parsed("decision")?,
                    note: r.text("note")?,
                    look: r.parsed("look")?,
                    decides: r.flag("decides")?,
                    created_at: r.at("created_at")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
    tx.commit().await?;
    Ok((submissions, decisions))
}

/// A session's review decisions on its decided quests.
pub async fn decided_reviews(
    pool: &Pool,
    session_id: SessionId,
) -> Result<Vec<Decided>, StoreError> {
    sqlx::query(
        "SELECT d.quest_id, d.reviewer_token, d.reviewer, d.decision, d.look, d.created_at
         FROM review_decisions d JOIN quests q ON q.id = d.quest_id
         WHERE q.session_id = $1 AND q.state <> 'REVIEW'
         ORDER BY d.created_at, d.id",
    )
    .bind(session_id)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| {
        Ok(Decided {
            quest: r.id("quest_id")?,
            token: r.opt_id("reviewer_token")?,
            name: r.text("reviewer")?,
            decision: r.parsed("decision")?,
            look: r.parsed("look")?,
            created_at: r.at("created_at")?,
        })
    })
    .collect()
}

pub async fn review_queue(
    pool: &Pool,
    sessions: Option<&[SessionId]>,
    check: Option<&CheckFilter>,
    limit: u32,
    viewer: &Viewer,
) -> Result<Vec<QueuedQuest>, StoreError> {
    let (exact, prefix) = match check {
        Some(CheckFilter::Exact(c)) => (Some(c.to_owned()), None),
        Some(CheckFilter::Prefix(p)) => (None, Some(p.to_owned())),
        None => (None, None),
    };
    // Every L2 answer is a fact of check `l2:<verifier>`, a clear one too; such
    // a fact matches only when that verifier raised a doubt (a flag or no
    // answer) about the quest's submission, as its recorded answers say.
    let rows = sqlx::query(concat!(
        "SELECT q.*,
                (SELECT COUNT(*) FROM review_decisions d
                 WHERE d.quest_id = q.id AND d.look = 'first') AS looks_given,
                (SELECT COUNT(DISTINCT d.decision) FROM review_decisions d
                 WHERE d.quest_id = q.id AND d.look = 'first') AS looks_apart
         FROM quests q WHERE state = 'REVIEW' AND ($1 IS NULL OR ",
        id_in_json!("session_id", "$1"),
        ") AND (($3 IS NULL AND $4 IS NULL) OR EXISTS (
             SELECT 1 FROM ",
        json_elements!("q.last_facts"),
        " f WHERE (f.value ->> 'check' = $3 OR substr(f.value ->> 'check', 1, length($4)) = $4)
               AND (substr(f.value ->> 'check', 1, 3) <> 'l2:' OR EXISTS (
                   SELECT 1 FROM l2_answers a
                   WHERE a.submission_id = q.submission_id
                     AND 'l2:' || a.verifier = f.value ->> 'check'
                     AND (a.flagged OR a.answer IS NULL)))))
           -- What the viewer may still decide: no quest it gave a look, and
           -- looks that disagree only for an adjudicator.
           AND NOT EXISTS (SELECT 1 FROM review_decisions d
                           WHERE d.quest_id = q.id AND d.reviewer_token = $5)
           AND ($6 OR NOT (
               EXISTS (SELECT 1 FROM review_decisions d
                       WHERE d.quest_id = q.id AND d.look = 'first' AND d.decision = 'approve')
               AND EXISTS (SELECT 1 FROM review_decisions d
                           WHERE d.quest_id = q.id AND d.look = 'first' AND d.decision = 'reject')))
         ORDER BY updated_at, row_index LIMIT $2"
    ))
    // The ids as one JSON array of their text.
    .bind(sessions.map(|ids| serde_json::json!(ids).to_string()))
    .bind(i64::from(limit))
    .bind(exact)
    .bind(prefix)
    .bind(viewer.token)
    .bind(review::adjudicates(viewer.role, viewer.adjudicate))
    .fetch_all(pool)
    .await?;
    let mut queue = rows
        .iter()
        .map(|r| {
            let quest = quest_row(r)?;
            let stage = review::Stage::new(
                quest.reviews_required,
                r.count("looks_given")? as u32,
                r.count("looks_apart")? > 1,
            );
            Ok(QueuedQuest {
                quest,
                stage,
                look_claims: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let shared: Vec<QuestId> = (queue.iter())
        .filter(|q| q.stage.shared())
        .map(|q| q.quest.id)
        .collect();
    if shared.is_empty() {
        return Ok(queue);
    }
    let claims = sqlx::query(concat!(
        "SELECT quest_id, reviewer_token, reviewer, expires_at FROM review_claims WHERE ",
        id_in_json!("quest_id", "$1"),
        " ORDER BY expires_at, reviewer"
    ))
    .bind(serde_json::json!(shared).to_string())
    .fetch_all(pool)
    .await?;
    for c in &claims {
        let (quest, token): (QuestId, _) = (c.id("quest_id")?, c.id("reviewer_token")?);
        let by = ReviewerId::new(token, c.text("reviewer")?);
        if let Some(q) = queue.iter_mut().find(|q| q.quest.id == quest) {
            q.look_claims.push((by, c.at("expires_at")?));
        }
    }
    Ok(queue)
}

pub async fn export_page(
    pool: &Pool,
    session_id: SessionId,
    after_row: Option<u64>,
    limit: u32,
    reviews: bool,
) -> Result<Vec<ExportRow>, StoreError> {
    let rows = sqlx::query(concat!(
        "SELECT q.row_index, q.input, q.state, q.decided_by, q.tries, q.result, q.last_facts,
                q.receipt, q.recheck_mark, q.rechecked_at, q.recheck_facts, s.evidence,
                EXISTS (SELECT 1 FROM suspect_marks m WHERE m.quest_id = q.id) AS suspect,
                (SELECT COALESCE(a.decision, 'pending') FROM audit_reviews a
                 WHERE a.quest_id = q.id) AS audit,
                -- Every decision of a decided quest, when asked for.
                CASE WHEN $4 AND q.state <> 'REVIEW' THEN ",
        review_decisions_json!("q.id"),
        " END AS reviews
         FROM quests q LEFT JOIN submissions s ON s.id = q.submission_id
         WHERE q.session_id = $1 AND q.row_index > $2 ORDER BY q.row_index LIMIT $3"
    ))
    .bind(session_id)
    .bind(after_row.map_or(-1, |r| r as i64))
    .bind(i64::from(limit))
    .bind(reviews)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            let state: State = r.parsed("state")?;
            let result: Option<Map<String, Value>> = match state {
                State::Pass | State::Review => r.opt_json("result")?,
                _ => None,
            };
            Ok(ExportRow {
                row_index: r.count("row_index")?,
                input: r.json("input")?,
                state,
                decided_by: r.opt_text("decided_by")?,
                tries: r.small("tries")?,
                result,
                last_facts: r.json("last_facts")?,
                last_evidence: r.opt_json("evidence")?.unwrap_or_default(),
                receipt: r.opt_text("receipt")?,
                recheck_mark: r.opt_parsed("recheck_mark")?,
                rechecked_at: r.opt_at("rechecked_at")?,
                recheck_facts: r.json("recheck_facts")?,
                suspect: r.flag("suspect")?,
                audit: audit_label(r.opt_text("audit")?)?,
                reviews: r.opt_text("reviews")?,
            })
        })
        .collect()
}

/// A post-hoc audit's label as the export writes it.
fn audit_label(decision: Option<String>) -> Result<Option<&'static str>, StoreError> {
    use crate::domain::Decision;
    Ok(match decision.as_deref() {
        None => None,
        Some("pending") => Some("pending"),
        Some(d) => match d.parse::<Decision>() {
            Ok(Decision::Approve) => Some("approved"),
            Ok(Decision::Reject) => Some("rejected"),
            Err(_) => return Err(StoreError::Corrupt(format!("an audit's label `{d}`"))),
        },
    })
}

pub async fn list_tokens(pool: &Pool) -> Result<Vec<TokenRow>, StoreError> {
    let rows = sqlx::query("SELECT * FROM tokens ORDER BY created_at, id")
        .fetch_all(pool)
        .await?;
    rows.iter().map(token_row).collect()
}

pub async fn find_token(pool: &Pool, hash: &str) -> Result<Option<TokenRow>, StoreError> {
    // Look up by a short prefix of the digest, then compare whole digests in
    // constant time, so no comparison of secret material exits early.
    let prefix: String = hash.chars().take(8).collect();
    let rows = sqlx::query(concat!(
        "SELECT * FROM tokens WHERE ",
        hash_prefix!("$1"),
        " AND revoked_at IS NULL"
    ))
    .bind(prefix)
    .fetch_all(pool)
    .await?;
    let mut found = None;
    for row in &rows {
        let token = token_row(row)?;
        if crate::store::common::same_digest(&token.hash, hash) {
            found = Some(token);
        }
    }
    Ok(found)
}

/// The unexpired lease `agent` holds in a session, with its quest's key and
/// phase, read without changing anything. Live means the same three things the
/// write path fences on: not ended, not expired, and still the quest's.
pub async fn agent_lease(
    pool: &Pool,
    session_id: SessionId,
    agent: &AgentId,
    now: DateTime<Utc>,
) -> Result<Option<AgentLeaseRow>, StoreError> {
    let row = sqlx::query(
        "SELECT l.id, l.quest_id, q.key, q.phase, q.tries, q.last_facts, l.expires_at
         FROM leases l JOIN quests q ON q.id = l.quest_id AND q.lease_id = l.id
         WHERE l.session_id = $1 AND l.agent = $2 AND l.ended_at IS NULL AND l.expires_at > $3
         LIMIT 1",
    )
    .bind(session_id)
    .bind(agent.to_string())
    .bind(at(now))
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(AgentLeaseRow {
        lease_id: row.id("id")?,
        quest_id: row.id("quest_id")?,
        key: row.text("key")?,
        phase: row.parsed("phase")?,
        tries: row.small("tries")?,
        last_facts: row.json("last_facts")?,
        expires_at: row.at("expires_at")?,
    }))
}
