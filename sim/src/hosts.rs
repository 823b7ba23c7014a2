//! The simulated hierarchy: one turmoil host per relay, and one host per relay for all
//! the agents directly below it (turmoil's cost grows with the cube of the hosts). Hosts
//! are built from factories, so a crash drops everything running on them and a restart
//! starts the real relay or agent runtime again, on the same in-memory disk ("keep
//! disk") or on a fresh one ("lose disk").
//!
//! Certificates use Ed25519, whose signatures have a fixed length, so that handshakes
//! are the same size in every run (ECDSA signatures vary by a byte or two).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use strata_agent::runtime::{self as agent, AgentHandle, AgentOptions};
use strata_agent::simulated::{SimulatedCluster, SimulatedConfig};
use strata_agent::tunnel::TunnelTarget;
use strata_node::clock::Clock;
use strata_node::dial::{Connector, TransportMode};
use strata_node::store::{MemStore, Store};
use strata_node::tls::{self, Identity};
use strata_node::transport;
use strata_protocol::model::{Cluster, Labels, ObjectKey, Revision};
use strata_protocol::sync::SessionConfig;
use strata_relay::join::Joining;
use strata_relay::renew::Signer;
use strata_relay::tier::runtime::{self as node, NodeClient, NodeOptions};

use crate::certs::{BuildError, CertFiles, Certificates, Recovery, cert_err, sim_time};
use crate::clock::wall_now;
use crate::cluster::{RecordingCluster, SimCluster};
use crate::net::{self, Network, SimUdpSocket};
use crate::rng::{SimRng, hash, mix};
use crate::topology::{self, Topology};

/// Admission control as relays run it, or none with `SIM_ADMISSION=off` (to see what
/// it changes: `SIM_ADMISSION=off sim run sim/scenarios/large/storm-under-load.yaml`).
fn admission() -> strata_relay::tier::runtime::Admission {
    if std::env::var("SIM_ADMISSION").is_ok_and(|v| v == "off") {
        strata_relay::tier::runtime::Admission {
            handshakes: 0,
            queue: 0,
            setups: 0,
        }
    } else {
        strata_relay::tier::runtime::Admission::default()
    }
}

/// The port every relay listens on.
pub const RELAY_PORT: u16 = 7443;
/// How long a simulated workload takes to become available.
pub const READY_DELAY: Duration = Duration::from_millis(200);
/// How often relays send summaries upward.
pub const SUMMARY_INTERVAL: Duration = Duration::from_millis(500);

/// TLS configurations of one node, made once before the simulation starts: a server
/// configuration for relays only (an agent listens on nothing; each server
/// configuration holds rustls's session cache, 31 KB, which per cluster was an eighth
/// of the simulation's memory).
struct Tls {
    server: Option<Arc<rustls::ServerConfig>>,
    client: Arc<rustls::ClientConfig>,
}

/// The simulated hierarchy: the topology and seed it is built from, the simulated
/// network, every node's disk, and clients of the relays and agents running now. The
/// host factories and the observer share it (one thread: `Rc`).
#[allow(missing_docs)] // the fields are the parts named above
pub struct SimHierarchy {
    pub topology: Topology,
    pub seed: u64,
    /// The simulated network's knobs and counters.
    pub network: Arc<Network>,
    /// Each node's disk, kept across restarts unless the disk is lost.
    pub disks: RefCell<BTreeMap<String, MemStore>>,
    pub relays: RefCell<BTreeMap<String, NodeClient>>,
    pub agents: RefCell<BTreeMap<String, Rc<AgentHandle>>>,
    /// What each agent's simulated cluster removed, with the revision it held, not yet
    /// looked at by the observer (see `RecordingCluster` in `crate::cluster`).
    pub removals: RefCell<BTreeMap<String, Receiver<(ObjectKey, Revision)>>>,
    /// Each running agent's simulated cluster: what it holds, its volumes.
    pub clusters: RefCell<BTreeMap<String, SimCluster>>,
    /// Nodes (clusters or relays) whose labels the workload replaced.
    pub relabeled: RefCell<BTreeMap<String, Labels>>,
    /// Each node first starts at a random time in `[0, start_within]`.
    start_within: Duration,
    /// Starts so far per node (each start gets a new run id).
    starts: RefCell<BTreeMap<String, u64>>,
    tls: BTreeMap<String, Tls>,
    disk_generation: Cell<u64>,
    /// How every child reaches its parent (QUIC unless the scenario says otherwise).
    transport: Cell<TransportMode>,
    /// Short-lived certificates in files, renewed in place (see [`crate::certs`]).
    pub(crate) cert_files: Option<CertFiles>,
    /// Clusters that started with an expired certificate and what became of them.
    pub recoveries: RefCell<BTreeMap<String, Recovery>>,
}

