//! rein sim: a fault-injecting simulator of the OpenAI Chat Completions and Anthropic Messages
//! APIs. It speaks both wire formats as the providers do (streaming and not, error bodies,
//! request-id headers) and breaks requests on demand, so rein's end-to-end tests and users'
//! drills can watch the gateway meet each failure for real. OpenAI's Responses API is served
//! too (`POST /v1/responses`: the `response` object, the typed event stream, `response.failed`
//! as the in-stream error), with the same faults.
//!
//! A request's fault comes from, in order: the `x-sim-fault` header, a `model` of the form
//! `sim:<spec>`, the active [`Scenario`] phase. See [`FaultSpec`] for the spec language.
//! Healthy answers are deterministic (see [`healthy_answer`]) unless a scenario's reply rule
//! ([`ReplyRule`]) scripts what they say, and every request lands in an attempt log
//! ([`LogEntry`]). Admin routes: `GET /_sim/log`, `POST /_sim/reset`, `GET /_sim/health`.
//!
//! Real answers have quirks no script thinks of: [`record`] captures real provider exchanges
//! (scrubbed of credentials, [`scrub`]) to a [`cassette`] file, and [`replay`] serves them in
//! tests, failing loudly on a request that was not recorded or a recording that never played.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rein_sim::SimError> {
//! // Or `rein_sim::start` with a `tokio::net::TcpListener` you bound yourself.
//! let addr = "127.0.0.1:0".parse().expect("an address");
//! let sim = rein_sim::bind(addr, rein_sim::SimConfig::default()).await?;
//! println!("{}", sim.base_url()); // point an OpenAI client at {base_url}/v1
//! sim.shutdown().await;
//! # Ok(()) }
//! ```

mod answer;
mod anthropic;
mod bedrock;
mod body;
pub mod cassette;
mod fault;
mod gemini;
mod listen;
mod log;
mod openai;
pub mod record;
pub mod replay;
mod request;
mod respond;
mod responses;
mod scenario;
mod schema;
pub mod scrub;
mod server;
mod state;
mod stream;
pub mod vertex;
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use answer::{HealthyAnswer, HealthyToolCall, SENTINEL, healthy_answer, healthy_text};
pub use fault::{
    ErrorFault, ErrorKind, FAULT_NAMES, FaultSpec, FaultSpecError, Outcome, Shape, Step, Transport,
    say_spec,
};
pub use log::{DEFAULT_LOG_KEEP, FaultSource, LogEntry};
pub use respond::FAULT_HEADER;
pub use scenario::{Phase, PhaseFaults, ReplyRule, Scenario, ScenarioError};

/// How to run the simulator.
#[derive(Debug, Clone, Default)]
pub struct SimConfig {
    /// A timeline of faults, starting when the simulator starts.
    pub scenario: Option<Scenario>,
    /// Append the attempt log here, one JSON line per request.
    pub log_path: Option<PathBuf>,
    /// How many of the newest requests the in-memory log keeps ([`SimHandle::log`],
    /// `GET /_sim/log`); `None`: [`DEFAULT_LOG_KEEP`]. The file keeps every one.
    pub log_keep: Option<usize>,
}

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("cannot listen on {addr}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot read the listener's address")]
    Address(#[source] std::io::Error),
    #[error("cannot open the attempt log {}", path.display())]
    Log { path: PathBuf, source: std::io::Error },
}

/// A running simulator. Dropping the handle stops it, like [`SimHandle::shutdown`] without
/// waiting.
#[derive(Debug)]
pub struct SimHandle {
    addr: SocketAddr,
    shared: Arc<state::Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

/// Starts the simulator on `listener` (bind it to `127.0.0.1:0` in tests). It runs on the
/// current tokio runtime, and its timeline uses tokio's clock, so it follows paused time.
pub async fn start(listener: TcpListener, config: SimConfig) -> Result<SimHandle, SimError> {
    let addr = listener.local_addr().map_err(SimError::Address)?;
    let keep = config.log_keep.unwrap_or(DEFAULT_LOG_KEEP);
    let log = log::AttemptLog::open(config.log_path.as_deref(), keep)?;
    let shared = Arc::new(state::Shared::new(config.scenario, log));
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(server::accept_loop(listener, shared.clone(), stopped));
    Ok(SimHandle { addr, shared, stop, task: Some(task) })
}

/// Binds `addr` and starts the simulator on it.
pub async fn bind(addr: SocketAddr, config: SimConfig) -> Result<SimHandle, SimError> {
    let listener = listen(addr).map_err(|source| SimError::Bind { addr, source })?;
    start(listener, config).await
}

/// A listener with address reuse and an accept queue of 4,096 (tokio's default of 1,024 drops
/// connections when thousands of streams open within seconds, as the streams benchmark does).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

impl SimHandle {
    /// The address the simulator listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`: OpenAI clients take `{base_url}/v1` as their base URL, Anthropic
    /// clients `{base_url}`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received since the start or the last reset, in order: the newest
    /// [`SimConfig::log_keep`] of them.
    pub fn log(&self) -> Vec<LogEntry> {
        self.shared.log.entries()
    }

    /// How many requests since the start or the last reset are no longer in [`SimHandle::log`].
    pub fn log_dropped(&self) -> u64 {
        self.shared.log.dropped()
    }

    /// A Vertex AI service-account key file (JSON) whose `token_uri` is this simulator's
    /// `/token`: a provider given it fetches its tokens here. The key is a throwaway test key.
    pub fn vertex_service_account(&self) -> String {
        vertex::test_service_account(&format!("{}/token", self.base_url()))
    }

    /// How long the Vertex access tokens issued from now on live (default an hour).
    pub fn set_token_lifetime(&self, lifetime: std::time::Duration) {
        self.shared.tokens.set_lifetime(lifetime);
    }

    /// Expires every Vertex access token issued so far: requests with one get a 401.
    pub fn expire_tokens(&self) {
        self.shared.tokens.expire_all();
    }

    /// Every Vertex access token handed out, in order, with the grant that made it.
    pub fn token_grants(&self) -> Vec<vertex::TokenGrant> {
        self.shared.tokens.grants()
    }

    /// Restarts the scenario timeline and forgets script positions and the in-memory log,
    /// like `POST /_sim/reset`.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Stops accepting, drops every open connection and waits for the accept loop to end.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    /// More clients connect at once than tokio's default accept queue (1,024) holds, and nobody
    /// accepts yet: with the larger backlog every one of them connects at once; with the default,
    /// those past 1,025 wait for a SYN retry that the full queue drops again.
    #[tokio::test]
    async fn a_burst_past_tokios_default_backlog_connects_without_being_accepted() {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        const CLIENTS: usize = 1_100;
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        if soft < 2 * CLIENTS as u64 {
            setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
        }
        let listener = super::listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = listener.local_addr().unwrap();
        let connects = (0..CLIENTS).map(|_| async move {
            // Real time: the kernel's SYN retry (1 s, then 3 s) is what a full queue costs.
            tokio::time::timeout(
                std::time::Duration::from_millis(2500),
                tokio::net::TcpStream::connect(addr),
            )
            .await
        });
        let results = futures_util::future::join_all(connects).await;
        let connected: Vec<_> = results.into_iter().filter_map(|r| r.ok()?.ok()).collect();
        assert_eq!(connected.len(), CLIENTS, "connections completed before any accept");
        drop(listener);
    }
}
