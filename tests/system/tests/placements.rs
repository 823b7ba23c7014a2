//! Placements that choose, on a `relay up` hierarchy of processes (simulated
//! clusters): `count: 3, spreadBy: region`; `relay drain` moving the app
//! make-before-break while the root's summary, sampled every 50 ms, never shows fewer
//! than three clusters available; `relay uncordon` changing nothing (the choice is
//! stable); a cluster of capacity 3 refusing a fourth placement and saying why.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hyper::Method;
use serde_json::Value;
use strata_relay::client::ApiClient;

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: choice }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
    - { name: us, parent: center, labels: { region: us } }
  clusters:
    - { name: eu-1, parent: eu, labels: { role: pos } }
    - { name: eu-2, parent: eu, labels: { role: pos } }
    - { name: eu-3, parent: eu, labels: { role: pos } }
    - { name: us-1, parent: us, labels: { role: pos } }
    - { name: us-2, parent: us, labels: { role: pos } }
    - { name: us-3, parent: us, labels: { role: pos } }
    - { name: solo, parent: us, labels: { role: kiosk, only: me } }
";

const SPREAD: &str = "
apiVersion: v1
kind: Namespace
metadata: { name: shop }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { replicas: 1 }
---
apiVersion: strata.dev/v1alpha1
kind: Placement
metadata: { name: web }
spec:
  objects: [ { kinds: [Deployment], selector: { matchLabels: { app: web } } } ]
  clusters: { selector: { matchLabels: { role: pos } }, count: 3, spreadBy: region }
";

struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        common::stop_relay_up(&mut self.0);
    }
}

struct Root {
    env: Vec<(String, String)>,
    client: ApiClient,
    rt: tokio::runtime::Runtime,
    dir: std::path::PathBuf,
}

impl Root {
    fn var(&self, name: &str) -> Option<String> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    fn get(&self, path: &str) -> Value {
        let (status, v) = self
            .rt
            .block_on(self.client.request(Method::GET, path, None))
            .unwrap();
        assert!(status.is_success(), "GET {path}: {status} {v}");
        v
    }

    fn decisions(&self, placement: &str) -> Value {
        self.get(&format!(
            "/spaces/default/apis/strata.dev/v1alpha1/placements/{placement}"
        ))["status"]["decisions"]
            .clone()
    }

