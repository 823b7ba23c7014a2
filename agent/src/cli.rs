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
    /// Serve one mounted volume's bytes for a move (the mover pod's command; see
    /// `agent mover --help`).
    Mover(crate::mover::MoverArgs),
}
