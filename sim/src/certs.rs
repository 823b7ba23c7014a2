//! Certificates under virtual time.
//!
//! Every TLS configuration of the simulation checks certificates' validity against
//! [`SimTime`]: the simulation's wall clock (`clock::wall_now`), not the machine's.
//!
//! A scenario with `certificates:` ([`Certificates`]) gives every node a certificate
//! valid for `lifetime` of virtual time (the root's, which nothing above it renews, a
//! year) and runs renewal as nodes run it in production: each node's key, certificate
//! and the CA are files (`CertFiles`, in a temporary directory of the run), loaded at
//! every start; a node renews through its parent over its link and writes the new pair
//! in place; every relay signs its children's renewals with the hierarchy's CA. A
//! cluster named in `recover` has a one-time recovery token at its parent relay (which
//! then admits joins, with a join CA of its own); when its agent starts with an expired
//! certificate it first dials with it (the refusal is recorded: [`Recovery`]), then
//! enrolls again with the token, as `agent run` does, and starts with what it got.
//!
//! At the end of the run (`check_end`) every node's certificate on disk must still
//! be valid (the nodes renewed) and every `recover` cluster must have been refused with
//! the TLS alert `certificate_expired` and then have enrolled again.
//!
//! Keys are Ed25519 (renewals keep the kind of key a node has), so that handshakes are
//! the same size in every run.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use serde::Deserialize;
use strata_node::config::TlsFiles;
use strata_node::tls::{self, Identity, TlsTime};
use strata_relay::config::{JoinFiles, RenewSigning};

use crate::check::{Violation, secs};
use crate::clock::{EPOCH_MS, wall_now};
use crate::net::Network;
use crate::rng::{hash, mix};
use crate::topology::Topology;

/// The simulation's wall clock as rustls reads it.
#[derive(Debug)]
pub struct SimTime;

impl rustls::time_provider::TimeProvider for SimTime {
    fn current_time(&self) -> Option<rustls::pki_types::UnixTime> {
        Some(rustls::pki_types::UnixTime::since_unix_epoch(
            Duration::from_millis(wall_now().0),
        ))
    }
}

/// [`SimTime`], as TLS configurations take it.
pub fn sim_time() -> TlsTime {
    Arc::new(SimTime)
}

/// A scenario's `certificates:` section.
///
/// ```yaml
/// certificates: { lifetime: 60s, renew_at_percent: 50, recover: [us-pos-1] }
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Certificates {
    /// How long node certificates are valid, the first ones and every renewal (virtual
    /// time, at least 10 s).
    #[serde(with = "crate::scenario::duration")]
    pub lifetime: Duration,
    /// When in its certificate's lifetime a node renews it, in percent (1 to 99).
    #[serde(default = "default_at_percent")]
    pub renew_at_percent: u8,
    /// Clusters whose parent holds a one-time recovery token for them.
    #[serde(default)]
    pub recover: Vec<String>,
}

fn default_at_percent() -> u8 {
    strata_node::renew::DEFAULT_RENEW_AT_PERCENT
}

impl Certificates {
    /// Whether the section fits `topology`: what is wrong, if anything.
    pub(crate) fn check(&self, topology: &Topology) -> Result<(), String> {
        if self.lifetime < Duration::from_secs(10) {
            return Err("certificates.lifetime: at least 10s".into());
        }
        if !(1..=99).contains(&self.renew_at_percent) {
            return Err("certificates.renew_at_percent: 1 to 99".into());
        }
        for c in &self.recover {
            if crate::topology::cluster(topology, c).is_none() {
                return Err(format!("certificates.recover: {c:?} is not a cluster"));
            }
        }
        Ok(())
    }
}

/// Why the hierarchy (its certificates) could not be built.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // `node` is the node, `detail` what the generator said
pub enum BuildError {
    /// Certificate generation failed.
    #[error("certificate for {node}: {detail}")]
    Cert { node: String, detail: String },
}

/// Why a certificate (or key, or file) for `what` could not be made.
pub(crate) fn cert_err(what: &str, e: &dyn std::fmt::Display) -> BuildError {
    BuildError::Cert {
        node: what.to_owned(),
        detail: e.to_string(),
    }
}

