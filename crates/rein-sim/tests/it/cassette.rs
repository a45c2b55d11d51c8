//! Record and replay: exchanges recorded through `rein_sim::record` in front of a real
//! simulator (JSON and SSE, both wire formats, an error and a cut stream) replay byte for byte;
//! the cassette holds no secret the client sent (the test reads the file for each one); a
//! request the cassette does not hold and an interaction that never played fail loudly; a
//! broken cassette is a clear error; the recorder's bounds hold.

// Helpers of tests: failing loudly is their job.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::{Path, PathBuf};

use rein_core::Secret;
use rein_sim::cassette::{Body, Cassette, Interaction, RecordedRequest, RecordedResponse};
use rein_sim::record::{self, RecordConfig, RecordHandle};
use rein_sim::replay;
use serde_json::{Value, json};

use crate::support::*;

const KEY: &str = "sk-test-SECRET-0123456789abcdef";
const ORG: &str = "org-SECRETORG42xyz";
const COOKIE: &str = "cookie-SECRET-9876543210";

/// One exchange as the client saw it.
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    /// Every header but the framing ones (length, chunking, connection).
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Whether the body ended cleanly.
    clean: bool,
}

async fn seen(response: reqwest::Response) -> Seen {
    let status = response.status().as_u16();
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| {
            !matches!(name.as_str(), "content-length" | "transfer-encoding" | "connection")
        })
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_string()))
        .collect();
    headers.sort();
    let (body, clean) = read_all(response).await;
    Seen { status, headers, body: body.into_bytes(), clean }
}

/// The requests of the test, sent to `base` with the secrets in headers and the query.
async fn exchanges(client: &reqwest::Client, base: &str, reorder: bool) -> Vec<Seen> {
    let openai = |body: Value, fault: Option<&str>| {
        let mut request = client
            .post(format!("{base}/v1/chat/completions?key={KEY}&api-version=2024-10-21"))
            .header("authorization", format!("Bearer {KEY}"))
            .header("openai-organization", ORG)
            .header("cookie", format!("session={COOKIE}; theme=dark"))
            .header("content-type", "application/json");
        if let Some(fault) = fault {
            request = request.header("x-sim-fault", fault);
        }
        // The replay gets the same JSON with its keys in another order and spaced out.
        let text = if reorder { spaced_reversed(&body) } else { body.to_string() };
        request.body(text)
    };
    let anthropic = |body: Value| {
        client
            .post(format!("{base}/v1/messages"))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(if reorder { spaced_reversed(&body) } else { body.to_string() })
    };
    let mut out = Vec::new();
    let mut question = openai_body("What is the capital of Norway?");
    question["user"] = json!(KEY);
    out.push(seen(openai(question.clone(), None).send().await.unwrap()).await);
    let mut streamed = openai_body("Stream me the capital of Sweden.");
    streamed["stream"] = json!(true);
    out.push(seen(openai(streamed, None).send().await.unwrap()).await);
    out.push(seen(openai(openai_body("overloaded?"), Some("529")).send().await.unwrap()).await);
    let mut cut = openai_body("Cut me off.");
    cut["stream"] = json!(true);
    out.push(seen(openai(cut, Some("cut:after=3")).send().await.unwrap()).await);
    out.push(seen(anthropic(anthropic_body("Capital of Denmark?")).send().await.unwrap()).await);
    let mut streamed = anthropic_body("Stream the capital of Finland.");
    streamed["stream"] = json!(true);
    out.push(seen(anthropic(streamed).send().await.unwrap()).await);
    out
}

/// The same JSON with every object's keys reversed and whitespace added.
fn spaced_reversed(value: &Value) -> String {
    fn reversed(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| b.0.cmp(a.0));
                let inner: Vec<String> = entries
                    .into_iter()
                    .map(|(k, v)| format!("{} :  {}", Value::String(k.clone()), reversed(v)))
                    .collect();
                format!("{{\n  {}\n}}", inner.join(" ,\n  "))
            }
            Value::Array(items) => {
                format!("[ {} ]", items.iter().map(reversed).collect::<Vec<_>>().join(" , "))
            }
            scalar => scalar.to_string(),
        }
    }
    reversed(value)
}

async fn recorder(sim: &Sim, path: &Path) -> RecordHandle {
    let mut config = RecordConfig::new(sim.handle.base_url(), path);
    config.secrets = vec![Secret::new(KEY)];
    record::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap()
}

fn cassette_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("cassette.json")
}

