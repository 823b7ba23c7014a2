//! `relay cordon|uncordon|drain CLUSTER`: a cluster's lifecycle at the root, as taints
//! on its `Cluster` object in a space (see [`crate::kube::clusters`]).
//!
//! * `cordon`: a `NoSchedule` taint (`strata.dev/cordoned`): placements choose the
//!   cluster no more, what runs there stays.
//! * `drain`: a `NoExecute` taint (`strata.dev/drained`): every placement that does not
//!   tolerate it moves off, make-before-break (the cluster keeps each workload until
//!   its new clusters run it); `--wait` returns once no placement is routed there.
//! * `uncordon`: removes both.
//!
//! Placements that tolerate the taint (Kubernetes' tolerations) stay, for their
//! `tolerationSeconds` if they give one.

use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::client::{ApiClient, RequestError};
use crate::cmd::api::Refused;

/// The taint `relay cordon` sets.
pub const CORDONED: &str = "strata.dev/cordoned";
/// The taint `relay drain` sets.
pub const DRAINED: &str = "strata.dev/drained";

/// What to do to a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Choose it no more; keep what runs there.
    Cordon,
    /// Move everything off, make-before-break.
    Drain,
    /// Undo both.
    Uncordon,
}

/// Why a lifecycle command failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The API could not be reached or did not answer.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The API refused.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// Others kept changing the cluster meanwhile.
    #[error("cluster {cluster:?} kept changing while it was being updated; try again")]
    Busy {
        /// The cluster.
        cluster: String,
    },
    /// `--wait` ran out.
    #[error("cluster {cluster:?}: placements still routed there after {waited:?}: {placements}")]
    Timeout {
        /// The cluster.
        cluster: String,
        /// How long it waited.
        waited: Duration,
        /// The placements still there.
        placements: String,
    },
}

fn cluster_path(space: &str, cluster: &str) -> String {
    format!("/spaces/{space}/apis/strata.dev/v1alpha1/clusters/{cluster}")
}

/// Sets or removes the taints for `action` on `cluster` in `space` (read, change,
/// write back with its `resourceVersion`, again if someone else wrote meanwhile).
/// Returns a line saying what changed.
pub async fn run(
    client: &ApiClient,
    space: &str,
    cluster: &str,
    action: Action,
) -> Result<String, LifecycleError> {
    let path = cluster_path(space, cluster);
    for _ in 0..5 {
        let (status, mut object) = client.request(Method::GET, &path, None).await?;
        if status != StatusCode::OK {
            return Err(refused(
                format!("reading cluster {cluster:?}"),
                status,
                &object,
            ));
        }
        let mut taints: Vec<Value> = object["spec"]["taints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let before = taints.len();
        taints.retain(|t| t["key"] != CORDONED && t["key"] != DRAINED);
        match action {
            Action::Cordon => taints.push(json!({ "key": CORDONED, "effect": "NoSchedule" })),
            Action::Drain => taints.push(json!({ "key": DRAINED, "effect": "NoExecute" })),
            Action::Uncordon => {}
        }
        // Keep the stamp of a taint that was already there.
        if let Some(old) = object["spec"]["taints"].as_array() {
            for t in &mut taints {
                if let Some(o) = old
                    .iter()
                    .find(|o| o["key"] == t["key"] && o["effect"] == t["effect"])
                {
                    *t = o.clone();
                }
            }
        }
        if action == Action::Uncordon && taints.len() == before {
            return Ok(format!(
                "cluster {cluster} was neither cordoned nor drained"
            ));
        }
        object["spec"]["taints"] = json!(taints);
        if let Some(o) = object.as_object_mut() {
            o.remove("status");
        }
        let body = serde_json::to_vec(&object).unwrap_or_default();
        let (status, answer) = client.request(Method::PUT, &path, Some(body)).await?;
        match status {
            StatusCode::OK | StatusCode::CREATED => {
                return Ok(match action {
                    Action::Cordon => format!(
                        "cluster {cluster} cordoned: placements choose it no more; what runs there stays"
                    ),
                    Action::Drain => format!(
                        "cluster {cluster} drained: its workloads move off, each once its new clusters run it"
                    ),
                    Action::Uncordon => format!("cluster {cluster} uncordoned"),
                });
            }
            StatusCode::CONFLICT => continue,
            _ => {
                return Err(refused(
                    format!("updating cluster {cluster:?}"),
                    status,
                    &answer,
                ));
            }
        }
    }
    Err(LifecycleError::Busy {
        cluster: cluster.to_owned(),
    })
}

/// Waits until no placement of `space` is routed to `cluster` (chosen or moving off),
/// polling the placements' `status.decisions`. Returns how long it took.
pub async fn wait_drained(
    client: &ApiClient,
    space: &str,
    cluster: &str,
    limit: Duration,
) -> Result<Duration, LifecycleError> {
    let start = tokio::time::Instant::now();
    let path = format!("/spaces/{space}/apis/strata.dev/v1alpha1/placements");
    loop {
        let (status, list) = client.request(Method::GET, &path, None).await?;
        if status != StatusCode::OK {
            return Err(refused("listing placements".into(), status, &list));
        }
        let still: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                let d = &p["status"]["decisions"];
                let has = |field: &str| {
                    d[field]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|c| c == cluster))
                };
                has("clusters") || has("retiring")
            })
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        if still.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= limit {
            return Err(LifecycleError::Timeout {
                cluster: cluster.to_owned(),
                waited: limit,
                placements: still.join(", "),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn refused(what: String, status: StatusCode, v: &Value) -> LifecycleError {
    Refused::answer(what, status, v).into()
}
