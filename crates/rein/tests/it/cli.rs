//! The `rein` binary itself: `rein check` on good and bad configs (an unset secret is a warning
//! unless `--strict`), `rein serve --listen/--port` and its startup lines, log colour only on a
//! terminal, the admin commands' flags after their subcommands, `rein versions` changing,
//! listing and reverting a route's settings on a running `rein serve` through its admin API, and
//! `scripts/test.sh` installing PostgreSQL's server when it is missing.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_rein");

fn example(name: &str) -> String {
    format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_prints_the_effective_config_with_secrets_masked() {
    let output = Command::new(BIN)
        .args(["check", &example("support-agent.toml")])
        .env("OPENAI_API_KEY", "sk-cli-secret")
        .env("ANTHROPIC_API_KEY", "sk-ant-cli-secret")
        .env("AWS_ACCESS_KEY_ID", "AKIDCLIEXAMPLE")
        .env("AWS_SECRET_ACCESS_KEY", "aws-cli-secret")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env_remove("GCE_METADATA_HOST")
        .env("REIN_CLIENT_KEY", "client-cli-secret")
        .env("REIN_ADMIN_KEY", "admin-cli-secret")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(stdout.contains("is valid: 3 route(s), 4 provider(s)"), "{stdout}");
    // The chain's credentials, each by where it comes from.
    for line in [
        "providers.bedrock (bedrock):\n  region: found, from `region` in the config\n  access key id: found, from environment variable `AWS_ACCESS_KEY_ID`",
        "providers.vertex (vertex):\n  project: found, from `project` in the config",
        "  access tokens: not checked here, from the metadata server at metadata.google.internal",
    ] {
        assert!(stdout.contains(line), "`{line}` not in:\n{stdout}");
    }
    assert!(stdout.contains("\"deadline_ms\": 20000"), "durations print in the keys' units");
    for secret in [
        "sk-cli-secret",
        "sk-ant-cli-secret",
        "aws-cli-secret",
        "client-cli-secret",
        "admin-cli-secret",
    ] {
        assert!(!stdout.contains(secret), "{secret} printed");
    }
    assert!(stdout.contains("***"));
}

#[test]
fn check_names_every_problem_by_key_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[providers.openai]\nkind = \"openai\"\napi_key_env = \"REIN_CLI_TEST_UNSET\"\n\n[routes.chat]\ndeadline_ms = 100\n\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"openia\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let output = Command::new(BIN).args(["check", path.to_str().unwrap()]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for key in
        ["providers.openai.api_key_env", "routes.chat.deadline_ms", "routes.chat.tiers[0].provider"]
    {
        assert!(stderr.contains(key), "`{key}` not named in:\n{stderr}");
    }
}

/// `rein check` says where each provider's credentials come from and which are missing, by
/// variable, file and profile name, and never prints one.
#[test]
fn check_explains_each_providers_credentials_without_printing_them() {
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("aws-credentials");
    std::fs::write(
        &credentials,
        "[team]\naws_access_key_id = AKIDCLITEAM\naws_secret_access_key = cli-team-secret-key\n",
    )
    .unwrap();
    let path = dir.path().join("chain.toml");
    std::fs::write(
        &path,
        "[providers.claude]\nkind = \"anthropic\"\napi_key_env = \"REIN_CLI_ANTHROPIC_KEY\"\n\
         [providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-west-2\"\nprofile = \"team\"\n\
         [providers.sim]\nkind = \"sim\"\n\
         [routes.chat]\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"claude\"\nmodel = \"m\"\n\
         [[routes.chat.tiers]]\nname = \"bedrock\"\nprovider = \"bedrock\"\nmodel = \"m\"\n\
         [mcp.servers.orders]\nurl = \"https://orders.internal/mcp\"\n\
         headers_env = { Authorization = \"REIN_CLI_ORDERS_AUTH\" }\n\
         [mcp.servers.local]\ncommand = \"local-mcp\"\nenv_from = { TOKEN = \"REIN_CLI_LOCAL_TOKEN\" }\n",
    )
    .unwrap();
    let output = Command::new(BIN)
        .args(["check", path.to_str().unwrap()])
        .env("AWS_SHARED_CREDENTIALS_FILE", &credentials)
        .env("REIN_CLI_LOCAL_TOKEN", "local-token-value")
        .env_remove("REIN_CLI_ORDERS_AUTH")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("REIN_CLI_ANTHROPIC_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The unset key is a warning: the file itself is valid.
    assert!(output.status.success(), "{stdout}{stderr}");
    for line in [
        "providers.bedrock (bedrock):\n  region: found, from `region` in the config\n  access key id: found, from environment variable `AWS_ACCESS_KEY_ID` (unset), else `aws_access_key_id` of profile `team`",
        "  session token: not set (optional)",
        "providers.claude (anthropic):\n  API key: MISSING, from environment variable `REIN_CLI_ANTHROPIC_KEY`",
        "providers.sim (sim): no credentials needed (served in-process)",
        "mcp.servers.local (stdio):\n  variable: found, `TOKEN` from environment variable `REIN_CLI_LOCAL_TOKEN`",
        "mcp.servers.orders (http):\n  header: MISSING, `Authorization` from environment variable `REIN_CLI_ORDERS_AUTH`",
    ] {
        assert!(stdout.contains(line), "`{line}` not in:\n{stdout}");
    }
    for secret in ["AKIDCLITEAM", "cli-team-secret-key", "local-token-value"] {
        assert!(!stdout.contains(secret) && !stderr.contains(secret), "{secret} printed");
    }
}

/// `rein serve` on a free port; stopped (SIGTERM through `kill`) when dropped.
struct Serve {
    child: Child,
    url: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

fn serve(config: &std::path::Path) -> Serve {
    let mut child = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("REIN_CLI_ADMIN", "cli-admin-key")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("rein listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    Serve { child, url }
}

fn versions(url: &str, args: &[&str]) -> serde_json::Value {
    let output = Command::new(BIN)
        .args(["versions", "--url", url, "--admin-key-env", "REIN_CLI_ADMIN"])
        .args(args)
        .env("REIN_CLI_ADMIN", "cli-admin-key")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn versions_set_list_diff_and_revert_through_a_running_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rein.toml");
    let sqlite = dir.path().join("rein.sqlite");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_key_env = \"REIN_CLI_ADMIN\"\n\n[store]\nsqlite_path = \"{}\"\n\n[providers.sim]\nkind = \"sim\"\n\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"sim\"\nmodel = \"sim-primary\"\nsystem_prompt = \"Answer fully.\"\n",
            sqlite.display()
        ),
    )
    .unwrap();
    let gateway = serve(&config);
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        r#"{"tiers": {"primary": {"model": "sim-primary", "system_prompt": "Be brief."}}}"#,
    )
    .unwrap();

    let created = versions(
        &gateway.url,
        &[
            "set",
            "chat",
            "--file",
            settings.to_str().unwrap(),
            "--author",
            "alice",
            "--note",
            "shorter",
        ],
    );
    assert_eq!(created["version"], 2);
    let listed = versions(&gateway.url, &["list", "chat"]);
    assert_eq!(listed["versions"].as_array().unwrap().len(), 2);
    assert_eq!(listed["versions"][1]["active"], true);
    let diff = versions(&gateway.url, &["diff", "chat", "1", "2"]);
    assert_eq!(diff["changes"][0]["path"], "tiers.primary.system_prompt");
    let reverted = versions(
        &gateway.url,
        &["revert", "chat", "1", "--author", "bob", "--reason", "wrong cutoffs"],
    );
    assert_eq!(reverted["version"], 1);
    assert_eq!(versions(&gateway.url, &["list", "chat"])["versions"][0]["active"], true);
    drop(gateway);

    // The versions live in the SQLite file: a restart serves the reverted version.
    let gateway = serve(&config);
    let listed = versions(&gateway.url, &["list", "chat"]);
    assert_eq!(listed["versions"][0]["active"], true, "{listed}");
}

/// A config with one simulated route, listening on `listen`, with an admin key and a SQLite
/// file in `dir`.
fn sim_config(dir: &Path, listen: &str) -> PathBuf {
    let path = dir.join("rein.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"{listen}\"\nadmin_key_env = \"REIN_CLI_ADMIN\"\n\n[store]\nsqlite_path = \"{}\"\n\n[providers.sim]\nkind = \"sim\"\n\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"sim\"\nmodel = \"sim-primary\"\n",
            dir.join("rein.sqlite").display()
        ),
    )
    .unwrap();
    path
}

