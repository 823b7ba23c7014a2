//! A real cluster's end of a volume stream (issue 50): CSI VolumeSnapshots and mover
//! pods, driven through the API server.
//!
//! * **Read** (a move off this cluster): with `freeze`, the claim's writers are stopped
//!   first: every Deployment and StatefulSet of the namespace whose pod template mounts
//!   the claim is scaled to 0 (its replicas kept in [`objects::FROZEN_ANNOTATION`]) and held
//!   there — the backend's own enforcement applies them with 0 replicas while they are
//!   [`Frozen`] — and the stream waits until no Pod mounts the claim. Then a
//!   VolumeSnapshot of the claim is taken, a claim is restored from it, and a mover pod
//!   (`agent mover`, [`crate::mover`]) reads that claim read-only; the agent splices
//!   the parent's stream onto the pod's connection. The pod, the restored claim and
//!   the snapshot are deleted afterwards, whatever happened.
//! * **Write / Replicate** (a move onto this cluster): a mover pod writes the claim,
//!   which must exist: the root holds the placement's objects back from this cluster
//!   until its data is restored, so the copy carries the claim's manifest
//!   ([`VolumeOpen::WriteClaim`], protocol version 9) and the agent applies it (as its
//!   own, managed object: the placement's apply takes it over later) before starting
//!   the pod. From an older relay (a plain `Write`) the claim must exist already, else
//!   the stream fails and says so.
//! * **Thaw**: the stopped workloads get their replicas back.
//!
//! Every wait is bounded by [`MoverOptions::wait`]; every error names the object and
//! what was wrong with it.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use strata_node::tunnel::TunnelStream;
use strata_node::volume::{claim_name, write_frame};
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::tunnel::TunnelOpen;
use strata_protocol::volume::{VolumeFrame, VolumeOpen};
use tokio::io::{AsyncWriteExt, split};
use tokio::sync::watch;

mod writers;

use super::volume_objects::{self as objects, MoverNames, MoverPod};
use super::{FIELD_MANAGER, MANAGED_LABEL, MANAGED_VALUE};

/// The field manager of the objects a move makes (and of a stopped workload's scale).
pub const MOVER_MANAGER: &str = "strata-mover";

/// How moves run mover pods on this cluster (`kubernetes.mover_*` in the agent's
/// configuration).
#[derive(Debug, Clone)]
pub struct MoverOptions {
    /// The mover pods' image: one holding `/usr/local/bin/agent`.
    pub image: String,
    /// The VolumeSnapshotClass of the snapshots (the cluster's default when `None`).
    pub snapshot_class: Option<String>,
    /// The port a mover pod listens on.
    pub port: u16,
    /// The longest any one wait lasts (writers gone, snapshot ready, pod running).
    pub wait: Duration,
    /// How often a wait looks again.
    pub poll: Duration,
}

/// The image deploy/image/build.sh builds for this version (the agent's own).
pub fn default_mover_image() -> String {
    format!("localhost/strata:{}", env!("CARGO_PKG_VERSION"))
}

impl Default for MoverOptions {
    fn default() -> Self {
        MoverOptions {
            image: default_mover_image(),
            snapshot_class: None,
            port: 7700,
            wait: Duration::from_secs(300),
            poll: Duration::from_secs(1),
        }
    }
}

/// A workload a move stopped: (kind, namespace, name) of a Deployment or StatefulSet.
pub type FrozenWorkload = (String, String, String);

/// The workloads moves stopped, shared with the backend's worker, which applies them
/// with 0 replicas while they are here.
pub type Frozen = Arc<watch::Sender<BTreeSet<FrozenWorkload>>>;

/// A real cluster's volumes: what the agent serves its parent's volume streams with.
#[derive(Clone)]
pub struct KubeVolumes {
    client: kube::Client,
    options: Arc<MoverOptions>,
    token: Arc<String>,
    frozen: Frozen,
    /// Streams served so far (a part of the objects' names).
    streams: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for KubeVolumes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeVolumes")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
}

