//! Node links: QUIC endpoints, and framed messages on one unidirectional stream per
//! [`StreamClass`] in each direction, so heartbeats and acks (control) never wait
//! behind bulk downsync data. [`split`] takes either transport's [`Link`]; the TLS/TCP
//! one multiplexes the same classes over one connection ([`crate::tcp`]).
//!
//! Nothing here creates sockets except the two endpoint constructors: the runtime can
//! be handed any ready [`quinn::Endpoint`] (the simulator builds its own over turmoil).
//!
//! A fact of TLS 1.3 worth knowing: a client whose certificate the server rejects (a
//! foreign CA) still sees `connect()` succeed; the rejection surfaces on first use of
//! the connection. [`TransportError::Closed`] says so when it happens that early.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, Endpoint, EndpointConfig, TokioRuntime, VarInt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use strata_protocol::codec::{self, FrameDecoder};
use strata_protocol::wire::{ChildToParent, ParentToChild, StreamClass};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::link::Link;
pub use crate::listener::QuicListener;
use crate::tcp::TcpLink;

/// QUIC application close codes of node links.
pub mod close_code {
    /// A frame did not decode.
    pub const MALFORMED: u32 = 1;
    /// A frame exceeded the maximum size.
    pub const OVERSIZED: u32 = 2;
    /// The peer's certificate names no node allowed here.
    pub const UNKNOWN_CHILD: u32 = 3;
    /// A newer connection of the same child took over.
    pub const REPLACED: u32 = 4;
    /// The node is shutting down.
    pub const SHUTDOWN: u32 = 5;
    /// The peer broke the protocol (see the reason).
    pub const PROTOCOL: u32 = 6;
    /// The peer did not keep up.
    pub const TOO_SLOW: u32 = 7;
    /// The child's name was revoked at the root: it is refused for good.
    pub const REVOKED: u32 = 8;
}

/// How many messages of one class may wait to be written or handled.
const QUEUE: usize = 1024;

/// Why a link failed: each variant names the address, the peer or the stream, and the
/// cause.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the address, peer or stream, and the cause
pub enum TransportError {
    /// A socket could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// TLS configuration unusable for QUIC.
    #[error("TLS configuration unusable for QUIC: {0}")]
    Tls(String),
    /// Connecting failed.
    #[error("cannot connect to {name} at {addr}: {detail}")]
    Connect {
        name: String,
        addr: SocketAddr,
        detail: String,
    },
    /// The connection closed. When this happens on first use it may be the peer
    /// refusing our certificate (TLS 1.3 reports that only then).
    #[error(
        "connection closed: {0} (if this is the first exchange, the peer may have refused our certificate)"
    )]
    Closed(String),
    /// The peer sent a frame that does not decode; the connection was closed.
    #[error("malformed {class:?} stream from the peer: {detail}")]
    Malformed {
        class: Option<StreamClass>,
        detail: String,
    },
    /// A send queue is full: the peer does not keep up.
    #[error("the {0:?} queue to the peer is full")]
    TooSlow(StreamClass),
}

/// Transport tuning shared by both ends: keep-alives shorter than typical load-balancer
/// idle timeouts, and an idle timeout that notices dead peers in seconds. This is the
/// child's (the dialling side's), which accepts the debug tunnels its parent opens.
pub fn transport_config() -> Arc<quinn::TransportConfig> {
    Arc::new(tuned(crate::tunnel::MAX_TUNNEL_STREAMS))
}

/// The parent's (listening side's) tuning: as [`transport_config`], but a child may open
/// no bidirectional stream (tunnels only go down the tree).
pub fn parent_transport_config() -> Arc<quinn::TransportConfig> {
    Arc::new(tuned(0))
}

/// The parent's tuning for a connection whose path MTU is known from the last one
/// from the same address (see [`crate::listener`]): it starts at `mtu`, and the search
/// probes only what lies above.
pub fn parent_transport_starting_at(mtu: u16) -> Arc<quinn::TransportConfig> {
    let mut t = tuned(0);
    t.initial_mtu(mtu);
    Arc::new(t)
}

