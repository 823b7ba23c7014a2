//! Reconnecting to the parent for as long as the node runs: exponential backoff with
//! full jitter, the parent's retry-after hints, and the connection's events handed to
//! the driver as [`ParentEvent`]s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quinn::{Connection, Endpoint};
use strata_protocol::codec::DEFAULT_MAX_FRAME;
use strata_protocol::wire::{ChildToParent, ParentToChild};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::transport::{self, Sender};

/// What the reconnect loop tells its driver.
#[derive(Debug)]
#[allow(missing_docs)] // `Up` carries the connection and its sender
pub enum ParentEvent {
    /// Connected (TLS verified the parent's name).
    Up {
        conn: Connection,
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
pub async fn keep_connected<T: From<ParentEvent> + Send + 'static>(
    connector: Endpoint,
    name: String,
    addr: SocketAddr,
    tx: mpsc::Sender<T>,
    retry_after_ms: Arc<AtomicU64>,
    jitter_seed: u64,
) {
    let span = tracing::info_span!("parent", peer = %name, %addr);
    reconnect(connector, name, addr, tx, retry_after_ms, jitter_seed)
        .instrument(span)
        .await;
}

async fn reconnect<T: From<ParentEvent> + Send + 'static>(
    connector: Endpoint,
    name: String,
    addr: SocketAddr,
    tx: mpsc::Sender<T>,
    retry_after_ms: Arc<AtomicU64>,
    jitter_seed: u64,
) {
    let mut backoff = Backoff::new(jitter_seed);
    loop {
        match transport::connect(&connector, addr, &name).await {
            Ok(conn) => {
                let started = tokio::time::Instant::now();
                let (sender, mut receiver) = transport::split::<ChildToParent, ParentToChild>(
                    conn.clone(),
                    DEFAULT_MAX_FRAME,
                );
                if tx
                    .send(ParentEvent::Up { conn, sender }.into())
                    .await
                    .is_err()
                {
                    return;
                }
                let why = loop {
                    match receiver.recv().await {
                        Ok(msg) => {
                            if tx.send(ParentEvent::Message(msg).into()).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => break e.to_string(),
                    }
                };
                if tx.send(ParentEvent::Down(why).into()).await.is_err() {
                    return;
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
