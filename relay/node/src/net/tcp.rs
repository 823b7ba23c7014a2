//! The second transport: the same protocol over one TLS 1.3 connection on TCP (same
//! mutual-TLS identities, same ALPN), for networks where UDP does not pass.
//!
//! # Why one connection with a small multiplexer
//!
//! The three stream classes (control, bulk, reports) share one TCP connection as
//! chunks of at most [`CHUNK`] bytes, each tagged with its class, and the writer always
//! takes control before reports before bulk. Per-class credit (like HTTP/2 windows)
//! bounds how many bytes of a class may be unconsumed at the receiver ([`WINDOW`]), so:
//! a heartbeat waits behind less than two chunks (the writer writes what it staged
//! once a chunk's worth waits) plus the bulk bytes in flight (at most
//! one window), never behind a whole snapshot; and a receiver whose bulk queue is full
//! stops bulk alone while control keeps flowing, as QUIC's per-stream flow control
//! does. One connection rather than one per class because a child then makes one TCP
//! handshake, one TLS handshake and one proxy CONNECT, and because an L4 balancer in
//! front of replicated parents cannot send a link's classes to different replicas.
//!
//! # Wire
//!
//! After the TLS handshake both sides send frames with an 8-byte header
//! `[kind u8][class u8][code u16 BE][len u32 BE]` and `len` bytes of payload:
//! `DATA` (a chunk of the class's byte stream, itself length-prefixed frames of
//! `protocol/src/codec.rs`), `CREDIT` (`len` more bytes of the class may be sent; no
//! payload), `PING` (keep-alive; no payload), `CLOSE` (the application `code`, the
//! reason as payload). A side that hears nothing for [`IDLE_TIMEOUT`] closes the link,
//! as QUIC's idle timeout does; pings go every [`KEEP_ALIVE`] by default (a child sets
//! its own with `parent.keepalive_ms`), shorter than the idle timeouts of common proxies
//! and load balancers.
//!
//! Debug tunnels run on the same connection as dynamic streams with their own credit
//! (see `tcp/streams.rs`): the first `PING` each side writes carries its feature bits in
//! `code` (older builds ignore a ping's `class` and `code`), and tunnel frames go only
//! to a peer that announced them.

mod listen;
mod reader;
mod streams;
mod writer;
pub use listen::{Accept, Listener, ServerTls};
pub(crate) use reader::TcpReader;
pub use streams::{OpenStreamError, TUNNEL_WINDOW};
use writer::{Writer, write_frame};

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Waker;
use std::time::Duration;

use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf,
};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsStream;

use super::message::{ClassBytes, WireMessage, close_code};
use super::out_queue::OutReceiver;

/// The largest chunk of one class written at a time: what a heartbeat may wait behind
/// in the writer.
pub const CHUNK: usize = 16 * 1024;
/// Bytes of one class the sender may have unconsumed at the receiver.
pub const WINDOW: u64 = 256 * 1024;
/// Consumed bytes of one class a receiver grants back at once: credit goes in a frame
/// per quarter window, not per chunk, as QUIC's window updates do (the sender still has
/// three quarters of a window to send meanwhile).
const GRANT_AT: u64 = WINDOW / 4;
/// How often a side pings by default.
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// Silence after which a side gives the link up.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Class slots in the order the writer serves them and the reader hands them to the
/// node: heartbeats and acks (control), then reports, then bulk.
const PRIORITY: [usize; 3] = [0, 2, 1];

const DATA: u8 = 0;
const CREDIT: u8 = 1;
const PING: u8 = 2;
const CLOSE: u8 = 3;
const HEADER: usize = 8;
const MAX_REASON: usize = 1024;

/// A byte stream a TLS link runs on: a TCP socket, a proxy's tunnel, or the
/// simulator's TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

impl std::fmt::Debug for dyn Io {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Io")
    }
}

/// A boxed [`Io`].
pub type BoxIo = Box<dyn Io>;

/// A future of a boxed value, as the hooks below return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

type Stream = TlsStream<BoxIo>;

/// A tokio TCP stream ready for [`connect`] or [`accept`]: Nagle off, the peer's
/// address read.
pub fn from_tokio(stream: TcpStream) -> std::io::Result<(BoxIo, SocketAddr)> {
    let _ = stream.set_nodelay(true);
    let remote = stream.peer_addr()?;
    Ok((Box::new(stream), remote))
}

