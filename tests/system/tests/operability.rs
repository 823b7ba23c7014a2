//! What an operator sees of running nodes: `/healthz`, `/readyz` and `/metrics` of a
//! root, a relay that never reached its parent and an agent (the binaries, on
//! loopback), and their logs in each format. `/metrics` is written by
//! `prometheus-client`: the Prometheus text format by default, OpenMetrics when the
//! scraper asks as Prometheus does; `promtool check metrics` lints it.

#![allow(clippy::unwrap_used)]
#![allow(clippy::disallowed_methods)] // polls processes from a synchronous test

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{POS_APP, bin, free_port, http_get, relay_cli, write};
use strata_node::exposition;
use strata_relay::certs::Ca;

/// A node process, killed when dropped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `program` with `args` (and `env`), its standard error into `DIR/NAME.log`
/// (a file: not a terminal).
fn spawn(dir: &Path, name: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> Node {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut cmd = Command::new(bin(program));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("STRATA_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Node(cmd.spawn().unwrap())
}

/// The status code and body of `GET path`; code 0 while nothing listens.
fn get(port: u16, path: &str) -> (u16, String) {
    if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        return (0, String::new());
    }
    let response = http_get(port, path);
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// `GET /metrics` as Prometheus 3 asks for it (its default `Accept`); returns the
/// `Content-Type` and the body.
fn scrape_like_prometheus(port: u16) -> (String, String) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        tcp,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: {PROMETHEUS_ACCEPT}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    (content_type(head), body.to_owned())
}

const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

fn content_type(head: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default()
}

/// What `promtool check metrics` (Prometheus' own linter) says of `text`.
fn promtool_lint(promtool: &Path, text: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}{}",
        if out.status.success() { "" } else { "failed: " },
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The value of the sample `series` (name and labels, exactly as written).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

fn eventually(what: &str, dir: &Path, mut check: impl FnMut() -> bool) {
    for _ in 0..300 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let logs: Vec<String> = ["center", "lonely", "c1"]
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
            format!("--- {n}\n{text}")
        })
        .collect();
    panic!("timed out waiting until {what}\n{}", logs.join("\n"));
}

