//! Rendered relay configurations load with `relay serve`'s own parser and say what the
//! topology says; re-rendering changes nothing; `relay topology validate` exits as the
//! topology deserves.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::path::Path;
use std::process::Command;

use strata_relay::config::NodeConfig;
use strata_topology::certs::{Action, CertOptions, issue_all};
use strata_topology::files;
use strata_topology::render::{Process, RenderOptions, render};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: t }
spec:
  root: { name: center, listen: 127.0.0.1:7443, api: 127.0.0.1:8443 }
  relays:
    - { name: eu, parent: center, listen: 0.0.0.0:7450, address: 127.0.0.2:7450, labels: { region: eu, odd: \"false\" } }
    - { name: eu-1, parent: eu }
  clusters:
    - { name: shop-1, parent: eu-1, labels: { role: pos } }
  joining:
    - { parent: eu, tokens: 2 }
";

#[test]
fn rendered_relay_configs_load_and_re_rendering_is_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = strata_topology::parse(TOPOLOGY, Path::new("t.yaml"))
        .unwrap()
        .topology;
    let options = RenderOptions {
        metrics_everywhere: true,
        summary_interval_ms: Some(100),
        simulated_ready_delay_ms: None,
        simulate_unset: false,
    };
    let first = render(&t, dir, &options).unwrap();
    let relays: Vec<NodeConfig> = first
        .nodes
        .iter()
        .filter(|n| n.process == Process::Relay)
        .map(|n| NodeConfig::load(&n.config).unwrap())
        .collect();
    let [center, eu, eu1] = &relays[..] else {
        panic!("{relays:?}")
    };
    assert!(center.is_root());
    assert_eq!(center.listen, Some("127.0.0.1:7443".parse().unwrap()));
    assert_eq!(
        center.api.as_ref().unwrap().listen,
        "127.0.0.1:8443".parse().unwrap()
    );
    assert_eq!(center.children, ["eu"]);
    assert_eq!(eu.listen, Some("0.0.0.0:7450".parse().unwrap()));
    assert_eq!(eu.labels["odd"], "false");
    assert_eq!(eu.children, ["eu-1"]);
    let p = eu1.parent.as_ref().unwrap();
    assert_eq!(
        (p.name.as_str(), p.address.clone()),
        ("eu", "127.0.0.2:7450".parse().unwrap()),
        "children dial the relay's address, not its wildcard listen"
    );
    let auto = eu1.listen.unwrap();
    assert!(auto.ip().is_loopback() && auto.port() != 0, "{auto}");
    assert_eq!(eu1.children, ["shop-1"]);
    assert!(eu1.metrics.is_some());
    assert_eq!(eu1.tls.cert, files::node_cert(dir, "eu-1"));
    assert_eq!(eu1.summary_interval.as_millis(), 100);

    let again = render(&t, dir, &options).unwrap();
    assert!(
        again.files.iter().all(|(_, a)| *a == Action::Kept),
        "{:?}",
        again.files
    );
    assert_eq!(again.nodes, first.nodes, "assigned ports are kept");
}

fn relay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_relay"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_names_every_error_and_denies_warnings_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: strata.dev/v1alpha1\nkind: Topology\nmetadata: { name: t }\nspec:\n  root: { name: center }\n  relays:\n    - { name: eu-1, parent: us-0 }\n    - { name: a, parent: b }\n    - { name: b, parent: a }\n",
    )
    .unwrap();
    let (ok, _, err) = relay(&["topology", "validate", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("relay \"eu-1\": parent \"us-0\" is not defined"),
        "{err}"
    );
    assert!(err.contains("cycle: a -> b -> a"), "{err}");

    let lonely = tmp.path().join("lonely.yaml");
    std::fs::write(
        &lonely,
        "apiVersion: strata.dev/v1alpha1\nkind: Topology\nmetadata: { name: t }\nspec:\n  root: { name: center }\n  relays:\n    - { name: eu, parent: center }\n",
    )
    .unwrap();
    let (ok, out, err) = relay(&["topology", "validate", lonely.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("is valid"), "{out}");
    assert!(
        err.contains("warning:") && err.contains("\"eu\": has no children"),
        "{err}"
    );
    let (ok, _, err) = relay(&[
        "topology",
        "validate",
        "--deny-warnings",
        lonely.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("denied by --deny-warnings"), "{err}");
}

/// `TOPOLOGY` written to `dir/t.yaml` and `relay topology certs` run for it into
/// `dir/out`: the file, the output directory and what certs printed.
fn certified(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let file = dir.join("t.yaml");
    std::fs::write(&file, TOPOLOGY).unwrap();
    let out = dir.join("out");
    let (f, o) = (file.to_str().unwrap(), out.to_str().unwrap());
    let (ok, printed, err) = relay(&["topology", "certs", f, "-o", o]);
    assert!(ok, "{err}");
    (file, out, printed)
}

#[test]
fn certs_and_render_commands_are_idempotent() {
    let tmp = tempfile::tempdir().unwrap();
    let (file, out, first) = certified(tmp.path());
    let (f, o) = (file.to_str().unwrap(), out.to_str().unwrap());
    // The first files are listed (then "... and N more"); eu's join tokens among all.
    assert!(
        first.contains("created") && files::join_tokens(&out, "eu").exists(),
        "{first}"
    );
    let key = std::fs::read(files::node_key(&out, "eu")).unwrap();
    let (ok, again, err) = relay(&["topology", "certs", f, "-o", o]);
    assert!(ok, "{err}");
    assert!(again.contains("0 created, 0 replaced"), "{again}");
    assert_eq!(std::fs::read(files::node_key(&out, "eu")).unwrap(), key);

    let (ok, _, err) = relay(&["topology", "render", f, "-o", o]);
    assert!(ok, "{err}");
    let (ok, again, err) = relay(&["topology", "render", f, "-o", o]);
    assert!(ok, "{err}");
    assert!(again.contains("0 created, 0 replaced, 4 kept"), "{again}");
    NodeConfig::load(&files::node_config(&out, "eu")).unwrap();
}

/// `render --systemd`: each relay's unit directory names every file beside its
/// configuration (the root's API tokens copied in), keys readable by their owner
/// only, and the relay's own loader accepts it; `--helm`'s configuration names the
/// pod's layout. Re-rendering keeps every file.
#[test]
fn render_for_systemd_and_helm_lays_out_every_file_a_node_names() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let (file, out, _) = certified(tmp.path());
    let (f, o) = (file.to_str().unwrap(), out.to_str().unwrap());
    let args = ["topology", "render", "--helm", "--systemd", f, "-o", o];
    let (ok, _, err) = relay(&args);
    assert!(ok, "{err}");
    let (ok, again, err) = relay(&args);
    assert!(ok, "{err}");
    assert!(again.contains(" 0 replaced,"), "{again}");

    let unit = files::node_systemd(&out, "center");
    let center = NodeConfig::load(&unit.join("config.yaml")).unwrap();
    let api = center.api.unwrap();
    assert_eq!(api.tokens, unit.join("api.tokens"));
    assert_eq!(
        std::fs::read(&api.tokens).unwrap(),
        std::fs::read(files::api_tokens(&out)).unwrap()
    );
    assert_eq!(center.tls.key, unit.join("node.key"));
    assert_eq!(center.data, unit.join("data"));
    let mode = std::fs::metadata(&center.tls.key)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    let eu = NodeConfig::load(&files::node_systemd(&out, "eu").join("config.yaml")).unwrap();
    let join = eu.join.unwrap();
    assert!(join.tokens.exists() && join.ca_key.exists(), "{join:?}");
    assert!(
        files::node_dir(&out, "eu")
            .join("strata-relay.service")
            .exists()
    );
    assert!(
        files::node_dir(&out, "shop-1")
            .join("strata-agent.service")
            .exists()
    );

    // The pod's layout: a secret volume beside the configuration's, the store on the
    // state volume; the Secret manifest is its owner's only.
    let values = std::fs::read_to_string(files::node_helm_values(&out, "eu")).unwrap();
    assert!(
        values.contains("  tls: { cert: \"../secret/node.crt\", key: \"../secret/node.key\", ca: \"../secret/ca.crt\" }\n  data: \"../state/data\"\n"),
        "{values}"
    );
    let secret = files::node_helm_secret(&out, "eu");
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    let manifest = std::fs::read_to_string(secret).unwrap();
    for key in [
        "node.crt",
        "node.key",
        "ca.crt",
        "join.tokens",
        "join-ca.crt",
        "join-ca.key",
    ] {
        assert!(
            manifest.contains(&format!("  \"{key}\": ")),
            "{key}: {manifest}"
        );
    }
}

/// Relays named like the hierarchy's files: `ca` (Canada), `ports`, `api`.
const NAMES: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: names }
spec:
  root: { name: api }
  relays:
    - { name: ca, parent: api }
    - { name: ports, parent: ca }
  clusters:
    - { name: join, parent: ports }
  joining:
    - { parent: ca, tokens: 1 }
