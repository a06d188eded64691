//! Reacting to changes without polling: a worker follows an alarms table's change feed and pages
//! the on-call engineer for each serious alarm as it commits (see `scenarios::alarms`).
//!
//! Running: start a server (`cargo run --release -p trestle-server`), then
//! `cargo run -p trestle-client --example alarms` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::alarms::tour;
use trestle_client::scenarios::example_table;

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let (table, using) = example_table("AlarmsExample").await?;
    println!("{using}");
    for line in tour(&table).await? {
        println!("{line}");
    }
    table.delete_table().await
}
