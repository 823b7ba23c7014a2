//! What both transports share (QUIC in [`super::transport`], TLS/TCP in
//! [`super::tcp`]): the messages a link carries ([`WireMessage`]), one stream per class
//! ([`STREAM_CLASSES`]) with the bytes moved on each ([`ClassBytes`]), what the links'
//! queues hold, why a link failed ([`TransportError`]) and its close codes
//! ([`close_code`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;
use strata_protocol::wire::{ChildToParent, JoinReply, JoinRequest, ParentToChild, StreamClass};

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

    /// The code to close a link with over a frame that did not decode.
    pub(crate) fn for_decode_error(e: &strata_protocol::codec::DecodeError) -> u32 {
        match e {
            strata_protocol::codec::DecodeError::Oversized { .. } => OVERSIZED,
            _ => MALFORMED,
        }
    }
}

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

/// On a TLS/TCP link without a client certificate, the join exchange's two messages
/// travel on the control stream (over QUIC they have unidirectional streams of their
/// own: see `crate::join`).
impl WireMessage for JoinRequest {
    fn class(&self) -> StreamClass {
        StreamClass::Control
    }
}

impl WireMessage for JoinReply {
    fn class(&self) -> StreamClass {
        StreamClass::Control
    }
}

/// Every stream class, in tag order.
pub const STREAM_CLASSES: [StreamClass; 3] = [
    StreamClass::Control,
    StreamClass::Bulk,
    StreamClass::Reports,
];

pub(crate) fn tag(class: StreamClass) -> u8 {
    match class {
        StreamClass::Control => 0,
        StreamClass::Bulk => 1,
        StreamClass::Reports => 2,
    }
}

pub(crate) fn slot(class: StreamClass) -> usize {
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

/// What a link's sending queues carry (`out_queue`'s, which take memory only while
/// messages wait): a boxed message, so that a queue's slots are 8 bytes, not a
/// message's size. Neither transport's receiving half has a queue: both decode from
/// the connection's buffers when the node asks for the next message.
pub(crate) type Queued<M> = Box<M>;
