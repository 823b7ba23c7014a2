//! The hierarchy as separate processes over real QUIC on loopback: a root, a site relay
//! and two agents with simulated clusters, driven through the `relay` CLI.
//!
//! Covers: apply with a placement reaches only the selected cluster and comes back
//! summarized; a site relay killed with SIGKILL and restarted resumes from its store
//! and its subtree converges to changes made meanwhile; graceful shutdown on SIGTERM.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{POS_APP, Proc, bin, free_port, http_get, log_tails, relay_cli, write};
use serde_json::Value;
use strata_relay::certs::Ca;

struct Cluster {
    dir: PathBuf,
    api_port: u16,
}

impl Cluster {
    fn relay(&self, args: &[&str]) -> (bool, String, String) {
        relay_cli(&self.dir, self.api_port, args)
    }

    fn get_json(&self, kind: &str, name: &str) -> Option<Value> {
        let (ok, out, _) = self.relay(&["get", kind, name, "-n", "pos", "-o", "summary"]);
        if !ok {
            return None;
        }
        serde_json::from_str::<Value>(&out)
            .ok()?
            .as_array()?
            .first()
            .cloned()
    }

    fn eventually(&self, what: &str, mut check: impl FnMut(&Cluster) -> bool) {
        for _ in 0..300 {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let names: Vec<String> = ["center", "site-1", "pos-1", "kiosk-1"]
            .iter()
            .map(|n| (*n).to_owned())
            .collect();
        panic!(
            "timed out waiting until {what}\n{}",
            log_tails(&self.dir, &names, 15)
        );
    }
}

#[test]
fn a_hierarchy_of_processes_delivers_survives_kill_9_and_shuts_down_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    for n in ["center", "site-1", "pos-1", "kiosk-1"] {
        ca.issue(n).unwrap().write_to(&dir).unwrap();
    }
    write(&dir.join("tokens"), "s3cret\n");
    let (root_port, api_port, site_port, metrics_port) =
        (free_port(), free_port(), free_port(), free_port());
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{root_port}\ntls: {{ cert: center.crt, key: center.key, ca: ca.crt }}\ndata: data/center\nchildren: [site-1]\napi: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\nsummary_interval_ms: 100\n"
        ),
    );
    write(
        &dir.join("site-1.yaml"),
        &format!(
            "node: site-1\nlisten: 127.0.0.1:{site_port}\nparent: {{ name: center, address: 127.0.0.1:{root_port} }}\ntls: {{ cert: site-1.crt, key: site-1.key, ca: ca.crt }}\ndata: data/site-1\nchildren: [pos-1, kiosk-1]\nlabels: {{ site: one }}\nsummary_interval_ms: 100\nmetrics: 127.0.0.1:{metrics_port}\n"
        ),
    );
    for (n, role) in [("pos-1", "pos"), ("kiosk-1", "kiosk")] {
        write(
            &dir.join(format!("{n}.yaml")),
            &format!(
                "cluster: {n}\nlabels: {{ role: {role} }}\nparent: {{ name: site-1, address: 127.0.0.1:{site_port} }}\ntls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}\ndata: data/{n}\nsimulated: {{ ready_delay_ms: 200 }}\n"
            ),
        );
    }
    let relay = bin("relay");
    let agent = bin("agent");
    let cfg = |n: &str| dir.join(format!("{n}.yaml")).display().to_string();
    let mut root = Proc::spawn(
        &dir,
        "center",
        &relay,
        &["serve", "--config", &cfg("center")],
    );
    let mut site = Proc::spawn(
        &dir,
        "site-1",
        &relay,
        &["serve", "--config", &cfg("site-1")],
    );
    let pos = Proc::spawn(&dir, "pos-1", &agent, &["run", "--config", &cfg("pos-1")]);
    let kiosk = Proc::spawn(
        &dir,
        "kiosk-1",
        &agent,
        &["run", "--config", &cfg("kiosk-1")],
    );
    let c = Cluster {
        dir: dir.clone(),
        api_port,
    };

    c.eventually("the root knows both clusters", |c| {
        let (ok, out, _) = c.relay(&["clusters"]);
        ok && out.contains("pos-1") && out.contains("kiosk-1")
    });
    let (ok, out, err) = c.relay(&["clusters"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("center/site-1"),
        "clusters carry their relay path:\n{out}"
    );
    assert!(
        out.contains("site=one"),
        "clusters inherit their relay's labels:\n{out}"
    );

    write(&dir.join("app.yaml"), POS_APP);
    let (ok, out, err) = c.relay(&["apply", "-f", &dir.join("app.yaml").display().to_string()]);
    assert!(ok, "apply failed: {err}");
    assert!(out.contains("revision 1"), "{out}");
    // Applying the same manifests again changes nothing.
    let (ok, out, _) = c.relay(&["apply", "-f", &dir.join("app.yaml").display().to_string()]);
    assert!(
        ok && !out.contains("revision"),
        "a repeated apply made a revision:\n{out}"
    );

    c.eventually(
        "the deployment is available on the one selected cluster",
        |c| {
            c.get_json("deployment", "pos").is_some_and(|v| {
                let s = &v["placements"][0]["summary"];
                s["expected"] == 1 && s["health"]["available"] == 1
            })
        },
    );

    // A bad request is refused whole, naming the document and the field.
    write(
        &dir.join("bad.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: ok, namespace: pos }\n---\nkind: Secret\nmetadata: { name: x }\n",
    );
    let (ok, _, err) = c.relay(&["apply", "-f", &dir.join("bad.yaml").display().to_string()]);
    assert!(
        !ok && err.contains("document 2: apiVersion: is required"),
        "{err}"
    );
    assert!(
        c.get_json("configmap", "ok").is_none(),
        "half of a refused request was applied"
    );

    // The site relay dies hard; meanwhile the app changes and the config map goes.
    site.kill9();
    write(
        &dir.join("app.yaml"),
        &POS_APP.replace("replicas: 2", "replicas: 5"),
    );
    let (ok, _, err) = c.relay(&["apply", "-f", &dir.join("app.yaml").display().to_string()]);
    assert!(ok, "{err}");
    let (ok, _, err) = c.relay(&["delete", "configmap", "pos-settings", "-n", "pos"]);
    assert!(ok, "{err}");
    let site = Proc::spawn(
        &dir,
        "site-1",
        &relay,
        &["serve", "--config", &cfg("site-1")],
    );
    c.eventually(
        "the restarted site delivered the change and the deletion",
        |c| {
            c.get_json("deployment", "pos").is_some_and(|v| {
                let s = &v["placements"][0]["summary"];
                s["max_revision"] == v["revision"]
                    && s["health"]["available"] == 1
                    && s["numbers"]["readyReplicas"]["sum"] == 5
            }) && c.get_json("configmap", "pos-settings").is_none()
        },
    );

    let (ok, out, _) = c.relay(&["get", "deployment", "pos", "-n", "pos"]);
    assert!(ok && out.contains("pos-app"), "{out}");
    // One cluster selected: its exact status reaches the root.
    let exact = c.get_json("deployment", "pos").unwrap()["placements"][0]["exactStatus"].clone();
    assert_eq!(exact["cluster"], "pos-1", "{exact}");
    assert_eq!(exact["status"]["readyReplicas"], 5, "{exact}");

    // The site's metrics say who is connected and how far behind they are.
    let metrics = http_get(metrics_port, "/metrics");
    assert!(
        metrics.contains("strata_children_connected{node=\"site-1\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("strata_child_lag{node=\"site-1\",child=\"pos-1\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("strata_parent_connected{node=\"site-1\"} 1"),
        "{metrics}"
    );

    // The root dies hard and comes back: nothing it accepted is lost, and the summary
    // is whole again once the site reconnects.
    root.kill9();
    let root = Proc::spawn(
        &dir,
        "center",
        &relay,
        &["serve", "--config", &cfg("center")],
    );
    c.eventually("the restarted root shows the app as before", |c| {
        c.get_json("deployment", "pos").is_some_and(|v| {
            let s = &v["placements"][0]["summary"];
            s["health"]["available"] == 1 && s["numbers"]["readyReplicas"]["sum"] == 5
        }) && c.get_json("configmap", "pos-settings").is_none()
    });

    // Everyone stops cleanly on SIGTERM.
    for p in [kiosk, pos, site, root] {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status} on SIGTERM");
    }

    // The kiosk never held anything of the app (its store says so).
    let store = strata_node::store::SledStore::open(&dir.join("data/kiosk-1")).unwrap();
    let stored = strata_node::store::Store::load(&store).unwrap();
    assert!(
        stored.entries.iter().all(|(_, e)| e.object().is_none()),
        "an unselected cluster stored objects"
    );
}