fn tuned(tunnels: u32) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    // Once a session is open its heartbeat (a ping after 5 s of silence, answered)
    // keeps the link warm; QUIC's own keep-alive is the guard for the time before (a
    // hello held while the relay catches up or admits others) and must not race the
    // heartbeat: at 5 s both fired on every idle link, doubling an idle hierarchy's
    // packets. Twice the heartbeat stays well inside the idle timeout below.
    t.keep_alive_interval(Some(Duration::from_secs(10)));
    t.max_idle_timeout(Some(VarInt::from_u32(20_000).into()));
    t.max_concurrent_uni_streams(VarInt::from_u32(16));
    // Debug tunnels: one bidirectional stream per request, opened by the parent
    // (see `crate::tunnel`). quinn admits a write only while the connection's unacked
    // bytes stay under the send window, all streams together: sized so that tunnels,
    // each bounded by its stream window, can never take the protocol streams' share
    // (a `logs -f` on a slow link would otherwise hold back heartbeats and reports).
    t.max_concurrent_bidi_streams(VarInt::from_u32(tunnels));
    t.stream_receive_window(VarInt::from_u32(crate::tunnel::STREAM_WINDOW));
    t.send_window(crate::tunnel::SEND_WINDOW);
    // Path MTU discovery: every probe is a padded packet of the size probed, sent once
    // per new connection (and again every ten minutes). quinn's default search, from
    // 1,200 to 1,452 bytes in steps of at least 20, sends four (5.6 KB): on a link that
    // reconnects to catch up on a few objects, that was most of the reconnect's cost
    // beyond the objects themselves. Steps of 126 probe 1,326, then 1,452: two probes,
    // and a path between the two keeps 1,326.
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.minimum_change(MTU_PROBE_STEP);
    t.mtu_discovery_config(Some(mtu));
    t
}

/// How far apart path MTU probes are: half the span from QUIC's minimum datagram (1,200
/// bytes) to quinn's default upper bound (1,452), so that the search takes two probes.
const MTU_PROBE_STEP: u16 = (1452 - 1200) / 2;

/// The UDP receive buffer a listening endpoint asks the kernel for.
///
/// A relay's one socket takes the datagrams of all its children. The kernel's default
/// (208 KiB, which it counts with overhead: about 90 small datagrams on loopback)
/// overflows in a burst, when every child acknowledges an update or reports at once,
/// or reconnects, while the relay is busy. A datagram dropped there waits for QUIC's
/// loss recovery: a probe timeout that doubles with each loss in a row, seconds for a
/// status that had nothing else to wait for. Linux grants at most
/// `net.core.rmem_max`; [`server_endpoint`] warns when it granted less.
pub const RECEIVE_BUFFER: usize = 4 << 20;

/// Asks for [`RECEIVE_BUFFER`] on a listening socket; says what it got.
fn size_receive_buffer(socket: &std::net::UdpSocket, listen: SocketAddr) {
    let sock = socket2::SockRef::from(socket);
    if let Err(e) = sock.set_recv_buffer_size(RECEIVE_BUFFER) {
        tracing::warn!(%listen, error = %e, "cannot size the UDP receive buffer; keeping the system's default");
        return;
    }
    // Linux reports twice what it grants (the other half is its bookkeeping).
    let granted = sock.recv_buffer_size().unwrap_or(0) / 2;
    if granted < RECEIVE_BUFFER {
        tracing::warn!(
            %listen,
            granted_kib = granted / 1024,
            wanted_kib = RECEIVE_BUFFER / 1024,
            "the kernel granted a smaller UDP receive buffer than asked for; in bursts from many children datagrams are dropped and wait for QUIC's retransmission: raise it with `sysctl -w net.core.rmem_max={RECEIVE_BUFFER}`"
        );
    } else {
        tracing::debug!(%listen, granted_kib = granted / 1024, "UDP receive buffer sized");
    }
}

