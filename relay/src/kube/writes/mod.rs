//! The verbs that write: create, update, patch (merge, JSON, strategic merge, server-side
//! apply), the `scale` subresource, delete and deletecollection. Every write is checked
//! and stored in one turn of the node's task, so a `resourceVersion` checked is the one
//! replaced.

pub mod admit;
pub mod batch_check;
pub mod deletion;
pub mod namespaces;
mod patches;

use serde_json::{Value, json};
use strata_kube_core::Status;
use strata_kube_core::deletion as rules;
use strata_kube_core::status::Cause;
use strata_node::objects::manifest_from_value;
use strata_protocol::model::{ObjectKey, Space};

use admit::{Admission, WriteError, write_manifests};

use super::catalog::ResourceType;
use super::schema_check::FieldValidation;
use super::{Answer, ResourceOp, clusters, failure, patch, protobuf, render, schema_check};
use crate::tier::core::NodeCore;

impl ResourceOp {
    /// A patch document (JSON).
    fn patch_body(&self) -> Result<Value, Answer> {
        serde_json::from_slice(&self.body).map_err(|e| {
            failure(
                400,
                "BadRequest",
                format!("the patch does not parse: {e}"),
                None,
            )
        })
    }

    /// The body, checked to name the object the URL names.
    fn named_body(&self, name: &str) -> Result<Value, Answer> {
        let value = self.body()?;
        if value["metadata"]["name"].as_str() != Some(name) {
            return Err(failure(
                400,
                "BadRequest",
                "the name of the object does not match the name on the URL".into(),
                None,
            ));
        }
        Ok(value)
    }

