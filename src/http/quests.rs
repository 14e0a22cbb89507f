//! The agent's loop: next, submit, heartbeat, release; and reading quests and submissions.

use crate::domain::ids::{QuestId, SessionId, SubmissionId};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{
    ErrorBody, ErrorDetail, Lease, LeaseRequest, NextPaused, NextRequest, NextResponse, Quest,
    SubmissionDetail, SubmitQuery, SubmitRequest, SubmitResponse,
};
use crate::domain::SubmissionVerdict;
use crate::domain::work::Refusal;
use crate::service::MAX_WAIT_SECONDS;
use crate::service::ServiceError;
use crate::store::StoreError;
use axum::response::IntoResponse;

/// Leases the next quest of a session (or the one this agent already holds).
/// A token holds at most its `max_leases` leases at once, over all sessions
/// and agent names; past it, `next` is refused with 409 `lease_cap`.
#[utoipa::path(post, path = "/v1/sessions/{id}/next", tag = "agents", operation_id = "lease_next_quest",
    params(("id" = Uuid, Path, description = "Session id")),
    request_body(content = Option<NextRequest>, content_type = "application/json"),
    responses((status = 200, description = "One of three answers, told apart by `status`: a quest leased to you (`assigned`), nothing open yet (`wait`), or nothing left (`finished`)", body = NextResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "`agent_paused` (a `NextPaused`): the token is paused in this session, its quests \
            here kept ending DONE; stop and tell the operator, who resumes it. `lease_cap` (an `ErrorBody`): the token \
            already holds its `max_leases` leases; release or finish a quest it holds, or ask an admin for a token \
            with a larger cap", body = NextPaused),
        (status = 422, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
pub async fn lease_next(
    State(state): State<AppState>,
    caller: Caller<Work>,
    Path(id): Path<SessionId>,
    OptionalJson(request): OptionalJson<NextRequest>,
) -> Result<axum::response::Response, ApiError> {
    let agent = caller.agent(request.agent.as_deref());
    match state.service.lease_next_quest(id, &agent).await {
        Ok(next) => Ok(Json(next).into_response()),
        Err(ServiceError::Store(StoreError::Refused(Refusal::AgentPaused(pause)))) => {
            let body = NextPaused {
                error: ErrorDetail {
                    code: "agent_paused".into(),
                    message: pause.to_string(),
                    details: None,
                },
                pause: (*pause).into(),
            };
            Ok((StatusCode::CONFLICT, Json(body)).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// Submits a result for the leased quest and waits up to `wait` seconds for the verdict.
///
/// A request with the `Idempotency-Key` of a submission this token recorded
/// is answered by that submission as it stands (no try), even after the
/// lease ended. Without a key, the same result as the quest's latest
/// submission on this lease is answered by it while it is PENDING or when it
/// ended the quest; after a FAIL it is a new try, with an `unchanged` fact.
#[utoipa::path(post, path = "/v1/quests/{id}/submit", tag = "agents", operation_id = "submit_result",
    params(("id" = Uuid, Path, description = "Quest id"), SubmitQuery,
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[ -~]+$", description = "The client's name for this logical submit: \
            1 to 255 printable ASCII characters, fresh for each new result and the same only when retrying a \
            request. A recorded key answers its submission and costs nothing; the same key with another quest or \
            result is 422 `idempotency_key_reused`. Keys are scoped to the token.")),
    request_body = SubmitRequest,
    responses((status = 200, description = "The verdict", body = SubmitResponse),
        (status = 202, description = "PENDING: poll the submission", body = SubmitResponse),
        (status = 400, description = "Malformed, or `invalid_idempotency_key`", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody),
        (status = 422, description = "Invalid, or `idempotency_key_reused`: this token sent the key with another \
            quest or result", body = ErrorBody)))]
pub async fn submit_result(
    State(state): State<AppState>,
    caller: Caller<Work>,
    Path(id): Path<QuestId>,
    Query(query): Query<SubmitQuery>,
    IdempotencyKeyHeader(key): IdempotencyKeyHeader,
    Json(body): Json<SubmitRequest>,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    let wait = query.wait.unwrap_or(30);
    if wait > MAX_WAIT_SECONDS {
        return Err(ApiError::invalid(
            "invalid_wait",
            format!("wait is at most {MAX_WAIT_SECONDS} seconds"),
        ));
    }
    let response = state
        .service
        .submit_result(
            caller.token_id,
            id,
            body.lease_id,
            body.result,
            key,
            Duration::from_secs(wait.into()),
        )
        .await?;
    let status = if response.verdict == SubmissionVerdict::Pending {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(response)))
}

/// Extends a lease by the session's lease time.
#[utoipa::path(post, path = "/v1/quests/{id}/heartbeat", tag = "agents", operation_id = "heartbeat_lease",
    params(("id" = Uuid, Path, description = "Quest id")), request_body = LeaseRequest,
    responses((status = 200, description = "The lease, renewed", body = Lease), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
pub async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller<Work>,
    Path(id): Path<QuestId>,
    Json(body): Json<LeaseRequest>,
) -> Result<Json<Lease>, ApiError> {
    Ok(Json(
        state
            .service
            .heartbeat_lease(caller.token_id, id, body.lease_id)
            .await?,
    ))
}

/// Gives a leased quest back, without a try.
#[utoipa::path(post, path = "/v1/quests/{id}/release", tag = "agents", operation_id = "release_lease",
    params(("id" = Uuid, Path, description = "Quest id")), request_body = LeaseRequest,
    responses((status = 204, description = "Released"), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
pub async fn release(
    State(state): State<AppState>,
    caller: Caller<Work>,
    Path(id): Path<QuestId>,
    Json(body): Json<LeaseRequest>,
) -> Result<StatusCode, ApiError> {
    state
        .service
        .release_lease(caller.token_id, id, body.lease_id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A quest with its full history of submissions, verdicts, facts, evidence and reviews.
#[utoipa::path(get, path = "/v1/quests/{id}", tag = "quests", operation_id = "get_quest",
    params(("id" = Uuid, Path, description = "Quest id")),
    responses((status = 200, description = "The quest, its state and its history", body = Quest), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_quest(
    State(state): State<AppState>,
    caller: Caller<Read>,
    Path(id): Path<QuestId>,
) -> Result<Json<Quest>, ApiError> {
    Ok(Json(
        state.service.get_quest_for(&caller.viewer(), id).await?,
    ))
}

/// One submission and its verdict (poll it after a 202).
#[utoipa::path(get, path = "/v1/submissions/{id}", tag = "quests", operation_id = "get_submission",
    params(("id" = Uuid, Path, description = "Submission id")),
    responses((status = 200, description = "The submission with its verdict, facts and evidence", body = SubmissionDetail), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_submission(
    State(state): State<AppState>,
    __caller: Caller<Read>,
    Path(id): Path<SubmissionId>,
) -> Result<Json<SubmissionDetail>, ApiError> {
    Ok(Json(state.service.get_submission(id).await?))
}
