//! The fake's Pod subresources: `log` (a text of fixed-size lines, and with
//! `follow=true` a stream at the rate the test sets) and `exec` over WebSocket
//! (`v5.channel.k8s.io`, what kubectl 1.33 asks for first), answering a command with
//! its own words on stdout: enough to see bytes cross a connection upgrade.

use std::time::Duration;

use base64::Engine as _;
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{BoxBody, ChannelBody};

/// Bytes of one log line, newline included.
pub const LINE: usize = 100;

fn line(pod: &str, i: u64) -> String {
    let head = format!("{pod} line {i:08} ");
    format!("{head}{}\n", "x".repeat(LINE - 1 - head.len()))
}

/// A Pod's log: 10 lines, then with `follow` lines at `rate` bytes a second until the
/// reader goes.
pub fn log(pod: &str, follow: bool, rate: u64) -> Response<BoxBody> {
    let first: String = (0..10).map(|i| line(pod, i)).collect();
    let body = if follow {
        let (tx, rx) = mpsc::channel::<Bytes>(8);
        let pod = pod.to_owned();
        tokio::spawn(async move {
            if tx.send(Bytes::from(first)).await.is_err() {
                return;
            }
            // Every 20 ms, what the rate allows (at least a line).
            let per_tick = (rate / 50).max(LINE as u64) / LINE as u64;
            let mut i = 10;
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            loop {
                tick.tick().await;
                let chunk: String = (i..i + per_tick).map(|n| line(&pod, n)).collect();
                i += per_tick;
                if tx.send(Bytes::from(chunk)).await.is_err() {
                    return;
                }
            }
        });
        ChannelBody(rx).boxed()
    } else {
        http_body_util::Full::new(Bytes::from(first)).boxed()
    };
    let mut r = Response::new(body);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    r
}

/// Whether a request asks to upgrade to WebSocket.
pub fn is_websocket(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

fn accept_key(key: &str) -> String {
    let mut input = key.as_bytes().to_vec();
    input.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A server frame (unmasked, binary) of the v5 channel protocol.
fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let len = data.len() + 1;
    let mut f = vec![0x82];
    if len < 126 {
        f.push(len as u8);
    } else {
        f.push(126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    }
    f.push(channel);
    f.extend_from_slice(data);
    f
}

/// `exec` over WebSocket: the command (its `command=` words) is echoed on stdout, then
/// success on the error channel, then a close frame.
pub fn exec(mut req: Request<Incoming>, query: &str) -> Response<BoxBody> {
    let key = req
        .headers()
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let protocol = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .find(|p| p.starts_with("v5.") || p.starts_with("v4."))
        .unwrap_or("v4.channel.k8s.io")
        .to_owned();
    let words: Vec<String> = query
        .split('&')
        .filter_map(|kv| kv.strip_prefix("command="))
        .map(super::decode)
        .collect();
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(up) = upgrade.await else { return };
        let mut io = TokioIo::new(up);
        let out = format!("{}\n", words.join(" "));
        let _ = io.write_all(&frame(1, out.as_bytes())).await;
        let _ = io
            .write_all(&frame(3, br#"{"metadata":{},"status":"Success"}"#))
            .await;
        // Close, 1000 (normal): kubectl reports any other code as an error.
        let _ = io.write_all(&[0x88, 0x02, 0x03, 0xe8]).await;
        let _ = io.flush().await;
        // Read until the client closes, so that nothing is cut short.
        let mut sink = [0u8; 1024];
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    });
    let mut r = Response::new(http_body_util::Empty::new().map_err(|e| match e {}).boxed());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(hyper::header::UPGRADE, "websocket".parse().unwrap());
    h.insert(hyper::header::CONNECTION, "Upgrade".parse().unwrap());
    h.insert("sec-websocket-accept", accept_key(&key).parse().unwrap());
    h.insert("sec-websocket-protocol", protocol.parse().unwrap());
    r
}
