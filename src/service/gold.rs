//! Known answers: gold items added to a session, gold quests handed out in
//! place of real assignments (the draw is [`crate::domain::gold`]'s), and
//! the scores of the tokens that answer them.

use std::collections::BTreeMap;

use super::*;
use crate::domain::gold::{self, GOLD_SECRET, GoldKind, Score};
use crate::domain::pause::PauseReason;
use crate::store::{GoldAnswerRow, NewGoldItem, SessionStatus, UnqualifiedPause};

/// One token's answers to gold.
#[derive(Debug, Default)]
pub struct Tally {
    pub answered: u64,
    pub correct: u64,
    /// The agent names that answered, sorted.
    pub agents: Vec<String>,
}

impl Tally {
    pub fn score(&self) -> Score {
        Score::of(self.answered, self.correct)
    }
}

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
        let new = check_items(&session.columns, &session.key_column, items)?;
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
                kind: i.kind,
                input: i.input,
                expected: i.expected,
                compare: i.compare,
                handed_out: i.handed_out,
                created_at: i.created_at,
            })
            .collect();
        let handed_out = items.iter().map(|i| i.handed_out).sum();
        let names = self.token_names().await?;
        let mut tokens: Vec<api::TokenGold> = (self.gold_tallies(id).await?)
            .into_iter()
            .map(|(token_id, tally)| {
                let score = tally.score();
                api::TokenGold {
                    token_id,
                    token: names.get(&token_id).cloned(),
                    agents: tally.agents,
                    answered: score.answered,
                    correct: score.correct,
                    accuracy_lower_bound: score.accuracy_lower_bound,
                }
            })
            .collect();
        tokens.sort_by_key(|t| std::cmp::Reverse(t.answered));
        Ok(api::SessionGold {
            config: session.config.gold.clone().unwrap_or_default(),
            items,
            handed_out,
            tokens,
            canary_passes: self.store.canary_passes(id).await?,
        })
    }

    /// Each AI verifier's answers about the answers to the session's gold,
    /// per question.
    pub(super) async fn verifiers_on_gold(
        &self,
        id: SessionId,
    ) -> Result<Vec<api::VerifierGold>, ServiceError> {
        let mut out: BTreeMap<(String, u32), api::VerifierGold> = BTreeMap::new();
        for a in self.store.gold_verifier_answers(id).await? {
            let wrong = !gold::compare(&a.expected, &a.compare, &a.result).is_empty();
            let v = (out.entry((a.verifier.clone(), a.question_index))).or_insert_with(|| {
                api::VerifierGold {
                    verifier: a.verifier,
                    question_index: a.question_index,
                    answered: 0,
                    caught: 0,
                    missed: 0,
                    false_alarms: 0,
                    cleared: 0,
                }
            });
            v.answered += 1;
            match (a.flagged, wrong) {
                (true, true) => v.caught += 1,
                (false, true) => v.missed += 1,
                (true, false) => v.false_alarms += 1,
                (false, false) => v.cleared += 1,
            }
        }
        Ok(out.into_values().collect())
    }

    /// Each token's answers to the session's gold, by token: its last
    /// result on each decided gold quest, compared with the expected one.
    pub(super) async fn gold_tallies(
        &self,
        id: SessionId,
    ) -> Result<BTreeMap<TokenId, Tally>, ServiceError> {
        let answers = self.store.gold_answers(id, None).await?;
        Ok(tally(answers.iter()))
    }

    /// Pauses a token when its gold answers since its last such pause fall
    /// under the session's floor: judged when a gold answer is decided at
    /// submit, and again at each `next` (a verdict a gate runner recorded
    /// later is judged there).
    pub(super) async fn hold_to_the_floor(
        &self,
        session: &SessionRow,
        config: &gold::GoldConfig,
        token: TokenId,
    ) -> Result<(), ServiceError> {
        if config.min_accuracy.is_none() {
            return Ok(());
        }
        let pauses: Vec<_> = (self.store.pauses(session.id).await?)
            .into_iter()
            .filter(|p| p.token_id == token)
            .collect();
        // Paused already (for this or another reason): nothing to judge.
        if pauses.iter().any(|p| p.resumed_at.is_none()) {
            return Ok(());
        }
        let since = (pauses.iter())
            .filter(|p| p.reason == PauseReason::Unqualified)
            .map(|p| p.created_at)
            .max();
        let answers: Vec<_> = (self.store.gold_answers(session.id, Some(token)).await?)
            .into_iter()
            .filter(|a| since.is_none_or(|s| a.decided_at > s))
            .collect();
        let tally = tally(answers.iter()).remove(&token).unwrap_or_default();
        let score = tally.score();
        if !config.unqualified(&score) {
            return Ok(());
        }
        let first_wrong = answers.iter().find(|a| !right(a)).map(|a| a.decided_at);
        let pause = UnqualifiedPause {
            session: session.id,
            token,
            agent: answers
                .last()
                .and_then(|a| a.agent.clone())
                .unwrap_or_default(),
            figures: serde_json::json!({
                "answered": score.answered,
                "correct": score.correct,
                "accuracy_lower_bound": score.accuracy_lower_bound,
                "min_accuracy": config.min_accuracy,
                "min_answers": config.min_answers,
            }),
            since: first_wrong,
            audit: config.audit_suspects,
        };
        self.store.pause_unqualified(pause).await?;
        Ok(())
    }
}

