//! What a session's agents hold and did: one agent's live lease (read for
//! stop guards, renewing nothing) and every token's agents with their
//! figures and gold score.

use std::collections::BTreeMap;

use super::*;

impl Service {
    /// The live lease an agent holds in a session, read without renewing or sweeping anything.
    pub async fn get_agent_lease(
        &self,
        session_id: SessionId,
        agent: &AgentId,
    ) -> Result<api::AgentLease, ServiceError> {
        check_agent(agent)?;
        let session = self.public_session(session_id).await?;
        let lease = match self.store.agent_lease(session_id, agent).await? {
            Some(l) => Some(api::HeldLease {
                id: l.lease_id,
                quest_id: l.quest_id,
                key: l.key,
                phase: l.phase,
                expires_at: l.expires_at,
                tries: l.tries,
                max_tries: session.config.max_tries,
                last_facts: l.last_facts,
            }),
            None => self.held_gold(&session, agent).await?,
        };
        Ok(api::AgentLease {
            session_id,
            agent: agent.name.clone(),
            lease,
        })
    }

    /// A session's agents by token, each token with its score on gold.
    pub async fn get_session_agents(
        &self,
        id: SessionId,
    ) -> Result<api::SessionAgents, ServiceError> {
        let session = self.public_session(id).await?;
        let mut tallies = match session.config.gold {
            Some(_) => self.gold_tallies(id).await?,
            None => BTreeMap::new(),
        };
        let mut tokens: BTreeMap<TokenId, api::TokenAgents> = BTreeMap::new();
        let names = self.token_names().await?;
        let new = |token_id: TokenId| api::TokenAgents {
            token_id,
            token: names.get(&token_id).cloned(),
            agents: Vec::new(),
            gold: None,
        };
        for stats in self.store.agent_stats(id).await? {
            let Some((token, name)) = stats.agent.split_once('/') else {
                continue;
            };
            let Ok(token_id) = token.parse::<TokenId>() else {
                continue;
            };
            let t = tokens.entry(token_id).or_insert_with(|| new(token_id));
            t.agents.push(api::AgentLine {
                name: name.to_owned(),
                leased: stats.leased,
                submissions: stats.submissions,
                pass: stats.pass,
                pass_first: stats.pass_first,
                fail: stats.fail,
                review: stats.review,
                done: stats.done,
                lapses: stats.lapses,
                last_seen: stats.last_seen,
            });
        }
        if session.config.gold.is_some() {
            let ids: Vec<TokenId> = tallies.keys().copied().collect();
            for token_id in ids {
                tokens.entry(token_id).or_insert_with(|| new(token_id));
            }
            for (token_id, t) in tokens.iter_mut() {
                t.gold = Some(tallies.remove(token_id).unwrap_or_default().score().into());
            }
        }
        Ok(api::SessionAgents {
            session_id: id,
            tokens: tokens.into_values().collect(),
        })
    }
}
