//! What the root's API counts: requests and their latency by verb and status code,
//! rendered by [`crate::metrics`].

use std::time::Duration;

use hyper::{Method, Request, StatusCode};
use strata_node::exposition::{Exposition, HistogramVec, Kind, LATENCY_BUCKETS};
use tokio::sync::Mutex;

/// Requests served by the API, by verb and code. Shared by the API's connections and
/// the metrics listener.
#[derive(Debug)]
pub struct ApiMetrics {
    latency: Mutex<HistogramVec>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics {
            latency: Mutex::new(HistogramVec::new(&["verb", "code"], LATENCY_BUCKETS)),
        }
    }
}

/// The Kubernetes-style verb of a request: `watch` for a GET with `watch=true` (or
/// `1`), `get` for any other GET (lists included), `create` (POST), `update` (PUT),
/// `patch`, `delete`; other methods lower-cased.
pub fn verb<B>(req: &Request<B>) -> &'static str {
    let watch = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
    });
    match *req.method() {
        Method::GET if watch => "watch",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::HEAD => "head",
        Method::OPTIONS => "options",
        _ => "other",
    }
}

impl ApiMetrics {
    /// Records one request: its verb, the status it was answered with, and how long the
    /// answer took to start (for a watch: until its stream opened).
    pub async fn observe(&self, verb: &'static str, code: StatusCode, took: Duration) {
        self.latency.lock().await.observe(
            vec![verb.to_owned(), code.as_u16().to_string()],
            took.as_secs_f64(),
        );
    }

    /// Writes the API's families.
    pub async fn render(&self, out: &mut Exposition) {
        let latency = self.latency.lock().await.clone();
        out.histogram(
            "strata_api_request_duration_seconds",
            "Time from a request to the start of its response at the root's API, by verb and code.",
            &latency,
        );
        let counts: Vec<_> = latency
            .series()
            .map(|(values, count)| {
                let labels = vec![("verb", values[0].clone()), ("code", values[1].clone())];
                (labels, count as f64)
            })
            .collect();
        out.family(
            "strata_api_requests_total",
            Kind::Counter,
            "Requests the root's API answered, by verb and code.",
            &counts,
        );
    }
}
