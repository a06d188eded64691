//! Expenses and their items, end to end through the SDK.
//!
//! Running: start a server (`cargo run --release -p trestle-server`), then
//! `cargo run -p trestle-client --example expenses` (address from `TRESTLE_ENDPOINT`, default
//! `http://127.0.0.1:50051`).

#![allow(clippy::print_stdout)]

use trestle_client::scenarios::example_table;
use trestle_client::scenarios::expenses::{ExpenseItem, Expenses};

fn item(description: &str, cents: i64) -> ExpenseItem {
    ExpenseItem {
        description: description.into(),
        amount_cents: cents,
    }
}

#[tokio::main]
async fn main() -> trestle_client::Result<()> {
    let (table, using) = example_table("ExpensesExample").await?;
    let expenses = Expenses::new(table.clone());
    expenses.setup().await?;
    println!("{using}");

    let trip = expenses
        .submit(
            "alice",
            "Conference trip",
            &[item("Ticket", 45_000), item("Hotel", 32_000)],
        )
        .await?;
    println!("Submitted {trip}: header and two items in one transaction");
    let lunch = expenses
        .submit("alice", "Team lunch", &[item("Food", 8_900)])
        .await?;
    println!("Submitted {lunch}");

    let recent = expenses.recent("alice", 5).await?;
    for (id, expense) in &recent {
        println!(
            "Recent (newest first): {id} {} ${:.2}",
            expense.description,
            expense.total_cents as f64 / 100.0
        );
    }

    let taxi = expenses
        .add_item("alice", &trip, item("Taxi", 2_400))
        .await?;
    println!("Added item {taxi} to {trip}: the item and the total in one transaction");
    let got = expenses.get("alice", &trip).await?.expect("just submitted");
    println!(
        "{} has {} items totalling ${:.2} (one prefix scan)",
        got.id,
        got.items.len(),
        got.header.value.total_cents as f64 / 100.0
    );

    // The approval and the approver's running totals change in one transaction.
    expenses
        .approve_as("bob", "alice", &trip, &got.header.etag)
        .await?;
    let totals = expenses.approver_totals("bob").await?;
    println!(
        "Bob approved {} expense(s) for {:.2}",
        totals.approved_count,
        totals.approved_cents as f64 / 100.0
    );
    match expenses.reject("alice", &trip, &got.header.etag).await {
        Ok(_) => println!("Unexpected: a second decision on the same ETag succeeded"),
        Err(error) => println!("A second decision with the same ETag is refused: {error}"),
    }

    expenses.delete("alice", &lunch).await?;
    println!(
        "Deleted {lunch} and its items atomically; still there: {}",
        expenses.get("alice", &lunch).await?.is_some()
    );
    table.delete_table().await?;
    println!("Deleted table {}", table.name());
    Ok(())
}
