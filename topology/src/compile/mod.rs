//! From the raw document to a checked [`Topology`], in one pass that collects every
//! error (each naming the node and the fault) and, apart, every warning.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use strata_protocol::selector::{validate_key, validate_value};

use crate::certs::Lifetimes;
use crate::names::check_node_name;
use crate::raw::{RawApi, RawCertificates, RawCluster, RawRelay, RawRoot, RawTopology};

/// The `apiVersion` a topology document carries.
pub const API_VERSION: &str = "strata.dev/v1alpha1";

/// A checked hierarchy: one root, relays whose parents exist and form a tree, clusters
/// below relays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// `metadata.name`.
    pub name: String,
    /// The root first, then every relay after its parent (breadth first, file order).
    pub relays: Vec<Relay>,
    /// The leaf clusters, in file order.
    pub clusters: Vec<Cluster>,
    /// How long issued certificates are valid (`spec.certificates`).
    pub certificates: crate::certs::Lifetimes,
}

/// An address as the topology gives it: a fixed one, or a port to be assigned on the
/// given IP (written `127.0.0.1:0`, or omitted for loopback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addr {
    /// This exact address.
    Fixed(SocketAddr),
    /// Any free port on this IP, chosen when the configs are rendered.
    Auto(IpAddr),
}

/// A relay (the root is one, with no parent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// Node name.
    pub name: String,
    /// The parent relay; `None` for the root.
    pub parent: Option<String>,
    /// Where it listens for children (QUIC).
    pub listen: Addr,
    /// The address children dial, when it differs from `listen` (a wildcard listen).
    pub address: Option<SocketAddr>,
    /// The user API (root only).
    pub api: Option<Addr>,
    /// The DNS names and IP addresses the user API's certificate carries besides the
    /// root's name and its listen address (root only; checked).
    pub api_names: Vec<String>,
    /// Prometheus metrics, if asked for.
    pub metrics: Option<Addr>,
    /// Labels every cluster below inherits.
    pub labels: BTreeMap<String, String>,
    /// Child relays, in file order.
    pub relays: Vec<String>,
    /// Child clusters, in file order.
    pub clusters: Vec<String>,
    /// Single-use join tokens to issue for agents joining below it.
    pub join_tokens: u32,
    /// How it reaches its parent (empty at the root).
    pub link: ParentLink,
}

/// How a node reaches its parent, as the topology says (checked, kept as written for
/// the node's configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentLink {
    /// `parentAddress`: dialed instead of the parent's own address (`host:port`
    /// allowed).
    pub address: Option<String>,
    /// `transport`: `auto`, `quic` or `tcp`.
    pub transport: Option<String>,
    /// `proxy`: an `http://` CONNECT proxy for TLS/TCP.
    pub proxy: Option<String>,
    /// `keepaliveMs`: how often a TLS/TCP link pings.
    pub keepalive_ms: Option<u64>,
}

/// A leaf cluster and its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Name of the cluster and of its agent.
    pub name: String,
    /// The relay its agent connects to.
    pub parent: String,
    /// The cluster's own labels.
    pub labels: BTreeMap<String, String>,
    /// The cluster's properties.
    pub properties: BTreeMap<String, String>,
    /// How its agent reaches its relay.
    pub link: ParentLink,
}

/// What compiling found: errors (the topology is refused) and warnings (it is not).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// Faults, each naming the node or entry and what is wrong.
    pub errors: Vec<String>,
    /// Doubtful but usable choices.
    pub warnings: Vec<String>,
}

impl Topology {
    /// The root relay.
    pub fn root(&self) -> &Relay {
        &self.relays[0]
    }

    /// A relay by name.
    pub fn relay(&self, name: &str) -> Option<&Relay> {
        self.relays.iter().find(|r| r.name == name)
    }

