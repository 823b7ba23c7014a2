//! The simulated cluster's small Kubernetes API, for the debug tunnel: enough for
//! `kubectl get pods`, `kubectl logs [-f]`, `kubectl get events` and `kubectl describe
//! pod` through the tiers. It is a fake and says so: each workload "runs" `replicas`
//! Pods named `NAME-HASH-I`, whose log is a growing text (one line a second since the
//! Pod was created), and whose events are the three a started Pod has. Nothing else
//! is served (404), and nothing can be written (405).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use strata_protocol::time::UnixMillis;
use tokio::sync::watch;

use crate::tunnel_body::{TunnelBody, full, status};

/// A Pod of a simulated workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimPod {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `Kind/name` of the workload that runs it.
    pub owner: String,
    /// When it was created (its workload applied).
    pub created: UnixMillis,
    /// Its container's image.
    pub image: String,
    /// Why it fails, for a workload that does.
    pub failure: Option<String>,
}

/// Where the simulated cluster publishes its Pods.
#[derive(Debug)]
pub struct PodBoard(watch::Sender<Arc<Vec<SimPod>>>);

impl Default for PodBoard {
    fn default() -> Self {
        PodBoard(watch::channel(Arc::new(Vec::new())).0)
    }
}

impl PodBoard {
    /// Replaces the Pods.
    pub fn publish(&self, pods: Vec<SimPod>) {
        self.0.send_replace(Arc::new(pods));
    }

    /// A view that follows the Pods.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Vec<SimPod>>> {
        self.0.subscribe()
    }
}

/// The simulated cluster's API.
#[derive(Debug, Clone)]
pub struct SimulatedApi {
    pods: watch::Receiver<Arc<Vec<SimPod>>>,
    volumes: Option<crate::sim_volumes::SimVolumes>,
}

/// Lines served from the end of a log at most (a real kubelet keeps a few MB).
const LOG_LINES: u64 = 1000;

fn now_ms() -> u64 {
    strata_node::clock::Clock::start().wall().0
}

