//! The floor proxy forwards what bench/run.sh sends: a POST's body and content type to the
//! upstream's base URL plus the request's path, and the upstream's status, content type and body
//! back, a streamed body as it comes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// The upstream: `/v1/echo` answers 201 with the body and content type it got and the path in a
/// header; `/sse/v1/slow` sends two events 50 ms apart.
async fn upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                    let path = request.uri().path().to_string();
                    let content_type = request.headers().get("content-type").cloned();
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    let response = if path == "/sse/v1/slow" {
                        let (tx, rx) =
                            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, hyper::Error>>(2);
                        tokio::spawn(async move {
                            tx.send(Ok(Frame::data(Bytes::from("data: one\n\n")))).await.unwrap();
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            tx.send(Ok(Frame::data(Bytes::from("data: two\n\n")))).await.unwrap();
                        });
                        let stream = tokio_stream_of(rx);
                        Response::builder()
                            .header("content-type", "text/event-stream")
                            .body(StreamBody::new(stream).boxed())
                            .unwrap()
                    } else {
                        let mut builder = Response::builder().status(201).header("x-path", path);
                        if let Some(content_type) = content_type {
                            builder = builder.header("content-type", content_type);
                        }
                        builder
                            .body(Full::new(body).map_err(|never| match never {}).boxed())
                            .unwrap()
                    };
                    Ok::<_, std::convert::Infallible>(response)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_core::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

struct Proxy(Child, String);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn proxy(upstream: std::net::SocketAddr) -> Proxy {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floor-proxy"))
        .args(["127.0.0.1:0", &format!("http://{upstream}")])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("floor-proxy listening on ").unwrap().to_string();
    Proxy(child, addr)
}

async fn post(addr: &str, path: &str, body: &'static str) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = Request::post(path)
        .header("host", addr)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    sender.send_request(request).await.unwrap()
}

#[tokio::test]
async fn a_post_reaches_the_upstream_whole_and_its_answer_comes_back() {
    let proxy = proxy(upstream().await);
    let response = post(&proxy.1, "/v1/echo?x=1", r#"{"model":"m"}"#).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, r#"{"model":"m"}"#);
}

#[tokio::test]
async fn a_streamed_answer_is_sent_on_as_it_comes() {
    let proxy = proxy(upstream().await);
    let response = post(&proxy.1, "/sse/v1/slow", "{}").await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "data: one\n\n", "the first event came before the second was sent");
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "data: two\n\n");
}

#[tokio::test]
async fn an_upstream_that_is_not_there_is_a_502() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = proxy(closed);
    assert_eq!(post(&proxy.1, "/v1/echo", "{}").await.status(), StatusCode::BAD_GATEWAY);
}
