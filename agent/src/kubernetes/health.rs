//! Health of an object from its own status: built-in rules for the common kinds, and a
//! generic rule for any kind with `status.conditions` (Ready / Available) and
//! `status.observedGeneration`. Pure: takes the live object as JSON.
//!
//! A status whose `observedGeneration` is behind `metadata.generation` is stale: the
//! controller has not looked at the latest spec yet, so the object is `Progressing`
//! whatever the rest of the status says.

use std::collections::BTreeMap;

use serde_json::Value;
use strata_protocol::model::Health;

/// What the rules say about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    /// The health.
    pub health: Health,
    /// Why, when it is not plainly fine.
    pub message: Option<String>,
    /// `status.observedGeneration`, when the kind reports one.
    pub observed_generation: Option<i64>,
    /// Numeric status fields worth summarizing (`readyReplicas`, ...).
    pub numbers: BTreeMap<String, i64>,
}

fn int(v: &Value, pointer: &str) -> Option<i64> {
    v.pointer(pointer).and_then(Value::as_i64)
}

fn condition<'a>(v: &'a Value, kind: &str) -> Option<&'a Value> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(kind))
}

fn condition_is(v: &Value, kind: &str, status: &str) -> bool {
    condition(v, kind).is_some_and(|c| c["status"].as_str() == Some(status))
}

fn condition_message(v: &Value, kind: &str) -> Option<String> {
    let c = condition(v, kind)?;
    let reason = c["reason"].as_str().unwrap_or_default();
    let message = c["message"].as_str().unwrap_or_default();
    Some(match (reason.is_empty(), message.is_empty()) {
        (false, false) => format!("{reason}: {message}"),
        (false, true) => reason.to_owned(),
        _ => message.to_owned(),
    })
}

fn numbers(v: &Value, fields: &[&str]) -> BTreeMap<String, i64> {
    fields
        .iter()
        .filter_map(|f| Some(((*f).to_owned(), int(v, &format!("/status/{f}"))?)))
        .collect()
}

fn verdict(health: Health, message: impl Into<Option<String>>) -> (Health, Option<String>) {
    (health, message.into())
}

/// Assesses a live object of kind `kind`.
pub fn assess(kind: &str, live: &Value) -> Assessment {
    let generation = int(live, "/metadata/generation");
    let observed_generation = int(live, "/status/observedGeneration");
    let (fields, (health, message)): (&[&str], _) = match kind {
        "Deployment" => (
            &[
                "replicas",
                "readyReplicas",
                "updatedReplicas",
                "availableReplicas",
                "unavailableReplicas",
            ],
            deployment(live),
        ),
        "StatefulSet" => (
            &[
                "replicas",
                "readyReplicas",
                "currentReplicas",
                "updatedReplicas",
                "availableReplicas",
            ],
            statefulset(live),
        ),
        "DaemonSet" => (
            &[
                "desiredNumberScheduled",
                "currentNumberScheduled",
                "numberReady",
                "updatedNumberScheduled",
                "numberAvailable",
                "numberUnavailable",
                "numberMisscheduled",
            ],
            daemonset(live),
        ),
        "ReplicaSet" => (
            &["replicas", "readyReplicas", "availableReplicas"],
            replicaset(live),
        ),
        "Job" => (&["active", "succeeded", "failed", "ready"], job(live)),
        "Pod" => (&[], pod(live)),
        "Service" => (&[], service(live)),
        "PersistentVolumeClaim" => (&[], pvc(live)),
        "CustomResourceDefinition" => (&[], crd(live)),
        "Namespace" => (&[], namespace(live)),
        _ => (&[], generic(live)),
    };
    // A controller that has not observed the latest spec speaks of an older one.
    let stale = matches!((generation, observed_generation), (Some(g), Some(o)) if o < g);
    let (health, message) = if stale && health != Health::Failed {
        (
            Health::Progressing,
            Some(format!(
                "waiting for the controller to observe generation {} (observed {})",
                generation.unwrap_or_default(),
                observed_generation.unwrap_or_default()
            )),
        )
    } else {
        (health, message)
    };
    Assessment {
        health,
        message,
        observed_generation,
        numbers: numbers(live, fields),
    }
}

fn deployment(v: &Value) -> (Health, Option<String>) {
    if condition_is(v, "Progressing", "False")
        && condition(v, "Progressing").is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded")
    {
        return verdict(Health::Failed, condition_message(v, "Progressing"));
    }
    if condition_is(v, "ReplicaFailure", "True") {
        return verdict(Health::Degraded, condition_message(v, "ReplicaFailure"));
    }
    let want = int(v, "/spec/replicas").unwrap_or(1);
    let updated = int(v, "/status/updatedReplicas").unwrap_or(0);
    let available = int(v, "/status/availableReplicas").unwrap_or(0);
    let total = int(v, "/status/replicas").unwrap_or(0);
    if updated < want {
        return verdict(
            Health::Progressing,
            format!("{updated} of {want} replicas updated"),
        );
    }
    if total > updated {
        return verdict(
            Health::Progressing,
            format!("{} old replicas pending termination", total - updated),
        );
    }
    if available < want {
        let h = if condition_is(v, "Available", "False") {
            Health::Degraded
        } else {
            Health::Progressing
        };
        return verdict(h, format!("{available} of {want} replicas available"));
    }
    verdict(Health::Available, None)
}

