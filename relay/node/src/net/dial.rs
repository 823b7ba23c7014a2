//! Reaching the parent: its address (an `IP:PORT`, or a `host:port` resolved at every
//! connect with every address tried, happy-eyeballs style), the transport (`quic`,
//! `tcp`, or `auto`: QUIC, falling back to TLS over TCP), and an HTTP CONNECT proxy for
//! the TCP transport. Whatever the route, the certificate checked is the one naming the
//! parent's node name.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use quinn::Endpoint;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

use super::cert_files::RenewConfig;
use super::link::Link;
use super::proxy::{Proxy, ProxyError};
use super::resolve::race;
pub use super::resolve::{ATTEMPT_DELAY, ParentAddress, tcp_happy_eyeballs};
use super::tcp;

/// How long `auto` lets QUIC try to complete a handshake before falling back to TCP.
pub const QUIC_FALLBACK_AFTER: Duration = Duration::from_secs(3);
/// How often `auto`, while on TCP, tries QUIC again in the background.
pub const QUIC_PROBE_EVERY: Duration = Duration::from_secs(30);
/// How long a TCP connect plus TLS handshake (through the proxy, if any) may take.
pub const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which transport a parent link uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportMode {
    /// QUIC; TLS over TCP when QUIC cannot complete a handshake in a few seconds, and
    /// back to QUIC when a background probe succeeds. The default of a node's parent
    /// link: edge sites sit behind firewalls that may drop UDP, and every relay listens
    /// on TCP on its QUIC port, so `auto` reaches our own relays either way.
    #[default]
    Auto,
    /// QUIC only.
    Quic,
    /// TLS over TCP only (through the proxy, if one is set).
    Tcp,
}

impl fmt::Display for TransportMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportMode::Auto => "auto",
            TransportMode::Quic => "quic",
            TransportMode::Tcp => "tcp",
        })
    }
}

impl FromStr for TransportMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(TransportMode::Auto),
            "quic" => Ok(TransportMode::Quic),
            "tcp" => Ok(TransportMode::Tcp),
            _ => Err(format!(
                "{s:?} is not a transport: expected auto, quic or tcp"
            )),
        }
    }
}

/// Why the parent could not be reached. Every variant names the parent and the
/// address as given.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the parent, the address and the cause
pub enum DialError {
    /// The name did not resolve.
    #[error("cannot reach {name} at {target}: {detail}")]
    Resolve {
        name: String,
        target: String,
        detail: super::resolve::ResolveError,
    },
    /// No QUIC handshake completed on any address.
    #[error("cannot reach {name} at {target} over QUIC: {detail}")]
    Quic {
        name: String,
        target: String,
        detail: String,
    },
    /// No TCP connection or TLS handshake completed.
    #[error("cannot reach {name} at {target} over TLS/TCP: {detail}")]
    Tcp {
        name: String,
        target: String,
        detail: String,
    },
    /// The proxy refused or failed.
    #[error("cannot reach {name} at {target} through the proxy: {source}")]
    Proxy {
        name: String,
        target: String,
        source: Box<ProxyError>,
    },
    /// The parent refused the connection before its handshake: it is taking in as
    /// many children at once as it will (a reconnect storm). UDP reaches it, so `auto`
    /// does not fall back to TCP; the reconnect loop backs off and comes back.
    #[error(
        "{name} at {target} is busy (it refused the connection before the handshake); backing off"
    )]
    Busy { name: String, target: String },
    /// The connector lacks what this transport needs (a QUIC endpoint or TLS config).
    #[error("cannot reach {name}: no {transport} connector is configured")]
    NotConfigured {
        name: String,
        transport: &'static str,
    },
}

/// Opens a TCP connection to an address, in place of tokio's (the simulator's TCP).
pub type TcpDial =
    Arc<dyn Fn(SocketAddr) -> tcp::BoxFuture<'static, std::io::Result<tcp::BoxIo>> + Send + Sync>;

