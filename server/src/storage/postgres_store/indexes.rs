//! Declared indexes in the PostgreSQL store: the catalog in the table's row
//! (`trestle_tables.indexes`, the shared record format), entries in `trestle_index_entries
//! (index_id, sort_key, pk, rk)` written in the commit's own transaction, unique values kept by
//! the entries' primary key (a second commit adding one waits for the first and then finds it
//! taken), builds a partition run at a time under the partition's lock, and dropped indexes'
//! entries purged in the background (`trestle_dropped_indexes`, `purge.rs`).

use postgres::types::ToSql;

use super::pool::Prepared;
use super::sql::{partition_lock, read_snapshot, table_lock, visit_portal, LOCK_TABLE};
use super::table::PostgresTable;
use crate::model::{
    AddedEntry, CommitPlan, EntityKey, Index, IndexDefinition, IndexEntry, IndexState, KeyPosition,
    TimeToLive,
};
use crate::storage::{
    entity_sort_keys, BuildStep, EntityView, IndexCatalog, IndexRefusal, IndexScan, Indexed,
    Rejection, SettingsChange, StorageError, Visitor,
};

/// Entities one build step reads (all of one partition).
const BUILD_STEP: i64 = 1_000;

const DELETE_ENTRIES: &str = "DELETE FROM trestle_index_entries
    WHERE (index_id, sort_key) IN (SELECT * FROM unnest($1::bigint[], $2::bytea[]))";
/// Adds entries; an entry that exists stays (and is not returned) unless it is the same entity's.
const ADD_ENTRIES: &str = "INSERT INTO trestle_index_entries AS i (index_id, sort_key, pk, rk)
    SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[], $4::bytea[])
    ON CONFLICT (index_id, sort_key) DO UPDATE SET pk = EXCLUDED.pk
        WHERE i.pk = EXCLUDED.pk AND i.rk = EXCLUDED.rk
    RETURNING index_id, sort_key";
const ENTRY_HOLDER: &str =
    "SELECT pk, rk FROM trestle_index_entries WHERE index_id = $1 AND sort_key = $2";
const CATALOG_FOR_UPDATE: &str =
    "SELECT indexes FROM trestle_tables WHERE id = $1 AND live FOR UPDATE";
const STORE_CATALOG: &str = "UPDATE trestle_tables SET indexes = $2 WHERE id = $1";
const NEXT_INDEX_ID: &str = "SELECT nextval('trestle_index_ids')";
const DROPPED: &str = "INSERT INTO trestle_dropped_indexes VALUES ($1) ON CONFLICT DO NOTHING";
const FIRST_PARTITION: &str = "SELECT pk FROM trestle_entities
    WHERE table_id = $1 AND (pk, rk) >= ($2, $3) ORDER BY pk, rk LIMIT 1";
const PARTITION_RUN: &str = "SELECT rk, record FROM trestle_entities
    WHERE table_id = $1 AND pk = $2 AND rk >= $3 ORDER BY rk LIMIT $4";
const CATALOG: &str = "SELECT indexes FROM trestle_tables WHERE id = $1 AND live";

impl PostgresTable {
    /// Removes the index entries `plan` gives up, in the commit's transaction.
    pub(super) fn remove_entries(
        &self,
        tx: &mut postgres::Client,
        prepared: &mut Prepared<'_>,
        plan: &CommitPlan,
    ) -> Result<(), StorageError> {
        let removed = &plan.removed_entries;
        if !removed.is_empty() {
            let ids: Vec<i64> = removed.iter().map(|e| e.index_id as i64).collect();
            let keys: Vec<&[u8]> = removed.iter().map(|e| &e.sort_key[..]).collect();
            let delete = prepared.get(tx, DELETE_ENTRIES)?;
            tx.execute(&delete, &[&ids, &keys])?;
        }
        Ok(())
    }