#[tokio::test]
async fn cassette_recorded_from_the_sim_replays_byte_for_byte_and_holds_no_secret() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = cassette_path(&dir);
    let recorder = recorder(&sim, &path).await;
    let recorded = exchanges(&sim.client, &recorder.base_url(), false).await;
    // The recorder is transparent: the client got the simulator's answers.
    assert_eq!(recorded[0].status, 200);
    assert!(String::from_utf8_lossy(&recorded[1].body).contains("data: [DONE]"));
    assert_eq!(recorded[2].status, 529);
    assert!(!recorded[3].clean, "the cut stream reached the client cut");
    assert!(recorded.iter().enumerate().all(|(i, s)| i == 3 || s.clean));
    assert!(String::from_utf8_lossy(&recorded[5].body).contains("event: message_stop"));
    assert_eq!(recorder.recorded(), 6, "each exchange is on file before its body ends");
    assert_eq!(sim.handle.log().len(), 6);
    let upstream_saw = &sim.handle.log()[0];
    assert!(upstream_saw.auth_present, "the credentials went upstream: {upstream_saw:?}");
    recorder.shutdown().await;

    // The file holds none of the secrets, in any header, path, query or body.
    let text = std::fs::read_to_string(&path).unwrap();
    for secret in [KEY, ORG, COOKIE, "0123456789abcdef"] {
        assert!(!text.contains(secret), "{secret} is in the cassette:\n{text}");
    }
    let cassette = Cassette::from_file(&path).unwrap();
    assert_eq!(cassette.interactions.len(), 6);
    let first = &cassette.interactions[0].request;
    assert_eq!(first.path, "/v1/chat/completions?key=[scrubbed]&api-version=2024-10-21");
    for name in ["authorization", "openai-organization", "cookie"] {
        let value = first.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(value, Some("[scrubbed]"), "{name} is kept by name, scrubbed: {first:?}");
    }
    let Body::Text(body) = &first.body else { panic!("a JSON body is text: {first:?}") };
    assert!(body.contains(r#""user":"[scrubbed]""#), "{body}");
    assert!(first.match_key.as_deref().unwrap().starts_with("sha256:"));
    let stream = &cassette.interactions[1].response;
    assert!(stream.chunks.as_ref().is_some_and(|c| c.len() > 1), "chunk sizes kept: {stream:?}");
    assert!(cassette.interactions[3].response.cut);
    let anthropic = &cassette.interactions[4].request;
    assert!(anthropic.headers.contains(&("x-api-key".into(), "[scrubbed]".into())));

    // Replayed, with the JSON bodies' keys in another order: the same bytes, status, headers
    // and ends, cut included.
    let replay = replay::start(cassette).await.unwrap();
    let replayed = exchanges(&sim.client, &replay.base_url(), true).await;
    for (i, (replayed, recorded)) in replayed.iter().zip(&recorded).enumerate() {
        assert_eq!(replayed, recorded, "exchange {i}");
    }
    assert_eq!(replayed.len(), recorded.len());
    replay.finish().await.unwrap();
    assert_eq!(sim.handle.log().len(), 6, "the replay never reached the simulator");
}

/// A client (reqwest has rustls without a crypto provider of its own in a workspace build).
fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A cassette of `requests` (method, path, body), each answered 200 with `answer <i>`.
fn cassette_of(requests: &[(&str, &str, Value)]) -> Cassette {
    let mut cassette = Cassette::new();
    for (i, (method, path, body)) in requests.iter().enumerate() {
        cassette.interactions.push(Interaction {
            request: RecordedRequest {
                method: method.to_string(),
                path: path.to_string(),
                headers: vec![],
                body: Body::Text(body.to_string()),
                match_key: None,
            },
            response: RecordedResponse {
                status: 200,
                headers: vec![("content-type".into(), "application/json".into())],
                body: Body::Text(json!({"answer": i}).to_string()),
                chunks: None,
                cut: false,
            },
        });
    }
    cassette
}

#[tokio::test]
async fn a_request_the_cassette_does_not_hold_fails_loudly_and_finish_names_it() {
    let question = openai_body("recorded question");
    let replay = replay::start(cassette_of(&[("POST", "/v1/chat/completions", question.clone())]))
        .await
        .unwrap();
    let client = client();
    let url = format!("{}/v1/chat/completions", replay.base_url());
    let other = client.post(&url).json(&openai_body("another question")).send().await.unwrap();
    assert_eq!(other.status(), 400, "a permanent failure, not a 404 (a missing model)");
    assert_eq!(header(&other, "x-should-retry").as_deref(), Some("false"));
    let error: Value = other.json().await.unwrap();
    assert_eq!(error["error"]["type"], "replay_miss");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no recorded interaction matches POST /v1/chat/completions")
            && message.contains(
                "closest: #0 POST /v1/chat/completions, the body differs at /messages/0/content"
            ),
        "{message}"
    );
    let played = client.post(&url).json(&question).send().await.unwrap();
    assert_eq!(played.json::<Value>().await.unwrap(), json!({"answer": 0}));

    let error = replay.finish().await.unwrap_err();
    assert_eq!(error.misses.len(), 1, "{error}");
    assert!(error.unplayed.is_empty(), "{error}");
    assert!(error.to_string().contains("miss: no recorded interaction matches POST"), "{error}");
}

