//! Volume streams (see [`strata_protocol::volume`]): opening one toward a child, its
//! frames on the stream, the chunk checksum, and the pump the lowest common relay of
//! a move runs between the old cluster's agent and the new one's.
//!
//! The pump holds one chunk at a time: it reads a [`VolumeFrame::Chunk`] from the
//! reader's stream and writes it to the writer's before reading the next, so a slow
//! writer stops the reader through each stream's flow control (QUIC's stream window,
//! or the TLS/TCP multiplexer's per-stream credit), and no tier ever holds more than a
//! chunk and the streams' windows of a volume. On QUIC the streams are sent at
//! [`VOLUME_PRIORITY`], below the protocol's streams and below debug tunnels, so
//! desired state, reports and tunnels never wait behind volume bytes.

use std::time::Duration;

use strata_protocol::codec::{self, FRAME_HEADER_LEN};
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::tunnel::TunnelOpen;
use strata_protocol::volume::{
    CHUNK_SIZE, ChunkSum, MAX_VOLUME_FRAME, StreamOpen, VolumeFrame, VolumeOpen, chunk_count,
    encode_stream_open,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::net::link::Link;
use crate::tunnel::{self, TunnelError, TunnelStream};

pub use crate::tunnel::VOLUME_PRIORITY;

/// How long a pump waits for any one frame before it calls the link cut.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(20);

/// The checksum of a chunk: SHA-256 of its bytes.
pub fn checksum(data: &[u8]) -> ChunkSum {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut sum = [0u8; 32];
    sum.copy_from_slice(digest.as_ref());
    sum
}

/// Why a volume stream failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The stream could not be opened toward `peer`.
    #[error(transparent)]
    Open(#[from] TunnelError),
    /// The stream broke or stalled (a cut link): the copy may resume.
    #[error("volume stream {what}: {detail}")]
    Cut {
        /// Which stream (reading from a cluster, writing to one).
        what: String,
        /// What the stream said.
        detail: String,
    },
    /// The far end refused or failed (a checksum mismatch, a frozen claim...): the copy
    /// must not simply resume.
    #[error("{cluster}: {reason}")]
    Failed {
        /// The cluster whose agent said so.
        cluster: String,
        /// What it said.
        reason: String,
    },
    /// A frame out of turn.
    #[error("volume stream {what}: unexpected frame {frame}")]
    Unexpected {
        /// Which stream.
        what: String,
        /// The frame's kind.
        frame: &'static str,
    },
}

impl VolumeError {
    /// Whether trying again may succeed (the link was cut, or the route was not up).
    pub fn resumable(&self) -> bool {
        matches!(self, VolumeError::Cut { .. } | VolumeError::Open(_))
    }
}

/// A frame's kind, for messages.
pub fn frame_kind(f: &VolumeFrame) -> &'static str {
    match f {
        VolumeFrame::Manifest { .. } => "Manifest",
        VolumeFrame::Chunk { .. } => "Chunk",
        VolumeFrame::End { .. } => "End",
        VolumeFrame::Done { .. } => "Done",
        VolumeFrame::Failed { .. } => "Failed",
        VolumeFrame::Thawed => "Thawed",
        VolumeFrame::Copied { .. } => "Copied",
    }
}

/// Writes one frame (a chunk's bytes raw after it).
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &VolumeFrame,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    buf.clear();
    codec::encode(frame, MAX_VOLUME_FRAME, buf).map_err(|e| invalid(e.to_string()))?;
    w.write_all(buf).await?;
    if let VolumeFrame::Chunk { len, data, .. } = frame {
        if *len as usize != data.len() || data.len() > CHUNK_SIZE {
            return Err(invalid(format!(
                "a chunk of {} bytes says {len}",
                data.len()
            )));
        }
        w.write_all(data).await?;
    }
    Ok(())
}

/// Reads one frame (with a chunk's bytes); `None` at the stream's clean end.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<VolumeFrame>> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let mut len = [0u8; FRAME_HEADER_LEN];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let body = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if body > MAX_VOLUME_FRAME {
        return Err(invalid(format!(
            "a volume frame of {body} bytes, over {MAX_VOLUME_FRAME}"
        )));
    }
    buf.clear();
    buf.extend_from_slice(&len);
    buf.resize(FRAME_HEADER_LEN + body, 0);
    r.read_exact(&mut buf[FRAME_HEADER_LEN..]).await?;
    let mut frame = match codec::decode::<VolumeFrame>(buf, MAX_VOLUME_FRAME) {
        Ok(Some((f, _))) => f,
        Ok(None) => return Err(invalid("truncated volume frame".into())),
        Err(e) => return Err(invalid(e.to_string())),
    };
    if let VolumeFrame::Chunk { len, data, .. } = &mut frame {
        let n = *len as usize;
        if n > CHUNK_SIZE {
            return Err(invalid(format!("a chunk of {n} bytes, over {CHUNK_SIZE}")));
        }
        data.resize(n, 0);
        r.read_exact(data).await?;
    }
    Ok(Some(frame))
}

/// Opens a volume stream toward the child `peer` on `link` (whose session negotiated
/// protocol version 7 or later: the caller checks), routed to `cluster`.
pub async fn open(
    link: &Link,
    peer: &str,
    route: &TunnelOpen,
    ask: &VolumeOpen,
) -> Result<TunnelStream, VolumeError> {
    let header = header(route, ask).map_err(|detail| TunnelError::Open {
        peer: peer.to_owned(),
        detail,
    })?;
    Ok(tunnel::open_with(link, peer, &header, VOLUME_PRIORITY).await?)
}

