//! Volumes of REAL clusters move with the app (issue 50): CSI VolumeSnapshots and mover
//! pods, with named fakes since no kube-apiserver runs here. Two agents drive a
//! `FakeApiServer` each (kube-rs, server-side apply, as against a real cluster), below
//! the root `center`, in one process over QUIC on loopback. Beside each fake API server
//! a `FakeKubelet` (tests/tools/src/fake_apiserver/kubelet.rs) provisions claims as
//! directories, makes snapshots ready by copying, runs each Deployment's pods, and runs
//! each mover pod as a real process of the built agent binary (`agent mover`).
//!
//! Covered: files written into lab-1's claim, and more written after phase 1's
//! snapshot (phase 2 sends them), are on lab-2 after the move, equal (each entry's
//! kind, mode, mtime, bytes and link target compared); lab-1's Deployment was scaled to 0 before the last
//! reading mover pod was made (the second phase), the move completes (the app on lab-2
//! only), and no mover, restored claim or snapshot is left behind. A move whose second
//! phase cannot start its reading mover pod fails: the app stays on lab-1 with its
//! replicas back, and the placement's volume move says why.
//!
//! lab-2 has no claim before the move: the copy brings the claim's manifest (protocol
//! version 9) and lab-2's agent creates it for the mover pod to mount.
//!
//! A ReadWriteMany claim on both labs: lab-2's replica claim is created from the
//! manifest its first sync brings, and lab-1's writes reach it with the next sync.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::eventually;
use common::hierarchy::Hierarchy;
use serde_json::{Value, json};
use strata_agent::kubernetes::volumes::{KubeVolumes, MoverOptions};
use strata_agent::kubernetes::{self, Connect, KubeCluster, KubeOptions};
use strata_agent::runtime::AgentHandle;
use strata_agent::tunnel::TunnelTarget;
use strata_node::clock::Clock;
use strata_relay::tier::core::volume_gate::VolumePhase;
use strata_relay::tier::runtime::NodeHandle;
use strata_test_tools::fake_apiserver::FakeApiServer;
use strata_test_tools::fake_apiserver::kubelet::{FakeKubelet, KubeletOptions};

use crate::volume_moves::{app, apply, holds_app, volume_move};

/// The agent binary of this build, for the fake kubelet to run as mover pods.
fn agent_bin() -> PathBuf {
    // Built (or found up to date) as every process test's binaries are: an agent binary
    // left in the target by an older build would not know `mover`.
    common::bin("agent")
}

/// One real cluster: its fake API server, its fake CSI and kubelet, its agent.
struct Lab {
    fake: FakeApiServer,
    kubelet: FakeKubelet,
    agent: AgentHandle,
}

async fn lab(h: &Hierarchy, name: &str, subnet: u8, dir: &Path, wait: Duration) -> Lab {
    let fake = FakeApiServer::start().await;
    fake.insert(
        "",
        "namespaces",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
    )
    .await;
    let port = 7700;
    let kubelet = fake.start_kubelet(KubeletOptions {
        agent: agent_bin(),
        root: dir.join(name),
        subnet,
        port,
    });
    let kc_dir = dir.join(format!("{name}-kubeconfig"));
    std::fs::create_dir_all(&kc_dir).unwrap();
    let kubeconfig = fake.write_kubeconfig(&kc_dir);
    let (client, _) = kubernetes::client(&Connect::kubeconfig(kubeconfig))
        .await
        .unwrap();
    let options = KubeOptions {
        resync: Duration::from_millis(500),
        retry: Duration::from_millis(100),
        ..KubeOptions::default()
    };
    let cluster = KubeCluster::start(client.clone(), options, Clock::start());
    let mover = MoverOptions {
        image: "unused-by-the-fake-kubelet".into(),
        snapshot_class: Some("fake-csi".into()),
        port,
        wait,
        poll: Duration::from_millis(50),
    };
    let volumes = KubeVolumes::new(client.clone(), mover, "t0ken".into(), cluster.frozen());
    let region = name.replace('-', "");
    let agent = h
        .agent(name)
        .labels(&[("region", &region)])
        .under("center")
        .backend(Box::new(cluster))
        .tunnel(TunnelTarget::Kube(client, Some(volumes)))
        .start();
    Lab {
        fake,
        kubelet,
        agent,
    }
}

