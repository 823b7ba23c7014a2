//! The agent's end of a volume stream (see `strata_node::volume`): reading a claim's
//! chunks for a move off this cluster, writing them for a move onto it, stopping and
//! letting again the claim's writers. A simulated cluster serves them from its volume
//! bytes ([`crate::sim_volumes`]); a real cluster's end (a CSI VolumeSnapshot read by
//! a mover pod) is not built, and such an agent answers that it is not.

use strata_node::tunnel::TunnelStream;
use strata_node::volume::{checksum, claim_name, read_frame, write_frame};
use strata_protocol::tunnel::TunnelOpen;
use strata_protocol::volume::{VolumeFrame, VolumeOpen, chunks_to_send};
use tokio::io::AsyncWriteExt;

use crate::sim_volumes::SimVolumes;

/// Serves one volume stream from the parent for `cluster`, from `volumes` (`None`: a
/// cluster whose volumes this agent cannot move).
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
        match serve_inner(&volumes, ask, &mut stream, &mut buf).await {
            Ok(()) => None,
            Err(why) => Some(why),
        }
    } else {
        Some(format!(
            "cluster {cluster}'s volumes cannot be moved: moving the volumes of a real cluster (CSI VolumeSnapshot and a mover pod) is not built"
        ))
    };
    if let Some(reason) = failed {
        tracing::warn!(request = open.request, %reason, "a volume stream failed");
        let _ = write_frame(&mut stream, &VolumeFrame::Failed { reason }, &mut buf).await;
    }
    let _ = stream.shutdown().await;
}

async fn serve_inner(
    volumes: &SimVolumes,
    ask: VolumeOpen,
    stream: &mut TunnelStream,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
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
                let frame = VolumeFrame::Chunk { index, sum, data };
                write_frame(stream, &frame, buf).await.map_err(io)?;
            }
            write_frame(stream, &VolumeFrame::End { size, sums }, buf)
                .await
                .map_err(io)
        }
        VolumeOpen::Write { claim } => {
            let (size, held) = volumes
                .begin_restore(&claim)
                .await
                .map_err(|e| e.to_string())?;
            let r = write_claim(volumes, &claim, size, held, stream, buf).await;
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
        VolumeOpen::Copy { .. } => Err("an agent runs no copies (its parent does)".into()),
    }
}

async fn write_claim(
    volumes: &SimVolumes,
    claim: &strata_protocol::placement_spec::VolumeClaim,
    size: u64,
    held: Vec<strata_protocol::volume::ChunkSum>,
    stream: &mut TunnelStream,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    write_frame(stream, &VolumeFrame::Manifest { size, sums: held }, buf)
        .await
        .map_err(io)?;
    let mut written = 0u64;
    loop {
        match read_frame(stream, buf).await.map_err(io)? {
            Some(VolumeFrame::Chunk { index, sum, data }) => {
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
                    .end_restore(claim, size, &sums)
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