    /// Adds the index entries `plan` adds (for entities of `partition_key`), in the commit's
    /// transaction after [`PostgresTable::remove_entries`]; or the operation refused because a
    /// unique index holds its value for another entity (the caller rolls back). Unique values
    /// are kept by the entries' primary key: a second commit adding one waits for the first and
    /// then finds it taken.
    pub(super) fn add_plan_entries(
        &self,
        tx: &mut postgres::Client,
        prepared: &mut Prepared<'_>,
        partition_key: &str,
        plan: &CommitPlan,
    ) -> Result<Result<(), Rejection>, StorageError> {
        match self.add_entries(tx, prepared, partition_key, &plan.added_entries)? {
            None => Ok(Ok(())),
            Some((taken, holder)) => Ok(Err(taken.taken_by(holder).into())),
        }
    }

    /// Adds `entries` of entities of `partition_key`; the first one whose sort key another entity
    /// holds, and that entity, if any (a unique index's value taken).
    fn add_entries<'e>(
        &self,
        tx: &mut postgres::Client,
        prepared: &mut Prepared<'_>,
        partition_key: &str,
        entries: &'e [AddedEntry],
    ) -> Result<Option<(&'e AddedEntry, EntityKey)>, StorageError> {
        if entries.is_empty() {
            return Ok(None);
        }
        let ids: Vec<i64> = entries.iter().map(|a| a.entry.index_id as i64).collect();
        let keys: Vec<&[u8]> = entries.iter().map(|a| &a.entry.sort_key[..]).collect();
        let pks: Vec<&[u8]> = vec![partition_key.as_bytes(); entries.len()];
        let rks: Vec<&[u8]> = entries.iter().map(|a| a.row_key.as_bytes()).collect();
        let add = prepared.get(tx, ADD_ENTRIES)?;
        let returned = tx.query(&add, &[&ids, &keys, &pks, &rks])?;
        if returned.len() == entries.len() {
            return Ok(None);
        }
        let kept: Vec<(i64, &[u8])> = returned.iter().map(|r| (r.get(0), r.get(1))).collect();
        let Some(taken) = entries
            .iter()
            .find(|a| !kept.contains(&(a.entry.index_id as i64, &a.entry.sort_key[..])))
        else {
            return Ok(None);
        };
        let holder = prepared.get(tx, ENTRY_HOLDER)?;
        let row = tx.query_one(
            &holder,
            &[&(taken.entry.index_id as i64), &taken.entry.sort_key],
        )?;
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let holder = EntityKey {
            partition_key: text(row.get(0)),
            row_key: text(row.get(1)),
        };
        Ok(Some((taken, holder)))
    }

    /// Changes the table's index catalog with `change` in a transaction holding the catalog row
    /// (and, with `fence_commits`, the table's lock exclusively, so that every commit after it
    /// sees the change and none before it is still running). `None` if the table is gone.
    fn change_catalog<R>(
        &self,
        fence_commits: bool,
        change: impl FnOnce(
            &mut IndexCatalog,
            &mut postgres::Transaction<'_>,
        ) -> Result<R, StorageError>,
    ) -> Result<Option<R>, StorageError> {
        self.pool.with(|connection| {
            let (client, mut prepared) = connection.parts();
            let mut tx = client.transaction()?;
            if fence_commits {
                let lock_table = prepared.get(&mut tx, LOCK_TABLE)?;
                tx.execute(&lock_table, &[&self.id])?;
            }
            let read = prepared.get(&mut tx, CATALOG_FOR_UPDATE)?;
            let Some(row) = tx.query_opt(&read, &[&self.id])? else {
                return Ok(None);
            };
            let mut catalog = IndexCatalog::decode(row.get(0))?;
            let outcome = change(&mut catalog, &mut tx)?;
            let store = prepared.get(&mut tx, STORE_CATALOG)?;
            tx.execute(&store, &[&self.id, &catalog.encode()])?;
            tx.commit()?;
            Ok(Some(outcome))
        })
    }

    fn build_in(
        &self,
        client: &mut postgres::Client,
        prepared: &mut Prepared<'_>,
        index_id: u64,
        from_pk: &str,
        from_rk: &str,
    ) -> Result<BuildStep, StorageError> {
        let read_catalog = prepared.get(client, CATALOG)?;
        let Some(row) = client.query_opt(&read_catalog, &[&self.id])? else {
            return Err(StorageError::IndexGone);
        };
        let catalog = IndexCatalog::decode(row.get(0))?;
        let Some(index) = catalog.indexes.iter().find(|index| index.id == index_id) else {
            return Err(StorageError::IndexGone);
        };
        let first = prepared.get(client, FIRST_PARTITION)?;
        let Some(row) = client.query_opt(
            &first,
            &[&self.id, &from_pk.as_bytes(), &from_rk.as_bytes()],
        )?
        else {
            return Ok(BuildStep::Next(None));
        };
        let partition_key = String::from_utf8_lossy(row.get(0)).into_owned();
        let row_start = if partition_key == from_pk {
            from_rk
        } else {
            ""
        };
        client.batch_execute(&format!(
            "SELECT pg_advisory_xact_lock({})",
            partition_lock(self.id, &partition_key)
        ))?;
        let run = prepared.get(client, PARTITION_RUN)?;
        let rows = client.query(
            &run,
            &[
                &self.id,
                &partition_key.as_bytes(),
                &row_start.as_bytes(),
                &(BUILD_STEP + 1),
            ],
        )?;
        let (entries, next) = entries_of_run(index, &partition_key, &rows)?;
        // One statement cannot add one sort key twice: find such a pair here.
        let twice = same_values(&entries).map(|(first, second)| (first.row_key.clone(), second));
        let taken = match twice {
            Some((first, second)) => {
                let holder = EntityKey {
                    partition_key: partition_key.clone(),
                    row_key: first,
                };
                Some((second, holder))
            }
            None => self.add_entries(client, prepared, &partition_key, &entries)?,
        };
        if let Some((entry, holder)) = taken {
            return Ok(BuildStep::Conflict(format!(
                "entities (PartitionKey {:?}, RowKey {:?}) and ({:?}, {:?}) have the same values",
                holder.partition_key, holder.row_key, partition_key, entry.row_key
            )));
        }
        Ok(BuildStep::Next(next))
    }
}