/// A listening endpoint. `secret` must persist across restarts: it keys the stateless
/// resets and connection IDs, so that children of a restarted node learn at once that
/// their connection is gone instead of waiting out the idle timeout.
pub fn server_endpoint(
    listen: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    secret: [u8; 32],
) -> Result<QuicListener, TransportError> {
    let (endpoint, server) = server_configs(tls, secret)?;
    let socket = std::net::UdpSocket::bind(listen).map_err(|source| TransportError::Bind {
        addr: listen,
        source,
    })?;
    size_receive_buffer(&socket, listen);
    let endpoint = Endpoint::new(
        endpoint,
        Some(server.clone()),
        socket,
        Arc::new(TokioRuntime),
    )
    .map_err(|source| TransportError::Bind {
        addr: listen,
        source,
    })?;
    Ok(QuicListener::new(endpoint, server))
}

/// The endpoint and server configurations of a listening endpoint (see
/// [`server_endpoint`]), for callers that bring their own socket (the simulator).
pub fn server_configs(
    tls: Arc<rustls::ServerConfig>,
    secret: [u8; 32],
) -> Result<(EndpointConfig, quinn::ServerConfig), TransportError> {
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(parent_transport_config());
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
    let mut endpoint = EndpointConfig::new(Arc::new(reset_key));
    let cid_key = u64::from_be_bytes([
        secret[0], secret[1], secret[2], secret[3], secret[4], secret[5], secret[6], secret[7],
    ]);
    endpoint.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    Ok((endpoint, server))
}

/// The client configuration every connecting endpoint uses (see [`client_endpoint`]).
pub fn client_configs(
    tls: Arc<rustls::ClientConfig>,
) -> Result<quinn::ClientConfig, TransportError> {
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(transport_config());
    Ok(client)
}

/// An endpoint for connecting to a parent, over a socket that reads one datagram at a
/// time (see the `plain_udp` module): it holds one connection, not a relay's thousands.
pub fn client_endpoint(
    bind: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
) -> Result<Endpoint, TransportError> {
    let client = client_configs(tls)?;
    let bound = |source| TransportError::Bind { addr: bind, source };
    let socket = crate::plain_udp::PlainUdp::bind(bind).map_err(bound)?;
    let mut endpoint = Endpoint::new_with_abstract_socket(
        EndpointConfig::default(),
        None,
        Arc::new(socket),
        Arc::new(TokioRuntime),
    )
    .map_err(bound)?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// Connects to the parent `name` at `addr`; the parent's certificate must name it.
pub async fn connect(
    endpoint: &Endpoint,
    addr: SocketAddr,
    name: &str,
) -> Result<Connection, TransportError> {
    let err = |detail: String| TransportError::Connect {
        name: name.to_owned(),
        addr,
        detail,
    };
    endpoint
        .connect(addr, name)
        .map_err(|e| err(e.to_string()))?
        .await
        .map_err(|e| err(e.to_string()))
}

/// A message that knows its stream class.
pub trait WireMessage: Serialize + DeserializeOwned + Send + 'static {
    /// The stream it travels on.
    fn class(&self) -> StreamClass;
}

impl WireMessage for ChildToParent {
    fn class(&self) -> StreamClass {
        ChildToParent::class(self)
    }
}

impl WireMessage for ParentToChild {
    fn class(&self) -> StreamClass {
        ParentToChild::class(self)
    }
}

/// Every stream class, in tag order.
pub const STREAM_CLASSES: [StreamClass; 3] = [
    StreamClass::Control,
    StreamClass::Bulk,
    StreamClass::Reports,
];

fn tag(class: StreamClass) -> u8 {
    match class {
        StreamClass::Control => 0,
        StreamClass::Bulk => 1,
        StreamClass::Reports => 2,
    }
}

fn slot(class: StreamClass) -> usize {
    usize::from(tag(class))
}

/// Framed bytes (length prefix included) moved on one link, per [`StreamClass`].
#[derive(Debug, Default)]
pub struct ClassBytes {
    pub(crate) sent: [AtomicU64; 3],
    pub(crate) received: [AtomicU64; 3],
}

impl ClassBytes {
    /// Bytes sent on `class`'s stream.
    pub fn sent(&self, class: StreamClass) -> u64 {
        self.sent[slot(class)].load(Ordering::Relaxed)
    }

    /// Bytes received on `class`'s stream.
    pub fn received(&self, class: StreamClass) -> u64 {
        self.received[slot(class)].load(Ordering::Relaxed)
    }
}

