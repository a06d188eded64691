//! People with embedded addresses and contact details of different shapes (the Cosmos DB
//! modelling guide's first example): who lives in Seattle by a multi-valued index, an address
//! changed in place by its path, a contact detail added once.
//!
//! Running: start a server (`cargo run --release -p trestle-server`), then
//! `cargo run -p trestle-client --example people` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::example_table;
use trestle_client::scenarios::people::{tour, People};

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let (table, using) = example_table("PeopleExample").await?;
    println!("{using}");
    for line in tour(&People::new(table.clone())).await? {
        println!("{line}");
    }
    table.delete_table().await
}
