//! One connection between a child and its parent, whichever transport carries it: a
//! QUIC connection, or TLS 1.3 over TCP ([`crate::net::tcp`]). The driver, the relay's
//! runtime and the cores see a [`Link`] and never which transport it is, except where
//! they say so to people (logs, metrics, `relay status`).

use std::fmt;
use std::net::SocketAddr;

use quinn::VarInt;
use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use strata_protocol::wire::LinkPath;

use super::tcp::TcpLink;

/// Which transport a link runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// QUIC over UDP.
    Quic,
    /// TLS 1.3 over TCP (directly or through an HTTP CONNECT proxy).
    Tcp,
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Quic => "quic",
            TransportKind::Tcp => "tcp",
        })
    }
}

/// A live connection to a peer node. Cloning it gives another handle on the same
/// connection; closing any handle closes the connection.
#[derive(Debug, Clone)]
pub enum Link {
    /// A QUIC connection.
    Quic(quinn::Connection),
    /// TLS over TCP, the three stream classes multiplexed with per-class credit.
    Tcp(TcpLink),
}

impl From<quinn::Connection> for Link {
    fn from(c: quinn::Connection) -> Self {
        Link::Quic(c)
    }
}

impl Link {
    /// Which transport carries it.
    pub fn kind(&self) -> TransportKind {
        match self {
            Link::Quic(_) => TransportKind::Quic,
            Link::Tcp(_) => TransportKind::Tcp,
        }
    }

    /// How this side's connection reaches the peer: through an HTTP CONNECT proxy or
    /// directly (what a child tells its parent, [`ChildToParent::LinkPath`]).
    ///
    /// [`ChildToParent::LinkPath`]: strata_protocol::wire::ChildToParent::LinkPath
    pub fn via(&self) -> LinkPath {
        match self {
            Link::Tcp(t) if t.proxied() => LinkPath::Proxied,
            _ => LinkPath::Direct,
        }
    }

    /// The peer's address as this side sees it (a proxy's, through a proxy).
    pub fn remote_address(&self) -> SocketAddr {
        match self {
            Link::Quic(c) => c.remote_address(),
            Link::Tcp(t) => t.remote_address(),
        }
    }

    /// Closes the connection with an application code (see
    /// [`crate::net::transport::close_code`]) and a reason the peer is shown. Messages
    /// already queued on a TCP link are written first; QUIC closes at once.
    pub fn close(&self, code: u32, reason: &[u8]) {
        match self {
            Link::Quic(c) => c.close(VarInt::from_u32(code), reason),
            Link::Tcp(t) => t.close(code, reason),
        }
    }

    /// Resolves when the connection is closed, with why.
    pub async fn closed(&self) -> String {
        match self {
            Link::Quic(c) => c.closed().await.to_string(),
            Link::Tcp(t) => t.closed().await,
        }
    }

    /// The certificates the peer presented (leaf first); `None` when it presented none.
    pub fn peer_chain(&self) -> Option<Vec<CertificateDer<'static>>> {
        match self {
            Link::Quic(c) => super::tls::peer_chain(c),
            Link::Tcp(t) => t.peer_chain(),
        }
    }

    /// Whether debug-tunnel streams can be opened toward the peer on this link: always
    /// on QUIC; on TLS/TCP when this side is the parent and the child's build carries
    /// them.
    pub fn carries_tunnels(&self) -> bool {
        match self {
            Link::Quic(_) => true,
            Link::Tcp(t) => t.carries_tunnels(),
        }
    }

    /// What went over the wire so far, read once (quinn's statistics are copied whole
    /// under the connection's lock).
    pub fn wire(&self) -> Wire {
        match self {
            Link::Quic(c) => {
                let s = c.stats();
                Wire {
                    bytes: (s.udp_tx.bytes, s.udp_rx.bytes),
                    datagrams: (s.udp_tx.datagrams, s.udp_rx.datagrams),
                }
            }
            Link::Tcp(t) => Wire {
                bytes: t.wire_bytes(),
                datagrams: (0, 0),
            },
        }
    }
}

/// A link's traffic so far, each as (sent, received).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wire {
    /// Bytes on the wire: UDP payload for QUIC, TLS records for TCP.
    pub bytes: (u64, u64),
    /// UDP datagrams; `(0, 0)` for TCP, which has none.
    pub datagrams: (u64, u64),
}
