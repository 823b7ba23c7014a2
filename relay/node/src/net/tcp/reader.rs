//! The receiving side of a TLS/TCP link, as QUIC's (`transport/quic_reader.rs`): the
//! link's reading task only files each class's chunks ([`Inbound`]); the task that
//! consumes the link's messages decodes them when it asks for the next one, control
//! first. No decoding task, chunk channel or message queue per class: an idle link
//! holds none of them, and the peer's credit is granted back only as fast as the node
//! takes messages, so a class the node does not take stops that class alone.
//!
//! The chunks wait behind a `std::sync::Mutex`, which the workspace disallows in favour
//! of tokio's, for `out_queue`'s reasons: the receiving half takes them in a `poll`
//! (synchronous code), and every critical section is a few moves with no await inside.
#![allow(clippy::disallowed_types)]

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use strata_protocol::codec::{self, FrameDecoder};
use tokio::task::JoinHandle;

use super::{Event, GRANT_AT, PRIORITY, TcpLink, WINDOW};
use crate::net::message::{ClassBytes, STREAM_CLASSES, TransportError, WireMessage, close_code};

/// Each class's chunks read from the connection and not yet decoded; the reading task
/// fills it, the receiving half empties it. Counted against the class's credit until
/// taken.
#[derive(Debug, Default)]
pub(super) struct Inbound {
    chunks: [VecDeque<Vec<u8>>; 3],
    /// Bytes of each class read and not yet taken.
    unread: [u64; 3],
    /// The receiving half, waiting for a chunk.
    waker: Option<Waker>,
}

impl Inbound {
    /// Files a chunk of class `i`; `Err` when the peer sent beyond its credit.
    pub(super) fn push(&mut self, i: usize, chunk: Vec<u8>) -> Result<Option<Waker>, String> {
        let n = chunk.len() as u64;
        if self.unread[i] + n > WINDOW {
            return Err(format!("the peer sent beyond its {WINDOW}-byte credit"));
        }
        self.unread[i] += n;
        self.chunks[i].push_back(chunk);
        Ok(self.waker.take())
    }

    fn take(&mut self, i: usize) -> Option<Vec<u8>> {
        let chunk = self.chunks[i].pop_front()?;
        self.unread[i] -= chunk.len() as u64;
        if self.chunks[i].is_empty() {
            // Drained: an idle link keeps no queue.
            self.chunks[i] = VecDeque::new();
        }
        Some(chunk)
    }
}

/// A link's [`Inbound`], shared by its reading task and its receiving half.
#[derive(Debug, Default)]
pub(super) struct InboundCell(std::sync::Mutex<Inbound>);

impl InboundCell {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Inbound> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The reason a link closed, once it has.
type Closing = Pin<Box<dyn Future<Output = String> + Send>>;

/// The receiving side of a TLS/TCP link, polled by the task that consumes its messages.
pub(crate) struct TcpReader {
    tcp: TcpLink,
    decoders: [FrameDecoder; 3],
    /// Bytes of each class taken and not yet granted back.
    owed: [u64; 3],
    closing: Closing,
    bytes: Arc<ClassBytes>,
    /// A malformed frame closed the link: nothing more is decoded.
    failed: bool,
    /// The link's reading task; it ends with this half.
    reading: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TcpReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpReader")
            .field("peer", &self.tcp.remote_address())
            .field("owed", &self.owed)
            .field("failed", &self.failed)
            .finish()
    }
}

impl Drop for TcpReader {
    fn drop(&mut self) {
        if let Some(task) = &self.reading {
            task.abort();
        }
    }
}

impl TcpReader {
    pub(crate) fn new(
        tcp: TcpLink,
        max_frame: usize,
        bytes: Arc<ClassBytes>,
        reading: Option<JoinHandle<()>>,
    ) -> Self {
        let link = tcp.clone();
        TcpReader {
            tcp,
            decoders: std::array::from_fn(|_| FrameDecoder::new(max_frame)),
            owed: [0; 3],
            closing: Box::pin(async move { link.closed().await }),
            bytes,
            failed: false,
            reading,
        }
    }

