//! API tokens: create (the secret is shown once), list, revoke.

use crate::domain::ids::TokenId;
use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use super::error::ApiError;
use super::extract::*;
use crate::api::{CreateTokenRequest, CreatedToken, ErrorBody, Token};

/// Creates a token with a role.
#[utoipa::path(post, path = "/v1/tokens", tag = "tokens", operation_id = "create_token", request_body = CreateTokenRequest,
    responses((status = 201, description = "The token; its secret is shown this once", body = CreatedToken), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, description = "`invalid_max_leases`: `max_leases` is outside 1 to 1000000, or given for a \
            reviewer or viewer token (which lease nothing); `invalid_body`: the body is not a token request", body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
pub async fn create_token(
    State(state): State<AppState>,
    _caller: Caller<Administer>,
    Json(body): Json<CreateTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.service.create_token(body).await?),
    ))
}

/// Lists tokens (never their secrets).
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens", operation_id = "list_tokens",
    responses((status = 200, description = "The tokens, without their secrets", body = Vec<Token>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn list_tokens(
    State(state): State<AppState>,
    _caller: Caller<Administer>,
) -> Result<Json<Vec<Token>>, ApiError> {
    Ok(Json(state.service.list_tokens().await?))
}

/// Revokes a token; requests with it are refused from now on.
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "tokens", operation_id = "revoke_token",
    params(("id" = Uuid, Path, description = "Token id")),
    responses((status = 200, description = "The token, revoked", body = Token), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn revoke_token(
    State(state): State<AppState>,
    _caller: Caller<Administer>,
    Path(id): Path<TokenId>,
) -> Result<Json<Token>, ApiError> {
    Ok(Json(state.service.revoke_token(id).await?))
}
