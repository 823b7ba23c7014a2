//! One node of the tree: what was declared of it ([`Spec`]), its core while it runs
//! ([`Core`], one face for both kinds), its store, and the link to its parent. A core
//! boots from whatever its store holds through the cores' own boot (`NodeCore::restore`,
//! `AgentCore::restore`), the one `relay/src/tier/runtime.rs` and `agent/src/runtime.rs`
//! use, so that a restart after a crash takes the same path as the first start (on an
//! empty store).

use std::time::Duration;

use strata_agent::core::{AgentBootOptions, AgentCore};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_node::store::{Batch, MemStore, Store};
use strata_protocol::model::{Cluster, Labels};
use strata_protocol::sync::SessionConfig;
use strata_protocol::time::{Instant, UnixMillis};
use strata_protocol::wire::{LinkPath, MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, ParentToChild};
use strata_relay::tier::core::{BootOptions, NodeCore, Outgoing};

/// How often relays send summaries upward (the runtime's default is a second; shorter
/// here so that a scenario settles in less virtual time).
const SUMMARY_INTERVAL: Duration = Duration::from_millis(50);
/// How long a simulated cluster's workloads take to become available.
const READY_DELAY: Duration = Duration::from_millis(100);

/// Whether a node is a relay (a [`NodeCore`]) or an agent (an [`AgentCore`] over a
/// simulated cluster).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Relay,
    Agent,
}

/// One node as declared: what survives a crash besides its store.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub kind: Kind,
    /// `None` at the root.
    pub parent: Option<String>,
    /// Its own labels (a relay's are inherited by every cluster below it).
    pub labels: Labels,
    /// Children allowed to connect (the topology's say).
    pub children: Vec<String>,
    /// An agent's cluster properties.
    pub properties: Labels,
    /// The store's node id, and the base of its run ids.
    pub id: u64,
    /// The root's history kept for watches (0 unless told: the tests of compaction
    /// see what children alone need).
    pub watch_history: u64,
}

/// A node of the tree.
pub struct Node {
    pub spec: Spec,
    /// `None` while crashed.
    pub core: Option<Core>,
    pub store: MemStore,
    /// What the core produced and the store has not taken yet.
    pub unsaved: Batch,
    /// When a failed commit is tried again; the node does nothing else meanwhile.
    pub retry_commit_at: Option<Instant>,
    /// Earlier runs (crashes survived).
    pub runs: u64,
    /// The link to the parent (none at the root).
    pub link: Option<Link>,
}

/// The link from a child to its parent, kept by the child's [`Node`].
#[derive(Debug)]
pub struct Link {
    pub latency: Duration,
    /// Cut by the test: stays down until restored.
    pub cut: bool,
    /// The connection while up.
    pub conn: Option<u64>,
    /// When the child tries to connect again.
    pub reconnect_at: Option<Instant>,
    /// Frame bytes sent down and up, over every connection of this link.
    pub bytes_down: u64,
    pub bytes_up: u64,
    /// When the last message on this link arrives: a message never overtakes another.
    pub last_arrival: Instant,
}

impl Link {
    pub fn new(latency: Duration) -> Self {
        Link {
            latency,
            cut: false,
            conn: None,
            reconnect_at: None,
            bytes_down: 0,
            bytes_up: 0,
            last_arrival: Instant::ZERO,
        }
    }
}

/// The core of a node that runs. Both kinds take the parent's inputs, timers,
/// `process` and `transmit` alike; only relays have children.
pub enum Core {
    Relay(Box<NodeCore>),
    Agent(Box<AgentCore>),
}

impl Core {
    pub fn parent_connected(&mut self, now: Instant) {
        match self {
            Core::Relay(c) => c.parent_connected(now, LinkPath::Direct),
            Core::Agent(c) => c.parent_connected(now, LinkPath::Direct),
        }
    }

    pub fn parent_message(&mut self, now: Instant, msg: ParentToChild) {
        match self {
            Core::Relay(c) => c.parent_message(now, msg),
            Core::Agent(c) => c.parent_message(now, msg),
        }
    }

    pub fn parent_gone(&mut self) {
        match self {
            Core::Relay(c) => c.parent_gone(),
            Core::Agent(c) => c.parent_gone(),
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Core::Relay(c) => c.poll_timeout(),
            Core::Agent(c) => c.poll_timeout(),
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        match self {
            Core::Relay(c) => c.handle_timeout(now),
            Core::Agent(c) => c.handle_timeout(now),
        }
    }

    pub fn process(&mut self, now: Instant) -> Batch {
        match self {
            Core::Relay(c) => c.process(now),
            Core::Agent(c) => c.process(now, wall(now)),
        }
    }

    /// What to send: an agent's is all for its parent.
    pub fn transmit(&mut self, now: Instant) -> Outgoing {
        match self {
            Core::Relay(c) => c.transmit(now),
            Core::Agent(c) => {
                let out = c.transmit(now);
                Outgoing {
                    to_parent: out.messages,
                    close_parent: out.close,
                    ..Outgoing::default()
                }
            }
        }
    }
}

/// A node's core, started from what `store` holds (nothing at the first start) by the
/// cores' own boot, as the runtimes start one ([`NodeCore::restore`],
/// [`AgentCore::restore`]); `runs` counts the earlier runs, so that each run has its
/// own id.
pub fn boot(now: Instant, spec: &Spec, store: &MemStore, runs: u64) -> Core {
    let stored = store.load().expect("the in-memory store loads");
    let run = spec.id * 1000 + runs;
    match spec.kind {
        Kind::Relay => Core::Relay(Box::new(NodeCore::restore(
            now,
            stored,
            BootOptions {
                name: spec.name.clone(),
                labels: spec.labels.clone(),
                children: spec.children.clone(),
                sessions: SessionConfig::default(),
                has_parent: spec.parent.is_some(),
                replica: None,
                run,
                summary_interval: SUMMARY_INTERVAL,
                wall_origin: UnixMillis(0),
                watch_history: spec.watch_history,
                standby: false,
                admission_hold: Duration::ZERO,
            },
        ))),
        Kind::Agent => Core::Agent(Box::new(AgentCore::restore(
            now,
            wall(now),
            stored,
            AgentBootOptions {
                cluster: Cluster {
                    name: spec.name.clone(),
                    labels: spec.labels.clone(),
                    properties: spec.properties.clone(),
                    path: Vec::new(),
                },
                // The cluster itself does not survive in the fixture: a restarted
                // agent applies everything it held again, to a new one.
                backend: Box::new(SimulatedCluster::new(SimulatedConfig {
                    ready_delay: READY_DELAY,
                    fail_all: None,
                })),
                run,
                versions: (MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION),
            },
        ))),
    }
}

/// The wall-clock time at `now`: the tree's clock starts at the Unix epoch.
pub fn wall(now: Instant) -> UnixMillis {
    UnixMillis(u64::try_from(now.since_origin().as_millis()).unwrap_or(u64::MAX))
}
