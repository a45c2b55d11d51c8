//! One upstream MCP server, as rein's client: Streamable HTTP or a stdio child process, spoken
//! with the official Rust SDK (`rmcp`), negotiating the current protocol revision and falling
//! back to the previous one's handshake. The connection is made on first use and made again
//! after the transport breaks; connecting is bounded by its own budget inside the call's.
//!
//! A call's ending is read the way an http rung's is (`HttpOutcome`), with one question that
//! matters for writes: could the server have executed it? A connection that could not be made,
//! or a request refused before it was read, executed nothing; a broken stream, a timeout or a
//! server error after the request went out may have.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ErrorCode, Implementation, MetaObject,
    ProtocolVersion, RequestMetaObject, Tool as McpTool,
};
use rmcp::service::{
    ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService,
    ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value};

use crate::http::HttpOutcome;

/// The `_meta` key under which rein sends a write's idempotency key to an MCP server (a server
/// that honours it is declared `idempotency = "key"`).
pub const IDEMPOTENCY_META_KEY: &str = "io.rein/idempotency-key";

/// How rein reaches the server.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// Streamable HTTP at `url`, with these headers on every request (values may be secrets).
    Http { url: String, headers: Vec<(String, String)> },
    /// A child process speaking MCP on its stdin and stdout.
    Stdio { command: String, args: Vec<String>, env: Vec<(String, String)> },
}

/// A server's tool list as last fetched.
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub tools: Vec<McpTool>,
    /// When it was fetched, on tokio's clock.
    pub fetched: tokio::time::Instant,
    /// How long it is good for (the server's `ttlMs`, capped by `[mcp] list_ttl_ms`).
    pub ttl: Duration,
}

type Client = Arc<RunningService<RoleClient, Handler>>;

/// One upstream MCP server and rein's connection to it.
pub(crate) struct McpServer {
    pub name: String,
    transport: Transport,
    pub connect_timeout: Duration,
    /// A call's budget for its tools without a ladder of their own.
    pub default_timeout: Duration,
    max_response_bytes: usize,
    list_ttl: Duration,
    client: tokio::sync::Mutex<Option<Client>>,
    listing: std::sync::Mutex<Option<Listing>>,
    /// Set when the server said its list changed: the next listing fetches.
    stale: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The transport's headers and environment may hold secrets: only the shape is shown.
        let transport = match &self.transport {
            Transport::Http { url, .. } => format!("http {url}"),
            Transport::Stdio { command, .. } => format!("stdio {command}"),
        };
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("transport", &transport)
            .finish()
    }
}

