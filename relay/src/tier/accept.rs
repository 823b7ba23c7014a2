//! The listener side of a relay: the accept loop, and one task per incoming
//! connection that identifies it (a child by its certificate, or an agent joining with
//! a token) and pumps its messages to the driver as [`RelayInput`]s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use quinn::VarInt;
use strata_node::driver::Input;
use strata_node::link::Link;
use strata_node::tls::peer_node_name_in;
use strata_node::transport::{self, QuicListener, Receiver, close_code};
use strata_node::{tcp, tls};
use strata_protocol::codec::DEFAULT_MAX_FRAME;
use strata_protocol::wire::{ChildToParent, JoinReply, ParentToChild};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::input::RelayInput;
use crate::join::{self, JoinConnection, Joining};

/// How long a TLS handshake on an accepted TCP connection may take.
const TCP_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a connection waits for a handshake slot before it is refused: well within
/// a client's handshake timeout, so that it hears the refusal and backs off.
const SLOT_WAIT: Duration = Duration::from_secs(3);

/// Bounds the TLS handshakes a relay runs at once: a reconnect storm of thousands of
/// children is taken a slot at a time, the connections beyond the slots wait (at most
/// `queue` of them, for at most [`SLOT_WAIT`]), and the rest are refused at once,
/// before any cryptography (QUIC's `CONNECTION_REFUSED`; a closed TCP connection). A
/// refused child backs off with jitter and comes back; nothing it had is lost.
#[derive(Debug)]
pub(super) struct HandshakeGate {
    slots: Option<Arc<Semaphore>>,
    queue: usize,
    waiting: AtomicUsize,
    refused: AtomicU64,
    /// Refusals not yet logged (one line per second at most says how many).
    unlogged: AtomicU64,
    /// When the last such line was written, in ms after `born` (`u64::MAX`: never).
    last_log_ms: AtomicU64,
    born: tokio::time::Instant,
}

impl HandshakeGate {
    /// `handshakes` at once (0: no limit), `queue` waiting at most.
    pub(super) fn new(handshakes: usize, queue: usize) -> Self {
        HandshakeGate {
            slots: (handshakes > 0).then(|| Arc::new(Semaphore::new(handshakes))),
            queue,
            waiting: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            unlogged: AtomicU64::new(0),
            last_log_ms: AtomicU64::new(u64::MAX),
            born: tokio::time::Instant::now(),
        }
    }

    /// Whether one more connection may wait for a slot (false: refuse it now).
    fn has_room(&self) -> bool {
        match &self.slots {
            None => true,
            Some(s) => {
                s.available_permits() > 0 || self.waiting.load(Ordering::Relaxed) < self.queue
            }
        }
    }

    /// Waits for a handshake slot: `Ok(None)` when unlimited, `Err(())` when none came
    /// within [`SLOT_WAIT`] (refuse the connection).
    async fn slot(&self) -> Result<Option<OwnedSemaphorePermit>, ()> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let permit = tokio::time::timeout(SLOT_WAIT, slots.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        match permit {
            Ok(Ok(p)) => Ok(Some(p)),
            _ => Err(()),
        }
    }

    /// Counts a refusal and says so in the log, at most once a second.
    fn refused(&self, why: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.unlogged.fetch_add(1, Ordering::Relaxed);
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        let last = self.last_log_ms.load(Ordering::Relaxed);
        let due = last == u64::MAX || now.saturating_sub(last) >= 1000;
        if due
            && self
                .last_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let n = self.unlogged.swap(0, Ordering::Relaxed);
            tracing::info!(
                refused = n,
                total = self.refused.load(Ordering::Relaxed),
                why,
                "refusing connections: too many handshakes at once; the children will come back"
            );
        }
    }

    /// Connections refused so far.
    pub(super) fn refused_total(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Accepts QUIC connections until the endpoint closes; every connection's task belongs
/// to the loop and ends with it. `ids` numbers connections (shared with the TCP loop).
pub(super) async fn accept_loop(
    listener: QuicListener,
    joining: Option<Arc<Joining>>,
    own: Arc<Vec<Vec<u8>>>,
    tx: mpsc::Sender<Input<RelayInput>>,
    ids: Arc<AtomicU64>,
    gate: Arc<HandshakeGate>,
) {
    let mut conns = JoinSet::new();
    while let Some(incoming) = listener.accept().await {
        if !gate.has_room() {
            gate.refused("the handshake queue is full");
            incoming.refuse();
            continue;
        }
        let conn_id = ids.fetch_add(1, Ordering::Relaxed) + 1;
        let tx = tx.clone();
        let joining = joining.clone();
        let own = own.clone();
        let gate = gate.clone();
        let listener = listener.clone();
        conns.spawn(
            async move {
                // The handshake's and a join's futures are boxed: a task's future is as
                // large as the largest state it can be in, and this one is held for as
                // long as the child stays connected. Inline, the handshake's state sized
                // every idle child's task at about 1.9 KiB (issue 49's heap profile);
                // boxed, it is allocated while the handshake runs and freed after.
                let Ok(slot) = Box::pin(gate.slot()).await else {
                    gate.refused("no handshake slot came free in time");
                    incoming.refuse();
                    return;
                };
                let handshake = Box::pin(listener.handshake(incoming)).await;
                drop(slot);
                let conn = match handshake {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::info!(error = %e, "handshake failed (a certificate refused?)");
                        return;
                    }
                };
                // No client certificate: only a relay admitting joins lets that through
                // TLS, and such a connection may do one join exchange and nothing else.
                if tls::peer_chain(&conn).is_none() {
                    if let Some(joining) = &joining {
                        Box::pin(serve_join(
                            JoinConnection::new(Link::Quic(conn)),
                            joining,
                            &tx,
                        ))
                        .await;
                    } else {
                        conn.close(
                            VarInt::from_u32(close_code::UNKNOWN_CHILD),
                            b"a client certificate is required",
                        );
                    }
                    return;
                }
                serve_connection(Link::Quic(conn.clone()), conn_id, &own, tx).await;
                // The next connection from there starts at the size this one found.
                listener.remember(&conn);
            }
            .in_current_span(),
        );
        // Reap finished connection tasks so the set does not grow without bound.
        while conns.try_join_next().is_some() {}
    }
    conns.shutdown().await;
}

