//! Claims on background work (see migration 0005): a claim is taken when
//! there is none or the last one expired, in one upsert, so of two replicas
//! claiming at once one gets it and the other is told no.

use uuid::Uuid;

use super::tx::Tx;
use crate::store::{Job, StoreError};

fn key(job: Job) -> String {
    match job {
        Job::Gate(id) => format!("gate:{id}"),
        Job::Verify(id) => format!("verify:{id}"),
        Job::Recheck(run, quest) => format!("recheck:{run}:{quest}"),
    }
}

pub async fn claim(tx: &mut Tx, holder: Uuid, job: Job, seconds: u32) -> Result<bool, StoreError> {
    let until = tx.now + chrono::Duration::seconds(i64::from(seconds.max(1)));
    let claimed = sqlx::query(
        "INSERT INTO job_claims (job, holder, claimed_at, expires_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (job) DO UPDATE SET holder = excluded.holder, claimed_at = excluded.claimed_at,
           expires_at = excluded.expires_at
         WHERE job_claims.expires_at <= excluded.claimed_at
         RETURNING job",
    )
    .bind(key(job))
    .bind(holder)
    .bind(tx.now)
    .bind(until)
    .fetch_optional(tx.db())
    .await?;
    Ok(claimed.is_some())
}

pub async fn orphaned(tx: &mut Tx, grace_seconds: u32) -> Result<Vec<Job>, StoreError> {
    let before = tx.now - chrono::Duration::seconds(i64::from(grace_seconds));
    let gates: Vec<Uuid> = sqlx::query_scalar(
        "SELECT s.id FROM submissions s LEFT JOIN job_claims c ON c.job = 'gate:' || s.id
         WHERE s.verdict = 'PENDING' AND s.created_at <= $1 AND (c.job IS NULL OR c.expires_at <= $2)
         ORDER BY s.created_at LIMIT 1000",
    )
    .bind(before)
    .bind(tx.now)
    .fetch_all(tx.db())
    .await?;
    let verifies: Vec<Uuid> = sqlx::query_scalar(
        "SELECT j.id FROM l2_jobs j LEFT JOIN job_claims c ON c.job = 'verify:' || j.id
         WHERE j.status = 'queued' AND j.created_at <= $1 AND (c.job IS NULL OR c.expires_at <= $2)
         ORDER BY j.created_at LIMIT 1000",
    )
    .bind(before)
    .bind(tx.now)
    .fetch_all(tx.db())
    .await?;
    Ok(gates
        .into_iter()
        .map(|id| Job::Gate(id.into()))
        .chain(verifies.into_iter().map(|id| Job::Verify(id.into())))
        .collect())
}
