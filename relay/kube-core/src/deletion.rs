//! Deletion as kube-apiserver does it, in the parts that need no store: `DeleteOptions`
//! (from the body or the query), preconditions, which kinds answer a delete with the
//! object (`ReturnDeletedObject` in kube-apiserver's registries) and which with a
//! `Status`, finalizers and `deletionTimestamp`, `ownerReferences`, and the Namespace's
//! `Terminating` phase.

use serde_json::{Value, json};

use crate::status::{Cause, Status, qualified};

/// `propagationPolicy`: what becomes of the objects whose `ownerReferences` name the
/// deleted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Their `ownerReferences` to it are removed; they stay.
    Orphan,
    /// The owner goes at once, then its dependents (kube-apiserver's default).
    #[default]
    Background,
    /// The owner stays, with the `foregroundDeletion` finalizer, until its dependents
    /// are gone.
    Foreground,
}

/// The finalizer that holds an owner deleted in the foreground.
pub const FOREGROUND: &str = "foregroundDeletion";

/// The finalizer kube-apiserver puts in a Namespace's `spec.finalizers`.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// A delete's options, from its `DeleteOptions` body and its query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    /// `propagationPolicy` (or the older `orphanDependents`).
    pub propagation: Propagation,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun: [All]`.
    pub dry_run: bool,
}

/// 422 on a `DeleteOptions`' `propagationPolicy`, as kube-apiserver words it.
fn invalid_policy(reason: &'static str, message: String) -> Status {
    Status::invalid(
        "DeleteOptions",
        "meta.k8s.io",
        "",
        &[Cause {
            reason,
            field: "propagationPolicy".into(),
            message,
        }],
    )
}

impl DeleteOptions {
    /// The options of a delete: its body (a JSON `DeleteOptions`, or empty) and its
    /// query (`propagationPolicy`, `orphanDependents`, `dryRun`); the body's win.
    pub fn parse(query: &[(String, String)], body: &[u8]) -> Result<DeleteOptions, Status> {
        let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body).map_err(|e| {
                Status::bad_request(format!("the DeleteOptions body does not parse: {e}"))
            })?
        };
        DeleteOptions::from_value(query, &body)
    }

    /// [`DeleteOptions::parse`] of a body already decoded (a protobuf `DeleteOptions` as
    /// JSON).
    pub fn from_value(query: &[(String, String)], body: &Value) -> Result<DeleteOptions, Status> {
        if !body.is_object() {
            return Err(Status::bad_request(
                "the DeleteOptions body is not an object",
            ));
        }
        let q = |name: &str| crate::params::param(query, name).filter(|v| !v.is_empty());
        let policy = body["propagationPolicy"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| q("propagationPolicy").map(str::to_owned));
        let orphan = match (&body["orphanDependents"], q("orphanDependents")) {
            (Value::Bool(b), _) => Some(*b),
            (_, Some(v)) => Some(v == "true"),
            _ => None,
        };
        let propagation = match (policy.as_deref(), orphan) {
            (Some(p), Some(_)) => {
                return Err(invalid_policy(
                    "FieldValueInvalid",
                    format!(
                        "Invalid value: {p:?}: orphanDependents and deletionPropagation cannot be both set"
                    ),
                ));
            }
            (Some("Orphan"), None) | (None, Some(true)) => Propagation::Orphan,
            (Some("Background"), None) | (None, Some(false)) | (None, None) => {
                Propagation::Background
            }
            (Some("Foreground"), None) => Propagation::Foreground,
            (Some(other), None) => {
                return Err(invalid_policy(
                    "FieldValueNotSupported",
                    format!(
                        "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                    ),
                ));
            }
        };
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let dry_run = body["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "All"))
            || query.iter().any(|(k, v)| k == "dryRun" && v == "All");
        Ok(DeleteOptions {
            propagation,
            uid: text(&body["preconditions"]["uid"]),
            resource_version: text(&body["preconditions"]["resourceVersion"]),
            dry_run,
        })
    }

    /// 409 `Conflict` when the preconditions do not hold for `object` (as a client reads
    /// it: `metadata.uid`, `metadata.resourceVersion`).
    pub fn check_preconditions(
        &self,
        plural: &str,
        group: &str,
        object: &Value,
    ) -> Result<(), Status> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let failed = |what: &str, want: &str, have: &Value| {
            Status::failure(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {name:?}: Precondition failed: {what} in precondition: {want}, {what} in object meta: {}",
                    qualified(plural, group),
                    have.as_str().unwrap_or_default()
                ),
                Some(json!({ "name": name, "group": group, "kind": plural })),
            )
        };
        if let Some(uid) = &self.uid
            && object["metadata"]["uid"] != json!(uid)
        {
            return Err(failed("UID", uid, &object["metadata"]["uid"]));
        }
        if let Some(rv) = &self.resource_version
            && object["metadata"]["resourceVersion"] != json!(rv)
        {
            return Err(failed(
                "ResourceVersion",
                rv,
                &object["metadata"]["resourceVersion"],
            ));
        }
        Ok(())
    }
}

/// Whether kube-apiserver answers a delete of `plural` in `group` with the deleted
/// object (its registries with `ReturnDeletedObject: true`: Pods, Services, Namespaces,
/// ServiceAccounts, PersistentVolumes and their claims, Nodes, StorageClasses,
/// VolumeAttachments, CSIDrivers, CSINodes, and every custom resource; a
/// CustomResourceDefinition stays, terminating, behind its cleanup finalizer, so its
/// delete answers it too). Other kinds answer a `Status`.
pub fn returns_deleted_object(group: &str, plural: &str, custom_resource: bool) -> bool {
    custom_resource
        || matches!(
            (group, plural),
            (
                "",
                "pods"
                    | "services"
                    | "namespaces"
                    | "serviceaccounts"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
                    | "nodes"
            ) | (
                "storage.k8s.io",
                "storageclasses" | "volumeattachments" | "csidrivers" | "csinodes"
            ) | ("apiextensions.k8s.io", "customresourcedefinitions")
        )
}

/// What a delete answers for an object that is gone, for kinds that do not return it:
/// `Success`, naming it (`kind` is the plural, as kube-apiserver sends it).
pub fn deleted(plural: &str, group: &str, name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": { "name": name, "group": group, "kind": plural, "uid": uid },
    })
}

/// `metadata.finalizers`.
pub fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Sets `metadata.finalizers` (removed when empty).
pub fn set_finalizers(object: &mut Value, list: &[String]) {
    if let Some(meta) = object["metadata"].as_object_mut() {
        if list.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), json!(list));
        }
    }
}

/// Whether the object is being deleted (`metadata.deletionTimestamp` is set).
pub fn is_deleting(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

/// Marks the object as being deleted at `now` (RFC 3339), as kube-apiserver does to
/// an object its finalizers keep: `deletionTimestamp` and `deletionGracePeriodSeconds:
/// 0`; an object already being deleted keeps its time.
pub fn mark_deleting(object: &mut Value, now: &str) {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    if !is_deleting(object) {
        object["metadata"]["deletionTimestamp"] = json!(now);
        object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    }
}

