//! `sim run SCENARIO --seed N` and `sim sweep SCENARIO --seeds A..B`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use strata_sim::check::secs;
use strata_sim::run::{Outcome, run};
use strata_sim::scenario::Scenario;

#[derive(Parser)]
#[command(about = "Deterministic simulation of the real relay and agent code")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulates one seed and prints a summary.
    Run {
        /// The scenario file.
        scenario: PathBuf,
        /// The seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Run twice and check both runs produce the same trace hash.
        #[arg(long)]
        check_determinism: bool,
    },
    /// Simulates a range of seeds; stops at the first failure.
    Sweep {
        /// The scenario file(s).
        #[arg(required = true)]
        scenarios: Vec<PathBuf>,
        /// Seeds, `A..B` (B excluded).
        #[arg(long, default_value = "0..20")]
        seeds: String,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SIM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .init();
    match Cli::parse().command {
        Command::Run {
            scenario,
            seed,
            check_determinism,
        } => {
            let s = load(&scenario)?;
            let wall = tokio::time::Instant::now();
            let o = run(&s, seed)?;
            print_summary(&scenario, &o, wall.elapsed());
            if check_determinism {
                let again = run(&s, seed)?;
                if again.trace_hash != o.trace_hash {
                    anyhow::bail!(
                        "not deterministic: seed {seed} gave trace hashes {:016x} and {:016x}",
                        o.trace_hash,
                        again.trace_hash
                    );
                }
                println!("deterministic: the same seed gave the same trace hash twice");
            }
            if o.violation.is_some() {
                std::process::exit(1);
            }
        }
        Command::Sweep { scenarios, seeds } => {
            let (a, b) = seeds
                .split_once("..")
                .context("--seeds must look like A..B")?;
            let (a, b): (u64, u64) = (a.parse()?, b.parse()?);
            for path in &scenarios {
                let s = load(path)?;
                let wall = tokio::time::Instant::now();
                for seed in a..b {
                    let o = run(&s, seed)?;
                    if o.violation.is_some() {
                        print_summary(path, &o, wall.elapsed());
                        println!(
                            "reproduce: cargo run --release -p strata-sim -- run {} --seed {seed}",
                            path.display()
                        );
                        std::process::exit(1);
                    }
                }
                println!(
                    "{}: seeds {a}..{b} passed in {:.1}s",
                    path.display(),
                    wall.elapsed().as_secs_f64()
                );
            }
        }
    }
    Ok(())
}

/// Loads a scenario, printing the topology compiler's warnings.
fn load(path: &std::path::Path) -> anyhow::Result<Scenario> {
    let s = Scenario::load(path)?;
    for w in &s.warnings {
        eprintln!("warning: {}: topology: {w}", path.display());
    }
    Ok(s)
}

fn print_summary(path: &std::path::Path, o: &Outcome, wall: Duration) {
    println!("scenario {} seed {}", path.display(), o.seed);
    println!(
        "  simulated {} in {:.2}s wall; {} revisions applied",
        secs(o.ended),
        wall.as_secs_f64(),
        o.revisions
    );
    match o.converged {
        Some((at, after)) => println!(
            "  converged at {} ({} after the last fault healed)",
            secs(at),
            secs(after)
        ),
        None => println!("  did not converge"),
    }
    let (mut bytes, mut dgrams) = (0, 0);
    for ((a, b), (by, dg)) in &o.links {
        println!("  link {a} <-> {b}: {by} bytes, {dg} datagrams");
        bytes += by;
        dgrams += dg;
    }
    println!("  total: {bytes} bytes, {dgrams} datagrams (messages)");
    println!("  max revision lag: {}", o.max_lag);
    if let Some((sent, full)) = o.resync {
        println!(
            "  resync after the partition: {sent} bytes (a full resend: {full} bytes of bodies)"
        );
    }
    if let Some((fewest, armed)) = o.available {
        println!(
            "  available: on at least {fewest} clusters from {} on (the bound reached)",
            secs(armed)
        );
    }
    if let Some(at) = o.converged_early {
        println!("  converged at {} with the faults still in place", secs(at));
    }
    for line in &o.rollout {
        println!("  rollout: {line}");
    }
    for line in &o.stateful {
        println!("  stateful move: {line}");
    }
    for line in &o.certificates {
        println!("  certificates: {line}");
    }
    println!("  trace hash: {:016x}", o.trace_hash);
    if let Some((v, at, trace)) = &o.violation {
        println!(
            "VIOLATION seed {} at {}: {}\n  {}",
            o.seed,
            secs(*at),
            v.invariant,
            v.detail
        );
        println!("  trace (last events):");
        for line in trace {
            println!("    {line}");
        }
    }
}
