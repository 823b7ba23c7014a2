//! Users who change while the root runs, and users who are not in its tokens file: a
//! root started from a rendered topology (`relay serve`) with `api.client_certificates`
//! and `api.oidc`, driven by the real kubectl.
//!
//! * `relay token create|revoke` add and take away a user under the running root.
//! * A client certificate from the users' CA authenticates as its CN with its O as
//!   group, which the configuration maps to a role (kubectl, and the `relay` commands
//!   reading the same kubeconfig); one whose user and group map to nothing is answered
//!   403.
//! * An OIDC ID token of an issuer the test runs (HTTPS, discovery, JWKS, ES256) gets
//!   the role its groups or user map to (view reads and may not create); a token for
//!   another audience, an expired one, or one signed by a key the issuer does not
//!   publish is answered 401. Refusals and authentications are audited.

#![allow(clippy::unwrap_used)]
// A synchronous test driving processes: there is no runtime for a sleep to block, and
// the ID tokens' times are the wall clock's.
#![allow(clippy::disallowed_methods)]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::token_reload::{eventually, rendered_root, status_with};
use base64::Engine as _;
use common::{Proc, bin, stdout_ok, write};
use serde_json::{Value, json};
use strata_test_tools::identity::{KID, OidcIssuer, UserCa};
use strata_topology::files;

/// A kubeconfig for the root's API, with the user's `credentials` (YAML lines under
/// `user:`, indented four spaces).
fn kubeconfig(dir: &Path, api_port: u16, credentials: &str) -> String {
    let b64 =
        |p: &Path| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: center
  cluster:
    server: https://127.0.0.1:{api_port}
    tls-server-name: center
    certificate-authority-data: {ca}
users:
- name: u
  user:
{credentials}contexts:
- name: c
  context: {{ cluster: center, user: u }}
current-context: c
",
        ca = b64(&files::ca_cert(dir)),
    )
}

