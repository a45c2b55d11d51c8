//! The `rein` command line: parses arguments and hands each subcommand to its library crate.
//! The work lives in the libraries; this file is glue, with `anyhow` for the top-level error.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

mod admin;
mod approvals;
mod check;
mod drill;
mod eval;
mod handoffs;
mod judge;
mod levers;
mod limits;
mod logs;
mod outbox;
mod probe;
#[cfg(feature = "sim")]
mod record;
mod serve;
mod traces;

/// A proxy allocates and frees many small buffers per request; mimalloc does that with far less
/// CPU than glibc's allocator (the benchmark's profile showed ~12% of rein's time in malloc/free),
/// asked through `rein-alloc` so that blocks over 1 KiB take its malloc path.
/// Built with `no_thp`: transparent huge pages would back each thread's small heap pages with 2 MiB
/// ones, which costs memory per open stream and keeps RSS up after a burst.
#[global_allocator]
static ALLOCATOR: rein_alloc::Allocator = rein_alloc::Allocator;
use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "rein", version, about = "A reliability gateway for LLM calls")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway: the OpenAI and Anthropic APIs in front of your routes.
    ///
    /// With no --config, runs the embedded default: two simulated providers in-process, no API
    /// keys needed. Reloads its config on SIGHUP; drains in-flight requests on SIGTERM/Ctrl-C.
    Serve(ServeArgs),
    /// Validate a config file, say what is wrong by key, and print the effective config with
    /// secrets masked.
    Check(CheckArgs),
    /// List, diff, change and revert a route's prompt and model-settings versions on a running
    /// gateway (through its admin API).
    Versions(VersionsArgs),
    /// Inspect and manage a running gateway's durable write queue (through its admin API):
    /// list, show, replay now, drop.
    Outbox(outbox::OutboxArgs),
    /// The writes a gate holds for a person, on a running gateway (through its admin API):
    /// list, approve (sent once, with its original key), reject.
    Approvals(approvals::ApprovalsArgs),
    /// The conversations sent to a person, on a running gateway (through its admin API): list,
    /// show the packet, record a reviewer's decision, the edit rate and canaries caught.
    Handoffs(handoffs::HandoffsArgs),
    /// The levers on a route, most easily undone first (through a running gateway's admin API):
    /// which are engaged and since when; revert, pin-model, route-to, release, kill on|off.
    Levers(levers::LeversArgs),
    /// Drills against a route marked `drillable`: failover (a share of traffic to the fallback
    /// for a while, its numbers beside the primary's), kill-switch (what customers get),
    /// handoff (time the replies to seeded conversations).
    Drill(drill::DrillArgs),
    /// The calls a running gateway kept traces of (through its admin API): list them, show one
    /// call's timeline (attempts, clocks, waits, tiers, checks, verdict) as a tree.
    Traces(traces::TracesArgs),
    /// The SLIs of a running gateway's recorded calls over a window, per route, tier and label
    /// (through its admin API).
    Sli(traces::SliArgs),
    /// Run a dataset's cases through a running gateway k times each (from a clean state), and
    /// report pass@1, pass@k and pass^k, the flaky cases, per-tier scores and repair rates, as a
    /// table, JSON and HTML. Resumes after Ctrl-C.
    Eval(eval::EvalArgs),
    /// The golden-prompt probe of a running gateway (through its admin API): run its questions
    /// through the production path now, or show the last run.
    Probe(probe::ProbeArgs),
    /// The online judge: its verdicts on a running gateway's sampled answers (and the lines a
    /// person labels), and how far it can be trusted: its verdicts against a person's labels
    /// (agreement with and without ties, Cohen's kappa, TPR/TNR with intervals, the
    /// disagreements, the drift week over week).
    Judge(judge::JudgeArgs),
    #[cfg(feature = "sim")]
    /// Run the fault-injecting OpenAI/Anthropic simulator, for tests and drills.
    ///
    /// Pick a fault per request with the `x-sim-fault: <spec>` header or `"model": "sim:<spec>"`,
    /// or for every request with a scenario file. Prints the address it listens on.
    Sim(SimArgs),
    #[cfg(feature = "sim")]
    /// Record real provider exchanges to a cassette file, for replay in tests.
    ///
    /// A reverse proxy: point a client at it as at the provider. Credential headers, org and
    /// project ids, cookies and the keys named by --key-env are scrubbed from what is written.
    /// A `kind = "replay"` provider serves the cassette. Prints the address it listens on.
    Record(record::RecordArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The config file (TOML). Without it, the embedded default config is used.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Listen on ADDR, overriding the config's `server.listen` (port 0 picks a free port; the
    /// startup line prints the address really bound). Same rules: a non-loopback address needs
    /// `server.client_keys_env`.
    #[arg(long, value_name = "ADDR", conflicts_with = "port")]
    listen: Option<SocketAddr>,
    /// Listen on PORT, on the host of the config's `server.listen`, overriding its port (0 picks
    /// a free port), e.g. to run a second gateway beside the first.
    #[arg(long)]
    port: Option<u16>,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log lines held for stderr while whatever reads it falls behind; past them lines are
    /// dropped and counted (`rein_log_lines_dropped_total`), and the gateway goes on serving.
    #[arg(long, value_name = "LINES", default_value_t = logs::DEFAULT_QUEUE,
          value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    log_queue: u32,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// The config file to check.
    config: PathBuf,
    /// Fail when an environment variable the config names for a secret is unset (by default
    /// that is a warning: `rein serve` needs it, checking the file does not).
    #[arg(long)]
    strict: bool,
}

