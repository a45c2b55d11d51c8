//! `/mcp` over real HTTP with the official Rust SDK's client: a rein gateway on 127.0.0.1:0
//! (SQLite in a temp dir) in front of an MCP server started here. The endpoint asks for a
//! client key like every other, and an MCP tool call is the tool endpoint's call: the run's
//! stop conditions count it, a fallback shows in `rein_fallback_served_total`, and the call's
//! trace is kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rein_gateway::server::Gateway;
use rein_runtime::config::Config;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::oneshot;

const CLIENT_KEY: &str = "mcp-client-key-1";
const ADMIN_KEY: &str = "mcp-admin-key-1";

#[derive(Clone, Default)]
struct Orders {
    lookups: Arc<AtomicUsize>,
}

impl ServerHandler for Orders {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema: JsonObject =
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}})
                .as_object()
                .cloned()
                .unwrap();
        let lookup = Tool::new("lookup", "Look an order up.", Arc::new(schema))
            .with_annotations(ToolAnnotations::new().read_only(true));
        Ok(ListToolsResult::with_all_items(vec![lookup]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let id = request.arguments.as_ref().and_then(|a| a.get("order_id").cloned());
        Ok(CallToolResult::structured(json!({"order_id": id, "status": "shipped"})).into())
    }
}

/// A server on 127.0.0.1 that `stop` closes, connections and all.
struct Server {
    addr: std::net::SocketAddr,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

async fn serve(router: axum::Router) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        axum::serve(listener, router).with_graceful_shutdown(shutdown).await.unwrap();
    });
    Server { addr, stop, task }
}

async fn start_orders(orders: Orders) -> Server {
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = false;
    config.json_response = true;
    let service = StreamableHttpService::new(
        move || Ok(orders.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    serve(axum::Router::new().nest_service("/mcp", service)).await
}

/// A gateway in front of the orders server at `upstream`; the SQLite file lives in `dir`.
async fn start_gateway(dir: &tempfile::TempDir, upstream: std::net::SocketAddr) -> Server {
    let sqlite = dir.path().join("rein.db");
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
client_keys_env = ["CLIENT_KEY"]
admin_key_env = "ADMIN_KEY"
max_body_bytes = 65536

[store]
sqlite_path = "{}"

[mcp.servers.orders]
url = "http://{upstream}/mcp"
timeout_ms = 2000
cache_max_age_ms = 3600000
"#,
        sqlite.display()
    );
    let vars: HashMap<&str, &str> = [("CLIENT_KEY", CLIENT_KEY), ("ADMIN_KEY", ADMIN_KEY)].into();
    let env: rein_runtime::EnvSource =
        Arc::new(move |name: &str| vars.get(name).map(|v| v.to_string()));
    let config = Config::from_toml(&toml, &*env).unwrap();
    let gateway = Gateway::from_config(config, None, None, env).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        gateway
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Server { addr, stop, task }
}

/// The SDK's client on the gateway's `/mcp`, with the client key and `headers`.
async fn client(
    gateway: std::net::SocketAddr,
    headers: &[(&str, &str)],
) -> RunningService<RoleClient, ()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut custom = HashMap::new();
    for (name, value) in headers {
        custom.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{gateway}/mcp"))
        .auth_header(CLIENT_KEY)
        .custom_headers(custom);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    ().serve(transport).await.unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = args.as_object().cloned();
    client.peer().call_tool(params).await.unwrap()
}

fn envelope(result: &CallToolResult) -> &Value {
    result.structured_content.as_ref().expect("rein's envelope")
}

#[tokio::test]
async fn mcp_asks_for_a_client_key() {
    let dir = tempfile::tempdir().unwrap();
    let orders = start_orders(Orders::default()).await;
    let gateway = start_gateway(&dir, orders.addr).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    for key in [None, Some("wrong-key")] {
        let mut request = reqwest::Client::new()
            .post(format!("http://{}/mcp", gateway.addr))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{key:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32001, "{body}");
    }
    gateway.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn an_mcp_call_is_a_tool_call_with_run_guards_metrics_and_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let orders_state = Orders::default();
    let orders = start_orders(orders_state.clone()).await;
    let gateway = start_gateway(&dir, orders.addr).await;

    // The run's stop conditions count MCP calls: the same call a third time stops the run.
    let in_run = client(gateway.addr, &[("x-rein-run-id", "run-mcp-1")]).await;
    let tools = in_run.peer().list_all_tools().await.unwrap();
    assert_eq!(tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>(), ["orders__lookup"]);
    let args = json!({"order_id": "A-1"});
    for _ in 0..2 {
        let answer = call(&in_run, "orders__lookup", args.clone()).await;
        assert_eq!(envelope(&answer)["status"], "ok", "{answer:?}");
    }
    let stopped = call(&in_run, "orders__lookup", args.clone()).await;
    assert_eq!(envelope(&stopped)["status"], "stopped", "{stopped:?}");
    assert_eq!(stopped.is_error, Some(true));
    assert_eq!(orders_state.lookups.load(Ordering::SeqCst), 2, "a stopped call runs nothing");
    in_run.cancel().await.unwrap();

    // The server gone: the cache answers, and the fallback is counted and traced.
    orders.stop().await;
    let outside = client(gateway.addr, &[]).await;
    let cached = call(&outside, "orders__lookup", args).await;
    let cached_envelope = envelope(&cached);
    assert_eq!(cached_envelope["source"], "cache", "{cached:?}");
    assert_eq!(cached_envelope["degraded"], true);
    outside.cancel().await.unwrap();

    let http = reqwest::Client::new();
    let metrics = http
        .get(format!("http://{}/metrics", gateway.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = r#"rein_fallback_served_total{tool="orders__lookup",rung="cache"} 1"#;
    assert!(metrics.lines().any(|l| l == line), "no `{line}` in\n{metrics}");
    let traces: Value = http
        .get(format!("http://{}/admin/traces", gateway.addr))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = traces["traces"].as_array().unwrap();
    let fallback = listed.iter().find(|t| t["route"] == "orders__lookup" && t["notable"] == true);
    assert!(
        fallback.is_some_and(|t| t["kind"] == "tool" && t["tier"] == "cache"),
        "no trace of the fallback in {traces}"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn an_mcp_body_over_the_limit_is_refused_before_the_sdk_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let orders = start_orders(Orders::default()).await;
    let gateway = start_gateway(&dir, orders.addr).await;
    // Larger than `server.max_body_bytes` (64 KiB here).
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "orders__lookup", "arguments": {"order_id": "x".repeat(128 << 10)}}});
    let response = reqwest::Client::new()
        .post(format!("http://{}/mcp", gateway.addr))
        .bearer_auth(CLIENT_KEY)
        .header("accept", "application/json, text/event-stream")
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("server.max_body_bytes"), "{body}");
    let metrics = reqwest::get(format!("http://{}/metrics", gateway.addr)).await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let line = r#"rein_http_errors_total{api="mcp",status="413"} 1"#;
    assert!(metrics.lines().any(|l| l == line), "no `{line}` in\n{metrics}");
    gateway.stop().await;
    orders.stop().await;
}