    fn chosen(&self, placement: &str) -> Vec<String> {
        self.decisions(placement)["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_owned))
            .collect()
    }

    /// `relay ARGS...` with the root's variables; panics with its output on failure.
    fn relay(&self, args: &[&str]) -> String {
        let out = Command::new(common::bin("relay"))
            .args(args)
            .envs(self.env.iter().cloned())
            .current_dir(&self.dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "relay {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn apply(&self, name: &str, yaml: &str) {
        let path = self.dir.join(name);
        std::fs::write(&path, yaml).unwrap();
        self.relay(&["apply", "-f", path.to_str().unwrap()]);
    }

    fn eventually(&self, what: &str, check: impl Fn(&Root) -> bool) {
        for _ in 0..600 {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting until {what}");
    }
}

/// (expected, available) of the Deployment under the placement `web`, as its
/// FleetStatus shows it.
fn fleet(v: &Value) -> (u64, u64) {
    let p = &v["summary"];
    (
        p["expected"].as_u64().unwrap_or(0),
        p["available"].as_u64().unwrap_or(0),
    )
}

fn start(dir: &Path) -> (Up, Root) {
    let file = dir.join("choice.yaml");
    std::fs::write(&file, TOPOLOGY).unwrap();
    let data = dir.join("data");
    let (child, rx) = common::relay_up(&file, &data);
    let up = Up(child);
    let mut env = None;
    for _ in 0..1200 {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100))
            && line.contains("export STRATA_SERVER=")
        {
            env = Some(common::export_env(&line));
            break;
        }
    }
    let env = env.expect("relay up printed its credentials");
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let client = ApiClient::new(
        get("STRATA_SERVER").unwrap().parse().unwrap(),
        &get("STRATA_SERVER_NAME").unwrap_or_else(|| "center".into()),
        Path::new(&get("STRATA_CA").unwrap()),
        &get("STRATA_TOKEN").unwrap(),
    )
    .unwrap();
    let root = Root {
        env,
        client,
        rt: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        dir: dir.to_owned(),
    };
    (up, root)
}

#[test]
fn placements_choose_spread_drain_make_before_break_and_respect_capacity() {
    let tmp = tempfile::tempdir().unwrap();
    let (_up, root) = start(tmp.path());
    assert!(root.var("STRATA_TOKEN").is_some());
    const DEPLOY: &str =
        "/spaces/default/apis/strata.dev/v1alpha1/namespaces/shop/fleetstatuses/deployment.web.web";

    // Links connect before the clusters' inventory has climbed to the root: a plan
    // made before then chooses among the clusters known, and keeps its choice.
    root.eventually("the root knows every cluster", |r| {
        let clusters = r.relay(&["clusters"]);
        ["eu-1", "eu-2", "eu-3", "us-1", "us-2", "us-3", "solo"]
            .iter()
            .all(|c| clusters.contains(c))
    });

    // count 3 spread over two regions: 2 + 1, all available.
    root.apply("app.yaml", SPREAD);
    root.eventually("three clusters run the app", |r| {
        fleet(&r.get(DEPLOY)) == (3, 3)
    });
    let chosen = root.chosen("web");
    assert_eq!(chosen.len(), 3, "{chosen:?}");
    let eu = chosen.iter().filter(|c| c.starts_with("eu-")).count();
    assert!(eu == 1 || eu == 2, "spread over both regions: {chosen:?}");
    let d = root.decisions("web");
    assert_eq!(d["matching"], 6, "{d}");
    assert_eq!(d["excluded"]["count"], 3, "{d}");

    // Drain one chosen cluster while sampling the fleet every 50 ms.
    let drained = chosen[0].clone();
    let stop = Arc::new(AtomicBool::new(false));
    let fewest = Arc::new(AtomicU64::new(u64::MAX));
    let sampler = {
        let (stop, fewest) = (stop.clone(), fewest.clone());
        let client = ApiClient::new(
            root.var("STRATA_SERVER").unwrap().parse().unwrap(),
            &root
                .var("STRATA_SERVER_NAME")
                .unwrap_or_else(|| "center".into()),
            Path::new(&root.var("STRATA_CA").unwrap()),
            &root.var("STRATA_TOKEN").unwrap(),
        )
        .unwrap();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let mut samples = 0;
            while !stop.load(Ordering::SeqCst) {
                if let Ok((_, v)) = rt.block_on(client.request(Method::GET, DEPLOY, None)) {
                    fewest.fetch_min(fleet(&v).1, Ordering::SeqCst);
                    samples += 1;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            samples
        })
    };
    let said = root.relay(&["drain", &drained, "--wait", "60s"]);
    assert!(said.contains("drained in"), "{said}");
    stop.store(true, Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    assert!(samples > 5, "the sampler ran ({samples} samples)");
    assert_eq!(
        fewest.load(Ordering::SeqCst),
        3,
        "the app was available on fewer than 3 clusters during the drain"
    );
    let after = root.chosen("web");
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(!after.contains(&drained), "{drained} drained: {after:?}");
    let kept: Vec<&String> = chosen.iter().filter(|c| **c != drained).collect();
    assert!(
        kept.iter().all(|c| after.contains(c)),
        "only the drained one was replaced: {chosen:?} -> {after:?}"
    );
    let d = root.decisions("web");
    assert!(
        d["excludedClusters"][&drained]
            .as_str()
            .is_some_and(|w| w.contains("strata.dev/drained")),
        "{d}"
    );
    root.eventually("the fleet is settled on the new three", |r| {
        fleet(&r.get(DEPLOY)) == (3, 3)
    });
    // `relay get placement` (short name `pl`, namespace `default`) shows the decision.
    let table = root.relay(&["get", "pl", "web", "-o", "wide"]);
    assert!(
        table.contains("chose 3 of 6 matching clusters; left out: "),
        "{table}"
    );
    assert!(
        table.contains(&format!("  chosen: {}", after.join(", "))),
        "{table}"
    );

    // Uncordoning changes nothing: the choice is stable.
    root.relay(&["uncordon", &drained]);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(root.chosen("web"), after);

    // Capacity 3: a fourth placement on the cluster is refused, and says why.
    root.apply(
        "solo.yaml",
        "apiVersion: strata.dev/v1alpha1\nkind: Cluster\nmetadata: { name: solo }\nspec: { capacity: { workloads: 3 } }\n",
    );
    for i in 1..=4 {
        root.apply(
            &format!("p{i}.yaml"),
            &format!(
                "apiVersion: strata.dev/v1alpha1\nkind: Placement\nmetadata: {{ name: p{i} }}\nspec:\n  objects: [ {{ names: [nothing-{i}] }} ]\n  clusters: {{ selector: {{ matchLabels: {{ only: me }} }} }}\n"
            ),
        );
    }
    root.eventually("the first three placements hold solo", |r| {
        (1..=3).all(|i| r.chosen(&format!("p{i}")) == ["solo"])
    });
    let d = root.decisions("p4");
    assert_eq!(d["chosen"], 0, "{d}");
    assert_eq!(d["excludedClusters"]["solo"], "capacity full", "{d}");
    // The labels the cluster reports were left alone by the capacity's apply.
    let solo = root.get("/spaces/default/apis/strata.dev/v1alpha1/clusters/solo");
    assert_eq!(solo["metadata"]["labels"]["only"], "me", "{solo}");
}
