//! Where a Service or Ingress can be reached, read from its manifest and `.status` as
//! the cluster holds them: what the agent reports as
//! [`ReportKey::Endpoints`](strata_protocol::wire::ReportKey::Endpoints).
//!
//! * A Service of type LoadBalancer: each `status.loadBalancer.ingress[]` address (`ip`,
//!   else `hostname`) with `spec.ports[].port`.
//! * A Service of type NodePort: each node address the backend knows with
//!   `spec.ports[].nodePort`.
//! * An Ingress: each `spec.rules[].host` and each `status.loadBalancer.ingress[]`
//!   address, on port 80 (and 443 when it has `spec.tls`).
//! * Anything else (a ClusterIP Service, an ExternalName): nothing to report.

use serde_json::Value;
use strata_protocol::model::ObjectKey;
use strata_protocol::wire::{Endpoint, EndpointKind, EndpointPort};

/// Whether `key` is a kind that may have endpoints (a core Service, an Ingress).
pub fn may_have_endpoints(key: &ObjectKey) -> bool {
    (key.group.is_empty() && key.kind == "Service")
        || (key.group == "networking.k8s.io" && key.kind == "Ingress")
}

/// The endpoints of a Service or Ingress (`manifest` as applied, `status` its
/// `.status`, `nodes` the cluster's node addresses); `None` for a kind or type that has
/// none.
pub fn endpoints_of(
    key: &ObjectKey,
    manifest: &Value,
    status: &Value,
    nodes: &[String],
) -> Option<Vec<Endpoint>> {
    if !may_have_endpoints(key) {
        return None;
    }
    if key.kind == "Ingress" {
        return Some(ingress(manifest, status));
    }
    let kind = manifest
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let ports = |field: &str| -> Vec<EndpointPort> {
        manifest
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some(EndpointPort {
                    name: str_of(p, "name"),
                    port: u16::try_from(p.get(field)?.as_u64()?).ok()?,
                    protocol: match str_of(p, "protocol") {
                        s if s.is_empty() => "TCP".to_owned(),
                        s => s,
                    },
                })
            })
            .collect()
    };
    match kind {
        "LoadBalancer" => {
            let ports = ports("port");
            Some(
                lb_addresses(status)
                    .into_iter()
                    .map(|address| Endpoint {
                        kind: EndpointKind::LoadBalancer,
                        address,
                        ports: ports.clone(),
                    })
                    .collect(),
            )
        }
        "NodePort" => {
            let ports = ports("nodePort");
            Some(
                nodes
                    .iter()
                    .map(|address| Endpoint {
                        kind: EndpointKind::NodePort,
                        address: address.clone(),
                        ports: ports.clone(),
                    })
                    .collect(),
            )
        }
        _ => None,
    }
}

fn ingress(manifest: &Value, status: &Value) -> Vec<Endpoint> {
    let mut ports = vec![EndpointPort {
        name: "http".into(),
        port: 80,
        protocol: "TCP".into(),
    }];
    if manifest
        .pointer("/spec/tls")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
    {
        ports.push(EndpointPort {
            name: "https".into(),
            port: 443,
            protocol: "TCP".into(),
        });
    }
    let hosts = manifest
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| str_of(r, "host"))
        .filter(|h| !h.is_empty());
    let mut out: Vec<Endpoint> = Vec::new();
    for (kind, address) in hosts.map(|h| (EndpointKind::IngressHost, h)).chain(
        lb_addresses(status)
            .into_iter()
            .map(|a| (EndpointKind::IngressAddress, a)),
    ) {
        if !out.iter().any(|e| e.address == address && e.kind == kind) {
            out.push(Endpoint {
                kind,
                address,
                ports: ports.clone(),
            });
        }
    }
    out
}

/// `status.loadBalancer.ingress[]`: each `ip`, else its `hostname`.
fn lb_addresses(status: &Value) -> Vec<String> {
    status
        .pointer("/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|i| match str_of(i, "ip") {
            ip if !ip.is_empty() => ip,
            _ => str_of(i, "hostname"),
        })
        .filter(|a| !a.is_empty())
        .collect()
}

fn str_of(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use strata_protocol::model::{ObjectKeyParts, Space};

    fn key(group: &str, kind: &str) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
            space: Space("default".into()),
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        })
    }

    #[test]
    fn a_load_balancer_service_is_reached_at_its_ingress_addresses_and_ports() {
        let svc = json!({ "spec": { "type": "LoadBalancer", "ports": [
            { "name": "http", "port": 80, "nodePort": 30080 } ] } });
        let status = json!({ "loadBalancer": { "ingress": [
            { "ip": "192.0.2.7" }, { "hostname": "lb.example.com" } ] } });
        let e = endpoints_of(&key("", "Service"), &svc, &status, &[]).unwrap();
        assert_eq!(
            e.iter().map(|e| e.address.as_str()).collect::<Vec<_>>(),
            ["192.0.2.7", "lb.example.com"]
        );
        assert_eq!(e[0].ports[0].port, 80);
        assert_eq!(e[0].ports[0].protocol, "TCP");
        // Not yet given an address: no endpoints, but a Service that has some.
        assert_eq!(
            endpoints_of(&key("", "Service"), &svc, &json!({}), &[]),
            Some(vec![])
        );
    }

    #[test]
    fn node_ports_are_reached_on_every_node_and_cluster_ips_not_at_all() {
        let svc = json!({ "spec": { "type": "NodePort", "ports": [
            { "port": 80, "nodePort": 30080, "protocol": "UDP" } ] } });
        let nodes = ["10.0.0.1".to_owned(), "10.0.0.2".to_owned()];
        let e = endpoints_of(&key("", "Service"), &svc, &json!({}), &nodes).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].kind, EndpointKind::NodePort);
        assert_eq!(
            (e[1].ports[0].port, e[1].ports[0].protocol.as_str()),
            (30080, "UDP")
        );
        let plain = json!({ "spec": { "ports": [ { "port": 80 } ] } });
        assert_eq!(
            endpoints_of(&key("", "Service"), &plain, &json!({}), &nodes),
            None
        );
        assert_eq!(
            endpoints_of(&key("apps", "Deployment"), &svc, &json!({}), &nodes),
            None
        );
    }

    #[test]
    fn an_ingress_is_reached_by_its_hosts_and_its_balancer() {
        let ing =
            json!({ "spec": { "tls": [ {} ], "rules": [ { "host": "shop.example.com" }, {} ] } });
        let status = json!({ "loadBalancer": { "ingress": [ { "ip": "198.51.100.1" } ] } });
        let e = endpoints_of(&key("networking.k8s.io", "Ingress"), &ing, &status, &[]).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].kind, e[0].address.as_str()),
            (EndpointKind::IngressHost, "shop.example.com")
        );
        assert_eq!(e[1].kind, EndpointKind::IngressAddress);
        assert_eq!(e[0].ports.len(), 2, "https too with spec.tls");
    }
}