/// What the writer is asked besides the classes' messages.
#[derive(Debug)]
enum Event {
    /// Grant the peer `n` more bytes of class `c`.
    Grant(usize, u32),
    /// The peer granted us `n` more bytes of class `c`.
    Credit(usize, u32),
    /// Write a CLOSE and end.
    Close(u32, Vec<u8>),
    /// Grant the peer `n` more bytes of tunnel stream `id`.
    TunnelGrant(u32, u32),
    /// The first tunnel stream opened: the queue of tunnel frames to write, made then
    /// (an idle link has none).
    Tunnels(mpsc::Receiver<streams::TunnelFrame>),
}

/// A TLS-over-TCP link (see the module doc). Cloning gives another handle; the writer
/// task lives until the link is closed or the last handle drops.
#[derive(Debug, Clone)]
pub struct TcpLink {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    remote: SocketAddr,
    peer: Option<Vec<CertificateDer<'static>>>,
    /// The stream, until [`TcpLink`] is split into sender and receiver.
    halves: tokio::sync::Mutex<Option<(ReadHalf<Stream>, WriteHalf<Stream>)>>,
    events: mpsc::UnboundedSender<Event>,
    events_rx: tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    /// Why the link closed, once it has.
    closed: watch::Sender<Option<String>>,
    /// Multiplexer bytes written and read (TLS plaintext, headers included).
    wire: [AtomicU64; 2],
    writer: OnceLock<JoinHandle<()>>,
    /// A close was asked for: the writer may outlive the last handle to write it
    /// (for at most [`CLOSE_WRITE_TIMEOUT`]).
    closing: std::sync::atomic::AtomicBool,
    /// How often the writer pings.
    keep_alive: Duration,
    /// The debug-tunnel streams.
    streams: streams::Streams,
    /// This side dialled through an HTTP CONNECT proxy ([`TcpLink::mark_proxied`]).
    proxied: std::sync::atomic::AtomicBool,
    /// Each class's chunks read and not yet decoded (see `tcp/reader.rs`).
    inbound: reader::InboundCell,
}

/// How long a closing writer may take to write what is queued and the CLOSE.
const CLOSE_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

impl Drop for Inner {
    fn drop(&mut self) {
        // The writer ends with the link, unless it is writing a close (bounded).
        if !self.closing.load(Ordering::Relaxed)
            && let Some(w) = self.writer.get()
        {
            w.abort();
        }
        self.streams.abort_all();
    }
}

