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

/// What the operator's configuration file declares, resolved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorConfig {
    /// AI verifier backends, by name order.
    pub verifiers: Vec<VerifierConfig>,
    /// Command gates, by name order.
    pub gates: Vec<CommandGateConfig>,
    /// The email gate's web and DNS settings the file sets.
    pub email: EmailFileSettings,
    /// Where the data lives, if the file says.
    pub database: DatabaseFileSettings,
}

/// One AI verifier backend.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifierConfig {
    pub name: String,
    pub backend: VerifierBackend,
    /// Calls to this backend in flight at once.
    pub max_concurrency: usize,
    /// How long one answer may take, retries included; past it, no answer.
    pub timeout: Duration,
}

/// How a verifier is reached. Its `Debug` redacts the URL's credentials.
#[derive(Clone, PartialEq)]
pub enum VerifierBackend {
    /// An OpenAI-compatible chat-completions endpoint.
    OpenAi {
        /// Up to and including the version, e.g. `http://127.0.0.1:9001/v1`.
        base_url: String,
        model: String,
        api_key: Option<Secret>,
        sampling: Sampling,
    },
    /// An operator program: the request as JSON on stdin, `{"answer", "reason"}` on stdout.
    Command {
        process: ProcessSpec,
        /// A label recorded with every answer (default: the program's name).
        model: String,
    },
}

/// The optional fields of a chat-completions request. `None` leaves a field
/// out: some reasoning models refuse `max_tokens` or `temperature`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
}

impl Sampling {
    /// What a verifier sends unless its table says otherwise: short, deterministic replies.
    pub const DEFAULT: Sampling = Sampling {
        max_tokens: Some(100),
        temperature: Some(0.0),
    };
}

impl std::fmt::Debug for VerifierBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifierBackend::OpenAi {
                base_url,
                model,
                api_key,
                sampling,
            } => f
                .debug_struct("OpenAi")
                .field("base_url", &redact_url(base_url))
                .field("model", model)
                .field("api_key", api_key)
                .field("sampling", sampling)
                .finish(),
            VerifierBackend::Command { process, model } => f
                .debug_struct("Command")
                .field("process", process)
                .field("model", model)
                .finish(),
        }
    }
}

impl VerifierBackend {
    /// The model name recorded with each answer.
    pub fn model(&self) -> &str {
        match self {
            VerifierBackend::OpenAi { model, .. } | VerifierBackend::Command { model, .. } => model,
        }
    }
}

/// Where a command gate reads its program's verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictChannel {
    /// The whole stdout or its last line (shared with whatever the program runs).
    #[default]
    Stdout,
    /// The file named by `QUEST_VERDICT_FILE`; stdout is only logged.
    File,
}

/// One command gate.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandGateConfig {
    pub name: String,
    pub process: ProcessSpec,
    /// Where the verdict is read (`process.verdict_file` follows it).
    pub verdict: VerdictChannel,
    /// The top-level result fields AI verifiers may see, each with its whole
    /// value, nested free text included (none: the gate cannot be verified).
    pub result_fields: Vec<String>,
    /// Default questions for AI verifiers.
    pub questions: Vec<Question>,
}

/// A configuration file that cannot be used; `at` names the table or key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct OperatorConfigError {
    pub at: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    verifiers: BTreeMap<String, VerifierEntry>,
    #[serde(default)]
    gates: BTreeMap<String, GateEntry>,
    #[serde(default)]
    email: EmailEntry,
    #[serde(default)]
    database: DatabaseEntry,
}

/// `[database]`: `url = "postgres://..."`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DatabaseEntry {
    url: Option<String>,
}

/// `[email]`: lists are TOML arrays of strings, read like the variables' entries.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EmailEntry {
    dns_servers: Option<Vec<String>>,
    fetch_allow: Option<Vec<String>>,
    fetch_timeout_ms: Option<u64>,
    dns_timeout_ms: Option<u64>,
}

