//! Node names that are also names of generated files (`ca` for Canada, `ports`, `api`,
//! `join`, `nodes`, `logs`, `data`) collide with nothing: each node's certificate names
//! that node, no node configuration references the CA key, and the hierarchy's
//! `ca.crt`, `ports.yaml` and `api.tokens` stay what they are.
//!
//! On the layout before a directory per node, node `ca` was given `ca.crt` and `ca.key`
//! (the CA's own certificate and key), node `ports` overwrote `ports.yaml` with its
//! configuration, and these tests failed.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use serde::Deserialize;
use strata_topology::certs::{Action, CertError, CertOptions, issue_all};
use strata_topology::files::{self, ConfinementError};
use strata_topology::render::{RenderError, RenderOptions, render};
use strata_topology::{Topology, parse};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: names }
spec:
  root: { name: api }
  relays:
    - { name: ca, parent: api, labels: { country: ca } }
    - { name: ports, parent: ca }
    - { name: nodes, parent: api }
  clusters:
    - { name: join, parent: ports }
    - { name: logs, parent: ca }
    - { name: data, parent: nodes }
  joining:
    - { parent: ca, tokens: 2 }
";

const NODES: [&str; 7] = ["api", "ca", "ports", "nodes", "join", "logs", "data"];

fn topology() -> Topology {
    parse(TOPOLOGY, Path::new("names.yaml")).unwrap().topology
}

