//! Fake tool backends: small axum servers on 127.0.0.1:0 with a switch for how they fail (503,
//! a 4xx, hang, execute-then-hang, close the connection) and a log of every request received,
//! its `Idempotency-Key` included. Like Stripe, a backend executes a keyed request once and
//! answers a repeat of the key with the stored response, so tests can count real executions.
//! Every response says `connection: close`, so a switch applies to the very next request
//! rather than to whatever a pooled connection was doing.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How the backend answers the next request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Mode {
    /// Execute (once per idempotency key) and answer 200 with JSON.
    Up,
    /// Answer this status (a 5xx: down) without executing.
    Fail(u16),
    /// Answer this 4xx with an error message, without executing.
    Reject(u16, String),
    /// Hold the request until the mode changes, then answer per the new mode.
    Hang,
    /// Execute, then never answer (the caller's clock must fire).
    ExecuteThenHang,
    /// Accept the connection and close it at once.
    Close,
}

/// One request as the backend saw it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Debug)]
struct Shared {
    name: String,
    mode: watch::Sender<Mode>,
    log: Mutex<Vec<Received>>,
    /// Idempotency key → the response of its one execution.
    executed: Mutex<BTreeMap<String, Value>>,
    executions: Mutex<u64>,
}

/// A running fake backend; stops when dropped.
#[derive(Debug)]
pub(crate) struct Backend {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Backend {
    pub(crate) async fn start(name: &str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            name: name.to_string(),
            mode: watch::channel(Mode::Up).0,
            log: Mutex::new(Vec::new()),
            executed: Mutex::new(BTreeMap::new()),
            executions: Mutex::new(0),
        });
        let router = Router::new().fallback(handle).with_state(Arc::clone(&shared));
        let listener = Switchable { inner: listener, shared: Arc::clone(&shared) };
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Backend { addr, shared, server }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn set(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// Every request received, in order.
    pub(crate) fn received(&self) -> Vec<Received> {
        self.shared.log.lock().unwrap().clone()
    }

    pub(crate) fn hits(&self) -> usize {
        self.shared.log.lock().unwrap().len()
    }

    /// Requests that really executed (a repeated idempotency key does not execute again).
    pub(crate) fn executions(&self) -> u64 {
        *self.shared.executions.lock().unwrap()
    }

    /// Wait (up to 5 s) until at least `count` requests have arrived.
    pub(crate) async fn wait_for_hits(&self, count: usize) {
        let waited = tokio::time::timeout(Duration::from_secs(5), async {
            while self.hits() < count {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "backend {} got {} requests, expected {count}",
            self.shared.name,
            self.hits()
        );
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A URL on a loopback port nobody listens on: connections are refused, nothing is sent.
pub(crate) async fn dead_url(path: &str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}{path}")
}

/// A listener that drops connections at once while the mode is `Close`.
struct Switchable {
    inner: TcpListener,
    shared: Arc<Shared>,
}

impl axum::serve::Listener for Switchable {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.inner.accept().await else { continue };
            if *self.shared.mode.borrow() == Mode::Close {
                self.shared.log.lock().unwrap().push(Received {
                    method: String::new(),
                    path: "(closed)".into(),
                    idempotency_key: None,
                    headers: HeaderMap::new(),
                    body: Value::Null,
                });
                drop(stream);
                continue;
            }
            return (stream, addr);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path().to_string();
    shared.log.lock().unwrap().push(Received {
        method: method.to_string(),
        path: path.clone(),
        idempotency_key: key.clone(),
        headers,
        body: body.clone(),
    });
    let mut modes = shared.mode.subscribe();
    loop {
        let mode = modes.borrow_and_update().clone();
        let response = match mode {
            Mode::Up => (StatusCode::OK, execute(&shared, key.as_deref(), &path, &body)),
            Mode::Fail(status) => {
                (StatusCode::from_u16(status).unwrap(), json!({"error": "backend is down"}))
            }
            Mode::Reject(status, message) => {
                (StatusCode::from_u16(status).unwrap(), json!({"error": {"message": message}}))
            }
            Mode::Hang | Mode::Close => {
                if modes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                continue;
            }
            Mode::ExecuteThenHang => {
                execute(&shared, key.as_deref(), &path, &body);
                std::future::pending::<()>().await;
                continue;
            }
        };
        let (status, body) = response;
        return (status, [(header::CONNECTION, "close")], axum::Json(body)).into_response();
    }
}

/// Execute once per key (Stripe semantics) and return the response.
fn execute(shared: &Shared, key: Option<&str>, path: &str, body: &Value) -> Value {
    let mut executed = shared.executed.lock().unwrap();
    if let Some(stored) = key.and_then(|key| executed.get(key)) {
        return stored.clone();
    }
    let mut executions = shared.executions.lock().unwrap();
    *executions += 1;
    let response = json!({
        "id": format!("{}_{}", shared.name, *executions),
        "path": path,
        "args": body,
    });
    if let Some(key) = key {
        executed.insert(key.to_string(), response.clone());
    }
    response
}
