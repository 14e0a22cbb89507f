//! Opening the SQLite store and its own helpers, apart from the [`Store`]
//! implementation in `mod.rs`.

use super::*;

impl SqliteStore {
    /// Opens (creating if needed) the database file, runs the migrations and
    /// starts the writer task. Events of committed writes go to `events`.
    pub async fn open(
        path: &Path,
        clock: Arc<dyn Clock>,
        events: broadcast::Sender<QuestEvent>,
    ) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_tuned(path, clock, events, Tuning::default()).await
    }

    /// [`SqliteStore::open`] tuned: tests use it to give the database a size
    /// limit or to make the WAL policy act on a small log.
    pub async fn open_tuned(
        path: &Path,
        clock: Arc<dyn Clock>,
        events: broadcast::Sender<QuestEvent>,
        tuning: Tuning,
    ) -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a commit is on disk before any caller hears of it.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true)
            // Statement journals and sorts of grouped statements stay in memory
            // instead of a temporary file opened and removed per statement.
            .pragma("temp_store", "memory")
            // After the WAL is restarted, its file shrinks back to this size.
            .pragma("journal_size_limit", (64 * 1024 * 1024).to_string())
            .disable_statement_logging();
        let options = (tuning.connect)(options);
        let mut conn = options.connect().await?;
        sqlx::migrate!("./migrations/sqlite").run(&mut conn).await?;
        let read = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options.clone().read_only(true))
            .await?;
        let counters = Arc::new(Counters::new(native::all_counts(&read).await?));
        let (queue, rx) = mpsc::channel(4 * MAX_BATCH);
        let writer = Writer {
            ctx: WriteCtx::new(conn, clock.now()),
            options,
            events,
            clock: clock.clone(),
            counters: counters.clone(),
            runners: vec![
                (Release::RANK, writer::run_kind::<Release>),
                (Heartbeat::RANK, writer::run_kind::<Heartbeat>),
                (Decide::RANK, writer::run_kind::<Decide>),
                (Submit::RANK, writer::run_kind::<Submit>),
                (Lease::RANK, writer::run_kind::<Lease>),
            ],
            wal: tuning.wal,
            since_checkpoint: 0,
            restart_backoff: 1,
        };
        tokio::spawn(writer::run(writer, rx));
        Ok(SqliteStore {
            path: path.to_owned(),
            read,
            queue,
            clock,
            counters,
        })
    }

    /// Queues a grouped request and waits for its answer after commit.
    pub(super) async fn group<K: Kind + Ranked>(&self, req: K) -> Result<K::Out, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Op::Group(Box::new(Request { req, reply })))
            .await
            .map_err(|_| StoreError::Unavailable)?;
        answer.await.map_err(|_| StoreError::Unavailable)?
    }

    /// Runs `op` alone inside the next batch and returns its result once the
    /// batch's commit is durable.
    pub(super) async fn single<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut WriteCtx) -> BoxFuture<'c, Result<T, StoreError>>
            + Send
            + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: Single = Box::new(move |ctx| {
            Box::pin(async move {
                let result = op(ctx).await;
                let outcome = match &result {
                    Ok(_) => Ok(()),
                    Err(StoreError::Database(e)) if !writer::is_refusal(e) => {
                        Err(GroupError::Fatal(e.to_string()))
                    }
                    Err(StoreError::Unavailable) => Err(GroupError::Fatal("unavailable".into())),
                    Err(_) => Err(GroupError::Refused(StoreError::Unavailable)),
                };
                let finish: Finish = Box::new(move |committed| {
                    let _ = reply.send(match committed {
                        Some(_) => result,
                        None => Err(StoreError::Unavailable),
                    });
                });
                (outcome, finish)
            })
        });
        self.queue
            .send(Op::Single(job))
            .await
            .map_err(|_| StoreError::Unavailable)?;
        answer.await.map_err(|_| StoreError::Unavailable)?
    }
}
