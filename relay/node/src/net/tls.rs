//! Mutual TLS for the links between nodes: rustls with the ring provider only.
//!
//! A parent requires a client certificate chaining to the hierarchy's CA and learns the
//! child's node name from it ([`peer_node_name`]); a child checks that the parent's
//! certificate names the parent it meant to reach.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use strata_topology::certs::Ca;

/// The ALPN protocol of node links.
pub const ALPN: &[u8] = b"strata/1";

/// Why TLS could not be set up, or a peer could not be identified: the file or node at
/// fault, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the file or node at fault and what is wrong
pub enum TlsError {
    /// A PEM file is missing or unusable.
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Config(String),
    /// The peer presented no usable certificate.
    #[error("peer certificate: {0}")]
    Peer(String),
    /// A certificate could not be issued (see [`Identity::issue`]).
    #[error("certificate for {node}: {reason}")]
    Issue { node: String, reason: String },
}

/// Where TLS reads the time that certificates' validity is checked against: the
/// system's clock unless a configuration is given one (the simulation gives its
/// virtual time).
pub type TlsTime = Arc<dyn rustls::time_provider::TimeProvider>;

/// This node's certificate chain, key, and the CA it trusts; and, if not the system's,
/// the clock its TLS configurations check validity against.
#[derive(Debug)]
pub struct Identity {
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: RootCertStore,
    time: Option<TlsTime>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
            roots: self.roots.clone(),
            time: self.time.clone(),
        }
    }
}

fn file_err(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

impl Identity {
    /// Loads PEM files: the node's certificate (chain), its private key, the CA (one
    /// or several CA certificates: a trust bundle). A renewal interrupted while it
    /// replaced the files is finished or undone first ([`super::cert_files::settle_files`]).
    pub fn load(cert: &Path, key: &Path, ca: &Path) -> Result<Identity, TlsError> {
        super::cert_files::settle_files(cert, key)
            .map_err(|e| file_err(cert, format!("cannot finish an interrupted renewal: {e}")))?;
        let read =
            |p: &Path| std::fs::read(p).map_err(|e| file_err(p, format!("cannot read: {e}")));
        let (c, k, a) = (read(cert)?, read(key)?, read(ca)?);
        Self::from_pem(&c, &k, &a).map_err(|(which, reason)| match which {
            0 => file_err(cert, reason),
            1 => file_err(key, reason),
            _ => file_err(ca, reason),
        })
    }

    /// Builds an identity from PEM bytes. The error says which input (0 = certificate,
    /// 1 = key, 2 = CA) is at fault.
    pub fn from_pem(cert: &[u8], key: &[u8], ca: &[u8]) -> Result<Identity, (u8, String)> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| (0, format!("not a PEM certificate: {e}")))?;
        if certs.is_empty() {
            return Err((0, "holds no certificate".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| (1, format!("not a PEM private key: {e}")))?;
        let mut roots = RootCertStore::empty();
        let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(ca)
            .collect::<Result<_, _>>()
            .map_err(|e| (2, format!("not a PEM certificate: {e}")))?;
        if cas.is_empty() {
            return Err((2, "holds no CA certificate".into()));
        }
        for c in cas {
            roots
                .add(c)
                .map_err(|e| (2, format!("unusable CA certificate: {e}")))?;
        }
        Ok(Identity {
            certs,
            key,
            roots,
            time: None,
        })
    }

    /// The same identity, its TLS configurations checking certificates' validity
    /// against `time` (`None`: the system's clock).
    pub fn with_time(mut self, time: Option<TlsTime>) -> Identity {
        self.time = time;
        self
    }

    /// The clock this identity's TLS configurations check validity against, if not
    /// the system's.
    pub fn time(&self) -> Option<TlsTime> {
        self.time.clone()
    }

    /// A new key and a certificate naming `node`, issued by `ca`, trusting `ca`: held in
    /// memory, for tests and the benchmark, which make a whole hierarchy in one process.
    pub fn issue(ca: &Ca, node: &str) -> Result<Identity, TlsError> {
        let issue_err = |reason: String| TlsError::Issue {
            node: node.to_owned(),
            reason,
        };
        let cert = ca.issue(node).map_err(|e| issue_err(e.to_string()))?;
        Self::from_pem(
            cert.cert_pem.as_bytes(),
            cert.key_pem.as_bytes(),
            ca.cert_pem().as_bytes(),
        )
        .map_err(|(_, reason)| issue_err(reason))
    }
}

impl Identity {
    /// Checks a chain this node was given (a renewal) before it is used: it verifies
    /// against the CAs this identity trusts, for client authentication, now, and its
    /// leaf names `node`.
    pub fn check_chain(&self, node: &str) -> Result<(), TlsError> {
        let (leaf, intermediates) = self
            .certs
            .split_first()
            .ok_or_else(|| TlsError::Peer("empty certificate chain".into()))?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots.clone()), provider())
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
        let now = self
            .time
            .as_ref()
            .and_then(|t| t.current_time())
            .unwrap_or_else(rustls_pki_types::UnixTime::now);
        verifier
            .verify_client_cert(leaf, intermediates, now)
            .map_err(|e| TlsError::Peer(format!("the chain does not verify: {e}")))?;
        let named = peer_node_name_in(&self.certs)?;
        if named != node {
            return Err(TlsError::Peer(format!(
                "the certificate names {named:?}, not {node:?}"
            )));
        }
        Ok(())
    }
}

