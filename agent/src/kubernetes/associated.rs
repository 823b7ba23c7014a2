//! Associated objects of a workload: Deployment → ReplicaSets → Pods, and
//! StatefulSet / DaemonSet / Job → Pods, summarized (counts by phase and readiness,
//! restarts, the most recent failure) rather than shipped one by one.

use std::collections::{BTreeMap, BTreeSet};

use kube::Api;
use kube::api::{DynamicObject, ListParams};
use kube::discovery::ApiResource;
use serde_json::Value;

use super::health::container_failure;

/// What a workload's Pods (and ReplicaSets) look like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Associated {
    /// ReplicaSets owned by a Deployment (`None` for other kinds).
    pub replica_sets: Option<i64>,
    /// Pods owned by the workload.
    pub pods: i64,
    /// Pods whose `Ready` condition is `True`.
    pub ready: i64,
    /// Pods per phase (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub phases: BTreeMap<String, i64>,
    /// Container restarts, summed over the Pods.
    pub restarts: i64,
    /// The failure of the most recently created failing Pod (`pod: reason`).
    pub latest_failure: Option<String>,
}

impl Associated {
    /// As status numbers (`pods`, `pods.ready`, `pods.running`, `pods.restarts`, ...),
    /// which the center sums across clusters.
    pub fn numbers(&self) -> BTreeMap<String, i64> {
        let mut n = BTreeMap::from([
            ("pods".to_owned(), self.pods),
            ("pods.ready".to_owned(), self.ready),
            ("pods.restarts".to_owned(), self.restarts),
        ]);
        for (phase, count) in &self.phases {
            n.insert(format!("pods.{}", phase.to_lowercase()), *count);
        }
        if let Some(rs) = self.replica_sets {
            n.insert("replicaSets".to_owned(), rs);
        }
        n
    }
}

/// Whether `object` lists `uid` among its owners.
pub fn owned_by(object: &Value, uids: &BTreeSet<String>) -> bool {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|o| o["uid"].as_str().is_some_and(|u| uids.contains(u)))
        })
}

fn uid(v: &Value) -> Option<String> {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Summarizes the Pods among `pods` owned by one of `owners`.
pub fn summarize_pods(owners: &BTreeSet<String>, pods: &[Value]) -> Associated {
    let mut s = Associated::default();
    let mut failures: Vec<(String, String)> = Vec::new();
    for pod in pods.iter().filter(|p| owned_by(p, owners)) {
        s.pods += 1;
        let phase = pod
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Unknown");
        *s.phases.entry(phase.to_owned()).or_default() += 1;
        let ready = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
        s.ready += i64::from(ready);
        s.restarts += pod
            .pointer("/status/containerStatuses")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["restartCount"].as_i64())
                    .sum::<i64>()
            })
            .unwrap_or(0);
        let failure = if phase == "Failed" {
            pod.pointer("/status/reason")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| container_failure(pod))
        } else {
            container_failure(pod)
        };
        if let Some(why) = failure {
            let created = pod
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let name = pod
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("?");
            failures.push((created, format!("pod {name}: {why}")));
        }
    }
    // RFC 3339 timestamps in UTC sort as strings.
    s.latest_failure = failures.into_iter().max().map(|(_, why)| why);
    s
}

/// Whether a kind has associated Pods worth summarizing.
pub fn has_pods(kind: &str) -> bool {
    matches!(kind, "Deployment" | "StatefulSet" | "DaemonSet" | "Job")
}

fn core(kind: &str, plural: &str, group: &str) -> ApiResource {
    let api_version = if group.is_empty() {
        "v1".to_owned()
    } else {
        format!("{group}/v1")
    };
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn list(
    client: &kube::Client,
    ns: &str,
    ar: &ApiResource,
) -> Result<Vec<Value>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null))
        .collect())
}

/// The ReplicaSets and Pods of one namespace.
#[derive(Debug, Default)]
pub struct NamespaceLists {
    /// ReplicaSets (listed only when a Deployment is there).
    pub replica_sets: Vec<Value>,
    /// Pods.
    pub pods: Vec<Value>,
}

/// Lists a namespace's Pods, and its ReplicaSets when `replica_sets` (two LIST
/// requests at most, whatever the number of workloads there).
pub async fn list_namespace(
    client: &kube::Client,
    ns: &str,
    replica_sets: bool,
) -> Result<NamespaceLists, kube::Error> {
    let replica_sets = if replica_sets {
        list(client, ns, &core("ReplicaSet", "replicasets", "apps")).await?
    } else {
        Vec::new()
    };
    let pods = list(client, ns, &core("Pod", "pods", "")).await?;
    Ok(NamespaceLists { replica_sets, pods })
}

/// Summarizes a workload's associated objects from its namespace's lists.
pub fn summarize(kind: &str, live: &Value, lists: &NamespaceLists) -> Associated {
    let Some(owner) = uid(live) else {
        return Associated::default();
    };
    let mut owners = BTreeSet::from([owner]);
    let mut replica_sets = None;
    if kind == "Deployment" {
        let sets: Vec<&Value> = lists
            .replica_sets
            .iter()
            .filter(|rs| owned_by(rs, &owners))
            .collect();
        replica_sets = Some(i64::try_from(sets.len()).unwrap_or(i64::MAX));
        owners = sets.into_iter().filter_map(uid).collect();
    }
    let mut s = summarize_pods(&owners, &lists.pods);
    s.replica_sets = replica_sets;
    s
}
