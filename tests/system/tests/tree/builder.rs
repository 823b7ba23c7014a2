//! How a [`Tree`] is declared: [`TreeBuilder`], and `labels!` for the labels of its
//! nodes.

use std::time::Duration;

use strata_node::store::MemStore;
use strata_protocol::model::Labels;
use strata_protocol::time::Instant;

use super::node::{Kind, Link, Node, Spec, boot};
use super::{LATENCY, Tree};

/// Labels from `key: value` pairs: `labels! { region: eu, "tier": "edge-1" }`. A key or
/// value that is not one token (a dash, a dot, a slash) is written as a string literal.
macro_rules! labels {
    ($($key:tt : $value:tt),* $(,)?) => {
        [$((
            $crate::tree::label_text(stringify!($key)),
            $crate::tree::label_text(stringify!($value)),
        )),*]
            .into_iter()
            .collect::<strata_protocol::model::Labels>()
    };
}
pub(crate) use labels;

/// A label's key or value as `labels!` got it: an identifier, or a string literal
/// whose quotes go.
pub fn label_text(token: &str) -> String {
    token.trim_matches('"').to_owned()
}

/// Declares a [`Tree`] as the scenario reads: the root, then relays and agents, each
/// under a parent declared before it. No link is connected yet: see
/// [`Tree::connect_all`] and [`Tree::connect`].
#[derive(Default)]
pub struct TreeBuilder {
    specs: Vec<Spec>,
    latency: Option<Duration>,
}

impl TreeBuilder {
    /// The root relay (the one [`Tree::apply`] applies manifests at).
    pub fn root(self, name: &str) -> Self {
        assert!(self.specs.is_empty(), "the root is declared first");
        self.node(name, Kind::Relay, None, Labels::new())
    }

    /// A relay under `parent`, with the labels it gives every cluster below it.
    pub fn relay(self, name: &str, parent: &str, labels: Labels) -> Self {
        self.node(name, Kind::Relay, Some(parent), labels)
    }

    /// An agent (its cluster simulated) under `parent`, with its cluster's labels.
    pub fn agent(self, name: &str, parent: &str, labels: Labels) -> Self {
        self.node(name, Kind::Agent, Some(parent), labels)
    }

    /// Gives the node declared last these labels too (the root's, say).
    pub fn labels(mut self, labels: Labels) -> Self {
        let last = self.specs.last_mut().expect("a node to label");
        last.labels.extend(labels);
        self
    }

    /// Gives the agent declared last these cluster properties.
    pub fn properties(mut self, properties: Labels) -> Self {
        let last = self.specs.last_mut().expect("an agent to give properties");
        last.properties.extend(properties);
        self
    }

    /// The root keeps `positions` of history for watches beyond what children need
    /// (none unless told; a node keeps `WATCH_HISTORY`).
    pub fn watch_history(mut self, positions: u64) -> Self {
        self.specs[0].watch_history = positions;
        self
    }

    /// The one-way latency of every link (5 ms unless told).
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    fn node(mut self, name: &str, kind: Kind, parent: Option<&str>, labels: Labels) -> Self {
        assert!(
            self.specs.iter().all(|s| s.name != name),
            "{name} is declared twice"
        );
        if let Some(p) = parent {
            let spec = self.specs.iter_mut().find(|s| s.name == p);
            let spec = spec.unwrap_or_else(|| panic!("{name}'s parent {p} is not declared yet"));
            assert_eq!(spec.kind, Kind::Relay, "{name}'s parent {p} is an agent");
            spec.children.push(name.to_owned());
        }
        let id = 1000 + self.specs.len() as u64;
        self.specs.push(Spec {
            name: name.to_owned(),
            kind,
            parent: parent.map(str::to_owned),
            labels,
            children: Vec::new(),
            properties: Labels::new(),
            id,
            watch_history: 0,
        });
        self
    }

    /// Every node up on an empty store, every link down, at time zero.
    pub fn build(self) -> Tree {
        assert!(!self.specs.is_empty(), "a tree has a root");
        super::init_logging();
        let now = Instant::from_origin(Duration::ZERO);
        let latency = self.latency.unwrap_or(LATENCY);
        let mut tree = Tree::empty(now);
        for spec in self.specs {
            let store = MemStore::new(spec.id);
            let core = boot(now, &spec, &store, 0);
            let link = spec.parent.as_ref().map(|_| Link::new(latency));
            tree.insert(Node {
                spec,
                core: Some(core),
                store,
                unsaved: Default::default(),
                retry_commit_at: None,
                runs: 0,
                link,
            });
        }
        tree
    }
}
