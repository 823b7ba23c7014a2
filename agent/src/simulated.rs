//! A simulated cluster: a small Kubernetes in memory, for demos, tests and benchmarks.
//! It is a fake and says so: nothing runs, but objects move through the health states a
//! real cluster would show.
//!
//! * A `Deployment`, `StatefulSet` or `DaemonSet` is `Progressing` for `ready_delay`
//!   after each new revision, then `Available`, with `readyReplicas`, `updatedReplicas`
//!   and `availableReplicas` = `spec.replicas`, as a Deployment whose rollout finished.
//! * A `Job` runs for `ready_delay` (`active: 1`), then completes: `succeeded` =
//!   `spec.completions` (1 by default), the `SuccessCriteriaMet` and `Complete`
//!   conditions true, as the Job controller writes them; it is `Available` then.
//! * Any other kind is `Available` as soon as it is applied, with an empty `.status`;
//!   a Service of type LoadBalancer gets the cluster's address in
//!   `status.loadBalancer.ingress` ([`simulated_address`]), and its nodes have it too.
//! * An object labelled `strata.dev/simulate-failure: <reason>`, or any object when the
//!   cluster itself is configured to fail, reports `Failed` with that reason.
//! * A `PersistentVolumeClaim` gets a byte store of its requested size
//!   ([`crate::sim_volumes`]), which tests write and read and moves copy.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_protocol::model::{Body, ContentHash, Health, Object, ObjectKey, Revision, Status};
use strata_protocol::time::{Instant, UnixMillis};

use crate::backend::{BackendError, ClusterBackend};
use crate::sim_volumes::{ClaimBoard, SimVolumes, new_store, requested_size};
use crate::simulated_api::{PodBoard, SimPod, SimulatedApi};

/// The first container's image of a workload's manifest, if it names one.
fn image_of(body: &serde_json::Value) -> String {
    body.pointer("/spec/template/spec/containers/0/image")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("simulated")
        .to_owned()
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
    /// A workload's first container's image, read once when applied: every apply of a
    /// workload publishes the Pods of all of them, one per replica.
    image: String,
    /// A Job: it runs for `ready_delay`, then completes.
    job: bool,
    /// A workload's `spec.replicas`; a Job's `spec.completions`.
    replicas: i64,
    failure: Option<String>,
    reported: Option<Health>,
}

/// A fake cluster that behaves like a small Kubernetes.
#[derive(Debug)]
pub struct SimulatedCluster {
    config: SimulatedConfig,
    objects: BTreeMap<ObjectKey, Held>,
    /// Something was applied or deleted since the last status scan. Without it, a scan
    /// is needed only once a workload's readiness is due: the agent asks after every
    /// event, and scanning every held object each time dominated a reconnect storm.
    changed: bool,
    /// The Pods its workloads run, for its small Kubernetes API (the debug tunnel).
    pods: PodBoard,
    /// The cluster's address: its load balancers' and its node's.
    address: Option<String>,
    /// The claims applied, and their bytes.
    claims: ClaimBoard,
    volumes: SimVolumes,
}

/// The property a simulated cluster's address may be given in.
pub const ADDRESS_PROPERTY: &str = "simulated.address";

/// A simulated cluster's address: its `simulated.address` property, else a loopback
/// address derived from its name (`127.a.b.c`, the same for a name every time), so
/// that tests can tell clusters apart by the address DNS gives.
pub fn simulated_address(cluster: &strata_protocol::model::Cluster) -> String {
    if let Some(a) = cluster.properties.get(ADDRESS_PROPERTY) {
        return a.clone();
    }
    // FNV-1a: stable across builds and platforms.
    let mut h: u32 = 0x811c_9dc5;
    for b in cluster.name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    let [a, b, c, _] = h.to_be_bytes();
    format!("127.{}.{}.{}", a % 254 + 1, b, c % 254 + 1)
}

impl Default for SimulatedCluster {
    fn default() -> Self {
        SimulatedCluster::new(SimulatedConfig::default())
    }
}

impl SimulatedCluster {
    /// An empty cluster.
    pub fn new(config: SimulatedConfig) -> Self {
        let (claims, volumes) = new_store();
        SimulatedCluster {
            config,
            objects: BTreeMap::new(),
            changed: false,
            pods: PodBoard::default(),
            address: None,
            claims,
            volumes,
        }
    }

