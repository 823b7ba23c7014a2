//! The Helm chart `deploy/helm/strata`: `helm lint --strict` passes, and every manifest
//! `helm template` renders (with each values file in `ci/`) deserializes strictly into
//! its `k8s-openapi` type - a field the type does not know, or a value of the wrong
//! type, is a failure (typed round trip compared with the rendered document) - and
//! every node configuration it renders is accepted by the binaries' own loaders.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde_json::Value;

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/strata")
}

/// Helm, installed into the target directory by `.ci/install-kube-clients` the first
/// time a test needs it.
fn helm() -> PathBuf {
    strata_test_tools::kube_clients().join("helm")
}

fn run(args: &[&str]) -> String {
    let out = Command::new(helm()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deserializes `doc` as `T`, serializes it back and requires the same document:
/// whatever `T` dropped (an unknown field) or changed (a wrongly typed value) fails.
fn strictly<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value, what: &str) -> T {
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
fn accepts_config(kind: &str, what: &str, text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    match kind {
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

/// The documents `helm ARGS` (a `template` command) renders.
fn template(args: &[&str]) -> Vec<Value> {
    let rendered = run(args);
    rendered
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

/// Every document `helm template` renders with these values, checked; returns the
/// kinds and names seen.
fn render_and_check(values: Option<&str>) -> Vec<String> {
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let mut args = vec!["template", "rel", chart, "--namespace", "strata-system"];
    let values_path;
    if let Some(v) = values {
        values_path = format!("{chart}/ci/{v}");
        args.extend(["-f", values_path.as_str()]);
    }
    let mut lint = vec!["lint", "--strict", chart];
    lint.extend(
        args[4..]
            .iter()
            .copied()
            .filter(|a| !a.contains("strata-system") && *a != "--namespace"),
    );
    run(&lint);
    let mut seen = Vec::new();
    for v in template(&args) {
        let kind = v["kind"].as_str().unwrap().to_owned();
        let name = v["metadata"]["name"].as_str().unwrap().to_owned();
        let what = format!("{values:?} {kind}/{name}");
        match kind.as_str() {
            "ConfigMap" => {
                let cm: ConfigMap = strictly(&v, &what);
                accepts_config("relay", &what, &cm.data.unwrap()["config.yaml"]);
            }
            "Secret" => {
                let s: Secret = strictly(&v, &what);
                accepts_config("agent", &what, &s.string_data.unwrap()["config.yaml"]);
            }
            "Service" => drop(strictly::<Service>(&v, &what)),
            "ServiceAccount" => drop(strictly::<ServiceAccount>(&v, &what)),
            "PersistentVolumeClaim" => drop(strictly::<PersistentVolumeClaim>(&v, &what)),
            "ClusterRole" => drop(strictly::<ClusterRole>(&v, &what)),
            "ClusterRoleBinding" => drop(strictly::<ClusterRoleBinding>(&v, &what)),
            "StatefulSet" => {
                let s: StatefulSet = strictly(&v, &what);
                let pod = s.spec.template.spec.unwrap();
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
            }
            "Deployment" => {
                let d: Deployment = strictly(&v, &what);
                let pod = d.spec.template.spec.unwrap();
                assert_eq!(
                    pod.containers[0].command.as_deref(),
                    Some(&["/usr/local/bin/agent".to_owned()][..])
                );
            }
            other => panic!("{what}: the test does not know the kind {other}"),
        }
        seen.push(format!("{kind}/{name}"));
    }
    seen
}

#[test]
fn every_rendered_manifest_is_a_strict_kubernetes_object_and_every_config_loads() {
    let defaults = render_and_check(None);
    assert_eq!(
        defaults,
        [
            "ConfigMap/rel-center",
            "Service/rel-center",
            "StatefulSet/rel-center"
        ]
    );
    let hierarchy = render_and_check(Some("hierarchy-values.yaml"));
    assert_eq!(
        hierarchy
            .iter()
            .filter(|k| k.starts_with("StatefulSet/"))
            .count(),
        3,
        "{hierarchy:?}"
    );
    let agent = render_and_check(Some("agent-values.yaml"));
    for expected in [
        "Deployment/rel-agent",
        "ClusterRoleBinding/rel-agent",
        "Secret/rel-agent-config",
        "PersistentVolumeClaim/rel-agent-data",
    ] {
        assert!(
            agent.contains(&expected.to_owned()),
            "{expected} in {agent:?}"
        );
    }
    assert!(
        !agent.iter().any(|k| k.starts_with("StatefulSet/")),
        "{agent:?}"
    );
    let both = render_and_check(Some("agent-tls-values.yaml"));
    assert!(
        both.contains(&"Deployment/rel-agent".to_owned())
            && both.contains(&"StatefulSet/rel-center".to_owned()),
        "{both:?}"
    );
}

#[test]
fn a_root_on_etcd_gives_children_every_replica_and_its_service_ready_pods_only() {
    let kinds = render_and_check(Some("etcd-root-values.yaml"));
    for expected in [
        "Service/rel-center",
        "Service/rel-center-replicas",
        "StatefulSet/rel-center",
        "StatefulSet/rel-eu-west",
        "Deployment/rel-agent",
    ] {
        assert!(
            kinds.contains(&expected.to_owned()),
            "{expected} in {kinds:?}"
        );
    }
    let chart = chart();
    let values = format!("{}/ci/etcd-root-values.yaml", chart.display());
    let docs = template(&[
        "template",
        "rel",
        chart.to_str().unwrap(),
        "--namespace",
        "strata-system",
        "-f",
        &values,
    ]);
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind}/{name}"))
            .clone()
    };
    // Clients of the API and anything else behind the Service reach ready pods: the
    // writer. The headless Service names every replica, ready or not.
    let front: Service = strictly(&find("Service", "rel-center"), "front");
    assert_ne!(front.spec.unwrap().publish_not_ready_addresses, Some(true));
    let replicas: Service = strictly(&find("Service", "rel-center-replicas"), "replicas");
    let spec = replicas.spec.unwrap();
    assert_eq!(
        (spec.cluster_ip.as_deref(), spec.publish_not_ready_addresses),
        (Some("None"), Some(true))
    );
    let root: StatefulSet = strictly(&find("StatefulSet", "rel-center"), "root");
    let root = root.spec;
    assert_eq!(root.replicas, Some(3));
    assert_eq!(root.service_name.as_deref(), Some("rel-center-replicas"));
    // The region and the agent below the root get each replica's name, which the
    // binaries' own loaders read as three addresses.
    let every = "rel-center-0.rel-center-replicas.strata-system.svc:7443,\
                 rel-center-1.rel-center-replicas.strata-system.svc:7443,\
                 rel-center-2.rel-center-replicas.strata-system.svc:7443";
    let dir = tempfile::tempdir().unwrap();
    let region: ConfigMap = strictly(&find("ConfigMap", "rel-eu-west"), "region");
    let path = dir.path().join("eu-west.yaml");
    std::fs::write(&path, &region.data.unwrap()["config.yaml"]).unwrap();
    let parent = strata_relay::config::NodeConfig::load(&path)
        .unwrap()
        .parent
        .unwrap();
    assert_eq!(parent.address.to_string(), every);
    assert_eq!(parent.address.each().len(), 3);
    let agent: Secret = strictly(&find("Secret", "rel-agent-config"), "agent");
    let path = dir.path().join("agent.yaml");
    std::fs::write(&path, &agent.string_data.unwrap()["config.yaml"]).unwrap();
    let agent = strata_agent::config::AgentConfig::load(&path).unwrap();
    assert_eq!(agent.parent.address.to_string(), every);
}