/// Runs kubectl with `kubeconfig` (its text); success and what it printed.
fn kubectl(dir: &Path, kubeconfig: &str, args: &[&str]) -> (bool, String) {
    let kc = dir.join("kc.yaml");
    write(&kc, kubeconfig);
    let out = Command::new(common::kube_clients().join("kubectl"))
        .arg("--kubeconfig")
        .arg(&kc)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn token_commands_client_certificates_and_oidc_id_tokens_identify_users_of_the_root() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let (api_port, config) = rendered_root(&dir);

    // The users' CA and the OIDC issuer, named in the root's `api:`.
    let users = UserCa::new("users");
    write(&dir.join("users-ca.crt"), &users.cert_pem());
    let issuer = rt.block_on(OidcIssuer::start());
    write(&dir.join("issuer-ca.crt"), issuer.ca_pem());
    let mut node: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    node["api"]["client_certificates"] = json!({
        "ca": dir.join("users-ca.crt"),
        "groups": { "platform": "admin" },
    });
    node["api"]["oidc"] = json!({
        "issuer_url": issuer.url(),
        "audience": "strata",
        "username_claim": "email",
        "groups_claim": "groups",
        "ca": dir.join("issuer-ca.crt"),
        "users": { "boss@example.com": "admin" },
        "groups": { "viewers": "view" },
    });
    write(&config, &serde_saphyr::to_string(&node).unwrap());

    let config_arg = config.display().to_string();
    let root = Proc::spawn(
        &dir,
        "center",
        &bin("relay"),
        &["serve", "--config", &config_arg],
    );
    eventually("the root's API answers", &dir, || {
        status_with(&rt, &dir, api_port, "s3cret") == 200
    });

    // `relay token create|revoke` under the running root.
    let bob = stdout_ok(Command::new(bin("relay")).args([
        "token",
        "create",
        "bob",
        "--role",
        "view",
        "--config",
        &config_arg,
    ]));
    assert_eq!(bob.len(), 32, "{bob}");
    eventually("bob's new token is accepted", &dir, || {
        status_with(&rt, &dir, api_port, &bob) == 200
    });
    stdout_ok(Command::new(bin("relay")).args(["token", "revoke", "bob", "--config", &config_arg]));
    eventually("bob's revoked token is refused", &dir, || {
        status_with(&rt, &dir, api_port, &bob) == 401
    });

    // A client certificate: CN alice, O platform (admin).
    let cert_user = |cn: &str, org: &str| {
        let issued = users.client(cn, Some(org));
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        kubeconfig(
            &dir,
            api_port,
            &format!(
                "    client-certificate-data: {}\n    client-key-data: {}\n",
                b64(&issued.cert_pem),
                b64(&issued.key_pem)
            ),
        )
    };
    let alice = cert_user("alice", "platform");
    let (ok, out) = kubectl(
        &dir,
        &alice,
        &["create", "configmap", "by-alice", "--from-literal=a=b"],
    );
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        &dir,
        &alice,
        &["get", "configmap", "by-alice", "-o", "name"],
    );
    assert!(ok && out.contains("configmap/by-alice"), "{out}");
    // The relay commands read the same kubeconfig and present the certificate.
    let alice_kc = dir.join("alice.yaml");
    write(&alice_kc, &alice);
    let out = Command::new(bin("relay"))
        .args(["get", "configmap", "by-alice", "-o", "name", "--kubeconfig"])
        .arg(&alice_kc)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("by-alice"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Known to the CA, mapped to nothing: 403, naming the user.
    let mallory = cert_user("mallory", "guests");
    let (ok, out) = kubectl(&dir, &mallory, &["get", "configmaps"]);
    assert!(
        !ok && out.contains("Forbidden") && out.contains("mallory"),
        "{out}"
    );

    // OIDC ID tokens.
    let claims = |email: &str, groups: &[&str], aud: &str, exp: u64| {
        json!({ "iss": issuer.url(), "aud": aud, "sub": email, "email": email,
            "email_verified": true, "groups": groups, "iat": now(), "exp": exp })
    };
    let anonymous = kubeconfig(&dir, api_port, "    {}\n");
    let with_token = |token: &str, args: &[&str]| {
        let mut all = vec!["--token", token];
        all.extend_from_slice(args);
        kubectl(&dir, &anonymous, &all)
    };
    let viewer = issuer.token(
        &claims("viewer@example.com", &["viewers"], "strata", now() + 600),
        KID,
    );
    let (ok, out) = with_token(&viewer, &["get", "configmap", "by-alice", "-o", "name"]);
    assert!(ok && out.contains("configmap/by-alice"), "{out}");
    let (ok, out) = with_token(
        &viewer,
        &["create", "configmap", "by-viewer", "--from-literal=a=b"],
    );
    assert!(
        // kubectl prints the Status's message.
        !ok && out.contains("has role view: it may read, not write"),
        "{out}"
    );
    let boss = issuer.token(&claims("boss@example.com", &[], "strata", now() + 600), KID);
    let (ok, out) = with_token(
        &boss,
        &["create", "configmap", "by-boss", "--from-literal=a=b"],
    );
    assert!(ok, "{out}");

    let refused = |token: &str, why: &str| {
        let (ok, out) = with_token(token, &["get", "configmaps"]);
        assert!(
            !ok && (out.contains("Unauthorized") || out.contains("logged in")),
            "{why}: {out}"
        );
    };
    refused(
        &issuer.token(
            &claims("viewer@example.com", &["viewers"], "other", now() + 600),
            KID,
        ),
        "another audience",
    );
    refused(
        &issuer.token(
            &claims("viewer@example.com", &["viewers"], "strata", now() - 600),
            KID,
        ),
        "expired",
    );
    // A key not seen yet makes the root fetch the keys again, once the last fetch is
    // old enough (a burst of bad tokens does not hammer the issuer).
    std::thread::sleep(strata_relay::identity::oidc::REFETCH_AFTER + Duration::from_secs(1));
    let fetches = issuer.jwks_fetches();
    refused(
        &issuer.token(
            &claims("viewer@example.com", &["viewers"], "strata", now() + 600),
            "key-2",
        ),
        "a key the issuer does not publish",
    );
    assert!(
        issuer.jwks_fetches() > fetches,
        "an unknown key makes the root fetch the keys again"
    );

    // Audited: the refusals, and who authenticated how.
    let log = std::fs::read_to_string(dir.join("center.log")).unwrap_or_default();
    let lines = |needles: &[&str]| {
        log.lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    };
    assert!(lines(&["authn-refused", "audience"]) >= 1, "{log}");
    assert!(lines(&["authn-refused", "expired"]) >= 1, "{log}");
    assert!(lines(&["authn-refused", "mallory"]) >= 1, "{log}");
    assert!(lines(&["api-write", "alice", "x509"]) >= 1, "{log}");
    assert!(
        lines(&["api-write", "boss@example.com", "oidc"]) >= 1,
        "{log}"
    );
    assert!(
        lines(&["api-write", "viewer@example.com", "403"]) >= 1,
        "{log}"
    );
    assert!(root.terminate().success());
}
