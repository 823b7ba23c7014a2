//! The windows and caps of a link's debug tunnel streams ([`crate::tunnel`]), which
//! both transports size their streams by: how many may be open, each one's window, and
//! a connection's send window, which always leaves the protocol's own streams their
//! share.

/// How many tunnel streams a child accepts at once on one link: QUIC's own limit on
/// the bidirectional streams the parent may open, whatever the parent's configured cap
/// ([`crate::tunnel::TunnelSlots`], at most this). With [`STREAM_WINDOW`] it bounds the tunnel bytes
/// in flight on a link (see [`super::quic_config::transport_config`]).
pub const MAX_TUNNEL_STREAMS: u32 = 32;

/// Each QUIC stream's receive window (quinn's default, set here so the bound below is
/// explicit): the most one tunnel stream can have sent and not yet read by its peer.
pub const STREAM_WINDOW: u32 = 1_250_000;

/// The send window the protocol's own streams (control, bulk, reports) always keep:
/// quinn's default send window. Tunnel streams can fill at most
/// `MAX_TUNNEL_STREAMS * STREAM_WINDOW` of a connection's send window, which is this
/// much larger, so a stalled `logs -f` never blocks a heartbeat, a delta or a report
/// from being written.
pub const PROTOCOL_SEND_WINDOW: u64 = 8 * STREAM_WINDOW as u64;

/// The connection's send window (bytes written and not yet acknowledged, all streams
/// together): the protocol's share plus every tunnel's whole stream window.
pub const SEND_WINDOW: u64 =
    PROTOCOL_SEND_WINDOW + MAX_TUNNEL_STREAMS as u64 * STREAM_WINDOW as u64;