#[tokio::test]
async fn an_interaction_that_never_played_fails_finish() {
    let replay = replay::start(cassette_of(&[
        ("POST", "/v1/chat/completions", openai_body("one")),
        ("POST", "/v1/messages", anthropic_body("two")),
    ]))
    .await
    .unwrap();
    let url = format!("{}/v1/chat/completions", replay.base_url());
    let answer = client().post(&url).json(&openai_body("one")).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(replay.verify().unwrap_err().unplayed.len(), 1);
    let error = replay.finish().await.unwrap_err();
    assert!(error.misses.is_empty());
    assert!(error.unplayed[0].starts_with("#1 POST /v1/messages (body sha256:"), "{error}");
}

#[tokio::test]
async fn equal_requests_play_once_each_in_recorded_order() {
    let body = openai_body("same");
    let replay = replay::start(cassette_of(&[
        ("POST", "/v1/chat/completions", body.clone()),
        ("POST", "/v1/chat/completions", body.clone()),
    ]))
    .await
    .unwrap();
    let client = client();
    let url = format!("{}/v1/chat/completions", replay.base_url());
    for expected in [json!({"answer": 0}), json!({"answer": 1})] {
        let answer: Value =
            client.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
        assert_eq!(answer, expected);
    }
    let third = client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(third.status(), 400);
    let message = third.json::<Value>().await.unwrap()["error"]["message"].to_string();
    assert!(message.contains("was already played (#0, #1)"), "{message}");
    assert_eq!(replay.finish().await.unwrap_err().misses.len(), 1);
}

#[tokio::test]
async fn a_broken_cassette_is_a_clear_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = cassette_path(&dir);
    let missing = Cassette::from_file(&path).unwrap_err().to_string();
    assert!(
        missing.starts_with(&format!("cannot read the cassette {}", path.display())),
        "{missing}"
    );
    let whole = cassette_of(&[("POST", "/v1/chat/completions", openai_body("x"))]).to_json();
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    let truncated = Cassette::from_file(&path).unwrap_err().to_string();
    assert!(
        truncated.starts_with(&format!("{} is not a valid cassette: ", path.display()))
            && truncated.contains("line"),
        "{truncated}"
    );
    std::fs::write(&path, whole.replace("\"status\": 200", "\"status\": 20")).unwrap();
    let status = Cassette::from_file(&path).unwrap_err().to_string();
    assert!(status.ends_with("interaction 0: 20 is not an HTTP status"), "{status}");
}

#[tokio::test]
async fn recording_refuses_an_existing_cassette_unless_appending() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = cassette_path(&dir);
    cassette_of(&[("POST", "/v1/chat/completions", openai_body("old"))])
        .write_atomically(&path)
        .await
        .unwrap();
    let refused = record::bind(
        "127.0.0.1:0".parse().unwrap(),
        RecordConfig::new(sim.handle.base_url(), &path),
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("pass --append"), "{refused}");
    let mut config = RecordConfig::new(sim.handle.base_url(), &path);
    config.append = true;
    let recorder = record::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let answer = sim
        .client
        .post(format!("{}/v1/chat/completions", recorder.base_url()))
        .json(&openai_body("new"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.bytes().await.unwrap();
    assert_eq!(Cassette::from_file(&path).unwrap().interactions.len(), 2);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
}

#[tokio::test]
async fn the_recorder_cuts_off_and_does_not_record_what_passes_its_cap() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = cassette_path(&dir);
    let mut config = RecordConfig::new(sim.handle.base_url(), &path);
    config.max_body_bytes = 200;
    let recorder = record::bind("127.0.0.1:0".parse().unwrap(), config).await.unwrap();
    let url = format!("{}/v1/chat/completions", recorder.base_url());
    let mut long = openai_body("tell me a long story");
    long["stream"] = json!(true);
    let answer = sim.client.post(&url).json(&long).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    let (_, clean) = read_all(answer).await;
    assert!(!clean, "an answer past the cap is cut off");
    let big = openai_body(&"x".repeat(300));
    let refused = sim.client.post(&url).json(&big).send().await.unwrap();
    assert_eq!(refused.status(), 413);
    assert_eq!(sim.handle.log().len(), 1, "a request past the cap is not forwarded");
    assert_eq!(recorder.recorded(), 0);
    assert!(!path.exists(), "nothing was recorded");
}
