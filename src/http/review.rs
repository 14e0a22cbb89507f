//! The human review queue: list, claim, decide; and how much the reviewers agree.

use crate::domain::ids::{QuestId, SessionId};
use axum::extract::State;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{
    ErrorBody, Quest, ReviewClaim, ReviewQuery, ReviewRequest, Reviewers, Verifiers, VerifiersQuery,
};

/// REVIEW quests, oldest first, with their facts, evidence, L2 answers and history;
/// filter by session and by the check that raised the doubt (`check=l2:alpha`).
/// `check=audit_pass` lists instead the PASS quests waiting for a label-only
/// audit (post-hoc ones, and those of suspects with `gold.audit_suspects`),
/// labelled with `POST /v1/audits/{quest_id}`.
#[utoipa::path(get, path = "/v1/review", tag = "review", operation_id = "list_review_queue", params(ReviewQuery),
    responses((status = 200, description = "The quests waiting for a person, oldest first", body = Vec<Quest>), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list_review_queue(
    State(state): State<AppState>,
    caller: Caller<Review>,
    Query(query): Query<ReviewQuery>,
) -> Result<Json<Vec<Quest>>, ApiError> {
    Ok(Json(
        state
            .service
            .list_review_queue(
                &caller.viewer(),
                query.session,
                query.check.as_deref(),
                query.limit.unwrap_or(100),
            )
            .await?,
    ))
}

/// Claims a REVIEW quest so that two reviewers do not collide.
#[utoipa::path(post, path = "/v1/review/{quest_id}/claim", tag = "review", operation_id = "claim_review",
    params(("quest_id" = Uuid, Path, description = "Quest id")),
    responses((status = 200, description = "The claim: the quest is yours to decide until it expires", body = ReviewClaim), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn claim_review(
    State(state): State<AppState>,
    caller: Caller<Review>,
    Path(quest_id): Path<QuestId>,
) -> Result<Json<ReviewClaim>, ApiError> {
    Ok(Json(
        state
            .service
            .claim_review(&caller.reviewer(), quest_id)
            .await?,
    ))
}

/// Gives a review claim back (a skip), so another reviewer can take the quest.
#[utoipa::path(delete, path = "/v1/review/{quest_id}/claim", tag = "review", operation_id = "release_review",
    params(("quest_id" = Uuid, Path, description = "Quest id")),
    responses((status = 204, description = "Released"), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn release_review(
    State(state): State<AppState>,
    caller: Caller<Review>,
    Path(quest_id): Path<QuestId>,
) -> Result<axum::http::StatusCode, ApiError> {
    state
        .service
        .release_review(&caller.reviewer(), quest_id)
        .await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// Approves (→ PASS) or rejects (→ DONE) a REVIEW quest, with a note (required to reject).
#[utoipa::path(post, path = "/v1/review/{quest_id}", tag = "review", operation_id = "decide_review",
    params(("quest_id" = Uuid, Path, description = "Quest id")), request_body = ReviewRequest,
    responses((status = 200, description = "The decision is recorded and the quest's new state", body = Quest), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
pub async fn decide_review(
    State(state): State<AppState>,
    caller: Caller<Review>,
    Path(quest_id): Path<QuestId>,
    Json(body): Json<ReviewRequest>,
) -> Result<Json<Quest>, ApiError> {
    Ok(Json(
        state
            .service
            .decide_review(
                &caller.viewer(),
                &caller.reviewer(),
                quest_id,
                body.decision,
                &body.note,
            )
            .await?,
    ))
}

/// How much a session's reviewers agree: each reviewer's decisions, pace
/// and how often adjudication overruled them; for each pair, the quests both
/// looked at, their raw agreement and Cohen's kappa. Decided quests only.
#[utoipa::path(get, path = "/v1/sessions/{id}/reviewers", tag = "review", operation_id = "get_session_reviewers",
    params(("id" = Uuid, Path, description = "Session id")),
    responses((status = 200, description = "The session's reviewers and their agreement", body = Reviewers), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_session_reviewers(
    State(state): State<AppState>,
    _caller: Caller<Read>,
    Path(id): Path<SessionId>,
) -> Result<Json<Reviewers>, ApiError> {
    Ok(Json(state.service.get_session_reviewers(id).await?))
}

/// How far each AI verifier agrees with the reviewers (Cohen's kappa over its
/// labels, the confusion counts, the quests where they disagreed), its
/// standing in a session (`voting` or `advisory`) and its switches: of one
/// session with `?session=`, else of the whole server. An agent token gets
/// no disagreements: they show other quests' keys and results.
#[utoipa::path(get, path = "/v1/verifiers", tag = "review", operation_id = "list_verifiers", params(VerifiersQuery),
    responses((status = 200, description = "The AI verifiers and their figures", body = Verifiers), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list_verifiers(
    State(state): State<AppState>,
    caller: Caller<Read>,
    Query(query): Query<VerifiersQuery>,
) -> Result<Json<Verifiers>, ApiError> {
    let mut listing = state.service.list_verifiers(query.session).await?;
    // Other quests' keys and results are a viewer's to read, not an agent's
    // (in a session with gold they would tell its gold quests apart).
    if caller.viewer().role == crate::domain::Role::Agent {
        listing.disagreements.clear();
    }
    Ok(Json(listing))
}