/// rein's side of the session: it asks nothing of the client's capabilities and notes when the
/// server's tool list changed.
#[derive(Clone)]
pub(crate) struct Handler {
    stale: Arc<std::sync::atomic::AtomicBool>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let implementation = Implementation::new("rein", env!("CARGO_PKG_VERSION"));
        ClientConfig::new(ClientCapabilities::default(), implementation)
    }

    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<RoleClient>) {
        self.stale.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl McpServer {
    pub(crate) fn new(
        name: &str,
        transport: Transport,
        connect_timeout: Duration,
        default_timeout: Duration,
        max_response_bytes: u64,
        list_ttl: Duration,
    ) -> Self {
        Self {
            name: name.to_string(),
            transport,
            connect_timeout,
            default_timeout,
            max_response_bytes: usize::try_from(max_response_bytes).unwrap_or(usize::MAX),
            list_ttl,
            client: tokio::sync::Mutex::new(None),
            listing: std::sync::Mutex::new(None),
            stale: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// The live connection, made now (within `budget`) when there is none.
    async fn connect(&self, budget: Duration) -> Result<Client, String> {
        let started = Instant::now();
        let mut slot = match tokio::time::timeout(budget, self.client.lock()).await {
            Ok(slot) => slot,
            Err(_) => return Err("timed out waiting for another connect".into()),
        };
        if let Some(client) = slot.as_ref()
            && !client.is_transport_closed()
        {
            return Ok(client.clone());
        }
        *slot = None;
        let left = budget.saturating_sub(started.elapsed()).min(self.connect_timeout);
        let handler = Handler { stale: self.stale.clone() };
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        let connecting = async {
            match &self.transport {
                Transport::Http { url, headers } => {
                    let mut custom = HashMap::new();
                    for (name, value) in headers {
                        let name = http::HeaderName::try_from(name.as_str())
                            .map_err(|e| format!("header {name}: {e}"))?;
                        let mut value = http::HeaderValue::try_from(value.as_str())
                            .map_err(|_| format!("header {name}: not a valid header value"))?;
                        value.set_sensitive(true);
                        custom.insert(name, value);
                    }
                    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(custom)
                        .max_json_response_size(self.max_response_bytes)
                        .max_sse_event_size(self.max_response_bytes);
                    let http = reqwest::Client::builder()
                        .redirect(reqwest::redirect::Policy::none())
                        .build()
                        .map_err(|e| format!("http client: {e}"))?;
                    let transport = StreamableHttpClientTransport::with_client(http, config);
                    handler
                        .serve_with_lifecycle(transport, lifecycle)
                        .await
                        .map_err(|e| e.to_string())
                }
                Transport::Stdio { command, args, env } => {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args).env_clear();
                    if let Ok(path) = std::env::var("PATH") {
                        cmd.env("PATH", path);
                    }
                    cmd.envs(env.iter().map(|(k, v)| (k, v)));
                    let child = TokioChildProcess::builder(cmd)
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .map(|(child, _stderr)| child)
                        .map_err(|e| format!("could not start `{command}`: {e}"))?;
                    handler.serve_with_lifecycle(child, lifecycle).await.map_err(|e| e.to_string())
                }
            }
        };
        match tokio::time::timeout(left, connecting).await {
            Ok(Ok(service)) => {
                // rein keeps the server's list itself (and says when it is serving an old
                // one): the SDK's own response cache would answer from a stale list unmarked.
                service.peer().set_response_cache_config(ClientCacheConfig::disabled()).await;
                let client = Arc::new(service);
                *slot = Some(client.clone());
                Ok(client)
            }
            Ok(Err(error)) => Err(error),
            Err(_) => Err(format!("connecting timed out after {} ms", left.as_millis())),
        }
    }

    /// Forget the connection (it broke): the next call connects again.
    async fn drop_client(&self) {
        *self.client.lock().await = None;
    }

    /// Call `tool` with `args` within `budget`, sending `key` (a write's) in `_meta`.
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: &Value,
        key: Option<&str>,
        budget: Duration,
    ) -> HttpOutcome {
        let started = Instant::now();
        let client = match self.connect(budget).await {
            Ok(client) => client,
            // Nothing was sent for this call.
            Err(reason) => {
                return HttpOutcome::Failed {
                    reason: format!("connect: {reason}"),
                    may_have_executed: false,
                };
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = args.as_object().cloned();
        if let Some(key) = key {
            let mut meta = Map::new();
            meta.insert(IDEMPOTENCY_META_KEY.to_string(), Value::String(key.to_string()));
            params.meta = Some(RequestMetaObject(MetaObject(meta)));
        }
        let left = budget.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, client.peer().call_tool(params)).await {
            Err(_) => HttpOutcome::TimedOut,
            Ok(Ok(result)) => {
                if result.is_error == Some(true) {
                    HttpOutcome::Rejected { status: 200, message: error_text(&result.content) }
                } else {
                    HttpOutcome::Answered(result_value(&result.structured_content, &result.content))
                }
            }
            Ok(Err(ServiceError::McpError(error))) => {
                let message = error.message.to_string();
                if error.code == ErrorCode::INVALID_PARAMS
                    || error.code == ErrorCode::METHOD_NOT_FOUND
                {
                    // The server read the call and refused it before running the tool.
                    HttpOutcome::Rejected { status: 400, message }
                } else {
                    HttpOutcome::Failed {
                        reason: format!("server error {}: {message}", error.code.0),
                        may_have_executed: true,
                    }
                }
            }
            Ok(Err(error)) => {
                let refused = connection_refused(&error);
                self.drop_client().await;
                HttpOutcome::Failed {
                    reason: format!("transport: {error}"),
                    may_have_executed: !refused,
                }
            }
        }
    }

    /// The server's tools: the kept list while it is fresh, else fetched within `budget`.
    /// `Err` with the last list (if any) when fetching failed.
    pub(crate) async fn list(
        &self,
        budget: Duration,
    ) -> Result<Listing, (String, Option<Listing>)> {
        let stale = self.stale.swap(false, std::sync::atomic::Ordering::Relaxed);
        let kept = self.listing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(listing) = &kept
            && !stale
            && listing.fetched.elapsed() < listing.ttl
        {
            return Ok(listing.clone());
        }
        let started = Instant::now();
        let client = match self.connect(budget).await {
            Ok(client) => client,
            Err(reason) => return Err((reason, kept)),
        };
        let left = budget.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, client.peer().list_all_tools_with_cache_hint()).await {
            Ok(Ok(merged)) => {
                let ttl = merged
                    .ttl_ms
                    .map_or(self.list_ttl, |ms| Duration::from_millis(ms).min(self.list_ttl));
                let listing =
                    Listing { tools: merged.items, fetched: tokio::time::Instant::now(), ttl };
                *self.listing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(listing.clone());
                Ok(listing)
            }
            Ok(Err(error)) => {
                if !matches!(error, ServiceError::McpError(_)) {
                    self.drop_client().await;
                }
                Err((format!("tools/list: {error}"), kept))
            }
            Err(_) => Err(("tools/list timed out".into(), kept)),
        }
    }
}

/// A tool result as the envelope's `result`: the server's structured content when it gave
/// some, else its content (one text block: its JSON if it is JSON, else the text; otherwise the
/// blocks themselves).
fn result_value(structured: &Option<Value>, content: &[rmcp::model::ContentBlock]) -> Value {
    if let Some(value) = structured {
        return value.clone();
    }
    if let [block] = content
        && let Some(text) = block.as_text()
    {
        return serde_json::from_str(&text.text)
            .unwrap_or_else(|_| Value::String(text.text.clone()));
    }
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// The words of a tool's error result.
fn error_text(content: &[rmcp::model::ContentBlock]) -> String {
    let texts: Vec<&str> =
        content.iter().filter_map(|block| block.as_text().map(|t| t.text.as_str())).collect();
    if texts.is_empty() { "the tool reported an error".to_string() } else { texts.join("\n") }
}

/// Whether a transport failure is a connection that was never made (so nothing was sent).
fn connection_refused(error: &ServiceError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(reqwest) = current.downcast_ref::<reqwest::Error>()
            && reqwest.is_connect()
        {
            return true;
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = current.source();
    }
    false
}
