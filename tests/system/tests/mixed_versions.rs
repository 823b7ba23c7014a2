//! A hierarchy of binaries speaking different protocol versions (each narrowed with
//! `STRATA_PROTOCOL_VERSIONS`, as an older or a newer build would speak): a parent one
//! version ahead of its child and a child one version ahead of its parent agree on the
//! version both speak and deliver; with no version in common, the parent refuses the
//! child by name (`UnsupportedVersion`, both ranges in the reason) and the child says so.

#![allow(clippy::unwrap_used)]
#![allow(clippy::disallowed_methods)] // polls processes from a synchronous test

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{POS_APP, bin, free_port, http_get, write};
use strata_protocol::wire::MAX_PROTOCOL_VERSION as MAX;
use strata_relay::certs::Ca;

/// A node process, killed when dropped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const NODES: [&str; 7] = [
    "new-root",
    "old-root",
    "yesterday",
    "future",
    "tomorrow",
    "t1",
    "later",
];

/// Starts `relay serve` or `agent run` for `name`, speaking `versions` (the build's
/// own range when `None`), JSON logs into `DIR/NAME.log`.
fn spawn(dir: &Path, name: &str, program: &str, versions: Option<&str>) -> Node {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let verb = if program == "relay" { "serve" } else { "run" };
    let mut cmd = Command::new(bin(program));
    cmd.args(["--log", "info", "--log-format", "json", verb, "--config"])
        .arg(dir.join(format!("{name}.yaml")))
        .env_remove("STRATA_PROTOCOL_VERSIONS")
        .stdout(Stdio::null())
        .stderr(log);
    if let Some(v) = versions {
        cmd.env("STRATA_PROTOCOL_VERSIONS", v);
    }
    Node(cmd.spawn().unwrap())
}

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
}

fn eventually(what: &str, dir: &Path, mut check: impl FnMut() -> bool) {
    for _ in 0..600 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let logs: Vec<String> = NODES
        .iter()
        .map(|n| format!("--- {n}\n{}", log(dir, n)))
        .collect();
    panic!("timed out waiting until {what}\n{}", logs.join("\n"));
}

/// The `fields` of every JSON log line of `name` whose message is `message`.
fn events(dir: &Path, name: &str, message: &str) -> Vec<serde_json::Value> {
    log(dir, name)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["fields"].clone())
        .filter(|f| f["message"] == message)
        .collect()
}

/// The version `parent` opened `child`'s session with, once it has.
fn opened_with(dir: &Path, parent: &str, child: &str) -> Option<u64> {
    events(dir, parent, "child session opened")
        .iter()
        .find(|f| f["child"] == child)
        .and_then(|f| f["version"].as_u64())
}

/// `relay apply -f FILE` at the API of root `root` (its certificate names it).
fn apply(dir: &Path, root: &str, api_port: u16, file: &str) -> bool {
    Command::new(bin("relay"))
        .args(["apply", "-f", file])
        .env("STRATA_SERVER", format!("127.0.0.1:{api_port}"))
        .env("STRATA_SERVER_NAME", root)
        .env("STRATA_CA", dir.join("ca.crt"))
        .env("STRATA_TOKEN", "s3cret")
        .output()
        .unwrap()
        .status
        .success()
}

