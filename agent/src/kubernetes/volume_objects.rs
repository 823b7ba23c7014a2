//! The objects a volume move makes on a real cluster, and what it reads from others:
//! pure functions of manifests (no client), so they are tested without an API server.
//! The requests that make them and the waits are in [`super::volumes`].

use serde_json::{Value, json};
use strata_protocol::placement_spec::VolumeClaim;

/// The label on every object a move makes (snapshot, claim, pod): what an operator
/// lists to see them, and what tells a mover pod from the app's pods.
pub const MOVER_LABEL: &str = "strata.dev/mover";

/// The annotation a stopped workload carries: its replicas before the move stopped it.
pub const FROZEN_ANNOTATION: &str = "strata.dev/frozen-replicas";

/// The VolumeSnapshot API's group.
pub const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

/// The names of one stream's objects: `strata-mover-<claim>-<request>-<n>`, within the
/// 63 characters of a DNS label. `n` counts the agent's streams: the passes of one copy
/// share their request number, and a pass's pod must not take the name of the last
/// pass's pod while that one is still going away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoverNames {
    /// The snapshot, the claim made from it, and the pod share this name.
    pub name: String,
}

impl MoverNames {
    /// The names for `claim` on the stream numbered `request`, the agent's `n`th.
    pub fn new(claim: &VolumeClaim, request: u64, n: u64) -> Self {
        let claim: String = claim
            .claim
            .chars()
            .take(30)
            .collect::<String>()
            .trim_end_matches(['-', '.'])
            .to_owned();
        MoverNames {
            name: format!(
                "strata-mover-{claim}-{:x}-{}",
                request & 0xffff_ffff,
                n % 1_000_000
            ),
        }
    }
}

/// Whether the claim is mounted as a block device (`spec.volumeMode: Block`).
pub fn is_block(claim: &Value) -> bool {
    claim.pointer("/spec/volumeMode").and_then(Value::as_str) == Some("Block")
}

/// A VolumeSnapshot of `claim` (class `class`, else the cluster's default).
pub fn snapshot(names: &MoverNames, claim: &VolumeClaim, class: Option<&str>) -> Value {
    let mut spec = json!({ "source": { "persistentVolumeClaimName": claim.claim } });
    if let Some(class) = class {
        spec["volumeSnapshotClassName"] = json!(class);
    }
    json!({
        "apiVersion": format!("{SNAPSHOT_GROUP}/v1"),
        "kind": "VolumeSnapshot",
        "metadata": { "name": names.name, "namespace": claim.namespace,
                      "labels": { MOVER_LABEL: "snapshot" } },
        "spec": spec,
    })
}

/// Whether a VolumeSnapshot can be read (`status.readyToUse`), or why it never will
/// (`status.error.message`).
pub fn snapshot_ready(snapshot: &Value) -> Result<bool, String> {
    if let Some(message) = snapshot
        .pointer("/status/error/message")
        .and_then(Value::as_str)
    {
        return Err(message.to_owned());
    }
    Ok(snapshot.pointer("/status/readyToUse") == Some(&json!(true)))
}

/// A claim restored from the snapshot, with the source claim's class, mode and size
/// (the snapshot's `status.restoreSize` when larger).
pub fn claim_from_snapshot(names: &MoverNames, source: &Value, snapshot: &Value) -> Value {
    let spec = source.get("spec").cloned().unwrap_or_else(|| json!({}));
    let size = snapshot
        .pointer("/status/restoreSize")
        .or_else(|| spec.pointer("/resources/requests/storage"))
        .cloned()
        .unwrap_or_else(|| json!("1Gi"));
    let mut new = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": { "requests": { "storage": size } },
        "dataSource": { "apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": names.name },
    });
    for field in ["storageClassName", "volumeMode"] {
        if let Some(v) = spec.get(field) {
            new[field] = v.clone();
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": { "name": names.name, "namespace": source.pointer("/metadata/namespace"),
                      "labels": { MOVER_LABEL: "claim" } },
        "spec": new,
    })
}

