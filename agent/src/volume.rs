//! The agent's end of a volume stream (see `strata_node::volume`): reading a claim's
//! chunks for a move off this cluster, writing them for a move onto it, stopping and
//! letting again the claim's writers. The stream is served from a [`VolumeStore`]: a
//! simulated cluster's volume bytes ([`crate::sim_volumes`]), or, inside a mover pod,
//! one volume mounted at a path ([`crate::mover`]).

use std::future::Future;

use strata_node::tunnel::TunnelStream;
use strata_node::volume::{checksum, claim_name, read_frame, write_frame};
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::tunnel::TunnelOpen;
use strata_protocol::volume::{ChunkSum, VolumeFrame, VolumeOpen, chunks_to_send};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::sim_volumes::{SimVolumes, VolumeAccessError};

/// The volume operations a volume stream's end uses: what [`serve_store`] reads and
/// writes a claim through. A store that holds one volume (a mover's) ignores the claim.
///
/// Call order on the writing side: [`VolumeStore::begin_restore`] (or
/// [`VolumeStore::begin_replica`]), any number of [`VolumeStore::restore_chunk`], then
/// [`VolumeStore::end_restore`], or [`VolumeStore::abandon_restore`] if the stream broke.
pub trait VolumeStore: Sync {
    /// Why the store refused an operation (its `Display` goes into the stream's
    /// [`VolumeFrame::Failed`]).
    type Error: std::fmt::Display + Send;