impl EmailEntry {
    fn resolve(self) -> Result<EmailFileSettings, OperatorConfigError> {
        let err = |key: String, message: String| OperatorConfigError {
            at: format!("email.{key}"),
            message,
        };
        fn each<T>(
            key: &str,
            list: Option<Vec<String>>,
            item: fn(&str) -> Result<T, String>,
            err: &dyn Fn(String, String) -> OperatorConfigError,
        ) -> Result<Option<Vec<T>>, OperatorConfigError> {
            list.map(|list| {
                list.iter()
                    .enumerate()
                    .map(|(i, text)| item(text).map_err(|m| err(format!("{key}[{i}]"), m)))
                    .collect()
            })
            .transpose()
        }
        let millis =
            |key: &str, value: Option<u64>, range: std::ops::RangeInclusive<u64>| match value {
                Some(ms) if !range.contains(&ms) => Err(err(
                    key.into(),
                    format!("{ms} is not between {} and {}", range.start(), range.end()),
                )),
                other => Ok(other),
            };
        Ok(EmailFileSettings {
            dns_servers: each("dns_servers", self.dns_servers, parse_dns_server, &err)?,
            fetch_allow: each("fetch_allow", self.fetch_allow, parse_cidr, &err)?,
            fetch_timeout_ms: millis(
                "fetch_timeout_ms",
                self.fetch_timeout_ms,
                FETCH_TIMEOUT_MS_RANGE,
            )?,
            dns_timeout_ms: millis("dns_timeout_ms", self.dns_timeout_ms, DNS_TIMEOUT_MS_RANGE)?,
        })
    }
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum VerifierEntry {
    Openai {
        base_url: String,
        model: String,
        #[serde(default)]
        api_key_env: Option<String>,
        #[serde(default = "default_verifier_concurrency")]
        max_concurrency: usize,
        #[serde(default = "default_verifier_timeout_ms")]
        timeout_ms: u64,
        #[serde(default)]
        max_tokens: Option<u32>,
        #[serde(default)]
        temperature: Option<f64>,
        /// Request fields not to send at all: `max_tokens`, `temperature`.
        #[serde(default)]
        omit: Vec<String>,
    },
    Command {
        argv: Vec<String>,
        #[serde(default)]
        workdir: Option<PathBuf>,
        #[serde(default)]
        env: Vec<String>,
        #[serde(default)]
        model: Option<String>,
        #[serde(default = "default_verifier_concurrency")]
        max_concurrency: usize,
        #[serde(default = "default_verifier_timeout_ms")]
        timeout_ms: u64,
    },
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum GateEntry {
    Command {
        argv: Vec<String>,
        #[serde(default)]
        workdir: Option<PathBuf>,
        #[serde(default)]
        env: Vec<String>,
        #[serde(default = "default_gate_timeout_ms")]
        timeout_ms: u64,
        #[serde(default)]
        result_fields: Vec<String>,
        #[serde(default)]
        questions: Vec<Question>,
        #[serde(default)]
        verdict: VerdictChannel,
        #[serde(default)]
        cpu_seconds: Option<u64>,
        #[serde(default)]
        address_space_mb: Option<u64>,
        #[serde(default)]
        open_files: Option<u64>,
        #[serde(default)]
        user: Option<String>,
    },
}

fn default_verifier_concurrency() -> usize {
    4
}
fn default_verifier_timeout_ms() -> u64 {
    20_000
}
fn default_gate_timeout_ms() -> u64 {
    60_000
}

impl OperatorConfig {
    /// Parses the file's text; `env` looks up the variables it names.
    pub fn parse(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OperatorConfig, OperatorConfigError> {
        OperatorConfig::parse_on(text, env, &System::this())
    }

    /// [`OperatorConfig::parse`] on a machine that `system` describes.
    pub fn parse_on(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
        system: &System,
    ) -> Result<OperatorConfig, OperatorConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|e| OperatorConfigError {
            at: "toml".into(),
            message: e.message().to_owned()
                + &e.span()
                    .map(|s| format!(" (at byte {})", s.start))
                    .unwrap_or_default(),
        })?;
        let mut out = OperatorConfig {
            email: file.email.resolve()?,
            database: DatabaseFileSettings {
                url: file.database.url,
            },
            ..OperatorConfig::default()
        };
        for (name, entry) in file.verifiers {
            let at = format!("verifiers.{name}");
            let err = |message: String| OperatorConfigError {
                at: at.clone(),
                message,
            };
            check_name(&name).map_err(&err)?;
            let (backend, max_concurrency, timeout_ms) = match entry {
                VerifierEntry::Openai {
                    base_url,
                    model,
                    api_key_env,
                    max_concurrency,
                    timeout_ms,
                    max_tokens,
                    temperature,
                    omit,
                } => {
                    // The value is not echoed: it may carry credentials.
                    let url = reqwest::Url::parse(&base_url)
                        .map_err(|e| err(format!("base_url is not a URL: {e}")))?;
                    if !matches!(url.scheme(), "http" | "https") {
                        return Err(err("base_url must be http or https".into()));
                    }
                    let api_key = match api_key_env {
                        None => None,
                        Some(var) => Some(Secret::new(
                            env(&var).filter(|v| !v.is_empty()).ok_or_else(|| {
                                err(format!("api_key_env names `{var}`, which is not set"))
                            })?,
                        )),
                    };
                    let sampling = sampling(max_tokens, temperature, &omit).map_err(&err)?;
                    let backend = VerifierBackend::OpenAi {
                        base_url: base_url.trim_end_matches('/').to_owned(),
                        model,
                        api_key,
                        sampling,
                    };
                    (backend, max_concurrency, timeout_ms)
                }
                VerifierEntry::Command {
                    argv,
                    workdir,
                    env: allowed,
                    model,
                    max_concurrency,
                    timeout_ms,
                } => {
                    let process =
                        process_spec(argv, workdir, &allowed, timeout_ms, env).map_err(&err)?;
                    let model = model.unwrap_or_else(|| process.argv[0].clone());
                    (
                        VerifierBackend::Command { process, model },
                        max_concurrency,
                        timeout_ms,
                    )
                }
            };
            if !(1..=256).contains(&max_concurrency) {
                return Err(err("max_concurrency must be between 1 and 256".into()));
            }
            out.verifiers.push(VerifierConfig {
                name,
                backend,
                max_concurrency,
                timeout: timeout(timeout_ms).map_err(&err)?,
            });
        }
        for (name, entry) in file.gates {
            let at = format!("gates.{name}");
            let err = |message: String| OperatorConfigError {
                at: at.clone(),
                message,
            };
            check_name(&name).map_err(&err)?;
            let GateEntry::Command {
                argv,
                workdir,
                env: allowed,
                timeout_ms,
                result_fields,
                questions,
                verdict,
                cpu_seconds,
                address_space_mb,
                open_files,
                user,
            } = entry;
            let mut process =
                process_spec(argv, workdir, &allowed, timeout_ms, env).map_err(&err)?;
            process.limits = limits(cpu_seconds, address_space_mb, open_files).map_err(&err)?;
            process.user = match user {
                None => None,
                Some(user) => Some(run_as(&user, system.is_root, &system.passwd).map_err(&err)?),
            };
            process.verdict_file = verdict == VerdictChannel::File;
            // A pointer or a dotted path reads as "only this part", which a
            // command gate cannot do: it shows whole top-level fields.
            if let Some(path) = result_fields
                .iter()
                .find(|f| f.is_empty() || f.starts_with('/') || f.contains('.'))
            {
                return Err(err(format!(
                    "result_fields names top-level fields, shown whole; `{path}` is not one"
                )));
            }
            out.gates.push(CommandGateConfig {
                name,
                process,
                verdict,
                result_fields,
                questions,
            });
        }
        Ok(out)
    }
}

/// The request fields of a verifier: the defaults, changed or left out.
fn sampling(
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    omit: &[String],
) -> Result<Sampling, String> {
    if let Some(other) = omit
        .iter()
        .find(|o| !matches!(o.as_str(), "max_tokens" | "temperature"))
    {
        return Err(format!(
            "omit may name `max_tokens` and `temperature`, not `{other}`"
        ));
    }
    let omitted = |field: &str| omit.iter().any(|o| o == field);
    if (omitted("max_tokens") && max_tokens.is_some())
        || (omitted("temperature") && temperature.is_some())
    {
        return Err("a field is both set and omitted".into());
    }
    if temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
        return Err("temperature must be between 0 and 2".into());
    }
    Ok(Sampling {
        max_tokens: match omitted("max_tokens") {
            true => None,
            false => max_tokens
                .or(Sampling::DEFAULT.max_tokens)
                .map(|m| m.clamp(1, 4096)),
        },
        temperature: match omitted("temperature") {
            true => None,
            false => temperature.or(Sampling::DEFAULT.temperature),
        },
    })
}