impl std::fmt::Debug for SimHierarchy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHierarchy")
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

/// The host that runs the agents below `relay`.
pub fn agents_host(relay: &str) -> String {
    format!("agents-of-{relay}")
}

impl SimHierarchy {
    /// Certificates and fresh disks for every node of `topology`; each node first starts
    /// at a random time in `[0, start_within]`. With `certificates`, short-lived ones in
    /// files (see [`crate::certs`]); without, ones that never expire, in memory.
    pub fn new(
        topology: Topology,
        seed: u64,
        start_within: Duration,
        certificates: Option<&Certificates>,
    ) -> Result<Rc<SimHierarchy>, BuildError> {
        let cert_files = certificates
            .map(|c| CertFiles::write(&topology, seed, c))
            .transpose()?;
        let ca_key = KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| cert_err("ca", &e))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| cert_err("ca", &e))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "simulation strata CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params
            .self_signed(&ca_key)
            .map_err(|e| cert_err("ca", &e))?;
        let ca_pem = ca.pem();
        let names: Vec<String> = topology.node_names().map(str::to_owned).collect();
        let mut tls_by_name = BTreeMap::new();
        let mut disks = BTreeMap::new();
        let mut rng = SimRng::new(seed).fork("disks");
        for name in names {
            disks.insert(name.clone(), MemStore::new(rng.next_u64()));
            if cert_files.is_some() {
                continue;
            }
            let key =
                KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| cert_err(&name, &e))?;
            let mut p =
                CertificateParams::new(vec![name.clone()]).map_err(|e| cert_err(&name, &e))?;
            p.distinguished_name.push(DnType::CommonName, name.clone());
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = p
                .signed_by(&key, &ca, &ca_key)
                .map_err(|e| cert_err(&name, &e))?;
            let id = Identity::from_pem(
                cert.pem().as_bytes(),
                key.serialize_pem().as_bytes(),
                ca_pem.as_bytes(),
            )
            .map_err(|(_, e)| cert_err(&name, &e))?
            .with_time(Some(sim_time()));
            let server = match topology.relay(&name) {
                Some(_) => Some(tls::server_config(&id).map_err(|e| cert_err(&name, &e))?),
                None => None,
            };
            let client = tls::client_config(&id).map_err(|e| cert_err(&name, &e))?;
            tls_by_name.insert(name, Tls { server, client });
        }
        Ok(Rc::new(SimHierarchy {
            network: Network::new(SimRng::new(seed).fork("loss").next_u64()),
            topology,
            seed,
            disks: RefCell::new(disks),
            relays: RefCell::new(BTreeMap::new()),
            agents: RefCell::new(BTreeMap::new()),
            removals: RefCell::new(BTreeMap::new()),
            clusters: RefCell::new(BTreeMap::new()),
            relabeled: RefCell::new(BTreeMap::new()),
            start_within,
            starts: RefCell::new(BTreeMap::new()),
            tls: tls_by_name,
            disk_generation: Cell::new(0),
            transport: Cell::new(TransportMode::Quic),
            cert_files,
            recoveries: RefCell::new(BTreeMap::new()),
        }))
    }

    /// How every child reaches its parent from the next start on: `auto` and `tcp` give
    /// relays a TLS/TCP listener on the simulated TCP as well.
    pub fn set_transport(&self, mode: TransportMode) {
        self.transport.set(mode);
    }

    /// Replaces a node's disk with an empty one (and a new node id).
    pub fn lose_disk(&self, name: &str) {
        let generation = self.disk_generation.get() + 1;
        self.disk_generation.set(generation);
        let id = mix(self.seed ^ hash(name) ^ generation.wrapping_mul(0x51_7CC1_B727_220A));
        self.disks
            .borrow_mut()
            .insert(name.to_owned(), MemStore::new(id));
    }

    /// The simulated host a node runs on.
    pub fn host_of(&self, name: &str) -> String {
        match topology::cluster(&self.topology, name) {
            Some(c) => agents_host(&c.parent),
            None => name.to_owned(),
        }
    }

    /// Every host, relays first.
    pub fn hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .topology
            .relays
            .iter()
            .map(|r| r.name.clone())
            .collect();
        out.extend(self.agent_hosts());
        out
    }

    /// The hosts that run agents.
    pub fn agent_hosts(&self) -> Vec<String> {
        self.agent_parents()
            .iter()
            .map(|relay| agents_host(relay))
            .collect()
    }

    /// The relays with agents directly below them, sorted.
    fn agent_parents(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .topology
            .clusters
            .iter()
            .map(|c| c.parent.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Bytes sent so far from the first to the second node of `link`; `lookup` resolves
    /// host names (turmoil's, inside or outside the simulation).
    pub(crate) fn link_bytes(
        &self,
        link: &[String; 2],
        lookup: impl Fn(&str) -> std::net::IpAddr,
    ) -> u64 {
        let from = lookup(&self.host_of(&link[0]));
        let to = lookup(&self.host_of(&link[1]));
        self.network
            .traffic()
            .get(&(from, to))
            .map(|t| t.bytes)
            .unwrap_or(0)
    }

    /// A seeded value for the next start of `name` (run id, quinn seeds).
    fn next_start(&self, name: &str) -> SimRng {
        let mut starts = self.starts.borrow_mut();
        let n = starts.entry(name.to_owned()).or_insert(0);
        *n += 1;
        SimRng::new(mix(self.seed ^ hash(name)).wrapping_add(*n))
    }

    /// When `name` first starts, from the beginning of the simulation: a seeded time in
    /// `[0, start_within]`, so that nodes come up in an order the seed decides (children
    /// before parents included).
    fn first_start(&self, name: &str) -> Duration {
        let within = u64::try_from(self.start_within.as_millis()).unwrap_or(u64::MAX);
        if within == 0 {
            return Duration::ZERO;
        }
        let draw = SimRng::new(mix(self.seed ^ hash(name)))
            .fork("first start")
            .next_u64();
        Duration::from_millis(draw % (within + 1))
    }

    /// The labels `name` runs with: the workload's, or else the topology's.
    fn labels_of(&self, name: &str, topology_labels: &Labels) -> Labels {
        self.relabeled
            .borrow()
            .get(name)
            .cloned()
            .unwrap_or_else(|| topology_labels.clone())
    }

    fn store(&self, name: &str) -> Arc<dyn Store> {
        let disk = self
            .disks
            .borrow()
            .get(name)
            .cloned()
            .unwrap_or_else(|| MemStore::new(hash(name)));
        Arc::new(disk)
    }

    /// The TLS node `name` starts with: made once (certificates that never expire), or
    /// loaded from its files at every start (short-lived ones, renewed in place); a
    /// relay admitting joins (`joins`) also takes connections without a certificate.
    fn tls_for(&self, name: &str, joins: bool) -> std::io::Result<Tls> {
        let Some(files) = &self.cert_files else {
            let tls = self.tls.get(name).ok_or_else(|| missing(name))?;
            return Ok(Tls {
                server: tls.server.clone(),
                client: tls.client.clone(),
            });
        };
        let id = files.identity(name).map_err(std::io::Error::other)?;
        let server = if joins {
            tls::server_config_admitting_joins(&id)
        } else {
            tls::server_config(&id)
        };
        Ok(Tls {
            server: Some(server.map_err(std::io::Error::other)?),
            client: tls::client_config(&id).map_err(std::io::Error::other)?,
        })
    }

    /// How node `name` reaches its parent: a QUIC endpoint on `socket`, and, unless the
    /// transport is QUIC only, TLS/TCP on the simulated TCP; renewing its certificate
    /// through the parent when certificates are short-lived.
    fn connector(
        &self,
        name: &str,
        tls: &Tls,
        socket: SimUdpSocket,
        rng: &mut SimRng,
    ) -> std::io::Result<Connector> {
        let mut endpoint = net::seeded_endpoint(socket, rng)?;
        endpoint.set_default_client_config(
            transport::client_configs(tls.client.clone()).map_err(std::io::Error::other)?,
        );
        Ok(self.connector_on(name, tls, endpoint))
    }

    /// [`Self::connector`] on an endpoint made already (see [`Self::shared_endpoint`]).
    fn connector_on(&self, name: &str, tls: &Tls, endpoint: quinn::Endpoint) -> Connector {
        let connector = match self.transport.get() {
            TransportMode::Quic => endpoint.into(),
            mode => Connector::new(mode, Some(endpoint), Some(tls.client.clone()), None)
                .with_tcp_dial(net::tcp_dial()),
        };
        match &self.cert_files {
            Some(files) => connector
                .with_renewal(files.tls_files(name).renewal(name))
                .with_tls_time(Some(sim_time())),
            None => connector,
        }
    }

    /// One QUIC endpoint for every agent of the current host, when certificates never
    /// expire (`None` otherwise: an agent renewing or joining keeps its own). Each
    /// agent's connector presents the agent's own identity at every handshake
    /// ([`Connector::use_tls`]); the connections share the endpoint's socket, as the
    /// agents already share the host's address. quinn's endpoint holds a 47 KB receive
    /// buffer (32 datagrams), a fifth of the simulation's memory per cluster when each
    /// agent had its own.
    async fn shared_endpoint(
        &self,
        host: &str,
        ip: IpAddr,
    ) -> std::io::Result<Option<quinn::Endpoint>> {
        if self.cert_files.is_some()
            || std::env::var("SIM_SHARED_ENDPOINT").is_ok_and(|v| v == "off")
        {
            return Ok(None);
        }
        let mut rng = self.next_start(host);
        let socket = SimUdpSocket::bind(ip, 0, self.network.clone()).await?;
        net::seeded_endpoint(socket, &mut rng).map(Some)
    }

    /// How long a finished move's old clusters drain at relay `name`: one DNS TTL plus
    /// the grace when it is the root and the topology gives it `dns:` (as `relay serve`
    /// reads its configuration), else none.
    fn drain(&self, name: &str) -> Duration {
        let root = self.topology.root();
        match &root.dns {
            Some(d) if root.name == name => strata_relay::dns::RawDns {
                listen: None,
                zone: d.zone.clone(),
                ttl_s: d.ttl_seconds,
                drain_grace_s: d.drain_grace_seconds,
            }
            .check(&mut Vec::new())
            .map_or(Duration::ZERO, |c| c.drain()),
            _ => Duration::ZERO,
        }
    }

    /// Runs relay `name` on the current host until the host crashes.
    pub async fn run_relay(self: Rc<Self>, name: String) -> turmoil::Result {
        let mut rng = self.next_start(&name);
        if self.starts.borrow().get(&name) == Some(&1) {
            tokio::time::sleep_until(tokio::time::Instant::now() + self.first_start(&name)).await;
        }
        let ip = turmoil::lookup(name.as_str());
        let joins = self.cert_files.as_ref().and_then(|f| f.join_files(&name));
        let tls = self.tls_for(&name, joins.is_some())?;
        // The endpoint secret lives on the node's disk: the same across restarts.
        let secret = SimRng::new(mix(self.seed ^ hash(&name))).bytes32();
        let server_tls = tls.server.clone().ok_or_else(|| missing(&name))?;
        let (config, server) = transport::server_configs(server_tls.clone(), secret)?;
        let socket = SimUdpSocket::bind(ip, RELAY_PORT, self.network.clone()).await?;
        let listener = net::endpoint(socket, config, Some(server.clone()), rng.bytes32())?;
        let listener = transport::QuicListener::new(listener, server);
        let tcp_listener = match self.transport.get() {
            TransportMode::Quic => None,
            _ => Some(strata_node::tcp::Listener::from_source(
                Box::new(net::SimTcpListener::bind(ip, RELAY_PORT).await?),
                server_tls,
            )),
        };
        let topo = &self.topology;
        let parent = topo.relay(&name).and_then(|r| r.parent.clone()).map(|p| {
            let addr = SocketAddr::new(turmoil::lookup(p.as_str()), RELAY_PORT);
            (p, addr.into())
        });
        let connector = match parent {
            Some(_) => {
                let socket = SimUdpSocket::bind(ip, 0, self.network.clone()).await?;
                Some(self.connector(&name, &tls, socket, &mut rng)?)
            }
            None => None,
        };
        let mut handle = node::start(NodeOptions {
            name: name.clone(),
            labels: self.labels_of(
                &name,
                &topo
                    .relay(&name)
                    .map(|r| r.labels.clone())
                    .unwrap_or_default(),
            ),
            children: topology::children_of(topo, &name),
            parent,
            store: self.store(&name),
            listener: Some(listener),
            tcp_listener,
            connector,
            sessions: SessionConfig::default(),
            summary_interval: SUMMARY_INTERVAL,
            clock: Clock::start_at(wall_now()),
            run: rng.next_u64(),
            joining: match joins {
                Some(j) => Some(Arc::new(Joining::load(&name, &j)?)),
                None => None,
            },
            tunnels_per_link: strata_relay::tier::tunnel::DEFAULT_TUNNELS_PER_LINK,
            admission: admission(),
            replica: None,
            signer: match &self.cert_files {
                Some(f) => Signer::load(&name, Some(&f.signing()), None)?,
                None => None,
            },
            admission_hold: strata_relay::tier::runtime::DEFAULT_ADMISSION_HOLD,
            drain: self.drain(&name),
        })?;
        self.relays.borrow_mut().insert(name, handle.client());
        handle.wait().await?;
        Ok(())
    }

    /// Runs every agent below `relay` on the current host until the host crashes.
    pub async fn run_agents(self: Rc<Self>, relay: String) -> turmoil::Result {
        let ip = turmoil::lookup(agents_host(&relay));
        let parent_addr = SocketAddr::new(turmoil::lookup(relay.as_str()), RELAY_PORT);
        let host_started = tokio::time::Instant::now();
        // Agents starting for the first time wait for their own start time, in order.
        let mut specs: Vec<_> = self
            .topology
            .clusters
            .iter()
            .filter(|c| c.parent == relay)
            .map(|c| {
                let first = !self.starts.borrow().contains_key(&c.name);
                let at = if first {
                    self.first_start(&c.name)
                } else {
                    Duration::ZERO
                };
                (at, c)
            })
            .collect();
        specs.sort_by_key(|(at, _)| *at);
        let shared = self.shared_endpoint(&agents_host(&relay), ip).await?;
        for (at, spec) in specs {
            tokio::time::sleep_until(host_started + at).await;
            let mut rng = self.next_start(&spec.name);
            if let Some(files) = &self.cert_files {
                let parent = (relay.as_str(), parent_addr);
                let network = &self.network;
                let recovery = crate::certs::recover_if_expired(
                    network, files, &spec.name, parent, ip, &mut rng,
                )
                .await?;
                if let Some(r) = recovery {
                    self.recoveries.borrow_mut().insert(spec.name.clone(), r);
                }
            }
            let tls = self.tls_for(&spec.name, false)?;
            let connector = match &shared {
                Some(endpoint) => {
                    let c = self.connector_on(&spec.name, &tls, endpoint.clone());
                    c.use_tls(tls.client.clone());
                    c
                }
                None => {
                    let socket = SimUdpSocket::bind(ip, 0, self.network.clone()).await?;
                    self.connector(&spec.name, &tls, socket, &mut rng)?
                }
            };
            let (removed, removals) = std::sync::mpsc::channel();
            self.removals
                .borrow_mut()
                .insert(spec.name.clone(), removals);
            let simulated = SimulatedCluster::new(SimulatedConfig {
                ready_delay: READY_DELAY,
                fail_all: None,
            });
            // The debug tunnel and the volume streams of moves reach the cluster's
            // small API (its claims' bytes).
            let api = simulated.api();
            let (backend, cluster) = RecordingCluster::new(simulated, removed);
            self.clusters
                .borrow_mut()
                .insert(spec.name.clone(), cluster);
            let handle = agent::start(AgentOptions {
                cluster: Cluster {
                    name: spec.name.clone(),
                    labels: self.labels_of(&spec.name, &spec.labels),
                    properties: spec.properties.clone(),
                    path: vec![],
                },
                parent: (relay.clone(), parent_addr.into()),
                store: self.store(&spec.name),
                connector,
                backend: Box::new(backend),
                clock: Clock::start_at(wall_now()),
                run: rng.next_u64(),
                tunnel: Some(TunnelTarget::Simulated(api)),
            })?;
            self.agents
                .borrow_mut()
                .insert(spec.name.clone(), Rc::new(handle));
        }
        std::future::pending::<()>().await;
        Ok(())
    }
}

fn missing(name: &str) -> std::io::Error {
    std::io::Error::other(format!("no certificate for {name}"))
}

/// Registers every host of the hierarchy with `sim`.
pub fn register(sim: &mut turmoil::Sim<'_>, hierarchy: &Rc<SimHierarchy>) {
    for name in hierarchy.topology.relays.iter().map(|r| r.name.clone()) {
        let s = hierarchy.clone();
        let n = name.clone();
        sim.host(name.as_str(), move || s.clone().run_relay(n.clone()));
    }
    for relay in hierarchy.agent_parents() {
        let s = hierarchy.clone();
        let r = relay.clone();
        sim.host(agents_host(&relay).as_str(), move || {
            s.clone().run_agents(r.clone())
        });
    }
}
