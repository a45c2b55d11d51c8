//! The accept loop the recorder and the replay server share: HTTP/1.1 and cleartext HTTP/2 on
//! hyper, one task per connection, every connection dropped at shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::body::SimBody;

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Answers one request.
pub(crate) type Handler =
    Arc<dyn Fn(Request<Incoming>) -> BoxFuture<Response<SimBody>> + Send + Sync>;

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Accepts connections until shutdown.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    handler: Handler,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, handler.clone(), shutdown.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn connection(stream: TcpStream, handler: Handler, mut shutdown: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request| {
        let answer = handler(request);
        async move { Ok::<_, Infallible>(answer.await) }
    });
    let builder = crate::server::builder();
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        result = conn => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended");
            }
        }
        () = stopped(&mut shutdown) => {}
    }
}