/// A framed volume stream header.
pub fn header(route: &TunnelOpen, ask: &VolumeOpen) -> Result<Vec<u8>, String> {
    let mut header = Vec::new();
    encode_stream_open(&StreamOpen::Volume(route.clone(), ask.clone()), &mut header)
        .map_err(|e| e.to_string())?;
    Ok(header)
}

/// One side of a copy: a stream and the cluster at its end.
#[derive(Debug)]
pub struct Side<S> {
    /// The cluster.
    pub cluster: String,
    /// Its stream.
    pub stream: S,
}

/// What one pass of a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PumpOutcome {
    /// The source's size in bytes.
    pub size: u64,
    /// Chunks in the volume.
    pub chunks: u64,
    /// Chunks the writer held already (skipped).
    pub skipped: u64,
    /// Chunks sent on this pass.
    pub sent: u64,
    /// Bytes sent on this pass.
    pub bytes: u64,
}

async fn next<S: AsyncRead + Unpin>(
    side: &mut Side<S>,
    what: &str,
    buf: &mut Vec<u8>,
) -> Result<VolumeFrame, VolumeError> {
    let cut = |detail: String| VolumeError::Cut {
        what: format!("{what} {}", side.cluster),
        detail,
    };
    match tokio::time::timeout(FRAME_TIMEOUT, read_frame(&mut side.stream, buf)).await {
        Err(_) => Err(cut(format!("no frame in {FRAME_TIMEOUT:?}"))),
        Ok(Err(e)) => Err(cut(e.to_string())),
        Ok(Ok(None)) => Err(cut("the stream ended".into())),
        Ok(Ok(Some(VolumeFrame::Failed { reason }))) => Err(VolumeError::Failed {
            cluster: side.cluster.clone(),
            reason,
        }),
        Ok(Ok(Some(f))) => Ok(f),
    }
}

async fn send<S: AsyncWrite + Unpin>(
    side: &mut Side<S>,
    frame: &VolumeFrame,
    buf: &mut Vec<u8>,
) -> Result<(), VolumeError> {
    match tokio::time::timeout(FRAME_TIMEOUT, write_frame(&mut side.stream, frame, buf)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(VolumeError::Cut {
            what: format!("writing to {}", side.cluster),
            detail: e.to_string(),
        }),
        Err(_) => Err(VolumeError::Cut {
            what: format!("writing to {}", side.cluster),
            detail: format!("stalled for {FRAME_TIMEOUT:?}"),
        }),
    }
}

/// Asks the writer what it holds: its first frame after a [`VolumeOpen::Write`].
pub async fn held<S: AsyncRead + Unpin>(
    writer: &mut Side<S>,
) -> Result<Vec<ChunkSum>, VolumeError> {
    let mut buf = Vec::new();
    match next(writer, "writing to", &mut buf).await? {
        VolumeFrame::Manifest { sums, .. } => Ok(sums),
        f => Err(VolumeError::Unexpected {
            what: format!("writing to {}", writer.cluster),
            frame: frame_kind(&f),
        }),
    }
}

/// One pass of a copy: `reader` was opened with a [`VolumeOpen::Read`] whose `skip`
/// is what `writer` (opened with a [`VolumeOpen::Write`]) said it holds ([`held`]).
/// Pumps the reader's chunks to the writer, one at a time, then the end, and waits for
/// the writer's [`VolumeFrame::Done`].
pub async fn pump<R, W>(
    reader: &mut Side<R>,
    writer: &mut Side<W>,
    skipped_of: &[ChunkSum],
) -> Result<PumpOutcome, VolumeError>
where
    R: AsyncRead + AsyncWrite + Unpin,
    W: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rbuf, mut wbuf) = (Vec::new(), Vec::new());
    let source = match next(reader, "reading from", &mut rbuf).await? {
        VolumeFrame::Manifest { size, sums } => (size, sums),
        f => {
            return Err(VolumeError::Unexpected {
                what: format!("reading from {}", reader.cluster),
                frame: frame_kind(&f),
            });
        }
    };
    let chunks = chunk_count(source.0);
    let to_send = strata_protocol::volume::chunks_to_send(&source.1, skipped_of).count() as u64;
    let mut out = PumpOutcome {
        size: source.0,
        chunks,
        skipped: chunks.saturating_sub(to_send),
        ..PumpOutcome::default()
    };
    loop {
        let frame = next(reader, "reading from", &mut rbuf).await?;
        match &frame {
            VolumeFrame::Chunk { data, .. } => {
                out.sent += 1;
                out.bytes += data.len() as u64;
                send(writer, &frame, &mut wbuf).await?;
            }
            VolumeFrame::End { .. } => {
                send(writer, &frame, &mut wbuf).await?;
                break;
            }
            f => {
                return Err(VolumeError::Unexpected {
                    what: format!("reading from {}", reader.cluster),
                    frame: frame_kind(f),
                });
            }
        }
    }
    let _ = reader.stream.shutdown().await;
    match next(writer, "writing to", &mut wbuf).await? {
        VolumeFrame::Done { .. } => {
            let _ = writer.stream.shutdown().await;
            Ok(out)
        }
        f => Err(VolumeError::Unexpected {
            what: format!("writing to {}", writer.cluster),
            frame: frame_kind(&f),
        }),
    }
}

/// The claim's name for logs: `namespace/claim`.
pub fn claim_name(claim: &VolumeClaim) -> String {
    format!("{}/{}", claim.namespace, claim.claim)
}
