//! Debug tunnels at a relay: which child a cluster's tunnel goes to, and forwarding the
//! streams the parent opens one tier down (the root's end, which speaks HTTP to users,
//! is `crate::api::tunnel`). A relay forwards only toward the child whose subtree
//! reported the cluster (the inventory it routes by), so a stream can never leave the
//! subtree its header names.

use std::collections::BTreeMap;

use strata_node::clock::Clock;
use strata_node::driver::{self, Input};
use strata_node::link::Link;
use strata_node::transport::Sender;
use strata_node::tunnel::{self, TunnelSlots, TunnelStream};
use strata_protocol::tunnel::TunnelOpen;
use strata_protocol::wire::{ParentToChild, ReportKey, ReportValue};
use tokio::sync::mpsc;

use super::core::{NodeCore, last_seen};
use super::input::RelayInput;

pub use crate::limits::DEFAULT_TUNNELS_PER_LINK;

pub use super::input::{TunnelRefusal, TunnelRoute};

fn refusal(code: u16, reason: &'static str, message: String) -> TunnelRefusal {
    TunnelRefusal {
        code,
        reason,
        message,
    }
}

/// The route of a tunnel to `cluster`: the child that reported it, if its link and every
/// link below it are up, and the link has room for one more tunnel.
pub(crate) fn route(
    core: &NodeCore,
    children: &BTreeMap<(String, u64), (Link, Sender<ParentToChild>)>,
    slots: &mut TunnelSlots,
    cluster: &str,
) -> Result<TunnelRoute, TunnelRefusal> {
    let found = core
        .reports()
        .iter()
        .find_map(|((child, key), value)| match (key, value) {
            (ReportKey::Cluster { name }, ReportValue::Cluster(c)) if name == cluster => {
                Some((child.clone(), c.clone()))
            }
            _ => None,
        });
    let Some((child, record)) = found else {
        return Err(refusal(
            404,
            "NotFound",
            format!("no cluster named {cluster:?} below {}", core.name()),
        ));
    };
    let (reachable, seen) = last_seen(&record, &core.all_links(), Clock::start().wall());
    if !reachable {
        let when = seen.map_or("never (unknown)".to_owned(), |ms| {
            strata_protocol::time::UnixMillis(ms).rfc3339()
        });
        return Err(refusal(
            503,
            "ServiceUnavailable",
            format!(
                "cluster {cluster:?} is unreachable from {} (path {}): last seen {when}{}",
                core.name(),
                record.path.join("/"),
                crate::tier::core::backend_reason(&record)
                    .map(|why| format!(" ({why})"))
                    .unwrap_or_default()
            ),
        ));
    }
    let Some(link) = children
        .iter()
        .find(|((name, _), _)| *name == child)
        .map(|(_, (link, _))| link.clone())
    else {
        return Err(refusal(
            503,
            "ServiceUnavailable",
            format!("cluster {cluster:?} is unreachable: {child} is not connected"),
        ));
    };
    if !link.carries_tunnels() {
        return Err(refusal(
            503,
            "ServiceUnavailable",
            format!(
                "the link from {} to {child} runs over TLS/TCP and {child}'s build does not carry debug tunnels on it (an older version)",
                core.name()
            ),
        ));
    }
    let Some(permit) = slots.take(&child) else {
        return Err(refusal(
            429,
            "TooManyRequests",
            format!(
                "the link from {} to {child} carries {} debug tunnels already (its cap); try again later",
                core.name(),
                slots.cap()
            ),
        ));
    };
    Ok(TunnelRoute {
        child,
        link,
        permit,
    })
}

/// Asks the node where `cluster`'s tunnel goes.
pub async fn ask_route(
    inputs: &mpsc::Sender<Input<RelayInput>>,
    cluster: &str,
) -> Result<TunnelRoute, TunnelRefusal> {
    let cluster = cluster.to_owned();
    driver::ask(inputs, |reply| RelayInput::TunnelRoute { cluster, reply })
        .await
        .unwrap_or_else(|| {
            Err(refusal(
                503,
                "ServiceUnavailable",
                "the node is stopping".into(),
            ))
        })
}

/// Opens the next hop of a tunnel along `route`.
pub async fn open_next(
    route: &TunnelRoute,
    open: &TunnelOpen,
) -> Result<TunnelStream, TunnelRefusal> {
    tunnel::open(&route.link, &route.child, open)
        .await
        .map_err(|e| refusal(503, "ServiceUnavailable", e.to_string()))
}

/// A relay below the root: forwards a stream its parent opened one tier down, or
/// answers on it why it cannot.
pub(crate) async fn forward(
    inputs: mpsc::Sender<Input<RelayInput>>,
    open: TunnelOpen,
    up: TunnelStream,
) {
    let route = match ask_route(&inputs, &open.cluster).await {
        Ok(r) => r,
        Err(r) => {
            tracing::info!(cluster = %open.cluster, request = open.request, user = %open.user, code = r.code, "refusing a tunnel");
            return tunnel::refuse(up, r.code, r.reason, &r.message).await;
        }
    };
    match open_next(&route, &open).await {
        Ok(down) => {
            tracing::debug!(cluster = %open.cluster, request = open.request, user = %open.user, child = %route.child, "forwarding a tunnel");
            tunnel::splice(up, down).await;
        }
        Err(r) => tunnel::refuse(up, r.code, r.reason, &r.message).await,
    }
    drop(route.permit);
}
