//! Expenses and their items, after the Azure "composition" post, improved: the expense header and
//! its items share one partition (the owner) of one table, so that what the post could not make
//! atomic is atomic here.
//!
//! Row keys: a header's is its expense id, an inverted timestamp plus a short unique suffix, so an
//! owner's newest expenses come first (log tail); an item's is the compound key
//! `<expense id>_<item id>`, so a header and all its items are one prefix scan. The header keeps a
//! precomputed total, changed by patch increments in the same transaction as the items. An expense holds at most
//! [`MAX_ITEMS`] items, so that deleting it (header and items) fits one transaction.

use serde::{Deserialize, Serialize};

use super::scenario_retry;
use crate::keys::{compound, fixed_width, log_tail_id_at};
use crate::{
    retry_on_conflict, DateTime, ETag, Entity, Error, ErrorKind, Filter, IfMatch, Patch, Result,
    TableClient,
};

/// Most items of one expense: the header and all items must fit one 100-operation transaction.
pub const MAX_ITEMS: usize = 99;

/// Where an expense stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    /// Waiting for a decision.
    Submitted,
    /// Approved.
    Approved,
    /// Rejected.
    Rejected,
}

/// An expense header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expense {
    /// What it is for.
    #[serde(rename = "Description")]
    pub description: String,
    /// Sum of the items, in cents.
    #[serde(rename = "TotalCents")]
    pub total_cents: i64,
    /// How many items it has.
    #[serde(rename = "ItemCount")]
    pub item_count: i32,
    /// Where it stands.
    #[serde(rename = "Status")]
    pub status: Status,
    /// When it was submitted.
    #[serde(rename = "SubmittedAt")]
    pub submitted_at: DateTime,
    #[serde(rename = "NextItem")]
    next_item: i32,
}

/// One item of an expense.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpenseItem {
    /// What it is.
    #[serde(rename = "Description")]
    pub description: String,
    /// Its amount, in cents.
    #[serde(rename = "AmountCents")]
    pub amount_cents: i64,
}

/// A row of an owner's partition: a header or an item, told apart by `Kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Kind")]
enum Row {
    Expense(Expense),
    Item(ExpenseItem),
}

/// An expense with its items, as [`Expenses::get`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpenseWithItems {
    /// The expense id.
    pub id: String,
    /// The header (with its ETag, for conditional changes).
    pub header: Entity<Expense>,
    /// The items, by item id.
    pub items: Vec<(String, ExpenseItem)>,
}

#[derive(Debug, Serialize)]
struct Decision {
    #[serde(rename = "Status")]
    status: Status,
}

/// An approver's running totals of approved expenses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproverTotals {
    /// How many expenses they approved.
    #[serde(rename = "ApprovedCount")]
    pub approved_count: i64,
    /// The sum of those expenses, in cents.
    #[serde(rename = "ApprovedCents")]
    pub approved_cents: i64,
}

/// The row of an approver's totals, in the approver's own partition.
const TOTALS_ROW: &str = "totals";

/// The partition of an approver's totals (apart from any owner's expenses).
fn approver_partition(approver: &str) -> String {
    compound(&["approver", approver])
}

fn too_many_items(count: usize) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("an expense holds at most {MAX_ITEMS} items; this one would have {count}"),
    )
}

/// The expenses store over one table.
#[derive(Debug, Clone)]
pub struct Expenses {
    table: TableClient,
}

impl Expenses {
    /// The store over `table` (see [`Expenses::setup`]).
    pub fn new(table: TableClient) -> Expenses {
        Expenses { table }
    }

    /// Creates the table if needed.
    pub async fn setup(&self) -> Result<()> {
        self.table.create_if_not_exists().await
    }

    /// Submits an expense: the header (with its total) and every item in one transaction.
    /// Returns the new expense id.
    ///
    /// # Errors
    /// `InvalidInput` for more than [`MAX_ITEMS`] items.
    pub async fn submit(
        &self,
        owner: &str,
        description: &str,
        items: &[ExpenseItem],
    ) -> Result<String> {
        if items.len() > MAX_ITEMS {
            return Err(too_many_items(items.len()));
        }
        let now = DateTime::now();
        let id = log_tail_id_at(now);
        let header = Row::Expense(Expense {
            description: description.into(),
            total_cents: items.iter().map(|i| i.amount_cents).sum(),
            item_count: items.len() as i32,
            status: Status::Submitted,
            submitted_at: now,
            next_item: items.len() as i32,
        });
        let mut tx = self.table.transaction(owner);
        tx.insert((owner, id.as_str()), &header)?;
        for (n, item) in items.iter().enumerate() {
            tx.insert(
                (owner, item_row(&id, &item_id(n as i32))),
                &Row::Item(item.clone()),
            )?;
        }
        tx.commit().await?;
        Ok(id)
    }

