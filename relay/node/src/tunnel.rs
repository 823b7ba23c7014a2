//! The debug tunnel's streams: a user's Kubernetes request carried from the root down
//! the relay chain to a cluster's agent, one QUIC bidirectional stream per request and
//! per link, always opened by the parent toward the child (the direction every node
//! can reach: children dial out, but once connected either side may open streams).
//!
//! Why a stream per request, not frames on the existing classes: each QUIC stream has
//! its own flow-control window, so a `kubectl logs -f` whose reader is slow stops only
//! its own stream (at most [`quinn::TransportConfig`]'s stream window in flight), and
//! its send side runs at a lower priority ([`TUNNEL_PRIORITY`]) than the control, bulk
//! and report streams, which therefore never wait behind tunnelled bytes. The stream
//! carries a [`TunnelOpen`] header, then raw HTTP/1.1 both ways; a node that cannot
//! forward answers in HTTP itself ([`refusal`]), so the root's HTTP client reads a
//! `metav1.Status` whichever tier refused.
//!
//! On the TLS/TCP transport the same streams are the multiplexer's tunnel streams
//! (`crate::net::tcp`'s `streams`: per-stream credit, scheduled after control and taking
//! turns with the protocol's data). Both are a [`TunnelStream`], so nothing above this
//! module knows which transport a tunnel crosses. A child on TCP whose build does not
//! carry them (it did not announce them) is refused with 503 saying so
//! ([`TunnelError::NotCarried`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use strata_protocol::codec::{self, FRAME_HEADER_LEN};
use strata_protocol::tunnel::{MAX_TUNNEL_HEADER, TunnelOpen};
use strata_protocol::volume::{MAX_STREAM_HEADER, StreamOpen, decode_stream_open};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::net::link::Link;
pub use crate::net::windows::{
    MAX_TUNNEL_STREAMS, PROTOCOL_SEND_WINDOW, SEND_WINDOW, STREAM_WINDOW,
};

/// One tunnel stream: read the child's (or parent's) bytes, write ours; shutting the
/// write side down ends our direction, dropping it abandons both.
#[derive(Debug)]
pub enum TunnelStream {
    /// A QUIC bidirectional stream.
    Quic(tokio::io::Join<quinn::RecvStream, quinn::SendStream>),
    /// A tunnel stream of a TLS/TCP link (the user's end of its pipe).
    Tcp(DuplexStream),
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            TunnelStream::Quic(s) => Pin::new(s).poll_read(cx, buf),
            TunnelStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            TunnelStream::Quic(s) => Pin::new(s).poll_write(cx, buf),
            TunnelStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            TunnelStream::Quic(s) => Pin::new(s).poll_flush(cx),
            TunnelStream::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            TunnelStream::Quic(s) => Pin::new(s).poll_shutdown(cx),
            TunnelStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The send priority of tunnel streams: below the protocol's streams (priority 0), so
/// that quinn sends heartbeats, downsync and reports first when both have data.
pub const TUNNEL_PRIORITY: i32 = -1;

/// The send priority of volume streams (`crate::volume`): below tunnels and the
/// protocol's streams, so a volume copy never starves a debug session or the
/// desired state. Here, beside the tunnels' own, because a parent's accept loop sets
/// it on a volume stream it reads the header of.
pub const VOLUME_PRIORITY: i32 = -2;

/// How long a node waits for a tunnel stream's header.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a tunnel stream could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the peer or the cause
pub enum TunnelError {
    /// The link runs over TLS/TCP and the peer's build does not carry tunnels on it.
    #[error(
        "the link to {peer} runs over TLS/TCP and {peer}'s build does not carry debug tunnels on it (an older version)"
    )]
    NotCarried { peer: String },
    /// The stream could not be opened or written.
    #[error("cannot open a tunnel stream to {peer}: {detail}")]
    Open { peer: String, detail: String },
    /// The header did not arrive, was too large or did not decode.
    #[error("bad tunnel header: {0}")]
    Header(String),
}

/// Opens a tunnel stream toward the child `peer` on `link` and writes `open` on it.
pub async fn open(link: &Link, peer: &str, open: &TunnelOpen) -> Result<TunnelStream, TunnelError> {
    let mut header = Vec::new();
    codec::encode(open, MAX_TUNNEL_HEADER, &mut header).map_err(|e| TunnelError::Open {
        peer: peer.to_owned(),
        detail: e.to_string(),
    })?;
    open_with(link, peer, &header, TUNNEL_PRIORITY).await
}