    /// The cluster's small Kubernetes API (Pods, their logs, events, its claims'
    /// bytes), which answers the debug tunnel; it sees the Pods of what is applied
    /// from then on.
    pub fn api(&self) -> SimulatedApi {
        SimulatedApi::new(self.pods.subscribe()).with_volumes(self.volumes.clone())
    }

    /// The bytes of the cluster's claims.
    pub fn volumes(&self) -> SimVolumes {
        self.volumes.clone()
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
                    image: h.image.clone(),
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
        } else if (held.workload || held.job) && now < held.applied + self.config.ready_delay {
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
        let job = object.key().kind == "Job" && object.key().group == "batch";
        if object.key().kind == strata_protocol::placement_spec::CLAIM_KIND
            && object.key().group.is_empty()
            && let Some(namespace) = object.key().namespace.clone()
        {
            let claim = strata_protocol::placement_spec::VolumeClaim {
                claim: object.key().name.clone(),
                namespace,
            };
            self.claims.declare(claim, requested_size(&body));
        }
        let replicas = body
            .pointer(if job {
                "/spec/completions"
            } else {
                "/spec/replicas"
            })
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
                image: if workload {
                    image_of(&body)
                } else {
                    String::new()
                },
                job,
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
            let (numbers, mut status) = simulated_status(held, health, at);
            if let Some(address) = &self.address
                && is_load_balancer(&key, &held.body)
            {
                status["loadBalancer"] = serde_json::json!({ "ingress": [ { "ip": address } ] });
            }
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

    fn set_cluster(&mut self, cluster: &strata_protocol::model::Cluster) {
        self.address = Some(simulated_address(cluster));
    }

    fn node_addresses(&self) -> Vec<String> {
        self.address.iter().cloned().collect()
    }

    fn manifest(&self, key: &ObjectKey) -> Option<Vec<u8>> {
        self.objects.get(key).map(|h| h.body.to_vec())
    }

    fn next_change(&self) -> Option<Instant> {
        self.objects
            .values()
            .filter(|h| {
                (h.workload || h.job)
                    && h.failure.is_none()
                    && h.reported != Some(Health::Available)
            })
            .map(|h| h.applied + self.config.ready_delay)
            .min()
    }
}

/// Whether `key` is a Service of type LoadBalancer.
fn is_load_balancer(key: &ObjectKey, body: &[u8]) -> bool {
    key.group.is_empty()
        && key.kind == "Service"
        && serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                v.pointer("/spec/type")
                    .and_then(serde_json::Value::as_str)
                    .map(|t| t == "LoadBalancer")
            })
            .unwrap_or(false)
}

