//! `bench`: the scale benchmark (issue 7). Builds a hierarchy of real relays and agents
//! over QUIC + mTLS on loopback, measures propagation, bytes per tier, status, resync,
//! a reconnect storm, memory and CPU, then the same against a flat hub and a NATS
//! leafnode tree, and prints a table (and JSON with `--json`).
//!
//! Each hierarchy runs in its own process (this binary with `--phase`), so that memory
//! and CPU figures are per process and one hierarchy's leftovers do not count in the
//! next one's. The NATS subscribers run in this process.
//!
//! `ulimit -n 20000; cargo run --release -p strata-sim --bin bench -- --leaves 10000 --fanout 10,10,100`

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use clap::Parser;
use strata_node::dial::TransportMode;
use strata_sim::bench::{self, NatsChoice, NatsFlavor, Options, Phase, TopologyReport};

#[derive(Debug, Parser)]
#[command(about = "Strata scale benchmark: our tree vs a flat hub vs NATS")]
struct Args {
    /// Leaf clusters (agents).
    #[arg(long, default_value_t = 1000)]
    leaves: usize,
    /// Relays per parent at each tier, then agents per lowest relay, e.g. 10,10,100
    /// (derived from --leaves when absent).
    #[arg(long, value_delimiter = ',')]
    fanout: Option<Vec<usize>>,
    /// Payload bytes of the object.
    #[arg(long, default_value_t = 1024)]
    object_bytes: usize,
    /// Updates measured.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Objects created while a region is cut off (P4).
    #[arg(long, default_value_t = 100)]
    changed: usize,
    /// Skip the flat hub baseline.
    #[arg(long)]
    no_flat: bool,
    /// Skip the NATS baseline.
    #[arg(long, conflicts_with = "require_nats")]
    no_nats: bool,
    /// Fail when nats-server is missing or a NATS baseline fails (CI); without it a
    /// failed baseline is reported and the run's other figures are kept.
    #[arg(long)]
    require_nats: bool,
    /// The nats-server binary (default: from the PATH).
    #[arg(long)]
    nats_server: Option<PathBuf>,
    /// Customize the object for every cluster (a placement rule with `${cluster.name}`,
    /// rendered by each agent).
    #[arg(long)]
    customize: bool,
    /// How every link of the tree is carried: quic, tcp (TLS 1.3 over TCP) or auto.
    #[arg(long, default_value = "quic")]
    transport: TransportMode,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Measure nothing: build the hierarchy, register every agent, then serve the
    /// root's Kubernetes API and web view on this address until Ctrl-C or SIGTERM,
    /// printing `export STRATA_*` lines for `relay` and kubectl (as `relay up` does).
    /// For the web view's figures at 10,000 clusters:
    /// `bench --leaves 10000 --serve-api 127.0.0.1:9443`, then
    /// `cargo run -p strata-system-tests --example ui_figures` with those variables set.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["json", "phase"])]
    serve_api: Option<std::net::SocketAddr>,
    /// Where --serve-api writes the root's certificate, token and configuration
    /// (default: a new temporary directory).
    #[arg(long, value_name = "DIR", requires = "serve_api")]
    api_dir: Option<PathBuf>,
    /// Internal: run only this hierarchy and write its figures as JSON to --phase-out.
    #[arg(long, hide = true, requires = "phase_out")]
    phase: Option<Phase>,
    /// Internal: where --phase writes its figures.
    #[arg(long, hide = true)]
    phase_out: Option<PathBuf>,
}

/// Runs one hierarchy in a child process (this binary with `--phase`).
fn phase_in_child(phase: Phase) -> anyhow::Result<TopologyReport> {
    let tag = match phase {
        Phase::Tree => "tree",
        Phase::Flat => "flat",
    };
    let out = std::env::temp_dir().join(format!("strata-bench-{}-{tag}.json", std::process::id()));
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.extend([
        "--phase".into(),
        tag.into(),
        "--phase-out".into(),
        out.display().to_string(),
    ]);
    let exe = std::env::current_exe().context("finding this binary")?;
    let status = Command::new(exe)
        .args(&args)
        .status()
        .with_context(|| format!("running the {tag} phase"))?;
    if !status.success() {
        anyhow::bail!("the {tag} phase failed ({status})");
    }
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let _ = std::fs::remove_file(&out);
    serde_json::from_str(&text).with_context(|| format!("the {tag} phase's figures"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The nodes' own logs, to stderr, for a run that misbehaves: `STRATA_BENCH_LOG=warn`
    // (an `EnvFilter`; off by default, the figures are taken without them).
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("STRATA_BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    let fanout = match args.fanout {
        Some(f) => f,
        None => bench::derive_fanout(args.leaves)?,
    };
    let product: usize = fanout.iter().product();
    if product != args.leaves {
        anyhow::bail!(
            "--fanout {fanout:?} gives {product} leaves, not --leaves {}",
            args.leaves
        );
    }
    let nats = if args.no_nats {
        None
    } else if args.require_nats || args.nats_server.is_some() {
        Some(NatsChoice::Required(args.nats_server))
    } else {
        Some(NatsChoice::IfFound)
    };
    let opts = Options {
        fanout,
        object_bytes: args.object_bytes,
        rounds: args.rounds,
        changed: args.changed,
        flat: !args.no_flat,
        nats,
        customize: args.customize,
        transport: args.transport,
    };
    if let (Some(phase), Some(path)) = (args.phase, &args.phase_out) {
        let figures = bench::topology(&opts, phase).await?;
        std::fs::write(path, serde_json::to_string(&figures)?)
            .with_context(|| format!("writing {}", path.display()))?;
        return Ok(());
    }
    bench::check_descriptors(&opts)?;
    if let Some(listen) = args.serve_api {
        let tmp;
        let dir = match args.api_dir {
            Some(d) => d,
            None => {
                tmp = tempfile::tempdir().context("creating a temporary directory")?;
                tmp.path().to_owned()
            }
        };
        bench::serve_api(
            &opts,
            listen,
            &dir,
            |served| {
                println!(
                    "{} clusters registered; the root's API serves on https://{} (web view: relay ui)",
                    served.clusters, served.server
                );
                println!("{}", served.exports());
            },
            stop_signal(),
        )
        .await?;
        return Ok(());
    }
    // Before anything starts: the load the figures were taken under.
    let machine = bench::machine();
    let tree = phase_in_child(Phase::Tree)?;
    let flat = if opts.flat && opts.fanout.len() > 1 {
        Some(phase_in_child(Phase::Flat)?)
    } else {
        None
    };
    let bytes = tree.encoded_object_bytes;
    let nats = bench::nats_baseline(&opts, bytes, false, NatsFlavor::Core).await?;
    let nats_tls = bench::nats_baseline(&opts, bytes, true, NatsFlavor::Core).await?;
    let jetstream_tls = bench::nats_baseline(&opts, bytes, true, NatsFlavor::JetStream).await?;
    let report = bench::report(machine, tree, flat, nats, nats_tls, jetstream_tls);
    println!("{}", bench::render(&report));
    if let Some(path) = args.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Ctrl-C or SIGTERM, whichever comes first.
async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
