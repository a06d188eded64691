//! Queries: what a `QueryEntities` request asks for, the key range it covers, and the opaque
//! continuation tokens of its pages.

pub mod aggregate;
pub mod filter;
pub mod index_plan;
pub mod order;
mod paths;
pub mod plan;
mod token;

pub use filter::{Expr, Record};
pub use index_plan::index_range;
pub use plan::{plan, PlanKind, ScanPlan};
pub use token::{CarryingToken, ContinuationToken, ResumeAt, TablesToken, TokenSeal};

use crate::model::{
    quoted, validate_key, validate_selected_name, KeyKind, ValidationError, MAX_PAGE_SIZE,
};
use crate::model::{KeyRange, Segment, Spend, WorkBudget};
use order::OrderBy;

/// A validated entity query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuerySpec {
    /// Only this partition, when set.
    pub partition_key: Option<String>,
    /// Smallest row key (inclusive); empty = unbounded.
    pub row_key_start: String,
    /// Row-key upper bound (exclusive); empty = unbounded.
    pub row_key_end: String,
    /// Row-key prefix; empty = none.
    pub row_key_prefix: String,
    /// Descending order.
    pub reverse: bool,
    /// Properties to return; empty = all.
    pub select: Vec<String>,
    /// Entities per page (1..=1000).
    pub page_size: u32,
    /// Azure `$filter` text; empty = every entity.
    pub filter: String,
    /// A condition the caller's access imposes (a token's key range), ANDed with the filter by
    /// [`QuerySpec::validate`]; not part of the filter text or its comparison limit.
    pub scope: Option<Expr>,
    /// When the caller stops waiting: the scan stops work and fails with `OperationTimedOut`.
    pub deadline: Option<std::time::Instant>,
    /// The declared index to read in its order; empty = key order.
    pub index: String,
    /// Only the partitions of this segment of the table ([`Segment`]), when set.
    pub segment: Option<Segment>,
    /// The order of the matches; empty = key order (or the index's).
    pub order_by: OrderBy,
}

impl QuerySpec {
    /// Checks the combination of key fields, the page size and the projection, and parses the
    /// filter within `budget` (a query's one evaluation per entity): the query a scan can run.
    pub fn validate(mut self, budget: WorkBudget) -> Result<CheckedQuery, ValidationError> {
        let has_row_bounds = !self.row_key_start.is_empty()
            || !self.row_key_end.is_empty()
            || !self.row_key_prefix.is_empty();
        match &self.partition_key {
            Some(pk) => validate_key(KeyKind::Partition, pk)?,
            None if has_row_bounds => {
                return Err(ValidationError::Argument(
                    "row_key_start, row_key_end and row_key_prefix need partition_key".into(),
                ))
            }
            None => {}
        }
        for bound in [&self.row_key_start, &self.row_key_end, &self.row_key_prefix] {
            validate_key(KeyKind::Row, bound)?;
        }
        if has_row_bounds && !self.index.is_empty() {
            return Err(ValidationError::Argument(
                "row_key_start, row_key_end and row_key_prefix cannot be combined with index: put RowKey conditions in the filter".into(),
            ));
        }
        let has_range = !self.row_key_start.is_empty() || !self.row_key_end.is_empty();
        if !self.row_key_prefix.is_empty() && has_range {
            return Err(ValidationError::Argument(
                "row_key_prefix cannot be combined with row_key_start or row_key_end".into(),
            ));
        }
        if self.reverse && !self.order_by.is_empty() {
            return Err(ValidationError::Argument(
                "reverse cannot be combined with order_by: make its terms descending".into(),
            ));
        }
        self.page_size = page_size(self.page_size)?;
        let mut filter = match self.filter.trim().is_empty() {
            true => None,
            false => Some(parse_filter(&self.filter, &mut budget.spend())?),
        };
        if let Some(scope) = self.scope.take() {
            filter = Some(match filter {
                Some(filter) => Expr::And(Box::new(scope), Box::new(filter)),
                None => scope,
            });
        }
        self.select = validate_select(self.select)?;
        Ok(CheckedQuery { spec: self, filter })
    }

    /// The key range the query's key fields cover.
    pub fn key_range(&self) -> KeyRange {
        match &self.partition_key {
            None => KeyRange::all(),
            Some(pk) if !self.row_key_prefix.is_empty() => {
                KeyRange::row_prefix(pk, &self.row_key_prefix)
            }
            Some(pk) => KeyRange::rows(pk, &self.row_key_start, &self.row_key_end),
        }
    }

