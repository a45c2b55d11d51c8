//! The client edge of the real `rein serve`: a reload (SIGHUP) can never take auth off a public
//! socket and refuses, by key, what it cannot apply; the operator pages need the admin key off
//! loopback; slow-header and idle connections are closed on their clocks while normal clients
//! are served and long calls are not cut; the connection cap; TLS with a certificate a reload
//! renews; a stderr nobody reads never stops the gateway. Real clocks with short limits and
//! generous bounds.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BIN: &str = env!("CARGO_BIN_EXE_rein");

/// `rein serve` on a free port, its log in a file; SIGTERM when dropped.
struct Serve {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(config: &Path, env: &[(&str, &str)]) -> Serve {
        Self::start_with_args(config, env, &[])
    }

    fn start_with_args(config: &Path, env: &[(&str, &str)], args: &[&str]) -> Serve {
        // The tests' HTTP clients use rustls with the provider rein itself installs.
        rein_providers::install_crypto_provider();
        let log = config.with_extension("log");
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--config", config.to_str().unwrap()])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut port = None;
        for line in stdout.lines() {
            let line = line.unwrap();
            if let Some(addr) = line.trim().strip_prefix("rein listening on ") {
                let addr = addr.trim_start_matches("http://").trim_start_matches("https://");
                port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
                break;
            }
        }
        let port = port.unwrap_or_else(|| {
            panic!("rein serve did not start: {}", std::fs::read_to_string(&log).unwrap())
        });
        Serve { child, port, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn hangup(&self) {
        let status =
            Command::new("kill").args(["-HUP", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// Wait (bounded) until the log has `count` lines containing `text`.
    async fn log_says(&self, text: &str, count: usize) -> String {
        for _ in 0..200 {
            let log = self.log();
            if log.matches(text).count() >= count {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the log never said `{text}` {count} time(s):\n{}", self.log());
    }

    /// The metric once it reaches `least` (the server counts a close just after the client
    /// sees it), or its value after 2 s.
    async fn metric_reaching(&self, line: &str, least: f64) -> f64 {
        let mut value = 0.0;
        for _ in 0..40 {
            value = self.metric(line, None).await;
            if value >= least {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        value
    }

    async fn metric(&self, line: &str, admin: Option<&str>) -> f64 {
        let mut request = reqwest::Client::new().get(self.url("/metrics"));
        if let Some(key) = admin {
            request = request.bearer_auth(key);
        }
        let text = request.send().await.unwrap().text().await.unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(line).map(|v| v.trim().parse::<f64>().unwrap()))
            .unwrap_or(0.0)
    }
}

const ROUTE: &str = "\n[providers.sim]\nkind = \"sim\"\n\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"sim\"\nmodel = \"sim-primary\"\n";

fn write_config(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("rein.toml");
    let sqlite = dir.join("rein.sqlite");
    std::fs::write(
        &path,
        format!("[server]\n{server}\n\n[store]\nsqlite_path = \"{}\"\n{ROUTE}", sqlite.display()),
    )
    .unwrap();
    path
}

fn chat_body() -> serde_json::Value {
    serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
}

async fn chat_status(gw: &Serve, key: Option<&str>) -> u16 {
    let mut request =
        reqwest::Client::new().post(gw.url("/v1/chat/completions")).json(&chat_body());
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap().status().as_u16()
}

const KEYS: [(&str, &str); 3] = [
    ("EDGE_CLIENT", "edge-client-key"),
    ("EDGE_CLIENT_2", "edge-client-key-2"),
    ("EDGE_ADMIN", "edge-admin-key"),
];

#[tokio::test]
async fn a_reload_never_takes_auth_off_a_public_socket_and_refuses_what_it_cannot_apply() {
    let dir = tempfile::tempdir().unwrap();
    let public = "listen = \"0.0.0.0:0\"\nclient_keys_env = [\"EDGE_CLIENT\"]\nadmin_key_env = \"EDGE_ADMIN\"";
    let config = write_config(dir.path(), public);
    let gw = Serve::start(&config, &KEYS);
    assert_eq!(chat_status(&gw, None).await, 401);
    assert_eq!(chat_status(&gw, Some("edge-client-key")).await, 200);

    // What the finding did: the file now says loopback and no keys. Refused, by key.
    write_config(dir.path(), "listen = \"127.0.0.1:0\"");
    gw.hangup();
    let log = gw.log_says("reload refused", 1).await;
    assert!(log.contains("server.listen"), "{log}");
    assert!(log.contains("restart to apply"), "{log}");
    assert_eq!(chat_status(&gw, None).await, 401, "a keyless call on 0.0.0.0 after the reload");
    assert_eq!(chat_status(&gw, Some("edge-client-key")).await, 200);

    // Same address, keys removed: refused too (the socket is still public).
    write_config(dir.path(), "listen = \"0.0.0.0:0\"\nadmin_key_env = \"EDGE_ADMIN\"");
    gw.hangup();
    let log = gw.log_says("reload refused", 2).await;
    assert!(log.contains("server.client_keys_env"), "{log}");
    assert_eq!(chat_status(&gw, None).await, 401);

    // A store path cannot move under a running gateway either.
    std::fs::write(
        &config,
        format!(
            "[server]\n{public}\n\n[store]\nsqlite_path = \"{}\"\n{ROUTE}",
            dir.path().join("other.sqlite").display()
        ),
    )
    .unwrap();
    gw.hangup();
    let log = gw.log_says("reload refused", 3).await;
    assert!(log.contains("store.sqlite_path"), "{log}");

    // A key rotation is applied: the new key works, the old one no longer does.
    write_config(
        dir.path(),
        "listen = \"0.0.0.0:0\"\nclient_keys_env = [\"EDGE_CLIENT_2\"]\nadmin_key_env = \"EDGE_ADMIN\"",
    );
    gw.hangup();
    gw.log_says("SIGHUP: config reloaded", 1).await;
    assert_eq!(chat_status(&gw, Some("edge-client-key-2")).await, 200);
    assert_eq!(chat_status(&gw, Some("edge-client-key")).await, 401);
    assert_eq!(chat_status(&gw, None).await, 401);
}

#[tokio::test]
async fn a_listen_flag_holds_across_reloads_and_its_socket_keeps_the_auth_rules() {
    let dir = tempfile::tempdir().unwrap();
    // The file says loopback without keys; the flag serves on every interface.
    let config = write_config(dir.path(), "listen = \"127.0.0.1:8787\"");
    let output = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap(), "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!output.status.success(), "0.0.0.0 without client keys was served");
    assert!(String::from_utf8_lossy(&output.stderr).contains("server.client_keys_env"));

    let keyed = "listen = \"127.0.0.1:8787\"\nclient_keys_env = [\"EDGE_CLIENT\"]";
    let config = write_config(dir.path(), keyed);
    let gw = Serve::start_with_args(&config, &KEYS, &["--listen", "0.0.0.0:0"]);
    assert_eq!(chat_status(&gw, Some("edge-client-key")).await, 200);
    // An unchanged file reloads: the flag's address is the one in force, not a change.
    gw.hangup();
    gw.log_says("SIGHUP: config reloaded", 1).await;
    // Dropping the keys from the file is refused: the served socket is still 0.0.0.0.
    write_config(dir.path(), "listen = \"127.0.0.1:8787\"");
    gw.hangup();
    let log = gw.log_says("reload refused", 1).await;
    assert!(log.contains("server.client_keys_env"), "{log}");
    assert_eq!(chat_status(&gw, None).await, 401);
}

#[tokio::test]
async fn operator_pages_need_the_admin_key_off_loopback_unless_made_public() {
    let dir = tempfile::tempdir().unwrap();
    let server = "listen = \"0.0.0.0:0\"\nclient_keys_env = [\"EDGE_CLIENT\"]\nadmin_key_env = \"EDGE_ADMIN\"";
    let config = write_config(dir.path(), server);
    let gw = Serve::start(&config, &KEYS);
    let client = reqwest::Client::new();
    for path in ["/metrics", "/"] {
        let anonymous = client.get(gw.url(path)).send().await.unwrap();
        assert_eq!(anonymous.status().as_u16(), 401, "{path} without a key");
        let as_client =
            client.get(gw.url(path)).bearer_auth("edge-client-key").send().await.unwrap();
        assert_eq!(as_client.status().as_u16(), 401, "{path} with a client key");
        let as_admin = client.get(gw.url(path)).bearer_auth("edge-admin-key").send().await.unwrap();
        assert_eq!(as_admin.status().as_u16(), 200, "{path} with the admin key");
    }
    write_config(dir.path(), &format!("{server}\nmetrics_public = true"));
    gw.hangup();
    gw.log_says("SIGHUP: config reloaded", 1).await;
    let anonymous = client.get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 200, "metrics_public = true");
}

#[test]
fn an_admin_key_equal_to_a_client_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "listen = \"127.0.0.1:0\"\nclient_keys_env = [\"EDGE_CLIENT\"]\nadmin_key_env = \"EDGE_SAME\"",
    );
    let output = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("EDGE_CLIENT", "one-key-for-all")
        .env("EDGE_SAME", "one-key-for-all")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("server.admin_key_env"), "{stderr}");
    assert!(!stderr.contains("one-key-for-all"), "the key itself printed: {stderr}");
}

/// Read until the server closes the connection (or `limit` passes): true if it closed.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn slow_header_clients_are_closed_on_the_header_clock_while_normal_clients_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "listen = \"127.0.0.1:0\"\nheader_read_timeout_ms = 400\nidle_timeout_ms = 60000",
    );
    let gw = Serve::start(&config, &[]);
    // 50 slowloris clients: a request line, then one header byte every 100 ms, forever.
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut stream = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
        stream.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        slow.push(tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if stream.write_all(b"x").await.is_err() {
                    return started.elapsed();
                }
                if closed_within(&mut stream, Duration::from_millis(1)).await {
                    return started.elapsed();
                }
            }
            panic!("a slow-header client was still open after 10 s");
        }));
    }
    // Normal clients are served the whole time.
    for _ in 0..10 {
        assert_eq!(chat_status(&gw, None).await, 200);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for handle in slow {
        let lasted = handle.await.unwrap();
        assert!(lasted < Duration::from_secs(5), "closed after {lasted:?}");
    }
    let closed =
        gw.metric_reaching("rein_connections_closed_total{reason=\"header_timeout\"}", 50.0).await;
    assert!(closed >= 50.0, "{closed} header timeouts counted");
}

