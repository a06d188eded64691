//! The Azure table-design patterns as tested library code, written only against the public SDK.
//!
//! - [`hr`]: departments and their employees in one partition, a count kept exact by transactions,
//!   intra-partition secondary indexes, denormalization, join in the client, inheritance, and
//!   cross-partition transfers made eventually consistent and crash-safe.
//! - [`expenses`]: an expense and its items in one partition with compound row keys, prefix scans
//!   and log-tail (newest-first) keys; what the Azure post could not make atomic is atomic here.

pub mod expenses;
pub mod hr;
