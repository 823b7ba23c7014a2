//! Prometheus metrics and health of a relay, served over plain HTTP on the configured
//! `metrics:` address by [`strata_node::ops`]: `GET /metrics`, `/healthz`, `/readyz`.
//!
//! Readiness of a relay:
//! * its store takes a durable write;
//! * the root: its user API accepts connections (when it has one);
//! * any other relay: its link to its parent is open, or its store holds a view its
//!   parent sent before (a cursor into the parent's log), which it serves to its subtree while the
//!   parent is away. A relay that never reached its parent is not ready.

use std::net::SocketAddr;
use std::sync::Arc;

use strata_node::exposition::{Exposition, Kind, Labels};
use strata_node::ops::{self, OpsFuture, OpsSource};
use strata_node::store::Store;
use strata_protocol::wire::StreamClass;

pub use strata_node::ops::OpsBindError as MetricsBindError;

use crate::api_metrics::ApiMetrics;
use crate::tier::runtime::NodeClient;

/// The node's metric families, read from its core now (encoded by the caller with
/// `prometheus-client`, in the format the scraper asks for).
pub async fn render(
    node: &NodeClient,
    store: &dyn Store,
    api: Option<&ApiMetrics>,
    dns: Option<&crate::dns::DnsCounters>,
) -> Option<Exposition> {
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
                (c.log().floor().0, c.history().floor(), c.history().len()),
                c.log().live_len(),
                lags,
                c.parent_open(),
                c.stats().clone(),
                (c.snapshots_received(), c.is_standby()),
                c.propagation_lag().histogram(),
                crate::tier::volume_replicas::replica_lags(c.replications(), c.wall_now()),
            )
        })
        .await?;
    let links = node.link_stats().await.unwrap_or_default();
    let (
        name,
        head,
        (floor, watch_floor, watch_events),
        live,
        lags,
        up,
        stats,
        (snapshots, standby),
        propagation,
        replica_lags,
    ) = core;
    let mut out = Exposition::new();
    let node_label = || -> Labels { vec![("node", name.clone())] };
    let one = |v: f64| vec![(node_label(), v)];
    out.family(
        "strata_build_info",
        Kind::Gauge,
        "The build of the relay: always 1, with its version as a label.",
        &[(
            vec![
                ("node", name.clone()),
                ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ],
            1.0,
        )],
    );
    out.family(
        "strata_log_head",
        Kind::Gauge,
        "Position of the node's log head.",
        &one(head as f64),
    );
    out.family(
        "strata_log_floor",
        Kind::Gauge,
        "Compaction floor of the node's log.",
        &one(floor as f64),
    );
    out.family(
        "strata_watch_history_floor",
        Kind::Gauge,
        "At the root: the oldest resourceVersion a Kubernetes watch may start from; older ones are answered 410 Expired.",
        &one(watch_floor as f64),
    );
    out.family(
        "strata_watch_history_events",
        Kind::Gauge,
        "At the root: writes held in the watch history.",
        &one(watch_events as f64),
    );
    out.family(
        "strata_log_objects",
        Kind::Gauge,
        "Live objects in the node's log.",
        &one(live as f64),
    );
    out.family(
        "strata_children_connected",
        Kind::Gauge,
        "Children connected now.",
        &one(lags.len() as f64),
    );
    let lag: Vec<(Labels, f64)> = lags
        .iter()
        .map(|(c, l)| {
            (
                vec![("node", name.clone()), ("child", c.clone())],
                *l as f64,
            )
        })
        .collect();
    out.family(
        "strata_child_lag",
        Kind::Gauge,
        "Log positions a child has not acknowledged.",
        &lag,
    );
    let replica_lag: Vec<(Labels, f64)> = replica_lags
        .into_iter()
        .map(|(placement, claim, replica, lag)| {
            (
                vec![
                    ("node", name.clone()),
                    ("placement", placement),
                    ("claim", claim),
                    ("replica", replica),
                ],
                lag,
            )
        })
        .collect();
    out.family(
        "strata_volume_replica_lag_seconds",
        Kind::Gauge,
        "At the root: how far a ReadWriteMany replica lags behind its primary (now minus the start of its last completed sync).",
        &replica_lag,
    );
    // (peer, bytes sent, bytes received) per connection, the parent's last.
    let udp: Vec<(Labels, u64, u64)> = links
        .children
        .iter()
        .map(|(c, tx, rx)| (c.as_str(), *tx, *rx))
        .chain(links.parent.map(|(tx, rx)| ("parent", tx, rx)))
        .map(|(peer, tx, rx)| {
            (
                vec![("node", name.clone()), ("peer", peer.to_owned())],
                tx,
                rx,
            )
        })
        .collect();
    let sent: Vec<_> = udp
        .iter()
        .map(|(l, tx, _)| (l.clone(), *tx as f64))
        .collect();
    let received: Vec<_> = udp
        .iter()
        .map(|(l, _, rx)| (l.clone(), *rx as f64))
        .collect();
    out.family(
        "strata_link_sent_bytes_total",
        Kind::Counter,
        "Bytes sent on the current connection to a peer (UDP payload for QUIC, multiplexer bytes for TLS/TCP).",
        &sent,
    );
    out.family(
        "strata_link_received_bytes_total",
        Kind::Counter,
        "Bytes received on the current connection from a peer (UDP payload for QUIC, multiplexer bytes for TLS/TCP).",
        &received,
    );
    let class_labels = |peer: &str, class: &StreamClass| -> Labels {
        let class = match class {
            StreamClass::Control => "control",
            StreamClass::Bulk => "bulk",
            StreamClass::Reports => "reports",
        };
        vec![
            ("node", name.clone()),
            ("peer", peer.to_owned()),
            ("class", class.to_owned()),
        ]
    };
    let stream_sent: Vec<_> = links
        .streams
        .iter()
        .map(|(peer, class, tx, _)| (class_labels(peer, class), *tx as f64))
        .collect();
    let stream_received: Vec<_> = links
        .streams
        .iter()
        .map(|(peer, class, _, rx)| (class_labels(peer, class), *rx as f64))
        .collect();
    out.family(
        "strata_stream_sent_bytes_total",
        Kind::Counter,
        "Framed message bytes sent on the current connection to a peer, per stream class.",
        &stream_sent,
    );
    out.family(
        "strata_stream_received_bytes_total",
        Kind::Counter,
        "Framed message bytes received on the current connection from a peer, per stream class.",
        &stream_received,
    );
    // Which transport each live link runs on: 1 for the one in use.
    let transports: Vec<_> = links
        .child_transports
        .iter()
        .map(|(c, t)| (c.as_str(), *t))
        .chain(links.parent_transport.map(|t| ("parent", t)))
        .map(|(peer, t)| {
            (
                vec![
                    ("node", name.clone()),
                    ("peer", peer.to_owned()),
                    ("transport", t.to_string()),
                ],
                1.0,
            )
        })
        .collect();
    out.family(
        "strata_link_transport",
        Kind::Gauge,
        "The transport of the current connection to a peer (quic, or tcp: TLS over TCP, maybe through a proxy).",
        &transports,
    );
    out.family(
        "strata_parent_connected",
        Kind::Gauge,
        "Whether the link to the parent is open.",
        &one(f64::from(u8::from(up))),
    );
    out.family(
        "strata_parent_snapshots_total",
        Kind::Counter,
        "Snapshots the parent started sending during this run that replace a view this node held (not a new node's first); a resync that was a delta adds none.",
        &one(snapshots as f64),
    );
    out.family(
        "strata_root_standby",
        Kind::Gauge,
        "1 while this root replica serves the etcd writer's log without writing it.",
        &one(f64::from(u8::from(standby))),
    );
    out.histogram(
        "strata_propagation_lag_seconds",
        "Time from a position of this node's log being committed here to a child acknowledging a cursor at or past it (holding the change durably): the propagation lag of one hop, by child.",
        &propagation,
    );
    out.family(
        "strata_summaries_sent_total",
        Kind::Counter,
        "Summary updates sent upward.",
        &one(stats.summaries_sent as f64),
    );
    out.family(
        "strata_reports_refused_total",
        Kind::Counter,
        "Reports refused as outside a child's subtree.",
        &one(stats.reports_refused as f64),
    );
    out.family(
        "strata_handshakes_refused_total",
        Kind::Counter,
        "Children's connections refused before their TLS handshake because the relay was running as many handshakes as it takes at once and its queue was full (admission.handshakes, admission.queue); the children back off and come back.",
        &one(stats.handshakes_refused as f64),
    );
    out.family(
        "strata_quic_handshakes_at_remembered_mtu_total",
        Kind::Counter,
        "Children's QUIC connections started at the path MTU the last connection from the same address found, so that path MTU discovery had nothing to probe (the relay remembers it per address while it runs).",
        &one(stats.handshakes_at_remembered_mtu as f64),
    );
    out.family(
        "strata_sessions_refused_total",
        Kind::Counter,
        "Children's hellos refused with a time to come back because as many sessions were catching up as the relay sets up at once (admission.setups).",
        &one(stats.sessions_refused as f64),
    );
    out.family(
        "strata_sessions_setting_up",
        Kind::Gauge,
        "Children's sessions catching up now (from their hello until they acknowledged the log's head or reported everything again).",
        &one(stats.setting_up as f64),
    );
    out.family(
        "strata_child_connections_total",
        Kind::Counter,
        "Children's connections opened here, reconnections included: it climbs while links drop and come back.",
        &one(stats.children_connected as f64),
    );
    out.family(
        "strata_plans_total",
        Kind::Counter,
        "Times the root planned its placements again (always 0 below the root).",
        &one(stats.plans as f64),
    );
    out.family(
        "strata_store_bytes",
        Kind::Gauge,
        "Bytes the store uses.",
        &one(store.size_bytes() as f64),
    );
    if let Some(dns) = dns {
        let rows: Vec<(Labels, f64)> = dns
            .snapshot()
            .into_iter()
            .map(|(o, n)| {
                (
                    vec![("node", name.clone()), ("outcome", o.name().to_owned())],
                    n as f64,
                )
            })
            .collect();
        out.family(
            "strata_dns_queries_total",
            Kind::Counter,
            "DNS queries by outcome: answered (records or an empty answer), nxdomain, refused (outside the zone), dropped (not DNS).",
            &rows,
        );
    }
    if let Some(api) = api {
        api.render(&mut out).await;
    }
    Some(out)
}

