//! The wire of the join exchange, both ends: an agent that is not in the topology
//! joins a relay with a single-use token ([`join_parent`], over the transport and
//! proxy of its `parent:` configuration; [`join`] over QUIC to one address); the relay
//! reads the request and answers ([`JoinConnection`]). What the relay decides lives
//! with the relay (`strata_relay::join`).
//!
//! Such a connection carries no client certificate and exactly one exchange: the agent
//! sends a [`JoinRequest`], the relay answers with a [`JoinReply`] and the connection
//! ends. Over QUIC each travels on a unidirectional stream of its own; over TLS/TCP
//! (directly or through an HTTP CONNECT proxy) each is a message on the link's control
//! stream. Anything else closes it with [`close_code::PROTOCOL`].

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use quinn::{Connection, VarInt};
use strata_protocol::codec;
use strata_protocol::wire::{JoinReply, JoinRequest};

use crate::config::{ConnectorError, ParentConfig};
use crate::net::dial::DialError;
use crate::net::link::Link;
use crate::net::tls;
use crate::net::transport::{self, close_code};

/// The largest join request or reply accepted, in bytes.
const MAX_JOIN_FRAME: usize = 64 * 1024;
/// How long either side waits for the other's message.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the one join request of a connection without a client certificate. Anything
/// else closes the connection with [`close_code::PROTOCOL`] and a reason saying so.
pub async fn read_request(conn: &Connection) -> Option<JoinRequest> {
    let refuse = |detail: &str| {
        let reason = format!("a connection without a client certificate may only join: {detail}");
        tracing::info!(remote = %conn.remote_address(), %reason, "closing an unauthenticated connection");
        conn.close(VarInt::from_u32(close_code::PROTOCOL), reason.as_bytes());
        None
    };
    let read = async {
        let mut stream = conn.accept_uni().await.map_err(|e| e.to_string())?;
        stream
            .read_to_end(MAX_JOIN_FRAME)
            .await
            .map_err(|e| e.to_string())
    };
    let bytes = match tokio::time::timeout(EXCHANGE_TIMEOUT, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return refuse(&e),
        Err(_) => return refuse("no join request in time"),
    };
    match codec::decode::<JoinRequest>(&bytes, MAX_JOIN_FRAME) {
        Ok(Some((request, used))) if used == bytes.len() => Some(request),
        Ok(_) => refuse("not a join request"),
        Err(e) => refuse(&format!("not a join request ({e})")),
    }
}

/// Sends the answer, waits (boundedly) for the agent to read it and close, and closes.
pub async fn send_reply(conn: Connection, reply: &JoinReply) {
    let mut buf = Vec::new();
    if codec::encode(reply, MAX_JOIN_FRAME, &mut buf).is_ok()
        && let Ok(mut s) = conn.open_uni().await
        && s.write_all(&buf).await.is_ok()
        && s.finish().is_ok()
    {
        let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, conn.closed()).await;
    }
    conn.close(VarInt::from_u32(0), b"join exchange done");
}

/// A connection without a client certificate at a relay that admits joins: one join
/// exchange, over QUIC (unidirectional streams) or TLS/TCP (control messages).
#[derive(Debug)]
pub enum JoinConnection {
    /// Over QUIC.
    Quic(Connection),
    /// Over TLS/TCP, split into its halves.
    Tcp {
        /// The link.
        link: Link,
        /// Where the answer goes.
        sender: transport::Sender<JoinReply>,
        /// Where the request comes from.
        receiver: transport::Receiver<JoinRequest>,
    },
}

impl JoinConnection {
    /// The exchange on `link`.
    pub fn new(link: Link) -> JoinConnection {
        match link {
            Link::Quic(conn) => JoinConnection::Quic(conn),
            tcp @ Link::Tcp(_) => {
                let (sender, receiver) = transport::split(tcp.clone(), MAX_JOIN_FRAME);
                JoinConnection::Tcp {
                    link: tcp,
                    sender,
                    receiver,
                }
            }
        }
    }

    /// The agent's address (a proxy's, through a proxy).
    pub fn remote_address(&self) -> SocketAddr {
        match self {
            JoinConnection::Quic(conn) => conn.remote_address(),
            JoinConnection::Tcp { link, .. } => link.remote_address(),
        }
    }

