//! `metav1.Status`: how the Kubernetes API answers a failure, worded as kube-apiserver
//! words it (`deployments.apps "web" not found`), so that kubectl and client libraries
//! recognise it by `code` and `reason`.

use serde_json::{Value, json};

/// One fault of an `Invalid` answer, as a `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueTypeInvalid`, `FieldValueRequired`,
    /// `FieldValueNotSupported`, `FieldValueTooMany`.
    pub reason: &'static str,
    /// The field's path, `spec.items[0].name`.
    pub field: String,
    /// What is wrong, without the field's path.
    pub message: String,
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A failed request's `metav1.Status`. [`Status::to_value`] is the JSON body; the HTTP
/// status is [`Status::code`].
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The HTTP status, repeated in the body.
    pub code: u16,
    /// The machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, ...).
    pub reason: String,
    /// What a person reads.
    pub message: String,
    /// `details`: the object named, the causes, `retryAfterSeconds` (boxed: a
    /// `Status` is the error of many `Result`s).
    pub details: Option<Box<Value>>,
}

/// `plural.group`, or `plural` for the core group: how kube-apiserver names a resource
/// (and a kind, `Deployment.apps`, `ConfigMap`).
pub(crate) fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

/// The `details` naming one object (`kind` is the plural, as kube-apiserver sends it;
/// `group` is left out for the core group, as Go's `omitempty` leaves it out).
fn named(plural: &str, group: &str, name: &str) -> Value {
    if group.is_empty() {
        json!({ "name": name, "kind": plural })
    } else {
        json!({ "name": name, "group": group, "kind": plural })
    }
}

impl Status {
    /// A failure with any code and reason.
    pub fn failure(
        code: u16,
        reason: &str,
        message: impl Into<String>,
        details: Option<Value>,
    ) -> Status {
        Status {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: details.map(Box::new),
        }
    }

    /// 404 `NotFound`: `deployments.apps "web" not found`.
    pub fn not_found(plural: &str, group: &str, name: &str) -> Status {
        Status::failure(
            404,
            "NotFound",
            format!("{} {name:?} not found", qualified(plural, group)),
            Some(named(plural, group, name)),
        )
    }

    /// 409 `AlreadyExists`: `deployments.apps "web" already exists`.
    pub fn already_exists(plural: &str, group: &str, name: &str) -> Status {
        Status::failure(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", qualified(plural, group)),
            Some(named(plural, group, name)),
        )
    }

    /// 409 `Conflict` on a stale `resourceVersion`: `Operation cannot be fulfilled on
    /// deployments.apps "web": the object has been modified; ...`.
    pub fn conflict(plural: &str, group: &str, name: &str) -> Status {
        Status::failure(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                qualified(plural, group)
            ),
            Some(named(plural, group, name)),
        )
    }

    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Status {
        Status::failure(400, "BadRequest", message, None)
    }

    /// 422 `Invalid` with a cause per field: `Menu.example.com "lunch" is invalid:
    /// spec.dishes: Required value` (several causes are listed in brackets).
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[Cause]) -> Status {
        let list: Vec<String> = causes.iter().map(ToString::to_string).collect();
        let listed = match list.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
            .collect();
        Status::failure(
            422,
            "Invalid",
            format!("{} {name:?} is invalid: {listed}", qualified(kind, group)),
            Some(json!({ "name": name, "group": group, "kind": kind, "causes": causes })),
        )
    }

    /// 405 `MethodNotAllowed` for a verb a resource does not serve, in kube-apiserver's
    /// words: `create is not supported on resources of kind "deployments.apps"`.
    pub fn method_not_supported(plural: &str, group: &str, verb: &str) -> Status {
        Status::failure(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind {:?}",
                qualified(plural, group)
            ),
            Some(json!({ "group": group, "kind": plural })),
        )
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Status {
        Status::failure(405, "MethodNotAllowed", message, None)
    }

    /// 415 `UnsupportedMediaType`.
    pub fn unsupported_media_type(message: impl Into<String>) -> Status {
        Status::failure(415, "UnsupportedMediaType", message, None)
    }

    /// 410 `Expired`: a `resourceVersion` the server no longer serves; the client lists
    /// again.
    pub fn expired(message: impl Into<String>) -> Status {
        Status::failure(410, "Expired", message, None)
    }

    /// kube-apiserver's answer to a `resourceVersion` the server has not reached: 504
    /// with the cause `ResourceVersionTooLarge`, which clients recognise.
    pub fn too_large_resource_version(rv: u64, head: u64) -> Status {
        Status::failure(
            504,
            "Timeout",
            format!("Too large resource version: {rv}, current: {head}"),
            Some(json!({
                "causes": [ { "reason": "ResourceVersionTooLarge", "message": "Too large resource version" } ],
                "retryAfterSeconds": 1,
            })),
        )
    }

    /// The `metav1.Status` document, its fields in the order of kube-apiserver's (the
    /// Go struct's): clients that print a failure's body show the same text.
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::Map::new();
        v.insert("kind".into(), "Status".into());
        v.insert("apiVersion".into(), "v1".into());
        v.insert("metadata".into(), json!({}));
        v.insert("status".into(), "Failure".into());
        v.insert("message".into(), self.message.clone().into());
        v.insert("reason".into(), self.reason.clone().into());
        if let Some(d) = &self.details {
            v.insert("details".into(), Value::clone(d));
        }
        v.insert("code".into(), self.code.into());
        Value::Object(v)
    }
}

impl From<Status> for (u16, Value) {
    fn from(status: Status) -> (u16, Value) {
        (status.code, status.to_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_kube_apiserver_writes_them() {
        let (code, body) = Status::not_found("deployments", "apps", "x").into();
        assert_eq!(code, 404);
        assert_eq!(
            body,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "deployments.apps \"x\" not found", "reason": "NotFound", "code": 404,
                "details": { "name": "x", "group": "apps", "kind": "deployments" },
            })
        );
        assert_eq!(
            Status::already_exists("deployments", "apps", "x").message,
            "deployments.apps \"x\" already exists"
        );
        assert_eq!(
            Status::not_found("pods", "", "p").message,
            "pods \"p\" not found"
        );
        assert!(
            Status::conflict("configmaps", "", "c")
                .message
                .starts_with("Operation cannot be fulfilled on configmaps \"c\": ")
        );
        assert_eq!(
            Status::already_exists("services", "", "mock-2")
                .to_value()
                .to_string(),
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"services \"mock-2\" already exists","reason":"AlreadyExists","details":{"name":"mock-2","kind":"services"},"code":409}"#
        );
        let (code, body) = Status::bad_request("no").into();
        assert_eq!((code, body.get("details")), (400, None));
        assert_eq!(Status::expired("old").code, 410);
        assert_eq!(
            Status::too_large_resource_version(9, 3).to_value()["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
    }
}
