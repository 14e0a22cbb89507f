use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::time::Instant;

use super::*;
use crate::domain::State;

/// A database error with a SQLSTATE, as a driver reports one.
#[derive(Debug)]
struct Sqlstate(&'static str);

impl std::fmt::Display for Sqlstate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "error {}", self.0)
    }
}

impl std::error::Error for Sqlstate {}

impl sqlx::error::DatabaseError for Sqlstate {
    fn message(&self) -> &str {
        "simulated"
    }
    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.0))
    }
    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }
    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}

fn db(sqlstate: &'static str) -> StoreError {
    StoreError::Database(sqlx::Error::Database(Box::new(Sqlstate(sqlstate))))
}

#[test]
fn data_the_database_refuses_is_permanent_and_names_its_sqlstate() {
    for code in ["22P05", "22021", "22001", "54000"] {
        assert_eq!(
            classify(&db(code)),
            Class::Permanent(Cause::Unstorable(code.into())),
            "{code}"
        );
    }
    assert_eq!(
        Cause::Unstorable("22P05".into()).to_string(),
        "SQLSTATE 22P05"
    );
}

#[test]
fn a_refusal_and_a_row_the_ratchet_refused_are_permanent() {
    let ratchet = Refusal::Ratchet("a decided result is frozen".into());
    assert_eq!(
        classify(&ratchet.clone().into()),
        Class::Permanent(Cause::Refused(ratchet))
    );
    let locked = Refusal::QuestLocked(State::Pass);
    assert_eq!(
        classify(&locked.clone().into()),
        Class::Permanent(Cause::Refused(locked))
    );
    assert_eq!(
        classify(&StoreError::NotFound("submission")),
        Class::Permanent(Cause::Gone("submission"))
    );
}

#[test]
fn everything_else_is_transient() {
    for e in [
        db("08006"),
        db("40001"),
        db("57P01"),
        db("53300"),
        db("23505"),
        StoreError::Unavailable,
        StoreError::Database(sqlx::Error::PoolTimedOut),
        StoreError::Database(sqlx::Error::Io(std::io::Error::other("reset"))),
    ] {
        assert_eq!(classify(&e), Class::Transient, "{e}");
    }
}

#[test]
fn the_pause_doubles_from_100_ms_and_stays_at_30_s() {
    let delays: Vec<u64> = Backoff::default()
        .take(12)
        .map(|d| d.as_millis() as u64)
        .collect();
    assert_eq!(
        delays,
        [
            100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000, 30_000
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_until_it_succeeds_and_a_permanent_one_is_handed_back() {
    let shutdown = CancellationToken::new();
    let retry = Retry::new("test", &shutdown);
    let calls = AtomicU32::new(0);
    let started = Instant::now();
    let got = retry
        .until_stored(&mut Slot::unpooled(), || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move { if n < 3 { Err(db("08006")) } else { Ok(n) } }
        })
        .await;
    assert_eq!(got.ok(), Some(3));
    assert_eq!(started.elapsed(), Duration::from_millis(100 + 200 + 400));

    let calls = AtomicU32::new(0);
    let refused = retry
        .until_stored(&mut Slot::unpooled(), || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(db("22P05")) }
        })
        .await;
    assert!(
        matches!(refused, Err(Stop::Permanent(_, Cause::Unstorable(ref s))) if s == "22P05"),
        "{refused:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "not retried");
}

#[tokio::test(start_paused = true)]
async fn a_store_that_stays_down_is_retried_until_shutdown() {
    let shutdown = CancellationToken::new();
    let stopper = shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(600)).await;
        stopper.cancel();
    });
    let retry = Retry::new("test", &shutdown);
    let down = retry
        .until_stored(&mut Slot::unpooled(), || async {
            Err::<(), _>(StoreError::Unavailable)
        })
        .await;
    assert!(matches!(down, Err(Stop::Shutdown)), "{down:?}");
}

#[tokio::test(start_paused = true)]
async fn a_job_gives_its_permit_back_while_it_waits_and_takes_one_before_the_next_attempt() {
    let shutdown = CancellationToken::new();
    let pool = Pool::new(1);
    let mut slot = Slot::take(&pool).await.unwrap();
    assert_eq!(pool.available(), 0);
    let seen = std::sync::Mutex::new(Vec::new());
    let calls = AtomicU32::new(0);
    let retry = Retry::new("test", &shutdown);
    let job = retry.until_stored(&mut slot, || {
        seen.lock().unwrap().push(pool.available());
        let n = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if n < 2 {
                Err(StoreError::Unavailable)
            } else {
                Ok(())
            }
        }
    });
    let other = async {
        // While the first job waits out its pause, another takes the one worker.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let other = tokio::time::timeout(Duration::from_millis(1), Slot::take(&pool))
            .await
            .expect("the waiting job holds no permit")
            .expect("the pool is open");
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(other);
    };
    let (done, ()) = tokio::join!(job, other);
    assert!(done.is_ok());
    assert_eq!(
        *seen.lock().unwrap(),
        [0, 0, 0],
        "every attempt ran holding the permit"
    );
    drop(slot);
    assert_eq!(pool.available(), 1);
}