";

#[test]
fn relays_named_ca_ports_and_api_get_their_own_identity_and_leave_the_hierarchys_files_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t = strata_topology::parse(NAMES, Path::new("names.yaml"))
        .unwrap()
        .topology;
    issue_all(&t, dir, &CertOptions::default()).unwrap();
    let options = RenderOptions::default();
    let first = render(&t, dir, &options).unwrap();
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let ca_key = std::fs::canonicalize(dir.join("ca.key")).unwrap();
    let ca_cert = read(&dir.join("ca.crt"));
    for node in first.nodes.iter().filter(|n| n.process == Process::Relay) {
        // `relay serve`'s own parser reads what each relay would load.
        let c = NodeConfig::load(&node.config).unwrap();
        assert_eq!(c.node, node.name);
        let key = std::fs::canonicalize(&c.tls.key).unwrap();
        assert_ne!(key, ca_key, "{}: its key is the CA key", node.name);
        assert_ne!(read(&key), read(&ca_key), "{}: holds the CA key", node.name);
        assert_ne!(
            read(&c.tls.cert),
            ca_cert,
            "{}: its cert is the CA's",
            node.name
        );
        assert_eq!(read(&c.tls.ca), ca_cert, "{}", node.name);
        if let Some(join) = &c.join {
            assert_ne!(std::fs::canonicalize(&join.ca_key).unwrap(), ca_key);
            assert_ne!(read(&join.ca_key), read(&ca_key));
        }
        // Every relay here has children: it signs their renewals with its own
        // intermediate CA, never the hierarchy's key.
        let renew = c
            .renew
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no renew:", node.name));
        let (renew_cert, renew_key) = renew.ca.as_ref().unwrap();
        assert_eq!(
            std::fs::canonicalize(renew_cert).unwrap(),
            std::fs::canonicalize(files::join_ca_cert(dir, &node.name)).unwrap()
        );
        assert_ne!(std::fs::canonicalize(renew_key).unwrap(), ca_key);
        let signer = strata_relay::renew::Signer::load(&node.name, Some(renew), c.join.as_ref())
            .unwrap()
            .unwrap();
        assert!(signer.intermediate_der().is_some(), "{}", node.name);
        strata_node::tls::Identity::load(&c.tls.cert, &c.tls.key, &c.tls.ca)
            .unwrap_or_else(|e| panic!("{}: {e}", node.name));
    }
    // The root's API still reads the hierarchy's tokens: one, intact.
    let root = NodeConfig::load(&first.nodes[0].config).unwrap();
    let tokens = root.api.unwrap().tokens;
    assert_eq!(
        std::fs::canonicalize(&tokens).unwrap(),
        std::fs::canonicalize(dir.join("api.tokens")).unwrap()
    );
    let tokens = String::from_utf8(read(&tokens)).unwrap();
    assert_eq!(tokens.lines().count(), 1, "{tokens}");
    assert_eq!(tokens.trim().len(), 32, "{tokens}");
    // ports.yaml still holds the ports: re-rendering reads it and keeps every address.
    let ports = String::from_utf8(read(&dir.join("ports.yaml"))).unwrap();
    assert!(ports.contains("ports.listen:"), "{ports}");
    let again = render(&t, dir, &options).unwrap();
    assert_eq!(again.nodes, first.nodes, "assigned ports are kept");
}

