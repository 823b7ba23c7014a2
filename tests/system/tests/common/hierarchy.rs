//! A hierarchy of relays and agents in this process, over real QUIC with mutual TLS on
//! loopback, declared node by node so that a test reads as the tree it sets up:
//!
//! ```ignore
//! let h = Hierarchy::new();
//! let root = h.relay("center").children(&["site-1"]).start().await;
//! let site = h.relay("site-1").under("center").children(&["pos-1"]).start().await;
//! let pos = h.agent("pos-1").role("pos").under("site-1").start();
//! ```
//!
//! Every node gets a certificate from the hierarchy's CA; a relay's children find it by
//! its name, and a relay started again takes its old port back.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use strata_agent::backend::ClusterBackend;
use strata_agent::runtime::{self as agent, AgentHandle, AgentOptions};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_node::clock::Clock;
use strata_node::dial::{Connector, ParentAddress, TransportMode};
use strata_node::proxy::Proxy;
use strata_node::store::{MemStore, Store};
use strata_node::tcp;
use strata_node::tls::{self, Identity};
use strata_node::transport;
use strata_protocol::model::{Cluster, Labels};
use strata_protocol::sync::SessionConfig;
use strata_relay::certs::Ca;
use strata_relay::join::Joining;
use strata_relay::tier::runtime::{self as node, NodeHandle, NodeOptions};

/// The nodes a test starts, their CA and the directory for their files.
pub struct Hierarchy {
    dir: tempfile::TempDir,
    ca: Ca,
    /// Where each relay started so far listens.
    addrs: RefCell<BTreeMap<String, SocketAddr>>,
    /// Where each relay started so far listens for TLS over TCP, if it does.
    tcp_addrs: RefCell<BTreeMap<String, SocketAddr>>,
    /// Nodes started so far (a restart is a new run).
    starts: RefCell<u64>,
}

impl Hierarchy {
    /// A new CA (its certificate in `ca.crt` of a new directory), and no node yet.
    pub fn new() -> Hierarchy {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::generate("test").unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.cert_pem()).unwrap();
        Hierarchy {
            dir,
            ca,
            addrs: RefCell::default(),
            tcp_addrs: RefCell::default(),
            starts: RefCell::default(),
        }
    }

    /// The directory for the test's files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The CA certificate's file.
    pub fn ca_path(&self) -> PathBuf {
        self.dir().join("ca.crt")
    }

    /// A key and a certificate naming `name`, from the hierarchy's CA.
    pub fn identity(&self, name: &str) -> Identity {
        Identity::issue(&self.ca, name).unwrap()
    }

    /// Where the relay `name` listens (it must have started).
    pub fn addr(&self, name: &str) -> SocketAddr {
        let addrs = self.addrs.borrow();
        *addrs
            .get(name)
            .unwrap_or_else(|| panic!("{name} has not started: it has no address yet"))
    }

    /// Where the relay `name` listens for TLS over TCP (it must have started with
    /// `.tcp()` or `.tcp_at()`).
    pub fn tcp_addr(&self, name: &str) -> SocketAddr {
        *self
            .tcp_addrs
            .borrow()
            .get(name)
            .unwrap_or_else(|| panic!("{name} does not listen on TCP"))
    }

    /// A relay named `name`: the root unless put `under` a parent; `.start()` runs it.
    pub fn relay(&self, name: &str) -> RelaySpec<'_> {
        RelaySpec {
            h: self,
            name: name.to_owned(),
            parent: None,
            children: Vec::new(),
            labels: Labels::new(),
            store: None,
            joining: None,
            tcp: None,
            link: LinkSpec::default(),
        }
    }

    /// An agent named `name` with a simulated cluster; `.under(relay).start()` runs it.
    pub fn agent(&self, name: &str) -> AgentSpec<'_> {
        AgentSpec {
            h: self,
            name: name.to_owned(),
            parent: None,
            labels: Labels::new(),
            identity: None,
            backend: None,
            tunnel: None,
            link: LinkSpec::default(),
        }
    }

    /// A run id for the next node started: different for every start in this process,
    /// as a random one is in production.
    fn next_run(&self, name: &str) -> u64 {
        let mut starts = self.starts.borrow_mut();
        *starts += 1;
        name.bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
            ^ u64::from(std::process::id()).rotate_left(32)
            ^ *starts
    }
}

/// A relay to start.
pub struct RelaySpec<'h> {
    h: &'h Hierarchy,
    name: String,
    parent: Option<String>,
    children: Vec<String>,
    labels: Labels,
    store: Option<MemStore>,
    joining: Option<Arc<Joining>>,
    /// Listening on TCP too: `Some(None)` on QUIC's port, `Some(Some(a))` at `a`.
    tcp: Option<Option<SocketAddr>>,
    link: LinkSpec,
}