#[tokio::test]
async fn idle_connections_close_on_the_idle_clock_but_a_long_call_is_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nidle_timeout_ms = 500\n\n[store]\nsqlite_path = \"{}\"\n{ROUTE}\n[routes.slow]\ndeadline_ms = 10000\nfirst_token_ms = 5000\nattempt_ms = 8000\n[[routes.slow.tiers]]\nname = \"primary\"\nprovider = \"sim\"\nmodel = \"sim:slow_first_token:ms=1500\"\n",
            dir.path().join("rein.sqlite").display()
        ),
    )
    .unwrap();
    let gw = Serve::start(&path, &[]);

    // A connection that never sends anything is closed after the idle clock.
    let mut silent = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let started = tokio::time::Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await, "idle connection kept open");
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());

    // A call that takes three idle periods is answered on its connection.
    let mut stream = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let body = r#"{"model":"slow","messages":[{"role":"user","content":"hi"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    let read = tokio::time::timeout(Duration::from_secs(8), async {
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed mid-call: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer);
            if let Some(head_end) = text.find("\r\n\r\n") {
                let length = text[..head_end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap();
                if answer.len() >= head_end + 4 + length {
                    return;
                }
            }
        }
    });
    read.await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("x-rein-outcome: answered"), "{text}");
    // Then the connection is idle, and closed on the idle clock.
    assert!(closed_within(&mut stream, Duration::from_secs(5)).await, "kept open after the call");
    let closed =
        gw.metric_reaching("rein_connections_closed_total{reason=\"idle_timeout\"}", 2.0).await;
    assert!(closed >= 2.0, "{closed} idle closes counted");
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "listen = \"127.0.0.1:0\"\nmax_connections = 4\nidle_timeout_ms = 60000\nheader_read_timeout_ms = 60000",
    );
    let gw = Serve::start(&config, &[]);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap());
    }
    // Give the server a moment to admit the four.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fifth = TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    assert!(closed_within(&mut fifth, Duration::from_secs(3)).await, "the fifth was admitted");
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A place is free again: a request on a new connection is answered (and /metrics too).
    assert_eq!(chat_status(&gw, None).await, 200);
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let closed = gw.metric_reaching("rein_connections_closed_total{reason=\"limit\"}", 1.0).await;
    assert!(closed >= 1.0, "{closed} limit closes counted");
}

