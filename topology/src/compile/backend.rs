//! Checking how each cluster's agent reaches its cluster: `kubernetes: { inCluster }`,
//! `kubernetes: { kubeconfig, context }`, or `simulated: {}`.

use crate::raw::RawCluster;

/// How an agent reaches the cluster it keeps (`spec.clusters[].kubernetes` or
/// `simulated`), checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterBackend {
    /// The service account of the pod the agent runs in.
    InCluster,
    /// A kubeconfig file on the agent's host, and a context of it (its current context
    /// when `None`).
    Kubeconfig {
        /// The file, as written (relative paths are relative to the agent's
        /// configuration).
        path: String,
        /// The context.
        context: Option<String>,
    },
    /// A simulated cluster.
    Simulated {
        /// How long a simulated Deployment takes to become available (the agent's
        /// default when `None`).
        ready_delay_ms: Option<u64>,
    },
}

/// What a cluster entry may say about its backend, for messages.
const CHOICES: &str = "kubernetes: { inCluster: true }, kubernetes: { kubeconfig: PATH, context: NAME }, or simulated: {}";

/// The backend `c` names, checked; errors name the cluster and the field. `None` when
/// it names none (see [`super::Topology::unset_backend_warning`]) or a wrong one.
pub(super) fn cluster_backend(c: &RawCluster, errors: &mut Vec<String>) -> Option<ClusterBackend> {
    let who = format!("cluster {:?}", c.name);
    match (&c.kubernetes, &c.simulated) {
        (Some(_), Some(_)) => {
            errors.push(format!(
                "{who}: kubernetes and simulated exclude each other: name one backend ({CHOICES})"
            ));
            None
        }
        (None, None) => None,
        (None, Some(s)) => Some(ClusterBackend::Simulated {
            ready_delay_ms: s.ready_delay_ms,
        }),
        (Some(k), None) => {
            let in_cluster = k.in_cluster.unwrap_or(false);
            let kubeconfig = k.kubeconfig.as_deref().map(str::trim);
            match (in_cluster, kubeconfig) {
                (true, Some(_)) => {
                    errors.push(format!(
                        "{who}: kubernetes.inCluster and kubernetes.kubeconfig exclude each other"
                    ));
                    None
                }
                (true, None) if k.context.is_some() => {
                    errors.push(format!(
                        "{who}: kubernetes.context names a context of a kubeconfig; it does not go with inCluster"
                    ));
                    None
                }
                (true, None) => Some(ClusterBackend::InCluster),
                (false, Some("")) => {
                    errors.push(format!("{who}: kubernetes.kubeconfig: empty"));
                    None
                }
                (false, Some(path)) => {
                    let context = k.context.as_deref().map(str::trim);
                    if context == Some("") {
                        errors.push(format!("{who}: kubernetes.context: empty"));
                        return None;
                    }
                    Some(ClusterBackend::Kubeconfig {
                        path: path.to_owned(),
                        context: context.map(str::to_owned),
                    })
                }
                (false, None) => {
                    errors.push(format!(
                        "{who}: kubernetes: give kubeconfig: PATH (and context: NAME) or inCluster: true"
                    ));
                    None
                }
            }
        }
    }
}

/// One warning for every cluster that names no backend: `render` writes none, so
/// their agents refuse to start until their configuration names one (`relay up` and
/// `relay demo` simulate them, and say so). Not a compile warning: the simulator and
/// `relay up` simulate every such cluster, so only what renders for real says it.
pub(crate) fn unset_warning<'a>(unset: impl Iterator<Item = &'a str>) -> Option<String> {
    const SHOWN: usize = 5;
    let unset: Vec<&str> = unset.collect();
    if unset.is_empty() {
        return None;
    }
    let mut names = unset[..unset.len().min(SHOWN)]
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if unset.len() > SHOWN {
        names.push_str(&format!(" and {} more", unset.len() - SHOWN));
    }
    Some(format!(
        "{} cluster(s) name no backend ({names}): their rendered agents refuse to start until their configuration names one (`relay up` and `relay demo` simulate them); say how each agent reaches its cluster with {CHOICES}",
        unset.len()
    ))
}

/// Properties under `strata.dev/` are the agent's to report (which backend, whether it
/// reaches its cluster): a topology that sets one is refused, naming it.
pub(super) fn reserved_properties(c: &RawCluster, errors: &mut Vec<String>) {
    for key in c.properties.keys() {
        if key.starts_with(strata_protocol::model::AGENT_PROPERTY_PREFIX) {
            errors.push(format!(
                "cluster {:?}: properties: {key:?} is reserved: properties under {:?} are what the agent reports",
                c.name,
                strata_protocol::model::AGENT_PROPERTY_PREFIX
            ));
        }
    }
}
