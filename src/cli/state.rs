//! The client's memory of the lease each agent holds, so that `quest submit`
//! needs no ids. One small JSON file per (server, agent), written atomically.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// What an agent holds on one server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Held {
    pub session_id: Option<Uuid>,
    pub quest_id: Option<Uuid>,
    pub lease_id: Option<Uuid>,
    pub key: Option<String>,
    /// The last submission, for `quest wait`.
    pub submission_id: Option<Uuid>,
}

/// The state file of one agent on one server.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The file for `agent` on `server` inside `dir`.
    pub fn new(dir: &Path, server: &str, agent: &str) -> StateFile {
        let digest = hex::encode(Sha256::digest(format!("{server}\n{agent}").as_bytes()));
        StateFile {
            path: dir.join(format!("agent-{}.json", &digest[..16])),
        }
    }

    /// Where the state lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The remembered state (empty when there is none or it cannot be read).
    pub fn load(&self) -> Held {
        std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Replaces the remembered state (write to a temporary file, then rename).
    pub fn save(&self, held: &Held) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(held).unwrap_or_default())?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_per_server_and_agent() {
        let dir = tempfile::tempdir().unwrap();
        let a = StateFile::new(dir.path(), "http://x", "bot-1");
        let b = StateFile::new(dir.path(), "http://x", "bot-2");
        assert_ne!(a.path(), b.path());
        assert_eq!(a.load(), Held::default());
        let held = Held {
            quest_id: Some(Uuid::nil()),
            key: Some("Acme".into()),
            ..Held::default()
        };
        a.save(&held).unwrap();
        assert_eq!(a.load(), held);
        assert_eq!(b.load(), Held::default());
    }
}
