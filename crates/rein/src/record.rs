//! `rein record`: a recording reverse proxy in front of a provider. Point a client (or a
//! gateway's provider `base_url`) at it as at the provider; each exchange is forwarded, answered
//! unchanged, and appended to a cassette with credential headers, org and project ids, cookies
//! and the keys named by `--key-env` scrubbed. A `kind = "replay"` provider serves the cassette
//! in tests. The work is `rein_sim::record`'s; this is the command line around it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rein_core::Secret;
use rein_sim::record::{self, DEFAULT_MAX_BODY_BYTES, RecordConfig};

#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// The provider's base URL (e.g. `https://api.openai.com`): a request for /v1/x goes to
    /// {upstream}/v1/x.
    #[arg(long)]
    upstream: String,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// The cassette file to write. An existing file is refused unless --append.
    #[arg(long)]
    cassette: PathBuf,
    /// An environment variable holding a key to scrub wherever it appears (bodies, paths,
    /// query strings, headers), besides the credential headers' own values. Repeatable.
    #[arg(long = "key-env", value_name = "VAR")]
    key_env: Vec<String>,
    /// Add to an existing cassette instead of refusing it.
    #[arg(long)]
    append: bool,
    /// The most bytes of one request body and of one response body; past it the exchange is
    /// cut off and not recorded.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// The longest one exchange may take, in milliseconds; past it, cut off and not recorded.
    #[arg(long, default_value_t = 600_000)]
    timeout_ms: u64,
}

pub(crate) async fn run(args: RecordArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut secrets = Vec::new();
    for var in &args.key_env {
        match std::env::var(var) {
            Ok(value) if !value.is_empty() => secrets.push(Secret::new(value)),
            _ => anyhow::bail!("--key-env {var}: the environment variable is not set"),
        }
    }
    let mut config = RecordConfig::new(args.upstream.clone(), args.cassette.clone());
    config.secrets = secrets;
    config.append = args.append;
    config.max_body_bytes = args.max_body_bytes;
    config.timeout = Duration::from_millis(args.timeout_ms);
    let handle = record::bind(args.listen, config).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "rein record listening on {}, recording {} to {}",
        handle.base_url(),
        args.upstream.trim_end_matches('/'),
        args.cassette.display()
    )?;
    stdout.flush()?;
    drop(stdout);
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    let recorded = handle.recorded();
    handle.shutdown().await;
    eprintln!("rein record: {recorded} interaction(s) recorded to {}", args.cassette.display());
    Ok(std::process::ExitCode::SUCCESS)
}
