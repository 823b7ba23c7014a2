//! Volume moves on the wire: the header of a volume stream and the frames it carries.
//!
//! A volume's data travels from the old cluster up to the lowest common relay of the
//! two clusters and down to the new one. That relay opens two streams downward, the way
//! a debug tunnel is opened ([`crate::tunnel`]), each routed tier by tier by the
//! [`TunnelOpen::cluster`] of its header: one to the old cluster's agent
//! ([`VolumeOpen::Read`]) and one to the new cluster's ([`VolumeOpen::Write`]). It pumps
//! [`VolumeFrame::Chunk`]s from the first to the second, one chunk at a time.
//!
//! * **Checksummed**: every chunk carries its checksum ([`ChunkSum`], SHA-256 of its
//!   bytes); the writer checks it before it writes, and at the end compares its whole
//!   list of sums with the reader's ([`VolumeFrame::End`]).
//! * **Resumable, and phase 2 of a ReadWriteOnce move**: the writer first says what it
//!   holds ([`VolumeFrame::Manifest`]); the reader is asked to skip the chunks whose sum
//!   the writer already has ([`VolumeOpen::Read::skip`]). After a cut link the copy
//!   starts again from what was written; after the old copy's writers stop, the same
//!   call sends only what changed since.
//!
//! * **Replicated (ReadWriteMany)**: the same copy, asked with [`VolumeOpen::Replicate`]
//!   at the writer and [`VolumeOpen::CopyReplica`] at a relay, leaves the written claim a
//!   read-only replica (its app's writes refused) instead of the copy that runs. Run
//!   again and again, it sends only the chunks whose sums differ from the primary's.
//!
//! # Versions
//!
//! A volume stream's header is a [`TunnelOpen`] followed, in the same frame, by a
//! [`VolumeOpen`]. A node of [`VOLUME_VERSION`] or later reads every stream header with
//! [`decode_stream_open`]: a frame that is exactly a `TunnelOpen` is a tunnel, one that
//! continues is a volume stream. An older node would refuse the longer frame as a bad
//! header, so a relay opens or forwards a volume stream only on a link whose child
//! negotiated [`VOLUME_VERSION`] or later, and a replication stream
//! ([`VolumeOpen::Replicate`], [`VolumeOpen::CopyReplica`], unknown to a node of
//! version 7) only on one whose child negotiated [`REPLICATION_VERSION`] or later.
//! A copy that carries the claim's manifest ([`VolumeOpen::WriteClaim`],
//! [`VolumeOpen::CopyClaim`], version 9) is sent to an older child without it
//! ([`VolumeOpen::for_version`]).

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::placement_spec::VolumeClaim;
use crate::tunnel::TunnelOpen;
use crate::wire::ProtocolVersion;

/// The first protocol version whose nodes read volume stream headers.
pub const VOLUME_VERSION: ProtocolVersion = 7;

/// The first protocol version whose nodes read [`VolumeOpen::Replicate`] and
/// [`VolumeOpen::CopyReplica`].
pub const REPLICATION_VERSION: ProtocolVersion = 8;

/// The first protocol version whose nodes read [`VolumeOpen::WriteClaim`] and
/// [`VolumeOpen::CopyClaim`] (a copy that carries the claim's manifest).
pub const CLAIM_VERSION: ProtocolVersion = 9;

/// Bytes of one chunk (the last chunk of a volume may be shorter).
pub const CHUNK_SIZE: usize = 256 << 10;

/// The largest frame of a volume stream: a chunk with its header, or the list of sums
/// of the largest volume moved ([`MAX_VOLUME_BYTES`]).
pub const MAX_VOLUME_FRAME: usize = 4 << 20;

/// The largest volume a move copies (its list of sums must fit in one frame).
pub const MAX_VOLUME_BYTES: u64 = 16 << 30;

/// The largest stream header: a tunnel header and a volume request with the sums to
/// skip.
pub const MAX_STREAM_HEADER: usize = MAX_VOLUME_FRAME;

/// A chunk's checksum: SHA-256 of its bytes (computed by the nodes; this crate only
/// compares them).
pub type ChunkSum = [u8; 32];

