//! Volume moves at a relay (see `strata_node::volume` and
//! `strata_protocol::volume`): forwarding the volume streams the parent opens one tier
//! down, running a copy when this relay is the lowest common relay of the two
//! clusters, and, at the root, driving each placement's volume move in two phases.
//!
//! A copy is asked with [`copy`]: while both clusters lie below the same child, the
//! request goes down to it as a [`VolumeOpen::Copy`] stream; the first relay that finds
//! them below two different children (the root for two regions, a region relay for two
//! of its sites) opens a reading stream toward the old cluster and a writing stream
//! toward the new one and pumps chunks between them, so the data climbs only as high as
//! it must. A pass cut by a broken link is resumed, up to [`MAX_PASSES`], from what
//! the writer holds.
//!
//! A ReadWriteOnce move ([`run_move`]): phase 1 copies while the old copy runs; phase 2
//! stops the old copy's writers (the claim is frozen at the old cluster) and copies what
//! changed; then the root lets the move go on (`core/volume_gate.rs`), and the new
//! clusters get the placement's objects, their claims already restored. The write
//! downtime is phase 2's duration. A failure lets the old writers write again and leaves
//! the placement where it was.
//!
//! ReadWriteMany replication runs the same copy as [`CopyKind::Replica`]: the writer
//! stays a read-only replica, and a sync is one pass (the next sync, an interval later,
//! resumes a cut one). The root's syncs and cutovers are driven by
//! `crate::tier::volume_replicas`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use strata_node::driver::{self, Input};
use strata_node::tunnel::{self, TunnelStream};
use strata_node::volume::{
    self as node_volume, Side, VolumeError, claim_name, read_frame, write_frame,
};
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::tunnel::TunnelOpen;
use strata_protocol::volume::{StreamOpen, VOLUME_VERSION, VolumeFrame, VolumeOpen};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::core::NodeCore;
use super::input::{RelayInput, TunnelRoute};

/// How many passes a copy makes at most (each resumes where the last was cut).
pub const MAX_PASSES: u32 = 40;

/// The pause between passes.
pub const PASS_PAUSE: Duration = Duration::from_millis(500);

/// How long a relay waits for a lower relay to finish a copy it passed down.
pub const COPY_TIMEOUT: Duration = Duration::from_secs(3600);

/// Phase 1 copies again what changed while it ran, at most this many more times, while
/// what changed halves each round and is more than [`PRECOPY_ENOUGH`].
pub const PRECOPY_ROUNDS: u32 = 3;

/// Below this, phase 1 stops copying again and phase 2 starts.
pub const PRECOPY_ENOUGH: u64 = 4 << 20;

/// How often the root looks for moves to start.
pub(super) const MOVE_POLL: Duration = Duration::from_millis(100);

/// Who the volume streams' headers name (for the logs of every tier).
const MOVER: &str = "strata:volume-move";

pub(super) static REQUESTS: AtomicU64 = AtomicU64::new(1 << 40);

pub(crate) async fn query<T: Send + 'static>(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    f: impl FnOnce(&mut NodeCore) -> T + Send + 'static,
) -> Option<T> {
    driver::ask(inputs, |reply| {
        RelayInput::Query(Box::new(move |core| {
            let _ = reply.send(f(core));
        }))
    })
    .await
}

/// Where a volume stream to `cluster` goes from here: the tunnel route, if the child
/// on it negotiated `min_version` (the stream's [`VolumeOpen::min_version`]) or later.
async fn route(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    cluster: &str,
    min_version: strata_protocol::wire::ProtocolVersion,
) -> Result<(TunnelRoute, strata_protocol::wire::ProtocolVersion), VolumeError> {
    let cut = |detail: String| VolumeError::Cut {
        what: format!("to {cluster}"),
        detail,
    };
    let r = super::tunnel::ask_route(inputs, cluster)
        .await
        .map_err(|r| cut(r.message))?;
    let child = r.child.clone();
    match query(inputs, move |c| c.child_version(&child))
        .await
        .flatten()
    {
        Some(v) if v >= min_version => Ok((r, v)),
        Some(v) => Err(VolumeError::Failed {
            cluster: cluster.to_owned(),
            reason: format!(
                "{} speaks protocol version {v}; this volume stream needs {min_version} on every link",
                r.child
            ),
        }),
        None => Err(cut(format!("{} is not connected", r.child))),
    }
}

