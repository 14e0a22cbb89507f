//! The operator's configuration file (`--config FILE`, TOML): AI verifier
//! backends and command gates, resolved and checked at start-up.

use super::*;

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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VerdictChannel {
    /// The whole stdout or its last line (shared with whatever the program runs).
    #[default]
    Stdout,
    /// Descriptor 3 (named by `QUEST_VERDICT_FD`), the write end of a pipe
    /// only the server reads; stdout is only logged.
    Fd,
}

impl VerdictChannel {
    /// Reads `verdict = "..."`; the retired `"file"` is refused with its successor.
    fn parse(text: Option<&str>) -> Result<VerdictChannel, String> {
        match text {
            None | Some("stdout") => Ok(VerdictChannel::Stdout),
            Some("fd") => Ok(VerdictChannel::Fd),
            Some("file") => Err(
                "verdict = \"file\" is no longer offered (code the program runs could write the file too): \
                 set verdict = \"fd\" and write the verdict JSON to descriptor 3 ($QUEST_VERDICT_FD), \
                 running the agent's code with it closed (`cargo test 3>&-`)"
                    .into(),
            ),
            Some(other) => Err(format!(
                "verdict = \"{other}\" is neither \"stdout\" nor \"fd\""
            )),
        }
    }
}

/// One command gate.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandGateConfig {
    pub name: String,
    pub process: ProcessSpec,
    /// Where the verdict is read (`process.verdict_fd` follows it).
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
        #[serde(default)]
        user: Option<String>,
        #[serde(default)]
        allow_root: bool,
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
        verdict: Option<String>,
        #[serde(default)]
        cpu_seconds: Option<u64>,
        #[serde(default)]
        address_space_mb: Option<u64>,
        #[serde(default)]
        open_files: Option<u64>,
        #[serde(default)]
        file_size_mb: Option<u64>,
        #[serde(default)]
        nproc: Option<u64>,
        #[serde(default)]
        user: Option<String>,
        #[serde(default)]
        allow_root: bool,
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
                    user,
                    allow_root,
                } => {
                    let mut process =
                        process_spec(argv, workdir, &allowed, timeout_ms, env).map_err(&err)?;
                    process.user = user_of(user.as_deref(), allow_root, system).map_err(&err)?;
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
                file_size_mb,
                nproc,
                user,
                allow_root,
            } = entry;
            let verdict = VerdictChannel::parse(verdict.as_deref()).map_err(&err)?;
            let mut process =
                process_spec(argv, workdir, &allowed, timeout_ms, env).map_err(&err)?;
            process.user = user_of(user.as_deref(), allow_root, system).map_err(&err)?;
            let asked = Asked {
                cpu_seconds,
                address_space_mb,
                open_files,
                file_size_mb,
                nproc,
            };
            process.limits = limits(asked, process.user.is_some()).map_err(&err)?;
            process.verdict_fd = verdict == VerdictChannel::Fd;
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

/// The limits a gate's table asks for.
struct Asked {
    cpu_seconds: Option<u64>,
    address_space_mb: Option<u64>,
    open_files: Option<u64>,
    file_size_mb: Option<u64>,
    nproc: Option<u64>,
}

/// The limits a gate declares, checked. `nproc` needs a user of its own:
/// `RLIMIT_NPROC` counts every process and thread of the uid, the server's
/// own included when the program runs as the server's user.
fn limits(asked: Asked, own_user: bool) -> Result<Limits, String> {
    let within = |key: &str, value: Option<u64>, range: std::ops::RangeInclusive<u64>| match value {
        Some(v) if !range.contains(&v) => Err(format!(
            "{key} = {v} is not between {} and {}",
            range.start(),
            range.end()
        )),
        other => Ok(other),
    };
    if asked.nproc.is_some() && !own_user {
        return Err(
            "nproc counts every process and thread of the program's user, so it needs `user` (a user of its own); set user = \"...\" or remove nproc".into(),
        );
    }
    Ok(Limits {
        cpu_seconds: within("cpu_seconds", asked.cpu_seconds, 1..=86_400)?,
        address_space: within("address_space_mb", asked.address_space_mb, 16..=1 << 20)?
            .map(|mb| mb << 20),
        open_files: within("open_files", asked.open_files, 4..=1 << 20)?,
        file_size: within("file_size_mb", asked.file_size_mb, 1..=1 << 20)?.map(|mb| mb << 20),
        processes: within("nproc", asked.nproc, 1..=1 << 20)?,
    })
}

/// The user an operator program runs as. A server that runs as root runs
/// none as root unless the table says `allow_root = true`: the agent's code
/// that a gate runs would run as root too.
fn user_of(user: Option<&str>, allow_root: bool, system: &System) -> Result<Option<RunAs>, String> {
    match user {
        Some(user) => run_as(user, system.is_root, &system.passwd).map(Some),
        None if system.is_root && !allow_root => Err(
            "the server runs as root, and this program would too: set user = \"...\" (a user of its own, e.g. \"nobody\"), or allow_root = true to run it as root knowingly".into(),
        ),
        None => Ok(None),
    }
}

/// The user a program runs as: a name from `passwd`, or `uid` or
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
