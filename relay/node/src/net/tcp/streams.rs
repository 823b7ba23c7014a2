//! Debug-tunnel streams on a TLS/TCP link: dynamic byte streams beside the three fixed
//! classes, as QUIC's bidirectional streams are beside the protocol's streams.
//!
//! # Wire
//!
//! Five frame kinds, each with the stream id (u32 BE) first in its payload:
//! `T_OPEN` (the parent opens stream `id`; ids only grow, so an id is never reused on a
//! link), `T_DATA` (the id, then at most [`CHUNK`] bytes), `T_CREDIT` (the id, then a
//! u32 BE: that many more bytes may be sent on the stream), `T_FIN` (the sender's
//! direction ends) and `T_RESET` (the stream is abandoned both ways: its reader went
//! away, so nothing more is read or sent).
//!
//! # Limits
//!
//! Each direction of a stream has its own credit of [`TUNNEL_WINDOW`] bytes, granted
//! back as the receiving side's user reads, so a `kubectl logs -f` whose reader is slow
//! stops only its own stream; at most [`MAX_TUNNEL_STREAMS`] are open on a link, so the
//! tunnel bytes a link holds unread are bounded too. The writer serves control first,
//! then alternates chunk by chunk between the protocol's data (reports, bulk) and the
//! tunnels, so neither desired state nor a tunnel starves the other. Only the parent
//! (the TLS server) opens streams, and only toward a child that said it carries them
//! (the feature bits of its first `PING`, which older builds ignore): a child of an
//! older build is never sent these kinds. Bad input (an id never opened, credit beyond
//! the window, data beyond the credit, an oversized chunk, a second `T_FIN`, too many
//! streams) closes the link with a named error; frames for a stream this side already
//! closed are ignored (the peer may have sent them before it learnt).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::sync::{Notify, mpsc};
use tokio::task::AbortHandle;

use super::{CHUNK, Event};
use crate::net::windows::MAX_TUNNEL_STREAMS;

/// Bytes of one direction of one tunnel stream the sender may have unread at the
/// receiver.
pub const TUNNEL_WINDOW: u64 = 256 * 1024;

pub(super) const T_OPEN: u8 = 4;
pub(super) const T_DATA: u8 = 5;
pub(super) const T_CREDIT: u8 = 6;
pub(super) const T_FIN: u8 = 7;
pub(super) const T_RESET: u8 = 8;
/// The largest payload of a tunnel frame: an id and a chunk.
pub(super) const MAX_PAYLOAD: usize = 4 + CHUNK;
/// The `class` byte of a `PING` that carries the sender's feature bits in `code`.
pub(super) const FEATURES: u8 = 1;
/// Feature bit: this side carries tunnel streams.
pub(super) const FEATURE_TUNNELS: u16 = 1;

/// What the in-memory pipe between a stream's user and its pump buffers.
const PIPE: usize = 64 * 1024;
/// Tunnel frames queued for the writer at most (all streams together).
const QUEUED_FRAMES: usize = 16;

/// Why a tunnel stream could not be opened on a TLS/TCP link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenStreamError {
    /// The peer did not say it carries tunnel streams (an older build).
    #[error("the peer's build does not carry debug tunnels over TLS/TCP")]
    NotSupported,
    /// Only the parent (the side that accepted the connection) opens streams.
    #[error("only the parent side of a link opens tunnel streams")]
    NotOpener,
    /// The link has closed.
    #[error("the link is closed")]
    Closed,
    /// [`MAX_TUNNEL_STREAMS`] are open already.
    #[error("{MAX_TUNNEL_STREAMS} tunnel streams are open on the link already")]
    TooMany,
}

/// One tunnel frame for the writer: its kind and its payload (the id first).
#[derive(Debug)]
pub(super) struct TunnelFrame {
    pub(super) kind: u8,
    pub(super) payload: Vec<u8>,
}

fn frame(kind: u8, id: u32, data: &[u8]) -> TunnelFrame {
    let mut payload = Vec::with_capacity(4 + data.len());
    payload.extend_from_slice(&id.to_be_bytes());
    payload.extend_from_slice(data);
    TunnelFrame { kind, payload }
}

/// What one direction of a stream may still send.
#[derive(Debug)]
struct Credit {
    left: AtomicU64,
    more: Notify,
}