/// A stream the parent opened, served here: a tunnel forwarded, a volume stream
/// forwarded, or a copy run here or passed down.
pub(crate) async fn from_parent(
    inputs: mpsc::Sender<Input<RelayInput>>,
    open: StreamOpen,
    up: TunnelStream,
) {
    match open {
        StreamOpen::Tunnel(open) => super::tunnel::forward(inputs, open, up).await,
        StreamOpen::Volume(
            open,
            VolumeOpen::Copy {
                from,
                claim,
                freeze,
            },
        ) => {
            serve_copy(inputs, open, from, claim, CopyKind::Move { freeze }, up).await;
        }
        StreamOpen::Volume(open, VolumeOpen::CopyReplica { from, claim }) => {
            serve_copy(inputs, open, from, claim, CopyKind::Replica, up).await;
        }
        StreamOpen::Volume(
            open,
            VolumeOpen::CopyClaim {
                from,
                claim,
                manifest,
                freeze,
                replica,
            },
        ) => {
            let kind = if replica {
                CopyKind::Replica
            } else {
                CopyKind::Move { freeze }
            };
            serve_copy_with(inputs, open, from, claim, kind, Some(manifest), up).await;
        }
        StreamOpen::Volume(open, ask) => forward(inputs, open, ask, up).await,
    }
}

async fn fail(mut up: TunnelStream, reason: String) {
    let _ = write_frame(&mut up, &VolumeFrame::Failed { reason }, &mut Vec::new()).await;
    let _ = up.shutdown().await;
}

/// A volume stream one tier down, toward its cluster.
async fn forward(
    inputs: mpsc::Sender<Input<RelayInput>>,
    open: TunnelOpen,
    ask: VolumeOpen,
    up: TunnelStream,
) {
    // An ask with the claim's manifest goes to an older child without it.
    let (route, version) = match route(
        &inputs,
        &open.cluster,
        ask.clone().for_version(0).min_version(),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return fail(up, e.to_string()).await,
    };
    let ask = ask.for_version(version);
    match node_volume::open(&route.link, &route.child, &open, &ask).await {
        Ok(down) => tunnel::splice(up, down).await,
        Err(e) => fail(up, e.to_string()).await,
    }
    drop(route.permit);
}

async fn serve_copy(
    inputs: mpsc::Sender<Input<RelayInput>>,
    open: TunnelOpen,
    from: String,
    claim: VolumeClaim,
    kind: CopyKind,
    up: TunnelStream,
) {
    serve_copy_with(inputs, open, from, claim, kind, None, up).await;
}

async fn serve_copy_with(
    inputs: mpsc::Sender<Input<RelayInput>>,
    open: TunnelOpen,
    from: String,
    claim: VolumeClaim,
    kind: CopyKind,
    manifest: Option<Vec<u8>>,
    mut up: TunnelStream,
) {
    let (to, request) = (open.cluster.as_str(), open.request);
    let copied = copy_as(
        &inputs,
        request,
        &from,
        to,
        &claim,
        kind,
        manifest.as_deref(),
    )
    .await;
    let frame = match copied {
        Ok(c) => c.frame(),
        Err(reason) => VolumeFrame::Failed { reason },
    };
    let _ = write_frame(&mut up, &frame, &mut Vec::new()).await;
    let _ = up.shutdown().await;
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// The relay that ran it (the lowest common relay).
    pub by: String,
    /// The source's size.
    pub size: u64,
    /// Chunks sent (over every pass).
    pub sent: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Passes.
    pub passes: u32,
}

impl CopyReport {
    fn frame(&self) -> VolumeFrame {
        VolumeFrame::Copied {
            by: self.by.clone(),
            size: self.size,
            sent: self.sent,
            bytes: self.bytes,
            passes: self.passes,
        }
    }
}

/// What a copy is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyKind {
    /// A move's copy (the written claim is the copy that runs from then on); `freeze`
    /// stops the old copy's writers first. Resumed up to [`MAX_PASSES`] times.
    Move {
        /// Stop the old copy's writers first (phase 2, or a cutover).
        freeze: bool,
    },
    /// One sync of a ReadWriteMany replica: the written claim stays read-only. One pass:
    /// the next sync resumes a cut one.
    Replica,
}

impl CopyKind {
    fn passes(self) -> u32 {
        match self {
            CopyKind::Move { .. } => MAX_PASSES,
            CopyKind::Replica => 1,
        }
    }
}

/// Copies `claim` from the cluster `from` to the cluster `to`, both below this relay:
/// here if they lie below different children, else by the child below which both lie.
/// `freeze` stops the old copy's writers first. Gives why it failed.
pub async fn copy(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    request: u64,
    from: &str,
    to: &str,
    claim: &VolumeClaim,
    freeze: bool,
) -> Result<CopyReport, String> {
    copy_as(
        inputs,
        request,
        from,
        to,
        claim,
        CopyKind::Move { freeze },
        None,
    )
    .await
}

