//! The hierarchy's secrets, issued with rcgen: one CA, a certificate per node naming it
//! (common name and DNS subject alternative name), the root API's bearer token and the
//! single-use join tokens of `joining:` entries.
//!
//! Lifetimes: node certificates (and what a join CA signs) are valid for
//! [`Lifetimes::node_days`] (a year by default), the CA and join CAs for
//! [`Lifetimes::ca_days`] (ten years); the topology's `spec.certificates` changes both.
//! [`expiring`] lists what expires soon, for `relay topology certs` to warn about.
//!
//! [`issue_all`] is idempotent: what exists is kept, a missing certificate is issued for
//! an existing key, and no key is ever replaced unless `force` is set. It writes where
//! [`crate::files`] says (each node's files in its own directory) and refuses to give a
//! node the CA key: no node file is the CA key's path, and no node key is the CA's key.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::files::{self, ConfinementError, Holder};
use crate::names::check_node_name;

mod api;
mod expiry;
mod io;
mod renew;
use crate::Topology;
pub use api::api_sans;
pub use expiry::{Expiring, expiring, not_after, pem_not_after, unix_now, utc_date};
use io::read;
pub use io::{CertError, write, write_secret};
pub use renew::{RenewRefusal, chain_matches_key, pem_validity};

/// Node certificates are valid this many days unless the topology says otherwise.
pub const DEFAULT_NODE_DAYS: u32 = 365;
/// CA certificates are valid this many days unless the topology says otherwise.
pub const DEFAULT_CA_DAYS: u32 = 3650;
/// `relay topology certs` warns about certificates that expire within this many days.
pub const WARN_DAYS: u32 = 30;

/// How long issued certificates are valid (the topology's `spec.certificates`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// Node certificates, and the certificates join CAs sign for agents.
    pub node_days: u32,
    /// The CA and the join CAs.
    pub ca_days: u32,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            node_days: DEFAULT_NODE_DAYS,
            ca_days: DEFAULT_CA_DAYS,
        }
    }
}

/// Sets a certificate's validity: from an hour ago (clocks disagree a little) for
/// `days` days.
fn valid_for(params: &mut CertificateParams, days: u32) {
    valid_for_at(params, days, unix_now());
}