/// Connects TLS over an established TCP stream (direct, or a proxy's tunnel) to the
/// node `name`, whose certificate must name it; this side pings every `keep_alive`.
pub async fn connect(
    (stream, remote): (BoxIo, SocketAddr),
    tls: Arc<rustls::ClientConfig>,
    name: &str,
    keep_alive: Duration,
) -> Result<TcpLink, std::io::Error> {
    let server = ServerName::try_from(name.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let tls = tokio_rustls::TlsConnector::from(tls)
        .connect(server, stream)
        .await?;
    let peer = tls.get_ref().1.peer_certificates().map(|c| c.to_vec());
    Ok(TcpLink::new(
        TlsStream::Client(tls),
        remote,
        peer,
        keep_alive,
    ))
}

/// Accepts TLS on a TCP stream a listener took.
pub async fn accept(
    (stream, remote): (BoxIo, SocketAddr),
    tls: Arc<rustls::ServerConfig>,
) -> Result<TcpLink, std::io::Error> {
    let tls = tokio_rustls::TlsAcceptor::from(tls).accept(stream).await?;
    let peer = tls.get_ref().1.peer_certificates().map(|c| c.to_vec());
    Ok(TcpLink::new(
        TlsStream::Server(tls),
        remote,
        peer,
        KEEP_ALIVE,
    ))
}

impl TcpLink {
    fn new(
        stream: Stream,
        remote: SocketAddr,
        peer: Option<Vec<CertificateDer<'static>>>,
        keep_alive: Duration,
    ) -> Self {
        let (events, events_rx) = mpsc::unbounded_channel();
        // The side that accepted the connection is the parent: it opens tunnels.
        let opener = matches!(stream, TlsStream::Server(_));
        let streams = streams::Streams::new(opener, events.clone());
        TcpLink {
            inner: Arc::new(Inner {
                remote,
                peer,
                halves: tokio::sync::Mutex::new(Some(tokio::io::split(stream))),
                events,
                events_rx: tokio::sync::Mutex::new(Some(events_rx)),
                closed: watch::channel(None).0,
                wire: [AtomicU64::new(0), AtomicU64::new(0)],
                writer: OnceLock::new(),
                closing: std::sync::atomic::AtomicBool::new(false),
                keep_alive: keep_alive.max(Duration::from_millis(10)),
                streams,
                proxied: std::sync::atomic::AtomicBool::new(false),
                inbound: Default::default(),
            }),
        }
    }

    /// Notes that this side dialled the link through an HTTP CONNECT proxy (the dialler
    /// knows; nothing on the link says it).
    pub fn mark_proxied(&self) {
        self.inner.proxied.store(true, Ordering::Relaxed);
    }

    /// Whether this side dialled the link through a proxy.
    pub fn proxied(&self) -> bool {
        self.inner.proxied.load(Ordering::Relaxed)
    }

    /// The peer's address (the proxy's, through a proxy).
    pub fn remote_address(&self) -> SocketAddr {
        self.inner.remote
    }

    /// The certificates the peer presented, leaf first.
    pub fn peer_chain(&self) -> Option<Vec<CertificateDer<'static>>> {
        self.inner.peer.clone()
    }

    /// Multiplexer bytes (sent, received) so far.
    pub fn wire_bytes(&self) -> (u64, u64) {
        let [tx, rx] = &self.inner.wire;
        (tx.load(Ordering::Relaxed), rx.load(Ordering::Relaxed))
    }

    /// Closes the link after what is already queued: the peer reads `code` and
    /// `reason`.
    pub fn close(&self, code: u32, reason: &[u8]) {
        let reason = reason[..reason.len().min(MAX_REASON)].to_vec();
        if self.inner.writer.get().is_some() {
            self.inner.closing.store(true, Ordering::Relaxed);
            let _ = self.inner.events.send(Event::Close(code, reason));
            return;
        }
        // Not split yet (a refused connection): say why and end.
        let halves = self.inner.halves.try_lock().ok().and_then(|mut h| h.take());
        set_closed(
            &self.inner.closed,
            format!("closed locally: {}", lossy(&reason)),
        );
        if let Some((_, mut wr)) = halves {
            tokio::spawn(async move {
                let _ = write_frame(&mut wr, CLOSE, 0, code, &reason).await;
                let _ = wr.shutdown().await;
            });
        }
    }

    /// Whether debug-tunnel streams can be opened on this link: this side is the
    /// parent and the child's build carries them (it said so in its first ping).
    pub fn carries_tunnels(&self) -> bool {
        self.inner.streams.carries_tunnels()
    }

    /// Opens a debug-tunnel stream toward the child: bytes written on the returned
    /// pipe reach the stream the child accepts ([`Self::accept_tunnel`]), and back.
    pub async fn open_tunnel(&self) -> Result<DuplexStream, OpenStreamError> {
        self.inner.streams.open().await
    }

    /// The next debug-tunnel stream the parent opened; `None` once the link closed.
    pub async fn accept_tunnel(&self) -> Option<DuplexStream> {
        self.inner.streams.accept().await
    }

    /// Resolves when the link is closed, with why.
    pub async fn closed(&self) -> String {
        let mut rx = self.inner.closed.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return "connection dropped".into();
            }
        }
    }

    /// Starts the writer (owned by the link) on the classes' outgoing queues, and the
    /// task that reads the connection and files each class's chunks for the receiving
    /// half ([`TcpReader`]), which owns it. Only the first call gets the stream; later
    /// calls start nothing.
    pub(crate) fn spawn<Out: WireMessage>(
        &self,
        outgoing: OutReceiver<Out>,
        bytes: Arc<ClassBytes>,
    ) -> Option<JoinHandle<()>> {
        let halves = self.inner.halves.try_lock().ok().and_then(|mut h| h.take());
        let events_rx = self
            .inner
            .events_rx
            .try_lock()
            .ok()
            .and_then(|mut e| e.take());
        let (Some((rd, wr)), Some(events_rx)) = (halves, events_rx) else {
            return None;
        };
        let writer = Writer {
            wr,
            out: Vec::new(),
            queues: outgoing,
            events: events_rx,
            credit: [WINDOW; 3],
            pending: Default::default(),
            open: [true; 3],
            bytes,
            link: Arc::downgrade(&self.inner),
            closed: self.inner.closed.subscribe(),
            keep_alive: self.inner.keep_alive,
            tunnels: None,
            tunnel_pending: None,
            tunnel_turn: false,
        };
        let _ = self.inner.writer.set(tokio::spawn(writer.run()));
        Some(tokio::spawn(read_loop(rd, self.clone())))
    }

    /// Each class's chunks read and not yet decoded.
    fn inbound(&self) -> std::sync::MutexGuard<'_, reader::Inbound> {
        self.inner.inbound.lock()
    }

    /// Asks the writer for something besides the classes' messages.
    fn event(&self, ev: Event) {
        let _ = self.inner.events.send(ev);
    }
}

