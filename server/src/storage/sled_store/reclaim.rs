//! Background reclamation of deleted tables: a low-priority thread empties each deleted table's
//! tree row by row, drops the empty tree, and only then removes the table's catalog record.
//!
//! Why row by row rather than one `sled::Db::drop_tree`: sled hands a freed log segment back for
//! reuse only once every thread pinned in the epoch that freed it has unpinned, and `drop_tree`
//! walks the whole tree under one pin. Every write made meanwhile (a second or more for 1,000,000
//! rows under load) goes to the end of the file: deleting a 1,000,000-entity table while loading
//! another grew the data directory by 16-21%. Each single removal pins only briefly, so the space
//! the table's leaves held is reused while the reclaimer is still at work (+1.6% to +3.2%). The
//! thread runs at a lower priority (nice 10, on Linux), so its removals yield to requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use super::catalog::TableRecord;
use super::snapshot::Snapshots;
use super::{SledTable, StorageError, Table, TABLE_TREE_PREFIX};

/// The reclaimer thread's nice value: below requests, above nothing in particular.
const RECLAIMER_NICE: i32 = 10;

/// How many rows the reclaimer removes between looks at whether the store is closing.
const ROWS_BETWEEN_STOP_CHECKS: u64 = 1024;

/// The reclaimer thread and its queue of deleted tables.
#[derive(Debug)]
pub(super) struct Reclaimer {
    queue: mpsc::Sender<TableRecord>,
    stopping: Arc<AtomicBool>,
    worker: JoinHandle<()>,
}

/// How one table's reclamation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The tree and the catalog record are gone.
    Reclaimed { rows: u64 },
    /// The store is closing; the next open resumes the table.
    Stopped,
}

impl Reclaimer {
    /// Starts the thread; it reclaims a table only once the snapshot being read (in
    /// `snapshots`), if any, is done with it.
    pub(super) fn start(db: sled::Db, catalog: sled::Tree, snapshots: Arc<Snapshots>) -> Reclaimer {
        let (queue, pending) = mpsc::channel::<TableRecord>();
        let stopping = Arc::new(AtomicBool::new(false));
        let worker_stopping = stopping.clone();
        let worker = std::thread::Builder::new()
            .name("trestle-reclaim".into())
            .spawn(move || {
                lower_this_threads_priority();
                for record in pending {
                    snapshots.wait_until_read(record.id);
                    match reclaim(&db, &catalog, &record, &worker_stopping) {
                        Ok(Outcome::Reclaimed { .. }) => {}
                        Ok(Outcome::Stopped) => return,
                        Err(error) => {
                            tracing::error!(table = %record.name, %error, "reclaiming a deleted table failed; it resumes at the next start");
                        }
                    }
                }
            })
            .expect("spawning the reclaimer thread");
        Reclaimer {
            queue,
            stopping,
            worker,
        }
    }

    pub(super) fn enqueue(&self, record: TableRecord) {
        // The worker only stops when `stop` is called, which consumes this sender.
        let _ = self.queue.send(record);
    }

    /// Stops the worker within [`ROWS_BETWEEN_STOP_CHECKS`] removals and waits for it; tables not
    /// yet reclaimed resume at the next open.
    pub(super) fn stop(self) {
        self.stopping.store(true, Ordering::Relaxed);
        drop(self.queue);
        let _ = self.worker.join();
    }
}

/// Empties a deleted table's tree, drops it, then removes its catalog record (only if it still is
/// that deletion's). Idempotent: a crash or a stop at any point leaves the record, and the next
/// run finishes the job.
fn reclaim(
    db: &sled::Db,
    catalog: &sled::Tree,
    record: &TableRecord,
    stopping: &AtomicBool,
) -> Result<Outcome, StorageError> {
    let started = Instant::now();
    let tree_name = SledTable::tree_name(record.id);
    // Opening a tree a crash already dropped creates it empty; it is dropped again below.
    let tree = db.open_tree(&tree_name)?;
    let mut rows = 0u64;
    for key in tree.iter().keys() {
        if rows % ROWS_BETWEEN_STOP_CHECKS == 0 && stopping.load(Ordering::Relaxed) {
            tracing::info!(table = %record.name, rows, "stopped reclaiming a deleted table; it resumes at the next start");
            return Ok(Outcome::Stopped);
        }
        tree.remove(key?)?;
        rows += 1;
    }
    drop(tree);
    db.drop_tree(tree_name.as_bytes())?;
    let folded = record.name.folded();
    let _ = catalog.compare_and_swap(folded, Some(record.encode()), None::<Vec<u8>>)?;
    db.flush()?;
    tracing::info!(table = %record.name, rows, elapsed_ms = started.elapsed().as_millis() as u64, "reclaimed deleted table");
    crate::telemetry::background_done("table_reclaim");
    Ok(Outcome::Reclaimed { rows })
}

/// Lowers the calling thread's priority. Linux keeps a nice value per thread; elsewhere the call
/// would lower the whole process, so it is left out.
fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    if let Err(error) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), RECLAIMER_NICE)
    {
        tracing::warn!(%error, "could not lower the reclaimer's priority");
    }
}

