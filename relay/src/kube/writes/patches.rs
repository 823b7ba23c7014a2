//! The Kubernetes API's PATCH: JSON merge, JSON patch and strategic merge patches,
//! and server-side apply (field managers and their conflicts), each ending in the one
//! store step every write goes through.

use serde_json::{Value, json};
use strata_protocol::model::Space;

use crate::kube::catalog::ResourceType;
use crate::kube::{Answer, ResourceOp, clusters, failure, patch, render, ssa};
use crate::tier::core::NodeCore;

impl ResourceOp {
    pub(in crate::kube) fn patch(
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
}
