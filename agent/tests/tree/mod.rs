//! A tree of relay cores ([`NodeCore`]) and agent cores ([`AgentCore`]) wired together
//! in virtual time, without sockets: the shape of quinn-proto's test `Pair`. Messages
//! cross each link through the real codec after a fixed latency; [`Tree::step`] says
//! whether anything is still going on, [`Tree::drive`] runs to idle (bounded, so a
//! livelock fails the test naming it), and each node works inside a tracing span naming
//! it. Links can be cut and restored, and a node's disk can refuse writes.

#![allow(dead_code, unreachable_pub, missing_docs)]
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use strata_agent::core::{AgentCore, AgentSetup};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_node::store::{Batch, MemStore, Store};
use strata_protocol::codec;
use strata_protocol::model::{Cluster, Labels, LogId, ObjectKey, Revision};
use strata_protocol::sync::{LinkConfig, ObjectLog, ParentLink, SessionConfig};
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{ChildToParent, ParentToChild, Role};
use strata_relay::node::core::{CoreSetup, NodeCore, new_log};
use strata_relay::node::reports::SubtreeReports;

/// How long a message takes on any link.
pub const LATENCY: Duration = Duration::from_millis(5);
/// How long a child waits before connecting again after its link closed.
const RECONNECT: Duration = Duration::from_millis(300);
const MAX_FRAME: usize = 16 << 20;

/// Labels from `key: value` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

enum Core {
    Relay(Box<NodeCore>),
    Agent(Box<AgentCore>),
}

struct Node {
    parent: Option<String>,
    core: Core,
    store: MemStore,
    /// What the core produced and the store has not taken yet.
    unsaved: Batch,
    disk_full: bool,
    /// The connection id of the link to the parent while up.
    conn: Option<u64>,
    /// When to connect to the parent again.
    reconnect_at: Option<Instant>,
}

enum Payload {
    Down(ParentToChild),
    Up(ChildToParent),
}

struct InFlight {
    at: Instant,
    /// The child end of the link.
    child: String,
    conn: u64,
    payload: Vec<u8>,
    down: bool,
}

/// Builds a [`Tree`] as the scenario reads: the root, relays and agents, each with its
/// parent and labels. Links connect when [`Tree::connect`] says so (or all at once with
/// [`Tree::connect_all`]).
#[derive(Default)]
pub struct TreeBuilder {
    nodes: Vec<(String, Option<String>, Labels, bool)>,
}

impl TreeBuilder {
    pub fn root(mut self, name: &str, labels: Labels) -> Self {
        self.nodes.push((name.to_owned(), None, labels, false));
        self
    }

    pub fn relay(mut self, name: &str, parent: &str, labels: Labels) -> Self {
        self.nodes
            .push((name.to_owned(), Some(parent.to_owned()), labels, false));
        self
    }

    pub fn agent(mut self, name: &str, parent: &str, labels: Labels) -> Self {
        self.nodes
            .push((name.to_owned(), Some(parent.to_owned()), labels, true));
        self
    }

    pub fn build(self) -> Tree {
        let now = Instant::from_origin(Duration::ZERO);
        let mut nodes = BTreeMap::new();
        for (i, (name, parent, labels, agent)) in self.nodes.iter().enumerate() {
            let id = 1000 + i as u64;
            let children: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| n.1.as_deref() == Some(name.as_str()))
                .map(|n| n.0.clone())
                .collect();
            let link = |role| {
                let mut config = LinkConfig::new(name.clone(), role);
                config.run = id;
                ParentLink::new(now, config, Default::default(), None)
            };
            let core = if *agent {
                Core::Agent(Box::new(AgentCore::new(
                    now,
                    UnixMillis(0),
                    AgentSetup {
                        cluster: Cluster {
                            name: name.clone(),
                            labels: labels.clone(),
                            properties: Default::default(),
                            path: Vec::new(),
                        },
                        link: link(Role::Agent),
                        log: ObjectLog::new(LogId(id)),
                        upstream: Default::default(),
                        backend: Box::new(SimulatedCluster::new(SimulatedConfig {
                            ready_delay: Duration::from_millis(100),
                            fail_all: None,
                        })),
                        run: id,
                    },
                )))
            } else {
                Core::Relay(Box::new(NodeCore::new(
                    now,
                    CoreSetup {
                        name: name.clone(),
                        labels: labels.clone(),
                        children,
                        sessions: SessionConfig::default(),
                        log: new_log(id, parent.is_none()),
                        reports: SubtreeReports::new(),
                        acked: BTreeMap::new(),
                        child_runs: BTreeMap::new(),
                        upstream: parent.as_ref().map(|_| link(Role::Relay)),
                        upstream_state: Default::default(),
                        summary_interval: Duration::from_millis(50),
                        run: id,
                        wall_origin: UnixMillis(0),
                    },
                )))
            };
            nodes.insert(
                name.clone(),
                Node {
                    parent: parent.clone(),
                    core,
                    store: MemStore::new(id),
                    unsaved: Batch::default(),
                    disk_full: false,
                    conn: None,
                    reconnect_at: None,
                },
            );
        }
        Tree {
            now,
            nodes,
            in_flight: Vec::new(),
            cut: BTreeSet::new(),
            next_conn: 1,
            dirty: BTreeSet::new(),
        }
    }
}

