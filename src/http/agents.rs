//! What an agent holds, read without side effects (for stop guards and dashboards).

use crate::domain::ids::SessionId;
use axum::extract::State;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{AgentLease, AgentLeaseQuery, ErrorBody};

/// The live lease one agent of the caller's token holds in a session; renews nothing.
#[utoipa::path(get, path = "/v1/sessions/{id}/lease", tag = "agents", operation_id = "get_agent_lease",
    params(("id" = Uuid, Path, description = "Session id"), AgentLeaseQuery),
    responses((status = 200, description = "The lease this agent holds in the session, if any", body = AgentLease), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn get_agent_lease(
    State(state): State<AppState>,
    caller: Caller<Work>,
    Path(id): Path<SessionId>,
    Query(query): Query<AgentLeaseQuery>,
) -> Result<Json<AgentLease>, ApiError> {
    let agent = caller.agent(query.agent.as_deref());
    Ok(Json(state.service.get_agent_lease(id, &agent).await?))
}