    /// An expense and all its items, from one prefix scan; `None` if there is no such expense.
    pub async fn get(&self, owner: &str, expense_id: &str) -> Result<Option<ExpenseWithItems>> {
        let rows = self
            .table
            .query::<Row>()
            .partition(owner)
            .row_key_prefix(expense_id)
            .all()
            .await?;
        let mut header = None;
        let mut items = Vec::new();
        for row in rows {
            match row.value {
                Row::Expense(expense) if row.key.row_key == expense_id => {
                    header = Some(Entity {
                        key: row.key,
                        etag: row.etag,
                        timestamp: row.timestamp,
                        value: expense,
                    });
                }
                Row::Item(item) => {
                    let item_id = crate::keys::split_compound(&row.key.row_key)
                        .pop()
                        .unwrap_or_default();
                    items.push((item_id, item));
                }
                Row::Expense(_) => {}
            }
        }
        Ok(header.map(|header| ExpenseWithItems {
            id: expense_id.to_owned(),
            header,
            items,
        }))
    }

    /// The owner's newest `n` expense headers (ids and headers), newest first, without returning
    /// any item: the log-tail keys put the newest first, and a filter on `Kind` leaves the items
    /// on the server.
    pub async fn recent(&self, owner: &str, n: usize) -> Result<Vec<(String, Expense)>> {
        let mut query = self
            .table
            .query::<Expense>()
            .partition(owner)
            .filter(Filter::eq("Kind", "Expense"))
            .page_size(n.clamp(1, 1000) as u32);
        let mut found = Vec::new();
        while found.len() < n {
            let page = query.page().await?;
            found.extend(page.items.into_iter().map(|e| (e.key.row_key, e.value)));
            match page.continuation {
                Some(token) => query = query.continue_from(token),
                None => break,
            }
        }
        found.truncate(n);
        Ok(found)
    }

    async fn header(&self, owner: &str, expense_id: &str) -> Result<Entity<Expense>> {
        self.table.get::<Expense>((owner, expense_id)).await
    }

    /// Adds an item: the item and the header's total (patch increments) in one transaction,
    /// conditional on the header's ETag, which numbers the item and bounds the count (retried on
    /// conflict). Returns the new item's id.
    pub async fn add_item(
        &self,
        owner: &str,
        expense_id: &str,
        item: ExpenseItem,
    ) -> Result<String> {
        let item = &item;
        retry_on_conflict(scenario_retry(), move || async move {
            let header = self.header(owner, expense_id).await?;
            let expense = &header.value;
            if expense.item_count as usize >= MAX_ITEMS {
                return Err(too_many_items(expense.item_count as usize + 1));
            }
            let id = item_id(expense.next_item);
            // The header's ETag guards the item's number and the item limit; the total and the
            // counts change by increments, in the same transaction as the item.
            let more = Patch::new()
                .increment("TotalCents", item.amount_cents)
                .increment("ItemCount", 1i32)
                .increment("NextItem", 1i32)
                .if_match(&header.etag);
            let mut tx = self.table.transaction(owner);
            tx.patch((owner, expense_id), &more)?;
            tx.insert((owner, item_row(expense_id, &id)), &Row::Item(item.clone()))?;
            tx.commit().await?;
            Ok(id)
        })
        .await
    }

