//! The replay server: serves a [`Cassette`]'s recorded responses on a loopback port, so tests
//! run on real provider answers with their quirks and without the network.
//!
//! A request matches the first unplayed interaction with the same method, the same path and
//! query and the same body (JSON compared as parsed, so key order and spacing do not matter;
//! any other body byte for byte), after scrubbing it of the request's own credentials as the
//! recorder did. Where the recording reads `[scrubbed]`, any value matches (`?key=...`, a key
//! in a body: the replay cannot know what was there). Each interaction plays once; equal
//! requests play in recorded order. The answer is the recorded status, headers and body bytes
//! exactly (framing headers aside: the length or chunking is hyper's), in the recorded chunks,
//! and cut where the recording was cut.
//!
//! A request nothing matches is a **miss**, and fails loudly: a `400` that rein classifies as
//! a permanent failure (never retried, never mistaken for a missing model as a 404 would be),
//! with `x-should-retry: false` and an error of type `replay_miss` naming the request and the
//! closest recorded one (where its body differs, as a JSON pointer). Every miss is kept, and
//! [`ReplayHandle::verify`] / [`ReplayHandle::finish`] fail while there is a miss or an
//! interaction that never played, so a test that sends an unrecorded request or forgets one
//! fails.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::body::{Chunk, SimBody};
use crate::cassette::{self, Cassette, CassetteError};
use crate::listen::{self, Handler};
use crate::scrub::Scrubber;

/// Request bodies above this are a miss (the providers' own limit is 32 MB).
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The error type of a miss's body.
pub const MISS_TYPE: &str = "replay_miss";

/// Headers about the connection or the framing of one message, which are hyper's to set.
pub(crate) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "host",
];

/// Why the replay server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReplayStartError {
    #[error("cannot listen on a loopback port: {0}")]
    Bind(#[source] std::io::Error),
    #[error(transparent)]
    Cassette(#[from] CassetteError),
}

/// What did not go as recorded: every miss and every interaction that never played.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.misses, .unplayed))]
pub struct ReplayError {
    pub misses: Vec<String>,
    pub unplayed: Vec<String>,
}

fn describe(misses: &[String], unplayed: &[String]) -> String {
    let mut out = format!(
        "the replay did not go as recorded: {} miss(es), {} unplayed interaction(s)",
        misses.len(),
        unplayed.len()
    );
    for miss in misses {
        out.push_str(&format!("\n  miss: {miss}"));
    }
    for interaction in unplayed {
        out.push_str(&format!("\n  unplayed: {interaction}"));
    }
    out
}

/// A running replay server. Dropping the handle stops it, without the check [`finish`] makes.
///
/// [`finish`]: ReplayHandle::finish
#[derive(Debug)]
pub struct ReplayHandle {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct State {
    slots: Vec<Slot>,
    misses: Vec<String>,
}

/// One interaction, ready to match and to play.
#[derive(Debug)]
struct Slot {
    method: String,
    path: String,
    key: String,
    json: Option<Value>,
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    chunks: Option<Vec<usize>>,
    cut: bool,
    played: bool,
}

/// Starts a replay server for `cassette` on `127.0.0.1:0`.
pub async fn start(cassette: Cassette) -> Result<ReplayHandle, ReplayStartError> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(ReplayStartError::Bind)?;
    start_on(listener, cassette).await
}

/// Starts a replay server for `cassette` on a listener you bound.
pub async fn start_on(
    listener: TcpListener,
    cassette: Cassette,
) -> Result<ReplayHandle, ReplayStartError> {
    let addr = listener.local_addr().map_err(ReplayStartError::Bind)?;
    let slots = slots(&cassette)?;
    let state = Arc::new(Mutex::new(State { slots, misses: Vec::new() }));
    let handler: Handler = {
        let state = state.clone();
        Arc::new(move |request| Box::pin(answer(state.clone(), request)))
    };
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(listen::accept_loop(listener, handler, stopped));
    Ok(ReplayHandle { addr, state, stop, task: Some(task) })
}

fn slots(cassette: &Cassette) -> Result<Vec<Slot>, CassetteError> {
    let mut slots = Vec::with_capacity(cassette.interactions.len());
    for (index, interaction) in cassette.interactions.iter().enumerate() {
        let fail = |message: String| CassetteError::Interaction {
            origin: "cassette".into(),
            index,
            message,
        };
        let request = &interaction.request;
        let response = &interaction.response;
        let (canonical, json) = cassette::canonical(&request.body.bytes().map_err(fail)?);
        let status = StatusCode::from_u16(response.status)
            .map_err(|_| fail(format!("{} is not an HTTP status", response.status)))?;
        let headers = response
            .headers
            .iter()
            .filter(|(name, _)| !HOP_BY_HOP.contains(&name.to_ascii_lowercase().as_str()))
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from_bytes(name.as_bytes()).ok()?,
                    HeaderValue::from_str(value).ok()?,
                ))
            })
            .collect();
        let body = Bytes::from(response.body.bytes().map_err(fail)?);
        let chunks =
            response.chunks.clone().filter(|sizes| sizes.iter().sum::<usize>() == body.len());
        slots.push(Slot {
            method: request.method.to_ascii_uppercase(),
            path: request.path.clone(),
            key: cassette::hash(&canonical),
            json,
            status,
            headers,
            body,
            chunks,
            cut: response.cut,
            played: false,
        });
    }
    Ok(slots)
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    match state.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