fn json_response(v: &Value) -> Response<TunnelBody> {
    let mut r = Response::new(full(v.to_string()));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn age(created: UnixMillis) -> String {
    let s = now_ms().saturating_sub(created.0) / 1000;
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// The log line number `i` of `pod`.
fn log_line(pod: &SimPod, i: u64) -> String {
    format!(
        "{} {} serving request {i} (simulated)\n",
        UnixMillis(pod.created.0 + i * 1000).rfc3339(),
        pod.name
    )
}

impl SimulatedApi {
    /// An API over the Pods `pods` follows.
    pub fn new(pods: watch::Receiver<Arc<Vec<SimPod>>>) -> Self {
        SimulatedApi {
            pods,
            volumes: None,
        }
    }

    /// Serving these claims' bytes too (`/strata/volumes/...`).
    pub fn with_volumes(mut self, volumes: crate::sim_volumes::SimVolumes) -> Self {
        self.volumes = Some(volumes);
        self
    }

    /// The bytes of the cluster's claims, if it has any.
    pub fn volumes(&self) -> Option<&crate::sim_volumes::SimVolumes> {
        self.volumes.as_ref()
    }

    fn pod_json(p: &SimPod) -> Value {
        let (phase, ready) = match &p.failure {
            Some(_) => ("Pending", false),
            None => ("Running", true),
        };
        json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": { "name": p.name, "namespace": p.namespace, "uid": format!("sim-{}", p.name),
                          "creationTimestamp": UnixMillis(p.created.0).rfc3339(),
                          "annotations": { "strata.dev/simulated-by": p.owner } },
            "spec": { "containers": [ { "name": "main", "image": p.image } ], "nodeName": "simulated" },
            "status": { "phase": phase, "startTime": UnixMillis(p.created.0).rfc3339(),
                        "conditions": [ { "type": "Ready", "status": if ready { "True" } else { "False" } } ],
                        "containerStatuses": [ { "name": "main", "image": p.image, "ready": ready, "restartCount": 0,
                            "state": match &p.failure {
                                Some(r) => json!({ "waiting": { "reason": r } }),
                                None => json!({ "running": { "startedAt": UnixMillis(p.created.0).rfc3339() } }),
                            } } ] },
        })
    }

    fn events(pods: &[&SimPod]) -> Vec<Value> {
        pods.iter()
            .flat_map(|p| {
                [("Scheduled", "assigned to the simulated node"), ("Pulled", "image present"), ("Started", "started container main")]
                    .into_iter()
                    .map(move |(reason, message)| {
                        json!({
                            "kind": "Event", "apiVersion": "v1",
                            "metadata": { "name": format!("{}.{}", p.name, reason.to_lowercase()), "namespace": p.namespace,
                                          "creationTimestamp": UnixMillis(p.created.0).rfc3339() },
                            "involvedObject": { "kind": "Pod", "name": p.name, "namespace": p.namespace },
                            "reason": reason, "message": message, "type": "Normal", "count": 1,
                            "firstTimestamp": UnixMillis(p.created.0).rfc3339(), "lastTimestamp": UnixMillis(p.created.0).rfc3339(),
                            "source": { "component": "strata-simulated" },
                        })
                    })
            })
            .collect()
    }

    /// Answers one request.
    pub async fn answer(&self, req: Request<Incoming>) -> Response<TunnelBody> {
        if let (Some(volumes), true) = (
            &self.volumes,
            req.uri()
                .path()
                .starts_with(crate::sim_volumes_api::API_PREFIX),
        ) {
            return crate::sim_volumes_api::answer(volumes, req).await;
        }
        if req.method() != Method::GET {
            return status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "a simulated cluster's API is read-only".into(),
            );
        }
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        let table = req
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("as=Table"));
        let pods = self.pods.borrow().clone();
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let param = |name: &str| {
            query
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_owned())
        };
        let in_ns = |ns: Option<&str>| -> Vec<&SimPod> {
            pods.iter()
                .filter(|p| ns.is_none_or(|n| p.namespace == n))
                .collect()
        };
        match segs.as_slice() {
            ["version"] => json_response(&json!({
                "major": "1", "minor": "33", "gitVersion": "v1.33.0-strata-simulated",
                "platform": "simulated",
            })),
            ["api"] => json_response(&json!({ "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [] })),
            ["apis"] => {
                json_response(&json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": [] }))
            }
            ["api", "v1"] => json_response(&json!({
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                "resources": [
                    { "name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                      "verbs": ["get", "list"], "shortNames": ["po"] },
                    { "name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"] },
                    { "name": "events", "singularName": "event", "namespaced": true, "kind": "Event",
                      "verbs": ["get", "list"], "shortNames": ["ev"] },
                ],
            })),
            ["api", "v1", "pods"] => self.pod_list(&in_ns(None), table),
            ["api", "v1", "namespaces", ns, "pods"] => self.pod_list(&in_ns(Some(ns)), table),
            ["api", "v1", "events"] => {
                Self::event_list(&in_ns(None), table, param("fieldSelector"))
            }
            ["api", "v1", "namespaces", ns, "events"] => {
                Self::event_list(&in_ns(Some(ns)), table, param("fieldSelector"))
            }
            ["api", "v1", "namespaces", ns, "pods", name, rest @ ..] => {
                let Some(pod) = pods.iter().find(|p| p.namespace == *ns && p.name == *name) else {
                    return status(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        format!("pods \"{name}\" not found"),
                    );
                };
                match rest {
                    [] => json_response(&Self::pod_json(pod)),
                    ["log"] => Self::log(
                        pod.clone(),
                        param("follow").as_deref() == Some("true"),
                        param("tailLines").and_then(|t| t.parse().ok()),
                    ),
                    _ => status(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        format!("a simulated Pod has no {}", rest.join("/")),
                    ),
                }
            }
            _ => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("the simulated cluster does not serve {path}"),
            ),
        }
    }

    fn pod_list(&self, pods: &[&SimPod], table: bool) -> Response<TunnelBody> {
        if table {
            let rows: Vec<Value> = pods
                .iter()
                .map(|p| {
                    let (ready, st) = match &p.failure {
                        Some(r) => ("0/1", r.as_str()),
                        None => ("1/1", "Running"),
                    };
                    json!({ "cells": [p.name, ready, st, 0, age(p.created)],
                            "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                        "metadata": { "name": p.name, "namespace": p.namespace } } })
                })
                .collect();
            return json_response(&json!({
                "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
                "columnDefinitions": [
                    { "name": "Name", "type": "string", "format": "name" },
                    { "name": "Ready", "type": "string" }, { "name": "Status", "type": "string" },
                    { "name": "Restarts", "type": "integer" }, { "name": "Age", "type": "string" },
                ],
                "rows": rows,
            }));
        }
        let items: Vec<Value> = pods.iter().map(|p| Self::pod_json(p)).collect();
        json_response(
            &json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items }),
        )
    }

    fn event_list(pods: &[&SimPod], table: bool, field: Option<String>) -> Response<TunnelBody> {
        // `kubectl describe pod` asks for the events of one object.
        let about = field.as_deref().and_then(|f| {
            f.replace("%3D", "=")
                .replace("%2C", ",")
                .split(',')
                .find_map(|kv| kv.strip_prefix("involvedObject.name=").map(str::to_owned))
        });
        let pods: Vec<&SimPod> = pods
            .iter()
            .copied()
            .filter(|p| about.as_ref().is_none_or(|n| *n == p.name))
            .collect();
        let items = Self::events(&pods);
        if table {
            let rows: Vec<Value> = items
                .iter()
                .map(|e| {
                    json!({ "cells": [age(UnixMillis(0).max(pods.first().map_or(UnixMillis(0), |p| p.created))),
                                      e["type"], e["reason"], format!("pod/{}", e["involvedObject"]["name"].as_str().unwrap_or("")), e["message"]],
                            "object": { "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                        "metadata": e["metadata"] } })
                })
                .collect();
            return json_response(&json!({
                "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
                "columnDefinitions": [
                    { "name": "Last Seen", "type": "string" }, { "name": "Type", "type": "string" },
                    { "name": "Reason", "type": "string" }, { "name": "Object", "type": "string" },
                    { "name": "Message", "type": "string" },
                ],
                "rows": rows,
            }));
        }
        json_response(
            &json!({ "kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items }),
        )
    }

    fn log(pod: SimPod, follow: bool, tail: Option<u64>) -> Response<TunnelBody> {
        let lines = now_ms().saturating_sub(pod.created.0) / 1000 + 1;
        let keep = tail.unwrap_or(LOG_LINES).min(LOG_LINES);
        let first = lines.saturating_sub(keep);
        let text: String = (first..lines).map(|i| log_line(&pod, i)).collect();
        let body = if follow {
            let stream = futures_stream(pod, text, lines);
            StreamBody::new(stream).boxed_unsync()
        } else {
            full(text)
        };
        let mut r = Response::new(body);
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain"),
        );
        r
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The log so far, then a line a second while the reader stays.
fn futures_stream(
    pod: SimPod,
    text: String,
    next: u64,
) -> impl futures::Stream<Item = Result<Frame<hyper::body::Bytes>, BoxError>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        if tx.send(Ok(Frame::data(text.into()))).await.is_err() {
            return;
        }
        let mut i = next;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if tx
                .send(Ok(Frame::data(log_line(&pod, i).into())))
                .await
                .is_err()
            {
                return;
            }
            i += 1;
        }
    });
    tokio_stream_from(rx)
}

/// A stream over a channel's receiver.
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
