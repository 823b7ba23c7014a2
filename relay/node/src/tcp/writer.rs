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
    CHUNK, CLOSE, CLOSE_WRITE_TIMEOUT, CREDIT, DATA, Event, HEADER, Inner, PING, Stream, lossy,
    set_closed, streams,
};
use crate::transport::{ClassBytes, Queued, STREAM_CLASSES, WireMessage};

/// Writes one frame: the 8-byte header, then `payload`; returns the bytes written.
pub(super) async fn write_frame(
    wr: &mut WriteHalf<Stream>,
    kind: u8,
    class: u8,
    value: u32,
    payload: &[u8],
) -> std::io::Result<usize> {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let code = u16::try_from(value).unwrap_or(u16::MAX);
    let mut header = [0u8; HEADER];
    header[0] = kind;
    header[1] = class;
    header[2..4].copy_from_slice(&code.to_be_bytes());
    // CREDIT carries its amount in `len` and has no payload.
    let len = if kind == CREDIT { value } else { len };
    header[4..8].copy_from_slice(&len.to_be_bytes());
    wr.write_all(&header).await?;
    wr.write_all(payload).await?;
    Ok(HEADER + payload.len())
}

/// One message of a class being written: its frame, and how much of it has gone.
#[derive(Debug, Default)]
pub(super) struct Pending {
    buf: Vec<u8>,
    sent: usize,
}

pub(super) struct Writer<M> {
    pub(super) wr: WriteHalf<Stream>,
    pub(super) queues: [mpsc::Receiver<Queued<M>>; 3],
    pub(super) events: mpsc::UnboundedReceiver<Event>,
    pub(super) credit: [u64; 3],
    pub(super) pending: [Pending; 3],
    pub(super) open: [bool; 3],
    pub(super) bytes: Arc<ClassBytes>,
    pub(super) link: std::sync::Weak<Inner>,
    pub(super) closed: watch::Receiver<Option<String>>,
    pub(super) keep_alive: Duration,
    /// Tunnel streams' frames, in the order their pumps queued them.
    pub(super) tunnels: mpsc::Receiver<streams::TunnelFrame>,
    pub(super) tunnel_pending: Option<streams::TunnelFrame>,
    pub(super) tunnels_open: bool,
    /// Whether a tunnel frame goes before the protocol's data next time both wait.
    pub(super) tunnel_turn: bool,
}

/// Classes in the order the writer serves them: heartbeats and acks first.
const PRIORITY: [usize; 3] = [0, 2, 1];

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

    async fn event(&mut self, ev: Event) -> std::io::Result<Option<String>> {
        match ev {
            Event::Grant(c, n) => {
                let w = write_frame(&mut self.wr, CREDIT, c as u8, n, &[]).await?;
                self.count(w);
            }
            Event::Credit(c, n) => self.credit[c] += u64::from(n),
            Event::TunnelGrant(id, n) => {
                let f = streams::credit_frame(id, n);
                let w = write_frame(&mut self.wr, f.kind, 0, 0, &f.payload).await?;
                self.count(w);
            }
            Event::Close(code, reason) => {
                // What is already queued goes first, boundedly: a peer that reads
                // nothing must not keep this task alive.
                let write = async {
                    self.drain_queued().await?;
                    let w = write_frame(&mut self.wr, CLOSE, 0, code, &reason).await?;
                    self.count(w);
                    self.wr.flush().await
                };
                let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, write).await;
                return Ok(Some(format!("closed locally: {}", lossy(&reason))));
            }
        }
        Ok(None)
    }

    /// Writes what may go now; returns whether anything did. Control goes first; then
    /// the protocol's data (reports before bulk) and the tunnels take turns, a chunk
    /// each, when both wait.
    async fn write_ready(&mut self) -> std::io::Result<bool> {
        for i in PRIORITY {
            if self.pending[i].buf.is_empty() && self.open[i] {
                match self.queues[i].try_recv() {
                    Ok(msg) => self.stage(i, &msg),
                    Err(mpsc::error::TryRecvError::Disconnected) => self.open[i] = false,
                    Err(mpsc::error::TryRecvError::Empty) => {}
                }
            }
        }
        if self.tunnel_pending.is_none() && self.tunnels_open {
            match self.tunnels.try_recv() {
                Ok(f) => self.tunnel_pending = Some(f),
                Err(mpsc::error::TryRecvError::Disconnected) => self.tunnels_open = false,
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
            self.write_class(i).await?;
            self.tunnel_turn = true;
            return Ok(true);
        }
        if let Some(f) = self.tunnel_pending.take() {
            let w = write_frame(&mut self.wr, f.kind, 0, 0, &f.payload).await?;
            self.count(w);
            self.tunnel_turn = false;
            return Ok(true);
        }
        Ok(false)
    }

    /// Writes the next chunk of class `i` (it has data and credit).
    async fn write_class(&mut self, i: usize) -> std::io::Result<()> {
        let p = &self.pending[i];
        let left = p.buf.len() - p.sent;
        let n = left
            .min(CHUNK)
            .min(usize::try_from(self.credit[i]).unwrap_or(CHUNK));
        let (start, end) = (p.sent, p.sent + n);
        let chunk = self.pending[i].buf[start..end].to_vec();
        let w = write_frame(&mut self.wr, DATA, i as u8, 0, &chunk).await?;
        self.count(w);
        self.credit[i] -= n as u64;
        self.pending[i].sent = end;
        if end == self.pending[i].buf.len() {
            self.pending[i] = Pending::default();
        }
        Ok(())
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
        while self.write_ready().await? {}
        Ok(())
    }

    async fn run_inner(&mut self) -> std::io::Result<String> {
        let mut ping = tokio::time::interval(self.keep_alive);
        ping.tick().await;
        // First, what this side carries besides the classes (see the module doc).
        let features = u32::from(streams::FEATURE_TUNNELS);
        let w = write_frame(&mut self.wr, PING, streams::FEATURES, features, &[]).await?;
        self.count(w);
        loop {
            while let Ok(ev) = self.events.try_recv() {
                if let Some(why) = self.event(ev).await? {
                    return Ok(why);
                }
            }
            if self.write_ready().await? {
                continue;
            }
            self.wr.flush().await?;
            let wants = |w: &Self, i: usize| w.open[i] && w.pending[i].buf.is_empty();
            let (c, b, r) = (wants(self, 0), wants(self, 1), wants(self, 2));
            let t = self.tunnels_open && self.tunnel_pending.is_none();
            let [q0, q1, q2] = &mut self.queues;
            tokio::select! {
                biased;
                // The link closed (the reader saw the end): nothing more to write.
                _ = self.closed.changed() => return Ok("closed".into()),
                // Credit and close requests before data: they unblock both sides.
                ev = self.events.recv() => match ev {
                    Some(ev) => if let Some(why) = self.event(ev).await? { return Ok(why) },
                    None => return Ok("dropped".into()),
                },
                m = q0.recv(), if c => self.take(0, m),
                m = q2.recv(), if r => self.take(2, m),
                m = q1.recv(), if b => self.take(1, m),
                f = self.tunnels.recv(), if t => match f {
                    Some(f) => self.tunnel_pending = Some(f),
                    None => self.tunnels_open = false,
                },
                _ = ping.tick() => {
                    let w = write_frame(&mut self.wr, PING, 0, 0, &[]).await?;
                    self.count(w);
                }
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