/// What a relay's metrics and health listener reads.
pub struct RelayOps {
    /// The node.
    pub node: NodeClient,
    /// Its store.
    pub store: Arc<dyn Store>,
    /// The root's API address and counters (the root only).
    pub api: Option<(SocketAddr, Arc<ApiMetrics>)>,
    /// The DNS server's counters, when it serves DNS.
    pub dns: Option<Arc<crate::dns::DnsCounters>>,
}

/// What a root replica on etcd answers while it waits for the writer lease: alive,
/// not ready (so a Service sends its children and API clients to the writer).
#[derive(Debug)]
pub struct StandbyOps;

impl OpsSource for StandbyOps {
    fn metrics(&self) -> OpsFuture<'_, Option<Exposition>> {
        Box::pin(async {
            let mut out = Exposition::new();
            out.family(
                "strata_root_standby",
                Kind::Gauge,
                "1 while this root replica waits for the etcd writer lease.",
                &[(vec![("version", env!("CARGO_PKG_VERSION").to_owned())], 1.0)],
            );
            Some(out)
        })
    }

    fn live(&self) -> OpsFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn ready(&self) -> OpsFuture<'_, Result<String, String>> {
        Box::pin(async {
            Err("standby: another root replica holds the etcd writer lease".to_owned())
        })
    }
}

