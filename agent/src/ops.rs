//! The agent's metrics and health, served by [`strata_node::ops`] on the configured
//! `metrics:` address: `GET /metrics`, `/healthz`, `/readyz`.
//!
//! Readiness of an agent: its store takes a durable write, and its link to its parent
//! is open or its store holds desired state its parent sent before (it keeps enforcing
//! that while the parent is away). An agent that never reached its parent is not ready.

use std::sync::Arc;

use strata_node::exposition::{Exposition, Kind, Labels};
use strata_node::ops::{self, OpsFuture, OpsSource};
use strata_node::store::Store;

use crate::core::AgentStats;
use crate::kubernetes::KubeCounters;
use crate::runtime::AgentClient;

/// What an agent's metrics and health listener reads.
pub struct AgentOps {
    /// The running agent.
    pub agent: AgentClient,
    /// Its store.
    pub store: Arc<dyn Store>,
    /// The Kubernetes backend's request counters (`None` with a simulated cluster).
    pub kube: Option<Arc<KubeCounters>>,
}

struct Snapshot {
    cluster: String,
    connected: bool,
    synced_before: bool,
    objects: usize,
    stats: AgentStats,
    snapshots: u64,
}

impl AgentOps {
    async fn snapshot(&self) -> Option<Snapshot> {
        self.agent
            .query(|c| Snapshot {
                cluster: c.cluster_name().to_owned(),
                connected: c.connected(),
                synced_before: c.link().cursor().log.0 != 0,
                objects: c.log().live_len(),
                stats: c.stats().clone(),
                snapshots: c.snapshots_received(),
            })
            .await
    }

    async fn render(&self) -> Option<Exposition> {
        let s = self.snapshot().await?;
        let mut out = Exposition::new();
        let one =
            |v: f64| -> Vec<(Labels, f64)> { vec![(vec![("cluster", s.cluster.clone())], v)] };
        out.family(
            "strata_build_info",
            Kind::Gauge,
            "The build of the agent: always 1, with its version as a label.",
            &[(
                vec![
                    ("cluster", s.cluster.clone()),
                    ("version", env!("CARGO_PKG_VERSION").to_owned()),
                ],
                1.0,
            )],
        );
        out.family(
            "strata_parent_connected",
            Kind::Gauge,
            "Whether the link to the parent relay is open.",
            &one(f64::from(u8::from(s.connected))),
        );
        out.family(
            "strata_agent_objects",
            Kind::Gauge,
            "Objects in the agent's desired state.",
            &one(s.objects as f64),
        );
        let counters = [
            (
                "strata_parent_snapshots_total",
                "Snapshots the parent started sending during this run that replace a view this agent held (not its first; a resync that was a delta leaves it unchanged).",
                s.snapshots,
            ),
            (
                "strata_agent_applies_total",
                "Objects the agent handed its cluster to apply.",
                s.stats.applies,
            ),
            (
                "strata_agent_apply_failures_total",
                "Applies the cluster refused or that failed.",
                s.stats.apply_failures,
            ),
            (
                "strata_agent_deletes_total",
                "Objects the agent handed its cluster to delete.",
                s.stats.deletes,
            ),
            (
                "strata_agent_delete_failures_total",
                "Deletes the cluster refused or that failed.",
                s.stats.delete_failures,
            ),
        ];
        for (name, help, value) in counters {
            out.family(name, Kind::Counter, help, &one(value as f64));
        }
        if let Some(k) = &self.kube {
            let get = KubeCounters::get;
            let kube = [
                (
                    "strata_agent_kube_apply_requests_total",
                    "Server-side apply requests sent to the cluster's API server.",
                    get(&k.applies),
                ),
                (
                    "strata_agent_kube_delete_requests_total",
                    "DELETE requests sent to the cluster's API server.",
                    get(&k.deletes),
                ),
                (
                    "strata_agent_kube_unchanged_total",
                    "Applies skipped because the live object already held the desired state.",
                    get(&k.unchanged),
                ),
                (
                    "strata_agent_drift_repairs_total",
                    "Re-applies after someone changed or deleted a managed object.",
                    get(&k.drift_repairs),
                ),
            ];
            for (name, help, value) in kube {
                out.family(name, Kind::Counter, help, &one(value as f64));
            }
            // The cluster's name first, as on every other family.
            let latency = k
                .latency
                .lock()
                .await
                .labelled_first(&["cluster"], std::slice::from_ref(&s.cluster));
            out.histogram(
                "strata_agent_kube_request_duration_seconds",
                "Time the cluster's API server took to answer a server-side apply or a delete, by verb.",
                &latency,
            );
        }
        out.family(
            "strata_store_bytes",
            Kind::Gauge,
            "Bytes the store uses.",
            &one(self.store.size_bytes() as f64),
        );
        Some(out)
    }
}

impl OpsSource for AgentOps {
    fn metrics(&self) -> OpsFuture<'_, Option<Exposition>> {
        Box::pin(self.render())
    }

    fn live(&self) -> OpsFuture<'_, Result<(), String>> {
        Box::pin(async move {
            match self.agent.query(|_| ()).await {
                Some(()) => Ok(()),
                None => Err("the agent has stopped".to_owned()),
            }
        })
    }

    fn ready(&self) -> OpsFuture<'_, Result<String, String>> {
        Box::pin(async move {
            let s = self.snapshot().await.ok_or("the agent has stopped")?;
            ops::store_writable(self.store.clone())
                .await
                .map_err(|e| e.to_string())?;
            match (s.connected, s.synced_before) {
                (true, _) => Ok("parent connected".to_owned()),
                (false, true) => Ok("parent away, enforcing the stored desired state".to_owned()),
                (false, false) => Err(
                    "the parent was never reached and the store holds nothing from it".to_owned(),
                ),
            }
        })
    }
}