/// [`valid_for`] from `now` (Unix seconds) rather than the system's clock.
fn valid_for_at(params: &mut CertificateParams, days: u32, now: i64) {
    let now =
        time::OffsetDateTime::from_unix_timestamp(now).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// A certificate authority able to issue node certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    /// How long what it issues is valid.
    lifetimes: Lifetimes,
    /// The certificate as users hold it (kept byte for byte when loaded).
    pem: String,
    /// Certificates between this CA and the root (PEM), appended to what it issues.
    chain: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A node's certificate and key, in PEM.
#[derive(Debug, Clone)]
pub struct NodeCert {
    /// The node's name.
    pub name: String,
    /// Certificate (PEM).
    pub cert_pem: String,
    /// Private key (PEM, PKCS#8).
    pub key_pem: String,
}

impl Ca {
    /// A new self-signed CA for the hierarchy `name`, with the default lifetimes.
    pub fn generate(name: &str) -> Result<Ca, CertError> {
        Ca::generate_with(name, Lifetimes::default())
    }

    /// A new self-signed CA valid `lifetimes.ca_days`, issuing for `lifetimes`.
    pub fn generate_with(name: &str, lifetimes: Lifetimes) -> Result<Ca, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("{name} strata CA"));
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        valid_for(&mut params, lifetimes.ca_days);
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let pem = cert.pem();
        Ok(Ca {
            cert,
            key,
            lifetimes,
            pem,
            chain: String::new(),
        })
    }

    /// An existing CA from its certificate and key (PEM files).
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Ca, CertError> {
        let pem = read(cert_path)?;
        let key_pem = read(key_path)?;
        let bad = |path: &Path, e: rcgen::Error| CertError::BadFile {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let params = CertificateParams::from_ca_cert_pem(&pem).map_err(|e| bad(cert_path, e))?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| bad(key_path, e))?;
        // Signing needs an rcgen certificate: re-derive one with the same subject and key.
        // Issued certificates name the CA's subject and verify against the original.
        let cert = params.self_signed(&key).map_err(|e| bad(cert_path, e))?;
        Ok(Ca {
            cert,
            key,
            lifetimes: Lifetimes::default(),
            pem,
            chain: String::new(),
        })
    }

    /// The same CA, issuing for these lifetimes.
    pub fn with_lifetimes(mut self, lifetimes: Lifetimes) -> Ca {
        self.lifetimes = lifetimes;
        self
    }

    /// A CA that signs from its files: a self-signed one (the hierarchy's CA) as
    /// [`Ca::load`], an intermediate (a relay's join CA) as [`Ca::load_join_ca`], so that
    /// what it issues carries it as the chain's second certificate.
    pub fn load_signing(cert_path: &Path, key_path: &Path) -> Result<Ca, CertError> {
        let ca = Ca::load(cert_path, key_path)?;
        let self_signed = x509_parser::pem::parse_x509_pem(ca.pem.as_bytes())
            .ok()
            .and_then(|(_, block)| {
                let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).ok()?;
                Some(cert.issuer() == cert.subject())
            })
            .unwrap_or(true);
        Ok(if self_signed {
            ca
        } else {
            Ca {
                chain: ca.pem.clone(),
                ..ca
            }
        })
    }

    /// Whether what this CA issues chains through it (an intermediate).
    pub fn is_intermediate(&self) -> bool {
        !self.chain.is_empty()
    }

    /// A relay's join CA (issued by [`Ca::issue_join_ca`]) from its files: what it
    /// issues carries it as the chain's second certificate.
    pub fn load_join_ca(cert_path: &Path, key_path: &Path) -> Result<Ca, CertError> {
        let mut ca = Ca::load(cert_path, key_path)?;
        ca.chain = ca.pem.clone();
        Ok(ca)
    }

    /// Issues a certificate naming `node` for the public key of a certificate signing
    /// request (PEM). Nothing else of the request is used: the name, usages and validity
    /// are ours. Returns the chain (PEM): the certificate, then this CA's chain.
    pub fn issue_for_csr(&self, node: &str, csr_pem: &str) -> Result<String, CertError> {
        self.issue_for_csr_at(node, csr_pem, unix_now())
    }

    /// [`Ca::issue_for_csr`], valid from `now` (Unix seconds, the node's clock) rather
    /// than the system's clock.
    pub fn issue_for_csr_at(
        &self,
        node: &str,
        csr_pem: &str,
        now: i64,
    ) -> Result<String, CertError> {
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)?;
        let mut params = named(node, node.to_owned(), vec![node.to_owned()])?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        valid_for_at(&mut params, self.lifetimes.node_days, now);
        csr.params = params;
        let cert = csr.signed_by(&self.cert, &self.key)?;
        Ok(format!("{}{}", cert.pem(), self.chain))
    }

    /// The CA certificate (PEM), which every node trusts.
    pub fn cert_pem(&self) -> String {
        self.pem.clone()
    }

    /// The CA's private key (PEM).
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Issues a certificate naming `node`, usable to serve children and to connect to a
    /// parent, with a new key.
    pub fn issue(&self, node: &str) -> Result<NodeCert, CertError> {
        self.issue_for_key(node, KeyPair::generate()?)
    }

    fn issue_for_key(&self, node: &str, key: KeyPair) -> Result<NodeCert, CertError> {
        let mut params = named(node, node.to_owned(), vec![node.to_owned()])?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        valid_for(&mut params, self.lifetimes.node_days);
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(NodeCert {
            name: node.to_owned(),
            cert_pem: format!("{}{}", cert.pem(), self.chain),
            key_pem: key.serialize_pem(),
        })
    }

    /// An intermediate CA for `relay` to sign the certificates of agents that join below
    /// it with a token; it may issue node certificates only (path length 0).
    pub fn issue_join_ca(&self, relay: &str) -> Result<Ca, CertError> {
        self.issue_join_ca_for_key(relay, KeyPair::generate()?)
    }

    fn issue_join_ca_for_key(&self, relay: &str, key: KeyPair) -> Result<Ca, CertError> {
        let mut params = named(relay, format!("{relay} join CA"), Vec::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        valid_for(&mut params, self.lifetimes.ca_days);
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        let pem = cert.pem();
        Ok(Ca {
            cert,
            key,
            lifetimes: self.lifetimes,
            chain: format!("{pem}{}", self.chain),
            pem,
        })
    }
}