/// How a node reaches its parent, when not by QUIC to the parent's QUIC address.
#[derive(Clone)]
pub struct LinkSpec {
    /// The transport (QUIC by default, unlike a node's config: these tests were
    /// written against QUIC links, and those about TCP say so).
    pub mode: TransportMode,
    /// The parent's address as written (`host:port` allowed); by default its QUIC one.
    pub address: Option<String>,
    pub proxy: Option<Proxy>,
    /// `auto`: how often QUIC is probed while on TCP (the default's 30 s otherwise).
    pub probe: Option<Duration>,
    /// TLS/TCP: how often the child pings (the default's 5 s otherwise).
    pub keep_alive: Option<Duration>,
}

impl Default for LinkSpec {
    fn default() -> Self {
        LinkSpec {
            mode: TransportMode::Quic,
            address: None,
            proxy: None,
            probe: None,
            keep_alive: None,
        }
    }
}

impl LinkSpec {
    fn parent_address(&self, h: &Hierarchy, parent: &str) -> ParentAddress {
        match &self.address {
            Some(a) => a.parse().unwrap(),
            None => h.addr(parent).into(),
        }
    }

    fn connector(&self, id: &Identity) -> Connector {
        let quic = (self.mode != TransportMode::Tcp).then(|| client_endpoint(id));
        let tls = (self.mode != TransportMode::Quic).then(|| tls::client_config(id).unwrap());
        let mut c = Connector::new(self.mode, quic, tls, self.proxy.clone());
        // Tests fall back sooner than production's 3 s.
        c.quic_timeout = Duration::from_secs(1);
        if let Some(p) = self.probe {
            c.probe_every = p;
        }
        if let Some(k) = self.keep_alive {
            c.keep_alive = k;
        }
        c
    }
}

impl RelaySpec<'_> {
    /// Below the relay `parent`, started before.
    pub fn under(mut self, parent: &str) -> Self {
        self.parent = Some(parent.to_owned());
        self
    }

    /// The children allowed to connect.
    pub fn children(mut self, children: &[&str]) -> Self {
        self.children = children.iter().map(|c| (*c).to_owned()).collect();
        self
    }

    /// The labels every cluster below inherits.
    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.labels = to_labels(labels);
        self
    }

    /// On this store (a clone shares its data: a restart finds what the last run wrote)
    /// instead of a new empty one.
    pub fn store(mut self, store: &MemStore) -> Self {
        self.store = Some(store.clone());
        self
    }

    /// Listening for TLS over TCP too, on the QUIC port's number.
    pub fn tcp(mut self) -> Self {
        self.tcp = Some(None);
        self
    }

    /// Listening for TLS over TCP at `addr` (another port than QUIC's).
    pub fn tcp_at(mut self, addr: SocketAddr) -> Self {
        self.tcp = Some(Some(addr));
        self
    }

    /// Reaching its parent this way.
    pub fn link(mut self, link: LinkSpec) -> Self {
        self.link = link;
        self
    }

    /// Admitting agents that join with a token (its listener then accepts connections
    /// without a client certificate).
    pub fn joining(mut self, joining: Arc<Joining>) -> Self {
        self.joining = Some(joining);
        self
    }

    /// Runs the relay, listening where it listened before if it ran before.
    pub async fn start(self) -> NodeHandle {
        let h = self.h;
        let id = h.identity(&self.name);
        let server = match self.joining {
            Some(_) => tls::server_config_admitting_joins(&id).unwrap(),
            None => tls::server_config(&id).unwrap(),
        };
        let before = h.addrs.borrow().get(&self.name).copied();
        let listen = before.unwrap_or_else(|| "127.0.0.1:0".parse().unwrap());
        let tcp_pinned = self
            .tcp
            .and_then(|at| h.tcp_addrs.borrow().get(&self.name).copied().or(at));
        // A restarted relay takes its old port back once the old endpoint lets go of it.
        // A TCP listener that follows the QUIC port the OS chose can find that number
        // held by another process's TCP socket: then both are chosen again.
        let mut attempts = 0;
        let (listener, tcp_listener) = loop {
            let listener = match transport::server_endpoint(
                listen,
                server.clone(),
                [self.name.len() as u8; 32],
            ) {
                Ok(l) => l,
                Err(_) if attempts < 100 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(e) => panic!("{} cannot listen on {listen}: {e}", self.name),
            };
            let quic_addr = listener.local_addr().unwrap();
            let Some(_) = self.tcp else {
                break (listener, None);
            };
            let addr = tcp_pinned.unwrap_or(quic_addr);
            match tcp::Listener::bind(addr, server.clone()) {
                Ok(l) => break (listener, Some(l)),
                Err(transport::TransportError::Bind { source, .. })
                    if tcp_pinned.is_none()
                        && before.is_none()
                        && source.kind() == std::io::ErrorKind::AddrInUse
                        && attempts < 100 =>
                {
                    attempts += 1;
                }
                Err(e) => panic!("{} cannot listen on {addr} (TCP): {e}", self.name),
            }
        };
        let quic_addr = listener.local_addr().unwrap();
        h.addrs.borrow_mut().insert(self.name.clone(), quic_addr);
        if let Some(l) = &tcp_listener {
            h.tcp_addrs
                .borrow_mut()
                .insert(self.name.clone(), l.local_addr().unwrap());
        }
        let link = self.link;
        let parent = self.parent.map(|p| {
            let addr = link.parent_address(h, &p);
            (p, addr)
        });
        let connector = parent.as_ref().map(|_| link.connector(&id));
        let run = h.next_run(&self.name);
        let store = self.store.unwrap_or_else(|| MemStore::new(run));
        node::start(NodeOptions {
            name: self.name,
            labels: self.labels,
            children: self.children,
            parent,
            store: Arc::new(store) as Arc<dyn Store>,
            listener: Some(listener),
            tcp_listener,
            connector,
            sessions: SessionConfig::default(),
            summary_interval: Duration::from_millis(100),
            clock: Clock::start(),
            run,
            joining: self.joining,
            tunnels_per_link: strata_relay::tier::tunnel::DEFAULT_TUNNELS_PER_LINK,
            admission: strata_relay::tier::runtime::Admission::default(),
            replica: None,
            signer: None,
            admission_hold: strata_relay::tier::runtime::DEFAULT_ADMISSION_HOLD,
            drain: std::time::Duration::ZERO,
        })
        .unwrap()
    }
}