    /// Every node name (relays, then clusters).
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.relays
            .iter()
            .map(|r| r.name.as_str())
            .chain(self.clusters.iter().map(|c| c.name.as_str()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Root,
    Relay,
    Cluster,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Root => "root",
            Kind::Relay => "relay",
            Kind::Cluster => "cluster",
        }
    }
}

/// Checks a parsed document. Returns the topology only when there is no error; the
/// diagnostics always.
pub fn compile(raw: RawTopology) -> (Option<Topology>, Diagnostics) {
    let mut d = Diagnostics::default();
    let errors = &mut d.errors;
    if raw.api_version != API_VERSION {
        errors.push(format!(
            "apiVersion: expected {API_VERSION:?}, found {:?}",
            raw.api_version
        ));
    }
    if raw.kind != "Topology" {
        errors.push(format!("kind: expected \"Topology\", found {:?}", raw.kind));
    }
    if raw.metadata.name.trim().is_empty() {
        errors.push("metadata.name: must not be empty".to_owned());
    }
    let spec = raw.spec;
    let certificates = lifetimes(spec.certificates.as_ref(), &mut d);
    let errors = &mut d.errors;

    // Names: valid, and each used once.
    let mut kinds: BTreeMap<&str, Vec<Kind>> = BTreeMap::new();
    let all = spec
        .root
        .iter()
        .map(|r| (r.name.as_str(), Kind::Root))
        .chain(spec.relays.iter().map(|r| (r.name.as_str(), Kind::Relay)))
        .chain(
            spec.clusters
                .iter()
                .map(|c| (c.name.as_str(), Kind::Cluster)),
        );
    for (name, kind) in all {
        if let Err(why) = check_node_name(name) {
            errors.push(format!("{} {name:?}: name: {why}", kind.word()));
        }
        kinds.entry(name).or_default().push(kind);
    }
    for (name, ks) in &kinds {
        if ks.len() > 1 {
            let words: Vec<&str> = ks.iter().map(|k| k.word()).collect();
            errors.push(format!(
                "name {name:?} is used by {} nodes ({})",
                ks.len(),
                words.join(", ")
            ));
        }
    }
    let kind_of = |name: &str| kinds.get(name).and_then(|k| k.first().copied());

    // One root.
    let root_name = spec.root.as_ref().map(|r| r.name.clone());
    if root_name.is_none() {
        errors.push("no root: spec.root is missing".to_owned());
    }
    for r in spec.relays.iter().filter(|r| r.parent.is_none()) {
        match &root_name {
            Some(root) => errors.push(format!(
                "two roots: relay {:?} has no parent, and {root:?} is the root",
                r.name
            )),
            None => errors.push(format!("relay {:?}: no parent", r.name)),
        }
    }

    // Parents exist and are relays.
    let parent_ok = |who: String, parent: &str, errors: &mut Vec<String>| -> bool {
        match kind_of(parent) {
            None => {
                errors.push(format!("{who}: parent {parent:?} is not defined"));
                false
            }
            Some(Kind::Cluster) => {
                errors.push(format!(
                    "{who}: parent {parent:?} is a cluster; only relays have children"
                ));
                false
            }
            Some(_) => true,
        }
    };
    for r in &spec.relays {
        if let Some(p) = &r.parent {
            parent_ok(format!("relay {:?}", r.name), p, errors);
        }
    }
    for c in &spec.clusters {
        let who = format!("cluster {:?}", c.name);
        parent_ok(who.clone(), &c.parent, errors);
        parent_link(
            &who,
            &c.parent_address,
            &c.transport,
            &c.proxy,
            c.keepalive_ms,
            errors,
        );
    }
    let mut join_tokens: BTreeMap<&str, u32> = BTreeMap::new();
    let mut join_seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, j) in spec.joining.iter().enumerate() {
        let who = format!("joining[{i}]");
        if parent_ok(who.clone(), &j.parent, errors)
            && let Some(first) = join_seen.insert(&j.parent, i)
        {
            errors.push(format!(
                "{who}: parent {:?} already has an entry (joining[{first}])",
                j.parent
            ));
        }
        if j.tokens == 0 {
            errors.push(format!("{who}: tokens must be at least 1"));
        }
        *join_tokens.entry(&j.parent).or_default() += j.tokens;
    }

    check_cycles(&spec.relays, errors);

    // Labels.
    let labelled = spec
        .root
        .iter()
        .map(|r| (Kind::Root, &r.name, &r.labels))
        .chain(
            spec.relays
                .iter()
                .map(|r| (Kind::Relay, &r.name, &r.labels)),
        )
        .chain(
            spec.clusters
                .iter()
                .map(|c| (Kind::Cluster, &c.name, &c.labels)),
        );
    for (kind, name, labels) in labelled {
        for (k, v) in labels {
            if let Err(why) = validate_key(k).and_then(|()| validate_value(v)) {
                errors.push(format!("{} {name:?}: labels: {why}", kind.word()));
            }
        }
    }

    // Addresses.
    let mut udp: BTreeMap<SocketAddr, Vec<String>> = BTreeMap::new();
    let mut tcp: BTreeMap<SocketAddr, Vec<String>> = BTreeMap::new();
    let mut has_children: BTreeSet<&str> = BTreeSet::new();
    for p in spec
        .relays
        .iter()
        .filter_map(|r| r.parent.as_deref())
        .chain(spec.clusters.iter().map(|c| c.parent.as_str()))
        .chain(spec.joining.iter().map(|j| j.parent.as_str()))
    {
        has_children.insert(p);
    }
    let mut relays: BTreeMap<String, Relay> = BTreeMap::new();
    let root_relay = spec.root.as_ref().map(|r| {
        let who = format!("root {:?}", r.name);
        let RawRoot {
            name,
            listen,
            address,
            api,
            metrics,
            labels,
        } = r;
        let mut relay = relay_addrs(
            &who, name, listen, address, metrics, &mut udp, &mut tcp, errors,
        );
        let (api, names): (Option<&str>, &[String]) = match api {
            None => (None, &[]),
            Some(RawApi::Listen(a)) => (Some(a.as_str()), &[]),
            Some(RawApi::Full(f)) => (f.listen.as_deref(), &f.names),
        };
        for (i, n) in names.iter().enumerate() {
            if let Err(why) = check_api_name(n) {
                errors.push(format!("{who}: api.names[{i}]: {why}"));
            }
        }
        relay.api_names = names.iter().map(|n| n.to_ascii_lowercase()).collect();
        relay.api = Some(
            addr(&who, "api", api, errors)
                .inspect(|a| claim(a, format!("{who} (api)"), &mut tcp))
                .unwrap_or(Addr::Auto(Ipv4Addr::LOCALHOST.into())),
        );
        relay.labels = labels.clone();
        relay
    });
    for r in &spec.relays {
        let who = format!("relay {:?}", r.name);
        let RawRelay {
            name,
            parent,
            listen,
            address,
            metrics,
            labels,
            parent_address,
            transport,
            proxy,
            keepalive_ms,
        } = r;
        let mut relay = relay_addrs(
            &who, name, listen, address, metrics, &mut udp, &mut tcp, errors,
        );
        relay.link = parent_link(
            &who,
            parent_address,
            transport,
            proxy,
            *keepalive_ms,
            errors,
        );
        relay.parent = parent.clone();
        relay.labels = labels.clone();
        relays.entry(name.clone()).or_insert(relay);
    }
    // A conflict of two listens shows in both maps: said once.
    let said_for_udp = |a: &SocketAddr, who: &Vec<String>| udp.get(a) == Some(who);
    for (a, who) in udp
        .iter()
        .chain(tcp.iter().filter(|(a, w)| !said_for_udp(a, w)))
    {
        if who.len() > 1 {
            errors.push(format!(
                "address {a} is claimed {} times: {}",
                who.len(),
                who.join(", ")
            ));
        }
    }
    for (name, relay) in root_relay.iter().map(|r| (&r.name, r)).chain(relays.iter()) {
        let wildcard = matches!(relay.listen, Addr::Fixed(a) if a.ip().is_unspecified());
        if wildcard && relay.address.is_none() && has_children.contains(name.as_str()) {
            errors.push(format!(
                "{} {name:?}: listen {} is a wildcard; give the address its children dial (address: IP:PORT)",
                if relay.parent.is_none() { "root" } else { "relay" },
                fmt_addr(relay.listen)
            ));
        }
    }

    // Warnings: relays nobody is below.
    for (kind, name) in spec
        .root
        .iter()
        .map(|r| (Kind::Root, &r.name))
        .chain(spec.relays.iter().map(|r| (Kind::Relay, &r.name)))
    {
        if !has_children.contains(name.as_str()) {
            d.warnings.push(format!(
                "{} {name:?}: has no children (no relay, cluster or joining entry names it as parent)",
                kind.word()
            ));
        }
    }

    if !d.errors.is_empty() {
        return (None, d);
    }
    let Some(mut root) = root_relay else {
        return (None, d);
    };
    // Tree order: breadth first from the root, children in file order.
    let mut order = vec![root.name.clone()];
    let mut i = 0;
    let mut ordered = Vec::new();
    while i < order.len() {
        let name = order[i].clone();
        i += 1;
        let mut relay = if name == root.name {
            root.clone()
        } else {
            match relays.remove(&name) {
                Some(r) => r,
                None => continue,
            }
        };
        relay.relays = spec
            .relays
            .iter()
            .filter(|r| r.parent.as_deref() == Some(name.as_str()))
            .map(|r| r.name.clone())
            .collect();
        relay.clusters = spec
            .clusters
            .iter()
            .filter(|c| c.parent == name)
            .map(|c| c.name.clone())
            .collect();
        relay.join_tokens = join_tokens.get(name.as_str()).copied().unwrap_or(0);
        order.extend(relay.relays.iter().cloned());
        if name == root.name {
            root = relay.clone();
        }
        ordered.push(relay);
    }
    let clusters = spec
        .clusters
        .into_iter()
        .map(
            |RawCluster {
                 name,
                 parent,
                 labels,
                 properties,
                 parent_address,
                 transport,
                 proxy,
                 keepalive_ms,
             }| Cluster {
                name,
                parent,
                labels,
                properties,
                link: ParentLink {
                    address: parent_address,
                    transport,
                    proxy,
                    keepalive_ms,
                },
            },
        )
        .collect();
    (
        Some(Topology {
            name: raw.metadata.name,
            relays: ordered,
            clusters,
            certificates,
        }),
        d,
    )
}

