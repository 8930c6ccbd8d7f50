//! The management API's one error type: a status and `{"message": ...}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A JSON message body, used for errors and for write acknowledgements.
#[derive(Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Message {
    /// Human-readable text.
    pub message: String,
}

impl Message {
    /// A message.
    pub fn new(text: impl Into<String>) -> Json<Message> {
        Json(Message { message: text.into() })
    }
}

/// An error answered as `{"message": ...}` with a status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into() }
    }

    /// 404 for a member.
    pub fn member_not_found(given: &str) -> Self {
        Self { status: StatusCode::NOT_FOUND, message: format!("Member [{given}] not found") }
    }

    /// 404 with a message.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self { status: StatusCode::NOT_FOUND, message: message.into() }
    }

    /// 503 with a message.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self { status: StatusCode::SERVICE_UNAVAILABLE, message: message.into() }
    }

    /// 405 in read-only mode.
    pub fn read_only() -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "The management API is read-only: set management.read_only = false \
                      (CONVOKE_MANAGEMENT__READ_ONLY=false) to enable write operations"
                .into(),
        }
    }

    /// 401.
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message:
                "Authentication required: send Authorization: Bearer <token> (or Basic credentials)"
                    .into(),
        }
    }

    /// 503 when the node has stopped.
    pub fn node_stopped() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "The cluster node has stopped".into(),
        }
    }

    /// 503 when too many clients stream events.
    pub fn too_many_streams() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "Too many event-stream clients (management.limits.max_event_clients)".into(),
        }
    }

    /// A body that could not be read: the rejection's own status (413 when over
    /// `management.limits.body_limit`, 400 otherwise) and its text after `what`.
    pub fn unreadable_body(what: &str, status: StatusCode, why: &str) -> Self {
        Self { status, message: format!("{what}: {why}") }
    }

    /// Any status with a message.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    /// 404 for an unknown route.
    pub fn no_route() -> Self {
        Self { status: StatusCode::NOT_FOUND, message: "No such route".into() }
    }

    /// 405 for a route that exists with other methods.
    pub fn method_not_allowed() -> Self {
        Self {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "Method not allowed on this route".into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(Message { message: self.message })).into_response()
    }
}
