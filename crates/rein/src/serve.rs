//! `rein serve`: reads the config (or the embedded default), applies `--listen`/`--port` over
//! its `server.listen` before validation (so the rules about listening still hold), binds, and
//! prints where it listens with one `curl` line to try, then serves until SIGTERM or Ctrl-C,
//! reloading on SIGHUP.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use rein_gateway::server::{Gateway, bind};
use rein_runtime::config::{Config, Listen, client_key_env, process_env, with_listen};
use rein_runtime::{Overrides, Runtime, StartError};

use crate::ServeArgs;

/// The config `rein serve` runs when given none.
const EMBEDDED_CONFIG: &str = include_str!("../../../examples/embedded.toml");

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<std::process::ExitCode> {
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
    let builder = Runtime::builder().source(args.config.clone(), default);
    let gateway = match Gateway::start(builder.overrides(overrides), Some(config)).await {
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
    let routes = gateway.runtime.engine.route_names();
    {
        // Nobody may be reading stdout (a closed pipe): the gateway runs on regardless.
        let mut stdout = std::io::stdout().lock();
        let scheme = if gateway.current().config.server.tls.is_some() { "https" } else { "http" };
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