/// `spec.certificates`, checked: at least a day each; a node certificate outliving the
/// CA is a warning (it stops verifying when the CA expires).
fn lifetimes(raw: Option<&RawCertificates>, d: &mut Diagnostics) -> Lifetimes {
    let mut out = Lifetimes::default();
    let Some(raw) = raw else {
        return out;
    };
    for (field, given, slot) in [
        ("nodeDays", raw.node_days, &mut out.node_days),
        ("caDays", raw.ca_days, &mut out.ca_days),
    ] {
        match given {
            Some(0) => d
                .errors
                .push(format!("certificates.{field}: must be at least 1 (day)")),
            Some(days) => *slot = days,
            None => {}
        }
    }
    if out.node_days > out.ca_days {
        d.warnings.push(format!(
            "certificates: nodeDays ({}) is longer than caDays ({}): node certificates stop verifying when the CA expires",
            out.node_days, out.ca_days
        ));
    }
    out
}

#[allow(clippy::too_many_arguments)] // one call per relay kind; a struct would only rename them
fn relay_addrs(
    who: &str,
    name: &str,
    listen: &Option<String>,
    address: &Option<String>,
    metrics: &Option<String>,
    udp: &mut BTreeMap<SocketAddr, Vec<String>>,
    tcp: &mut BTreeMap<SocketAddr, Vec<String>>,
    errors: &mut Vec<String>,
) -> Relay {
    let listen = addr(who, "listen", listen.as_deref(), errors)
        .unwrap_or(Addr::Auto(Ipv4Addr::LOCALHOST.into()));
    let address = address
        .as_deref()
        .and_then(|a| match a.parse::<SocketAddr>() {
            Ok(s) if s.ip().is_unspecified() || s.port() == 0 => {
                errors.push(format!(
                    "{who}: address: {a:?} must be a specific IP and port children can dial"
                ));
                None
            }
            Ok(s) => Some(s),
            Err(_) => {
                errors.push(format!(
                    "{who}: address: {a:?} is not an address of the form IP:PORT"
                ));
                None
            }
        });
    // Two relays conflict when they listen on one port of one host: a specific IP names
    // the host; a wildcard listen is on the host of its dial address, when given.
    let on_host = match (listen, address) {
        (Addr::Fixed(l), Some(a)) if l.ip().is_unspecified() => {
            Some(Addr::Fixed(SocketAddr::new(a.ip(), l.port())))
        }
        (Addr::Fixed(l), None) if l.ip().is_unspecified() => None,
        (l, _) => Some(l),
    };
    if let Some(a) = on_host {
        claim(&a, format!("{who} (listen)"), udp);
        // The TLS/TCP fallback listens on the same port over TCP.
        claim(&a, format!("{who} (listen)"), tcp);
    }
    let metrics = metrics.as_deref().and_then(|m| {
        let a = addr(who, "metrics", Some(m), errors)?;
        claim(&a, format!("{who} (metrics)"), tcp);
        Some(a)
    });
    Relay {
        name: name.to_owned(),
        parent: None,
        listen,
        address,
        api: None,
        api_names: Vec::new(),
        metrics,
        labels: BTreeMap::new(),
        relays: Vec::new(),
        clusters: Vec::new(),
        join_tokens: 0,
        link: ParentLink::default(),
    }
}

