//! `relay topology validate|certs|render`: check a topology file, issue its
//! certificates, write each node's configuration.

use std::path::PathBuf;

use clap::Subcommand;
use strata_topology::LoadError;
use strata_topology::certs::{self, Action, CertError, CertOptions};
use strata_topology::render::{self, RenderError, RenderOptions, Target};

use crate::cmd::up::print_warnings;

/// The `relay topology` commands.
#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Check a topology file: every error at once, each naming the node and the fault;
    /// warnings apart. Exits non-zero on an error (or a warning with --deny-warnings).
    Validate {
        /// The topology file (YAML).
        file: PathBuf,
        /// Treat warnings as errors.
        #[arg(long)]
        deny_warnings: bool,
    },
    /// Issue the CA (or use the given one), a certificate per node naming it, the root
    /// API's token and the join tokens of `joining:` entries. The CA and the API tokens
    /// go to DIR (`ca.crt`, `ca.key`, `api.tokens`); each node's certificate, key and copy
    /// of the CA certificate to its own directory `DIR/nodes/NAME/` (with, for a relay with
    /// a `joining:` entry, its join tokens and join CA). Re-running keeps what exists; no
    /// key is replaced without --force.
    Certs {
        /// The topology file (YAML).
        file: PathBuf,
        /// Where to write (created if missing).
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: PathBuf,
        /// An existing CA certificate to issue with (needs --ca-key).
        #[arg(long, value_name = "FILE", requires = "ca_key")]
        ca_cert: Option<PathBuf>,
        /// The existing CA's key (needs --ca-cert).
        #[arg(long, value_name = "FILE", requires = "ca_cert")]
        ca_key: Option<PathBuf>,
        /// Replace existing keys, certificates and tokens.
        #[arg(long)]
        force: bool,
    },
    /// Write each node's configuration, `DIR/nodes/NAME/config.yaml`: for `relay serve
    /// --config` (relays) or `agent run --config` (clusters); it names only files of
    /// the node's own directory (and, for the root, `DIR/api.tokens`). Ports left to
    /// assign (`127.0.0.1:0` or no address) are chosen once and kept in `DIR/ports.yaml`.
    /// With --helm, also each node's Helm values and Secret manifest; with --systemd, its
    /// unit and the unit's configuration directory (run certs first).
    Render {
        /// The topology file (YAML).
        file: PathBuf,
        /// Where to write (created if missing); the certificates go here too.
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: PathBuf,
        /// Also write, per node, `values.yaml` (values for the chart deploy/helm/strata
        /// that run the node, its configuration included) and `secret.yaml` (its Secret:
        /// every file that configuration names).
        #[arg(long)]
        helm: bool,
        /// Also write, per node, `systemd/` (the configuration directory of its unit, for
        /// `/etc/strata` or `/etc/strata-agent`: the configuration and every file it
        /// names, side by side) and its unit, `strata-relay.service` or
        /// `strata-agent.service`.
        #[arg(long)]
        systemd: bool,
    },
}

