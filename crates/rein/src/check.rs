//! `rein check`: validates a config file and names every problem by key. An environment
//! variable the config names for a secret that is unset here is a warning, not a failure (the
//! file is checked, often on a machine that does not hold the secrets), unless `--strict`; every
//! other problem fails the check. On success it prints the effective config, secrets masked, and
//! for each Vertex AI provider its project, region and where its tokens come from.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io::Write;

use anyhow::Context;
use rein_runtime::config::{
    Config, ConfigError, ConfigProblem, ProviderKind, credentials, process_env,
};

use crate::CheckArgs;

/// Stands in for an unset variable's value in the second validation. The config reads
/// environment variables only for secrets, and checks of their values ask at most for a
/// `postgres://` URL (`store.postgres_url_env`) or a valid header value; this satisfies both.
const PLACEHOLDER: &str = "postgres://rein-check.invalid/unset";

/// Variables the config reads that are settings, not secrets: unset, they choose a default (the
/// metadata server, no project), so they are never filled with the placeholder.
const NOT_SECRETS: &[&str] = &[
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GCE_METADATA_HOST",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
    "CLOUD_ML_REGION",
];

pub(crate) fn run(args: CheckArgs) -> anyhow::Result<std::process::ExitCode> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("cannot read {}", args.config.display()))?;
    let name = args.config.display();
    let (result, unset) = validate(&text, args.strict);
    // On stdout beside a valid config, on stderr beside the problems of one that is not.
    match &result {
        Ok(_) => print_credentials(&text, &mut std::io::stdout().lock())?,
        Err(_) => print_credentials(&text, &mut std::io::stderr().lock())?,
    }
    let mut stderr = std::io::stderr().lock();
    for problem in &unset {
        writeln!(
            stderr,
            "{name}: warning: `{}`: {} (`rein serve` refuses to start until it is set; \
             `rein check --strict` fails on it)",
            problem.key, problem.message
        )?;
    }
    match result {
        Ok(config) => {
            let mut stdout = std::io::stdout().lock();
            writeln!(
                stdout,
                "{name} is valid: {} route(s), {} provider(s). Effective config (secrets masked):",
                config.routes.len(),
                config.providers.len()
            )?;
            writeln!(stdout, "{}", serde_json::to_string_pretty(&config)?)?;
            for (provider, config) in &config.providers {
                if let (ProviderKind::Vertex, rein_providers::ProviderConfig::Vertex(vertex)) =
                    (config.kind, &config.adapter)
                {
                    writeln!(stdout, "{}", vertex_note(provider, vertex))?;
                }
                if config.kind == ProviderKind::Replay {
                    let cassette = config.cassette.as_deref().unwrap_or_default();
                    writeln!(
                        stdout,
                        "note: `providers.{provider}` replays {cassette}{}, served in-process: a \
                         request it does not hold fails the call (never retried)",
                        recorded(cassette)
                    )?;
                }
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        Err(error) => {
            write!(stderr, "{name}: {error}")?;
            Ok(std::process::ExitCode::from(1))
        }
    }
}

/// Where each provider's credentials come from and which are missing (names only, never a
/// value), before the verdict.
fn print_credentials(text: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    let Some(providers) = credentials::explain_toml(text, &process_env) else {
        return Ok(());
    };
    let servers = credentials::explain_mcp_toml(text, &process_env).unwrap_or_default();
    if providers.is_empty() && servers.is_empty() {
        return Ok(());
    }
    writeln!(out, "Credentials (where each is read from; values are never shown):")?;
    for provider in &providers {
        writeln!(out, "{provider}")?;
    }
    for server in &servers {
        writeln!(out, "{server}")?;
    }
    Ok(())
}

/// What a Vertex provider will run with: project, region, and where its access tokens come
/// from (the key file and its account, or the metadata server). Never a secret.
fn vertex_note(provider: &str, vertex: &rein_providers::VertexConfig) -> String {
    let source = match &vertex.credentials {
        rein_providers::VertexCredentials::ServiceAccount { .. } => {
            format!("access tokens from the {}", vertex.credentials.describe())
        }
        rein_providers::VertexCredentials::Metadata { .. } => format!(
            "access tokens from {} (no `credentials_file`, and `GOOGLE_APPLICATION_CREDENTIALS` is \
             unset): this works only on Google Cloud (Compute Engine, GKE, Cloud Run)",
            vertex.credentials.describe()
        ),
    };
    format!(
        "note: `providers.{provider}` calls Vertex AI (publisher `{}`) in project `{}`, region \
         `{}`; {source}",
        vertex.publisher.as_str(),
        vertex.project,
        vertex.region
    )
}

/// How many interactions a replay provider's cassette holds, as " (N recorded interactions)".
#[cfg(feature = "sim")]
fn recorded(cassette: &str) -> String {
    rein_sim::cassette::Cassette::from_file(std::path::Path::new(cassette))
        .map(|c| format!(" ({} recorded interaction(s))", c.interactions.len()))
        .unwrap_or_default()
}

#[cfg(not(feature = "sim"))]
fn recorded(_cassette: &str) -> String {
    String::new()
}

/// The config, or its problems; and the problems that only say a secret's variable is unset,
/// when those are warnings (not `strict`).
fn validate(text: &str, strict: bool) -> (Result<Config, ConfigError>, Vec<ConfigProblem>) {
    let unset = RefCell::new(BTreeSet::new());
    let recording = |name: &str| {
        let value = process_env(name).filter(|value| !value.is_empty());
        if value.is_none() && !NOT_SECRETS.contains(&name) {
            unset.borrow_mut().insert(name.to_string());
        }
        value
    };
    let error = match Config::from_toml(text, &recording) {
        Ok(config) => return (Ok(config), Vec::new()),
        Err(error) => error,
    };
    let unset = unset.into_inner();
    if strict || unset.is_empty() {
        return (Err(error), Vec::new());
    }
    // Again as if every unset variable were set: what still fails is the config's own problem;
    // what no longer does was only an unset variable.
    let filled = |name: &str| {
        process_env(name)
            .filter(|value| !value.is_empty())
            .or_else(|| unset.contains(name).then(|| PLACEHOLDER.to_string()))
    };
    let second = Config::from_toml(text, &filled);
    let remaining: &[ConfigProblem] = match &second {
        Ok(_) => &[],
        Err(second) => &second.problems,
    };
    let warnings =
        error.problems.iter().filter(|problem| !remaining.contains(problem)).cloned().collect();
    (second, warnings)
}