/// Checks how a node reaches its parent: `parentAddress` is `IP:PORT` or `host:port`, or
/// a comma-separated list of them (the replicas of a root on etcd),
/// `transport` one of `auto`, `quic`, `tcp`, `proxy` an `http://` URL and not with
/// `quic`.
pub(crate) fn parent_link(
    who: &str,
    address: &Option<String>,
    transport: &Option<String>,
    proxy: &Option<String>,
    keepalive_ms: Option<u64>,
    errors: &mut Vec<String>,
) -> ParentLink {
    if let Some(ms) = keepalive_ms
        && !(100..=3_600_000).contains(&ms)
    {
        errors.push(format!(
            "{who}: keepaliveMs: {ms} is out of range: expected 100 to 3600000 (milliseconds)"
        ));
    }
    if keepalive_ms.is_some() && transport.as_deref() == Some("quic") {
        errors.push(format!(
            "{who}: keepaliveMs: only TLS/TCP links ping on their own: set `transport: tcp` or `auto`"
        ));
    }
    if let Some(list) = address {
        // A comma-separated list names the parent's replicas (a root on etcd).
        for a in list.split(',').map(str::trim) {
            let ok = a.parse::<SocketAddr>().is_ok()
                || a.rsplit_once(':').is_some_and(|(h, p)| {
                    p.parse::<u16>().is_ok_and(|p| p != 0)
                        && !h.is_empty()
                        && h.split('.').all(|l| {
                            !l.is_empty()
                                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                        })
                });
            if !ok {
                errors.push(format!(
                    "{who}: parentAddress: {a:?} is not an address of the form IP:PORT or HOST:PORT"
                ));
            }
        }
    }
    if let Some(t) = transport
        && !matches!(t.as_str(), "auto" | "quic" | "tcp")
    {
        errors.push(format!(
            "{who}: transport: {t:?} is not a transport: expected auto, quic or tcp"
        ));
    }
    if let Some(p) = proxy {
        if p.contains("://") && !p.starts_with("http://") {
            errors.push(format!(
                "{who}: proxy: only http:// CONNECT proxies are supported (the link inside is TLS end to end)"
            ));
        }
        // Absent, the node's default (`auto`) applies, which takes a proxy.
        if transport.as_deref() == Some("quic") {
            errors.push(format!(
                "{who}: proxy: a proxy carries TLS over TCP only: set `transport: tcp` or `auto`"
            ));
        }
    }
    ParentLink {
        address: address.clone(),
        transport: transport.clone(),
        proxy: proxy.clone(),
        keepalive_ms,
    }
}

