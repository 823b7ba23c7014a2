//! The Helm chart `deploy/helm/strata`: `helm lint --strict` passes with each values file
//! in `ci/`, and every manifest `helm template` renders deserializes strictly into its
//! `k8s-openapi` type - a field the type does not know, or a value of the wrong type,
//! is a failure (typed round trip compared with the rendered document) - carries
//! Helm's recommended labels, and the configuration it mounts is accepted by the
//! binaries' own loaders. The values schema refuses what the chart does not know.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodSpec, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde_json::Value;

/// The chart's directory.
pub(crate) fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/strata")
}

/// Helm, installed into the target directory by `.ci/install-kube-clients` the first
/// time a test needs it.
fn helm() -> PathBuf {
    strata_test_tools::kube_clients().join("helm")
}

/// Runs `helm ARGS`: its success, standard output and standard error.
fn try_run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn run(args: &[&str]) -> String {
    let (ok, out, err) = try_run(args);
    assert!(ok, "helm {args:?}:\n{out}{err}");
    out
}

/// Deserializes `doc` as `T`, serializes it back and requires the same document:
/// whatever `T` dropped (an unknown field) or changed (a wrongly typed value) fails.
pub(crate) fn strictly<T: serde::de::DeserializeOwned + serde::Serialize>(
    doc: &Value,
    what: &str,
) -> T {
    let typed: T =
        serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n{doc:#}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back, doc,
        "{what}: the typed round trip differs (unknown or mistyped fields)"
    );
    typed
}

/// Loads a rendered node configuration with the binary's own loader.
fn accepts_config(role: &str, what: &str, text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    match role {
        "relay" => {
            strata_relay::config::NodeConfig::load(&path)
                .unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
        }
        _ => {
            strata_agent::config::AgentConfig::load(&path)
                .unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
        }
    }
}

