//! The writer of a TLS/TCP link: the one task that writes frames, choosing what goes
//! next: control, then the protocol's data and the tunnel streams by turns (see the
//! parent module's doc).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use strata_protocol::codec;
use tokio::io::{AsyncWriteExt, WriteHalf};
use tokio::sync::{mpsc, watch};

use super::{
    CHUNK, CLOSE, CLOSE_WRITE_TIMEOUT, CREDIT, DATA, Event, HEADER, Inner, PING, PRIORITY, Stream,
    lossy, set_closed, streams,
};
use crate::net::message::{ClassBytes, Queued, STREAM_CLASSES, WireMessage};
use crate::net::out_queue::OutReceiver;

/// Appends one frame to `out`: the 8-byte header, then `payload`; returns its bytes.
pub(super) fn push_frame(
    out: &mut Vec<u8>,
    kind: u8,
    class: u8,
    value: u32,
    payload: &[u8],
) -> usize {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let code = u16::try_from(value).unwrap_or(u16::MAX);
    // CREDIT carries its amount in `len` and has no payload.
    let len = if kind == CREDIT { value } else { len };
    out.reserve(HEADER + payload.len());
    out.push(kind);
    out.push(class);
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    HEADER + payload.len()
}

/// Writes one frame on its own (a link refused before its writer started).
pub(super) async fn write_frame(
    wr: &mut WriteHalf<Stream>,
    kind: u8,
    class: u8,
    value: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut out = Vec::new();
    push_frame(&mut out, kind, class, value, payload);
    wr.write_all(&out).await
}

/// Frames staged for one write: the writer writes when this many bytes wait, or when
/// nothing more is ready. One write of several frames is one TLS record and one system
/// call where a write per frame was two of each (tokio-rustls writes through); a
/// heartbeat waits behind less than two chunks.
const WRITE_AT: usize = CHUNK;

/// One message of a class being written: its frame, and how much of it has gone.
#[derive(Debug, Default)]
pub(super) struct Pending {
    buf: Vec<u8>,
    sent: usize,
}

pub(super) struct Writer<M> {
    pub(super) wr: WriteHalf<Stream>,
    /// Frames staged and not yet written (see [`WRITE_AT`]).
    pub(super) out: Vec<u8>,
    pub(super) queues: OutReceiver<M>,
    pub(super) events: mpsc::UnboundedReceiver<Event>,
    pub(super) credit: [u64; 3],
    pub(super) pending: [Pending; 3],
    pub(super) open: [bool; 3],
    pub(super) bytes: Arc<ClassBytes>,
    pub(super) link: std::sync::Weak<Inner>,
    pub(super) closed: watch::Receiver<Option<String>>,
    pub(super) keep_alive: Duration,
    /// Tunnel streams' frames, in the order their pumps queued them (from the first
    /// stream opened until the link's streams end).
    pub(super) tunnels: Option<mpsc::Receiver<streams::TunnelFrame>>,
    pub(super) tunnel_pending: Option<streams::TunnelFrame>,
    /// Whether a tunnel frame goes before the protocol's data next time both wait.
    pub(super) tunnel_turn: bool,
}

