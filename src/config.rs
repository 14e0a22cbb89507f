//! The server's one configuration, read once at start-up from flags and their
//! `QUEST_*` environment variables, then passed down. Nothing below this module
//! reads the environment.
//!
//! The operator's configuration file (`--config FILE`, TOML) declares what only
//! the operator may point the service at: AI verifier backends (`[verifiers.NAME]`)
//! and command gates (`[gates.NAME]`). HTTP clients only choose among the names.
//! Its `[email]` table may also hold the email gate's web and DNS settings;
//! for those, a `QUEST_*` variable or a flag wins over the file, and the file
//! over the defaults ([`Config::email_settings`]).
//! Secrets never sit in the file: `api_key_env` names a variable that is read
//! here, at start-up, and the key is redacted wherever it could be printed.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::domain::verify::Question;
use crate::process::{Limits, ProcessSpec, RunAs};

use ipnet::IpNet;

/// Everything `quest serve` needs to run.
#[derive(Clone, clap::Args)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "QUEST_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Directory holding the SQLite database and the generated admin token.
    #[arg(long, env = "QUEST_DATA_DIR", default_value = "./quest-data")]
    pub data_dir: PathBuf,
    /// A `postgres://` URL: keep the data in that PostgreSQL database (several
    /// replicas may share it) instead of the embedded SQLite in the data dir.
    /// Wins over the configuration file's `[database] url`.
    #[arg(long, env = "QUEST_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Connections each replica keeps to PostgreSQL at most (no use with SQLite).
    /// The database's `max_connections` must cover every replica's pool.
    #[arg(long, env = "QUEST_DATABASE_POOL_SIZE", default_value_t = DEFAULT_POOL_SIZE,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub database_pool_size: u32,
    /// Whether this server runs the background work: gate runs of PENDING
    /// submissions, AI verifier questions, the lease sweep and the takeover of
    /// a dead replica's work. `false` makes an API-only replica of a
    /// PostgreSQL deployment: what it records is done by the replicas that
    /// run workers (at least one must).
    #[arg(long, env = "QUEST_WORKERS", default_value_t = true, action = clap::ArgAction::Set)]
    pub workers: bool,
    /// The admin bearer token. When unset, one is generated into `<data-dir>/admin.token`.
    #[arg(long, env = "QUEST_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Gate checks that may run at once.
    #[arg(long, env = "QUEST_GATE_WORKERS", default_value_t = 16)]
    pub gate_workers: usize,
    /// Longest a gate may take on one submission before its verdict is REVIEW
    /// (a command gate's own `timeout_ms` governs it instead).
    #[arg(long, env = "QUEST_GATE_TIMEOUT_SECONDS", default_value_t = 120)]
    pub gate_timeout_seconds: u64,
    /// How often expired leases are swept back to `open`.
    #[arg(long, env = "QUEST_SWEEP_SECONDS", default_value_t = 5)]
    pub sweep_seconds: u64,
    /// Exports that may run at once; past them an export is refused with 503 and `Retry-After`.
    #[arg(long, env = "QUEST_MAX_EXPORTS", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub max_exports: u16,
    /// A streamed export whose client reads nothing for this long is ended and its slot freed.
    #[arg(long, env = "QUEST_EXPORT_IDLE_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub export_idle_seconds: u64,
    /// A request slower than this (beyond its own wait, e.g. a submit's `wait`)
    /// is logged at INFO; others at DEBUG, server errors at WARN.
    #[arg(long, env = "QUEST_SLOW_MS", default_value_t = 1000)]
    pub slow_ms: u64,
    /// Longest a client may take to send a request's headers, and longest a
    /// kept-alive connection may stay idle between requests.
    #[arg(long, env = "QUEST_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout_seconds: u64,
    /// Connections open at once (event streams and long polls included); past
    /// it the server stops accepting until one closes.
    #[arg(long, env = "QUEST_MAX_CONNECTIONS", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Log format: `text` or `json`.
    #[arg(long, env = "QUEST_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    /// The operator's configuration file (TOML): `[verifiers.NAME]` and `[gates.NAME]`
    /// tables, and an `[email]` table with the email gate's web and DNS settings.
    #[arg(long = "config", env = "QUEST_CONFIG")]
    pub config_file: Option<PathBuf>,
    /// DNS servers the gates ask, comma-separated `ip:port` (port 53 when left
    /// out); the system's resolver when unset and not in the file. Page fetches
    /// resolve through them too.
    #[arg(long, env = "QUEST_DNS_SERVERS",
          value_parser = |text: &str| parse_list(text, parse_dns_server))]
    // Unset means "as the file says, else the default"; an empty value means none.
    pub dns_servers: Option<DnsServers>,
    /// Comma-separated CIDR ranges the page fetcher may reach although they are
    /// not public (loopback, private, ...). None by default: for tests and private deployments.
    #[arg(long, env = "QUEST_FETCH_ALLOW",
          value_parser = |text: &str| parse_list(text, parse_cidr))]
    pub fetch_allow: Option<AllowedRanges>,
    /// Longest one page fetch may take, body included, in milliseconds [default: 15000].
    #[arg(long, env = "QUEST_FETCH_TIMEOUT_MS",
          value_parser = clap::value_parser!(u64).range(FETCH_TIMEOUT_MS_RANGE))]
    pub fetch_timeout_ms: Option<u64>,
    /// Longest one DNS question may take, retries included, in milliseconds [default: 5000].
    #[arg(long, env = "QUEST_DNS_TIMEOUT_MS",
          value_parser = clap::value_parser!(u64).range(DNS_TIMEOUT_MS_RANGE))]
    pub dns_timeout_ms: Option<u64>,
    /// The `quest` binary, which sets the resource limits of operator programs
    /// as a trampoline: this very program when serving.
    #[arg(skip = std::env::current_exe().ok())]
    pub runner_exe: Option<PathBuf>,
}

