//! The sled store's change feeds: records in each table's own tree under `0xFD ++ transaction
//! (u64 BE) ++ record (u32 BE)`, past every entity key, written with the commit's rows under the
//! same undo record; and the store-wide clock that numbers transactions and says up to where
//! readers may read.
//!
//! Numbers are taken in one order but commits finish in another, and a commit is acknowledged
//! only once flushed: the clock keeps every number taken and not yet durable, and readers read
//! only below the smallest of them (the horizon), so that a reader never passes a record that
//! appears later, nor sees one a crash could take back.
//!
//! A lone insert writes its record and then its row, without an undo record
//! (the lone insert of [`SledTable::commit_waiting`]): a crash between the two leaves a record of a change that
//! did not happen. Every [`NOTE_SETTLED_EVERY`] numbers the clock notes in the store a number
//! below which every commit had written all its rows; sled recovers a prefix of its log, so at
//! open only the records from the note on can stand alone, and [`drop_unfinished`] removes those
//! that do.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::key;
use super::table::SledTable;
use super::undo::RowChange;
use super::{StorageError, Ticket};
use crate::model::{ChangeKind, CommitPlan, EntityKey, Ticks};
use crate::storage::changes::{self, FeedBatch, FeedPosition, StoredChange};
use crate::storage::EntityView;

/// The key, in the store's default tree, of the settled note: a transaction number below which
/// every commit had written all its rows.
const SETTLED: &[u8] = b"trestle.feed.settled";

/// How many transaction numbers apart the clock notes where the settled ones end.
const NOTE_SETTLED_EVERY: u64 = 256;

/// Numbers transactions and keeps those not yet readable.
#[derive(Debug)]
pub(super) struct FeedClock {
    state: Mutex<ClockState>,
    /// Where the settled note is kept.
    db: sled::Db,
}

#[derive(Debug, Default)]
struct ClockState {
    /// The next transaction's number.
    next: u64,
    /// Numbers taken and not yet readable: `None` while the commit writes, then its durability
    /// ticket (0 when it needs none).
    pending: BTreeMap<u64, Option<Ticket>>,
}

impl FeedClock {
    /// A clock keeping its settled note in `db`.
    pub(super) fn new(db: sled::Db) -> FeedClock {
        FeedClock {
            state: Mutex::default(),
            db,
        }
    }

    /// Sets the next number (at open, once the tables' records are known and whole), and notes
    /// that every record so far is settled.
    pub(super) fn start_at(&self, next: u64) {
        self.state().next = next;
        self.note_settled();
    }

    fn state(&self) -> MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the next transaction number; it stays unreadable (and holds back every later one)
    /// until [`Turn::written`], or is let go if the turn is dropped unwritten.
    pub(super) fn take(&self) -> Turn<'_> {
        let mut state = self.state();
        let transaction = state.next;
        state.next += 1;
        state.pending.insert(transaction, None);
        Turn {
            clock: self,
            transaction,
            written: false,
        }
    }

    /// The number the next transaction will take.
    pub(super) fn next(&self) -> u64 {
        self.state().next
    }

    /// The first transaction number readers may not read yet, given the `durable` ticket.
    pub(super) fn horizon(&self, durable: Ticket) -> u64 {
        let mut state = self.state();
        while let Some(entry) = state.pending.first_entry() {
            match entry.get() {
                Some(ticket) if *ticket <= durable => {
                    entry.remove();
                }
                _ => return *entry.key(),
            }
        }
        state.next
    }

    /// Notes in the store the first number whose commit may not have written all its rows yet.
    /// (A failure is only logged: an older note makes the check at open read more records.)
    fn note_settled(&self) {
        let settled = {
            let state = self.state();
            let writing = state.pending.iter().find(|(_, ticket)| ticket.is_none());
            writing.map_or(state.next, |(&transaction, _)| transaction)
        };
        if let Err(error) = self.db.insert(SETTLED, &settled.to_be_bytes()) {
            tracing::warn!(%error, "cannot note where the change feeds' settled records end");
        }
    }
}