#[derive(Debug, Args)]
struct VersionsArgs {
    /// The gateway's address.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8787")]
    url: String,
    /// Environment variable holding the admin key.
    #[arg(long, global = true, default_value = "REIN_ADMIN_KEY")]
    admin_key_env: String,
    #[command(subcommand)]
    action: VersionsAction,
}

#[derive(Debug, Subcommand)]
enum VersionsAction {
    /// Every version of a route, with author, time and which one is active.
    List { route: String },
    /// What changed between two versions.
    Diff { route: String, from: i64, to: i64 },
    /// Store new settings (a JSON file: {"tiers": {"TIER": {"model": ..., "system_prompt": ...}}})
    /// as a new version and make it serve.
    Set {
        route: String,
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        author: String,
        #[arg(long, default_value = "")]
        note: String,
    },
    /// Make an earlier version serve again.
    Revert {
        route: String,
        version: i64,
        #[arg(long)]
        author: String,
        #[arg(long)]
        reason: String,
    },
}

#[cfg(feature = "sim")]
#[derive(Debug, Args)]
struct SimArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A scenario file (TOML): a timeline of fault phases starting when the simulator starts,
    /// and `[[reply]]` rules that script what an answer says (with its logprobs).
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Append the attempt log to this file, one JSON line per request.
    #[arg(long)]
    log: Option<PathBuf>,
    /// How many of the newest requests the in-memory log keeps for `GET /_sim/log` (the file
    /// keeps every one).
    #[arg(long, value_name = "N", default_value_t = rein_sim::DEFAULT_LOG_KEEP)]
    log_keep: usize,
}

fn main() -> std::process::ExitCode {
    // rustls runs on ring, installed before any HTTP client is built (reqwest has none of its own).
    rein_providers::install_crypto_provider();
    let cli = Cli::parse();
    // The gateway's lines go through a queue to a thread of their own: a stalled reader of
    // stderr must not stall its event loops.
    let (json_logs, log_queue) = match &cli.command {
        Command::Serve(args) => {
            (matches!(args.log_format, LogFormat::Json), Some(args.log_queue as usize))
        }
        _ => (false, None),
    };
    let logs = logs::init(json_logs, log_queue);
    // Servers hold a file descriptor per connection, upstream ones included.
    #[cfg(feature = "sim")]
    let server = matches!(cli.command, Command::Serve(_) | Command::Sim(_));
    #[cfg(not(feature = "sim"))]
    let server = matches!(cli.command, Command::Serve(_));
    if server {
        limits::raise_open_files();
    }
    // `rein serve` runs one single-threaded event loop per worker (this one is the first; the
    // gateway starts the others), so no request hops between threads.
    let runtime = if matches!(cli.command, Command::Serve(_)) {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Check(args) => check::run(args),
            Command::Versions(args) => versions(args).await,
            Command::Outbox(args) => outbox::run(args).await,
            Command::Approvals(args) => approvals::run(args).await,
            Command::Handoffs(args) => handoffs::run(args).await,
            Command::Levers(args) => levers::run(args).await,
            Command::Drill(args) => drill::run(args).await,
            Command::Traces(args) => traces::run(args).await,
            Command::Sli(args) => traces::sli(args).await,
            Command::Eval(args) => eval::run(args).await,
            Command::Probe(args) => probe::run(args).await,
            Command::Judge(args) => judge::run(args).await,
            #[cfg(feature = "sim")]
            Command::Sim(args) => sim(args).await,
            #[cfg(feature = "sim")]
            Command::Record(args) => record::run(args).await,
        }
    });
    // What is queued is written before the last word, which is written directly.
    drop(logs);
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "sim")]
async fn sim(args: SimArgs) -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write;

    let scenario = match &args.scenario {
        Some(path) => Some(rein_sim::Scenario::from_file(path)?),
        None => None,
    };
    let config =
        rein_sim::SimConfig { scenario, log_path: args.log, log_keep: Some(args.log_keep) };
    let handle = rein_sim::bind(args.listen, config).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "rein sim listening on {}", handle.base_url())?;
    stdout.flush()?;
    drop(stdout);
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    handle.shutdown().await;
    Ok(std::process::ExitCode::SUCCESS)
}

async fn versions(args: VersionsArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = admin::Admin::new(&args.url, &args.admin_key_env)?;
    let request = match &args.action {
        VersionsAction::List { route } => admin.get(&format!("/admin/routes/{route}/versions")),
        VersionsAction::Diff { route, from, to } => {
            admin.get(&format!("/admin/routes/{route}/diff?from={from}&to={to}"))
        }
        VersionsAction::Set { route, file, author, note } => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let settings: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", file.display()))?;
            admin
                .post(&format!("/admin/routes/{route}/versions"))
                .json(&serde_json::json!({"settings": settings, "author": author, "note": note}))
        }
        VersionsAction::Revert { route, version, author, reason } => admin
            .post(&format!("/admin/routes/{route}/revert"))
            .json(&serde_json::json!({"version": version, "author": author, "reason": reason})),
    };
    let (status, body) = admin.send(request).await?;
    // The answer is printed whole either way (an error's JSON names the problem).
    admin::json(&mut std::io::stdout().lock(), &body)?;
    Ok(if status.is_success() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