    /// Reads the one join request; anything else (or nothing in time) closes the
    /// connection with [`close_code::PROTOCOL`] and a reason saying so.
    pub async fn read_request(&mut self) -> Option<JoinRequest> {
        let (link, receiver) = match self {
            JoinConnection::Quic(conn) => return read_request(conn).await,
            JoinConnection::Tcp { link, receiver, .. } => (link, receiver),
        };
        let detail = match tokio::time::timeout(EXCHANGE_TIMEOUT, receiver.recv()).await {
            Ok(Ok(request)) => return Some(request),
            Ok(Err(e)) => format!("not a join request ({e})"),
            Err(_) => "no join request in time".to_owned(),
        };
        let reason = format!("a connection without a client certificate may only join: {detail}");
        tracing::info!(remote = %link.remote_address(), %reason, "closing an unauthenticated TLS/TCP connection");
        link.close(close_code::PROTOCOL, reason.as_bytes());
        None
    }

    /// Sends the answer, waits (boundedly) for the agent to close, and closes.
    pub async fn send_reply(self, reply: &JoinReply) {
        match self {
            JoinConnection::Quic(conn) => send_reply(conn, reply).await,
            JoinConnection::Tcp { link, sender, .. } => {
                if sender.send(reply.clone()).is_ok() {
                    let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, link.closed()).await;
                }
                link.close(0, b"join exchange done");
            }
        }
    }
}

