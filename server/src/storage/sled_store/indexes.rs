//! Declared indexes in the sled store: entries in the table's own tree (`key::index_entry`),
//! written by the commit that writes their entities; unique values claimed under striped locks, so
//! that two partitions never both take one; builds a partition run at a time; reclamation of
//! dropped indexes.
//!
//! A commit of several entities writes their entries under the same undo record, so that a crash
//! leaves all or none. A commit of one entity needs no undo record: it adds the new entries, then
//! writes the entity, then removes the old entries, so that at every instant the entity's values
//! have their entries, and a crash can leave only entries that no entity's values match. Readers
//! check each entry against its entity and skip such an entry; a unique value whose entry names
//! an entity that does not hold it is free.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::key;
use super::table::SledTable;
use super::undo::RowChange;
use super::{EntityView, Rejection, StorageError};
use crate::model::{
    successor_of_prefix, CommitPlan, EntityKey, Index, IndexDefinition, IndexState, KeyPosition,
    KeyRange, TimeToLive,
};
use crate::storage::{
    entity_sort_keys, BuildStep, IndexCatalog, IndexRefusal, IndexScan, Indexed, SettingsChange,
    Visit, Visitor,
};

/// Entities one build step reads (all of one partition).
const BUILD_STEP: usize = 1_000;
/// Stripes of the locks that claim unique values.
const CLAIM_STRIPES: usize = 64;

/// Striped locks under which a commit checks that a unique value is free and writes its entry:
/// commits of different partitions adding one value serialise here, and the second finds it
/// taken.
#[derive(Debug)]
pub(super) struct UniqueClaims {
    stripes: Vec<Mutex<()>>,
}

impl Default for UniqueClaims {
    fn default() -> Self {
        UniqueClaims {
            stripes: (0..CLAIM_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

/// Held claims on unique values.
pub(super) type Claims<'a> = Vec<MutexGuard<'a, ()>>;

impl UniqueClaims {
    /// Holds the stripes of `entries` (index id, sort key), in stripe order (no deadlock).
    pub(super) fn hold<'k>(&self, entries: impl Iterator<Item = (u64, &'k [u8])>) -> Claims<'_> {
        let mut stripes: Vec<usize> = entries
            .map(|(index_id, sort_key)| {
                let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
                for byte in index_id.to_be_bytes().iter().chain(sort_key) {
                    hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
                }
                (hash % CLAIM_STRIPES as u64) as usize
            })
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|stripe| {
                self.stripes[stripe]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            })
            .collect()
    }
}

/// The keys of the index entries `plan` removes.
pub(super) fn released_entries(plan: &CommitPlan) -> Vec<Vec<u8>> {
    plan.removed_entries
        .iter()
        .map(|entry| key::index_entry(entry.index_id, &entry.sort_key))
        .collect()
}

impl SledTable {
    /// Changes a setting the table's commits read from its catalog (`change`), behind the
    /// table's gate (so that every commit after this returns sees it); `false` if the table is
    /// gone.
    fn change_settings(
        &self,
        change: impl FnOnce(&mut IndexCatalog),
    ) -> Result<bool, StorageError> {
        let _serial = self
            .index_catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(_gate) = self.gate() else {
            return Ok(false);
        };
        let mut catalog = (*self.index_catalog()).clone();
        change(&mut catalog);
        self.store_catalog(catalog)?;
        Ok(true)
    }

