//! A hierarchy of real relays and agents in one process, over real QUIC + mTLS on
//! loopback (or TLS 1.3 over TCP, or `auto`, with `--transport`): every node and every
//! agent has its own endpoint and its own in-memory store. The root, the other relays and the agents each run on their own tokio runtime
//! (threads named per tier) so that CPU time can be told apart per tier.
//!
//! Each agent drives a [`SimulatedCluster`] wrapped so that every apply is reported on a
//! channel with the moment it happened: arrival is measured event by event, not by
//! polling agents one after another.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use strata_agent::backend::{BackendError, ClusterBackend};
use strata_agent::runtime::{self as agent, AgentHandle, AgentOptions};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_node::clock::Clock;
use strata_node::dial::{Connector, TransportMode};
use strata_node::store::{MemStore, Store};
use strata_node::tls::{self, Identity};
use strata_node::{tcp, transport};
use strata_protocol::model::{Cluster, Object, ObjectKey, Status};
use strata_protocol::sync::SessionConfig;
use strata_protocol::time::{Instant, UnixMillis};
use strata_relay::certs::Ca;
use strata_relay::tier::runtime::{self as node, LinkStats, NodeClient, NodeHandle, NodeOptions};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use super::BenchError;

/// One apply at one leaf: which leaf, the object's revision, and when.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Applied {
    pub(crate) leaf: u32,
    pub(crate) revision: u64,
    pub(crate) at: tokio::time::Instant,
}

/// A simulated cluster that tells the harness about every apply.
struct Watched {
    inner: SimulatedCluster,
    leaf: u32,
    tx: mpsc::UnboundedSender<Applied>,
}

impl ClusterBackend for Watched {
    fn apply(&mut self, now: Instant, at: UnixMillis, object: &Object) -> Result<(), BackendError> {
        self.inner.apply(now, at, object)?;
        let _ = self.tx.send(Applied {
            leaf: self.leaf,
            revision: object.revision.0,
            at: tokio::time::Instant::now(),
        });
        Ok(())
    }
    fn delete(&mut self, now: Instant, key: &ObjectKey) -> Result<(), BackendError> {
        self.inner.delete(now, key)
    }
    fn poll_status(&mut self, now: Instant, at: UnixMillis) -> Vec<(ObjectKey, Status)> {
        self.inner.poll_status(now, at)
    }
    fn next_change(&self) -> Option<Instant> {
        self.inner.next_change()
    }
}

/// Runtimes per tier; thread names (at most 15 characters) identify the tier in
/// `/proc/self/task/*/comm`.
pub(crate) struct Tiers {
    pub(crate) root: Rt,
    pub(crate) relays: Rt,
    pub(crate) agents: Rt,
}

/// A runtime that is shut down in the background when dropped (dropping a runtime
/// inside another one's task panics; the harness drops trees on error paths too).
pub(crate) struct Rt(Option<Runtime>);

impl Rt {
    fn enter(&self) -> Option<tokio::runtime::EnterGuard<'_>> {
        self.0.as_ref().map(Runtime::enter)
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Thread-name prefixes of the tiers, in the order of [`Tiers`].
pub(crate) const TIER_THREADS: [&str; 3] = ["bench-root", "bench-relay", "bench-agent"];

impl Tiers {
    fn new() -> Result<Tiers, BenchError> {
        let rt = |name: &str, workers: usize| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .thread_name(name)
                .enable_all()
                .build()
                .map(|rt| Rt(Some(rt)))
                .map_err(|e| BenchError::setup("a tokio runtime", e))
        };
        Ok(Tiers {
            root: rt(TIER_THREADS[0], 1)?,
            relays: rt(TIER_THREADS[1], 2)?,
            agents: rt(TIER_THREADS[2], 2)?,
        })
    }
}

/// A relay (or the root) and what it needs to start again with its store kept.
pub(crate) struct NodeSlot {
    pub(crate) name: String,
    parent: Option<(String, SocketAddr)>,
    pub(crate) children: Vec<String>,
    pub(crate) addr: SocketAddr,
    store: Arc<MemStore>,
    identity: Identity,
    id: u64,
    pub(crate) handle: Option<NodeHandle>,
}

/// An agent and what it needs to start again with its store kept.
pub(crate) struct AgentSlot {
    name: String,
    parent: (String, SocketAddr),
    store: Arc<MemStore>,
    identity: Identity,
    pub(crate) handle: Option<AgentHandle>,
}