    /// Removes an item: the item goes and the header's total and count drop, in one transaction.
    /// The header changes by patch increments, which need no read of it and never conflict; only
    /// a concurrent change of the item makes it retry.
    pub async fn remove_item(&self, owner: &str, expense_id: &str, item_id: &str) -> Result<()> {
        retry_on_conflict(scenario_retry(), move || async move {
            let item = self
                .table
                .get::<ExpenseItem>((owner, item_row(expense_id, item_id)))
                .await?;
            let less = Patch::new()
                .increment("TotalCents", -item.value.amount_cents)
                .increment("ItemCount", -1i32);
            let mut tx = self.table.transaction(owner);
            tx.patch((owner, expense_id), &less)?;
            tx.delete((owner, item_row(expense_id, item_id)), &item.etag)?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Approves a submitted expense read with `etag`: of two concurrent approvers exactly one wins.
    ///
    /// # Errors
    /// `is_precondition_failed()` if the expense changed since `etag` was read (someone else
    /// decided first); `is_conflict()` if it is no longer submitted.
    pub async fn approve(&self, owner: &str, expense_id: &str, etag: &ETag) -> Result<ETag> {
        self.decide(owner, expense_id, etag, Status::Approved).await
    }

    /// Rejects a submitted expense read with `etag` (see [`Expenses::approve`]).
    pub async fn reject(&self, owner: &str, expense_id: &str, etag: &ETag) -> Result<ETag> {
        self.decide(owner, expense_id, etag, Status::Rejected).await
    }

    /// Approves a submitted expense read with `etag` as `approver`, and adds it to the approver's
    /// running totals ([`Expenses::approver_totals`], kept in a partition of the approver's) in
    /// the same transaction across the two partitions: the totals count every approval exactly
    /// once, and none that lost to another decision.
    ///
    /// # Errors
    /// As [`Expenses::approve`].
    pub async fn approve_as(
        &self,
        approver: &str,
        owner: &str,
        expense_id: &str,
        etag: &ETag,
    ) -> Result<ETag> {
        let header = self.submitted(owner, expense_id).await?;
        let table = self.table.name();
        let totals = Patch::new()
            .increment("ApprovedCount", 1i64)
            .increment("ApprovedCents", header.value.total_cents)
            .upsert();
        let decision = Decision {
            status: Status::Approved,
        };
        let mut tx = self.table.client.transaction();
        tx.merge(table, (owner, expense_id), &decision, etag)?;
        tx.patch(table, (approver_partition(approver), TOTALS_ROW), &totals)?;
        let mut etags = tx.commit().await?;
        Ok(etags.swap_remove(0).expect("a merge has an ETag"))
    }

    /// What `approver` has approved through [`Expenses::approve_as`] (zero if nothing yet).
    pub async fn approver_totals(&self, approver: &str) -> Result<ApproverTotals> {
        let key = (approver_partition(approver), TOTALS_ROW);
        let totals = self.table.get_if_exists::<ApproverTotals>(key).await?;
        Ok(totals.map(|totals| totals.value).unwrap_or_default())
    }

    /// The header of a submitted expense, or a conflict if it is decided already.
    async fn submitted(&self, owner: &str, expense_id: &str) -> Result<Entity<Expense>> {
        let header = self.header(owner, expense_id).await?;
        if header.value.status != Status::Submitted {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("expense {expense_id} is already {:?}", header.value.status),
            ));
        }
        Ok(header)
    }

    async fn decide(
        &self,
        owner: &str,
        expense_id: &str,
        etag: &ETag,
        status: Status,
    ) -> Result<ETag> {
        self.submitted(owner, expense_id).await?;
        self.table
            .merge((owner, expense_id), &Decision { status }, etag)
            .await
    }

    /// Deletes an expense and all its items atomically: items never outlive their expense.
    pub async fn delete(&self, owner: &str, expense_id: &str) -> Result<()> {
        loop {
            let rows = self
                .table
                .entities()
                .partition(owner)
                .row_key_prefix(expense_id)
                .select(["Kind"])
                .all()
                .await?;
            if rows.is_empty() {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("expense {expense_id} does not exist"),
                ));
            }
            let mut tx = self.table.transaction(owner);
            for row in rows {
                tx.delete(row.key, IfMatch::Tag(row.etag))?;
            }
            match tx.commit().await {
                Ok(_) => return Ok(()),
                Err(error) if error.is_precondition_failed() || error.is_not_found() => continue,
                Err(error) => return Err(error),
            }
        }
    }
}

fn item_id(n: i32) -> String {
    fixed_width(n.max(0) as u64, 3)
}

fn item_row(expense_id: &str, item_id: &str) -> String {
    compound(&[expense_id, item_id])
}
