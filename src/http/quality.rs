//! How wrong a session's delivered rows may be: `GET /v1/sessions/{id}/quality`.

use axum::Json;
use axum::extract::State;

use super::AppState;
use super::error::ApiError;
use super::extract::{Caller, Path, Read};
use crate::api::ErrorBody;
use crate::domain::ids::SessionId;
use crate::domain::quality::Quality;

/// The error bound of a session's PASS rows: a one-sided 95% Clopper-Pearson
/// upper bound on the share of wrong rows, from the decisions on its random
/// audits (`audit.rate`), with the counts it rests on. Not measured (a null
/// bound, never 0) until an audit is decided; rows a person decided outside
/// the audit are counted apart, not covered.
#[utoipa::path(get, path = "/v1/sessions/{id}/quality", tag = "sessions", operation_id = "get_session_quality",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The session's error bound and what it rests on", body = Quality), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_session_quality(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Json<Quality>, ApiError> {
    Ok(Json(state.service.get_session_quality(id).await?))
}