/// A created object's metadata as kube-apiserver prepares it: a `deletionTimestamp`
/// and `deletionGracePeriodSeconds` sent with it are dropped.
pub fn prepare_create(object: &mut Value) {
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
}

/// An update's metadata as kube-apiserver checks it against the stored object's: the
/// deletion time cannot be set, moved or removed (it is kept from `old`), and no new
/// finalizer may be added to an object being deleted (422 `Invalid`).
pub fn prepare_update(kind: &str, group: &str, old: &Value, new: &mut Value) -> Result<(), Status> {
    let name = new["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if !new["metadata"].is_object() {
        return Ok(());
    }
    if is_deleting(old) {
        let old_finalizers = finalizers(old);
        let mut added: Vec<String> = finalizers(new)
            .into_iter()
            .filter(|f| !old_finalizers.contains(f))
            .collect();
        added.sort();
        added.dedup();
        if !added.is_empty() {
            let listed: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            return Err(Status::invalid(
                kind,
                group,
                &name,
                &[Cause {
                    reason: "FieldValueForbidden",
                    field: "metadata.finalizers".into(),
                    message: format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        listed.join(", ")
                    ),
                }],
            ));
        }
        for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
            new["metadata"][field] = old["metadata"][field].clone();
        }
        return Ok(());
    }
    if let Some(ts) = new["metadata"]["deletionTimestamp"].as_str() {
        return Err(Status::invalid(
            kind,
            group,
            &name,
            &[Cause {
                reason: "FieldValueInvalid",
                field: "metadata.deletionTimestamp".into(),
                message: format!("Invalid value: {ts:?}: field is immutable"),
            }],
        ));
    }
    if let Some(meta) = new["metadata"].as_object_mut() {
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
    Ok(())
}

