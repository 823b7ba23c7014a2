//! quinn over turmoil: an [`AsyncUdpSocket`] on turmoil's simulated UDP, TLS/TCP links
//! on turmoil's simulated TCP, and the simulated network's own knobs that turmoil does
//! not have (per-message loss, UDP blocked between two hosts while TCP passes, as a
//! firewall or proxy does) and counters (bytes and datagrams per pair of hosts).
//!
//! turmoil's `UdpSocket` has `try_send_to`, `try_recv_from` and an async `readable()`
//! but no `poll_recv_from`: the adapter keeps one stored `readable()` future and polls
//! it. While that future is pending it holds the socket's receive lock, so
//! `try_recv_from` reports `WouldBlock`; once it resolves the lock is free again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Endpoint, EndpointConfig, TokioRuntime, UdpPoller};
use strata_node::dial::TcpDial;
use strata_node::tcp;

use crate::rng::{SimRng, mix};

/// Traffic of one direction between two hosts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// UDP payload bytes handed to the network (lost ones included).
    pub bytes: u64,
    /// Datagrams handed to the network.
    pub datagrams: u64,
}

/// Loss rates and counters shared by every socket of a simulation.
#[derive(Debug)]
pub struct Network {
    rng: AtomicU64,
    /// Loss everywhere, in parts per million.
    loss_ppm: AtomicU64,
    /// Loss per ordered host pair, in parts per million (overrides the global rate).
    link_loss: RwLock<BTreeMap<(IpAddr, IpAddr), u64>>,
    /// Ordered host pairs between which every datagram is dropped.
    udp_blocked: RwLock<BTreeSet<(IpAddr, IpAddr)>>,
    traffic: RwLock<BTreeMap<(IpAddr, IpAddr), Traffic>>,
}

impl Network {
    /// A lossless network whose loss decisions are drawn from `seed`.
    pub fn new(seed: u64) -> Arc<Self> {
        Arc::new(Network {
            rng: AtomicU64::new(seed),
            loss_ppm: AtomicU64::new(0),
            link_loss: RwLock::new(BTreeMap::new()),
            udp_blocked: RwLock::new(BTreeSet::new()),
            traffic: RwLock::new(BTreeMap::new()),
        })
    }

    /// Sets the loss rate everywhere (0.0..=1.0).
    pub fn set_loss(&self, rate: f64) {
        self.loss_ppm.store(ppm(rate), Ordering::Relaxed);
    }

    /// Sets the loss rate between two hosts, both ways; `None` falls back to the global
    /// rate.
    pub fn set_link_loss(&self, a: IpAddr, b: IpAddr, rate: Option<f64>) {
        if let Ok(mut m) = self.link_loss.write() {
            for pair in [(a, b), (b, a)] {
                match rate {
                    Some(r) => m.insert(pair, ppm(r)),
                    None => m.remove(&pair),
                };
            }
        }
    }

    /// Blocks (or unblocks) UDP between two hosts, both ways; TCP still passes.
    pub fn set_udp_blocked(&self, a: IpAddr, b: IpAddr, blocked: bool) {
        if let Ok(mut m) = self.udp_blocked.write() {
            for pair in [(a, b), (b, a)] {
                if blocked {
                    m.insert(pair);
                } else {
                    m.remove(&pair);
                }
            }
        }
    }

    /// Everything sent so far, per (source host, destination host).
    pub fn traffic(&self) -> BTreeMap<(IpAddr, IpAddr), Traffic> {
        self.traffic.read().map(|m| m.clone()).unwrap_or_default()
    }

    /// Counts a datagram and decides whether the network loses it.
    fn send(&self, from: IpAddr, to: IpAddr, len: usize) -> bool {
        if let Ok(mut m) = self.traffic.write() {
            let t = m.entry((from, to)).or_default();
            t.bytes += len as u64;
            t.datagrams += 1;
        }
        if self
            .udp_blocked
            .read()
            .is_ok_and(|m| m.contains(&(from, to)))
        {
            return false;
        }
        let rate = self
            .link_loss
            .read()
            .ok()
            .and_then(|m| m.get(&(from, to)).copied())
            .unwrap_or_else(|| self.loss_ppm.load(Ordering::Relaxed));
        if rate == 0 {
            return true;
        }
        let draw = mix(self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed));
        draw % 1_000_000 >= rate
    }
}