impl Credit {
    /// Waits for credit; how many bytes may go now (at most a chunk).
    async fn wait(&self) -> usize {
        loop {
            let n = self.left.load(Ordering::Acquire);
            if n > 0 {
                return usize::try_from(n).unwrap_or(CHUNK).min(CHUNK);
            }
            // `notify_one` keeps a permit when nobody waits: no wake-up is lost.
            self.more.notified().await;
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// Where received chunks go; `None` once the peer's `T_FIN` arrived.
    inbound: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// Bytes received and not yet read by the user.
    unread: Arc<AtomicU64>,
    credit: Arc<Credit>,
    sent_fin: bool,
    pump: Option<AbortHandle>,
}

#[derive(Debug, Default)]
struct Table {
    entries: BTreeMap<u32, Entry>,
    /// The highest id opened on the link: ids above it were never opened.
    highest: u32,
    closed: bool,
    accepted: Option<mpsc::UnboundedSender<DuplexStream>>,
}

/// What a stream's pump needs of the link.
#[derive(Debug, Clone)]
struct Ctx {
    table: Arc<tokio::sync::Mutex<Table>>,
    out: mpsc::Sender<TunnelFrame>,
    events: mpsc::UnboundedSender<Event>,
}

/// The tunnel streams of one link. The queue to the writer is made when the first
/// stream opens, and the queue of accepted streams only on a child's side: a link that
/// never carries a tunnel (nearly all of a relay's) holds neither.
#[derive(Debug)]
pub(super) struct Streams {
    table: Arc<tokio::sync::Mutex<Table>>,
    events: mpsc::UnboundedSender<Event>,
    /// The tunnel frames' queue to the writer, once a stream opened.
    out: OnceLock<mpsc::Sender<TunnelFrame>>,
    /// Streams the peer opened, on a child's side.
    accept_rx: Option<tokio::sync::Mutex<mpsc::UnboundedReceiver<DuplexStream>>>,
    /// The peer said it carries tunnel streams.
    peer_tunnels: AtomicBool,
    /// This side opens streams (it accepted the connection: the parent).
    opener: bool,
}

impl Streams {
    pub(super) fn new(opener: bool, events: mpsc::UnboundedSender<Event>) -> Self {
        let mut table = Table::default();
        let accept_rx = (!opener).then(|| {
            let (accepted, accept_rx) = mpsc::unbounded_channel();
            table.accepted = Some(accepted);
            tokio::sync::Mutex::new(accept_rx)
        });
        Streams {
            table: Arc::new(tokio::sync::Mutex::new(table)),
            events,
            out: OnceLock::new(),
            accept_rx,
            peer_tunnels: AtomicBool::new(false),
            opener,
        }
    }

    /// The queue of tunnel frames to the writer, made (and handed to the writer) on
    /// first use.
    fn out(&self) -> &mpsc::Sender<TunnelFrame> {
        self.out.get_or_init(|| {
            let (out, out_rx) = mpsc::channel(QUEUED_FRAMES);
            // The writer gone, the receiver drops with the event: sends then fail as
            // they would on a closed link.
            let _ = self.events.send(Event::Tunnels(out_rx));
            out
        })
    }

    /// What a new stream's pump needs.
    fn ctx(&self) -> Ctx {
        Ctx {
            table: self.table.clone(),
            out: self.out().clone(),
            events: self.events.clone(),
        }
    }

    /// Whether tunnel streams can be opened toward the peer.
    pub(super) fn carries_tunnels(&self) -> bool {
        self.opener && self.peer_tunnels.load(Ordering::Acquire)
    }

    /// The feature bits of the peer's `PING`.
    pub(super) fn peer_features(&self, bits: u16) {
        if bits & FEATURE_TUNNELS != 0 {
            self.peer_tunnels.store(true, Ordering::Release);
        }
    }

    /// Opens a stream toward the peer.
    pub(super) async fn open(&self) -> Result<DuplexStream, OpenStreamError> {
        if !self.opener {
            return Err(OpenStreamError::NotOpener);
        }
        if !self.peer_tunnels.load(Ordering::Acquire) {
            return Err(OpenStreamError::NotSupported);
        }
        // A place in the writer's queue first, so that the table's lock is never held
        // while waiting for the writer.
        let slot = self
            .out()
            .reserve()
            .await
            .map_err(|_| OpenStreamError::Closed)?;
        let mut table = self.table.lock().await;
        if table.closed {
            return Err(OpenStreamError::Closed);
        }
        if table.entries.len() >= MAX_TUNNEL_STREAMS as usize {
            return Err(OpenStreamError::TooMany);
        }
        let id = table
            .highest
            .checked_add(1)
            .ok_or(OpenStreamError::Closed)?;
        // Queued before any of the stream's data (the writer keeps the order), under
        // the lock (ids reach the wire in increasing order).
        slot.send(frame(T_OPEN, id, &[]));
        table.highest = id;
        Ok(self.start(&mut table, id))
    }

    /// The next stream the peer opened; `None` once the link has closed, and at once
    /// on the parent's side (the child opens none).
    pub(super) async fn accept(&self) -> Option<DuplexStream> {
        self.accept_rx.as_ref()?.lock().await.recv().await
    }

    /// Registers stream `id` and starts its pump; the user's end is returned.
    fn start(&self, table: &mut Table, id: u32) -> DuplexStream {
        let (user, end) = tokio::io::duplex(PIPE);
        let (inbound, inbound_rx) = mpsc::unbounded_channel();
        let unread = Arc::new(AtomicU64::new(0));
        let credit = Arc::new(Credit {
            left: AtomicU64::new(TUNNEL_WINDOW),
            more: Notify::new(),
        });
        let pump = tokio::spawn(pump(
            self.ctx(),
            id,
            end,
            inbound_rx,
            unread.clone(),
            credit.clone(),
        ));
        table.entries.insert(
            id,
            Entry {
                inbound: Some(inbound),
                unread,
                credit,
                sent_fin: false,
                pump: Some(pump.abort_handle()),
            },
        );
        user
    }

    /// A tunnel frame from the peer; `Err` names what was wrong with it (the link is
    /// then closed).
    pub(super) async fn handle(&self, kind: u8, payload: Vec<u8>) -> Result<(), String> {
        let Some((id, data)) = payload.split_first_chunk::<4>() else {
            return Err(format!("tunnel frame {kind} without a stream id"));
        };
        let id = u32::from_be_bytes(*id);
        let mut table = self.table.lock().await;
        if table.closed {
            return Ok(());
        }
        if kind == T_OPEN {
            if self.opener {
                return Err(format!("the child opened tunnel stream {id}"));
            }
            if id <= table.highest || !data.is_empty() {
                return Err(format!(
                    "bad tunnel OPEN: stream {id} after {}",
                    table.highest
                ));
            }
            if table.entries.len() >= MAX_TUNNEL_STREAMS as usize {
                return Err(format!("over {MAX_TUNNEL_STREAMS} tunnel streams open"));
            }
            table.highest = id;
            let user = self.start(&mut table, id);
            if let Some(a) = &table.accepted {
                let _ = a.send(user);
            }
            return Ok(());
        }
        if id > table.highest || id == 0 {
            return Err(format!("unknown tunnel stream {id}"));
        }
        let Some(entry) = table.entries.get_mut(&id) else {
            // Closed here already: the peer sent this before it learnt.
            return Ok(());
        };
        match kind {
            T_DATA => {
                let n = data.len() as u64;
                let Some(inbound) = &entry.inbound else {
                    return Err(format!("data on tunnel stream {id} after its FIN"));
                };
                if entry.unread.fetch_add(n, Ordering::AcqRel) + n > TUNNEL_WINDOW {
                    return Err(format!(
                        "the peer sent beyond its {TUNNEL_WINDOW}-byte credit on tunnel stream {id}"
                    ));
                }
                let _ = inbound.send(data.to_vec());
            }
            T_CREDIT => {
                let n = match <[u8; 4]>::try_from(data) {
                    Ok(b) => u64::from(u32::from_be_bytes(b)),
                    Err(_) => return Err(format!("bad tunnel CREDIT on stream {id}")),
                };
                if entry.credit.left.fetch_add(n, Ordering::AcqRel) + n > TUNNEL_WINDOW {
                    return Err(format!(
                        "credit overflow on tunnel stream {id}: over {TUNNEL_WINDOW} bytes"
                    ));
                }
                entry.credit.more.notify_one();
            }
            T_FIN => {
                if !data.is_empty() || entry.inbound.take().is_none() {
                    return Err(format!("bad tunnel FIN on stream {id}"));
                }
                if entry.sent_fin {
                    table.entries.remove(&id);
                }
            }
            T_RESET => {
                if let Some(p) = table.entries.remove(&id).and_then(|e| e.pump) {
                    p.abort();
                }
            }
            _ => return Err(format!("unknown frame kind {kind}")),
        }
        Ok(())
    }

    /// The link has ended: every stream ends with it (their users read the end), and
    /// no more are opened or accepted.
    pub(super) async fn close_all(&self) {
        let mut table = self.table.lock().await;
        table.closed = true;
        table.accepted = None;
        for (_, e) in std::mem::take(&mut table.entries) {
            if let Some(p) = e.pump {
                p.abort();
            }
        }
    }

    /// As [`Self::close_all`], without waiting (the link is being dropped).
    pub(super) fn abort_all(&self) {
        if let Ok(mut table) = self.table.try_lock() {
            for (_, e) in std::mem::take(&mut table.entries) {
                if let Some(p) = e.pump {
                    p.abort();
                }
            }
        }
    }
}

/// Moves one stream's bytes between its user's pipe and the link, both ways.
async fn pump(
    ctx: Ctx,
    id: u32,
    end: DuplexStream,
    inbound: mpsc::UnboundedReceiver<Vec<u8>>,
    unread: Arc<AtomicU64>,
    credit: Arc<Credit>,
) {
    let (rd, wr) = tokio::io::split(end);
    tokio::join!(
        send_side(&ctx, id, rd, &credit),
        receive_side(&ctx, id, wr, inbound, &unread)
    );
}

/// What the user writes goes out as the credit allows; the user's end (or its drop)
/// sends `T_FIN`.
async fn send_side(ctx: &Ctx, id: u32, mut rd: ReadHalf<DuplexStream>, credit: &Credit) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let may = credit.wait().await;
        let n = match rd.read(&mut buf[..may]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        credit.left.fetch_sub(n as u64, Ordering::AcqRel);
        if ctx.out.send(frame(T_DATA, id, &buf[..n])).await.is_err() {
            return;
        }
    }
    if ctx.out.send(frame(T_FIN, id, &[])).await.is_err() {
        return;
    }
    let mut table = ctx.table.lock().await;
    if let Some(e) = table.entries.get_mut(&id) {
        e.sent_fin = true;
        if e.inbound.is_none() {
            table.entries.remove(&id);
        }
    }
}

/// What the peer sends goes to the user; what the user has read is granted back. A
/// user gone sends `T_RESET` (the peer stops sending); the peer's `T_FIN` ends the
/// user's reading.
async fn receive_side(
    ctx: &Ctx,
    id: u32,
    mut wr: WriteHalf<DuplexStream>,
    mut inbound: mpsc::UnboundedReceiver<Vec<u8>>,
    unread: &AtomicU64,
) {
    while let Some(chunk) = inbound.recv().await {
        if wr.write_all(&chunk).await.is_err() {
            let _ = ctx.out.send(frame(T_RESET, id, &[])).await;
            ctx.table.lock().await.entries.remove(&id);
            return;
        }
        let n = chunk.len() as u64;
        unread.fetch_sub(n, Ordering::AcqRel);
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let _ = ctx.events.send(Event::TunnelGrant(id, n));
    }
    let _ = wr.shutdown().await;
}

/// A `T_CREDIT` frame.
pub(super) fn credit_frame(id: u32, n: u32) -> TunnelFrame {
    frame(T_CREDIT, id, &n.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child() -> (Streams, mpsc::UnboundedReceiver<Event>) {
        let (events, rx) = mpsc::unbounded_channel();
        (Streams::new(false, events), rx)
    }

    fn with_id(id: u32, data: &[u8]) -> Vec<u8> {
        frame(0, id, data).payload
    }

    #[tokio::test]
    async fn an_id_never_opened_closes_the_link() {
        let (s, _ev) = child();
        s.handle(T_OPEN, with_id(1, &[])).await.unwrap();
        assert!(s.accept().await.is_some());
        for kind in [T_DATA, T_CREDIT, T_FIN, T_RESET] {
            let err = s.handle(kind, with_id(2, b"x")).await.unwrap_err();
            assert_eq!(err, "unknown tunnel stream 2");
        }
        let err = s.handle(T_DATA, with_id(0, b"x")).await.unwrap_err();
        assert_eq!(err, "unknown tunnel stream 0");
        // Ids only grow: reopening one is an error too.
        let err = s.handle(T_OPEN, with_id(1, &[])).await.unwrap_err();
        assert!(err.contains("bad tunnel OPEN: stream 1 after 1"), "{err}");
        let err = s.handle(T_DATA, vec![0, 0]).await.unwrap_err();
        assert!(err.contains("without a stream id"), "{err}");
    }

    #[tokio::test]
    async fn credit_beyond_the_window_closes_the_link() {
        let (s, _ev) = child();
        s.handle(T_OPEN, with_id(1, &[])).await.unwrap();
        // A new stream starts with a whole window: one byte more is an overflow.
        let err = s
            .handle(T_CREDIT, credit_frame(1, 1).payload)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            format!("credit overflow on tunnel stream 1: over {TUNNEL_WINDOW} bytes")
        );
        let err = s.handle(T_CREDIT, with_id(1, &[0, 1])).await.unwrap_err();
        assert!(err.contains("bad tunnel CREDIT"), "{err}");
    }

    #[tokio::test]
    async fn data_beyond_the_credit_closes_the_link() {
        let (s, _ev) = child();
        s.handle(T_OPEN, with_id(1, &[])).await.unwrap();
        let _user = s.accept().await.unwrap();
        // Nobody reads: the pipe takes at most PIPE, the window the rest.
        let chunks = (TUNNEL_WINDOW as usize + PIPE) / CHUNK + 1;
        let mut err = None;
        for _ in 0..chunks {
            if let Err(e) = s.handle(T_DATA, with_id(1, &[7; CHUNK])).await {
                err = Some(e);
                break;
            }
        }
        let err = err.expect("the sender overran its credit unnoticed");
        assert!(
            err.contains("beyond its 262144-byte credit on tunnel stream 1"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_second_fin_or_data_after_fin_closes_the_link() {
        let (s, _ev) = child();
        s.handle(T_OPEN, with_id(1, &[])).await.unwrap();
        s.handle(T_FIN, with_id(1, &[])).await.unwrap();
        let err = s.handle(T_DATA, with_id(1, b"late")).await.unwrap_err();
        assert_eq!(err, "data on tunnel stream 1 after its FIN");
        let err = s.handle(T_FIN, with_id(1, &[])).await.unwrap_err();
        assert_eq!(err, "bad tunnel FIN on stream 1");
    }

    #[tokio::test]
    async fn frames_for_a_stream_closed_here_are_ignored() {
        let (s, _ev) = child();
        s.handle(T_OPEN, with_id(1, &[])).await.unwrap();
        s.handle(T_RESET, with_id(1, &[])).await.unwrap();
        s.handle(T_DATA, with_id(1, b"in flight")).await.unwrap();
        s.handle(T_CREDIT, credit_frame(1, 5).payload)
            .await
            .unwrap();
        s.handle(T_FIN, with_id(1, &[])).await.unwrap();
    }

    #[tokio::test]
    async fn only_the_parent_opens_and_only_toward_a_child_that_announced() {
        let (events, _ev) = mpsc::unbounded_channel();
        let parent = Streams::new(true, events);
        assert!(!parent.carries_tunnels());
        assert_eq!(
            parent.open().await.unwrap_err(),
            OpenStreamError::NotSupported
        );
        parent.peer_features(FEATURE_TUNNELS);
        assert!(parent.carries_tunnels());
        assert!(parent.open().await.is_ok());
        let err = parent.handle(T_OPEN, with_id(9, &[])).await.unwrap_err();
        assert_eq!(err, "the child opened tunnel stream 9");
        let (c, _ev) = child();
        c.peer_features(FEATURE_TUNNELS);
        assert_eq!(c.open().await.unwrap_err(), OpenStreamError::NotOpener);
    }

    #[tokio::test]
    async fn a_child_refuses_more_streams_than_the_cap() {
        let (s, _ev) = child();
        for id in 1..=MAX_TUNNEL_STREAMS {
            s.handle(T_OPEN, with_id(id, &[])).await.unwrap();
        }
        let err = s
            .handle(T_OPEN, with_id(MAX_TUNNEL_STREAMS + 1, &[]))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            format!("over {MAX_TUNNEL_STREAMS} tunnel streams open")
        );
    }
}
