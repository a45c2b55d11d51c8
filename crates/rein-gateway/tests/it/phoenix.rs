//! A real OTLP receiver for the export tests: Arize Phoenix (`phoenix serve`, the version pinned
//! in tests/phoenix/requirements.txt, from the venv scripts/test.sh makes and names in
//! `REIN_PHOENIX_BIN`), started on free loopback ports with its SQLite database in a temporary
//! working directory, with authentication on: OTLP exports and API reads must carry
//! `authorization: Bearer <api_key>` (Phoenix's admin secret), so a passing test shows the
//! exporter's headers reach the collector. Spans are read back through Phoenix's REST API
//! (`GET /v1/projects/{project}/spans?trace_id=...`), where a project is the spans' resource
//! attribute `openinference.project.name`. Phoenix is killed when the value drops. Phoenix's
//! own gRPC server listens on every interface (it has no host setting for it); the tests only
//! ever reach it through 127.0.0.1.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// How long Phoenix may take to come up (it imports for half a minute on a busy 2-core box).
const READY_WITHIN: Duration = Duration::from_secs(180);
/// How long spans may take to show up in Phoenix's API after an export.
const SPANS_WITHIN: Duration = Duration::from_secs(60);

/// A running `phoenix serve`.
pub(crate) struct Phoenix {
    child: Child,
    http_port: u16,
    grpc_port: u16,
    api_key: String,
    project: String,
    log: PathBuf,
    client: reqwest::Client,
    // Last: removed after the process is gone.
    _dir: tempfile::TempDir,
}

fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (a.local_addr().unwrap().port(), b.local_addr().unwrap().port())
}

/// A secret Phoenix accepts: 32+ characters with a digit and a lowercase letter.
fn secret() -> String {
    format!("k0{}", rein_core::trace::new_trace_id())
}

impl Phoenix {
    /// Starts Phoenix and waits until it serves; `project` is the project [`Self::spans`] reads.
    pub(crate) async fn start(project: &str) -> Phoenix {
        let bin = std::env::var("REIN_PHOENIX_BIN").unwrap_or_default();
        assert!(
            !bin.is_empty(),
            "REIN_PHOENIX_BIN is not set: run the tests with scripts/test.sh, which installs \
             Arize Phoenix into .venv-phoenix (with python3) and sets it"
        );
        rein_providers::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("phoenix.log");
        let out = std::fs::File::create(&log).unwrap();
        let (http_port, grpc_port) = free_ports();
        let api_key = secret();
        let mut command = Command::new(&bin);
        command.arg("serve");
        // Nothing from the caller's environment configures this Phoenix but what is set here.
        for (key, _) in std::env::vars() {
            if key.starts_with("PHOENIX_") || key.starts_with("OTEL_") {
                command.env_remove(key);
            }
        }
        command
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", http_port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_ALLOW_EXTERNAL_RESOURCES", "false")
            .env("PHOENIX_ENABLE_AUTH", "true")
            .env("PHOENIX_SECRET", secret())
            .env("PHOENIX_ADMIN_SECRET", &api_key)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        let child = command.spawn().unwrap_or_else(|error| {
            panic!("cannot start {bin} serve: {error} (run scripts/test.sh)")
        });
        let phoenix = Phoenix {
            child,
            http_port,
            grpc_port,
            api_key,
            project: project.to_string(),
            log,
            client: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
            _dir: dir,
        };
        phoenix.wait_ready().await
    }

    async fn wait_ready(mut self) -> Phoenix {
        let started = Instant::now();
        let url = format!("{}/healthz", self.base_url());
        loop {
            if let Ok(response) = self.client.get(&url).send().await
                && response.status().is_success()
            {
                return self;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("Phoenix exited before it served ({status}):\n{}", self.log_tail());
            }
            if started.elapsed() > READY_WITHIN {
                panic!("Phoenix did not serve within {READY_WITHIN:?}:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// The OTLP/HTTP traces URL.
    pub(crate) fn otlp_http_url(&self) -> String {
        format!("{}/v1/traces", self.base_url())
    }

    /// The OTLP/gRPC collector address.
    pub(crate) fn otlp_grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// The bearer token exports and reads must carry.
    pub(crate) fn api_key(&self) -> &str {
        &self.api_key
    }

    /// The `authorization` header an exporter sends.
    pub(crate) fn auth_header(&self) -> (String, String) {
        ("authorization".to_string(), format!("Bearer {}", self.api_key))
    }

    /// The trace's spans in the project, as Phoenix's REST API returns them: polls until some
    /// arrive and their count holds for a second (Phoenix inserts in batches), within a minute.
    pub(crate) async fn spans(&self, trace_id: &str) -> Vec<Value> {
        // Trace ids are hex and the project a plain name: nothing to escape.
        let url = format!(
            "{}/v1/projects/{}/spans?trace_id={trace_id}&limit=1000",
            self.base_url(),
            self.project
        );
        let started = Instant::now();
        let mut last: Vec<Value> = Vec::new();
        loop {
            let response = self.client.get(&url).bearer_auth(&self.api_key).send().await;
            // 404 until the project's first span arrives.
            let spans = match response {
                Ok(response) if response.status().is_success() => {
                    let body: Value = response.json().await.unwrap();
                    body["data"].as_array().cloned().unwrap_or_default()
                }
                Ok(response) if response.status() == reqwest::StatusCode::NOT_FOUND => Vec::new(),
                Ok(response) => panic!(
                    "Phoenix's span API answered {}: {}",
                    response.status(),
                    response.text().await.unwrap_or_default()
                ),
                Err(error) => panic!("Phoenix's span API failed: {error}"),
            };
            if !spans.is_empty() && spans.len() == last.len() {
                return spans;
            }
            assert!(
                started.elapsed() < SPANS_WITHIN,
                "trace {trace_id} did not settle in Phoenix within {SPANS_WITHIN:?} ({} spans \
                 so far):\n{}",
                spans.len(),
                self.log_tail()
            );
            last = spans;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
