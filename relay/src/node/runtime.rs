//! The tasks that drive a [`NodeCore`]: one core task that owns all sync state, an
//! accept loop with one task per child connection, and the upstream link with
//! reconnection. Every task is owned by a `JoinSet` and ends with the node.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use quinn::{Connection, Endpoint, VarInt};
use strata_protocol::codec::DEFAULT_MAX_FRAME;
use strata_protocol::sync::{LinkConfig, ObjectLog, ParentLink, SessionConfig};
use strata_protocol::wire::{
    ChildToParent, ErrorCode, JoinReply, JoinRequest, ParentToChild, Role, StreamClass,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::clock::Clock;
use super::core::{CoreSetup, NodeCore, Outgoing, new_log};
use super::reports::SubtreeReports;
use super::upstream::{Upstream, UpstreamInput, deliver_upstream, upstream_loop};
use crate::join::{self, Admissions, Joining};
use crate::store::{Batch, Store, StoreError};
use crate::tls::{peer_chain, peer_node_name};
use crate::transport::{self, Receiver, Sender, close_code};

/// What a node needs to run.
pub struct NodeParts {
    /// Node name.
    pub name: String,
    /// Labels clusters below inherit.
    pub labels: strata_protocol::model::Labels,
    /// Children allowed to connect.
    pub children: Vec<String>,
    /// The parent (`None` at the root).
    pub parent: Option<(String, SocketAddr)>,
    /// The durable store.
    pub store: Arc<dyn Store>,
    /// Where children connect, if this node has any.
    pub listener: Option<Endpoint>,
    /// The endpoint used to reach the parent.
    pub connector: Option<Endpoint>,
    /// Session tuning.
    pub sessions: SessionConfig,
    /// How often summaries go upward.
    pub summary_interval: Duration,
    /// The clock.
    pub clock: Clock,
    /// This run's id (new at every start).
    pub run: u64,
    /// Admitting agents that join with a token, if this node does (its listener must
    /// then accept connections without a client certificate).
    pub joining: Option<Arc<Joining>>,
}

impl std::fmt::Debug for NodeParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeParts")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why a node stopped.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The store failed at startup.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A request to the core from the API or a test, answered with a snapshot of state.
pub type Query = Box<dyn FnOnce(&mut NodeCore) + Send>;

/// A running node.
#[derive(Debug)]
pub struct NodeHandle {
    client: NodeClient,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), NodeError>>,
}

/// A cloneable way to ask a running node things (the API uses it).
#[derive(Debug, Clone)]
pub struct NodeClient {
    queries: mpsc::Sender<Input>,
}

impl NodeClient {
    /// Runs `f` on the core's state inside the core task and returns its result;
    /// `None` once the node has stopped.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut NodeCore) -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        let q: Query = Box::new(move |core| {
            let _ = tx.send(f(core));
        });
        self.queries.send(Input::Query(q)).await.ok()?;
        rx.await.ok()
    }
}

impl NodeClient {
    /// Bytes on the node's live connections.
    pub async fn link_stats(&self) -> Option<LinkStats> {
        let (tx, rx) = oneshot::channel();
        self.queries.send(Input::LinkStats(tx)).await.ok()?;
        rx.await.ok()
    }
}

