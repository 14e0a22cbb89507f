//! Containment: the sessions a limited token may touch, and pauses (listed,
//! resumed). The pause itself is decided by the store where a DONE is
//! recorded; see [`crate::store::Store::pauses`].

use super::*;
use crate::domain::pause::in_scope;

impl Service {
    /// A session's pauses, newest first.
    pub async fn list_pauses(
        &self,
        session_id: SessionId,
    ) -> Result<Vec<api::Pause>, ServiceError> {
        self.session(session_id).await?;
        Ok(self
            .store
            .pauses(session_id)
            .await?
            .into_iter()
            .map(api::Pause::from)
            .collect())
    }

    /// Resumes a token paused in a session, by the token named `by`.
    pub async fn resume_token(
        &self,
        session_id: SessionId,
        token_id: TokenId,
        by: &str,
    ) -> Result<api::Pause, ServiceError> {
        self.session(session_id).await?;
        Ok(self
            .store
            .resume_pause(session_id, token_id, by)
            .await?
            .into())
    }

    /// The session of a quest.
    pub async fn quest_session(&self, id: QuestId) -> Result<SessionId, ServiceError> {
        self.outer_session(self.store.get_quest(id).await?.session_id)
            .await
    }

    /// The session of a submission.
    pub async fn submission_session(&self, id: SubmissionId) -> Result<SessionId, ServiceError> {
        self.outer_session(self.store.get_submission(id).await?.session_id)
            .await
    }

    /// Every session a token limited to `scope` may see (`None`: every
    /// session), newest first, with its status; an agent token does not
    /// see the sessions with gold.
    pub async fn list_sessions(
        &self,
        scope: Option<&[SessionId]>,
        role: Role,
    ) -> Result<Vec<Session>, ServiceError> {
        let mut out = Vec::new();
        for row in self.store.list_sessions().await? {
            if !in_scope(scope, row.id) {
                continue;
            }
            // An agent of a session with gold may not read its config.
            if role == Role::Agent && row.config.gold.is_some() {
                continue;
            }
            let status = self.store.session_status(row.id).await?;
            let full = self.full_status(row.id, &status).await?;
            out.push(Session {
                status: full,
                ..Session::new(row, &status)
            });
        }
        Ok(out)
    }
}