/// The tree in virtual time.
pub struct Tree {
    now: Instant,
    nodes: BTreeMap<String, Node>,
    in_flight: Vec<InFlight>,
    /// Children whose link to their parent is cut.
    cut: BTreeSet<String>,
    next_conn: u64,
    /// Nodes that had input since they last processed.
    dirty: BTreeSet<String>,
}

impl Tree {
    pub fn builder() -> TreeBuilder {
        TreeBuilder::default()
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    /// Connects `child` to its parent (both ends see the connection at once).
    pub fn connect(&mut self, child: &str) {
        if self.cut.contains(child) {
            return;
        }
        let conn = self.next_conn;
        self.next_conn += 1;
        let now = self.now;
        let node = self.nodes.get_mut(child).unwrap();
        let parent = node.parent.clone().unwrap();
        node.conn = Some(conn);
        node.reconnect_at = None;
        match &mut node.core {
            Core::Relay(c) => c.upstream_connected(now),
            Core::Agent(c) => c.upstream_connected(now),
        }
        if let Core::Relay(p) = &mut self.nodes.get_mut(&parent).unwrap().core {
            p.child_connected(now, child, conn).unwrap();
        }
        self.dirty.insert(child.to_owned());
        self.dirty.insert(parent);
    }

    /// Connects every child, in the order given (children first, say).
    pub fn connect_all(&mut self, order: &[&str]) {
        for c in order {
            self.connect(c);
            self.drive();
        }
    }

    /// Cuts `child`'s link: both ends see it go; it stays down until restored.
    pub fn cut(&mut self, child: &str) {
        self.cut.insert(child.to_owned());
        self.disconnect(child);
    }

    /// Restores a cut link; the child reconnects.
    pub fn restore(&mut self, child: &str) {
        self.cut.remove(child);
        self.connect(child);
    }

    fn disconnect(&mut self, child: &str) {
        let node = self.nodes.get_mut(child).unwrap();
        let Some(conn) = node.conn.take() else {
            return;
        };
        node.reconnect_at = Some(self.now + RECONNECT);
        match &mut node.core {
            Core::Relay(c) => c.upstream_gone(),
            Core::Agent(c) => c.upstream_gone(),
        }
        let parent = node.parent.clone().unwrap();
        let now = self.now;
        if let Core::Relay(p) = &mut self.nodes.get_mut(&parent).unwrap().core {
            p.child_gone(now, child, conn);
        }
        self.in_flight.retain(|m| m.conn != conn);
        self.dirty.insert(child.to_owned());
        self.dirty.insert(parent);
    }

    /// Makes `node`'s disk refuse (or accept again) every write.
    pub fn disk_full(&mut self, node: &str, full: bool) {
        self.nodes.get_mut(node).unwrap().disk_full = full;
        self.dirty.insert(node.to_owned());
    }

    pub fn relay(&self, name: &str) -> &NodeCore {
        match &self.nodes[name].core {
            Core::Relay(c) => c,
            Core::Agent(_) => panic!("{name} is an agent"),
        }
    }

    pub fn relay_mut(&mut self, name: &str) -> &mut NodeCore {
        self.dirty.insert(name.to_owned());
        match &mut self.nodes.get_mut(name).unwrap().core {
            Core::Relay(c) => c,
            Core::Agent(_) => panic!("{name} is an agent"),
        }
    }

    /// The objects an agent holds and their revisions.
    pub fn held(&self, agent: &str) -> BTreeMap<ObjectKey, Revision> {
        match &self.nodes[agent].core {
            Core::Agent(c) => c
                .log()
                .live()
                .map(|o| (o.key().clone(), o.revision))
                .collect(),
            Core::Relay(_) => panic!("{agent} is a relay"),
        }
    }

    /// Applies manifests (YAML) at the root.
    pub fn apply(&mut self, root: &str, yaml: &str) {
        let manifests = strata_node::objects::parse_manifests(
            yaml,
            &strata_protocol::model::Space::default_space(),
        )
        .unwrap();
        self.relay_mut(root).apply_manifests(&manifests).unwrap();
    }

    /// Processes every node with input: commit, transmit, route. Returns whether
    /// anything was sent or delivered.
    pub fn step(&mut self) -> bool {
        let mut busy = false;
        // Deliver what has arrived.
        let now = self.now;
        let (due, later): (Vec<InFlight>, Vec<InFlight>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|m| m.at <= now);
        self.in_flight = later;
        for m in due {
            busy = true;
            let child = self.nodes.get(&m.child).unwrap();
            if child.conn != Some(m.conn) {
                continue;
            }
            if m.down {
                let (msg, _) = codec::decode::<ParentToChild>(&m.payload, MAX_FRAME)
                    .unwrap()
                    .unwrap();
                let node = self.nodes.get_mut(&m.child).unwrap();
                match &mut node.core {
                    Core::Relay(c) => c.upstream_message(now, msg),
                    Core::Agent(c) => c.upstream_message(now, msg),
                }
                self.dirty.insert(m.child.clone());
            } else {
                let (msg, _) = codec::decode::<ChildToParent>(&m.payload, MAX_FRAME)
                    .unwrap()
                    .unwrap();
                let parent = child.parent.clone().unwrap();
                if let Core::Relay(p) = &mut self.nodes.get_mut(&parent).unwrap().core {
                    p.child_message(now, &m.child, m.conn, msg);
                }
                self.dirty.insert(parent);
            }
        }
        // Reconnect links whose wait is over.
        let reconnect: Vec<String> = self
            .nodes
            .iter()
            .filter(|(n, node)| {
                node.reconnect_at.is_some_and(|t| t <= now) && !self.cut.contains(*n)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for n in reconnect {
            self.connect(&n);
            busy = true;
        }
        // Timers.
        let names: Vec<String> = self.nodes.keys().cloned().collect();
        for n in &names {
            let node = self.nodes.get_mut(n).unwrap();
            let due = match &mut node.core {
                Core::Relay(c) => c.poll_timeout().is_some_and(|t| t <= now),
                Core::Agent(c) => c.poll_timeout().is_some_and(|t| t <= now),
            };
            if due {
                match &mut node.core {
                    Core::Relay(c) => c.handle_timeout(now),
                    Core::Agent(c) => c.handle_timeout(now),
                }
                self.dirty.insert(n.clone());
            }
        }
        for n in std::mem::take(&mut self.dirty) {
            let span = tracing::info_span!("node", node = %n);
            let _entered = span.enter();
            busy |= self.process(&n);
        }
        busy
    }

    /// One node: process, commit (a full disk keeps everything unacknowledged), send.
    fn process(&mut self, name: &str) -> bool {
        let now = self.now;
        let node = self.nodes.get_mut(name).unwrap();
        let batch = match &mut node.core {
            Core::Relay(c) => c.process(now),
            Core::Agent(c) => c.process(now, UnixMillis(now.since_origin().as_millis() as u64)),
        };
        node.unsaved.merge(batch);
        if !node.unsaved.is_empty() {
            if node.disk_full {
                return false;
            }
            node.store.commit(&node.unsaved).unwrap();
            node.unsaved = Batch::default();
        }
        let mut sent = false;
        let (to_parent, to_children, close_children, close_up) = match &mut node.core {
            Core::Relay(c) => {
                let out = c.transmit(now);
                let close = out.close_upstream.is_some();
                (out.to_parent, out.to_children, out.close_children, close)
            }
            Core::Agent(c) => {
                let out = c.transmit(now);
                let close = out.close.is_some();
                (out.messages, Vec::new(), Vec::new(), close)
            }
        };
        if let Some(conn) = node.conn {
            for msg in to_parent {
                let mut buf = Vec::new();
                codec::encode(&msg, MAX_FRAME, &mut buf).unwrap();
                self.in_flight.push(InFlight {
                    at: now + LATENCY,
                    child: name.to_owned(),
                    conn,
                    payload: buf,
                    down: false,
                });
                sent = true;
            }
        }
        for (child, conn, msg) in to_children {
            let mut buf = Vec::new();
            codec::encode(&msg, MAX_FRAME, &mut buf).unwrap();
            self.in_flight.push(InFlight {
                at: now + LATENCY,
                child,
                conn,
                payload: buf,
                down: true,
            });
            sent = true;
        }
        for (child, conn, _) in close_children {
            if self.nodes[&child].conn == Some(conn) {
                self.disconnect(&child);
            }
        }
        if close_up {
            self.disconnect(name);
        }
        sent
    }

    /// Runs until nothing is going on at the current time and no message is in flight,
    /// advancing time to each next delivery; panics after `max` steps (a livelock).
    pub fn drive_bounded(&mut self, max: usize) {
        for _ in 0..max {
            if self.step() {
                continue;
            }
            match self.in_flight.iter().map(|m| m.at).min() {
                Some(at) => self.now = self.now.max(at),
                None => return,
            }
        }
        panic!("the tree did not settle within {max} steps (a livelock?)");
    }

    pub fn drive(&mut self) {
        self.drive_bounded(100_000);
    }

    /// Lets `d` of virtual time pass in steps of `tick`, firing timers and delivering.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        let tick = Duration::from_millis(10);
        while self.now < end {
            self.now = self.now + tick;
            self.drive();
        }
    }
}
