//! WATCH: the events after a resourceVersion, then each new one, streamed as JSON lines
//! until the watch's timeout or the client goes.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::Response;
use hyper::body::{Body, Bytes, Frame};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::routes::Target;
use super::store::Selector;
use super::{BoxBody, Inner};

/// A streaming body fed by a channel (for WATCH).
pub(super) struct ChannelBody(pub(super) mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

pub(super) fn start_watch(
    inner: Arc<Inner>,
    target: Target,
    selector: Selector,
    from: u64,
    timeout: u64,
) -> Response<BoxBody> {
    let (tx, rx) = mpsc::channel(64);
    let mut rv_rx = inner.rv.subscribe();
    tokio::spawn(async move {
        let mut sent = from;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        loop {
            let events: Vec<Value> = {
                let state = inner.state.lock().await;
                state
                    .objects
                    .history
                    .iter()
                    .filter(|e| e.rv > sent)
                    .filter(|e| {
                        e.group == target.resource.group && e.plural == target.resource.plural
                    })
                    .filter(|e| {
                        target.namespace.is_none()
                            || e.object["metadata"]["namespace"].as_str()
                                == target.namespace.as_deref()
                    })
                    .filter(|e| selector.matches(&e.object))
                    .map(|e| json!({"type": e.kind, "object": e.object}))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .chain(std::iter::once(
                        json!({"type": "_rv", "rv": state.objects.rv}),
                    ))
                    .collect()
            };
            for e in events {
                if e["type"] == "_rv" {
                    sent = e["rv"].as_u64().unwrap_or(sent);
                    continue;
                }
                if tx.send(Bytes::from(format!("{e}\n"))).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                r = rv_rx.changed() => if r.is_err() { return },
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tx.closed() => return,
            }
        }
    });
    let mut r = Response::new(BodyExt::boxed(ChannelBody(rx)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}