    /// Stops (`true`) or lets again the claim's writers.
    fn freeze(
        &self,
        claim: &VolumeClaim,
        frozen: bool,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The claim's size and chunk sums.
    fn manifest(
        &self,
        claim: &VolumeClaim,
    ) -> impl Future<Output = Result<(u64, Vec<ChunkSum>), Self::Error>> + Send;

    /// Chunk `index`'s bytes and sum, read together; `None` beyond the claim's end.
    fn chunk(
        &self,
        claim: &VolumeClaim,
        index: u32,
    ) -> impl Future<Output = Result<Option<(Vec<u8>, ChunkSum)>, Self::Error>> + Send;

    /// A move starts writing the claim; returns its size and the sums held.
    fn begin_restore(
        &self,
        claim: &VolumeClaim,
    ) -> impl Future<Output = Result<(u64, Vec<ChunkSum>), Self::Error>> + Send;

    /// A ReadWriteMany sync starts writing the claim as a read-only replica.
    fn begin_replica(
        &self,
        claim: &VolumeClaim,
    ) -> impl Future<Output = Result<(u64, Vec<ChunkSum>), Self::Error>> + Send;

    /// Writes chunk `index` (its checksum was checked already).
    fn restore_chunk(
        &self,
        claim: &VolumeClaim,
        index: u32,
        data: Vec<u8>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The copy ended: the claim takes `size`; returns how many chunks differ from
    /// `sums` (0: an exact copy, now in place).
    fn end_restore(
        &self,
        claim: &VolumeClaim,
        size: u64,
        sums: &[ChunkSum],
        replica: bool,
    ) -> impl Future<Output = Result<usize, Self::Error>> + Send;

    /// The write stream broke: the claim keeps what it got.
    fn abandon_restore(&self, claim: &VolumeClaim) -> impl Future<Output = ()> + Send;
}

impl VolumeStore for SimVolumes {
    type Error = VolumeAccessError;

    async fn freeze(&self, claim: &VolumeClaim, frozen: bool) -> Result<(), Self::Error> {
        SimVolumes::freeze(self, claim, frozen).await
    }

    async fn manifest(&self, claim: &VolumeClaim) -> Result<(u64, Vec<ChunkSum>), Self::Error> {
        SimVolumes::manifest(self, claim).await
    }

    async fn chunk(
        &self,
        claim: &VolumeClaim,
        index: u32,
    ) -> Result<Option<(Vec<u8>, ChunkSum)>, Self::Error> {
        SimVolumes::chunk(self, claim, index).await
    }

    async fn begin_restore(
        &self,
        claim: &VolumeClaim,
    ) -> Result<(u64, Vec<ChunkSum>), Self::Error> {
        SimVolumes::begin_restore(self, claim).await
    }

    async fn begin_replica(
        &self,
        claim: &VolumeClaim,
    ) -> Result<(u64, Vec<ChunkSum>), Self::Error> {
        SimVolumes::begin_replica(self, claim).await
    }

    async fn restore_chunk(
        &self,
        claim: &VolumeClaim,
        index: u32,
        data: Vec<u8>,
    ) -> Result<(), Self::Error> {
        SimVolumes::restore_chunk(self, claim, index, data).await
    }

    async fn end_restore(
        &self,
        claim: &VolumeClaim,
        size: u64,
        sums: &[ChunkSum],
        replica: bool,
    ) -> Result<usize, Self::Error> {
        SimVolumes::end_restore(self, claim, size, sums, replica).await
    }

    async fn abandon_restore(&self, claim: &VolumeClaim) {
        SimVolumes::abandon_restore(self, claim).await;
    }
}

/// Serves one volume stream from the parent for `cluster`, from `volumes` (`None`: a
/// cluster whose volumes this agent cannot move). A real cluster's streams are served
/// by [`crate::kubernetes::volumes::KubeVolumes::serve`].
pub async fn serve(
    cluster: String,
    volumes: Option<SimVolumes>,
    open: TunnelOpen,
    ask: VolumeOpen,
    mut stream: TunnelStream,
) {
    let mut buf = Vec::new();
    let failed = if open.cluster != cluster {
        Some(format!(
            "this agent serves cluster {cluster:?}, not {:?}",
            open.cluster
        ))
    } else if let Some(volumes) = volumes {
        serve_inner(&volumes, ask, &mut stream, &mut buf)
            .await
            .err()
    } else {
        Some(format!(
            "cluster {cluster}'s volumes cannot be moved: this agent was started without a volume backend"
        ))
    };
    if let Some(reason) = failed {
        tracing::warn!(request = open.request, %reason, "a volume stream failed");
        let _ = write_frame(&mut stream, &VolumeFrame::Failed { reason }, &mut buf).await;
    }
    let _ = stream.shutdown().await;
}

/// Serves one volume stream's `ask` from `volumes` on `stream`: what [`serve`] does
/// for a cluster, and a mover pod for its one volume. A failure is answered with a
/// [`VolumeFrame::Failed`] (and returned, for the log); the stream is shut down.
pub async fn serve_store<V, S>(volumes: &V, ask: VolumeOpen, stream: &mut S) -> Result<(), String>
where
    V: VolumeStore,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::new();
    let r = serve_inner(volumes, ask, stream, &mut buf).await;
    if let Err(reason) = &r {
        let failed = VolumeFrame::Failed {
            reason: reason.clone(),
        };
        let _ = write_frame(stream, &failed, &mut buf).await;
    }
    let _ = stream.shutdown().await;
    r
}

async fn serve_inner<V, S>(
    volumes: &V,
    ask: VolumeOpen,
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> Result<(), String>
where
    V: VolumeStore,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let io = |e: std::io::Error| e.to_string();
    // A simulated cluster holds its claims' bytes whether or not a manifest was
    // applied: the manifest a copy carries is not needed here.
    let ask = ask.for_version(0);
    // A ReadWriteMany sync leaves a read-only replica; a move's copy, the copy that runs.
    let replica = matches!(ask, VolumeOpen::Replicate { .. });
    match ask {
        VolumeOpen::Read {
            claim,
            skip,
            freeze,
        } => {
            if freeze {
                volumes
                    .freeze(&claim, true)
                    .await
                    .map_err(|e| e.to_string())?;
                tracing::info!(claim = %claim_name(&claim), "a move stopped the claim's writers");
            }
            let (size, mut sums) = volumes.manifest(&claim).await.map_err(|e| e.to_string())?;
            let manifest = VolumeFrame::Manifest {
                size,
                sums: sums.clone(),
            };
            write_frame(stream, &manifest, buf).await.map_err(io)?;
            let wanted: Vec<u32> = chunks_to_send(&sums, &skip).collect();
            for index in wanted {
                let Some((data, sum)) = volumes
                    .chunk(&claim, index)
                    .await
                    .map_err(|e| e.to_string())?
                else {
                    break; // the claim shrank meanwhile: the end says so
                };
                // The end lists what was sent: a chunk written since the manifest (an
                // unfrozen first phase) goes with its sum now.
                if let Some(s) = sums.get_mut(index as usize) {
                    *s = sum;
                }
                let frame = VolumeFrame::chunk(index, sum, data);
                write_frame(stream, &frame, buf).await.map_err(io)?;
            }
            write_frame(stream, &VolumeFrame::End { size, sums }, buf)
                .await
                .map_err(io)
        }
        VolumeOpen::Write { claim } | VolumeOpen::Replicate { claim } => {
            let begun = if replica {
                volumes.begin_replica(&claim).await
            } else {
                volumes.begin_restore(&claim).await
            };
            let (size, held) = begun.map_err(|e| e.to_string())?;
            let r = write_claim(volumes, &claim, size, held, replica, stream, buf).await;
            if r.is_err() {
                volumes.abandon_restore(&claim).await;
            }
            r
        }
        VolumeOpen::Thaw { claim } => {
            volumes
                .freeze(&claim, false)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(claim = %claim_name(&claim), "the claim's writers may write again");
            write_frame(stream, &VolumeFrame::Thawed, buf)
                .await
                .map_err(io)
        }
        VolumeOpen::Copy { .. } | VolumeOpen::CopyReplica { .. } => {
            Err("an agent runs no copies (its parent does)".into())
        }
        VolumeOpen::WriteClaim { .. } | VolumeOpen::CopyClaim { .. } => {
            Err("unreachable: an ask with a manifest was read without it".into())
        }
    }
}

async fn write_claim<V, S>(
    volumes: &V,
    claim: &VolumeClaim,
    size: u64,
    held: Vec<ChunkSum>,
    replica: bool,
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> Result<(), String>
where
    V: VolumeStore,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let io = |e: std::io::Error| e.to_string();
    write_frame(stream, &VolumeFrame::Manifest { size, sums: held }, buf)
        .await
        .map_err(io)?;
    let mut written = 0u64;
    loop {
        match read_frame(stream, buf).await.map_err(io)? {
            Some(VolumeFrame::Chunk {
                index, sum, data, ..
            }) => {
                if checksum(&data) != sum {
                    return Err(format!(
                        "chunk {index} of {} does not match its checksum: the copy is refused",
                        claim_name(claim)
                    ));
                }
                volumes
                    .restore_chunk(claim, index, data)
                    .await
                    .map_err(|e| e.to_string())?;
                written += 1;
            }
            Some(VolumeFrame::End { size, sums }) => {
                let differ = volumes
                    .end_restore(claim, size, &sums, replica)
                    .await
                    .map_err(|e| e.to_string())?;
                if differ > 0 {
                    return Err(format!(
                        "after the copy, {differ} chunks of {} differ from the source",
                        claim_name(claim)
                    ));
                }
                return write_frame(stream, &VolumeFrame::Done { written }, buf)
                    .await
                    .map_err(io);
            }
            Some(f) => {
                return Err(format!(
                    "unexpected frame {} while writing",
                    strata_node::volume::frame_kind(&f)
                ));
            }
            None => return Err("the stream ended before the copy did".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use strata_node::volume::{PumpOutcome, Side, VolumeError, held, pump};
    use strata_protocol::volume::CHUNK_SIZE;
    use tokio::io::DuplexStream;

    use super::*;
    use crate::sim_volumes::new_store;

    fn claim() -> VolumeClaim {
        VolumeClaim {
            claim: "data".into(),
            namespace: "shop".into(),
        }
    }

    async fn volume_with(len: usize, seed: u8) -> SimVolumes {
        let (board, vols) = new_store();
        board.declare(claim(), len as u64);
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed)).collect();
        vols.write(&claim(), 0, &data).await.unwrap();
        vols
    }

    /// An agent's end served on one half of a pipe; the other half is the relay's.
    fn agent_end(vols: &SimVolumes, cluster: &str, ask: VolumeOpen) -> Side<TunnelStream> {
        let (relay, agent): (DuplexStream, DuplexStream) = tokio::io::duplex(64 << 10);
        let open = TunnelOpen {
            cluster: cluster.into(),
            request: 1,
            user: "test".into(),
        };
        tokio::spawn(serve(
            cluster.into(),
            Some(vols.clone()),
            open,
            ask,
            TunnelStream::Tcp(agent),
        ));
        Side {
            cluster: cluster.into(),
            stream: TunnelStream::Tcp(relay),
        }
    }

    async fn pass(
        src: &SimVolumes,
        dst: &SimVolumes,
        freeze: bool,
    ) -> Result<PumpOutcome, VolumeError> {
        let mut w = agent_end(dst, "new", VolumeOpen::Write { claim: claim() });
        let have = held(&mut w).await?;
        let ask = VolumeOpen::Read {
            claim: claim(),
            skip: have.clone(),
            freeze,
        };
        let mut r = agent_end(src, "old", ask);
        pump(&mut r, &mut w, &have).await
    }

    #[tokio::test]
    async fn a_copy_sends_every_chunk_then_only_what_changed() {
        let len = 5 * CHUNK_SIZE + 123;
        let src = volume_with(len, 3).await;
        let (_, dst) = new_store();
        let out = pass(&src, &dst, false).await.unwrap();
        assert_eq!((out.chunks, out.sent, out.skipped), (6, 6, 0));
        assert_eq!(out.bytes, len as u64);
        assert_eq!(src.digest(&claim()).await, dst.digest(&claim()).await);
        // The old copy's app writes into chunk 2; phase 2 stops it and sends only that.
        src.write(&claim(), 2 * CHUNK_SIZE as u64 + 9, b"changed")
            .await
            .unwrap();
        let out = pass(&src, &dst, true).await.unwrap();
        assert_eq!((out.sent, out.skipped), (1, 5));
        assert_eq!(src.digest(&claim()).await, dst.digest(&claim()).await);
        assert_eq!(src.frozen(&claim()).await, Ok(true));
        assert!(dst.write(&claim(), 0, b"new writer").await.is_ok());
    }

    #[tokio::test]
    async fn a_cut_copy_resumes_from_what_the_writer_holds() {
        let src = volume_with(8 * CHUNK_SIZE, 5).await;
        let (_, dst) = new_store();
        // A reader whose link is cut after three chunks.
        let mut w = agent_end(&dst, "new", VolumeOpen::Write { claim: claim() });
        let have = held(&mut w).await.unwrap();
        let (relay, mut cut): (DuplexStream, DuplexStream) = tokio::io::duplex(4 << 20);
        let (size, sums) = src.manifest(&claim()).await.unwrap();
        let mut buf = Vec::new();
        let manifest = VolumeFrame::Manifest { size, sums };
        write_frame(&mut cut, &manifest, &mut buf).await.unwrap();
        for index in 0..3 {
            let (data, sum) = src.chunk(&claim(), index).await.unwrap().unwrap();
            let chunk = VolumeFrame::chunk(index, sum, data);
            write_frame(&mut cut, &chunk, &mut buf).await.unwrap();
        }
        drop(cut);
        let mut r = Side {
            cluster: "old".into(),
            stream: TunnelStream::Tcp(relay),
        };
        let err = pump(&mut r, &mut w, &have).await.unwrap_err();
        assert!(err.resumable(), "{err}");
        drop(w);
        // The writer keeps what it got; the next pass sends the other five.
        let out = pass(&src, &dst, false).await.unwrap();
        assert_eq!((out.sent, out.skipped), (5, 3));
        assert_eq!(src.digest(&claim()).await, dst.digest(&claim()).await);
    }

    #[tokio::test]
    async fn a_chunk_that_does_not_match_its_sum_is_refused() {
        let (_, dst) = new_store();
        let mut w = agent_end(&dst, "new", VolumeOpen::Write { claim: claim() });
        held(&mut w).await.unwrap();
        let mut buf = Vec::new();
        let bad = VolumeFrame::chunk(0, checksum(b"what was read"), b"what arrived".to_vec());
        write_frame(&mut w.stream, &bad, &mut buf).await.unwrap();
        match read_frame(&mut w.stream, &mut buf).await.unwrap() {
            Some(VolumeFrame::Failed { reason }) => {
                assert!(reason.contains("does not match its checksum"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Nothing of it was written.
        assert_eq!(dst.manifest(&claim()).await.unwrap().0, 0);
    }

    #[tokio::test]
    async fn a_stream_for_another_cluster_is_refused() {
        let (_, vols) = new_store();
        let (relay, agent) = tokio::io::duplex(1 << 16);
        let open = TunnelOpen {
            cluster: "other".into(),
            request: 1,
            user: "test".into(),
        };
        tokio::spawn(serve(
            "this".into(),
            Some(vols),
            open,
            VolumeOpen::Thaw { claim: claim() },
            TunnelStream::Tcp(agent),
        ));
        let mut s = relay;
        let f = read_frame(&mut s, &mut Vec::new()).await.unwrap();
        assert!(matches!(f, Some(VolumeFrame::Failed { .. })), "{f:?}");
    }
}
