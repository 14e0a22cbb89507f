//! Extractors: axum's own, wrapped so that their refusals use the error body,
//! and [`Principal`], the authenticated caller.

use axum::extract::{FromRequest, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::AppState;
use super::error::ApiError;
use crate::domain::{Permission, Role};

/// `axum::Json` with refusals in the error body.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Path` with refusals in the error body.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

/// `axum::extract::Query` with refusals in the error body.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

/// The caller, authenticated by its bearer token.
#[derive(Debug, Clone)]
pub struct Principal {
    pub token_id: Uuid,
    pub name: String,
    pub role: Role,
}

/// Hex SHA-256 of a bearer secret: how tokens are stored and looked up.
pub fn token_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

impl Principal {
    /// Refuses with 403 unless the caller's role grants `permission`.
    pub fn require(&self, permission: Permission) -> Result<&Self, ApiError> {
        if self.role.allows(permission) {
            return Ok(self);
        }
        let needed = match permission {
            Permission::Read => "any role",
            Permission::Work => "the `agent` or `admin` role",
            Permission::Review => "the `reviewer` or `admin` role",
            Permission::Administer => "the `admin` role",
        };
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "this needs {needed}; your token `{}` has the `{}` role",
                self.name, self.role
            ),
        ))
    }

    /// The identity of an agent: this token plus the name the agent chose.
    pub fn agent(&self, name: Option<&str>) -> String {
        format!(
            "{}/{}",
            self.token_id,
            name.filter(|n| !n.is_empty()).unwrap_or(&self.name)
        )
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let unauthorized =
            |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message);
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| unauthorized("send `Authorization: Bearer <token>`; the admin token is in <data-dir>/admin.token"))?;
        let secret = header
            .to_str()
            .ok()
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| unauthorized("the Authorization header must be `Bearer <token>`"))?;
        let hash = token_hash(secret);
        let token = state.service.store().find_token(&hash).await?;
        // The lookup is by digest; the final comparison runs in constant time anyway.
        match token {
            Some(t) if bool::from(t.hash.as_bytes().ct_eq(hash.as_bytes())) => Ok(Principal {
                token_id: t.id,
                name: t.name,
                role: t.role,
            }),
            _ => Err(unauthorized(
                "the token is unknown or revoked; ask an admin for a valid one",
            )),
        }
    }
}

/// A JSON body that may be left out entirely: an empty body is `T::default()`.
#[derive(Debug)]
pub struct OptionalJson<T>(pub T);

impl<T, S> FromRequest<S> for OptionalJson<T>
where
    T: serde::de::DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let has_body = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v != "0")
            && req.headers().contains_key(header::CONTENT_TYPE);
        if !has_body {
            return Ok(OptionalJson(T::default()));
        }
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(OptionalJson(value))
    }
}
