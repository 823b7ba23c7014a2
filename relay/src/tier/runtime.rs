//! A relay node: its [`NodeCore`] and its children's connections, driven by the node
//! layer's [`Driver`] (which owns the clock, the store, the inputs and the parent
//! connection). The accept loop, with one task per child connection, is in
//! `accept.rs`. Every task is owned by the driver and ends with the node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use quinn::VarInt;
use strata_node::clock::Clock;
use strata_node::dial::{Connector, ParentAddress};
use strata_node::driver::{self, Driver, Node, ParentAddr, ParentConn, ToParent};
use strata_node::link::Link;
use strata_node::store::{ReplicaEvent, Store, StoreError};
use strata_node::transport::{self, QuicListener, Sender, close_code};
use strata_node::tunnel::{self, TunnelSlots};
use strata_protocol::sync::SessionConfig;
use strata_protocol::time::Instant;
use strata_protocol::wire::{ErrorCode, JoinReply, LinkPath, ParentToChild};
use tokio::sync::watch;
use tracing::Instrument;

mod admit;

use super::accept::{accept_loop, tcp_accept_loop};
pub use super::client::NodeClient;
use super::core::{BootOptions, NodeCore, Outgoing};
pub use super::input::{LinkStats, Query, RelayInput};
use crate::join::{Admissions, Joining};

/// What a node needs to run.
#[allow(missing_docs)] // name, store, sessions and clock are what they say
pub struct NodeOptions {
    pub name: String,
    /// Labels clusters below inherit.
    pub labels: strata_protocol::model::Labels,
    /// Children allowed to connect.
    pub children: Vec<String>,
    /// The parent's name and address (`None` at the root).
    pub parent: Option<(String, ParentAddress)>,
    pub store: Arc<dyn Store>,
    /// Where children connect over QUIC, if this node has any.
    pub listener: Option<QuicListener>,
    /// Where children connect with TLS over TCP, if anywhere.
    pub tcp_listener: Option<strata_node::tcp::Listener>,
    /// How the parent is reached (a QUIC endpoint converts into a QUIC-only one).
    pub connector: Option<Connector>,
    pub sessions: SessionConfig,
    /// How often summaries go upward.
    pub summary_interval: Duration,
    pub clock: Clock,
    /// This run's id (new at every start).
    pub run: u64,
    /// Admitting agents that join with a token, if this node does (its listener must
    /// then accept connections without a client certificate).
    pub joining: Option<Arc<Joining>>,
    /// Debug tunnels open at once on each link to a child, at most.
    pub tunnels_per_link: usize,
    /// This process's replica id when it is one replica of a replicated relay tier
    /// (given the store's node id, so that `replica: auto` is stable per store).
    pub replica: Option<crate::config::Replica>,
    /// Signing children's certificate renewals, if this node does.
    pub signer: Option<crate::renew::Signer>,
    /// How long at most new children wait to be admitted after a start or a reconnect
    /// to the parent, while this node catches up with it (see
    /// [`CoreSetup::admission_hold`](super::core::CoreSetup::admission_hold)).
    pub admission_hold: Duration,
    /// How many children connect and set up at once (the rest are told when to come
    /// back): see [`crate::tier::core::AdmissionConfig`] and `accept.rs`.
    pub admission: Admission,
    /// At the root: how long a finished move's old clusters drain before they are
    /// dropped ([`NodeCore::set_drain`](super::core::NodeCore::set_drain)); zero: at once.
    pub drain: Duration,
}

pub use crate::limits::{Admission, DEFAULT_HANDSHAKE_QUEUE, DEFAULT_HANDSHAKES};

impl std::fmt::Debug for NodeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeOptions")
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

/// A running node.
#[derive(Debug)]
pub struct NodeHandle {
    inner: driver::NodeHandle<RelayInput>,
    head: watch::Receiver<u64>,
}

impl NodeHandle {
    /// Runs `f` on the core's state inside the core task and returns its result.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut NodeCore) -> T + Send + 'static,
    ) -> Option<T> {
        self.client().query(f).await
    }

    /// A cloneable client of this node.
    pub fn client(&self) -> NodeClient {
        NodeClient::new(self.inner.inputs(), self.head.clone())
    }

    /// Stops the node: children and parent are told, tasks end, the store is flushed.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        self.inner.shutdown().await;
        Ok(())
    }

    /// Waits until the node stops by itself.
    pub async fn wait(&mut self) -> Result<(), NodeError> {
        self.inner.wait().await;
        Ok(())
    }
}

