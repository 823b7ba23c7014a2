//! `issue_all`: chains verify with webpki (the verifier rustls uses) and name their node;
//! re-runs keep every key; a different CA is refused without `force`.

#![allow(clippy::unwrap_used)] // integration tests may unwrap

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use strata_topology::certs::{Action, Ca, CertError, CertOptions, issue_all};
use strata_topology::files;
use strata_topology::{Topology, parse};

const TOPOLOGY: &str = "apiVersion: strata.dev/v1alpha1
kind: Topology
metadata: { name: t }
spec:
  root: { name: center }
  relays:
    - { name: eu, parent: center }
  clusters:
    - { name: shop-1, parent: eu }
  joining:
    - { parent: eu, tokens: 3 }
";

fn topology() -> Topology {
    parse(TOPOLOGY, Path::new("t.yaml")).unwrap().topology
}

fn der(path: &Path) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(path).unwrap()
}

/// Verifies `node`'s certificate in `dir` against `dir/ca.crt` for both TLS roles and
/// checks that it names `node` (and only it).
fn verify(dir: &Path, node: &str) -> Result<(), webpki::Error> {
    let ca = der(&files::ca_cert(dir));
    let anchor = webpki::anchor_from_trusted_cert(&ca)?;
    let leaf = der(&files::node_cert(dir, node));
    let ee = webpki::EndEntityCert::try_from(&leaf)?;
    for usage in [
        webpki::KeyUsage::server_auth(),
        webpki::KeyUsage::client_auth(),
    ] {
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            std::slice::from_ref(&anchor),
            &[],
            UnixTime::now(),
            usage,
            None,
            None,
        )?;
    }
    ee.verify_is_valid_for_subject_name(&ServerName::try_from(node.to_owned()).unwrap())?;
    let other = ServerName::try_from("someone-else").unwrap();
    assert!(ee.verify_is_valid_for_subject_name(&other).is_err());
    Ok(())
}

#[test]
fn every_node_gets_a_certificate_naming_it_that_chains_to_the_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let done = issue_all(&topology(), dir, &CertOptions::default()).unwrap();
    assert!(done.iter().all(|(_, a)| *a == Action::Created), "{done:?}");
    for node in ["center", "eu", "shop-1"] {
        verify(dir, node).unwrap_or_else(|e| panic!("{node}: {e}"));
    }
    let tokens = std::fs::read_to_string(files::join_tokens(dir, "eu")).unwrap();
    assert_eq!(tokens.lines().count(), 3);
    assert_eq!(
        std::fs::read_to_string(files::api_tokens(dir))
            .unwrap()
            .lines()
            .count(),
        1
    );
    // A certificate from another CA does not verify against this one.
    let stranger = Ca::generate("other").unwrap().issue("eu").unwrap();
    std::fs::write(files::node_cert(dir, "eu"), &stranger.cert_pem).unwrap();
    std::fs::write(files::node_key(dir, "eu"), &stranger.key_pem).unwrap();
    assert!(verify(dir, "eu").is_err(), "a foreign chain verified");
}

#[test]
fn re_runs_keep_keys_and_issue_what_is_missing_for_the_existing_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    issue_all(&topology(), dir, &CertOptions::default()).unwrap();
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap();
    let (ca_key, eu_key, tokens) = (
        read(files::ca_key(dir)),
        read(files::node_key(dir, "eu")),
        read(files::join_tokens(dir, "eu")),
    );
    let again = issue_all(&topology(), dir, &CertOptions::default()).unwrap();
    assert!(again.iter().all(|(_, a)| *a == Action::Kept), "{again:?}");

    std::fs::remove_file(files::node_cert(dir, "eu")).unwrap();
    issue_all(&topology(), dir, &CertOptions::default()).unwrap();
    verify(dir, "eu").unwrap();
    assert_eq!(read(files::ca_key(dir)), ca_key);
    assert_eq!(
        read(files::node_key(dir, "eu")),
        eu_key,
        "a key was replaced"
    );
    assert_eq!(read(files::join_tokens(dir, "eu")), tokens);

    // With force, keys are replaced and the chains still verify.
    issue_all(
        &topology(),
        dir,
        &CertOptions {
            ca: None,
            force: true,
        },
    )
    .unwrap();
    assert_ne!(read(files::node_key(dir, "eu")), eu_key);
    verify(dir, "eu").unwrap();
}