/// Whether an object being deleted may go: no finalizer holds it.
pub fn may_go(object: &Value) -> bool {
    is_deleting(object) && finalizers(object).is_empty()
}

/// Whether `object`'s `ownerReferences` name `uid`.
pub fn owned_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == json!(uid)))
}

/// Removes `object`'s `ownerReferences` to `uid` (orphaning it); whether any was.
pub fn drop_owner(object: &mut Value, uid: &str) -> bool {
    let Some(refs) = object["metadata"]["ownerReferences"].as_array_mut() else {
        return false;
    };
    let before = refs.len();
    refs.retain(|r| r["uid"] != json!(uid));
    let dropped = refs.len() != before;
    if refs.is_empty()
        && let Some(meta) = object["metadata"].as_object_mut()
    {
        meta.remove("ownerReferences");
    }
    dropped
}

/// A Namespace as kube-apiserver shows it: `spec.finalizers: [kubernetes]` and
/// `status.phase`, `Active`, or `Terminating` once it is being deleted.
pub fn namespace_view(namespace: &mut Value) {
    if !namespace["spec"].is_object() {
        namespace["spec"] = json!({});
    }
    if namespace["spec"]["finalizers"].is_null() {
        namespace["spec"]["finalizers"] = json!([NAMESPACE_FINALIZER]);
    }
    if !namespace["status"].is_object() {
        namespace["status"] = json!({});
    }
    namespace["status"]["phase"] = json!(if is_deleting(namespace) {
        "Terminating"
    } else {
        "Active"
    });
}