/// Names become metric labels and fact checks: keep them plain.
fn check_name(name: &str) -> Result<(), String> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        Ok(())
    } else {
        Err("a name has 1 to 64 letters, digits, `_` or `-`".into())
    }
}

/// What the machine says about users, for `user = ...`.
pub struct System {
    /// The server runs as root (only root can run a program as another user).
    pub is_root: bool,
    /// The text of `/etc/passwd`.
    pub passwd: String,
}

impl System {
    /// This machine.
    pub fn this() -> System {
        System {
            is_root: rustix::process::geteuid().is_root(),
            passwd: std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
        }
    }
}

/// The limits a gate declares, checked.
fn limits(
    cpu_seconds: Option<u64>,
    address_space_mb: Option<u64>,
    open_files: Option<u64>,
) -> Result<Limits, String> {
    let within = |key: &str, value: Option<u64>, range: std::ops::RangeInclusive<u64>| match value {
        Some(v) if !range.contains(&v) => Err(format!(
            "{key} = {v} is not between {} and {}",
            range.start(),
            range.end()
        )),
        other => Ok(other),
    };
    Ok(Limits {
        cpu_seconds: within("cpu_seconds", cpu_seconds, 1..=86_400)?,
        address_space: within("address_space_mb", address_space_mb, 16..=1 << 20)?
            .map(|mb| mb << 20),
        open_files: within("open_files", open_files, 4..=1 << 20)?,
    })
}