/// Checks gold items against a session's columns and key; the items to add.
pub(super) fn check_items(
    columns: &[String],
    key_column: &str,
    items: Vec<api::GoldItem>,
) -> Result<Vec<NewGoldItem>, ServiceError> {
    let mut new = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let place = format!("items[{i}]");
        if let Some(column) = item.input.keys().find(|k| !columns.contains(k)) {
            return Err(invalid(
                "invalid_gold",
                format!(
                    "{place}.input has `{column}`, which is not a column of the session ({}): \
                     give the row as the session's rows are",
                    columns.join(", ")
                ),
            ));
        }
        if let Some(column) = columns.iter().find(|c| !item.input.contains_key(*c)) {
            return Err(invalid(
                "invalid_gold",
                format!(
                    "{place}.input has no `{column}`: give every column of the session ({}), \
                     as its rows have them, so that a gold quest looks like a real one",
                    columns.join(", ")
                ),
            ));
        }
        let key = item.input.get(key_column);
        if key.is_none_or(|k| k.is_null() || k.as_str().is_some_and(|k| k.trim().is_empty())) {
            return Err(invalid(
                "invalid_gold",
                format!(
                    "{place}.input.{} is empty: the key column names each quest",
                    key_column
                ),
            ));
        }
        match item.kind {
            GoldKind::Gold if item.expected.is_empty() => {
                return Err(invalid(
                    "invalid_gold",
                    format!("{place}.expected is empty: give the fields of the right result"),
                ));
            }
            GoldKind::Gold => gold::check_compare(&item.expected, &item.compare)
                .map_err(|e| invalid("invalid_gold", format!("{place}: {e}")))?,
            GoldKind::Canary if !item.expected.is_empty() || !item.compare.is_empty() => {
                return Err(invalid(
                    "invalid_gold",
                    format!(
                        "{place} is a canary, for which no honest result can pass: it has no \
                         `expected` nor `compare` (give them to a gold item instead)"
                    ),
                ));
            }
            GoldKind::Canary => {}
        }
        let text = serde_json::to_string(&item).unwrap_or_default();
        if crate::domain::text::has_nul(&text) {
            return Err(invalid_text(&place));
        }
        // In the session's column order, as its rows are (and their prompts).
        let mut input = item.input;
        let input = (columns.iter())
            .filter_map(|c| input.remove(c).map(|v| (c.clone(), v)))
            .collect();
        new.push(NewGoldItem {
            kind: item.kind,
            input,
            expected: item.expected,
            compare: item.compare,
        });
    }
    Ok(new)
}

