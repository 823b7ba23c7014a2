//! How a node's configuration names the files it holds, as its process sees them: in
//! the node's directory as `certs` and `render` write it ([`Layout::Plain`]), in a pod
//! of the chart ([`Layout::Pod`], [`crate::helm`]), or in the configuration directory
//! of a systemd unit ([`Layout::Host`], [`crate::systemd`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::files;
use crate::helm::{self, POD_METRICS};
use crate::output::{quote, reference};

/// Where a node's files are, as its process sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// The node's directory, `DIR/nodes/NAME/` (the root's API tokens at `../../`).
    Plain,
    /// A pod: the files in the node's Secret at `../secret/`, the store on its volume
    /// at `../state/data`, metrics on [`POD_METRICS`] unless the topology says.
    Pod,
    /// A host: every file beside the configuration, the store at `data` (the unit's
    /// state directory is mounted there).
    Host,
}

/// Builds the references of one node's configuration in one layout, and collects the
/// files they name.
pub(crate) struct Refs<'a> {
    dir: &'a Path,
    node: &'a str,
    layout: Layout,
    /// Pod and host: the files the node needs where it runs (name there, source), in
    /// the order named.
    pub(crate) held: Vec<(String, PathBuf)>,
}

impl<'a> Refs<'a> {
    pub(crate) fn new(dir: &'a Path, node: &'a str, layout: Layout) -> Refs<'a> {
        Refs {
            dir,
            node,
            layout,
            held: Vec::new(),
        }
    }

    /// How the configuration names `path`, quoted.
    pub(crate) fn file(&mut self, path: &Path) -> String {
        if self.layout == Layout::Plain {
            return reference(self.dir, self.node, path);
        }
        let key = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.hold(&key, path)
    }

    fn hold(&mut self, key: &str, path: &Path) -> String {
        if !self.held.iter().any(|(k, _)| k == key) {
            self.held.push((key.to_owned(), path.to_owned()));
        }
        match self.layout {
            Layout::Pod => quote(&format!("{}/{key}", helm::SECRET_DIR)),
            Layout::Plain | Layout::Host => quote(key),
        }
    }

    /// The node's certificate, key, CA certificate and store.
    pub(crate) fn tls(&mut self) -> String {
        let (dir, node) = (self.dir, self.node);
        let data = match self.layout {
            Layout::Plain => reference(dir, node, &files::node_data(dir, node)),
            Layout::Pod => quote(helm::DATA_DIR),
            Layout::Host => quote("data"),
        };
        format!(
            "tls: {{ cert: {}, key: {}, ca: {} }}\ndata: {data}\n",
            self.file(&files::node_cert(dir, node)),
            self.file(&files::node_key(dir, node)),
            self.file(&files::node_ca_cert(dir, node)),
        )
    }

    /// The metrics line: the topology's address; in a pod without one, [`POD_METRICS`]
    /// (the chart's probes need it).
    pub(crate) fn metrics(&self, metrics: Option<SocketAddr>) -> String {
        match (metrics, self.layout) {
            (Some(m), _) => format!("metrics: \"{m}\"\n"),
            (None, Layout::Pod) => format!("metrics: \"{POD_METRICS}\"\n"),
            (None, _) => String::new(),
        }
    }

    /// A kubeconfig as the topology names it (relative: to the node's directory); in a
    /// pod or on a host, a file of the node's own when it is there to copy.
    pub(crate) fn kubeconfig(&mut self, path: &str) -> String {
        let source = files::node_dir(self.dir, self.node).join(path);
        if self.layout != Layout::Plain && source.is_file() {
            return self.hold(helm::KUBECONFIG_KEY, &source);
        }
        quote(path)
    }
}