impl Indexed for PostgresTable {
    fn indexes(&self) -> Result<IndexCatalog, StorageError> {
        Ok(self.catalog.clone())
    }

    fn create_index(
        &self,
        definition: IndexDefinition,
    ) -> Result<Result<Index, IndexRefusal>, StorageError> {
        let declared = self.change_catalog(true, |catalog, tx| {
            let id: i64 = tx.query_one(NEXT_INDEX_ID, &[])?.get(0);
            Ok(catalog.declare(id as u64, definition, IndexState::Building))
        })?;
        Ok(declared.unwrap_or(Err(IndexRefusal::TableGone)))
    }

    fn drop_index(&self, name: &str) -> Result<bool, StorageError> {
        let dropped = self.change_catalog(true, |catalog, tx| {
            let Some(id) = catalog.drop_index(name) else {
                return Ok(false);
            };
            // The purger reclaims the entries; the catalog needs no list of its own.
            catalog.dropped.clear();
            tx.execute(DROPPED, &[&(id as i64)])?;
            Ok(true)
        })?;
        Ok(dropped == Some(true))
    }

    fn time_to_live(&self) -> Option<TimeToLive> {
        self.catalog.time_to_live
    }

    /// Waits for the commits under way (the table's lock, exclusively).
    /// Waits for the commits under way (the table's lock, exclusively), so that every commit
    /// after it writes records as the feed now says.
    fn set_settings(&self, change: SettingsChange) -> Result<bool, StorageError> {
        let changed = self.change_catalog(true, |catalog, _| {
            change.apply(catalog);
            Ok(())
        })?;
        Ok(changed.is_some())
    }

    fn set_index_state(&self, index_id: u64, state: IndexState) -> Result<(), StorageError> {
        let recorded =
            self.change_catalog(false, |catalog, _| Ok(catalog.set_state(index_id, state)))?;
        match recorded {
            Some(true) => Ok(()),
            _ => Err(StorageError::IndexGone),
        }
    }

