//! A listening QUIC endpoint that remembers, per peer address, the path MTU its last
//! connection from there found, and starts that peer's next connection at it.
//!
//! Path MTU discovery sends padded probes, each the size probed, on every new
//! connection (two with our step, see [`crate::net::transport`]): about 2.8 KB that a child
//! reconnecting to catch up on a few objects pays again and again, on the very links
//! that drop most. A reconnect from an address whose path we measured a moment ago
//! starts at the size found then, and the search has nothing left to probe. If the
//! path has shrunk since, quinn's black-hole detection falls back to the 1,200 bytes
//! every QUIC path carries, and a handshake that fails at the remembered size makes
//! the next attempt start from 1,200 again.
//!
//! The memory is per process (a restarted relay probes once more) and bounded.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use quinn::{Connection, Endpoint, Incoming};

/// The smallest datagram every QUIC path must carry, where every search starts.
const BASE_MTU: u16 = 1200;

/// How many peer addresses are remembered at most (some 50 bytes each); past that,
/// new addresses are not remembered until some are forgotten.
const REMEMBERED: usize = 100_000;

/// A listening QUIC endpoint and what it remembers of its peers' paths. Clones share
/// both.
#[derive(Clone, Debug)]
pub struct QuicListener {
    endpoint: Endpoint,
    paths: Arc<Paths>,
}

#[derive(Debug)]
struct Paths {
    /// The path MTU the last connection from each address ended with, if above
    /// [`BASE_MTU`].
    found: RwLock<BTreeMap<IpAddr, u16>>,
    configs: RwLock<Configs>,
    /// Handshakes started at a remembered path MTU.
    started_at_found: AtomicU64,
}

/// The endpoint's server configuration, and one copy of it per remembered MTU that
/// starts connections there (a handful: paths differ little in size).
#[derive(Debug)]
struct Configs {
    base: quinn::ServerConfig,
    starting_at: Vec<(u16, Arc<quinn::ServerConfig>)>,
}

impl QuicListener {
    /// `endpoint` serving with `server` (the configuration it was built with).
    pub fn new(endpoint: Endpoint, server: quinn::ServerConfig) -> Self {
        QuicListener {
            endpoint,
            paths: Arc::new(Paths {
                found: RwLock::new(BTreeMap::new()),
                configs: RwLock::new(Configs {
                    base: server,
                    starting_at: Vec::new(),
                }),
                started_at_found: AtomicU64::new(0),
            }),
        }
    }

    /// The endpoint itself.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Serves new connections with `server` (a renewed certificate); connections
    /// already open keep theirs.
    pub fn set_server_config(&self, server: quinn::ServerConfig) {
        self.endpoint.set_server_config(Some(server.clone()));
        let mut configs = self
            .paths
            .configs
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *configs = Configs {
            base: server,
            starting_at: Vec::new(),
        };
    }

    /// The next incoming connection; `None` once the endpoint is closed.
    pub async fn accept(&self) -> Option<Incoming> {
        self.endpoint.accept().await
    }

    /// Accepts `incoming`, starting at the path MTU remembered for its address, if
    /// any; the handshake's outcome.
    pub async fn handshake(
        &self,
        incoming: Incoming,
    ) -> Result<Connection, quinn::ConnectionError> {
        let peer = incoming.remote_address().ip();
        let connecting = match self.remembered(peer) {
            Some(mtu) => {
                self.paths.started_at_found.fetch_add(1, Ordering::Relaxed);
                incoming.accept_with(self.config_starting_at(mtu))
            }
            None => incoming.accept(),
        };
        let result = match connecting {
            Ok(c) => c.await,
            Err(e) => Err(e),
        };
        if result.is_err() {
            // Perhaps the path shrank: the next attempt searches from the start.
            self.forget(peer);
        }
        result
    }

    /// Remembers the path MTU `conn` found (call it when the connection ends).
    pub fn remember(&self, conn: &Connection) {
        let mtu = conn.stats().path.current_mtu;
        let peer = conn.remote_address().ip();
        if mtu <= BASE_MTU {
            self.forget(peer);
            return;
        }
        let mut found = self.paths.found.write().unwrap_or_else(|p| p.into_inner());
        if found.len() < REMEMBERED || found.contains_key(&peer) {
            found.insert(peer, mtu);
        }
    }

    /// Handshakes started at a remembered path MTU so far.
    pub fn started_at_remembered_mtu(&self) -> u64 {
        self.paths.started_at_found.load(Ordering::Relaxed)
    }

    /// The path MTU remembered for `peer`, if any.
    pub fn remembered(&self, peer: IpAddr) -> Option<u16> {
        let found = self.paths.found.read().unwrap_or_else(|p| p.into_inner());
        found.get(&peer).copied()
    }

    fn forget(&self, peer: IpAddr) {
        let mut found = self.paths.found.write().unwrap_or_else(|p| p.into_inner());
        found.remove(&peer);
    }

    /// The server configuration whose connections start at `mtu`.
    fn config_starting_at(&self, mtu: u16) -> Arc<quinn::ServerConfig> {
        {
            let configs = self.paths.configs.read().unwrap_or_else(|p| p.into_inner());
            if let Some((_, c)) = configs.starting_at.iter().find(|(m, _)| *m == mtu) {
                return c.clone();
            }
        }
        let mut configs = self
            .paths
            .configs
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if let Some((_, c)) = configs.starting_at.iter().find(|(m, _)| *m == mtu) {
            return c.clone();
        }
        let mut server = configs.base.clone();
        server.transport_config(super::quic_config::parent_transport_starting_at(mtu));
        let server = Arc::new(server);
        configs.starting_at.push((mtu, server.clone()));
        server
    }
}
