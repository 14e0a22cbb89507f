//! How wrong a session's delivered rows may be (`GET /v1/sessions/{id}/quality`),
//! and the post-hoc audits whose labels narrow it.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{ErrorBody, Quest, ReviewRequest};
use crate::domain::ids::{QuestId, SessionId};
use crate::domain::quality::Quality;

/// The error bound of a session's PASS rows: a one-sided 95% Clopper-Pearson
/// upper bound on the share of wrong rows, from the decisions on its random
/// audits (`audit.rate`) and post-hoc audits, with the counts it rests on.
/// Not measured (a null bound, never 0) until an audit is decided; rows a
/// person decided outside the audit are counted apart, not covered.
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

/// How many post-hoc audits to draw.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrawAudits {
    /// 1 to 10000.
    pub count: u32,
}

/// The post-hoc audits drawn.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditsDrawn {
    /// How many were drawn: fewer than asked when fewer PASS rows are unaudited.
    pub drawn: usize,
    pub quests: Vec<QuestId>,
}

/// Draws `count` PASS quests uniformly from those the machine decided and no
/// audit drew, for post-hoc audits: a person labels each (`POST
/// /v1/audits/{quest_id}`), the quest stays PASS, and the labels join the
/// error bound's pool, so that the sample stays uniform over the PASS rows.
/// The draw is uniform over the PASS rows that exist when it is made: draw
/// once the session is finished.
#[utoipa::path(post, path = "/v1/sessions/{id}/audits", tag = "review", operation_id = "draw_audits",
    params(("id" = Uuid, Path, description = "Session id")), request_body = DrawAudits,
    responses((status = 201, description = "The quests drawn for an audit", body = AuditsDrawn), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
pub async fn draw_audits(
    State(state): State<AppState>,
    _caller: Caller<Administer>,
    Path(id): Path<SessionId>,
    Json(body): Json<DrawAudits>,
) -> Result<(StatusCode, Json<AuditsDrawn>), ApiError> {
    let quests = state.service.draw_audits(id, body.count).await?;
    let drawn = AuditsDrawn {
        drawn: quests.len(),
        quests,
    };
    Ok((StatusCode::CREATED, Json(drawn)))
}

/// The session's post-hoc audits waiting for a label, oldest first (at most 500).
#[utoipa::path(get, path = "/v1/sessions/{id}/audits", tag = "review", operation_id = "list_pending_audits",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The PASS quests waiting for an audit's label", body = Vec<Quest>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_pending_audits(
    State(state): State<AppState>,
    _caller: Caller<Review>,
    Path(id): Path<SessionId>,
) -> Result<Json<Vec<Quest>>, ApiError> {
    Ok(Json(state.service.pending_audits(id).await?))
}

/// Labels a label-only audit: `approve` (the row is right) or `reject` with
/// a note (it is wrong: the quest is marked `audit_rejected`). The quest
/// stays PASS; a post-hoc audit's label joins the bound, a suspect's audit
/// does not. A label is final (409 `audit_labelled`).
#[utoipa::path(post, path = "/v1/audits/{quest_id}", tag = "review", operation_id = "decide_audit",
    params(("quest_id" = Uuid, Path, description = "Quest id")), request_body = ReviewRequest,
    responses((status = 204, description = "The label is recorded"), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
pub async fn decide_audit(
    State(state): State<AppState>,
    caller: Caller<Review>,
    Path(quest_id): Path<QuestId>,
    Json(body): Json<ReviewRequest>,
) -> Result<StatusCode, ApiError> {
    let reviewer = caller.reviewer();
    (state.service)
        .decide_audit(&reviewer, quest_id, body.decision, &body.note)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
