//! Operations: liveness, readiness, Prometheus metrics.

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use super::error::ApiError;
use super::extract::Json;
use crate::api::{ErrorBody, Health};

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops", operation_id = "get_health", security(()), responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "ops", operation_id = "get_readiness", security(()),
    responses((status = 200, body = Health), (status = 503, body = ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state.service.ready().await.map_err(|e| {
        tracing::warn!(error = %e, "readiness check failed");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the database does not answer",
        )
    })?;
    Ok(Json(Health {
        status: "ready".into(),
    }))
}

/// Prometheus metrics in the text exposition format.
#[utoipa::path(get, path = "/metrics", tag = "ops", operation_id = "get_metrics", security(()),
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain; charset=utf-8")))]
pub async fn metrics(State(state): State<AppState>) -> String {
    state.metrics.render()
}
