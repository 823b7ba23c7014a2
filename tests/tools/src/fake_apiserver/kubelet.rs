//! A FAKE CSI driver, Deployment controller and kubelet behind a [`FakeApiServer`], for
//! volume moves of real clusters (issue 50):
//!
//! * **CSI**: every PersistentVolumeClaim is provisioned as a directory
//!   `<root>/claims/<ns>/<name>`; one whose `dataSource` is a VolumeSnapshot starts as a
//!   copy of the snapshot's directory. A VolumeSnapshot is made `readyToUse` by copying
//!   its source claim's directory to `<root>/snapshots/<ns>/<name>`.
//! * **Deployment controller**: a Deployment of `n` replicas has Pods `<name>-<i>`
//!   (`i < n`) with its template's spec, Running; scaled down, the extra Pods go. Its
//!   status says all `n` are available.
//! * **kubelet**: a Pod labelled `strata.dev/mover` is run as a real local process of
//!   the agent binary (`agent mover --listen 127.0.N.M:PORT --path <claim dir>`) with
//!   its container's env, and marked Running with that `podIP`; the process is killed
//!   when the Pod is deleted (or the kubelet dropped). [`FakeKubelet::run_readers`]
//!   leaves reading mover Pods Pending after the first few (a pod that never runs).
//!
//! Everything is looked at every 20 ms; it is a fake, with no scheduling, no nodes and
//! no access modes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::store::Slot;
use super::{FakeApiServer, Inner, slot};

/// The fake CSI driver, controller and kubelet of one fake cluster.
pub struct FakeKubelet {
    task: tokio::task::JoinHandle<()>,
    /// How many more reading mover pods run (negative: any number).
    readers: Arc<AtomicI64>,
    root: PathBuf,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        // The task owns the mover processes: aborting it drops them, which kills them.
        self.task.abort();
    }
}

/// How the fake kubelet runs mover pods.
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// The agent binary.
    pub agent: PathBuf,
    /// Where claims and snapshots are kept as directories.
    pub root: PathBuf,
    /// Mover pods get `127.0.<subnet>.<n>` (n from 2).
    pub subnet: u8,
    /// The port movers listen on (the agent's `mover_port`).
    pub port: u16,
}

struct Mover {
    child: Child,
    _scratch: PathBuf,
}

impl Drop for Mover {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FakeApiServer {
    /// Starts a fake CSI driver, Deployment controller and kubelet on this server.
    pub fn start_kubelet(&self, options: KubeletOptions) -> FakeKubelet {
        let readers = Arc::new(AtomicI64::new(-1));
        let root = options.root.clone();
        let task = tokio::spawn(run(self.inner.clone(), options, readers.clone()));
        FakeKubelet {
            task,
            readers,
            root,
        }
    }
}

impl FakeKubelet {
    /// Runs `n` more reading mover pods, and leaves any after them Pending (a pod
    /// that never runs: the move's second phase fails after stopping the writers).
    pub fn run_readers(&self, n: i64) {
        self.readers.store(n, Ordering::SeqCst);
    }

    /// The directory of claim `ns/name`.
    pub fn claim_dir(&self, ns: &str, name: &str) -> PathBuf {
        self.root.join("claims").join(ns).join(name)
    }
}

async fn objects(inner: &Inner, group: &str, plural: &str) -> Vec<(Slot, Value)> {
    let state = inner.state.lock().await;
    state
        .objects
        .objects
        .iter()
        .filter(|(s, _)| s.group == group && s.plural == plural)
        .map(|(s, o)| (s.clone(), o.object.clone()))
        .collect()
}

async fn patch(inner: &Inner, slot: &Slot, patch: Value) {
    let mut state = inner.state.lock().await;
    if state.objects.objects.contains_key(slot) {
        let _ = state.objects.merge_patch(slot, &patch, "fake-kubelet");
        let rv = state.objects.rv;
        drop(state);
        inner.rv.send_replace(rv);
    }
}

async fn insert(inner: &Inner, slot: &Slot, object: Value) {
    let mut state = inner.state.lock().await;
    state.objects.insert(slot, object);
    let rv = state.objects.rv;
    drop(state);
    inner.rv.send_replace(rv);
}

async fn remove(inner: &Inner, slot: &Slot) {
    let mut state = inner.state.lock().await;
    state.objects.delete(slot);
    let rv = state.objects.rv;
    drop(state);
    inner.rv.send_replace(rv);
}

/// Copies the tree at `from` into `to` (made empty first), keeping files' and
/// directories' mtimes as a snapshot does (not symbolic links': std cannot set them).
pub fn copy_tree(from: &Path, to: &Path) {
    copy_entries(from, to);
    let mtime = std::fs::metadata(from).unwrap().modified().unwrap();
    std::fs::File::open(to)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

fn copy_entries(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&src, &dst);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else {
            std::fs::copy(&src, &dst).unwrap();
            let mtime = entry.metadata().unwrap().modified().unwrap();
            std::fs::File::options()
                .write(true)
                .open(&dst)
                .unwrap()
                .set_modified(mtime)
                .unwrap();
        }
    }
}

