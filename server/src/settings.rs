//! The settings the engine keeps beside the tables, in the store's settings: the service's
//! properties (CORS rules) and each table's stored access policies. Both are small records read
//! whole and replaced whole; the last write wins, as on Azure.

use crate::engine::Engine;
use crate::error::TableError;
use crate::model::{
    decode_policies, encode_policies, validate_policies, AccessPolicy, Index, ServiceProperties,
    TableName,
};
use crate::storage::StorageError;

/// The setting that holds the service's properties.
const SERVICE_PROPERTIES: &str = "service_properties";

/// The setting that holds the policies of the table whose incarnation is `table_id` (a table
/// deleted and created again starts with none).
fn policies_setting(table_id: u64) -> String {
    format!("access_policies.{table_id}")
}

/// A table as `GetTable` describes it.
#[derive(Debug)]
pub struct TableDescription {
    /// Its name as created.
    pub name: TableName,
    /// Its declared indexes and their states.
    pub indexes: Vec<Index>,
    /// Its stored access policies.
    pub access_policies: Vec<AccessPolicy>,
    /// Its change feed, if it keeps one.
    pub change_feed: Option<crate::model::ChangeFeed>,
    /// When its entities expire, if they do.
    pub time_to_live: Option<crate::model::TimeToLive>,
}

fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt(format!("the stored {what} cannot be read"))
}

impl Engine {
    /// The service's properties: none set (no CORS rules) until [`Engine::set_service_properties`].
    pub fn service_properties(&self) -> Result<ServiceProperties, TableError> {
        match self.store().setting(SERVICE_PROPERTIES)? {
            None => Ok(ServiceProperties::default()),
            Some(record) => {
                Ok(ServiceProperties::decode(&record)
                    .ok_or_else(|| corrupt("service properties"))?)
            }
        }
    }

    /// Replaces the service's properties, checked; durable when it returns.
    pub fn set_service_properties(&self, properties: &ServiceProperties) -> Result<(), TableError> {
        properties.validate()?;
        let record = properties.encode();
        Ok(self
            .store()
            .put_setting(SERVICE_PROPERTIES, Some(&record))?)
    }

    /// The stored access policies of table `table`.
    pub fn access_policies(&self, table: &str) -> Result<Vec<AccessPolicy>, TableError> {
        Ok(self.table_policies(self.table_id(table)?)?)
    }

    /// Table `name` as created, its indexes with their states, and its stored access policies
    /// (what `GetTable` answers), from one lookup of the table.
    pub fn describe_table(&self, name: &str) -> Result<TableDescription, TableError> {
        let table = self.table(name)?;
        let catalog = table.indexes()?;
        Ok(TableDescription {
            name: table.name().clone(),
            indexes: catalog.indexes,
            access_policies: self.table_policies(table.id())?,
            change_feed: catalog.change_feed,
            time_to_live: catalog.time_to_live,
        })
    }

    /// The stored access policies of the table whose id is `table_id` (none if it has none, or
    /// is deleted).
    pub fn table_policies(&self, table_id: u64) -> Result<Vec<AccessPolicy>, StorageError> {
        match self.store().setting(&policies_setting(table_id))? {
            None => Ok(Vec::new()),
            Some(record) => decode_policies(&record).ok_or_else(|| corrupt("access policies")),
        }
    }

    /// Replaces the stored access policies of table `table`, checked (and their permissions put
    /// in Azure's order); durable when it returns. A signature naming a policy no longer there,
    /// or one whose fields changed, is refused from then on.
    pub fn set_access_policies(
        &self,
        table: &str,
        mut policies: Vec<AccessPolicy>,
    ) -> Result<(), TableError> {
        validate_policies(&mut policies)?;
        let setting = policies_setting(self.table_id(table)?);
        let record = (!policies.is_empty()).then(|| encode_policies(&policies));
        Ok(self.store().put_setting(&setting, record.as_deref())?)
    }

    /// Forgets the policies of a deleted table's incarnation `table_id`.
    pub(crate) fn forget_access_policies(&self, table_id: u64) -> Result<(), TableError> {
        Ok(self
            .store()
            .put_setting(&policies_setting(table_id), None)?)
    }
}
