//! Agents that are not in the topology join a relay with a single-use token.
//!
//! A relay configured with `join:` accepts QUIC connections without a client
//! certificate (and only such a relay does). Such a connection names no node and may do
//! exactly one exchange: the agent sends a [`JoinRequest`] (its token, the cluster name
//! it wants and a certificate signing request for its own key) on one unidirectional
//! stream; the relay answers with a [`JoinReply`] on another and the connection ends.
//! Anything else closes it with [`close_code::PROTOCOL`].
//!
//! The relay grants a request when the token is one of its tokens and unused, and the
//! name is free (not the relay, its parent, a configured child or an agent that joined
//! before). It then records the used token and the new child in its store in one
//! durable commit *before* answering, so a token works once even across restarts and
//! the agent is admitted after a restart. Tokens are kept by their SHA-256 only.
//!
//! The agent's certificate is signed by the relay's join CA (an intermediate of the
//! hierarchy's CA with path length 0). A certificate chain with an intermediate is
//! accepted on a node link only when that intermediate is this relay's own join CA
//! ([`chain_allowed`]): an agent that joined one relay cannot pose as a node elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quinn::{Connection, VarInt};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use strata_protocol::codec;
use strata_protocol::wire::{JoinReply, JoinRequest};

use crate::certs::Ca;
use crate::config::{JoinFiles, check_node_name};
use crate::node::core::NodeCore;
use crate::store::{Batch, Store};
use crate::tls;
use crate::transport::{self, close_code};

/// The largest join request or reply accepted, in bytes.
const MAX_JOIN_FRAME: usize = 64 * 1024;
/// How long either side waits for the other's message.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a relay cannot admit agents by token: a `join:` file is unusable.
#[derive(Debug, thiserror::Error)]
#[error("join.{field}: {path}: {reason}")]
pub struct JoinSetupError {
    /// The configuration field (`tokens`, `ca_cert`, `ca_key`).
    pub field: &'static str,
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub reason: String,
}

/// What a relay admits joining agents with: its tokens and its join CA.
pub struct Joining {
    relay: String,
    /// SHA-256 (hex) of every token.
    tokens: BTreeSet<String>,
    ca: Ca,
    ca_der: Vec<u8>,
}

impl std::fmt::Debug for Joining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Joining")
            .field("relay", &self.relay)
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

/// A token's id: its SHA-256 in hex (what the store keeps).
pub fn token_id(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.trim().as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

impl Joining {
    /// Loads the tokens file (one token per line) and the join CA of relay `relay`.
    pub fn load(relay: &str, files: &JoinFiles) -> Result<Joining, JoinSetupError> {
        let err = |field: &'static str, path: &Path, reason: String| JoinSetupError {
            field,
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(&files.tokens)
            .map_err(|e| err("tokens", &files.tokens, format!("cannot read: {e}")))?;
        let tokens: BTreeSet<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(token_id)
            .collect();
        if tokens.is_empty() {
            return Err(err("tokens", &files.tokens, "holds no token".into()));
        }
        for (field, path) in [("ca_cert", &files.ca_cert), ("ca_key", &files.ca_key)] {
            if let Err(e) = std::fs::metadata(path) {
                return Err(err(field, path, format!("cannot read: {e}")));
            }
        }
        let ca = Ca::load_join_ca(&files.ca_cert, &files.ca_key)
            .map_err(|e| err("ca_cert", &files.ca_cert, e.to_string()))?;
        let ca_der = CertificateDer::from_pem_slice(ca.cert_pem().as_bytes())
            .map_err(|e| {
                err(
                    "ca_cert",
                    &files.ca_cert,
                    format!("not a PEM certificate: {e}"),
                )
            })?
            .to_vec();
        Ok(Joining {
            relay: relay.to_owned(),
            tokens,
            ca,
            ca_der,
        })
    }
}

/// Whether a verified peer chain (leaf first) may be used on this node's links: every
/// certificate after the leaf must be this node's join CA (none when it admits no
/// joining agents). Node certificates come straight from the hierarchy's CA.
pub fn chain_allowed(chain: &[CertificateDer<'_>], joining: Option<&Joining>) -> bool {
    chain
        .iter()
        .skip(1)
        .all(|c| joining.is_some_and(|j| c.as_ref() == j.ca_der.as_slice()))
}

/// The admissions a relay has made, kept by its core task; see the module docs.
pub struct Admissions {
    joining: Arc<Joining>,
    parent: Option<String>,
    store: Arc<dyn Store>,
    /// Token id -> the name that joined with it.
    used: BTreeMap<String, String>,
}

impl std::fmt::Debug for Admissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admissions")
            .field("joining", &self.joining)
            .field("used", &self.used.len())
            .finish_non_exhaustive()
    }
}

impl Admissions {
    /// The admissions restored from the store (`joined`: token id -> name).
    pub fn new(
        joining: Arc<Joining>,
        parent: Option<String>,
        store: Arc<dyn Store>,
        joined: BTreeMap<String, String>,
    ) -> Admissions {
        Admissions {
            joining,
            parent,
            store,
            used: joined,
        }
    }

