//! A blog, end to end through the SDK: an author's posts and their comments in one partition,
//! read as one typed stream; exact post and comment counts while 20 commenters write at once;
//! the newest posts; a typed filter; a post deleted with its comments atomically.
//!
//! Running: start a server (`cargo run --release -p trestle-server`), then
//! `cargo run -p trestle-client --example blog` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::blog::{self, Blog};
use trestle_client::{Client, DEFAULT_ENDPOINT};

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let endpoint =
        std::env::var("TRESTLE_ENDPOINT").unwrap_or_else(|_| DEFAULT_ENDPOINT.to_owned());
    let client = Client::connect(endpoint.clone()).await?;
    let table = format!("BlogExample{}", std::process::id());
    println!("Using table {table} on {endpoint}");
    let report = blog::tour(&Blog::new(client.table(table.as_str()))).await?;
    for line in report {
        println!("{line}");
    }
    client.table(table.as_str()).delete_table().await
}
