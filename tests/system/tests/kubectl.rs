//! The root as a Kubernetes API, driven by the real clients: kubectl 1.33 and Helm 4
//! (installed by `.ci/install-kube-clients` into the target directory when missing),
//! against a `relay up` hierarchy of processes with simulated clusters. Every step that
//! places something checks, through the root's own view, that exactly the selected
//! clusters run it.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: kube }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
    - { name: us, parent: center, labels: { region: us } }
  clusters:
    - { name: eu-1, parent: eu, labels: { role: pos }, properties: { posReplicas: \"3\" } }
    - { name: eu-2, parent: eu, labels: { role: pos }, properties: { posReplicas: \"1\" } }
    - { name: us-1, parent: us, labels: { role: pos } }
    - { name: us-2, parent: us, labels: { role: kiosk } }
";

const SHOP: &str = "
apiVersion: v1
kind: Namespace
metadata: { name: shop }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec:
  replicas: 2
  selector: { matchLabels: { app: web } }
  template:
    metadata: { labels: { app: web } }
    spec:
      containers:
        - name: web
          image: nginx:1.27
          ports: [ { containerPort: 80 } ]
---
apiVersion: v1
kind: ConfigMap
metadata: { name: settings, namespace: shop, labels: { app: web } }
data: { currency: EUR }
---
apiVersion: v1
kind: Secret
metadata: { name: token, namespace: shop, labels: { app: web } }
stringData: { token: s3cret }
---
apiVersion: v1
kind: Service
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { selector: { app: web }, ports: [ { port: 80 } ] }
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: { name: menus.example.com, labels: { app: web } }
spec:
  group: example.com
  scope: Namespaced
  names: { plural: menus, singular: menu, kind: Menu, shortNames: [mn] }
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
              properties: { dishes: { type: integer, minimum: 1, description: How many dishes are served. } }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { region: eu, role: pos } } }
";

struct Up {
    child: Child,
}

impl Drop for Up {
    fn drop(&mut self) {
        common::stop_relay_up(&mut self.child);
    }
}

/// Starts the hierarchy; returns it and the `STRATA_*` variables it printed.
fn up(file: &Path, dir: &Path) -> (Up, Vec<(String, String)>) {
    let (child, rx) = common::relay_up(file, dir);
    let up = Up { child };
    for _ in 0..1200 {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100))
            && line.contains("export STRATA_SERVER=")
        {
            return (up, common::export_env(&line));
        }
    }
    panic!("relay up never printed its credentials");
}

struct Fleet {
    dir: PathBuf,
    env: Vec<(String, String)>,
    clients: PathBuf,
}

impl Fleet {
    fn run(&self, program: &str, args: &[&str]) -> Output {
        let path = if program == "relay" {
            common::bin("relay")
        } else {
            self.clients.join(program)
        };
        Command::new(path)
            .args(args)
            .envs(self.env.iter().cloned())
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .env("HOME", &self.dir)
            .current_dir(&self.dir)
            .output()
            .unwrap()
    }

