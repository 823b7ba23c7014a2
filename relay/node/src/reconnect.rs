//! Reconnecting to the parent for as long as the node runs: exponential backoff with
//! full jitter, the parent's retry-after hints, and the connection's events handed to
//! the driver as [`ParentEvent`]s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use strata_protocol::codec::DEFAULT_MAX_FRAME;
use strata_protocol::wire::{ChildToParent, ParentToChild};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::net::dial::{Connector, DialError, ParentAddress, TransportMode};
use crate::net::link::{Link, TransportKind};
use crate::net::transport::{self, Sender, close_code};

/// What the reconnect loop tells its driver.
#[derive(Debug)]
#[allow(missing_docs)] // `Up` carries the link and its sender
pub enum ParentEvent {
    /// Connected (TLS verified the parent's name), over [`Link::kind`].
    Up {
        conn: Link,
        /// Where to send messages for the parent.
        sender: Sender<ChildToParent>,
    },
    /// A message from the parent.
    Message(ParentToChild),
    /// The connection is gone, and why.
    Down(String),
}

/// Reconnects to the parent for as long as the node runs: exponential backoff with full
/// jitter, reset after a connection that lasted.
/// `retry_after_ms` is the parent's last hint of when to come back (0: none); the next
/// wait is at least that long. `jitter_seed` seeds the jitter (the node's random run id
/// in production, a seeded value in the simulation, so that runs are reproducible).
/// In `auto` mode a link on TCP probes QUIC in the background and moves to it when a
/// handshake completes.
pub async fn keep_connected<T: From<ParentEvent> + Send + 'static>(
    connector: Connector,
    name: String,
    addr: ParentAddress,
    tx: mpsc::Sender<T>,
    retry_after_ms: Arc<AtomicU64>,
    jitter_seed: u64,
) {
    let span = tracing::info_span!("parent", peer = %name, %addr);
    reconnect(connector, name, addr, tx, retry_after_ms, jitter_seed)
        .instrument(span)
        .await;
}

/// What `auto` remembers between attempts: QUIC failed last time, so go straight to
/// TCP and let the background probe find QUIC again.
#[derive(Debug, Default)]
pub struct AutoState {
    quic_failed: bool,
}

/// One connection attempt as the reconnect loop makes it: in `auto`, QUIC for at most
/// [`Connector::quic_timeout`] (unless it failed last time), then TLS over TCP.
pub async fn dial(
    connector: &Connector,
    addr: &ParentAddress,
    name: &str,
    auto: &mut AutoState,
) -> Result<Link, DialError> {
    match connector.mode() {
        TransportMode::Quic => connector.connect_quic(addr, name, None).await,
        TransportMode::Tcp => connector.connect_tcp(addr, name).await,
        TransportMode::Auto => {
            if !auto.quic_failed {
                match connector
                    .connect_quic(addr, name, Some(connector.quic_timeout))
                    .await
                {
                    Ok(link) => return Ok(link),
                    // UDP reaches the parent; it is only busy.
                    Err(e @ DialError::Busy { .. }) => return Err(e),
                    Err(e) => {
                        tracing::info!(error = %e, "QUIC did not connect; falling back to TLS over TCP");
                        auto.quic_failed = true;
                    }
                }
            }
            let tcp = connector.connect_tcp(addr, name).await;
            if tcp.is_err() {
                // Neither works: start with QUIC again next time.
                auto.quic_failed = false;
            }
            tcp
        }
    }
}

/// `auto` on TCP: waits `probe_every`, then tries a QUIC handshake; again and again
/// until one completes.
async fn probe_quic(connector: &Connector, addr: &ParentAddress, name: &str) -> Link {
    loop {
        tokio::time::sleep(connector.probe_every).await;
        match connector
            .connect_quic(addr, name, Some(connector.quic_timeout))
            .await
        {
            Ok(link) => return link,
            Err(e) => tracing::debug!(error = %e, "QUIC probe failed; staying on TCP"),
        }
    }
}

async fn reconnect<T: From<ParentEvent> + Send + 'static>(
    connector: Connector,
    name: String,
    addr: ParentAddress,
    tx: mpsc::Sender<T>,
    retry_after_ms: Arc<AtomicU64>,
    jitter_seed: u64,
) {
    let mut backoff = Backoff::new(jitter_seed);
    let mut auto = AutoState::default();
    let mut switch_to: Option<Link> = None;
    loop {
        let dialed = match switch_to.take() {
            Some(link) => Ok(link),
            None => dial(&connector, &addr, &name, &mut auto).await,
        };
        match dialed {
            Ok(conn) => {
                let started = tokio::time::Instant::now();
                let kind = conn.kind();
                let (sender, mut receiver) = transport::split::<ChildToParent, ParentToChild>(
                    conn.clone(),
                    DEFAULT_MAX_FRAME,
                );
                if tx
                    .send(
                        ParentEvent::Up {
                            conn: conn.clone(),
                            sender,
                        }
                        .into(),
                    )
                    .await
                    .is_err()
                {
                    return;
                }
                let probing = connector.mode() == TransportMode::Auto && kind == TransportKind::Tcp;
                let mut probe = std::pin::pin!(probe_quic(&connector, &addr, &name));
                let why = loop {
                    tokio::select! {
                        biased;
                        // The parent's messages first: a probe can wait.
                        r = receiver.recv() => match r {
                            Ok(msg) => {
                                if tx.send(ParentEvent::Message(msg).into()).await.is_err() {
                                    return;
                                }
                            }
                            Err(e) => break e.to_string(),
                        },
                        quic = &mut probe, if probing => {
                            tracing::info!("QUIC works again: moving the link from TCP to QUIC");
                            conn.close(close_code::REPLACED, b"moving to QUIC");
                            auto.quic_failed = false;
                            switch_to = Some(quic);
                            break "moved to QUIC".to_owned();
                        }
                    }
                };
                if tx.send(ParentEvent::Down(why).into()).await.is_err() {
                    return;
                }
                if switch_to.is_some() {
                    continue;
                }
                if started.elapsed() > Duration::from_secs(10) {
                    backoff.reset();
                }
            }
            Err(e) => tracing::info!(error = %e, "cannot reach the parent"),
        }
        let hint = Duration::from_millis(retry_after_ms.swap(0, Ordering::Relaxed));
        let wait = backoff.next().max(hint);
        if !hint.is_zero() {
            tracing::info!(?wait, "the parent asked to come back later");
        }
        tokio::time::sleep(wait).await;
    }
}

/// Exponential backoff with full jitter: a uniform wait between zero and a cap that
/// doubles from 200 ms to 10 s.
#[derive(Debug)]
struct Backoff {
    cap: Duration,
    seed: u64,
}

impl Backoff {
    fn new(seed: u64) -> Self {
        Backoff {
            cap: Duration::from_millis(200),
            // Mixed so that nearby seeds do not start with nearby waits; never zero
            // (xorshift's fixed point).
            seed: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    /// Back to the shortest cap; the jitter sequence continues.
    fn reset(&mut self) {
        self.cap = Duration::from_millis(200);
    }

    fn next(&mut self) -> Duration {
        // xorshift64: the jitter only has to spread reconnect storms.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let cap_ms = u64::try_from(self.cap.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let wait = Duration::from_millis(self.seed % cap_ms);
        self.cap = (self.cap * 2).min(Duration::from_secs(10));
        wait
    }
}
