//! List and watch the objects of one kind that carry the agent's label, and tell the
//! worker what is there. One task per kind, owned by the worker's `JoinSet`.

use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::api::{DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::discovery::ApiResource;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{MANAGED_LABEL, MANAGED_VALUE};

/// An object on the cluster, by what the API server calls it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ObjectRef {
    pub(super) group: String,
    pub(super) kind: String,
    pub(super) namespace: Option<String>,
    pub(super) name: String,
}

impl ObjectRef {
    pub(super) fn of(ar: &ApiResource, o: &DynamicObject) -> ObjectRef {
        ObjectRef {
            group: ar.group.clone(),
            kind: ar.kind.clone(),
            namespace: o.metadata.namespace.clone(),
            name: o.metadata.name.clone().unwrap_or_default(),
        }
    }
}

/// What a watcher saw.
#[derive(Debug)]
pub(super) enum Seen {
    /// An object's current state.
    Live(ObjectRef, Value),
    /// An object is gone.
    Gone(ObjectRef),
    /// A full list of the kind's managed objects (after the watch had to start over):
    /// what is not in it is gone.
    Listed {
        group: String,
        kind: String,
        objects: Vec<(ObjectRef, Value)>,
    },
}

/// The label selector of every list and watch.
pub(super) fn managed_selector() -> String {
    format!("{MANAGED_LABEL}={MANAGED_VALUE}")
}

/// Lists the kind's objects that match `selector`, with the resourceVersion to watch
/// from.
pub(super) async fn list(
    api: &Api<DynamicObject>,
    ar: &ApiResource,
    selector: &str,
) -> Result<(Vec<(ObjectRef, Value)>, String), kube::Error> {
    let list = api.list(&ListParams::default().labels(selector)).await?;
    let rv = list.metadata.resource_version.clone().unwrap_or_default();
    let objects = list
        .items
        .iter()
        .map(|o| (ObjectRef::of(ar, o), to_value(ar, o)))
        .collect();
    Ok((objects, rv))
}

/// A live object as JSON, with its apiVersion and kind (list items may lack them).
pub(super) fn to_value(ar: &ApiResource, o: &DynamicObject) -> Value {
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
        m.insert("kind".into(), Value::String(ar.kind.clone()));
    }
    v
}

/// Watches the objects matching `selector` from `rv` until the receiver goes away;
/// starts over with a list when the API server says the position is too old.
pub(super) async fn follow(
    api: Api<DynamicObject>,
    ar: ApiResource,
    selector: String,
    mut rv: String,
    tx: mpsc::UnboundedSender<Seen>,
) {
    let params = WatchParams::default().labels(&selector).timeout(290);
    loop {
        let mut relist = false;
        match api.watch(&params, &rv).await {
            Ok(stream) => {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    let seen = match event {
                        Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                            rv = o.metadata.resource_version.clone().unwrap_or(rv);
                            Seen::Live(ObjectRef::of(&ar, &o), to_value(&ar, &o))
                        }
                        Ok(WatchEvent::Deleted(o)) => {
                            rv = o.metadata.resource_version.clone().unwrap_or(rv);
                            Seen::Gone(ObjectRef::of(&ar, &o))
                        }
                        Ok(WatchEvent::Bookmark(b)) => {
                            rv = b.metadata.resource_version;
                            continue;
                        }
                        Ok(WatchEvent::Error(e)) => {
                            tracing::debug!(kind = %ar.kind, error = %e.message, "watch restarts with a list");
                            relist = true;
                            break;
                        }
                        Err(e) => {
                            tracing::debug!(kind = %ar.kind, error = %e, "watch stream broke");
                            break;
                        }
                    };
                    if tx.send(seen).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(kind = %ar.kind, error = %e, "cannot watch; retrying");
                relist = true;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        if relist {
            match list(&api, &ar, &selector).await {
                Ok((objects, new_rv)) => {
                    rv = new_rv;
                    let listed = Seen::Listed {
                        group: ar.group.clone(),
                        kind: ar.kind.clone(),
                        objects,
                    };
                    if tx.send(listed).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(kind = %ar.kind, error = %e, "cannot list; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}