/// What a volume stream asks of the agent at its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VolumeOpen {
    /// Send the claim's data: first its [`VolumeFrame::Manifest`], then a chunk for
    /// every index whose sum differs from `skip` (or lies beyond it), then
    /// [`VolumeFrame::End`].
    Read {
        /// The claim.
        claim: VolumeClaim,
        /// The sums the writer holds already, by chunk index.
        skip: Vec<ChunkSum>,
        /// Stop the claim's writers first (phase 2 of a ReadWriteOnce move): the claim
        /// stays read-only until [`VolumeOpen::Thaw`] or the workload is removed.
        freeze: bool,
    },
    /// Receive the claim's data: answer with a [`VolumeFrame::Manifest`] of what is
    /// held, then write each [`VolumeFrame::Chunk`] that arrives, and after
    /// [`VolumeFrame::End`] answer [`VolumeFrame::Done`] (or
    /// [`VolumeFrame::Failed`]). The claim is *restoring* until a copy completes:
    /// nothing else writes it and its workloads are not available.
    Write {
        /// The claim.
        claim: VolumeClaim,
    },
    /// Copy the claim from the cluster `from` to the cluster this stream is routed to
    /// (its [`TunnelOpen::cluster`]), here or below: a relay forwards it while both
    /// clusters lie below the same child, and the first relay that sees them below two
    /// children (their lowest common relay) runs the copy and answers
    /// [`VolumeFrame::Copied`] (or [`VolumeFrame::Failed`]).
    Copy {
        /// The old cluster.
        from: String,
        /// The claim.
        claim: VolumeClaim,
        /// Stop the old copy's writers first (phase 2).
        freeze: bool,
    },
    /// Let the claim's writers write again (a move that failed after freezing).
    Thaw {
        /// The claim.
        claim: VolumeClaim,
    },
    /// As [`VolumeOpen::Write`], but the claim stays a read-only replica afterwards
    /// (ReadWriteMany: one cluster writes, the primary). A later
    /// [`VolumeOpen::Write`] that completes makes it the writable copy (a promotion).
    Replicate {
        /// The claim.
        claim: VolumeClaim,
    },
    /// As [`VolumeOpen::Copy`] without freezing, the writer asked with
    /// [`VolumeOpen::Replicate`]: one sync of a replica from its primary `from`.
    CopyReplica {
        /// The primary's cluster.
        from: String,
        /// The claim.
        claim: VolumeClaim,
    },
    /// As [`VolumeOpen::Write`] (or [`VolumeOpen::Replicate`] if `replica`), with the
    /// claim's manifest: a cluster that lacks the claim creates it from the manifest
    /// before writing it (a real cluster's claim must exist for a mover pod to mount
    /// it, and the root holds the placement's objects back until the data is there).
    WriteClaim {
        /// The claim.
        claim: VolumeClaim,
        /// Its manifest as the root holds it (JSON).
        manifest: Vec<u8>,
        /// Leave it a read-only replica.
        replica: bool,
    },
    /// As [`VolumeOpen::Copy`] (or [`VolumeOpen::CopyReplica`] if `replica`), the
    /// writer asked with [`VolumeOpen::WriteClaim`].
    CopyClaim {
        /// The old cluster (the primary, for a replica).
        from: String,
        /// The claim.
        claim: VolumeClaim,
        /// Its manifest (JSON).
        manifest: Vec<u8>,
        /// Stop the old copy's writers first (phase 2).
        freeze: bool,
        /// A replica's sync.
        replica: bool,
    },
}

impl VolumeOpen {
    /// The protocol version a link's child must have negotiated to be sent this.
    pub fn min_version(&self) -> ProtocolVersion {
        match self {
            VolumeOpen::Replicate { .. } | VolumeOpen::CopyReplica { .. } => REPLICATION_VERSION,
            VolumeOpen::WriteClaim { .. } | VolumeOpen::CopyClaim { .. } => CLAIM_VERSION,
            _ => VOLUME_VERSION,
        }
    }

