//! A verb's context: the client, the agent's state file, and which session it
//! works on.
//!
//! Two rules pick the session. Operator verbs take `QUEST_SESSION`, else the
//! most recent session, and say so on stderr. Agent verbs (`next`, `submit`,
//! `heartbeat`, `release`, `wait`, `mcp`, `guard`) never guess: they take
//! `QUEST_SESSION`, else the session of the lease this agent last held (its
//! state file), else they refuse. A harness that follows "the most recent"
//! would send an agent that finished its own session into one an operator
//! scanned afterwards for someone else.

use std::str::FromStr;

use super::client::{CliError, Client};
use super::state::StateFile;
use super::text;
use crate::api::Session;
use crate::domain::ids::SessionId;

/// `--session` / `QUEST_SESSION`: a session id, where an empty value (`QUEST_SESSION=`) means unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionArg(pub Option<SessionId>);

impl FromStr for SessionArg {
    type Err = String;

    fn from_str(s: &str) -> Result<SessionArg, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(SessionArg(None));
        }
        s.parse::<SessionId>()
            .map(|id| SessionArg(Some(id)))
            .map_err(|_| {
                format!("`{s}` is not a session id (a UUID, as `quest status` lists them)")
            })
    }
}

/// A verb's context: the client, the agent's state file and the arguments.
pub struct Ctx {
    pub args: super::ClientArgs,
    pub client: Client,
    pub state: StateFile,
}

impl Ctx {
    /// Resolves the token and the state file from the arguments. `agent_verb`
    /// names an agent verb, which needs a token of its own: the server's admin
    /// token file is there for the operator, and an agent harness started in
    /// the server's directory must not act as admin (and approve its own work).
    pub fn new(args: super::ClientArgs, agent_verb: Option<&'static str>) -> Result<Ctx, CliError> {
        let url = url::Url::parse(&args.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "QUEST_URL / --url `{}` is not a server URL; write it like http://127.0.0.1:8080",
                    args.url
                ))
            })?;
        let given = args.token.clone().filter(|t| !t.trim().is_empty());
        let token = match (given, agent_verb) {
            (Some(token), _) => Some(token),
            (None, Some(verb)) => return Err(CliError::NoAgentToken { verb }),
            // The local admin token only ever goes to a server on this machine.
            (None, None) => is_loopback(&url).then(local_admin_token).flatten(),
        };
        let client = Client::new(&args.url, token.clone());
        let dir = args
            .state_dir
            .clone()
            .unwrap_or_else(crate::config::client_state_dir);
        // One state file per server, token and agent name: agents never share a lease.
        let identity = format!(
            "{}\n{}",
            token
                .as_deref()
                .map(crate::domain::token_hash)
                .unwrap_or_default(),
            args.agent.as_deref().unwrap_or("")
        );
        let state = StateFile::new(&dir, client.base(), &identity);
        Ok(Ctx {
            args,
            client,
            state,
        })
    }

    /// The session `--session` / `QUEST_SESSION` names, if any.
    pub fn given_session(&self) -> Option<SessionId> {
        self.args.session.and_then(|s| s.0)
    }

    /// An operator verb's session: the one given, else the most recent (said on stderr).
    pub async fn session(&self) -> Result<SessionId, CliError> {
        if let Some(id) = self.given_session() {
            return Ok(id);
        }
        let sessions: Vec<Session> = self.client.get("/v1/sessions").await?;
        let newest = sessions.first().ok_or_else(|| {
            CliError::Usage(
                "the server has no session yet: create one with `quest scan FILE`".into(),
            )
        })?;
        text::say_err!(
            "quest: using session {} ({}), the most recent; set QUEST_SESSION to choose",
            newest.name,
            newest.id
        );
        Ok(newest.id)
    }

    /// An agent verb's session: the one given, else the one of the lease this
    /// agent last held; never a guess.
    pub fn agent_session(&self) -> Result<SessionId, CliError> {
        self.given_session()
            .or(self.state.load().session_id)
            .ok_or(CliError::NoSession)
    }
}

/// Whether the URL names this machine.
pub(super) fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The admin token a local server wrote, for a newcomer on the server's machine.
fn local_admin_token() -> Option<String> {
    std::fs::read_to_string(crate::config::client_data_dir().join("admin.token"))
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machine_gets_the_local_admin_token() {
        for (url, local) in [
            ("http://127.0.0.1:8080", true),
            ("http://localhost:8080", true),
            ("http://[::1]:8080", true),
            ("https://quest.example.org", false),
            ("http://10.0.0.5:8080", false),
        ] {
            assert_eq!(is_loopback(&url::Url::parse(url).unwrap()), local, "{url}");
        }
    }

    #[test]
    fn an_empty_session_is_unset_and_a_bad_one_says_what_a_session_id_is() {
        assert_eq!("".parse::<SessionArg>(), Ok(SessionArg(None)));
        assert_eq!("  ".parse::<SessionArg>(), Ok(SessionArg(None)));
        let id = SessionId::new();
        assert_eq!(
            id.to_string().parse::<SessionArg>(),
            Ok(SessionArg(Some(id)))
        );
        let bad = "firms".parse::<SessionArg>().unwrap_err();
        assert!(bad.contains("not a session id"), "{bad}");
    }
}