/// `rein serve` with `args`, run in `dir`: the child and its first three stdout lines (address,
/// routes, the line to try).
fn serve_with(dir: &Path, args: &[&str]) -> (Serve, Vec<String>) {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .current_dir(dir)
        .env("REIN_CLI_ADMIN", "cli-admin-key")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read on a thread, so that a gateway that prints fewer lines fails the test, not hangs it
    // (and the guard stops the gateway on that failure).
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut serve = Serve { child, url: String::new() };
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    for _ in 0..3 {
        match receiver.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) => lines.push(line),
            Err(error) => panic!("{error}: rein serve printed only {lines:?}"),
        }
    }
    serve.url = lines[0]
        .strip_prefix("rein listening on ")
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_string();
    (serve, lines)
}

/// The port of `http://host:port`.
fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// `rein serve` that must refuse to start: its exit code and stderr.
fn serve_refused(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(BIN)
        .arg("serve")
        .args(args)
        .current_dir(dir)
        .env("REIN_CLI_ADMIN", "cli-admin-key")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_port_0_prints_the_bound_address_and_a_curl_line_that_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway, lines) = serve_with(dir.path(), &["--port", "0"]);
    let port = port_of(&gateway.url);
    assert_ne!(port, 0, "the real port, not the one asked for: {lines:?}");
    assert!(gateway.url.starts_with("http://127.0.0.1:"), "the embedded config's host: {lines:?}");
    assert_eq!(lines[1], "routes: demo, demo-fallback");

    // The next step is one curl line that works as printed: its URL and body, sent as is.
    let curl = lines[2].strip_prefix("try: curl -s ").unwrap_or_else(|| panic!("{lines:?}"));
    let (url, rest) = curl.split_once(' ').unwrap();
    assert_eq!(url, format!("{}/v1/chat/completions", gateway.url));
    assert!(rest.contains("-H 'content-type: application/json'"), "{curl}");
    let body = rest.split_once("-d '").unwrap().1.strip_suffix('\'').unwrap();
    rein_providers::install_crypto_provider();
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-outcome"], "answered");
    let reply: serde_json::Value = response.json().await.unwrap();
    assert!(reply["choices"][0]["message"]["content"].is_string(), "{reply}");
}