/// Accepts TLS/TCP connections until the node stops; the same checks as QUIC's (a
/// connection without a certificate may join with a token, at a relay admitting joins).
pub(super) async fn tcp_accept_loop(
    listener: tcp::Listener,
    joining: Option<Arc<Joining>>,
    own: Arc<Vec<Vec<u8>>>,
    tx: mpsc::Sender<Input<RelayInput>>,
    ids: Arc<AtomicU64>,
    gate: Arc<HandshakeGate>,
) {
    let mut conns = JoinSet::new();
    loop {
        let (stream, tls) = match listener.next().await {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and the like: wait rather than spin.
                tracing::warn!(error = %e, "cannot accept a TCP connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        if !gate.has_room() {
            gate.refused("the handshake queue is full");
            drop(stream);
            continue;
        }
        let conn_id = ids.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, joining, gate, own) = (tx.clone(), joining.clone(), gate.clone(), own.clone());
        conns.spawn(
            async move {
                // Boxed, as in `accept_loop`: a rustls connection mid-handshake would
                // otherwise stay in every idle child's task.
                let Ok(slot) = Box::pin(gate.slot()).await else {
                    gate.refused("no handshake slot came free in time");
                    return;
                };
                let handshake =
                    Box::pin(tokio::time::timeout(TCP_HANDSHAKE_TIMEOUT, tcp::accept(stream, tls)))
                        .await;
                drop(slot);
                let link = match handshake {
                    Ok(Ok(l)) => Link::Tcp(l),
                    Ok(Err(e)) => {
                        tracing::info!(error = %e, "TLS/TCP handshake failed (a certificate refused?)");
                        return;
                    }
                    Err(_) => {
                        tracing::info!("TLS/TCP handshake did not complete in time");
                        return;
                    }
                };
                if link.peer_chain().is_none() {
                    match &joining {
                        Some(joining) => {
                            Box::pin(serve_join(JoinConnection::new(link), joining, &tx)).await
                        }
                        None => link.close(
                            close_code::UNKNOWN_CHILD,
                            b"a client certificate is required",
                        ),
                    }
                    return;
                }
                serve_connection(link, conn_id, &own, tx).await;
            }
            .in_current_span(),
        );
        while conns.try_join_next().is_some() {}
    }
}

/// One child's connection (it presented a certificate): checked, then its session, in
/// a span naming the child.
async fn serve_connection(
    conn: Link,
    conn_id: u64,
    own: &[Vec<u8>],
    tx: mpsc::Sender<Input<RelayInput>>,
) {
    let Some(chain) = conn.peer_chain() else {
        return;
    };
    if !join::chain_allowed(&chain, own) {
        conn.close(
            close_code::UNKNOWN_CHILD,
            b"the certificate was issued by an intermediate that is not this relay's own (join or renewal) CA",
        );
        return;
    }
    let name = match peer_node_name_in(&chain) {
        Ok(n) => n,
        Err(e) => {
            conn.close(close_code::UNKNOWN_CHILD, e.to_string().as_bytes());
            return;
        }
    };
    let span = tracing::info_span!("child", peer = %name, conn = conn_id, transport = %conn.kind());
    async move {
        let (sender, receiver) =
            transport::split::<ParentToChild, ChildToParent>(conn.clone(), DEFAULT_MAX_FRAME);
        if tx
            .send(Input::Node(RelayInput::ChildUp {
                name: name.clone(),
                conn_id,
                conn,
                sender,
            }))
            .await
            .is_err()
        {
            return;
        }
        let why = pump_child(receiver, &name, conn_id, &tx).await;
        let _ = tx
            .send(Input::Node(RelayInput::ChildDown { name, conn_id, why }))
            .await;
    }
    .instrument(span)
    .await;
}

/// One join exchange on a connection without a client certificate; over the rate of
/// join attempts, a refusal saying so before the request is even read.
async fn serve_join(
    mut conn: JoinConnection,
    joining: &Joining,
    tx: &mpsc::Sender<Input<RelayInput>>,
) {
    if let Err(too_many) = joining.check_rate(conn.remote_address().ip()).await {
        let refusal = JoinReply::Refused {
            relay: joining.relay().to_owned(),
            reason: too_many.to_string(),
        };
        conn.send_reply(&refusal).await;
        return;
    }
    let Some(request) = conn.read_request().await else {
        return;
    };
    let (reply_tx, reply_rx) = oneshot::channel();
    let input = Input::Node(RelayInput::Join {
        request,
        reply: reply_tx,
    });
    if tx.send(input).await.is_err() {
        return;
    }
    if let Ok(reply) = reply_rx.await {
        conn.send_reply(&reply).await;
    }
}

async fn pump_child(
    mut receiver: Receiver<ChildToParent>,
    name: &str,
    conn_id: u64,
    tx: &mpsc::Sender<Input<RelayInput>>,
) -> String {
    loop {
        match receiver.recv().await {
            Ok(msg) => {
                let input = Input::Node(RelayInput::ChildMsg {
                    name: name.to_owned(),
                    conn_id,
                    msg,
                });
                if tx.send(input).await.is_err() {
                    return "node stopping".into();
                }
            }
            Err(e) => return e.to_string(),
        }
    }
}
