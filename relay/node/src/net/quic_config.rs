//! QUIC's tuning of node links: keep-alives, the idle timeout, stream limits and
//! windows (the debug tunnels' from [`super::windows`]), and path MTU discovery.

use std::sync::Arc;
use std::time::Duration;

use quinn::VarInt;

use super::windows::{MAX_TUNNEL_STREAMS, SEND_WINDOW, STREAM_WINDOW};

/// Transport tuning shared by both ends: keep-alives shorter than typical load-balancer
/// idle timeouts, and an idle timeout that notices dead peers in seconds. This is the
/// child's (the dialling side's), which accepts the debug tunnels its parent opens.
pub fn transport_config() -> Arc<quinn::TransportConfig> {
    Arc::new(tuned(MAX_TUNNEL_STREAMS))
}

/// The parent's (listening side's) tuning: as [`transport_config`], but a child may open
/// no bidirectional stream (tunnels only go down the tree).
pub fn parent_transport_config() -> Arc<quinn::TransportConfig> {
    Arc::new(tuned(0))
}

/// The parent's tuning for a connection whose path MTU is known from the last one
/// from the same address (see [`super::listener`]): it starts at `mtu`, and the search
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
    t.stream_receive_window(VarInt::from_u32(STREAM_WINDOW));
    t.send_window(SEND_WINDOW);
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
