//! The bodies of the debug tunnel's answers, shared by the tunnel and the simulated
//! cluster's API below it.

use std::convert::Infallible;

use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};

/// A response body toward the root.
pub type TunnelBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A `metav1.Status` answer.
pub fn status(code: StatusCode, reason: &str, message: String) -> Response<TunnelBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    })
    .to_string();
    let mut r = Response::new(full(body));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// A whole body.
pub fn full(b: impl Into<Bytes>) -> TunnelBody {
    http_body_util::Full::new(b.into())
        .map_err(|e: Infallible| match e {})
        .boxed_unsync()
}

/// A request's whole body, at most `max` bytes; else the 413 to answer.
pub async fn collect_limited(
    body: hyper::body::Incoming,
    max: usize,
) -> Result<Bytes, Response<TunnelBody>> {
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) => Err(status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("request body: {e}"),
        )),
    }
}