/// Starts a node from its store and returns its handle.
pub fn start(parts: NodeOptions) -> Result<NodeHandle, NodeError> {
    let stored = parts.store.load()?;
    let now = parts.clock.now();
    let root = parts.parent.is_none();
    let admissions = parts.joining.clone().map(|j| {
        Admissions::new(
            j,
            parts.parent.as_ref().map(|(n, _)| n.clone()),
            parts.store.clone(),
            stored.joined.clone(),
        )
    });
    let replica = parts.replica.as_ref().map(|r| r.id(stored.node_id));
    let mut core = NodeCore::restore(
        now,
        stored,
        BootOptions {
            name: parts.name.clone(),
            labels: parts.labels.clone(),
            children: parts.children.clone(),
            sessions: parts.sessions.clone(),
            has_parent: !root,
            replica,
            run: parts.run,
            summary_interval: parts.summary_interval,
            wall_origin: parts.clock.wall_origin(),
            watch_history: crate::tier::core::WATCH_HISTORY,
            standby: root && !parts.store.writes_log(),
            admission_hold: parts.admission_hold,
        },
    );
    core.set_admission(crate::tier::core::AdmissionConfig {
        setups: parts.admission.setups,
    });
    core.set_drain(parts.drain);
    let gate = Arc::new(super::accept::HandshakeGate::new(
        parts.admission.handshakes,
        parts.admission.queue,
    ));
    let span = tracing::info_span!("node", node = %parts.name);
    let (head_tx, head) = watch::channel(core.log().head().0);
    let (parent_links, parent_links_rx) = watch::channel(None);
    let own = Arc::new(crate::join::own_intermediates(
        parts.joining.as_deref(),
        parts.signer.as_ref(),
    ));
    let relay = Relay {
        core,
        children: BTreeMap::new(),
        held: BTreeMap::new(),
        admissions,
        listener: parts.listener.clone(),
        tcp_tls: parts.tcp_listener.as_ref().map(|l| l.tls()),
        admits_joins: parts.joining.is_some(),
        signer: parts.signer,
        head: head_tx,
        tunnel_slots: TunnelSlots::new(parts.tunnels_per_link),
        gate: gate.clone(),
        parent_links,
    };
    let parent = match (parts.connector, parts.parent) {
        (Some(connector), Some((name, addr))) => Some(ParentAddr {
            name,
            addr,
            connector,
            jitter_seed: parts.run,
        }),
        _ => None,
    };
    let (listener, tcp_listener, joining) = (parts.listener, parts.tcp_listener, parts.joining);
    let inner = Driver::start(
        relay,
        parts.clock,
        parts.store,
        parent,
        4096,
        span,
        |tasks, inputs| {
            let ids = Arc::new(std::sync::atomic::AtomicU64::new(0));
            if let Some(listener) = tcp_listener {
                let (joining, inputs, ids) = (joining.clone(), inputs.clone(), ids.clone());
                let (gate, own) = (gate.clone(), own.clone());
                tasks.spawn(
                    tcp_accept_loop(listener, joining, own, inputs, ids, gate).in_current_span(),
                );
            }
            if let Some(listener) = listener {
                let inputs = inputs.clone();
                tasks.spawn(
                    accept_loop(listener, joining, own, inputs, ids, gate).in_current_span(),
                );
            }
            if !root {
                // Tunnels and volume streams the parent opens go one tier down, or a
                // copy runs here (see `super::tunnel`, `super::volume`).
                tasks.spawn(
                    tunnel::serve_from_parent(parent_links_rx, move |open, stream| {
                        super::volume::from_parent(inputs.clone(), open, stream)
                    })
                    .in_current_span(),
                );
            } else {
                // Placements' volume moves (see `super::volume::run_moves`).
                tasks.spawn(super::volume::run_moves(inputs.clone()).in_current_span());
                // ReadWriteMany replicas' syncs (see `super::volume_replicas`).
                tasks.spawn(super::volume_replicas::run_replicas(inputs.clone()).in_current_span());
            }
        },
    );
    Ok(NodeHandle { inner, head })
}

pub use crate::limits::DEFAULT_ADMISSION_HOLD;

/// How long a node shutting down asks its children to wait before reconnecting: a
/// restart usually takes about this long, and reconnecting sooner only meets a closed
/// port.
const RESTART_HINT_MS: u64 = 1000;

type Children = BTreeMap<(String, u64), (Link, Sender<ParentToChild>)>;

