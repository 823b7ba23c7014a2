//! From a topology file to a fleet through the Helm chart, as deploy/README.md tells an
//! operator: `relay topology certs` and `relay topology render --helm` write each node's
//! Helm values and Secret manifest; `helm template` renders the chart with each node's
//! values; the test lays out the files each pod would see (the chart's config Secret,
//! the rendered Secret, the state volume, at the chart's mount paths) under a directory
//! of its own per pod and starts the pod's command with the pod's arguments (`relay
//! serve`, `agent run`), as processes over QUIC on loopback.
//!
//! Three tiers: the root `center`, the relay `eu-west`, and below it two "real"
//! clusters (fake API servers over HTTP, reached through kubeconfigs that render puts
//! in their agents' Secrets) and a simulated one. Covers: every cluster reports at the
//! root, reachable, each with the backend its configuration names; an app applied at
//! the root reaches both fake API servers; every pod's readiness probe (`/readyz` on
//! the port its values give the chart) answers 200.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PodSpec, Secret};
use serde_json::Value;
use strata_test_tools::fake_apiserver::FakeApiServer;

use crate::common::{POS_APP, Proc, bin, relay_cli, try_http_get, write};
use crate::helm_chart::{strictly, template};
use crate::real_clusters::{cluster, eventually, inventory, kubeconfig};

const NODES: &[&str] = &["center", "eu-west", "lab-1", "lab-2", "sim-1"];

