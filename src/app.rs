//! Wiring: [`App::build`] reads the operator's configuration file, opens the
//! store, ensures the admin token, builds the one [`Checker`] of the gates,
//! starts the gate runner, the L2 verifier runner, the re-checker and the
//! sweeper, and binds the listener; [`App::run`] serves until
//! the shutdown signal, then stops the workers.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Database, EmailSettings};
use crate::domain::{Clock, QuestEvent, Role, SystemClock, token_hash};
use crate::export::Exports;
use crate::gates::dns::{HickoryResolver, Resolver, UnavailableResolver};
use crate::gates::email::EmailWorld;
use crate::gates::fetch::{AddressPolicy, CACHE_BUDGET, FetchSettings, HttpFetcher, PageCache};
use crate::gates::{Checker, GateRegistry};
use crate::http::{self, AppState};
use crate::process::{ProcessRunner, SystemProcessRunner};
use crate::service::{BOOTSTRAP_ADMIN, Service, new_secret};
use crate::store::postgres::{PgStore, TimeSource, describe_open_error};
use crate::store::{SqliteStore, Store};
use crate::verifiers::VerifierRegistry;
use crate::workers::{GateRunner, Rechecker, VerifierRunner, held_reviews, orphans, sweeper};

/// Opens the store `database` names. A PostgreSQL database that cannot be
/// used is one line saying why (a bad URL, no answer, a refusal).
async fn open_store(
    database: &Database,
    clock: Arc<dyn Clock>,
    database_time: bool,
    pool_size: u32,
    events: broadcast::Sender<QuestEvent>,
) -> anyhow::Result<Arc<dyn Store>> {
    Ok(match database {
        Database::Sqlite(path) => Arc::new(
            SqliteStore::open(path, clock, events)
                .await
                .with_context(|| format!("cannot open the database {}", path.display()))?,
        ),
        Database::Postgres(url) => {
            let time = if database_time {
                TimeSource::Database
            } else {
                TimeSource::Clock(clock)
            };
            let store = PgStore::open_with_pool(url.expose(), time, events, pool_size)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot open the PostgreSQL database {url}: {}",
                        describe_open_error(&e)
                    )
                })?;
            tracing::info!(database = %url, "the data lives in PostgreSQL");
            Arc::new(store)
        }
    })
}

/// How long open requests may take to finish after the shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A built server, bound and ready to run.
pub struct App {
    listener: TcpListener,
    router: axum::Router,
    limits: http::ConnectionLimits,
    shutdown: CancellationToken,
    admin_token: Option<String>,
    store: Arc<dyn Store>,
}

/// The process-wide metrics recorder (a recorder can be installed only once).
fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
            }
            handle
        })
        .clone()
}

impl App {
    /// Opens everything `config` names and binds the listener.
    pub async fn build(config: Config) -> anyhow::Result<App> {
        App::build_inner(config, Arc::new(SystemClock), None, true).await
    }

    /// [`App::build`] with another clock (tests move time forward by hand).
    pub async fn build_with_clock(config: Config, clock: Arc<dyn Clock>) -> anyhow::Result<App> {
        App::build_with(config, clock, None).await
    }

    /// [`App::build`] with another clock and, for a simulation, another world for
    /// the email gate (`None`: the real web and DNS, as `config` says).
    pub async fn build_with(
        config: Config,
        clock: Arc<dyn Clock>,
        world: Option<EmailWorld>,
    ) -> anyhow::Result<App> {
        App::build_inner(config, clock, world, false).await
    }