/// The run's certificate files: `ca.crt` and `ca.key`, `NODE.crt` and `NODE.key` for
/// every node, and for each relay with a cluster to recover its join CA and tokens
/// file. The directory goes when the run ends.
#[derive(Debug)]
pub(crate) struct CertFiles {
    dir: tempfile::TempDir,
    config: Certificates,
    /// Cluster -> its recovery token.
    tokens: BTreeMap<String, String>,
    /// Relays that admit joins (they hold a recovery token).
    joining: Vec<String>,
}

/// A certificate's validity: from a quarter of its lifetime (at most an hour) before
/// `from` (Unix seconds), for `lifetime`.
fn validity(params: &mut CertificateParams, from: i64, lifetime: Duration) {
    let life = i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX / 4);
    let at = |s: i64| {
        time::OffsetDateTime::from_unix_timestamp(s).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    };
    params.not_before = at(from - (life / 4).min(3600));
    params.not_after = at(from + life);
}

impl CertFiles {
    /// Issues every node's first certificate, valid from the simulation's start.
    pub(crate) fn write(
        topology: &Topology,
        seed: u64,
        config: &Certificates,
    ) -> Result<CertFiles, BuildError> {
        let dir = tempfile::Builder::new()
            .prefix("strata-sim-certs-")
            .tempdir()
            .map_err(|e| cert_err("directory", &e))?;
        let start = i64::try_from(EPOCH_MS / 1000).unwrap_or(0);
        let year = Duration::from_secs(365 * 86_400);
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).map_err(|e| cert_err(name, &e))
        };
        let ca_key = KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| cert_err("ca", &e))?;
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(|e| cert_err("ca", &e))?;
        p.distinguished_name
            .push(DnType::CommonName, "simulation strata CA");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut p, start, 10 * year);
        let ca = p.self_signed(&ca_key).map_err(|e| cert_err("ca", &e))?;
        write("ca.crt", &ca.pem())?;
        write("ca.key", &ca_key.serialize_pem())?;
        let root = topology.root().name.clone();
        for name in topology.node_names() {
            let key =
                KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| cert_err(name, &e))?;
            let mut p =
                CertificateParams::new(vec![name.to_owned()]).map_err(|e| cert_err(name, &e))?;
            p.distinguished_name.push(DnType::CommonName, name);
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            // Nothing above the root renews its certificate.
            let life = if name == root { year } else { config.lifetime };
            validity(&mut p, start, life);
            let cert = p
                .signed_by(&key, &ca, &ca_key)
                .map_err(|e| cert_err(name, &e))?;
            write(&format!("{name}.crt"), &cert.pem())?;
            write(&format!("{name}.key"), &key.serialize_pem())?;
        }
        let mut tokens = BTreeMap::new();
        let mut joining: Vec<String> = Vec::new();
        for cluster in &config.recover {
            let parent = crate::topology::cluster(topology, cluster)
                .map(|c| c.parent.clone())
                .ok_or_else(|| cert_err(cluster, &"not a cluster"))?;
            let token = format!("recover-{cluster}-{:016x}", mix(seed ^ hash(cluster)));
            tokens.insert(cluster.clone(), token);
            if !joining.contains(&parent) {
                joining.push(parent);
            }
        }
        for relay in &joining {
            // The relay's join CA, as `relay topology certs` makes it (path length 0).
            let key =
                KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(|e| cert_err(relay, &e))?;
            let mut p =
                CertificateParams::new(Vec::<String>::new()).map_err(|e| cert_err(relay, &e))?;
            p.distinguished_name
                .push(DnType::CommonName, format!("{relay} join CA"));
            p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            p.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            validity(&mut p, start, 10 * year);
            let join_ca = p
                .signed_by(&key, &ca, &ca_key)
                .map_err(|e| cert_err(relay, &e))?;
            write(&format!("{relay}.join-ca.crt"), &join_ca.pem())?;
            write(&format!("{relay}.join-ca.key"), &key.serialize_pem())?;
            let lines: String = config
                .recover
                .iter()
                .filter(|c| {
                    crate::topology::cluster(topology, c).is_some_and(|c| &c.parent == relay)
                })
                .filter_map(|c| Some(format!("{} recover={c}\n", tokens.get(c)?)))
                .collect();
            write(&format!("{relay}.tokens"), &lines)?;
        }
        Ok(CertFiles {
            dir,
            config: config.clone(),
            tokens,
            joining,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Node `node`'s files, and when it renews.
    pub(crate) fn tls_files(&self, node: &str) -> TlsFiles {
        TlsFiles {
            cert: self.path(&format!("{node}.crt")),
            key: self.path(&format!("{node}.key")),
            ca: self.path("ca.crt"),
            renew_at_percent: self.config.renew_at_percent,
        }
    }

    /// Node `node`'s identity as its files hold it now, checked against virtual time.
    pub(crate) fn identity(&self, node: &str) -> Result<Identity, tls::TlsError> {
        let f = self.tls_files(node);
        Ok(Identity::load(&f.cert, &f.key, &f.ca)?.with_time(Some(sim_time())))
    }

    /// What every relay signs its children's renewals with: the hierarchy's CA.
    pub(crate) fn signing(&self) -> RenewSigning {
        RenewSigning {
            ca: Some((self.path("ca.crt"), self.path("ca.key"))),
            lifetime: self.config.lifetime,
        }
    }

    /// The join section of `relay`, if it holds a recovery token.
    pub(crate) fn join_files(&self, relay: &str) -> Option<JoinFiles> {
        self.joining.iter().any(|r| r == relay).then(|| JoinFiles {
            tokens: self.path(&format!("{relay}.tokens")),
            ca_cert: self.path(&format!("{relay}.join-ca.crt")),
            ca_key: self.path(&format!("{relay}.join-ca.key")),
            node_days: 1,
            rate_per_source: strata_relay::config::DEFAULT_JOIN_RATE_PER_SOURCE,
            rate_global: strata_relay::config::DEFAULT_JOIN_RATE_GLOBAL,
        })
    }

    /// Cluster `cluster`'s recovery token, if it has one.
    pub(crate) fn token(&self, cluster: &str) -> Option<&str> {
        self.tokens.get(cluster).map(String::as_str)
    }
}

/// What happened when a `recover` cluster's agent started with an expired certificate.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// When it dialed its parent with the expired certificate, and how that ended.
    pub refused: Option<(Duration, String)>,
    /// Whether the refusal was the TLS alert `certificate_expired`.
    pub expired_alert: bool,
    /// When it enrolled again with its recovery token.
    pub joined: Option<Duration>,
    /// Why enrolling again failed.
    pub failed: Option<String>,
}

fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// Virtual wall time in Unix seconds.
fn wall_secs() -> i64 {
    i64::try_from(wall_now().0 / 1000).unwrap_or(i64::MAX)
}

/// Dials `relay` at `addr` over `endpoint` presenting `client`'s certificate: how the
/// handshake ended, and whether the relay refused it with `certificate_expired`.
async fn probe(
    endpoint: &quinn::Endpoint,
    client: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    relay: &str,
) -> (bool, String) {
    let config = match strata_node::transport::client_configs(client) {
        Ok(c) => c,
        Err(e) => return (false, e.to_string()),
    };
    let connecting = match endpoint.connect_with(config, addr, relay) {
        Ok(c) => c,
        Err(e) => return (false, e.to_string()),
    };
    // A TLS 1.3 client may finish its side before the relay checked its certificate:
    // the refusal then closes the connection just after.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        match connecting.await {
            Err(e) => e,
            Ok(conn) => conn.closed().await,
        }
    })
    .await;
    let Ok(e) = ended else {
        return (false, "the relay accepted the handshake".into());
    };
    let expired_code = quinn_proto::TransportErrorCode::crypto(u8::from(
        rustls::AlertDescription::CertificateExpired,
    ));
    let expired =
        matches!(&e, quinn::ConnectionError::ConnectionClosed(c) if c.error_code == expired_code);
    (expired, e.to_string())
}