/// The one cryptography provider of every TLS configuration: ring.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration builder reading the time from `time` (or the system).
fn server_builder(
    time: Option<&TlsTime>,
) -> rustls::ConfigBuilder<rustls::ServerConfig, rustls::WantsVersions> {
    match time {
        Some(t) => rustls::ServerConfig::builder_with_details(provider(), t.clone()),
        None => rustls::ServerConfig::builder_with_provider(provider()),
    }
}

/// A client configuration builder reading the time from `time` (or the system).
fn client_builder(
    time: Option<&TlsTime>,
) -> rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVersions> {
    match time {
        Some(t) => rustls::ClientConfig::builder_with_details(provider(), t.clone()),
        None => rustls::ClientConfig::builder_with_provider(provider()),
    }
}

/// TLS for a node's listener: TLS 1.3, client certificates required and verified
/// against the CA.
pub fn server_config(id: &Identity) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    server_config_with(id, false)
}

fn server_config_with(
    id: &Identity,
    allow_unauthenticated: bool,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(id.roots.clone()), provider());
    let builder = if allow_unauthenticated {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    let verifier = builder
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let mut config = server_builder(id.time.as_ref())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(id.certs.clone(), id.key.clone_key())
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// TLS for the listener of a relay that admits agents joining with a token: like
/// [`server_config`], but a client may also connect without a certificate. Such a
/// connection names no node; the relay lets it do one join exchange and nothing else.
/// A certificate that is presented is still verified against the CA.
pub fn server_config_admitting_joins(id: &Identity) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    server_config_with(id, true)
}

/// TLS for an agent joining a relay: the relay verified against the CA (PEM file), no
/// client certificate (the agent has none yet).
pub fn join_client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    join_client_config_with(ca, None)
}

/// [`join_client_config`], checking the relay's certificate against `time` (`None`:
/// the system's clock).
pub fn join_client_config_with(
    ca: &Path,
    time: Option<TlsTime>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut config = client_builder(time.as_ref())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots_from(ca)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// The certificates the peer presented (leaf first); `None` when it presented none.
pub fn peer_chain(conn: &quinn::Connection) -> Option<Vec<CertificateDer<'static>>> {
    conn.peer_identity()?
        .downcast::<Vec<CertificateDer<'static>>>()
        .ok()
        .map(|c| *c)
}

/// TLS for a node's link to its parent: TLS 1.3, the parent verified against the CA,
/// our certificate presented.
pub fn client_config(id: &Identity) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut config = client_builder(id.time.as_ref())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(id.roots.clone())
        .with_client_auth_cert(id.certs.clone(), id.key.clone_key())
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    // A child resumes sessions with its parent and the few relays it may fail over to:
    // rustls' default cache (256 servers) preallocated ~14 KiB per node for names it
    // never dials, 140 MiB over 10,000 agents in one process.
    config.resumption = rustls::client::Resumption::in_memory_sessions(RESUMPTION_SERVERS);
    Ok(Arc::new(config))
}

