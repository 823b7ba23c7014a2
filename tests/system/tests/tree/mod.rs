//! A tree of relay cores ([`NodeCore`]) and agent cores ([`AgentCore`]) wired together
//! in virtual time, without sockets: the shape of quinn-proto's test `Pair`.
//!
//! The [`Tree`] holds the clock and every link. A message crosses a link as a frame of
//! the real codec and arrives after the link's latency, on the connection it was sent
//! on (a message for a connection that has since gone is dropped). Each node is driven
//! as the node layer's driver drives it: inputs, `process`, the batch committed to its
//! [`MemStore`], and only then `transmit`; a commit that fails (a full disk) is retried
//! after the driver's `COMMIT_RETRY`, and the node does nothing else meanwhile. Every
//! node works inside a tracing span naming it, with the virtual time
//! (`RUST_LOG=info cargo test ... -- --nocapture` shows them).
//!
//! [`Tree::step`] does what is due now and says whether anything is still going on,
//! [`Tree::drive`] runs until nothing is in flight, [`Tree::drive_bounded`] fails naming
//! what kept going, and [`Tree::advance`] lets virtual time pass, firing timers
//! (heartbeats, summaries, reconnections, commit retries) as they come due. A test
//! cuts and restores links, crashes nodes and restarts them from their store, and
//! fills their disk.
//!
//! # Layout
//! * this file: the tree, its links (connect, cut, restore) and its nodes (crash,
//!   restart, a full disk, what a test reads);
//! * `drive.rs`: time: steps, deliveries, timers, and each node's turn;
//! * `node.rs`: one node: its declaration, its core, its link, how it boots from its
//!   store;
//! * `builder.rs`: [`TreeBuilder`] and `labels!`.

#![allow(dead_code, unreachable_pub, missing_docs)]
#![allow(clippy::unwrap_used)]

mod builder;
mod drive;
mod node;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub(crate) use builder::labels;
pub use builder::{TreeBuilder, label_text};
use drive::InFlight;
use node::{Core, Link, Node, boot};
use strata_agent::core::AgentCore;
use strata_node::store::{Batch, MemStore};
use strata_protocol::model::{ObjectKey, Position, Revision, Space};
use strata_protocol::time::Instant;
use strata_relay::tier::core::NodeCore;

/// The one-way latency of a link unless the builder says otherwise.
pub const LATENCY: Duration = Duration::from_millis(5);
/// How long a child waits before connecting again after its link went down (the
/// runtime's reconnect loop backs off with jitter; a fixed wait keeps runs exact).
pub const RECONNECT: Duration = Duration::from_millis(300);

/// The tree in virtual time.
pub struct Tree {
    now: Instant,
    nodes: BTreeMap<String, Node>,
    /// Declaration order: the root first, parents before children.
    order: Vec<String>,
    in_flight: Vec<InFlight>,
    next_seq: u64,
    next_conn: u64,
    /// Nodes that had input since they last processed.
    dirty: BTreeSet<String>,
    /// What each node and link did since the last drive began, to name a livelock.
    activity: BTreeMap<String, u64>,
}

/// A tracing span naming a node, with the virtual time: everything the node does happens
/// inside it.
fn span(now: Instant, name: &str) -> tracing::Span {
    let ms = now.since_origin().as_millis();
    tracing::info_span!("node", node = %name, ms)
}

/// Logs to the test's output when `RUST_LOG` asks for it; the spans carry the virtual
/// time, so the wall clock's is left out.
fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .without_time()
        .with_test_writer()
        .try_init();
}

impl Tree {
    pub fn builder() -> TreeBuilder {
        TreeBuilder::default()
    }

    fn empty(now: Instant) -> Tree {
        Tree {
            now,
            nodes: BTreeMap::new(),
            order: Vec::new(),
            in_flight: Vec::new(),
            next_seq: 0,
            next_conn: 1,
            dirty: BTreeSet::new(),
            activity: BTreeMap::new(),
        }
    }

