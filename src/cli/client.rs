//! A typed HTTP client over the API's wire types, and [`CliError`]: every way a
//! client verb can fail, each with its exit status and one line that says what to do.

use std::process::ExitCode;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::agent::Surface;
use crate::api::ErrorBody;

/// Exit statuses of the client verbs (the verdict and lease statuses are in `cli::exit`).
pub mod status {
    /// Wrong arguments or local input (a bad `--data`, an unreadable file).
    pub const USAGE: u8 = 64;
    /// The server said the request is invalid (400, 413, 415, 422).
    pub const INVALID: u8 = 65;
    /// An unknown id (404).
    pub const NOT_FOUND: u8 = 66;
    /// The server failed (5xx) or answered something unreadable.
    pub const SERVER: u8 = 70;
    /// The server cannot be reached.
    pub const UNREACHABLE: u8 = 69;
    /// A state conflict (409): the lease is gone or the quest is decided.
    pub const CONFLICT: u8 = 75;
    /// No token, a bad token (401) or the wrong role (403).
    pub const AUTH: u8 = 77;
}

/// The code of a 404 for the quest this agent remembers: the server does not
/// know it (another server, a new data dir), so the remembered lease is stale.
pub const QUEST_UNKNOWN: &str = "quest_unknown";

/// Why a client verb failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    /// An agent verb without a token of its own (it never borrows the admin's).
    #[error(
        "`quest {verb}` needs an agent token: set QUEST_TOKEN (or --token) to the token an admin created for you with `quest token create --role agent`; agent verbs never use the server's admin.token"
    )]
    NoAgentToken { verb: &'static str },
    /// An agent verb that does not know its session: none was given and this
    /// agent never held a lease (it never guesses "the most recent").
    #[error(
        "no session is set for this agent: set QUEST_SESSION (or --session) to the id of the session the operator \
         gave you; `quest agent-prompt` prints it with the rest of the set-up"
    )]
    NoSession,
    /// A lease verb while this agent holds no quest ([`CliError::message`] words it per surface).
    #[error("no quest is leased by this agent: run `quest next` first")]
    NoLease,
    #[error(
        "cannot reach the quest server at {url}: start it with `quest serve`, or point QUEST_URL / --url at it"
    )]
    Unreachable { url: String },
    #[error("{message}")]
    Refused {
        status: StatusCode,
        code: String,
        message: String,
    },
    #[error("the server answered something unreadable ({0}); is QUEST_URL a quest server?")]
    Garbled(String),
}

impl CliError {
    /// The process exit status for this failure.
    pub fn exit_status(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::NoSession | CliError::NoLease => status::USAGE,
            CliError::NoAgentToken { .. } => status::AUTH,
            CliError::Unreachable { .. } => status::UNREACHABLE,
            CliError::Garbled(_) => status::SERVER,
            CliError::Refused { code, .. } if code == "agent_paused" => super::exit::PAUSED,
            CliError::Refused { status: s, .. } => match s.as_u16() {
                401 | 403 => status::AUTH,
                404 => status::NOT_FOUND,
                409 => status::CONFLICT,
                400..=499 => status::INVALID,
                _ => status::SERVER,
            },
        }
    }

    /// The one line printed on stderr.
    pub fn line(&self) -> String {
        format!("quest: {}", self.message(Surface::Cli))
    }

    /// What went wrong and what to do next, worded for where the agent reads
    /// it: a command to run in the shell, a tool to call over MCP.
    pub fn message(&self, surface: Surface) -> String {
        let next = format!("{} {}", surface.verb().to_lowercase(), surface.next());
        match self {
            CliError::Refused {
                status,
                code,
                message,
            } => {
                let mcp = surface == Surface::Mcp;
                let advice = match (status.as_u16(), code.as_str()) {
                    (401, _) if mcp => " (the QUEST_TOKEN of this MCP server is missing or not a valid token: \
                                         ask the operator for an agent token)"
                        .to_owned(),
                    (401, _) => " (set QUEST_TOKEN or --token to a valid token; an admin creates one with \
                                 `quest token create`)"
                        .to_owned(),
                    (409, "agent_paused") => " (paused: stop and tell the operator)".to_owned(),
                    (403, "out_of_scope") => String::new(),
                    (403, _) if mcp => " (ask the operator for a token with that role)".to_owned(),
                    (403, _) => {
                        " (ask an admin for a token with that role: `quest token create --role ROLE`)"
                            .to_owned()
                    }
                    (409, "lease_lost" | "lease_expired" | "quest_locked") | (404, QUEST_UNKNOWN) => {
                        format!(" ({next} for a quest)")
                    }
                    _ => String::new(),
                };
                format!("{message}{advice} [{code}]")
            }
            CliError::NoLease => format!("no quest is leased by this agent: {next} first"),
            CliError::Unreachable { url } if surface == Surface::Mcp => format!(
                "the quest server at {url} does not answer; call the tool again in a while (1 s, doubling up \
                 to 60 s), and tell the operator if it stays down"
            ),
            CliError::NoSession if surface == Surface::Mcp => {
                "no session is set for this MCP server: set QUEST_SESSION in its environment (or run \
                 `quest mcp --session ID`) to the id of the session the operator gave you"
                    .to_owned()
            }
            other => other.to_string(),
        }
    }

    /// Prints the line and returns the exit code.
    pub fn report(&self) -> ExitCode {
        eprintln!("{}", super::text::clean(&self.line()));
        ExitCode::from(self.exit_status())
    }
}