#[test]
fn a_given_ca_issues_the_certificates_and_a_different_one_needs_force() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = tmp.path().join("ours");
    std::fs::create_dir_all(&ours).unwrap();
    let ca = Ca::generate("corp").unwrap();
    let (cert, key) = (ours.join("corp.crt"), ours.join("corp.key"));
    std::fs::write(&cert, ca.cert_pem()).unwrap();
    std::fs::write(&key, ca.key_pem()).unwrap();
    let dir = tmp.path().join("out");
    let given = CertOptions {
        ca: Some((cert.clone(), key.clone())),
        force: false,
    };
    issue_all(&topology(), &dir, &given).unwrap();
    assert_eq!(
        std::fs::read_to_string(files::ca_cert(&dir)).unwrap(),
        ca.cert_pem(),
        "the given CA certificate is the one nodes trust"
    );
    assert!(!files::ca_key(&dir).exists(), "the given CA key was copied");
    verify(&dir, "shop-1").unwrap();

    let other = Ca::generate("other").unwrap();
    std::fs::write(&cert, other.cert_pem()).unwrap();
    std::fs::write(&key, other.key_pem()).unwrap();
    match issue_all(&topology(), &dir, &given) {
        Err(CertError::WouldReplace { path, .. }) => assert_eq!(path, files::ca_cert(&dir)),
        other => panic!("a different CA was accepted: {other:?}"),
    }
}

#[test]
fn a_relay_admitting_joiners_gets_an_intermediate_ca_whose_certificates_chain_to_the_root() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    issue_all(&topology(), dir, &CertOptions::default()).unwrap();
    let (cert, key) = (
        files::join_ca_cert(dir, "eu"),
        files::join_ca_key(dir, "eu"),
    );
    // The root has a child: it gets an intermediate too, to sign that child's
    // renewals, but no join tokens (no joining entry names it).
    assert!(files::join_ca_cert(dir, "center").exists());
    assert!(!files::join_tokens(dir, "center").exists());
    let join_ca = Ca::load(&cert, &key).unwrap();
    // What a joining agent would be given: its certificate, then the intermediate.
    let joined = join_ca.issue("shop-99").unwrap();
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(joined.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
    assert_eq!(chain.len(), 1, "a loaded CA appends no chain of its own");
    let root = der(&files::ca_cert(dir));
    let anchor = webpki::anchor_from_trusted_cert(&root).unwrap();
    let ee = webpki::EndEntityCert::try_from(&chain[0]).unwrap();
    let verify = |intermediates: &[CertificateDer<'static>]| {
        ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            std::slice::from_ref(&anchor),
            intermediates,
            UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map(|_| ())
    };
    verify(&[der(&cert)]).unwrap();
    assert!(verify(&[]).is_err(), "verified without the intermediate");
    ee.verify_is_valid_for_subject_name(&ServerName::try_from("shop-99").unwrap())
        .unwrap();

    // An intermediate issued in memory appends itself to what it issues.
    let fresh = Ca::load(&files::ca_cert(dir), &files::ca_key(dir))
        .unwrap()
        .issue_join_ca("eu")
        .unwrap()
        .issue("shop-100")
        .unwrap();
    assert_eq!(
        CertificateDer::pem_slice_iter(fresh.cert_pem.as_bytes()).count(),
        2
    );
}

/// The root's API certificate in `dir` is valid, for serving, for `name`.
fn api_valid_for(dir: &Path, name: &str) -> bool {
    let ca = der(&files::ca_cert(dir));
    let anchor = webpki::anchor_from_trusted_cert(&ca).unwrap();
    let leaf = der(&files::api_cert(dir, "center"));
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
    .unwrap();
    ee.verify_is_valid_for_subject_name(&ServerName::try_from(name.to_owned()).unwrap())
        .is_ok()
}

