//! [`TestDatabase`]: a fresh PostgreSQL database per test on the local server
//! (127.0.0.1:5432, trust auth), dropped when the test ends. When no server
//! answers, the test prints why and skips, except with `CI=true`, where
//! PostgreSQL must be running and its absence is a failure.

use sqlx::{Connection, PgConnection, PgPool};

/// The maintenance databases tried, as the users this machine and CI have.
const ADMIN_URLS: [&str; 2] = [
    "postgres://postgres@127.0.0.1:5432/postgres",
    "postgres://root@127.0.0.1:5432/postgres",
];

/// A database `t_<random>`, dropped (its connections ended) on drop.
pub struct TestDatabase {
    admin: &'static str,
    name: String,
    /// The URL a store or a server connects with.
    pub url: String,
}

impl TestDatabase {
    /// Creates a fresh database, or returns `None` after printing why the
    /// test named `test` is skipped. With `CI=true` no server is a failure.
    pub async fn create_or_skip(test: &str) -> Option<TestDatabase> {
        let why = match TestDatabase::create().await {
            Ok(db) => return Some(db),
            Err(why) => why,
        };
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: {why}, and CI=true makes that a failure; \
             start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`"
        );
        eprintln!(
            "SKIPPED {test} on PostgreSQL: {why}; \
             start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`. \
             With CI=true this is a failure"
        );
        None
    }

    /// Creates a fresh database, or says why there is no server to create it on.
    pub async fn create() -> Result<TestDatabase, String> {
        let mut errors = Vec::new();
        for admin in ADMIN_URLS {
            match PgConnection::connect(admin).await {
                Ok(mut conn) => {
                    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
                    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                        .execute(&mut conn)
                        .await
                        .map_err(|e| format!("CREATE DATABASE failed: {e}"))?;
                    let _ = conn.close().await;
                    let base = admin.rsplit_once('/').expect("a database in the URL").0;
                    return Ok(TestDatabase {
                        admin,
                        url: format!("{base}/{name}"),
                        name,
                    });
                }
                Err(e) => errors.push(format!("{admin}: {e}")),
            }
        }
        Err(format!(
            "PostgreSQL does not answer on 127.0.0.1:5432 ({})",
            errors.join("; ")
        ))
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin, self.name.clone());
        // Drop runs outside any runtime's reach: a thread of its own with one.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test database");
            rt.block_on(async move {
                let mut conn = PgConnection::connect(admin).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("the test database {} could not be dropped", self.name);
        }
    }
}

/// Installs a rule only the database knows: a trigger `BEFORE <event> ON
/// <table>` that refuses, as a constraint would (SQLSTATE 23000), every row
/// for which `condition` (PL/pgSQL over `NEW` and `OLD`) holds.
pub async fn refuse_rows(pool: &PgPool, event: &str, table: &str, condition: &str) {
    for sql in [
        format!(
            "CREATE FUNCTION test_refuses_one() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF {condition} THEN
                 RAISE EXCEPTION 'test: the database refuses this row' USING ERRCODE = '23000';
             END IF; RETURN NEW; END $$"
        ),
        format!(
            "CREATE TRIGGER test_refuses_one BEFORE {event} ON {table}
             FOR EACH ROW EXECUTE FUNCTION test_refuses_one()"
        ),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .expect("the test's trigger is installed");
    }
}