/// What a rendered configuration names (the fields `relay serve` and `agent run` read).
#[derive(Debug, Deserialize)]
struct Config {
    tls: Tls,
    join: Option<Join>,
    api: Option<Api>,
    data: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Tls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Join {
    tokens: PathBuf,
    ca_cert: PathBuf,
    ca_key: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Api {
    tokens: PathBuf,
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Issues and renders into a fresh directory.
fn issue_and_render() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let t = topology();
    issue_all(&t, &dir, &CertOptions::default()).unwrap();
    render(&t, &dir, &RenderOptions::default()).unwrap();
    (tmp, dir)
}

/// The leaf certificate in `cert` chains to `ca` and names `node`, and only it.
fn names(cert: &Path, ca: &Path, node: &str) {
    let ca = CertificateDer::from_pem_file(ca).unwrap();
    let anchor = webpki::anchor_from_trusted_cert(&ca).unwrap();
    let leaf = CertificateDer::from_pem_file(cert).unwrap();
    let ee = webpki::EndEntityCert::try_from(&leaf).unwrap();
    ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        std::slice::from_ref(&anchor),
        &[],
        UnixTime::now(),
        webpki::KeyUsage::server_auth(),
        None,
        None,
    )
    .unwrap_or_else(|e| panic!("{node}: {} does not chain to the CA: {e}", cert.display()));
    ee.verify_is_valid_for_subject_name(&ServerName::try_from(node.to_owned()).unwrap())
        .unwrap_or_else(|e| panic!("{node}: {} does not name it: {e}", cert.display()));
    let other = ServerName::try_from("someone-else").unwrap();
    assert!(ee.verify_is_valid_for_subject_name(&other).is_err());
}

#[test]
fn nodes_named_like_generated_files_get_their_own_certificates_and_never_the_ca_key() {
    let (_tmp, dir) = issue_and_render();
    let ca_cert = files::ca_cert(&dir);
    let ca_key = std::fs::canonicalize(files::ca_key(&dir)).unwrap();
    let ca_key_pem = read(&ca_key);
    for node in NODES {
        let config_path = files::node_config(&dir, node);
        let config: Config = serde_saphyr::from_str(&read(&config_path)).unwrap();
        let base = config_path.parent().unwrap();
        let named = |p: &Path| std::fs::canonicalize(base.join(p)).unwrap();

        // Its identity is its own: a certificate naming it, a key that is not the CA's.
        let (cert, key) = (named(&config.tls.cert), named(&config.tls.key));
        names(&cert, &ca_cert, node);
        assert_ne!(
            read(&cert),
            read(&ca_cert),
            "{node}: given the CA certificate"
        );
        assert_ne!(key, ca_key, "{node}: given the CA key");
        assert_ne!(
            read(&key),
            ca_key_pem,
            "{node}: given the CA key's contents"
        );
        assert_eq!(read(&named(&config.tls.ca)), read(&ca_cert), "{node}");

        // Everything it names is its own, in its own directory, except the API tokens.
        let own = std::fs::canonicalize(files::node_dir(&dir, node)).unwrap();
        let mut paths = vec![cert, key, named(&config.tls.ca)];
        std::fs::create_dir_all(base.join(&config.data)).unwrap();
        paths.push(named(&config.data));
        if let Some(join) = &config.join {
            paths.extend([&join.tokens, &join.ca_cert, &join.ca_key].map(|p| named(p)));
        }
        for p in &paths {
            assert!(
                p.starts_with(&own),
                "{node}: {} is not its own",
                p.display()
            );
            assert_ne!(*p, ca_key, "{node}: names the CA key");
        }
        match &config.api {
            Some(api) => {
                assert_eq!(node, "api", "only the root serves the API");
                assert_eq!(
                    named(&api.tokens),
                    std::fs::canonicalize(files::api_tokens(&dir)).unwrap()
                );
            }
            None => assert_ne!(node, "api", "the root serves the API"),
        }
        assert_eq!(config.join.is_some(), node == "ca", "{node}");
    }

    // The hierarchy's files are intact: the CA is a CA named after the hierarchy...
    let ca_der = CertificateDer::from_pem_file(&ca_cert).unwrap();
    webpki::anchor_from_trusted_cert(&ca_der).unwrap();
    let ee = webpki::EndEntityCert::try_from(&ca_der).unwrap();
    assert!(
        ee.verify_is_valid_for_subject_name(&ServerName::try_from("ca").unwrap())
            .is_err(),
        "the CA certificate names node ca"
    );
    // ...ports.yaml holds ports (of node `ports` too), api.tokens one token.
    let ports: BTreeMap<String, u16> = serde_saphyr::from_str(&read(&files::ports(&dir))).unwrap();
    for key in [
        "api.listen",
        "api.api",
        "ca.listen",
        "ports.listen",
        "nodes.listen",
    ] {
        assert!(ports.contains_key(key), "{key} missing from {ports:?}");
    }
    let tokens = read(&files::api_tokens(&dir));
    assert_eq!(tokens.lines().count(), 1, "{tokens}");
    assert_eq!(tokens.trim().len(), 32, "{tokens}");
    assert!(tokens.trim().bytes().all(|b| b.is_ascii_hexdigit()));
}

#[test]
fn re_issuing_and_re_rendering_names_like_generated_files_changes_nothing() {
    let (_tmp, dir) = issue_and_render();
    let t = topology();
    let ports = read(&files::ports(&dir));
    let again = issue_all(&t, &dir, &CertOptions::default()).unwrap();
    assert!(again.iter().all(|(_, a)| *a == Action::Kept), "{again:?}");
    let rendered = render(&t, &dir, &RenderOptions::default()).unwrap();
    assert!(
        rendered.files.iter().all(|(_, a)| *a == Action::Kept),
        "{:?}",
        rendered.files
    );
    assert_eq!(read(&files::ports(&dir)), ports);
    for node in NODES {
        let n = rendered.nodes.iter().find(|n| n.name == node).unwrap();
        assert_eq!(n.config, files::node_config(&dir, node));
    }
}

#[test]
fn a_node_key_that_is_the_ca_key_is_refused() {
    let (_tmp, dir) = issue_and_render();
    // Whatever the layout, a node handed the CA's key is refused by content.
    std::fs::copy(files::ca_key(&dir), files::node_key(&dir, "ca")).unwrap();
    std::fs::copy(files::ca_cert(&dir), files::node_cert(&dir, "ca")).unwrap();
    match issue_all(&topology(), &dir, &CertOptions::default()) {
        Err(CertError::Confinement(ConfinementError::CaKey { node, field, .. })) => {
            assert_eq!((node.as_str(), field.as_str()), ("ca", "tls.key"));
        }
        other => panic!("the CA key was accepted as node ca's: {other:?}"),
    }
}

#[test]
fn a_given_ca_key_inside_a_nodes_directory_is_refused() {
    let (_tmp, dir) = issue_and_render();
    let key = files::node_dir(&dir, "ca").join("ca.key");
    std::fs::copy(files::ca_key(&dir), &key).unwrap();
    let given = CertOptions {
        ca: Some((files::ca_cert(&dir), key.clone())),
        force: false,
    };
    match issue_all(&topology(), &dir, &given) {
        Err(CertError::Confinement(ConfinementError::CaKeyShipped { node, path })) => {
            assert_eq!((node.as_str(), path), ("ca", key));
        }
        other => panic!("a CA key in node ca's directory was accepted: {other:?}"),
    }
}

#[test]
fn a_node_name_that_is_a_path_is_refused_before_anything_is_written() {
    let mut t = topology();
    t.clusters[0].name = "../escape".to_owned();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    match issue_all(&t, &dir, &CertOptions::default()) {
        Err(CertError::BadName { name, .. }) => assert_eq!(name, "../escape"),
        other => panic!("{other:?}"),
    }
    match render(&t, &dir, &RenderOptions::default()) {
        Err(RenderError::Confinement(ConfinementError::BadName { node, .. })) => {
            assert_eq!(node, "../escape");
        }
        other => panic!("{other:?}"),
    }
    assert!(!dir.exists(), "something was written");
}
