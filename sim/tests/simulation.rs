//! The simulation itself under test: the same seed gives the same trace, a hierarchy
//! converges, and a broken hierarchy is reported as a violation.

#![allow(clippy::unwrap_used)] // tests may unwrap

use std::path::Path;

use strata_sim::run::run;
use strata_sim::scenario::Scenario;

const SMALL: &str = "
topology:
  apiVersion: strata.dev/v1alpha1
  kind: Topology
  metadata: { name: small }
  spec:
    root: { name: center }
    relays: [ { name: eu, parent: center, labels: { region: eu } } ]
    clusters:
      - { name: pos-0, parent: eu, labels: { role: pos } }
      - { name: pos-1, parent: eu, labels: { role: pos } }
duration: 30s
settle: 15s
workload:
  - at: 1s
    apply: |
      apiVersion: strata.dev/v1alpha1
      kind: Placement
      metadata: { name: pos }
      spec:
        objects: [ { kinds: [ConfigMap] } ]
        clusters: { selector: { matchLabels: { role: pos } } }
  - { at: 2s, configmaps: { count: 3, prefix: cfg, namespace: pos, version: 1 } }
  - { at: 5s, configmaps: { count: 3, prefix: cfg, namespace: pos, version: 2 } }
faults:
  - { at: 3s, partition: [center, eu] }
  - { at: 6s, repair: [center, eu] }
";

#[test]
fn the_same_seed_gives_the_same_trace_and_the_hierarchy_converges() {
    let s = Scenario::parse(SMALL, Path::new("small.yaml")).unwrap();
    let a = run(&s, 7).unwrap();
    let b = run(&s, 7).unwrap();
    assert!(a.violation.is_none(), "{:?}", a.violation);
    assert!(a.converged.is_some());
    assert_eq!(a.trace_hash, b.trace_hash, "same seed, different traces");
    assert_eq!(a.links, b.links, "same seed, different bytes per link");
}

#[test]
fn a_relay_that_never_comes_back_is_a_convergence_violation() {
    let text = SMALL.replace(
        "  - { at: 6s, repair: [center, eu] }",
        "  - { at: 6s, crash: eu, keep_disk: true }",
    );
    let s = Scenario::parse(&text, Path::new("small.yaml")).unwrap();
    let o = run(&s, 3).unwrap();
    let (v, at, trace) = o.violation.expect("a violation");
    assert_eq!(
        v.invariant,
        "the hierarchy converges within `settle` once the network healed"
    );
    assert!(v.detail.contains("pos-0"), "{}", v.detail);
    assert!(
        at.as_secs() >= 21,
        "reported before the settle time: {at:?}"
    );
    assert!(!trace.is_empty());
}
