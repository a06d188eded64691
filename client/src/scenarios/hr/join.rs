//! Join in the client: departments cached once and used to decorate employee lists.

use std::collections::HashMap;

use super::{Department, Employee, Hr, DEPARTMENT_ROW};
use crate::{Filter, Result, TableClient};

/// Join in the client: every department loaded once (one query), refreshed on demand, and used to
/// decorate employee lists without a read per employee.
#[derive(Debug, Clone)]
pub struct DepartmentCache {
    table: TableClient,
    departments: HashMap<String, Department>,
}

impl DepartmentCache {
    /// Loads every department.
    pub async fn load(hr: &Hr) -> Result<DepartmentCache> {
        let mut cache = DepartmentCache {
            table: hr.table.clone(),
            departments: HashMap::new(),
        };
        cache.refresh().await?;
        Ok(cache)
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
