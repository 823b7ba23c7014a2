//! The few calls of etcd's v3 API the root's store makes, over etcd's JSON gateway
//! (`POST /v3/kv/range`, `/v3/kv/txn`, `/v3/lease/*`, `/v3/maintenance/status`,
//! `/v3/watch`), which every etcd since 3.4 serves on its client port beside gRPC.
//!
//! Why not a gRPC client: the maintained one (etcd-client, on tonic) compiles etcd's
//! `.proto` files at build time, so building Strata needed `protoc` (and Python to
//! fetch one), and it brought tonic, prost, axum and HTTP/2 into the tree for eight
//! calls. The gateway takes the same messages as JSON (bytes in base64, 64-bit
//! integers as strings) over HTTP/1.1, for which the node already has hyper and
//! tokio-rustls.
//!
//! Connections are kept and reused, one request at a time each; a connection that
//! fails, or a member that answers "unavailable", is dropped and the next call starts
//! with the next endpoint, so a member that dies or loses its quorum is left behind
//! by [`super::etcd_store::retrying`]. TCP keep-alives notice a member that vanishes
//! under an idle watch.

mod json;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;
use tokio::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

pub(super) use self::json::{EtcdError, Range, WatchResponse};
use self::json::{header_revision, int, kv, status_error, watch_response};

/// How long a connection to a member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a unary call may take once sent.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A condition of a transaction.
#[derive(Debug, Clone)]
pub(super) enum Compare {
    /// The key holds this value.
    ValueIs(Vec<u8>, Vec<u8>),
    /// The key does not exist (its create revision is 0).
    Absent(Vec<u8>),
}

/// A write of a transaction.
#[derive(Debug, Clone)]
pub(super) enum Op {
    /// Put a value, bound to a lease if given.
    Put(Vec<u8>, Vec<u8>, Option<i64>),
    /// Delete one key.
    Delete(Vec<u8>),
}

/// One etcd member's client URL, parsed.
#[derive(Debug, Clone)]
struct Endpoint {
    /// `host:port`, as dialled and sent in `Host`.
    authority: String,
    /// The host alone: the TLS server name.
    host: String,
    tls: bool,
}

/// A client of an etcd cluster; cheap to clone (the connections are shared).
#[derive(Clone)]
pub(super) struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    endpoints: Vec<Endpoint>,
    tls: Option<tokio_rustls::TlsConnector>,
    /// The endpoint the next new connection tries first.
    next: AtomicUsize,
    /// Connections that finished their last call and may take another.
    idle: Mutex<Vec<Conn>>,
}

/// An HTTP/1.1 connection to one member, and that member's `host:port` (its `Host`).
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
}

impl Conn {
    fn request(&self, path: &str, body: &Value) -> Result<hyper::Request<Full<Bytes>>, EtcdError> {
        hyper::Request::post(path)
            .header(hyper::header::HOST, &self.authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| EtcdError::Transport(e.to_string()))
    }
}