    /// One transaction holding the table (shared) and
    /// the run's partition, as a commit does.
    fn build_index(
        &self,
        index_id: u64,
        from: Option<KeyPosition>,
    ) -> Result<BuildStep, StorageError> {
        let (from_pk, from_rk) = match &from {
            Some(position) => match position.entity_key() {
                Some((pk, rk)) => (pk.to_owned(), rk.to_owned()),
                // Past a partition's rows: the next partition's first row.
                None => (format!("{}\u{1}", position.partition_key), String::new()),
            },
            None => (String::new(), String::new()),
        };
        self.pool.with(|connection| {
            let (client, mut prepared) = connection.parts();
            client.batch_execute(&format!(
                "BEGIN; SELECT pg_advisory_xact_lock_shared({})",
                table_lock(self.id)
            ))?;
            let outcome = self.build_in(client, &mut prepared, index_id, &from_pk, &from_rk);
            match &outcome {
                Ok(BuildStep::Next(_)) => client.batch_execute("COMMIT")?,
                _ => {
                    let _ = client.batch_execute("ROLLBACK");
                }
            }
            outcome
        })
    }

    /// One read-only snapshot, entries joined to
    /// their entities, fetched through a portal.
    fn visit_index(
        &self,
        scan: IndexScan<'_>,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        if scan.range.is_empty() {
            return Ok(None);
        }
        let order = if scan.reverse { "DESC" } else { "ASC" };
        let mut params: Vec<Box<dyn ToSql + Sync>> = vec![
            Box::new(self.id),
            Box::new(scan.index.id as i64),
            Box::new(scan.range.start.clone()),
        ];
        let mut end = "";
        if let Some(limit) = &scan.range.end {
            params.push(Box::new(limit.clone()));
            end = "AND i.sort_key < $4";
        }
        let sql = format!(
            "SELECT e.pk, e.rk, e.record, i.sort_key FROM trestle_index_entries i
             JOIN trestle_entities e ON e.table_id = $1 AND e.pk = i.pk AND e.rk = i.rk
             WHERE i.index_id = $2 AND i.sort_key >= $3 {end}
               AND EXISTS (SELECT 1 FROM trestle_tables WHERE id = $1 AND live)
             ORDER BY i.sort_key {order}"
        );
        self.pool.with(|connection| {
            let (client, mut prepared) = connection.parts();
            let mut snapshot = read_snapshot(client)?;
            let statement = prepared.get(&mut snapshot, &sql)?;
            let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.as_ref()).collect();
            let portal = snapshot.bind(&statement, &refs)?;
            let stopped_at = visit_portal(
                &mut snapshot,
                &portal,
                &mut self.batches(scan.expected_rows),
                visitor,
            )?;
            Ok(stopped_at.map(|at| at.row.get::<_, Vec<u8>>(3)))
        })
    }
}

/// Two of `entries` of a unique index with the same sort key, if any.
fn same_values(entries: &[AddedEntry]) -> Option<(&AddedEntry, &AddedEntry)> {
    let mut sorted: Vec<&AddedEntry> = entries.iter().filter(|a| a.entry.unique).collect();
    sorted.sort_by(|a, b| (&a.entry.sort_key, &a.row_key).cmp(&(&b.entry.sort_key, &b.row_key)));
    sorted
        .windows(2)
        .find(|pair| pair[0].entry.sort_key == pair[1].entry.sort_key)
        .map(|pair| (pair[0], pair[1]))
}

/// The entries of `index` for a run of `rows` (`rk, record`) of partition `partition_key`, and
/// where the build goes on: past the partition, or at the row past [`BUILD_STEP`].
fn entries_of_run(
    index: &Index,
    partition_key: &str,
    rows: &[postgres::Row],
) -> Result<(Vec<AddedEntry>, Option<KeyPosition>), StorageError> {
    let mut next = Some(KeyPosition::after_rows(partition_key));
    let mut entries = Vec::new();
    for (at, row) in rows.iter().enumerate() {
        let row_key = std::str::from_utf8(row.get(0))
            .map_err(|_| StorageError::Corrupt("a stored key is not UTF-8".into()))?;
        if at as i64 == BUILD_STEP {
            next = Some(KeyPosition::row(partition_key, row_key));
            break;
        }
        let entity = EntityView::parse(partition_key, row_key, row.get(1))?;
        for sort_key in entity_sort_keys(index, &entity)? {
            entries.push(AddedEntry {
                entry: IndexEntry {
                    index_id: index.id,
                    sort_key,
                    unique: index.definition.unique,
                },
                operation: 0,
                row_key: row_key.to_owned(),
                index_name: index.definition.name.clone(),
            });
        }
    }
    Ok((entries, next))
}