/// Whether `relay` gets an intermediate CA of its own (`nodes/NAME/join-ca.crt`): it
/// has children (relays or clusters, whose renewals it signs) or admits joining agents.
pub fn signs(relay: &crate::Relay) -> bool {
    relay.join_tokens > 0 || !relay.relays.is_empty() || !relay.clusters.is_empty()
}

/// A new key and a certificate signing request naming `node`, for joining a relay:
/// (key PEM, request PEM).
pub fn join_request(node: &str) -> Result<(String, String), CertError> {
    join_request_with(node, KeyPair::generate()?)
}

/// [`join_request`] for a new key of the same algorithm as `key_pem` (a renewal keeps
/// the kind of key the node has); the default kind when `key_pem` does not parse.
pub fn join_request_like(node: &str, key_pem: &str) -> Result<(String, String), CertError> {
    let key = match KeyPair::from_pem(key_pem) {
        Ok(current) => KeyPair::generate_for(current.algorithm())?,
        Err(_) => KeyPair::generate()?,
    };
    join_request_with(node, key)
}

fn join_request_with(node: &str, key: KeyPair) -> Result<(String, String), CertError> {
    let params = named(node, node.to_owned(), vec![node.to_owned()])?;
    let csr = params.serialize_request(&key)?;
    Ok((key.serialize_pem(), csr.pem()?))
}

/// Certificate parameters with this common name and DNS names, once `node` is known to
/// be a name a certificate can carry.
fn named(
    node: &str,
    common_name: String,
    dns: Vec<String>,
) -> Result<CertificateParams, CertError> {
    check_node_name(node).map_err(|reason| CertError::BadName {
        name: node.to_owned(),
        reason,
    })?;
    let mut params = CertificateParams::new(dns)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    Ok(params)
}

