//! The `rein` binary itself: `rein check` on good and bad configs, and `rein versions` changing,
//! listing and reverting a route's settings on a running `rein serve` through its admin API.

use std::io::{BufRead, BufReader};
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
        .env("REIN_CLIENT_KEY", "client-cli-secret")
        .env("REIN_ADMIN_KEY", "admin-cli-secret")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("is valid: 1 route(s), 2 provider(s)"), "{stdout}");
    assert!(stdout.contains("\"deadline_ms\": 20000"), "durations print in the keys' units");
    for secret in ["sk-cli-secret", "sk-ant-cli-secret", "client-cli-secret", "admin-cli-secret"] {
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
