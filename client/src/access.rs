//! A table's stored access policies (Azure's table ACL): named permissions and validity windows
//! that the REST endpoint's shared access signatures refer to (`si`) instead of carrying their
//! own, so that changing or removing a policy revokes every signature naming it.

use trestle_proto::pb;

use crate::convert::{timestamp_from_pb, timestamp_to_pb};
use crate::error::Result;
use crate::table::TableClient;
use crate::value::DateTime;

/// One stored access policy of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPolicy {
    /// 1 to 64 characters, unique in the table: what a signature names.
    pub id: String,
    /// When the signatures naming it start to be valid; `None`: each signature says.
    pub start: Option<DateTime>,
    /// When they stop being valid; `None`: each signature says.
    pub expiry: Option<DateTime>,
    /// Letters of `raud` (query, add, update, delete); empty: each signature says.
    pub permissions: String,
}

impl AccessPolicy {
    /// A policy `id` allowing `permissions` (letters of `raud`) until `expiry`.
    pub fn new(id: impl Into<String>, permissions: &str, expiry: DateTime) -> AccessPolicy {
        AccessPolicy {
            id: id.into(),
            start: None,
            expiry: Some(expiry),
            permissions: permissions.to_owned(),
        }
    }

    fn from_wire(policy: pb::AccessPolicy) -> AccessPolicy {
        AccessPolicy {
            id: policy.id,
            start: policy.start.map(timestamp_from_pb),
            expiry: policy.expiry.map(timestamp_from_pb),
            permissions: policy.permissions,
        }
    }

    fn to_wire(&self) -> pb::AccessPolicy {
        pb::AccessPolicy {
            id: self.id.clone(),
            start: self.start.map(timestamp_to_pb),
            expiry: self.expiry.map(timestamp_to_pb),
            permissions: self.permissions.clone(),
        }
    }
}

impl TableClient {
    /// The table's stored access policies.
    pub async fn access_policies(&self) -> Result<Vec<AccessPolicy>> {
        Ok(self
            .describe()
            .await?
            .access_policies
            .into_iter()
            .map(AccessPolicy::from_wire)
            .collect())
    }

    /// Replaces the table's stored access policies (an empty slice removes them all); returns
    /// them as kept (permissions in `raud` order).
    ///
    /// # Errors
    /// `ErrorCode::InvalidInput` for more than 5, an id given twice or of more than 64
    /// characters, permissions other than `raud`, or a start not before the expiry (nothing is
    /// changed then).
    pub async fn set_access_policies(
        &self,
        policies: &[AccessPolicy],
    ) -> Result<Vec<AccessPolicy>> {
        let request = pb::SetTableAccessPoliciesRequest {
            table: self.name().to_owned(),
            access_policies: policies.iter().map(AccessPolicy::to_wire).collect(),
        };
        let kept = self
            .client
            .write(request, |mut c, r| async move {
                c.set_table_access_policies(r).await
            })
            .await?;
        Ok(kept
            .access_policies
            .into_iter()
            .map(AccessPolicy::from_wire)
            .collect())
    }
}
