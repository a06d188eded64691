//! The PostgreSQL store's awaited calls ([`AwaitedCalls`]): a point read (`point_reads.rs`), a
//! read of many keys across tables and a page of a query by key (`snapshot.rs`), each over a
//! connection of the awaited pool (`awaited_pool.rs`). Commits are awaited too, by the store's one
//! apply (`commit.rs`).

use std::sync::Arc;

use super::many_keys::{ManyKeys, ManyRow, GET_MANY};
use super::{named_entity, PostgresStore};
use crate::model::{EntityKey, TableName, TimeToLive};
use crate::storage::{
    AwaitedCalls, AwaitedFoundVisitor, AwaitedGetVisitor, AwaitedSnapshot, EntityView,
    IndexCatalog, StoreFuture, Table, TableKey, TableSnapshot,
};

impl AwaitedCalls for PostgresStore {
    /// One statement, as [`crate::storage::Store::get_named`].
    fn get_named<'a>(
        &'a self,
        name: &'a TableName,
        key: &'a EntityKey,
        read: &'a mut AwaitedGetVisitor<'_>,
    ) -> StoreFuture<'a, Option<bool>> {
        Box::pin(async move {
            let asked = TableKey {
                table: name.clone(),
                key: key.clone(),
            };
            let row = self.point_reads.send(&self.awaited, asked).await??;
            let (catalog, record) = ManyRow::found(&row);
            named_entity(catalog.map(|catalog| (catalog, record)), key, read)
        })
    }

    /// One statement, as [`crate::storage::Store::get_many`], which also reads the tables'
    /// catalogs.
    fn get_many_named<'a>(
        &'a self,
        keys: &'a [TableKey],
        found: &'a mut AwaitedFoundVisitor<'_>,
    ) -> StoreFuture<'a, Option<usize>> {
        Box::pin(async move {
            let asked = ManyKeys::of(keys);
            let rows = self.awaited.query(GET_MANY, &asked.params()).await?;
            let rows = rows
                .iter()
                .map(|row| ManyRow::of(row, keys.len()))
                .collect::<Result<Vec<_>, _>>()?;
            let missing = rows.iter().filter(|row| row.catalog.is_none());
            if let Some(first) = missing.map(|row| row.position).min() {
                return Ok(Some(first));
            }
            // Each distinct catalog decoded once (the keys of a read are of few tables).
            let mut rules: Vec<(&[u8], Option<TimeToLive>)> = Vec::new();
            for row in rows {
                let (Some(catalog), Some(record)) = (row.catalog, row.record) else {
                    continue;
                };
                let ttl = match rules.iter().find(|(stored, _)| *stored == catalog) {
                    Some((_, ttl)) => *ttl,
                    None => {
                        let ttl = IndexCatalog::decode(catalog)?.time_to_live;
                        rules.push((catalog, ttl));
                        ttl
                    }
                };
                let key = &keys[row.position].key;
                let entity = EntityView::parse(&key.partition_key, &key.row_key, record)?;
                found(row.position, ttl, entity)?;
            }
            Ok(None)
        })
    }

    /// A read-only transaction begun in one round trip with the table's lookup (`snapshot.rs`).
    fn read_snapshot<'s: 'a, 'a>(
        &'s self,
        name: &'a TableName,
    ) -> StoreFuture<'a, Option<TableSnapshot<'s>>> {
        Box::pin(async move {
            let (snapshot, table) = self.open_snapshot(Some(name)).await?;
            Ok(table.map(|table| (table as Arc<dyn Table>, Box::new(snapshot) as _)))
        })
    }

    /// A read-only transaction begun in one round trip (`snapshot.rs`).
    fn begin_snapshot(&self) -> StoreFuture<'_, Box<dyn AwaitedSnapshot + '_>> {
        Box::pin(async move {
            let (snapshot, _) = self.open_snapshot(None).await?;
            Ok(Box::new(snapshot) as _)
        })
    }
}