/// How a child reaches its parent: the transport mode, a QUIC endpoint and a TLS
/// configuration for TCP (both carrying the node's identity), and a proxy for TCP.
#[derive(Clone)]
pub struct Connector {
    mode: TransportMode,
    quic: Option<Endpoint>,
    tls: Option<Arc<rustls::ClientConfig>>,
    proxy: Option<Proxy>,
    /// Direct TCP connections through this instead of tokio's socket.
    tcp_dial: Option<TcpDial>,
    /// `auto`: how long QUIC may take before TCP is tried.
    pub quic_timeout: Duration,
    /// `auto`: how often QUIC is tried again while on TCP.
    pub probe_every: Duration,
    /// TLS/TCP: how often this side pings, so that a proxy or balancer never sees the
    /// tunnel idle for longer.
    pub keep_alive: Duration,
    /// The client TLS a certificate renewal put in place (shared by every clone), used
    /// by the next handshake on either transport.
    renewed: RenewedTls,
    /// Renewing the node's certificate through the parent, if the node does.
    renew: Option<RenewConfig>,
    /// The clock a renewed identity's TLS checks validity against (`None`: the
    /// system's).
    tls_time: Option<super::tls::TlsTime>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("mode", &self.mode)
            .field("quic", &self.quic.is_some())
            .field("tls", &self.tls.is_some())
            .field("proxy", &self.proxy)
            .field("tcp_dial", &self.tcp_dial.is_some())
            .field("quic_timeout", &self.quic_timeout)
            .field("probe_every", &self.probe_every)
            .field("keep_alive", &self.keep_alive)
            .field("renew", &self.renew)
            .field("tls_time", &self.tls_time.is_some())
            .finish()
    }
}

impl From<Endpoint> for Connector {
    /// QUIC only, on this endpoint (the simulation's and most tests' connector).
    fn from(e: Endpoint) -> Self {
        Connector::new(TransportMode::Quic, Some(e), None, None)
    }
}

impl Connector {
    /// A connector in `mode`; QUIC needs `quic`, TCP needs `tls` (the same identity as
    /// the endpoint's, from [`crate::net::tls::client_config`]); `proxy` is used by TCP only.
    pub fn new(
        mode: TransportMode,
        quic: Option<Endpoint>,
        tls: Option<Arc<rustls::ClientConfig>>,
        proxy: Option<Proxy>,
    ) -> Self {
        Connector {
            mode,
            quic,
            tls,
            proxy,
            tcp_dial: None,
            quic_timeout: QUIC_FALLBACK_AFTER,
            probe_every: QUIC_PROBE_EVERY,
            keep_alive: tcp::KEEP_ALIVE,
            renewed: Default::default(),
            renew: None,
            tls_time: None,
        }
    }

    /// The same connector, a renewed identity's TLS checking certificates' validity
    /// against `time` (as the identity it was built with does; the simulation's
    /// virtual time).
    pub fn with_tls_time(mut self, time: Option<super::tls::TlsTime>) -> Self {
        self.tls_time = time;
        self
    }

    /// The clock a renewed identity's TLS checks validity against, if not the system's.
    pub fn tls_time(&self) -> Option<super::tls::TlsTime> {
        self.tls_time.clone()
    }

    /// The same connector, renewing the node's certificate through the parent (the
    /// driver does it; see [`crate::renew`]).
    pub fn with_renewal(mut self, config: RenewConfig) -> Self {
        self.renew = Some(config);
        self
    }

    /// How the node renews its certificate, if it does.
    pub fn renewal(&self) -> Option<&RenewConfig> {
        self.renew.as_ref()
    }

    /// From the next handshake on (every clone of this connector), present the
    /// identity of `tls` (a renewed certificate).
    pub fn use_tls(&self, tls: Arc<rustls::ClientConfig>) {
        // A poisoned lock only means a panic elsewhere; the value is a plain Option.
        let mut slot = self.renewed.write().unwrap_or_else(|p| p.into_inner());
        *slot = Some(tls);
    }