impl<M: WireMessage> Writer<M> {
    pub(super) async fn run(mut self) {
        let why = match self.run_inner().await {
            Ok(why) => why,
            Err(e) => format!("write failed: {e}"),
        };
        let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, self.wr.shutdown()).await;
        if let Some(inner) = self.link.upgrade() {
            set_closed(&inner.closed, why);
        }
    }

    fn count(&self, n: usize) {
        if let Some(inner) = self.link.upgrade() {
            inner.wire[0].fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Stages one frame and counts its bytes.
    fn push(&mut self, kind: u8, class: u8, value: u32, payload: &[u8]) {
        let n = push_frame(&mut self.out, kind, class, value, payload);
        self.count(n);
    }

    /// Writes the staged frames.
    async fn write_out(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            // Taken, not cleared: an idle link keeps no buffer (a snapshot's chunks
            // would otherwise stay allocated on each of thousands of links).
            let out = std::mem::take(&mut self.out);
            self.wr.write_all(&out).await?;
        }
        self.wr.flush().await
    }

    async fn event(&mut self, ev: Event) -> std::io::Result<Option<String>> {
        match ev {
            Event::Grant(c, n) => self.push(CREDIT, c as u8, n, &[]),
            Event::Credit(c, n) => self.credit[c] += u64::from(n),
            Event::TunnelGrant(id, n) => {
                let f = streams::credit_frame(id, n);
                self.push(f.kind, 0, 0, &f.payload);
            }
            Event::Tunnels(rx) => self.tunnels = Some(rx),
            Event::Close(code, reason) => {
                // What is already queued goes first, boundedly: a peer that reads
                // nothing must not keep this task alive.
                let write = async {
                    self.drain_queued().await?;
                    self.push(CLOSE, 0, code, &reason);
                    self.write_out().await
                };
                let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, write).await;
                return Ok(Some(format!("closed locally: {}", lossy(&reason))));
            }
        }
        Ok(None)
    }

    /// Stages what may go now; returns whether anything did. Control goes first; then
    /// the protocol's data (reports before bulk) and the tunnels take turns, a chunk
    /// each, when both wait.
    fn stage_ready(&mut self) -> bool {
        for i in PRIORITY {
            if self.pending[i].buf.is_empty() && self.open[i] {
                match self.queues.try_recv(i) {
                    Ok(msg) => self.stage(i, &msg),
                    Err(mpsc::error::TryRecvError::Disconnected) => self.open[i] = false,
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
            }
        }
        if self.tunnel_pending.is_none()
            && let Some(tunnels) = &mut self.tunnels
        {
            match tunnels.try_recv() {
                Ok(f) => self.tunnel_pending = Some(f),
                Err(mpsc::error::TryRecvError::Disconnected) => self.tunnels = None,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
        }
        let ready =
            |w: &Self, i: usize| w.pending[i].buf.len() > w.pending[i].sent && w.credit[i] > 0;
        let class = PRIORITY.into_iter().find(|&i| ready(self, i));
        let tunnel = self.tunnel_pending.is_some();
        let class = match class {
            Some(0) => Some(0),
            Some(i) if !(tunnel && self.tunnel_turn) => Some(i),
            _ => None,
        };
        if let Some(i) = class {
            self.stage_chunk(i);
            self.tunnel_turn = true;
            return true;
        }
        if let Some(f) = self.tunnel_pending.take() {
            self.push(f.kind, 0, 0, &f.payload);
            self.tunnel_turn = false;
            return true;
        }
        false
    }

    /// Stages the next chunk of class `i` (it has data and credit).
    fn stage_chunk(&mut self, i: usize) {
        let p = &self.pending[i];
        let left = p.buf.len() - p.sent;
        let n = left
            .min(CHUNK)
            .min(usize::try_from(self.credit[i]).unwrap_or(CHUNK));
        let (start, end) = (p.sent, p.sent + n);
        let w = push_frame(&mut self.out, DATA, i as u8, 0, &p.buf[start..end]);
        self.count(w);
        self.credit[i] -= n as u64;
        self.pending[i].sent = end;
        if end == self.pending[i].buf.len() {
            self.pending[i] = Pending::default();
        }
    }

    fn stage(&mut self, i: usize, msg: &M) {
        let mut buf = Vec::new();
        if let Err(e) = codec::encode(msg, codec::DEFAULT_MAX_FRAME, &mut buf) {
            tracing::error!(class = ?STREAM_CLASSES[i], error = %e, "dropping a message that cannot be framed");
            return;
        }
        self.bytes.sent[i].fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.pending[i] = Pending { buf, sent: 0 };
    }

    /// Before a close: writes what is queued, as far as credit allows.
    async fn drain_queued(&mut self) -> std::io::Result<()> {
        while self.stage_ready() {
            if self.out.len() >= WRITE_AT {
                self.write_out().await?;
            }
        }
        Ok(())
    }

    async fn run_inner(&mut self) -> std::io::Result<String> {
        let mut ping = tokio::time::interval(self.keep_alive);
        ping.tick().await;
        // First, what this side carries besides the classes (see the module doc).
        let features = u32::from(streams::FEATURE_TUNNELS);
        self.push(PING, streams::FEATURES, features, &[]);
        loop {
            while let Ok(ev) = self.events.try_recv() {
                if let Some(why) = self.event(ev).await? {
                    return Ok(why);
                }
            }
            if self.stage_ready() {
                if self.out.len() >= WRITE_AT {
                    self.write_out().await?;
                }
                continue;
            }
            self.write_out().await?;
            let wants = |w: &Self, i: usize| w.open[i] && w.pending[i].buf.is_empty();
            let (c, b, r) = (wants(self, 0), wants(self, 1), wants(self, 2));
            let t = self.tunnels.is_some() && self.tunnel_pending.is_none();
            let q = &self.queues;
            tokio::select! {
                biased;
                // The link closed (the reader saw the end): nothing more to write.
                _ = self.closed.changed() => return Ok("closed".into()),
                // Credit and close requests before data: they unblock both sides.
                ev = self.events.recv() => match ev {
                    Some(ev) => if let Some(why) = self.event(ev).await? { return Ok(why) },
                    None => return Ok("dropped".into()),
                },
                m = q.recv(0), if c => self.take(0, m),
                m = q.recv(2), if r => self.take(2, m),
                m = q.recv(1), if b => self.take(1, m),
                f = next_tunnel_frame(&mut self.tunnels), if t => match f {
                    Some(f) => self.tunnel_pending = Some(f),
                    None => self.tunnels = None,
                },
                _ = ping.tick() => self.push(PING, 0, 0, &[]),
            }
        }
    }

    fn take(&mut self, i: usize, m: Option<Queued<M>>) {
        match m {
            Some(m) => self.stage(i, &m),
            None => self.open[i] = false,
        }
    }
}

/// The next tunnel frame queued; `None` once every stream's sender is gone. Never
/// resolves before the first stream opened (the branch is disabled then; `select!`
/// still builds its future).
async fn next_tunnel_frame(
    tunnels: &mut Option<mpsc::Receiver<streams::TunnelFrame>>,
) -> Option<streams::TunnelFrame> {
    match tunnels {
        Some(t) => t.recv().await,
        None => std::future::pending().await,
    }
}