/// The running hierarchy.
pub(crate) struct Tree {
    /// `levels[0]` is the root; `levels[i]` the relays `i` hops below it.
    pub(crate) levels: Vec<Vec<NodeSlot>>,
    pub(crate) agents: Vec<AgentSlot>,
    /// Per agent, the index of the lowest relay it hangs under.
    pub(crate) agent_parent: Vec<usize>,
    tiers: Tiers,
    applied: mpsc::UnboundedSender<Applied>,
    runs: u64,
    /// How every child reaches its parent; relays listen on TCP too unless it is QUIC.
    transport: TransportMode,
}

impl Tree {
    /// Builds the relays of `fanout` (all but the last entry are relays per parent; the
    /// last is agents per lowest relay) and starts them; agents are started by
    /// [`Tree::start_agents`].
    pub(crate) fn build(
        fanout: &[usize],
        applied: mpsc::UnboundedSender<Applied>,
        transport: TransportMode,
    ) -> Result<Tree, BenchError> {
        let ca = Ca::generate("bench").map_err(|e| BenchError::setup("the CA", e))?;
        let mut tree = Tree {
            levels: Vec::new(),
            agents: Vec::new(),
            agent_parent: Vec::new(),
            tiers: Tiers::new()?,
            applied,
            runs: 1,
            transport,
        };
        let child_names = |parent: &str, level: usize, n: usize| -> Vec<String> {
            let tag = match level {
                _ if level + 1 == fanout.len() => "a",
                0 => "r",
                1 => "s",
                _ => "n",
            };
            (0..n)
                .map(|i| match level {
                    0 => format!("{tag}{i}"),
                    _ => format!("{parent}-{tag}{i}"),
                })
                .collect()
        };
        let mut id = 1u64;
        let mut root = tree.slot(&ca, "root", None, child_names("root", 0, fanout[0]), id)?;
        tree.runs += 1;
        start_node(&tree.tiers, tree.runs, &mut root, 0, transport)?;
        tree.levels.push(vec![root]);
        for (level, &per_parent) in fanout.iter().enumerate().skip(1) {
            let mut slots = Vec::new();
            for parent in &tree.levels[level - 1] {
                for name in &parent.children {
                    id += 1;
                    let kids = child_names(name, level, per_parent);
                    slots.push(tree.slot(
                        &ca,
                        name,
                        Some((parent.name.clone(), parent.addr)),
                        kids,
                        id,
                    )?);
                }
            }
            for slot in &mut slots {
                tree.runs += 1;
                start_node(&tree.tiers, tree.runs, slot, level, transport)?;
            }
            tree.levels.push(slots);
        }
        let lowest = tree.levels.len() - 1;
        for (p, parent) in tree.levels[lowest].iter().enumerate() {
            for name in &parent.children {
                id += 1;
                tree.agents.push(AgentSlot {
                    name: name.clone(),
                    parent: (parent.name.clone(), parent.addr),
                    store: Arc::new(MemStore::new(id)),
                    identity: issue(&ca, name)?,
                    handle: None,
                });
                tree.agent_parent.push(p);
            }
        }
        Ok(tree)
    }

    fn slot(
        &self,
        ca: &Ca,
        name: &str,
        parent: Option<(String, SocketAddr)>,
        children: Vec<String>,
        id: u64,
    ) -> Result<NodeSlot, BenchError> {
        Ok(NodeSlot {
            name: name.to_owned(),
            parent,
            children,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            store: Arc::new(MemStore::new(id)),
            identity: issue(ca, name)?,
            id,
            handle: None,
        })
    }

