//! API tokens: creating them (the secret is shown once) and their secrets.

use super::*;
use crate::domain::work;
use crate::store::NewToken;

impl Service {
    /// Creates a token and returns its secret, shown this once. `max_leases`
    /// caps its concurrent leases (left out: the default of its role);
    /// `adjudicate` lets a reviewer token decide between reviewers who disagree.
    pub async fn create_token(
        &self,
        request: api::CreateTokenRequest,
    ) -> Result<api::CreatedToken, ServiceError> {
        let api::CreateTokenRequest {
            name,
            role,
            max_leases,
            sessions,
            adjudicate,
        } = request;
        let name = name.trim();
        if name.is_empty() || name.len() > 200 || name.contains('/') {
            return Err(invalid(
                "invalid_name",
                "give the token a name of 1 to 200 characters without `/`",
            ));
        }
        if crate::domain::text::has_nul(name) {
            return Err(super::invalid_text("the token name"));
        }
        let max_leases = work::lease_cap_for(role, max_leases)
            .map_err(|message| invalid("invalid_max_leases", message))?;
        if adjudicate && role != Role::Reviewer {
            return Err(invalid(
                "invalid_adjudicate",
                "`adjudicate` is for reviewer tokens: admin tokens adjudicate already, agents and viewers decide nothing",
            ));
        }
        let sessions = crate::domain::pause::scope_for(role, sessions)
            .map_err(|message| invalid("invalid_sessions", message))?;
        for &id in sessions.iter().flatten() {
            match self.store.get_session(id).await {
                Err(StoreError::NotFound(_)) => {
                    return Err(invalid(
                        "invalid_sessions",
                        format!("there is no session {id}; `quest status` lists the sessions"),
                    ));
                }
                other => {
                    other?;
                }
            }
        }
        let secret = new_secret();
        let row = self
            .store
            .create_token(NewToken {
                max_leases,
                sessions,
                adjudicate,
                ..NewToken::new(name, role, &token_hash(&secret))
            })
            .await?;
        Ok(api::CreatedToken {
            token: row.into(),
            secret,
        })
    }
}

/// How often an open event stream asks whether its token still lives.
pub const TOKEN_RECHECK: std::time::Duration = std::time::Duration::from_millis(250);

impl Service {
    /// Resolves once the token with this digest is no longer live, looked at
    /// every [`TOKEN_RECHECK`]: at once after a revocation on this server
    /// (which clears the token cache), within the cache's second after one on
    /// another server sharing the database. A store that cannot answer keeps
    /// the token alive: a stream is not cut for a hiccup.
    pub async fn token_revoked(&self, hash: &str) {
        let mut tick = tokio::time::interval(TOKEN_RECHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if matches!(self.find_token(hash).await, Ok(None)) {
                return;
            }
        }
    }
}

/// A fresh bearer secret: 32 random bytes, hex, with a recognisable prefix.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("qst_{}", hex::encode(bytes))
}
