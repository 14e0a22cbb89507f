//! What the hot path keeps in memory instead of asking the store: the input
//! of leased quests (the inline gate needs it at submit) and token lookups.

use crate::domain::ids::{QuestId, SessionId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::domain::State;
use crate::store::{QuestRow, TokenRow};

/// What a gate needs of a quest besides the result: it never changes.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestInput {
    pub session_id: SessionId,
    pub key: String,
    pub input: Value,
}

impl QuestInput {
    /// The parts of `quest` a check reads.
    pub fn of(quest: &QuestRow) -> QuestInput {
        QuestInput {
            session_id: quest.session_id,
            key: quest.key.clone(),
            input: quest.input.clone(),
        }
    }
}

/// The inputs of quests leased recently, at most `capacity`. A miss costs one
/// read, so when full the cache simply starts again.
pub struct Inputs {
    capacity: usize,
    quests: Mutex<HashMap<QuestId, Arc<QuestInput>>>,
}

impl Inputs {
    /// An empty cache of at most `capacity` quests.
    pub fn new(capacity: usize) -> Inputs {
        Inputs {
            capacity: capacity.max(1),
            quests: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<QuestId, Arc<QuestInput>>> {
        self.quests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the input of a quest just leased.
    pub fn remember(&self, quest: &QuestRow) {
        let mut quests = self.lock();
        if quests.len() >= self.capacity {
            quests.clear();
        }
        quests.insert(quest.id, Arc::new(QuestInput::of(quest)));
    }

    /// The input of a quest, if kept.
    pub fn get(&self, quest: QuestId) -> Option<Arc<QuestInput>> {
        self.lock().get(&quest).cloned()
    }

    /// Drops a quest that no agent will submit for again.
    pub fn forget(&self, quest: QuestId, state: State) {
        if state.is_terminal() {
            self.lock().remove(&quest);
        }
    }
}

/// Live tokens by the digest of their secret, each trusted for `ttl` after it
/// was read: a revocation on this server clears the cache at once, one on
/// another server sharing the database takes effect within `ttl`.
pub struct Tokens {
    ttl: Duration,
    capacity: usize,
    found: Mutex<HashMap<String, (TokenRow, Instant)>>,
}

impl Tokens {
    /// An empty cache.
    pub fn new(ttl: Duration, capacity: usize) -> Tokens {
        Tokens {
            ttl,
            capacity: capacity.max(1),
            found: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (TokenRow, Instant)>> {
        self.found.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The token with this digest, if read less than `ttl` ago.
    pub fn get(&self, hash: &str) -> Option<TokenRow> {
        let found = self.lock();
        let (token, read) = found.get(hash)?;
        (read.elapsed() < self.ttl).then(|| token.clone())
    }

    /// Keeps a live token just read.
    pub fn put(&self, token: TokenRow) {
        let mut found = self.lock();
        if found.len() >= self.capacity {
            found.retain(|_, (_, read)| read.elapsed() < self.ttl);
        }
        if found.len() < self.capacity {
            found.insert(token.hash.clone(), (token, Instant::now()));
        }
    }

    /// Forgets every token (after a revocation).
    pub fn clear(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Role;

    fn token(hash: &str) -> TokenRow {
        TokenRow {
            sessions: None,
            adjudicate: false,
            id: crate::domain::ids::TokenId::new(),
            name: "bot".into(),
            role: Role::Agent,
            hash: hash.into(),
            max_leases: None,
            created_at: chrono::Utc::now(),
            revoked_at: None,
        }
    }

    #[test]
    fn a_token_is_trusted_for_its_time_and_forgotten_on_clear() {
        let cache = Tokens::new(Duration::from_secs(60), 2);
        cache.put(token("a"));
        assert_eq!(cache.get("a").map(|t| t.hash), Some("a".into()));
        cache.clear();
        assert!(
            cache.get("a").is_none(),
            "a revocation must reach the next request"
        );
        let stale = Tokens::new(Duration::ZERO, 2);
        stale.put(token("b"));
        assert!(
            stale.get("b").is_none(),
            "an entry past its time is read again"
        );
    }

    #[test]
    fn the_input_cache_stays_bounded_and_drops_decided_quests() {
        let cache = Inputs::new(2);
        let quest = |id| QuestRow::example(id, State::Todo);
        let ids = [QuestId::new(), QuestId::new(), QuestId::new()];
        for id in ids {
            cache.remember(&quest(id));
        }
        assert!(cache.lock().len() <= 2);
        assert!(cache.get(ids[2]).is_some());
        cache.forget(ids[2], State::Todo);
        assert!(
            cache.get(ids[2]).is_some(),
            "a quest that may be submitted again stays"
        );
        cache.forget(ids[2], State::Pass);
        assert!(cache.get(ids[2]).is_none());
    }
}
