//! A cloneable way to ask a running node things: the API, DNS and the node's own
//! tasks (volume copies) hold one. Apart from the runtime that starts the node, so
//! that what the runtime starts can hold a client without importing the runtime.

use strata_node::driver::{self, Input};
use strata_node::store::ReplicaEvent;
use tokio::sync::{mpsc, watch};

use super::core::NodeCore;
use super::input::{LinkStats, RelayInput};

/// A cloneable way to ask a running node things (the API uses it).
#[derive(Debug, Clone)]
pub struct NodeClient {
    inputs: mpsc::Sender<Input<RelayInput>>,
    head: watch::Receiver<u64>,
}

impl NodeClient {
    /// The client of a node whose inputs are `inputs` and whose committed head is
    /// `head` ([`super::runtime::NodeHandle::client`] makes it).
    pub(crate) fn new(inputs: mpsc::Sender<Input<RelayInput>>, head: watch::Receiver<u64>) -> Self {
        NodeClient { inputs, head }
    }

    /// Runs `f` on the core's state inside the core task and returns its result;
    /// `None` once the node has stopped.
    pub async fn query<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut NodeCore) -> T + Send + 'static,
    ) -> Option<T> {
        driver::ask(&self.inputs, |reply| {
            RelayInput::Query(Box::new(move |core| {
                let _ = reply.send(f(core));
            }))
        })
        .await
    }

    /// The node's input queue (for the node's own tasks: volume copies).
    pub(crate) fn inputs(&self) -> &mpsc::Sender<Input<RelayInput>> {
        &self.inputs
    }

    /// The log's head as last committed, marked changed at every commit that moves it:
    /// what a Kubernetes watch waits on instead of asking the node on a timer.
    pub fn head_changes(&self) -> watch::Receiver<u64> {
        let mut head = self.head.clone();
        head.mark_unchanged();
        head
    }

    /// Hands the core what other root replicas committed (see
    /// [`strata_node::store::EtcdStore::replicate`]); `false` once the node has stopped.
    pub async fn replicated(&self, event: ReplicaEvent) -> bool {
        self.inputs
            .send(Input::Node(RelayInput::Replica(event)))
            .await
            .is_ok()
    }

    /// Bytes on the node's live connections.
    pub async fn link_stats(&self) -> Option<LinkStats> {
        driver::ask(&self.inputs, RelayInput::LinkStats).await
    }

    /// Where a debug tunnel to `cluster` goes from this node, with its permit under
    /// the link's cap, or why it cannot go.
    pub async fn tunnel_route(
        &self,
        cluster: &str,
    ) -> Result<crate::tier::tunnel::TunnelRoute, crate::tier::tunnel::TunnelRefusal> {
        crate::tier::tunnel::ask_route(&self.inputs, cluster).await
    }
}
