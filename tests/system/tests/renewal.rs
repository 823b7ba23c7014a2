//! Certificate renewal without downtime, with real processes on loopback: a relay
//! (`eu`) whose certificate lasts 20 seconds renews it through the root over its open
//! session (the session is not reopened), and keeps working past the first
//! certificate's expiry: its agent reconnects to it (served with the renewed
//! certificate), it reconnects to a restarted root (presenting the renewed one from
//! memory), and it restarts from its files (written durably). A child asking for a
//! certificate naming another node is refused, and the refusal is in the audit log.

#![allow(clippy::unwrap_used)]
#![allow(clippy::disallowed_methods)] // polls processes from a synchronous test

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{POS_APP, bin, free_port, http_get, write};
use strata_node::link::Link;
use strata_node::tls::{self, Identity};
use strata_node::transport;
use strata_protocol::codec::DEFAULT_MAX_FRAME;
use strata_protocol::wire::{
    ChildToParent, Hello, MAX_PROTOCOL_VERSION, ParentToChild, RenewReply, Role,
};
use strata_relay::certs::{Ca, join_request};
use strata_topology::certs::{pem_not_after, unix_now};

/// A node process, killed when dropped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const NODES: [&str; 3] = ["center", "eu", "pos-1"];

/// Starts `relay serve` or `agent run` for `name`, JSON logs appended to
/// `DIR/NAME.log`.
fn spawn(dir: &Path, name: &str, program: &str) -> Node {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .unwrap();
    let verb = if program == "relay" { "serve" } else { "run" };
    let child = Command::new(bin(program))
        .args(["--log", "info", "--log-format", "json", verb, "--config"])
        .arg(dir.join(format!("{name}.yaml")))
        .env_remove("STRATA_PROTOCOL_VERSIONS")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Node(child)
}

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
}

