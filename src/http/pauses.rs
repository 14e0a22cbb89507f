//! Pauses of a session's tokens: listing them, and resuming one.

use axum::extract::State;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{ErrorBody, Pause};
use crate::domain::ids::{SessionId, TokenId};

/// Lists the pauses of a session's tokens, newest first (resumed ones included).
#[utoipa::path(get, path = "/v1/sessions/{id}/pauses", tag = "sessions", operation_id = "list_pauses",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The session's pauses, live and resumed", body = Vec<Pause>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_pauses(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Json<Vec<Pause>>, ApiError> {
    Ok(Json(state.service.list_pauses(id).await?))
}

/// Resumes a token paused in a session: its `next` leases again there, and
/// its run of DONEs counts anew.
#[utoipa::path(post, path = "/v1/sessions/{id}/tokens/{token_id}/resume", tag = "sessions", operation_id = "resume_token",
    params(("id" = Uuid, Path, description = "Session id"), ("token_id" = Uuid, Path, description = "The paused token's id")),
    responses((status = 200, description = "The pause, resumed", body = Pause), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`not_paused`: the token is not paused in this session", body = ErrorBody)))]
pub async fn resume_token(
    State(state): State<AppState>,
    caller: Caller<Administer>,
    Path((id, token_id)): Path<(SessionId, TokenId)>,
) -> Result<Json<Pause>, ApiError> {
    Ok(Json(
        state
            .service
            .resume_token(id, token_id, &caller.name)
            .await?,
    ))
}
