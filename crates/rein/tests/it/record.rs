//! Record and replay end to end: `rein record` (the binary) in front of a simulator writes a
//! scrubbed cassette that replays byte for byte; and a `kind = "replay"` provider answers a
//! route through the engine and the real OpenAI adapter from a cassette recorded through the
//! same adapter, while a request the cassette does not hold fails the call after one attempt
//! (a permanent failure, not a missing model) and `Runtime::verify_replays` names it; the same
//! for the Anthropic format; `rein check` explains a replay provider.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use rein_core::classify::FailureKind;
use rein_core::{CallContext, ChatRequest, Message};
use rein_runtime::Runtime;
use rein_runtime::config::Config;
use rein_sim::SimConfig;
use rein_sim::cassette::Cassette;
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_rein");
const HEADER_KEY: &str = "sk-record-cli-HEADER-0123456789";
const ENV_KEY: &str = "sk-record-cli-ENVONLY-9876543210";

/// `rein record`, stopped (SIGTERM through `kill`) when dropped.
struct Recording {
    child: Child,
    url: String,
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

fn rein_record(upstream: &str, cassette: &Path) -> Recording {
    let mut child = Command::new(BIN)
        .args(["record", "--upstream", upstream, "--listen", "127.0.0.1:0", "--cassette"])
        .arg(cassette)
        .args(["--key-env", "REIN_RECORD_TEST_KEY"])
        .env("REIN_RECORD_TEST_KEY", ENV_KEY)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let (url, rest) = line
        .trim()
        .strip_prefix("rein record listening on ")
        .and_then(|rest| rest.split_once(", "))
        .unwrap_or_else(|| panic!("{line}"));
    assert_eq!(rest, format!("recording {upstream} to {}", cassette.display()));
    Recording { child, url: url.to_string() }
}

fn client() -> reqwest::Client {
    rein_providers::install_crypto_provider();
    reqwest::Client::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_record_writes_a_scrubbed_cassette_that_replays_byte_for_byte() {
    let sim = rein_sim::bind(([127, 0, 0, 1], 0).into(), SimConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cassette.json");
    let recording = rein_record(&sim.base_url(), &path);
    let body = json!({
        "model": "gpt-sim",
        "stream": true,
        "user": ENV_KEY,
        "messages": [{"role": "user", "content": "Where is my order?"}],
    });
    let send = |base: &str| {
        client()
            .post(format!("{base}/v1/chat/completions"))
            .header("authorization", format!("Bearer {HEADER_KEY}"))
            .json(&body)
            .send()
    };
    let recorded = send(&recording.url).await.unwrap();
    assert_eq!(recorded.status(), 200);
    let recorded = recorded.bytes().await.unwrap();
    assert!(String::from_utf8_lossy(&recorded).contains("data: [DONE]"));
    drop(recording);

    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(HEADER_KEY), "the header's key is in the cassette:\n{text}");
    assert!(!text.contains(ENV_KEY), "the --key-env key is in the cassette:\n{text}");
    assert!(text.contains("\"authorization: [scrubbed]\""), "{text}");

    let replay = rein_sim::replay::start(Cassette::from_file(&path).unwrap()).await.unwrap();
    let replayed = send(&replay.base_url()).await.unwrap();
    assert_eq!(replayed.status(), 200);
    assert_eq!(replayed.bytes().await.unwrap(), recorded);
    replay.finish().await.unwrap();
    assert_eq!(sim.log().len(), 1);
}

#[test]
fn rein_record_refuses_an_existing_cassette_and_an_unset_key_variable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cassette.json");
    std::fs::write(&path, "{\"version\": 1, \"interactions\": []}").unwrap();
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .args(["record", "--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"])
            .arg("--cassette")
            .arg(&path)
            .args(extra)
            .env_remove("REIN_RECORD_UNSET")
            .output()
            .unwrap()
    };
    let exists = run(&[]);
    assert_eq!(exists.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&exists.stderr);
    assert!(stderr.contains("exists: pass --append"), "{stderr}");
    let unset = run(&["--append", "--key-env", "REIN_RECORD_UNSET"]);
    assert_eq!(unset.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unset.stderr);
    assert!(stderr.contains("--key-env REIN_RECORD_UNSET: the environment variable is not set"));
}

