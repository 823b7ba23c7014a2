//! The one loop that drives a node, relay or agent: an actor in the shape of
//! iroh-relay's `Actor`. The [`Driver`] owns the clock, the store, the batch not yet
//! durable, the inputs, shutdown and the connection to the parent; the node it drives
//! (a [`Node`]: the relay's core with its child connections, or the agent's core) owns
//! everything else. A [`NodeHandle`] beside it owns the task.
//!
//! One turn of the loop: wait for the first of shutdown, an input, the node's timer or
//! its wake-up; [`Node::process`]; commit the batch durably (retried while the store
//! fails, acknowledging nothing meanwhile); [`Node::transmit`]; deliver what it has for
//! the parent. The middle of it (process, commit, transmit) is [`turn`], which the
//! system tests' `Tree` runs too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use strata_protocol::sync::SessionError;
use strata_protocol::time::Instant;
use strata_protocol::wire::{ChildToParent, LinkPath, ParentToChild};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::clock::Clock;
use crate::net::dial::{Connector, ParentAddress};
use crate::net::link::Link;
use crate::net::transport::{Sender, close_code};
use crate::reconnect::{ParentEvent, keep_connected};
use crate::store::{Batch, Store, commit_off_workers};

/// How long the driver waits before retrying a store commit that failed (a full disk).
pub const COMMIT_RETRY: Duration = Duration::from_millis(200);

/// What the parent is to be sent after a [`Node::transmit`].
#[derive(Debug, Default)]
pub struct ToParent {
    /// Messages, in order.
    pub messages: Vec<ChildToParent>,
    /// The link gave up on the connection: close it, with the parent's hint of when to
    /// come back.
    pub close: Option<(SessionError, Option<Duration>)>,
}

/// A node the [`Driver`] can drive: a pure core plus whatever connections of its own
/// it keeps (a relay's children). Call order, one turn: an input (`handle_*`), then
/// [`Node::process`], the batch made durable by the driver, then [`Node::transmit`].
pub trait Node: Send + 'static {
    /// Inputs of this node other than the parent's (children, queries, joins).
    type Input: Send + 'static;

    /// When [`Node::handle_timeout`] should next run.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Handles the timers that are due.
    fn handle_timeout(&mut self, now: Instant);
    /// Handles one of the node's own inputs (`parent` for those that ask about it).
    fn handle_input(&mut self, now: Instant, input: Self::Input, parent: &ParentConn);
    /// The connection to the parent is up, reaching it by `via` (directly or through
    /// a proxy: the core tells the parent).
    fn parent_connected(&mut self, now: Instant, via: LinkPath);
    /// The link to the parent is up (called before [`Node::parent_connected`]): a node
    /// that serves debug tunnels starts accepting their streams on it.
    fn parent_link(&mut self, _link: &Link) {}
    /// A message from the parent.
    fn parent_message(&mut self, now: Instant, msg: ParentToChild);
    /// The connection to the parent is gone.
    fn parent_gone(&mut self);
    /// Handles every pending event; returns what must be durable before
    /// [`Node::transmit`].
    fn process(&mut self, now: Instant) -> Batch;
    /// Sends what the node has for its own connections and returns what the parent is
    /// to be sent. Called only once the last batch is durable.
    fn transmit(&mut self, now: Instant) -> ToParent;
    /// What else wakes the node (an agent's cluster backend with statuses to report).
    fn wake(&self) -> Option<Arc<Notify>> {
        None
    }
    /// The node's certificate was renewed (see [`crate::renew`]): a node that serves
    /// children presents the new one from the next handshake on.
    fn identity_renewed(&mut self, _identity: &crate::net::tls::Identity) {}
    /// The driver is stopping: say goodbye on the node's own connections.
    fn shutdown(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The sans-I/O part of a turn once the inputs are handled, the same for the [`Driver`]
/// and for a test fixture that drives cores in virtual time: `process` the core's
/// pending events into the batch not yet durable (`unsaved`), `commit` that batch, and
/// only once it is durable `transmit`. A failed commit keeps the batch (committed with
/// whatever else changes at the next try) and transmits nothing: nothing is
/// acknowledged before it is durable. The caller retries after [`COMMIT_RETRY`] and
/// delivers what `transmit` returned.
pub fn turn<C: ?Sized, T, E>(
    core: &mut C,
    now: Instant,
    unsaved: &mut Batch,
    process: impl FnOnce(&mut C, Instant) -> Batch,
    commit: impl FnOnce(&Batch) -> Result<(), E>,
    transmit: impl FnOnce(&mut C, Instant) -> T,
) -> Result<T, E> {
    unsaved.merge(process(core, now));
    if !unsaved.is_empty() {
        commit(unsaved)?;
        *unsaved = Batch::default();
    }
    Ok(transmit(core, now))
}

/// What reaches a driver: the parent's connection events, or the node's own inputs.
#[derive(Debug)]
pub enum Input<I> {
    /// From the reconnect loop.
    Parent(ParentEvent),
    /// For the node.
    Node(I),
}

impl<I> From<ParentEvent> for Input<I> {
    fn from(e: ParentEvent) -> Self {
        Input::Parent(e)
    }
}

/// The connection to the parent as the driver holds it.
#[derive(Debug)]
pub struct ParentConn {
    /// The connection and where to send its messages, while connected.
    live: Option<(Link, Sender<ChildToParent>)>,
    /// The parent's last hint of when to come back (milliseconds, 0: none), read by the
    /// reconnect loop before its next attempt.
    retry_after: Arc<AtomicU64>,
}

impl ParentConn {
    /// The live connection, if any (QUIC or TLS/TCP: [`Link::kind`]).
    pub fn connection(&self) -> Option<&Link> {
        self.live.as_ref().map(|(c, _)| c)
    }

    /// Where messages for the parent go, while connected.
    pub fn sender(&self) -> Option<&Sender<ChildToParent>> {
        self.live.as_ref().map(|(_, s)| s)
    }

    /// Sends what the node has for the parent, and closes the connection when the
    /// link gave up on it, leaving the parent's hint for the reconnect loop. Returns
    /// whether it closed it (the node must then be told the parent is gone).
    fn deliver(&mut self, out: ToParent) -> bool {
        if let Some((_, sender)) = &self.live {
            for msg in out.messages {
                if sender.send(msg).is_err() {
                    break;
                }
            }
        }
        let Some((error, hint)) = out.close else {
            return false;
        };
        let Some((conn, _)) = self.live.take() else {
            return false;
        };
        if let Some(hint) = hint {
            let ms = u64::try_from(hint.as_millis()).unwrap_or(u64::MAX);
            self.retry_after.store(ms, Ordering::Relaxed);
        }
        tracing::warn!(code = ?error.code, reason = %error.reason, "closing the link to the parent");
        conn.close(close_code::PROTOCOL, error.reason.as_bytes());
        true
    }
}

/// Where a node's parent is and how to reach it.
#[derive(Debug)]
pub struct ParentAddr {
    /// The parent's node name (checked against its certificate, whatever the route).
    pub name: String,
    /// The parent's address or name (resolved at every connect).
    pub addr: ParentAddress,
    /// How to dial: transport mode, QUIC endpoint, TLS for TCP, proxy.
    pub connector: Connector,
    /// Seeds the reconnect jitter (the run id; a seeded value in the simulation).
    pub jitter_seed: u64,
}

/// A running driver: a way to send it inputs, stop it, and wait for it.
#[derive(Debug)]
pub struct NodeHandle<I> {
    inputs: mpsc::Sender<Input<I>>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl<I: Send + 'static> NodeHandle<I> {
    /// Where the node's own inputs go.
    pub fn inputs(&self) -> mpsc::Sender<Input<I>> {
        self.inputs.clone()
    }

    /// Sends `make(reply)` to the node and waits for its answer; `None` once the node
    /// has stopped.
    pub async fn ask<T: Send + 'static>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> I,
    ) -> Option<T> {
        ask(&self.inputs, make).await
    }

    /// Stops the node: it says goodbye on its connections, its tasks end.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        join(self.task).await;
    }

    /// Waits until the node stops by itself.
    pub async fn wait(&mut self) {
        join(&mut self.task).await;
    }
}

