//! The gates the [`Checker`](super::Checker) keeps built: those of the
//! sessions used most recently, a bounded number of them. Not synchronised:
//! the checker holds it under its lock, never across an await.

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::ids::SessionId;
use crate::gates::Gate;

/// How many sessions' gates the checker keeps built.
pub(crate) const KEPT_GATES: usize = 64;

/// The gates of the most recently used sessions, at most `capacity`; the
/// least recently used one goes first. Sessions come and go for as long as
/// the server runs, so an unbounded map would only grow.
pub(crate) struct RecentGates {
    capacity: usize,
    tick: u64,
    gates: HashMap<SessionId, (u64, Arc<dyn Gate>)>,
}

impl RecentGates {
    pub(crate) fn new(capacity: usize) -> RecentGates {
        RecentGates {
            capacity: capacity.max(1),
            tick: 0,
            gates: HashMap::new(),
        }
    }

    pub(crate) fn get(&mut self, session_id: SessionId) -> Option<Arc<dyn Gate>> {
        self.tick += 1;
        let (used, gate) = self.gates.get_mut(&session_id)?;
        *used = self.tick;
        Some(gate.clone())
    }

    pub(crate) fn insert(&mut self, session_id: SessionId, gate: Arc<dyn Gate>) {
        if self.gates.len() >= self.capacity && !self.gates.contains_key(&session_id) {
            let oldest = self
                .gates
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                self.gates.remove(&oldest);
            }
        }
        self.tick += 1;
        self.gates.insert(session_id, (self.tick, gate));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gates::schema::SchemaGate;
    use serde_json::json;

    fn gate() -> Arc<dyn Gate> {
        let params = json!({"schema": {"type": "object"}});
        Arc::new(SchemaGate::from_params(params.as_object().unwrap()).unwrap())
    }

    #[test]
    fn only_the_most_recently_used_gates_are_kept() {
        let mut recent = RecentGates::new(2);
        let [a, b, c] = [SessionId::new(), SessionId::new(), SessionId::new()];
        recent.insert(a, gate());
        recent.insert(b, gate());
        assert!(
            recent.get(a).is_some(),
            "a is used again, so b is now the oldest"
        );
        recent.insert(c, gate());
        assert_eq!(recent.gates.len(), 2);
        assert!(recent.get(b).is_none());
        assert!(recent.get(a).is_some() && recent.get(c).is_some());
        recent.insert(c, gate());
        assert_eq!(recent.gates.len(), 2, "replacing a kept gate drops nothing");
        assert!(recent.get(a).is_some());
    }
}