    /// The table's indexes now.
    pub(super) fn index_catalog(&self) -> Arc<IndexCatalog> {
        self.indexes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes `catalog` durably and makes it the table's (under `index_catalog_writes`).
    fn store_catalog(&self, catalog: IndexCatalog) -> Result<(), StorageError> {
        let applying = self.shared.applying([]);
        self.tree.insert(key::INDEX_CATALOG, catalog.encode())?;
        applying.wait_durable()?;
        *self.indexes.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(catalog);
        Ok(())
    }

    /// Writes the catalog of a new table, before it is visible.
    pub(super) fn declare_at_creation(
        &self,
        definitions: &[IndexDefinition],
        settings: SettingsChange,
    ) -> Result<(), StorageError> {
        let mut catalog = IndexCatalog::default();
        settings.apply(&mut catalog);
        for definition in definitions {
            let id = self.shared.db.generate_id()?;
            catalog
                .declare(id, definition.clone(), IndexState::Ready)
                .map_err(|refusal| {
                    StorageError::Corrupt(format!("unchecked index definitions: {refusal:?}"))
                })?;
        }
        if catalog != IndexCatalog::default() {
            self.tree.insert(key::INDEX_CATALOG, catalog.encode())?;
            *self.indexes.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(catalog);
        }
        Ok(())
    }

    /// The rows `plan`'s index entries change; or the operation refused because a unique index
    /// of `catalog` holds its value for an entity of another partition (one whose entry
    /// `released_elsewhere`, entries other partitions of the same commit give up, does not name).
    /// The caller holds the claims on the unique values the plan adds ([`CommitPlan::unique_values_added`]). The
    /// rows' before images (for an undo record) are read only with `before_images`.
    pub(super) fn entry_changes(
        &self,
        catalog: &IndexCatalog,
        partition_key: &str,
        plan: &CommitPlan,
        before_images: bool,
        released_elsewhere: &[Vec<u8>],
    ) -> Result<Result<Vec<RowChange>, Rejection>, StorageError> {
        let released = released_entries(plan);
        let mut rows = Vec::with_capacity(released.len() + plan.added_entries.len());
        for added in &plan.added_entries {
            let entry = &added.entry;
            let entry_key = key::index_entry(entry.index_id, &entry.sort_key);
            let entity_key = key::encode(partition_key, &added.row_key);
            let before = match before_images || entry.unique {
                true => self.tree.get(&entry_key)?,
                false => None,
            };
            if let Some(holder) = before.as_deref() {
                if entry.unique
                    && holder != entity_key
                    && !released.contains(&entry_key)
                    && !released_elsewhere.contains(&entry_key)
                    && self.holds(catalog, entry.index_id, &entry.sort_key, holder)?
                {
                    let (partition_key, row_key) = key::split(holder)?;
                    let holder = EntityKey {
                        partition_key: partition_key.to_owned(),
                        row_key: row_key.to_owned(),
                    };
                    return Ok(Err(added.taken_by(holder).into()));
                }
            }
            rows.push(RowChange {
                key: entry_key,
                after: Some(entity_key),
                before,
            });
        }
        for entry_key in released {
            // An entry another entity of the commit takes over is only written, once.
            if rows.iter().any(|row| row.key == entry_key) {
                continue;
            }
            let before = match before_images {
                true => self.tree.get(&entry_key)?,
                false => None,
            };
            rows.push(RowChange {
                key: entry_key,
                after: None,
                before,
            });
        }
        Ok(Ok(rows))
    }

    /// Whether the entity `holder` (an encoded key) has the values of `sort_key` in index
    /// `index_id`: an entry a crash left behind names an entity that does not.
    fn holds(
        &self,
        catalog: &IndexCatalog,
        index_id: u64,
        sort_key: &[u8],
        holder: &[u8],
    ) -> Result<bool, StorageError> {
        let Some(index) = catalog.indexes.iter().find(|index| index.id == index_id) else {
            return Ok(false);
        };
        let Some(value) = self.tree.get(holder)? else {
            return Ok(false);
        };
        let (partition_key, row_key) = key::split(holder)?;
        let entity = EntityView::parse(partition_key, row_key, &value)?;
        Ok(entity_sort_keys(index, &entity)?
            .iter()
            .any(|key| key == sort_key))
    }

    /// Writes one entity's row and its entries without an undo record: new entries first, the
    /// entity, then the entries it no longer has (see the module's account of crash safety).
    pub(super) fn apply_one_with_entries(
        &self,
        entity: RowChange,
        entries: Vec<RowChange>,
    ) -> Result<(), StorageError> {
        let (added, removed): (Vec<_>, Vec<_>) =
            entries.into_iter().partition(|row| row.after.is_some());
        for row in added {
            row.write(&self.tree)?;
        }
        entity.write(&self.tree)?;
        for row in removed {
            row.write(&self.tree)?;
        }
        Ok(())
    }

    /// Removes the entries of dropped index `index_id` on a thread of its own. (The id stays in
    /// the catalog's `dropped` list, so that a reclamation a crash cut short starts again at the
    /// next open; the list is pruned of reclaimed ids then.)
    pub(super) fn reclaim_in_background(&self, index_id: u64) {
        let tree = self.tree.clone();
        let spawned = std::thread::Builder::new()
            .name("trestle-index-reclaim".into())
            .spawn(move || {
                let prefix = key::index_prefix(index_id);
                let mut removed = 0u64;
                for item in tree.scan_prefix(&prefix).keys() {
                    match item.and_then(|key| tree.remove(key)) {
                        Ok(_) => removed += 1,
                        Err(error) => {
                            tracing::warn!(%error, index_id, "reclaiming a dropped index stopped; it resumes at the next start");
                            return;
                        }
                    }
                }
                tracing::info!(index_id, entries = removed, "a dropped index is reclaimed");
            });
        if let Err(error) = spawned {
            tracing::error!(%error, index_id, "cannot start reclaiming a dropped index");
        }
    }

    /// At open: reclaims dropped indexes again, and forgets those with no entry left.
    pub(super) fn resume_reclaims(&self) -> Result<(), StorageError> {
        let catalog = self.index_catalog();
        if catalog.dropped.is_empty() {
            return Ok(());
        }
        let _serial = self
            .index_catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut pruned = (*catalog).clone();
        pruned.dropped.clear();
        for &index_id in &catalog.dropped {
            if self
                .tree
                .scan_prefix(key::index_prefix(index_id))
                .next()
                .is_some()
            {
                pruned.dropped.push(index_id);
                self.reclaim_in_background(index_id);
            }
        }
        self.store_catalog(pruned)
    }
}

impl Indexed for SledTable {
    fn indexes(&self) -> Result<IndexCatalog, StorageError> {
        Ok((*self.index_catalog()).clone())
    }