/// Sends `make(reply)` on `inputs` and waits for the answer; `None` once the node has
/// stopped.
pub async fn ask<I, T>(
    inputs: &mpsc::Sender<Input<I>>,
    make: impl FnOnce(oneshot::Sender<T>) -> I,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    inputs.send(Input::Node(make(tx))).await.ok()?;
    rx.await.ok()
}

async fn join(task: impl Future<Output = Result<(), tokio::task::JoinError>>) {
    if let Err(e) = task.await
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The actor: owns the clock, the store, the unsaved batch, the inputs, shutdown and
/// the parent connection, and drives a [`Node`].
pub struct Driver<N: Node> {
    node: N,
    clock: Clock,
    store: Arc<dyn Store>,
    unsaved: Batch,
    inputs: mpsc::Receiver<Input<N::Input>>,
    shutdown: watch::Receiver<bool>,
    parent: ParentConn,
    tasks: JoinSet<()>,
    /// Renewing the node's certificate through the parent, if it does.
    renewer: Option<crate::renew::Renewer>,
}

impl<N: Node> std::fmt::Debug for Driver<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

/// How many inputs one turn takes at most, so that one commit covers many inputs.
const INPUTS_PER_TURN: usize = 256;

impl<N: Node> Driver<N> {
    /// Spawns the driver of `node` in `span` (and the reconnect loop to `parent`, if
    /// any); `spawn_own` starts the node's own tasks (a relay's accept loop) with a
    /// sender of inputs, owned by the driver.
    pub fn start(
        node: N,
        clock: Clock,
        store: Arc<dyn Store>,
        parent: Option<ParentAddr>,
        capacity: usize,
        span: tracing::Span,
        spawn_own: impl FnOnce(&mut JoinSet<()>, mpsc::Sender<Input<N::Input>>),
    ) -> NodeHandle<N::Input> {
        let (tx, rx) = mpsc::channel(capacity);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let retry_after = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        let _entered = span.enter();
        let renewer = parent.as_ref().and_then(|p| {
            let config = p.connector.renewal()?.clone();
            Some(crate::renew::Renewer::new(
                config,
                p.connector.clone(),
                clock,
            ))
        });
        if let Some(p) = parent {
            tasks.spawn(
                keep_connected(
                    p.connector,
                    p.name,
                    p.addr,
                    tx.clone(),
                    retry_after.clone(),
                    p.jitter_seed,
                )
                .in_current_span(),
            );
        }
        spawn_own(&mut tasks, tx.clone());
        let driver = Driver {
            node,
            clock,
            store,
            unsaved: Batch::default(),
            inputs: rx,
            shutdown: shutdown_rx,
            parent: ParentConn {
                live: None,
                retry_after,
            },
            tasks,
            renewer,
        };
        drop(_entered);
        let task = tokio::spawn(driver.run().instrument(span));
        NodeHandle {
            inputs: tx,
            shutdown: shutdown_tx,
            task,
        }
    }

    /// Drives the node until shutdown, then stops it and its tasks, and logs how it
    /// ended.
    async fn run(mut self) {
        self.run_inner().await;
        self.node.shutdown().await;
        if let Some((conn, _)) = self.parent.live.take() {
            conn.close(close_code::SHUTDOWN, b"node shutting down");
        }
        self.tasks.shutdown().await;
        tracing::info!("stopped");
    }

    async fn run_inner(&mut self) {
        let wake = self.node.wake();
        loop {
            let deadline = self
                .node
                .poll_timeout()
                .map(|t| self.clock.deadline(t))
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                biased;
                // Shutdown first: nothing else matters once it is asked for.
                _ = self.shutdown.changed() => return,
                // Then inputs in arrival order, as many as are waiting.
                Some(input) = self.inputs.recv() => {
                    self.handle(input);
                    for _ in 0..INPUTS_PER_TURN {
                        let Ok(input) = self.inputs.try_recv() else { break };
                        self.handle(input);
                    }
                }
                // Then timers.
                _ = tokio::time::sleep_until(deadline) => {
                    self.node.handle_timeout(self.clock.now());
                }
                // Then certificate renewal, rare and never urgent to the millisecond.
                _ = renewal_due(&self.renewer) => {
                    let request = self.renewer.as_mut().and_then(|r| r.due());
                    if let (Some(msg), Some(sender)) = (request, self.parent.sender()) {
                        let _ = sender.send(msg);
                    }
                }
                // Last, the node's own wake-up (its `process` polls what woke it).
                _ = woken(&wake) => {}
            }
            let now = self.clock.now();
            let store = self.store.as_ref();
            let out = match turn(
                &mut self.node,
                now,
                &mut self.unsaved,
                N::process,
                |batch| commit_off_workers(store, batch),
                N::transmit,
            ) {
                Ok(out) => out,
                Err(e) => {
                    // Nothing is acknowledged until the write succeeds: the batch is
                    // kept, the node keeps serving from memory, and the write is
                    // retried shortly (with whatever else changed meanwhile).
                    tracing::error!(error = %e, "store commit failed; acknowledgements held back");
                    tokio::time::sleep(COMMIT_RETRY).await;
                    continue;
                }
            };
            if self.parent.deliver(out) {
                self.node.parent_gone();
            }
        }
    }

    fn handle(&mut self, input: Input<N::Input>) {
        let now = self.clock.now();
        match input {
            Input::Parent(ParentEvent::Up { conn, sender }) => {
                tracing::info!(parent = %conn.remote_address(), transport = %conn.kind(), "connected to parent");
                self.node.parent_link(&conn);
                let via = conn.via();
                self.parent.live = Some((conn, sender));
                self.node.parent_connected(now, via);
            }
            Input::Parent(ParentEvent::Message(ParentToChild::Renewal(reply))) => {
                // The renewer's own answer: the core never sees it.
                if let Some(identity) = self.renewer.as_mut().and_then(|r| r.answer(reply)) {
                    self.node.identity_renewed(&identity);
                }
            }
            Input::Parent(ParentEvent::Message(msg)) => {
                if let (ParentToChild::Welcome(w), Some(r)) = (&msg, self.renewer.as_mut()) {
                    r.session(w.version);
                }
                self.node.parent_message(now, msg);
            }
            Input::Parent(ParentEvent::Down(why)) => {
                if let Some(r) = self.renewer.as_mut() {
                    r.session(0);
                }
                if self.parent.live.take().is_some() {
                    tracing::warn!(%why, "lost the parent");
                }
                self.node.parent_gone();
            }
            Input::Node(input) => self.node.handle_input(now, input, &self.parent),
        }
    }
}

async fn renewal_due(renewer: &Option<crate::renew::Renewer>) {
    match renewer {
        Some(r) => tokio::time::sleep_until(r.next()).await,
        None => std::future::pending().await,
    }
}

async fn woken(wake: &Option<Arc<Notify>>) {
    match wake {
        Some(w) => w.notified().await,
        None => std::future::pending().await,
    }
}