/// Checks a name the API's certificate is to carry: an IP address, or a DNS name
/// (labels of 1-63 letters, digits and '-', not starting or ending with '-', at most
/// 253 characters; `*.` as the first label for a wildcard).
pub fn check_api_name(name: &str) -> Result<(), String> {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let bad = || {
        format!(
            "{name:?} is neither an IP address nor a DNS name (labels of 1-63 letters, digits and '-', at most 253 characters)"
        )
    };
    let rest = name.strip_prefix("*.").unwrap_or(name);
    if rest.is_empty() || name.len() > 253 {
        return Err(bad());
    }
    let ok = rest.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    if ok { Ok(()) } else { Err(bad()) }
}

/// Parses an address field; absent means a loopback port assigned later.
fn addr(who: &str, field: &str, value: Option<&str>, errors: &mut Vec<String>) -> Option<Addr> {
    let Some(value) = value else {
        return Some(Addr::Auto(Ipv4Addr::LOCALHOST.into()));
    };
    match value.parse::<SocketAddr>() {
        Ok(a) if a.port() == 0 && a.ip().is_unspecified() => {
            errors.push(format!(
                "{who}: {field}: {value:?}: an assigned port needs a specific IP (e.g. 127.0.0.1:0)"
            ));
            None
        }
        Ok(a) if a.port() == 0 => Some(Addr::Auto(a.ip())),
        Ok(a) => Some(Addr::Fixed(a)),
        Err(_) => {
            errors.push(format!(
                "{who}: {field}: {value:?} is not an address of the form IP:PORT"
            ));
            None
        }
    }
}

