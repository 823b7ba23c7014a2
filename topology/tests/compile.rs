//! Compiling topologies: every error at once, with exact messages; warnings apart.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::path::Path;

use strata_topology::{Addr, LoadError, parse};

fn errors(text: &str) -> Vec<String> {
    match parse(text, Path::new("t.yaml")) {
        Err(LoadError::Invalid { errors, .. }) => errors,
        Err(e) => panic!("not a compile error: {e}"),
        Ok(_) => panic!("accepted:\n{text}"),
    }
}

const HEAD: &str = "apiVersion: strata.dev/v1alpha1\nkind: Topology\nmetadata: { name: t }\n";

#[test]
fn a_good_topology_compiles_in_tree_order() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center, listen: 127.0.0.1:7443, api: 127.0.0.1:8443 }}
  relays:
    - {{ name: eu-1, parent: eu, listen: 127.0.0.1:7445 }}
    - {{ name: eu, parent: center, labels: {{ region: eu }} }}
  clusters:
    - {{ name: c1, parent: eu-1, labels: {{ role: pos, gpu: \"false\" }}, simulated: {{}} }}
  joining:
    - {{ parent: eu, tokens: 5 }}
"
    );
    let c = parse(&text, Path::new("t.yaml")).unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let t = c.topology;
    let names: Vec<&str> = t.relays.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["center", "eu", "eu-1"],
        "parents come before children"
    );
    assert_eq!(t.root().relays, ["eu"]);
    assert_eq!(t.relay("eu").unwrap().join_tokens, 5);
    assert_eq!(t.relay("eu-1").unwrap().clusters, ["c1"]);
    assert_eq!(
        t.relay("eu").unwrap().listen,
        Addr::Auto([127, 0, 0, 1].into()),
        "an omitted listen address is assigned later"
    );
}

#[test]
fn every_error_is_reported_at_once_naming_node_and_fault() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center, listen: 127.0.0.1:7443, api: 127.0.0.1:8443 }}
  relays:
    - {{ name: eu, parent: center, listen: 127.0.0.1:7444 }}
    - {{ name: eu-1, parent: us-0 }}
    - {{ name: a, parent: b }}
    - {{ name: b, parent: a }}
    - {{ name: us, parent: center, listen: 127.0.0.1:7444 }}
    - {{ name: eu, parent: center }}
    - {{ name: loner }}
    - {{ name: Bad_Name, parent: center, labels: {{ \"Bad Key\": x }} }}
    - {{ name: under-cluster, parent: c1 }}
  clusters:
    - {{ name: c1, parent: eu }}
    - {{ name: c2, parent: c1 }}
  joining:
    - {{ parent: nowhere, tokens: 0 }}
"
    );
    assert_eq!(
        errors(&text),
        [
            "relay \"Bad_Name\": name: \"Bad_Name\" is not a valid node name (1-63 characters of a-z, 0-9 and '-', not starting or ending with '-')",
            "name \"eu\" is used by 2 nodes (relay, relay)",
            "two roots: relay \"loner\" has no parent, and \"center\" is the root",
            "relay \"eu-1\": parent \"us-0\" is not defined",
            "relay \"under-cluster\": parent \"c1\" is a cluster; only relays have children",
            "cluster \"c2\": parent \"c1\" is a cluster; only relays have children",
            "joining[0]: parent \"nowhere\" is not defined",
            "joining[0]: tokens must be at least 1",
            "cycle: a -> b -> a",
            "relay \"Bad_Name\": labels: key \"Bad Key\": may contain only alphanumerics, '-', '_' and '.'",
            "address 127.0.0.1:7444 is claimed 2 times: relay \"eu\" (listen), relay \"us\" (listen)",
        ]
    );
}

#[test]
fn no_root_is_an_error() {
    let text = format!("{HEAD}spec:\n  relays:\n    - {{ name: eu }}\n");
    assert_eq!(
        errors(&text),
        ["no root: spec.root is missing", "relay \"eu\": no parent"]
    );
}

#[test]
fn longer_cycles_are_named_once_from_their_first_relay() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center }}
  relays:
    - {{ name: x, parent: z }}
    - {{ name: feeder, parent: y }}
    - {{ name: y, parent: x }}
    - {{ name: z, parent: y }}
    - {{ name: self, parent: self }}
"
    );
    assert_eq!(
        errors(&text),
        ["cycle: x -> z -> y -> x", "cycle: self -> self"]
    );
}

#[test]
fn addresses_are_checked() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center, listen: 0.0.0.0:7443, address: 10.0.0.1:7443, api: nowhere, metrics: 127.0.0.1:9000 }}
  relays:
    - {{ name: eu, parent: center, listen: 0.0.0.0:0, metrics: 127.0.0.1:9000 }}
    - {{ name: us, parent: center, listen: 0.0.0.0:7443, address: 0.0.0.0:7443 }}
    - {{ name: us-1, parent: center, listen: 10.0.0.1:7443 }}
    - {{ name: us-2, parent: center, listen: 0.0.0.0:7443, address: 10.0.0.2:7443 }}
  clusters:
    - {{ name: c1, parent: us }}
    - {{ name: c2, parent: us-1 }}
    - {{ name: c3, parent: us-2 }}