    fn create_index(
        &self,
        definition: IndexDefinition,
    ) -> Result<Result<Index, IndexRefusal>, StorageError> {
        let _serial = self
            .index_catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(_gate) = self.gate() else {
            return Ok(Err(IndexRefusal::TableGone));
        };
        self.shared.space.check()?;
        let mut catalog = (*self.index_catalog()).clone();
        let id = self.shared.db.generate_id()?;
        let index = match catalog.declare(id, definition, IndexState::Building) {
            Ok(index) => index,
            Err(refusal) => return Ok(Err(refusal)),
        };
        self.store_catalog(catalog)?;
        Ok(Ok(index))
    }

    fn drop_index(&self, name: &str) -> Result<bool, StorageError> {
        let _serial = self
            .index_catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut catalog = (*self.index_catalog()).clone();
        let Some(index_id) = catalog.drop_index(name) else {
            return Ok(false);
        };
        self.store_catalog(catalog)?;
        self.reclaim_in_background(index_id);
        Ok(true)
    }

    fn build_index(
        &self,
        index_id: u64,
        from: Option<KeyPosition>,
    ) -> Result<BuildStep, StorageError> {
        let Some(_gate) = self.gate() else {
            return Err(StorageError::IndexGone);
        };
        let range = match from {
            Some(from) => KeyRange {
                start: std::ops::Bound::Included(from),
                end: std::ops::Bound::Unbounded,
            },
            None => KeyRange::all(),
        };
        let mut first = None;
        self.visit_range(&range, false, &mut |entity| {
            first = Some(entity.partition_key.to_owned());
            Ok(Visit::Stop)
        })?;
        let Some(partition_key) = first else {
            return Ok(BuildStep::Next(None));
        };
        let _partition = self.shared.locks.lock(self.id, partition_key.as_bytes());
        let _serial = self
            .index_catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let catalog = self.index_catalog();
        let Some(index) = catalog.indexes.iter().find(|index| index.id == index_id) else {
            return Err(StorageError::IndexGone);
        };
        let mut entries = Vec::new();
        let mut next = Some(KeyPosition::after_rows(partition_key.as_str()));
        for item in self
            .tree
            .range(key::bounds(&range.within_partition(&partition_key)))
        {
            let (entity_key, value) = item?;
            let (pk, rk) = key::split(&entity_key)?;
            if entries.len() == BUILD_STEP {
                next = Some(KeyPosition::row(pk, rk));
                break;
            }
            let entity = EntityView::parse(pk, rk, &value)?;
            for sort_key in entity_sort_keys(index, &entity)? {
                entries.push((sort_key, entity_key.to_vec()));
            }
        }
        let _claims = self.shared.claims.hold(
            entries
                .iter()
                .filter(|_| index.definition.unique)
                .map(|(sort_key, _)| (index_id, sort_key.as_slice())),
        );
        for (sort_key, entity_key) in entries {
            let entry_key = key::index_entry(index_id, &sort_key);
            if index.definition.unique {
                if let Some(holder) = self.tree.get(&entry_key)? {
                    if *holder != *entity_key
                        && self.holds(&catalog, index_id, &sort_key, &holder)?
                    {
                        let (a, b) = (key::split(&holder)?, key::split(&entity_key)?);
                        return Ok(BuildStep::Conflict(format!(
                            "entities (PartitionKey {:?}, RowKey {:?}) and ({:?}, {:?}) have the same values",
                            a.0, a.1, b.0, b.1
                        )));
                    }
                }
            }
            self.tree.insert(entry_key, entity_key)?;
        }
        Ok(BuildStep::Next(next))
    }

