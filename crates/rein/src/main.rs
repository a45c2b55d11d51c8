//! The `rein` command line: parses arguments and hands each subcommand to its library crate.
//! The work lives in the libraries; this file is glue, with `anyhow` for the top-level error.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "rein", version, about = "A reliability gateway for LLM calls")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the fault-injecting OpenAI/Anthropic simulator, for tests and drills.
    ///
    /// Pick a fault per request with the `x-sim-fault: <spec>` header or `"model": "sim:<spec>"`,
    /// or for every request with a scenario file. Prints the address it listens on.
    Sim(SimArgs),
}

#[derive(Debug, Args)]
struct SimArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A scenario file (TOML): a timeline of fault phases starting when the simulator starts.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Append the attempt log to this file, one JSON line per request.
    #[arg(long)]
    log: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Sim(args) => sim(args).await,
    }
}

async fn sim(args: SimArgs) -> anyhow::Result<()> {
    let scenario = match &args.scenario {
        Some(path) => Some(rein_sim::Scenario::from_file(path)?),
        None => None,
    };
    let config = rein_sim::SimConfig { scenario, log_path: args.log };
    let handle = rein_sim::bind(args.listen, config).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "rein sim listening on {}", handle.base_url())?;
    stdout.flush()?;
    drop(stdout);
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    handle.shutdown().await;
    Ok(())
}
