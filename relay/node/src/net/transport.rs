//! Node links: QUIC endpoints, and framed messages on one unidirectional stream per
//! [`StreamClass`](strata_protocol::wire::StreamClass) in each direction, so heartbeats
//! and acks (control) never wait behind bulk downsync data. [`split`] takes either
//! transport's [`Link`]; the TLS/TCP one multiplexes the same classes over one
//! connection ([`crate::net::tcp`]).
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
use std::sync::atomic::Ordering;
use std::task::Poll;

mod quic_reader;

use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, Endpoint, EndpointConfig, TokioRuntime};
use strata_protocol::codec;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::link::Link;
pub use super::listener::QuicListener;
pub use super::message::{ClassBytes, STREAM_CLASSES, TransportError, WireMessage, close_code};
use super::message::{Queued, slot, tag};
use super::out_queue::{OutReceiver, OutSender, out_queue};
pub use super::quic_config::{
    parent_transport_config, parent_transport_starting_at, transport_config,
};
use super::tcp::{TcpLink, TcpReader};
use quic_reader::QuicReader;

/// How many messages of one class may wait to be written or handled.
const QUEUE: usize = 1024;

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
    let socket = super::plain_udp::PlainUdp::bind(bind).map_err(bound)?;
    let mut endpoint = Endpoint::new_with_abstract_socket(
        client_endpoint_config(),
        None,
        Arc::new(socket),
        Arc::new(TokioRuntime),
    )
    .map_err(bound)?;
    endpoint.set_default_client_config(client);
    Ok(endpoint)
}

/// How many bytes a connecting endpoint's connection IDs have: every packet its parent
/// sends it carries one. quinn's default is 8; an endpoint that holds one connection
/// (two while it reconnects, each with a few IDs issued) needs far fewer than 2^32, and
/// quinn draws again on a collision. At 10,000 leaves the 4 bytes saved per packet are
/// about 1 % of what the root sends each region per update (issue 49's P2), and as much
/// at a site's agents.
pub const CHILD_CID_LEN: usize = 4;

/// The endpoint configuration of a connecting endpoint: short connection IDs (see
/// [`CHILD_CID_LEN`]).
pub fn client_endpoint_config() -> EndpointConfig {
    let mut config = EndpointConfig::default();
    config.cid_generator(|| Box::new(quinn_proto::RandomConnectionIdGenerator::new(CHILD_CID_LEN)));
    config
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

/// The sending half of a link: one queue per class (`net/out_queue.rs`), and one
/// writer task for them all (see `write_streams`).
#[derive(Debug)]
pub struct Sender<M> {
    queues: OutSender<M>,
    bytes: Arc<ClassBytes>,
    _tasks: JoinSet<()>,
}

impl<M: WireMessage> Sender<M> {
    /// Queues a message on its class's stream. A full queue means the peer does not
    /// keep up; the caller closes the link.
    pub fn send(&self, msg: M) -> Result<(), TransportError> {
        let class = msg.class();
        self.queues
            .try_send(slot(class), Box::new(msg))
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
    incoming: Incoming,
    _messages: std::marker::PhantomData<fn() -> M>,
}

#[derive(Debug)]
enum Incoming {
    /// QUIC: read from quinn's streams when the node asks for the next message.
    Quic(QuicReader),
    /// TLS/TCP: the link's reading task files each class's chunks; they are decoded
    /// when the node asks for the next message.
    Tcp(Box<TcpReader>),
}

impl<M: WireMessage> Receiver<M> {
    /// The next message; control before reports before bulk when several are ready.
    /// Cancel-safe: a message is taken only when this returns it.
    pub async fn recv(&mut self) -> Result<M, TransportError> {
        match &mut self.incoming {
            Incoming::Quic(reader) => std::future::poll_fn(|cx| reader.poll_next(cx)).await,
            Incoming::Tcp(reader) => std::future::poll_fn(|cx| reader.poll_next(cx)).await,
        }
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
        Link::Tcp(tcp) => return split_tcp(tcp, max_frame),
    };
    let bytes = Arc::new(ClassBytes::default());
    let mut writers = JoinSet::new();
    let (queues, outgoing) = out_queue::<Out>(QUEUE);
    writers.spawn(write_streams(conn.clone(), outgoing, bytes.clone()));
    (
        Sender {
            queues,
            bytes: bytes.clone(),
            _tasks: writers,
        },
        Receiver {
            incoming: Incoming::Quic(QuicReader::new(conn, link, max_frame, bytes)),
            _messages: std::marker::PhantomData,
        },
    )
}

fn split_tcp<Out: WireMessage, In: WireMessage>(
    tcp: &TcpLink,
    max_frame: usize,
) -> (Sender<Out>, Receiver<In>) {
    let bytes = Arc::new(ClassBytes::default());
    let (queues, outgoing) = out_queue::<Out>(QUEUE);
    let reading = tcp.spawn(outgoing, bytes.clone());
    let reader = TcpReader::new(tcp.clone(), max_frame, bytes.clone(), reading);
    (
        Sender {
            queues,
            bytes,
            _tasks: JoinSet::new(),
        },
        Receiver {
            incoming: Incoming::Tcp(Box::new(reader)),
            _messages: std::marker::PhantomData,
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
    queues: OutReceiver<M>,
    bytes: Arc<ClassBytes>,
) {
    let mut streams: [Option<quinn::SendStream>; 3] = [None, None, None];
    let mut writes: [Option<Write>; 3] = [None, None, None];
    let mut open = [true; 3];
    loop {
        // Start a write on every free class that has a message waiting, before waiting.
        for i in 0..STREAM_CLASSES.len() {
            while writes[i].is_none() && open[i] {
                match queues.try_recv(i) {
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
                    match queues.poll_recv(i, cx) {
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
