//! Helm 4 against the root with `--wait` (issue 45, Deliver 6): `install`, `upgrade`,
//! `rollback` and `uninstall`, each with `--wait`, and an `upgrade
//! --rollback-on-failure` that fails and is rolled back, on a chart with a `crds/` folder
//! (its custom resource among the templates) and a `pre-install`/`pre-upgrade` hook Job.
//! Helm 4 waits with kstatus over watches with streaming lists: it reads the
//! Deployment's `observedGeneration` and counts, the Job's `Complete` condition and the
//! CRD's `Established`, as the root reports them for the fleet. Every object is placed
//! on the `role=pos` clusters; each step checks through the root that they, and only
//! they, run the result. Every step runs even when an earlier one failed; the test
//! prints each step's outcome and the install's time, and asserts that all passed.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes.
#![allow(clippy::disallowed_methods)]

use crate::kube_fleet::{self, Fleet, at};

use tokio::time::Instant;

const NS: &str = "shop";

/// The namespace and the Placement of everything in it on the `role=pos` clusters.
const FIXTURE: &str = "apiVersion: v1
kind: Namespace
metadata: { name: shop }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: shop }
spec:
  objects: [ { namespaces: [shop] } ]
  clusters: { selector: { matchLabels: { role: pos } } }
";

const CHART_YAML: &str = "apiVersion: v2
name: shop
version: 0.1.0
appVersion: \"1.0\"
";

const VALUES: &str = "greeting: hello
replicas: 2
broken: false
";

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: { name: widgets.shop.example.com }
spec:
  group: shop.example.com
  scope: Namespaced
  names: { plural: widgets, singular: widget, kind: Widget }
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: { type: integer }
";

const TEMPLATES: [(&str, &str); 5] = [
    (
        "deployment.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: { name: web }
spec:
  replicas: {{ .Values.replicas }}
  selector: { matchLabels: { app: web } }
  template:
    metadata: { labels: { app: web } }
    spec:
      containers:
        - name: web
          image: nginx:1.27
          env: [ { name: GREETING, value: {{ .Values.greeting | quote }} } ]
",
    ),
    (
        "service.yaml",
        "apiVersion: v1
kind: Service
metadata: { name: web }
spec:
  selector: { app: web }
  ports: [ { port: 80 } ]
",
    ),
    (
        "configmap.yaml",
        "apiVersion: v1
kind: ConfigMap
metadata: { name: greeting }
data: { greeting: {{ .Values.greeting | quote }} }
{{- if .Values.broken }}
---
apiVersion: v1
kind: ConfigMap
metadata: { name: broken }
data: { count: [ 1, 2 ] }
{{- end }}
",
    ),
    (
        "widget.yaml",
        "apiVersion: shop.example.com/v1
kind: Widget
metadata: { name: main }
spec: { size: 3 }
",
    ),
    (
        "hook.yaml",
        "apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations:
    helm.sh/hook: pre-install,pre-upgrade
    helm.sh/hook-delete-policy: before-hook-creation
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [ { name: migrate, image: busybox:1.36, command: [\"true\"] } ]
",
    ),
];

/// Writes the chart into the test's directory; returns its path.
fn chart(f: &Fleet) -> String {
    let dir = f.dir.join("shop");
    std::fs::create_dir_all(dir.join("crds")).unwrap();
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(dir.join("Chart.yaml"), CHART_YAML).unwrap();
    std::fs::write(dir.join("values.yaml"), VALUES).unwrap();
    std::fs::write(dir.join("crds/widgets.yaml"), CRD).unwrap();
    for (name, text) in TEMPLATES {
        std::fs::write(dir.join("templates").join(name), text).unwrap();
    }
    dir.display().to_string()
}

/// Helm with the fleet's kubeconfig, in the namespace, waiting at most 120 s.
fn helm(f: &Fleet, args: &[&str]) -> Result<String, String> {
    let mut all = args.to_vec();
    all.extend(["-n", NS, "--timeout", "120s"]);
    f.try_ok("helm", &all)
}

/// Helm with the fleet's kubeconfig, in the namespace, for a command that does not wait.
fn helm_now(f: &Fleet, args: &[&str]) -> Result<String, String> {
    let mut all = args.to_vec();
    all.extend(["-n", NS]);
    f.try_ok("helm", &all)
}

/// `Err` unless the root's ConfigMap `greeting` reads `want`.
fn greeting_is(f: &Fleet, want: &str) -> Result<(), String> {
    let got = f
        .object("configmap", Some(NS), "greeting")
        .map(|v| at(&v, "/data/greeting"))
        .unwrap_or_default();
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "the root's ConfigMap greeting reads {got:?}, not {want:?}"
        ))
    }
}