/// At an agent's start: when its certificate has expired (virtual time) and it has a
/// recovery token, dials its parent with the expired certificate (recording the
/// refusal), then enrolls again with the token, writing key and certificate in place
/// of the expired ones, over a fresh endpoint of `ip` on `network`: what happened
/// (`None`: nothing to recover).
pub(crate) async fn recover_if_expired(
    network: &Arc<Network>,
    files: &CertFiles,
    cluster: &str,
    (relay, addr): (&str, SocketAddr),
    ip: std::net::IpAddr,
    rng: &mut crate::rng::SimRng,
) -> std::io::Result<Option<Recovery>> {
    let f = files.tls_files(cluster);
    let Some(token) = files.token(cluster) else {
        return Ok(None);
    };
    if !strata_node::renew::expired_at(&f.cert, wall_secs()) {
        return Ok(None);
    }
    let socket = crate::net::SimUdpSocket::bind(ip, 0, network.clone()).await?;
    let mut endpoint = crate::net::seeded_endpoint(socket, rng)?;
    let old = files.identity(cluster).map_err(std::io::Error::other)?;
    let (expired, detail) = probe(
        &endpoint,
        tls::client_config(&old).map_err(std::io::Error::other)?,
        addr,
        relay,
    )
    .await;
    let mut record = Recovery {
        refused: Some((now(), detail)),
        expired_alert: expired,
        ..Recovery::default()
    };
    let join_tls =
        tls::join_client_config_with(&f.ca, Some(sim_time())).map_err(std::io::Error::other)?;
    endpoint.set_default_client_config(
        strata_node::transport::client_configs(join_tls).map_err(std::io::Error::other)?,
    );
    let current_key = std::fs::read_to_string(&f.key)?;
    let request = strata_topology::certs::join_request_like(cluster, &current_key)
        .map_err(std::io::Error::other)?;
    match strata_node::join::join_on(&endpoint, relay, addr, cluster, token, request).await {
        Ok(joined) => {
            joined
                .write(&f.key, &f.cert)
                .map_err(std::io::Error::other)?;
            record.joined = Some(now());
        }
        Err(e) => record.failed = Some(e.to_string()),
    }
    Ok(Some(record))
}

/// The end-of-run checks of short-lived certificates of `topology`'s nodes at `ended`
/// (virtual time since the start), with what became of the clusters that started with
/// an expired certificate: lines for the trace and summary, and the first violation.
pub(crate) fn check_end(
    topology: &Topology,
    recoveries: &BTreeMap<String, Recovery>,
    files: &CertFiles,
    ended: Duration,
) -> (Vec<String>, Option<Violation>) {
    let mut lines = Vec::new();
    let mut violation = None;
    let mut violate = |invariant: &'static str, detail: String| {
        if violation.is_none() {
            violation = Some(Violation { invariant, detail });
        }
    };
    let end = i64::try_from((EPOCH_MS + u64::try_from(ended.as_millis()).unwrap_or(0)) / 1000)
        .unwrap_or(i64::MAX);
    let root = topology.root().name.clone();
    let recovering = |n: &str| files.config.recover.iter().any(|c| c == n);
    let (mut renewed, mut renewing) = (0, 0);
    for name in topology.node_names().filter(|n| *n != root) {
        let pem = std::fs::read_to_string(files.tls_files(name).cert).unwrap_or_default();
        if !recovering(name) {
            renewing += 1;
        }
        match strata_topology::certs::pem_validity(&pem) {
            Some((from, to)) if to > end => {
                // Issued after the start: renewed (a recovered one dates from its join).
                if !recovering(name) && from > i64::try_from(EPOCH_MS / 1000).unwrap_or(0) {
                    renewed += 1;
                }
            }
            Some((_, to)) => violate(
                "certificates stay valid",
                format!(
                    "{name}'s certificate expired {} s before the end and was not renewed",
                    end - to
                ),
            ),
            None => violate(
                "certificates stay valid",
                format!("{name}'s certificate file holds no certificate"),
            ),
        }
    }
    lines.push(format!(
        "{renewed} of the {renewing} certificates to renew on disk were renewed during the run; all valid at the end"
    ));
    for cluster in &files.config.recover {
        let Some(r) = recoveries.get(cluster) else {
            violate(
                "recovery",
                format!("{cluster} never started with an expired certificate"),
            );
            continue;
        };
        if let Some((at, detail)) = &r.refused {
            lines.push(format!(
                "{cluster}: at {} its handshake with the expired certificate ended: {detail}",
                secs(*at)
            ));
        }
        if !r.expired_alert {
            violate(
                "recovery",
                format!("{cluster}'s expired certificate was not refused with certificate_expired"),
            );
        }
        match (&r.joined, &r.failed) {
            (Some(at), _) => lines.push(format!(
                "{cluster}: enrolled again with its recovery token at {}",
                secs(*at)
            )),
            (None, why) => violate(
                "recovery",
                format!(
                    "{cluster} did not enroll again: {}",
                    why.as_deref().unwrap_or("no attempt")
                ),
            ),
        }
    }
    (lines, violation)
}