    /// This ask as a child of protocol `version` reads it: a [`VolumeOpen::WriteClaim`]
    /// or [`VolumeOpen::CopyClaim`] loses its manifest below [`CLAIM_VERSION`] (an
    /// older agent writes claims that exist, as it always did). Others are unchanged.
    pub fn for_version(self, version: ProtocolVersion) -> VolumeOpen {
        if version >= CLAIM_VERSION {
            return self;
        }
        match self {
            VolumeOpen::WriteClaim { claim, replica, .. } if replica => {
                VolumeOpen::Replicate { claim }
            }
            VolumeOpen::WriteClaim { claim, .. } => VolumeOpen::Write { claim },
            VolumeOpen::CopyClaim {
                from,
                claim,
                replica,
                ..
            } if replica => VolumeOpen::CopyReplica { from, claim },
            VolumeOpen::CopyClaim {
                from,
                claim,
                freeze,
                ..
            } => VolumeOpen::Copy {
                from,
                claim,
                freeze,
            },
            other => other,
        }
    }
}

/// A frame on a volume stream, after the header, in either direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VolumeFrame {
    /// The size of a claim's data and the sum of each chunk, by index.
    Manifest {
        /// Bytes.
        size: u64,
        /// One sum per chunk of [`CHUNK_SIZE`].
        sums: Vec<ChunkSum>,
    },
    /// One chunk's bytes (make it with [`VolumeFrame::chunk`]).
    Chunk {
        /// Its index (its offset is `index * CHUNK_SIZE`).
        index: u32,
        /// The sender's checksum of `data`.
        sum: ChunkSum,
        /// How many bytes `data` has: at most [`CHUNK_SIZE`].
        len: u32,
        /// The bytes. Not encoded with the frame: they follow it on the stream, raw,
        /// `len` of them, so that a chunk costs no per-byte encoding.
        #[serde(skip)]
        data: Vec<u8>,
    },
    /// Every chunk was sent: the source's whole list of sums and its size.
    End {
        /// Bytes.
        size: u64,
        /// The source's sums.
        sums: Vec<ChunkSum>,
    },
    /// The writer holds exactly what the source has (its size set from
    /// [`VolumeFrame::End`]): `written` chunks were written by this stream.
    Done {
        /// Chunks written on this stream.
        written: u64,
    },
    /// The agent could not do what was asked (or a chunk did not match its sum).
    Failed {
        /// Why, for the status and the log.
        reason: String,
    },
    /// A [`VolumeOpen::Thaw`] was done.
    Thawed,
    /// A [`VolumeOpen::Copy`] is done.
    Copied {
        /// The relay that ran it (the lowest common relay).
        by: String,
        /// The source's size in bytes.
        size: u64,
        /// Chunks sent (the others the writer held already).
        sent: u64,
        /// Bytes sent.
        bytes: u64,
        /// Passes it took (more than one after a cut link).
        passes: u32,
    },
}

impl VolumeFrame {
    /// A chunk frame for `data` (at most [`CHUNK_SIZE`] bytes).
    pub fn chunk(index: u32, sum: ChunkSum, data: Vec<u8>) -> Self {
        VolumeFrame::Chunk {
            index,
            sum,
            len: u32::try_from(data.len()).unwrap_or(u32::MAX),
            data,
        }
    }
}

/// A stream header, as a node of [`VOLUME_VERSION`] or later reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamOpen {
    /// A debug tunnel.
    Tunnel(TunnelOpen),
    /// A volume stream: routed by the tunnel header's cluster.
    Volume(TunnelOpen, VolumeOpen),
}

impl StreamOpen {
    /// The routing part of the header.
    pub fn tunnel(&self) -> &TunnelOpen {
        match self {
            StreamOpen::Tunnel(t) | StreamOpen::Volume(t, _) => t,
        }
    }
}

/// Frames a stream header (with its length prefix) into `out`.
pub fn encode_stream_open(open: &StreamOpen, out: &mut Vec<u8>) -> Result<(), codec::EncodeError> {
    match open {
        StreamOpen::Tunnel(t) => codec::encode(t, MAX_STREAM_HEADER, out),
        StreamOpen::Volume(t, v) => codec::encode(&(t, v), MAX_STREAM_HEADER, out),
    }
    .map(|_| ())
}

