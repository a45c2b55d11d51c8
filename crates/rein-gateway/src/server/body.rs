//! Reading a caller's request body within its bounds: at most `server.max_body_bytes`, within
//! `server.body_read_timeout_ms`. A body over the limit is drained (up to [`DRAIN_BYTES`], within
//! [`DRAIN_TIME`]) before the 413 goes out, so a client still sending sees the status instead of
//! a broken pipe; the 413 closes the connection.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;

use rein_runtime::config::ServerConfig;

/// How much of an oversize body is read and dropped so that the client sees the 413.
pub(super) const DRAIN_BYTES: usize = 64 * 1024 * 1024;
/// How long draining may take at most.
pub(super) const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Why a body could not be read.
#[derive(Debug)]
pub(super) enum BodyError {
    /// Longer than the limit (declared or sent).
    TooLarge,
    /// Not all sent within the read timeout.
    Timeout,
    /// The client's stream broke (reset, malformed chunking).
    Broken(String),
}

impl BodyError {
    /// 413 over the limit, 408 past the clock, 400 for a broken stream.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }

    /// What the caller is told, naming the setting that bounds it.
    pub(super) fn message(&self, server: &ServerConfig) -> String {
        match self {
            BodyError::TooLarge => format!(
                "The request body is larger than this gateway accepts ({} bytes, `server.max_body_bytes`).",
                server.max_body_bytes
            ),
            BodyError::Timeout => format!(
                "The request body did not arrive within {} ms (`server.body_read_timeout_ms`).",
                server.edge.body_read_timeout.as_millis()
            ),
            BodyError::Broken(why) => format!("The request body could not be read: {why}."),
        }
    }
}

/// The whole body of a request with these `headers`, within `server`'s limit and clock.
pub(super) async fn read_request(
    body: Body,
    headers: &HeaderMap,
    server: &ServerConfig,
) -> Result<Bytes, BodyError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    read(body, declared, server.max_body_bytes, server.edge.body_read_timeout).await
}

/// The whole body, or why not. `declared` is the request's `Content-Length`, if any.
async fn read(
    body: Body,
    declared: Option<usize>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, BodyError> {
    if declared.is_some_and(|length| length > limit) {
        drain(body).await;
        return Err(BodyError::TooLarge);
    }
    let mut body = body;
    let collected = tokio::time::timeout(timeout, async {
        // A body that comes in one frame (the common case) is kept as it is, not copied.
        let mut first: Option<Bytes> = None;
        let mut joined = bytes::BytesMut::new();
        loop {
            match body.frame().await {
                None => {
                    return Ok(match first {
                        Some(only) if joined.is_empty() => only,
                        _ => joined.freeze(),
                    });
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        let held = first.as_ref().map_or(0, Bytes::len) + joined.len();
                        if held + data.len() > limit {
                            return Err(BodyError::TooLarge);
                        }
                        match first.take() {
                            None if joined.is_empty() => first = Some(data),
                            earlier => {
                                if let Some(earlier) = earlier {
                                    joined.extend_from_slice(&earlier);
                                }
                                joined.extend_from_slice(&data);
                            }
                        }
                    }
                }
                Some(Err(error)) => {
                    let error = error.into_inner();
                    let timed_out = error
                        .downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
                    return Err(if timed_out {
                        BodyError::Timeout
                    } else {
                        BodyError::Broken(error.to_string())
                    });
                }
            }
        }
    })
    .await;
    match collected {
        Ok(Err(BodyError::TooLarge)) => {
            drain(body).await;
            Err(BodyError::TooLarge)
        }
        Ok(result) => result,
        Err(_) => Err(BodyError::Timeout),
    }
}

/// Read and drop what the client still sends, within [`DRAIN_BYTES`] and [`DRAIN_TIME`].
async fn drain(mut body: Body) {
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut drained = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                drained += data.len();
                if drained >= DRAIN_BYTES {
                    return;
                }
            }
        }
    })
    .await;
}