"
    );
    assert_eq!(
        errors(&text),
        [
            "root \"center\": api: \"nowhere\" is not an address of the form IP:PORT",
            "relay \"eu\": listen: \"0.0.0.0:0\": an assigned port needs a specific IP (e.g. 127.0.0.1:0)",
            "relay \"us\": address: \"0.0.0.0:7443\" must be a specific IP and port children can dial",
            "address 10.0.0.1:7443 is claimed 2 times: root \"center\" (listen), relay \"us-1\" (listen)",
            "address 127.0.0.1:9000 is claimed 2 times: root \"center\" (metrics), relay \"eu\" (metrics)",
            "relay \"us\": listen 0.0.0.0:7443 is a wildcard; give the address its children dial (address: IP:PORT)",
        ]
    );
}

#[test]
fn wrong_header_and_unknown_fields_are_refused() {
    let text =
        "apiVersion: v1\nkind: Topo\nmetadata: { name: t }\nspec: { root: { name: center } }\n";
    assert_eq!(
        errors(text),
        [
            "apiVersion: expected \"strata.dev/v1alpha1\", found \"v1\"",
            "kind: expected \"Topology\", found \"Topo\"",
        ]
    );
    let text = format!("{HEAD}spec: {{ root: {{ name: center, colour: blue }} }}\n");
    match parse(&text, Path::new("t.yaml")) {
        Err(LoadError::Parse { detail, .. }) => assert!(detail.contains("colour"), "{detail}"),
        other => panic!("accepted an unknown field: {other:?}"),
    }
}

#[test]
fn relays_without_children_are_warnings_not_errors() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center }}
  relays:
    - {{ name: eu, parent: center }}
    - {{ name: us, parent: center }}
  joining:
    - {{ parent: us, tokens: 3 }}
"
    );
    let c = parse(&text, Path::new("t.yaml")).unwrap();
    assert_eq!(
        c.warnings,
        ["relay \"eu\": has no children (no relay, cluster or joining entry names it as parent)"]
    );
}

#[test]
fn names_that_are_paths_are_refused_and_names_of_generated_files_are_not() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center }}
  relays:
    - {{ name: ../up, parent: center }}
    - {{ name: a/b, parent: center }}
    - {{ name: .., parent: center }}
    - {{ name: eu.west, parent: center }}
"
    );
    let why = "is not a valid node name (1-63 characters of a-z, 0-9 and '-', not starting or ending with '-')";
    let refused: Vec<String> = errors(&text)
        .into_iter()
        .filter(|e| e.contains("name:"))
        .collect();
    assert_eq!(
        refused,
        ["../up", "a/b", "..", "eu.west"].map(|n| format!("relay {n:?}: name: {n:?} {why}"))
    );

    // A node's files live in its own directory: `ca` (Canada) and the like are fine.
    let text = format!(
        "{HEAD}spec:
  root: {{ name: api }}
  relays:
    - {{ name: ca, parent: api }}
    - {{ name: ports, parent: ca }}
  clusters:
    - {{ name: nodes, parent: ports }}
    - {{ name: join, parent: ca }}
"
    );
    parse(&text, Path::new("t.yaml")).unwrap();
}

#[test]
fn api_names_must_be_dns_names_or_ip_addresses() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center, api: {{ listen: 127.0.0.1:8443, names: [api.example.com, \"10.0.0.1\", \"bad name\", -x.example.com] }} }}
"
    );
    assert_eq!(
        errors(&text),
        [
            "root \"center\": api.names[2]: \"bad name\" is neither an IP address nor a DNS name (labels of 1-63 letters, digits and '-', at most 253 characters)",
            "root \"center\": api.names[3]: \"-x.example.com\" is neither an IP address nor a DNS name (labels of 1-63 letters, digits and '-', at most 253 characters)",
        ]
    );
    let ok =
        format!("{HEAD}spec:\n  root: {{ name: center, api: {{ names: [\"*.example.com\"] }} }}\n");
    let t = parse(&ok, Path::new("t.yaml")).unwrap().topology;
    assert_eq!(t.root().api_names, ["*.example.com"]);
}

#[test]
fn certificate_lifetimes_are_checked() {
    let base = "spec:\n  root: { name: center }\n  clusters:\n    - { name: c1, parent: center, simulated: {} }\n";
    let zero = format!("{HEAD}{base}  certificates: {{ nodeDays: 0, caDays: 0 }}\n");
    assert_eq!(
        errors(&zero),
        [
            "certificates.nodeDays: must be at least 1 (day)",
            "certificates.caDays: must be at least 1 (day)"
        ]
    );
    let long = format!("{HEAD}{base}  certificates: {{ nodeDays: 400, caDays: 300 }}\n");
    let c = parse(&long, Path::new("t.yaml")).unwrap();
    assert_eq!(c.topology.certificates.node_days, 400);
    assert_eq!(
        c.warnings,
        [
            "certificates: nodeDays (400) is longer than caDays (300): node certificates stop verifying when the CA expires"
        ]
    );
    let none = parse(&format!("{HEAD}{base}"), Path::new("t.yaml")).unwrap();
    assert_eq!(
        none.topology.certificates,
        strata_topology::certs::Lifetimes::default()
    );
}

#[test]
fn a_cluster_says_how_its_agent_reaches_it() {
    use strata_topology::ClusterBackend;
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center }}
  clusters:
    - {{ name: store-1, parent: center, kubernetes: {{ inCluster: true }} }}
    - {{ name: lab-1, parent: center, kubernetes: {{ kubeconfig: /etc/strata/lab-1.kubeconfig, context: lab-1 }} }}
    - {{ name: lab-2, parent: center, kubernetes: {{ kubeconfig: lab-2.kubeconfig }} }}
    - {{ name: sim-1, parent: center, simulated: {{}} }}
    - {{ name: sim-2, parent: center, simulated: {{ readyDelayMs: 50 }} }}