/// Reads a whole stream header frame (length prefix included): a tunnel's when the
/// frame is exactly a [`TunnelOpen`], else a volume stream's. `None` if incomplete.
pub fn decode_stream_open(frame: &[u8]) -> Result<Option<StreamOpen>, codec::DecodeError> {
    if let Ok(Some((t, _))) = codec::decode::<TunnelOpen>(frame, MAX_STREAM_HEADER) {
        return Ok(Some(StreamOpen::Tunnel(t)));
    }
    Ok(
        codec::decode::<(TunnelOpen, VolumeOpen)>(frame, MAX_STREAM_HEADER)?
            .map(|((t, v), _)| StreamOpen::Volume(t, v)),
    )
}

/// How many chunks a volume of `size` bytes has.
pub fn chunk_count(size: u64) -> u64 {
    size.div_ceil(CHUNK_SIZE as u64)
}

/// The indexes of the chunks of `source` that `held` lacks or holds with another sum:
/// what a copy sends (all of them the first time, those left after a cut link, those
/// changed since phase 1).
pub fn chunks_to_send<'a>(
    source: &'a [ChunkSum],
    held: &'a [ChunkSum],
) -> impl Iterator<Item = u32> + 'a {
    source
        .iter()
        .enumerate()
        .filter(move |(i, s)| held.get(*i) != Some(s))
        .filter_map(|(i, _)| u32::try_from(i).ok())
}

/// A claim's access mode, as its `spec.accessModes` says: what kind of move it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AccessMode {
    /// One node writes (`ReadWriteOnce`, `ReadWriteOncePod`): a two-phase move.
    ReadWriteOnce,
    /// Many write (`ReadWriteMany`): copies kept replicated from one primary cluster,
    /// with a bounded lag; a move promotes a replica.
    ReadWriteMany,
    /// Nobody writes (`ReadOnlyMany`): one copy, no downtime.
    ReadOnlyMany,
}