/// A transaction number taken for a commit.
#[derive(Debug)]
pub(super) struct Turn<'a> {
    clock: &'a FeedClock,
    pub(super) transaction: u64,
    written: bool,
}

impl Turn<'_> {
    /// The commit's rows are written; readable once `ticket` is durable (at once for `None`).
    pub(super) fn written(mut self, ticket: Option<Ticket>) {
        self.clock
            .state()
            .pending
            .insert(self.transaction, Some(ticket.unwrap_or(0)));
        self.written = true;
        if self.transaction % NOTE_SETTLED_EVERY == 0 {
            self.clock.note_settled();
        }
    }
}

impl Drop for Turn<'_> {
    /// A commit that wrote nothing (refused, or failed) gives its number up.
    fn drop(&mut self) {
        if !self.written {
            self.clock.state().pending.remove(&self.transaction);
        }
    }
}

/// The rows holding the change records of `plan` (partition `partition_key`), numbered from
/// `first` within `transaction`.
pub(super) fn record_rows(
    plan: &CommitPlan,
    partition_key: &str,
    transaction: u64,
    first: u32,
) -> Vec<RowChange> {
    changes::records_of(plan, partition_key)
        .into_iter()
        .zip(first..)
        .map(|(record, at)| record_row(transaction, at, record))
        .collect()
}

/// The row holding the change record of a lone insert, `plan`'s one change (partition
/// `partition_key`), whose entity is stored as `stored`: the record of transaction `transaction`.
pub(super) fn insert_record_row(
    plan: &CommitPlan,
    partition_key: &str,
    transaction: u64,
    stored: &[u8],
) -> RowChange {
    let record = changes::record(plan, &plan.changes[0], partition_key, stored);
    record_row(transaction, 0, record)
}

fn record_row(transaction: u64, at: u32, record: Vec<u8>) -> RowChange {
    RowChange {
        key: key::feed_record(FeedPosition {
            transaction,
            record: at,
        }),
        after: Some(record),
        before: None,
    }
}

/// The number after the highest transaction any of `tables` holds a record of.
pub(super) fn next_transaction<'a>(
    tables: impl IntoIterator<Item = &'a SledTable>,
) -> Result<u64, StorageError> {
    let mut next = 1;
    for table in tables {
        if let Some(last) = table.tree.range(key::feed_records()).next_back() {
            let (stored_key, _) = last?;
            next = next.max(key::feed_position(&stored_key)?.transaction + 1);
        }
    }
    Ok(next)
}

/// Removes the change records a crash left without their change (see the module's comment): from
/// the settled note on, the last record of each entity, if it says the entity was inserted but
/// the table holds no entity of that stamp. Returns how many it removed. Call at open,
/// after the undo log's roll-back and before any commit.
pub(super) fn drop_unfinished<'a>(
    db: &sled::Db,
    tables: impl IntoIterator<Item = &'a SledTable>,
) -> Result<usize, StorageError> {
    let settled = match db.get(SETTLED)? {
        Some(bytes) => u64::from_be_bytes(bytes.as_ref().try_into().map_err(|_| {
            StorageError::Corrupt("the change feeds' settled note is malformed".into())
        })?),
        None => 0,
    };
    let start = key::feed_record(FeedPosition {
        transaction: settled,
        record: 0,
    });
    let mut dropped = 0;
    for table in tables {
        let mut last_of_entity: HashMap<EntityKey, StoredChange> = HashMap::new();
        for item in table.tree.range(start.clone()..key::feed_records().end) {
            let (stored_key, bytes) = item?;
            let change = changes::decode(key::feed_position(&stored_key)?, &bytes)?;
            last_of_entity.insert(change.key.clone(), change);
        }
        for (entity_key, change) in last_of_entity {
            let Some(after) = change
                .after()?
                .filter(|_| change.kind == ChangeKind::Insert)
            else {
                continue;
            };
            let EntityKey {
                partition_key,
                row_key,
            } = &entity_key;
            let stored = table.tree.get(key::encode(partition_key, row_key))?;
            // Each commit has a stamp of its own: the row is the insert's only if it has its stamp.
            let inserted = match &stored {
                Some(bytes) => {
                    EntityView::parse(partition_key, row_key, bytes)?.timestamp == after.timestamp
                }
                None => false,
            };
            if !inserted {
                table.tree.remove(key::feed_record(change.position))?;
                dropped += 1;
            }
        }
    }
    Ok(dropped)
}