/// Whether a gold answer is right: its last result gives every expected
/// field, each compared by its rule.
fn right(answer: &GoldAnswerRow) -> bool {
    answer
        .answer
        .as_ref()
        .is_some_and(|result| gold::compare(&answer.expected, &answer.compare, result).is_empty())
}

/// The answers, tallied by token.
fn tally<'a>(answers: impl Iterator<Item = &'a GoldAnswerRow>) -> BTreeMap<TokenId, Tally> {
    let mut tallies: BTreeMap<TokenId, Tally> = BTreeMap::new();
    for answer in answers {
        let tally = tallies.entry(answer.token).or_default();
        tally.answered += 1;
        tally.correct += u64::from(right(answer));
        if let Some(agent) = &answer.agent
            && !tally.agents.contains(agent)
        {
            tally.agents.push(agent.clone());
        }
    }
    for tally in tallies.values_mut() {
        tally.agents.sort();
    }
    tallies
}

impl Service {
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
        // A token under the floor is paused here: the lease below refuses it.
        self.hold_to_the_floor(session, config, agent.token).await?;
        let mut standing = self.store.gold_standing(session.id, agent).await?;
        if standing.lapsed {
            // As `next` sweeps a real quest's lapsed lease before it leases,
            // so that the gold quest is open again (or DONE by its lapses).
            self.store.sweep_expired().await?;
            standing = self.store.gold_standing(session.id, agent).await?;
        }
        // A paused token hears its pause from the lease below.
        if standing.companion.is_none() || standing.holds_real || standing.paused {
            return Ok(None);
        }
        if let Some(held) = standing.held {
            return Ok(Some(held));
        }
        // A gold quest it released or let lapse comes back, as a real one would.
        if standing.reopened {
            return Ok(self.store.lease_gold(session.id, agent, None).await?);
        }
        let key = gold::session_key(&self.gold_key().await?, session.id);
        let n = standing.assignments;
        if !gold::hands_out(&key, config, agent.token, n, standing.golds) {
            return Ok(None);
        }
        Ok(self
            .store
            .lease_gold(session.id, agent, Some(standing.golds))
            .await?)
    }

    /// The gold quest the agent holds in a session with gold, as its lease.
    pub(super) async fn held_gold(
        &self,
        session: &SessionRow,
        agent: &AgentId,
    ) -> Result<Option<api::HeldLease>, ServiceError> {
        if session.config.gold.is_none() {
            return Ok(None);
        }
        let standing = self.store.gold_standing(session.id, agent).await?;
        Ok(standing.held.map(|(quest, lease)| api::HeldLease {
            id: lease.id,
            quest_id: quest.id,
            key: quest.key,
            phase: quest.phase.unwrap_or(crate::domain::Phase::Leased),
            expires_at: lease.expires_at,
            tries: quest.tries,
            max_tries: session.config.max_tries,
            last_facts: quest.last_facts,
        }))
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

    /// Whether a console stream that follows every session shows this one
    /// to `role`: never a gold companion, and for an agent never a session
    /// with gold. An unknown session is not shown.
    pub async fn console_may_follow(&self, role: Role, id: SessionId) -> bool {
        match self.session(id).await {
            Ok(s) => s.gold_of.is_none() && (role != Role::Agent || s.config.gold.is_none()),
            Err(_) => false,
        }
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

    /// Every token's name, by id (tokens are few: a scan of them is cheap).
    pub(super) async fn token_names(&self) -> Result<HashMap<TokenId, String>, ServiceError> {
        Ok((self.store.list_tokens().await?)
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect())
    }

    /// For a gold companion, the session it belongs to and how many of that
    /// session's quests remain: what a gold quest's answers speak of, as a
    /// real quest's do. `None` for any other session.
    pub(super) async fn gold_outer(
        &self,
        session: SessionId,
    ) -> Result<Option<(SessionId, u64)>, ServiceError> {
        let Some(real) = self.session(session).await?.gold_of else {
            return Ok(None);
        };
        let remaining = self.store.session_status(real).await?.counts.remaining();
        Ok(Some((real, remaining)))
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
