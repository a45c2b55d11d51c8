//! The HTTP side: an accept loop serving HTTP/1.1 and cleartext HTTP/2 (prior knowledge) with
//! hyper, one task per connection, and the routes. Serving connections by hand (rather than
//! through a framework) is what lets a fault drop a connection before any header (`reset`, as a
//! TCP RST) or in the middle of a body (`cut`). Over HTTP/2 the same faults hit the one request
//! (its stream is reset, RST_STREAM), not the other requests sharing the connection.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming as IncomingBody;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rein_core::WireFormat;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::body::SimBody;
use crate::respond::{self, Endpoint, Incoming, Reply};
use crate::state::Shared;

/// Request bodies above this are refused (the providers' own limit is 32 MB).
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Requests one HTTP/2 connection may have open at once. A provider's edge allows 100 to 256;
/// the simulator stands in for whole fleets under load tests, so it allows far more.
pub(crate) const MAX_CONCURRENT_STREAMS: u32 = 1 << 20;

/// How connections are served: HTTP/1.1, or HTTP/2 when the client opens with its preface.
pub(crate) fn builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    builder
}

/// Resolves once the simulator is told to stop (or its handle is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Accepts connections until shutdown.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, shared.clone(), shutdown.clone()));
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "rein sim: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

/// Serves one connection until it closes, a `reset` fault drops it, or shutdown.
async fn connection(stream: TcpStream, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    // A second handle on the socket, so that `reset` can set SO_LINGER=0 after hyper owns the
    // stream: closing then sends an RST instead of a FIN.
    let (stream, spare) = match spare_handle(stream) {
        Ok(pair) => pair,
        Err(error) => {
            tracing::warn!(%error, "rein sim: cannot set up a connection");
            return;
        }
    };
    let reset = Arc::new(Notify::new());
    let service = {
        let reset = reset.clone();
        service_fn(move |request: Request<IncomingBody>| {
            let shared = shared.clone();
            let reset = reset.clone();
            async move {
                if request.version() != http::Version::HTTP_2 {
                    return Ok(route(&shared, &reset, request).await);
                }
                // HTTP/2: a reset fault resets this request's stream; the connection and the
                // other requests on it go on.
                let stream_reset = Notify::new();
                tokio::select! {
                    response = route(&shared, &stream_reset, request) => Ok(response),
                    () = stream_reset.notified() => Err(std::io::Error::other("reset fault")),
                }
            }
        })
    };
    let builder = builder();
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "rein sim: connection ended");
            }
        }
        () = reset.notified() => {
            match TcpStream::from_std(spare) {
                Ok(spare) => {
                    let _ = spare.set_zero_linger();
                }
                Err(error) => tracing::warn!(%error, "rein sim: cannot reset a connection"),
            }
        }
        () = stopped(&mut shutdown) => {}
    }
}

fn spare_handle(stream: TcpStream) -> std::io::Result<(TcpStream, std::net::TcpStream)> {
    let std_stream = stream.into_std()?;
    let spare = std_stream.try_clone()?;
    Ok((TcpStream::from_std(std_stream)?, spare))
}

async fn route(
    shared: &Shared,
    reset: &Notify,
    request: Request<IncomingBody>,
) -> Response<SimBody> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let anthropic_client = parts.headers.contains_key("anthropic-version");
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({"error": {"message": format!("cannot read the request body: {error}")}}),
            );
        }
    };
    let bedrock = (parts.method == Method::POST).then(|| crate::bedrock::route(&path)).flatten();
    let mut incoming = Incoming { method: parts.method, path, headers: parts.headers, body };
    if let Some(call) = bedrock {
        let authorization = incoming.headers.get("authorization").and_then(|v| v.to_str().ok());
        if !crate::bedrock::signed(authorization) {
            return wire_error(crate::bedrock::missing_signature());
        }
        // A body that is not JSON goes through as it is, and is refused as such.
        if let Ok(sent) = serde_json::from_slice::<serde_json::Value>(&incoming.body) {
            let translated = if call.invoke {
                match crate::bedrock::translate_invoke(&sent, &call) {
                    Some(translated) => translated,
                    None => return wire_error(crate::bedrock::missing_anthropic_version()),
                }
            } else {
                crate::bedrock::translate(&sent, &call.model, call.stream)
            };
            incoming.body = Bytes::from(translated.to_string());
        }
        let reply = respond::provider(shared, Endpoint::Chat(WireFormat::Bedrock), incoming).await;
        return finish(reply, reset).await;
    }
    if let Some(reply) = vertex(shared, &mut incoming).await {
        return finish(reply, reset).await;
    }
    let reply = match (&incoming.method, incoming.path.as_str()) {
        (&Method::GET, "/_sim/health") => return plain(StatusCode::OK, json!({"status": "ok"})),
        (&Method::GET, "/_sim/log") => {
            let (entries, dropped) = shared.log.snapshot();
            let entries = serde_json::to_value(entries).unwrap_or_default();
            let mut response = plain(StatusCode::OK, entries);
            response.headers_mut().insert("x-sim-log-dropped", dropped.into());
            return response;
        }
        (&Method::POST, "/_sim/reset") => {
            shared.reset();
            return plain(StatusCode::OK, json!({"reset": true}));
        }
        (&Method::POST, "/v1/chat/completions") => {
            respond::provider(shared, Endpoint::Chat(WireFormat::OpenAi), incoming).await
        }
        (&Method::POST, "/v1/responses") => {
            respond::provider(shared, Endpoint::Responses, incoming).await
        }
        (&Method::POST, "/v1/messages") => {
            respond::provider(shared, Endpoint::Chat(WireFormat::Anthropic), incoming).await
        }
        (&Method::POST, path) if crate::gemini::method_of(path).is_some() => {
            respond::provider(shared, Endpoint::Chat(WireFormat::Gemini), incoming).await
        }
        (&Method::GET, "/v1/models") => {
            let format = if anthropic_client { WireFormat::Anthropic } else { WireFormat::OpenAi };
            respond::provider(shared, Endpoint::Models(format), incoming).await
        }
        _ => {
            let format = if anthropic_client || incoming.path.starts_with("/v1/messages") {
                WireFormat::Anthropic
            } else if incoming.path.starts_with("/v1beta/") {
                WireFormat::Gemini
            } else {
                WireFormat::OpenAi
            };
            respond::not_found(shared, format, &incoming)
        }
    };
    finish(reply, reset).await
}

