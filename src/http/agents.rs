//! What an agent holds, read without side effects (for stop guards and dashboards).

use crate::domain::ids::SessionId;
use axum::extract::State;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{AgentLease, AgentLeaseQuery, ErrorBody, SessionAgents};

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

/// A session's agents by token: each agent name's figures (its gold quests
/// not counted) and, in a session with gold, the token's score on it, with
/// the count it rests on. Agent tokens of a session with gold may not read it.
#[utoipa::path(get, path = "/v1/sessions/{id}/agents", tag = "sessions", operation_id = "list_session_agents",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The session's agents by token", body = SessionAgents), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_session_agents(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Json<SessionAgents>, ApiError> {
    Ok(Json(state.service.get_session_agents(id).await?))
}