/// What a mover pod is started with.
#[derive(Debug, Clone)]
pub struct MoverPod<'a> {
    /// Its image (holding `/usr/local/bin/agent`).
    pub image: &'a str,
    /// The port it listens on.
    pub port: u16,
    /// The token the agent sends first.
    pub token: &'a str,
    /// The claim it mounts.
    pub claim: &'a str,
    /// Whether the claim is a block device.
    pub block: bool,
    /// Read-only (reading a snapshot's claim) or read-write (writing the new claim).
    pub read_only: bool,
}

/// Where a mover pod mounts its volume.
const MOUNT: &str = "/volume";

/// The mover pod: `agent mover` on the claim, as root (it reads every file of the
/// volume and writes them with their owners), with an `emptyDir` for a Filesystem
/// volume's archive while reading.
pub fn mover_pod(names: &MoverNames, namespace: &str, pod: &MoverPod<'_>) -> Value {
    let mode = if pod.block { "block" } else { "filesystem" };
    let mut container = json!({
        "name": "mover",
        "image": pod.image,
        "command": ["/usr/local/bin/agent"],
        "args": ["mover", "--listen", format!("0.0.0.0:{}", pod.port), "--path", MOUNT,
                 "--mode", mode, "--scratch", "/scratch"],
        "env": [ { "name": crate::mover::TOKEN_ENV, "value": pod.token } ],
        "ports": [ { "name": "mover", "containerPort": pod.port } ],
        "securityContext": { "runAsUser": 0, "allowPrivilegeEscalation": false },
        "volumeMounts": [ { "name": "scratch", "mountPath": "/scratch" } ],
    });
    if pod.block {
        container["volumeDevices"] = json!([{ "name": "volume", "devicePath": MOUNT }]);
    } else if let Some(mounts) = container["volumeMounts"].as_array_mut() {
        mounts.push(json!({ "name": "volume", "mountPath": MOUNT, "readOnly": pod.read_only }));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": names.name, "namespace": namespace,
                      "labels": { MOVER_LABEL: if pod.read_only { "reader" } else { "writer" } } },
        "spec": {
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": [
                { "name": "volume", "persistentVolumeClaim":
                    { "claimName": pod.claim, "readOnly": pod.read_only } },
                { "name": "scratch", "emptyDir": {} },
            ],
        },
    })
}

/// Where a pod stands for a mover: its IP once Running, or why it will not run.
pub fn pod_ready(pod: &Value) -> Result<Option<String>, String> {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    let ip = pod.pointer("/status/podIP").and_then(Value::as_str);
    match (phase, ip) {
        ("Running", Some(ip)) if !ip.is_empty() => Ok(Some(ip.to_owned())),
        ("Failed" | "Succeeded", _) => {
            let why = pod
                .pointer("/status/message")
                .or_else(|| pod.pointer("/status/reason"))
                .and_then(Value::as_str)
                .unwrap_or("no reason given");
            Err(format!("it ended ({phase}): {why}"))
        }
        _ => Ok(None),
    }
}

/// A pod's phase and the first waiting reason of its containers, for an error.
pub fn pod_state(pod: &Value) -> String {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    let waiting = pod
        .pointer("/status/containerStatuses/0/state/waiting/reason")
        .and_then(Value::as_str);
    match waiting {
        Some(w) => format!("{phase}, {w}"),
        None => phase.to_owned(),
    }
}

/// Whether a pod template (or a pod's spec) mounts the claim named `claim`.
pub fn spec_mounts(spec: &Value, claim: &str) -> bool {
    spec.get("volumes")
        .and_then(Value::as_array)
        .is_some_and(|vs| {
            vs.iter().any(|v| {
                v.pointer("/persistentVolumeClaim/claimName")
                    .and_then(Value::as_str)
                    == Some(claim)
            })
        })
}

/// Whether a Deployment or StatefulSet's pod template mounts `claim`.
pub fn workload_mounts(workload: &Value, claim: &str) -> bool {
    workload
        .pointer("/spec/template/spec")
        .is_some_and(|s| spec_mounts(s, claim))
}

