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
mod tests {
    use super::*;

    #[test]
    fn the_client_state_dir_follows_xdg_then_home() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let both = vars(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(state_dir_from(&both), PathBuf::from("/x/quest"));
        let empty_xdg = vars(&[("XDG_STATE_HOME", ""), ("HOME", "/h")]);
        assert_eq!(
            state_dir_from(&empty_xdg),
            PathBuf::from("/h/.local/state/quest")
        );
        assert_eq!(state_dir_from(&vars(&[])), PathBuf::from(".quest"));
    }
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: Config,
    }

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Cli::try_parse_from(std::iter::once("quest").chain(args.iter().copied())).map(|c| c.config)
    }

    fn no_file() -> EmailFileSettings {
        EmailFileSettings::default()
    }

    #[test]
    fn the_gate_settings_default_to_the_system_resolver_and_no_exemptions() {
        let c = parse(&[]).unwrap();
        let d = Config::with_data_dir("./quest-data");
        assert_eq!(
            c.email_settings(&no_file()),
            EmailSettings {
                dns_servers: vec![],
                fetch_allow: vec![],
                fetch_timeout: Duration::from_millis(15_000),
                dns_timeout: Duration::from_millis(5_000),
            }
        );
        assert_eq!(
            format!("{c:?}"),
            format!("{d:?}"),
            "with_data_dir holds the same defaults"
        );
    }

    #[test]
    fn dns_servers_and_allowed_ranges_are_comma_separated() {
        let c = parse(&[
            "--dns-servers",
            "127.0.0.1:5353, [::1]:53,10.0.0.2",
            "--fetch-allow",
            "127.0.0.0/8,::1",
            "--fetch-timeout-ms",
            "2000",
            "--dns-timeout-ms",
            "700",
        ])
        .unwrap()
        .email_settings(&no_file());
        assert_eq!(
            c.dns_servers,
            ["127.0.0.1:5353", "[::1]:53", "10.0.0.2:53"].map(|s| s.parse::<SocketAddr>().unwrap())
        );
        assert_eq!(
            c.fetch_allow,
            ["127.0.0.0/8", "::1/128"].map(|s| s.parse::<IpNet>().unwrap())
        );
        assert_eq!(
            (c.fetch_timeout, c.dns_timeout),
            (Duration::from_millis(2000), Duration::from_millis(700))
        );
    }

    #[test]
    fn an_empty_list_means_none() {
        let c = parse(&["--dns-servers", "", "--fetch-allow", " , "]).unwrap();
        assert_eq!(c.dns_servers.as_deref(), Some(&[][..]));
        assert_eq!(c.fetch_allow.as_deref(), Some(&[][..]));
        let s = c.email_settings(&no_file());
        assert!(s.dns_servers.is_empty() && s.fetch_allow.is_empty());
    }

    const EMAIL_FILE: &str = r#"
        [email]
        dns_servers = ["127.0.0.1:5353", "10.0.0.2"]
        fetch_allow = ["127.0.0.0/8", "::1"]
        fetch_timeout_ms = 9000
        dns_timeout_ms = 800
    "#;

    #[test]
    fn the_file_sets_the_email_gate_settings_and_variables_or_flags_win() {
        let file = OperatorConfig::parse(EMAIL_FILE, &env).unwrap().email;
        assert_eq!(
            file,
            EmailFileSettings {
                dns_servers: Some(vec![
                    "127.0.0.1:5353".parse().unwrap(),
                    "10.0.0.2:53".parse().unwrap()
                ]),
                fetch_allow: Some(vec![
                    "127.0.0.0/8".parse().unwrap(),
                    "::1/128".parse().unwrap()
                ]),
                fetch_timeout_ms: Some(9000),
                dns_timeout_ms: Some(800),
            }
        );
        // defaults < file
        let from_file = parse(&[]).unwrap().email_settings(&file);
        assert_eq!(from_file.dns_servers, file.dns_servers.clone().unwrap());
        assert_eq!(from_file.fetch_allow, file.fetch_allow.clone().unwrap());
        assert_eq!(
            (from_file.fetch_timeout, from_file.dns_timeout),
            (Duration::from_millis(9000), Duration::from_millis(800))
        );
        // file < QUEST_* variables and flags (one clap argument each), an empty
        // list included: `QUEST_FETCH_ALLOW=` takes the file's exemptions away.
        let overridden = parse(&[
            "--dns-servers",
            "127.0.0.1:53",
            "--fetch-allow",
            "",
            "--fetch-timeout-ms",
            "2000",
        ])
        .unwrap()
        .email_settings(&file);
        assert_eq!(
            overridden.dns_servers,
            ["127.0.0.1:53".parse::<SocketAddr>().unwrap()]
        );
        assert!(overridden.fetch_allow.is_empty());
        assert_eq!(overridden.fetch_timeout, Duration::from_millis(2000));
        assert_eq!(
            overridden.dns_timeout,
            Duration::from_millis(800),
            "not overridden"
        );
        // A file without the table leaves the defaults.
        assert_eq!(
            OperatorConfig::parse(FILE, &env).unwrap().email,
            EmailFileSettings::default()
        );
    }

    #[test]
    fn bad_email_settings_in_the_file_name_their_key() {
        for (text, at) in [
            (
                "[email]\ndns_servers = [\"localhost:53\"]",
                "email.dns_servers[0]",
            ),
            (
                "[email]\nfetch_allow = [\"127.0.0.0/8\", \"bogus\"]",
                "email.fetch_allow[1]",
            ),
            ("[email]\nfetch_timeout_ms = 0", "email.fetch_timeout_ms"),
            ("[email]\ndns_timeout_ms = 60001", "email.dns_timeout_ms"),
        ] {
            assert_eq!(
                OperatorConfig::parse(text, &env).unwrap_err().at,
                at,
                "{text}"
            );
        }
        for text in [
            "[email]\ndns_servers = \"127.0.0.1:53\"",
            "[email]\nfetch_timeout = 5",
        ] {
            assert_eq!(
                OperatorConfig::parse(text, &env).unwrap_err().at,
                "toml",
                "{text}"
            );
        }
    }

    #[test]
    fn bad_gate_settings_are_refused_with_a_clear_message() {
        for (args, says) in [
            (
                ["--dns-servers", "localhost:53"],
                "not a DNS server address",
            ),
            (["--fetch-allow", "10.0.0.0/33"], "not a CIDR range"),
            (
                ["--fetch-allow", "127.0.0.0/8,bogus"],
                "`bogus` is not a CIDR range",
            ),
            (["--fetch-timeout-ms", "0"], "fetch-timeout-ms"),
            (["--dns-timeout-ms", "soon"], "dns-timeout-ms"),
        ] {
            let err = parse(&args).err().unwrap().to_string();
            assert!(err.contains(says), "{args:?}: {err}");
        }
    }

    #[test]
    fn debug_output_redacts_the_admin_token() {
        let mut c = Config::with_data_dir("d");
        c.admin_token = Some("s3cret".into());
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret") && shown.contains("<redacted>"));
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "ALPHA_KEY" => Some("sk-alpha-secret".into()),
            "PATH" => Some("/usr/bin:/bin".into()),
            _ => None,
        }
    }

    const FILE: &str = r#"
        [verifiers.alpha]
        kind = "openai"
        base_url = "http://127.0.0.1:9001/v1/"
        model = "judge-a"
        api_key_env = "ALPHA_KEY"
        max_concurrency = 2
        timeout_ms = 1500

        [verifiers.local]
        kind = "command"
        argv = ["/usr/local/bin/judge", "--strict"]
        env = ["PATH", "UNSET_VAR"]

        [gates.coverage]
        kind = "command"
        argv = ["/srv/check-coverage.sh"]
        timeout_ms = 60000
        result_fields = ["test_file"]
        questions = ["Does the test assert nothing?", {text = "Does it test the named function?", flag_on = "no"}]
    "#;

    #[test]
    fn the_file_declares_verifiers_and_command_gates() {
        let c = OperatorConfig::parse(FILE, &env).unwrap();
        assert_eq!(c.verifiers.len(), 2);
        let alpha = &c.verifiers[0];
        assert_eq!((alpha.name.as_str(), alpha.max_concurrency), ("alpha", 2));
        assert_eq!(alpha.timeout, Duration::from_millis(1500));
        let VerifierBackend::OpenAi {
            base_url, api_key, ..
        } = &alpha.backend
        else {
            panic!("openai")
        };
        assert_eq!(base_url, "http://127.0.0.1:9001/v1");
        assert_eq!(api_key.as_ref().unwrap().expose(), "sk-alpha-secret");
        let VerifierBackend::Command { process, model } = &c.verifiers[1].backend else {
            panic!("command")
        };
        assert_eq!(model, "/usr/local/bin/judge");
        assert_eq!(
            process.env,
            vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())]
        );
        assert_eq!(
            c.verifiers[1].timeout,
            Duration::from_secs(20),
            "the default"
        );
        let gate = &c.gates[0];
        assert_eq!(gate.name, "coverage");
        assert_eq!(gate.result_fields, ["test_file"]);
        assert_eq!(gate.questions[1].flag_on, crate::domain::verify::FlagOn::No);
        assert!(gate.process.env.is_empty(), "the environment is cleared");
    }

    #[test]
    fn a_verifier_may_change_or_leave_out_max_tokens_and_temperature() {
        let backend = |extra: &str| {
            let text = format!(
                "[verifiers.a]\nkind = \"openai\"\nbase_url = \"http://h.test/v1\"\nmodel = \"m\"\n{extra}"
            );
            OperatorConfig::parse(&text, &env).map(|c| c.verifiers[0].backend.clone())
        };
        let sampling = |extra: &str| match backend(extra).unwrap() {
            VerifierBackend::OpenAi { sampling, .. } => sampling,
            other => panic!("{other:?}"),
        };
        assert_eq!(sampling(""), Sampling::DEFAULT);
        assert_eq!(
            sampling("max_tokens = 2000\ntemperature = 0.7"),
            Sampling {
                max_tokens: Some(2000),
                temperature: Some(0.7)
            }
        );
        assert_eq!(
            sampling("omit = [\"max_tokens\", \"temperature\"]"),
            Sampling {
                max_tokens: None,
                temperature: None
            }
        );
        for bad in [
            "omit = [\"top_p\"]",
            "omit = [\"temperature\"]\ntemperature = 1.0",
            "temperature = 3.0",
        ] {
            assert_eq!(backend(bad).unwrap_err().at, "verifiers.a", "{bad}");
        }
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let c = OperatorConfig::parse(FILE, &env).unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("sk-alpha-secret") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn credentials_in_a_base_url_never_show_in_debug_output() {
        let text = "[verifiers.a]\nkind = \"openai\"\nbase_url = \"https://quest:hunter2@llm.test/v1?key=sk-q\"\nmodel = \"m\"";
        let c = OperatorConfig::parse(text, &env).unwrap();
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("sk-q") && !shown.contains("quest:"),
            "{shown}"
        );
        assert!(shown.contains("https://***@llm.test/v1?***"), "{shown}");
        assert_eq!(redact_url("http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1");
        assert_eq!(redact_url("http://user@h.test/"), "http://***@h.test/");
        assert_eq!(redact_url("not a url with pw"), "<not a URL>");
    }

    #[test]
    fn a_command_gate_declares_its_verdict_channel_limits_and_user() {
        let root = System {
            is_root: true,
            passwd:
                "root:x:0:0::/root:/bin/sh\nrunner:x:1500:1600::/nonexistent:/usr/sbin/nologin\n"
                    .into(),
        };
        let text = "[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\nverdict = \"file\"\n\
                    cpu_seconds = 30\naddress_space_mb = 512\nopen_files = 64\nuser = \"runner\"";
        let c = OperatorConfig::parse_on(text, &env, &root).unwrap();
        let gate = &c.gates[0];
        assert_eq!(gate.verdict, VerdictChannel::File);
        assert!(gate.process.verdict_file);
        assert_eq!(
            gate.process.limits,
            Limits {
                cpu_seconds: Some(30),
                address_space: Some(512 << 20),
                open_files: Some(64),
            }
        );
        assert_eq!(
            gate.process.user,
            Some(RunAs {
                name: "runner".into(),
                uid: 1500,
                gid: 1600
            })
        );
        let plain = OperatorConfig::parse_on(
            "[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]",
            &env,
            &root,
        )
        .unwrap();
        assert_eq!(plain.gates[0].verdict, VerdictChannel::Stdout);
        assert!(plain.gates[0].process.limits.is_empty() && plain.gates[0].process.user.is_none());
        for (user, uid, gid) in [
            ("1500", 1500, 1600),
            ("77:88", 77, 88),
            ("4242", 4242, 4242),
        ] {
            let text =
                format!("[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\nuser = \"{user}\"");
            let user = OperatorConfig::parse_on(&text, &env, &root).unwrap().gates[0]
                .process
                .user
                .clone()
                .unwrap();
            assert_eq!((user.uid, user.gid), (uid, gid));
        }

        let refused =
            |text: &str, system: &System| OperatorConfig::parse_on(text, &env, system).unwrap_err();
        let gate =
            |extra: &str| format!("[gates.c]\nkind = \"command\"\nargv = [\"/bin/true\"]\n{extra}");
        let err = refused(&gate("user = \"nosuch\""), &root);
        assert!(
            err.at == "gates.c" && err.message.contains("no user of this machine"),
            "{err}"
        );
        let not_root = System {
            is_root: false,
            ..root
        };
        let err = refused(&gate("user = \"runner\""), &not_root);
        assert!(
            err.message.contains("needs the server to run as root"),
            "{err}"
        );
        for extra in ["cpu_seconds = 0", "address_space_mb = 1", "open_files = 2"] {
            let err = refused(&gate(extra), &not_root);
            assert!(
                err.at == "gates.c" && err.message.contains("is not between"),
                "{extra}: {err}"
            );
        }
        assert_eq!(refused(&gate("verdict = \"stderr\""), &not_root).at, "toml");
    }

    #[test]
    fn unusable_files_are_refused_with_the_table_named() {
        for (text, at) in [
            (
                "[verifiers.a]\nkind = \"openai\"\nbase_url = \"http://h/v1\"\nmodel = \"m\"\napi_key_env = \"NOPE\"",
                "verifiers.a",
            ),
            (
                "[verifiers.a]\nkind = \"openai\"\nbase_url = \"ftp://h\"\nmodel = \"m\"",
                "verifiers.a",
            ),
            (
                "[verifiers.\"a b\"]\nkind = \"command\"\nargv = [\"x\"]",
                "verifiers.a b",
            ),
            ("[gates.c]\nkind = \"command\"\nargv = []", "gates.c"),
            (
                "[gates.c]\nkind = \"command\"\nargv = [\"x\"]\ntimeout_ms = 0",
                "gates.c",
            ),
            (
                "[verifiers.a]\nkind = \"command\"\nargv = [\"x\"]\nmax_concurrency = 0",
                "verifiers.a",
            ),
            (
                "[gates.c]\nkind = \"command\"\nargv = [\"x\"]\nresult_fields = [\"/test/code\"]",
                "gates.c",
            ),
            (
                "[gates.c]\nkind = \"command\"\nargv = [\"x\"]\nresult_fields = [\"test.code\"]",
                "gates.c",
            ),
        ] {
            assert_eq!(
                OperatorConfig::parse(text, &env).unwrap_err().at,
                at,
                "{text}"
            );
        }
        for text in [
            "[verifiers.a]\nkind = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\napi_key = \"inline\"",
            "[gates.c]\nkind = \"shell\"\nargv = [\"x\"]",
            "[other]\nx = 1",
        ] {
            assert_eq!(
                OperatorConfig::parse(text, &env).unwrap_err().at,
                "toml",
                "{text}"
            );
        }
    }

    #[test]
    fn a_postgres_url_from_a_flag_or_the_file_selects_postgres_and_sqlite_stays_the_default() {
        let mut c = Config::with_data_dir("d");
        let none = DatabaseFileSettings::default();
        assert_eq!(
            c.database(&none),
            Ok(Database::Sqlite(PathBuf::from("d").join("quest.db")))
        );
        let file = DatabaseFileSettings {
            url: Some("postgres://q@db.internal/quest".into()),
        };
        let Ok(Database::Postgres(url)) = c.database(&file) else {
            panic!("the file's url selects PostgreSQL")
        };
        assert_eq!(url.expose(), "postgres://q@db.internal/quest");
        c.database_url = Some("postgresql://q:hunter2@127.0.0.1:5432/other".into());
        let Ok(Database::Postgres(url)) = c.database(&file) else {
            panic!("the flag selects PostgreSQL")
        };
        assert!(
            url.expose().ends_with("/other"),
            "the flag wins over the file"
        );
        assert!(
            !format!("{url} {url:?} {c:?}").contains("hunter2"),
            "the password is never shown"
        );
        c.database_url = Some("   ".into());
        assert!(
            matches!(c.database(&file), Ok(Database::Postgres(_))),
            "blank is unset"
        );
    }

    #[test]
    fn a_database_url_that_is_not_postgres_is_refused_with_what_to_write() {
        let mut c = Config::with_data_dir("d");
        for bad in ["mysql://x/y", "quest.db", "postgres://[bad"] {
            c.database_url = Some(bad.into());
            let err = c.database(&DatabaseFileSettings::default()).unwrap_err();
            assert!(
                err.contains("postgres://USER@HOST:PORT/DATABASE"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn the_file_may_name_the_database() {
        let c =
            OperatorConfig::parse("[database]\nurl = \"postgres://q@h/d\"\n", &|_| None).unwrap();
        assert_eq!(c.database.url.as_deref(), Some("postgres://q@h/d"));
        assert!(OperatorConfig::parse("[database]\nuri = \"x\"\n", &|_| None).is_err());
    }
}
