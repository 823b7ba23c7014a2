//! Three tiers as separate processes over real QUIC on loopback: a root, two regional
//! relays, two site relays under each, one agent (simulated cluster) per site.
//!
//! Covers: a placement reaches exactly the selected clusters through every tier and
//! comes back summarized; `relay status` shows the whole tier tree and `relay clusters`
//! when each cluster was last seen; a regional relay killed with SIGKILL while objects
//! change and go is sent only the delta when it returns (from the root's per-stream
//! metrics), and its subtree converges; a cluster revoked while its region is down is
//! closed and refused by its site relay once the region returns; the root's audit
//! trail; the Kubernetes-shaped API paths; a clean SIGTERM of every process.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{POS_APP, Proc, bin, free_port, http_get, log_tails, relay_cli, write};
use serde_json::Value;
use strata_relay::certs::Ca;

const REGIONS: [&str; 2] = ["eu", "us"];

/// Site relays and their one cluster: (region, site, cluster, role).
const SITES: [(&str, &str, &str, &str); 4] = [
    ("eu", "eu-site-1", "eu-pos", "pos"),
    ("eu", "eu-site-2", "eu-kiosk", "kiosk"),
    ("us", "us-site-1", "us-pos", "pos"),
    ("us", "us-site-2", "us-kiosk", "kiosk"),
];

/// Ten config maps of about 2 KiB each, placed with the app: the bulk of a first sync,
/// which a resync after a restart must not send again.
fn payload() -> String {
    (0..10)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: blob-{i}, namespace: pos, labels: {{ app: pos }} }}\ndata: {{ blob: \"{}\" }}\n---\n",
                "x".repeat(2048)
            )
        })
        .collect()
}

struct Tiers {
    dir: PathBuf,
    api_port: u16,
    metrics_port: u16,
}

impl Tiers {
    fn relay(&self, args: &[&str]) -> (bool, String, String) {
        relay_cli(&self.dir, self.api_port, args)
    }

    fn apply(&self, file: &str, text: &str) {
        let path = self.dir.join(file);
        write(&path, text);
        let (ok, _, err) = self.relay(&["apply", "-f", &path.display().to_string()]);
        assert!(ok, "apply {file}: {err}");
    }

    fn summary(&self, kind: &str, name: &str) -> Option<(Value, Value)> {
        let (ok, out, _) = self.relay(&["get", kind, name, "-n", "pos", "-o", "summary"]);
        if !ok {
            return None;
        }
        let v = serde_json::from_str::<Value>(&out)
            .ok()?
            .as_array()?
            .first()?
            .clone();
        Some((v["placements"][0]["summary"].clone(), v["revision"].clone()))
    }

