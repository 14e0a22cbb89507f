//! [`ApiError`]: the one error type of the HTTP layer and its one body,
//! `{"error": {"code", "message"}}`. Server faults are logged here, once, and
//! never echoed to the client.

use axum::Json;
use axum::extract::multipart::MultipartError;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::api::{ErrorBody, ErrorDetail};
use crate::domain::session::ConfigError;
use crate::domain::table::TableError;
use crate::domain::work::Refusal;
use crate::gates::GateConfigError;
use crate::store::StoreError;

/// A refused or failed request.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds after which a retry may succeed, sent as `Retry-After`.
    pub retry_after: Option<u32>,
    /// Particulars for a program, sent as `error.details` (boxed: most errors have none).
    pub details: Option<Box<serde_json::Value>>,
}

impl ApiError {
    /// An error with the given status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
            details: None,
        }
    }

    /// 400: the request cannot be read.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// The same error with `suffix` added to its message.
    pub fn with_message_suffix(mut self, suffix: &str) -> Self {
        self.message.push_str(suffix);
        self
    }

    /// 422: the request is well-formed but says something invalid.
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// 404 for an unknown id.
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such {what}: check the id"),
        )
    }

    /// 500, logged with its cause; the client only hears that it failed.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed; try again, and report it if it persists",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
                details: self.details.map(|d| *d),
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ApiError::not_found(what),
            StoreError::Refused(refusal) => {
                // A reused key is no state conflict: the request itself is invalid.
                let status = match refusal {
                    Refusal::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
                    _ => StatusCode::CONFLICT,
                };
                ApiError::new(status, refusal.code(), refusal.to_string())
            }
            StoreError::Unauthorized(message) => {
                ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
            }
            StoreError::Unavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the database is unavailable (the server may be shutting down); retry shortly",
            ),
            other => ApiError::internal(other),
        }
    }
}

impl From<TableError> for ApiError {
    fn from(e: TableError) -> Self {
        let code = match e {
            TableError::Limit(_) => "table_limit",
            _ => "invalid_table",
        };
        ApiError::invalid(code, e.to_string())
    }
}

impl From<ConfigError> for ApiError {
    fn from(e: ConfigError) -> Self {
        ApiError::invalid("invalid_config", e.to_string())
    }
}

impl From<GateConfigError> for ApiError {
    fn from(e: GateConfigError) -> Self {
        ApiError::invalid("invalid_config", e.to_string())
    }
}

/// What to do about a body over the limit.
const BODY_HINT: &str = "; send a smaller body (2 MiB at most, 64 MiB for a scan)";

/// The code for a status axum's own extractors chose.
fn rejection_code(status: StatusCode) -> &'static str {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
        _ => "malformed_body",
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let status = r.status();
        let hint = match status {
            StatusCode::PAYLOAD_TOO_LARGE => BODY_HINT,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "; send `Content-Type: application/json`",
            _ => "",
        };
        ApiError::new(
            status,
            rejection_code(status),
            format!("{}{hint}", r.body_text()),
        )
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        let status = r.status();
        let hint = if status == StatusCode::PAYLOAD_TOO_LARGE {
            BODY_HINT
        } else {
            ""
        };
        ApiError::new(
            status,
            rejection_code(status),
            format!("{}{hint}", r.body_text()),
        )
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::bad_request("invalid_path", format!("{}: ids are UUIDs", r.body_text()))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        // A query string always parses; what fails is a value of the wrong type.
        ApiError::invalid("invalid_query", r.body_text())
    }
}

impl From<MultipartError> for ApiError {
    fn from(e: MultipartError) -> Self {
        let status = e.status();
        let hint = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "; a scan may be 64 MiB at most"
        } else {
            ""
        };
        ApiError::new(
            status,
            rejection_code(status),
            format!("{}{hint}", e.body_text()),
        )
    }
}

