//! Where the parent is and reaching an address: [`ParentAddress`] (an `IP:PORT`, a
//! `host:port` resolved at every connect, or several replicas), address families
//! interleaved, and happy eyeballs (RFC 8305): every address tried, the first to answer
//! wins.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// How long after starting one address the next is started when the first has not
/// answered yet (RFC 8305's connection attempt delay).
pub const ATTEMPT_DELAY: Duration = Duration::from_millis(250);

/// Why a name gave no address ([`ParentAddress::resolve`], [`tcp_happy_eyeballs`]).
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The lookup failed.
    #[error("cannot resolve {host}: {error}")]
    Lookup {
        /// The name (with its port, as it was looked up).
        host: String,
        /// The resolver's error.
        error: std::io::Error,
    },
    /// The name resolves, but to no address.
    #[error("{host} resolves to no address")]
    NoAddress {
        /// The name.
        host: String,
    },
    /// No replica's name resolved: each one's error, in order.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Each(Vec<ResolveError>),
}

/// Why [`tcp_happy_eyeballs`] did not connect.
#[derive(Debug, thiserror::Error)]
pub enum TcpConnectError {
    /// The name gave no address.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// No address answered: each one's error (`ADDRESS: ERROR; ...`).
    #[error("{detail}")]
    Connect {
        /// Each address's error.
        detail: String,
    },
}

/// Where the parent listens: an address, or a name resolved at every connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentAddress {
    /// `IP:PORT`.
    Socket(SocketAddr),
    /// `host:port`, resolved (IPv6 and IPv4) at every connect.
    Host {
        /// The DNS name.
        host: String,
        /// The port (UDP for QUIC, TCP for the fallback).
        port: u16,
    },
    /// Several replicas of the parent (`a:1,b:2`, each an address or a name): every
    /// address of every one is tried at each connect, in the order given, the first to
    /// answer wins; so a child whose replica died moves to another.
    Any(Vec<ParentAddress>),
}

impl From<SocketAddr> for ParentAddress {
    fn from(a: SocketAddr) -> Self {
        ParentAddress::Socket(a)
    }
}

impl fmt::Display for ParentAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParentAddress::Socket(a) => write!(f, "{a}"),
            ParentAddress::Host { host, port } => write!(f, "{host}:{port}"),
            ParentAddress::Any(all) => {
                let all: Vec<String> = all.iter().map(ToString::to_string).collect();
                f.write_str(&all.join(","))
            }
        }
    }
}

impl FromStr for ParentAddress {
    type Err = String;

    /// `IP:PORT`, `[IPv6]:PORT` or `host:port` (a DNS name); several, comma-separated,
    /// for a parent of several replicas.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains(',') {
            let all = s
                .split(',')
                .map(|one| one.trim().parse::<ParentAddress>())
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(ParentAddress::Any(all));
        }
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(ParentAddress::Socket(a));
        }
        let bad = || format!("{s:?} is not an address of the form IP:PORT or HOST:PORT");
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let valid_label = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        let host = host.trim_end_matches('.');
        if host.is_empty() || host.len() > 253 || !host.split('.').all(valid_label) {
            return Err(bad());
        }
        Ok(ParentAddress::Host {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl ParentAddress {
    /// The host part, as a proxy's `NO_PROXY` compares it.
    pub fn host(&self) -> String {
        match self {
            ParentAddress::Socket(a) => a.ip().to_string(),
            ParentAddress::Host { host, .. } => host.clone(),
            ParentAddress::Any(all) => all.first().map(Self::host).unwrap_or_default(),
        }
    }

    /// Each replica's address (one for a single address or name).
    pub fn each(&self) -> Vec<&ParentAddress> {
        match self {
            ParentAddress::Any(all) => all.iter().flat_map(Self::each).collect(),
            one => vec![one],
        }
    }

    /// What a proxy is asked to CONNECT to.
    pub(crate) fn target(&self) -> String {
        self.to_string()
    }

    /// Every address now, IPv6 and IPv4 interleaved starting with the family the
    /// resolver put first.
    pub async fn resolve(&self) -> Result<Vec<SocketAddr>, ResolveError> {
        match self {
            ParentAddress::Socket(a) => Ok(vec![*a]),
            ParentAddress::Any(all) => {
                // Every replica's addresses in the order given; a name that does not
                // resolve now leaves the others.
                let mut found = Vec::new();
                let mut errors = Vec::new();
                for one in all {
                    match Box::pin(one.resolve()).await {
                        Ok(addrs) => {
                            for a in addrs {
                                if !found.contains(&a) {
                                    found.push(a);
                                }
                            }
                        }
                        Err(e) => errors.push(e),
                    }
                }
                if found.is_empty() {
                    return Err(ResolveError::Each(errors));
                }
                Ok(found)
            }
            ParentAddress::Host { host, port } => {
                let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), *port))
                    .await
                    .map_err(|error| ResolveError::Lookup {
                        host: host.clone(),
                        error,
                    })?
                    .collect();
                if found.is_empty() {
                    return Err(ResolveError::NoAddress { host: host.clone() });
                }
                Ok(interleave(found))
            }
        }
    }
}