async fn run(inner: Arc<Inner>, options: KubeletOptions, readers: Arc<AtomicI64>) {
    // By pod and uid: a pod deleted and made again under its name is a new pod.
    let mut movers: BTreeMap<(Slot, String), Mover> = BTreeMap::new();
    let mut next_ip = 2u8;
    let dir = |kind: &str, s: &Slot| {
        options
            .root
            .join(kind)
            .join(s.namespace.as_deref().unwrap_or_default())
            .join(&s.name)
    };
    loop {
        // CSI: claims and snapshots.
        for (s, claim) in objects(&inner, "", "persistentvolumeclaims").await {
            let d = dir("claims", &s);
            if d.exists() {
                continue;
            }
            match claim
                .pointer("/spec/dataSource/name")
                .and_then(Value::as_str)
            {
                Some(snap) => {
                    let from = dir(
                        "snapshots",
                        &Slot {
                            name: snap.to_owned(),
                            ..s.clone()
                        },
                    );
                    copy_tree(&from, &d);
                }
                None => std::fs::create_dir_all(&d).unwrap(),
            }
            patch(&inner, &s, json!({"status": {"phase": "Bound"}})).await;
        }
        for (s, snap) in objects(&inner, "snapshot.storage.k8s.io", "volumesnapshots").await {
            if snap.pointer("/status/readyToUse") == Some(&json!(true)) {
                continue;
            }
            let Some(source) = snap
                .pointer("/spec/source/persistentVolumeClaimName")
                .and_then(Value::as_str)
            else {
                continue;
            };
            let from = dir(
                "claims",
                &Slot {
                    name: source.to_owned(),
                    ..s.clone()
                },
            );
            if !from.exists() {
                continue;
            }
            copy_tree(&from, &dir("snapshots", &s));
            patch(
                &inner,
                &s,
                json!({"status": {"readyToUse": true, "restoreSize": "1Gi"}}),
            )
            .await;
        }
        // The Deployment controller.
        let pods = objects(&inner, "", "pods").await;
        for (s, d) in objects(&inner, "apps", "deployments").await {
            let replicas = d
                .pointer("/spec/replicas")
                .and_then(Value::as_u64)
                .unwrap_or(1);
            let spec = d
                .pointer("/spec/template/spec")
                .cloned()
                .unwrap_or(json!({}));
            let ns = s.namespace.clone();
            for i in 0..replicas {
                let name = format!("{}-{i}", s.name);
                let ps = slot("", "pods", ns.as_deref(), &name);
                if !pods.iter().any(|(p, _)| *p == ps) {
                    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": ns,
                                     "labels": {"fake-kubelet/deployment": s.name}},
                        "spec": spec, "status": {"phase": "Running", "podIP": "10.0.0.1"}});
                    insert(&inner, &ps, pod).await;
                }
            }
            let status = json!({"observedGeneration": d.pointer("/metadata/generation"),
                "replicas": replicas, "updatedReplicas": replicas,
                "availableReplicas": replicas, "readyReplicas": replicas});
            if d.get("status") != Some(&status) {
                patch(&inner, &s, json!({ "status": status })).await;
            }
            for (p, pod) in &pods {
                let owned = pod.pointer("/metadata/labels/fake-kubelet~1deployment")
                    == Some(&json!(s.name));
                let index = p
                    .name
                    .rsplit('-')
                    .next()
                    .and_then(|i| i.parse::<u64>().ok());
                if owned && p.namespace == ns && index.is_some_and(|i| i >= replicas) {
                    remove(&inner, p).await;
                }
            }
        }
        // The kubelet: mover pods as processes.
        let uid = |pod: &Value| {
            pod.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        movers.retain(|(s, u), _| pods.iter().any(|(p, pod)| p == s && uid(pod) == *u));
        for (s, pod) in &pods {
            let role = pod.pointer("/metadata/labels/strata.dev~1mover");
            if role.is_none() || movers.contains_key(&(s.clone(), uid(pod))) {
                continue;
            }
            let Some(claim) = pod
                .pointer("/spec/volumes/0/persistentVolumeClaim/claimName")
                .and_then(Value::as_str)
            else {
                continue;
            };
            let volume = dir(
                "claims",
                &Slot {
                    plural: "persistentvolumeclaims".into(),
                    name: claim.to_owned(),
                    ..s.clone()
                },
            );
            if !volume.exists() {
                continue; // not provisioned yet
            }
            if role == Some(&json!("reader")) {
                let left = readers.load(Ordering::SeqCst);
                if left == 0 {
                    continue;
                }
                if left > 0 {
                    readers.fetch_sub(1, Ordering::SeqCst);
                }
            }
            let ip = format!("127.0.{}.{next_ip}", options.subnet);
            next_ip = next_ip.wrapping_add(1).max(2);
            let scratch = options.root.join("scratch").join(&s.name);
            std::fs::create_dir_all(&scratch).unwrap();
            let mut cmd = Command::new(&options.agent);
            cmd.args([
                "mover",
                "--listen",
                &format!("{ip}:{}", options.port),
                "--path",
            ])
            .arg(&volume)
            .arg("--scratch")
            .arg(&scratch)
            .stdin(Stdio::null());
            for e in pod
                .pointer("/spec/containers/0/env")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
                    cmd.env(k, v);
                }
            }
            let child = cmd.spawn().unwrap();
            movers.insert(
                (s.clone(), uid(pod)),
                Mover {
                    child,
                    _scratch: scratch,
                },
            );
            patch(
                &inner,
                s,
                json!({"status": {"phase": "Running", "podIP": ip}}),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
