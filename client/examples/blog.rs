//! A blog, end to end through the SDK: an author's posts and their comments in one partition,
//! read as one typed stream; exact post and comment counts while 20 commenters write at once;
//! the newest posts; a typed filter; a post deleted with its comments atomically.
//!
//! Running: start a server (`cargo run --release -p trestle-server`), then
//! `cargo run -p trestle-client --example blog` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::blog::{tour, Blog};
use trestle_client::scenarios::example_table;

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let (table, using) = example_table("BlogExample").await?;
    println!("{using}");
    for line in tour(&Blog::new(table.clone())).await? {
        println!("{line}");
    }
    table.delete_table().await
}
