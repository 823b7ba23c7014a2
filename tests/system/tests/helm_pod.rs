//! A pod of the chart `deploy/helm/strata`, run as a process: `helm template` with a
//! release's values, the files of its volumes laid out under `DIR/pods/RELEASE` at the
//! container's mount paths (the chart's config Secret, the node's Secret: the rendered
//! `secret.yaml` an operator applies, or the chart's own from `secretFiles`; the state
//! volume, empty), and the container's command started there with its arguments and
//! its environment (the chart's log settings and proxy values).
//!
//! A Secret applied again reaches a running pod as kubelet brings it: every file of the
//! volume replaced whole (written beside it, renamed over it), the process not
//! restarted ([`apply_secret`]).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PodSpec, Secret};
use serde_json::Value;

use crate::common::{Proc, bin};
use crate::helm_chart::{strictly, template};

/// Writes `file` under `root`, the pod's file system, read-only as the chart mounts it;
/// replaced whole when it is there, as kubelet swaps a Secret volume's files.
fn place(root: &Path, mount: &str, file: &str, bytes: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let dir = root.join(mount.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    let next = dir.join(format!("..{file}.next"));
    std::fs::write(&next, bytes).unwrap();
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o440)).unwrap();
    std::fs::rename(&next, dir.join(file)).unwrap();
}

/// The pod's file system: `DIR/pods/RELEASE`.
fn pod_root(dir: &Path, release: &str) -> PathBuf {
    dir.join("pods").join(release)
}

/// The Secret an operator applied: the manifest at `path` (a rendered `secret.yaml`).
fn applied(path: &Path, release: &str) -> Secret {
    let manifest = std::fs::read_to_string(path).unwrap();
    strictly(&serde_saphyr::from_str(&manifest).unwrap(), release)
}

/// Where the chart mounts the node's Secret of `release` (`existingSecret`).
const SECRET_MOUNT: &str = "/etc/strata/secret";

/// Installs `release` the way the chart runs it: `helm template` with `values`, its
/// volumes laid out under `dir/pods/RELEASE`, where a Secret the chart does not make is
/// the one at `secret` (the rendered `secret.yaml`, applied before the release), and
/// its container's command started with its arguments and environment there.
pub(crate) fn install(dir: &Path, release: &str, values: &Path, secret: Option<&Path>) -> Proc {
    let docs = template(release, values);
    let workload = docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet" || d["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("{release}: no workload"));
    let pod: PodSpec =
        serde_json::from_value(workload["spec"]["template"]["spec"].clone()).unwrap();
    let root = pod_root(dir, release);
    let container = &pod.containers[0];
    for mount in container.volume_mounts.as_deref().unwrap_or_default() {
        let volume = pod
            .volumes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|v| v.name == mount.name);
        let Some(name) = volume
            .and_then(|v| v.secret.as_ref())
            .and_then(|s| s.secret_name.clone())
        else {
            // The state volume (a claim): empty, writable.
            std::fs::create_dir_all(root.join(mount.mount_path.trim_start_matches('/'))).unwrap();
            continue;
        };
        let own = docs
            .iter()
            .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == name.as_str());
        if let Some(own) = own {
            let own: Secret = strictly(own, release);
            for (file, text) in own.string_data.unwrap_or_default() {
                place(&root, &mount.mount_path, &file, text.as_bytes());
            }
            continue;
        }
        let path = secret.unwrap_or_else(|| panic!("{release}: Secret {name} was not applied"));
        let rendered = applied(path, release);
        assert_eq!(
            Some(name.as_str()),
            rendered.metadata.name.as_deref(),
            "{release}: existingSecret"
        );
        assert_eq!(
            mount.mount_path, SECRET_MOUNT,
            "{release}: the Secret's mount"
        );
        for (file, bytes) in rendered.data.unwrap_or_default() {
            place(&root, &mount.mount_path, &file, &bytes.0);
        }
    }
    let command = container.command.as_deref().unwrap();
    let program = bin(Path::new(&command[0])
        .file_name()
        .unwrap()
        .to_str()
        .unwrap());
    let args: Vec<String> = container
        .args
        .as_deref()
        .unwrap()
        .iter()
        .map(|a| match a.strip_prefix('/') {
            Some(path) => root.join(path).display().to_string(),
            None => a.clone(),
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env: Vec<(String, String)> = container
        .env
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    Proc::spawn_with_env(dir, release, &program, &args, &env)
}

/// Installs the topology's node `node` from what `render --helm` wrote in `dir`: its
/// Secret applied, then its release from its values.
pub(crate) fn install_rendered(dir: &Path, node: &str) -> Proc {
    install(
        dir,
        node,
        &strata_topology::files::node_helm_values(dir, node),
        Some(&strata_topology::files::node_helm_secret(dir, node)),
    )
}

/// `kubectl apply -f DIR/nodes/NODE/secret.yaml` again, and kubelet bringing the
/// Secret to the running pod: every file of its volume replaced, no restart.
pub(crate) fn apply_secret(dir: &Path, node: &str) {
    let rendered = applied(&strata_topology::files::node_helm_secret(dir, node), node);
    let root = pod_root(dir, node);
    for (file, bytes) in rendered.data.unwrap_or_default() {
        place(&root, SECRET_MOUNT, &file, &bytes.0);
    }
}

/// The node's rendered Helm values.
pub(crate) fn values(dir: &Path, node: &str) -> Value {
    let text =
        std::fs::read_to_string(strata_topology::files::node_helm_values(dir, node)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// A port of the node's rendered values (`quic`, `api`, `metrics`).
pub(crate) fn port(dir: &Path, node: &str, which: &str) -> u16 {
    let v = values(dir, node);
    let port = v["ports"][which]
        .as_u64()
        .unwrap_or_else(|| panic!("{node}: no ports.{which} in {v}"));
    u16::try_from(port).unwrap()
}