/// Opens a stream toward the child `peer` on `link`, at send priority `priority` (on
/// QUIC), and writes `header` (a framed stream header) on it.
pub async fn open_with(
    link: &Link,
    peer: &str,
    header: &[u8],
    priority: i32,
) -> Result<TunnelStream, TunnelError> {
    let err = |detail: String| TunnelError::Open {
        peer: peer.to_owned(),
        detail,
    };
    let mut stream = match link {
        Link::Quic(conn) => {
            let (send, recv) = conn.open_bi().await.map_err(|e| err(e.to_string()))?;
            // A closed stream cannot be prioritised; the write below then fails and
            // says so.
            let _ = send.set_priority(priority);
            TunnelStream::Quic(tokio::io::join(recv, send))
        }
        Link::Tcp(t) => match t.open_tunnel().await {
            Ok(s) => TunnelStream::Tcp(s),
            Err(crate::net::tcp::OpenStreamError::NotSupported) => {
                return Err(TunnelError::NotCarried {
                    peer: peer.to_owned(),
                });
            }
            Err(e) => return Err(err(e.to_string())),
        },
    };
    stream
        .write_all(header)
        .await
        .map_err(|e| err(e.to_string()))?;
    Ok(stream)
}

impl TunnelStream {
    /// Sets the send priority of a QUIC stream (a TLS/TCP link's tunnel streams take
    /// turns with each other and have none).
    pub fn set_priority(&self, priority: i32) {
        if let TunnelStream::Quic(s) = self {
            let _ = s.writer().set_priority(priority);
        }
    }
}

