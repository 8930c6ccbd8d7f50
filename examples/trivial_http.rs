//! A trivial axum server (`GET /` answers "ok"), the baseline the management API's load figures
//! are compared with (`benches/management-load.sh`). Usage: `trivial_http <port>`.

use axum::Router;
use axum::routing::get;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).and_then(|p| p.parse().ok()).unwrap_or(8600);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    axum::serve(listener, Router::new().route("/", get(|| async { "ok" }))).await
}
