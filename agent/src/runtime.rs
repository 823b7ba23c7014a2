//! An agent: its [`AgentCore`] driven by the node layer's [`Driver`], which owns the
//! clock, the store, the inputs and the connection to the parent.

use std::sync::Arc;

use strata_node::clock::Clock;
use strata_node::dial::{Connector, ParentAddress};
use strata_node::driver::{self, Driver, Node, ParentAddr, ParentConn, ToParent};
use strata_node::link::Link;
use strata_node::store::{Batch, Store, StoreError};
use strata_node::tunnel;
use strata_protocol::model::Cluster;
use strata_protocol::time::Instant;
use strata_protocol::volume::StreamOpen;
use strata_protocol::wire::{
    LinkPath, MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, ParentToChild, ProtocolVersion,
};
use tokio::sync::{Notify, oneshot, watch};
use tracing::Instrument;

use crate::backend::ClusterBackend;
use crate::core::{AgentBootOptions, AgentCore};
use crate::tunnel::TunnelTarget;

/// What an agent needs to run.
#[allow(missing_docs)] // backend, clock and run are what they say
pub struct AgentOptions {
    /// The cluster this agent manages (name, labels, properties).
    pub cluster: Cluster,
    /// The parent's name and address (or a name resolved at every connect).
    pub parent: (String, ParentAddress),
    /// Durable desired state.
    pub store: Arc<dyn Store>,
    /// How the parent is reached (a QUIC endpoint converts into a QUIC-only one).
    pub connector: Connector,
    pub backend: Box<dyn ClusterBackend + Send>,
    pub clock: Clock,
    pub run: u64,
    /// What answers the debug tunnel's requests for this cluster (`None`: the agent
    /// refuses them with 503).
    pub tunnel: Option<TunnelTarget>,
}

/// A question about the agent's core (the simulation, tests).
pub struct Query(Box<dyn FnOnce(&mut AgentCore) + Send>);

impl std::fmt::Debug for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Query")
    }
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    inner: driver::NodeHandle<Query>,
}

/// A cloneable way to ask a running agent questions (the metrics listener).
#[derive(Debug, Clone)]
pub struct AgentClient {
    inputs: tokio::sync::mpsc::Sender<driver::Input<Query>>,
}

impl AgentClient {
    /// Runs `f` on the agent's state inside its task; `None` once it has stopped.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut AgentCore) -> T + Send + 'static,
    ) -> Option<T> {
        driver::ask(&self.inputs, |reply: oneshot::Sender<T>| {
            Query(Box::new(move |core| {
                let _ = reply.send(f(core));
            }))
        })
        .await
    }
}

impl AgentHandle {
    /// A client for questions from other tasks.
    pub fn client(&self) -> AgentClient {
        AgentClient {
            inputs: self.inner.inputs(),
        }
    }

    /// Runs `f` on the agent's state inside its task.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut AgentCore) -> T + Send + 'static,
    ) -> Option<T> {
        self.inner
            .ask(|reply: oneshot::Sender<T>| {
                Query(Box::new(move |core| {
                    let _ = reply.send(f(core));
                }))
            })
            .await
    }

    /// Stops the agent.
    pub async fn shutdown(self) {
        self.inner.shutdown().await;
    }

    /// Waits until the agent stops.
    pub async fn wait(mut self) {
        self.inner.wait().await;
    }
}

/// The agent as the driver sees it: its core, and the clock that stamps its reports.
struct Agent {
    core: AgentCore,
    clock: Clock,
    /// The current link to the parent, for the task serving its tunnel streams.
    parent_links: watch::Sender<Option<Link>>,
}

impl Node for Agent {
    type Input = Query;

    fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
    }

    fn handle_input(&mut self, _now: Instant, Query(q): Query, _parent: &ParentConn) {
        q(&mut self.core);
    }

    fn parent_connected(&mut self, now: Instant, via: LinkPath) {
        self.core.parent_connected(now, via);
    }

    fn parent_link(&mut self, link: &Link) {
        self.parent_links.send_replace(Some(link.clone()));
    }

    fn parent_message(&mut self, now: Instant, msg: ParentToChild) {
        self.core.parent_message(now, msg);
    }

    fn parent_gone(&mut self) {
        if self.core.connected() {
            tracing::info!("keeping the cluster in its last desired state meanwhile");
        }
        self.core.parent_gone();
    }

    fn process(&mut self, now: Instant) -> Batch {
        self.core.process(now, self.clock.wall())
    }

    fn transmit(&mut self, now: Instant) -> ToParent {
        self.core.transmit(now)
    }

    fn wake(&self) -> Option<Arc<Notify>> {
        self.core.backend_wake()
    }
}

/// Starts an agent from its store.
pub fn start(parts: AgentOptions) -> Result<AgentHandle, StoreError> {
    start_speaking(parts, (MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION))
}

/// [`start`], speaking only the protocol versions `versions` (lowest, highest) to its
/// parent (see `strata_node::config::PROTOCOL_VERSIONS_ENV`).
pub fn start_speaking(
    parts: AgentOptions,
    versions: (ProtocolVersion, ProtocolVersion),
) -> Result<AgentHandle, StoreError> {
    let stored = parts.store.load()?;
    let now = parts.clock.now();
    let span = tracing::info_span!("agent", cluster = %parts.cluster.name);
    let (cluster, target) = (parts.cluster.name.clone(), parts.tunnel);
    let core = AgentCore::restore(
        now,
        parts.clock.wall(),
        stored,
        AgentBootOptions {
            cluster: parts.cluster,
            backend: parts.backend,
            run: parts.run,
            versions,
        },
    );
    let (name, addr) = parts.parent;
    let (parent_links, links) = watch::channel(None);
    let inner = Driver::start(
        Agent {
            core,
            clock: parts.clock,
            parent_links,
        },
        parts.clock,
        parts.store,
        Some(ParentAddr {
            name,
            addr,
            connector: parts.connector,
            jitter_seed: parts.run,
        }),
        1024,
        span,
        move |tasks, _| {
            tasks.spawn(
                tunnel::serve_from_parent(links, move |open, stream| {
                    let (cluster, target) = (cluster.clone(), target.clone());
                    async move {
                        let open = match open {
                            StreamOpen::Tunnel(open) => open,
                            StreamOpen::Volume(open, ask) => {
                                let volumes = match &target {
                                    Some(crate::tunnel::TunnelTarget::Simulated(api)) => {
                                        api.volumes().cloned()
                                    }
                                    Some(crate::tunnel::TunnelTarget::Kube(_, Some(kube)))
                                        if open.cluster == cluster =>
                                    {
                                        return kube.serve(open, ask, stream).await;
                                    }
                                    _ => None,
                                };
                                return crate::volume::serve(cluster, volumes, open, ask, stream)
                                    .await;
                            }
                        };
                        match target {
                            Some(t) => crate::tunnel::serve(cluster, t, open, stream).await,
                            None => {
                                let why = "this agent serves no debug tunnels";
                                tunnel::refuse(stream, 503, "ServiceUnavailable", why).await;
                            }
                        }
                    }
                })
                .in_current_span(),
            );
        },
    );
    Ok(AgentHandle { inner })
}
