//! Which HTTP a client speaks, told from its first bytes: HTTP/2 clients (with prior knowledge,
//! or after ALPN over TLS) open with a fixed 24-byte preface, anything else is HTTP/1.
//!
//! The bytes read to tell are handed back to hyper with the first read that follows, together
//! with whatever the socket already holds, so that read fills hyper's 8 KiB buffer as a plain
//! connection's would. (Handing them back alone, as a generic rewind does, makes hyper's second
//! read grow the buffer to 16 KiB for the connection's whole life, 8 KiB more per open stream.)

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// HTTP/2's connection preface (RFC 9113, section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    Http1,
    Http2,
}

/// Reads until the first bytes differ from the HTTP/2 preface (HTTP/1) or match all of it
/// (HTTP/2). `None` when the client closed (or a clock of `io` ended the read) before any byte.
pub(super) async fn sniff<T: AsyncRead + Unpin>(
    mut io: T,
) -> io::Result<Option<(Protocol, Prefixed<T>)>> {
    let mut prefix = [0u8; 24];
    let mut filled = 0;
    let protocol = loop {
        let read = io.read(&mut prefix[filled..]).await?;
        if read == 0 {
            if filled == 0 {
                return Ok(None);
            }
            // Closed mid-way: hyper reads the partial head and the end, and says so.
            break Protocol::Http1;
        }
        let before = filled;
        filled += read;
        if prefix[before..filled] != H2_PREFACE[before..filled] {
            break Protocol::Http1;
        }
        if filled == H2_PREFACE.len() {
            break Protocol::Http2;
        }
    };
    Ok(Some((protocol, Prefixed { io, prefix, start: 0, end: filled })))
}

/// A stream whose first bytes were already read: they come first, then the stream's own.
#[derive(Debug)]
pub(super) struct Prefixed<T> {
    io: T,
    prefix: [u8; 24],
    start: usize,
    end: usize,
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.start == this.end {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let take = (this.end - this.start).min(buf.remaining());
        buf.put_slice(&this.prefix[this.start..this.start + take]);
        this.start += take;
        if this.start == this.end && buf.remaining() > 0 {
            // Fill the rest from the socket if it has bytes now; never wait, since the prefix
            // is already an answer. A failure here shows on the next read, as the socket keeps
            // reporting a broken connection.
            let _ = Pin::new(&mut this.io).poll_read(cx, buf);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all_of<T: AsyncRead + Unpin>(mut stream: T) -> Vec<u8> {
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn an_http1_request_is_told_after_its_first_bytes_and_read_back_whole() {
        let request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n".to_vec();
        // Two bytes at a time: "PO" already differs from "PR".
        let io = stepped(&request, 2);
        let (protocol, stream) = sniff(io).await.unwrap().unwrap();
        assert_eq!(protocol, Protocol::Http1);
        assert_eq!(all_of(stream).await, request);
    }

    #[tokio::test]
    async fn the_http2_preface_is_told_even_when_it_arrives_in_pieces() {
        let mut bytes = H2_PREFACE.to_vec();
        bytes.extend_from_slice(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00");
        let (protocol, stream) = sniff(stepped(&bytes, 5)).await.unwrap().unwrap();
        assert_eq!(protocol, Protocol::Http2);
        assert_eq!(all_of(stream).await, bytes);
    }

    #[tokio::test]
    async fn a_close_before_any_byte_is_none_and_a_partial_preface_is_http1() {
        assert!(sniff(stepped(b"", 1)).await.unwrap().is_none());
        let (protocol, stream) = sniff(stepped(b"PRI * HT", 3)).await.unwrap().unwrap();
        assert_eq!(protocol, Protocol::Http1);
        assert_eq!(all_of(stream).await, b"PRI * HT");
    }

    /// The first read after the sniff returns the prefix and what the socket holds together,
    /// so hyper's buffer is filled by one read, as on a plain connection.
    #[tokio::test]
    async fn the_first_read_returns_the_prefix_with_what_is_waiting() {
        let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
        let (client, server) = tokio::io::duplex(4096);
        let mut client = client;
        tokio::io::AsyncWriteExt::write_all(&mut client, request).await.unwrap();
        let (_, mut stream) = sniff(server).await.unwrap().unwrap();
        let mut buf = vec![0u8; 8192];
        let read = stream.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..read], request);
    }

    /// A reader that yields `bytes` at most `step` at a time.
    fn stepped(bytes: &[u8], step: usize) -> impl AsyncRead + Unpin {
        Stepped { bytes: bytes.to_vec(), at: 0, step }
    }

    struct Stepped {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Stepped {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let take = this.step.min(this.bytes.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.bytes[this.at..this.at + take]);
            this.at += take;
            Poll::Ready(Ok(()))
        }
    }
}