/// Drops `t/…` trees no catalog record names: left by a crash between creating a table's tree and
/// recording it.
pub(super) fn drop_orphan_trees(
    db: &sled::Db,
    live: &HashMap<String, Arc<SledTable>>,
    deleting: &[TableRecord],
) -> Result<(), StorageError> {
    let known: Vec<String> = live
        .values()
        .map(|t| SledTable::tree_name(t.id()))
        .chain(deleting.iter().map(|r| SledTable::tree_name(r.id)))
        .collect();
    for tree_name in db.tree_names() {
        let tree_name = String::from_utf8_lossy(&tree_name).into_owned();
        if tree_name.starts_with(TABLE_TREE_PREFIX) && !known.contains(&tree_name) {
            db.drop_tree(tree_name.as_bytes())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::catalog::TableState;
    use super::*;
    use crate::model::TableName;

    /// A sled database holding a catalog and one deleted table of `rows` rows.
    fn deleted_table(dir: &std::path::Path, rows: u32) -> (sled::Db, sled::Tree, TableRecord) {
        let db = sled::Config::new().path(dir).open().unwrap();
        let catalog = db.open_tree("catalog").unwrap();
        let record = TableRecord {
            id: 7,
            state: TableState::Deleting,
            name: TableName::parse("Doomed").unwrap(),
        };
        catalog
            .insert(record.name.folded(), record.encode())
            .unwrap();
        let tree = db.open_tree(SledTable::tree_name(record.id)).unwrap();
        for row in 0..rows {
            tree.insert(row.to_be_bytes(), vec![0u8; 100]).unwrap();
        }
        (db, catalog, record)
    }

    fn has_tree(db: &sled::Db, record: &TableRecord) -> bool {
        let name = SledTable::tree_name(record.id);
        db.tree_names().iter().any(|t| t == name.as_bytes())
    }

    fn reclaim_unstopped(db: &sled::Db, catalog: &sled::Tree, record: &TableRecord) -> Outcome {
        reclaim(db, catalog, record, &AtomicBool::new(false)).unwrap()
    }

    fn assert_reclaimed(db: &sled::Db, catalog: &sled::Tree, record: &TableRecord) {
        assert!(!has_tree(db, record), "the tree is left");
        assert!(
            catalog.get(record.name.folded()).unwrap().is_none(),
            "the catalog record is left"
        );
    }

    #[test]
    fn reclaiming_removes_every_row_then_the_tree_then_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let (db, catalog, record) = deleted_table(dir.path(), 5000);
        let outcome = reclaim_unstopped(&db, &catalog, &record);
        assert_eq!(outcome, Outcome::Reclaimed { rows: 5000 });
        assert_reclaimed(&db, &catalog, &record);
    }

    #[test]
    fn a_stopped_reclamation_keeps_the_record_and_a_later_one_finishes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (db, catalog, record) = deleted_table(dir.path(), 5000);
        let outcome = reclaim(&db, &catalog, &record, &AtomicBool::new(true)).unwrap();
        assert_eq!(outcome, Outcome::Stopped);
        assert!(has_tree(&db, &record));
        assert!(catalog.get(record.name.folded()).unwrap().is_some());

        let outcome = reclaim_unstopped(&db, &catalog, &record);
        assert_eq!(outcome, Outcome::Reclaimed { rows: 5000 });
        assert_reclaimed(&db, &catalog, &record);
    }

    #[test]
    fn reclaiming_a_tree_a_crash_already_dropped_removes_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let (db, catalog, record) = deleted_table(dir.path(), 10);
        db.drop_tree(SledTable::tree_name(record.id).as_bytes())
            .unwrap();
        let outcome = reclaim_unstopped(&db, &catalog, &record);
        assert_eq!(outcome, Outcome::Reclaimed { rows: 0 });
        assert_reclaimed(&db, &catalog, &record);
    }

    #[test]
    fn the_record_of_a_newer_deletion_of_the_same_name_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (db, catalog, record) = deleted_table(dir.path(), 10);
        let newer = TableRecord {
            id: 8,
            ..record.clone()
        };
        catalog
            .insert(record.name.folded(), newer.encode())
            .unwrap();
        reclaim_unstopped(&db, &catalog, &record);
        assert_eq!(
            catalog.get(record.name.folded()).unwrap().as_deref(),
            Some(&newer.encode()[..])
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_reclaimer_runs_below_the_requests_priority() {
        let dir = tempfile::tempdir().unwrap();
        let (db, catalog, _) = deleted_table(dir.path(), 0);
        let reclaimer = Reclaimer::start(db, catalog, Arc::default());
        let nice_of_reclaimers = || -> Vec<i32> {
            let mut nice = Vec::new();
            for task in std::fs::read_dir("/proc/self/task").unwrap() {
                let path = task.unwrap().path();
                let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
                if comm.trim() != "trestle-reclaim" {
                    continue;
                }
                // `stat` is "pid (comm) state ..."; nice is the 19th field, the 17th after comm.
                let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
                if let Some((_, after_comm)) = stat.rsplit_once(") ") {
                    nice.push(after_comm.split(' ').nth(16).unwrap().parse().unwrap());
                }
            }
            nice
        };
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let nice = loop {
            let nice = nice_of_reclaimers();
            // Other tests' stores have reclaimers of their own, all started the same way.
            if !nice.is_empty() && nice.iter().all(|&n| n == RECLAIMER_NICE) {
                break nice;
            }
            assert!(Instant::now() < deadline, "reclaimer nice values: {nice:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert!(!nice.is_empty());
        reclaimer.stop();
    }
}
