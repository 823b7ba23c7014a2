//! The receiving side of a QUIC link: the peer's unidirectional streams, one per
//! [`StreamClass`], accepted and read as the node asks for the next message (control
//! first), with no task or queue of their own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use quinn::{Connection, VarInt};
use strata_protocol::codec::{self, FrameDecoder};
use strata_protocol::wire::StreamClass;

use super::super::link::Link;
use super::super::message::{
    ClassBytes, STREAM_CLASSES, TransportError, WireMessage, close_code, slot, tag,
};

/// Accepting a QUIC connection's next unidirectional stream.
type Accept = Pin<Box<dyn Future<Output = Option<quinn::RecvStream>> + Send>>;

/// The reason a link closed, once it has.
type Closing = Pin<Box<dyn Future<Output = String> + Send>>;

/// The receiving side of a QUIC link, polled by the task that consumes its messages:
/// no reader task and no queue between quinn's receive buffers and the node, so a
/// message costs no task wake-up or channel hop of its own, and the peer's flow control
/// is released only as fast as the node takes messages.
pub(super) struct QuicReader {
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
    pub(super) fn new(
        conn: Connection,
        link: Link,
        max_frame: usize,
        bytes: Arc<ClassBytes>,
    ) -> Self {
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

    pub(super) fn poll_next<M: WireMessage>(
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
                            let code = close_code::for_decode_error(&e);
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