/// DNS servers, each `ip:port`. (An alias, so that clap takes the whole
/// comma-separated value as one instead of repeating the flag.)
pub type DnsServers = Vec<SocketAddr>;
/// CIDR ranges exempt from the SSRF guard.
pub type AllowedRanges = Vec<IpNet>;

const FETCH_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 1..=600_000;
const DNS_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 1..=60_000;
const DEFAULT_FETCH_TIMEOUT_MS: u64 = 15_000;
/// PostgreSQL connections per replica unless `--database-pool-size` says otherwise.
pub const DEFAULT_POOL_SIZE: u32 = 16;
const DEFAULT_DNS_TIMEOUT_MS: u64 = 5_000;

/// How the email gate reaches the web and DNS, resolved from the defaults,
/// the file's `[email]` table and the `QUEST_*` variables and flags, in that
/// order of strength.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailSettings {
    /// Empty: the system's resolver.
    pub dns_servers: Vec<SocketAddr>,
    pub fetch_allow: Vec<IpNet>,
    pub fetch_timeout: Duration,
    pub dns_timeout: Duration,
}

/// The `[email]` table of the operator's file: each setting optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmailFileSettings {
    pub dns_servers: Option<Vec<SocketAddr>>,
    pub fetch_allow: Option<Vec<IpNet>>,
    pub fetch_timeout_ms: Option<u64>,
    pub dns_timeout_ms: Option<u64>,
}

/// A comma-separated list; empty entries (and an empty value) are skipped.
fn parse_list<T>(text: &str, item: fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(item)
        .collect()
}

/// `ip:port`, or a bare IP meaning port 53.
fn parse_dns_server(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    text.parse::<SocketAddr>()
        .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| format!("`{text}` is not a DNS server address; write ip:port, e.g. 127.0.0.1:53 or [::1]:5353"))
}

/// A CIDR range, or a bare IP meaning that one address.
fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{text}` is not a CIDR range; write e.g. 127.0.0.0/8 or ::1/128"))
}

impl Config {
    /// The defaults, as `quest serve` with no flags and no environment would use them.
    pub fn with_data_dir(data_dir: impl Into<PathBuf>) -> Config {
        Config {
            bind: "127.0.0.1:8080".parse().expect("a valid literal address"),
            data_dir: data_dir.into(),
            database_url: None,
            database_pool_size: DEFAULT_POOL_SIZE,
            workers: true,
            admin_token: None,
            gate_workers: 16,
            gate_timeout_seconds: 120,
            sweep_seconds: 5,
            max_exports: 4,
            export_idle_seconds: 30,
            slow_ms: 1000,
            header_read_timeout_seconds: 10,
            max_connections: 1024,
            log_format: "text".into(),
            config_file: None,
            dns_servers: None,
            fetch_allow: None,
            fetch_timeout_ms: None,
            dns_timeout_ms: None,
            runner_exe: std::env::current_exe().ok(),
        }
    }

    /// The email gate's web and DNS settings: a variable or flag wins over
    /// the file's `[email]` table, which wins over the defaults.
    pub fn email_settings(&self, file: &EmailFileSettings) -> EmailSettings {
        EmailSettings {
            dns_servers: self
                .dns_servers
                .clone()
                .or_else(|| file.dns_servers.clone())
                .unwrap_or_default(),
            fetch_allow: self
                .fetch_allow
                .clone()
                .or_else(|| file.fetch_allow.clone())
                .unwrap_or_default(),
            fetch_timeout: Duration::from_millis(
                self.fetch_timeout_ms
                    .or(file.fetch_timeout_ms)
                    .unwrap_or(DEFAULT_FETCH_TIMEOUT_MS),
            ),
            dns_timeout: Duration::from_millis(
                self.dns_timeout_ms
                    .or(file.dns_timeout_ms)
                    .unwrap_or(DEFAULT_DNS_TIMEOUT_MS),
            ),
        }
    }

    /// Reads the operator's configuration file, if one is named, resolving the
    /// environment variables it names. No file means no verifiers and no command gates.
    pub fn operator(&self) -> Result<OperatorConfig, OperatorConfigError> {
        let Some(path) = &self.config_file else {
            return Ok(OperatorConfig::default());
        };
        let text = std::fs::read_to_string(path).map_err(|e| OperatorConfigError {
            at: path.display().to_string(),
            message: format!("cannot read the configuration file: {e}"),
        })?;
        OperatorConfig::parse(&text, &|name| std::env::var(name).ok()).map_err(|mut e| {
            e.at = format!("{}: {}", path.display(), e.at);
            e
        })
    }

    /// Where the data lives: the PostgreSQL database a URL names (a flag or
    /// variable wins over the file's `[database] url`), else the embedded
    /// SQLite file in the data dir. A URL that is not `postgres://` is refused.
    pub fn database(&self, file: &DatabaseFileSettings) -> Result<Database, String> {
        let url = self
            .database_url
            .as_deref()
            .filter(|u| !u.trim().is_empty())
            .or(file.url.as_deref());
        match url {
            None => Ok(Database::Sqlite(self.database_path())),
            Some(url) => DatabaseUrl::parse(url).map(Database::Postgres),
        }
    }

    /// What one client connection may hold.
    pub fn connection_limits(&self) -> crate::http::ConnectionLimits {
        crate::http::ConnectionLimits {
            header_read_timeout: Duration::from_secs(self.header_read_timeout_seconds),
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
        }
    }

    /// The SQLite database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("quest.db")
    }

    /// Where a generated admin token is kept.
    pub fn admin_token_path(&self) -> PathBuf {
        self.data_dir.join("admin.token")
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("bind", &self.bind)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_deref().map(redact_url),
            )
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field("database_pool_size", &self.database_pool_size)
            .field("workers", &self.workers)
            .field("gate_workers", &self.gate_workers)
            .field("gate_timeout_seconds", &self.gate_timeout_seconds)
            .field("sweep_seconds", &self.sweep_seconds)
            .field("max_exports", &self.max_exports)
            .field("export_idle_seconds", &self.export_idle_seconds)
            .field("slow_ms", &self.slow_ms)
            .field(
                "header_read_timeout_seconds",
                &self.header_read_timeout_seconds,
            )
            .field("max_connections", &self.max_connections)
            .field("log_format", &self.log_format)
            .field("config_file", &self.config_file)
            .field("dns_servers", &self.dns_servers)
            .field("fetch_allow", &self.fetch_allow)
            .field("fetch_timeout_ms", &self.fetch_timeout_ms)
            .field("dns_timeout_ms", &self.dns_timeout_ms)
            .field("runner_exe", &self.runner_exe)
            .finish()
    }
}

