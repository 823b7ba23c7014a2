//! The configuration file of one node (`relay serve --config FILE`).
//!
//! Parsed into raw serde structs with unknown fields refused, then checked in one pass
//! that reports every fault at once, each naming the file and the field. A path the user
//! named that does not exist is an error, never a silent default.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
pub use strata_node::config::{
    ConfigError, ParentConfig, RawParent, RawTls, TlsFiles, addr, check_node_name,
};
use strata_node::store::{EtcdConfig, EtcdTls};

/// A node's configuration, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// The node's name; must match the name in its certificate.
    pub node: String,
    /// Where children connect (QUIC over UDP). `None` for a node without children.
    pub listen: Option<SocketAddr>,
    /// Where children connect with TLS over TCP: `listen_tcp:` in the file, by default
    /// the same address and port as `listen`; `listen_tcp: off` for none.
    pub listen_tcp: Option<SocketAddr>,
    /// The parent to connect to; `None` at the root.
    pub parent: Option<ParentConfig>,
    /// Certificate, key and CA files.
    pub tls: TlsFiles,
    /// The store's directory.
    pub data: PathBuf,
    /// Node names allowed to connect as children.
    pub children: Vec<String>,
    /// Labels every cluster below this node inherits.
    pub labels: BTreeMap<String, String>,
    /// The root's user API (root only).
    pub api: Option<ApiConfig>,
    /// Where Prometheus metrics are served, if anywhere.
    pub metrics: Option<SocketAddr>,
    /// How often merged status summaries are sent upward.
    pub summary_interval: Duration,
    /// Admitting agents that join with a single-use token, if this node does.
    pub join: Option<JoinFiles>,
    /// Where the node keeps its state: sled in `data` unless the root names etcd.
    pub store: StoreConfig,
    /// How many debug tunnels (`/clusters/{name}/...`) may be open at once on each link
    /// to a child; one more is answered 429.
    pub tunnels_per_link: usize,
    /// After a start or a reconnect to its parent, how long at most new children wait
    /// to be admitted while this relay catches up with its parent (`admission_hold_ms`).
    pub admission_hold: Duration,
    /// How many children connect and set up at once (`admission:`).
    pub admission: crate::limits::Admission,
    /// Which replica of a replicated relay tier this process is (`replica:`), if it is
    /// one: several processes with this node name behind one address.
    pub replica: Option<Replica>,
    /// Signing its children's certificate renewals, if this node does (`renew:`).
    pub renew: Option<RenewSigning>,
    /// Answering DNS for the subtree's apps, and at the root the drain of moves
    /// (`dns:`), if this node does.
    pub dns: Option<crate::dns::config::DnsConfig>,
}

/// How a relay signs its children's certificate renewals (`renew:`): with the CA
/// named here (the hierarchy's CA: certificates it signs chain straight to what every
/// node trusts), else with its join CA; for `lifetime`. A relay with `join:` and no
/// `renew:` signs with its join CA for `join.node_days`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewSigning {
    /// The CA certificate and key, if not the join CA.
    pub ca: Option<(PathBuf, PathBuf)>,
    /// How long a renewed certificate is valid.
    pub lifetime: Duration,
}

/// How one replica of a replicated relay tier names itself to its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replica {
    /// `replica: NAME`: this id (1 to 63 bytes of `[a-z0-9-]`).
    Named(String),
    /// `replica: auto`: an id derived from the store's identity, chosen once when the
    /// store was created and kept with it, so it survives restarts and differs between
    /// replicas with their own stores.
    PerStore,
}

impl Replica {
    /// The replica id, given the store's node id.
    pub fn id(&self, store_node_id: u64) -> String {
        match self {
            Replica::Named(n) => n.clone(),
            Replica::PerStore => format!("{store_node_id:016x}"),
        }
    }
}

/// Where a node keeps its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// sled, in the node's `data` directory (the default, at every tier).
    Sled,
    /// etcd (`store: { etcd: ... }`, the root only): several root replicas share it,
    /// one writing at a time.
    Etcd(EtcdConfig),
}

/// The default lease of a root replica writing to etcd: a dead writer holds the
/// standbys off this long at most.
pub const DEFAULT_ETCD_LEASE: Duration = Duration::from_secs(5);

