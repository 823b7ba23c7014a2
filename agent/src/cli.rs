//! The `agent` command line, here rather than in `main.rs` so that the docs test parses
//! the commands the documentation shows with the binary's own definition.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Strata agent: keeps one leaf cluster in the state its placements describe, reports
/// how it is doing, and keeps enforcing that state while its parent is unreachable.
#[derive(Debug, Parser)]
#[command(name = "agent", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Logging options (`--log-format`, `--log`).
    #[command(flatten)]
    pub logging: strata_node::process::LogArgs,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent until SIGTERM or SIGINT.
    Run {
        /// The agent's configuration file (YAML).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
        /// Use this kubeconfig for the Kubernetes backend (overrides the file's
        /// `kubernetes.kubeconfig`; without either, `KUBECONFIG` or ~/.kube/config).
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
    /// Serve one mounted volume's bytes for a move (the mover pod's command).
    ///
    /// An agent driving a real cluster starts a mover pod to move a
    /// PersistentVolumeClaim: on the old cluster on a claim restored from a CSI
    /// VolumeSnapshot (the mover reads it), on the new cluster on the new claim (the
    /// mover writes it). The agent connects to --listen, sends the token as the first
    /// line and then the volume stream's header, and splices the stream it got from its
    /// parent onto the connection; any other connection is refused with an error frame.
    ///
    /// With --mode filesystem (the default) the volume's bytes are a deterministic tar
    /// of the tree at --path, so a second pass sends only the chunks from the first
    /// changed file on. A writing mover keeps the image it receives in
    /// PATH/.strata-mover/image (the claim holds the data twice) and extracts it over
    /// PATH when a pass completes, removing what the source no longer has. A reading
    /// mover writes the archive into --scratch (as large as the data). With --mode
    /// block, --path is the device (or a file) and its bytes are the volume.
    ///
    /// Example: STRATA_MOVER_TOKEN=s3cret agent mover --listen 0.0.0.0:7700 --path /volume
    Mover(crate::mover::MoverArgs),
}