/// How many servers' sessions a node's client keeps for resumption: its parent and
/// the candidates it fails over to.
const RESUMPTION_SERVERS: usize = 8;

/// The node name in the peer's (already verified) certificate: its first DNS name.
pub fn peer_node_name(conn: &quinn::Connection) -> Result<String, TlsError> {
    let identity = conn
        .peer_identity()
        .ok_or_else(|| TlsError::Peer("the peer presented no certificate".into()))?;
    let certs = identity
        .downcast::<Vec<CertificateDer<'static>>>()
        .map_err(|_| TlsError::Peer("unexpected peer identity type".into()))?;
    peer_node_name_in(&certs)
}

/// The node name in a (verified) certificate chain, leaf first: the leaf's first DNS
/// name. Whichever transport brought the chain.
pub fn peer_node_name_in(certs: &[CertificateDer<'static>]) -> Result<String, TlsError> {
    let leaf = certs
        .first()
        .ok_or_else(|| TlsError::Peer("empty certificate chain".into()))?;
    let cert = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| TlsError::Peer(format!("unparsable certificate: {e}")))?;
    cert.valid_dns_names()
        .next()
        .map(str::to_owned)
        .ok_or_else(|| TlsError::Peer("the certificate names no node (no DNS name)".into()))
}

/// TLS for the root's user API: the root's certificate, no client certificate asked
/// (clients authenticate with bearer tokens), HTTP/2 or HTTP/1.1.
pub fn api_server_config(id: &Identity) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    api_server_config_for_users(id, None)
}

/// [`api_server_config`] that also asks clients for a certificate (as kube-apiserver's
/// `--client-ca-file`): one that is presented must chain to a CA of the PEM file
/// `user_ca` (and is then the user's identity); a client without one is still served
/// (it authenticates with a bearer token).
pub fn api_server_config_for_users(
    id: &Identity,
    user_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let builder = server_builder(id.time.as_ref())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match user_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots_from(ca)?), provider())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| file_err(ca, format!("unusable as a client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(id.certs.clone(), id.key.clone_key())
        .map_err(|e| TlsError::Config(e.to_string()))?;
    // HTTP/2 first, as client-go prefers it; HTTP/1.1 for the upgrades (exec, attach,
    // port-forward) and older clients.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// TLS for API clients: the root verified against the CA, no client certificate.
pub fn api_client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    api_client_config_with(roots_from(ca)?)
}

/// [`api_client_config`] with the CA as PEM (a kubeconfig's
/// `certificate-authority-data`); `what` names where it came from in errors.
pub fn api_client_config_pem(
    pem: &[u8],
    what: &Path,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    api_client_config_with(roots_in(pem, what)?)
}

/// [`api_client_config_pem`] that presents a client certificate: `cert_pem` (a chain)
/// and `key_pem`, a kubeconfig user's `client-certificate(-data)` and
/// `client-key(-data)` (for a root whose `api.client_certificates` trusts its CA);
/// `what` names the kubeconfig in errors.
pub fn api_client_config_pem_with_certificate(
    ca_pem: &[u8],
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &Path,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(what, format!("client certificate: not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(file_err(what, "client certificate: holds no certificate"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| file_err(what, format!("client key: not a PEM private key: {e}")))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots_in(ca_pem, what)?)
        .with_client_auth_cert(certs, key)
        .map_err(|e| file_err(what, format!("client certificate and key: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn api_client_config_with(roots: RootCertStore) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn roots_from(ca: &Path) -> Result<RootCertStore, TlsError> {
    let pem = std::fs::read(ca).map_err(|e| file_err(ca, format!("cannot read: {e}")))?;
    roots_in(&pem, ca)
}

fn roots_in(pem: &[u8], ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        let c = c.map_err(|e| file_err(ca, format!("not a PEM certificate: {e}")))?;
        roots
            .add(c)
            .map_err(|e| file_err(ca, format!("unusable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(file_err(ca, "holds no CA certificate"));
    }
    Ok(roots)
}
