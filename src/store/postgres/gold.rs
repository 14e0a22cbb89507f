//! Known answers on PostgreSQL: the [`GoldStore`] part of the store, each
//! method a call of the SQL both engines share.

use async_trait::async_trait;

use super::sql::gold;
use super::{PgStore, pauses};
use crate::domain::gold::CanaryPass;
use crate::domain::ids::{QuestId, SessionId, TokenId};
use crate::domain::work::AgentId;
use crate::store::*;

#[async_trait]
impl GoldStore for PgStore {
    async fn add_gold(
        &self,
        session: SessionId,
        items: Vec<NewGoldItem>,
    ) -> Result<u64, StoreError> {
        self.write((session, items), |tx, (s, i)| {
            Box::pin(gold::add_gold(tx, s, i))
        })
        .await
    }

    async fn gold_items(&self, session_id: SessionId) -> Result<Vec<GoldItemRow>, StoreError> {
        gold::gold_items(&self.db.pool, session_id).await
    }

    async fn gold_standing(
        &self,
        session: SessionId,
        agent: &AgentId,
    ) -> Result<GoldStanding, StoreError> {
        gold::gold_standing(&self.db.pool, session, agent, self.read_now().await?).await
    }

    async fn lease_gold(
        &self,
        session: SessionId,
        agent: &AgentId,
        golds: Option<u64>,
    ) -> Result<Option<(QuestRow, LeaseRow)>, StoreError> {
        let args = (session, agent.clone(), golds);
        self.write(args, |tx, (s, a, g)| {
            Box::pin(gold::lease_gold(tx, s, a, g))
        })
        .await
    }

    async fn gold_answers(
        &self,
        session_id: SessionId,
        token: Option<TokenId>,
    ) -> Result<Vec<GoldAnswerRow>, StoreError> {
        gold::gold_answers(&self.db.pool, session_id, token).await
    }

    async fn pause_unqualified(&self, pause: UnqualifiedPause) -> Result<bool, StoreError> {
        self.write(pause, |tx, p| Box::pin(pauses::pause_unqualified(tx, p)))
            .await
    }

    async fn mark_counts(&self, session_id: SessionId) -> Result<Marks<u64>, StoreError> {
        gold::mark_counts(&self.db.pool, session_id).await
    }

    async fn gold_verifier_answers(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<GoldVerifierAnswer>, StoreError> {
        gold::gold_verifier_answers(&self.db.pool, session_id).await
    }

    async fn quest_marks(&self, quest_id: QuestId) -> Result<Marks<bool>, StoreError> {
        gold::quest_marks(&self.db.pool, quest_id).await
    }

    async fn companion(&self, session_id: SessionId) -> Result<Option<SessionId>, StoreError> {
        gold::companion_of(&self.db.pool, session_id).await
    }

    async fn gold_reviews(&self, session_id: SessionId) -> Result<Vec<GoldReviewRow>, StoreError> {
        gold::gold_reviews(&self.db.pool, session_id).await
    }

    async fn canary_passes(&self, session_id: SessionId) -> Result<Vec<CanaryPass>, StoreError> {
        super::sql::canary::canary_passes(&self.db.pool, session_id).await
    }
}