/// A relay as the driver sees it: the core, and the children's connections.
struct Relay {
    core: NodeCore,
    children: Children,
    /// Connections waiting while this node catches up with its parent, by id.
    held: BTreeMap<u64, admit::HeldChild>,
    admissions: Option<Admissions>,
    listener: Option<QuicListener>,
    /// The TLS/TCP listener's configuration, replaced when this node's certificate is
    /// renewed.
    tcp_tls: Option<strata_node::tcp::ServerTls>,
    /// Whether the listener lets clients without a certificate in (to join).
    admits_joins: bool,
    /// Signing children's certificate renewals, if this node does.
    signer: Option<crate::renew::Signer>,
    /// The log's head after each commit, for the Kubernetes API's watches.
    head: watch::Sender<u64>,
    /// Debug tunnels open per child link, under the configured cap.
    tunnel_slots: TunnelSlots,
    /// The current link to the parent, for the task serving the tunnels it opens.
    parent_links: watch::Sender<Option<Link>>,
    /// The handshake admission the accept loops share (its refusals are counted).
    gate: Arc<super::accept::HandshakeGate>,
}

impl Node for Relay {
    type Input = RelayInput;

    fn poll_timeout(&self) -> Option<Instant> {
        let core = self.core.poll_timeout();
        if self.held.is_empty() {
            return core;
        }
        // Held connections are admitted at the hold's end, or at once once it is lifted.
        let release = self.core.admission_hold_set().unwrap_or(Instant::ZERO);
        Some(core.map_or(release, |t| t.min(release)))
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
    }

    fn handle_input(&mut self, now: Instant, input: RelayInput, parent: &ParentConn) {
        match input {
            RelayInput::ChildUp {
                name,
                conn_id,
                conn,
                sender,
            } => self.child_up_or_hold(now, name, conn_id, conn, sender),
            RelayInput::ChildMsg { conn_id, msg, .. } if self.held.contains_key(&conn_id) => {
                self.held_message(conn_id, msg);
            }
            RelayInput::ChildMsg { name, conn_id, msg } => {
                self.child_message(now, name, conn_id, msg)
            }
            RelayInput::ChildDown { name, conn_id, why } => {
                let core = &mut self.core;
                if self.held.remove(&conn_id).is_some() {
                    tracing::info!(child = %name, %why, "a held child disconnected");
                    return;
                }
                if self.children.remove(&(name.clone(), conn_id)).is_some() {
                    tracing::info!(child = %name, %why, "child disconnected");
                }
                core.child_gone(now, &name, conn_id);
            }
            RelayInput::Query(q) => q(&mut self.core),
            RelayInput::Join { request, reply } => {
                let core = &mut self.core;
                let answer = match &mut self.admissions {
                    Some(a) => {
                        let wall = i64::try_from(core.wall(now).0 / 1000).unwrap_or(i64::MAX);
                        a.admit(core, &request, wall)
                    }
                    None => JoinReply::Refused {
                        relay: core.name().to_owned(),
                        reason: "this relay admits no agents by token".into(),
                    },
                };
                let _ = reply.send(answer);
            }
            RelayInput::LinkStats(reply) => {
                let _ = reply.send(link_stats(&self.children, parent));
            }
            RelayInput::TunnelRoute { cluster, reply } => {
                let route = super::tunnel::route(
                    &self.core,
                    &self.children,
                    &mut self.tunnel_slots,
                    &cluster,
                );
                let _ = reply.send(route);
            }
            RelayInput::Replica(ReplicaEvent::Records { records, full }) => {
                self.core.take_replicated(records, full);
            }
            RelayInput::Replica(ReplicaEvent::Promoted(writer)) => {
                self.core.promote();
                // The store fences the log's writes from the next commit on.
                writer.store(true, std::sync::atomic::Ordering::SeqCst);
                tracing::info!("this root replica writes now");
            }
        }
    }