fn certificate(dir: &Path, name: &str) -> (PathBuf, PathBuf, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path, cert.pem())
}

async fn https_status(port: u16, root_pem: &str) -> Result<u16, reqwest::Error> {
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(root_pem.as_bytes()).unwrap()])
        .resolve("localhost", ([127, 0, 0, 1], port).into())
        .build()
        .unwrap();
    let response = client
        .post(format!("https://localhost:{port}/v1/chat/completions"))
        .json(&chat_body())
        .send()
        .await?;
    Ok(response.status().as_u16())
}

#[tokio::test]
async fn tls_on_the_listener_with_a_certificate_a_reload_renews() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, first_pem) = certificate(dir.path(), "first");
    let tls = format!(
        "listen = \"127.0.0.1:0\"\ntls = {{ cert_path = \"{}\", key_path = \"{}\" }}",
        cert.display(),
        key.display()
    );
    let config = write_config(dir.path(), &tls);
    let gw = Serve::start(&config, &[]);
    assert_eq!(https_status(gw.port, &first_pem).await.unwrap(), 200);
    // Plain HTTP on the TLS port is not served.
    assert!(reqwest::Client::new().get(gw.url("/healthz")).send().await.is_err());

    // A renewed certificate in the same files, then SIGHUP: new connections get it.
    let (renewed_cert, renewed_key, renewed_pem) = certificate(dir.path(), "renewed");
    std::fs::copy(&renewed_cert, &cert).unwrap();
    std::fs::copy(&renewed_key, &key).unwrap();
    gw.hangup();
    gw.log_says("SIGHUP: config reloaded", 1).await;
    assert_eq!(https_status(gw.port, &renewed_pem).await.unwrap(), 200);
    assert!(https_status(gw.port, &first_pem).await.is_err(), "the old certificate still served");

    // A broken key file is refused by key and the renewed certificate stays.
    std::fs::write(&key, "not a key").unwrap();
    gw.hangup();
    let log = gw.log_says("reload refused", 1).await;
    assert!(log.contains("server.tls.key_path"), "{log}");
    assert_eq!(https_status(gw.port, &renewed_pem).await.unwrap(), 200);
}