    /// Restarts a stopped relay with its store kept, on the address its children know
    /// (the old socket may take a moment to be released).
    pub(crate) async fn restart_node(
        &mut self,
        level: usize,
        index: usize,
    ) -> Result<(), BenchError> {
        let mut last = None;
        for _ in 0..100 {
            self.runs += 1;
            match start_node(
                &self.tiers,
                self.runs,
                &mut self.levels[level][index],
                level,
                self.transport,
            ) {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(last.unwrap_or_else(|| BenchError::setup("restart", "never tried")))
    }

    /// Starts (or restarts, stores kept) the agents in `range`, all at once.
    pub(crate) fn start_agents(&mut self, range: std::ops::Range<usize>) -> Result<(), BenchError> {
        let _in = self.tiers.agents.enter();
        for i in range {
            self.runs += 1;
            let slot = &self.agents[i];
            let connector = connector(&slot.name, &slot.identity, self.transport)?;
            let handle = agent::start(AgentOptions {
                cluster: Cluster {
                    name: slot.name.clone(),
                    labels: [("tier".to_owned(), "store".to_owned())].into(),
                    properties: BTreeMap::new(),
                    path: vec![],
                },
                parent: (slot.parent.0.clone(), slot.parent.1.into()),
                store: slot.store.clone(),
                connector,
                backend: Box::new(Watched {
                    inner: SimulatedCluster::new(SimulatedConfig {
                        ready_delay: Duration::ZERO,
                        fail_all: None,
                    }),
                    leaf: i as u32,
                    tx: self.applied.clone(),
                }),
                clock: Clock::start(),
                run: self.runs,
                tunnel: None,
            })
            .map_err(|e| BenchError::setup(&slot.name, e))?;
            self.agents[i].handle = Some(handle);
        }
        Ok(())
    }

    /// Starts `n` extra agents whose parent never answers (a closed loopback port):
    /// each holds its endpoint, store, tasks and connection attempts but no connection,
    /// so that RSS can tell an agent's cost from its connection's.
    pub(crate) fn start_orphans(&mut self, n: usize) -> Result<Vec<AgentHandle>, BenchError> {
        let _in = self.tiers.agents.enter();
        let slot = self
            .agents
            .first()
            .ok_or_else(|| BenchError::setup("orphan agents", "no agent to copy"))?;
        let (name, identity) = (slot.name.clone(), slot.identity.clone());
        let mut out = Vec::new();
        for i in 0..n {
            self.runs += 1;
            let connector = connector(&name, &identity, self.transport)?;
            let (tx, _) = mpsc::unbounded_channel();
            out.push(
                agent::start(AgentOptions {
                    cluster: Cluster {
                        name: format!("orphan-{i}"),
                        labels: BTreeMap::new(),
                        properties: BTreeMap::new(),
                        path: vec![],
                    },
                    parent: (
                        "nobody".into(),
                        SocketAddr::from(([127, 0, 0, 1], 1)).into(),
                    ),
                    store: Arc::new(MemStore::new(1_000_000 + i as u64)),
                    connector,
                    backend: Box::new(Watched {
                        inner: SimulatedCluster::new(SimulatedConfig::default()),
                        leaf: u32::MAX,
                        tx,
                    }),
                    clock: Clock::start(),
                    run: self.runs,
                    tunnel: None,
                })
                .map_err(|e| BenchError::setup(&name, e))?,
            );
        }
        Ok(out)
    }

    /// Stops every agent at once (stores kept).
    pub(crate) async fn stop_agents(&mut self) {
        let mut stopping = tokio::task::JoinSet::new();
        for a in &mut self.agents {
            if let Some(h) = a.handle.take() {
                stopping.spawn(h.shutdown());
            }
        }
        while stopping.join_next().await.is_some() {}
    }

    /// The root's store.
    pub(crate) fn root_store(&self) -> Arc<dyn Store> {
        self.levels[0][0].store.clone()
    }

    /// The root's client.
    pub(crate) fn root(&self) -> Result<NodeClient, BenchError> {
        self.levels[0][0]
            .handle
            .as_ref()
            .map(NodeHandle::client)
            .ok_or_else(|| BenchError::setup("root", "not running"))
    }

    /// Link byte counters of every running relay, per level.
    pub(crate) async fn link_stats(&self) -> Vec<Vec<LinkStats>> {
        let mut out = Vec::new();
        for level in &self.levels {
            let mut stats = Vec::new();
            for slot in level {
                if let Some(h) = &slot.handle {
                    stats.push(h.client().link_stats().await.unwrap_or_default());
                }
            }
            out.push(stats);
        }
        out
    }

    /// Child connections opened at every running relay and the root so far (reconnections
    /// included), and how many times the root planned: read before and after a phase,
    /// they say whether links dropped during it.
    pub(crate) async fn churn(&self) -> Churn {
        let mut churn = Churn::default();
        for (level, nodes) in self.levels.iter().enumerate() {
            for slot in nodes {
                let Some(h) = &slot.handle else { continue };
                let stats = h.client().query(|c| c.stats().clone()).await;
                if let Some(stats) = stats {
                    churn.connections += stats.children_connected;
                    churn.handshakes_refused += stats.handshakes_refused;
                    churn.sessions_refused += stats.sessions_refused;
                    if level == 0 {
                        churn.plans += stats.plans;
                    }
                }
            }
        }
        churn
    }

    /// Clients of the running nodes of one level (0 is the root).
    pub(crate) fn level_clients(&self, level: usize) -> Vec<(String, NodeClient)> {
        self.levels
            .get(level)
            .into_iter()
            .flatten()
            .filter_map(|slot| {
                let client = slot.handle.as_ref().map(NodeHandle::client)?;
                Some((slot.name.clone(), client))
            })
            .collect()
    }

    /// Relays (root excluded).
    pub(crate) fn relay_count(&self) -> usize {
        self.levels.iter().skip(1).map(Vec::len).sum()
    }

    /// Stops everything and the tier runtimes.
    pub(crate) async fn shutdown(mut self) {
        self.stop_agents().await;
        for level in self.levels.iter_mut().rev() {
            let mut stopping = tokio::task::JoinSet::new();
            for slot in level.iter_mut() {
                if let Some(h) = slot.handle.take() {
                    stopping.spawn(h.shutdown());
                }
            }
            while stopping.join_next().await.is_some() {}
        }
    }
}

/// A child's way to its parent: a QUIC endpoint of its own, TLS over TCP, or both.
fn connector(
    name: &str,
    identity: &Identity,
    mode: TransportMode,
) -> Result<Connector, BenchError> {
    let tls = tls::client_config(identity).map_err(|e| BenchError::setup(name, e))?;
    let quic = match mode {
        TransportMode::Tcp => None,
        _ => Some(
            transport::client_endpoint(SocketAddr::from(([127, 0, 0, 1], 0)), tls.clone())
                .map_err(|e| BenchError::setup(name, e))?,
        ),
    };
    Ok(Connector::new(mode, quic, Some(tls), None))
}

fn issue(ca: &Ca, name: &str) -> Result<Identity, BenchError> {
    Identity::issue(ca, name).map_err(|e| BenchError::setup(name, e))
}

/// Starts one relay from its slot (store kept across restarts).
fn start_node(
    tiers: &Tiers,
    run: u64,
    slot: &mut NodeSlot,
    level: usize,
    mode: TransportMode,
) -> Result<(), BenchError> {
    let rt = if level == 0 {
        &tiers.root
    } else {
        &tiers.relays
    };
    let _in = rt.enter();
    let identity = &slot.identity;
    let server = tls::server_config(identity).map_err(|e| BenchError::setup(&slot.name, e))?;
    let mut secret = [0u8; 32];
    secret[..8].copy_from_slice(&slot.id.to_le_bytes());
    // TLS/TCP on the same port number as QUIC, as a relay listens by default. On a
    // first start the port is the system's choice for UDP, which a TCP socket (say, a
    // child's outgoing connection) may hold already: try another.
    let mut attempts = 0;
    let (listener, tcp_listener) = loop {
        let listener = transport::server_endpoint(slot.addr, server.clone(), secret)
            .map_err(|e| BenchError::setup(&slot.name, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| BenchError::setup(&slot.name, e))?;
        let tcp_listener = match mode {
            TransportMode::Quic => None,
            _ => match tcp::Listener::bind(addr, server.clone()) {
                Ok(l) => Some(l),
                Err(_) if slot.addr.port() == 0 && attempts < 20 => {
                    attempts += 1;
                    continue;
                }
                Err(e) => return Err(BenchError::setup(&slot.name, e)),
            },
        };
        slot.addr = addr;
        break (listener, tcp_listener);
    };
    let connector = match slot.parent {
        Some(_) => Some(connector(&slot.name, identity, mode)?),
        None => None,
    };
    let handle = node::start(NodeOptions {
        name: slot.name.clone(),
        labels: BTreeMap::new(),
        children: slot.children.clone(),
        parent: slot.parent.clone().map(|(n, a)| (n, a.into())),
        store: slot.store.clone() as Arc<dyn Store>,
        listener: Some(listener),
        tcp_listener,
        connector,
        sessions: SessionConfig::default(),
        summary_interval: Duration::from_millis(100),
        clock: Clock::start(),
        run,
        joining: None,
        tunnels_per_link: strata_relay::tier::tunnel::DEFAULT_TUNNELS_PER_LINK,
        admission: strata_relay::tier::runtime::Admission::default(),
        replica: None,
        signer: None,
        admission_hold: std::time::Duration::ZERO,
        drain: std::time::Duration::ZERO,
    })
    .map_err(|e| BenchError::setup(&slot.name, e))?;
    slot.handle = Some(handle);
    Ok(())
}

/// Counters of links coming and going, summed over a hierarchy's nodes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Churn {
    /// Child connections opened.
    pub(crate) connections: u64,
    /// Times the root planned.
    pub(crate) plans: u64,
    /// Connections refused before their TLS handshake.
    pub(crate) handshakes_refused: u64,
    /// Hellos refused with a time to come back.
    pub(crate) sessions_refused: u64,
}
