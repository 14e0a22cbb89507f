//! Opening the PostgreSQL store and its own helpers, apart from the [`Store`]
//! implementation in `mod.rs`.

use super::*;

impl PgStore {
    /// Connects to the database `url` names, runs the migrations under an
    /// advisory lock (replicas starting together migrate once) and returns the
    /// store, with a pool of [`crate::config::DEFAULT_POOL_SIZE`] connections.
    /// Events of committed writes go to `events`.
    pub async fn open(
        url: &str,
        time: TimeSource,
        events: broadcast::Sender<QuestEvent>,
    ) -> Result<PgStore, StoreError> {
        PgStore::open_with_pool(url, time, events, crate::config::DEFAULT_POOL_SIZE).await
    }

    /// [`PgStore::open`] with at most `pool_size` connections.
    pub async fn open_with_pool(
        url: &str,
        time: TimeSource,
        events: broadcast::Sender<QuestEvent>,
        pool_size: u32,
    ) -> Result<PgStore, StoreError> {
        let options = PgConnectOptions::from_str(url)?;
        // One connection first: an unreachable server or a refusal is its
        // error at once, not a pool's timeout after retrying in silence.
        // A host that drops packets would otherwise hold the start for minutes.
        let mut conn = tokio::time::timeout(CONNECT_WITHIN, PgConnection::connect_with(&options))
            .await
            .map_err(|_| {
                sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {} seconds", CONNECT_WITHIN.as_secs()),
                ))
            })??;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut conn)
            .await?;
        let migrated = sqlx::migrate!("./migrations/postgres").run(&mut conn).await;
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut conn)
            .await?;
        migrated?;
        let _ = conn.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(pool_size.max(1))
            .acquire_timeout(CONNECT_WITHIN)
            .connect_with(options)
            .await?;
        let origin = Uuid::new_v4();
        let stop = CancellationToken::new();
        tokio::spawn(events::relay(
            pool.clone(),
            origin,
            events.clone(),
            stop.clone(),
        ));
        let db = Db {
            pool,
            time,
            events,
            origin,
            skew: Arc::default(),
        };
        // Sets the store's clock to the database's before any transaction does.
        db.read_now(&db.pool).await?;
        Ok(PgStore {
            nexts: Batcher::start(db.clone(), |tx, reqs| {
                Box::pin(leases::lease_many(tx, reqs))
            }),
            submits: Batcher::start(db.clone(), |tx, reqs| {
                Box::pin(submits::submit_many(tx, reqs))
            }),
            db,
            _relay: Arc::new(stop.drop_guard()),
        })
    }

    /// The channel this store publishes events on (its own and the relayed ones).
    pub fn events_for_tests(&self) -> &broadcast::Sender<QuestEvent> {
        &self.db.events
    }

    /// The pool, for tests that reach below the store (raw SQL against the ratchet).
    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// Runs `op` in a transaction of its own (see [`Db::write`]).
    pub(super) async fn write<A, T>(&self, args: A, op: Op<A, T>) -> Result<T, StoreError>
    where
        A: Clone + Send + Sync + 'static,
        T: Send + 'static,
    {
        self.db.write(args, op).await
    }

    /// "Now" for reads: the injected clock, or the database's.
    pub(super) async fn read_now(&self) -> Result<DateTime<Utc>, StoreError> {
        self.db.read_now(&self.db.pool).await
    }
}

/// Why the database named by a URL cannot be used, in one line.
pub fn describe_open_error(e: &StoreError) -> String {
    match e {
        StoreError::Database(sqlx::Error::Configuration(c)) => format!("bad database URL: {c}"),
        StoreError::Database(sqlx::Error::Io(io)) => format!("cannot reach the database: {io}"),
        StoreError::Database(sqlx::Error::PoolTimedOut) => {
            format!(
                "cannot reach the database: no connection within {} seconds",
                CONNECT_WITHIN.as_secs()
            )
        }
        StoreError::Database(sqlx::Error::Tls(t)) => format!("TLS to the database failed: {t}"),
        StoreError::Database(sqlx::Error::Database(d)) => {
            format!("the database refused: {}", d.message())
        }
        other => other.to_string(),
    }
}