fn eventually(what: &str, dir: &Path, mut check: impl FnMut() -> bool) {
    for _ in 0..900 {
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

/// Every JSON log line of `name` (target and fields).
fn lines(dir: &Path, name: &str) -> Vec<serde_json::Value> {
    log(dir, name)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect()
}

/// Audit lines of `name` with this action.
fn audits(dir: &Path, name: &str, action: &str) -> Vec<serde_json::Value> {
    lines(dir, name)
        .into_iter()
        .filter(|v| v["target"] == "audit" && v["fields"]["action"] == action)
        .collect()
}

/// How many times `parent` logged child `child` connected.
fn connections(dir: &Path, parent: &str, child: &str) -> usize {
    lines(dir, parent)
        .iter()
        .filter(|v| v["fields"]["message"] == "child connected" && v["fields"]["child"] == child)
        .count()
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

fn apply(dir: &Path, api_port: u16, file: &str) -> bool {
    Command::new(bin("relay"))
        .args(["apply", "-f", file])
        .env("STRATA_SERVER", format!("127.0.0.1:{api_port}"))
        .env("STRATA_SERVER_NAME", "center")
        .env("STRATA_CA", dir.join("ca.crt"))
        .env("STRATA_TOKEN", "s3cret")
        .output()
        .unwrap()
        .status
        .success()
}

/// Connects to `center` as `rogue` (a child it admits), opens a session, and asks for
/// a certificate naming `eu`: the answer.
async fn renew_as_someone_else(ca: &Ca, port: u16) -> RenewReply {
    let identity = Identity::issue(ca, "rogue").unwrap();
    let endpoint = transport::client_endpoint(
        "127.0.0.1:0".parse().unwrap(),
        tls::client_config(&identity).unwrap(),
    )
    .unwrap();
    let conn = transport::connect(&endpoint, ([127, 0, 0, 1], port).into(), "center")
        .await
        .unwrap();
    let (tx, mut rx) =
        transport::split::<ChildToParent, ParentToChild>(Link::Quic(conn), DEFAULT_MAX_FRAME);
    tx.send(ChildToParent::Hello(Hello {
        min_version: MAX_PROTOCOL_VERSION,
        max_version: MAX_PROTOCOL_VERSION,
        node: "rogue".into(),
        role: Role::Agent,
        run: 1,
    }))
    .unwrap();
    let answer = async {
        let mut asked = false;
        loop {
            match rx.recv().await.unwrap() {
                ParentToChild::Welcome(_) if !asked => {
                    asked = true;
                    let (_, csr_pem) = join_request("eu").unwrap();
                    tx.send(ChildToParent::Renew { csr_pem }).unwrap();
                }
                ParentToChild::Renewal(reply) => return reply,
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), answer)
        .await
        .expect("no renewal answer within 30 s")
}

#[test]
fn a_relay_renews_through_its_open_session_and_works_past_its_first_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ca = Ca::generate("test").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("ca.key"), &ca.key_pem());
    write(&dir.join("tokens"), "s3cret\n");
    for name in ["center", "pos-1"] {
        ca.issue(name).unwrap().write_to(dir).unwrap();
    }
    // Built first: eu's first certificate lasts 20 s (a few more backdated).
    bin("relay");
    let (key, csr) = join_request("eu").unwrap();
    let first = ca
        .renew_for_csr("eu", &csr, Duration::from_secs(20))
        .unwrap();
    write(&dir.join("eu.crt"), &first);
    write(&dir.join("eu.key"), &key);
    let first_expiry = pem_not_after(&first).unwrap();

    let (center_port, api_port, eu_port, pos_ops) =
        (free_port(), free_port(), free_port(), free_port());
    let tls =
        |n: &str| format!("tls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}\ndata: data/{n}\n");
    // The root signs renewals with the hierarchy's CA; renewed certificates last 60 s.
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{center_port}\nchildren: [eu, rogue]\n{}api: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\nrenew: {{ ca_cert: ca.crt, ca_key: ca.key, lifetime_s: 60 }}\n",
            tls("center")
        ),
    );
    write(
        &dir.join("eu.yaml"),
        &format!(
            "node: eu\nlisten: 127.0.0.1:{eu_port}\nchildren: [pos-1]\nparent: {{ name: center, address: 127.0.0.1:{center_port} }}\ntls: {{ cert: eu.crt, key: eu.key, ca: ca.crt, renew_at_percent: 50 }}\ndata: data/eu\n",
        ),
    );
    write(
        &dir.join("pos-1.yaml"),
        &format!(
            "cluster: pos-1\nlabels: {{ role: pos }}\nparent: {{ name: eu, address: 127.0.0.1:{eu_port} }}\n{}simulated: {{ ready_delay_ms: 50 }}\nmetrics: 127.0.0.1:{pos_ops}\n",
            tls("pos-1")
        ),
    );
    let mut center = spawn(dir, "center", "relay");
    let mut eu = spawn(dir, "eu", "relay");
    let mut pos = spawn(dir, "pos-1", "agent");
    write(&dir.join("app.yaml"), POS_APP);
    let app = dir.join("app.yaml").display().to_string();
    eventually("the root takes the app", dir, || apply(dir, api_port, &app));
    eventually("pos-1 holds the app", dir, || {
        objects(pos_ops, "pos-1") >= 2.0
    });

    // eu renews through its open session: the root grants (audit), eu installs
    // (audit), and the root saw eu connect once.
    eventually("eu renewed its certificate", dir, || {
        !audits(dir, "eu", "renewed").is_empty()
    });
    let granted = audits(dir, "center", "renewal-granted");
    assert!(
        granted.iter().any(|v| v["fields"]["who"] == "eu"),
        "{granted:?}"
    );
    assert_eq!(
        connections(dir, "center", "eu"),
        1,
        "the session was reopened"
    );
    let renewed = std::fs::read_to_string(dir.join("eu.crt")).unwrap();
    assert!(pem_not_after(&renewed).unwrap() > first_expiry);

    // A child asking for another node's name is refused, and audited.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    match runtime.block_on(renew_as_someone_else(&ca, center_port)) {
        RenewReply::Refused { parent, reason } => {
            assert_eq!(parent, "center");
            assert_eq!(
                reason,
                "the request names \"eu\" but the connection is authenticated as \"rogue\""
            );
        }
        RenewReply::Granted { .. } => panic!("a renewal for another name was granted"),
    }
    let refused = audits(dir, "center", "renewal-refused");
    assert!(
        refused.iter().any(|v| v["fields"]["who"] == "rogue"),
        "{refused:?}"
    );

    // Past the first certificate's expiry, every handshake eu takes part in works.
    eventually("eu's first certificate has expired", dir, || {
        unix_now() > first_expiry + 1
    });
    // pos-1 reconnects to eu, which serves its renewed certificate.
    pos.0.kill().unwrap();
    pos.0.wait().unwrap();
    pos = spawn(dir, "pos-1", "agent");
    eventually("pos-1 reconnected to eu", dir, || {
        connections(dir, "eu", "pos-1") >= 2
    });
    // eu reconnects to a restarted root with the renewed certificate it holds.
    center.0.kill().unwrap();
    center.0.wait().unwrap();
    center = spawn(dir, "center", "relay");
    eventually("eu reconnected to the restarted root", dir, || {
        connections(dir, "center", "eu") >= 2
    });
    // eu restarts from its files.
    eu.0.kill().unwrap();
    eu.0.wait().unwrap();
    eu = spawn(dir, "eu", "relay");
    eventually("the restarted eu reconnected to the root", dir, || {
        connections(dir, "center", "eu") >= 3
    });
    // And work still flows: a change reaches pos-1.
    write(
        &dir.join("more.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: more, namespace: pos, labels: { app: pos } }\ndata: { k: v }\n",
    );
    let more = dir.join("more.yaml").display().to_string();
    eventually("the root takes a change", dir, || {
        apply(dir, api_port, &more)
    });
    eventually("pos-1 holds the change", dir, || {
        objects(pos_ops, "pos-1") >= 3.0
    });
    drop((pos, eu, center));
}