    fn renewed_tls(&self) -> Option<Arc<rustls::ClientConfig>> {
        self.renewed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Opens direct TCP connections with `dial` instead of tokio's socket (the
    /// simulator's network).
    pub fn with_tcp_dial(mut self, dial: TcpDial) -> Self {
        self.tcp_dial = Some(dial);
        self
    }

    /// The transport mode.
    pub fn mode(&self) -> TransportMode {
        self.mode
    }

    /// The proxy TCP links go through, if any.
    pub fn proxy(&self) -> Option<&Proxy> {
        self.proxy.as_ref()
    }

    /// The QUIC endpoint, if this connector has one (not with `tcp`).
    pub fn quic_endpoint(&self) -> Option<&Endpoint> {
        self.quic.as_ref()
    }

    /// Connects over QUIC, every resolved address tried; `timeout` bounds the whole
    /// attempt (none: quinn's own idle timeout decides).
    pub async fn connect_quic(
        &self,
        addr: &ParentAddress,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<Link, DialError> {
        let Some(endpoint) = &self.quic else {
            return Err(DialError::NotConfigured {
                name: name.to_owned(),
                transport: "QUIC",
            });
        };
        let err = |detail: String| DialError::Quic {
            name: name.to_owned(),
            target: addr.to_string(),
            detail,
        };
        let attempt = async {
            let addrs = addr.resolve().await.map_err(|detail| DialError::Resolve {
                name: name.to_owned(),
                target: addr.to_string(),
                detail,
            })?;
            let renewed = match self.renewed_tls() {
                Some(tls) => {
                    Some(super::transport::client_configs(tls).map_err(|e| err(e.to_string()))?)
                }
                None => None,
            };
            let (endpoint, owned) = (endpoint.clone(), name.to_owned());
            race(addrs, move |a| {
                let (endpoint, name, renewed) = (endpoint.clone(), owned.clone(), renewed.clone());
                async move {
                    let connecting = match renewed {
                        Some(config) => endpoint.connect_with(config, a, &name),
                        None => endpoint.connect(a, &name),
                    }
                    .map_err(|e| format!("{a}: {e}"))?;
                    connecting.await.map_err(|e| {
                        if is_refusal(&e) {
                            REFUSED.to_owned()
                        } else {
                            format!("{a}: {e}")
                        }
                    })
                }
            })
            .await
            .map(Link::Quic)
            .map_err(|detail| {
                if detail == REFUSED {
                    DialError::Busy {
                        name: name.to_owned(),
                        target: addr.to_string(),
                    }
                } else {
                    err(detail)
                }
            })
        };
        match timeout {
            None => attempt.await,
            Some(t) => tokio::time::timeout(t, attempt).await.unwrap_or_else(|_| {
                Err(err(format!(
                    "no handshake completed within {t:?} (is UDP blocked?)"
                )))
            }),
        }
    }

    /// Connects TLS over TCP, through the proxy if one is set, else to every resolved
    /// address happy-eyeballs style.
    pub async fn connect_tcp(&self, addr: &ParentAddress, name: &str) -> Result<Link, DialError> {
        let Some(tls) = &self.tls else {
            return Err(DialError::NotConfigured {
                name: name.to_owned(),
                transport: "TLS/TCP",
            });
        };
        let tls = &self.renewed_tls().unwrap_or_else(|| tls.clone());
        let err = |detail: String| DialError::Tcp {
            name: name.to_owned(),
            target: addr.to_string(),
            detail,
        };
        let attempt = async {
            let stream = match &self.proxy {
                Some(proxy) => {
                    // Through a proxy, one replica after the other.
                    let mut last = None;
                    let mut tunnel = None;
                    for one in addr.each() {
                        match proxy.tunnel(&one.target()).await {
                            Ok(s) => {
                                tunnel = Some(s);
                                break;
                            }
                            Err(e) => last = Some((one, e)),
                        }
                    }
                    match (tunnel, last) {
                        (Some(s), _) => tcp::from_tokio(s).map_err(|e| err(e.to_string()))?,
                        (None, Some((one, source))) => {
                            return Err(DialError::Proxy {
                                name: name.to_owned(),
                                target: one.to_string(),
                                source: Box::new(source),
                            });
                        }
                        (None, None) => return Err(err("no address to try".into())),
                    }
                }
                None => {
                    let addrs = addr.resolve().await.map_err(|detail| DialError::Resolve {
                        name: name.to_owned(),
                        target: addr.to_string(),
                        detail,
                    })?;
                    let dial = self.tcp_dial.clone();
                    race(addrs, move |a| {
                        let dial = dial.clone();
                        async move {
                            let stream = match dial {
                                Some(dial) => dial(a).await.map(|s| (s, a)),
                                None => match TcpStream::connect(a).await {
                                    Ok(s) => tcp::from_tokio(s),
                                    Err(e) => Err(e),
                                },
                            };
                            stream.map_err(|e| format!("{a}: {e}"))
                        }
                    })
                    .await
                    .map_err(err)?
                }
            };
            let link = tcp::connect(stream, tls.clone(), name, self.keep_alive)
                .await
                .map_err(|e| err(format!("TLS handshake: {e}")))?;
            if self.proxy.is_some() {
                link.mark_proxied();
            }
            Ok(Link::Tcp(link))
        };
        tokio::time::timeout(TCP_CONNECT_TIMEOUT, attempt)
            .await
            .unwrap_or_else(|_| Err(err(format!("no connection within {TCP_CONNECT_TIMEOUT:?}"))))
    }
}

/// What a QUIC attempt refused before its handshake fails with (see [`DialError::Busy`]).
const REFUSED: &str = "refused before the handshake";

/// Whether the parent refused the connection before its handshake (QUIC's
/// `CONNECTION_REFUSED`: a relay taking in as many children at once as it will).
fn is_refusal(e: &quinn::ConnectionError) -> bool {
    matches!(e, quinn::ConnectionError::ConnectionClosed(c)
        if c.error_code == quinn::TransportErrorCode::CONNECTION_REFUSED)
}

/// Shared between a connector's clones: the client TLS configuration a renewal put in
/// place of the one the connector was built with.
pub(crate) type RenewedTls = Arc<std::sync::RwLock<Option<Arc<rustls::ClientConfig>>>>;