#[tokio::test]
async fn a_degraded_answer_logs_why_no_tier_served_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[store]\nsqlite_path = \"{}\"\n\n[providers.sim]\nkind = \"sim\"\n\n[routes.down]\ndeadline_ms = 3000\nattempt_ms = 1000\nfirst_token_ms = 500\nstream_idle_ms = 500\nbackoff_base_ms = 10\nbackoff_floor_ms = 5\nbackoff_cap_ms = 20\ndegraded = {{ template = \"A person will reply.\" }}\n[[routes.down.tiers]]\nname = \"primary\"\nprovider = \"sim\"\nmodel = \"sim:529\"\n",
            dir.path().join("rein.sqlite").display()
        ),
    )
    .unwrap();
    let gw = Serve::start(&path, &[]);
    let response = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .json(
            &serde_json::json!({"model": "down", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-rein-outcome"], "degraded");
    let log = gw.log_says("call finished", 1).await;
    let line = log.lines().find(|l| l.contains("call finished")).unwrap();
    assert!(line.contains("degraded"), "{line}");
    assert!(line.contains("primary: attempts_exhausted"), "{line}");
}

#[tokio::test]
async fn on_shutdown_readyz_says_draining_while_calls_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "listen = \"127.0.0.1:0\"\ndrain_delay_ms = 1500");
    let gw = Serve::start(&config, &[]);
    let client = reqwest::Client::new();
    assert_eq!(client.get(gw.url("/readyz")).send().await.unwrap().status().as_u16(), 200);
    let status = Command::new("kill").arg(gw.child.id().to_string()).status().unwrap();
    assert!(status.success());
    gw.log_says("/readyz says draining", 1).await;
    let ready = client.get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    assert_eq!(ready.text().await.unwrap(), "draining\n");
    assert_eq!(chat_status(&gw, None).await, 200, "a call during the drain delay");
    // After the delay the listener closes.
    let mut refused = false;
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", gw.port)).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "still accepting 5 s after the drain delay");
}

