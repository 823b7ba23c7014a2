//! A simulated cluster: a small Kubernetes in memory, for demos, tests and benchmarks.
//! It is a fake and says so: nothing runs, but objects move through the health states a
//! real cluster would show.
//!
//! * A `Deployment`, `StatefulSet` or `DaemonSet` is `Progressing` for `ready_delay`
//!   after each new revision, then `Available`, with `readyReplicas`, `updatedReplicas`
//!   and `availableReplicas` = `spec.replicas`, as a Deployment whose rollout finished.
//! * Any other kind is `Available` as soon as it is applied.
//! * An object labelled `strata.dev/simulate-failure: <reason>`, or any object when the
//!   cluster itself is configured to fail, reports `Failed` with that reason.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_protocol::model::{Body, ContentHash, Health, Object, ObjectKey, Revision, Status};
use strata_protocol::time::{Instant, UnixMillis};

use crate::backend::{BackendError, ClusterBackend};
use crate::simulated_api::{PodBoard, SimPod, SimulatedApi};

/// The first container's image of a workload's manifest, if it names one.
fn image_of(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/spec/template/spec/containers/0/image")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "simulated".into())
}

/// The label that makes a simulated object fail.
pub const FAILURE_LABEL: &str = "strata.dev/simulate-failure";

/// How a simulated cluster behaves.
#[derive(Debug, Clone)]
pub struct SimulatedConfig {
    /// How long workloads take to become available.
    pub ready_delay: Duration,
    /// When set, every object fails with this reason.
    pub fail_all: Option<String>,
}

impl Default for SimulatedConfig {
    fn default() -> Self {
        SimulatedConfig {
            ready_delay: Duration::from_millis(500),
            fail_all: None,
        }
    }
}

#[derive(Debug, Clone)]
struct Held {
    revision: Revision,
    /// The manifest applied (rendered for this cluster when customized).
    body: Body,
    hash: ContentHash,
    applied: Instant,
    /// When it was applied, on the wall clock (its Pods' creation time).
    applied_at: UnixMillis,
    workload: bool,
    replicas: i64,
    failure: Option<String>,
    reported: Option<Health>,
}

/// A fake cluster that behaves like a small Kubernetes.
#[derive(Debug, Default)]
pub struct SimulatedCluster {
    config: SimulatedConfig,
    objects: BTreeMap<ObjectKey, Held>,
    /// Something was applied or deleted since the last status scan. Without it, a scan
    /// is needed only once a workload's readiness is due: the agent asks after every
    /// event, and scanning every held object each time dominated a reconnect storm.
    changed: bool,
    /// The Pods its workloads run, for its small Kubernetes API (the debug tunnel).
    pods: PodBoard,
}

impl SimulatedCluster {
    /// An empty cluster.
    pub fn new(config: SimulatedConfig) -> Self {
        SimulatedCluster {
            config,
            objects: BTreeMap::new(),
            changed: false,
            pods: PodBoard::default(),
        }
    }

    /// The cluster's small Kubernetes API (Pods, their logs, events), which answers the
    /// debug tunnel; it sees the Pods of what is applied from then on.
    pub fn api(&self) -> SimulatedApi {
        SimulatedApi::new(self.pods.subscribe())
    }

    /// Publishes the Pods the held workloads run.
    fn publish_pods(&self) {
        let pods = self
            .objects
            .iter()
            .filter(|(_, h)| h.workload)
            .flat_map(|(k, h)| {
                (0..h.replicas.max(0)).map(move |i| SimPod {
                    namespace: k.namespace.clone().unwrap_or_else(|| "default".into()),
                    name: format!(
                        "{}-{:02x}{:02x}{:02x}{:02x}-{i}",
                        k.name, h.hash.0[0], h.hash.0[1], h.hash.0[2], h.hash.0[3]
                    ),
                    owner: format!("{}/{}", k.kind, k.name),
                    created: h.applied_at,
                    image: image_of(&h.body),
                    failure: h.failure.clone(),
                })
            })
            .collect();
        self.pods.publish(pods);
    }

    /// Objects the cluster holds, with the revision applied.
    pub fn objects(&self) -> impl Iterator<Item = (&ObjectKey, Revision)> {
        self.objects.iter().map(|(k, h)| (k, h.revision))
    }

    fn health(&self, held: &Held, now: Instant) -> Health {
        if held.failure.is_some() {
            Health::Failed
        } else if held.workload && now < held.applied + self.config.ready_delay {
            Health::Progressing
        } else {
            Health::Available
        }
    }
}