impl KubeVolumes {
    /// The volumes of the cluster behind `client`; `frozen` is the backend's set
    /// ([`super::KubeCluster::frozen`]). Mover pods are given `token`.
    pub fn new(client: kube::Client, options: MoverOptions, token: String, frozen: Frozen) -> Self {
        KubeVolumes {
            client,
            options: Arc::new(options),
            token: Arc::new(token),
            frozen,
            streams: Arc::default(),
        }
    }

    fn names(&self, claim: &VolumeClaim, request: u64) -> MoverNames {
        let n = self
            .streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        MoverNames::new(claim, request, n)
    }

    fn api(&self, ns: &str, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &resource(group, kind, plural))
    }

    /// Serves one volume stream from the parent (a failure is answered with
    /// [`VolumeFrame::Failed`]).
    pub async fn serve(&self, open: TunnelOpen, ask: VolumeOpen, mut stream: TunnelStream) {
        let r = match ask {
            VolumeOpen::Read {
                claim,
                skip,
                freeze,
            } => self.read(&open, &claim, skip, freeze, &mut stream).await,
            VolumeOpen::Write { claim } => {
                self.write(&open, &claim, None, false, &mut stream).await
            }
            VolumeOpen::Replicate { claim } => {
                self.write(&open, &claim, None, true, &mut stream).await
            }
            VolumeOpen::Thaw { claim } => match self.start_writers(&claim).await {
                Ok(()) => {
                    let _ = write_frame(&mut stream, &VolumeFrame::Thawed, &mut Vec::new()).await;
                    Ok(())
                }
                Err(e) => Err(e),
            },
            VolumeOpen::WriteClaim {
                claim,
                manifest,
                replica,
            } => {
                self.write(&open, &claim, Some(manifest), replica, &mut stream)
                    .await
            }
            VolumeOpen::Copy { .. }
            | VolumeOpen::CopyReplica { .. }
            | VolumeOpen::CopyClaim { .. } => {
                Err("an agent runs no copies (its parent does)".into())
            }
        };
        if let Err(reason) = r {
            tracing::warn!(request = open.request, %reason, "a volume stream failed");
            let _ = write_frame(
                &mut stream,
                &VolumeFrame::Failed { reason },
                &mut Vec::new(),
            )
            .await;
        }
        let _ = stream.shutdown().await;
    }

    async fn read(
        &self,
        open: &TunnelOpen,
        claim: &VolumeClaim,
        skip: Vec<strata_protocol::volume::ChunkSum>,
        freeze: bool,
        stream: &mut TunnelStream,
    ) -> Result<(), String> {
        if freeze {
            self.stop_writers(claim).await?;
        }
        let names = self.names(claim, open.request);
        let ask = VolumeOpen::Read {
            claim: claim.clone(),
            skip,
            freeze: false,
        };
        let r = self.read_snapshot(open, claim, &names, &ask, stream).await;
        let ns = &claim.namespace;
        self.delete(ns, "", "Pod", "pods", &names.name).await;
        self.delete(
            ns,
            "",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            &names.name,
        )
        .await;
        self.delete(
            ns,
            objects::SNAPSHOT_GROUP,
            "VolumeSnapshot",
            "volumesnapshots",
            &names.name,
        )
        .await;
        r
    }

    async fn read_snapshot(
        &self,
        open: &TunnelOpen,
        claim: &VolumeClaim,
        names: &MoverNames,
        ask: &VolumeOpen,
        stream: &mut TunnelStream,
    ) -> Result<(), String> {
        let ns = &claim.namespace;
        let claims = self.api(ns, "", "PersistentVolumeClaim", "persistentvolumeclaims");
        let source = get(&claims, &claim.claim)
            .await?
            .ok_or_else(|| format!("PersistentVolumeClaim {} does not exist", claim_name(claim)))?;
        let snapshots = self.api(
            ns,
            objects::SNAPSHOT_GROUP,
            "VolumeSnapshot",
            "volumesnapshots",
        );
        let class = self.options.snapshot_class.as_deref();
        apply(&snapshots, &objects::snapshot(names, claim, class)).await?;
        tracing::info!(claim = %claim_name(claim), snapshot = %names.name, "took a VolumeSnapshot of the claim");
        let what = format!("VolumeSnapshot {ns}/{}", names.name);
        let mut snapshot = self.waits(&what, "to be readyToUse");
        let snapshot = loop {
            if let Some(s) = get(&snapshots, &names.name).await? {
                match objects::snapshot_ready(&s) {
                    Ok(true) => break s,
                    Ok(false) => {}
                    Err(e) => return Err(format!("{what} failed: {e}")),
                }
            }
            snapshot.tick().await?;
        };
        apply(
            &claims,
            &objects::claim_from_snapshot(names, &source, &snapshot),
        )
        .await?;
        let pod = MoverPod {
            image: &self.options.image,
            port: self.options.port,
            token: &self.token,
            claim: &names.name,
            block: objects::is_block(&source),
            read_only: true,
        };
        self.run_mover(open, ns, names, &pod, ask, stream).await
    }

    async fn write(
        &self,
        open: &TunnelOpen,
        claim: &VolumeClaim,
        manifest: Option<Vec<u8>>,
        replica: bool,
        stream: &mut TunnelStream,
    ) -> Result<(), String> {
        let ns = &claim.namespace;
        let claims = self.api(ns, "", "PersistentVolumeClaim", "persistentvolumeclaims");
        let existing = get(&claims, &claim.claim).await?;
        let target = match (existing, manifest) {
            (Some(c), _) => c,
            (None, Some(manifest)) => {
                let mut body: Value = serde_json::from_slice(&manifest).map_err(|e| {
                    format!(
                        "the manifest of PersistentVolumeClaim {} is not JSON: {e}",
                        claim_name(claim)
                    )
                })?;
                if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                    for server_set in [
                        "resourceVersion",
                        "uid",
                        "managedFields",
                        "creationTimestamp",
                    ] {
                        meta.remove(server_set);
                    }
                    meta.insert("namespace".into(), json!(ns));
                }
                body["apiVersion"] = json!("v1");
                body["kind"] = json!("PersistentVolumeClaim");
                body["metadata"]["name"] = json!(claim.claim);
                body["metadata"]["labels"][MANAGED_LABEL] = json!(MANAGED_VALUE);
                body.as_object_mut().map(|m| m.remove("status"));
                let params = PatchParams::apply(FIELD_MANAGER).force();
                claims
                    .patch(&claim.claim, &params, &Patch::Apply(&body))
                    .await
                    .map_err(|e| {
                        format!("creating PersistentVolumeClaim {}: {e}", claim_name(claim))
                    })?;
                tracing::info!(claim = %claim_name(claim), "created the claim from its manifest for the move's copy");
                body
            }
            (None, None) => {
                return Err(format!(
                    "PersistentVolumeClaim {} does not exist on this cluster and the copy brought no manifest to create it from (a relay older than protocol version 9 on the way): create the claim on this cluster, then move again",
                    claim_name(claim)
                ));
            }
        };
        let names = self.names(claim, open.request);
        let pod = MoverPod {
            image: &self.options.image,
            port: self.options.port,
            token: &self.token,
            claim: &claim.claim,
            block: objects::is_block(&target),
            read_only: false,
        };
        let ask = if replica {
            VolumeOpen::Replicate {
                claim: claim.clone(),
            }
        } else {
            VolumeOpen::Write {
                claim: claim.clone(),
            }
        };
        let r = self.run_mover(open, ns, &names, &pod, &ask, stream).await;
        self.delete(ns, "", "Pod", "pods", &names.name).await;
        // The next pass's pod mounts the same claim: this one must be gone first.
        let pods = self.api(ns, "", "Pod", "pods");
        let mut waits = self.waits(&format!("Pod {ns}/{}", names.name), "to be deleted");
        let gone = loop {
            match get(&pods, &names.name).await {
                Ok(None) => break Ok(()),
                Ok(Some(_)) => {}
                Err(e) => break Err(e),
            }
            if let Err(e) = waits.tick().await {
                break Err(e);
            }
        };
        r.and(gone)
    }

    /// Starts the mover pod, waits until it runs, and splices `stream` onto it.
    async fn run_mover(
        &self,
        open: &TunnelOpen,
        ns: &str,
        names: &MoverNames,
        pod: &MoverPod<'_>,
        ask: &VolumeOpen,
        stream: &mut TunnelStream,
    ) -> Result<(), String> {
        let pods = self.api(ns, "", "Pod", "pods");
        apply(&pods, &objects::mover_pod(names, ns, pod)).await?;
        let what = format!("mover Pod {ns}/{}", names.name);
        let mut last = String::from("not created yet");
        let mut waits = self.waits(&what, "to be Running with an IP");
        let ip = loop {
            if let Some(p) = get(&pods, &names.name).await? {
                last = objects::pod_state(&p);
                if let Some(ip) = objects::pod_ready(&p).map_err(|e| format!("{what}: {e}"))? {
                    break ip;
                }
            }
            waits
                .tick()
                .await
                .map_err(|e| format!("{e} (last seen: {last})"))?;
        };
        let addr: SocketAddr = format!("{ip}:{}", self.options.port)
            .parse()
            .map_err(|e| format!("{what} has podIP {ip:?}: {e}"))?;
        tracing::info!(pod = %names.name, %addr, "the mover pod runs; splicing the volume stream onto it");
        let mut waits = self.waits(&what, &format!("to accept connections on {addr}"));
        let conn = loop {
            match crate::mover::connect(addr, &self.token, open, ask).await {
                Ok(c) => break c,
                Err(e) => tracing::debug!(%addr, error = %e, "the mover pod does not accept yet"),
            }
            waits.tick().await?;
        };
        splice(stream, conn)
            .await
            .map_err(|e| format!("the volume stream through {what} broke: {e}"))
    }

    /// A bounded wait: `what` has [`MoverOptions::wait`] to come `until`.
    fn waits(&self, what: &str, until: &str) -> Waits {
        let poll = self.options.poll.max(Duration::from_millis(1));
        Waits {
            left: self.options.wait.as_millis() / poll.as_millis(),
            poll,
            what: format!("{what} did not come {until} within {:?}", self.options.wait),
        }
    }

    async fn delete(&self, ns: &str, group: &str, kind: &str, plural: &str, name: &str) {
        let api = self.api(ns, group, kind, plural);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(object = %format!("{kind} {ns}/{name}"), "deleted after the move's stream")
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::warn!(object = %format!("{kind} {ns}/{name}"), error = %e, "cannot delete after the move's stream: delete it by hand (label strata.dev/mover)")
            }
        }
    }
}

