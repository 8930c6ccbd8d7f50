//! Form bodies of the write routes, as Akka Management reads them: fields from an
//! `application/x-www-form-urlencoded` body (also assumed when no content type is given) or from
//! a `multipart/form-data` body (`curl -F operation=down`).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;

use super::error::ApiError;

/// The fields of a form body, by name; a repeated field keeps its last value.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Form(BTreeMap<String, String>);

impl Form {
    /// The field `name`.
    ///
    /// # Errors
    /// 400 naming the field when it is missing, in Akka's words.
    pub fn field(&self, name: &str) -> Result<&str, ApiError> {
        self.0.get(name).map(String::as_str).ok_or_else(|| {
            ApiError::bad_request(format!("Request is missing required form field '{name}'"))
        })
    }

    fn urlencoded(body: &[u8]) -> Result<Self, ApiError> {
        serde_urlencoded::from_bytes::<Vec<(String, String)>>(body)
            .map(|pairs| Self(pairs.into_iter().collect()))
            .map_err(|e| {
                ApiError::bad_request(format!(
                    "The request body is not a form (application/x-www-form-urlencoded or \
                     multipart/form-data): {e}"
                ))
            })
    }

    async fn multipart(mut parts: Multipart) -> Result<Self, ApiError> {
        let unreadable = |e: axum::extract::multipart::MultipartError| {
            ApiError::unreadable_body(
                "The multipart form cannot be read",
                e.status(),
                &e.body_text(),
            )
        };
        let mut fields = BTreeMap::new();
        while let Some(field) = parts.next_field().await.map_err(unreadable)? {
            let Some(name) = field.name().map(str::to_owned) else { continue };
            let value = field.text().await.map_err(unreadable)?;
            fields.insert(name, value);
        }
        Ok(Self(fields))
    }
}

fn is_multipart(req: &Request) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"))
}

impl<S: Send + Sync> FromRequest<S> for Form {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if is_multipart(&req) {
            let parts = Multipart::from_request(req, state).await.map_err(|e| {
                let status = e.status();
                ApiError::unreadable_body(
                    "The multipart form cannot be read",
                    status,
                    &e.body_text(),
                )
            })?;
            Self::multipart(parts).await
        } else {
            let body = Bytes::from_request(req, state).await.map_err(|e| {
                ApiError::unreadable_body(
                    "The request body cannot be read",
                    e.status(),
                    &e.body_text(),
                )
            })?;
            Self::urlencoded(&body)
        }
    }
}