fn route(provider: &str) -> String {
    format!(
        "[routes.chat]\n[[routes.chat.tiers]]\nname = \"primary\"\nprovider = \"{provider}\"\nmodel = \"gpt-sim\"\n"
    )
}

fn store(dir: &Path, name: &str) -> String {
    format!("[store]\nsqlite_path = \"{}\"\n\n", dir.join(name).display())
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest { messages: vec![Message::user(text)], ..ChatRequest::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_provider_answers_through_the_engine_and_a_miss_fails_the_call_at_once() {
    const KEY: &str = "sk-replay-runtime-SECRET-424242";
    let sim = rein_sim::bind(([127, 0, 0, 1], 0).into(), SimConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cassette.json");
    let recorder = rein_sim::record::bind(
        ([127, 0, 0, 1], 0).into(),
        rein_sim::record::RecordConfig::new(sim.base_url(), &path),
    )
    .await
    .unwrap();

    // Recorded through the real adapter (streaming, as by default), with a key.
    let live = format!(
        "{}[providers.live]\nkind = \"openai_compatible\"\nbase_url = \"{}/v1\"\napi_key_env = \"REIN_REPLAY_KEY\"\n\n{}",
        store(dir.path(), "live.sqlite"),
        recorder.base_url(),
        route("live")
    );
    let runtime = Runtime::from_toml(&live, |name| (name == "REIN_REPLAY_KEY").then(|| KEY.into()))
        .await
        .unwrap();
    let answered =
        runtime.engine.complete(CallContext::new(), "chat", ask("Where is my order?")).await;
    let answered = answered.unwrap();
    // The adapter is done at the stream's last event, maybe before the recorder has the end.
    tokio::time::timeout(std::time::Duration::from_secs(30), recorder.wait_recorded(1))
        .await
        .expect("the exchange is recorded");
    assert_eq!(recorder.recorded(), 1);
    recorder.shutdown().await;
    assert!(!std::fs::read_to_string(&path).unwrap().contains(KEY));

    // Replayed: the same answer, through the same adapter, from the cassette.
    let replayed = format!(
        "{}[providers.replayed]\nkind = \"replay\"\nformat = \"openai\"\ncassette = \"{}\"\n\n{}",
        store(dir.path(), "replay.sqlite"),
        path.display(),
        route("replayed")
    );
    let runtime = Runtime::from_toml(&replayed, |_| None).await.unwrap();
    let again = runtime
        .engine
        .complete(CallContext::new(), "chat", ask("Where is my order?"))
        .await
        .unwrap();
    assert_eq!(again.response.text, answered.response.text);
    assert_eq!(again.response.usage, answered.response.usage);
    assert_eq!(again.report.attempts().count(), 1);
    runtime.verify_replays().unwrap();

    // Not recorded: one attempt, a permanent failure that names the miss; never a 404.
    let missed = runtime
        .engine
        .complete(CallContext::new(), "chat", ask("Something never recorded"))
        .await
        .unwrap_err();
    let report = missed.report().unwrap();
    let attempts: Vec<_> = report.attempts().collect();
    assert_eq!(attempts.len(), 1, "a miss is never retried: {missed}");
    let classified = attempts[0].classified.as_ref().unwrap();
    assert_eq!(classified.kind, FailureKind::InvalidRequest, "{classified:?}");
    let failure = format!("{:?}", attempts[0].failure);
    assert!(
        failure.contains("replay_miss") && failure.contains("no recorded interaction"),
        "{failure}"
    );
    let mismatch = runtime.verify_replays().unwrap_err().to_string();
    assert!(
        mismatch.starts_with("`providers.replayed`: the replay did not go as recorded: 1 miss(es)")
            && mismatch.contains("POST /v1/chat/completions"),
        "{mismatch}"
    );
    assert_eq!(sim.log().len(), 1, "only the recording reached the simulator");
}

#[test]
fn a_replay_provider_needs_a_readable_valid_cassette() {
    let dir = tempfile::tempdir().unwrap();
    let config = |cassette: &str| {
        format!("[providers.replayed]\nkind = \"replay\"\n{cassette}\n{}", route("replayed"))
    };
    let env = |_: &str| None::<String>;
    let missing = Config::from_toml(&config(""), &env).unwrap_err().to_string();
    assert!(missing.contains("providers.replayed.cassette"), "{missing}");
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "{\"version\": 1, \"interactions\": [").unwrap();
    let line = format!("cassette = \"{}\"", path.display());
    let broken = Config::from_toml(&config(&line), &env).unwrap_err().to_string();
    assert!(
        broken.contains("providers.replayed.cassette")
            && broken.contains(&format!("{} is not a valid cassette", path.display())),
        "{broken}"
    );
    let absent = format!("cassette = \"{}\"", dir.path().join("absent.json").display());
    let absent = Config::from_toml(&config(&absent), &env).unwrap_err().to_string();
    assert!(absent.contains("cannot read the cassette"), "{absent}");
    let scenario = "[providers.sim]\nkind = \"sim\"\ncassette = \"x.json\"\n";
    let wrong = Config::from_toml(&format!("{scenario}{}", route("sim")), &env).unwrap_err();
    assert!(wrong.to_string().contains("providers.sim.cassette"), "{wrong}");
}

#[test]
fn rein_check_explains_a_replay_provider() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = dir.path().join("cassette.json");
    std::fs::write(
        &cassette,
        r#"{"version": 1, "interactions": [{
            "request": {"method": "POST", "path": "/v1/chat/completions", "body": {"text": "{}"}},
            "response": {"status": 200, "body": {"text": "{}"}}}]}"#,
    )
    .unwrap();
    let config = dir.path().join("rein.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.replayed]\nkind = \"replay\"\ncassette = \"{}\"\n\n{}",
            cassette.display(),
            route("replayed")
        ),
    )
    .unwrap();
    let output = Command::new(BIN).arg("check").arg(&config).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    let note = format!(
        "note: `providers.replayed` replays {} (1 recorded interaction(s)), served in-process",
        cassette.display()
    );
    assert!(stdout.contains(&note), "{stdout}");
    assert!(stdout.contains("\"kind\": \"replay\""), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_replay_provider_answers_what_the_anthropic_adapter_recorded() {
    const KEY: &str = "sk-ant-replay-runtime-SECRET-4242";
    let sim = rein_sim::bind(([127, 0, 0, 1], 0).into(), SimConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("anthropic.json");
    let recorder = rein_sim::record::bind(
        ([127, 0, 0, 1], 0).into(),
        rein_sim::record::RecordConfig::new(sim.base_url(), &path),
    )
    .await
    .unwrap();
    let live = format!(
        "{}[providers.live]\nkind = \"anthropic\"\nbase_url = \"{}/v1\"\napi_key_env = \"REIN_REPLAY_ANT_KEY\"\n\n{}",
        store(dir.path(), "live.sqlite"),
        recorder.base_url(),
        route("live")
    );
    let runtime =
        Runtime::from_toml(&live, |name| (name == "REIN_REPLAY_ANT_KEY").then(|| KEY.into()))
            .await
            .unwrap();
    let answered = runtime
        .engine
        .complete(CallContext::new(), "chat", ask("Capital of Norway?"))
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), recorder.wait_recorded(1))
        .await
        .expect("the exchange is recorded");
    recorder.shutdown().await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(KEY), "{text}");
    let request = &Cassette::from_file(&path).unwrap().interactions[0].request;
    assert_eq!(request.path, "/v1/messages");
    assert!(request.headers.contains(&("x-api-key".into(), "[scrubbed]".into())), "{text}");

    let replayed = format!(
        "{}[providers.replayed]\nkind = \"replay\"\nformat = \"anthropic\"\ncassette = \"{}\"\n\n{}",
        store(dir.path(), "replay.sqlite"),
        path.display(),
        route("replayed")
    );
    let runtime = Runtime::from_toml(&replayed, |_| None).await.unwrap();
    let again = runtime
        .engine
        .complete(CallContext::new(), "chat", ask("Capital of Norway?"))
        .await
        .unwrap();
    assert_eq!(again.response.text, answered.response.text);
    assert_eq!(again.response.model, answered.response.model);
    runtime.verify_replays().unwrap();
    assert_eq!(sim.log().len(), 1);
}
