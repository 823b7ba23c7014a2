//! Joining with a token, with the binaries: `relay up` of a topology with a `joining:`
//! entry (its relay configured with the rendered `join:`), then `agent run` of an agent
//! the topology does not list, configured with a token. It joins, keeps its key and
//! certificate in its data directory, is known at the root, and a restart connects with
//! the saved certificate without joining again; a second agent with the same token is
//! refused with a message naming the relay; a token added by `relay join-token create`
//! while the relay runs admits a third.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use common::{Proc, bin, write};
use strata_topology::files;

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: joins }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center, labels: { region: eu } }
  clusters:
    - { name: shop-1, parent: eu }
  joining:
    - { parent: eu, tokens: 2 }
";

struct Up(Child);

impl Drop for Up {
    /// SIGTERM so that `relay up` stops its nodes, then SIGKILL after 30 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        for _ in 0..300 {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn eventually(what: &str, mut check: impl FnMut() -> bool, logs: &Path) {
    for _ in 0..600 {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let tail = |n: &str| std::fs::read_to_string(logs.join(n)).unwrap_or_default();
    panic!(
        "timed out waiting until {what}\n--- eu\n{}\n--- joined-1\n{}",
        tail("data/logs/eu.log"),
        tail("joined-1.log")
    );
}

fn agent_config(dir: &Path, cluster: &str, token: &str, eu: std::net::SocketAddr) -> String {
    let path = dir.join(format!("{cluster}.yaml"));
    write(
        &path,
        &format!(
            "cluster: {cluster}\nlabels: {{ role: pos }}\nparent: {{ name: eu, address: \"{eu}\" }}\njoin: {{ token: \"{token}\", ca: data/ca.crt }}\ndata: {cluster}-data\nsimulated: {{ ready_delay_ms: 100 }}\n"
        ),
    );
    path.display().to_string()
}

#[test]
fn an_agent_run_joins_once_with_its_token_and_restarts_on_its_saved_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let file = t.join("joins.yaml");
    write(&file, TOPOLOGY);
    let dir = t.join("data");
    let (child, lines) = common::relay_up(&file, &dir);
    let up = Up(child);
    let export = lines
        .iter()
        .find(|line| line.contains("export STRATA_SERVER="));
    let export = export.expect("relay up printed no STRATA_* line");
    let env = common::export_env(&export);
    let eu = strata_relay::config::NodeConfig::load(&files::node_config(&dir, "eu")).unwrap();
    assert!(eu.join.is_some(), "the rendered eu config has no join:");
    let eu_addr = eu.listen.unwrap();
    let tokens = std::fs::read_to_string(files::join_tokens(&dir, "eu")).unwrap();
    let token = tokens.lines().next().unwrap().trim().to_owned();

    let config = agent_config(t, "joined-1", &token, eu_addr);
    let metrics = eu.metrics.unwrap().port();
    let connected = || {
        common::http_get(metrics, "/metrics")
            .contains("strata_child_lag{node=\"eu\",child=\"joined-1\"}")
    };
    let agent = Proc::spawn(t, "joined-1", &bin("agent"), &["run", "--config", &config]);
    eventually("eu admits joined-1", connected, t);
    assert!(t.join("joined-1-data/joined-1.crt").exists());
    assert!(t.join("joined-1-data/joined-1.key").exists());
    eventually(
        "the root lists joined-1 below eu",
        || {
            let out = Command::new(bin("relay"))
                .arg("clusters")
                .envs(env.clone())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            text.lines()
                .any(|l| l.contains("center/eu") && l.contains("joined-1"))
        },
        t,
    );

    // A restart uses the saved certificate: no second join, and it connects again.
    assert!(agent.terminate().success());
    eventually("eu sees joined-1 leave", || !connected(), t);
    let agent = Proc::spawn(t, "joined-1", &bin("agent"), &["run", "--config", &config]);
    eventually("eu admits joined-1 again", connected, t);
    let log = std::fs::read_to_string(t.join("joined-1.log")).unwrap();
    assert_eq!(
        log.matches("joining with a token").count(),
        0,
        "the restarted agent joined again:\n{log}"
    );