/// Objects the agent serving metrics on `port` holds.
fn objects(port: u16, cluster: &str) -> f64 {
    if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        return 0.0;
    }
    let series = format!("strata_agent_objects{{cluster=\"{cluster}\"}} ");
    http_get(port, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str())?.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn mixed_versions_agree_or_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    for name in NODES {
        ca.issue(name).unwrap().write_to(dir).unwrap();
    }
    let tls =
        |n: &str| format!("tls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}\ndata: data/{n}\n");
    let root = |name: &str, port: u16, api: u16, children: &str| {
        write(
            &dir.join(format!("{name}.yaml")),
            &format!(
                "node: {name}\nlisten: 127.0.0.1:{port}\nchildren: [{children}]\n{}api: {{ listen: 127.0.0.1:{api}, tokens: tokens }}\n",
                tls(name)
            ),
        );
    };
    let agent = |name: &str, parent: &str, port: u16, ops: u16| {
        write(
            &dir.join(format!("{name}.yaml")),
            &format!(
                "cluster: {name}\nlabels: {{ role: pos }}\nparent: {{ name: {parent}, address: 127.0.0.1:{port} }}\n{}simulated: {{ ready_delay_ms: 50 }}\nmetrics: 127.0.0.1:{ops}\n",
                tls(name)
            ),
        );
    };
    let (new_port, new_api, old_port, old_api) =
        (free_port(), free_port(), free_port(), free_port());
    let (tomorrow_port, later_ops) = (free_port(), free_port());
    let (yesterday_ops, future_ops, t1_ops) = (free_port(), free_port(), free_port());
    // Today's root (the build's 1..=MAX) below which: yesterday's agent (1) and one from
    // a future that dropped every version this build speaks (MAX + 1).
    root("new-root", new_port, new_api, "yesterday, future");
    agent("yesterday", "new-root", new_port, yesterday_ops);
    agent("future", "new-root", new_port, future_ops);
    // Yesterday's root (1) below which: today's relay (1..=MAX) with an agent, and a
    // relay from a future that speaks 2..=MAX + 1.
    root("old-root", old_port, old_api, "tomorrow, later");
    write(
        &dir.join("tomorrow.yaml"),
        &format!(
            "node: tomorrow\nlisten: 127.0.0.1:{tomorrow_port}\nchildren: [t1]\nparent: {{ name: old-root, address: 127.0.0.1:{old_port} }}\n{}",
            tls("tomorrow")
        ),
    );
    agent("t1", "tomorrow", tomorrow_port, t1_ops);
    write(
        &dir.join("later.yaml"),
        &format!(
            "node: later\nparent: {{ name: old-root, address: 127.0.0.1:{old_port} }}\n{}metrics: 127.0.0.1:{later_ops}\n",
            tls("later")
        ),
    );
    let future = (MAX + 1).to_string();
    let later = format!("2..={}", MAX + 1);
    let _nodes = [
        spawn(dir, "new-root", "relay", None),
        spawn(dir, "yesterday", "agent", Some("1")),
        spawn(dir, "future", "agent", Some(&future)),
        spawn(dir, "old-root", "relay", Some("1..=1")),
        spawn(dir, "tomorrow", "relay", None),
        spawn(dir, "t1", "agent", None),
        spawn(dir, "later", "relay", Some(&later)),
    ];

    // Parent ahead, and child ahead: both agree on version 1 and the app arrives.
    write(&dir.join("app.yaml"), POS_APP);
    let app = dir.join("app.yaml").display().to_string();
    for (root, api) in [("new-root", new_api), ("old-root", old_api)] {
        eventually("a root takes the app", dir, || apply(dir, root, api, &app));
    }
    eventually(
        "yesterday's agent and the agent below today's relay hold the app",
        dir,
        || objects(yesterday_ops, "yesterday") >= 2.0 && objects(t1_ops, "t1") >= 2.0,
    );
    assert_eq!(opened_with(dir, "new-root", "yesterday"), Some(1));
    assert_eq!(opened_with(dir, "old-root", "tomorrow"), Some(1));
    // Today's relay and its agent speak today's version between them.
    assert_eq!(opened_with(dir, "tomorrow", "t1"), Some(u64::from(MAX)));

    // No version in common: refused by name, at the parent and at the child.
    let refused = |parent: &str, child: &str, reason: &str| {
        eventually(&format!("{parent} refuses {child}"), dir, || {
            events(dir, parent, "child session closed")
                .iter()
                .any(|f| f["child"] == child && f["code"] == "UnsupportedVersion")
                && events(dir, child, "closing the link to the parent")
                    .iter()
                    .any(|f| {
                        f["code"] == "UnsupportedVersion"
                            && f["reason"]
                                == format!("parent closed the session: {reason}").as_str()
                    })
        });
        assert_eq!(
            opened_with(dir, parent, child),
            None,
            "{}",
            log(dir, parent)
        );
    };
    refused(
        "new-root",
        "future",
        &format!("child speaks versions {future}..={future}, this parent 1..={MAX}"),
    );
    refused(
        "old-root",
        "later",
        &format!("child speaks versions {later}, this parent 1..=1"),
    );
    // Never having reached its parent, neither is ready, and the agent holds nothing.
    for ops in [future_ops, later_ops] {
        let response = http_get(ops, "/readyz");
        assert!(response.starts_with("HTTP/1.1 503"), "{response}");
    }
    assert_eq!(objects(future_ops, "future"), 0.0);
}