impl Client {
    /// A client of the members at `endpoints` (`http://IP:PORT`, `https://NAME:PORT`,
    /// or `IP:PORT` for plain HTTP), with `tls` for `https://` ones. Connects lazily.
    pub(super) fn new(
        endpoints: &[String],
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Client, String> {
        let endpoints = endpoints
            .iter()
            .map(|e| parse_endpoint(e))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err("no etcd endpoint is configured".into());
        }
        if tls.is_none()
            && let Some(e) = endpoints.iter().find(|e| e.tls)
        {
            return Err(format!(
                "https://{} needs etcd TLS settings (a CA at least)",
                e.authority
            ));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                tls: tls.map(tokio_rustls::TlsConnector::from),
                next: AtomicUsize::new(0),
                idle: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The value of one key.
    pub(super) async fn get(&self, key: &[u8]) -> Result<Range, EtcdError> {
        self.range(json!({ "key": B64.encode(key) })).await
    }

    /// Every key under `prefix`, at one revision.
    pub(super) async fn get_prefix(&self, prefix: &[u8]) -> Result<Range, EtcdError> {
        self.range(json!({
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_end(prefix)),
        }))
        .await
    }

    async fn range(&self, request: Value) -> Result<Range, EtcdError> {
        let r = self.call("/v3/kv/range", &request).await?;
        let kvs = match r.get("kvs") {
            Some(Value::Array(kvs)) => kvs.iter().map(kv).collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        Ok(Range {
            revision: header_revision(&r),
            kvs,
        })
    }

    /// Applies `ops` at once if every condition of `when` holds; whether they did.
    pub(super) async fn txn(&self, when: &[Compare], ops: &[Op]) -> Result<bool, EtcdError> {
        let compare: Vec<Value> = when
            .iter()
            .map(|c| match c {
                Compare::ValueIs(k, v) => json!({
                    "target": "VALUE", "result": "EQUAL",
                    "key": B64.encode(k), "value": B64.encode(v),
                }),
                Compare::Absent(k) => json!({
                    "target": "CREATE", "result": "EQUAL",
                    "key": B64.encode(k), "create_revision": "0",
                }),
            })
            .collect();
        let success: Vec<Value> = ops
            .iter()
            .map(|op| match op {
                Op::Put(k, v, lease) => {
                    let mut put = json!({ "key": B64.encode(k), "value": B64.encode(v) });
                    if let Some(l) = lease {
                        put["lease"] = json!(l.to_string());
                    }
                    json!({ "request_put": put })
                }
                Op::Delete(k) => json!({ "request_delete_range": { "key": B64.encode(k) } }),
            })
            .collect();
        let r = self
            .call(
                "/v3/kv/txn",
                &json!({ "compare": compare, "success": success }),
            )
            .await?;
        Ok(r.get("succeeded").and_then(Value::as_bool).unwrap_or(false))
    }

    /// A new lease of `ttl_s` seconds; its id.
    pub(super) async fn lease_grant(&self, ttl_s: i64) -> Result<i64, EtcdError> {
        let r = self
            .call("/v3/lease/grant", &json!({ "TTL": ttl_s.to_string() }))
            .await?;
        int(&r, "ID").ok_or_else(|| EtcdError::Decode("a lease grant without an ID".into()))
    }

    /// Ends a lease (and deletes the keys bound to it).
    pub(super) async fn lease_revoke(&self, lease: i64) -> Result<(), EtcdError> {
        self.call("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .await
            .map(|_| ())
    }

    /// Renews a lease once; its remaining TTL in seconds (0 or less: it is gone).
    pub(super) async fn lease_keep_alive(&self, lease: i64) -> Result<i64, EtcdError> {
        let r = self
            .call("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))
            .await?;
        // A streaming call: the gateway wraps each answer in `result`.
        let r = r.get("result").unwrap_or(&r);
        Ok(int(r, "TTL").unwrap_or(0))
    }

    /// The size of the member's database file, in bytes.
    pub(super) async fn db_size(&self) -> Result<u64, EtcdError> {
        let r = self.call("/v3/maintenance/status", &json!({})).await?;
        let size = int(&r, "dbSize")
            .or_else(|| int(&r, "db_size"))
            .unwrap_or(0);
        Ok(u64::try_from(size).unwrap_or(0))
    }

    /// Watches every key under `prefix` from revision `from` on.
    pub(super) async fn watch_prefix(&self, prefix: &[u8], from: i64) -> Result<Watch, EtcdError> {
        let request = json!({ "create_request": {
            "key": B64.encode(prefix),
            "range_end": B64.encode(prefix_end(prefix)),
            "start_revision": from.to_string(),
        }});
        // A watch holds its connection for as long as it runs: a new one, never pooled.
        let mut conn = self.connection(false).await?;
        let request = conn.request("/v3/watch", &request)?;
        let response = conn
            .sender
            .send_request(request)
            .await
            .map_err(|e| EtcdError::Transport(format!("etcd watch: {e}")))?;
        if !response.status().is_success() {
            let status = response.status();
            let body = response.into_body().collect().await.map(|b| b.to_bytes());
            return Err(status_error(status, &body.unwrap_or_default()));
        }
        Ok(Watch {
            body: response.into_body(),
            buffered: Vec::new(),
            _conn: conn,
        })
    }

    /// One unary call: the answer's JSON, or etcd's error.
    async fn call(&self, path: &str, request: &Value) -> Result<Value, EtcdError> {
        let mut conn = self.connection(true).await?;
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            let request = conn.request(path, request)?;
            let response = conn
                .sender
                .send_request(request)
                .await
                .map_err(|e| EtcdError::Transport(format!("etcd {path}: {e}")))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| EtcdError::Transport(format!("etcd {path}: {e}")))?
                .to_bytes();
            Ok::<_, EtcdError>((status, body))
        })
        .await;
        let (status, body) = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(self.failed(e)),
            Err(_) => {
                return Err(self.failed(EtcdError::Transport(format!(
                    "etcd {path}: no answer in {CALL_TIMEOUT:?}"
                ))));
            }
        };
        if !status.is_success() {
            let e = status_error(status, &body);
            // The connection is sound; the member may not be (no quorum): move on.
            return Err(if e.transient() {
                self.failed(e)
            } else {
                self.keep(conn, e).await
            });
        }
        let value =
            serde_json::from_slice(&body).map_err(|e| EtcdError::Decode(format!("{path}: {e}")))?;
        Ok(self.keep(conn, value).await)
    }

    /// Puts a connection back for the next call; returns `v`.
    async fn keep<T>(&self, conn: Conn, v: T) -> T {
        self.inner.idle.lock().await.push(conn);
        v
    }

    /// A call failed on its connection (dropped by the caller): the next new
    /// connection starts with the next member.
    fn failed(&self, e: EtcdError) -> EtcdError {
        self.inner.next.fetch_add(1, Ordering::Relaxed);
        e
    }