impl OpsSource for RelayOps {
    fn metrics(&self) -> OpsFuture<'_, Option<Exposition>> {
        Box::pin(render(
            &self.node,
            self.store.as_ref(),
            self.api.as_ref().map(|(_, m)| &**m),
            self.dns.as_deref(),
        ))
    }

    fn live(&self) -> OpsFuture<'_, Result<(), String>> {
        Box::pin(async move {
            match self.node.query(|_| ()).await {
                Some(()) => Ok(()),
                None => Err("the node has stopped".to_owned()),
            }
        })
    }

    fn ready(&self) -> OpsFuture<'_, Result<String, String>> {
        Box::pin(async move {
            let (link, standby) = self
                .node
                .query(|c| {
                    let link = c
                        .parent_link()
                        .map(|l| (l.is_open(), l.cursor().log.0 != 0));
                    (link, c.is_standby())
                })
                .await
                .ok_or("the node has stopped")?;
            if standby {
                return Err(
                    "standby: serving children and reads from etcd; another root \
                            replica holds the writer lease and takes the writes"
                        .to_owned(),
                );
            }
            ops::store_writable(self.store.clone())
                .await
                .map_err(|e| e.to_string())?;
            match (link, &self.api) {
                (Some((true, _)), _) => Ok("parent connected".to_owned()),
                (Some((false, true)), _) => Ok("parent away, serving from the store".to_owned()),
                (Some((false, false)), _) => Err(
                    "the parent was never reached and the store holds nothing from it".to_owned(),
                ),
                (None, Some((addr, _))) if !ops::accepts_connections(*addr).await => {
                    Err(format!("the API on {addr} does not accept connections"))
                }
                (None, Some(_)) => Ok("root, API listening".to_owned()),
                (None, None) => Ok("root".to_owned()),
            }
        })
    }
}