fn set_closed(state: &watch::Sender<Option<String>>, why: String) {
    state.send_if_modified(|s| {
        if s.is_none() {
            *s = Some(why);
            true
        } else {
            false
        }
    });
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn read_loop(mut rd: ReadHalf<Stream>, link: TcpLink) {
    let why = read_frames(&mut rd, &link).await;
    link.inner.streams.close_all().await;
    // The receiving half decodes what was filed before it reports the close.
    set_closed(&link.inner.closed, why);
}

async fn read_frames(rd: &mut ReadHalf<Stream>, link: &TcpLink) -> String {
    let mut closed = link.inner.closed.subscribe();
    loop {
        let mut header = [0u8; HEADER];
        let read = tokio::select! {
            biased;
            _ = closed.changed() => return "closed".into(),
            r = tokio::time::timeout(IDLE_TIMEOUT, rd.read_exact(&mut header)) => r,
        };
        match read {
            Err(_) => {
                let why = format!("timed out: nothing from the peer for {IDLE_TIMEOUT:?}");
                link.close(close_code::PROTOCOL, why.as_bytes());
                return why;
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return "the peer closed the TCP connection".into();
            }
            Ok(Err(e)) => return format!("read failed: {e}"),
            Ok(Ok(_)) => {}
        }
        let (kind, class) = (header[0], usize::from(header[1]));
        let code = u16::from_be_bytes([header[2], header[3]]);
        let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        link.inner.wire[1].fetch_add(HEADER as u64, Ordering::Relaxed);
        let malformed = |why: String| {
            link.close(close_code::MALFORMED, why.as_bytes());
            why
        };
        match kind {
            DATA => {
                if class >= 3 || len as usize > CHUNK {
                    return malformed(format!("bad DATA frame (class {class}, {len} bytes)"));
                }
                let mut buf = vec![0u8; len as usize];
                if let Err(e) = rd.read_exact(&mut buf).await {
                    return format!("read failed: {e}");
                }
                link.inner.wire[1].fetch_add(u64::from(len), Ordering::Relaxed);
                let filed = link.inbound().push(class, buf);
                match filed {
                    Ok(waker) => waker.into_iter().for_each(Waker::wake),
                    Err(why) => return malformed(why),
                }
            }
            CREDIT if class < 3 => {
                let _ = link.inner.events.send(Event::Credit(class, len));
            }
            PING => {
                if class == usize::from(streams::FEATURES) {
                    link.inner.streams.peer_features(code);
                }
            }
            streams::T_OPEN..=streams::T_RESET => {
                if len as usize > streams::MAX_PAYLOAD {
                    return malformed(format!("oversized tunnel frame ({len} bytes)"));
                }
                let mut buf = vec![0u8; len as usize];
                if let Err(e) = rd.read_exact(&mut buf).await {
                    return format!("read failed: {e}");
                }
                link.inner.wire[1].fetch_add(u64::from(len), Ordering::Relaxed);
                if let Err(why) = link.inner.streams.handle(kind, buf).await {
                    return malformed(why);
                }
            }
            CLOSE => {
                let mut reason = vec![0u8; (len as usize).min(MAX_REASON)];
                let _ = rd.read_exact(&mut reason).await;
                return format!("closed by peer: code {code}: {}", lossy(&reason));
            }
            _ => return malformed(format!("unknown frame kind {kind}")),
        }
    }
}
