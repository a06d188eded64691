//! Join in the client: departments cached once, kept current from the table's change feed, and
//! used to decorate employee lists.

use std::collections::HashMap;

use futures_util::TryStreamExt;

use super::{Department, Employee, Hr, DEPARTMENT_ROW};
use crate::{
    from_properties, Error, ErrorKind, FeedCursor, Filter, Properties, Result, TableClient,
};

/// Join in the client: every department loaded once (one query), kept current by
/// [`DepartmentCache::catch_up`] from the change feed (only the departments that changed are
/// read again), and used to decorate employee lists without a read per employee.
#[derive(Debug, Clone)]
pub struct DepartmentCache {
    table: TableClient,
    departments: HashMap<String, Department>,
    /// Where the cache is in the change feed: every change after it is yet to be applied.
    cursor: FeedCursor,
}

impl DepartmentCache {
    /// Loads every department, noting the feed's place first (a change made meanwhile is applied
    /// again by the next catch-up: harmless).
    pub async fn load(hr: &Hr) -> Result<DepartmentCache> {
        let cursor = hr.table.changes().cursor_now().await?;
        let mut cache = DepartmentCache {
            table: hr.table.clone(),
            departments: HashMap::new(),
            cursor,
        };
        cache.refresh().await?;
        Ok(cache)
    }

    /// Applies the changes made since the last load or catch-up: each department whose row
    /// changed is read again (or dropped, if deleted); how many.
    pub async fn catch_up(&mut self) -> Result<usize> {
        let mut changes = self
            .table
            .changes()
            .from(self.cursor.clone())
            // Rows of every kind change: each is decoded only if it is a department.
            .stream::<Properties>();
        let mut changed = 0;
        while let Some(change) = changes.try_next().await? {
            self.cursor = change.cursor;
            if change.key.row_key != DEPARTMENT_ROW {
                continue;
            }
            changed += 1;
            match change.entity {
                Some(department) => {
                    let department = from_properties::<Department>(department.value.0)
                        .map_err(|e| Error::new(ErrorKind::Mapping, e.to_string()))?;
                    self.departments
                        .insert(change.key.partition_key, department);
                }
                None => {
                    self.departments.remove(&change.key.partition_key);
                }
            }
        }
        Ok(changed)
    }

    /// Reloads every department.
    pub async fn refresh(&mut self) -> Result<()> {
        let rows = self
            .table
            .query::<Department>()
            .filter(Filter::eq("RowKey", DEPARTMENT_ROW))
            .all()
            .await?;
        self.departments = rows
            .into_iter()
            .map(|row| (row.key.partition_key, row.value))
            .collect();
        Ok(())
    }

    /// A department by id, from the cache.
    pub fn get(&self, department_id: &str) -> Option<&Department> {
        self.departments.get(department_id)
    }

    /// Pairs each employee with its department, from the cache.
    pub fn decorate<'a>(
        &'a self,
        department_id: &str,
        employees: &'a [Employee],
    ) -> Vec<(&'a Employee, Option<&'a Department>)> {
        let department = self.get(department_id);
        employees
            .iter()
            .map(|employee| (employee, department))
            .collect()
    }
}
