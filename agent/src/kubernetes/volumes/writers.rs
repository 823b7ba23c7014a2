//! Stopping a claim's writers for a move's second phase, and letting them run again.

use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use strata_node::volume::claim_name;
use strata_protocol::placement_spec::VolumeClaim;

use super::{FrozenWorkload, KubeVolumes};
use crate::kubernetes::volume_objects::{self as objects, FROZEN_ANNOTATION};

/// The workload kinds whose pods a move stops: (kind, plural).
const WORKLOADS: [(&str, &str); 2] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
];

impl KubeVolumes {
    /// Stops the claim's writers: scales the workloads that mount it to 0 and holds
    /// them there, then waits until no Pod mounts it.
    pub(super) async fn stop_writers(&self, claim: &VolumeClaim) -> Result<(), String> {
        let ns = &claim.namespace;
        let mut stopped = Vec::new();
        for (kind, plural) in WORKLOADS {
            let api = self.api(ns, "apps", kind, plural);
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing the {plural} of namespace {ns}: {e}"))?;
            for w in list.items {
                let w = serde_json::to_value(&w).map_err(|e| e.to_string())?;
                if !objects::workload_mounts(&w, &claim.claim) {
                    continue;
                }
                let name = w
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                // A workload stopped by an earlier pass keeps the replicas it had then.
                let kept = w
                    .pointer(&format!(
                        "/metadata/annotations/{}",
                        FROZEN_ANNOTATION.replace('/', "~1")
                    ))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let replicas = kept.unwrap_or_else(|| {
                    w.pointer("/spec/replicas")
                        .and_then(Value::as_u64)
                        .unwrap_or(1)
                        .to_string()
                });
                self.frozen.send_modify(|f| {
                    f.insert((kind.to_owned(), ns.clone(), name.clone()));
                });
                let patch = json!({"metadata": {"annotations": {FROZEN_ANNOTATION: replicas}},
                                   "spec": {"replicas": 0}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("scaling {kind} {ns}/{name} to 0: {e}"))?;
                tracing::info!(workload = %format!("{kind} {ns}/{name}"), %replicas, claim = %claim_name(claim), "stopped a writer of the claim for the move");
                stopped.push(format!("{kind} {name}"));
            }
        }
        let pods = self.api(ns, "", "Pod", "pods");
        let mut waits = self.waits(
            &format!("claim {}", claim_name(claim)),
            "to have no Pod mounting it",
        );
        loop {
            let list = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing the pods of namespace {ns}: {e}"))?;
            let writing: Vec<String> = list
                .items
                .iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .filter(|p| objects::pod_writes(p, &claim.claim))
                .filter_map(|p| {
                    p.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect();
            if writing.is_empty() {
                break;
            }
            waits.tick().await.map_err(|e| {
                format!("{e}; still mounting it: {writing:?}; stopped: {stopped:?}")
            })?;
        }
        tracing::info!(claim = %claim_name(claim), ?stopped, "no pod writes the claim any more");
        Ok(())
    }

    /// Gives the workloads a move stopped their replicas back.
    pub(super) async fn start_writers(&self, claim: &VolumeClaim) -> Result<(), String> {
        let ns = &claim.namespace;
        // The workloads that mount this claim only: another claim's move in the same
        // namespace keeps its own stopped.
        let mut let_go: Vec<FrozenWorkload> = Vec::new();
        for (kind, plural) in WORKLOADS {
            let api = self.api(ns, "apps", kind, plural);
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing the {plural} of namespace {ns}: {e}"))?;
            for w in list.items {
                let w = serde_json::to_value(&w).map_err(|e| e.to_string())?;
                let name = w
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if !objects::workload_mounts(&w, &claim.claim) {
                    continue;
                }
                let_go.push((kind.to_owned(), ns.clone(), name.clone()));
                let Some(replicas) = w
                    .pointer(&format!(
                        "/metadata/annotations/{}",
                        FROZEN_ANNOTATION.replace('/', "~1")
                    ))
                    .and_then(Value::as_str)
                else {
                    continue;
                };
                let replicas: u64 = replicas.parse().unwrap_or(1);
                let patch = json!({"metadata": {"annotations": {FROZEN_ANNOTATION: null}},
                                   "spec": {"replicas": replicas}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("scaling {kind} {ns}/{name} back to {replicas}: {e}"))?;
                tracing::info!(workload = %format!("{kind} {ns}/{name}"), replicas, "a writer of the claim runs again");
            }
        }
        self.frozen.send_modify(|f| {
            for w in &let_go {
                f.remove(w);
            }
        });
        Ok(())
    }
}
