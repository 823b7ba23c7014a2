//! Checking the fields that say where nodes are reached: listen, dial and metrics
//! addresses (and who claims each port), links to parents, and the names the API's
//! certificate carries.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};

use super::model::{Addr, ParentLink, Relay};

#[allow(clippy::too_many_arguments)] // one call per relay kind; a struct would only rename them
pub(super) fn relay_addrs(
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
        dns: None,
    }
}

/// Checks a relay's `dns:` (its address claimed over UDP and TCP).
pub(super) fn dns(
    who: &str,
    raw: &Option<crate::raw::RawDns>,
    udp: &mut BTreeMap<SocketAddr, Vec<String>>,
    tcp: &mut BTreeMap<SocketAddr, Vec<String>>,
    errors: &mut Vec<String>,
) -> Option<super::model::Dns> {
    let raw = raw.as_ref()?;
    if raw.zone.trim_matches('.').is_empty() {
        errors.push(format!("{who}: dns.zone: must not be empty"));
    }
    let listen = raw.listen.as_deref().and_then(|l| {
        let a = addr(who, "dns.listen", Some(l), errors)?;
        claim(&a, format!("{who} (dns)"), udp);
        claim(&a, format!("{who} (dns)"), tcp);
        Some(a)
    });
    Some(super::model::Dns {
        listen,
        zone: raw.zone.clone(),
        ttl_seconds: raw.ttl_seconds,
        drain_grace_seconds: raw.drain_grace_seconds,
    })
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
pub fn check_api_name(name: &str) -> Result<(), crate::names::NameError> {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let bad = || crate::names::NameError {
        name: name.to_owned(),
        what: "neither an IP address nor a DNS name",
        rule: "labels of 1-63 letters, digits and '-', at most 253 characters",
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
pub(super) fn addr(
    who: &str,
    field: &str,
    value: Option<&str>,
    errors: &mut Vec<String>,
) -> Option<Addr> {
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

pub(super) fn claim(a: &Addr, who: String, claims: &mut BTreeMap<SocketAddr, Vec<String>>) {
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
