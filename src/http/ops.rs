//! Operations: liveness, readiness, Prometheus metrics.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;

use super::AppState;
use super::error::ApiError;
use super::extract::{Administer, Caller, Json};
use crate::api::{ErrorBody, Health};

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops", operation_id = "get_health", security(()), responses((status = 200, description = "The process is up", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "ops", operation_id = "get_readiness", security(()),
    responses((status = 200, description = "The server is ready: its database answers", body = Health), (status = 503, body = ErrorBody)))]
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
    state.service.refresh_calibration_metrics().await;
    state.metrics.render()
}

/// A consistent copy of the whole database (SQLite), made while the server
/// keeps serving; `quest backup FILE` saves it. A server on PostgreSQL refuses
/// (409 `backup_unsupported`): that database is backed up with its own tools.
#[utoipa::path(post, path = "/v1/backup", tag = "ops", operation_id = "create_backup",
    responses((status = 200, description = "The database file", content_type = "application/vnd.sqlite3"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "The data lives in PostgreSQL: use pg_dump", body = ErrorBody),
        (status = 503, body = ErrorBody)))]
pub async fn create_backup(
    State(state): State<AppState>,
    _caller: Caller<Administer>,
) -> Result<Response, ApiError> {
    let backup = state.service.create_backup().await?;
    let file = tokio::fs::File::open(&backup.path).await.map_err(|e| {
        tracing::error!(error = %e, "cannot read the backup just made");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "backup_failed",
            "the backup could not be read; retry",
        )
    })?;
    // The backup is removed once the last byte is sent (or the client leaves).
    let chunks = futures_util::stream::unfold((file, backup), |(mut file, backup)| async move {
        let mut buf = vec![0; 256 * 1024];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(Bytes::from(buf)), (file, backup)))
            }
            Err(e) => Some((Err(e), (file, backup))),
        }
    });
    // Fused: the compression layer polls a body once more after its end, and
    // `unfold` panics when polled past `None`.
    let chunks = futures_util::StreamExt::fuse(chunks);
    Ok((
        [(header::CONTENT_TYPE, "application/vnd.sqlite3")],
        Body::from_stream(chunks),
    )
        .into_response())
}
