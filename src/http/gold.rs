//! Known answers: a session's gold items (`/v1/sessions/{id}/gold`) and
//! what the answers to them say of each token.

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{AddGold, ErrorBody, GoldAdded, SessionGold};
use crate::domain::ids::SessionId;

/// Adds known-answer items to a session made with a `gold` section. Each
/// is a template: `next` hands a token a new gold quest made from an item
/// it has not had, at the session's `gold.rate` and within its first
/// `gold.warmup` assignments, in place of a real quest; the gate decides it
/// as usual, and its answer is compared with `expected` apart.
#[utoipa::path(post, path = "/v1/sessions/{id}/gold", tag = "sessions", operation_id = "add_gold_items",
    params(("id" = Uuid, Path, description = "Session id")), request_body = AddGold,
    responses((status = 201, description = "The items were added", body = GoldAdded), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn add_gold_items(
    State(state): State<AppState>,
    _caller: Caller<Administer>,
    Path(id): Path<SessionId>,
    Json(body): Json<AddGold>,
) -> Result<(StatusCode, Json<GoldAdded>), ApiError> {
    let added = state.service.add_gold_items(id, body.items).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

/// A session's gold: its settings, its items with how often each was handed
/// out, and per token its answers, the correct ones and the one-sided 95%
/// Wilson lower bound on its accuracy. Admin only: a reviewer or viewer who
/// read the items would know the right answers of the gold quests sent to
/// review (each token's score is also in `GET /v1/sessions/{id}/agents`).
#[utoipa::path(get, path = "/v1/sessions/{id}/gold", tag = "sessions", operation_id = "get_session_gold",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The session's gold and every token's score", body = SessionGold), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_session_gold(
    State(state): State<AppState>,
    _caller: Caller<Administer>,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionGold>, ApiError> {
    Ok(Json(state.service.get_session_gold(id).await?))
}