/// Whether a pod is one of the claim's writers: it mounts the claim, is not a mover,
/// and has not ended.
pub fn pod_writes(pod: &Value, claim: &str) -> bool {
    let ended = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    let mover = pod
        .pointer("/metadata/labels")
        .and_then(|l| l.get(MOVER_LABEL))
        .is_some();
    !ended && !mover && pod.get("spec").is_some_and(|s| spec_mounts(s, claim))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> VolumeClaim {
        VolumeClaim {
            claim: "data".into(),
            namespace: "shop".into(),
        }
    }

    #[test]
    fn names_fit_a_dns_label() {
        let long = VolumeClaim {
            claim: "a".repeat(80),
            namespace: "shop".into(),
        };
        let n = MoverNames::new(&long, u64::MAX, u64::MAX);
        assert!(n.name.len() <= 63, "{}", n.name);
        assert_eq!(
            MoverNames::new(&claim(), 26, 3).name,
            "strata-mover-data-1a-3"
        );
    }

    #[test]
    fn a_restored_claim_keeps_the_source_class_mode_and_snapshot_size() {
        let names = MoverNames::new(&claim(), 1, 1);
        let source = json!({"metadata": {"name": "data", "namespace": "shop"},
            "spec": {"storageClassName": "fast", "volumeMode": "Block",
                     "resources": {"requests": {"storage": "1Gi"}}}});
        let snap = json!({"status": {"readyToUse": true, "restoreSize": "2Gi"}});
        let c = claim_from_snapshot(&names, &source, &snap);
        assert_eq!(c["spec"]["storageClassName"], "fast");
        assert_eq!(c["spec"]["volumeMode"], "Block");
        assert_eq!(c["spec"]["resources"]["requests"]["storage"], "2Gi");
        assert_eq!(c["spec"]["dataSource"]["name"], names.name);
        assert_eq!(snapshot_ready(&snap), Ok(true));
        let failed = json!({"status": {"error": {"message": "no CSI driver"}}});
        assert_eq!(snapshot_ready(&failed), Err("no CSI driver".into()));
    }

    #[test]
    fn a_reading_mover_mounts_read_only_and_a_block_claim_as_a_device() {
        let names = MoverNames::new(&claim(), 1, 1);
        let pod = |block, read_only| {
            mover_pod(
                &names,
                "shop",
                &MoverPod {
                    image: "img",
                    port: 7700,
                    token: "t",
                    claim: "data",
                    block,
                    read_only,
                },
            )
        };
        let fs = pod(false, true);
        assert_eq!(
            fs["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"],
            true
        );
        assert_eq!(
            fs["spec"]["containers"][0]["volumeMounts"][1]["readOnly"],
            true
        );
        assert!(!pod_writes(&fs, "data"), "a mover is no writer");
        let block = pod(true, false);
        assert_eq!(
            block["spec"]["containers"][0]["volumeDevices"][0]["devicePath"],
            "/volume"
        );
        assert_eq!(block["spec"]["containers"][0]["args"][6], "block");
    }

    #[test]
    fn workloads_and_pods_that_mount_the_claim_are_found() {
        let deploy = json!({"spec": {"template": {"spec": {"volumes": [
            {"name": "x", "persistentVolumeClaim": {"claimName": "data"}}]}}}});
        assert!(workload_mounts(&deploy, "data"));
        assert!(!workload_mounts(&deploy, "other"));
        let pod = json!({"metadata": {"name": "p"}, "spec": {"volumes": [
            {"name": "x", "persistentVolumeClaim": {"claimName": "data"}}]},
            "status": {"phase": "Running"}});
        assert!(pod_writes(&pod, "data"));
        let mut done = pod.clone();
        done["status"]["phase"] = json!("Succeeded");
        assert!(!pod_writes(&done, "data"));
        assert_eq!(pod_ready(&pod), Ok(None));
        let mut up = pod;
        up["status"]["podIP"] = json!("10.0.0.7");
        assert_eq!(pod_ready(&up), Ok(Some("10.0.0.7".into())));
    }
}
