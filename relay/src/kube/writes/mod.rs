//! The verbs that write: create, update, patch (merge, JSON, strategic merge, server-side
//! apply), the `scale` subresource, delete and deletecollection. Every write is checked
//! and stored in one turn of the node's task, so a `resourceVersion` checked is the one
//! replaced.

pub mod admit;
pub mod batch_check;
pub mod namespaces;

use serde_json::{Value, json};
use strata_node::objects::manifest_from_value;
use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::wire::Change;

use admit::{Admission, WriteError, write_manifests};

use super::catalog::ResourceType;
use super::schema_check::FieldValidation;
use super::{Answer, ResourceOp, clusters, failure, patch, protobuf, render, schema_check, ssa};
use crate::node::core::NodeCore;

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
        let managed = value["metadata"]["managedFields"].take();
        let invalid = |field: &str, why: String| {
            failure(
                422,
                "Invalid",
                format!("{} is invalid: {field}: {why}", t.kind),
                Some(
                    json!({ "kind": t.plural, "group": t.group, "causes": [ { "reason": "FieldValueInvalid", "message": why, "field": field } ] }),
                ),
            )
        };
        let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        if kind != t.kind || api_version != t.api_version() {
            return failure(
                400,
                "BadRequest",
                format!(
                    "the API version in the data ({api_version}) and kind ({kind}) do not match the request's ({}, {})",
                    t.api_version(),
                    t.kind
                ),
                None,
            );
        }
        if !value["metadata"].is_object() {
            return invalid("metadata", "is required".into());
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
                Err(e) => return invalid("", e),
            }
        }
        render::strip_assigned(&mut value);
        if managed.is_array() {
            value["metadata"]["managedFields"] = managed;
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
        if self.current(core, t, &key).is_some() {
            return failure(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", t.plural),
                Some(Self::details(t, &name)),
            );
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
        failure(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                t.plural
            ),
            Some(Self::details(t, name)),
        )
    }

    pub(super) fn patch(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        if self.content_type.contains("apply-patch") {
            return self.server_side_apply(core, t, space, name);
        }
        let key = self.key(t, space, name);
        let Some(mut value) = self.current(core, t, &key) else {
            return Self::missing(t, name);
        };
        let revision = value["metadata"]["resourceVersion"].clone();
        let patch = match self.patch_body() {
            Ok(p) => p,
            Err(a) => return a,
        };
        let result = if self.content_type.contains("json-patch") {
            patch::json_patch(&mut value, &patch)
        } else if self.content_type.contains("strategic-merge-patch") {
            if t.check.is_none() {
                return failure(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "strategic merge patch is not supported for {}; use a JSON merge patch",
                        t.kind
                    ),
                    None,
                );
            }
            patch::strategic_merge_patch(&mut value, &patch)
        } else if self.content_type.contains("merge-patch") {
            patch::merge_patch(&mut value, &patch);
            Ok(())
        } else {
            return failure(
                415,
                "UnsupportedMediaType",
                format!("unsupported patch type {:?}", self.content_type),
                None,
            );
        };
        if let Err(e) = result {
            return failure(
                422,
                "Invalid",
                format!("the patch does not apply: {e}"),
                None,
            );
        }
        if value["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| revision != rv)
        {
            return Self::conflict(t, name);
        }
        if value["metadata"]["name"].as_str() != Some(name) {
            return failure(
                400,
                "BadRequest",
                "a patch may not change metadata.name".into(),
                None,
            );
        }
        self.store(core, t, space, value, false)
    }

    fn server_side_apply(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        let Some(manager) = self.field_manager.clone().filter(|m| !m.is_empty()) else {
            return failure(
                422,
                "Invalid",
                "fieldManager: Required value: is required for apply requests".into(),
                None,
            );
        };
        let config = match self.named_body(name) {
            Ok(v) => v,
            Err(a) => return a,
        };
        let key = self.key(t, space, name);
        let current: Option<Value> = if t.is_cluster() {
            // What the space wrote, over the labels the cluster reports.
            clusters::get(core, space, name).map(|mut v| {
                render::strip_assigned(&mut v);
                v
            })
        } else {
            Self::find(core, &key).and_then(|o| serde_json::from_slice(&o.body).ok())
        };
        match ssa::apply(current.as_ref(), &config, &manager, self.force) {
            Ok(object) => self.store(core, t, space, object, current.is_none()),
            Err(ssa::Conflicts(conflicts)) => {
                let causes: Vec<Value> = conflicts
                    .iter()
                    .map(|(m, f)| json!({ "reason": "FieldManagerConflict", "message": format!("conflict with {m:?}"), "field": f }))
                    .collect();
                let list: Vec<String> = conflicts
                    .iter()
                    .map(|(m, f)| format!("conflict with {m:?}: {f}"))
                    .collect();
                failure(
                    409,
                    "Conflict",
                    format!(
                        "Apply failed with {} conflict{}: {}",
                        conflicts.len(),
                        if conflicts.len() == 1 { "" } else { "s" },
                        list.join("; ")
                    ),
                    Some(
                        json!({ "name": name, "group": t.group, "kind": t.plural, "causes": causes }),
                    ),
                )
            }
        }
    }

    fn remove(&self, core: &mut NodeCore, keys: Vec<ObjectKey>) -> Result<(), Answer> {
        if self.dry_run || keys.is_empty() {
            return Ok(());
        }
        let keys = namespaces::with_contents(core, keys);
        core.apply(keys.into_iter().map(Change::Delete).collect())
            .map(|_| ())
            .map_err(|e| failure(500, "InternalError", e.to_string(), None))
    }

    pub(super) fn delete(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        let key = self.key(t, space, name);
        let found = Self::find(core, &key).map(|o| o.key().clone());
        if found.is_none()
            && !(t.is_cluster() && clusters::get(core, space, name).is_some())
            && !namespaces::went_with_namespace(core, &key)
        {
            return Self::missing(t, name);
        }
        // A Cluster the space never changed has nothing to drop: it stays as reported.
        if let Err(a) = self.remove(core, found.into_iter().collect()) {
            return a;
        }
        (
            200,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": Self::details(t, name),
            }),
        )
    }

    pub(super) fn delete_collection(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
    ) -> Answer {
        let keys: Vec<ObjectKey> = self
            .matching(core, t, space)
            .into_iter()
            .map(|o| o.key().clone())
            .collect();
        let head = core.log().head().0;
        if let Err(a) = self.remove(core, keys) {
            return a;
        }
        (
            200,
            render::list(&t.api_version(), &t.kind, head, Vec::new(), None),
        )
    }
}
