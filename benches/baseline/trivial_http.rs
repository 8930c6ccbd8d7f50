//! A trivial axum server, the baseline the management API's load figures are compared with
//! (`benches/management-load.sh`): `GET /` answers "ok", and `GET /sized` answers a fixed JSON
//! body of `bytes` bytes (default 2), so that the cost of the body's size can be told apart from
//! the cost of the route. It runs on `workers` tokio worker threads (default: one per core), so
//! that it can be given the same threads as the node it is compared with. Usage:
//! `trivial_http <port> [bytes [workers]]`.

use axum::Router;
use axum::http::header;
use axum::routing::get;
use bytes::Bytes;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().and_then(|p| p.parse().ok()).unwrap_or(8600);
    let size: usize = args.next().and_then(|b| b.parse().ok()).unwrap_or(2);
    let workers: Option<usize> = args.next().and_then(|w| w.parse().ok());
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        runtime.worker_threads(workers);
    }
    runtime.enable_all().build()?.block_on(serve(port, size))
}

async fn serve(port: u16, size: usize) -> std::io::Result<()> {
    // A JSON string of `size` bytes, quotes included.
    let body = Bytes::from(format!("\"{}\"", "x".repeat(size.saturating_sub(2))));
    let sized = get(move || {
        let body = body.clone();
        async move { ([(header::CONTENT_TYPE, "application/json")], body) }
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, Router::new().route("/", get(|| async { "ok" })).route("/sized", sized))
        .await
}