/// 403 `Forbidden`, as the NamespaceLifecycle admission plugin refuses a create in a
/// namespace being deleted.
pub fn namespace_terminating(plural: &str, group: &str, name: &str, namespace: &str) -> Status {
    Status::failure(
        403,
        "Forbidden",
        format!(
            "{} {name:?} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
            qualified(plural, group)
        ),
        Some(json!({
            "name": name, "group": group, "kind": plural,
            "causes": [ {
                "reason": "NamespaceTerminating",
                "message": format!("namespace {namespace} is being terminated"),
                "field": "metadata.namespace",
            } ],
        })),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn options_come_from_the_body_or_the_query() {
        let none = DeleteOptions::parse(&[], b"").unwrap();
        assert_eq!(none, DeleteOptions::default());
        let body = br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground",
            "preconditions":{"uid":"u","resourceVersion":"7"},"dryRun":["All"]}"#;
        let o = DeleteOptions::parse(&[], body).unwrap();
        assert_eq!(o.propagation, Propagation::Foreground);
        assert_eq!(
            (o.uid.as_deref(), o.resource_version.as_deref(), o.dry_run),
            (Some("u"), Some("7"), true)
        );
        let o = DeleteOptions::parse(&q(&[("propagationPolicy", "Orphan")]), b"").unwrap();
        assert_eq!(o.propagation, Propagation::Orphan);
        let o = DeleteOptions::parse(&[], br#"{"orphanDependents":true}"#).unwrap();
        assert_eq!(o.propagation, Propagation::Orphan);
        let o = DeleteOptions::parse(&q(&[("dryRun", "All")]), b"{}").unwrap();
        assert!(o.dry_run);
    }

    #[test]
    fn bad_options_are_refused_as_kube_apiserver_refuses_them() {
        let bad = DeleteOptions::parse(&q(&[("propagationPolicy", "Sideways")]), b"").unwrap_err();
        assert_eq!(bad.code, 422);
        assert_eq!(
            bad.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\""
        );
        let both = DeleteOptions::parse(
            &[],
            br#"{"propagationPolicy":"Orphan","orphanDependents":true}"#,
        )
        .unwrap_err();
        assert_eq!(both.code, 422);
        assert_eq!(
            DeleteOptions::parse(&[], b"{not json").unwrap_err().code,
            400
        );
    }

    #[test]
    fn preconditions_that_do_not_hold_are_a_conflict() {
        let object = json!({ "metadata": { "name": "web", "uid": "u1", "resourceVersion": "4" } });
        let o = |uid: Option<&str>, rv: Option<&str>| DeleteOptions {
            uid: uid.map(str::to_owned),
            resource_version: rv.map(str::to_owned),
            ..DeleteOptions::default()
        };
        assert!(
            o(Some("u1"), Some("4"))
                .check_preconditions("deployments", "apps", &object)
                .is_ok()
        );
        let e = o(Some("u2"), None)
            .check_preconditions("deployments", "apps", &object)
            .unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on deployments.apps \"web\": Precondition failed: UID in precondition: u2, UID in object meta: u1"
        );
        let e = o(None, Some("3"))
            .check_preconditions("configmaps", "", &object)
            .unwrap_err();
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on configmaps \"web\": Precondition failed: ResourceVersion in precondition: 3, ResourceVersion in object meta: 4"
        );
    }

    #[test]
    fn the_kinds_that_answer_with_the_object() {
        assert!(returns_deleted_object("", "pods", false));
        assert!(returns_deleted_object("", "services", false));
        assert!(returns_deleted_object("", "namespaces", false));
        assert!(returns_deleted_object("example.com", "menus", true));
        assert!(!returns_deleted_object("apps", "deployments", false));
        assert!(!returns_deleted_object("", "configmaps", false));
        assert_eq!(
            deleted("deployments", "apps", "web", "u"),
            json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": { "name": "web", "group": "apps", "kind": "deployments", "uid": "u" } })
        );
    }

    #[test]
    fn finalizers_hold_and_cannot_be_added_while_deleting() {
        let mut o = json!({ "metadata": { "name": "c", "finalizers": ["a"] } });
        assert!(!is_deleting(&o));
        mark_deleting(&mut o, "2026-01-01T00:00:00Z");
        mark_deleting(&mut o, "2027-01-01T00:00:00Z");
        assert_eq!(o["metadata"]["deletionTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 0);
        assert!(!may_go(&o));
        // An update keeps the time, and may only take finalizers away.
        let mut more = json!({ "metadata": { "name": "c", "finalizers": ["a", "b"] } });
        let e = prepare_update("ConfigMap", "", &o, &mut more).unwrap_err();
        assert_eq!(
            e.message,
            "ConfigMap \"c\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"b\"}"
        );
        let mut fewer = json!({ "metadata": { "name": "c" } });
        prepare_update("ConfigMap", "", &o, &mut fewer).unwrap();
        assert_eq!(
            fewer["metadata"]["deletionTimestamp"],
            "2026-01-01T00:00:00Z"
        );
        assert!(may_go(&fewer));
        // Not deleting: a deletion time cannot be set by an update, and a create drops it.
        let live = json!({ "metadata": { "name": "c" } });
        let mut set =
            json!({ "metadata": { "name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z" } });
        assert_eq!(
            prepare_update("ConfigMap", "", &live, &mut set.clone())
                .unwrap_err()
                .code,
            422
        );
        prepare_create(&mut set);
        assert!(!is_deleting(&set));
    }

    #[test]
    fn owner_references_by_uid() {
        let mut o =
            json!({ "metadata": { "ownerReferences": [ { "uid": "a" }, { "uid": "b" } ] } });
        assert!(owned_by(&o, "a") && !owned_by(&o, "c"));
        assert!(drop_owner(&mut o, "a"));
        assert!(!owned_by(&o, "a") && owned_by(&o, "b"));
        assert!(drop_owner(&mut o, "b"));
        assert!(o["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn namespaces_show_their_phase() {
        let mut ns = json!({ "metadata": { "name": "web" } });
        namespace_view(&mut ns);
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(ns["status"]["phase"], "Active");
        mark_deleting(&mut ns, "2026-01-01T00:00:00Z");
        namespace_view(&mut ns);
        assert_eq!(ns["status"]["phase"], "Terminating");
        let f = namespace_terminating("configmaps", "", "c", "web");
        assert_eq!((f.code, f.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            f.message,
            "configmaps \"c\" is forbidden: unable to create new content in namespace web because it is being terminated"
        );
    }
}