/// Why an agent could not join. A refusal names the relay, the cluster name asked for
/// and the relay's reason; a failed exchange names the relay, its address and what went
/// wrong.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are named in the type's doc
pub enum JoinError {
    /// The relay refused.
    #[error("relay {relay:?} refused to admit {cluster:?}: {reason}")]
    Refused {
        relay: String,
        cluster: String,
        reason: String,
    },
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The key or request could not be generated.
    #[error(transparent)]
    Cert(#[from] strata_topology::certs::CertError),
    /// The exchange failed.
    #[error("joining relay {relay:?} at {addr}: {detail}")]
    Exchange {
        relay: String,
        addr: SocketAddr,
        detail: String,
    },
    /// The connector to the relay could not be set up (TLS files, `HTTPS_PROXY`).
    #[error("joining relay {relay:?}: {source}")]
    Connector {
        relay: String,
        source: ConnectorError,
    },
    /// The relay could not be reached, over any transport its configuration allows.
    #[error("joining: {0}")]
    Dial(#[from] DialError),
}

/// What an agent got by joining: its key and certificate chain (PEM).
#[derive(Debug, Clone)]
pub struct Joined {
    /// The private key.
    pub key_pem: String,
    /// Leaf, then the relay's join CA.
    pub chain_pem: String,
}

/// Joins the relay `parent` names as `cluster` with `token` (the relay's certificate
/// checked against the CA in `ca`), over the transport its configuration says: QUIC,
/// TLS over TCP (through its proxy, or the one `HTTPS_PROXY` names unless `NO_PROXY`
/// exempts the relay), or `auto` (QUIC for a few seconds, then TLS/TCP).
pub async fn join_parent(
    parent: &ParentConfig,
    ca: &Path,
    cluster: &str,
    token: &str,
) -> Result<Joined, JoinError> {
    let relay = parent.name.as_str();
    let request = strata_topology::certs::join_request(cluster)?;
    let connector = parent
        .join_connector(ca)
        .map_err(|source| JoinError::Connector {
            relay: relay.to_owned(),
            source,
        })?;
    let mut auto = crate::reconnect::AutoState::default();
    let link = crate::reconnect::dial(&connector, &parent.address, relay, &mut auto).await?;
    tracing::info!(%relay, transport = %link.kind(), remote = %link.remote_address(), "joining");
    match link {
        Link::Quic(conn) => {
            let joined = exchange_quic(&conn, relay, cluster, token, request).await;
            if let Some(endpoint) = connector.quic_endpoint() {
                endpoint.wait_idle().await;
            }
            joined
        }
        tcp @ Link::Tcp(_) => exchange_tcp(tcp, relay, cluster, token, request).await,
    }
}

/// Joins relay `relay` at `addr` over QUIC (its certificate checked against the CA in
/// `ca`) as `cluster` with `token`: a new key, a request, the relay's answer.
pub async fn join(
    relay: &str,
    addr: SocketAddr,
    ca: &Path,
    cluster: &str,
    token: &str,
) -> Result<Joined, JoinError> {
    let request = strata_topology::certs::join_request(cluster)?;
    let bind: SocketAddr = if addr.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let endpoint = transport::client_endpoint(bind, tls::join_client_config(ca)?).map_err(|e| {
        JoinError::Exchange {
            relay: relay.to_owned(),
            addr,
            detail: e.to_string(),
        }
    })?;
    join_on(&endpoint, relay, addr, cluster, token, request).await
}

/// The join exchange of [`join`] over `endpoint`, whose default client configuration
/// is a join configuration ([`tls::join_client_config`]), for the key and certificate
/// signing request of `request` (key PEM, request PEM, from
/// [`strata_topology::certs::join_request`]). The simulation joins this way, over its
/// own network.
pub async fn join_on(
    endpoint: &quinn::Endpoint,
    relay: &str,
    addr: SocketAddr,
    cluster: &str,
    token: &str,
    request: (String, String),
) -> Result<Joined, JoinError> {
    let conn = transport::connect(endpoint, addr, relay)
        .await
        .map_err(|e| JoinError::Exchange {
            relay: relay.to_owned(),
            addr,
            detail: e.to_string(),
        })?;
    let joined = exchange_quic(&conn, relay, cluster, token, request).await;
    endpoint.wait_idle().await;
    joined
}

/// The agent's side of the exchange on a QUIC connection: the request on one
/// unidirectional stream, the answer on another.
async fn exchange_quic(
    conn: &Connection,
    relay: &str,
    cluster: &str,
    token: &str,
    request: (String, String),
) -> Result<Joined, JoinError> {
    let (key_pem, csr_pem) = request;
    let addr = conn.remote_address();
    let exchange = |detail: String| JoinError::Exchange {
        relay: relay.to_owned(),
        addr,
        detail,
    };
    let request = JoinRequest {
        cluster: cluster.to_owned(),
        token: token.trim().to_owned(),
        csr_pem,
    };
    let mut buf = Vec::new();
    codec::encode(&request, MAX_JOIN_FRAME, &mut buf).map_err(|e| exchange(e.to_string()))?;
    let talk = async {
        let mut s = conn.open_uni().await.map_err(|e| e.to_string())?;
        s.write_all(&buf).await.map_err(|e| e.to_string())?;
        s.finish().map_err(|e| e.to_string())?;
        let mut r = conn.accept_uni().await.map_err(|e| e.to_string())?;
        r.read_to_end(MAX_JOIN_FRAME)
            .await
            .map_err(|e| e.to_string())
    };
    let bytes = tokio::time::timeout(EXCHANGE_TIMEOUT, talk)
        .await
        .map_err(|_| exchange("no answer in time".into()))?
        .map_err(exchange)?;
    conn.close(VarInt::from_u32(0), b"joined");
    let reply = match codec::decode::<JoinReply>(&bytes, MAX_JOIN_FRAME) {
        Ok(Some((reply, _))) => reply,
        Ok(None) => return Err(exchange("a truncated answer".into())),
        Err(e) => return Err(exchange(format!("an unreadable answer: {e}"))),
    };
    granted(reply, key_pem, cluster)
}

/// The agent's side of the exchange on a TLS/TCP link: the request and the answer as
/// messages of the control stream.
async fn exchange_tcp(
    link: Link,
    relay: &str,
    cluster: &str,
    token: &str,
    request: (String, String),
) -> Result<Joined, JoinError> {
    let (key_pem, csr_pem) = request;
    let exchange = |detail: String| JoinError::Exchange {
        relay: relay.to_owned(),
        addr: link.remote_address(),
        detail,
    };
    let (sender, mut receiver) =
        transport::split::<JoinRequest, JoinReply>(link.clone(), MAX_JOIN_FRAME);
    sender
        .send(JoinRequest {
            cluster: cluster.to_owned(),
            token: token.trim().to_owned(),
            csr_pem,
        })
        .map_err(|e| exchange(e.to_string()))?;
    let reply = tokio::time::timeout(EXCHANGE_TIMEOUT, receiver.recv())
        .await
        .map_err(|_| exchange("no answer in time".into()))?
        .map_err(|e| exchange(e.to_string()))?;
    link.close(0, b"joined");
    granted(reply, key_pem, cluster)
}

/// The agent's key and chain when the relay granted the request; its refusal else.
fn granted(reply: JoinReply, key_pem: String, cluster: &str) -> Result<Joined, JoinError> {
    match reply {
        JoinReply::Granted { chain_pem } => Ok(Joined { key_pem, chain_pem }),
        JoinReply::Refused { relay, reason } => Err(JoinError::Refused {
            relay,
            cluster: cluster.to_owned(),
            reason,
        }),
    }
}

impl Joined {
    /// Writes the key (readable by its owner only) and the certificate chain durably,
    /// as a renewal does ([`crate::renew::write_files`]), so that a certificate on disk
    /// always has its key.
    pub fn write(&self, key: &Path, cert: &Path) -> Result<(), strata_topology::certs::CertError> {
        crate::renew::write_files(cert, key, &self.chain_pem, &self.key_pem).map_err(|source| {
            strata_topology::certs::CertError::Io {
                path: cert.to_owned(),
                source,
            }
        })
    }
}
