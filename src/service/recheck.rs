//! Re-checks: an admin starts a run over a session's PASS quests; the
//! [`Rechecker`](crate::workers::Rechecker) does the checking.

use crate::api::{self, RecheckRun};
use crate::domain::ids::SessionId;
use crate::service::{Service, ServiceError};
use crate::store::StoreError;

impl Service {
    /// Starts a re-check of the session's PASS quests, by `by` (a token name).
    pub async fn start_recheck(
        &self,
        session_id: SessionId,
        by: &str,
    ) -> Result<RecheckRun, ServiceError> {
        let run = self
            .store
            .start_recheck(session_id, by, None)
            .await?
            .ok_or(StoreError::Unavailable)?;
        if let Some(rechecker) = &self.rechecker {
            rechecker.wake();
        }
        Ok(run.into())
    }

    /// The session's status with its re-check figures and its verifiers' calibration.
    pub(super) async fn full_status(
        &self,
        id: SessionId,
        status: &crate::store::SessionStatus,
    ) -> Result<api::Status, ServiceError> {
        let summary = self.store.recheck_summary(id).await?;
        let mut full = api::Status::new(id, status).with_recheck(summary);
        full.calibration = self.session_calibration(id).await?;
        let marks = self.store.mark_counts(id).await?;
        full.suspect = marks.suspect;
        full.audit_rejected = marks.audit_rejected;
        Ok(full)
    }
}
