//! The floor of rein's HTTP stack, for `bench/run.sh`: a reverse proxy built from the same parts
//! as `rein serve` and nothing else. An event loop a core, each a current-thread tokio runtime
//! accepting from the same listener; hyper's HTTP/1.1 server; the request body read whole, then
//! POSTed through a pooled hyper-util client of the loop's own to the upstream; the upstream's
//! status, content type and body (streamed as it arrives) sent back. rein's allocator. No
//! parsing, no routing, no record: what rein costs above this row is rein's own work.
//!
//! ```text
//! floor-proxy 127.0.0.1:8080 http://127.0.0.1:9000   # port 0: any; the address is logged
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

#[global_allocator]
static ALLOCATOR: rein_alloc::Allocator = rein_alloc::Allocator;

type Body = BoxBody<Bytes, hyper::Error>;
type Upstream = Client<HttpConnector, Full<Bytes>>;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream), None) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: floor-proxy LISTEN_ADDR UPSTREAM_BASE_URL");
        std::process::exit(2);
    };
    if let Err(error) = run(&listen, upstream.trim_end_matches('/')) {
        eprintln!("floor-proxy: {error}");
        std::process::exit(1);
    }
}

fn run(listen: &str, upstream: &str) -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = listen.parse()?;
    upstream.parse::<Uri>()?;
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    eprintln!("floor-proxy listening on {}", listener.local_addr()?);
    let loops = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = Vec::with_capacity(loops);
    for index in 0..loops {
        let socket = listener.try_clone()?;
        let upstream = upstream.to_string();
        threads.push(std::thread::Builder::new().name(format!("floor-{index}")).spawn(
            move || -> std::io::Result<()> {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(serve(socket, upstream))
            },
        )?);
    }
    for thread in threads {
        thread.join().map_err(|_| "an event loop panicked")??;
    }
    Ok(())
}

async fn serve(socket: std::net::TcpListener, upstream: String) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(socket)?;
    let client: Upstream = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let upstream: &'static str = Box::leak(upstream.into_boxed_str());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let client = client.clone();
                async move { Ok::<_, Infallible>(forward(&client, upstream, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn forward(client: &Upstream, upstream: &str, request: Request<Incoming>) -> Response<Body> {
    let (head, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|body| body.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let path = head.uri.path_and_query().map_or("/", |path| path.as_str());
    let Ok(uri) = format!("{upstream}{path}").parse::<Uri>() else {
        return status(StatusCode::BAD_REQUEST);
    };
    let mut outgoing = Request::post(uri);
    if let Some(content_type) = head.headers.get(CONTENT_TYPE) {
        outgoing = outgoing.header(CONTENT_TYPE, content_type);
    }
    let Ok(outgoing) = outgoing.body(Full::new(body)) else {
        return status(StatusCode::BAD_REQUEST);
    };
    match client.request(outgoing).await {
        Ok(answer) => {
            let (head, body) = answer.into_parts();
            let mut response = Response::new(body.boxed());
            *response.status_mut() = head.status;
            if let Some(content_type) = head.headers.get(CONTENT_TYPE) {
                response.headers_mut().insert(CONTENT_TYPE, content_type.clone());
            }
            response
        }
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut response =
        Response::new(Full::new(Bytes::new()).map_err(|never| match never {}).boxed());
    *response.status_mut() = code;
    response
}