impl SledTable {
    /// [`crate::storage::Table::read_changes`], below `horizon`.
    pub(super) fn changes_below(
        &self,
        after: Option<FeedPosition>,
        horizon: u64,
        limit: FeedBatch,
    ) -> Result<Vec<StoredChange>, StorageError> {
        let start = match after {
            Some(after) => std::ops::Bound::Excluded(key::feed_record(after)),
            None => std::ops::Bound::Included(key::feed_record(FeedPosition::default())),
        };
        let end = std::ops::Bound::Excluded(key::feed_record(FeedPosition {
            transaction: horizon,
            record: 0,
        }));
        let (mut found, mut found_bytes) = (Vec::new(), 0);
        for item in self.tree.range((start, end)) {
            let (stored_key, bytes) = item?;
            if !limit.admits(found.len(), found_bytes, bytes.len()) {
                break;
            }
            found_bytes += bytes.len();
            found.push(changes::decode(key::feed_position(&stored_key)?, &bytes)?);
        }
        Ok(found)
    }

    /// [`crate::storage::Table::trim_changes`] below `horizon`: the records from the feed's start
    /// up to the first of a commit at or after `before`. The trimmed position is written before
    /// the records are removed (sled recovers a prefix of its log), so that a crash never leaves
    /// records missing without it.
    pub(super) fn trim_below(
        &self,
        before: Ticks,
        horizon: u64,
        limit: usize,
    ) -> Result<usize, StorageError> {
        let oldest = self.changes_below(None, horizon, FeedBatch::records(limit))?;
        let doomed: Vec<FeedPosition> = oldest
            .iter()
            .take_while(|change| change.at < before)
            .map(|change| change.position)
            .collect();
        let Some(&last) = doomed.last() else {
            return Ok(0);
        };
        self.tree
            .insert(key::FEED_TRIMMED, key::feed_record(last))?;
        for position in &doomed {
            self.tree.remove(key::feed_record(*position))?;
        }
        Ok(doomed.len())
    }

    /// [`crate::storage::Table::feed_trimmed_to`].
    pub(super) fn trimmed_to(&self) -> Result<Option<FeedPosition>, StorageError> {
        match self.tree.get(key::FEED_TRIMMED)? {
            Some(bytes) => key::feed_position(&bytes).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> FeedClock {
        let db = sled::Config::new().temporary(true).open().unwrap();
        FeedClock::new(db)
    }

    #[test]
    fn readers_stop_at_the_first_number_not_yet_durable() {
        let clock = clock();
        clock.start_at(5);
        let (first, second, third) = (clock.take(), clock.take(), clock.take());
        assert_eq!(clock.horizon(100), 5);
        second.written(Some(7));
        assert_eq!(clock.horizon(100), 5, "5 is still being written");
        drop(first);
        assert_eq!(clock.horizon(6), 6, "6 waits for its flush");
        assert_eq!(clock.horizon(7), 7);
        third.written(None);
        assert_eq!(clock.horizon(7), 8);
        assert_eq!(clock.take().transaction, 8);
    }

    #[test]
    fn the_settled_note_names_the_first_commit_still_writing() {
        let clock = clock();
        clock.start_at(NOTE_SETTLED_EVERY - 1);
        let noted = || clock.db.get(SETTLED).unwrap().expect("noted");
        assert_eq!(noted().as_ref(), &(NOTE_SETTLED_EVERY - 1).to_be_bytes());
        let (first, second, third) = (clock.take(), clock.take(), clock.take());
        first.written(None);
        let unchanged = noted();
        assert_eq!(unchanged.as_ref(), &(NOTE_SETTLED_EVERY - 1).to_be_bytes());
        second.written(Some(1));
        assert_eq!(noted().as_ref(), &(NOTE_SETTLED_EVERY + 1).to_be_bytes());
        drop(third);
    }
}