    /// Builds the app; `database_time`: a PostgreSQL store takes "now" from the
    /// database (one clock for every replica) instead of `clock`.
    async fn build_inner(
        config: Config,
        clock: Arc<dyn Clock>,
        world: Option<EmailWorld>,
        database_time: bool,
    ) -> anyhow::Result<App> {
        let operator = config.operator()?;
        private_dir(&config.data_dir)?;
        let (events, _) = broadcast::channel(4096);
        let database = config
            .database(&operator.database)
            .map_err(anyhow::Error::msg)?;
        let store = open_store(
            &database,
            clock.clone(),
            database_time,
            config.database_pool_size,
            events.clone(),
        )
        .await?;
        // Bound before the token: a replica that cannot listen changes none.
        let listener = TcpListener::bind(config.bind)
            .await
            .with_context(|| format!("cannot listen on {}", config.bind))?;
        let shared = matches!(database, crate::config::Database::Postgres(_));
        let admin_token = admin_token(&config, store.as_ref(), shared).await?;

        let shutdown = CancellationToken::new();
        let command_verifiers = operator
            .verifiers
            .iter()
            .any(|v| matches!(v.backend, crate::config::VerifierBackend::Command { .. }));
        if (!operator.gates.is_empty() || command_verifiers) && config.runner_exe.is_none() {
            anyhow::bail!(
                "command gates and command verifiers run under the quest binary as a trampoline, and its path is unknown"
            );
        }
        let processes: Arc<dyn ProcessRunner> =
            Arc::new(SystemProcessRunner::new(config.runner_exe.clone()));
        let world = match world {
            Some(world) => world,
            None => email_world(&config.email_settings(&operator.email), clock.clone())?,
        };
        let registry = Arc::new(GateRegistry::with_operator_gates(
            world,
            &operator.gates,
            processes.clone(),
        ));
        let verifiers = Arc::new(
            VerifierRegistry::from_config(&operator.verifiers, processes)
                .context("cannot build the HTTP client of the verifiers")?,
        );
        if !operator.verifiers.is_empty() || !operator.gates.is_empty() {
            tracing::info!(
                verifiers = ?verifiers.names(),
                command_gates = ?operator.gates.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
                "operator configuration loaded"
            );
        }
        // An API-only replica (`workers = false`) runs no background work: its
        // runners stop at once, so a PENDING submission it records waits for a
        // worker replica, which hears of it from the event relay.
        let background = if config.workers {
            shutdown.clone()
        } else {
            if matches!(database, crate::config::Database::Sqlite(_)) {
                tracing::warn!(
                    "workers are off on a SQLite server: nothing will decide a submission that waits for its gate"
                );
            }
            let stopped = CancellationToken::new();
            stopped.cancel();
            stopped
        };
        let l2 = VerifierRunner::start(store.clone(), verifiers.clone(), background.clone());
        // One check for the submit request's inline gates, the gate runner
        // and the re-checker.
        let checker = Arc::new(Checker::new(
            store.clone(),
            registry,
            Duration::from_secs(config.gate_timeout_seconds),
        ));
        let runner = GateRunner::start(
            store.clone(),
            checker.clone(),
            l2.clone(),
            config.gate_workers,
            background.clone(),
        );
        if config.workers {
            // L2 jobs first: re-running a submission that was still being checked
            // writes and queues its own jobs, which must not be queued twice.
            let resumed = l2.requeue_pending().await?;
            if resumed > 0 {
                tracing::info!(resumed, "resuming AI verifier jobs that were still queued");
            }
            let requeued = runner.requeue_pending().await?;
            if requeued > 0 {
                tracing::info!(
                    requeued,
                    "re-running submissions that were still being checked"
                );
            }
            tokio::spawn(sweeper::run(
                store.clone(),
                Duration::from_secs(config.sweep_seconds.max(1)),
                shutdown.clone(),
            ));
            // Replicas on one database take over the work of one that died, and
            // the checks recorded by API-only replicas.
            tokio::spawn(orphans::run(
                store.clone(),
                runner.clone(),
                l2.clone(),
                events.subscribe(),
                Duration::from_secs(config.sweep_seconds.max(1)),
                shutdown.clone(),
            ));
        }

        // Re-checks of PASS quests: resumed from their markers at once, then
        // scanned (and schedules looked at) every sweep; not on an API-only
        // replica, whose `background` is stopped already.
        let rechecker = Rechecker::start(
            store.clone(),
            checker.clone(),
            runner.scheduler(),
            Duration::from_secs(config.sweep_seconds.max(1)),
            background.clone(),
        );

        // XLSX exports are built beside the database, not in a RAM-backed /tmp.
        let export_dir = config.data_dir.join("exports");
        std::fs::create_dir_all(&export_dir)
            .with_context(|| format!("cannot create {}", export_dir.display()))?;
        let exports = Exports::new(usize::from(config.max_exports), Some(export_dir))
            .idle_after(Duration::from_secs(config.export_idle_seconds));
        let service = Arc::new(
            Service::new(
                store.clone(),
                checker,
                verifiers,
                runner,
                events,
                shutdown.clone(),
            )
            .with_exports(exports)
            .with_rechecker(rechecker),
        );
        if config.workers {
            tokio::spawn(held_reviews::run(
                store.clone(),
                clock.clone(),
                service.held_posted(),
                shutdown.clone(),
            ));
        }
        let router = http::router(
            AppState {
                service,
                metrics: metrics_handle(),
            },
            Duration::from_millis(config.slow_ms),
        );
        Ok(App {
            listener,
            router,
            limits: config.connection_limits(),
            shutdown,
            admin_token,
            store,
        })
    }

