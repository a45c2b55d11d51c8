//! What frameworks and third-party gateway suites tripped over at the HTTP surface: the 413 for
//! an oversize body reaches a client that is still sending; a body that stalls gets a 408; 405s,
//! unknown paths and the models list in the caller's format; `max_tokens: 0` and an unusable
//! caller schema are 400s naming the field; calls whose client goes away are counted; the edge's
//! own way to each model-call endpoint answers as the router's.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::gateway::{CONFIG, chat, start, start_with};

const KEY: Option<&str> = Some("client-secret-1");

/// Send `head` and then `body` on a raw connection while reading the answer; returns the status
/// line and whether every byte of the body could be written.
async fn raw_exchange(addr: std::net::SocketAddr, head: String, body: Vec<u8>) -> (String, bool) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        for chunk in body.chunks(16 * 1024) {
            write.write_all(chunk).await?;
        }
        write.flush().await?;
        // Keep the write half open until the answer has been read.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok::<_, std::io::Error>(())
    });
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut answer)).await;
    let wrote_all = writer.await.unwrap().is_ok();
    let text = String::from_utf8_lossy(&answer).to_string();
    (text, wrote_all)
}

#[tokio::test]
async fn an_oversize_body_gets_its_413_even_while_the_client_is_still_sending() {
    let gw = start().await;
    // 2 MiB against a 4096-byte limit, declared up front (what Node's fetch sends).
    let body = vec![b'x'; 2 * 1024 * 1024];
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer client-secret-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    for _ in 0..5 {
        let (answer, wrote_all) = raw_exchange(gw.addr, head.clone(), body.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(wrote_all, "the client's write broke before it could read the 413");
        assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
        assert!(answer.contains("server.max_body_bytes"), "{answer}");
    }
    // The tool endpoint reads its bodies the same way.
    let tool_head = format!(
        "POST /v1/tools/anything HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer client-secret-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let (answer, wrote_all) = raw_exchange(gw.addr, tool_head, body.clone()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(wrote_all, "the tool endpoint's 413 broke the client's write");
    // Chunked, with no length declared: the same answer once the limit is passed.
    let mut chunked = String::new();
    for _ in 0..4 {
        chunked.push_str(&format!("{:x}\r\n{}\r\n", 2048, "y".repeat(2048)));
    }
    chunked.push_str("0\r\n\r\n");
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer client-secret-1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_string();
    let (answer, _) = raw_exchange(gw.addr, head, chunked.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    gw.stop().await.unwrap();
}

/// An HTTP/1.1 connection's read buffer is capped at 16 KiB: it bounds what an open stream
/// keeps for the read that watches for its client leaving, however long its request, and a
/// request's head (a 64 KiB one gets hyper's `431`, where the default cap took ~400 KiB); a
/// body many times the cap still arrives whole, beside a head of 12 KiB.
#[tokio::test]
async fn a_long_body_arrives_whole_through_the_capped_read_buffer_and_a_64_kib_head_gets_a_431() {
    let config = CONFIG.replace("max_body_bytes = 4096", "max_body_bytes = 1000000");
    let gw = start_with(&config, None).await;
    let head = |pad: usize, length: usize| {
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer client-secret-1\r\nContent-Type: application/json\r\nx-pad: {}\r\nConnection: close\r\nContent-Length: {length}\r\n\r\n",
            "p".repeat(pad)
        )
    };
    let prompt = "where is my order? ".repeat(300_000 / 19);
    let body = serde_json::to_vec(&json!({
        "model": "chat",
        "messages": [{"role": "user", "content": prompt}],
    }))
    .unwrap();
    let (answer, _) = raw_exchange(gw.addr, head(12 * 1024, body.len()), body.clone()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{}", &answer[..answer.len().min(300)]);
    assert!(answer.contains("\"choices\""), "{answer}");
    let (answer, _) = raw_exchange(gw.addr, head(64 * 1024, body.len()), body).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{}", &answer[..answer.len().min(300)]);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_body_that_stalls_gets_a_408_in_the_callers_format() {
    let config = CONFIG
        .replace("drain_timeout_ms = 5000", "drain_timeout_ms = 5000\nbody_read_timeout_ms = 300");
    let gw = start_with(&config, None).await;
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: client-secret-1\r\nanthropic-version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("no answer to a stalled body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("server.body_read_timeout_ms"), "{answer}");
    assert!(answer.contains("\"type\":\"error\""), "not Anthropic's shape: {answer}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_stalled_body_on_any_route_is_cut_by_the_body_clock() {
    let config = CONFIG
        .replace("drain_timeout_ms = 5000", "drain_timeout_ms = 5000\nbody_read_timeout_ms = 300");
    let gw = start_with(&config, None).await;
    for path in ["/admin/kill", "/v1/tools/anything", "/admin/reload"] {
        let mut stream = TcpStream::connect(gw.addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-secret-1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"a\":"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        assert!(ended.is_ok(), "{path}: a stalled body held the request for 5 s");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 4"), "{path}: {answer}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn methods_paths_and_the_models_list_answer_in_the_callers_format() {
    let gw = start().await;
    // A known path, the wrong method: 405 with a body, in each format.
    let openai = gw.client.get(gw.url("/v1/chat/completions")).send().await.unwrap();
    assert_eq!(openai.status(), 405);
    let body: Value = openai.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("GET"), "{body}");
    let anthropic = gw
        .client
        .get(gw.url("/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status(), 405);
    assert_eq!(anthropic.json::<Value>().await.unwrap()["type"], "error");

    // Only the endpoints' own paths are model calls: a trailing slash or a step below one is a
    // path rein does not serve.
    for path in ["/v1/chat/completions/", "/v1/responses/x", "/v1/messages/", "/V1/messages"] {
        let unknown = gw.post(path, KEY, chat("chat")).await;
        assert_eq!(unknown.status(), 404, "{path}");
        let body: Value = unknown.json().await.unwrap();
        assert!(body["error"]["message"].as_str().unwrap().contains(path), "{path}: {body}");
    }

    // An unknown path is not a missing model: frameworks report `model_not_found` as one.
    let unknown = gw.client.post(gw.url("/v1/embeddings")).json(&json!({})).send().await.unwrap();
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_ne!(body["error"]["code"], "model_not_found", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("/v1/embeddings"));
    // A missing route still is one.
    let missing = gw.post("/v1/chat/completions", KEY, chat("nope")).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().await.unwrap()["error"]["code"], "model_not_found");

    // The models list in Anthropic's shape for the Anthropic SDK, OpenAI's otherwise.
    let listed = gw
        .client
        .get(gw.url("/v1/models"))
        .header("anthropic-version", "2023-06-01")
        .header("x-api-key", "client-secret-1")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    let body: Value = listed.json().await.unwrap();
    assert_eq!(body["has_more"], false, "{body}");
    let first = &body["data"][0];
    assert_eq!(first["type"], "model", "{body}");
    assert!(first["created_at"].as_str().unwrap().ends_with('Z'), "{body}");
    assert!(body.get("object").is_none(), "{body}");
    let openai_list = gw
        .client
        .get(gw.url("/v1/models"))
        .bearer_auth("client-secret-1")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(openai_list["object"], "list");
    assert_eq!(openai_list["data"][0]["object"], "model");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn zero_max_tokens_and_an_unusable_caller_schema_are_400s_naming_the_field() {
    let gw = start().await;
    let mut openai = chat("chat");
    openai["max_tokens"] = json!(0);
    let response = gw.post("/v1/chat/completions", KEY, openai).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "max_tokens", "{body}");

    let mut openai = chat("chat");
    openai["max_completion_tokens"] = json!(0);
    let body: Value = gw.post("/v1/chat/completions", KEY, openai).await.json().await.unwrap();
    assert_eq!(body["error"]["param"], "max_completion_tokens", "{body}");

    let anthropic =
        json!({"model": "chat", "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]});
    let response = gw
        .client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "client-secret-1")
        .header("anthropic-version", "2023-06-01")
        .json(&anthropic)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("max_tokens"), "{body}");

    // A schema rein cannot compile would leave the answer unchecked: refused instead.
    let mut with_schema = chat("chat");
    with_schema["response_format"] = json!({
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "no-such-type"}}
    });
    let response = gw.post("/v1/chat/completions", KEY, with_schema).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["param"], "response_format.json_schema.schema", "{body}");
    let anthropic = json!({
        "model": "chat", "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        "output_format": {"type": "json_schema", "schema": {"type": "object", "required": "answer"}}
    });
    let response = gw
        .client
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "client-secret-1")
        .header("anthropic-version", "2023-06-01")
        .json(&anthropic)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("output_format.schema"), "{body}");
    gw.stop().await.unwrap();
}

async fn abandoned(gw: &crate::gateway::Running, route: &str) -> u64 {
    let text = gw.admin(reqwest::Method::GET, "/metrics", None).await.text().await.unwrap();
    let line = format!("rein_calls_abandoned_total{{route=\"{route}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&line).map(|v| v.trim().parse().unwrap())).unwrap_or(0)
}

#[tokio::test]
async fn a_call_whose_client_goes_away_is_counted_as_abandoned() {
    let config = format!(
        "{CONFIG}\n[routes.ponder]\ndeadline_ms = 10000\nfirst_token_ms = 5000\nattempt_ms = 8000\n[[routes.ponder.tiers]]\nname = \"primary\"\nprovider = \"sim-openai\"\nmodel = \"sim:slow_first_token:ms=3000\"\n"
    );
    let gw = start_with(&config, None).await;
    // A finished call is not abandoned.
    assert_eq!(gw.post("/v1/chat/completions", KEY, chat("chat")).await.status(), 200);
    assert_eq!(abandoned(&gw, "chat").await, 0);
    // A client that gives up after 200 ms, whole and streamed.
    for stream in [false, true] {
        let mut body = chat("ponder");
        body["stream"] = json!(stream);
        let request = gw
            .client
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth("client-secret-1")
            .json(&body);
        let gave_up = tokio::time::timeout(Duration::from_millis(200), request.send()).await;
        assert!(gave_up.is_err(), "the slow call answered within 200 ms");
    }
    let mut counted = 0;
    for _ in 0..100 {
        counted = abandoned(&gw, "ponder").await;
        if counted >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(counted, 2);
    gw.stop().await.unwrap();
}

/// The edge hands a `POST` to a model-call endpoint to its handler without the router: each
/// endpoint answers over HTTP as the router's route for it does (its API's shape, the same
/// report headers).
#[tokio::test]
async fn the_edges_way_to_each_endpoint_answers_as_the_routers_does() {
    use tower_service::Service;
    let gw = start().await;
    let question = json!([{"role": "user", "content": "where is my order?"}]);
    let calls = [
        ("/v1/chat/completions", None, json!({"model": "chat", "messages": question})),
        ("/v1/responses", None, json!({"model": "chat", "input": "where is my order?"})),
        (
            "/v1/messages",
            Some("2023-06-01"),
            json!({"model": "chat", "max_tokens": 100, "messages": question}),
        ),
    ];
    for (path, version, body) in calls {
        let mut over_http = gw.client.post(gw.url(path)).bearer_auth("client-secret-1");
        let mut routed = http::Request::post(path)
            .header("authorization", "Bearer client-secret-1")
            .header("content-type", "application/json");
        if let Some(version) = version {
            over_http = over_http.header("anthropic-version", version);
            routed = routed.header("anthropic-version", version);
        }
        let over_http = over_http.json(&body).send().await.unwrap();
        let routed = routed.body(axum::body::Body::from(body.to_string())).unwrap();
        let mut router = rein_gateway::server::router(gw.gateway.clone());
        let routed = router.call(routed).await.unwrap();

        assert_eq!(over_http.status(), routed.status(), "{path}");
        assert_eq!(over_http.status(), 200, "{path}");
        let names = |headers: &http::HeaderMap| {
            let mut names: Vec<String> =
                headers.keys().map(|name| name.to_string()).filter(|name| name != "date").collect();
            names.sort();
            names
        };
        assert_eq!(names(over_http.headers()), names(routed.headers()), "{path}");
        assert!(over_http.headers().contains_key("x-rein-outcome"), "{path}");
        let keys = |body: &Value| {
            let mut keys: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        let over_http: Value = over_http.json().await.unwrap();
        let routed = axum::body::to_bytes(routed.into_body(), usize::MAX).await.unwrap();
        let routed: Value = serde_json::from_slice(&routed).unwrap();
        assert_eq!(keys(&over_http), keys(&routed), "{path}: {over_http} against {routed}");
        for field in ["object", "type"] {
            assert_eq!(over_http.get(field), routed.get(field), "{path}: {field}");
        }
    }
    gw.stop().await.unwrap();
}