/// Whether `name`'s log has a handshake failure whose error contains `why`.
fn handshake_refused(dir: &Path, name: &str, why: &str) -> bool {
    lines(dir, name).iter().any(|v| {
        v["fields"]["message"] == "handshake failed (a certificate refused?)"
            && v["fields"]["error"]
                .as_str()
                .is_some_and(|e| e.contains(why))
    })
}

/// A certificate from a foreign CA and an expired certificate are refused at the
/// handshake, each with its reason in the parent's log, while a good child is served;
/// the expired child recovers with a one-time recovery token (which no other name may
/// use, and which works once).
#[test]
fn a_foreign_or_expired_certificate_is_refused_and_a_recovery_token_reenrolls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    bin("relay");
    let ca = Ca::generate("test").unwrap();
    let foreign = Ca::generate("elsewhere").unwrap();
    write(&dir.join("ca.crt"), &ca.cert_pem());
    write(&dir.join("tokens"), "s3cret\n");
    ca.issue("center").unwrap().write_to(dir).unwrap();
    ca.issue("pos-1").unwrap().write_to(dir).unwrap();
    foreign.issue("alien").unwrap().write_to(dir).unwrap();
    // pos-9's certificate lasts a second; it is expired before pos-9 starts.
    let (key, csr) = join_request("pos-9").unwrap();
    let short = ca
        .renew_for_csr("pos-9", &csr, Duration::from_secs(1))
        .unwrap();
    write(&dir.join("pos-9.crt"), &short);
    write(&dir.join("pos-9.key"), &key);
    let join_ca = ca.issue_join_ca("center").unwrap();
    write(&dir.join("center.ca.crt"), &join_ca.cert_pem());
    write(&dir.join("center.ca.key"), &join_ca.key_pem());
    write(&dir.join("center.tokens"), "rtok recover=pos-9\n");

    let (port, api_port) = (free_port(), free_port());
    let (pos1_ops, pos9_ops) = (free_port(), free_port());
    write(
        &dir.join("center.yaml"),
        &format!(
            "node: center\nlisten: 127.0.0.1:{port}\nchildren: [pos-1, pos-9, alien]\ntls: {{ cert: center.crt, key: center.key, ca: ca.crt }}\ndata: data/center\napi: {{ listen: 127.0.0.1:{api_port}, tokens: tokens }}\njoin: {{ tokens: center.tokens, ca_cert: center.ca.crt, ca_key: center.ca.key }}\n"
        ),
    );
    let agent = |name: &str, ops: u16, identity: &str| {
        write(
            &dir.join(format!("{name}.yaml")),
            &format!(
                "cluster: {name}\nlabels: {{ role: pos }}\nparent: {{ name: center, address: 127.0.0.1:{port} }}\n{identity}\ndata: data/{name}\nsimulated: {{ ready_delay_ms: 50 }}\nmetrics: 127.0.0.1:{ops}\n"
            ),
        );
    };
    let tls = |n: &str| format!("tls: {{ cert: {n}.crt, key: {n}.key, ca: ca.crt }}");
    agent("pos-1", pos1_ops, &tls("pos-1"));
    agent("alien", free_port(), &tls("alien"));
    let expiry = pem_not_after(&short).unwrap();
    eventually("pos-9's certificate has expired", dir, || {
        unix_now() > expiry
    });
    agent("pos-9", pos9_ops, &tls("pos-9"));
    let center = spawn(dir, "center", "relay");
    let pos1 = spawn(dir, "pos-1", "agent");
    let alien = spawn(dir, "alien", "agent");
    let mut pos9 = spawn(dir, "pos-9", "agent");
    write(&dir.join("app.yaml"), POS_APP);
    let app = dir.join("app.yaml").display().to_string();
    eventually("the root takes the app", dir, || apply(dir, api_port, &app));
    eventually("pos-1 holds the app", dir, || {
        objects(pos1_ops, "pos-1") >= 2.0
    });
    eventually(
        "the root logged the foreign certificate's refusal",
        dir,
        || handshake_refused(dir, "center", "UnknownIssuer"),
    );
    eventually(
        "the root logged the expired certificate's refusal",
        dir,
        || handshake_refused(dir, "center", "certificate expired"),
    );
    assert_eq!(connections(dir, "center", "alien"), 0);
    assert_eq!(connections(dir, "center", "pos-9"), 0);

    // The recovery token is pos-9's only: another name is refused (and it stays unused).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let addr = ([127, 0, 0, 1], port).into();
    let ca_path = dir.join("ca.crt");
    let refused = |r: Result<strata_node::join::Joined, strata_node::join::JoinError>| match r {
        Err(strata_node::join::JoinError::Refused { reason, .. }) => reason,
        Err(e) => panic!("expected a refusal, got {e}"),
        Ok(_) => panic!("expected a refusal, the join was granted"),
    };
    let reason = refused(runtime.block_on(strata_node::join::join(
        "center", addr, &ca_path, "pos-1", "rtok",
    )));
    assert_eq!(
        reason,
        "the token is a recovery token for \"pos-9\", not for \"pos-1\""
    );

    // pos-9 recovers: its expired certificate and key are where a joined agent keeps
    // them, and it starts with the recovery token.
    pos9.0.kill().unwrap();
    pos9.0.wait().unwrap();
    std::fs::create_dir_all(dir.join("data/pos-9")).unwrap();
    std::fs::copy(dir.join("pos-9.crt"), dir.join("data/pos-9/pos-9.crt")).unwrap();
    std::fs::copy(dir.join("pos-9.key"), dir.join("data/pos-9/pos-9.key")).unwrap();
    agent("pos-9", pos9_ops, "join: { token: rtok, ca: ca.crt }");
    pos9 = spawn(dir, "pos-9", "agent");
    eventually("pos-9 recovered and holds the app", dir, || {
        objects(pos9_ops, "pos-9") >= 2.0
    });
    let recovered = audits(dir, "center", "recovered");
    assert!(
        recovered.iter().any(|v| v["fields"]["who"] == "pos-9"),
        "{recovered:?}"
    );
    // The token worked once.
    let reason = refused(runtime.block_on(strata_node::join::join(
        "center", addr, &ca_path, "pos-9", "rtok",
    )));
    assert_eq!(reason, "the join token was already used (by \"pos-9\")");
    drop((pos9, alien, pos1, center));
}