/// A condition as Kubernetes' controllers write them.
fn condition(kind: &str, yes: bool, reason: &str, message: &str, at: &str) -> serde_json::Value {
    serde_json::json!({
        "type": kind,
        "status": if yes { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "lastUpdateTime": at,
    })
}

/// What a real cluster's controllers would write in the object's `.status` (and its
/// numeric fields), in the kind's own shape: a workload's replicas and conditions, a
/// Job's counts and completion; other kinds `{}`.
fn simulated_status(
    held: &Held,
    health: Health,
    at: UnixMillis,
) -> (BTreeMap<String, i64>, serde_json::Value) {
    let when = at.rfc3339();
    let started = held.applied_at.rfc3339();
    let done = health == Health::Available;
    if held.job {
        let mut status = serde_json::json!({ "startTime": started });
        let mut numbers = BTreeMap::new();
        if let Some(why) = &held.failure {
            status["failed"] = serde_json::json!(1);
            status["conditions"] = serde_json::json!([
                condition("FailureTarget", true, "BackoffLimitExceeded", why, &when),
                condition("Failed", true, "BackoffLimitExceeded", why, &when),
            ]);
            numbers.insert("failed".to_owned(), 1);
        } else if done {
            status["succeeded"] = serde_json::json!(held.replicas);
            status["ready"] = serde_json::json!(0);
            status["completionTime"] = serde_json::json!(when);
            status["conditions"] = serde_json::json!([
                condition(
                    "SuccessCriteriaMet",
                    true,
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    &when
                ),
                condition(
                    "Complete",
                    true,
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    &when
                ),
            ]);
            numbers.insert("succeeded".to_owned(), held.replicas);
        } else {
            status["active"] = serde_json::json!(1);
            status["ready"] = serde_json::json!(1);
            numbers.insert("active".to_owned(), 1);
            numbers.insert("ready".to_owned(), 1);
        }
        return (numbers, status);
    }
    if !held.workload {
        return (BTreeMap::new(), serde_json::json!({}));
    }
    let ready = if done { held.replicas } else { 0 };
    let numbers = BTreeMap::from([
        ("replicas".to_owned(), held.replicas),
        ("readyReplicas".to_owned(), ready),
        ("updatedReplicas".to_owned(), ready),
        ("availableReplicas".to_owned(), ready),
    ]);
    let progressing = if held.failure.is_some() {
        condition(
            "Progressing",
            false,
            "ProgressDeadlineExceeded",
            "ReplicaSet has timed out progressing.",
            &when,
        )
    } else if done {
        condition(
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            "ReplicaSet has successfully progressed.",
            &when,
        )
    } else {
        condition(
            "Progressing",
            true,
            "ReplicaSetUpdated",
            "ReplicaSet is progressing.",
            &when,
        )
    };
    let status = serde_json::json!({
        "observedGeneration": 1,
        "replicas": held.replicas,
        "readyReplicas": ready,
        "updatedReplicas": ready,
        "availableReplicas": ready,
        "conditions": [
            condition(
                "Available",
                done,
                if done { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                if done { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." },
                &when,
            ),
            progressing,
        ],
    });
    (numbers, status)
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
    fn a_job_runs_then_completes() {
        let mut c = SimulatedCluster::new(SimulatedConfig::default());
        let mut job = deployment(1, &[]);
        job.meta = std::sync::Arc::new(ObjectMeta {
            key: ObjectKey::new(ObjectKeyParts {
                space: Space::default_space(),
                group: "batch".into(),
                version: "v1".into(),
                kind: "Job".into(),
                namespace: Some("pos".into()),
                name: "migrate".into(),
            }),
            labels: Default::default(),
        });
        job.body = br#"{"spec":{"completions":2}}"#.as_slice().into();
        c.apply(at(0), UnixMillis(0), &job).unwrap();
        let s = c.poll_status(at(1), UnixMillis(1));
        assert_eq!(s[0].1.health, Health::Progressing);
        assert_eq!(s[0].1.numbers["active"], 1);
        assert_eq!(c.next_change(), Some(at(500)));
        let s = c.poll_status(at(500), UnixMillis(500));
        assert_eq!(s[0].1.health, Health::Available);
        assert_eq!(s[0].1.numbers["succeeded"], 2);
        let status: serde_json::Value = serde_json::from_slice(&s[0].1.status).unwrap();
        assert_eq!(status["conditions"][1]["type"], "Complete");
        assert_eq!(status["conditions"][1]["status"], "True");
    }

    #[test]
    fn a_workloads_pods_run_its_image_and_follow_a_new_one() {
        let mut c = SimulatedCluster::new(SimulatedConfig::default());
        let pods = c.pods.subscribe();
        let mut web = deployment(1, &[]);
        web.body = br#"{"spec":{"replicas":2,"template":{"spec":{"containers":[{"image":"nginx:1.27"}]}}}}"#
            .as_slice()
            .into();
        c.apply(at(0), UnixMillis(0), &web).unwrap();
        let images = |p: &tokio::sync::watch::Receiver<std::sync::Arc<Vec<SimPod>>>| {
            p.borrow()
                .iter()
                .map(|pod| pod.image.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(images(&pods), ["nginx:1.27", "nginx:1.27"]);
        web.revision = Revision(2);
        web.body = br#"{"spec":{"replicas":1,"template":{"spec":{"containers":[{"image":"nginx:1.28"}]}}}}"#
            .as_slice()
            .into();
        c.apply(at(1), UnixMillis(1), &web).unwrap();
        assert_eq!(images(&pods), ["nginx:1.28"]);
        let mut bare = deployment(1, &[]);
        let mut key = web.key().clone();
        key.parts_mut().name = "bare".into();
        bare.meta = std::sync::Arc::new(ObjectMeta {
            key,
            labels: Default::default(),
        });
        c.apply(at(2), UnixMillis(2), &bare).unwrap();
        assert_eq!(
            images(&pods).iter().filter(|i| *i == "simulated").count(),
            3,
            "a workload that names no image runs `simulated`"
        );
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