fn ppm(rate: f64) -> u64 {
    // A rate is a probability: clamp it, then scale to parts per million.
    (rate.clamp(0.0, 1.0) * 1_000_000.0).round() as u64
}

type Readable = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

/// A turmoil UDP socket as quinn sees it.
pub struct SimUdpSocket {
    socket: Arc<turmoil::net::UdpSocket>,
    host: IpAddr,
    network: Arc<Network>,
    readable: tokio::sync::Mutex<Option<Readable>>,
}

impl fmt::Debug for SimUdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimUdpSocket")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl SimUdpSocket {
    /// Binds `port` (0: any) on the current simulated host, whose address is `host`.
    pub async fn bind(host: IpAddr, port: u16, network: Arc<Network>) -> io::Result<Self> {
        let socket =
            turmoil::net::UdpSocket::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
                .await?;
        Ok(SimUdpSocket {
            socket: Arc::new(socket),
            host,
            network,
            readable: tokio::sync::Mutex::new(None),
        })
    }
}

#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // turmoil's UDP has no back-pressure: a full receive queue drops silently.
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for SimUdpSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let to = transmit.destination;
        if !self
            .network
            .send(self.host, to.ip(), transmit.contents.len())
        {
            return Ok(());
        }
        match self.socket.try_send_to(transmit.contents, to) {
            Ok(_) => Ok(()),
            // A datagram to a host that is down is lost, as on a real network.
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let (Some(buf), Some(m)) = (bufs.first_mut(), meta.first_mut()) else {
            return Poll::Ready(Ok(0));
        };
        let Ok(mut readable) = self.readable.try_lock() else {
            // Only quinn's endpoint driver receives; nobody else holds this lock.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        loop {
            if let Some(fut) = readable.as_mut() {
                match fut.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(r) => {
                        *readable = None;
                        r?;
                    }
                }
            }
            match self.socket.try_recv_from(buf) {
                Ok((len, from)) => {
                    *m = RecvMeta {
                        addr: from,
                        len,
                        stride: len,
                        ecn: None,
                        dst_ip: Some(self.host),
                    };
                    return Poll::Ready(Ok(1));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let socket = self.socket.clone();
                    *readable = Some(Box::pin(async move { socket.readable().await }));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        let addr = self.socket.local_addr()?;
        Ok(SocketAddr::new(self.host, addr.port()))
    }

    fn may_fragment(&self) -> bool {
        false
    }
}

/// A quinn endpoint on a simulated socket, with quinn's randomness seeded.
pub fn endpoint(
    socket: SimUdpSocket,
    mut config: EndpointConfig,
    server: Option<quinn::ServerConfig>,
    seed: [u8; 32],
) -> io::Result<Endpoint> {
    config.rng_seed(Some(seed));
    Endpoint::new_with_abstract_socket(config, server, Arc::new(socket), Arc::new(TokioRuntime))
}

/// A QUIC endpoint on `socket` whose connection ids and randomness come from `rng`.
pub(crate) fn seeded_endpoint(socket: SimUdpSocket, rng: &mut SimRng) -> io::Result<Endpoint> {
    let mut config = EndpointConfig::default();
    let cid_key = rng.next_u64();
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    endpoint(socket, config, None, rng.bytes32())
}

/// A relay's TLS/TCP listener on turmoil's TCP.
pub struct SimTcpListener {
    listener: turmoil::net::TcpListener,
    host: IpAddr,
}

impl fmt::Debug for SimTcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimTcpListener")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl SimTcpListener {
    /// Binds `port` on the current simulated host, whose address is `host`.
    pub async fn bind(host: IpAddr, port: u16) -> io::Result<Self> {
        let listener = turmoil::net::TcpListener::bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port,
        ))
        .await?;
        Ok(SimTcpListener { listener, host })
    }
}

impl tcp::Accept for SimTcpListener {
    fn accept(&self) -> tcp::BoxFuture<'_, io::Result<(tcp::BoxIo, SocketAddr)>> {
        Box::pin(async move {
            let (stream, from) = self.listener.accept().await?;
            Ok((Box::new(stream) as tcp::BoxIo, from))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        let addr = self.listener.local_addr()?;
        Ok(SocketAddr::new(self.host, addr.port()))
    }
}

/// Opens TLS/TCP links' connections on turmoil's TCP.
pub fn tcp_dial() -> TcpDial {
    Arc::new(|addr| {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect(addr).await?;
            Ok(Box::new(stream) as tcp::BoxIo)
        })
    })
}