/// How long a request may take unless its route says otherwise.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A client for one server and token.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client for `base` (e.g. `http://127.0.0.1:8080`) with a bearer token.
    pub fn new(base: &str, token: Option<String>) -> Client {
        let http = reqwest::Client::builder()
            .user_agent(concat!("quest-cli/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .timeout(REQUEST_TIMEOUT)
            .build()
            .expect("a reqwest client with default settings builds");
        Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
        }
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends a request and decodes the JSON answer; returns the status too.
    pub async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(StatusCode, T), CliError> {
        let response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
        if !status.is_success() {
            return Err(refusal(status, &bytes));
        }
        let body = serde_json::from_slice(if bytes.is_empty() { b"null" } else { &bytes })
            .map_err(|e| CliError::Garbled(e.to_string()))?;
        Ok((status, body))
    }

    fn transport(&self, error: reqwest::Error) -> CliError {
        if error.is_connect() || error.is_timeout() || error.is_request() {
            CliError::Unreachable {
                url: self.base.clone(),
            }
        } else {
            CliError::Garbled(error.to_string())
        }
    }

    /// GET a JSON resource.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        Ok(self.send(self.request(Method::GET, path)).await?.1)
    }

    /// POST a JSON body; returns the status and the JSON answer.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<(StatusCode, T), CliError> {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    /// POST a JSON body to a route that may take up to `timeout` to answer.
    pub async fn post_with_timeout<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<(StatusCode, T), CliError> {
        self.send(self.request(Method::POST, path).json(body).timeout(timeout))
            .await
    }

    /// [`Self::post_with_timeout`] with an `Idempotency-Key` header.
    pub async fn post_keyed<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        key: &str,
        timeout: Duration,
    ) -> Result<(StatusCode, T), CliError> {
        self.send(
            self.request(Method::POST, path)
                .header("Idempotency-Key", key)
                .json(body)
                .timeout(timeout),
        )
        .await
    }

    /// DELETE a resource.
    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        Ok(self.send(self.request(Method::DELETE, path)).await?.1)
    }

    /// DELETE a resource that answers with no body (204).
    pub async fn delete_empty(&self, path: &str) -> Result<(), CliError> {
        let (_, ()) = self.send(self.request(Method::DELETE, path)).await?;
        Ok(())
    }

    /// POST a multipart form (a scan).
    pub async fn post_form<T: DeserializeOwned>(
        &self,
        path: &str,
        form: reqwest::multipart::Form,
    ) -> Result<T, CliError> {
        Ok(self
            .send(self.request(Method::POST, path).multipart(form))
            .await?
            .1)
    }

    /// GET raw bytes as a response, for streaming downloads.
    pub async fn download(&self, path: &str) -> Result<reqwest::Response, CliError> {
        self.download_with(Method::GET, path).await
    }

    /// Raw bytes as a response of a request with `method` and no body.
    pub async fn download_with(
        &self,
        method: Method,
        path: &str,
    ) -> Result<reqwest::Response, CliError> {
        let response = self
            .request(method, path)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        if !response.status().is_success() {
            let status = response.status();
            let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
            return Err(refusal(status, &bytes));
        }
        Ok(response)
    }
}

fn refusal(status: StatusCode, bytes: &[u8]) -> CliError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => CliError::Refused {
            status,
            code: body.error.code,
            message: body.error.message,
        },
        Err(_) => {
            let text = String::from_utf8_lossy(bytes)
                .chars()
                .take(200)
                .collect::<String>();
            CliError::Refused {
                status,
                code: "http_error".into(),
                message: format!("HTTP {status}: {text}"),
            }
        }
    }
}

/// Pretty JSON for `--json` output, with terminal controls inside strings escaped.
pub fn print_json(value: &impl Serialize) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| Value::Null.to_string());
    println!("{}", super::text::json_safe(&text));
}