async fn get(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, String> {
    match api.get_opt(name).await {
        Ok(o) => Ok(o.and_then(|o| serde_json::to_value(o).ok())),
        Err(e) => Err(format!("reading {name}: {e}")),
    }
}

async fn apply(api: &Api<DynamicObject>, body: &Value) -> Result<(), String> {
    let kind = body["kind"].as_str().unwrap_or_default();
    let name = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let ns = body
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply(MOVER_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map(|_| ())
    .map_err(|e| format!("creating {kind} {ns}/{name}: {e}"))
}

/// A bounded wait's remaining tries.
struct Waits {
    left: u128,
    poll: Duration,
    /// The error once no try is left.
    what: String,
}

impl Waits {
    /// Sleeps one poll, or fails once the wait is over.
    async fn tick(&mut self) -> Result<(), String> {
        if self.left == 0 {
            return Err(self.what.clone());
        }
        self.left -= 1;
        tokio::time::sleep(self.poll).await;
        Ok(())
    }
}

/// Copies both ways until the mover closes its side (it does once its last frame is
/// sent); the parent's end closing is passed on to the mover.
async fn splice(stream: &mut TunnelStream, conn: tokio::net::TcpStream) -> std::io::Result<()> {
    let (mut from_mover, mut to_mover) = conn.into_split();
    let (mut from_parent, mut to_parent) = split(stream);
    let up = async {
        let r = tokio::io::copy(&mut from_parent, &mut to_mover).await;
        let _ = to_mover.shutdown().await;
        r
    };
    let down = tokio::io::copy(&mut from_mover, &mut to_parent);
    tokio::pin!(up, down);
    let mut up_done = false;
    loop {
        tokio::select! {
            r = &mut down => return r.map(|_| ()),
            _ = &mut up, if !up_done => up_done = true,
        }
    }
}