    /// A node just booted: its first turn reports its cluster or welcomes nobody.
    fn insert(&mut self, node: Node) {
        let name = node.spec.name.clone();
        self.order.push(name.clone());
        self.dirty.insert(name.clone());
        self.nodes.insert(name, node);
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    fn node(&self, name: &str) -> &Node {
        self.nodes
            .get(name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes
            .get_mut(name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    fn link_mut(&mut self, child: &str) -> &mut Link {
        self.node_mut(child)
            .link
            .as_mut()
            .unwrap_or_else(|| panic!("{child} is the root: it has no link"))
    }

    fn parent_of(&self, child: &str) -> String {
        let parent = self.node(child).spec.parent.clone();
        parent.unwrap_or_else(|| panic!("{child} is the root: it has no parent"))
    }

    /// The core of `name`'s parent, which is a relay.
    fn parent_core(&mut self, child: &str) -> Option<&mut NodeCore> {
        let parent = self.parent_of(child);
        match &mut self.node_mut(&parent).core {
            Some(Core::Relay(p)) => Some(p),
            Some(Core::Agent(_)) => unreachable!("only relays have children"),
            None => None,
        }
    }

    // ---- links -------------------------------------------------------------------

    /// `child` connects to its parent: both ends see the connection at once. A link
    /// that is cut, or whose parent is down, is tried again after [`RECONNECT`]; a
    /// parent that refuses the child closes it, and it tries again likewise.
    pub fn connect(&mut self, child: &str) {
        let now = self.now;
        let parent = self.parent_of(child);
        let link = self.link_mut(child);
        link.reconnect_at = None;
        // A crashed child connects when it restarts.
        if link.conn.is_some() || link.cut || self.node(child).core.is_none() {
            return;
        }
        let conn = self.next_conn;
        let accepted = {
            let _span = span(now, &parent).entered();
            self.parent_core(child)
                .map(|p| p.child_connected(now, child, conn))
        };
        match accepted {
            Some(Ok(())) => {}
            refused => {
                if let Some(Err(e)) = refused {
                    tracing::warn!(%child, reason = %e.reason, "refused");
                }
                self.link_mut(child).reconnect_at = Some(now + RECONNECT);
                return;
            }
        }
        self.next_conn += 1;
        self.link_mut(child).conn = Some(conn);
        if let Some(core) = &mut self.node_mut(child).core {
            let _span = span(now, child).entered();
            core.parent_connected(now);
        }
        self.dirty.insert(child.to_owned());
        self.dirty.insert(parent);
    }

    /// Connects every link, parents first, letting each settle before the next.
    pub fn connect_all(&mut self) {
        let children: Vec<String> = self.order[1..].to_vec();
        for c in &children {
            self.connect(c);
            self.drive();
        }
    }

    /// Connects these links in this order, letting each settle before the next.
    pub fn connect_in(&mut self, order: &[&str]) {
        for c in order {
            self.connect(c);
            self.drive();
        }
    }

    /// Cuts `child`'s link: both ends see it go, and it stays down until restored.
    pub fn cut(&mut self, child: &str) {
        self.link_mut(child).cut = true;
        self.disconnect(child, None);
    }

    /// Restores a cut link: the child connects again at once.
    pub fn restore(&mut self, child: &str) {
        self.link_mut(child).cut = false;
        self.connect(child);
    }

    /// Whether `child`'s link is up.
    pub fn connected(&self, child: &str) -> bool {
        let link = self.node(child).link.as_ref();
        link.is_some_and(|l| l.conn.is_some())
    }

    /// Changes the one-way latency of `child`'s link.
    pub fn set_latency(&mut self, child: &str, latency: Duration) {
        self.link_mut(child).latency = latency;
    }

    /// Frame bytes `child`'s parent sent it, over every connection so far.
    pub fn bytes_down(&self, child: &str) -> u64 {
        self.node(child).link.as_ref().map_or(0, |l| l.bytes_down)
    }

    /// Frame bytes `child` sent its parent, over every connection so far.
    pub fn bytes_up(&self, child: &str) -> u64 {
        self.node(child).link.as_ref().map_or(0, |l| l.bytes_up)
    }

    /// The connection of `child`'s link goes: both ends see it (those that run), what
    /// is in flight on it is lost, and the child connects again after `wait` (or
    /// [`RECONNECT`]) unless the link is cut.
    fn disconnect(&mut self, child: &str, wait: Option<Duration>) {
        let now = self.now;
        let parent = self.parent_of(child);
        let link = self.link_mut(child);
        let Some(conn) = link.conn.take() else {
            return;
        };
        if !link.cut {
            link.reconnect_at = Some(now + wait.unwrap_or(RECONNECT));
        }
        self.in_flight
            .retain(|m| !(m.child == child && m.conn == conn));
        if let Some(core) = &mut self.node_mut(child).core {
            let _span = span(now, child).entered();
            core.parent_gone();
        }
        if let Some(p) = self.parent_core(child) {
            let _span = span(now, &parent).entered();
            p.child_gone(now, child, conn);
        }
        self.dirty.insert(child.to_owned());
        self.dirty.insert(parent);
    }

    // ---- nodes -------------------------------------------------------------------

    /// `name`'s process dies (kill -9): its connections go (the peers see them close),
    /// and what it had not committed is lost with its memory. Its store stays.
    pub fn crash(&mut self, name: &str) {
        let _span = span(self.now, name).entered();
        tracing::info!("crashed");
        let node = self.node(name);
        let mut links = node.spec.children.clone();
        if node.link.is_some() {
            links.push(name.to_owned());
        }
        for child in &links {
            self.disconnect(child, None);
        }
        let node = self.node_mut(name);
        node.core = None;
        node.unsaved = Batch::default();
        node.retry_commit_at = None;
        if let Some(link) = &mut node.link {
            link.reconnect_at = None;
        }
        self.dirty.remove(name);
    }

    /// Starts a crashed node again from its store, as its runtime would (a new run);
    /// it connects to its parent at once.
    pub fn restart(&mut self, name: &str) {
        let now = self.now;
        let node = self.node_mut(name);
        assert!(node.core.is_none(), "{name} is running");
        node.runs += 1;
        node.core = Some(boot(now, &node.spec, &node.store, node.runs));
        if node.link.is_some() {
            self.connect(name);
        }
        self.dirty.insert(name.to_owned());
    }

    /// A crashed `name`'s disk is replaced by an empty one (its node id changes with
    /// it, as a new store's would): it restarts knowing nothing.
    pub fn lose_disk(&mut self, name: &str) {
        let node = self.node_mut(name);
        assert!(node.core.is_none(), "{name} is running");
        node.store = MemStore::new(node.spec.id ^ 0x5EED_0000_0000_0000 ^ node.runs);
    }

    /// Whether `name` runs.
    pub fn is_up(&self, name: &str) -> bool {
        self.node(name).core.is_some()
    }

    /// Makes `name`'s disk refuse every write (or take them again).
    pub fn disk_full(&mut self, name: &str, full: bool) {
        self.node(name).store.set_full(full);
        self.dirty.insert(name.to_owned());
    }

    /// What `name` has made durable.
    pub fn store(&self, name: &str) -> &MemStore {
        &self.node(name).store
    }

    pub fn relay(&self, name: &str) -> &NodeCore {
        match &self.node(name).core {
            Some(Core::Relay(c)) => c,
            Some(Core::Agent(_)) => panic!("{name} is an agent"),
            None => panic!("{name} is down"),
        }
    }

    /// The relay's core, to give it input (its next turn processes it).
    pub fn relay_mut(&mut self, name: &str) -> &mut NodeCore {
        self.dirty.insert(name.to_owned());
        match &mut self.node_mut(name).core {
            Some(Core::Relay(c)) => c,
            Some(Core::Agent(_)) => panic!("{name} is an agent"),
            None => panic!("{name} is down"),
        }
    }

    pub fn agent(&self, name: &str) -> &AgentCore {
        match &self.node(name).core {
            Some(Core::Agent(c)) => c,
            Some(Core::Relay(_)) => panic!("{name} is a relay"),
            None => panic!("{name} is down"),
        }
    }

    /// The objects an agent holds, and their revisions.
    pub fn held(&self, agent: &str) -> BTreeMap<ObjectKey, Revision> {
        self.agent(agent)
            .log()
            .live()
            .map(|o| (o.key().clone(), o.revision))
            .collect()
    }

    /// Applies manifests (YAML) at the root, in the default space; returns the revision.
    pub fn apply(&mut self, yaml: &str) -> Position {
        self.apply_in(&Space::default_space(), yaml)
    }

    /// Applies manifests (YAML) at the root, in `space`; returns the revision.
    pub fn apply_in(&mut self, space: &Space, yaml: &str) -> Position {
        let manifests =
            strata_node::objects::parse_manifests(yaml, space).expect("the manifests parse");
        let root = self.order[0].clone();
        let _span = span(self.now, &root).entered();
        let applied = self.relay_mut(&root).apply_manifests(&manifests).unwrap();
        applied.revision.expect("the manifests changed something")
    }
}
