//! The Azure table-design patterns as tested library code, written only against the public SDK.
//!
//! - [`hr`]: departments and their employees in one partition, a count kept exact by transactions,
//!   intra-partition secondary indexes, denormalization, join in the client, inheritance, and
//!   cross-partition transfers made eventually consistent and crash-safe.
//! - [`blog`]: posts and their comments in the author's partition read as one typed stream,
//!   exact counts kept by transactions retried on conflict, likes by read-modify-write, a typed
//!   filter, and a post deleted with its comments atomically.
//! - [`expenses`]: an expense and its items in one partition with compound row keys, prefix scans
//!   and log-tail (newest-first) keys; what the Azure post could not make atomic is atomic here.
//!
//! From the Cosmos DB modelling guide, with documents:
//! - [`people`]: people embedding addresses and differently shaped contact details; who lives in
//!   a city is a lookup in a multi-valued index; an address changed in place by its path.
//! - [`books`]: authors and books linked by arrays of ids on both sides, books embedding author
//!   summaries, authors keeping `CountOfBooks`; both directions are index lookups, and publishing
//!   is one transaction across partitions.
//! - [`blog`] also embeds each post's 3 most recent comments, appended in the comment's own
//!   transaction.
//!
//! Beyond both, with a change feed:
//! - [`alarms`]: a worker follows an alarms table's feed and reacts to each serious alarm as it
//!   commits; [`hr`]'s department cache keeps itself current from the same kind of feed.
//! - [`orders`]: a marketplace whose checkouts sell a cart across sellers in one transaction
//!   (stock decreased on a condition), whose abandoned carts expire, and whose sellers' totals
//!   a feed processor group keeps, each order counted exactly once.

pub mod alarms;
pub mod blog;
pub mod books;
pub mod expenses;
pub mod hr;
pub mod orders;
pub mod people;

/// For the examples: the table `<prefix><process id>` on the server at `TRESTLE_ENDPOINT`
/// (default [`crate::DEFAULT_ENDPOINT`]), and a line saying so.
pub async fn example_table(prefix: &str) -> crate::Result<(crate::TableClient, String)> {
    let (client, name, endpoint) = example_client(prefix).await?;
    let line = format!("Using table {name} on {endpoint}");
    Ok((client.table(name), line))
}

/// For the examples: a client of the server at `TRESTLE_ENDPOINT` (default
/// [`crate::DEFAULT_ENDPOINT`]), a name `<prefix><process id>` for the example's tables, and
/// the endpoint.
pub async fn example_client(prefix: &str) -> crate::Result<(crate::Client, String, String)> {
    let endpoint =
        std::env::var("TRESTLE_ENDPOINT").unwrap_or_else(|_| crate::DEFAULT_ENDPOINT.to_owned());
    let client = crate::Client::connect(endpoint.clone()).await?;
    let name = format!("{prefix}{}", std::process::id());
    Ok((client, name, endpoint))
}

/// How the scenarios retry an update that lost to another writer: patiently, since a department
/// or an expense is a hot row when many writers change it at once.
fn scenario_retry() -> crate::ConflictRetry {
    crate::ConflictRetry::default().with_max_attempts(200)
}

/// `Ok` when `found` is `expected`; otherwise a scenario's wrong answer, saying `what`.
fn expect(found: &[String], expected: &[&str], what: &str) -> crate::Result<()> {
    if found != expected {
        return Err(wrong(format!("{what}: {found:?}, expected {expected:?}")));
    }
    Ok(())
}

/// A scenario's wrong answer (an inexact count, a missing entity): `Internal`.
fn wrong(message: String) -> crate::Error {
    crate::Error::new(crate::ErrorKind::Internal, message)
}