/// The access mode of a PersistentVolumeClaim manifest (JSON): the first of
/// `spec.accessModes` that this crate knows; `ReadWriteOnce` when none is given, as
/// the safe choice (two phases, never two writers).
pub fn access_mode_of(claim: &serde_json::Value) -> AccessMode {
    claim
        .pointer("/spec/accessModes")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|m| match m.as_str() {
            Some("ReadWriteOnce" | "ReadWriteOncePod") => Some(AccessMode::ReadWriteOnce),
            Some("ReadWriteMany") => Some(AccessMode::ReadWriteMany),
            Some("ReadOnlyMany") => Some(AccessMode::ReadOnlyMany),
            _ => None,
        })
        .unwrap_or(AccessMode::ReadWriteOnce)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tunnel() -> TunnelOpen {
        TunnelOpen {
            cluster: "eu-1".into(),
            request: 9,
            user: "strata:volume-move".into(),
        }
    }

    fn claim() -> VolumeClaim {
        VolumeClaim {
            claim: "data".into(),
            namespace: "shop".into(),
        }
    }

    #[test]
    fn a_tunnel_header_reads_as_a_tunnel_and_a_volume_header_as_a_volume() {
        let mut buf = Vec::new();
        codec::encode(&tunnel(), crate::tunnel::MAX_TUNNEL_HEADER, &mut buf).unwrap();
        assert_eq!(
            decode_stream_open(&buf).unwrap(),
            Some(StreamOpen::Tunnel(tunnel()))
        );
        let volume = StreamOpen::Volume(
            tunnel(),
            VolumeOpen::Read {
                claim: claim(),
                skip: vec![[7; 32]],
                freeze: true,
            },
        );
        let mut buf = Vec::new();
        encode_stream_open(&volume, &mut buf).unwrap();
        assert_eq!(decode_stream_open(&buf).unwrap(), Some(volume));
        // An old node reads only a `TunnelOpen`, exactly: the longer frame is refused.
        assert!(codec::decode::<TunnelOpen>(&buf, MAX_STREAM_HEADER).is_err());
        assert_eq!(decode_stream_open(&buf[..buf.len() - 1]).unwrap(), None);
        for ask in [
            VolumeOpen::Replicate { claim: claim() },
            VolumeOpen::CopyReplica {
                from: "eu-1".into(),
                claim: claim(),
            },
        ] {
            assert_eq!(ask.min_version(), REPLICATION_VERSION);
            let open = StreamOpen::Volume(tunnel(), ask);
            let mut buf = Vec::new();
            encode_stream_open(&open, &mut buf).unwrap();
            assert_eq!(decode_stream_open(&buf).unwrap(), Some(open));
        }
        assert_eq!(
            VolumeOpen::Thaw { claim: claim() }.min_version(),
            VOLUME_VERSION
        );
    }

    #[test]
    fn a_copy_with_the_claims_manifest_reaches_an_older_child_without_it() {
        let manifest = br#"{"kind":"PersistentVolumeClaim"}"#.to_vec();
        let write = |replica| VolumeOpen::WriteClaim {
            claim: claim(),
            manifest: manifest.clone(),
            replica,
        };
        let copy = |replica| VolumeOpen::CopyClaim {
            from: "eu-1".into(),
            claim: claim(),
            manifest: manifest.clone(),
            freeze: true,
            replica,
        };
        for ask in [write(false), copy(true)] {
            assert_eq!(ask.min_version(), CLAIM_VERSION);
            assert_eq!(ask.clone().for_version(CLAIM_VERSION), ask);
            let open = StreamOpen::Volume(tunnel(), ask);
            let mut buf = Vec::new();
            encode_stream_open(&open, &mut buf).unwrap();
            assert_eq!(decode_stream_open(&buf).unwrap(), Some(open));
        }
        assert_eq!(
            write(false).for_version(8),
            VolumeOpen::Write { claim: claim() }
        );
        assert_eq!(
            write(true).for_version(8),
            VolumeOpen::Replicate { claim: claim() }
        );
        assert_eq!(
            copy(false).for_version(7),
            VolumeOpen::Copy {
                from: "eu-1".into(),
                claim: claim(),
                freeze: true
            }
        );
        assert_eq!(
            copy(true).for_version(8),
            VolumeOpen::CopyReplica {
                from: "eu-1".into(),
                claim: claim()
            }
        );
        // Every older ask is sent as it is.
        let thaw = VolumeOpen::Thaw { claim: claim() };
        assert_eq!(thaw.clone().for_version(7), thaw);
    }

    #[test]
    fn frames_round_trip() {
        let frames = [
            VolumeFrame::Manifest {
                size: 3,
                sums: vec![[1; 32]],
            },
            VolumeFrame::Chunk {
                index: 4,
                sum: [2; 32],
                len: 4,
                data: Vec::new(), // travels after the frame
            },
            VolumeFrame::End {
                size: 3,
                sums: vec![[1; 32]],
            },
            VolumeFrame::Done { written: 1 },
            VolumeFrame::Failed { reason: "x".into() },
        ];
        for f in frames {
            let mut buf = Vec::new();
            codec::encode(&f, MAX_VOLUME_FRAME, &mut buf).unwrap();
            let (back, used) = codec::decode::<VolumeFrame>(&buf, MAX_VOLUME_FRAME)
                .unwrap()
                .unwrap();
            assert_eq!((back, used), (f, buf.len()));
        }
    }

    #[test]
    fn only_missing_or_changed_chunks_are_sent() {
        let source = [[1; 32], [2; 32], [3; 32], [4; 32]];
        assert_eq!(
            chunks_to_send(&source, &[]).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // Resumed after two chunks were written.
        assert_eq!(
            chunks_to_send(&source, &source[..2]).collect::<Vec<_>>(),
            [2, 3]
        );
        // Phase 2: chunk 1 changed since.
        let held = [[1; 32], [9; 32], [3; 32], [4; 32]];
        assert_eq!(chunks_to_send(&source, &held).collect::<Vec<_>>(), [1]);
        assert_eq!(chunk_count(0), 0);
        assert_eq!(chunk_count(CHUNK_SIZE as u64 + 1), 2);
    }

    #[test]
    fn access_modes_come_from_the_claim() {
        let mode = |v: serde_json::Value| access_mode_of(&v);
        assert_eq!(
            mode(serde_json::json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
            AccessMode::ReadWriteMany
        );
        assert_eq!(
            mode(serde_json::json!({"spec": {"accessModes": ["ReadWriteOncePod"]}})),
            AccessMode::ReadWriteOnce
        );
        assert_eq!(
            mode(serde_json::json!({"spec": {}})),
            AccessMode::ReadWriteOnce
        );
    }
}
