//! A marketplace end to end through the SDK: checkouts across sellers in one transaction, carts
//! that expire, and sellers' totals kept by a change-feed processor group.
//!
//! Running: start a server (`target/release/trestle-server`), then
//! `target/release/examples/orders` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::example_client;
use trestle_client::scenarios::orders::{tour, Marketplace};

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let (client, prefix, endpoint) = example_client("Market").await?;
    println!("Using tables named {prefix}... on {endpoint}");
    // Carts expire 2 seconds after their last change, so that the tour sees one go.
    let market = Marketplace::new(client, prefix).cart_seconds(2);
    market.setup().await?;
    for line in tour(&market).await? {
        println!("{line}");
    }
    Ok(())
}