#[test]
fn serve_listen_and_port_override_the_configs_address() {
    let dir = tempfile::tempdir().unwrap();
    // The config's address is taken (a first gateway, say): as configured, rein cannot start,
    // and says how to start beside it.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let config = sim_config(dir.path(), &format!("127.0.0.1:{taken_port}"));
    let config = config.to_str().unwrap();
    let (code, stderr) = serve_refused(dir.path(), &["--config", config]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on 127.0.0.1:{taken_port}")), "{stderr}");
    assert!(stderr.contains("--port"), "the way out is named: {stderr}");

    let (gateway, lines) = serve_with(dir.path(), &["--config", config, "--port", "0"]);
    let port = port_of(&gateway.url);
    assert!(port != 0 && port != taken_port, "{lines:?}");
    assert!(gateway.url.starts_with("http://127.0.0.1:"), "the config's host is kept: {lines:?}");
    assert!(lines[2].contains("\"model\":\"chat\""), "the config's route: {lines:?}");
    drop(gateway);

    let (gateway, lines) = serve_with(dir.path(), &["--config", config, "--listen", "127.0.0.1:0"]);
    let port = port_of(&gateway.url);
    assert!(port != 0 && port != taken_port, "{lines:?}");
}

#[test]
fn serve_listen_keeps_the_configs_rules_and_refuses_a_bad_flag() {
    let dir = tempfile::tempdir().unwrap();
    // A public address still needs client keys, whether it comes from the file or the flag.
    let (code, stderr) = serve_refused(dir.path(), &["--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("server.client_keys_env"), "{stderr}");
    assert!(stderr.contains("0.0.0.0:0"), "{stderr}");

    let (code, stderr) = serve_refused(dir.path(), &["--listen", "127.0.0.1:0", "--port", "0"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let (code, stderr) = serve_refused(dir.path(), &["--listen", "localhost"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--listen"), "{stderr}");

    let help = Command::new(BIN).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--listen <ADDR>") && help.contains("--port <PORT>"), "{help}");
    assert!(help.contains("overriding the config's `server.listen`"), "{help}");
}

/// `rein <args>` with the admin key in `REIN_CLI_ADMIN`: exit code, stdout, stderr.
fn admin_command(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .env("REIN_CLI_ADMIN", "cli-admin-key")
        .env_remove("REIN_ADMIN_KEY")
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn admin_commands_take_their_flags_after_the_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let config = sim_config(dir.path(), "127.0.0.1:0");
    let gateway = serve(&config);
    let url = gateway.url.as_str();
    let key = ["--admin-key-env", "REIN_CLI_ADMIN"];

    let (code, stdout, stderr) =
        admin_command(&[&["outbox", "list", "--url", url], &key[..]].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("IDEMPOTENCY KEY") && stdout.contains("0 shown"), "{stdout}");
    let (code, stdout, stderr) =
        admin_command(&[&["approvals", "list", "--json", "--url", url], &key[..]].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(serde_json::from_str::<serde_json::Value>(&stdout).unwrap()["holds"].is_array());
    let (code, stdout, stderr) =
        admin_command(&[&["versions", "list", "chat", "--url", url], &key[..]].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let listed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed["versions"][0]["active"], true, "{listed}");
    // Before the subcommand still works.
    let (code, stdout, stderr) =
        admin_command(&[&["outbox", "--url", url], &key[..], &["list"]].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("0 held for review"), "{stdout}");
    // Settling a write held for review reaches the admin API (which has no item 999 to settle).
    let (code, stdout, stderr) = admin_command(
        &[
            &[
                "outbox",
                "executed",
                "999",
                "--by",
                "ops",
                "--result",
                "{\"ticket\": \"T-1\"}",
                "--url",
                url,
            ],
            &key[..],
        ]
        .concat(),
    );
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("409") && stdout.contains("outbox item 999"), "{stdout}{stderr}");
    let (code, _, stderr) = admin_command(
        &[
            &["outbox", "executed", "1", "--by", "ops", "--result", "not json", "--url", url],
            &key[..],
        ]
        .concat(),
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--result is not JSON"), "{stderr}");

    // The flag is really used: a gateway that is not there is named, not the default address.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (code, _, stderr) =
        admin_command(&[&["outbox", "list", "--url", &nowhere], &key[..]].concat());
    assert_eq!(code, Some(1));
    assert!(stderr.contains(&format!("cannot reach {nowhere}")), "{stderr}");
    // And the key's variable after the subcommand too: one that is unset is named.
    let (code, _, stderr) =
        admin_command(&["outbox", "list", "--url", url, "--admin-key-env", "REIN_CLI_UNSET_KEY"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("REIN_CLI_UNSET_KEY"), "{stderr}");
}

/// A config whose only provider needs `OPENAI_API_KEY`-like `var`, plus `extra` TOML.
fn config_needing(dir: &Path, var: &str, extra: &str) -> PathBuf {
    let path = dir.join("needs-secret.toml");
    std::fs::write(
        &path,
        format!(
            "[providers.openai]\nkind = \"openai\"\napi_key_env = \"{var}\"\n\n[routes.chat]\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"openai\"\nmodel = \"gpt-4o\"\n{extra}"
        ),
    )
    .unwrap();
    path
}

fn check(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(BIN)
        .arg("check")
        .args(args)
        .env_remove("REIN_CLI_UNSET_SECRET")
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_warns_about_an_unset_secret_and_fails_on_it_only_when_strict() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_needing(dir.path(), "REIN_CLI_UNSET_SECRET", "");
    let path = path.to_str().unwrap();

    let (code, stdout, stderr) = check(&[path]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("is valid: 1 route(s), 1 provider(s)"), "{stdout}");
    assert!(stderr.contains("warning: `providers.openai.api_key_env`"), "{stderr}");
    assert!(stderr.contains("`REIN_CLI_UNSET_SECRET` is not set"), "{stderr}");

    let (code, stdout, stderr) = check(&["--strict", path]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("`providers.openai.api_key_env`"), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn check_still_fails_on_every_other_problem_beside_an_unset_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = config_needing(
        dir.path(),
        "REIN_CLI_UNSET_SECRET",
        "\n[store]\npostgres_url_env = \"REIN_CLI_UNSET_SECRET\"\n\n[routes.other]\ndeadline_ms = 100\n[[routes.other.tiers]]\nname = \"primary\"\nprovider = \"openia\"\nmodel = \"m\"\n",
    );
    let (code, stdout, stderr) = check(&[path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let (warnings, errors) = stderr.split_once("problem").unwrap();
    for key in ["providers.openai.api_key_env", "store.postgres_url_env"] {
        assert!(
            warnings.contains(&format!("warning: `{key}`")),
            "`{key}` not a warning:\n{stderr}"
        );
    }
    for key in ["routes.other.deadline_ms", "routes.other.tiers[0].provider"] {
        assert!(errors.contains(&format!("`{key}`")), "`{key}` not named as an error:\n{stderr}");
    }
    assert!(!errors.contains("is not set"), "{stderr}");
}

/// `rein serve` on a port that is taken, run so that it logs one line and exits; what it wrote
/// to stderr. With `tty`, under `script`, whose terminal is the child's stdout and stderr.
fn log_line_of_a_refused_serve(tty: bool, no_color: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let mut command = if tty {
        let mut command = Command::new("script");
        command.args(["-qec", &format!("'{BIN}' serve --listen {listen}"), "/dev/null"]);
        command
    } else {
        let mut command = Command::new(BIN);
        command.args(["serve", "--listen", &listen]);
        command
    };
    command.current_dir(dir.path()).env("RUST_LOG", "info").env_remove("NO_COLOR");
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    let output = command.stdin(Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(if tty { &output.stdout } else { &output.stderr });
    assert!(text.contains("no --config given"), "no log line: {text}");
    assert!(text.contains("cannot listen on"), "{text}");
    text.into_owned()
}

#[test]
fn logs_are_coloured_only_on_a_terminal_and_never_with_no_color() {
    let piped = log_line_of_a_refused_serve(false, None);
    assert!(!piped.contains('\u{1b}'), "ANSI escapes in piped stderr: {piped:?}");
    let terminal = log_line_of_a_refused_serve(true, None);
    assert!(terminal.contains("\u{1b}["), "no colour at a terminal: {terminal:?}");
    let terminal = log_line_of_a_refused_serve(true, Some("1"));
    assert!(!terminal.contains('\u{1b}'), "colour despite NO_COLOR: {terminal:?}");
    // An empty NO_COLOR does not count (no-color.org).
    let terminal = log_line_of_a_refused_serve(true, Some(""));
    assert!(terminal.contains("\u{1b}["), "{terminal:?}");
}

/// `scripts/test.sh` copied into a scratch checkout whose commands are stand-ins that log what
/// they are asked to do: `cargo`, `apt-get` (whose install of `postgresql` puts server binaries in
/// the scratch Debian directory, unless `apt_installs` is false), `sudo`, `id` (answering `uid`),
/// and `scripts/test-python.sh`. Its exit code, the log and stderr.
struct TestScript {
    dir: tempfile::TempDir,
}

impl TestScript {
    fn new(apt_get: bool, apt_installs: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for sub in ["repo/scripts", "bin", "debian"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let script = format!("{}/../../scripts/test.sh", env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(script, root.join("repo/scripts/test.sh")).unwrap();
        let log = root.join("log");
        let debian = root.join("debian");
        let stand_in = |path: PathBuf, body: &str| {
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(&path, executable).unwrap();
        };
        let record = format!("echo \"$(/usr/bin/basename \"$0\") $*\" >> '{}'", log.display());
        stand_in(
            root.join("repo/scripts/test-python.sh"),
            &format!("echo python >> '{}'", log.display()),
        );
        stand_in(
            root.join("repo/scripts/test-node.sh"),
            &format!("echo node >> '{}'", log.display()),
        );
        stand_in(root.join("bin/cargo"), &record);
        stand_in(root.join("bin/id"), "echo \"$FAKE_UID\"");
        stand_in(root.join("bin/sudo"), &format!("{record}\nexec \"$@\""));
        if apt_get {
            let install = if apt_installs {
                format!(
                    "case \"$*\" in *install*postgresql*) /bin/mkdir -p '{0}/17/bin' && for b in initdb pg_ctl postgres; do printf '#!/bin/sh\\n' > '{0}/17/bin/'$b; /bin/chmod 755 '{0}/17/bin/'$b; done;; esac",
                    debian.display()
                )
            } else {
                String::new()
            };
            stand_in(
                root.join("bin/apt-get"),
                &format!(
                    "echo \"apt-get $* (DEBIAN_FRONTEND=$DEBIAN_FRONTEND)\" >> '{}'\n{install}",
                    log.display()
                ),
            );
        }
        for tool in ["/bin/bash", "/usr/bin/dirname", "/usr/bin/env", "/usr/bin/basename"] {
            let name = Path::new(tool).file_name().unwrap();
            std::os::unix::fs::symlink(tool, root.join("bin").join(name)).unwrap();
        }
        TestScript { dir }
    }

    /// Put server binaries in the scratch Debian directory, as if PostgreSQL 16 were installed.
    fn with_postgres(self) -> Self {
        let bin = self.dir.path().join("debian/16/bin");
        std::fs::create_dir_all(&bin).unwrap();
        for name in ["initdb", "pg_ctl", "postgres"] {
            std::fs::write(bin.join(name), "#!/bin/sh\n").unwrap();
            let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(bin.join(name), executable).unwrap();
        }
        self
    }

    fn run(&self, uid: u32) -> (Option<i32>, String, String) {
        let root = self.dir.path();
        let output = Command::new("/bin/bash")
            .arg("scripts/test.sh")
            .current_dir(root.join("repo"))
            .env_clear()
            .env("PATH", root.join("bin"))
            .env("REIN_POSTGRES_DEBIAN_DIR", root.join("debian"))
            .env("FAKE_UID", uid.to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let log = std::fs::read_to_string(root.join("log")).unwrap_or_default();
        (output.status.code(), log, String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn test_script_installs_postgres_when_its_server_binaries_are_missing() {
    let install = "apt-get install -y --no-install-recommends postgresql \
                   (DEBIAN_FRONTEND=noninteractive)";
    // As root: apt-get itself, then the tests.
    let (code, log, stderr) = TestScript::new(true, true).run(0);
    assert_eq!(code, Some(0), "{log}{stderr}");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        ["apt-get update (DEBIAN_FRONTEND=)", install, "cargo test --workspace", "python", "node"],
        "{stderr}"
    );
    assert!(stderr.contains("installing Debian's postgresql package"), "{stderr}");

    // Not root: through sudo.
    let (code, log, stderr) = TestScript::new(true, true).run(1000);
    assert_eq!(code, Some(0), "{log}{stderr}");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            "sudo apt-get update",
            "apt-get update (DEBIAN_FRONTEND=)",
            "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql",
            install,
            "cargo test --workspace",
            "python",
            "node"
        ],
        "{stderr}"
    );
}

#[test]
fn test_script_installs_nothing_when_postgres_is_there_and_stops_when_it_cannot_install() {
    let (code, log, stderr) = TestScript::new(true, true).with_postgres().run(1000);
    assert_eq!(code, Some(0), "{log}{stderr}");
    assert_eq!(log.lines().collect::<Vec<_>>(), ["cargo test --workspace", "python", "node"]);

    // An install that brings no server binaries stops before the tests, saying what to do.
    let (code, log, stderr) = TestScript::new(true, false).run(0);
    assert_eq!(code, Some(1), "{log}{stderr}");
    assert!(!log.contains("cargo"), "{log}");
    assert!(stderr.contains("REIN_POSTGRES_BINDIR"), "{stderr}");
    // So does a machine without apt-get.
    let (code, log, stderr) = TestScript::new(false, false).run(0);
    assert_eq!(code, Some(1), "{log}{stderr}");
    assert!(log.is_empty(), "{log}");
    assert!(stderr.contains("no apt-get") && stderr.contains("REIN_POSTGRES_BINDIR"), "{stderr}");
}

#[test]
fn the_build_compiles_no_aws_lc() {
    // rustls runs on ring (`rein_providers::install_crypto_provider`): aws-lc's C build was
    // minutes of the first build, and nothing in rein needs it.
    let lock = std::fs::read_to_string(format!("{}/../../Cargo.lock", env!("CARGO_MANIFEST_DIR")))
        .unwrap();
    for package in ["aws-lc-sys", "aws-lc-rs", "cmake"] {
        assert!(!lock.contains(&format!("name = \"{package}\"\n")), "{package} is in Cargo.lock");
    }
    assert!(lock.contains("name = \"ring\"\n"));
}

#[tokio::test]
async fn handoffs_lists_shows_and_decides_through_the_admin_api() {
    let dir = tempfile::tempdir().unwrap();
    let config = sim_config(dir.path(), "127.0.0.1:0");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text = text.replace(
        "[routes.chat]\n",
        "[routes.chat]\nhandoff_reply = { template = \"A person will reply within 2 hours.\" }\n[routes.chat.handoff_rules]\n",
    );
    std::fs::write(&config, text).unwrap();
    let gateway = serve(&config);
    let url = gateway.url.clone();
    rein_providers::install_crypto_provider();
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("x-rein-conversation-id", "conv-cli")
        .header("x-rein-run-id", "run-cli")
        .json(&serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": "I want to talk to a person"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-rein-outcome"], "handed_off");
    let key = ["--admin-key-env", "REIN_CLI_ADMIN", "--url", url.as_str()];

    let (code, stdout, stderr) = admin_command(&[&["handoffs", "list"], &key[..]].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("TRIGGER") && stdout.contains("handoff_rule"), "{stdout}");
    assert!(stdout.contains("conv-cli") && stdout.contains("1 shown"), "{stdout}");
    let (code, stdout, _) = admin_command(&[&["handoffs", "show", "1"], &key[..]].concat());
    assert_eq!(code, Some(0));
    assert!(stdout.contains("customer      I want to talk to a person"), "{stdout}");
    assert!(
        stdout.contains("trigger       handoff_rule: the customer asked for a person"),
        "{stdout}"
    );
    let (code, stdout, _) = admin_command(
        &[
            &["handoffs", "decide", "1", "edit", "--by", "ana", "--draft", "We'll call you."],
            &key[..],
        ]
        .concat(),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("\"decision\": \"edited\""), "{stdout}");
    // Only the first decision counts.
    let (code, stdout, _) =
        admin_command(&[&["handoffs", "decide", "1", "approve", "--by", "ben"], &key[..]].concat());
    assert_eq!(code, Some(1));
    assert!(stdout.contains("409"), "{stdout}");
    let (code, stdout, _) = admin_command(&[&["handoffs", "stats"], &key[..]].concat());
    assert_eq!(code, Some(0));
    assert!(stdout.contains("handoff_rule") && stdout.contains("100.0%"), "{stdout}");
}

#[tokio::test]
async fn traces_and_sli_print_what_the_gateway_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let config = sim_config(dir.path(), "127.0.0.1:0");
    let gateway = serve(&config);
    let url = gateway.url.clone();
    rein_providers::install_crypto_provider();
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
        .json(
            &serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-rein-trace-id"], trace_id);
    let key = ["--admin-key-env", "REIN_CLI_ADMIN", "--url", url.as_str()];

    let (code, stdout, stderr) = admin_command(&[&["traces", "list"], &key[..]].concat());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains(trace_id) && stdout.contains("1 shown"), "{stdout}");
    let (code, stdout, _) = admin_command(&[&["traces", "show", trace_id], &key[..]].concat());
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.starts_with("chat chat (answered)"), "{stdout}");
    assert!(stdout.contains("└─"), "a tree: {stdout}");
    assert!(stdout.contains("disposition=answered"), "{stdout}");
    let (code, stdout, _) =
        admin_command(&[&["traces", "show", "0123456789abcdef"], &key[..]].concat());
    assert_eq!(code, Some(1), "an unknown trace is an error: {stdout}");
    assert!(stdout.contains("404"), "{stdout}");

    let (code, stdout, _) = admin_command(&[&["sli", "--window", "1h"], &key[..]].concat());
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("window 1h: 1 call(s)"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("chat ") && l.contains("100.0%")), "{stdout}");
    let (code, stdout, _) = admin_command(&[&["sli", "--window", "soon"], &key[..]].concat());
    assert_eq!(code, Some(1));
    assert!(stdout.contains("window"), "{stdout}");
}

/// `rein check` on a Vertex AI provider: where its tokens come from (the key file and its
/// account, or the metadata server), its project and region, never the private key; and what is
/// missing, by key, without mistaking an unset Google variable for a secret.
#[test]
fn check_explains_a_vertex_providers_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("sa.json");
    let pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC=\n-----END PRIVATE KEY-----\n";
    let key_json = serde_json::json!({
        "type": "service_account",
        "project_id": "key-project",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "rein@key-project.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token"
    });
    std::fs::write(&key, key_json.to_string()).unwrap();
    let routes = "[routes.chat]\n[[routes.chat.tiers]]\nname = \"p\"\nprovider = \"v\"\nmodel = \"claude-sonnet-4@20250514\"\n";
    let run = |provider: String| {
        let config = dir.path().join("rein.toml");
        std::fs::write(&config, format!("{provider}{routes}")).unwrap();
        let output = Command::new(BIN)
            .arg("check")
            .arg(&config)
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .env_remove("GOOGLE_CLOUD_PROJECT")
            .env_remove("GOOGLE_CLOUD_LOCATION")
            .env_remove("CLOUD_ML_REGION")
            .env_remove("GCE_METADATA_HOST")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };

    // The key file is not a usable RSA key: named by key, the key itself never shown.
    let with_key = format!(
        "[providers.v]\nkind = \"vertex\"\npublisher = \"anthropic\"\nregion = \"us-east5\"\ncredentials_file = \"{}\"\n",
        key.display()
    );
    let (code, stdout, stderr) = run(with_key.clone());
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("`providers.v.credentials_file`"), "{stderr}");
    assert!(!stderr.contains("MIIEvQ"), "{stderr}");

    // A real (test) key: the note names the file, the account and the token endpoint.
    let sim_key = rein_sim_key();
    std::fs::write(&key, sim_key).unwrap();
    let (code, stdout, stderr) = run(with_key);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let note = stdout.lines().find(|line| line.starts_with("note: `providers.v`")).unwrap_or("");
    assert!(note.contains("publisher `anthropic`"), "{stdout}");
    assert!(note.contains("project `rein-sim-test`, region `us-east5`"), "{stdout}");
    assert!(note.contains(&format!("service-account key `{}`", key.display())), "{stdout}");
    assert!(note.contains("rein-sim@rein-sim-test.iam.gserviceaccount.com"), "{stdout}");
    assert!(!stdout.contains("PRIVATE KEY"), "{stdout}");

    // No key file: the metadata server, said so.
    let metadata = "[providers.v]\nkind = \"vertex\"\npublisher = \"google\"\nproject = \"p\"\nregion = \"global\"\n".to_owned();
    let (code, stdout, stderr) = run(metadata);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("access tokens from the metadata server at metadata.google.internal (no `credentials_file`, and `GOOGLE_APPLICATION_CREDENTIALS` is unset)"), "{stdout}");

    // Nothing set: each missing setting by key, as an error, and no made-up key file problem.
    let (code, stdout, stderr) = run("[providers.v]\nkind = \"vertex\"\n".to_owned());
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    for key in ["providers.v.publisher", "providers.v.project", "providers.v.region"] {
        assert!(stderr.contains(&format!("`{key}`")), "`{key}` not named:\n{stderr}");
    }
    assert!(!stderr.contains("`providers.v.credentials_file`"), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    // The credentials list beside the problems says where each would come from.
    assert!(stderr.contains("project: MISSING") && stderr.contains("region: MISSING"), "{stderr}");
}

/// The simulator's throwaway test service-account key, as a key file's text.
fn rein_sim_key() -> String {
    let pem = include_str!("../../../rein-sim/src/vertex-TEST-ONLY-key.pem");
    serde_json::json!({
        "type": "service_account",
        "project_id": "rein-sim-test",
        "private_key_id": "rein-sim-test-key",
        "private_key": pem,
        "client_email": "rein-sim@rein-sim-test.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token"
    })
    .to_string()
}
