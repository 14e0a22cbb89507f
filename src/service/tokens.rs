//! API tokens: creating them (the secret is shown once) and their secrets.

use super::*;
use crate::domain::work;

impl Service {
    /// Creates a token and returns its secret, shown this once. `max_leases`
    /// caps its concurrent leases (left out: the default of its role).
    pub async fn create_token(
        &self,
        name: &str,
        role: Role,
        max_leases: Option<u32>,
    ) -> Result<api::CreatedToken, ServiceError> {
        let name = name.trim();
        if name.is_empty() || name.len() > 200 || name.contains('/') {
            return Err(invalid(
                "invalid_name",
                "give the token a name of 1 to 200 characters without `/`",
            ));
        }
        let max_leases = work::lease_cap_for(role, max_leases)
            .map_err(|message| invalid("invalid_max_leases", message))?;
        let secret = new_secret();
        let row = self
            .store
            .create_token(name, role, &token_hash(&secret), max_leases)
            .await?;
        Ok(api::CreatedToken {
            token: row.into(),
            secret,
        })
    }
}

/// A fresh bearer secret: 32 random bytes, hex, with a recognisable prefix.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("qst_{}", hex::encode(bytes))
}