#[test]
fn parent_address_transport_and_proxy_reach_the_rendered_configs() {
    let text = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: t }
spec:
  root: { name: center, listen: 127.0.0.1:7443, api: 127.0.0.1:8443 }
  relays:
    - { name: eu, parent: center, parentAddress: center.relays.example.com:7443, transport: auto, keepaliveMs: 20000 }
  clusters:
    - { name: shop-1, parent: eu, transport: tcp, proxy: \"http://u:p@proxy.lan:3128\" }
";
    let tmp = tempfile::tempdir().unwrap();
    let t = strata_topology::parse(text, Path::new("t.yaml"))
        .unwrap()
        .topology;
    let rendered = render(&t, tmp.path(), &RenderOptions::default()).unwrap();
    let eu = rendered.nodes.iter().find(|n| n.name == "eu").unwrap();
    let p = NodeConfig::load(&eu.config).unwrap().parent.unwrap();
    assert_eq!(p.address.to_string(), "center.relays.example.com:7443");
    assert_eq!(p.transport, strata_node::dial::TransportMode::Auto);
    assert_eq!(p.proxy, None);
    assert_eq!(
        p.keep_alive,
        std::time::Duration::from_secs(20),
        "keepaliveMs reaches the node config"
    );
    // The replicas of a root on etcd: a comma-separated list, every one dialed.
    let replicas = text.replace(
        "center.relays.example.com:7443",
        "\"center-0.example.com:7443, 10.0.0.2:7443\"",
    );
    let t = strata_topology::parse(&replicas, Path::new("t.yaml"))
        .unwrap()
        .topology;
    let again = render(&t, tmp.path(), &RenderOptions::default()).unwrap();
    let eu = again.nodes.iter().find(|n| n.name == "eu").unwrap();
    let p2 = NodeConfig::load(&eu.config).unwrap().parent.unwrap();
    assert_eq!(
        p2.address.to_string(),
        "center-0.example.com:7443,10.0.0.2:7443"
    );
    assert_eq!(p2.address.each().len(), 2);
    let shop = rendered.nodes.iter().find(|n| n.name == "shop-1").unwrap();
    let conf = std::fs::read_to_string(&shop.config).unwrap();
    assert!(
        conf.contains("transport: tcp") && conf.contains("proxy: \"http://u:p@proxy.lan:3128\""),
        "{conf}"
    );

    let bad = text
        .replace("transport: auto", "transport: udp")
        .replace("transport: tcp, ", "transport: quic, ")
        .replace("keepaliveMs: 20000", "keepaliveMs: 5")
        .replace(
            "center.relays.example.com:7443",
            "\"10.0.0.1:7443,no port\"",
        );
    let errors = strata_topology::parse(&bad, Path::new("t.yaml"))
        .err()
        .unwrap()
        .to_string();
    for fault in [
        "relay \"eu\": transport: \"udp\" is not a transport: expected auto, quic or tcp",
        "relay \"eu\": parentAddress: \"no port\" is not an address of the form IP:PORT or HOST:PORT",
        "cluster \"shop-1\": proxy: a proxy carries TLS over TCP only: set `transport: tcp` or `auto`",
        "relay \"eu\": keepaliveMs: 5 is out of range: expected 100 to 3600000 (milliseconds)",
    ] {
        assert!(errors.contains(fault), "missing {fault:?} in:\n{errors}");
    }
    // Without `transport` the node's default, `auto`, takes the proxy.
    let unsaid = text.replace("transport: tcp, ", "");
    assert!(strata_topology::parse(&unsaid, Path::new("t.yaml")).is_ok());
}
