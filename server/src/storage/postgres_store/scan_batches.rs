//! How many rows a scan asks the database for at a time. [`SCAN_BATCH`] rows a statement (or a
//! portal's fetch) suit small entities; but a page stops after about 2 MiB, and rows past where
//! it stops are still read and sent by the database, so 1,024 entities of 1 MiB asked for would
//! cost the database 1 GiB to serve two. Each table's mean row size, as the last batch read from
//! it showed, sizes the next batches of every scan of the table: about [`BATCH_BYTES`] a batch,
//! a power of two from [`FEWEST`] rows to [`SCAN_BATCH`] (so that a connection prepares a few
//! forms of a statement, not one per size). A table not read yet (since the server started) asks
//! for [`FIRST_BATCH`] rows, so that its first read learns the size without reading hundreds of
//! large rows.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The most rows a scan asks for at a time.
const SCAN_BATCH: i32 = 1024;
/// The rows a scan asks a table for whose row size is not known yet.
const FIRST_BATCH: i32 = 16;
/// The fewest rows a scan asks for at a time, however large the table's rows.
const FEWEST: i32 = 4;
/// The bytes of rows a batch aims at: twice a page's budget, so that a page of large entities
/// is one batch.
const BATCH_BYTES: usize = 4 << 20;
/// The tables whose row size is kept; past that the sizes are forgotten (and learned again).
const TABLES_KEPT: usize = 4096;

/// The mean row size of each table read lately, by table id.
#[derive(Debug, Default)]
pub(super) struct ScanBatches {
    row_bytes: Mutex<HashMap<i64, usize>>,
}

impl ScanBatches {
    /// How many rows to ask table `table_id` for at a time.
    pub(super) fn rows(&self, table_id: i64) -> i32 {
        let row_bytes = self.sizes().get(&table_id).copied();
        row_bytes.map_or(FIRST_BATCH, rows_of)
    }

    /// Notes that a batch read from table `table_id` showed `rows` rows of `bytes` in all.
    pub(super) fn observe(&self, table_id: i64, rows: usize, bytes: usize) {
        if rows == 0 {
            return;
        }
        let mut sizes = self.sizes();
        if sizes.len() >= TABLES_KEPT && !sizes.contains_key(&table_id) {
            sizes.clear();
        }
        sizes.insert(table_id, bytes / rows);
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, HashMap<i64, usize>> {
        self.row_bytes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One scan's batches of one table: as many rows as the table's row size says, and no more than
/// the scan still expects to read where it knows ([`crate::storage::KeyScan::expected_rows`]): a
/// page of ten asks for 16 rows, not a full batch.
#[derive(Debug)]
pub(super) struct TableBatches<'a> {
    batches: &'a ScanBatches,
    table_id: i64,
    expected_left: Option<usize>,
}

impl<'a> TableBatches<'a> {
    /// The batches of a scan of table `table_id` expected to read `expected_rows` rows (if known).
    pub(super) fn new(
        batches: &'a ScanBatches,
        table_id: i64,
        expected_rows: Option<usize>,
    ) -> TableBatches<'a> {
        TableBatches {
            batches,
            table_id,
            expected_left: expected_rows,
        }
    }

    /// How many rows to ask for next. Once the rows expected are read, the scan goes on (rows
    /// the visitor skipped, say expired ones) in batches sized by the table alone.
    pub(super) fn rows(&self) -> i32 {
        let sized = self.batches.rows(self.table_id);
        match self.expected_left {
            Some(left) if left > 0 => sized.min(batch_holding(left)),
            _ => sized,
        }
    }

    /// Notes what a batch showed.
    pub(super) fn observe(&mut self, tally: &BatchTally) {
        self.batches.observe(self.table_id, tally.rows, tally.bytes);
        if let Some(left) = &mut self.expected_left {
            *left = left.saturating_sub(tally.rows);
        }
    }
}

/// The rows a batch has shown so far, and their records' bytes.
#[derive(Debug, Default)]
pub(super) struct BatchTally {
    pub(super) rows: usize,
    bytes: usize,
}

impl BatchTally {
    /// Counts a row whose record is `record_bytes` long.
    pub(super) fn count(&mut self, record_bytes: usize) {
        self.rows += 1;
        self.bytes += record_bytes;
    }
}

/// The smallest batch (a power of two) that holds `rows` rows, or the largest batch.
fn batch_holding(rows: usize) -> i32 {
    rows.clamp(FEWEST as usize, SCAN_BATCH as usize)
        .next_power_of_two() as i32
}

/// The rows a batch asks for where rows are `row_bytes` long.
fn rows_of(row_bytes: usize) -> i32 {
    let rows = (BATCH_BYTES / row_bytes.max(1)).clamp(FEWEST as usize, SCAN_BATCH as usize);
    1 << rows.ilog2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_rows_are_read_a_full_batch_at_a_time_and_large_ones_a_few() {
        let batches = ScanBatches::default();
        assert_eq!(batches.rows(7), FIRST_BATCH, "a table not read yet");
        batches.observe(7, 256, 256 * 300);
        assert_eq!(batches.rows(7), SCAN_BATCH);
        batches.observe(7, 4, 4 * 480_000);
        assert_eq!(batches.rows(7), 8, "0.48 MB rows: 4 MiB is 8 of them");
        batches.observe(7, 10, 10 * 100_000);
        assert_eq!(
            batches.rows(7),
            32,
            "41 rows of 100 kB, down to a power of two"
        );
        batches.observe(7, 2, 2 * (1 << 20));
        assert_eq!(batches.rows(7), FEWEST, "1 MiB rows");
        assert_eq!(batches.rows(8), FIRST_BATCH, "another table is its own");
        batches.observe(7, 0, 0);
        assert_eq!(batches.rows(7), FEWEST, "an empty batch shows nothing");
    }

    #[test]
    fn a_scan_asks_for_no_more_rows_than_it_expects_to_read() {
        let batches = ScanBatches::default();
        batches.observe(7, 256, 256 * 300);
        let tally = |rows| BatchTally {
            rows,
            bytes: rows * 300,
        };
        let mut top_ten = TableBatches::new(&batches, 7, Some(11));
        assert_eq!(top_ten.rows(), 16);
        // Expired rows skipped: past the rows expected, the scan goes on in full batches.
        top_ten.observe(&tally(16));
        assert_eq!(top_ten.rows(), SCAN_BATCH);

        let mut page = TableBatches::new(&batches, 7, Some(1001));
        assert_eq!(page.rows(), 1024);
        page.observe(&tally(600));
        assert_eq!(page.rows(), 512, "401 rows left");
        assert_eq!(TableBatches::new(&batches, 7, Some(1)).rows(), FEWEST);
        assert_eq!(TableBatches::new(&batches, 7, None).rows(), SCAN_BATCH);

        // Rows of 0.48 MB: the table's row size bounds the batch, however many are expected.
        batches.observe(7, 4, 4 * 480_000);
        assert_eq!(TableBatches::new(&batches, 7, Some(1001)).rows(), 8);
        assert_eq!(
            TableBatches::new(&batches, 8, Some(1001)).rows(),
            FIRST_BATCH
        );
    }

    #[test]
    fn the_sizes_kept_are_bounded() {
        let batches = ScanBatches::default();
        for table_id in 0..TABLES_KEPT as i64 + 1 {
            batches.observe(table_id, 1, 1 << 20);
        }
        assert!(batches.sizes().len() <= TABLES_KEPT);
        assert_eq!(batches.rows(TABLES_KEPT as i64), FEWEST);
    }
}