async fn answer(state: Arc<Mutex<State>>, request: Request<Incoming>) -> Response<SimBody> {
    let (parts, body) = request.into_parts();
    let method = parts.method.as_str().to_string();
    let raw_path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let mut scrubber = Scrubber::default();
    scrubber.learn_headers(
        parts
            .headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?))),
    );
    scrubber.learn_query(&raw_path);
    let path = scrubber.path(&raw_path);
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => scrubber.bytes(&collected.to_bytes()),
        Err(error) => {
            let message = format!("{method} {path}: cannot read the request body: {error}");
            return miss(&state, message);
        }
    };
    let (canonical, json) = cassette::canonical(&body);
    let key = cassette::hash(&canonical);
    let mut guard = lock(&state);
    let found = guard.slots.iter_mut().find(|s| {
        !s.played && s.method == method && cassette::glob_matches(&s.path, &path) && {
            match (&s.json, &json) {
                (Some(recorded), Some(sent)) => cassette::json_matches(recorded, sent),
                _ => s.key == key,
            }
        }
    });
    if let Some(slot) = found {
        slot.played = true;
        return play(slot);
    }
    let message = miss_message(&guard.slots, &method, &path, &key, json.as_ref());
    drop(guard);
    miss(&state, message)
}

/// The recorded response, as recorded.
fn play(slot: &Slot) -> Response<SimBody> {
    let body = match (&slot.chunks, slot.cut) {
        (None, false) => SimBody::full(slot.body.clone()),
        (chunks, cut) => {
            let pieces: Vec<Bytes> = match chunks {
                Some(sizes) => {
                    let mut at = 0;
                    sizes
                        .iter()
                        .map(|size| {
                            let piece = slot.body.slice(at..at + size);
                            at += size;
                            piece
                        })
                        .collect()
                }
                None => vec![slot.body.clone()],
            };
            let (tx, body) = SimBody::channel();
            tokio::spawn(async move {
                for piece in pieces {
                    if tx.send(Chunk::Data(piece)).await.is_err() {
                        return;
                    }
                }
                if cut {
                    let _ = tx.send(Chunk::Abort).await;
                }
            });
            body
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = slot.status;
    for (name, value) in &slot.headers {
        response.headers_mut().append(name.clone(), value.clone());
    }
    response
}

/// Keeps the miss and answers it loudly.
fn miss(state: &Mutex<State>, message: String) -> Response<SimBody> {
    tracing::warn!(miss = %message, "rein replay: a request matches no recorded interaction");
    lock(state).misses.push(message.clone());
    let body = json!({
        "type": "error",
        "error": {"type": MISS_TYPE, "code": MISS_TYPE, "message": format!("rein replay: {message}")},
    });
    let mut response = Response::new(SimBody::full(Bytes::from(body.to_string())));
    *response.status_mut() = StatusCode::BAD_REQUEST;
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("x-should-retry", HeaderValue::from_static("false"));
    response
}

fn miss_message(
    slots: &[Slot],
    method: &str,
    path: &str,
    key: &str,
    json: Option<&Value>,
) -> String {
    let head = format!("no recorded interaction matches {method} {path} (body {key})");
    let same_route = |s: &&Slot| s.method == method && cassette::glob_matches(&s.path, path);
    let unplayed: Vec<(usize, &Slot)> =
        slots.iter().enumerate().filter(|(_, s)| !s.played).collect();
    if let Some((index, closest)) = unplayed.iter().find(|(_, s)| same_route(s)) {
        let differs = match (json, &closest.json) {
            (Some(sent), Some(recorded)) => match cassette::first_difference(recorded, sent) {
                Some(pointer) if pointer.is_empty() => "the whole body differs".to_string(),
                Some(pointer) => format!("the body differs at {pointer}"),
                None => "the body differs".to_string(),
            },
            _ => format!("its body is {}", closest.key),
        };
        return format!("{head}; closest: #{index} {method} {}, {differs}", closest.path);
    }
    let played: Vec<String> = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.played && same_route(s))
        .map(|(i, _)| format!("#{i}"))
        .collect();
    if !played.is_empty() {
        return format!(
            "{head}; every recorded {method} {path} was already played ({})",
            played.join(", ")
        );
    }
    if unplayed.is_empty() {
        return format!("{head}; every interaction was already played");
    }
    let left: Vec<String> = unplayed
        .iter()
        .take(5)
        .map(|(index, slot)| format!("#{index} {} {}", slot.method, slot.path))
        .collect();
    format!("{head}; nothing recorded for {method} {path} (unplayed: {})", left.join(", "))
}

impl ReplayHandle {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`: OpenAI clients take `{base_url}/v1` as their base URL, Anthropic
    /// clients `{base_url}` (as with the recorder the cassette came from).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every miss so far.
    pub fn misses(&self) -> Vec<String> {
        lock(&self.state).misses.clone()
    }

    /// Ok when every request matched and every interaction played.
    pub fn verify(&self) -> Result<(), ReplayError> {
        let state = lock(&self.state);
        let unplayed: Vec<String> = state
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.played)
            .map(|(index, s)| format!("#{index} {} {} (body {})", s.method, s.path, s.key))
            .collect();
        if state.misses.is_empty() && unplayed.is_empty() {
            return Ok(());
        }
        Err(ReplayError { misses: state.misses.clone(), unplayed })
    }

    /// Stops the server and says whether the replay went as recorded ([`verify`]).
    ///
    /// [`verify`]: ReplayHandle::verify
    pub async fn finish(self) -> Result<(), ReplayError> {
        let result = self.verify();
        self.shutdown().await;
        result
    }

    /// Stops accepting, drops every open connection and waits for the accept loop to end.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ReplayHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