impl NodeHandle {
    /// Runs `f` on the core's state inside the core task and returns its result.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut NodeCore) -> T + Send + 'static,
    ) -> Option<T> {
        self.client.query(f).await
    }

    /// A cloneable client of this node.
    pub fn client(&self) -> NodeClient {
        self.client.clone()
    }

    /// Stops the node: children and parent are told, tasks end, the store is flushed.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        let _ = self.shutdown.send(true);
        match self.task.await {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Waits until the node stops by itself.
    pub async fn wait(&mut self) -> Result<(), NodeError> {
        match (&mut self.task).await {
            Ok(r) => r,
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

enum Input {
    ChildUp {
        name: String,
        conn_id: u64,
        conn: Connection,
        sender: Sender<ParentToChild>,
    },
    ChildMsg {
        name: String,
        conn_id: u64,
        msg: ChildToParent,
    },
    ChildDown {
        name: String,
        conn_id: u64,
        why: String,
    },
    Upstream(UpstreamInput),
    Query(Query),
    LinkStats(oneshot::Sender<LinkStats>),
    Join {
        request: JoinRequest,
        reply: oneshot::Sender<JoinReply>,
    },
}

/// Bytes on this node's links (UDP payload, as quinn counts it), for benchmarks and
/// metrics.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    /// Per connected child: (name, bytes sent, bytes received).
    pub children: Vec<(String, u64, u64)>,
    /// To and from the parent: (bytes sent, bytes received).
    pub parent: Option<(u64, u64)>,
    /// Framed bytes per stream class on every live connection: (peer, class, sent,
    /// received); the parent is the peer `parent`.
    pub streams: Vec<(String, StreamClass, u64, u64)>,
}

impl From<UpstreamInput> for Input {
    fn from(u: UpstreamInput) -> Self {
        Input::Upstream(u)
    }
}

/// Starts a node from its store and returns its handle.
pub fn start(parts: NodeParts) -> Result<NodeHandle, NodeError> {
    let stored = parts.store.load()?;
    let now = parts.clock.now();
    let root = parts.parent.is_none();
    let log = match stored.log_meta {
        Some(meta) => {
            let mut log = ObjectLog::restore(meta, stored.entries);
            if root {
                log.mark_serving();
            }
            log
        }
        None => new_log(stored.node_id, root),
    };
    let upstream_state = stored.upstream.unwrap_or_default();
    let upstream = parts.parent.as_ref().map(|_| {
        let mut config = LinkConfig::new(parts.name.clone(), Role::Relay);
        config.run = parts.run;
        ParentLink::new(now, config, upstream_state.cursor, upstream_state.route)
    });
    let reports = SubtreeReports::restore(stored.reports);
    // Agents admitted by join token are children like the configured ones.
    let mut children = parts.children.clone();
    children.extend(stored.joined.values().cloned());
    let admissions = parts.joining.clone().map(|j| {
        Admissions::new(
            j,
            parts.parent.as_ref().map(|(n, _)| n.clone()),
            parts.store.clone(),
            stored.joined,
        )
    });
    let core = NodeCore::new(
        now,
        CoreSetup {
            name: parts.name.clone(),
            labels: parts.labels.clone(),
            children,
            sessions: parts.sessions.clone(),
            log,
            reports,
            acked: stored.child_acks,
            child_runs: stored.child_runs,
            upstream,
            upstream_state,
            summary_interval: parts.summary_interval,
            run: parts.run,
            wall_origin: parts.clock.wall_origin(),
        },
    );
    let (tx, rx) = mpsc::channel(4096);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let span = tracing::info_span!("node", node = %parts.name);
    let task =
        tokio::spawn(drive(parts, core, admissions, tx.clone(), rx, shutdown_rx).instrument(span));
    Ok(NodeHandle {
        client: NodeClient { queries: tx },
        shutdown: shutdown_tx,
        task,
    })
}

async fn drive(
    parts: NodeParts,
    mut core: NodeCore,
    mut admissions: Option<Admissions>,
    tx: mpsc::Sender<Input>,
    mut rx: mpsc::Receiver<Input>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), NodeError> {
    let mut tasks = JoinSet::new();
    if let Some(listener) = parts.listener.clone() {
        tasks.spawn(accept_loop(listener, parts.joining.clone(), tx.clone()).in_current_span());
    }
    let retry_after = Arc::new(AtomicU64::new(0));
    if let (Some(connector), Some((name, addr))) = (parts.connector.clone(), parts.parent.clone()) {
        tasks.spawn(
            upstream_loop(
                connector,
                name,
                addr,
                tx.clone(),
                retry_after.clone(),
                parts.run,
            )
            .in_current_span(),
        );
    }
    let clock = parts.clock;
    let mut children: BTreeMap<(String, u64), (Connection, Sender<ParentToChild>)> =
        BTreeMap::new();
    let mut upstream: Upstream = None;
    let mut unsaved = Batch::default();
    loop {
        let deadline = core
            .poll_timeout()
            .map(|t| clock.deadline(t))
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            // Shutdown first: nothing else matters once it is asked for.
            _ = shutdown.changed() => break,
            // Then inputs in arrival order.
            Some(input) = rx.recv() => {
                handle(&mut core, clock, input, &mut children, &mut upstream, &mut admissions);
                // Take what else is waiting, so one commit covers many inputs.
                for _ in 0..256 {
                    let Ok(input) = rx.try_recv() else { break };
                    handle(&mut core, clock, input, &mut children, &mut upstream, &mut admissions);
                }
            }
            // Then timers.
            _ = tokio::time::sleep_until(deadline) => core.handle_timeout(clock.now()),
        }
        let now = clock.now();
        unsaved.merge(core.process(now));
        if !unsaved.is_empty() {
            let result = crate::store::commit_off_workers(parts.store.as_ref(), &unsaved);
            if let Err(e) = result {
                // Nothing is acknowledged until the write succeeds: the batch is kept,
                // the core keeps serving from memory, and the write is retried shortly
                // (with whatever else changed meanwhile).
                tracing::error!(error = %e, "store commit failed; acknowledgements held back");
                tokio::time::sleep(COMMIT_RETRY).await;
                continue;
            }
            unsaved = Batch::default();
        }
        let out = core.transmit(now);
        dispatch(
            now,
            out,
            &mut core,
            &mut children,
            &mut upstream,
            &retry_after,
        );
    }
    // Graceful end: tell the children when to come back, give the goodbyes a moment to
    // leave, then close everything and stop the tasks.
    for (_, sender) in children.values() {
        let _ = sender.send(ParentToChild::Goodbye {
            code: ErrorCode::ShuttingDown,
            reason: "node shutting down".into(),
            retry_after_ms: Some(RESTART_HINT_MS),
        });
    }
    if !children.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for ((_, _), (conn, _)) in children {
        conn.close(
            VarInt::from_u32(close_code::SHUTDOWN),
            b"node shutting down",
        );
    }
    if let Some((conn, _)) = upstream {
        conn.close(
            VarInt::from_u32(close_code::SHUTDOWN),
            b"node shutting down",
        );
    }
    if let Some(l) = &parts.listener {
        l.close(
            VarInt::from_u32(close_code::SHUTDOWN),
            b"node shutting down",
        );
    }
    tasks.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

fn handle(
    core: &mut NodeCore,
    clock: Clock,
    input: Input,
    children: &mut BTreeMap<(String, u64), (Connection, Sender<ParentToChild>)>,
    upstream: &mut Upstream,
    admissions: &mut Option<Admissions>,
) {
    let now = clock.now();
    match input {
        Input::ChildUp {
            name,
            conn_id,
            conn,
            sender,
        } => match core.child_connected(now, &name, conn_id) {
            Ok(()) => {
                tracing::info!(child = %name, remote = %conn.remote_address(), "child connected");
                children.insert((name, conn_id), (conn, sender));
            }
            Err(e) => {
                tracing::warn!(child = %name, reason = %e.reason, "refusing a connection");
                conn.close(
                    VarInt::from_u32(close_code::UNKNOWN_CHILD),
                    e.reason.as_bytes(),
                );
            }
        },
        Input::ChildMsg { name, conn_id, msg } => core.child_message(now, &name, conn_id, msg),
        Input::ChildDown { name, conn_id, why } => {
            if children.remove(&(name.clone(), conn_id)).is_some() {
                tracing::info!(child = %name, %why, "child disconnected");
            }
            core.child_gone(now, &name, conn_id);
        }
        Input::Upstream(UpstreamInput::Up { conn, sender }) => {
            tracing::info!(parent = %conn.remote_address(), "connected to parent");
            *upstream = Some((conn, sender));
            core.upstream_connected(now);
        }
        Input::Upstream(UpstreamInput::Message(msg)) => core.upstream_message(now, msg),
        Input::Upstream(UpstreamInput::Down(why)) => {
            if upstream.take().is_some() {
                tracing::warn!(%why, "lost the parent");
            }
            core.upstream_gone();
        }
        Input::Query(q) => q(core),
        Input::Join { request, reply } => {
            let answer = match admissions {
                Some(a) => a.admit(core, &request),
                None => JoinReply::Refused {
                    relay: core.name().to_owned(),
                    reason: "this relay admits no agents by token".into(),
                },
            };
            let _ = reply.send(answer);
        }
        Input::LinkStats(reply) => {
            let udp = |c: &Connection| {
                let s = c.stats();
                (s.udp_tx.bytes, s.udp_rx.bytes)
            };
            let _ = reply.send(LinkStats {
                children: children
                    .iter()
                    .map(|((name, _), (conn, _))| {
                        let (tx, rx) = udp(conn);
                        (name.clone(), tx, rx)
                    })
                    .collect(),
                parent: upstream.as_ref().map(|(c, _)| udp(c)),
                streams: children
                    .iter()
                    .map(|((name, _), (_, sender))| (name.as_str(), sender.bytes()))
                    .chain(upstream.as_ref().map(|(_, s)| ("parent", s.bytes())))
                    .flat_map(|(peer, bytes)| {
                        transport::STREAM_CLASSES.map(|class| {
                            (
                                peer.to_owned(),
                                class,
                                bytes.sent(class),
                                bytes.received(class),
                            )
                        })
                    })
                    .collect(),
            });
        }
    }
}

/// How long a node waits before retrying a store commit that failed (a full disk).
pub const COMMIT_RETRY: Duration = Duration::from_millis(200);

/// How long a node shutting down asks its children to wait before reconnecting: a
/// restart usually takes about this long, and reconnecting sooner only meets a closed
/// port.
const RESTART_HINT_MS: u64 = 1000;

fn dispatch(
    now: strata_protocol::time::Instant,
    out: Outgoing,
    core: &mut NodeCore,
    children: &mut BTreeMap<(String, u64), (Connection, Sender<ParentToChild>)>,
    upstream: &mut Upstream,
    retry_after: &AtomicU64,
) {
    let mut too_slow = Vec::new();
    for (name, conn_id, msg) in out.to_children {
        if let Some((_, sender)) = children.get(&(name.clone(), conn_id))
            && sender.send(msg).is_err()
        {
            too_slow.push((name, conn_id));
        }
    }
    for (name, conn_id) in too_slow {
        if let Some((conn, _)) = children.remove(&(name.clone(), conn_id)) {
            tracing::warn!(child = %name, "closing a child that does not keep up");
            conn.close(VarInt::from_u32(close_code::TOO_SLOW), b"queue full");
        }
        core.child_gone(now, &name, conn_id);
    }
    for (name, conn_id, error) in out.close_children {
        if let Some((conn, _)) = children.remove(&(name.clone(), conn_id)) {
            let code = match error.code {
                ErrorCode::Replaced => close_code::REPLACED,
                ErrorCode::UnknownChild => close_code::UNKNOWN_CHILD,
                _ => close_code::PROTOCOL,
            };
            // Let queued messages (a goodbye) go out first; QUIC close is immediate.
            let reason = error.reason.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                conn.close(VarInt::from_u32(code), reason.as_bytes());
            });
        }
        core.child_gone(now, &name, conn_id);
    }
    if deliver_upstream(upstream, out.to_parent, out.close_upstream, retry_after) {
        core.upstream_gone();
    }
}