    fn identity_renewed(&mut self, identity: &strata_node::tls::Identity) {
        let server = if self.admits_joins {
            strata_node::tls::server_config_admitting_joins(identity)
        } else {
            strata_node::tls::server_config(identity)
        };
        let server = match server {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot serve children with the renewed certificate");
                return;
            }
        };
        if let Some(listener) = &self.listener {
            match strata_node::transport::server_configs(server.clone(), [0; 32]) {
                Ok((_, config)) => listener.set_server_config(config),
                Err(e) => {
                    tracing::error!(error = %e, "cannot serve QUIC with the renewed certificate")
                }
            }
        }
        if let Some(slot) = &self.tcp_tls {
            *slot.write().unwrap_or_else(|p| p.into_inner()) = server;
        }
        tracing::info!(
            "children are served with the renewed certificate from their next handshake"
        );
    }

    fn parent_link(&mut self, link: &Link) {
        self.parent_links.send_replace(Some(link.clone()));
    }

    fn parent_connected(&mut self, now: Instant, via: LinkPath) {
        self.core.parent_connected(now, via);
    }

    fn parent_message(&mut self, now: Instant, msg: ParentToChild) {
        self.core.parent_message(now, msg);
    }

    fn parent_gone(&mut self) {
        self.core.parent_gone();
    }

    fn process(&mut self, now: Instant) -> strata_node::store::Batch {
        self.release_held(now);
        let remembered = self
            .listener
            .as_ref()
            .map_or(0, QuicListener::started_at_remembered_mtu);
        self.core
            .note_listener(self.gate.refused_total(), remembered);
        self.core.process(now)
    }

    fn transmit(&mut self, now: Instant) -> ToParent {
        // The batch `process` returned is committed by now: watches may read it.
        let head = self.core.log().head().0;
        self.head
            .send_if_modified(|h| std::mem::replace(h, head) != head);
        let out = self.core.transmit(now);
        self.dispatch(now, out)
    }

    /// Tells the children when to come back, gives the goodbyes a moment to leave,
    /// then closes every connection.
    async fn shutdown(&mut self) {
        // Spread over the set-ups they will need when this node is back, so that its
        // own children do not knock it over: the more children, the longer the spread.
        let spread = self.core.reconnect_spread(self.children.len());
        for ((_, sender), extra) in self.children.values().zip(spread) {
            let wait = Duration::from_millis(RESTART_HINT_MS) + extra;
            let _ = sender.send(ParentToChild::Goodbye {
                code: ErrorCode::ShuttingDown,
                reason: "node shutting down".into(),
                retry_after_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
            });
        }
        if !self.children.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for (conn, _) in std::mem::take(&mut self.children).into_values() {
            conn.close(close_code::SHUTDOWN, b"node shutting down");
        }
        for held in std::mem::take(&mut self.held).into_values() {
            held.conn.close(close_code::SHUTDOWN, b"node shutting down");
        }
        if let Some(l) = &self.listener {
            l.endpoint().close(
                VarInt::from_u32(close_code::SHUTDOWN),
                b"node shutting down",
            );
        }
    }
}

impl Relay {
    /// Sends the children their messages and closes the connections the core gave up
    /// on; returns what is for the parent.
    fn dispatch(&mut self, now: Instant, out: Outgoing) -> ToParent {
        let mut too_slow = Vec::new();
        for (name, conn_id, msg) in out.to_children {
            if let Some((_, sender)) = self.children.get(&(name.clone(), conn_id))
                && sender.send(msg).is_err()
            {
                too_slow.push((name, conn_id));
            }
        }
        for (name, conn_id) in too_slow {
            if let Some((conn, _)) = self.children.remove(&(name.clone(), conn_id)) {
                tracing::warn!(child = %name, "closing a child that does not keep up");
                conn.close(close_code::TOO_SLOW, b"queue full");
            }
            self.core.child_gone(now, &name, conn_id);
        }
        for (name, conn_id, error) in out.close_children {
            if let Some((conn, _)) = self.children.remove(&(name.clone(), conn_id)) {
                let code = match error.code {
                    ErrorCode::Replaced => close_code::REPLACED,
                    ErrorCode::UnknownChild => close_code::UNKNOWN_CHILD,
                    ErrorCode::Revoked => close_code::REVOKED,
                    _ => close_code::PROTOCOL,
                };
                // Let queued messages (a goodbye) go out first; QUIC close is immediate.
                let reason = error.reason.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    conn.close(code, reason.as_bytes());
                });
            }
            self.core.child_gone(now, &name, conn_id);
        }
        ToParent {
            messages: out.to_parent,
            close: out.close_parent,
        }
    }
}

fn link_stats(children: &Children, parent: &ParentConn) -> LinkStats {
    let wire: Vec<_> = children.values().map(|(conn, _)| conn.wire()).collect();
    LinkStats {
        child_transports: children
            .iter()
            .map(|((name, _), (conn, _))| (name.clone(), conn.kind()))
            .collect(),
        parent_transport: parent.connection().map(Link::kind),
        children: children
            .keys()
            .zip(&wire)
            .map(|((name, _), w)| (name.clone(), w.bytes.0, w.bytes.1))
            .collect(),
        parent: parent.connection().map(|c| c.wire().bytes),
        child_datagrams: wire
            .iter()
            .fold((0, 0), |(s, r), w| (s + w.datagrams.0, r + w.datagrams.1)),
        streams: children
            .iter()
            .map(|((name, _), (_, sender))| (name.as_str(), sender.bytes()))
            .chain(parent.sender().map(|s| ("parent", s.bytes())))
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
    }
}