/// The documents `helm template RELEASE CHART -n strata-system -f VALUES` renders.
pub(crate) fn template(release: &str, values: &Path) -> Vec<Value> {
    let chart = chart();
    let values = values.display().to_string();
    let args = [
        "template",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        "strata-system",
        "-f",
        &values,
    ];
    run(&args)
        .split("\n---\n")
        .map(|doc| {
            doc.lines()
                .filter(|l| !l.starts_with("# Source:"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|body| !body.trim().is_empty() && body.trim() != "---")
        .map(|body| serde_saphyr::from_str(&body).unwrap_or_else(|e| panic!("{e}\n{body}")))
        .collect()
}

/// The pod's spec of a rendered StatefulSet or Deployment, checked.
fn pod_spec(v: &Value, what: &str) -> PodSpec {
    match v["kind"].as_str() {
        Some("StatefulSet") => strictly::<StatefulSet>(v, what).spec.template,
        _ => strictly::<Deployment>(v, what).spec.template,
    }
    .spec
    .unwrap()
}

/// Every document rendered with `ci/VALUES`, linted and checked; returns the kinds and
/// names seen and the documents.
fn render_and_check(values: &str) -> (Vec<String>, Vec<Value>) {
    let chart = chart();
    let path = chart.join("ci").join(values);
    run(&[
        "lint",
        "--strict",
        chart.to_str().unwrap(),
        "-f",
        path.to_str().unwrap(),
    ]);
    let docs = template("rel", &path);
    let role = docs
        .iter()
        .find_map(|d| d["metadata"]["labels"]["app.kubernetes.io/component"].as_str())
        .unwrap()
        .to_owned();
    let mut seen = Vec::new();
    for v in &docs {
        let kind = v["kind"].as_str().unwrap().to_owned();
        let name = v["metadata"]["name"].as_str().unwrap().to_owned();
        let what = format!("{values} {kind}/{name}");
        let labels = &v["metadata"]["labels"];
        for l in ["name", "instance", "version", "component", "managed-by"] {
            assert!(
                labels[format!("app.kubernetes.io/{l}")].is_string(),
                "{what}: no app.kubernetes.io/{l}: {labels}"
            );
        }
        match kind.as_str() {
            "Secret" => {
                let s: Secret = strictly(v, &what);
                if name.ends_with("-config") {
                    accepts_config(&role, &what, &s.string_data.unwrap()["config.yaml"]);
                }
            }
            "Service" => {
                let s: Service = strictly(v, &what);
                // Children reach a relay over QUIC (UDP) and TLS (TCP).
                let ports = s.spec.unwrap().ports.unwrap();
                for (port, protocol) in [("quic", "UDP"), ("tls", "TCP")] {
                    assert!(
                        ports.iter().any(|p| p.name.as_deref() == Some(port)
                            && p.protocol.as_deref() == Some(protocol)),
                        "{what}: no {port} port over {protocol}"
                    );
                }
            }
            "ServiceAccount" => drop(strictly::<ServiceAccount>(v, &what)),
            "PersistentVolumeClaim" => drop(strictly::<PersistentVolumeClaim>(v, &what)),
            "ClusterRole" => drop(strictly::<ClusterRole>(v, &what)),
            "ClusterRoleBinding" => drop(strictly::<ClusterRoleBinding>(v, &what)),
            "PodDisruptionBudget" => drop(strictly::<PodDisruptionBudget>(v, &what)),
            "StatefulSet" | "Deployment" => {
                let pod = pod_spec(v, &what);
                let c = &pod.containers[0];
                let probe = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
                    p.as_ref()
                        .unwrap()
                        .http_get
                        .as_ref()
                        .unwrap()
                        .path
                        .clone()
                        .unwrap()
                };
                assert_eq!(
                    (probe(&c.liveness_probe), probe(&c.readiness_probe)),
                    ("/healthz".into(), "/readyz".into()),
                    "{what}"
                );
                assert_eq!(
                    pod.security_context.unwrap().run_as_user,
                    Some(65532),
                    "{what}"
                );
                let program = format!("/usr/local/bin/{role}");
                assert_eq!(c.command.as_deref(), Some(&[program][..]), "{what}");
            }
            other => panic!("{what}: the test does not know the kind {other}"),
        }
        seen.push(format!("{kind}/{name}"));
    }
    (seen, docs)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name}"))
}

#[test]
fn every_rendered_manifest_is_a_strict_kubernetes_object_and_every_config_loads() {
    let mut every: Vec<String> = std::fs::read_dir(chart().join("ci"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    every.sort();
    assert!(every.len() >= 5, "{every:?}");
    for values in &every {
        render_and_check(values);
    }

    let (root, docs) = render_and_check("root-values.yaml");
    assert_eq!(
        root,
        ["Secret/rel-config", "Service/rel", "StatefulSet/rel"]
    );
    // The Secret rendered by `relay topology render --helm` is referenced by name.
    let pod = pod_spec(find(&docs, "StatefulSet", "rel"), "root");
    let secret = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "secret")
        .unwrap();
    assert_eq!(
        secret.secret.unwrap().secret_name.as_deref(),
        Some("strata-center")
    );

    // A relay with its files inline: the chart makes their Secret; proxy values become
    // the environment its TLS/TCP links read; scheduling values reach the pod.
    let (relay, docs) = render_and_check("relay-values.yaml");
    assert!(relay.contains(&"Secret/rel-files".to_owned()), "{relay:?}");
    let pod = pod_spec(find(&docs, "StatefulSet", "rel"), "relay");
    let env = pod.containers[0].env.clone().unwrap();
    assert!(
        env.iter()
            .any(|e| e.name == "HTTPS_PROXY"
                && e.value.as_deref() == Some("http://proxy.example:3128")),
        "{env:?}"
    );
    assert!(pod.affinity.is_some() && pod.tolerations.is_some() && pod.node_selector.is_some());
    let service: Service = strictly(find(&docs, "Service", "rel"), "relay");
    let tls = service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .into_iter()
        .find(|p| p.name.as_deref() == Some("tls"))
        .unwrap();
    assert_eq!(tls.port, 7444, "listen_tcp's port");

    let (agent, _) = render_and_check("agent-values.yaml");
    for expected in [
        "Deployment/rel",
        "ClusterRoleBinding/rel",
        "Secret/rel-config",
        "PersistentVolumeClaim/rel-state",
    ] {
        assert!(
            agent.contains(&expected.to_owned()),
            "{expected} in {agent:?}"
        );
    }
    assert!(
        !agent
            .iter()
            .any(|k| k.starts_with("StatefulSet/") || k.starts_with("Service/")),
        "{agent:?}"
    );
}

#[test]
fn a_replicated_root_gets_a_disruption_budget_and_its_service_ready_pods_only() {
    let (kinds, docs) = render_and_check("etcd-root-values.yaml");
    for expected in [
        "Service/rel",
        "Service/rel-replicas",
        "StatefulSet/rel",
        "PodDisruptionBudget/rel",
    ] {
        assert!(
            kinds.contains(&expected.to_owned()),
            "{expected} in {kinds:?}"
        );
    }
    // Clients of the API and anything else behind the Service reach ready pods: the
    // writer. The headless Service names every replica, ready or not.
    let front: Service = strictly(find(&docs, "Service", "rel"), "front");
    assert_ne!(front.spec.unwrap().publish_not_ready_addresses, Some(true));
    let replicas: Service = strictly(find(&docs, "Service", "rel-replicas"), "replicas");
    let spec = replicas.spec.unwrap();
    assert_eq!(
        (spec.cluster_ip.as_deref(), spec.publish_not_ready_addresses),
        (Some("None"), Some(true))
    );
    let root: StatefulSet = strictly(find(&docs, "StatefulSet", "rel"), "root");
    assert_eq!(root.spec.replicas, Some(3));
    assert_eq!(root.spec.service_name.as_deref(), Some("rel-replicas"));
    // One replica: no budget (it would block every drain).
    let (single, _) = render_and_check("root-values.yaml");
    assert!(
        !single.iter().any(|k| k.starts_with("PodDisruptionBudget/")),
        "{single:?}"
    );
}

/// `helm template` with the root's CI values and `--set ARGS`: its error.
fn refused(set: &str) -> String {
    let chart = chart();
    let values = chart.join("ci/root-values.yaml");
    let (ok, out, err) = try_run(&[
        "template",
        "rel",
        chart.to_str().unwrap(),
        "-f",
        values.to_str().unwrap(),
        "--set",
        set,
    ]);
    assert!(!ok, "--set {set} was accepted:\n{out}");
    err
}

#[test]
fn the_chart_refuses_values_it_does_not_know_or_that_cannot_work() {
    // The schema: an unknown value, a misspelt nested one, a wrong type.
    assert!(
        refused("replica=2").contains("replica"),
        "unknown top-level value"
    );
    let e = refused("service.loadBalancerIp=1.2.3.4");
    assert!(e.contains("loadBalancerIp"), "{e}");
    let e = refused("role=gateway");
    assert!(e.contains("role"), "{e}");
    // Several replicas of a root on sled; a proxy for a link that is QUIC only.
    let e = refused("replicas=2");
    assert!(e.contains("store in etcd"), "{e}");
    let e = refused("existingSecret=,secretFiles=null");
    assert!(e.contains("existingSecret"), "{e}");
    let chart = chart();
    let dir = tempfile::tempdir().unwrap();
    let quic = dir.path().join("quic.yaml");
    std::fs::write(
        &quic,
        "role: agent\nnode: lab\nexistingSecret: strata-lab\nconfig: |\n  cluster: lab\n  parent: { name: eu-west, address: \"10.0.0.1:7443\", transport: quic }\nproxy: { httpsProxy: \"http://proxy:3128\" }\n",
    )
    .unwrap();
    let (ok, _, err) = try_run(&[
        "template",
        "rel",
        chart.to_str().unwrap(),
        "-f",
        quic.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("never uses a proxy"), "{err}");
}