/// Where the store keeps its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// The embedded SQLite file (the default).
    Sqlite(PathBuf),
    /// A PostgreSQL database, shared by every replica that names it.
    Postgres(DatabaseUrl),
}

/// A checked `postgres://` URL. Its `Debug` and `Display` hide the password.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    /// A `postgres://` or `postgresql://` URL, or what is wrong with it.
    pub fn parse(text: &str) -> Result<DatabaseUrl, String> {
        let text = text.trim();
        let url = url::Url::parse(text).map_err(|e| {
            format!("the database URL is not a URL ({e}); write postgres://USER@HOST:PORT/DATABASE")
        })?;
        if !matches!(url.scheme(), "postgres" | "postgresql") {
            return Err(format!(
                "the database URL must be postgres://USER@HOST:PORT/DATABASE, not `{}://…`; \
                 leave it unset for the embedded SQLite in the data dir",
                url.scheme()
            ));
        }
        Ok(DatabaseUrl(text.to_owned()))
    }

    /// The URL itself, password included: for the connection only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({self})")
    }
}

/// The `[database]` table of the operator's file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatabaseFileSettings {
    /// A `postgres://` URL (checked when the store opens).
    pub url: Option<String>,
}

/// A secret read from the environment. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A URL as it may be shown or stored: without its userinfo (`user:password@`)
/// and its query, where credentials also travel. Text that is not a URL is not
/// echoed at all.
pub fn redact_url(text: &str) -> String {
    let Ok(mut url) = url::Url::parse(text) else {
        return "<not a URL>".to_owned();
    };
    if !url.username().is_empty() || url.password().is_some() {
        let _ = url.set_password(None);
        let _ = url.set_username("***");
    }
    if url.query().is_some() {
        url.set_query(Some("***"));
    }
    url.set_fragment(None);
    url.to_string()
}

/// The data dir whose `admin.token` the client verbs may read when they talk to
/// a server on this machine: `QUEST_DATA_DIR`, else `./quest-data`.
pub fn client_data_dir() -> PathBuf {
    std::env::var_os("QUEST_DATA_DIR").map_or_else(|| PathBuf::from("./quest-data"), PathBuf::from)
}

/// Where the client verbs remember leases unless `--state-dir` / `QUEST_STATE_DIR`
/// says: `$XDG_STATE_HOME/quest`, else `$HOME/.local/state/quest`, else `./.quest`.
pub fn client_state_dir() -> PathBuf {
    state_dir_from(&|name| std::env::var_os(name))
}

fn state_dir_from(var: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set("XDG_STATE_HOME") {
        return dir.join("quest");
    }
    match set("HOME") {
        Some(home) => home.join(".local/state/quest"),
        None => PathBuf::from(".quest"),
    }
}

mod operator;
pub use operator::*;

#[cfg(test)]
mod tests;