    /// Runs a client; panics with its output unless it succeeds; returns stdout.
    fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs a client that must fail; returns what it printed.
    fn fails(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(!out.status.success(), "{program} {args:?} succeeded");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    /// The clusters that hold `kind/name` (in namespace `ns`) and report it, as the root's summary says:
    /// (expected, available).
    fn placed(&self, kind: &str, ns: &str, name: &str) -> Option<(u64, u64)> {
        let out = self.run("relay", &["get", kind, name, "-n", ns, "-o", "summary"]);
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        let s = &v.as_array()?.first()?["placements"][0]["summary"];
        Some((s["expected"].as_u64()?, s["health"]["available"].as_u64()?))
    }

    fn eventually(&self, what: &str, check: impl Fn(&Fleet) -> bool) {
        for _ in 0..300 {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting until {what}");
    }
}

/// The oldest client, Debian's kubectl 1.20: it reads `/openapi/v2` (protobuf) and
/// validates manifests itself before it sends them, as against a real cluster. Skipped,
/// saying why, when `.ci/install-kube-clients` could not get it.
fn oldest_kubectl(f: &Fleet) {
    let old = "kubectl-1.20";
    if !f.clients.join(old).exists() {
        let why = std::fs::read_to_string(f.clients.join("kubectl-1.20.missing"))
            .unwrap_or_else(|_| "not installed".into());
        eprintln!("SKIPPED: the kubectl 1.20 steps ({})", why.trim());
        return;
    }
    let version = f.ok(old, &["version"]);
    assert!(
        version.contains("v1.20.") && version.contains("strata"),
        "{version}"
    );
    let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: old, labels: { app: old } }\nspec:\n  replicas: 1\n  selector: { matchLabels: { app: old } }\n  template:\n    metadata: { labels: { app: old } }\n    spec: { containers: [ { name: web, image: nginx, resources: { limits: { cpu: 1 } } } ] }\n";
    let file = f.write("old.yaml", manifest);
    f.ok(old, &["apply", "-f", &file]);
    f.ok(old, &["apply", "-f", &file]);
    let err = f.fails(
        old,
        &[
            "apply",
            "-f",
            &f.write("old-bad.yaml", &manifest.replace("replicas", "replica")),
        ],
    );
    assert!(
        err.contains(r#"unknown field "replica" in io.k8s.api.apps.v1.DeploymentSpec"#),
        "{err}"
    );
    assert_eq!(
        f.ok(old, &["get", "deploy", "old", "-o", "name"]).trim(),
        "deployment.apps/old"
    );
    f.ok(old, &["delete", "-f", &file]);
    assert!(
        f.ok("kubectl", &["get", "deploy", "-o", "name"])
            .trim()
            .is_empty()
    );
}

#[test]
fn kubectl_and_helm_work_against_the_root_unchanged() {
    let clients = common::kube_clients();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("kube.yaml");
    std::fs::write(&file, TOPOLOGY).unwrap();
    let dir = tmp.path().join("data");
    // An admin token, and a token that may only read.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("api.tokens"),
        "admin-token-0123456789\nviewer-token-0123456789 user=dash role=view\n",
    )
    .unwrap();
    let (_up, env) = up(&file, &dir);
    let f = Fleet {
        dir: tmp.path().to_owned(),
        env,
        clients,
    };
    let kubeconfig = f.ok("relay", &["kubeconfig"]);
    f.write("kubeconfig", &kubeconfig);

    // Discovery: built-in, our own and (once applied) custom kinds, in one aggregated
    // request per root (`/api`, `/apis`): kubectl asks no group version on its own.
    let out = f.run("kubectl", &["api-resources", "-v=6"]);
    let (resources, log) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    for line in ["deployments", "placements", "namespaces"] {
        assert!(resources.contains(line), "{resources}");
    }
    assert!(log.contains("/apis?"), "{log}");
    assert!(
        !log.contains("/api/v1?") && !log.contains("/apis/apps/v1?"),
        "kubectl fell back to discovery per group version:\n{log}"
    );

    // Client-side apply of a whole app; it runs on exactly the eu pos clusters.
    let app = f.write("app.yaml", SHOP);
    f.ok("kubectl", &["apply", "-f", &app]);
    f.ok(
        "kubectl",
        &[
            "rollout",
            "status",
            "deploy/web",
            "-n",
            "shop",
            "--timeout=60s",
        ],
    );
    f.ok(
        "kubectl",
        &[
            "wait",
            "--for=condition=Available",
            "deploy/web",
            "-n",
            "shop",
            "--timeout=60s",
        ],
    );
    f.eventually("the deployment runs on eu-1 and eu-2 only", |f| {
        f.placed("deployment", "shop", "web") == Some((2, 2))
    });
    let cr = f.write(
        "menu.yaml",
        "apiVersion: example.com/v1\nkind: Menu\nmetadata: { name: lunch, namespace: shop, labels: { app: web } }\nspec: { dishes: 3 }\n",
    );
    f.ok("kubectl", &["apply", "-f", &cr]);
    assert!(
        f.ok("kubectl", &["get", "mn", "-n", "shop", "-o", "name"])
            .contains("menu.example.com/lunch")
    );

    // Schemas: kubectl explain reads them for built-in, our own and custom kinds; a
    // custom resource is checked against its CRD's schema, as kube-apiserver checks it.
    let explained = f.ok("kubectl", &["explain", "deployment.spec.replicas"]);
    assert!(explained.contains("Number of desired pods"), "{explained}");
    let explained = f.ok("kubectl", &["explain", "placement.spec.clusters"]);
    assert!(explained.contains("spreadBy"), "{explained}");
    let explained = f.ok("kubectl", &["explain", "cluster.spec"]);
    assert!(explained.contains("taints"), "{explained}");
    let explained = f.ok("kubectl", &["explain", "menu.spec.dishes"]);
    assert!(explained.contains("How many dishes"), "{explained}");
    let err = f.fails(
        "kubectl",
        &[
            "apply",
            "-f",
            &f.write(
                "wrong.yaml",
                &std::fs::read_to_string(&cr)
                    .unwrap()
                    .replace("dishes: 3", "dishes: lots"),
            ),
        ],
    );
    assert!(
        err.contains(r#"spec.dishes: Invalid value: "string": spec.dishes in body must be of type integer: "string""#),
        "{err}"
    );
    let err = f.fails(
        "kubectl",
        &[
            "apply",
            "-f",
            &f.write(
                "unknown.yaml",
                &std::fs::read_to_string(&cr)
                    .unwrap()
                    .replace("dishes: 3", "dishes: 3, sauce: pesto"),
            ),
        ],
    );
    assert!(err.contains(r#"unknown field "spec.sauce""#), "{err}");
    // A custom resource whose CRD is absent: 404, naming the kind.
    let widget = f.write(
        "widget.json",
        r#"{"apiVersion":"example.org/v1","kind":"Widget","metadata":{"name":"w"}}"#,
    );
    let err = f.fails(
        "kubectl",
        &[
            "create",
            "--raw",
            "/apis/example.org/v1/namespaces/shop/widgets",
            "-f",
            &widget,
        ],
    );
    assert!(
        err.contains("NotFound") && err.contains(r#"kind "Widget""#),
        "{err}"
    );

    // kubectl get: tables with where it runs, names, selectors, YAML that re-applies.
    let table = f.ok("kubectl", &["get", "deploy", "-A", "-o", "wide"]);
    assert!(
        table.contains("CLUSTERS") && table.contains("2/2"),
        "{table}"
    );
    // A placement's own columns: the two eu pos clusters chosen of two matching, none
    // retiring, and the six objects labelled app=web (the Menu included).
    let table = f.ok("kubectl", &["get", "placements"]);
    let head: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        head,
        [
            "NAME", "CLUSTERS", "MATCHING", "RETIRING", "OBJECTS", "REVISION"
        ],
        "{table}"
    );
    let web: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(web.get(1..5), Some(&["2", "2", "0", "6"][..]), "{table}");
    let names = f.ok(
        "kubectl",
        &[
            "get",
            "cm,secret,svc",
            "-n",
            "shop",
            "-l",
            "app=web",
            "-o",
            "name",
        ],
    );
    for n in ["configmap/settings", "secret/token", "service/web"] {
        assert!(names.contains(n), "{names}");
    }
    let yaml = f.ok(
        "kubectl",
        &["get", "deploy", "web", "-n", "shop", "-o", "yaml"],
    );
    // Two clusters run two each: the Deployment's status reads as its weakest cluster
    // shows it (kstatus compares it with spec.replicas), the fleet's totals are in its
    // FleetStatus.
    assert!(
        yaml.contains("availableReplicas: 2"),
        "the fleet's status: {yaml}"
    );
    let fleet: Value = serde_json::from_str(&f.ok(
        "kubectl",
        &["get", "fleetstatuses", "-n", "shop", "-o", "json"],
    ))
    .unwrap();
    let web = fleet["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["object"]["kind"] == "Deployment" && s["object"]["name"] == "web")
        .unwrap_or_else(|| panic!("no FleetStatus of deployment web: {fleet}"));
    assert_eq!(
        web["summary"]["fields"]["availableReplicas"]["sum"], 4,
        "the fleet's totals: {web}"
    );
    let again = f.write("again.yaml", &yaml);
    f.ok("kubectl", &["apply", "-f", &again]);

    // A misspelled field is refused, as a real cluster refuses it.
    let bad = f.write("bad.yaml", &SHOP.replace("replicas: 2", "replica: 2"));
    let err = f.fails("kubectl", &["apply", "-f", &bad]);
    assert!(err.contains("unknown field \"spec.replica\""), "{err}");

    // A watch sees a change; a strategic merge patch keeps the container's port.
    let watch = Command::new(f.clients.join("kubectl"))
        .args([
            "get",
            "cm",
            "settings",
            "-n",
            "shop",
            "-w",
            "-o",
            "jsonpath={.data.currency}{\"\\n\"}",
            "--request-timeout=8s",
        ])
        .env("KUBECONFIG", f.dir.join("kubeconfig"))
        .env("HOME", &f.dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    f.ok(
        "kubectl",
        &[
            "patch",
            "cm",
            "settings",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            "{\"data\":{\"currency\":\"CHF\"}}",
        ],
    );
    f.ok(
        "kubectl",
        &["set", "image", "deploy/web", "web=nginx:1.28", "-n", "shop"],
    );
    let watched = String::from_utf8_lossy(&watch.wait_with_output().unwrap().stdout).into_owned();
    assert!(
        watched.contains("EUR") && watched.contains("CHF"),
        "{watched}"
    );
    let ports = f.ok("kubectl", &["get", "deploy", "web", "-n", "shop", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort}"]);
    assert_eq!(ports, "nginx:1.28 80");

    // Server-side apply: owners, a conflict, and taking the field over.
    let ssa = f.write(
        "ssa.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: limits, namespace: shop, labels: { app: web } }\ndata: { max: \"10\" }\n",
    );
    f.ok("kubectl", &["apply", "--server-side", "-f", &ssa]);
    let other = f.write(
        "other.yaml",
        &std::fs::read_to_string(&ssa)
            .unwrap()
            .replace("\"10\"", "\"20\""),
    );
    let err = f.fails(
        "kubectl",
        &[
            "apply",
            "--server-side",
            "--field-manager=ops",
            "-f",
            &other,
        ],
    );
    assert!(err.contains("conflict"), "{err}");
    f.ok(
        "kubectl",
        &[
            "apply",
            "--server-side",
            "--field-manager=ops",
            "--force-conflicts",
            "-f",
            &other,
        ],
    );
    let max = f.ok(
        "kubectl",
        &[
            "get",
            "cm",
            "limits",
            "-n",
            "shop",
            "-o",
            "jsonpath={.data.max}",
        ],
    );
    assert_eq!(max, "20");

    // Moving the app by changing its placement: it leaves eu and runs on us-1.
    f.ok(
        "kubectl",
        &[
            "apply",
            "-f",
            &f.write(
                "moved.yaml",
                &SHOP.replace("region: eu, role: pos", "region: us, role: pos"),
            ),
        ],
    );
    f.eventually("the deployment runs on us-1 only", |f| {
        f.placed("deployment", "shop", "web") == Some((1, 1))
    });

    // Clusters at the root: the inventory as objects; relabelling one moves the app.
    let table = f.ok("kubectl", &["get", "clusters"]);
    assert!(
        table.contains("REACHABLE") && table.contains("us-2") && table.contains("center/us"),
        "{table}"
    );
    f.ok(
        "kubectl",
        &["label", "cluster", "us-2", "role=pos", "--overwrite"],
    );
    f.eventually("the deployment runs on us-1 and the relabelled us-2", |f| {
        f.placed("deployment", "shop", "web") == Some((2, 2))
    });
    let changed = f.ok(
        "kubectl",
        &[
            "get",
            "cluster",
            "us-2",
            "-o",
            "jsonpath={.metadata.labels.role} {.metadata.labels.region} {.status.labelOverrides.set.role}",
        ],
    );
    assert_eq!(changed, "pos us pos");
    f.ok("kubectl", &["label", "cluster", "us-1", "role-"]);
    f.eventually("the deployment leaves us-1, whose role was removed", |f| {
        f.placed("deployment", "shop", "web") == Some((1, 1))
    });
    let pos = f.ok(
        "kubectl",
        &["get", "clusters", "-l", "role=pos", "-o", "name"],
    );
    assert_eq!(
        pos.lines().collect::<Vec<_>>(),
        [
            "cluster.strata.dev/eu-1",
            "cluster.strata.dev/eu-2",
            "cluster.strata.dev/us-2"
        ],
    );
    // Deleting a Cluster drops the root's changes: us-1 is a pos cluster again.
    f.ok("kubectl", &["delete", "cluster", "us-1", "us-2"]);
    f.eventually("the deployment runs on us-1 only again", |f| {
        f.placed("deployment", "shop", "web") == Some((1, 1))
    });

    // Delete by file: gone from the root, and so from the clusters.
    f.ok("kubectl", &["delete", "-f", &cr]);
    f.ok("kubectl", &["delete", "-f", &app]);
    let left = f.ok("kubectl", &["get", "deploy", "-A", "-o", "name"]);
    assert!(!left.contains("web"), "{left}");

    oldest_kubectl(&f);

    // Helm: install, upgrade, rollback, uninstall; the chart runs on the us clusters.
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/charts/shop");
    let chart = chart.to_str().unwrap();
    f.ok(
        "helm",
        &["install", "cafe", chart, "-n", "cafe", "--create-namespace"],
    );
    f.eventually("the chart runs on us-1 and us-2", |f| {
        f.placed("deployment", "cafe", "cafe") == Some((2, 2))
    });
    f.ok(
        "helm",
        &[
            "upgrade",
            "cafe",
            chart,
            "-n",
            "cafe",
            "--set",
            "replicas=4",
        ],
    );
    let replicas = || {
        f.ok(
            "kubectl",
            &[
                "get",
                "deploy",
                "cafe",
                "-n",
                "cafe",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
        )
    };
    assert_eq!(replicas(), "4");
    f.ok("helm", &["rollback", "cafe", "1", "-n", "cafe"]);
    assert_eq!(replicas(), "2");
    f.ok("helm", &["uninstall", "cafe", "-n", "cafe"]);
    let left = f.ok("kubectl", &["get", "deploy,cm", "-n", "cafe", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");

    // Strata deploying Strata: its own chart, a release per node (the root's and a
    // relay's values, as `relay topology render --helm` writes them), installs through
    // the root's API like any other.
    let strata = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/strata");
    let releases = [
        ("center", "root-values.yaml"),
        ("eu-west", "relay-values.yaml"),
    ];
    for (release, values) in releases {
        let values = strata.join("ci").join(values);
        f.ok(
            "helm",
            &[
                "install",
                release,
                strata.to_str().unwrap(),
                "-n",
                "strata-system",
                "--create-namespace",
                "-f",
                values.to_str().unwrap(),
            ],
        );
    }
    let sets = f.ok(
        "kubectl",
        &["get", "statefulsets", "-n", "strata-system", "-o", "name"],
    );
    let mut sets: Vec<&str> = sets.lines().collect();
    sets.sort_unstable();
    assert_eq!(
        sets,
        ["statefulset.apps/center", "statefulset.apps/eu-west"]
    );
    for (release, _) in releases {
        f.ok("helm", &["uninstall", release, "-n", "strata-system"]);
    }

    // Customized per cluster at the edge, summarized as the placement asks.
    customized_and_summarized(&f);

    // Who may do what: an admin may create; a viewer reads, is refused a write (403,
    // naming why), and kubectl auth can-i says so.
    let can = f.ok(
        "kubectl",
        &["auth", "can-i", "create", "deployments", "-n", "shop"],
    );
    assert_eq!(can.trim(), "yes");
    f.write(
        "kubeconfig",
        &kubeconfig.replace("admin-token-0123456789", "viewer-token-0123456789"),
    );
    f.ok("kubectl", &["get", "deploy", "-A"]);
    let no = f.fails(
        "kubectl",
        &["auth", "can-i", "create", "deployments", "-n", "shop"],
    );
    assert!(no.starts_with("no") && no.contains("has role view"), "{no}");
    let err = f.fails("kubectl", &["apply", "-f", &app]);
    assert!(err.contains("has role view"), "{err}");

    // A wrong token is refused.
    let wrong = kubeconfig.replace(
        &f.env.iter().find(|(k, _)| k == "STRATA_TOKEN").unwrap().1,
        "not-a-token",
    );
    f.write("kubeconfig", &wrong);
    let err = f.fails("kubectl", &["get", "deploy", "-A"]);
    assert!(
        err.contains("You must be logged in") && err.contains("unknown bearer token"),
        "{err}"
    );
}

/// One Deployment whose replicas come from each cluster's `posReplicas` property (us-1
/// has none: it fails, saying so), with user summaries in the Placement's status.
const CUSTOMIZED: &str = r#"
apiVersion: v1
kind: Namespace
metadata: { name: pos }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: pos, namespace: pos, labels: { app: pos } }
spec:
  replicas: 1
  selector: { matchLabels: { app: pos } }
  template:
    metadata: { labels: { app: pos } }
    spec: { containers: [ { name: pos, image: "pos:2.1" } ] }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: pos }
spec:
  objects: [ { selector: { matchLabels: { app: pos } } } ]
  clusters: { selector: { matchLabels: { role: pos } } }
  customize:
    - objects: { kinds: [Deployment] }
      jsonPatch:
        - { op: replace, path: /spec/replicas, value: "${cluster.properties.posReplicas}" }
  statusSummary:
    - { name: ready, path: .status.readyReplicas, op: sum }
    - { name: images, path: ".spec.template.spec.containers[*].image", op: countBy }
    - { name: readyByRegion, path: .status.readyReplicas, op: sum, groupBy: region }
"#;

fn customized_and_summarized(f: &Fleet) {
    let file = f.write("customized.yaml", CUSTOMIZED);
    f.ok("relay", &["apply", "-f", &file]);
    f.eventually("eu-1 and eu-2 run their own replicas, us-1 fails", |f| {
        let yaml = f.ok("kubectl", &["get", "placement", "pos", "-o", "yaml"]);
        yaml.contains("ready: 4")
    });
    let yaml = f.ok("kubectl", &["get", "placement", "pos", "-o", "yaml"]);
    let v: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(
        v["status"]["summary"],
        serde_json::json!({ "ready": 4, "images": { "pos:2.1": 2 }, "readyByRegion": { "eu": 4 } }),
        "{yaml}"
    );
    let table = f.ok("relay", &["get", "deployment", "pos", "-n", "pos"]);
    assert!(
        table.contains("us-1 (customize: placement pos customize[0] jsonPatch[0]: cluster us-1 has no property \"posReplicas\""),
        "{table}"
    );
    for part in [
        "summary: ",
        "images={\"pos:2.1\":2}",
        "readyByRegion={\"eu\":4}",
        "ready=4",
    ] {
        assert!(table.contains(part), "{part}: {table}");
    }
    f.ok("relay", &["delete", "-f", &file]);
}