    /// Decides a request, records a grant durably, admits the new child into `core`,
    /// and returns the answer. Blocks on the store commit.
    pub fn admit(&mut self, core: &mut NodeCore, request: &JoinRequest) -> JoinReply {
        let relay = self.joining.relay.clone();
        let refuse = |reason: String| JoinReply::Refused {
            relay: relay.clone(),
            reason,
        };
        let id = token_id(&request.token);
        if !self.joining.tokens.contains(&id) {
            return refuse("unknown join token".into());
        }
        if let Some(who) = self.used.get(&id) {
            return refuse(format!("the join token was already used (by {who:?})"));
        }
        let name = request.cluster.as_str();
        if let Err(why) = check_node_name(name) {
            return refuse(why);
        }
        if name == relay || self.parent.as_deref() == Some(name) || core.is_allowed_child(name) {
            return refuse(format!("the name {name:?} is already taken here"));
        }
        let chain = match self.joining.ca.issue_for_csr(name, &request.csr_pem) {
            Ok(c) => c,
            Err(e) => return refuse(format!("unusable certificate signing request: {e}")),
        };
        let batch = Batch {
            joined: vec![(id.clone(), name.to_owned())],
            ..Batch::default()
        };
        if let Err(e) = tokio::task::block_in_place(|| self.store.commit(&batch)) {
            return refuse(format!("cannot record the join ({e}); try again later"));
        }
        self.used.insert(id, name.to_owned());
        core.admit_child(name);
        tracing::info!(child = %name, "admitted an agent by join token");
        JoinReply::Granted { chain_pem: chain }
    }
}

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

/// Why an agent could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The relay refused.
    #[error("relay {relay:?} refused to admit {cluster:?}: {reason}")]
    Refused {
        /// The relay.
        relay: String,
        /// The cluster name asked for.
        cluster: String,
        /// The relay's reason.
        reason: String,
    },
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The key or request could not be generated.
    #[error(transparent)]
    Cert(#[from] crate::certs::CertError),
    /// The exchange failed.
    #[error("joining relay {relay:?} at {addr}: {detail}")]
    Exchange {
        /// The relay.
        relay: String,
        /// Its address.
        addr: SocketAddr,
        /// What went wrong.
        detail: String,
    },
}

/// What an agent got by joining: its key and certificate chain (PEM).
#[derive(Debug, Clone)]
pub struct Joined {
    /// The private key.
    pub key_pem: String,
    /// Leaf, then the relay's join CA.
    pub chain_pem: String,
}

/// Joins relay `relay` at `addr` (its certificate checked against the CA in `ca`) as
/// `cluster` with `token`: a new key, a request, the relay's answer.
pub async fn join(
    relay: &str,
    addr: SocketAddr,
    ca: &Path,
    cluster: &str,
    token: &str,
) -> Result<Joined, JoinError> {
    let (key_pem, csr_pem) = crate::certs::join_request(cluster)?;
    let exchange = |detail: String| JoinError::Exchange {
        relay: relay.to_owned(),
        addr,
        detail,
    };
    let bind: SocketAddr = if addr.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let endpoint = transport::client_endpoint(bind, tls::join_client_config(ca)?)
        .map_err(|e| exchange(e.to_string()))?;
    let conn = transport::connect(&endpoint, addr, relay)
        .await
        .map_err(|e| exchange(e.to_string()))?;
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
    endpoint.wait_idle().await;
    let reply = match codec::decode::<JoinReply>(&bytes, MAX_JOIN_FRAME) {
        Ok(Some((reply, _))) => reply,
        Ok(None) => return Err(exchange("a truncated answer".into())),
        Err(e) => return Err(exchange(format!("an unreadable answer: {e}"))),
    };
    match reply {
        JoinReply::Granted { chain_pem } => Ok(Joined { key_pem, chain_pem }),
        JoinReply::Refused { relay, reason } => Err(JoinError::Refused {
            relay,
            cluster: cluster.to_owned(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_join_files_are_named_with_their_field() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let files = JoinFiles {
            tokens: d.join("eu.tokens"),
            ca_cert: d.join("eu.ca.crt"),
            ca_key: d.join("eu.ca.key"),
        };
        let err = Joining::load("eu", &files).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "join.tokens: {}: cannot read",
                files.tokens.display()
            )),
            "{err}"
        );
        std::fs::write(&files.tokens, "\n  \n").unwrap();
        let err = Joining::load("eu", &files).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("join.tokens: {}: holds no token", files.tokens.display())
        );
        std::fs::write(&files.tokens, "t1\n").unwrap();
        let ca = Ca::generate("test").unwrap().issue_join_ca("eu").unwrap();
        std::fs::write(&files.ca_cert, ca.cert_pem()).unwrap();
        let err = Joining::load("eu", &files).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "join.ca_key: {}: cannot read",
                files.ca_key.display()
            )),
            "{err}"
        );
        std::fs::write(&files.ca_key, ca.key_pem()).unwrap();
        let joining = Joining::load("eu", &files).unwrap();
        assert!(joining.tokens.contains(&token_id("t1")));
    }
}
