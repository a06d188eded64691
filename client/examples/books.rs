//! Authors and books linked by arrays of ids on both sides, books embedding author summaries,
//! authors keeping a count (the Cosmos DB modelling guide's hybrid model): both directions are
//! index lookups, and publishing a book is one transaction across partitions.
//!
//! Running: start a server (`cargo run --release -p trestle-server`), then
//! `cargo run -p trestle-client --example books` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::books::{tour, Library};
use trestle_client::scenarios::example_table;

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let (table, using) = example_table("BooksExample").await?;
    println!("{using}");
    for line in tour(&Library::new(table.clone())).await? {
        println!("{line}");
    }
    table.delete_table().await
}
