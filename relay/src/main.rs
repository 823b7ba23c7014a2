//! The `relay` binary: parses the command line and hands over to the library.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = strata_relay::cmd::Cli::parse();
    strata_node::process::init_logging(&cli.logging);
    match strata_relay::cmd::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The error, then each of its causes: "cannot write x: permission denied".
            eprintln!("error: {:#}", anyhow::Error::new(e));
            std::process::ExitCode::FAILURE
        }
    }
}