/// What a link's queues carry: a boxed message. tokio's channel allocates its first
/// block of 32 slots when it is made, and a link has six queues at each end, so slots
/// the size of a message cost ~3 KiB per queue on every link, idle or not (20 KiB per
/// connection end in the heap profile at 1,000 leaves); a box is 8 bytes.
pub(crate) type Queued<M> = Box<M>;

/// What a link's receiving queues carry.
pub(crate) type Received<M> = Queued<Result<M, TransportError>>;

/// The sending half of a link: one queue per class, and one writer task for them all
/// (see `write_streams`).
#[derive(Debug)]
pub struct Sender<M> {
    queues: [mpsc::Sender<Queued<M>>; 3],
    bytes: Arc<ClassBytes>,
    _tasks: JoinSet<()>,
}

impl<M: WireMessage> Sender<M> {
    /// Queues a message on its class's stream. A full queue means the peer does not
    /// keep up; the caller closes the link.
    pub fn send(&self, msg: M) -> Result<(), TransportError> {
        let class = msg.class();
        self.queues[slot(class)]
            .try_send(Box::new(msg))
            .map_err(|_| TransportError::TooSlow(class))
    }

    /// Bytes this link has moved so far, per class, in both directions.
    pub fn bytes(&self) -> &ClassBytes {
        &self.bytes
    }
}

/// The receiving half of a link: messages of each class in order, control first.
#[derive(Debug)]
pub struct Receiver<M> {
    incoming: Incoming<M>,
}

#[derive(Debug)]
enum Incoming<M> {
    /// QUIC: read from quinn's streams when the node asks for the next message.
    Quic(QuicReader),
    /// TLS/TCP: one reader task per connection fills a queue per class.
    Queued {
        link: Link,
        queues: [mpsc::Receiver<Received<M>>; 3],
        _tasks: JoinSet<()>,
    },
}

impl<M: WireMessage> Receiver<M> {
    /// The next message; control before reports before bulk when several are ready.
    /// Cancel-safe: a message is taken only when this returns it.
    pub async fn recv(&mut self) -> Result<M, TransportError> {
        match &mut self.incoming {
            Incoming::Quic(reader) => std::future::poll_fn(|cx| reader.poll_next(cx)).await,
            Incoming::Queued { link, queues, .. } => {
                let [control, bulk, reports] = queues;
                let next = tokio::select! {
                    biased;
                    Some(m) = control.recv() => *m,
                    Some(m) = reports.recv() => *m,
                    Some(m) = bulk.recv() => *m,
                    reason = link.closed() => Err(TransportError::Closed(reason)),
                };
                next
            }
        }
    }
}

/// Accepting a QUIC connection's next unidirectional stream.
type Accept = Pin<Box<dyn Future<Output = Option<quinn::RecvStream>> + Send>>;

/// The reason a link closed, once it has.
type Closing = Pin<Box<dyn Future<Output = String> + Send>>;

/// The receiving side of a QUIC link, polled by the task that consumes its messages:
/// no reader task and no queue between quinn's receive buffers and the node, so a
/// message costs no task wake-up or channel hop of its own, and the peer's flow control
/// is released only as fast as the node takes messages.
struct QuicReader {
    conn: Connection,
    /// Waiting for the peer's next stream (`None` once the connection is gone). Kept
    /// across polls: quinn wakes only an accept that is waiting.
    accept: Option<Accept>,
    streams: Vec<InStream>,
    closing: Closing,
    max_frame: usize,
    bytes: Arc<ClassBytes>,
    /// A malformed frame closed the connection: nothing more is read.
    failed: bool,
}

/// One stream the peer opened, and the frames read from it so far.
struct InStream {
    stream: quinn::RecvStream,
    /// Known once the stream's first byte (its tag) has arrived.
    class: Option<StreamClass>,
    /// The first byte named no class: the peer is not speaking our protocol.
    unknown_tag: Option<u8>,
    decoder: FrameDecoder,
    /// The stream finished or failed: what is buffered is all there will be.
    ended: bool,
}