    /// The address the server listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The store the server runs on (for tests and tools that drive a worker's step).
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// The admin bearer token, unless another replica's is the live one.
    pub fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    /// Serves until `signal` completes, then finishes in-flight requests and stops the workers.
    pub async fn run(
        self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let shutdown = self.shutdown.clone();
        let address = self.local_addr();
        // An unspecified address (0.0.0.0, ::) is reached through this machine's loopback.
        let mut at = address;
        if at.ip().is_unspecified() {
            at.set_ip(if at.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        tracing::info!(%address, "quest is listening: the console at http://{at}/ui, the API docs at http://{at}/docs");
        // On the signal, stop the workers and end waits and event streams at once,
        // then give open requests a bounded time to finish.
        let stop = shutdown.clone();
        let serve = http::serve(self.listener, self.router, self.limits, async move {
            signal.await;
            stop.cancel();
        });
        let deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            () = serve => {}
            () = deadline => {
                tracing::warn!("requests still open {} s after the shutdown signal; closing them", SHUTDOWN_GRACE.as_secs());
            }
        }
        shutdown.cancel();
        // The workers are stopped: their unfinished work is free for the next
        // start or another replica.
        if let Err(e) = self.store.release_jobs().await {
            tracing::warn!(error = %e, "the claims on unfinished work could not be given back; they expire");
        }
        Ok(())
    }
}

/// Creates the data directory, or tightens an existing one, to mode 0700:
/// it holds the database and the admin token, and operator programs running
/// as another user must not read them.
fn private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o700))
            .with_context(|| format!("cannot make the data directory {} private", dir.display()))?;
        tracing::info!(dir = %dir.display(), "the data directory was open to other users; it is now private (0700)");
    }
    Ok(())
}

/// The real web and DNS for the email gate: one resolver for MX lookups and
/// for the fetcher's names, so that `QUEST_DNS_SERVERS` points the whole gate
/// at one DNS server.
fn email_world(config: &EmailSettings, clock: Arc<dyn Clock>) -> anyhow::Result<EmailWorld> {
    let resolver: Arc<dyn Resolver> = match HickoryResolver::new(
        &config.dns_servers,
        config.dns_timeout,
    ) {
        Ok(resolver) => Arc::new(resolver),
        Err(e) if config.dns_servers.is_empty() => {
            // The server still serves every other gate; email checks go to REVIEW.
            tracing::warn!(error = %e, "cannot read the system's DNS configuration; set QUEST_DNS_SERVERS. Email checks will go to review");
            Arc::new(UnavailableResolver {
                reason: format!("the server has no DNS configuration: {e}"),
            })
        }
        Err(e) => return Err(e).context("cannot build the DNS resolver for QUEST_DNS_SERVERS"),
    };
    let settings = FetchSettings::new(config.fetch_timeout, config.fetch_allow.clone());
    let fetcher = HttpFetcher::new(settings, resolver.clone(), clock.clone())
        .context("cannot build the HTTP client for the email gate")?;
    Ok(EmailWorld {
        fetcher: Arc::new(fetcher),
        resolver,
        pages: Arc::new(PageCache::with_limits(CACHE_BUDGET, clock)),
        policy: AddressPolicy::new(config.fetch_allow.clone()),
    })
}

/// What a replica says when another one's admin token is the live one.
const ANOTHER_ADMIN_TOKEN: &str =
    "an admin token exists; use the one of the replica that made it, or set QUEST_ADMIN_TOKEN";

/// The admin token, made the bootstrap admin's. A configured one replaces
/// whatever was live (rotation). Otherwise `<data-dir>/admin.token`, else a
/// new one written there (mode 0600). On a `shared` database (PostgreSQL,
/// where several replicas meet) neither of those replaces a live admin token
/// another replica made: the replica then writes nothing, says so and has no
/// admin token of its own (`None`).
async fn admin_token(
    config: &Config,
    store: &dyn Store,
    shared: bool,
) -> anyhow::Result<Option<String>> {
    let ensure = |token: &str, replace: bool| {
        let hash = token_hash(token);
        async move {
            store
                .ensure_token(BOOTSTRAP_ADMIN, Role::Admin, &hash, replace)
                .await
        }
    };
    if let Some(token) = config
        .admin_token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        ensure(token, true).await?;
        return Ok(Some(token.to_owned()));
    }
    let path = config.admin_token_path();
    if path.exists() {
        let token = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let token = token.trim().to_owned();
        if !ensure(&token, !shared).await? {
            tracing::warn!(path = %path.display(), "the admin token in this file is not the live one: {ANOTHER_ADMIN_TOKEN}");
            return Ok(None);
        }
        tracing::info!(path = %path.display(), "admin token read from file");
        return Ok(Some(token));
    }
    // Written before it is made live, and taken back if another replica's is.
    let token = new_secret();
    write_private(&path, &token)?;
    if !ensure(&token, !shared).await? {
        let _ = std::fs::remove_file(&path);
        tracing::info!("{ANOTHER_ADMIN_TOKEN}");
        return Ok(None);
    }
    tracing::info!(path = %path.display(), "generated an admin token; it is in this file");
    Ok(Some(token))
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    file.sync_all()?;
    Ok(())
}