    // Another agent with the same token: refused, the message names the relay.
    let config = agent_config(t, "joined-2", &token, eu_addr);
    let out = Command::new(bin("agent"))
        .args(["run", "--config", &config])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error: relay \"eu\" refused to admit \"joined-2\": the join token was already used (by \"joined-1\")"
        ),
        "{err}"
    );
    assert!(!t.join("joined-2-data/joined-2.crt").exists());

    // A join token added while eu runs (`relay join-token create`) admits a new agent
    // once eu has read its file again.
    let fresh = common::stdout_ok(
        Command::new(bin("relay"))
            .args(["join-token", "create", "--parent", "eu", "--uses", "1"])
            .args(["--expires", "1h", "--dir"])
            .arg(&dir),
    );
    eventually(
        "eu reads its join tokens again",
        || {
            std::fs::read_to_string(dir.join("logs/eu.log"))
                .unwrap_or_default()
                .lines()
                .any(|l| l.contains("tokens-reload") && l.contains("join.tokens"))
        },
        t,
    );
    let config = agent_config(t, "joined-3", &fresh, eu_addr);
    let third = Proc::spawn(t, "joined-3", &bin("agent"), &["run", "--config", &config]);
    eventually(
        "eu admits joined-3 with the new token",
        || {
            common::http_get(metrics, "/metrics")
                .contains("strata_child_lag{node=\"eu\",child=\"joined-3\"}")
        },
        t,
    );
    assert!(third.terminate().success());

    assert!(agent.terminate().success());
    drop(up);
}

/// A site whose network passes only TCP through its proxy: the agent, forced to TLS/TCP
/// through tinyproxy, joins with its token over that link (the request and answer as
/// control messages), then connects with its new certificate the same way.
#[test]
fn an_agent_joins_with_its_token_over_tls_tcp_through_tinyproxy() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let proxy = rt.block_on(common::proxies::tinyproxy(&t.join("proxy"), 600));
    let file = t.join("joins.yaml");
    write(&file, TOPOLOGY);
    let dir = t.join("data");
    let (child, lines) = common::relay_up(&file, &dir);
    let up = Up(child);
    lines
        .iter()
        .find(|line| line.contains("every link is connected"))
        .expect("relay up never connected every link");
    let eu = strata_relay::config::NodeConfig::load(&files::node_config(&dir, "eu")).unwrap();
    let eu_addr = eu.listen.unwrap();
    let tokens = std::fs::read_to_string(files::join_tokens(&dir, "eu")).unwrap();
    let token = tokens.lines().next().unwrap().trim().to_owned();
    let config = t.join("joined-tcp.yaml");
    write(
        &config,
        &format!(
            "cluster: joined-tcp\nparent: {{ name: eu, address: \"{eu_addr}\", transport: tcp, proxy: \"{}\" }}\njoin: {{ token: \"{token}\", ca: data/ca.crt }}\ndata: joined-tcp-data\nsimulated: {{}}\n",
            proxy.url(None)
        ),
    );
    let metrics = eu.metrics.unwrap().port();
    let agent = Proc::spawn(
        t,
        "joined-tcp",
        &bin("agent"),
        &["run", "--config", &config.display().to_string()],
    );
    eventually(
        "eu admits joined-tcp",
        || {
            common::http_get(metrics, "/metrics")
                .contains("strata_child_lag{node=\"eu\",child=\"joined-tcp\"}")
        },
        t,
    );
    assert!(t.join("joined-tcp-data/joined-tcp.crt").exists());
    let log = std::fs::read_to_string(t.join("joined-tcp.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("joining") && l.contains("transport=tcp") && l.contains("remote=")),
        "the join went over TLS/TCP:\n{log}"
    );
    // Two tunnels to eu through the proxy: the join's, then the link's.
    let tunnels = proxy
        .log_text()
        .matches(&format!("CONNECT {eu_addr}"))
        .count();
    assert!(
        tunnels >= 2,
        "{tunnels} tunnels to {eu_addr}:\n{}",
        proxy.log_text()
    );
    assert!(agent.terminate().success());
    drop(up);
}
