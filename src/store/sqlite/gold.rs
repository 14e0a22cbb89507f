//! Known answers on SQLite: the [`GoldStore`] part of the store, each
//! method a call of the SQL both engines share.

use async_trait::async_trait;

use super::sql::gold;
use super::writer::WriteCtx;
use super::{SqliteStore, pauses};
use crate::domain::ids::{QuestId, SessionId, TokenId};
use crate::domain::work::AgentId;
use crate::store::*;

#[async_trait]
impl GoldStore for SqliteStore {
    async fn add_gold(
        &self,
        session: SessionId,
        items: Vec<NewGoldItem>,
    ) -> Result<u64, StoreError> {
        single!(self, |ctx| gold::add_gold(ctx, session, items).await)
    }

    async fn gold_items(&self, session_id: SessionId) -> Result<Vec<GoldItemRow>, StoreError> {
        gold::gold_items(&self.read, session_id).await
    }

    async fn gold_standing(
        &self,
        session: SessionId,
        agent: &AgentId,
    ) -> Result<GoldStanding, StoreError> {
        gold::gold_standing(&self.read, session, agent, self.clock.now()).await
    }

    async fn lease_gold(
        &self,
        session: SessionId,
        agent: &AgentId,
        golds: Option<u64>,
    ) -> Result<Option<(QuestRow, LeaseRow)>, StoreError> {
        let agent = agent.clone();
        single!(self, |ctx| gold::lease_gold(ctx, session, agent, golds)
            .await)
    }

    async fn gold_answers(
        &self,
        session_id: SessionId,
        token: Option<TokenId>,
    ) -> Result<Vec<GoldAnswerRow>, StoreError> {
        gold::gold_answers(&self.read, session_id, token).await
    }

    async fn pause_unqualified(&self, pause: UnqualifiedPause) -> Result<bool, StoreError> {
        single!(self, |ctx| pauses::pause_unqualified(ctx, pause).await)
    }

    async fn suspect_count(&self, session_id: SessionId) -> Result<u64, StoreError> {
        gold::suspect_count(&self.read, session_id).await
    }

    async fn gold_verifier_answers(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<GoldVerifierAnswer>, StoreError> {
        gold::gold_verifier_answers(&self.read, session_id).await
    }

    async fn is_suspect(&self, quest_id: QuestId) -> Result<bool, StoreError> {
        gold::is_suspect(&self.read, quest_id).await
    }
}