    /// The next message, control before reports before bulk; once none is whole and
    /// the link has closed, why.
    pub(crate) fn poll_next<M: WireMessage>(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<M, TransportError>> {
        if !self.failed {
            // Registered first: a chunk filed after this wakes us.
            {
                let mut inbound = self.tcp.inbound();
                if !inbound
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    inbound.waker = Some(cx.waker().clone());
                }
            }
            for i in PRIORITY {
                loop {
                    match self.decoders[i].next_message::<M>() {
                        Ok(Some(msg)) => return Poll::Ready(Ok(msg)),
                        Ok(None) => {}
                        Err(e) => return Poll::Ready(Err(self.fail(i, e))),
                    }
                    let Some(chunk) = self.tcp.inbound().take(i) else {
                        break;
                    };
                    self.consumed(i, &chunk);
                    self.decoders[i].extend(&chunk);
                }
            }
        }
        self.closing
            .as_mut()
            .poll(cx)
            .map(|reason| Err(TransportError::Closed(reason)))
    }

    /// Counts a chunk taken, and grants credit back once a quarter window is owed.
    fn consumed(&mut self, i: usize, chunk: &[u8]) {
        let n = chunk.len() as u64;
        self.bytes.received[i].fetch_add(n, Ordering::Relaxed);
        self.owed[i] += n;
        if self.owed[i] >= GRANT_AT {
            let grant = u32::try_from(self.owed[i]).unwrap_or(u32::MAX);
            self.owed[i] -= u64::from(grant);
            self.tcp.event(Event::Grant(i, grant));
        }
    }