    /// A fingerprint of everything that decides which entities the query returns, so a
    /// continuation token only resumes the query it came from.
    pub fn shape(&self) -> u64 {
        let mut hash = Fnv1a::default();
        match &self.partition_key {
            Some(pk) => hash.field(&[1]).field(pk.as_bytes()),
            None => hash.field(&[0]),
        };
        hash.field(self.row_key_start.as_bytes())
            .field(self.row_key_end.as_bytes())
            .field(self.row_key_prefix.as_bytes())
            .field(&[u8::from(self.reverse)])
            .field(self.filter.as_bytes())
            .field(self.index.to_ascii_lowercase().as_bytes());
        if !self.order_by.is_empty() {
            hash.field(&self.order_by.shape_bytes());
        }
        if let Some(segment) = self.segment {
            hash.field(&segment.index().to_le_bytes())
                .field(&segment.total().to_le_bytes());
        }
        hash.0
    }
}

/// A query request as checked by [`QuerySpec::validate`]: only a checked query is planned and run.
#[derive(Debug, Clone)]
pub struct CheckedQuery {
    /// The request, its page size and projection settled.
    pub spec: QuerySpec,
    /// Its filter, parsed, with the caller's scope ANDed in; `None`: every entity.
    pub filter: Option<Expr>,
}

/// Parses the OData filter `filter`, its work charged to the request's `spend`, or says where
/// and why it is invalid.
pub fn parse_filter(filter: &str, spend: &mut Spend) -> Result<Expr, ValidationError> {
    Expr::parse_within(filter, spend).map_err(|error| ValidationError::Filter {
        filter: filter.to_owned(),
        offset: error.offset,
        message: error.message,
    })
}

/// A requested page size: 0 means the maximum, above the maximum is refused.
pub fn page_size(requested: u32) -> Result<u32, ValidationError> {
    match requested {
        0 => Ok(MAX_PAGE_SIZE),
        size if size <= MAX_PAGE_SIZE => Ok(size),
        size => Err(ValidationError::OutOfRange {
            name: "page_size",
            value: i64::from(size),
            min: 1,
            max: i64::from(MAX_PAGE_SIZE),
        }),
    }
}

/// A projection: valid property names (present in the entities or not), without duplicates.
pub fn validate_select(select: Vec<String>) -> Result<Vec<String>, ValidationError> {
    validate_selection(&select)?;
    Ok(select)
}

/// Checks a projection: valid property names (present in the entities or not), no duplicates.
pub fn validate_selection(select: &[String]) -> Result<(), ValidationError> {
    for (i, name) in select.iter().enumerate() {
        validate_selected_name(name).map_err(|error| {
            ValidationError::Argument(format!("select names an invalid property: {error}"))
        })?;
        if select[..i].contains(name) {
            return Err(ValidationError::Argument(format!(
                "select names property {} more than once",
                quoted(name)
            )));
        }
    }
    Ok(())
}

/// 64-bit FNV-1a, length-prefixing each field so that field boundaries count. Stable across
/// releases, unlike `std`'s hasher, so tokens survive a server upgrade.
#[derive(Debug)]
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn field(&mut self, bytes: &[u8]) -> &mut Self {
        for byte in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_distinguishes_queries() {
        let base = QuerySpec {
            partition_key: Some("a".into()),
            ..QuerySpec::default()
        };
        let reversed = QuerySpec {
            reverse: true,
            ..base.clone()
        };
        let other = QuerySpec {
            partition_key: Some("b".into()),
            ..base.clone()
        };
        let moved = QuerySpec {
            partition_key: Some("".into()),
            row_key_start: "a".into(),
            ..base.clone()
        };
        assert_ne!(base.shape(), reversed.shape());
        assert_ne!(base.shape(), other.shape());
        assert_ne!(base.shape(), moved.shape());
        assert_eq!(base.shape(), base.clone().shape());
    }

    #[test]
    fn validation_refuses_bad_combinations() {
        let rows_without_partition = QuerySpec {
            row_key_start: "a".into(),
            ..QuerySpec::default()
        };
        assert!(rows_without_partition
            .validate(WorkBudget::default())
            .is_err());
        let prefix_and_range = QuerySpec {
            partition_key: Some("p".into()),
            row_key_prefix: "a".into(),
            row_key_end: "b".into(),
            ..QuerySpec::default()
        };
        assert!(prefix_and_range.validate(WorkBudget::default()).is_err());
        assert!(QuerySpec {
            page_size: 1001,
            ..QuerySpec::default()
        }
        .validate(WorkBudget::default())
        .is_err());
        assert_eq!(
            QuerySpec::default()
                .validate(WorkBudget::default())
                .unwrap()
                .spec
                .page_size,
            1000
        );
        let duplicate = QuerySpec {
            select: vec!["a".into(), "a".into()],
            ..QuerySpec::default()
        };
        assert!(duplicate.validate(WorkBudget::default()).is_err());
    }
}
