//! The messages of etcd's JSON gateway as the client reads them: what a call returns
//! ([`Kv`], [`Range`], [`WatchResponse`]), what went wrong ([`EtcdError`]), and their
//! decoding (bytes in base64, 64-bit integers as strings).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

/// What went wrong with a call.
#[derive(Debug, thiserror::Error)]
pub(in crate::store) enum EtcdError {
    /// No member could be reached, or the connection broke or timed out: may pass.
    #[error("{0}")]
    Transport(String),
    /// etcd answered with a gRPC status (`code`, as in gRPC).
    #[error("{message} (gRPC code {code})")]
    Status {
        /// The gRPC status code.
        code: i64,
        /// etcd's message.
        message: String,
    },
    /// The answer was not what the API says.
    #[error("etcd's answer does not decode: {0}")]
    Decode(String),
}

impl EtcdError {
    /// Whether the call may succeed if made again: a member gone (the next call goes
    /// to another), etcd without a leader for a moment, a deadline passed.
    pub(in crate::store) fn transient(&self) -> bool {
        match self {
            EtcdError::Transport(_) => true,
            // UNAVAILABLE (14), DEADLINE_EXCEEDED (4), UNKNOWN (2), CANCELLED (1).
            EtcdError::Status { code, .. } => matches!(code, 1 | 2 | 4 | 14),
            EtcdError::Decode(_) => false,
        }
    }
}

/// A key and its value as etcd holds them.
#[derive(Debug, Clone)]
pub(in crate::store) struct Kv {
    pub(in crate::store) key: Vec<u8>,
    pub(in crate::store) value: Vec<u8>,
    /// The revision of the write that made this value.
    pub(in crate::store) mod_revision: i64,
}

/// What a range read returned, and the store's revision it was read at.
#[derive(Debug)]
pub(in crate::store) struct Range {
    pub(in crate::store) revision: i64,
    pub(in crate::store) kvs: Vec<Kv>,
}

/// One answer of a watch.
#[derive(Debug, Default)]
pub(in crate::store) struct WatchResponse {
    /// etcd ended the watch (its start revision was compacted away, say).
    pub(in crate::store) canceled: bool,
    /// What changed, in order: the key and value as written (`None`: deleted).
    pub(in crate::store) events: Vec<WatchEvent>,
}

/// One change a watch saw.
#[derive(Debug)]
pub(in crate::store) struct WatchEvent {
    pub(in crate::store) kv: Kv,
    pub(in crate::store) deleted: bool,
}

pub(super) fn watch_response(line: &[u8]) -> Result<WatchResponse, EtcdError> {
    let v: Value =
        serde_json::from_slice(line).map_err(|e| EtcdError::Decode(format!("watch: {e}")))?;
    if let Some(error) = v.get("error") {
        return Err(error_of(error));
    }
    let r = v.get("result").unwrap_or(&v);
    let mut events = Vec::new();
    if let Some(Value::Array(list)) = r.get("events") {
        for e in list {
            let deleted = e.get("type").and_then(Value::as_str) == Some("DELETE");
            let kv = kv(e.get("kv").unwrap_or(&Value::Null))?;
            events.push(WatchEvent { kv, deleted });
        }
    }
    Ok(WatchResponse {
        canceled: r.get("canceled").and_then(Value::as_bool).unwrap_or(false),
        events,
    })
}

/// The error an HTTP answer other than 200 carries (`{"error", "code", "message"}`).
pub(super) fn status_error(status: hyper::StatusCode, body: &[u8]) -> EtcdError {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.get("code").is_some() => error_of(&v),
        _ => EtcdError::Transport(format!(
            "etcd answered {status}: {}",
            String::from_utf8_lossy(body).trim()
        )),
    }
}

fn error_of(v: &Value) -> EtcdError {
    let message = v
        .get("message")
        .or_else(|| v.get("error"))
        .and_then(Value::as_str)
        .unwrap_or("(no message)")
        .to_owned();
    EtcdError::Status {
        code: int(v, "code").unwrap_or(2),
        message,
    }
}

/// A 64-bit integer field: the gateway writes them as strings, small ones may be
/// numbers; an absent field is the protobuf default, 0, left out.
pub(super) fn int(v: &Value, field: &str) -> Option<i64> {
    match v.get(field)? {
        Value::String(s) => s.parse().ok(),
        n => n.as_i64(),
    }
}

pub(super) fn header_revision(v: &Value) -> i64 {
    v.get("header")
        .and_then(|h| int(h, "revision"))
        .unwrap_or(0)
}

fn bytes_field(v: &Value, field: &str) -> Result<Vec<u8>, EtcdError> {
    match v.get(field).and_then(Value::as_str) {
        Some(s) => B64
            .decode(s)
            .map_err(|e| EtcdError::Decode(format!("{field}: {e}"))),
        None => Ok(Vec::new()),
    }
}

pub(super) fn kv(v: &Value) -> Result<Kv, EtcdError> {
    Ok(Kv {
        key: bytes_field(v, "key")?,
        value: bytes_field(v, "value")?,
        mod_revision: int(v, "mod_revision").unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_answers_decode_as_the_gateway_writes_them() {
        let line = br#"{"result":{"header":{"revision":"7"},"events":[{"kv":{"key":"eA==","create_revision":"3","mod_revision":"7","version":"2","value":"MQ=="}},{"type":"DELETE","kv":{"key":"eQ==","mod_revision":"7"}}]}}"#;
        let r = watch_response(line).unwrap();
        assert!(!r.canceled);
        assert_eq!(r.events.len(), 2);
        assert_eq!(
            (
                r.events[0].kv.key.as_slice(),
                r.events[0].kv.value.as_slice()
            ),
            (&b"x"[..], &b"1"[..])
        );
        assert_eq!(r.events[0].kv.mod_revision, 7);
        assert!(!r.events[0].deleted && r.events[1].deleted);
        let canceled =
            watch_response(br#"{"result":{"canceled":true,"compact_revision":"5"}}"#).unwrap();
        assert!(canceled.canceled);
        let e = watch_response(
            br#"{"error":{"grpc_code":14,"http_code":503,"message":"no leader","code":14}}"#,
        )
        .unwrap_err();
        assert!(e.transient(), "{e}");
    }

    #[test]
    fn errors_read_the_grpc_code() {
        let e = status_error(
            hyper::StatusCode::NOT_FOUND,
            br#"{"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5}"#,
        );
        assert!(
            matches!(&e, EtcdError::Status { code: 5, message } if message.contains("lease not found"))
        );
        assert!(!e.transient());
        assert!(status_error(hyper::StatusCode::BAD_GATEWAY, b"<html>").transient());
    }
}