async fn accept_loop(listener: Endpoint, joining: Option<Arc<Joining>>, tx: mpsc::Sender<Input>) {
    let mut conns = JoinSet::new();
    let mut next_id = 0u64;
    while let Some(incoming) = listener.accept().await {
        next_id += 1;
        let conn_id = next_id;
        let tx = tx.clone();
        let joining = joining.clone();
        conns.spawn(serve_connection(incoming, conn_id, joining, tx).in_current_span());
        // Reap finished connection tasks so the set does not grow without bound.
        while conns.try_join_next().is_some() {}
    }
    conns.shutdown().await;
}

/// One incoming connection: a join exchange when it has no client certificate, else a
/// child's session, in a span naming the child.
async fn serve_connection(
    incoming: quinn::Incoming,
    conn_id: u64,
    joining: Option<Arc<Joining>>,
    tx: mpsc::Sender<Input>,
) {
    let conn = match incoming.await {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(error = %e, "handshake failed (a certificate refused?)");
            return;
        }
    };
    // No client certificate: only a relay admitting joins lets that through TLS,
    // and such a connection may do one join exchange and nothing else.
    let Some(chain) = peer_chain(&conn) else {
        if joining.is_some() {
            serve_join(conn, &tx).await;
        } else {
            conn.close(
                VarInt::from_u32(close_code::UNKNOWN_CHILD),
                b"a client certificate is required",
            );
        }
        return;
    };
    if !join::chain_allowed(&chain, joining.as_deref()) {
        conn.close(
            VarInt::from_u32(close_code::UNKNOWN_CHILD),
            b"the certificate was issued by an intermediate that is not this relay's join CA",
        );
        return;
    }
    let name = match peer_node_name(&conn) {
        Ok(n) => n,
        Err(e) => {
            conn.close(
                VarInt::from_u32(close_code::UNKNOWN_CHILD),
                e.to_string().as_bytes(),
            );
            return;
        }
    };
    let span = tracing::info_span!("child", peer = %name, conn = conn_id);
    async move {
        let (sender, receiver) =
            transport::split::<ParentToChild, ChildToParent>(conn.clone(), DEFAULT_MAX_FRAME);
        if tx
            .send(Input::ChildUp {
                name: name.clone(),
                conn_id,
                conn,
                sender,
            })
            .await
            .is_err()
        {
            return;
        }
        let why = pump_child(receiver, &name, conn_id, &tx).await;
        let _ = tx.send(Input::ChildDown { name, conn_id, why }).await;
    }
    .instrument(span)
    .await;
}

/// One join exchange on a connection without a client certificate.
async fn serve_join(conn: Connection, tx: &mpsc::Sender<Input>) {
    let Some(request) = join::read_request(&conn).await else {
        return;
    };
    let (reply_tx, reply_rx) = oneshot::channel();
    let input = Input::Join {
        request,
        reply: reply_tx,
    };
    if tx.send(input).await.is_err() {
        return;
    }
    if let Ok(reply) = reply_rx.await {
        join::send_reply(conn, &reply).await;
    }
}

async fn pump_child(
    mut receiver: Receiver<ChildToParent>,
    name: &str,
    conn_id: u64,
    tx: &mpsc::Sender<Input>,
) -> String {
    loop {
        match receiver.recv().await {
            Ok(msg) => {
                let input = Input::ChildMsg {
                    name: name.to_owned(),
                    conn_id,
                    msg,
                };
                if tx.send(input).await.is_err() {
                    return "node stopping".into();
                }
            }
            Err(e) => return e.to_string(),
        }
    }
}