/// Why a `relay topology` command failed.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // `path` is the topology file; `errors` and `warnings` count them
pub enum TopologyCliError {
    /// The file could not be read or parsed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `validate` found errors (each printed before).
    #[error("{path}: {errors} error(s)")]
    Invalid { path: PathBuf, errors: usize },
    /// `validate --deny-warnings` found warnings (each printed before).
    #[error("{path}: {warnings} warning(s), denied by --deny-warnings")]
    Warnings { path: PathBuf, warnings: usize },
    /// Issuing the certificates failed.
    #[error(transparent)]
    Certs(#[from] CertError),
    /// Rendering the configurations failed.
    #[error(transparent)]
    Render(#[from] RenderError),
}

/// Runs a `relay topology` command.
pub fn run(command: TopologyCommand) -> Result<(), TopologyCliError> {
    match command {
        TopologyCommand::Validate {
            file,
            deny_warnings,
        } => {
            let mut checked = match strata_topology::load(&file) {
                Ok(c) => c,
                Err(strata_topology::LoadError::Invalid {
                    path,
                    errors,
                    warnings,
                }) => {
                    for w in &warnings {
                        eprintln!("warning: {}: {w}", path.display());
                    }
                    for e in &errors {
                        eprintln!("error: {}: {e}", path.display());
                    }
                    return Err(TopologyCliError::Invalid {
                        path,
                        errors: errors.len(),
                    });
                }
                Err(e) => return Err(e.into()),
            };
            // What `render` writes is checked: clusters without a backend count.
            checked
                .warnings
                .extend(checked.topology.unset_backend_warning());
            print_warnings(&file, &checked);
            let t = &checked.topology;
            if deny_warnings && !checked.warnings.is_empty() {
                return Err(TopologyCliError::Warnings {
                    path: file,
                    warnings: checked.warnings.len(),
                });
            }
            println!(
                "{}: topology {:?} is valid: 1 root, {} relays, {} clusters, {} join tokens",
                file.display(),
                t.name,
                t.relays.len() - 1,
                t.clusters.len(),
                t.relays.iter().map(|r| r.join_tokens).sum::<u32>()
            );
            Ok(())
        }
        TopologyCommand::Certs {
            file,
            out,
            ca_cert,
            ca_key,
            force,
        } => {
            let checked = strata_topology::load(&file)?;
            print_warnings(&file, &checked);
            let done = certs::issue_all(
                &checked.topology,
                &out,
                &CertOptions {
                    ca: ca_cert.zip(ca_key),
                    force,
                },
            )?;
            summarize(&done);
            warn_expiring(&done);
            Ok(())
        }
        TopologyCommand::Render {
            file,
            out,
            helm,
            systemd,
        } => {
            let mut checked = strata_topology::load(&file)?;
            checked
                .warnings
                .extend(checked.topology.unset_backend_warning());
            print_warnings(&file, &checked);
            let targets: Vec<Target> = [(helm, Target::Helm), (systemd, Target::Systemd)]
                .into_iter()
                .filter_map(|(on, t)| on.then_some(t))
                .collect();
            let rendered =
                render::render_for(&checked.topology, &out, &RenderOptions::default(), &targets)?;
            summarize(&rendered.files);
            println!(
                "root {:?}: API on {}; certificates: relay topology certs {} -o {}",
                rendered.root,
                rendered.api,
                file.display(),
                out.display()
            );
            Ok(())
        }
    }
}

/// Warns about every certificate written or kept that expires within
/// [`certs::WARN_DAYS`], saying how to renew it.
fn warn_expiring(done: &[(PathBuf, Action)]) {
    let now = certs::unix_now();
    let files: Vec<PathBuf> = done.iter().map(|(p, _)| p.clone()).collect();
    let soon = certs::expiring(&files, now, certs::WARN_DAYS);
    // Thousands of stores expire together: name the soonest few.
    const SHOWN: usize = 5;
    for e in soon.iter().take(SHOWN) {
        let when = if e.days_left < 0 {
            format!("expired on {}", certs::utc_date(e.not_after))
        } else {
            format!(
                "expires in {} day(s), on {}",
                e.days_left,
                certs::utc_date(e.not_after)
            )
        };
        eprintln!("warning: {} {when}", e.path.display());
    }
    if let Some(last) = soon.get(SHOWN..).and_then(|rest| rest.last()) {
        eprintln!(
            "warning: ... and {} more certificate(s) expiring by {}",
            soon.len() - SHOWN,
            certs::utc_date(last.not_after)
        );
    }
    if !soon.is_empty() {
        eprintln!(
            "warning: to renew a certificate, remove its .crt and run relay topology certs again: it is issued again for the same key"
        );
    }
}

fn summarize(done: &[(PathBuf, Action)]) {
    let count = |a: Action| done.iter().filter(|(_, x)| *x == a).count();
    // A topology of thousands of stores writes thousands of files: name the first few.
    const SHOWN: usize = 20;
    let changed: Vec<_> = done.iter().filter(|(_, a)| *a != Action::Kept).collect();
    for (path, action) in changed.iter().take(SHOWN) {
        println!(
            "{:<8} {}",
            format!("{action:?}").to_lowercase(),
            path.display()
        );
    }
    if changed.len() > SHOWN {
        println!("... and {} more", changed.len() - SHOWN);
    }
    println!(
        "{} created, {} replaced, {} kept",
        count(Action::Created),
        count(Action::Replaced),
        count(Action::Kept)
    );
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use strata_node::config::{field_names, reference_example, undocumented_fields};
    use strata_topology::raw::{
        RawApiFull, RawCluster, RawJoining, RawKubernetes, RawMetadata, RawRelay, RawRoot,
        RawSimulated, RawSpec, RawTopology,
    };

    const REFERENCE: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/CONFIG.md"));

    #[test]
    fn the_configuration_reference_names_every_topology_field_and_its_example_validates() {
        let sections: &[(&str, &[&str])] = &[
            ("", field_names::<RawTopology>()),
            ("metadata.", field_names::<RawMetadata>()),
            ("spec.", field_names::<RawSpec>()),
            ("spec.root.", field_names::<RawRoot>()),
            ("spec.root.api.", field_names::<RawApiFull>()),
            ("spec.relays[].", field_names::<RawRelay>()),
            ("spec.clusters[].", field_names::<RawCluster>()),
            ("spec.joining[].", field_names::<RawJoining>()),
            (
                "spec.clusters[].kubernetes.",
                field_names::<RawKubernetes>(),
            ),
            ("spec.clusters[].simulated.", field_names::<RawSimulated>()),
        ];
        // The catcher sees serde's names (renamed ones included), not Rust's.
        assert!(sections[0].1.contains(&"apiVersion"), "{sections:?}");
        assert!(sections[5].1.contains(&"parentAddress"), "{sections:?}");
        assert_eq!(
            undocumented_fields(REFERENCE, sections),
            Vec::<String>::new()
        );
        let example = reference_example(REFERENCE, "## A topology").unwrap();
        let checked = strata_topology::parse(&example, Path::new("CONFIG.md")).unwrap();
        assert_eq!(checked.warnings, Vec::<String>::new());
        let fr = checked
            .topology
            .relays
            .iter()
            .find(|r| r.name == "fr")
            .unwrap();
        assert_eq!(
            fr.link.proxy.as_deref(),
            Some("http://proxy.fr.example.com:3128")
        );
        assert_eq!(checked.topology.clusters.len(), 3);
        assert_eq!(
            checked.topology.clusters[1].backend,
            Some(strata_topology::ClusterBackend::Kubeconfig {
                path: "/etc/strata/lab-1.kubeconfig".into(),
                context: Some("lab-1".into())
            })
        );
    }
}