/// Runs `relay ARGS`, requiring success.
fn relay(args: &[&str]) {
    let out = std::process::Command::new(bin("relay"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "relay {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The node's rendered Helm values.
fn values(dir: &Path, node: &str) -> Value {
    let text =
        std::fs::read_to_string(strata_topology::files::node_helm_values(dir, node)).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

/// Writes `file` under `root`, the pod's file system, read-only as the chart mounts it.
fn place(root: &Path, mount: &str, file: &str, bytes: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let dir = root.join(mount.trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o440)).unwrap();
}

/// Installs `node` the way the chart runs it: `helm template` with its rendered
/// values, the files of its volumes laid out under `dir/pods/NODE` at the container's
/// mount paths (the chart's config Secret, the Secret of the rendered secret.yaml, the
/// state volume), and its container's command started with its arguments there.
fn install(dir: &Path, node: &str) -> Proc {
    let docs = template(node, &strata_topology::files::node_helm_values(dir, node));
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{node}: no {kind}/{name}"))
    };
    let config: Secret = strictly(find("Secret", &format!("{node}-config")), node);
    let config = config.string_data.unwrap();
    let manifest =
        std::fs::read_to_string(strata_topology::files::node_helm_secret(dir, node)).unwrap();
    let rendered: Secret = strictly(&serde_saphyr::from_str(&manifest).unwrap(), node);
    let workload = docs
        .iter()
        .find(|d| d["kind"] == "StatefulSet" || d["kind"] == "Deployment")
        .unwrap();
    let pod: PodSpec =
        serde_json::from_value(workload["spec"]["template"]["spec"].clone()).unwrap();
    let root = dir.join("pods").join(node);
    let container = &pod.containers[0];
    for mount in container.volume_mounts.as_deref().unwrap_or_default() {
        let volume = pod
            .volumes
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|v| v.name == mount.name);
        let secret = volume
            .and_then(|v| v.secret.as_ref())
            .and_then(|s| s.secret_name.clone());
        match secret {
            Some(name) if name == format!("{node}-config") => {
                for (file, text) in &config {
                    place(&root, &mount.mount_path, file, text.as_bytes());
                }
            }
            Some(name) => {
                assert_eq!(
                    Some(name.as_str()),
                    rendered.metadata.name.as_deref(),
                    "{node}: existingSecret"
                );
                for (file, bytes) in rendered.data.as_ref().unwrap() {
                    place(&root, &mount.mount_path, file, &bytes.0);
                }
            }
            // The state volume (a claim): empty, writable.
            None => std::fs::create_dir_all(root.join(mount.mount_path.trim_start_matches('/')))
                .unwrap(),
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
    Proc::spawn(dir, node, &program, &args)
}

#[test]
fn a_fleet_installed_from_the_rendered_helm_values_connects_and_reports_every_cluster_at_the_root()
{
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let fakes = [
        rt.block_on(FakeApiServer::start()),
        rt.block_on(FakeApiServer::start()),
    ];
    let kubeconfigs: Vec<PathBuf> = (1..=2)
        .map(|i| dir.join(format!("lab-{i}.kubeconfig")))
        .collect();
    for (path, fake) in kubeconfigs.iter().zip(&fakes) {
        write(path, &kubeconfig(fake));
    }
    let topology = dir.join("fleet.yaml");
    write(
        &topology,
        &format!(
            "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: {{ name: fleet }}
spec:
  root: {{ name: center, listen: 127.0.0.1:0, api: 127.0.0.1:0, metrics: 127.0.0.1:0 }}
  relays:
    - {{ name: eu-west, parent: center, listen: 127.0.0.1:0, metrics: 127.0.0.1:0, labels: {{ region: eu-west }} }}
  clusters:
    - {{ name: lab-1, parent: eu-west, labels: {{ role: pos }}, metrics: 127.0.0.1:0, kubernetes: {{ kubeconfig: {}, context: lab }} }}
    - {{ name: lab-2, parent: eu-west, labels: {{ role: pos }}, metrics: 127.0.0.1:0, kubernetes: {{ kubeconfig: {}, context: lab }} }}
    - {{ name: sim-1, parent: eu-west, labels: {{ role: pos }}, metrics: 127.0.0.1:0, simulated: {{ readyDelayMs: 100 }} }}
",
            kubeconfigs[0].display(),
            kubeconfigs[1].display()
        ),
    );
    write(
        &strata_topology::files::api_tokens(&dir),
        "s3cret user=ops\n",
    );
    let (file, out) = (topology.display().to_string(), dir.display().to_string());
    relay(&["topology", "certs", &file, "-o", &out]);
    relay(&["topology", "render", &file, "-o", &out, "--helm"]);

    let mut procs = Vec::new();
    for node in NODES {
        procs.push(install(&dir, node));
    }
    let api_port = u16::try_from(values(&dir, "center")["ports"]["api"].as_u64().unwrap()).unwrap();

    eventually(
        "the root knows every cluster, reachable",
        &dir,
        NODES,
        || {
            let items = inventory(&rt, &dir, api_port);
            ["lab-1", "lab-2", "sim-1"]
                .iter()
                .all(|n| cluster(&items, n).is_some_and(|c| c["reachable"] == true))
        },
    );
    let items = inventory(&rt, &dir, api_port);
    for (name, backend) in [
        ("lab-1", "kubernetes"),
        ("lab-2", "kubernetes"),
        ("sim-1", "simulated"),
    ] {
        let c = cluster(&items, name).unwrap();
        assert_eq!(c["properties"]["strata.dev/backend"], backend, "{c}");
        assert_eq!(c["labels"]["region"], "eu-west", "{c}");
    }

    // An app applied at the root reaches both real clusters' API servers.
    let app = dir.join("app.yaml");
    write(&app, POS_APP);
    let (ok, _, err) = relay_cli(&dir, api_port, &["apply", "-f", &app.display().to_string()]);
    assert!(ok, "{err}");
    for fake in &fakes {
        eventually(
            "the ConfigMap arrives in both fake API servers",
            &dir,
            NODES,
            || {
                rt.block_on(fake.get("", "configmaps", Some("pos"), "pos-settings"))
                    .is_some_and(|cm| cm["data"]["currency"] == "EUR")
            },
        );
    }

    // Every pod's readiness probe, on the port its values give the chart.
    for node in NODES {
        let port = u16::try_from(values(&dir, node)["ports"]["metrics"].as_u64().unwrap()).unwrap();
        eventually(&format!("{node} is ready"), &dir, NODES, || {
            try_http_get(port, "/readyz").is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
        });
    }
    for p in procs.into_iter().rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status}");
    }
}