impl NodeCert {
    /// Writes `<name>.crt` and `<name>.key` into `dir` (replacing them); returns their
    /// paths.
    pub fn write_to(&self, dir: &Path) -> Result<(PathBuf, PathBuf), CertError> {
        let cert = dir.join(format!("{}.crt", self.name));
        let key = dir.join(format!("{}.key", self.name));
        write(&cert, &self.cert_pem)?;
        write_secret(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

/// Where the CA comes from.
#[derive(Debug, Clone, Default)]
pub struct CertOptions {
    /// An existing CA (certificate, key) to issue with; otherwise `DIR/ca.crt` and
    /// `DIR/ca.key`, generated on the first run.
    pub ca: Option<(PathBuf, PathBuf)>,
    /// Replace existing keys, certificates and tokens.
    pub force: bool,
}

/// What [`issue_all`] did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Written now.
    Created,
    /// Already there; left alone.
    Kept,
    /// Replaced (`force`).
    Replaced,
}

/// Issues everything a topology needs into `dir`; returns each file and what was done.
pub fn issue_all(
    topology: &Topology,
    dir: &Path,
    options: &CertOptions,
) -> Result<Vec<(PathBuf, Action)>, CertError> {
    let mkdir = |d: &Path| {
        std::fs::create_dir_all(d).map_err(|source| CertError::Io {
            path: d.to_owned(),
            source,
        })
    };
    // Refuse before writing anything: a name that cannot be a directory of its own, a
    // given CA key that would be shipped with a node's directory.
    for node in topology.node_names() {
        check_node_name(node).map_err(|reason| CertError::BadName {
            name: node.to_owned(),
            reason,
        })?;
    }
    if let Some((_, key)) = &options.ca {
        files::check_ca_key_source(dir, key)?;
    }
    mkdir(dir)?;
    let mut done = Vec::new();
    let force = options.force;
    let lifetimes = topology.certificates;
    let (ca_cert, ca_key) = (files::ca_cert(dir), files::ca_key(dir));
    let ca = match &options.ca {
        Some((cert, key)) => {
            let ca = Ca::load(cert, key)?.with_lifetimes(lifetimes);
            match std::fs::read_to_string(&ca_cert) {
                Ok(existing) if existing == ca.cert_pem() => done.push((ca_cert, Action::Kept)),
                Ok(_) if !force => {
                    return Err(CertError::WouldReplace {
                        path: ca_cert,
                        reason: format!(
                            "a different CA than {} issued this directory's certificates",
                            cert.display()
                        ),
                    });
                }
                existing => {
                    write(&ca_cert, &ca.cert_pem())?;
                    let action = if existing.is_ok() {
                        Action::Replaced
                    } else {
                        Action::Created
                    };
                    done.push((ca_cert, action));
                }
            }
            ca
        }
        None => match (ca_cert.exists(), ca_key.exists()) {
            (true, true) if !force => {
                done.push((ca_cert.clone(), Action::Kept));
                Ca::load(&ca_cert, &ca_key)?.with_lifetimes(lifetimes)
            }
            (true, false) if !force => {
                return Err(CertError::WouldReplace {
                    path: ca_cert,
                    reason: "the CA certificate is here but not its key (ca.key); give the CA with --ca-cert and --ca-key".to_owned(),
                });
            }
            (existed, _) => {
                if ca_key.exists() && !force {
                    return Err(CertError::WouldReplace {
                        path: ca_key,
                        reason: "a CA key without its certificate".to_owned(),
                    });
                }
                let ca = Ca::generate_with(&topology.name, lifetimes)?;
                write(&ca_cert, &ca.cert_pem())?;
                write_secret(&ca_key, &ca.key_pem())?;
                let action = if existed {
                    Action::Replaced
                } else {
                    Action::Created
                };
                done.push((ca_cert, action));
                done.push((ca_key, action));
                ca
            }
        },
    };
    for node in topology.node_names() {
        mkdir(&files::node_dir(dir, node))?;
        let (cert, key) = (files::node_cert(dir, node), files::node_key(dir, node));
        files::check_reference(dir, node, "tls.cert", &cert, Holder::Node)?;
        files::check_reference(dir, node, "tls.key", &key, Holder::Node)?;
        done.extend(ensure_pair(cert, key.clone(), force, |k| {
            Ok(ca.issue_for_key(node, k)?.cert_pem)
        })?);
        refuse_ca_key(&ca, node, "tls.key", &key)?;
        let copy = files::node_ca_cert(dir, node);
        files::check_reference(dir, node, "tls.ca", &copy, Holder::Node)?;
        done.push(copy_of_ca(&copy, &ca)?);
    }
    // A relay with children, or that admits agents joining with a token, gets an
    // intermediate CA to sign its children's renewals and the joining agents'
    // certificates with (and the tokens), all in its own directory.
    for relay in topology.relays.iter().filter(|r| signs(r)) {
        let name = relay.name.as_str();
        let (cert, key) = (
            files::join_ca_cert(dir, name),
            files::join_ca_key(dir, name),
        );
        files::check_reference(dir, name, "join.ca_cert", &cert, Holder::Node)?;
        files::check_reference(dir, name, "join.ca_key", &key, Holder::Node)?;
        done.extend(ensure_pair(cert, key.clone(), force, |k| {
            Ok(ca.issue_join_ca_for_key(name, k)?.cert_pem())
        })?);
        refuse_ca_key(&ca, name, "join.ca_key", &key)?;
    }
    done.extend(api::api_pair(&ca, topology, dir, force)?);
    let api = files::api_tokens(dir);
    done.push(tokens_file(&api, 1, force)?);
    for relay in topology.relays.iter().filter(|r| r.join_tokens > 0) {
        let path = files::join_tokens(dir, &relay.name);
        files::check_reference(dir, &relay.name, "join.tokens", &path, Holder::Node)?;
        done.push(tokens_file(&path, relay.join_tokens as usize, force)?);
    }
    Ok(done)
}

/// Fails when the key a node is given (`field` names its role) is the CA's own key,
/// whatever its path: the check that holds even if the layout is ever wrong again.
fn refuse_ca_key(ca: &Ca, node: &str, field: &str, key: &Path) -> Result<(), CertError> {
    let pair = KeyPair::from_pem(&read(key)?).map_err(|e| CertError::BadFile {
        path: key.to_owned(),
        reason: e.to_string(),
    })?;
    if pair.public_key_raw() == ca.key.public_key_raw() {
        return Err(ConfinementError::CaKey {
            node: node.to_owned(),
            field: field.to_owned(),
            path: key.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// A node's copy of the CA certificate: always the CA in use (which only `force` or the
/// first run can change).
fn copy_of_ca(path: &Path, ca: &Ca) -> Result<(PathBuf, Action), CertError> {
    let pem = ca.cert_pem();
    let action = match std::fs::read_to_string(path) {
        Ok(existing) if existing == pem => return Ok((path.to_owned(), Action::Kept)),
        Ok(_) => Action::Replaced,
        Err(_) => Action::Created,
    };
    write(path, &pem)?;
    Ok((path.to_owned(), action))
}

/// A certificate and its key at these paths: kept when both exist; a certificate issued
/// for the existing key when only the key does; both new otherwise (or with `force`).
fn ensure_pair(
    cert: PathBuf,
    key: PathBuf,
    force: bool,
    issue: impl FnOnce(KeyPair) -> Result<String, CertError>,
) -> Result<Vec<(PathBuf, Action)>, CertError> {
    match (cert.exists(), key.exists(), force) {
        (true, true, false) => Ok(vec![(cert, Action::Kept)]),
        (_, true, false) => {
            // A key without its certificate: issue one for the key, never replace it.
            let key_pair = KeyPair::from_pem(&read(&key)?).map_err(|e| CertError::BadFile {
                path: key.clone(),
                reason: e.to_string(),
            })?;
            write(&cert, &issue(key_pair)?)?;
            Ok(vec![(cert, Action::Created)])
        }
        (existed, _, _) => {
            let key_pair = KeyPair::generate()?;
            let key_pem = key_pair.serialize_pem();
            write(&cert, &issue(key_pair)?)?;
            write_secret(&key, &key_pem)?;
            let action = if existed {
                Action::Replaced
            } else {
                Action::Created
            };
            Ok(vec![(cert, action), (key, action)])
        }
    }
}

/// A file of `count` random tokens; an existing one keeps its tokens (some may have been
/// handed out) and gets new ones appended up to `count`.
fn tokens_file(path: &Path, count: usize, force: bool) -> Result<(PathBuf, Action), CertError> {
    let existing = if force {
        Vec::new()
    } else {
        match std::fs::read_to_string(path) {
            Ok(text) => text.lines().map(str::to_owned).collect(),
            Err(_) => Vec::new(),
        }
    };
    let existed = path.exists();
    if existing.len() >= count {
        return Ok((path.to_owned(), Action::Kept));
    }
    let mut tokens = existing;
    while tokens.len() < count {
        tokens.push(random_token()?);
    }
    write_secret(path, &format!("{}\n", tokens.join("\n")))?;
    let action = if existed {
        Action::Replaced
    } else {
        Action::Created
    };
    Ok((path.to_owned(), action))
}

/// 128 random bits, hex.
pub fn random_token() -> Result<String, CertError> {
    use ring::rand::SecureRandom;
    let mut b = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| CertError::BadFile {
            path: PathBuf::from("<system random>"),
            reason: "the system random source failed".to_owned(),
        })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}