struct Fleet {
    root: NodeHandle,
    labs: Vec<Lab>,
    _dir: tempfile::TempDir,
    h: Hierarchy,
}

/// The fleet; its mover pods get 127.0.`subnet`.x (lab-1) and 127.0.`subnet + 1`.x
/// (lab-2): each test its own, since tests run side by side and movers share a port.
async fn fleet(wait: Duration, subnet: u8) -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let h = Hierarchy::new();
    let root = h
        .relay("center")
        .children(&["lab-1", "lab-2"])
        .start()
        .await;
    let labs = vec![
        lab(&h, "lab-1", subnet, dir.path(), wait).await,
        lab(&h, "lab-2", subnet + 1, dir.path(), wait).await,
    ];
    eventually("the root knows both clusters", || async {
        root.query(|c| c.reports().clusters().count()).await == Some(2)
    })
    .await;
    Fleet {
        root,
        labs,
        _dir: dir,
        h,
    }
}

impl Fleet {
    /// Places the app on lab-1 and writes files into its claim.
    async fn place_and_write(&self) -> PathBuf {
        apply(&self.root, &app("lab1", "1Gi")).await;
        let src = self.labs[0].kubelet.claim_dir("shop", "data");
        eventually("lab-1 runs the app on its claim", || async {
            holds_app(&self.labs[0].agent).await
                && src.exists()
                && self.labs[0]
                    .fake
                    .get("", "pods", Some("shop"), "shop-0")
                    .await
                    .is_some()
        })
        .await;
        std::fs::create_dir_all(src.join("orders/2026")).unwrap();
        std::fs::write(src.join("orders/2026/0001.json"), b"{\"total\": 12}").unwrap();
        std::fs::write(src.join("big.bin"), crate::volume_moves::bytes(3 << 20, 7)).unwrap();
        std::os::unix::fs::symlink("orders/2026/0001.json", src.join("latest")).unwrap();
        src
    }

    async fn shutdown(mut self) {
        for lab in self.labs.drain(..) {
            lab.agent.shutdown().await;
        }
        self.root.shutdown().await.unwrap();
        drop(self.h);
    }
}