"
    );
    let c = parse(&text, Path::new("t.yaml")).unwrap();
    assert_eq!(c.warnings, Vec::<String>::new());
    let backends: Vec<_> = c
        .topology
        .clusters
        .iter()
        .map(|c| c.backend.clone().unwrap())
        .collect();
    assert_eq!(
        backends,
        [
            ClusterBackend::InCluster,
            ClusterBackend::Kubeconfig {
                path: "/etc/strata/lab-1.kubeconfig".into(),
                context: Some("lab-1".into())
            },
            ClusterBackend::Kubeconfig {
                path: "lab-2.kubeconfig".into(),
                context: None
            },
            ClusterBackend::Simulated {
                ready_delay_ms: None
            },
            ClusterBackend::Simulated {
                ready_delay_ms: Some(50)
            },
        ]
    );
}

#[test]
fn a_wrong_backend_is_refused_naming_the_cluster_and_none_is_one_warning() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center }}
  clusters:
    - {{ name: both, parent: center, kubernetes: {{ inCluster: true }}, simulated: {{}} }}
    - {{ name: twice, parent: center, kubernetes: {{ inCluster: true, kubeconfig: k }} }}
    - {{ name: empty, parent: center, kubernetes: {{}} }}
    - {{ name: ctx, parent: center, kubernetes: {{ inCluster: true, context: x }} }}
    - {{ name: blank, parent: center, kubernetes: {{ kubeconfig: \" \" }} }}
    - {{ name: mine, parent: center, simulated: {{}}, properties: {{ strata.dev/backend: real }} }}
"
    );
    assert_eq!(
        errors(&text),
        [
            "cluster \"both\": kubernetes and simulated exclude each other: name one backend (kubernetes: { inCluster: true }, kubernetes: { kubeconfig: PATH, context: NAME }, or simulated: {})",
            "cluster \"twice\": kubernetes.inCluster and kubernetes.kubeconfig exclude each other",
            "cluster \"empty\": kubernetes: give kubeconfig: PATH (and context: NAME) or inCluster: true",
            "cluster \"ctx\": kubernetes.context names a context of a kubeconfig; it does not go with inCluster",
            "cluster \"blank\": kubernetes.kubeconfig: empty",
            "cluster \"mine\": properties: \"strata.dev/backend\" is reserved: properties under \"strata.dev/\" are what the agent reports",
        ]
    );
    let names: Vec<String> = (1..=7)
        .map(|i| format!("    - {{ name: c{i}, parent: center }}\n"))
        .collect();
    let text = format!(
        "{HEAD}spec:\n  root: {{ name: center }}\n  clusters:\n{}",
        names.concat()
    );
    let c = parse(&text, Path::new("t.yaml")).unwrap();
    assert_eq!(c.warnings, Vec::<String>::new());
    assert_eq!(
        c.topology.unset_backend_warning().as_deref(),
        Some(
            "7 cluster(s) name no backend (\"c1\", \"c2\", \"c3\", \"c4\", \"c5\" and 2 more): their rendered agents refuse to start until their configuration names one (`relay up` and `relay demo` simulate them); say how each agent reaches its cluster with kubernetes: { inCluster: true }, kubernetes: { kubeconfig: PATH, context: NAME }, or simulated: {}"
        )
    );
    assert!(c.topology.clusters.iter().all(|c| c.backend.is_none()));
}

#[test]
fn an_unknown_backend_field_is_refused_naming_the_field_and_the_cluster() {
    let text = format!(
        "{HEAD}spec:
  root: {{ name: center }}
  clusters:
    - name: lab-1
      parent: center
      kubernetes: {{ kubeconfig: k, contxt: lab }}
"
    );
    match parse(&text, Path::new("t.yaml")) {
        Err(LoadError::Parse { detail, .. }) => {
            assert!(detail.contains("contxt"), "{detail}");
            assert!(detail.contains("lab-1"), "the cluster is named: {detail}");
        }
        other => panic!("accepted an unknown field: {other:?}"),
    }
}
