//! Known answers on SQLite: the [`GoldStore`] part of the store, each
//! method a call of the SQL both engines share.

use async_trait::async_trait;

use super::sql::gold;
use super::writer::WriteCtx;
use super::{SqliteStore, pauses};
use crate::domain::gold::CanaryPass;
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

    async fn mark_counts(&self, session_id: SessionId) -> Result<Marks<u64>, StoreError> {
        gold::mark_counts(&self.read, session_id).await
    }

    async fn gold_verifier_answers(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<GoldVerifierAnswer>, StoreError> {
        gold::gold_verifier_answers(&self.read, session_id).await
    }

    async fn quest_marks(&self, quest_id: QuestId) -> Result<Marks<bool>, StoreError> {
        gold::quest_marks(&self.read, quest_id).await
    }

    async fn companion(&self, session_id: SessionId) -> Result<Option<SessionId>, StoreError> {
        gold::companion_of(&self.read, session_id).await
    }

    async fn gold_reviews(&self, session_id: SessionId) -> Result<Vec<GoldReviewRow>, StoreError> {
        gold::gold_reviews(&self.read, session_id).await
    }

    async fn canary_passes(&self, session_id: SessionId) -> Result<Vec<CanaryPass>, StoreError> {
        super::sql::canary::canary_passes(&self.read, session_id).await
    }
}