    /// An idle connection (if `reuse`) that is still open, or a new one to the first
    /// member that answers, starting with the one after the last failure.
    async fn connection(&self, reuse: bool) -> Result<Conn, EtcdError> {
        let idle = || async { self.inner.idle.lock().await.pop() };
        while let Some(mut conn) = if reuse { idle().await } else { None } {
            // Fails at once when the member closed it meanwhile.
            let ready = tokio::time::timeout(Duration::from_secs(1), conn.sender.ready()).await;
            if matches!(ready, Ok(Ok(()))) {
                return Ok(conn);
            }
        }
        let n = self.inner.endpoints.len();
        let first = self.inner.next.load(Ordering::Relaxed);
        let mut errors = Vec::new();
        for i in 0..n {
            let endpoint = &self.inner.endpoints[(first + i) % n];
            match tokio::time::timeout(CONNECT_TIMEOUT, self.connect(endpoint)).await {
                Ok(Ok(sender)) => {
                    self.inner.next.store((first + i) % n, Ordering::Relaxed);
                    let authority = endpoint.authority.clone();
                    return Ok(Conn { sender, authority });
                }
                Ok(Err(e)) => errors.push(format!("{}: {e}", endpoint.authority)),
                Err(_) => errors.push(format!(
                    "{}: no connection in {CONNECT_TIMEOUT:?}",
                    endpoint.authority
                )),
            }
        }
        Err(EtcdError::Transport(format!(
            "no etcd member could be reached ({})",
            errors.join("; ")
        )))
    }

    async fn connect(&self, endpoint: &Endpoint) -> Result<SendRequest<Full<Bytes>>, String> {
        let tcp = tokio::net::TcpStream::connect(&endpoint.authority)
            .await
            .map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        // A member that vanishes (host down, partition) under a quiet watch is noticed
        // within about 6 s, as HTTP/2 pings would.
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(2))
            .with_interval(Duration::from_secs(2))
            .with_retries(2);
        socket2::SockRef::from(&tcp)
            .set_tcp_keepalive(&keepalive)
            .map_err(|e| e.to_string())?;
        match (&self.inner.tls, endpoint.tls) {
            (Some(tls), true) => {
                let name = rustls_pki_types::ServerName::try_from(endpoint.host.clone())
                    .map_err(|e| format!("{}: {e}", endpoint.host))?;
                let stream = tls.connect(name, tcp).await.map_err(|e| e.to_string())?;
                handshake(stream).await
            }
            _ => handshake(tcp).await,
        }
    }
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<IO>(io: IO) -> Result<SendRequest<Full<Bytes>>, String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// A running watch: its answers, one at a time.
pub(super) struct Watch {
    body: hyper::body::Incoming,
    /// Bytes read past the last whole answer.
    buffered: Vec<u8>,
    /// Keeps the connection open.
    _conn: Conn,
}

impl Watch {
    /// The next answer; `None` once the member closed the watch.
    pub(super) async fn message(&mut self) -> Result<Option<WatchResponse>, EtcdError> {
        loop {
            // The gateway writes one JSON object per line.
            if let Some(end) = self.buffered.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffered.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return watch_response(&line).map(Some);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffered.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(EtcdError::Transport(format!("etcd watch: {e}"))),
                None if self.buffered.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                None => {
                    let line = std::mem::take(&mut self.buffered);
                    return watch_response(&line).map(Some);
                }
            }
        }
    }
}

/// The end of the range of keys that start with `prefix`: the prefix with its last
/// byte below 0xff incremented (etcd's `WithPrefix`); `\0`, every key, if none is.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn parse_endpoint(url: &str) -> Result<Endpoint, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if url.contains("://") {
        return Err(format!(
            "etcd endpoint {url:?}: only http:// and https:// are spoken"
        ));
    } else {
        (false, url)
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => (h, p),
        _ => return Err(format!("etcd endpoint {url:?}: expected HOST:PORT")),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok(Endpoint {
        authority: format!(
            "{}:{port}",
            if host.contains(':') {
                format!("[{host}]")
            } else {
                host.clone()
            }
        ),
        host,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_after_its_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"root/"), b"root0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), vec![b'b']);
        assert_eq!(prefix_end(&[0xff]), vec![0]);
    }

    #[test]
    fn endpoints_parse_with_and_without_a_scheme() {
        let e = parse_endpoint("http://127.0.0.1:2379").unwrap();
        assert_eq!((e.authority.as_str(), e.tls), ("127.0.0.1:2379", false));
        let e = parse_endpoint("https://etcd-0.example:2379/").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.host.as_str(), e.tls),
            ("etcd-0.example:2379", "etcd-0.example", true)
        );
        let e = parse_endpoint("https://[::1]:2379").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.host.as_str()),
            ("[::1]:2379", "::1")
        );
        assert!(parse_endpoint("unix:///run/etcd.sock").is_err());
        assert!(parse_endpoint("http://etcd").is_err());
    }
}
