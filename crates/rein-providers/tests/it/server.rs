//! A tiny raw HTTP/1.1 server on 127.0.0.1:0 for one request: it captures what the adapter
//! sent (request line, headers, body) and answers with canned bytes, a reset, or a stream
//! that breaks off. Raw bytes instead of a framework so the tests control every byte.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the adapter sent.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    pub request_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Captured {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// How the server answers.
pub(crate) enum Reply {
    /// Write these bytes in pieces (a short pause between them, so the client really sees
    /// several reads), then close cleanly.
    Pieces(Vec<Vec<u8>>),
    /// Read the request, then reset the connection without answering.
    Reset,
    /// Write these pieces, then reset the connection.
    PiecesThenReset(Vec<Vec<u8>>),
}

pub(crate) struct Server {
    pub base_url: String,
    handle: JoinHandle<Captured>,
}

impl Server {
    /// The request the adapter sent (waits for the server task).
    pub(crate) async fn captured(self) -> Captured {
        self.handle.await.expect("server task")
    }
}

/// Starts a server answering one request with `reply`. `base_url` ends in `/v1`.
pub(crate) async fn serve(reply: Reply) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let captured = read_request(&mut stream).await;
        match reply {
            Reply::Pieces(pieces) => {
                write_pieces(&mut stream, pieces).await;
                let _ = stream.shutdown().await;
            }
            Reply::Reset => reset(stream),
            Reply::PiecesThenReset(pieces) => {
                write_pieces(&mut stream, pieces).await;
                reset(stream);
            }
        }
        captured
    });
    Server { base_url: format!("http://{addr}/v1"), handle }
}

fn reset(stream: TcpStream) {
    // SO_LINGER 0: closing sends RST instead of FIN.
    stream.set_zero_linger().expect("linger");
    drop(stream);
}

async fn write_pieces(stream: &mut TcpStream, pieces: Vec<Vec<u8>>) {
    for piece in pieces {
        if stream.write_all(&piece).await.is_err() {
            return;
        }
        let _ = stream.flush().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub(crate) async fn read_request(stream: &mut TcpStream) -> Captured {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(pos) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        let n = stream.read(&mut chunk).await.expect("read");
        assert!(n > 0, "client closed before sending headers");
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buffer[..header_end].to_vec()).expect("utf8 head");
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().expect("content-length"))
        .unwrap_or(0);
    let mut body = buffer[header_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.expect("read body");
        assert!(n > 0, "client closed mid-body");
        body.extend_from_slice(&chunk[..n]);
    }
    Captured { request_line, headers, body }
}

/// A complete response with `Content-Length`.
pub(crate) fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out =
        format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The head of a chunked `text/event-stream` response.
pub(crate) fn sse_head() -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        .to_vec()
}

/// One HTTP/1.1 chunk.
pub(crate) fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A whole chunked SSE response, the body split into `parts` roughly equal chunks.
pub(crate) fn sse_response(body: &[u8], parts: usize) -> Vec<Vec<u8>> {
    let mut pieces = vec![sse_head()];
    let size = body.len().div_ceil(parts.max(1)).max(1);
    pieces.extend(body.chunks(size).map(chunk));
    pieces.push(b"0\r\n\r\n".to_vec());
    pieces
}
