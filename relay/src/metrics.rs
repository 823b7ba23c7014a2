//! Prometheus text metrics of a node, served over plain HTTP on the configured address
//! (`GET /metrics`).

use std::convert::Infallible;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use strata_protocol::wire::StreamClass;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::http;
use crate::node::runtime::NodeClient;
use strata_node::store::Store;

/// Renders the node's metrics in the Prometheus text format.
pub async fn render(node: &NodeClient, store: &dyn Store) -> Option<String> {
    let core = node
        .query(|c| {
            let head = c.log().head().0;
            let lags: Vec<(String, u64)> = c
                .children()
                .map(|(n, acked)| {
                    let lag = acked.map_or(head, |a| head.saturating_sub(a.position.0));
                    (n.to_owned(), lag)
                })
                .collect();
            (
                c.name().to_owned(),
                head,
                c.log().floor().0,
                c.log().live_len(),
                lags,
                c.upstream_open(),
                c.stats().clone(),
            )
        })
        .await?;
    let links = node.link_stats().await.unwrap_or_default();
    let (name, head, floor, live, lags, up, stats) = core;
    let mut out = String::new();
    let mut metric = |help: &str, kind: &str, name: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    let node_label = format!("{{node=\"{name}\"}}");
    metric(
        "Position of the node's log head.",
        "gauge",
        "strata_log_head",
        &[(node_label.clone(), head as f64)],
    );
    metric(
        "Compaction floor of the node's log.",
        "gauge",
        "strata_log_floor",
        &[(node_label.clone(), floor as f64)],
    );
    metric(
        "Live objects in the node's log.",
        "gauge",
        "strata_log_objects",
        &[(node_label.clone(), live as f64)],
    );
    metric(
        "Children connected now.",
        "gauge",
        "strata_children_connected",
        &[(node_label.clone(), lags.len() as f64)],
    );
    let lag: Vec<(String, f64)> = lags
        .iter()
        .map(|(c, l)| (format!("{{node=\"{name}\",child=\"{c}\"}}"), *l as f64))
        .collect();
    metric(
        "Log positions a child has not acknowledged.",
        "gauge",
        "strata_child_lag",
        &lag,
    );
    // (peer label, bytes sent, bytes received) per connection, the parent's last.
    let udp: Vec<(String, u64, u64)> = links
        .children
        .iter()
        .map(|(c, tx, rx)| (c.as_str(), *tx, *rx))
        .chain(links.parent.map(|(tx, rx)| ("parent", tx, rx)))
        .map(|(peer, tx, rx)| (format!("{{node=\"{name}\",peer=\"{peer}\"}}"), tx, rx))
        .collect();
    let sent: Vec<(String, f64)> = udp
        .iter()
        .map(|(l, tx, _)| (l.clone(), *tx as f64))
        .collect();
    let received: Vec<(String, f64)> = udp
        .iter()
        .map(|(l, _, rx)| (l.clone(), *rx as f64))
        .collect();
    metric(
        "Bytes sent on the current connection to a peer (UDP payload for QUIC, multiplexer bytes for TLS/TCP).",
        "counter",
        "strata_link_sent_bytes",
        &sent,
    );
    metric(
        "Bytes received on the current connection from a peer (UDP payload for QUIC, multiplexer bytes for TLS/TCP).",
        "counter",
        "strata_link_received_bytes",
        &received,
    );
    let class_label = |peer: &str, class: &StreamClass| {
        let class = match class {
            StreamClass::Control => "control",
            StreamClass::Bulk => "bulk",
            StreamClass::Reports => "reports",
        };
        format!("{{node=\"{name}\",peer=\"{peer}\",class=\"{class}\"}}")
    };
    let stream_sent: Vec<(String, f64)> = links
        .streams
        .iter()
        .map(|(peer, class, tx, _)| (class_label(peer, class), *tx as f64))
        .collect();
    let stream_received: Vec<(String, f64)> = links
        .streams
        .iter()
        .map(|(peer, class, _, rx)| (class_label(peer, class), *rx as f64))
        .collect();
    metric(
        "Framed message bytes sent on the current connection to a peer, per stream class.",
        "counter",
        "strata_stream_sent_bytes",
        &stream_sent,
    );
    metric(
        "Framed message bytes received on the current connection from a peer, per stream class.",
        "counter",
        "strata_stream_received_bytes",
        &stream_received,
    );
    // Which transport each live link runs on: 1 for the one in use.
    let transports: Vec<(String, f64)> = links
        .child_transports
        .iter()
        .map(|(c, t)| (c.as_str(), *t))
        .chain(links.parent_transport.map(|t| ("parent", t)))
        .map(|(peer, t)| {
            (
                format!("{{node=\"{name}\",peer=\"{peer}\",transport=\"{t}\"}}"),
                1.0,
            )
        })
        .collect();
    metric(
        "The transport of the current connection to a peer (quic, or tcp: TLS over TCP, maybe through a proxy).",
        "gauge",
        "strata_link_transport",
        &transports,
    );
    metric(
        "Whether the link to the parent is open.",
        "gauge",
        "strata_parent_connected",
        &[(node_label.clone(), f64::from(u8::from(up)))],
    );
    metric(
        "Summary updates sent upward.",
        "counter",
        "strata_summaries_sent_total",
        &[(node_label.clone(), stats.summaries_sent as f64)],
    );
    metric(
        "Reports refused as outside a child's subtree.",
        "counter",
        "strata_reports_refused_total",
        &[(node_label.clone(), stats.reports_refused as f64)],
    );
    metric(
        "Bytes the store uses.",
        "gauge",
        "strata_store_bytes",
        &[(node_label, store.size_bytes() as f64)],
    );
    Some(out)
}

/// Why the metrics could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind metrics on {addr}")]
pub struct MetricsBindError {
    /// The configured `metrics` address.
    pub addr: SocketAddr,
    /// What the operating system said.
    pub source: std::io::Error,
}

/// Serves `GET /metrics` on `addr` until the returned task is aborted.
pub fn spawn(
    addr: SocketAddr,
    node: NodeClient,
    store: Arc<dyn Store>,
) -> Result<tokio::task::JoinHandle<()>, MetricsBindError> {
    let listener = http::bind(addr).map_err(|source| MetricsBindError { addr, source })?;
    Ok(tokio::spawn(http::accept_loop(listener, move |tcp, _| {
        let (node, store) = (node.clone(), store.clone());
        async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (node, store) = (node.clone(), store.clone());
                    async move {
                        let resp = if req.uri().path() != "/metrics" {
                            text(StatusCode::NOT_FOUND, "try /metrics\n".into())
                        } else {
                            match render(&node, store.as_ref()).await {
                                Some(body) => text(StatusCode::OK, body),
                                None => {
                                    text(StatusCode::SERVICE_UNAVAILABLE, "node stopping\n".into())
                                }
                            }
                        };
                        Ok::<_, Infallible>(resp)
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        }
    })))
}

fn text(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    http::response(code, "text/plain; version=0.0.4", body)
}
