//! The `relay` binary: parses the command line and hands over to the library. Installed
//! (or linked) as `kubectl-strata` on the PATH, it is a kubectl plugin: `kubectl strata
//! clusters` runs `relay clusters`.

/// jemalloc, not glibc's malloc: see the workspace's Cargo.toml.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = strata_relay::cmd::Cli::parse_invoked(std::env::args_os());
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