impl From<crate::service::ServiceError> for ApiError {
    fn from(e: crate::service::ServiceError) -> Self {
        use crate::service::ServiceError;
        match e {
            ServiceError::Store(e) => e.into(),
            ServiceError::Table(e) => e.into(),
            ServiceError::Config(e) => e.into(),
            ServiceError::Gate(e) => e.into(),
            ServiceError::Invalid {
                code,
                message,
                details,
            } => ApiError {
                details: details.map(Box::new),
                ..ApiError::invalid(code, message)
            },
            ServiceError::Fault(cause) => ApiError::internal(cause),
            ServiceError::TooLarge { code, message } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, code, message)
            }
            ServiceError::Busy {
                code,
                message,
                retry_after_seconds,
            } => ApiError {
                retry_after: Some(retry_after_seconds),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::State;
    use crate::domain::work::Refusal;

    /// Every refusal with the code clients match on: a refusal travels as
    /// its variant, and this is where it becomes the wire's 409 and code.
    fn every_refusal() -> Vec<(Refusal, &'static str)> {
        let until = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
        vec![
            (Refusal::QuestLocked(State::Pass), "quest_locked"),
            (Refusal::QuestVerifying, "quest_verifying"),
            (Refusal::LeaseLost, "lease_lost"),
            (Refusal::LeaseExpired, "lease_expired"),
            (Refusal::QuestChecking, "quest_checking"),
            (Refusal::SubmissionInProgress, "submission_in_progress"),
            (Refusal::NotInReview(State::Done), "not_in_review"),
            (
                Refusal::ReviewClaimed {
                    by: "alice".into(),
                    until,
                    same_name: false,
                },
                "review_claimed",
            ),
            (Refusal::AlreadyLooked { required: 2 }, "already_reviewed"),
            (
                Refusal::AdjudicationNeeded { gave_look: true },
                "adjudication_needed",
            ),
            (Refusal::ReviewChanged, "review_changed"),
            (Refusal::AuditLabelled, "audit_labelled"),
            (Refusal::NotVerifying, "not_verifying"),
            (Refusal::LeaseCap { cap: 2 }, "lease_cap"),
            (Refusal::Illegal("no".into()), "illegal_transition"),
            (Refusal::Ratchet("refused".into()), "illegal_transition"),
            (Refusal::TokenRevoked, "token_revoked"),
            (Refusal::NameTaken("ci".into()), "name_taken"),
            (Refusal::BootstrapToken, "bootstrap_token"),
            (Refusal::BackupUnsupported, "backup_unsupported"),
            (Refusal::RecheckRunning, "recheck_running"),
            (Refusal::NothingToRecheck, "nothing_to_recheck"),
            (Refusal::RecheckNotDue, "recheck_not_due"),
        ]
    }

    #[test]
    fn every_refusal_answers_409_with_its_own_code_and_its_words() {
        for (refusal, code) in every_refusal() {
            let words = refusal.to_string();
            let e = ApiError::from(StoreError::Refused(refusal));
            assert_eq!((e.status, e.code), (StatusCode::CONFLICT, code));
            assert_eq!(e.message, words);
            assert!(!e.message.is_empty(), "{code} says what to do");
        }
    }

    #[test]
    fn a_reused_idempotency_key_is_a_422_with_its_code() {
        let e = ApiError::from(StoreError::Refused(Refusal::IdempotencyKeyReused));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
        );
        assert!(e.message.contains("fresh key"), "{}", e.message);
    }

    #[test]
    fn a_refusal_inside_a_service_error_reaches_the_wire_unchanged() {
        let e = ApiError::from(crate::service::ServiceError::Store(
            Refusal::QuestLocked(State::Pass).into(),
        ));
        assert_eq!((e.status, e.code), (StatusCode::CONFLICT, "quest_locked"));
        assert!(e.message.contains("PASS"), "{}", e.message);
    }

    #[test]
    fn a_server_fault_is_a_500_that_does_not_echo_its_cause() {
        let e = ApiError::from(crate::service::ServiceError::Fault(
            "the XLSX export failed: disk full at /var/tmp/x".into(),
        ));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal")
        );
        assert!(!e.message.contains("disk full"), "{}", e.message);
        assert!(!e.message.contains("/var/tmp"), "{}", e.message);
    }
}