    /// The root's counter of framed bytes sent to `peer` on the `class` stream of the
    /// current connection.
    fn root_stream_bytes(&self, peer: &str, class: &str) -> Option<u64> {
        let metrics = http_get(self.metrics_port, "/metrics");
        let prefix = format!(
            "strata_stream_sent_bytes_total{{node=\"center\",peer=\"{peer}\",class=\"{class}\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
    }

    fn eventually(&self, what: &str, mut check: impl FnMut(&Tiers) -> bool) {
        for _ in 0..400 {
            if check(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut names = vec!["center".to_owned()];
        names.extend(REGIONS.iter().map(|r| (*r).to_owned()));
        names.extend(SITES.iter().flat_map(|s| [s.1.to_owned(), s.2.to_owned()]));
        panic!(
            "timed out waiting until {what}\n{}",
            log_tails(&self.dir, &names, 8)
        );
    }
}

fn configure(dir: &Path) -> (Tiers, Vec<(String, String, &'static str)>) {
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    let (root_port, api_port, metrics_port) = (free_port(), free_port(), free_port());
    let mut nodes = Vec::new();
    let relay_cfg = |name: &str,
                     listen: u16,
                     parent: Option<(&str, u16)>,
                     children: &[&str],
                     extra: &str| {
        let parent = parent
            .map(|(p, port)| format!("parent: {{ name: {p}, address: 127.0.0.1:{port} }}\n"))
            .unwrap_or_default();
        format!(
            "node: {name}\nlisten: 127.0.0.1:{listen}\n{parent}tls: {{ cert: {name}.crt, key: {name}.key, ca: ca.crt }}\ndata: data/{name}\nchildren: [{}]\nsummary_interval_ms: 100\n{extra}",
            children.join(", ")
        )
    };
    write(
        &dir.join("center.yaml"),
        &relay_cfg(
            "center",
            root_port,
            None,
            &REGIONS,
            &format!(
                "api: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\nmetrics: 127.0.0.1:{metrics_port}\n"
            ),
        ),
    );
    nodes.push(("center".to_owned(), "relay".to_owned(), ""));
    for region in REGIONS {
        let region_port = free_port();
        let sites: Vec<&str> = SITES
            .iter()
            .filter(|s| s.0 == region)
            .map(|s| s.1)
            .collect();
        write(
            &dir.join(format!("{region}.yaml")),
            &relay_cfg(
                region,
                region_port,
                Some(("center", root_port)),
                &sites,
                &format!("labels: {{ region: {region} }}\n"),
            ),
        );
        nodes.push((region.to_owned(), "relay".to_owned(), ""));
        for (_, site, cluster, role) in SITES.iter().filter(|s| s.0 == region) {
            let site_port = free_port();
            write(
                &dir.join(format!("{site}.yaml")),
                &relay_cfg(site, site_port, Some((region, region_port)), &[cluster], ""),
            );
            nodes.push(((*site).to_owned(), "relay".to_owned(), ""));
            write(
                &dir.join(format!("{cluster}.yaml")),
                &format!(
                    "cluster: {cluster}\nlabels: {{ role: {role} }}\nparent: {{ name: {site}, address: 127.0.0.1:{site_port} }}\ntls: {{ cert: {cluster}.crt, key: {cluster}.key, ca: ca.crt }}\ndata: data/{cluster}\nsimulated: {{ ready_delay_ms: 100 }}\n"
                ),
            );
            nodes.push(((*cluster).to_owned(), "agent".to_owned(), role));
        }
    }
    for (name, _, _) in &nodes {
        ca.issue(name).unwrap().write_to(dir).unwrap();
    }
    (
        Tiers {
            dir: dir.to_owned(),
            api_port,
            metrics_port,
        },
        nodes,
    )
}

fn start(dir: &Path, name: &str, kind: &str) -> Proc {
    let cfg = dir.join(format!("{name}.yaml")).display().to_string();
    let program = bin(kind);
    let verb = if kind == "relay" { "serve" } else { "run" };
    Proc::spawn(dir, name, &program, &[verb, "--config", &cfg])
}

#[test]
fn three_tiers_deliver_by_placement_report_the_tree_and_resync_a_region_with_the_delta() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let (t, nodes) = configure(&dir);
    let mut procs: Vec<Proc> = nodes
        .iter()
        .map(|(name, kind, _)| start(&dir, name, kind))
        .collect();

    // Every link, at every tier, is up in the root's tier tree.
    t.eventually("relay status shows every link up", |t| {
        let (ok, out, _) = t.relay(&["status", "--agents"]);
        ok && out.contains("children 2/2")
            && out.matches(" up ").count() == 2 + 4 + 4
            && out.contains("│  ├─ eu-site-1")
            && out.contains("   └─ us-site-2")
    });
    // Each link shows the earliest expiry of the certificates on and below it (a year
    // from now: the test's CA issues with the default lifetime).
    let (_, tree, _) = t.relay(&["status", "--agents"]);
    let next_year =
        strata_topology::certs::utc_date(strata_topology::certs::unix_now() + 365 * 86_400);
    assert_eq!(
        tree.lines()
            .filter(|l| l.contains(" up ") && l.contains("   cert 20"))
            .count(),
        10,
        "every link shows its certificate's expiry ({next_year}):\n{tree}"
    );
    // Cluster counts and lags of the deeper tiers follow without waiting for a refresh.
    t.eventually("relay status knows every lag and cluster count", |t| {
        let (_, out, _) = t.relay(&["status"]);
        !out.contains("lag ?")
            && out.lines().filter(|l| l.contains("clusters 2 ")).count() == 2
            && out.lines().filter(|l| l.contains("clusters 1 ")).count() == 4
    });
    let (_, tree, _) = t.relay(&["status"]);
    assert!(
        tree.contains("agents: 4/4 connected") && !tree.contains("eu-pos"),
        "relay status lists relays and counts agents:\n{tree}"
    );
    t.eventually("the root knows every cluster, seen now", |t| {
        let (ok, out, _) = t.relay(&["clusters"]);
        ok && out.matches(" now ").count() == 4 && out.contains("center/eu/eu-site-1")
    });

    // A placement selecting role=pos reaches one cluster in each region.
    t.apply("app.yaml", &format!("{}{POS_APP}", payload()));
    // The root's audit trail says who applied what, as one JSON line.
    let log = std::fs::read_to_string(t.dir.join("center.log")).unwrap();
    let audit: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "audit")
        .collect();
    assert!(
        audit.iter().any(|v| v["fields"]["who"] == "admin"
            && v["fields"]["path"] == "/spaces/default/apply"
            && v["fields"]["status"] == 200
            && v["fields"]["objects"]
                .as_str()
                .is_some_and(|o| o.contains("Deployment pos/pos"))
            && v["timestamp"].is_string()),
        "no audit line for the apply: {audit:?}"
    );
    t.eventually("the app is available on both pos clusters", |t| {
        t.summary("deployment", "pos")
            .is_some_and(|(s, _)| s["expected"] == 2 && s["health"]["available"] == 2)
    });

    // The Kubernetes API names the same objects, as Kubernetes objects whose status
    // summarizes the fleet.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = strata_relay::client::ApiClient::new(
        format!("127.0.0.1:{}", t.api_port).parse().unwrap(),
        "center",
        &dir.join("ca.crt"),
        "s3cret",
    )
    .unwrap();
    let get = |path: &str| {
        rt.block_on(client.request(hyper::Method::GET, path, None))
            .unwrap()
    };
    let (status, one) = get("/spaces/default/apis/apps/v1/namespaces/pos/deployments/pos");
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["kind"], "Deployment", "{one}");
    let (status, fleet) = get(
        "/spaces/default/apis/strata.dev/v1alpha1/namespaces/pos/fleetstatuses/deployment.pos.pos-app",
    );
    assert_eq!(status, 200, "{fleet}");
    assert_eq!(fleet["summary"]["expected"], 2, "{fleet}");
    let (status, list) = get("/spaces/default/api/v1/namespaces/pos/configmaps");
    assert_eq!(status, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), 11, "{list}");
    let (status, _) = get("/spaces/default/apis/apps/v1/namespaces/other/deployments/pos");
    assert_eq!(status, 404);
    let (status, _) = get("/spaces/other/apis/apps/v1/namespaces/pos/deployments/pos");
    assert_eq!(status, 404, "spaces are isolated");

    // What the first sync to eu cost on its bulk stream.
    let first_sync = t.root_stream_bytes("eu", "bulk").unwrap();
    assert!(
        first_sync > 10 * 2048,
        "the first sync carried the payload: {first_sync}"
    );

    // The eu regional relay dies hard; meanwhile the app changes and a config map goes.
    let eu = procs.iter().position(|p| p.name == "eu").unwrap();
    procs[eu].kill9();
    t.eventually(
        "relay status shows eu down, clusters below it last seen",
        |t| {
            let (_, tree, _) = t.relay(&["status"]);
            let (_, clusters, _) = t.relay(&["clusters"]);
            tree.contains("└─ us")
                && tree
                    .lines()
                    .any(|l| l.contains("eu ") && l.contains("DOWN"))
                && clusters
                    .lines()
                    .filter(|l| l.contains("center/eu/"))
                    .all(|l| l.contains(" ago "))
        },
    );
    t.apply(
        "app.yaml",
        &format!(
            "{}{}",
            payload(),
            POS_APP.replace("replicas: 2", "replicas: 5")
        ),
    );
    let (ok, _, err) = t.relay(&["delete", "configmap", "pos-settings", "-n", "pos"]);
    assert!(ok, "{err}");
    // A cluster below the dead region is revoked: its site relay, cut off from the
    // root, learns it when the region returns, closes its session and refuses it since.
    let (ok, out, err) = t.relay(&["revoke", "eu-kiosk", "--reason", "stolen"]);
    assert!(
        ok && out.starts_with("revoked eu-kiosk at revision"),
        "{out}{err}"
    );
    procs[eu] = start(&dir, "eu", "relay");
    t.eventually("eu-site-2 closed and refuses the revoked eu-kiosk", |t| {
        let site = std::fs::read_to_string(t.dir.join("eu-site-2.log")).unwrap_or_default();
        let agent = std::fs::read_to_string(t.dir.join("eu-kiosk.log")).unwrap_or_default();
        site.contains("closing the session of a revoked child")
            && site.lines().any(|l| {
                l.contains("refusing a connection") && l.contains("was revoked at the root")
            })
            && agent.contains("was revoked at the root")
    });
    t.eventually(
        "eu's subtree converged to the change and the deletion",
        |t| {
            t.summary("deployment", "pos").is_some_and(|(s, rev)| {
                s["max_revision"] == rev
                    && s["health"]["available"] == 2
                    && s["numbers"]["readyReplicas"]["sum"] == 10
            }) && t.summary("configmap", "pos-settings").is_none()
        },
    );
    let resync = t.root_stream_bytes("eu", "bulk").unwrap();
    eprintln!("bulk bytes to eu: first sync {first_sync}, resync after kill -9 {resync}");
    assert!(
        resync > 0 && resync * 4 < first_sync,
        "a restarted region was sent {resync} bulk bytes; the first sync was {first_sync}: not a delta"
    );
    t.eventually("relay status shows eu up again with its sites", |t| {
        let (_, tree, _) = t.relay(&["status"]);
        tree.contains("children 2/2") && tree.contains("│  ├─ eu-site-1")
    });

    // A connected cluster two tiers below the root is revoked: the time until its site
    // relay closes its session (a figure, not asserted), and the root's audit trail.
    // A figure for the report only: nothing is asserted on it.
    #[allow(clippy::disallowed_types)]
    let started = std::time::Instant::now();
    let (ok, out, err) = t.relay(&["revoke", "us-pos"]);
    assert!(ok, "{out}{err}");
    t.eventually("us-site-1 closed the revoked us-pos", |t| {
        std::fs::read_to_string(t.dir.join("us-site-1.log"))
            .unwrap_or_default()
            .contains("closing the session of a revoked child")
    });
    eprintln!(
        "relay revoke to the session closed two tiers down: {:?}",
        started.elapsed()
    );
    let (ok, out, _) = t.relay(&["revoke", "us-pos"]);
    assert!(ok && out.contains("us-pos was already revoked"), "{out}");
    let log = std::fs::read_to_string(t.dir.join("center.log")).unwrap();
    assert!(
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["target"] == "audit"
                && v["fields"]["action"] == "revoked"
                && v["fields"]["node"] == "eu-kiosk"
                && v["fields"]["reason"] == "stolen"),
        "no audit line for the revocation"
    );

    // Everyone stops cleanly on SIGTERM, leaves first.
    for p in procs.into_iter().rev() {
        let name = p.name.clone();
        let status = p.terminate();
        assert!(status.success(), "{name} exited with {status} on SIGTERM");
    }
    // Unselected clusters never received anything of the app (their stores say so).
    for (name, _, role) in &nodes {
        if *role == "kiosk" {
            let store = strata_node::store::SledStore::open(&dir.join("data").join(name)).unwrap();
            let stored = strata_node::store::Store::load(&store).unwrap();
            assert!(
                stored.entries.iter().all(|(_, e)| e.object().is_none()),
                "unselected cluster {name} stored objects"
            );
        }
    }
}