    /// Closes the link over what the peer sent, and stops decoding.
    fn fail(&mut self, i: usize, e: codec::DecodeError) -> TransportError {
        let code = close_code::for_decode_error(&e);
        let detail = e.to_string();
        self.tcp.close(code, detail.as_bytes());
        self.failed = true;
        self.decoders = std::array::from_fn(|_| FrameDecoder::new(0));
        TransportError::Malformed {
            class: Some(STREAM_CLASSES[i]),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap

    use std::time::Duration;

    use serde::{Deserialize, Serialize};
    use strata_protocol::wire::StreamClass;
    use strata_topology::certs::Ca;
    use tokio::io::AsyncReadExt;
    use tokio::time::timeout;

    use super::super::writer::write_frame;
    use super::super::{
        CHUNK, CLOSE, CREDIT, DATA, HEADER, KEEP_ALIVE, Listener, Stream, TcpLink, accept, connect,
        from_tokio,
    };
    use super::*;
    use crate::net::tls::{self, Identity};
    use crate::net::transport;

    const LIMIT: Duration = Duration::from_secs(10);

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    enum Msg {
        Heartbeat(u32),
        Blob(u32),
        Note(String),
    }

    impl WireMessage for Msg {
        fn class(&self) -> StreamClass {
            match self {
                Msg::Heartbeat(_) => StreamClass::Control,
                Msg::Blob(_) => StreamClass::Bulk,
                Msg::Note(_) => StreamClass::Reports,
            }
        }
    }

    /// A connected pair over loopback TLS: the child's raw stream (this test writes the
    /// multiplexer's frames itself) and the parent's link.
    async fn raw_child_and_parent() -> (
        tokio::io::ReadHalf<Stream>,
        tokio::io::WriteHalf<Stream>,
        TcpLink,
    ) {
        let ca = Ca::generate("test").unwrap();
        let center = Identity::issue(&ca, "center").unwrap();
        let site = Identity::issue(&ca, "site-1").unwrap();
        let l = Listener::bind(
            "127.0.0.1:0".parse().unwrap(),
            tls::server_config(&center).unwrap(),
        )
        .unwrap();
        let addr = l.local_addr().unwrap();
        let (child, parent) = tokio::join!(
            async {
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                let config = tls::client_config(&site).unwrap();
                connect(from_tokio(stream).unwrap(), config, "center", KEEP_ALIVE)
                    .await
                    .unwrap()
            },
            async {
                let (stream, tls) = l.next().await.unwrap();
                accept(stream, tls).await.unwrap()
            }
        );
        let (rd, wr) = child.inner.halves.lock().await.take().unwrap();
        (rd, wr, parent)
    }

    fn frame_of(msg: &Msg) -> Vec<u8> {
        let mut out = Vec::new();
        codec::encode(msg, 1 << 20, &mut out).unwrap();
        out
    }

    /// Messages filed before the node asks come out control first, then reports, then
    /// bulk; a message split across chunks comes out whole; once drained, the link
    /// keeps no queue of chunks.
    #[tokio::test]
    async fn classes_come_out_control_first_and_a_drained_link_keeps_no_queue() {
        let (_rd, mut wr, parent) = raw_child_and_parent().await;
        let (_tx, mut rx) =
            transport::split::<Msg, Msg>(crate::net::link::Link::Tcp(parent.clone()), 1 << 20);
        let note = frame_of(&Msg::Note("a note".into()));
        let (first, second) = note.split_at(3);
        write_frame(&mut wr, DATA, 1, 0, &frame_of(&Msg::Blob(7)))
            .await
            .unwrap();
        write_frame(&mut wr, DATA, 2, 0, first).await.unwrap();
        write_frame(&mut wr, DATA, 2, 0, second).await.unwrap();
        write_frame(&mut wr, DATA, 0, 0, &frame_of(&Msg::Heartbeat(1)))
            .await
            .unwrap();
        // Every chunk filed before the node asks.
        timeout(LIMIT, async {
            while parent.wire_bytes().1 < (4 * HEADER + note.len()) as u64 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(timeout(LIMIT, rx.recv()).await.unwrap().unwrap());
        }
        assert_eq!(
            got,
            [Msg::Heartbeat(1), Msg::Note("a note".into()), Msg::Blob(7)]
        );
        let inbound = parent.inbound();
        assert!(
            inbound.chunks.iter().all(|q| q.capacity() == 0),
            "a drained link kept its chunk queues: {:?}",
            inbound.chunks.each_ref().map(VecDeque::capacity)
        );
        assert_eq!(inbound.unread, [0; 3]);
    }

    /// Bytes that do not decode close the link as malformed, naming the class; the
    /// peer reads why, and nothing more comes from the link.
    #[tokio::test]
    async fn a_malformed_chunk_closes_the_link_naming_its_class() {
        let (mut rd, mut wr, parent) = raw_child_and_parent().await;
        let (_tx, mut rx) =
            transport::split::<Msg, Msg>(crate::net::link::Link::Tcp(parent), 1 << 20);
        write_frame(&mut wr, DATA, 1, 0, &[0, 0, 0, 3, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        let err = timeout(LIMIT, rx.recv()).await.unwrap().unwrap_err();
        assert!(
            matches!(
                &err,
                TransportError::Malformed {
                    class: Some(StreamClass::Bulk),
                    ..
                }
            ),
            "{err}"
        );
        // The child reads the parent's frames until its CLOSE, which says why.
        let code = timeout(LIMIT, async {
            loop {
                let mut header = [0u8; HEADER];
                rd.read_exact(&mut header).await.unwrap();
                let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
                let mut payload = vec![0u8; if header[0] == CREDIT { 0 } else { len as usize }];
                rd.read_exact(&mut payload).await.unwrap();
                if header[0] == CLOSE {
                    return u16::from_be_bytes([header[2], header[3]]);
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(u32::from(code), close_code::MALFORMED);
        let after = timeout(LIMIT, rx.recv()).await.unwrap().unwrap_err();
        assert!(matches!(after, TransportError::Closed(_)), "{after}");
    }

    /// A peer that sends more of a class than its credit while the node takes nothing
    /// is closed, with the credit named; what it sent within the credit is not lost.
    #[tokio::test]
    async fn a_peer_sending_beyond_its_credit_is_closed() {
        let (_rd, mut wr, parent) = raw_child_and_parent().await;
        let (_tx, mut rx) =
            transport::split::<Msg, Msg>(crate::net::link::Link::Tcp(parent.clone()), 1 << 20);
        let within = frame_of(&Msg::Note("within the credit".into()));
        write_frame(&mut wr, DATA, 2, 0, &within).await.unwrap();
        let chunk = vec![0u8; CHUNK];
        // One chunk more of bulk than its window.
        let chunks = WINDOW as usize / CHUNK + 1;
        for _ in 0..chunks {
            if write_frame(&mut wr, DATA, 1, 0, &chunk).await.is_err() {
                break;
            }
        }
        let why = timeout(LIMIT, parent.closed()).await.unwrap();
        assert!(
            why.contains(&format!("the peer sent beyond its {WINDOW}-byte credit")),
            "{why}"
        );
        // The note came within the reports' credit: the node still gets it.
        assert_eq!(
            timeout(LIMIT, rx.recv()).await.unwrap().unwrap(),
            Msg::Note("within the credit".into())
        );
    }
}