    /// The request body as JSON: from JSON, YAML, or Kubernetes' protobuf encoding (which
    /// kubectl and client-go send for built-in kinds).
    fn body(&self) -> Result<Value, Answer> {
        if self.content_type.contains("protobuf") {
            // Every built-in kind (kube-apiserver reads protobuf for those only; a custom
            // resource in protobuf is refused as it refuses it).
            return protobuf::decode(&self.body).map_err(|e| match e {
                protobuf::DecodeError::UnknownKind { .. } => failure(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "the body is {}: {e}; this server reads protobuf for built-in kinds, JSON and YAML for all",
                        self.content_type
                    ),
                    None,
                ),
                e => failure(400, "BadRequest", format!("the protobuf body does not decode: {e}"), None),
            });
        }
        if self.content_type.contains("cbor") {
            return Err(failure(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body is {}; this server reads JSON, YAML and (for built-in kinds) protobuf",
                    self.content_type
                ),
                None,
            ));
        }
        let bad = |e: String| {
            failure(
                400,
                "BadRequest",
                format!("the body ({}) does not parse: {e}", self.content_type),
                None,
            )
        };
        if self.content_type.contains("yaml") {
            let text = std::str::from_utf8(&self.body).map_err(|e| bad(e.to_string()))?;
            strata_manifest::yaml::from_str(text).map_err(|e| bad(e.to_string()))
        } else {
            serde_json::from_slice(&self.body).map_err(|e| bad(e.to_string()))
        }
    }

    /// Checks `value` is a `t` named `name` in the request's namespace, validates its
    /// fields when asked to, and stores it (unless a dry run); answers with the object.
    fn store(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        mut value: Value,
        created: bool,
    ) -> Answer {
        // Who owns which fields (server-side apply) is the root's to record: kept from
        // the stored object, or set by the apply that computed `value`.
        if !value.is_object() {
            return Status::bad_request("the body is not an object").into();
        }
        let managed = value["metadata"]["managedFields"].take();
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let invalid = |field: &str, why: String| -> Answer {
            let cause = Cause {
                reason: "FieldValueInvalid",
                field: field.to_owned(),
                message: why,
            };
            Status::invalid(&t.kind, &t.group, &name, &[cause]).into()
        };
        // What the body leaves out, the path says (kube-apiserver decodes with the
        // path's group, version and kind as defaults).
        for (field, from_path) in [("apiVersion", t.api_version()), ("kind", t.kind.clone())] {
            if value[field].as_str().is_none_or(str::is_empty) {
                value[field] = json!(from_path);
            }
        }
        let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        if api_version != t.api_version() {
            return Status::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                t.api_version()
            ))
            .into();
        }
        if kind != t.kind {
            return Status::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                t.kind
            ))
            .into();
        }
        if !value["metadata"].is_object() {
            return invalid("metadata", "Required value".into());
        }
        if value["metadata"]["namespace"] == json!("")
            && let Some(m) = value["metadata"].as_object_mut()
        {
            m.remove("namespace");
        }
        match (&self.namespace, value["metadata"]["namespace"].as_str()) {
            (Some(path), Some(body)) if path != body => {
                return failure(
                    400,
                    "BadRequest",
                    format!(
                        "the namespace of the provided object ({body}) does not match the namespace sent on the request ({path})"
                    ),
                    None,
                );
            }
            (Some(path), _) if t.namespaced => value["metadata"]["namespace"] = json!(path),
            (None, Some(_)) if !t.namespaced => {
                if let Some(m) = value["metadata"].as_object_mut() {
                    m.remove("namespace");
                }
            }
            _ => {}
        }
        if t.namespaced && value["metadata"]["namespace"].is_null() {
            value["metadata"]["namespace"] = json!("default");
        }
        if self.validation != FieldValidation::Ignore
            && let Some(check) = t.check
        {
            let mut probe = value.clone();
            render::strip_assigned(&mut probe);
            match check(&probe) {
                Ok(unknown)
                    if self.validation == FieldValidation::Strict && !unknown.is_empty() =>
                {
                    return schema_check::strict_refusal(&unknown);
                }
                Ok(unknown) => self.warn_unknown(&unknown),
                Err(e) => return invalid(&e.field, format!("Invalid value: {}", e.message)),
            }
        }
        render::strip_assigned(&mut value);
        if managed.is_array() {
            value["metadata"]["managedFields"] = managed;
        }
        // Deletion in progress: a create drops it; an update keeps it, may not add a
        // finalizer, and removes the object once its finalizers are all gone.
        let stored = if created {
            None
        } else {
            let key = self.key(t, space, &name);
            Self::find(core, &key).map(|o| {
                (
                    o.key().clone(),
                    serde_json::from_slice::<Value>(&o.body).unwrap_or_default(),
                )
            })
        };
        match &stored {
            None => rules::prepare_create(&mut value),
            Some((_, old)) => {
                if let Err(refused) = rules::prepare_update(&t.kind, &t.group, old, &mut value) {
                    return refused.into();
                }
            }
        }
        if let Some((key, old)) = &stored
            && rules::is_deleting(old)
            && rules::may_go(&value)
        {
            let mut answer = match Self::find(core, key) {
                Some(o) => render::object(core, o),
                None => value.clone(),
            };
            rules::set_finalizers(&mut answer, &[]);
            if !self.dry_run {
                let mut plan = deletion::Plan::new(core);
                plan.finish(core, key);
                if let Err(e) = plan.commit(core) {
                    return failure(500, "InternalError", e, None);
                }
                deletion::settle(core);
            }
            return (200, answer);
        }
        if t.is_cluster() {
            value = match clusters::prepare(core, value) {
                Ok(v) => v,
                Err(a) => return a,
            };
        }
        let mut manifest = match manifest_from_value(value, space) {
            Ok(m) => m,
            Err(errors) => {
                let first = &errors[0];
                return invalid(&first.field, first.reason.clone());
            }
        };
        let key = manifest.meta.key.clone();
        let admission = Admission {
            validation: self.validation,
            dry_run: self.dry_run,
        };
        match write_manifests(core, space, std::slice::from_mut(&mut manifest), admission) {
            Ok(written) => {
                for pruned in &written.pruned {
                    self.warn_unknown(pruned);
                }
            }
            Err(WriteError::NamespacesMissing(missing)) => {
                return namespaces::not_found(missing.first().map_or("", String::as_str));
            }
            Err(WriteError::NamespaceTerminating(key, ns)) => {
                return rules::namespace_terminating(&t.plural, &t.group, &key.name, &ns).into();
            }
            Err(WriteError::Invalid(refused)) => return refused,
            Err(WriteError::Store(e)) => {
                return failure(500, "InternalError", e.to_string(), None);
            }
        }
        let code = if created { 201 } else { 200 };
        match core.log().get(&key) {
            Some(o) if !self.dry_run => (code, render::object(core, o)),
            _ => (code, manifest.value),
        }
    }

    /// The object `key` names as a client reads it (a Cluster from the inventory even
    /// when the space never changed it).
    /// Under `fieldValidation=Warn`, each unknown field becomes a warning.
    fn warn_unknown(&self, unknown: &[String]) {
        if self.validation == FieldValidation::Warn {
            self.warnings
                .borrow_mut()
                .extend(unknown.iter().map(|f| format!("unknown field {f:?}")));
        }
    }

    fn current(&self, core: &NodeCore, t: &ResourceType, key: &ObjectKey) -> Option<Value> {
        if t.is_cluster() {
            clusters::get(core, &key.space, &key.name)
        } else {
            Self::find(core, key).map(|o| render::object(core, o))
        }
    }

    pub(super) fn create(&self, core: &mut NodeCore, t: &ResourceType, space: &Space) -> Answer {
        let value = match self.body() {
            Ok(v) => v,
            Err(a) => return a,
        };
        let Some(name) = value["metadata"]["name"].as_str().map(str::to_owned) else {
            return failure(
                422,
                "Invalid",
                format!(
                    "{} is invalid: metadata.name: Required value (generateName is not supported)",
                    t.kind
                ),
                None,
            );
        };
        let mut key = self.key(t, space, &name);
        if t.namespaced && key.namespace.is_none() {
            key.parts_mut().namespace = Some(
                value["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_owned(),
            );
        }
        if let Some(current) = self.current(core, t, &key) {
            let mut exists = Status::already_exists(&t.plural, &t.group, &name);
            if rules::is_deleting(&current) {
                exists.message = format!("object is being deleted: {}", exists.message);
            }
            return exists.into();
        }
        self.store(core, t, space, value, true)
    }

    pub(super) fn update(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        let value = match self.named_body(name) {
            Ok(v) => v,
            Err(a) => return a,
        };
        let key = self.key(t, space, name);
        let Some(current) = self.current(core, t, &key) else {
            return Self::missing(t, name);
        };
        if let Some(rv) = value["metadata"]["resourceVersion"].as_str()
            && rv != current["metadata"]["resourceVersion"]
        {
            return Self::conflict(t, name);
        }
        let mut value = value;
        if value["metadata"]["managedFields"].is_null() {
            value["metadata"]["managedFields"] = current["metadata"]["managedFields"].clone();
        }
        self.store(core, t, space, value, false)
    }

    /// The `scale` subresource (`kubectl scale`): `spec.replicas` as an
    /// `autoscaling/v1` Scale, read, replaced or patched.
    pub(super) fn scale(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        let key = self.key(t, space, name);
        let Some(current) = Self::find(core, &key) else {
            return Self::missing(t, name);
        };
        let object = render::object(core, current);
        let mut scale = json!({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": name, "namespace": object["metadata"]["namespace"],
                "resourceVersion": object["metadata"]["resourceVersion"],
            },
            "spec": { "replicas": object["spec"]["replicas"].as_i64().unwrap_or(1) },
            "status": { "replicas": object["status"]["replicas"].as_i64().unwrap_or(0) },
        });
        let result = match self.method.as_str() {
            "GET" => return (200, scale),
            "PUT" => self.body().map(|b| scale = b),
            "PATCH" => {
                let patch = match self.patch_body() {
                    Ok(p) => p,
                    Err(a) => return a,
                };
                if self.content_type.contains("json-patch") {
                    patch::json_patch(&mut scale, &patch)
                        .map_err(|e| failure(422, "Invalid", e.to_string(), None))
                } else {
                    patch::merge_patch(&mut scale, &patch);
                    Ok(())
                }
            }
            m => {
                return failure(
                    405,
                    "MethodNotAllowed",
                    format!("{m} is not allowed on scale"),
                    None,
                );
            }
        };
        if let Err(a) = result {
            return a;
        }
        let Some(replicas) = scale["spec"]["replicas"].as_i64().filter(|r| *r >= 0) else {
            return failure(
                422,
                "Invalid",
                "spec.replicas: must be a number, at least 0".into(),
                None,
            );
        };
        let mut updated = object;
        updated["spec"]["replicas"] = json!(replicas);
        match self.store(core, t, space, updated, false) {
            (200, stored) => {
                scale["spec"]["replicas"] = json!(replicas);
                scale["metadata"]["resourceVersion"] =
                    stored["metadata"]["resourceVersion"].clone();
                (200, scale)
            }
            other => other,
        }
    }

    fn conflict(t: &ResourceType, name: &str) -> Answer {
        Status::conflict(&t.plural, &t.group, name).into()
    }

    /// Deletes the object as kube-apiserver does ([`deletion`]): the answer is the
    /// object, for the kinds whose registry returns it and whenever it stays (held by
    /// finalizers, or a Namespace terminating), a `Status` naming it otherwise.
    pub(super) fn delete(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        let key = self.key(t, space, name);
        let Some((key, current)) =
            Self::find(core, &key).map(|o| (o.key().clone(), render::object(core, o)))
        else {
            // A Cluster the space never changed has nothing to drop: it stays as
            // reported. An object that went with its namespace is answered as deleted.
            if (t.is_cluster() && clusters::get(core, space, name).is_some())
                || namespaces::went_with_namespace(core, &key)
            {
                return (
                    200,
                    rules::deleted(&t.plural, &t.group, name, &render::uid(&key)),
                );
            }
            return Self::missing(t, name);
        };
        if let Err(refused) = self
            .delete
            .check_preconditions(&t.plural, &t.group, &current)
        {
            return refused.into();
        }
        let dry_run = self.dry_run || self.delete.dry_run;
        let mut plan = deletion::Plan::new(core);
        let ending = plan.delete(core, &key, self.delete.propagation);
        let kept = match ending {
            Some(deletion::Ending::Kept(body)) => Some(body),
            _ => None,
        };
        if !dry_run && let Err(e) = plan.commit(core) {
            return failure(500, "InternalError", e, None);
        }
        let answer = match kept {
            // What stays is shown as it now is (for a dry run, as it would be).
            Some(body) => {
                let mut shown = match Self::find(core, &key) {
                    Some(o) if !dry_run => render::object(core, o),
                    _ => {
                        let mut v = current.clone();
                        for field in [
                            "deletionTimestamp",
                            "deletionGracePeriodSeconds",
                            "finalizers",
                        ] {
                            v["metadata"][field] = body["metadata"][field].clone();
                        }
                        v
                    }
                };
                if namespaces::is_namespace(&key) {
                    rules::namespace_view(&mut shown);
                }
                (200, shown)
            }
            None if rules::returns_deleted_object(
                &t.group,
                &t.plural,
                matches!(t.schema, crate::kube::openapi::TypeSchema::Custom(_)),
            ) =>
            {
                (200, current)
            }
            None => (
                200,
                rules::deleted(&t.plural, &t.group, name, &render::uid(&key)),
            ),
        };
        if !dry_run {
            deletion::settle(core);
        }
        answer
    }

    /// `deletecollection`: every object that matches the selectors is deleted as one
    /// delete would be (with the request's options); the answer is the list of them as
    /// they were, as kube-apiserver's.
    pub(super) fn delete_collection(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
    ) -> Answer {
        let matching = self.matching(core, t, space);
        let items: Vec<Value> = matching.iter().map(|o| render::object(core, o)).collect();
        let keys: Vec<ObjectKey> = matching.iter().map(|o| o.key().clone()).collect();
        let head = core.log().head().0;
        if !(self.dry_run || self.delete.dry_run) {
            let mut plan = deletion::Plan::new(core);
            for key in &keys {
                plan.delete(core, key, self.delete.propagation);
            }
            if let Err(e) = plan.commit(core) {
                return failure(500, "InternalError", e, None);
            }
            deletion::settle(core);
        }
        (
            200,
            render::list(&t.api_version(), &t.kind, head, items, None),
        )
    }
}
