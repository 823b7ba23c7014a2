//! `relay up` of a topology whose links run over TLS/TCP through tinyproxy (the
//! `transport:` and `proxy:` fields rendered into each node's configuration) beside
//! links that do not, the root telling them apart (each child says how it reached its
//! parent), and the `relay` CLI reaching the root's API through the proxy
//! `HTTPS_PROXY` names: real processes on loopback, a real tinyproxy.

#![allow(clippy::unwrap_used)]
// integration tests may unwrap
// A synchronous test driving processes: there is no runtime for a sleep to block.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::proxies;
use hyper::Method;
use serde_json::Value;
use strata_relay::client::ApiClient;

/// Each link's `via`, by its child end: in `/status`, then in `/ui/api/tiers`.
type Vias = (Vec<(String, Value)>, Vec<(String, Value)>);

/// The `via` of each link in the root's `/status` (what `relay status` draws) and of
/// each relay's link in `/ui/api/tiers` (what the web view draws), by child end.
fn vias(rt: &tokio::runtime::Runtime, api: &ApiClient) -> Vias {
    let get = |path: &str| {
        let (code, v) = rt.block_on(api.request(Method::GET, path, None)).unwrap();
        assert!(code.is_success(), "GET {path}: {code} {v}");
        v
    };
    let status = get("/status");
    let links = status["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["node"].as_str().unwrap().to_owned(), l["via"].clone()))
        .collect();
    let tiers = get("/ui/api/tiers");
    let relays = tiers["relays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["link"]["via"].clone(),
            )
        })
        .collect();
    (links, relays)
}

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
    - {{ name: site-2, parent: center, transport: tcp }}
  clusters:
    - {{ name: shop-1, parent: site-1, transport: tcp, proxy: \"{via}\", labels: {{ role: pos }} }}
    - {{ name: shop-2, parent: site-2, transport: tcp, labels: {{ role: pos }} }}
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
    // Each child told its parent how it reached it: the root shows it in the JSON
    // `relay status` and the web view read (a link record from below may still be on
    // its way up).
    let var = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let api = ApiClient::new(
        var("STRATA_SERVER").parse::<SocketAddr>().unwrap(),
        &var("STRATA_SERVER_NAME"),
        std::path::Path::new(&var("STRATA_CA")),
        &var("STRATA_TOKEN"),
    )
    .unwrap();
    let expected = |node: &str| {
        if node.ends_with('1') {
            "proxied"
        } else {
            "direct"
        }
    };
    let told = |(links, relays): &Vias| {
        ["site-1", "site-2", "shop-1", "shop-2"]
            .iter()
            .all(|n| links.iter().any(|(l, v)| l == n && v == expected(n)))
            && ["site-1", "site-2"]
                .iter()
                .all(|n| relays.iter().any(|(r, v)| r == n && v == expected(n)))
    };
    let mut seen_vias = vias(&rt, &api);
    for _ in 0..100 {
        if told(&seen_vias) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        seen_vias = vias(&rt, &api);
    }
    // relay status names what each link runs on (the agent's with --agents).
    let status = Command::new(common::bin("relay"))
        .args(["status", "--agents"])
        .envs(env.clone())
        .output()
        .unwrap();
    common::stop_relay_up(&mut child);
    assert!(
        told(&seen_vias),
        "site-1 and shop-1 proxied, site-2 and shop-2 direct, in /status and /ui/api/tiers: {seen_vias:?}"
    );
    let tree = String::from_utf8_lossy(&status.stdout);
    for node in ["site-1", "shop-1", "site-2", "shop-2"] {
        let proxied = expected(node) == "proxied";
        let over = if proxied {
            " over tcp, proxied"
        } else {
            " over tcp"
        };
        assert!(
            tree.lines().any(|l| l.contains(&format!(" {node} "))
                && l.contains(over)
                && l.contains("proxied") == proxied),
            "{node}'s link{over} in relay status:\n{tree}{}",
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