#[tokio::test]
async fn a_client_that_stops_reading_its_answer_is_cut_after_the_idle_clock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.toml");
    // An answer far larger than the socket buffers: 8 MiB from a canned rung.
    let big = "x".repeat(8 * 1024 * 1024);
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nidle_timeout_ms = 500\n\n[store]\nsqlite_path = \"{}\"\n{ROUTE}\n[tools.big]\nkind = \"read\"\n[[tools.big.rungs]]\nkind = \"static\"\nsource = \"canned\"\nfidelity = \"exact\"\nresult = {{ text = \"{big}\" }}\n",
            dir.path().join("rein.sqlite").display()
        ),
    )
    .unwrap();
    let gw = Serve::start(&path, &[]);
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(([127, 0, 0, 1], gw.port).into()).await.unwrap();
    stream
        .write_all(b"POST /v1/tools/big HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        .await
        .unwrap();
    // Never read: the server's writes stall, and it gives up after the idle clock.
    let mut closed = 0.0;
    for _ in 0..100 {
        closed = gw.metric("rein_connections_closed_total{reason=\"write_stall\"}", None).await;
        if closed >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(closed, 1.0, "a client that stopped reading was never cut");
    // The rest of what reached the socket ends, and the connection is closed.
    assert!(closed_within(&mut stream, Duration::from_secs(10)).await);
}

/// One listener serves HTTP/1.1 and HTTP/2: over plain TCP by the HTTP/2 preface (prior
/// knowledge), over TLS by ALPN; each client gets its answer in the version it spoke.
#[tokio::test]
async fn http1_and_http2_clients_are_both_served_plain_and_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "listen = \"127.0.0.1:0\"");
    let gw = Serve::start(&config, &[]);
    let h1 = reqwest::Client::builder().http1_only().build().unwrap();
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    for (client, version) in [(h1, reqwest::Version::HTTP_11), (h2, reqwest::Version::HTTP_2)] {
        for _ in 0..3 {
            let response = client
                .post(gw.url("/v1/chat/completions"))
                .json(&chat_body())
                .send()
                .await
                .unwrap();
            assert_eq!(response.version(), version);
            assert_eq!(response.status(), 200);
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body["object"], "chat.completion", "{body}");
        }
    }
    drop(gw);

    let tls_dir = tempfile::tempdir().unwrap();
    let (cert, key, pem) = certificate(tls_dir.path(), "h2");
    let tls = format!(
        "listen = \"127.0.0.1:0\"\ntls = {{ cert_path = \"{}\", key_path = \"{}\" }}",
        cert.display(),
        key.display()
    );
    let gw = Serve::start(&write_config(tls_dir.path(), &tls), &[]);
    let root = reqwest::Certificate::from_pem(pem.as_bytes()).unwrap();
    for (http2, version) in [(false, reqwest::Version::HTTP_11), (true, reqwest::Version::HTTP_2)] {
        let builder = reqwest::Client::builder()
            .tls_certs_only([root.clone()])
            .resolve("localhost", ([127, 0, 0, 1], gw.port).into());
        let client = if http2 { builder } else { builder.http1_only() }.build().unwrap();
        let response = client
            .post(format!("https://localhost:{}/v1/chat/completions", gw.port))
            .json(&chat_body())
            .send()
            .await
            .unwrap();
        assert_eq!((response.version(), response.status().as_u16()), (version, 200));
    }
}

/// `rein serve` and `rein sim` hold a descriptor per connection: started with a low soft
/// open-file limit (as a login shell gives), they raise it to the hard limit.
#[test]
fn serve_and_sim_raise_their_open_file_limit_to_the_hard_one() {
    fn open_files(pid: u32) -> (String, String) {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields[3].to_string(), fields[4].to_string())
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "listen = \"127.0.0.1:0\"");
    for args in [
        vec!["sim", "--listen", "127.0.0.1:0"],
        vec!["serve", "--config", config.to_str().unwrap()],
    ] {
        let script = format!("ulimit -Sn 512 && exec \"$0\" {}", args.join(" "));
        let mut child = Command::new("sh")
            .args(["-c", &script, BIN])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.contains("listening on"), "{args:?} did not start: {line}");
        let (soft, hard) = open_files(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_ne!(soft, "512", "{args:?} kept the shell's soft limit");
        assert_eq!(soft, hard, "{args:?}");
    }
}