/// RFC 8305 §4: alternate address families, the first family first; duplicates go.
fn interleave(found: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let first_v6 = found.first().is_some_and(SocketAddr::is_ipv6);
    let mut unique: Vec<SocketAddr> = Vec::new();
    for a in found {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    let (mut a, mut b): (Vec<_>, Vec<_>) =
        unique.into_iter().partition(|x| x.is_ipv6() == first_v6);
    a.reverse();
    b.reverse();
    let mut out = Vec::new();
    while !a.is_empty() || !b.is_empty() {
        out.extend(a.pop());
        out.extend(b.pop());
    }
    out
}

/// Connects TCP to `host:port` (a name or an address), every address tried.
pub async fn tcp_happy_eyeballs(hostport: &str) -> Result<TcpStream, TcpConnectError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(hostport)
        .await
        .map_err(|error| ResolveError::Lookup {
            host: hostport.to_owned(),
            error,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(ResolveError::NoAddress {
            host: hostport.to_owned(),
        }
        .into());
    }
    race(interleave(addrs), |a| async move {
        TcpStream::connect(a).await.map_err(|e| format!("{a}: {e}"))
    })
    .await
    .map_err(|detail| TcpConnectError::Connect { detail })
}

/// Happy eyeballs: starts `attempt` on the first address, then on the next one every
/// [`ATTEMPT_DELAY`] or as soon as one fails; the first success wins and the others
/// are dropped. A single address is tried in place (no task).
pub(crate) async fn race<T, F, Fut>(addrs: Vec<SocketAddr>, attempt: F) -> Result<T, String>
where
    T: Send + 'static,
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = Result<T, String>> + Send + 'static,
{
    if let [one] = addrs.as_slice() {
        return attempt(*one).await;
    }
    let mut running = JoinSet::new();
    let mut next = addrs.into_iter();
    let mut errors = Vec::new();
    if let Some(a) = next.next() {
        running.spawn(attempt(a));
    }
    let mut more = next.len() > 0;
    loop {
        if running.is_empty() && !more {
            return Err(if errors.is_empty() {
                "no address to try".into()
            } else {
                errors.join("; ")
            });
        }
        let start_next = tokio::select! {
            done = running.join_next(), if !running.is_empty() => match done {
                Some(Ok(Ok(v))) => return Ok(v),
                Some(Ok(Err(e))) => { errors.push(e); true }
                Some(Err(e)) => { errors.push(e.to_string()); true }
                None => true,
            },
            _ = tokio::time::sleep(ATTEMPT_DELAY), if more => true,
        };
        if start_next && let Some(a) = next.next() {
            running.spawn(attempt(a));
        }
        more = next.len() > 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_lists_parse() {
        let a = "127.0.0.1:1, root-1.example.net:2"
            .parse::<ParentAddress>()
            .unwrap();
        assert_eq!(
            a,
            ParentAddress::Any(vec![
                ParentAddress::Socket("127.0.0.1:1".parse().unwrap()),
                ParentAddress::Host {
                    host: "root-1.example.net".into(),
                    port: 2
                },
            ])
        );
        assert_eq!(a.to_string(), "127.0.0.1:1,root-1.example.net:2");
        assert_eq!(a.each().len(), 2);
        assert!("127.0.0.1:1,nope".parse::<ParentAddress>().is_err());
    }

    #[tokio::test]
    async fn a_replica_list_resolves_to_every_address_in_order() {
        let a = "127.0.0.1:2,127.0.0.1:1,127.0.0.1:2"
            .parse::<ParentAddress>()
            .unwrap();
        let got = a.resolve().await.unwrap();
        assert_eq!(
            got,
            vec![
                "127.0.0.1:2".parse().unwrap(),
                "127.0.0.1:1".parse().unwrap()
            ]
        );
    }

    #[test]
    fn addresses_and_names_parse() {
        assert_eq!(
            "127.0.0.1:7443".parse::<ParentAddress>().unwrap(),
            ParentAddress::Socket("127.0.0.1:7443".parse().unwrap())
        );
        assert_eq!(
            "EU-West.relays.example.com:7443"
                .parse::<ParentAddress>()
                .unwrap(),
            ParentAddress::Host {
                host: "eu-west.relays.example.com".into(),
                port: 7443
            }
        );
        assert!("[::1]:1".parse::<ParentAddress>().is_ok());
        for bad in ["nowhere", "a b:1", "host:99999", ":1", "-x:1"] {
            let e = bad.parse::<ParentAddress>().unwrap_err();
            assert!(e.contains("HOST:PORT"), "{e}");
        }
    }

    #[test]
    fn families_alternate_starting_with_the_first() {
        let v4a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let v4b: SocketAddr = "10.0.0.2:1".parse().unwrap();
        let v6a: SocketAddr = "[fd00::1]:1".parse().unwrap();
        let v6b: SocketAddr = "[fd00::2]:1".parse().unwrap();
        assert_eq!(
            interleave(vec![v6a, v6b, v4a, v4b, v4a]),
            vec![v6a, v4a, v6b, v4b]
        );
        assert_eq!(interleave(vec![v4a, v6a]), vec![v4a, v6a]);
    }
}
