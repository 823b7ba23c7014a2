//! Where an app can be reached on one cluster ([`ServiceEndpoints`]): what an agent
//! reports for each Service and Ingress it holds, forwarded whole up the tiers from
//! protocol version 6 on ([`ENDPOINTS_VERSION`](super::ENDPOINTS_VERSION)).

use serde::{Deserialize, Serialize};

/// The reachable addresses of one Service or Ingress on one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceEndpoints {
    /// Whether the app is Available there: the object itself and every other object
    /// the agent holds in its namespace report `Available`.
    pub available: bool,
    /// The addresses, in the order the cluster gave them.
    pub addresses: Vec<Endpoint>,
}

/// One address an app answers on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// How the address was found.
    pub kind: EndpointKind,
    /// An IP address (`192.0.2.7`, `2001:db8::1`) or a host name.
    pub address: String,
    /// The ports it serves on, in the object's order.
    pub ports: Vec<EndpointPort>,
}

/// How an [`Endpoint`] was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EndpointKind {
    /// A Service of type LoadBalancer: `status.loadBalancer.ingress[]`.
    LoadBalancer,
    /// A Service of type NodePort: a node's InternalIP or ExternalIP, with the node ports.
    NodePort,
    /// An Ingress: one of its hosts (`spec.rules[].host`).
    IngressHost,
    /// An Ingress: its load balancer's address (`status.loadBalancer.ingress[]`).
    IngressAddress,
}

impl EndpointKind {
    /// The kind's name in the API's JSON.
    pub fn name(self) -> &'static str {
        match self {
            EndpointKind::LoadBalancer => "LoadBalancer",
            EndpointKind::NodePort => "NodePort",
            EndpointKind::IngressHost => "IngressHost",
            EndpointKind::IngressAddress => "IngressAddress",
        }
    }
}

/// A port of an [`Endpoint`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointPort {
    /// The port's name in the object (may be empty).
    pub name: String,
    /// The port number clients connect to (the node port for NodePort).
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}
