//! Known answers: gold items added to a session, gold quests handed out in
//! place of real assignments (the draw is [`crate::domain::gold`]'s), and
//! the scores of the tokens that answer them.

use std::collections::BTreeMap;

use super::*;
use crate::domain::gold::{self, GOLD_SECRET, Score};
use crate::store::{NewGoldItem, SessionStatus};

/// The most gold items one request adds.
pub const MAX_ADDED: usize = 1000;

impl Service {
    /// Adds known-answer items to a session made with a `gold` section.
    pub async fn add_gold_items(
        &self,
        id: SessionId,
        items: Vec<api::GoldItem>,
    ) -> Result<api::GoldAdded, ServiceError> {
        let session = self.public_session(id).await?;
        if session.config.gold.is_none() {
            return Err(invalid(
                "no_gold",
                "this session was made without a `gold` section in its config, so its quest ids \
                 tell when each was made and gold quests would stand out: scan it again with \
                 `\"gold\": {}` (or its settings) to add gold items",
            ));
        }
        if !(1..=MAX_ADDED).contains(&items.len()) {
            return Err(invalid(
                "invalid_count",
                format!("add from 1 to {MAX_ADDED} gold items at once"),
            ));
        }
        let mut new = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let place = format!("items[{i}]");
            if let Some(column) = item.input.keys().find(|k| !session.columns.contains(k)) {
                return Err(invalid(
                    "invalid_gold",
                    format!(
                        "{place}.input has `{column}`, which is not a column of the session ({}): \
                         give the row as the session's rows are",
                        session.columns.join(", ")
                    ),
                ));
            }
            if item.expected.is_empty() {
                return Err(invalid(
                    "invalid_gold",
                    format!("{place}.expected is empty: give the fields of the right result"),
                ));
            }
            gold::check_compare(&item.expected, &item.compare)
                .map_err(|e| invalid("invalid_gold", format!("{place}: {e}")))?;
            let text = serde_json::to_string(&item).unwrap_or_default();
            if crate::domain::text::has_nul(&text) {
                return Err(invalid_text(&place));
            }
            new.push(NewGoldItem {
                input: item.input,
                expected: item.expected,
                compare: item.compare,
            });
        }
        let existing = self.store.gold_items(id).await?.len();
        if existing + new.len() > gold::MAX_ITEMS {
            return Err(invalid(
                "too_many_gold_items",
                format!(
                    "a session holds at most {} gold items; it has {existing}",
                    gold::MAX_ITEMS
                ),
            ));
        }
        let added = new.len();
        let items = self.store.add_gold(id, new).await?;
        Ok(api::GoldAdded { added, items })
    }

    /// A session's gold: its settings, items and every token's score.
    pub async fn get_session_gold(&self, id: SessionId) -> Result<api::SessionGold, ServiceError> {
        let session = self.public_session(id).await?;
        let items: Vec<api::GoldItemView> = (self.store.gold_items(id).await?)
            .into_iter()
            .map(|i| api::GoldItemView {
                id: i.id,
                input: i.input,
                expected: i.expected,
                compare: i.compare,
                handed_out: i.handed_out,
                created_at: i.created_at,
            })
            .collect();
        let handed_out = items.iter().map(|i| i.handed_out).sum();
        let names: HashMap<TokenId, String> = (self.store.list_tokens().await?)
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect();
        let mut tokens: BTreeMap<TokenId, (u64, u64, Vec<String>)> = BTreeMap::new();
        for answer in self.store.gold_answers(id).await? {
            let entry = tokens.entry(answer.token).or_default();
            entry.0 += 1;
            let wrong = match &answer.answer {
                Some(result) => gold::compare(&answer.expected, &answer.compare, result),
                None => vec![String::new()],
            };
            if wrong.is_empty() {
                entry.1 += 1;
            }
            if let Some(agent) = answer.agent
                && !entry.2.contains(&agent)
            {
                entry.2.push(agent);
            }
        }
        let mut tokens: Vec<api::TokenGold> = tokens
            .into_iter()
            .map(|(token_id, (answered, correct, mut agents))| {
                agents.sort();
                let score = Score::of(answered, correct);
                api::TokenGold {
                    token_id,
                    token: names.get(&token_id).cloned(),
                    agents,
                    answered: score.answered,
                    correct: score.correct,
                    accuracy_lower_bound: score.accuracy_lower_bound,
                }
            })
            .collect();
        tokens.sort_by(|a, b| b.answered.cmp(&a.answered));
        Ok(api::SessionGold {
            config: session.config.gold.clone().unwrap_or_default(),
            items,
            handed_out,
            tokens,
        })
    }

    /// The gold quest the agent is to work on instead of a real one: the
    /// one it holds, or a new one when the draw says so. `None`: lease a
    /// real quest as usual.
    pub(super) async fn gold_lease(
        &self,
        session: &SessionRow,
        agent: &AgentId,
    ) -> Result<Option<(QuestRow, LeaseRow)>, ServiceError> {
        let Some(config) = &session.config.gold else {
            return Ok(None);
        };
        let standing = self.store.gold_standing(session.id, agent).await?;
        if standing.companion.is_none() || standing.holds_real {
            return Ok(None);
        }
        if let Some(held) = standing.held {
            return Ok(Some(held));
        }
        let key = gold::session_key(&self.gold_key().await?, session.id);
        let n = standing.assignments;
        if !gold::hands_out(&key, config, agent.token, n, standing.golds) {
            return Ok(None);
        }
        Ok(self
            .store
            .lease_gold(session.id, agent, standing.golds)
            .await?)
    }

    /// The server's secret key of the gold draws: made on first use, kept
    /// in the database, never served.
    async fn gold_key(&self) -> Result<String, StoreError> {
        self.gold_key
            .get_or_try_init(|| async {
                let candidate = crate::domain::quality::new_server_secret();
                self.store.server_secret(GOLD_SECRET, &candidate).await
            })
            .await
            .cloned()
    }

    /// Whether a session has known answers (its agents' tokens may do
    /// only their own work there).
    pub async fn has_gold(&self, id: SessionId) -> Result<bool, ServiceError> {
        Ok(self.session(id).await?.config.gold.is_some())
    }

    /// A session's status as an agent token of a session with gold sees
    /// it: the real quests that remain and whether one is open (`open` is 1
    /// or 0), nothing else (`leased` is the rest of `remaining`, `total` is
    /// `remaining`, every other figure 0), so that no figure moves
    /// differently when the agent is handed a gold quest.
    pub async fn agent_status(&self, id: SessionId) -> Result<api::Status, ServiceError> {
        let full = self.store.session_status(id).await?;
        let remaining = full.counts.remaining();
        let reduced = SessionStatus {
            counts: crate::store::Counts {
                total: remaining,
                open: u64::from(full.counts.open > 0),
                leased: remaining.saturating_sub(u64::from(full.counts.open > 0)),
                ..Default::default()
            },
            agents_active: 0,
            rate_per_minute: 0.0,
            reviews_per_hour: 0.0,
            verifiers: Vec::new(),
            agreement: Vec::new(),
        };
        Ok(api::Status::new(id, &reduced))
    }

    /// The token whose agent sent a submission.
    pub async fn submission_token(&self, id: SubmissionId) -> Result<TokenId, ServiceError> {
        Ok(self.store.get_submission(id).await?.agent.token)
    }

    /// A session as the API serves it: a gold companion is not one.
    pub(super) async fn public_session(
        &self,
        id: SessionId,
    ) -> Result<Arc<SessionRow>, ServiceError> {
        let session = self.session(id).await?;
        if session.gold_of.is_some() {
            return Err(StoreError::NotFound("session").into());
        }
        Ok(session)
    }

    /// The session a quest of `session` belongs to, as the API names it: a
    /// gold quest's is the session it was handed out in, not its companion.
    pub(super) async fn outer_session(
        &self,
        session: SessionId,
    ) -> Result<SessionId, ServiceError> {
        Ok(self.session(session).await?.gold_of.unwrap_or(session))
    }
}