/// `Err` unless the Deployment, its ConfigMap, the Service and the hook Job run on
/// exactly the `role=pos` clusters.
fn chart_landed(f: &Fleet) -> Result<(), String> {
    for (kind, name) in [
        ("deployment", "web"),
        ("configmap", "greeting"),
        ("service", "web"),
        ("job", "migrate"),
    ] {
        f.landed_on_pos(kind, NS, name, "shop")?;
    }
    Ok(())
}

/// The release's last revision's status in `helm history`.
fn last_status(f: &Fleet) -> Result<String, String> {
    let out = helm_now(f, &["history", "shop", "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    Ok(v.as_array()
        .and_then(|a| a.last())
        .map(|r| at(r, "/status"))
        .unwrap_or_default())
}

#[test]
fn helm_install_upgrade_rollback_uninstall_wait_for_the_fleet() {
    let tmp = tempfile::tempdir().unwrap();
    let f = kube_fleet::up(tmp.path());
    f.ok("relay", &["apply", "-f", &f.write("fixture.yaml", FIXTURE)]);
    let chart = chart(&f);
    let mut outcomes: Vec<(&str, Result<(), String>)> = Vec::new();

    let started = Instant::now();
    let install = helm(&f, &["install", "shop", &chart, "--wait"]).map(drop);
    let install_secs = started.elapsed().as_secs_f64();
    let install = install
        .and_then(|()| chart_landed(&f))
        .and_then(|()| greeting_is(&f, "hello"))
        .and_then(|()| match f.object("widget", Some(NS), "main") {
            Some(_) => Ok(()),
            None => Err("the root has no Widget shop/main".into()),
        });
    outcomes.push(("install --wait", install));

    let upgrade = helm(
        &f,
        &[
            "upgrade",
            "shop",
            &chart,
            "--wait",
            "--set",
            "greeting=bonjour,replicas=3",
        ],
    )
    .map(drop)
    .and_then(|()| greeting_is(&f, "bonjour"))
    .and_then(|()| chart_landed(&f));
    outcomes.push(("upgrade --wait", upgrade));

    let rollback = helm(&f, &["rollback", "shop", "1", "--wait"])
        .map(drop)
        .and_then(|()| greeting_is(&f, "hello"))
        .and_then(|()| chart_landed(&f));
    outcomes.push(("rollback --wait", rollback));

    // A ConfigMap whose data is a list: the root refuses it (422), Helm fails the
    // upgrade and rolls the release back to what it was.
    let failing = match helm(
        &f,
        &[
            "upgrade",
            "shop",
            &chart,
            "--wait",
            "--rollback-on-failure",
            "--set",
            "greeting=broken,broken=true",
        ],
    ) {
        Ok(out) => Err(format!("the broken upgrade succeeded:\n{out}")),
        Err(_) => greeting_is(&f, "hello")
            .and_then(|()| match f.object("configmap", Some(NS), "broken") {
                Some(_) => Err("the refused ConfigMap broken is at the root".into()),
                None => Ok(()),
            })
            .and_then(|()| match last_status(&f)?.as_str() {
                "deployed" => Ok(()),
                other => Err(format!("the release's last revision is {other:?}")),
            })
            .and_then(|()| chart_landed(&f)),
    };
    outcomes.push((
        "upgrade --rollback-on-failure (fails, rolled back)",
        failing,
    ));

    let uninstall = helm(&f, &["uninstall", "shop", "--wait"])
        .map(drop)
        .and_then(|()| {
            let left: Vec<&str> = [
                ("deployment", "web"),
                ("configmap", "greeting"),
                ("service", "web"),
            ]
            .into_iter()
            .filter(|(kind, name)| f.object(kind, Some(NS), name).is_some())
            .map(|(kind, _)| kind)
            .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still at the root after uninstall: {left:?}"))
            }
        });
    outcomes.push(("uninstall --wait", uninstall));

    println!("helm install --wait on 3 clusters: {install_secs:.1} s");
    let passed = outcomes.iter().filter(|(_, r)| r.is_ok()).count();
    println!("helm 4 --wait: {passed}/{} passed", outcomes.len());
    for (step, r) in &outcomes {
        match r {
            Ok(()) => println!("  ok   {step}"),
            Err(e) => println!("  FAIL {step}: {e}"),
        }
    }
    assert_eq!(passed, outcomes.len(), "Helm steps failed (above)");
}