impl ClusterBackend for SimulatedCluster {
    fn apply(&mut self, now: Instant, at: UnixMillis, object: &Object) -> Result<(), BackendError> {
        let body: serde_json::Value =
            serde_json::from_slice(&object.body).map_err(|e| BackendError {
                key: Box::new(object.key().clone()),
                reason: format!("manifest is not JSON: {e}"),
            })?;
        if self
            .objects
            .get(object.key())
            .is_some_and(|h| h.revision == object.revision && h.hash == object.hash)
        {
            return Ok(());
        }
        let workload = matches!(
            object.key().kind.as_str(),
            "Deployment" | "StatefulSet" | "DaemonSet"
        );
        let replicas = body
            .pointer("/spec/replicas")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(1);
        let failure = object
            .meta
            .labels
            .get(FAILURE_LABEL)
            .cloned()
            .or_else(|| self.config.fail_all.clone());
        self.objects.insert(
            object.key().clone(),
            Held {
                revision: object.revision,
                body: object.body.clone(),
                hash: object.hash,
                applied: now,
                applied_at: at,
                workload,
                replicas,
                failure,
                reported: None,
            },
        );
        self.changed = true;
        if workload {
            self.publish_pods();
        }
        Ok(())
    }

    fn delete(&mut self, _now: Instant, key: &ObjectKey) -> Result<(), BackendError> {
        if self.objects.remove(key).is_some_and(|h| h.workload) {
            self.publish_pods();
        }
        self.changed = true;
        Ok(())
    }

    fn poll_status(&mut self, now: Instant, at: UnixMillis) -> Vec<(ObjectKey, Status)> {
        if !std::mem::take(&mut self.changed) && self.next_change().is_none_or(|t| t > now) {
            return Vec::new();
        }
        let mut changed = Vec::new();
        let healths: Vec<(ObjectKey, Health)> = self
            .objects
            .iter()
            .map(|(k, h)| (k.clone(), self.health(h, now)))
            .collect();
        for (key, health) in healths {
            let Some(held) = self.objects.get_mut(&key) else {
                continue;
            };
            if held.reported == Some(health) {
                continue;
            }
            held.reported = Some(health);
            let ready = if health == Health::Available {
                held.replicas
            } else {
                0
            };
            let numbers = if held.workload {
                BTreeMap::from([
                    ("replicas".to_owned(), held.replicas),
                    ("readyReplicas".to_owned(), ready),
                    ("updatedReplicas".to_owned(), ready),
                    ("availableReplicas".to_owned(), ready),
                ])
            } else {
                BTreeMap::new()
            };
            let status = serde_json::json!({
                "observedGeneration": 1,
                "replicas": held.replicas,
                "readyReplicas": ready,
                "updatedReplicas": ready,
                "availableReplicas": ready,
            });
            changed.push((
                key,
                Status {
                    health,
                    revision: held.revision,
                    observed_generation: Some(1),
                    message: held.failure.clone(),
                    numbers,
                    status: serde_json::to_vec(&status).unwrap_or_default(),
                    observed_at: at,
                },
            ));
        }
        changed
    }

    fn manifest(&self, key: &ObjectKey) -> Option<Vec<u8>> {
        self.objects.get(key).map(|h| h.body.to_vec())
    }

    fn next_change(&self) -> Option<Instant> {
        self.objects
            .values()
            .filter(|h| h.workload && h.failure.is_none() && h.reported != Some(Health::Available))
            .map(|h| h.applied + self.config.ready_delay)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use strata_protocol::model::{ObjectKeyParts, ObjectMeta, Space};

    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    fn deployment(rev: u64, labels: &[(&str, &str)]) -> Object {
        Object {
            meta: std::sync::Arc::new(ObjectMeta {
                key: ObjectKey::new(ObjectKeyParts {
                    space: Space::default_space(),
                    group: "apps".into(),
                    version: "v1".into(),
                    kind: "Deployment".into(),
                    namespace: Some("pos".into()),
                    name: "pos".into(),
                }),
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            }),
            revision: Revision(rev),
            hash: ContentHash::default(),
            body: br#"{"spec":{"replicas":3}}"#.as_slice().into(),
        }
    }

    #[test]
    fn a_deployment_progresses_then_becomes_available() {
        let mut c = SimulatedCluster::new(SimulatedConfig::default());
        c.apply(at(0), UnixMillis(0), &deployment(1, &[])).unwrap();
        let s = c.poll_status(at(1), UnixMillis(1));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1.health, Health::Progressing);
        assert_eq!(s[0].1.numbers["readyReplicas"], 0);
        assert_eq!(c.next_change(), Some(at(500)));
        assert!(
            c.poll_status(at(499), UnixMillis(499)).is_empty(),
            "nothing changed"
        );
        let s = c.poll_status(at(500), UnixMillis(500));
        assert_eq!(s[0].1.health, Health::Available);
        assert_eq!(s[0].1.numbers["readyReplicas"], 3);
        assert_eq!(c.next_change(), None);
    }

    #[test]
    fn a_labelled_object_fails_with_its_reason() {
        let mut c = SimulatedCluster::new(SimulatedConfig::default());
        c.apply(
            at(0),
            UnixMillis(0),
            &deployment(1, &[(FAILURE_LABEL, "ImagePullBackOff")]),
        )
        .unwrap();
        let s = c.poll_status(at(1), UnixMillis(1));
        assert_eq!(s[0].1.health, Health::Failed);
        assert_eq!(s[0].1.message.as_deref(), Some("ImagePullBackOff"));
    }
}
