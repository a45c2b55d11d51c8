//! `rein serve`: reads the config (or the embedded default), applies `--listen`/`--port` over
//! its `server.listen` before validation (so the rules about listening still hold), binds, and
//! prints where it listens with one `curl` line to try, then serves until SIGTERM or Ctrl-C,
//! reloading on SIGHUP.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use rein_gateway::config::{Config, process_env, raw::RawServer};
use rein_gateway::server::{Gateway, Overrides, StartError, bind};

use crate::ServeArgs;

/// The config `rein serve` runs when given none.
const EMBEDDED_CONFIG: &str = include_str!("../../../examples/embedded.toml");

/// What the command line says about the address to listen on.
#[derive(Debug, Clone, Copy)]
enum Listen {
    Addr(SocketAddr),
    Port(u16),
}

pub async fn run(args: ServeArgs) -> anyhow::Result<std::process::ExitCode> {
    let default = args.config.is_none().then(|| EMBEDDED_CONFIG.to_string());
    let text = match &args.config {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                eprintln!("error: cannot read {}: {error}", path.display());
                return Ok(std::process::ExitCode::from(2));
            }
        },
        None => {
            tracing::info!(
                "no --config given: running the embedded default (simulated providers, no API keys)"
            );
            EMBEDDED_CONFIG.to_string()
        }
    };
    let listen = match (args.listen, args.port) {
        (Some(addr), _) => Some(Listen::Addr(addr)),
        (None, Some(port)) => Some(Listen::Port(port)),
        (None, None) => None,
    };
    let text = match listen {
        Some(listen) => with_listen(&text, listen),
        None => text,
    };
    let config = match Config::from_toml(&text, &process_env) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(std::process::ExitCode::from(2));
        }
    };
    let client_key_env = client_key_env(&text);
    // The address the flags chose stays in force across reloads (which re-read the file).
    let overrides = Overrides { listen: listen.map(|_| config.server.listen) };
    let gateway = match Gateway::from_config_with_overrides(
        config,
        args.config.clone(),
        default,
        Arc::new(process_env),
        overrides,
    )
    .await
    {
        Ok(gateway) => gateway,
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(std::process::ExitCode::from(2));
        }
    };
    let listener = match bind(&gateway).await {
        Ok(listener) => listener,
        Err(StartError::Bind { addr, source })
            if source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            eprintln!(
                "error: cannot listen on {addr}: {source} (is another gateway running there? \
                 pass --port or --listen to serve on another address)"
            );
            return Ok(std::process::ExitCode::from(2));
        }
        Err(error) => return Err(error.into()),
    };
    let addr = listener.local_addr()?;
    let routes = gateway.engine.route_names();
    {
        // Nobody may be reading stdout (a closed pipe): the gateway runs on regardless.
        let mut stdout = std::io::stdout().lock();
        let scheme = if gateway.runtime().config.server.tls.is_some() { "https" } else { "http" };
        let _ = writeln!(stdout, "rein listening on {scheme}://{addr}");
        let _ = writeln!(stdout, "routes: {}", routes.join(", "));
        if let Some(route) = routes.first() {
            let _ = writeln!(stdout, "try: {}", try_line(addr, route, client_key_env.as_deref()));
        }
        let _ = stdout.flush();
    }
    let reloader = gateway.clone();
    tokio::spawn(async move {
        let Ok(mut hangups) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            tracing::warn!("cannot listen for SIGHUP; reload through the admin API instead");
            return;
        };
        while hangups.recv().await.is_some() {
            match reloader.reload().await {
                Ok(version) => tracing::info!(version, "SIGHUP: config reloaded"),
                Err(error) => tracing::error!(
                    "SIGHUP: reload refused, the old config stays in force: {error}"
                ),
            }
        }
    });
    gateway.serve(listener, shutdown_signal()).await?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The config text with `server.listen` replaced as the command line says. Text that is not a
/// TOML table (or whose `server` or `server.listen` is malformed) is returned as it is, so that
/// validation names the problem by its key.
fn with_listen(text: &str, listen: Listen) -> String {
    let Ok(mut table) = text.parse::<toml::Table>() else { return text.to_string() };
    let server = table.entry("server").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(server) = server.as_table_mut() else { return text.to_string() };
    let addr = match listen {
        Listen::Addr(addr) => addr,
        Listen::Port(port) => {
            let current = match server.get("listen") {
                Some(value) => value.as_str().map(str::to_string),
                None => Some(RawServer::default().listen),
            };
            let Some(mut addr) = current.and_then(|text| text.parse::<SocketAddr>().ok()) else {
                return text.to_string();
            };
            addr.set_port(port);
            addr
        }
    };
    server.insert("listen".to_string(), toml::Value::String(addr.to_string()));
    toml::to_string(&table).unwrap_or_else(|_| text.to_string())
}

/// The environment variable holding the first client key, when the config requires keys.
fn client_key_env(text: &str) -> Option<String> {
    let table = text.parse::<toml::Table>().ok()?;
    let names = table.get("server")?.get("client_keys_env")?.as_array()?;
    names.first()?.as_str().map(str::to_string)
}

/// One `curl` call of `route` on the gateway at `addr` (a wildcard address is called on
/// loopback), with the client key from its variable when the gateway requires one.
fn try_line(addr: SocketAddr, route: &str, client_key_env: Option<&str>) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let url = format!("http://{}/v1/chat/completions", SocketAddr::new(ip, addr.port()));
    let route = serde_json::Value::from(route);
    let body = format!(r#"{{"model":{route},"messages":[{{"role":"user","content":"hi"}}]}}"#);
    let mut line =
        format!("curl -s {url} -H 'content-type: application/json' -d {}", shell_quote(&body));
    if let Some(name) = client_key_env {
        line.push_str(&format!(" -H \"authorization: Bearer ${name}\""));
    }
    line
}

/// `text` in single quotes for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
