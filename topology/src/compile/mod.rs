//! From the raw document to a checked [`Topology`], in one pass that collects every
//! error (each naming the node and the fault) and, apart, every warning.

mod addrs;
mod backend;
mod model;

pub(crate) use self::addrs::parent_link;
pub use self::addrs::{check_api_name, fmt_addr};
pub use self::backend::ClusterBackend;
pub use self::model::{Addr, Cluster, Diagnostics, Dns, ParentLink, Relay, Topology};

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};

use strata_protocol::selector::{validate_key, validate_value};

use self::addrs::{addr, claim, relay_addrs};
use crate::certs::Lifetimes;
use crate::names::check_node_name;
use crate::raw::{RawApi, RawCertificates, RawCluster, RawRelay, RawRoot, RawTopology};

/// The `apiVersion` a topology document carries.
pub const API_VERSION: &str = "strata.dev/v1alpha1";

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
    let backends: Vec<Option<ClusterBackend>> = spec
        .clusters
        .iter()
        .map(|c| {
            backend::reserved_properties(c, errors);
            backend::cluster_backend(c, errors)
        })
        .collect();
    let errors = &mut d.errors;
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
            dns,
        } = r;
        let mut relay = relay_addrs(
            &who, name, listen, address, metrics, &mut udp, &mut tcp, errors,
        );
        relay.dns = addrs::dns(&who, dns, &mut udp, &mut tcp, errors);
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
            dns,
            parent_address,
            transport,
            proxy,
            keepalive_ms,
        } = r;
        let mut relay = relay_addrs(
            &who, name, listen, address, metrics, &mut udp, &mut tcp, errors,
        );
        relay.dns = addrs::dns(&who, dns, &mut udp, &mut tcp, errors);
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
    let cluster_metrics: Vec<Option<Addr>> = spec
        .clusters
        .iter()
        .map(|c| {
            let who = format!("cluster {:?}", c.name);
            let a = addr(&who, "metrics", Some(c.metrics.as_deref()?), errors)?;
            claim(&a, format!("{who} (metrics)"), &mut tcp);
            Some(a)
        })
        .collect();
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
        .zip(backends)
        .zip(cluster_metrics)
        .map(
            |(
                (
                    RawCluster {
                        name,
                        parent,
                        labels,
                        properties,
                        parent_address,
                        transport,
                        proxy,
                        keepalive_ms,
                        kubernetes: _,
                        simulated: _,
                        metrics: _,
                    },
                    backend,
                ),
                metrics,
            )| Cluster {
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
                backend,
                metrics,
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