#[test]
fn probes_metrics_and_logs_of_a_root_a_cut_off_relay_and_an_agent() {
    // Installed (`.ci/install-prometheus`) before the nodes start, not between steps.
    let promtool = strata_test_tools::require(strata_test_tools::Tool::Promtool);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    for name in ["center", "lonely", "c1"] {
        ca.issue(name).unwrap().write_to(dir).unwrap();
    }
    let (root_port, api_port, root_ops) = (free_port(), free_port(), free_port());
    let (lonely_ops, agent_ops, nobody) = (free_port(), free_port(), free_port());
    let tls =
        |n: &str| format!("tls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}\ndata: data/{n}\n");
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{root_port}\nchildren: [c1]\n{}api: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\nmetrics: 127.0.0.1:{root_ops}\n",
            tls("center")
        ),
    );
    // Its parent's address has nothing behind it: it never connects.
    write(
        &dir.join("lonely.yaml"),
        &format!(
            "node: lonely\nparent: {{ name: center, address: 127.0.0.1:{nobody} }}\n{}metrics: 127.0.0.1:{lonely_ops}\n",
            tls("lonely")
        ),
    );
    write(
        &dir.join("c1.yaml"),
        &format!(
            "cluster: c1\nlabels: {{ role: pos }}\nparent: {{ name: center, address: 127.0.0.1:{root_port} }}\n{}simulated: {{ ready_delay_ms: 50 }}\nmetrics: 127.0.0.1:{agent_ops}\n",
            tls("c1")
        ),
    );
    let config = |n: &str| dir.join(format!("{n}.yaml")).display().to_string();
    let mut root = spawn(
        dir,
        "center",
        "relay",
        &["serve", "--config", &config("center")],
        &[("STRATA_LOG_FORMAT", "json")],
    );
    let _lonely = spawn(
        dir,
        "lonely",
        "relay",
        &["--log", "warn", "serve", "--config", &config("lonely")],
        &[("RUST_LOG", "debug")],
    );
    let _agent = spawn(
        dir,
        "c1",
        "agent",
        &["run", "--config", &config("c1")],
        &[("RUST_LOG", "warn")],
    );

    // Ready: the root's API listens; the agent reached its parent.
    eventually("the root and the agent are ready", dir, || {
        get(root_ops, "/readyz").0 == 200 && get(agent_ops, "/readyz").0 == 200
    });
    assert_eq!(get(root_ops, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(get(agent_ops, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(get(agent_ops, "/readyz").1, "ready: parent connected\n");
    // Alive but not ready: it never reached its parent and holds nothing from it.
    // (It may start last on a loaded machine.)
    eventually("the cut-off relay answers", dir, || {
        get(lonely_ops, "/healthz").0 == 200
    });
    let (code, why) = get(lonely_ops, "/readyz");
    assert_eq!(
        (code, why.as_str()),
        (
            503,
            "not ready: the parent was never reached and the store holds nothing from it\n"
        )
    );
    assert_eq!(get(root_ops, "/nothing").0, 404);

    // Applies at the root are counted by verb and code; the agent counts what it applied.
    write(&dir.join("app.yaml"), POS_APP);
    let (ok, _, err) = relay_cli(
        dir,
        api_port,
        &["apply", "-f", &dir.join("app.yaml").display().to_string()],
    );
    assert!(ok, "{err}");
    eventually("the agent applied both objects", dir, || {
        sample(
            &get(agent_ops, "/metrics").1,
            "strata_agent_applies_total{cluster=\"c1\"}",
        ) >= Some(2.0)
    });
    // A second change: its time from commit at the root to the agent's
    // acknowledgement is observed (the first acknowledgement of a new child is not).
    write(
        &dir.join("more.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: more, namespace: pos, labels: { app: pos } }\ndata: { k: v }\n",
    );
    let (ok, _, err) = relay_cli(
        dir,
        api_port,
        &["apply", "-f", &dir.join("more.yaml").display().to_string()],
    );
    assert!(ok, "{err}");
    eventually("the root observed c1's propagation lag", dir, || {
        sample(
            &get(root_ops, "/metrics").1,
            "strata_propagation_lag_seconds_count{node=\"center\",child=\"c1\"}",
        ) >= Some(1.0)
    });
    let (ok, _, err) = relay_cli(dir, api_port, &["clusters"]);
    assert!(ok, "{err}");
    let root_metrics = get(root_ops, "/metrics").1;
    exposition::check(&root_metrics).unwrap_or_else(|e| panic!("{e}\n{root_metrics}"));
    assert!(
        sample(
            &root_metrics,
            "strata_api_requests_total{verb=\"create\",code=\"200\"}"
        ) >= Some(1.0),
        "{root_metrics}"
    );
    assert!(
        sample(
            &root_metrics,
            "strata_api_request_duration_seconds_count{verb=\"get\",code=\"200\"}"
        ) >= Some(1.0),
        "{root_metrics}"
    );
    assert!(
        sample(
            &root_metrics,
            "strata_link_sent_bytes_total{node=\"center\",peer=\"c1\"}"
        ) > Some(0.0),
        "{root_metrics}"
    );
    assert_eq!(
        sample(
            &root_metrics,
            "strata_build_info{node=\"center\",version=\"0.1.0\"}"
        ),
        Some(1.0),
        "{root_metrics}"
    );
    let agent_metrics = get(agent_ops, "/metrics").1;
    exposition::check(&agent_metrics).unwrap_or_else(|e| panic!("{e}\n{agent_metrics}"));
    assert_eq!(
        sample(&agent_metrics, "strata_parent_connected{cluster=\"c1\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &agent_metrics,
            "strata_agent_apply_failures_total{cluster=\"c1\"}"
        ),
        Some(0.0)
    );
    exposition::check(&get(lonely_ops, "/metrics").1).unwrap();
    // Every node's process figures, for a soak to read leaks from: real processes hold
    // memory, descriptors (their sockets and stores) and tasks.
    for (who, text) in [("root", &root_metrics), ("agent", &agent_metrics)] {
        for name in [
            "process_resident_memory_bytes",
            "process_open_fds",
            "strata_tokio_alive_tasks",
        ] {
            let v = sample(text, name).unwrap_or_else(|| panic!("{who}: no {name}\n{text}"));
            assert!(v > 0.0, "{who}: {name} is {v}");
        }
    }
    // Without an Accept header: the Prometheus text format, its content type.
    let plain = http_get(root_ops, "/metrics");
    assert_eq!(
        content_type(plain.split_once("\r\n\r\n").unwrap().0),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    // As Prometheus asks: OpenMetrics, with the same samples.
    for (port, series) in [
        (
            root_ops,
            "strata_api_requests_total{verb=\"create\",code=\"200\"}",
        ),
        (agent_ops, "strata_agent_applies_total{cluster=\"c1\"}"),
    ] {
        let (kind, text) = scrape_like_prometheus(port);
        assert_eq!(
            kind,
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        exposition::check(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(sample(&text, series) >= Some(1.0), "{text}");
    }
    // Prometheus' own linter finds nothing to say (names, units, _total, HELP).
    for (node, text) in [("root", &root_metrics), ("agent", &agent_metrics)] {
        let said = promtool_lint(&promtool, text);
        assert!(said.trim().is_empty(), "promtool on the {node}: {said}");
    }

    // The parent gone, the agent stays ready: it keeps enforcing what it holds.
    // (SIGTERM: the root says goodbye, so the agent knows at once.)
    let stopped = Command::new("kill")
        .args(["-TERM", &root.0.id().to_string()])
        .status();
    assert!(stopped.unwrap().success());
    root.0.wait().unwrap();
    eventually("the agent saw its parent go", dir, || {
        sample(
            &get(agent_ops, "/metrics").1,
            "strata_parent_connected{cluster=\"c1\"}",
        ) == Some(0.0)
    });
    assert_eq!(
        get(agent_ops, "/readyz"),
        (
            200,
            "ready: parent away, enforcing the stored desired state\n".to_owned()
        )
    );

    // Logs: JSON lines from the root (STRATA_LOG_FORMAT), no colour codes in files, and
    // the level each was given.
    let root_log = std::fs::read_to_string(dir.join("center.log")).unwrap();
    assert!(root_log.lines().count() >= 2, "{root_log}");
    for line in root_log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    let lonely_log = std::fs::read_to_string(dir.join("lonely.log")).unwrap();
    assert!(
        !lonely_log.contains(" INFO ") && !lonely_log.contains(" DEBUG "),
        "--log warn over RUST_LOG=debug: {lonely_log}"
    );
    let agent_log = std::fs::read_to_string(dir.join("c1.log")).unwrap();
    assert!(!agent_log.contains(" INFO "), "RUST_LOG=warn: {agent_log}");
    for log in [&root_log, &lonely_log, &agent_log] {
        assert!(
            !log.contains('\u{1b}'),
            "a colour code in a log file: {log}"
        );
    }
}

/// What a client of the root's API port got: status, HTTP version, headers and body.
struct ApiAnswer {
    status: u16,
    version: hyper::Version,
    headers: hyper::HeaderMap,
    body: Vec<u8>,
}

/// `GET path` on the root's API port over TLS (the CA in `dir`), offering `alpn`, with
/// `headers`: as a Kubernetes client talks to it.
fn api_get(
    dir: &Path,
    port: u16,
    path: &str,
    alpn: &[&[u8]],
    headers: &[(&str, &str)],
) -> ApiAnswer {
    use http_body_util::BodyExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let config = strata_node::tls::api_client_config(&dir.join("ca.crt")).unwrap();
        let mut config = (*config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("center").unwrap();
        let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .unwrap();
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = hyper_util::rt::TokioIo::new(tls);
        let mut req = hyper::Request::get(format!("https://center:{port}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .unwrap();
        let resp = if h2 {
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                    .await
                    .unwrap();
            tokio::spawn(conn);
            send.send_request(req).await.unwrap()
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            send.send_request(req).await.unwrap()
        };
        let (parts, body) = resp.into_parts();
        ApiAnswer {
            status: parts.status.as_u16(),
            version: parts.version,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes().to_vec(),
        }
    })
}

/// The root's API port as load balancers and client-go meet it: `/livez`, `/readyz`,
/// `/healthz` and `/version` without a token (as kube-apiserver answers them to
/// anyone), everything else still refused without one; HTTP/2 when the client offers
/// it, HTTP/1.1 otherwise; a large list gzipped when asked, a small one not.
#[test]
fn the_api_port_answers_probes_without_a_token_speaks_http2_and_gzips_large_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    ca.issue("center").unwrap().write_to(dir).unwrap();
    let (root_port, api_port) = (free_port(), free_port());
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{root_port}\ntls: {{ cert: center.crt, key: center.key, ca: ca.crt }}\ndata: data/center\napi: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\n",
        ),
    );
    let config = dir.join("center.yaml").display().to_string();
    let _root = spawn(dir, "center", "relay", &["serve", "--config", &config], &[]);
    const H2: &[&[u8]] = &[b"h2", b"http/1.1"];
    const H1: &[&[u8]] = &[b"http/1.1"];
    eventually("the API answers /readyz", dir, || {
        std::net::TcpStream::connect(("127.0.0.1", api_port)).is_ok()
            && api_get(dir, api_port, "/readyz", H1, &[]).status == 200
    });
    let ready = api_get(dir, api_port, "/readyz", H2, &[]);
    assert_eq!(
        (
            ready.status,
            ready.version,
            String::from_utf8_lossy(&ready.body).into_owned()
        ),
        (
            200,
            hyper::Version::HTTP_2,
            "ready: root, API listening\n".to_owned()
        )
    );
    for path in ["/livez", "/healthz"] {
        let a = api_get(dir, api_port, path, H1, &[]);
        assert_eq!(
            (a.status, a.version, a.body.as_slice()),
            (200, hyper::Version::HTTP_11, &b"ok\n"[..]),
            "{path}"
        );
    }
    let version = api_get(dir, api_port, "/version", H2, &[]);
    let version: serde_json::Value = serde_json::from_slice(&version.body).unwrap();
    assert!(
        version["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.")),
        "{version}"
    );
    // Everything else still needs a token.
    let anonymous = api_get(dir, api_port, "/api/v1/namespaces", H2, &[]);
    assert_eq!(anonymous.status, 401);

    // 60 config maps of 4 KiB: a list of about 250 KiB, above kube-apiserver's 128 KiB.
    // They name no namespace: `relay apply` puts them in `default`, as kubectl would.
    let filler = "x".repeat(4096);
    let manifests: String = (0..60)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{ name: big-{i} }}\ndata: {{ filler: {filler} }}\n---\n"))
        .collect();
    write(&dir.join("big.yaml"), &manifests);
    let (ok, _, err) = relay_cli(
        dir,
        api_port,
        &["apply", "-f", &dir.join("big.yaml").display().to_string()],
    );
    assert!(ok, "{err}");
    let auth = ("Authorization", "Bearer s3cret");
    let plain = api_get(dir, api_port, "/api/v1/configmaps", H2, &[auth]);
    assert_eq!(
        (plain.status, plain.headers.get("content-encoding")),
        (200, None)
    );
    assert!(plain.body.len() > 128 * 1024, "{} bytes", plain.body.len());
    let packed = api_get(
        dir,
        api_port,
        "/api/v1/configmaps",
        H2,
        &[auth, ("Accept-Encoding", "gzip")],
    );
    assert_eq!(packed.status, 200);
    assert_eq!(
        packed
            .headers
            .get("content-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip")
    );
    let mut unpacked = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(packed.body.as_slice()),
        &mut unpacked,
    )
    .unwrap();
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_slice(&unpacked).unwrap(),
        serde_json::from_slice(&plain.body).unwrap(),
    );
    assert_eq!(a["items"], b["items"]);
    assert_eq!(a["items"].as_array().map(Vec::len), Some(60));
    println!(
        "a list of 60 config maps: {} bytes, {} gzipped",
        plain.body.len(),
        packed.body.len()
    );
    // A small answer goes as it is.
    let small = api_get(
        dir,
        api_port,
        "/api/v1/namespaces/default/configmaps/big-1",
        H1,
        &[auth, ("Accept-Encoding", "gzip")],
    );
    assert_eq!(
        (small.status, small.headers.get("content-encoding")),
        (200, None)
    );
}