/// The user a gate's program runs as: a name from `passwd`, or `uid` or
/// `uid:gid`. Only a server that runs as root can switch users.
fn run_as(user: &str, is_root: bool, passwd: &str) -> Result<RunAs, String> {
    if !is_root {
        return Err(format!(
            "user = \"{user}\" needs the server to run as root, and it does not; remove `user` or start the server as root"
        ));
    }
    let numeric = |text: &str| text.parse::<u32>().ok();
    if let Some((uid, gid)) = user.split_once(':')
        && let (Some(uid), Some(gid)) = (numeric(uid), numeric(gid))
    {
        return Ok(RunAs {
            name: user.to_owned(),
            uid,
            gid,
        });
    }
    let entry = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let (name, uid, gid) = (
            fields.first()?,
            numeric(fields.get(2)?)?,
            numeric(fields.get(3)?)?,
        );
        (*name == user || numeric(user) == Some(uid)).then_some((uid, gid))
    });
    match (entry, numeric(user)) {
        (Some((uid, gid)), _) => Ok(RunAs {
            name: user.to_owned(),
            uid,
            gid,
        }),
        (None, Some(uid)) => Ok(RunAs {
            name: user.to_owned(),
            uid,
            gid: uid,
        }),
        (None, None) => Err(format!(
            "user = \"{user}\" is no user of this machine (not in /etc/passwd); name one, or give uid:gid"
        )),
    }
}

fn timeout(ms: u64) -> Result<Duration, String> {
    if (1..=3_600_000).contains(&ms) {
        Ok(Duration::from_millis(ms))
    } else {
        Err("timeout_ms must be between 1 and 3600000".into())
    }
}

/// Resolves a program: a relative program path with a `/` is taken from
/// `workdir`; the environment is exactly the allow-listed variables that are set.
fn process_spec(
    mut argv: Vec<String>,
    workdir: Option<PathBuf>,
    allowed: &[String],
    timeout_ms: u64,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ProcessSpec, String> {
    let Some(program) = argv.first_mut() else {
        return Err("argv must name a program".into());
    };
    if program.is_empty() {
        return Err("argv must name a program".into());
    }
    if let Some(dir) = &workdir
        && !dir.is_dir()
    {
        return Err(format!("workdir {} is not a directory", dir.display()));
    }
    // Without a workdir the program runs in a fresh empty directory, so a
    // relative path is taken from where the server was started.
    if program.contains('/') && Path::new(program.as_str()).is_relative() {
        let base = match &workdir {
            Some(dir) => dir.clone(),
            None => {
                std::env::current_dir().map_err(|e| format!("cannot resolve {program}: {e}"))?
            }
        };
        *program = base.join(program.as_str()).display().to_string();
    }
    let env = allowed
        .iter()
        .filter_map(|name| env(name).map(|value| (name.clone(), value)))
        .collect();
    Ok(ProcessSpec {
        argv,
        workdir,
        env,
        timeout: timeout(timeout_ms)?,
        ..ProcessSpec::default()
    })
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

#[cfg(test)]
mod tests;