/// [`copy`] for a move or a replica's sync; with the claim's `manifest` when known, so
/// that a cluster lacking the claim creates it ([`VolumeOpen::WriteClaim`]).
pub async fn copy_as(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    request: u64,
    from: &str,
    to: &str,
    claim: &VolumeClaim,
    kind: CopyKind,
    manifest: Option<&[u8]>,
) -> Result<CopyReport, String> {
    let name = query(inputs, |c| c.name().to_owned())
        .await
        .ok_or("the relay is stopping")?;
    let mut report = CopyReport {
        by: name.clone(),
        ..CopyReport::default()
    };
    let mut last = String::new();
    let passes = kind.passes();
    for pass in 1..=passes {
        report.passes = pass;
        let pass_of = Pass {
            request,
            from,
            to,
            claim,
            kind,
            manifest,
        };
        match one_pass(inputs, &pass_of, &mut report).await {
            Ok(()) => return Ok(report),
            Err(e) if passes == 1 => return Err(e.to_string()),
            Err(e) if e.resumable() => {
                tracing::warn!(claim = %claim_name(claim), from, to, pass, error = %e, "a volume copy was cut; resuming from what the writer holds");
                last = e.to_string();
                tokio::time::sleep(PASS_PAUSE).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!(
        "copying {} from {from} to {to} at {name}: cut {passes} times, last: {last}",
        claim_name(claim)
    ))
}

/// One pass of a copy: what it copies, from where to where.
struct Pass<'a> {
    request: u64,
    from: &'a str,
    to: &'a str,
    claim: &'a VolumeClaim,
    kind: CopyKind,
    /// The claim's manifest, when known.
    manifest: Option<&'a [u8]>,
}

async fn one_pass(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    p: &Pass<'_>,
    report: &mut CopyReport,
) -> Result<(), VolumeError> {
    let Pass {
        request,
        from,
        to,
        claim,
        kind,
        manifest,
    } = *p;
    let (write, down_copy, freeze) = match kind {
        CopyKind::Move { freeze } => (
            VolumeOpen::Write {
                claim: claim.clone(),
            },
            VolumeOpen::Copy {
                from: from.to_owned(),
                claim: claim.clone(),
                freeze,
            },
            freeze,
        ),
        CopyKind::Replica => (
            VolumeOpen::Replicate {
                claim: claim.clone(),
            },
            VolumeOpen::CopyReplica {
                from: from.to_owned(),
                claim: claim.clone(),
            },
            false,
        ),
    };
    let (to_route, to_version) = route(inputs, to, write.min_version()).await?;
    let (from_route, _) = route(inputs, from, VOLUME_VERSION).await?;
    // With the claim's manifest, for a child that reads it.
    let (write, down_copy) = match manifest {
        Some(manifest) => {
            let replica = kind == CopyKind::Replica;
            let write = VolumeOpen::WriteClaim {
                claim: claim.clone(),
                manifest: manifest.to_vec(),
                replica,
            };
            let down = VolumeOpen::CopyClaim {
                from: from.to_owned(),
                claim: claim.clone(),
                manifest: manifest.to_vec(),
                freeze,
                replica,
            };
            (write.for_version(to_version), down.for_version(to_version))
        }
        None => (write, down_copy),
    };
    let header = |cluster: &str| TunnelOpen {
        cluster: cluster.to_owned(),
        request,
        user: MOVER.to_owned(),
    };
    if to_route.child == from_route.child {
        // Both below one child: the copy runs lower down.
        let mut down =
            node_volume::open(&to_route.link, &to_route.child, &header(to), &down_copy).await?;
        let cut = |detail: String| VolumeError::Cut {
            what: format!("copy below {}", to_route.child),
            detail,
        };
        let frame = tokio::time::timeout(COPY_TIMEOUT, read_frame(&mut down, &mut Vec::new()))
            .await
            .map_err(|_| cut(format!("no answer in {COPY_TIMEOUT:?}")))?
            .map_err(|e| cut(e.to_string()))?;
        return match frame {
            Some(VolumeFrame::Copied {
                by,
                size,
                sent,
                bytes,
                passes,
            }) => {
                *report = CopyReport {
                    by,
                    size,
                    sent: report.sent + sent,
                    bytes: report.bytes + bytes,
                    passes,
                };
                Ok(())
            }
            Some(VolumeFrame::Failed { reason }) => Err(VolumeError::Failed {
                cluster: to_route.child.clone(),
                reason,
            }),
            Some(f) => Err(VolumeError::Unexpected {
                what: format!("copy below {}", to_route.child),
                frame: node_volume::frame_kind(&f),
            }),
            None => Err(cut("the stream ended".into())),
        };
    }
    let mut writer = Side {
        cluster: to.to_owned(),
        stream: node_volume::open(&to_route.link, &to_route.child, &header(to), &write).await?,
    };
    let held = node_volume::held(&mut writer).await?;
    let read = VolumeOpen::Read {
        claim: claim.clone(),
        skip: held.clone(),
        freeze,
    };
    let mut reader = Side {
        cluster: from.to_owned(),
        stream: node_volume::open(&from_route.link, &from_route.child, &header(from), &read)
            .await?,
    };
    let out = node_volume::pump(&mut reader, &mut writer, &held).await?;
    tracing::info!(claim = %claim_name(claim), from, to, size = out.size, sent = out.sent, skipped = out.skipped, "copied a volume pass here (the lowest common relay)");
    report.size = out.size;
    report.sent += out.sent;
    report.bytes += out.bytes;
    Ok(())
}

/// Copies `claim` from `from` to `to` through the node `node` (for benchmarks and
/// tests: moves start by themselves at the root, `run_moves`).
pub async fn copy_volume(
    node: &super::client::NodeClient,
    from: &str,
    to: &str,
    claim: &VolumeClaim,
    freeze: bool,
) -> Result<CopyReport, String> {
    let request = REQUESTS.fetch_add(1, Ordering::Relaxed);
    copy(node.inputs(), request, from, to, claim, freeze).await
}

/// A new request number for volume streams' headers.
pub(crate) fn next_request() -> u64 {
    REQUESTS.fetch_add(1, Ordering::Relaxed)
}

/// Lets the writers of `claim` at `cluster` write again (a failed move).
pub async fn thaw(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    cluster: &str,
    claim: &VolumeClaim,
) -> Result<(), String> {
    let (r, _) = route(inputs, cluster, VOLUME_VERSION)
        .await
        .map_err(|e| e.to_string())?;
    let open = TunnelOpen {
        cluster: cluster.to_owned(),
        request: REQUESTS.fetch_add(1, Ordering::Relaxed),
        user: MOVER.to_owned(),
    };
    let ask = VolumeOpen::Thaw {
        claim: claim.clone(),
    };
    let mut s = node_volume::open(&r.link, &r.child, &open, &ask)
        .await
        .map_err(|e| e.to_string())?;
    match read_frame(&mut s, &mut Vec::new()).await {
        Ok(Some(VolumeFrame::Thawed)) => Ok(()),
        Ok(Some(VolumeFrame::Failed { reason })) => Err(reason),
        Ok(other) => Err(format!("unexpected answer {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Lets the writers of `claim` at `cluster` write again after a failed move. The old
/// cluster may be out of reach for a while (the cut that failed the copy): its writers
/// must get their claim back, so this is tried as long as a copy would be.
pub(crate) async fn thaw_patiently(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    cluster: &str,
    claim: &VolumeClaim,
) {
    for pass in 1..=MAX_PASSES {
        match thaw(inputs, cluster, claim).await {
            Ok(()) => return,
            Err(e) if pass == MAX_PASSES => {
                tracing::error!(cluster, claim = %claim_name(claim), error = %e, "could not let the old writers write again: the claim stays read-only");
            }
            Err(_) => tokio::time::sleep(PASS_PAUSE).await,
        }
    }
}

pub(crate) use super::volume_moves::run_moves;
pub use super::volume_moves::{move_status, run_move};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::core::volume_gate::{VolumeMove, VolumePhase};
    use super::*;
    use strata_protocol::time::UnixMillis;
    use strata_protocol::volume::AccessMode;

    #[test]
    fn the_status_says_where_a_move_stands() {
        let mut m = VolumeMove {
            pairs: vec![("eu-1".into(), "us-1".into())],
            claims: vec![(
                VolumeClaim {
                    claim: "data".into(),
                    namespace: "shop".into(),
                },
                AccessMode::ReadWriteOnce,
            )],
            phase: VolumePhase::Restored,
            started: UnixMillis(0),
            downtime_ms: Some(62),
            detail: "shop/data eu-1->us-1 via center".into(),
            retry_at: None,
        };
        let v = move_status(&m);
        assert_eq!(v["phase"], "Restored");
        assert_eq!(v["writeDowntimeMs"], 62);
        assert_eq!(v["from"], json!(["eu-1"]));
        assert_eq!(v["to"], json!(["us-1"]));
        assert_eq!(v["claims"][0]["accessMode"], "ReadWriteOnce");
        m.phase = VolumePhase::Failed("phase 2: us-1 refused".into());
        m.downtime_ms = None;
        let v = move_status(&m);
        assert_eq!(v["phase"], "Failed");
        assert_eq!(v["reason"], "phase 2: us-1 refused");
        assert!(v.get("writeDowntimeMs").is_none());
    }
}