#[test]
fn the_api_certificate_carries_the_topologys_names_and_keeps_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let with = |names: &str| {
        let text = TOPOLOGY.replace(
            "root: { name: center }",
            &format!(
                "root: {{ name: center, api: {{ listen: \"127.0.0.1:8443\", names: [{names}] }} }}"
            ),
        );
        parse(&text, Path::new("t.yaml")).unwrap().topology
    };
    issue_all(
        &with("strata.example.com, 10.1.2.3"),
        dir,
        &CertOptions::default(),
    )
    .unwrap();
    for name in [
        "center",
        "strata.example.com",
        "10.1.2.3",
        "127.0.0.1",
        "localhost",
    ] {
        assert!(api_valid_for(dir, name), "{name}");
    }
    assert!(!api_valid_for(dir, "other.example.com"));
    let key = std::fs::read(files::api_key(dir, "center")).unwrap();

    // The same names again: kept.
    let done = issue_all(
        &with("strata.example.com, 10.1.2.3"),
        dir,
        &CertOptions::default(),
    )
    .unwrap();
    assert!(
        done.contains(&(files::api_cert(dir, "center"), Action::Kept)),
        "{done:?}"
    );

    // Other names: a certificate for them, with the same key.
    let done = issue_all(&with("other.example.com"), dir, &CertOptions::default()).unwrap();
    assert!(
        done.contains(&(files::api_cert(dir, "center"), Action::Replaced)),
        "{done:?}"
    );
    assert!(api_valid_for(dir, "other.example.com"));
    assert!(!api_valid_for(dir, "strata.example.com"));
    assert_eq!(std::fs::read(files::api_key(dir, "center")).unwrap(), key);

    // A wildcard listen carries no IP of its own; the plain form still works.
    let plain = TOPOLOGY.replace(
        "root: { name: center }",
        "root: { name: center, api: \"0.0.0.0:8443\" }",
    );
    let t = parse(&plain, Path::new("t.yaml")).unwrap().topology;
    assert_eq!(strata_topology::certs::api_sans(t.root()), ["center"]);
}

fn days_left(path: &Path, now: i64) -> i64 {
    let pem = std::fs::read_to_string(path).unwrap();
    // Rounded to the nearest day: issued moments ago, with seconds truncated.
    (strata_topology::certs::pem_not_after(&pem).unwrap() - now + 43_200) / 86_400
}

use strata_topology::certs::unix_now;

#[test]
fn node_certificates_last_a_year_and_the_ca_ten_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    issue_all(&topology(), dir, &CertOptions::default()).unwrap();
    let now = unix_now();
    // Issued a moment ago: the whole lifetime minus less than a day.
    assert_eq!(days_left(&files::ca_cert(dir), now), 3650);
    for node in ["center", "eu", "shop-1"] {
        assert_eq!(days_left(&files::node_cert(dir, node), now), 365, "{node}");
    }
    assert_eq!(days_left(&files::join_ca_cert(dir, "eu"), now), 3650);
    let all: Vec<_> = ["center", "eu", "shop-1"]
        .iter()
        .map(|n| files::node_cert(dir, n))
        .collect();
    assert!(strata_topology::certs::expiring(&all, now, 30).is_empty());
}

#[test]
fn the_topology_sets_lifetimes_and_what_expires_soon_is_listed() {
    let text = TOPOLOGY.replace(
        "spec:\n",
        "spec:\n  certificates: { nodeDays: 10, caDays: 40 }\n",
    );
    let t = parse(&text, Path::new("t.yaml")).unwrap().topology;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let done = issue_all(&t, dir, &CertOptions::default()).unwrap();
    let now = unix_now();
    assert_eq!(days_left(&files::ca_cert(dir), now), 40);
    assert_eq!(days_left(&files::node_cert(dir, "shop-1"), now), 10);
    verify(dir, "shop-1").unwrap();
    // A join CA loaded by the relay signs agents' certificates for nodeDays.
    let join_ca = Ca::load_join_ca(
        &files::join_ca_cert(dir, "eu"),
        &files::join_ca_key(dir, "eu"),
    )
    .unwrap()
    .with_lifetimes(t.certificates);
    let (_, csr) = strata_topology::certs::join_request("pos-9").unwrap();
    let chain = join_ca.issue_for_csr("pos-9", &csr).unwrap();
    let left = strata_topology::certs::pem_not_after(&chain).unwrap() - now;
    assert_eq!((left + 43_200) / 86_400, 10);
    // Within 30 days: every node certificate and the API's, not the CA (40 days).
    let paths: Vec<_> = done.iter().map(|(p, _)| p.clone()).collect();
    let soon = strata_topology::certs::expiring(&paths, now, 30);
    let names: Vec<String> = soon
        .iter()
        .map(|e| e.path.strip_prefix(dir).unwrap().display().to_string())
        .collect();
    assert!(
        names.contains(&"nodes/shop-1/node.crt".to_owned()),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n == "ca.crt"), "{names:?}");
    assert!(
        soon.iter().all(|e| (9..=10).contains(&e.days_left)),
        "{soon:?}"
    );
    // In 45 days everything has expired, the CA included.
    let later = strata_topology::certs::expiring(&paths, now + 45 * 86_400, 30);
    assert!(later.iter().any(|e| e.path == files::ca_cert(dir)));
    assert!(later.iter().all(|e| e.days_left < 0), "{later:?}");
}
