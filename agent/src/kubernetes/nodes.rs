//! The cluster's node addresses (each Node's `status.addresses` of type InternalIP and
//! ExternalIP), listed every so often, for NodePort Services' endpoints
//! ([`ClusterBackend::node_addresses`](crate::backend::ClusterBackend::node_addresses)).
//! An agent not allowed to list Nodes (its RBAC) reports none, and says so once.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use tokio::sync::{Notify, watch};

/// How often the Nodes are listed.
pub const LIST_EVERY: Duration = Duration::from_secs(30);

/// The addresses of `nodes`, InternalIP and ExternalIP, each once, in order.
pub fn addresses_of(nodes: &[Node]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
        .flatten()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
    {
        if !out.contains(&a.address) {
            out.push(a.address.clone());
        }
    }
    out
}

/// Lists the Nodes every `every` until the task is aborted; sends every change and
/// wakes the agent.
pub(super) async fn run(
    client: kube::Client,
    every: Duration,
    addresses: watch::Sender<Vec<String>>,
    wake: Arc<Notify>,
) {
    let api: Api<Node> = Api::all(client);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut told = false;
    loop {
        tick.tick().await;
        let now = match api.list(&ListParams::default()).await {
            Ok(list) => addresses_of(&list.items),
            Err(e) => {
                if !std::mem::replace(&mut told, true) {
                    tracing::warn!(error = %e, "cannot list the cluster's Nodes: NodePort Services are reported without addresses");
                }
                continue;
            }
        };
        if addresses.send_if_modified(|held| std::mem::replace(held, now.clone()) != now) {
            wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    fn node(addresses: &[(&str, &str)]) -> Node {
        Node {
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(t, a)| NodeAddress {
                            type_: (*t).into(),
                            address: (*a).into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn internal_and_external_ips_count_host_names_do_not() {
        let nodes = [
            node(&[
                ("InternalIP", "10.0.0.1"),
                ("Hostname", "n1"),
                ("ExternalIP", "203.0.113.1"),
            ]),
            node(&[("InternalIP", "10.0.0.1"), ("InternalIP", "10.0.0.2")]),
        ];
        assert_eq!(
            addresses_of(&nodes),
            ["10.0.0.1", "203.0.113.1", "10.0.0.2"]
        );
    }
}