    fn time_to_live(&self) -> Option<TimeToLive> {
        self.index_catalog().time_to_live
    }

    fn set_settings(&self, change: SettingsChange) -> Result<bool, StorageError> {
        self.change_settings(|catalog| change.apply(catalog))
    }

    fn set_index_state(&self, index_id: u64, state: IndexState) -> Result<(), StorageError> {
        let _serial = self
            .index_catalog_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut catalog = (*self.index_catalog()).clone();
        if !catalog.set_state(index_id, state) {
            return Err(StorageError::IndexGone);
        }
        self.store_catalog(catalog)
    }

    /// Each entity is read after its entry, once no
    /// commit is writing its partition, and visited only if its values are still the entry's.
    fn visit_index(
        &self,
        scan: IndexScan<'_>,
        visitor: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(_gate) = self.gate() else {
            return Ok(None);
        };
        let IndexScan {
            index,
            range,
            reverse,
            expected_rows: _,
        } = scan;
        if range.is_empty() {
            return Ok(None);
        }
        let prefix = key::index_prefix(index.id);
        let start = key::index_entry(index.id, &range.start);
        let end = match &range.end {
            Some(end) => key::index_entry(index.id, end),
            None => successor_of_prefix(&prefix).expect("an index prefix has a successor"),
        };
        let entries = self.tree.range(start..end);
        let entries: Box<dyn Iterator<Item = _>> = if reverse {
            Box::new(entries.rev())
        } else {
            Box::new(entries)
        };
        for item in entries {
            let (entry_key, entity_key) = item?;
            let sort_key = &entry_key[prefix.len()..];
            let (partition_key, row_key) = key::split(&entity_key)?;
            self.shared
                .locks
                .wait_for_writer(self.id, partition_key.as_bytes());
            let Some(value) = self.tree.get(&entity_key)? else {
                continue;
            };
            let entity = EntityView::parse(partition_key, row_key, &value)?;
            if !entity_sort_keys(index, &entity)?
                .iter()
                .any(|key| key == sort_key)
            {
                continue;
            }
            if visitor(&entity)? == Visit::Stop {
                return Ok(Some(sort_key.to_vec()));
            }
        }
        Ok(None)
    }
}

/// Starts the builds a crash or a stop interrupted and the reclaims of dropped indexes, for a
/// table the store just opened.
pub(super) fn resume(table: &Arc<SledTable>) -> Result<(), StorageError> {
    table.resume_reclaims()?;
    for index in &table.index_catalog().indexes {
        if index.state == IndexState::Building {
            crate::storage::build_in_background(table.clone(), index.id);
        }
    }
    Ok(())
}
