//! The relay's DNS: an authoritative server for one zone (`dns:` in the relay's
//! configuration) answering `<service>.<namespace>.<zone>` with the addresses of the
//! clusters below this relay where the app is Available, nearest tier first
//! ([`answer`]). A relay knows its own subtree only: the root answers for the whole
//! hierarchy, a site relay for its site.
//!
//! Built on `hickory-proto`'s message codec with a small loop of our own over UDP and
//! TCP (two-byte length prefix, RFC 1035 4.2.2); each query is answered in one turn of
//! the node ([`NodeClient::query`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::{JoinHandle, JoinSet};

use crate::tier::runtime::NodeClient;

pub mod answer;
pub mod config;
pub use answer::{Outcome, Zone};
pub use config::{DEFAULT_DRAIN_GRACE, DEFAULT_TTL, DnsConfig, RawDns};

/// The queries answered so far, by outcome (the relay's metrics).
#[derive(Debug, Default)]
pub struct DnsCounters {
    answered: AtomicU64,
    nxdomain: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
}

impl DnsCounters {
    fn count(&self, outcome: Outcome) {
        let c = match outcome {
            Outcome::Answered => &self.answered,
            Outcome::NxDomain => &self.nxdomain,
            Outcome::Refused => &self.refused,
            Outcome::Dropped => &self.dropped,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Each outcome with its count.
    pub fn snapshot(&self) -> Vec<(Outcome, u64)> {
        [
            (Outcome::Answered, &self.answered),
            (Outcome::NxDomain, &self.nxdomain),
            (Outcome::Refused, &self.refused),
            (Outcome::Dropped, &self.dropped),
        ]
        .into_iter()
        .map(|(o, c)| (o, c.load(Ordering::Relaxed)))
        .collect()
    }
}

/// The DNS server could not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    /// Its UDP or TCP socket could not be bound.
    #[error("dns: cannot listen on {addr} ({transport}): {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// `udp` or `tcp`.
        transport: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The largest UDP answer sent without EDNS (RFC 1035); longer ones are truncated and
/// the client asks again over TCP.
const UDP_PLAIN: usize = 512;

/// Binds `addr` over UDP and TCP and serves the zone from `node` until the returned
/// task is aborted (it owns the connections' tasks). Returns the task and the UDP
/// address bound (the port chosen when `addr` asked for port 0; TCP takes the same).
pub async fn spawn(
    addr: SocketAddr,
    zone: Zone,
    node: NodeClient,
    counters: Arc<DnsCounters>,
) -> Result<(JoinHandle<()>, SocketAddr), DnsError> {
    let udp = UdpSocket::bind(addr)
        .await
        .map_err(|source| DnsError::Bind {
            addr,
            transport: "udp",
            source,
        })?;
    let bound = udp.local_addr().map_err(|source| DnsError::Bind {
        addr,
        transport: "udp",
        source,
    })?;
    let tcp = TcpListener::bind(bound)
        .await
        .map_err(|source| DnsError::Bind {
            addr: bound,
            transport: "tcp",
            source,
        })?;
    tracing::info!(listen = %bound, zone = %zone.apex, ttl = zone.ttl, "dns serving (udp and tcp)");
    let task = tokio::spawn(async move {
        let server = Server {
            zone,
            node,
            counters,
        };
        tokio::join!(server.udp(udp), server.tcp(tcp));
    });
    Ok((task, bound))
}

struct Server {
    zone: Zone,
    node: NodeClient,
    counters: Arc<DnsCounters>,
}

impl Server {
    /// Answers one message in a turn of the node; `None`: nothing to send back.
    async fn reply(&self, query: Vec<u8>) -> Option<Vec<u8>> {
        let zone = self.zone.clone();
        let (bytes, outcome) = self
            .node
            .query(move |core| answer::answer(&zone, &query, |k| core.dns_targets(k)))
            .await?;
        self.counters.count(outcome);
        bytes
    }

    async fn udp(&self, socket: UdpSocket) {
        let mut buf = vec![0u8; 4096];
        loop {
            let (n, from) = match socket.recv_from(&mut buf).await {
                Ok(r) => r,
                Err(e) => {
                    // An ICMP error of an earlier reply (a client gone): keep serving.
                    tracing::debug!(error = %e, "dns: udp receive");
                    continue;
                }
            };
            let Some(mut reply) = self.reply(buf[..n].to_vec()).await else {
                continue;
            };
            if reply.len() > UDP_PLAIN && !has_edns(&buf[..n]) {
                truncate(&mut reply);
            }
            if let Err(e) = socket.send_to(&reply, from).await {
                tracing::debug!(error = %e, client = %from, "dns: udp send");
            }
        }
    }

    async fn tcp(&self, listener: TcpListener) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                biased;
                // Reap finished connections first: the set stays as small as the open ones.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let server = Server {
                            zone: self.zone.clone(),
                            node: self.node.clone(),
                            counters: self.counters.clone(),
                        };
                        connections.spawn(async move { server.connection(stream).await });
                    }
                    Err(e) => tracing::debug!(error = %e, "dns: tcp accept"),
                },
            }
        }
    }

    /// Queries on one TCP connection, each with its two-byte length, until it closes.
    async fn connection(&self, mut stream: TcpStream) {
        loop {
            let mut len = [0u8; 2];
            if stream.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if stream.read_exact(&mut query).await.is_err() {
                return;
            }
            let Some(reply) = self.reply(query).await else {
                return;
            };
            let Ok(n) = u16::try_from(reply.len()) else {
                return;
            };
            if stream.write_all(&n.to_be_bytes()).await.is_err()
                || stream.write_all(&reply).await.is_err()
            {
                return;
            }
        }
    }
}

/// Whether a query carries an OPT record (EDNS: the client takes longer UDP answers).
fn has_edns(query: &[u8]) -> bool {
    hickory_proto::op::Message::from_vec(query).is_ok_and(|m| m.edns.is_some())
}

/// Cuts a reply to its header and question, with the TC bit: the client asks again
/// over TCP.
fn truncate(reply: &mut Vec<u8>) {
    if let Ok(m) = hickory_proto::op::Message::from_vec(reply)
        && let Ok(short) = m.truncate().to_vec()
    {
        *reply = short;
    }
}

/// Asks the DNS server at `server` for the A and AAAA records of `name` over UDP (the
/// demo's probe); `None` when no answer came within `within`.
pub async fn lookup(
    server: SocketAddr,
    name: &str,
    within: std::time::Duration,
) -> Option<Vec<std::net::IpAddr>> {
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RecordType};
    let name = Name::from_ascii(name).ok()?;
    let local: SocketAddr = if server.is_ipv4() {
        ([127, 0, 0, 1], 0).into()
    } else {
        (std::net::Ipv6Addr::LOCALHOST, 0).into()
    };
    let socket = UdpSocket::bind(local).await.ok()?;
    let mut out = Vec::new();
    for kind in [RecordType::A, RecordType::AAAA] {
        let mut q = Message::query();
        q.add_query(Query::query(name.clone(), kind));
        socket.send_to(&q.to_vec().ok()?, server).await.ok()?;
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(within, socket.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        let reply = Message::from_vec(&buf[..n]).ok()?;
        out.extend(
            reply
                .answers
                .iter()
                .filter_map(|r| r.data.to_string().parse::<std::net::IpAddr>().ok()),
        );
    }
    Some(out)
}