fn statefulset(v: &Value) -> (Health, Option<String>) {
    let want = int(v, "/spec/replicas").unwrap_or(1);
    let ready = int(v, "/status/readyReplicas").unwrap_or(0);
    let updated = int(v, "/status/updatedReplicas").unwrap_or(0);
    let partition = int(v, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0);
    let rolling = v
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        != Some("OnDelete")
        && v.pointer("/status/updateRevision") != v.pointer("/status/currentRevision")
        && partition == 0;
    if updated < want - partition || rolling {
        return verdict(
            Health::Progressing,
            format!("{updated} of {want} replicas updated"),
        );
    }
    if ready < want {
        return verdict(
            Health::Progressing,
            format!("{ready} of {want} replicas ready"),
        );
    }
    verdict(Health::Available, None)
}

fn daemonset(v: &Value) -> (Health, Option<String>) {
    let want = int(v, "/status/desiredNumberScheduled").unwrap_or(0);
    let updated = int(v, "/status/updatedNumberScheduled").unwrap_or(0);
    let available = int(v, "/status/numberAvailable").unwrap_or(0);
    if updated < want {
        return verdict(
            Health::Progressing,
            format!("{updated} of {want} pods updated"),
        );
    }
    if available < want {
        return verdict(
            Health::Progressing,
            format!("{available} of {want} pods available"),
        );
    }
    verdict(Health::Available, None)
}

fn replicaset(v: &Value) -> (Health, Option<String>) {
    if condition_is(v, "ReplicaFailure", "True") {
        return verdict(Health::Degraded, condition_message(v, "ReplicaFailure"));
    }
    let want = int(v, "/spec/replicas").unwrap_or(1);
    let available = int(v, "/status/availableReplicas").unwrap_or(0);
    if available < want {
        return verdict(
            Health::Progressing,
            format!("{available} of {want} replicas available"),
        );
    }
    verdict(Health::Available, None)
}

fn job(v: &Value) -> (Health, Option<String>) {
    if condition_is(v, "Failed", "True") {
        return verdict(Health::Failed, condition_message(v, "Failed"));
    }
    if condition_is(v, "Complete", "True") {
        return verdict(Health::Available, None);
    }
    if condition_is(v, "Suspended", "True") {
        return verdict(Health::Degraded, condition_message(v, "Suspended"));
    }
    verdict(Health::Progressing, Some("job running".to_owned()))
}

/// The reason a container is failing, if one is (waiting in a back-off, or terminated
/// with an error).
pub(crate) fn container_failure(pod: &Value) -> Option<String> {
    let statuses = ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|f| pod.pointer(&format!("/status/{f}"))?.as_array())
        .flatten();
    for c in statuses {
        let name = c["name"].as_str().unwrap_or("?");
        if let Some(reason) = c.pointer("/state/waiting/reason").and_then(Value::as_str)
            && reason != "ContainerCreating"
            && reason != "PodInitializing"
        {
            return Some(format!("container {name}: {reason}"));
        }
        if let Some(t) = c.pointer("/state/terminated")
            && t["exitCode"].as_i64().is_some_and(|e| e != 0)
        {
            let reason = t["reason"].as_str().unwrap_or("Error");
            return Some(format!("container {name}: {reason}"));
        }
    }
    None
}

fn pod(v: &Value) -> (Health, Option<String>) {
    match v.pointer("/status/phase").and_then(Value::as_str) {
        Some("Succeeded") => verdict(Health::Available, None),
        Some("Failed") => verdict(
            Health::Failed,
            v.pointer("/status/reason")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| container_failure(v)),
        ),
        Some("Running") if condition_is(v, "Ready", "True") => verdict(Health::Available, None),
        _ => match container_failure(v) {
            Some(why) => verdict(Health::Degraded, why),
            None => verdict(Health::Progressing, condition_message(v, "Ready")),
        },
    }
}

fn service(v: &Value) -> (Health, Option<String>) {
    if v.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer") {
        let has_ingress = v
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .is_some_and(|i| !i.is_empty());
        if !has_ingress {
            return verdict(
                Health::Progressing,
                Some("waiting for the load balancer's address".to_owned()),
            );
        }
    }
    verdict(Health::Available, None)
}

fn pvc(v: &Value) -> (Health, Option<String>) {
    match v.pointer("/status/phase").and_then(Value::as_str) {
        Some("Bound") => verdict(Health::Available, None),
        Some("Lost") => verdict(Health::Failed, Some("the claim lost its volume".to_owned())),
        other => verdict(
            Health::Progressing,
            Some(format!("claim is {}", other.unwrap_or("Pending"))),
        ),
    }
}

/// Whether a CRD's `Established` condition is `True`.
pub fn crd_established(v: &Value) -> bool {
    condition_is(v, "Established", "True")
}

fn crd(v: &Value) -> (Health, Option<String>) {
    if condition_is(v, "NamesAccepted", "False") {
        return verdict(Health::Failed, condition_message(v, "NamesAccepted"));
    }
    if crd_established(v) {
        verdict(Health::Available, None)
    } else {
        verdict(Health::Progressing, Some("not Established yet".to_owned()))
    }
}

fn namespace(v: &Value) -> (Health, Option<String>) {
    match v.pointer("/status/phase").and_then(Value::as_str) {
        Some("Terminating") => verdict(Health::Degraded, Some("Terminating".to_owned())),
        _ => verdict(Health::Available, None),
    }
}

fn generic(v: &Value) -> (Health, Option<String>) {
    for kind in ["Ready", "Available"] {
        if condition(v, kind).is_some() {
            return if condition_is(v, kind, "True") {
                verdict(Health::Available, None)
            } else if condition_is(v, kind, "False") {
                verdict(Health::Degraded, condition_message(v, kind))
            } else {
                verdict(Health::Progressing, condition_message(v, kind))
            };
        }
    }
    if condition_is(v, "Failed", "True") {
        return verdict(Health::Failed, condition_message(v, "Failed"));
    }
    // No status to speak of (ConfigMap, Secret, RBAC...): applied is all there is.
    verdict(Health::Available, None)
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