/// Reads the header the parent wrote first on `recv`: a debug tunnel's, or (from
/// protocol version 7) a volume stream's ([`strata_protocol::volume`]).
pub async fn read_header<R: AsyncRead + Unpin>(recv: &mut R) -> Result<StreamOpen, TunnelError> {
    let bad = |d: String| TunnelError::Header(d);
    let mut len = [0u8; FRAME_HEADER_LEN];
    recv.read_exact(&mut len)
        .await
        .map_err(|e| bad(e.to_string()))?;
    let body_len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if body_len > MAX_STREAM_HEADER {
        return Err(bad(format!("{body_len} bytes, over {MAX_STREAM_HEADER}")));
    }
    let mut frame = vec![0u8; FRAME_HEADER_LEN + body_len];
    frame[..FRAME_HEADER_LEN].copy_from_slice(&len);
    recv.read_exact(&mut frame[FRAME_HEADER_LEN..])
        .await
        .map_err(|e| bad(e.to_string()))?;
    match decode_stream_open(&frame) {
        Ok(Some(open)) => Ok(open),
        Ok(None) => Err(bad("truncated".into())),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// Serves the tunnel streams the parent opens, on whichever link to the parent is
/// current (`links`, replaced at every reconnection): each stream's header is read,
/// then `serve` gets it, in a task owned by this future (dropping it ends them all).
/// Volume streams come this way too ([`StreamOpen::Volume`]).
pub async fn serve_from_parent<F, Fut>(mut links: watch::Receiver<Option<Link>>, serve: F)
where
    F: Fn(StreamOpen, TunnelStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let mut streams = JoinSet::new();
    loop {
        let current = links.borrow_and_update().clone();
        let accepted = async {
            match &current {
                Some(Link::Quic(c)) => c.accept_bi().await.ok().map(|(send, recv)| {
                    let _ = send.set_priority(TUNNEL_PRIORITY);
                    TunnelStream::Quic(tokio::io::join(recv, send))
                }),
                Some(Link::Tcp(t)) => t.accept_tunnel().await.map(TunnelStream::Tcp),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            changed = links.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            bi = accepted => {
                let Some(mut stream) = bi else {
                    // The connection ended: wait for the next one.
                    if links.changed().await.is_err() {
                        return;
                    }
                    continue;
                };
                let serve = serve.clone();
                streams.spawn(async move {
                    match tokio::time::timeout(HEADER_TIMEOUT, read_header(&mut stream)).await {
                        Ok(Ok(open)) => {
                            if matches!(open, StreamOpen::Volume(..)) {
                                stream.set_priority(VOLUME_PRIORITY);
                            }
                            serve(open, stream).await
                        }
                        Ok(Err(e)) => tracing::warn!(error = %e, "dropping a tunnel stream"),
                        Err(_) => tracing::warn!("dropping a tunnel stream: no header in time"),
                    }
                });
            }
        }
        while streams.try_join_next().is_some() {}
    }
}

/// Copies bytes both ways between two tunnel streams (a relay in the middle) until
/// both directions end, and then finishes both.
pub async fn splice(mut up: TunnelStream, mut down: TunnelStream) {
    let _ = tokio::io::copy_bidirectional(&mut up, &mut down).await;
    let _ = up.shutdown().await;
    let _ = down.shutdown().await;
}

/// An HTTP/1.1 response with a `metav1.Status` body and `Connection: close`: what a
/// node that cannot forward a tunnel writes on it.
pub fn refusal(code: u16, reason: &str, message: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string();
    let phrase = match code {
        404 => "Not Found",
        429 => "Too Many Requests",
        502 => "Bad Gateway",
        _ => "Service Unavailable",
    };
    format!(
        "HTTP/1.1 {code} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers a refused request with [`refusal`], as HTTP wants it: after its head has
/// arrived (at most [`LINGER_BYTES`], for at most [`LINGER`]). An answer that arrives
/// before the requester's HTTP client has sent its request is an unexpected message to
/// that client, which then drops the connection and cancels the request: a root slow to
/// write (under load) showed the user a broken tunnel (502) instead of this answer.
/// Then the stream is finished, and what the requester still sends (a body) is read,
/// within the same bounds, before letting go: dropping a stream unread tells the peer to
/// stop sending, and a requester still writing would see a broken tunnel too.
pub async fn refuse(mut stream: TunnelStream, code: u16, reason: &str, message: &str) {
    let mut read = 0;
    drain(&mut stream, &mut read, true).await;
    let _ = stream.write_all(&refusal(code, reason, message)).await;
    let _ = stream.shutdown().await;
    drain(&mut stream, &mut read, false).await;
}

/// Reads and drops what the refused request sends, for at most [`LINGER`] and until
/// `read` reaches [`LINGER_BYTES`]: up to the end of the request's head (its first
/// blank line) when `head_only`, else until the stream ends.
async fn drain(stream: &mut TunnelStream, read: &mut usize, head_only: bool) {
    let mut sink = [0u8; 4096];
    // The last bytes seen, so that a blank line split across reads is found too.
    let mut tail: Vec<u8> = Vec::new();
    let reading = async {
        while *read < LINGER_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    *read += n;
                    if !head_only {
                        continue;
                    }
                    tail.extend_from_slice(&sink[..n]);
                    if tail.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                    let keep = tail.len().saturating_sub(3);
                    tail.drain(..keep);
                }
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, reading).await;
}

/// How long a refusing node reads a refused request before it lets the stream go.
pub const LINGER: Duration = Duration::from_secs(2);
/// How much of a refused request a refusing node reads at most.
pub const LINGER_BYTES: usize = 64 * 1024;

/// Per-link caps on concurrent tunnels: a permit per open tunnel, per child. The cap
/// bounds bytes in flight on a link too, at `cap` times QUIC's stream window.
#[derive(Debug)]
pub struct TunnelSlots {
    cap: usize,
    links: BTreeMap<String, Arc<Semaphore>>,
}

impl TunnelSlots {
    /// At most `cap` tunnels at once on each link.
    pub fn new(cap: usize) -> Self {
        TunnelSlots {
            cap,
            links: BTreeMap::new(),
        }
    }

    /// The cap per link.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// A permit for one more tunnel toward `child`, held as long as the tunnel lasts;
    /// `None` when `cap` are open already.
    pub fn take(&mut self, child: &str) -> Option<OwnedSemaphorePermit> {
        let cap = self.cap;
        self.links
            .entry(child.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(cap)))
            .clone()
            .try_acquire_owned()
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cap_each_link_apart_and_come_back_when_dropped() {
        let mut slots = TunnelSlots::new(2);
        let a1 = slots.take("a").unwrap();
        let _a2 = slots.take("a").unwrap();
        assert!(slots.take("a").is_none());
        assert!(slots.take("b").is_some());
        drop(a1);
        assert!(slots.take("a").is_some());
    }

    #[test]
    fn a_refusal_is_a_whole_http_response() {
        let r = String::from_utf8(refusal(
            503,
            "ServiceUnavailable",
            "cluster x is unreachable",
        ))
        .unwrap();
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{r}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["code"], 503);
    }
}