impl std::fmt::Debug for QuicReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicReader")
            .field("peer", &self.conn.remote_address())
            .field("streams", &self.streams.len())
            .field("accepting", &self.accept.is_some())
            .field("failed", &self.failed)
            .finish()
    }
}

fn accept_next(conn: &Connection) -> Accept {
    let conn = conn.clone();
    Box::pin(async move { conn.accept_uni().await.ok() })
}

/// What reading one stream gave.
enum Read<M> {
    Message(M),
    Malformed(StreamClass, codec::DecodeError),
    /// Nothing until quinn wakes us (or the stream ended).
    Nothing,
}

impl InStream {
    /// The next whole message on this stream, reading what quinn holds for it.
    fn poll_message<M: WireMessage>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        bytes: &ClassBytes,
    ) -> Read<M> {
        let Some(class) = self.class else {
            return Read::Nothing;
        };
        loop {
            match self.decoder.next_message::<M>() {
                Ok(Some(msg)) => return Read::Message(msg),
                Ok(None) => {}
                Err(e) => return Read::Malformed(class, e),
            }
            if self.ended || !self.poll_chunk(cx, bytes) {
                return Read::Nothing;
            }
        }
    }

    /// Reads one chunk into the decoder (the first byte names the class); false when
    /// quinn has nothing now or the stream ended.
    fn poll_chunk(&mut self, cx: &mut std::task::Context<'_>, bytes: &ClassBytes) -> bool {
        // The future only asks quinn: dropping it unfinished loses nothing, and quinn
        // keeps the waker until the stream has data.
        let read = std::pin::pin!(self.stream.read_chunk(usize::MAX, true));
        match read.poll(cx) {
            Poll::Ready(Ok(Some(chunk))) => {
                let mut data = &chunk.bytes[..];
                let class = match self.class {
                    Some(class) => class,
                    None => {
                        let Some((&first, rest)) = data.split_first() else {
                            return true;
                        };
                        let Some(class) = STREAM_CLASSES.into_iter().find(|c| tag(*c) == first)
                        else {
                            self.unknown_tag = Some(first);
                            self.ended = true;
                            return false;
                        };
                        self.class = Some(class);
                        data = rest;
                        class
                    }
                };
                bytes.received[slot(class)].fetch_add(data.len() as u64, Ordering::Relaxed);
                self.decoder.extend(data);
                true
            }
            Poll::Ready(Ok(None) | Err(_)) => {
                self.ended = true;
                false
            }
            Poll::Pending => false,
        }
    }
}

impl QuicReader {
    fn new(conn: Connection, link: Link, max_frame: usize, bytes: Arc<ClassBytes>) -> Self {
        QuicReader {
            accept: Some(accept_next(&conn)),
            conn,
            streams: Vec::new(),
            closing: Box::pin(async move { link.closed().await }),
            max_frame,
            bytes,
            failed: false,
        }
    }