/// An agent to start.
pub struct AgentSpec<'h> {
    h: &'h Hierarchy,
    name: String,
    parent: Option<String>,
    labels: Labels,
    identity: Option<Identity>,
    backend: Option<Box<dyn ClusterBackend + Send>>,
    tunnel: Option<strata_agent::tunnel::TunnelTarget>,
    link: LinkSpec,
}

impl AgentSpec<'_> {
    /// Below the relay `parent`, started before.
    pub fn under(mut self, parent: &str) -> Self {
        self.parent = Some(parent.to_owned());
        self
    }

    /// Its cluster labelled `role: ROLE`.
    pub fn role(self, role: &str) -> Self {
        self.labels(&[("role", role)])
    }

    /// Its cluster's labels.
    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.labels.extend(to_labels(labels));
        self
    }

    /// Reaching its parent this way.
    pub fn link(mut self, link: LinkSpec) -> Self {
        self.link = link;
        self
    }

    /// Connecting with this identity instead of one the hierarchy's CA issues.
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// With this cluster instead of a simulated one that is ready after 100 ms.
    pub fn backend(mut self, backend: Box<dyn ClusterBackend + Send>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// With this simulated cluster, whose small API (and claims' bytes) answers the
    /// parent's tunnel and volume streams.
    pub fn simulated(mut self, cluster: SimulatedCluster) -> Self {
        self.tunnel = Some(strata_agent::tunnel::TunnelTarget::Simulated(cluster.api()));
        self.backend = Some(Box::new(cluster));
        self
    }

    /// Answering the parent's tunnel and volume streams with `target` (a real
    /// cluster's API and volumes).
    pub fn tunnel(mut self, target: strata_agent::tunnel::TunnelTarget) -> Self {
        self.tunnel = Some(target);
        self
    }

    /// Runs the agent, on a new empty store.
    pub fn start(self) -> AgentHandle {
        let h = self.h;
        let parent = self
            .parent
            .unwrap_or_else(|| panic!("{} is under no relay", self.name));
        let addr = self.link.parent_address(h, &parent);
        let id = self.identity.unwrap_or_else(|| h.identity(&self.name));
        let connector = self.link.connector(&id);
        let backend = self.backend.unwrap_or_else(|| {
            Box::new(SimulatedCluster::new(SimulatedConfig {
                ready_delay: Duration::from_millis(100),
                fail_all: None,
            }))
        });
        let run = h.next_run(&self.name);
        agent::start(AgentOptions {
            cluster: Cluster {
                name: self.name,
                labels: self.labels,
                properties: BTreeMap::new(),
                path: vec![],
            },
            parent: (parent, addr),
            store: Arc::new(MemStore::new(run)),
            connector,
            backend,
            clock: Clock::start(),
            run,
            tunnel: self.tunnel,
        })
        .unwrap()
    }
}

fn client_endpoint(id: &Identity) -> quinn::Endpoint {
    transport::client_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        tls::client_config(id).unwrap(),
    )
    .unwrap()
}

fn to_labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
