//! `relay up` of a topology whose links run over TLS/TCP through tinyproxy (the
//! `transport:` and `proxy:` fields rendered into each node's configuration), and the
//! `relay` CLI reaching the root's API through the proxy `HTTPS_PROXY` names: real
//! processes on loopback, a real tinyproxy.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::proxies;

#[test]
fn nodes_and_the_cli_reach_their_parents_and_the_api_through_tinyproxy() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let proxy = rt.block_on(proxies::tinyproxy(tmp.path(), 600));
    let via = proxy.url(None);
    let file = tmp.path().join("proxied.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: {{ name: proxied }}
spec:
  root: {{ name: center }}
  relays:
    - {{ name: site-1, parent: center, transport: tcp, proxy: \"{via}\" }}
  clusters:
    - {{ name: shop-1, parent: site-1, transport: tcp, proxy: \"{via}\", labels: {{ role: pos }} }}
"
        ),
    )
    .unwrap();
    let dir = tmp.path().join("data");
    let (mut child, lines) = common::relay_up(&file, &dir);
    let mut export = None;
    let mut seen = Vec::new();
    for _ in 0..1200 {
        match lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                if line.contains("export STRATA_SERVER=") {
                    export = Some(line.clone());
                }
                seen.push(line);
                if export.is_some() && seen.iter().any(|l| l.contains("every link is connected")) {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    let Some(export) = export else {
        common::stop_relay_up(&mut child);
        panic!("relay up never connected every link:\n{}", seen.join("\n"));
    };
    let env = common::export_env(&export);
    let cli = |proxy_url: &str| {
        Command::new(common::bin("relay"))
            .args(["clusters"])
            .envs(env.clone())
            .env("HTTPS_PROXY", proxy_url)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output()
            .unwrap()
    };
    // Every link is up; the cluster's report may still be on its way to the root.
    let mut out = cli(&via);
    for _ in 0..100 {
        if !out.status.success() || String::from_utf8_lossy(&out.stdout).contains("shop-1") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        out = cli(&via);
    }
    let refused = cli("http://127.0.0.1:1");
    // relay status names what each link runs on (the agent's with --agents).
    let status = Command::new(common::bin("relay"))
        .args(["status", "--agents"])
        .envs(env.clone())
        .output()
        .unwrap();
    common::stop_relay_up(&mut child);
    let tree = String::from_utf8_lossy(&status.stdout);
    for node in ["site-1", "shop-1"] {
        assert!(
            tree.lines()
                .any(|l| l.contains(node) && l.contains(" over tcp")),
            "{node}'s link over tcp in relay status:\n{tree}{}",
            String::from_utf8_lossy(&status.stderr)
        );
    }

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("shop-1"),
        "relay clusters through the proxy: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = env
        .iter()
        .find(|(k, _)| k == "STRATA_SERVER")
        .map(|(_, v)| v.clone())
        .unwrap();
    let log = proxy.log_text();
    assert!(
        log.contains(&format!("CONNECT {server}")),
        "the CLI did not go through tinyproxy to {server}:\n{log}"
    );
    // The site relay's and the agent's links: two more tunnels at least.
    let tunnels = log.matches("Request (file descriptor").count();
    assert!(tunnels >= 3, "{tunnels} tunnels:\n{log}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("cannot reach the proxy http://127.0.0.1:1"),
        "{err}"
    );
}