/// What a relay needs to admit agents joining with a single-use token (issued by
/// `relay topology certs` for a `joining:` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinFiles {
    /// The tokens, one per line.
    pub tokens: PathBuf,
    /// The intermediate CA certificate that signs joining agents' certificates.
    pub ca_cert: PathBuf,
    /// Its key.
    pub ca_key: PathBuf,
    /// How many days the certificates it signs for joining agents are valid.
    pub node_days: u32,
    /// Join attempts (connections without a certificate) accepted per second from one
    /// source address, with bursts of twice as many; more are refused.
    pub rate_per_source: u32,
    /// Join attempts accepted per second from all sources together, with bursts of
    /// twice as many; more are refused.
    pub rate_global: u32,
}

/// Default of [`JoinFiles::rate_per_source`].
pub const DEFAULT_JOIN_RATE_PER_SOURCE: u32 = 5;
/// Default of [`JoinFiles::rate_global`].
pub const DEFAULT_JOIN_RATE_GLOBAL: u32 = 50;

/// The root's user API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// HTTPS listen address.
    pub listen: SocketAddr,
    /// A file whose lines are accepted bearer tokens.
    pub tokens: PathBuf,
    /// The certificate and key the API serves (the names clients reach it by); `None`:
    /// the node's own.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Users with a client certificate from a CA (`api.client_certificates`).
    pub client_certificates: Option<crate::identity::ClientCertificates>,
    /// Users with an OIDC ID token (`api.oidc`).
    pub oidc: Option<crate::identity::OidcConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    node: String,
    #[serde(default)]
    listen: Option<String>,
    #[serde(default)]
    listen_tcp: Option<String>,
    #[serde(default)]
    parent: Option<RawParent>,
    tls: RawTls,
    data: PathBuf,
    #[serde(default)]
    children: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    api: Option<RawApi>,
    #[serde(default)]
    metrics: Option<String>,
    #[serde(default)]
    summary_interval_ms: Option<u64>,
    #[serde(default)]
    join: Option<RawJoin>,
    #[serde(default)]
    store: Option<RawStore>,
    #[serde(default)]
    tunnels_per_link: Option<usize>,
    #[serde(default)]
    admission_hold_ms: Option<u64>,
    admission: Option<RawAdmission>,
    replica: Option<String>,
    #[serde(default)]
    renew: Option<RawRenew>,
    #[serde(default)]
    dns: Option<crate::dns::config::RawDns>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmission {
    #[serde(default)]
    handshakes: Option<usize>,
    #[serde(default)]
    queue: Option<usize>,
    #[serde(default)]
    setups: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRenew {
    #[serde(default)]
    ca_cert: Option<PathBuf>,
    #[serde(default)]
    ca_key: Option<PathBuf>,
    #[serde(default)]
    lifetime_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    #[serde(default)]
    etcd: Option<RawEtcd>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEtcd {
    endpoints: Vec<String>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    lease_ttl_s: Option<u64>,
    #[serde(default)]
    tls: Option<RawEtcdTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEtcdTls {
    ca: PathBuf,
    #[serde(default)]
    cert: Option<PathBuf>,
    #[serde(default)]
    key: Option<PathBuf>,
}

impl RawEtcd {
    /// The section checked for node `node` (the default prefix is `/strata/NODE`),
    /// its faults added to `faults`.
    fn check(self, node: &str, base: &Path, faults: &mut Vec<String>) -> EtcdConfig {
        if self.endpoints.is_empty() {
            faults.push("store.etcd.endpoints: name at least one etcd member".to_owned());
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            let https = e.starts_with("https://");
            if !https && !e.starts_with("http://") {
                faults.push(format!(
                    "store.etcd.endpoints[{i}]: {e:?} is not a URL of the form http(s)://HOST:PORT"
                ));
            }
            if https && self.tls.is_none() {
                faults.push(format!(
                    "store.etcd.endpoints[{i}]: {e:?} is https: store.etcd.tls must name the CA"
                ));
            }
        }
        let lease_ttl = match self.lease_ttl_s {
            Some(s) if s < 2 => {
                faults.push("store.etcd.lease_ttl_s: must be at least 2 (etcd's minimum)".into());
                DEFAULT_ETCD_LEASE
            }
            Some(s) => Duration::from_secs(s),
            None => DEFAULT_ETCD_LEASE,
        };
        let tls = self.tls.map(|t| EtcdTls {
            ca: base.join(t.ca),
            client: match (t.cert, t.key) {
                (Some(c), Some(k)) => Some((base.join(c), base.join(k))),
                (None, None) => None,
                _ => {
                    faults.push("store.etcd.tls: cert and key go together".to_owned());
                    None
                }
            },
        });
        EtcdConfig {
            endpoints: self.endpoints,
            prefix: self.prefix.unwrap_or_else(|| format!("/strata/{node}")),
            lease_ttl,
            tls,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJoin {
    tokens: PathBuf,
    ca_cert: PathBuf,
    ca_key: PathBuf,
    #[serde(default)]
    node_days: Option<u32>,
    #[serde(default)]
    rate_per_source: Option<u32>,
    #[serde(default)]
    rate_global: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    listen: String,
    tokens: PathBuf,
    #[serde(default)]
    cert: Option<PathBuf>,
    #[serde(default)]
    key: Option<PathBuf>,
    #[serde(default)]
    client_certificates: Option<crate::identity::RawClientCertificates>,
    #[serde(default)]
    oidc: Option<crate::identity::RawOidc>,
}

/// The default interval of summary updates toward the parent.
pub const DEFAULT_SUMMARY_INTERVAL: Duration = Duration::from_millis(200);

impl NodeConfig {
    /// Reads and validates a configuration file. Relative paths in it are taken
    /// relative to the file's directory.
    pub fn load(path: &Path) -> Result<NodeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse_at(&text, path)
    }

    /// Validates `text`, the content of the configuration file at `path` (relative
    /// paths in it are taken relative to the file's directory): what a relay reads again
    /// when the file changes.
    pub fn parse_at(text: &str, path: &Path) -> Result<NodeConfig, ConfigError> {
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(text, base).map_err(|e| match e {
            Refusal::Parse(detail) => ConfigError::Parse {
                path: path.to_owned(),
                detail,
            },
            Refusal::Invalid(faults) => ConfigError::Invalid {
                path: path.to_owned(),
                faults,
            },
        })
    }

    fn parse(text: &str, base: &Path) -> Result<NodeConfig, Refusal> {
        let raw: RawConfig =
            serde_saphyr::from_str(text).map_err(|e| Refusal::Parse(e.to_string()))?;
        let mut faults = Vec::new();
        if let Err(why) = check_node_name(&raw.node) {
            faults.push(format!("node: {why}"));
        }
        let listen = raw
            .listen
            .as_deref()
            .and_then(|a| addr("listen", a, &mut faults));
        let listen_tcp = match raw.listen_tcp.as_deref() {
            Some("off") => None,
            Some(a) => addr("listen_tcp", a, &mut faults),
            None => listen,
        };
        if raw.listen_tcp.as_deref().is_some_and(|a| a != "off") && raw.listen.is_none() {
            faults.push("listen_tcp: needs `listen` (QUIC) too".to_owned());
        }
        let parent = raw.parent.and_then(|p| p.check(&raw.node, &mut faults));
        for (i, child) in raw.children.iter().enumerate() {
            if let Err(why) = check_node_name(child) {
                faults.push(format!("children[{i}]: {why}"));
            }
        }
        if !raw.children.is_empty() && raw.listen.is_none() {
            faults.push("listen: required when the node has children".to_owned());
        }
        let api = raw.api.and_then(|a| {
            let tls = match (a.cert, a.key) {
                (Some(c), Some(k)) => Some((base.join(c), base.join(k))),
                (None, None) => None,
                _ => {
                    faults.push("api: cert and key go together".to_owned());
                    None
                }
            };
            let client_certificates = a.client_certificates.map(|c| c.check(base, &mut faults));
            let oidc = a.oidc.map(|o| o.check(base, &mut faults));
            addr("api.listen", &a.listen, &mut faults).map(|listen| ApiConfig {
                listen,
                tokens: base.join(a.tokens),
                tls,
                client_certificates,
                oidc,
            })
        });
        if api.is_some() && parent.is_some() {
            faults
                .push("api: only the root (a node without parent) serves the user API".to_owned());
        }
        let metrics = raw
            .metrics
            .as_deref()
            .and_then(|a| addr("metrics", a, &mut faults));
        let summary_interval = match raw.summary_interval_ms {
            Some(0) => {
                faults.push("summary_interval_ms: must be at least 1".to_owned());
                DEFAULT_SUMMARY_INTERVAL
            }
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_SUMMARY_INTERVAL,
        };
        let tunnels_per_link = match raw.tunnels_per_link {
            Some(0) => {
                faults.push("tunnels_per_link: must be at least 1".to_owned());
                crate::limits::DEFAULT_TUNNELS_PER_LINK
            }
            Some(n) if n > strata_node::tunnel::MAX_TUNNEL_STREAMS as usize => {
                faults.push(format!(
                    "tunnels_per_link: {n} is over {}, the tunnel streams a child accepts at once",
                    strata_node::tunnel::MAX_TUNNEL_STREAMS
                ));
                crate::limits::DEFAULT_TUNNELS_PER_LINK
            }
            Some(n) => n,
            None => crate::limits::DEFAULT_TUNNELS_PER_LINK,
        };
        let admission_hold = raw
            .admission_hold_ms
            .map_or(crate::limits::DEFAULT_ADMISSION_HOLD, Duration::from_millis);
        let admission = {
            let d = crate::limits::Admission::default();
            let a = raw.admission.unwrap_or(RawAdmission {
                handshakes: None,
                queue: None,
                setups: None,
            });
            let admission = crate::limits::Admission {
                handshakes: a.handshakes.unwrap_or(d.handshakes),
                queue: a.queue.unwrap_or(d.queue),
                setups: a.setups.unwrap_or(d.setups),
            };
            if admission.handshakes > 0 && admission.queue == 0 {
                faults.push(
                    "admission.queue: must be at least 1 while admission.handshakes limits handshakes (0 refuses nothing but waits for nothing either)"
                        .to_owned(),
                );
            }
            admission
        };
        if raw.join.is_some() && raw.listen.is_none() {
            faults.push("join: admitting agents needs a listen address".to_owned());
        }
        let store = match raw.store.and_then(|s| s.etcd) {
            Some(etcd) => {
                if parent.is_some() {
                    faults.push(
                        "store.etcd: only the root (a node without parent) keeps its state in etcd"
                            .to_owned(),
                    );
                }
                StoreConfig::Etcd(etcd.check(&raw.node, base, &mut faults))
            }
            None => StoreConfig::Sled,
        };
        if raw.join.as_ref().is_some_and(|j| j.node_days == Some(0)) {
            faults.push("join.node_days: must be at least 1 (day)".to_owned());
        }
        for (field, value) in raw.join.iter().flat_map(|j| {
            [
                ("rate_per_source", j.rate_per_source),
                ("rate_global", j.rate_global),
            ]
        }) {
            if value == Some(0) {
                faults.push(format!("join.{field}: must be at least 1 (per second)"));
            }
        }
        let replica = match raw.replica.as_deref() {
            None => None,
            Some(_) if parent.is_none() => {
                faults.push(
                    "replica: only a relay with a parent can be one replica of a tier".to_owned(),
                );
                None
            }
            Some("auto") => Some(Replica::PerStore),
            Some(r) if strata_protocol::wire::valid_replica(r) => {
                Some(Replica::Named(r.to_owned()))
            }
            Some(r) => {
                faults.push(format!(
                    "replica: {r:?} is not `auto` nor 1 to 63 bytes of [a-z0-9-]"
                ));
                None
            }
        };
        let join = raw.join.map(|j| JoinFiles {
            tokens: base.join(j.tokens),
            ca_cert: base.join(j.ca_cert),
            ca_key: base.join(j.ca_key),
            node_days: j
                .node_days
                .unwrap_or(strata_topology::certs::DEFAULT_NODE_DAYS),
            rate_per_source: j.rate_per_source.unwrap_or(DEFAULT_JOIN_RATE_PER_SOURCE),
            rate_global: j.rate_global.unwrap_or(DEFAULT_JOIN_RATE_GLOBAL),
        });
        let renew = raw.renew.map(|r| {
            let ca = match (r.ca_cert, r.ca_key) {
                (Some(c), Some(k)) => Some((base.join(c), base.join(k))),
                (None, None) => {
                    if join.is_none() {
                        faults.push(
                            "renew: name ca_cert and ca_key (this relay has no join CA to sign with)"
                                .to_owned(),
                        );
                    }
                    None
                }
                _ => {
                    faults.push("renew: ca_cert and ca_key go together".to_owned());
                    None
                }
            };
            if r.lifetime_s == Some(0) {
                faults.push("renew.lifetime_s: must be at least 1".to_owned());
            }
            let default_days = join
                .as_ref()
                .filter(|_| ca.is_none())
                .map(|j| j.node_days)
                .unwrap_or(strata_topology::certs::DEFAULT_NODE_DAYS);
            RenewSigning {
                ca,
                lifetime: Duration::from_secs(
                    r.lifetime_s.unwrap_or(u64::from(default_days) * 86_400),
                ),
            }
        });
        let tls = raw.tls.resolve(base, &mut faults);
        let dns = raw.dns.and_then(|d| d.check(&mut faults));
        if !faults.is_empty() {
            return Err(Refusal::Invalid(faults));
        }
        Ok(NodeConfig {
            node: raw.node,
            listen,
            listen_tcp,
            parent,
            tls,
            data: base.join(raw.data),
            children: raw.children,
            labels: raw.labels,
            api,
            metrics,
            summary_interval,
            join,
            store,
            tunnels_per_link,
            admission_hold,
            admission,
            replica,
            renew,
            dns,
        })
    }

    /// Whether this node is the root.
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }
}

#[derive(Debug)]
enum Refusal {
    Parse(String),
    Invalid(Vec<String>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_node::config::{field_names, reference_example, undocumented_fields};

    const REFERENCE: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/CONFIG.md"));

    #[test]
    fn the_configuration_reference_names_every_field_and_its_example_parses() {
        let sections: &[(&str, &[&str])] = &[
            ("", field_names::<RawConfig>()),
            ("parent.", field_names::<RawParent>()),
            ("tls.", field_names::<RawTls>()),
            ("api.", field_names::<RawApi>()),
            (
                "api.client_certificates.",
                field_names::<crate::identity::RawClientCertificates>(),
            ),
            ("api.oidc.", field_names::<crate::identity::RawOidc>()),
            ("join.", field_names::<RawJoin>()),
            ("renew.", field_names::<RawRenew>()),
            ("admission.", field_names::<RawAdmission>()),
            ("store.", field_names::<RawStore>()),
            ("store.etcd.", field_names::<RawEtcd>()),
            ("store.etcd.tls.", field_names::<RawEtcdTls>()),
            ("dns.", field_names::<crate::dns::config::RawDns>()),
        ];
        assert!(
            sections[0].1.contains(&"summary_interval_ms"),
            "{sections:?}"
        );
        assert_eq!(
            undocumented_fields(REFERENCE, sections),
            Vec::<String>::new()
        );
        let root = reference_example(REFERENCE, "## A relay").unwrap();
        let c = NodeConfig::parse(&root, Path::new("/etc/strata")).unwrap();
        assert!(matches!(c.store, StoreConfig::Etcd(_)));
    }

    const ROOT: &str = "
node: center
listen: 127.0.0.1:7443
tls: { cert: center.crt, key: center.key, ca: ca.crt }
data: data/center
children: [eu-west, us-east]
api: { listen: 127.0.0.1:8443, tokens: tokens.txt }
";

    #[test]
    fn a_root_config_parses_with_paths_relative_to_the_file() {
        let c = NodeConfig::parse(ROOT, Path::new("/etc/strata")).unwrap();
        assert!(c.is_root());
        assert_eq!(c.tls.ca, Path::new("/etc/strata/ca.crt"));
        assert_eq!(c.data, Path::new("/etc/strata/data/center"));
        assert_eq!(c.children, ["eu-west", "us-east"]);
        assert_eq!(c.summary_interval, DEFAULT_SUMMARY_INTERVAL);
    }

    #[test]
    fn a_root_may_keep_its_state_in_etcd_and_a_relay_may_not() {
        let text = format!(
            "{ROOT}store: {{ etcd: {{ endpoints: [http://10.0.0.1:2379, https://10.0.0.2:2379], tls: {{ ca: etcd-ca.crt }} }} }}\n"
        );
        let c = NodeConfig::parse(&text, Path::new("/etc/strata")).unwrap();
        let StoreConfig::Etcd(etcd) = c.store else {
            panic!("not etcd: {:?}", c.store);
        };
        assert_eq!(etcd.prefix, "/strata/center");
        assert_eq!(etcd.lease_ttl, DEFAULT_ETCD_LEASE);
        assert_eq!(etcd.tls.unwrap().ca, Path::new("/etc/strata/etcd-ca.crt"));
        assert_eq!(
            NodeConfig::parse(ROOT, Path::new(".")).unwrap().store,
            StoreConfig::Sled
        );

        let relay = "
node: eu-west
parent: { name: center, address: 127.0.0.1:7443 }
tls: { cert: a, key: b, ca: c }
data: d
store: { etcd: { endpoints: [https://e:2379, etcd:2379], lease_ttl_s: 1, tls: { ca: x, cert: y } } }
";
        let Err(Refusal::Invalid(faults)) = NodeConfig::parse(relay, Path::new(".")) else {
            panic!("accepted");
        };
        assert_eq!(
            faults,
            [
                "store.etcd: only the root (a node without parent) keeps its state in etcd",
                "store.etcd.endpoints[1]: \"etcd:2379\" is not a URL of the form http(s)://HOST:PORT",
                "store.etcd.lease_ttl_s: must be at least 2 (etcd's minimum)",
                "store.etcd.tls: cert and key go together",
            ]
        );
    }

    #[test]
    fn unknown_fields_are_refused_with_their_name() {
        let text = format!("{ROOT}colour: blue\n");
        match NodeConfig::parse(&text, Path::new(".")) {
            Err(Refusal::Parse(detail)) => assert!(detail.contains("colour"), "{detail}"),
            _ => panic!("accepted an unknown field"),
        }
    }

    #[test]
    fn every_fault_is_reported_at_once() {
        let text = "
node: Eu_West
parent: { name: Eu_West, address: nowhere }
tls: { cert: a, key: b, ca: c }
data: d
children: [ok-child, -bad]
api: { listen: 127.0.0.1:1, tokens: t }
";
        let Err(Refusal::Invalid(faults)) = NodeConfig::parse(text, Path::new(".")) else {
            panic!("accepted");
        };
        assert_eq!(
            faults,
            [
                "node: \"Eu_West\" is not a valid node name (1-63 characters of a-z, 0-9 and '-', not starting or ending with '-')",
                "parent.name: \"Eu_West\" is not a valid node name (1-63 characters of a-z, 0-9 and '-', not starting or ending with '-')",
                "parent.name: a node cannot be its own parent",
                "parent.address: \"nowhere\" is not an address of the form IP:PORT or HOST:PORT",
                "children[1]: \"-bad\" is not a valid node name (1-63 characters of a-z, 0-9 and '-', not starting or ending with '-')",
                "listen: required when the node has children",
            ]
        );
    }

    #[test]
    fn a_parent_by_name_with_transport_and_proxy_parses_and_tcp_listens_on_quics_port() {
        let text = "node: site
listen: 127.0.0.1:7443
parent: { name: center, address: center.example.com:7443, transport: auto, proxy: \"http://u:p@proxy.lan:3128\", quic_probe_ms: 500, keepalive_ms: 2000 }
tls: { cert: a, key: b, ca: c }
data: d
";
        let c = NodeConfig::parse(text, Path::new(".")).unwrap();
        assert_eq!(c.listen_tcp, c.listen);
        let p = c.parent.unwrap();
        assert_eq!(p.address.to_string(), "center.example.com:7443");
        assert_eq!(p.transport, strata_node::dial::TransportMode::Auto);
        assert_eq!(p.proxy.unwrap().address, "proxy.lan:3128");
        assert_eq!(p.quic_probe_every, Duration::from_millis(500));
        assert_eq!(p.keep_alive, Duration::from_millis(2000));
        let off = text.replace("data: d", "data: d\nlisten_tcp: \"off\"");
        assert_eq!(
            NodeConfig::parse(&off, Path::new(".")).unwrap().listen_tcp,
            None
        );
        let bad = text
            .replace("transport: auto", "transport: udp")
            .replace("http://u:p@", "https://u:p@");
        let Err(Refusal::Invalid(faults)) = NodeConfig::parse(&bad, Path::new(".")) else {
            panic!("accepted");
        };
        assert_eq!(faults.len(), 2, "{faults:?}");
        assert!(
            faults[0].starts_with("parent.transport: \"udp\" is not a transport"),
            "{faults:?}"
        );
        assert!(
            faults[1].starts_with("parent.proxy:") && !faults[1].contains(":p@"),
            "{faults:?}"
        );
        // Without `transport`, the link is `auto` and so takes the proxy.
        let unsaid = text.replace("transport: auto, ", "");
        let p = NodeConfig::parse(&unsaid, Path::new("."))
            .unwrap()
            .parent
            .unwrap();
        assert_eq!(p.transport, strata_node::dial::TransportMode::Auto);
        assert!(p.proxy.is_some());
    }

    #[test]
    fn a_join_section_names_its_files_relative_to_the_config() {
        let text = format!(
            "{ROOT}join: {{ tokens: join/center.tokens, ca_cert: join/center.ca.crt, ca_key: join/center.ca.key }}\n"
        );
        let c = NodeConfig::parse(&text, Path::new("/etc/strata")).unwrap();
        let join = c.join.unwrap();
        assert_eq!(join.tokens, Path::new("/etc/strata/join/center.tokens"));
        assert_eq!(join.ca_key, Path::new("/etc/strata/join/center.ca.key"));
        let text = "node: leaf\nparent: { name: center, address: 127.0.0.1:1 }\ntls: { cert: a, key: b, ca: c }\ndata: d\njoin: { tokens: t, ca_cert: c, ca_key: k }\n";
        let Err(Refusal::Invalid(faults)) = NodeConfig::parse(text, Path::new(".")) else {
            panic!("accepted");
        };
        assert_eq!(faults, ["join: admitting agents needs a listen address"]);
    }

    #[test]
    fn a_renew_section_names_its_ca_or_falls_back_to_the_join_ca() {
        let text = format!("{ROOT}renew: {{ ca_cert: ca.crt, ca_key: ca.key, lifetime_s: 60 }}\n");
        let c = NodeConfig::parse(&text, Path::new("/etc/strata")).unwrap();
        let renew = c.renew.unwrap();
        assert_eq!(
            renew.ca,
            Some(("/etc/strata/ca.crt".into(), "/etc/strata/ca.key".into()))
        );
        assert_eq!(renew.lifetime, Duration::from_secs(60));
        let text = format!("{ROOT}renew: {{ ca_cert: ca.crt, lifetime_s: 0 }}\n");
        let Err(Refusal::Invalid(faults)) = NodeConfig::parse(&text, Path::new(".")) else {
            panic!("accepted");
        };
        assert_eq!(
            faults,
            [
                "renew: ca_cert and ca_key go together",
                "renew.lifetime_s: must be at least 1"
            ]
        );
        let text = format!("{ROOT}renew: {{}}\n");
        let Err(Refusal::Invalid(faults)) = NodeConfig::parse(&text, Path::new(".")) else {
            panic!("accepted");
        };
        assert_eq!(
            faults,
            ["renew: name ca_cert and ca_key (this relay has no join CA to sign with)"]
        );
        let text = ROOT.replace("ca: ca.crt }", "ca: ca.crt, renew_at_percent: 100 }");
        let Err(Refusal::Invalid(faults)) = NodeConfig::parse(&text, Path::new(".")) else {
            panic!("accepted");
        };
        assert_eq!(
            faults,
            ["tls.renew_at_percent: 100 is not between 1 and 99"]
        );
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let err = NodeConfig::load(Path::new("/nonexistent/strata.yaml")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/nonexistent/strata.yaml: cannot read"),
            "{err}"
        );
    }
}