/// `rein sim --log-keep N`: the attempt log it serves holds the newest N requests and says how
/// many it let go; a value that is not a count is refused by name.
#[tokio::test]
async fn rein_sim_keeps_the_newest_requests_it_is_told_to() {
    let mut child = Command::new(BIN)
        .args(["sim", "--listen", "127.0.0.1:0", "--log-keep", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let child = Killed(child);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let base = line.trim().strip_prefix("rein sim listening on ").expect(&line).to_string();
    rein_providers::install_crypto_provider();
    let client = reqwest::Client::new();
    for n in 0..3 {
        let body = serde_json::json!({"model": format!("m{n}"), "messages": [{"role": "user", "content": "hi"}]});
        let response =
            client.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let response = client.get(format!("{base}/_sim/log")).send().await.unwrap();
    assert_eq!(response.headers()["x-sim-log-dropped"], "1");
    let log: Vec<serde_json::Value> = response.json().await.unwrap();
    let models: Vec<&str> = log.iter().map(|entry| entry["model"].as_str().unwrap()).collect();
    assert_eq!(models, ["m1", "m2"]);
    drop(child);

    let refused = Command::new(BIN).args(["sim", "--log-keep", "lots"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("--log-keep"), "{said}");
}

/// Killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_stderr_nobody_reads_drops_log_lines_but_never_stops_the_gateway() {
    // stderr is a pipe the test holds and does not read: it fills after a few hundred lines of
    // `call finished`, and then every line rein writes would wait for a reader.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "listen = \"127.0.0.1:0\"");
    rein_providers::install_crypto_provider();
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap(), "--log-queue", "64"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let stderr = child.stderr.take().unwrap();
    let child = Killed(child);
    let port: u16 = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            let addr = line.trim().strip_prefix("rein listening on http://")?.to_string();
            addr.rsplit(':').next()?.parse().ok()
        })
        .expect("rein serve did not start");
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");

    // Each answer logs a line of about 200 bytes: a 64 KiB pipe and 64 queued lines hold a few
    // hundred. Every call is still answered, each well inside its bound.
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    for call in 0..1_000 {
        let response = client.post(url("/v1/chat/completions")).json(&chat_body()).send().await;
        let status = response.map(|r| r.status().as_u16());
        assert!(matches!(status, Ok(200)), "call {call} with stderr unread: {status:?}");
    }
    let metrics = client.get(url("/metrics")).send().await.unwrap().text().await.unwrap();
    let dropped: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("rein_log_lines_dropped_total ")?.trim().parse().ok())
        .expect("rein_log_lines_dropped_total");
    // Held: the pipe's 64 KiB, the log thread's 64 KiB write buffer and 64 queued lines, about
    // 650 lines of this length; the rest are dropped.
    assert!((100.0..1_000.0).contains(&dropped), "{dropped} lines dropped of about 1,000");

    // Once stderr is read again, what was held comes out in whole lines and logging goes on.
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // A call made while the queue is still full may be dropped too: calls go on until one's
    // line comes (bounded).
    let mut ids = Vec::new();
    let mut read = 0;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    'logged: loop {
        assert!(tokio::time::Instant::now() < give_up, "no new call's line came ({read} read)");
        let next = client.post(url("/v1/chat/completions")).json(&chat_body()).send().await;
        ids.push(next.unwrap().headers()["x-request-id"].to_str().unwrap().to_string());
        while let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(100)) {
            read += 1;
            assert!(line.starts_with("20") && line.contains(" INFO "), "a torn line: {line:?}");
            if line.contains("call finished") && ids.iter().any(|id| line.contains(id.as_str())) {
                break 'logged;
            }
        }
    }
    // What the pipe held came out first (a 64 KiB pipe holds about 300 of these lines).
    assert!(read > 200, "{read} lines read");
    drop(child);
}

#[tokio::test]
async fn json_log_lines_carry_the_call_its_fields_and_a_utc_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "listen = \"127.0.0.1:0\"");
    let gw = Serve::start_with_args(&config, &[], &["--log-format", "json"]);
    assert_eq!(chat_status(&gw, None).await, 200);
    let log = gw.log_says("call finished", 1).await;
    let line = log.lines().find(|l| l.contains("call finished")).unwrap();
    let line: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["fields"]["message"], "call finished", "{line}");
    assert_eq!(line["fields"]["route"], "chat", "{line}");
    assert_eq!(line["fields"]["attempts"], 1, "{line}");
    // `2026-12-07T03:05:06.767089Z`: UTC, to the microsecond.
    let at = line["timestamp"].as_str().unwrap();
    let shape: String = at.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect();
    assert_eq!(shape, "9999-99-99T99:99:99.999999Z", "{at}");
}