/// Vertex AI's routes: the token endpoint, the metadata server's token, and the model paths
/// (which need a live token). `None` for any other path.
async fn vertex(shared: &Shared, incoming: &mut Incoming) -> Option<Reply> {
    let json = |(status, body)| Reply::Send(plain(status, body));
    match (&incoming.method, incoming.path.as_str()) {
        (&Method::POST, "/token") => {
            return Some(json(crate::vertex::token(
                &shared.tokens,
                &incoming.headers,
                &incoming.body,
            )));
        }
        (&Method::GET, crate::vertex::METADATA_TOKEN_PATH) => {
            return Some(json(crate::vertex::metadata_token(&shared.tokens, &incoming.headers)));
        }
        _ => {}
    }
    if incoming.method != Method::POST {
        return None;
    }
    let (publisher, model, method) = crate::vertex::route(&incoming.path)
        .map(|(publisher, model, method)| (publisher.to_owned(), model, method.to_owned()))?;
    let authorization = incoming.headers.get("authorization").and_then(|v| v.to_str().ok());
    if !shared.tokens.valid(authorization) {
        let expired = authorization.is_some_and(|value| value.starts_with("Bearer ya29.sim-"));
        return Some(Reply::Send(wire_error(crate::vertex::unauthenticated(expired))));
    }
    let incoming = std::mem::replace(
        incoming,
        Incoming {
            method: Method::POST,
            path: String::new(),
            headers: http::HeaderMap::new(),
            body: Bytes::new(),
        },
    );
    let reply = match (publisher.as_str(), method.as_str()) {
        ("anthropic", "rawPredict" | "streamRawPredict") => {
            let stream = method == "streamRawPredict";
            match crate::vertex::anthropic_body(&incoming.body, &model, stream) {
                Ok(body) => {
                    let incoming = Incoming { body: Bytes::from(body.to_string()), ..incoming };
                    respond::vertex(shared, Endpoint::Chat(WireFormat::Anthropic), incoming).await
                }
                Err(body) => Reply::Send(plain(StatusCode::BAD_REQUEST, body)),
            }
        }
        ("google", "generateContent" | "streamGenerateContent") => {
            respond::vertex(shared, Endpoint::Chat(WireFormat::Gemini), incoming).await
        }
        _ => Reply::Send(plain(
            StatusCode::NOT_FOUND,
            json!({"error": {
                "code": 404,
                "message": format!("Publisher Model `{model}` of `{publisher}` has no method `{method}`."),
                "status": "NOT_FOUND"
            }}),
        )),
    };
    Some(reply)
}

/// Sends a reply, or resets or hangs the connection as it says.
async fn finish(reply: Reply, reset: &Notify) -> Response<SimBody> {
    match reply {
        Reply::Send(response) => response,
        Reply::Reset(wait) => {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            reset.notify_one();
            // The connection task drops the connection, and this future with it.
            std::future::pending().await
        }
        // hyper drops this future when the client goes away.
        Reply::Hang => std::future::pending().await,
    }
}

/// An error answered before any log entry or fault applies (an unsigned Bedrock request).
fn wire_error(error: crate::wire::WireError) -> Response<SimBody> {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::FORBIDDEN);
    let mut response = plain(status, error.body);
    for (name, value) in error.headers {
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

fn plain(status: StatusCode, body: serde_json::Value) -> Response<SimBody> {
    let mut response = Response::new(SimBody::full(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}
