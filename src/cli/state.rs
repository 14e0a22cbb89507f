//! The client's memory of the lease each agent holds, so that `quest submit`
//! needs no ids. One small JSON file per (server, agent), written atomically,
//! and beside it the stop guard's count of refusals per harness session (its
//! own file, so that a guard running while the agent works never overwrites a
//! lease the agent just took).

use crate::domain::ids::{LeaseId, QuestId, SessionId, SubmissionId};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What an agent holds on one server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Held {
    pub session_id: Option<SessionId>,
    pub quest_id: Option<QuestId>,
    pub lease_id: Option<LeaseId>,
    pub key: Option<String>,
    /// The last submission, for `quest wait`.
    pub submission_id: Option<SubmissionId>,
    /// The submit in flight: written before the request is sent and kept
    /// until its verdict is shown, so that sending the same result again
    /// (a killed `quest submit` rerun, `quest mcp` following a PENDING
    /// verdict) reuses its `Idempotency-Key` and costs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Sent>,
}

/// One logical submit: its idempotency key and what it was for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub key: String,
    /// The SHA-256 of the canonical result.
    pub result_hash: String,
    pub quest_id: QuestId,
    pub lease_id: LeaseId,
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
        write_atomically(
            &self.path,
            &serde_json::to_vec_pretty(held).unwrap_or_default(),
        )
    }

    fn guard_path(&self) -> PathBuf {
        self.path.with_extension("guard.json")
    }

    /// The stop guard's refusals, per harness session (empty when unreadable).
    pub fn load_guard(&self) -> GuardMarks {
        std::fs::read(self.guard_path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Replaces the stop guard's refusals.
    pub fn save_guard(&self, marks: &GuardMarks) -> std::io::Result<()> {
        write_atomically(
            &self.guard_path(),
            &serde_json::to_vec_pretty(marks).unwrap_or_default(),
        )
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// How many stops the guard refused in a row without progress, in one harness session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GuardMark {
    /// The harness's `session_id` (empty when the hook gave none).
    pub session: String,
    pub blocks: u32,
    /// `remaining` at the refusals; a change is progress.
    pub remaining: Option<u64>,
    /// The agent's last submission at the refusals; a new one is progress.
    pub submission: Option<SubmissionId>,
}

/// The guard's marks, newest last, a few harness sessions at most.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GuardMarks {
    pub marks: Vec<GuardMark>,
}

impl GuardMarks {
    /// How many harness sessions are remembered.
    pub const KEPT: usize = 32;

    /// The mark of one harness session.
    pub fn get(&self, session: &str) -> Option<&GuardMark> {
        self.marks.iter().find(|m| m.session == session)
    }

    /// Replaces (or, with `None`, forgets) the mark of `session`, keeping the newest few.
    pub fn set(&mut self, session: &str, mark: Option<GuardMark>) {
        self.marks.retain(|m| m.session != session);
        if let Some(mark) = mark {
            self.marks.push(mark);
        }
        let excess = self.marks.len().saturating_sub(Self::KEPT);
        self.marks.drain(..excess);
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
            quest_id: Some(QuestId::new()),
            key: Some("Acme".into()),
            ..Held::default()
        };
        a.save(&held).unwrap();
        assert_eq!(a.load(), held);
        assert_eq!(b.load(), Held::default());
    }

    #[test]
    fn guard_marks_live_beside_the_lease_and_keep_the_newest_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path(), "http://x", "bot-1");
        let held = Held {
            lease_id: Some(LeaseId::new()),
            ..Held::default()
        };
        file.save(&held).unwrap();
        let mut marks = file.load_guard();
        for i in 0..(GuardMarks::KEPT + 3) {
            let session = format!("s{i}");
            let mark = GuardMark {
                session: session.clone(),
                blocks: 1,
                ..GuardMark::default()
            };
            marks.set(&session, Some(mark));
        }
        file.save_guard(&marks).unwrap();
        let back = file.load_guard();
        assert_eq!(back.marks.len(), GuardMarks::KEPT);
        assert!(back.get("s0").is_none() && back.get("s34").is_some());
        assert_eq!(
            file.load(),
            held,
            "the lease is untouched by the guard's file"
        );
    }
}