/// Every entry of the tree (the mover's own directory left out): path, kind, mode,
/// mtime, and the bytes' length and sum (a file) or target (a link).
fn listing(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    fn walk(root: &Path, rel: &Path, out: &mut Vec<String>) {
        let mut names: Vec<_> = std::fs::read_dir(root.join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for name in names {
            let rel = rel.join(name);
            if rel == Path::new(".strata-mover") {
                continue;
            }
            let path = root.join(&rel);
            let m = std::fs::symlink_metadata(&path).unwrap();
            // A symbolic link's own mtime is left out: the fake CSI's copies cannot
            // keep it (std sets no link's times).
            let (what, mtime) = if m.is_dir() {
                ("dir".to_owned(), m.mtime())
            } else if m.file_type().is_symlink() {
                let to = std::fs::read_link(&path).unwrap();
                (format!("link to {}", to.display()), 0)
            } else {
                let data = std::fs::read(&path).unwrap();
                let sum = strata_node::volume::checksum(&data);
                (
                    format!("{} bytes, sum {:?}", data.len(), &sum[..4]),
                    m.mtime(),
                )
            };
            out.push(format!(
                "{} {what} mode {:o} mtime {mtime}",
                rel.display(),
                m.mode() & 0o7777,
            ));
            if m.is_dir() {
                walk(root, &rel, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, Path::new(""), &mut out);
    out
}

/// The requests' indexes: merge PATCHes of lab-1's Deployment (the scale to 0), and
/// creations of reading mover pods.
async fn scale_and_readers(fake: &FakeApiServer) -> (Vec<usize>, Vec<usize>) {
    let log = fake.requests().await;
    let scales = log
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.method == "PATCH"
                && r.path.ends_with("/deployments/shop")
                && !r.query.contains("fieldManager")
        })
        .map(|(i, _)| i)
        .collect();
    let readers = log
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.method == "PATCH"
                && r.path.contains("/pods/strata-mover-data-")
                && r.query.contains("fieldManager=strata-mover")
        })
        .map(|(i, _)| i)
        .collect();
    (scales, readers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_a_real_cluster_moves_through_a_snapshot_and_mover_pods() {
    let f = fleet(Duration::from_secs(30), 61).await;
    let src = f.place_and_write().await;
    let dst = f.labs[1].kubelet.claim_dir("shop", "data");

    // Phase 1's reading mover waits until the app has written more after the
    // snapshot it reads: phase 2 must bring that too.
    f.labs[0].kubelet.run_readers(0);
    apply(&f.root, &app("lab2", "1Gi")).await;
    eventually("phase 1's reading mover pod is made", || async {
        !scale_and_readers(&f.labs[0].fake).await.1.is_empty()
    })
    .await;
    std::fs::write(src.join("orders/2026/0001.json"), b"{\"total\": 99}").unwrap();
    std::fs::write(src.join("orders/2026/0002.json"), b"{\"total\": 7}").unwrap();
    f.labs[0].kubelet.run_readers(-1);
    for _ in 0..1200 {
        let restored = volume_move(&f.root)
            .await
            .is_some_and(|m| m.phase == VolumePhase::Restored);
        if restored && holds_app(&f.labs[1].agent).await && !holds_app(&f.labs[0].agent).await {
            break;
        }
        if let Some(m) = volume_move(&f.root).await
            && let VolumePhase::Failed(why) = &m.phase
        {
            panic!("the move failed: {why}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = volume_move(&f.root).await.unwrap();
    assert_eq!(m.phase, VolumePhase::Restored, "{m:?}");
    assert!(holds_app(&f.labs[1].agent).await, "the app runs on lab-2");
    println!("moved: {}", m.detail);

    // The data is on lab-2, equal; the mover's image beside it.
    assert_eq!(listing(&src), listing(&dst));
    assert_eq!(
        std::fs::read(dst.join("orders/2026/0001.json")).unwrap(),
        b"{\"total\": 99}"
    );
    assert!(dst.join("orders/2026/0002.json").exists());
    // Phase 2 sent what changed after phase 1's snapshot, not the whole volume.
    assert!(!m.detail.contains(": 0 bytes in phase 2"), "{}", m.detail);
    assert!(dst.join(".strata-mover/image").exists());
    // The claim lab-2's agent created from the manifest the copy brought is the
    // placement's now (its label and content hash).
    let made = f.labs[1]
        .fake
        .get("", "persistentvolumeclaims", Some("shop"), "data")
        .await
        .unwrap();
    assert_eq!(
        made.pointer("/metadata/labels/strata.dev~1managed-by"),
        Some(&json!("strata-agent")),
        "{made}"
    );
    assert!(
        made.pointer("/metadata/annotations/strata.dev~1content-hash")
            .is_some(),
        "{made}"
    );

    // lab-1's Deployment was scaled to 0 before the second phase's reading mover pod.
    let (scales, readers) = scale_and_readers(&f.labs[0].fake).await;
    assert!(readers.len() >= 2, "two phases read: {readers:?}");
    assert!(
        scales.first().is_some_and(|s| s < readers.last().unwrap()),
        "scaled at {scales:?}, readers made at {readers:?}"
    );

    // Nothing of the move is left behind on lab-1 (pods, restored claims, snapshots).
    let made: Vec<String> = f.labs[0]
        .fake
        .requests()
        .await
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.query.contains("fieldManager=strata-mover"))
        .map(|r| r.path)
        .collect();
    assert!(
        made.iter().any(|p| p.contains("/volumesnapshots/")),
        "{made:?}"
    );
    eventually("lab-1's move objects are deleted", || async {
        for path in &made {
            // /api/v1/namespaces/shop/pods/NAME, /apis/GROUP/v1/namespaces/shop/PLURAL/NAME
            let parts: Vec<&str> = path.split('/').collect();
            let (plural, name) = (parts[parts.len() - 2], parts[parts.len() - 1]);
            let group = if parts[1] == "apis" { parts[2] } else { "" };
            if f.labs[0]
                .fake
                .get(group, plural, Some("shop"), name)
                .await
                .is_some()
            {
                return false;
            }
        }
        true
    })
    .await;
    f.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_whose_reading_mover_never_runs_leaves_the_app_where_it_was_and_says_why() {
    // Long enough for phase 1's mover process to start on a loaded machine; phase 2's
    // pod then stays Pending that long.
    let f = fleet(Duration::from_secs(8), 63).await;
    f.place_and_write().await;
    // Phase 1's reading mover runs; phase 2's (after the writers stopped) never does.
    f.labs[0].kubelet.run_readers(1);
    apply(&f.root, &app("lab2", "1Gi")).await;
    eventually("the move failed", || async {
        matches!(
            volume_move(&f.root).await.map(|m| m.phase),
            Some(VolumePhase::Failed(_))
        )
    })
    .await;
    let m = volume_move(&f.root).await.unwrap();
    let VolumePhase::Failed(why) = &m.phase else {
        unreachable!()
    };
    assert!(
        why.contains("mover Pod shop/strata-mover-data-") && why.contains("Running"),
        "{why}"
    );
    println!("a failed move says: {why}");
    // The writers were stopped, and run again: replicas back, the annotation gone.
    let (scales, _) = scale_and_readers(&f.labs[0].fake).await;
    assert!(!scales.is_empty(), "phase 2 stopped the writers");
    eventually("lab-1's Deployment has its replica back", || async {
        let d: Option<Value> = f.labs[0]
            .fake
            .get("apps", "deployments", Some("shop"), "shop")
            .await;
        d.is_some_and(|d| {
            d.pointer("/spec/replicas") == Some(&json!(1))
                && d.pointer("/metadata/annotations/strata.dev~1frozen-replicas")
                    .is_none()
        })
    })
    .await;
    eventually("lab-1's app pod runs again", || async {
        f.labs[0]
            .fake
            .get("", "pods", Some("shop"), "shop-0")
            .await
            .is_some()
    })
    .await;
    assert!(holds_app(&f.labs[0].agent).await);
    assert!(!holds_app(&f.labs[1].agent).await);
    f.shutdown().await;
}

/// Waits (bounded: a minute, a hang guard) until `path` holds `want`.
async fn holds_file(path: &Path, want: &[u8]) {
    for _ in 0..1200 {
        if std::fs::read(path).is_ok_and(|got| got == want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "{} never held {:?}",
        path.display(),
        String::from_utf8_lossy(want)
    );
}

/// A ReadWriteMany claim placed on both labs: lab-1 (first by name) holds the primary;
/// lab-2 has no claim, and its agent creates it from the manifest the replica's first
/// sync brings (protocol version 9), before lab-2 gets the workload. What lab-1's app
/// writes reaches lab-2 with the next sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_clusters_readwritemany_replica_is_made_from_the_manifest_and_synced() {
    let f = fleet(Duration::from_secs(30), 65).await;
    let src = f.labs[0].kubelet.claim_dir("shop", "data");
    let dst = f.labs[1].kubelet.claim_dir("shop", "data");
    apply(
        &f.root,
        &crate::volume_replicas::rwx_app("lab1, lab2", "1Gi", 4),
    )
    .await;
    eventually("lab-1 runs the app on its claim", || async {
        holds_app(&f.labs[0].agent).await && src.exists()
    })
    .await;
    std::fs::write(src.join("orders.json"), b"{\"total\": 5}").unwrap();
    holds_file(&dst.join("orders.json"), b"{\"total\": 5}").await;
    let made = f.labs[1]
        .fake
        .get("", "persistentvolumeclaims", Some("shop"), "data")
        .await
        .unwrap();
    assert_eq!(
        made.pointer("/spec/accessModes/0"),
        Some(&json!("ReadWriteMany")),
        "lab-2's claim is the placement's: {made}"
    );
    eventually("lab-2 runs the app too, on its replica", || {
        holds_app(&f.labs[1].agent)
    })
    .await;
    std::fs::write(src.join("orders.json"), b"{\"total\": 6}").unwrap();
    holds_file(&dst.join("orders.json"), b"{\"total\": 6}").await;
    f.shutdown().await;
}