    fn poll_next<M: WireMessage>(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Result<M, TransportError>> {
        if !self.failed {
            self.poll_accept(cx);
            // Tags first, so that each stream's class is known.
            for s in self.streams.iter_mut().filter(|s| s.class.is_none()) {
                while s.class.is_none() && !s.ended && s.poll_chunk(cx, &self.bytes) {}
            }
            if let Some(t) = self.streams.iter().find_map(|s| s.unknown_tag) {
                let detail = format!("unknown stream class {t}");
                return Poll::Ready(Err(self.fail(None, close_code::MALFORMED, detail)));
            }
            for class in [
                StreamClass::Control,
                StreamClass::Reports,
                StreamClass::Bulk,
            ] {
                for s in self.streams.iter_mut().filter(|s| s.class == Some(class)) {
                    match s.poll_message::<M>(cx, &self.bytes) {
                        Read::Message(msg) => return Poll::Ready(Ok(msg)),
                        Read::Malformed(class, e) => {
                            let code = match e {
                                codec::DecodeError::Oversized { .. } => close_code::OVERSIZED,
                                _ => close_code::MALFORMED,
                            };
                            return Poll::Ready(Err(self.fail(Some(class), code, e.to_string())));
                        }
                        Read::Nothing => {}
                    }
                }
            }
            // A stream that ended has given all it had.
            self.streams.retain(|s| !s.ended);
        }
        self.closing
            .as_mut()
            .poll(cx)
            .map(|reason| Err(TransportError::Closed(reason)))
    }

    /// Takes every stream the peer has opened, and waits for the next.
    fn poll_accept(&mut self, cx: &mut std::task::Context<'_>) {
        while let Some(accept) = self.accept.as_mut() {
            match accept.as_mut().poll(cx) {
                Poll::Ready(Some(stream)) => {
                    self.streams.push(InStream {
                        stream,
                        class: None,
                        unknown_tag: None,
                        decoder: FrameDecoder::new(self.max_frame),
                        ended: false,
                    });
                    self.accept = Some(accept_next(&self.conn));
                }
                Poll::Ready(None) => self.accept = None,
                Poll::Pending => return,
            }
        }
    }

    /// Closes the connection over what the peer sent, and stops reading.
    fn fail(&mut self, class: Option<StreamClass>, code: u32, detail: String) -> TransportError {
        self.conn.close(VarInt::from_u32(code), detail.as_bytes());
        self.failed = true;
        self.accept = None;
        self.streams.clear();
        TransportError::Malformed { class, detail }
    }
}

/// Splits a link (a QUIC connection or a TLS/TCP one) into its sending and receiving
/// halves. `max_frame` bounds what the peer may send in one frame.
pub fn split<Out: WireMessage, In: WireMessage>(
    link: impl Into<Link>,
    max_frame: usize,
) -> (Sender<Out>, Receiver<In>) {
    let link = link.into();
    let conn = match &link {
        Link::Quic(conn) => conn.clone(),
        Link::Tcp(tcp) => return split_tcp(tcp, link.clone(), max_frame),
    };
    let bytes = Arc::new(ClassBytes::default());
    let mut writers = JoinSet::new();
    let (c_tx, c_rx) = mpsc::channel::<Queued<Out>>(QUEUE);
    let (b_tx, b_rx) = mpsc::channel::<Queued<Out>>(QUEUE);
    let (r_tx, r_rx) = mpsc::channel::<Queued<Out>>(QUEUE);
    writers.spawn(write_streams(
        conn.clone(),
        [c_rx, b_rx, r_rx],
        bytes.clone(),
    ));
    (
        Sender {
            queues: [c_tx, b_tx, r_tx],
            bytes: bytes.clone(),
            _tasks: writers,
        },
        Receiver {
            incoming: Incoming::Quic(QuicReader::new(conn, link, max_frame, bytes)),
        },
    )
}

fn split_tcp<Out: WireMessage, In: WireMessage>(
    tcp: &TcpLink,
    link: Link,
    max_frame: usize,
) -> (Sender<Out>, Receiver<In>) {
    let bytes = Arc::new(ClassBytes::default());
    let (c_tx, c_rx) = mpsc::channel::<Queued<Out>>(QUEUE);
    let (b_tx, b_rx) = mpsc::channel::<Queued<Out>>(QUEUE);
    let (r_tx, r_rx) = mpsc::channel::<Queued<Out>>(QUEUE);
    let (ci_tx, ci_rx) = mpsc::channel::<Received<In>>(QUEUE);
    let (bi_tx, bi_rx) = mpsc::channel(QUEUE);
    let (ri_tx, ri_rx) = mpsc::channel(QUEUE);
    let readers = tcp.spawn(
        [c_rx, b_rx, r_rx],
        [ci_tx, bi_tx, ri_tx],
        bytes.clone(),
        max_frame,
    );
    (
        Sender {
            queues: [c_tx, b_tx, r_tx],
            bytes,
            _tasks: JoinSet::new(),
        },
        Receiver {
            incoming: Incoming::Queued {
                link,
                queues: [ci_rx, bi_rx, ri_rx],
                _tasks: readers,
            },
        },
    )
}

/// A write of one frame on one class's stream, which hands the stream back (opened on
/// the first frame) with the frame's length, or `None` once the connection is gone.
type Write = Pin<Box<dyn Future<Output = Option<(quinn::SendStream, u64)>> + Send>>;

/// What wakes a link's writer.
enum Wakeup<M> {
    /// A class's write finished (the stream, the bytes written) or failed (`None`).
    Written(usize, Option<(quinn::SendStream, u64)>),
    /// A message for a class whose stream is free.
    Queued(usize, Queued<M>),
    /// Every queue is closed and every write done: the link is being dropped.
    Done,
}

/// The writer of a QUIC link: every class's frames, one write in flight per class, so a
/// class its peer's flow control holds back never holds the others back.
///
/// One task rather than one per class: messages the node queues in one step (an ack
/// and the status it brought, a summary and its ack) reach quinn in one poll of this
/// task, before the connection's driver runs, and leave in one packet; with a task per
/// class the driver often ran in between and sent two.
async fn write_streams<M: WireMessage>(
    conn: Connection,
    mut queues: [mpsc::Receiver<Queued<M>>; 3],
    bytes: Arc<ClassBytes>,
) {
    let mut streams: [Option<quinn::SendStream>; 3] = [None, None, None];
    let mut writes: [Option<Write>; 3] = [None, None, None];
    let mut open = [true; 3];
    loop {
        // Start a write on every free class that has a message waiting, before waiting.
        for i in 0..STREAM_CLASSES.len() {
            while writes[i].is_none() && open[i] {
                match queues[i].try_recv() {
                    Ok(msg) => writes[i] = write_frame(&conn, i, &mut streams[i], &*msg),
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => open[i] = false,
                }
            }
        }
        let wakeup = std::future::poll_fn(|cx| {
            let mut waiting = false;
            for i in 0..STREAM_CLASSES.len() {
                if let Some(write) = writes[i].as_mut() {
                    waiting = true;
                    if let Poll::Ready(out) = write.as_mut().poll(cx) {
                        return Poll::Ready(Wakeup::Written(i, out));
                    }
                } else if open[i] {
                    waiting = true;
                    match queues[i].poll_recv(cx) {
                        Poll::Ready(Some(msg)) => return Poll::Ready(Wakeup::Queued(i, msg)),
                        Poll::Ready(None) => open[i] = false,
                        Poll::Pending => {}
                    }
                }
            }
            if waiting {
                Poll::Pending
            } else {
                Poll::Ready(Wakeup::Done)
            }
        })
        .await;
        match wakeup {
            Wakeup::Written(i, Some((stream, len))) => {
                writes[i] = None;
                streams[i] = Some(stream);
                bytes.sent[i].fetch_add(len, Ordering::Relaxed);
            }
            // The connection is gone: the queues' senders learn it from their next send.
            Wakeup::Written(_, None) => return,
            Wakeup::Queued(i, msg) => writes[i] = write_frame(&conn, i, &mut streams[i], &*msg),
            Wakeup::Done => return,
        }
    }
}

/// Frames `msg` and starts writing it on class `i`'s stream (opening it, tagged, if
/// this is its first frame). `None` if it cannot be framed: it is dropped, logged.
fn write_frame<M: WireMessage>(
    conn: &Connection,
    i: usize,
    stream: &mut Option<quinn::SendStream>,
    msg: &M,
) -> Option<Write> {
    let class = STREAM_CLASSES[i];
    // A buffer per message, handed to quinn as it is: quinn keeps it until the peer
    // acknowledges it, where `write_all` would copy it, and no buffer stays behind at
    // the size of the largest message the link ever carried (a snapshot's part, up to
    // 256 KiB per child).
    let mut buf = Vec::new();
    if let Err(e) = codec::encode(msg, codec::DEFAULT_MAX_FRAME, &mut buf) {
        tracing::error!(?class, error = %e, "dropping a message that cannot be framed");
        return None;
    }
    // Taken only once the frame is made: a message dropped above keeps the stream.
    let stream = stream.take();
    let conn = conn.clone();
    Some(Box::pin(async move {
        let mut stream = match stream {
            Some(s) => s,
            None => {
                let mut s = conn.open_uni().await.ok()?;
                s.write_all(&[tag(class)]).await.ok()?;
                s
            }
        };
        let len = buf.len() as u64;
        stream.write_chunk(Bytes::from(buf)).await.ok()?;
        Some((stream, len))
    }))
}