fn claim(a: &Addr, who: String, claims: &mut BTreeMap<SocketAddr, Vec<String>>) {
    if let Addr::Fixed(a) = a {
        claims.entry(*a).or_default().push(who);
    }
}

/// How an address is written in messages.
pub fn fmt_addr(a: Addr) -> String {
    match a {
        Addr::Fixed(a) => a.to_string(),
        Addr::Auto(ip) => SocketAddr::new(ip, 0).to_string(),
    }
}

/// Reports each cycle among relay parents once, starting at its first relay in file
/// order: `cycle: a -> b -> a`.
fn check_cycles(relays: &[RawRelay], errors: &mut Vec<String>) {
    let index: BTreeMap<&str, usize> = relays
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    let mut done = vec![false; relays.len()];
    for start in 0..relays.len() {
        let mut path: Vec<usize> = Vec::new();
        let mut at = start;
        loop {
            if done[at] {
                break;
            }
            if let Some(pos) = path.iter().position(|&p| p == at) {
                let cycle = &path[pos..];
                let first = (0..cycle.len()).min_by_key(|&k| cycle[k]).unwrap_or(0);
                let mut names: Vec<&str> = (0..cycle.len())
                    .map(|k| relays[cycle[(first + k) % cycle.len()]].name.as_str())
                    .collect();
                names.push(names[0]);
                errors.push(format!("cycle: {}", names.join(" -> ")));
                break;
            }
            path.push(at);
            match relays[at].parent.as_deref().and_then(|p| index.get(p)) {
                Some(&next) => at = next,
                None => break,
            }
        }
        for p in path {
            done[p] = true;
        }
    }
}
