//! Aggregates computed by the server (`AggregateEntities`): counts, sums, averages, minimums and
//! maximums over a query's matches, optionally per group, without sending the entities.

use serde::de::DeserializeOwned;
use trestle_proto::pb;

use crate::client::Client;
use crate::convert::value_from_pb;
use crate::error::{Error, ErrorKind, Result};
use crate::mapping::from_properties;
use crate::query::{Filter, Query};
use crate::value::{Properties, Value};

/// An aggregate over a query's matches. Build it from [`crate::TableClient::aggregate`] (or
/// [`Query::aggregate`]), add aggregations and `group_by` paths, then [`run`] it into rows of
/// your own type, each column by its name: a `group_by` path as written, an aggregation as
/// `count`, `count_<path>`, `sum_<path>`, `avg_<path>`, `min_<path>` or `max_<path>` (a path's
/// `/` written `_`) unless [`alias`] names it, and `entities`, the group's entities. A missing
/// group key or an aggregation of nothing is null (an `Option` field). [`groups`] answers the
/// same positionally.
///
/// ```
/// # async fn example(orders: trestle_client::TableClient) -> trestle_client::Result<()> {
/// use trestle_client::Filter;
///
/// #[derive(serde::Deserialize)]
/// struct Row {
///     #[serde(rename = "Region")]
///     region: Option<String>,
///     total: Option<i64>,
///     entities: u64,
/// }
///
/// let by_region = orders
///     .aggregate()
///     .partition("2026-12")
///     .filter(Filter::eq("Status", "paid"))
///     .sum("Amount")
///     .alias("total")
///     .group_by("Region")
///     .run::<Row>()
///     .await?;
/// for row in by_region {
///     println!("{:?}: {:?} in {} orders", row.region, row.total, row.entities);
/// }
/// # Ok(()) }
/// ```
///
/// [`run`]: Aggregate::run
/// [`alias`]: Aggregate::alias
/// [`groups`]: Aggregate::groups
#[derive(Debug, Clone)]
#[must_use]
pub struct Aggregate {
    query: Query<Properties>,
    aggregations: Vec<pb::Aggregation>,
    group_by: Vec<String>,
    /// Each aggregation's column name, in their order.
    names: Vec<String>,
}

/// One group of an aggregate's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateGroup {
    /// The values of the `group_by` paths, in their order ([`Value::Null`] where missing).
    pub keys: Vec<Value>,
    /// Each aggregation's result, in the order they were added ([`Value::Null`] where none).
    pub values: Vec<Value>,
    /// The entities in the group.
    pub entities: u64,
}

impl Aggregate {
    pub(crate) fn new(query: Query<Properties>) -> Aggregate {
        Aggregate {
            query,
            aggregations: Vec::new(),
            group_by: Vec::new(),
            names: Vec::new(),
        }
    }

    /// Only this partition ([`Query::partition`]).
    pub fn partition(mut self, partition_key: impl Into<String>) -> Self {
        self.query = self.query.partition(partition_key);
        self
    }

    /// Only entities matching `filter` ([`Query::filter`]).
    pub fn filter(mut self, filter: Filter) -> Self {
        self.query = self.query.filter(filter);
        self
    }

    fn with(mut self, function: pb::AggregateFunction, path: &str) -> Self {
        let function_name = match function {
            pb::AggregateFunction::Sum => "sum",
            pb::AggregateFunction::Avg => "avg",
            pb::AggregateFunction::Min => "min",
            pb::AggregateFunction::Max => "max",
            pb::AggregateFunction::Count | pb::AggregateFunction::Unspecified => "count",
        };
        self.names.push(match path {
            "" => function_name.to_owned(),
            path => format!("{function_name}_{}", path.replace('/', "_")),
        });
        self.aggregations.push(pb::Aggregation {
            function: function as i32,
            path: path.to_owned(),
        });
        self
    }

    /// Names the column of the aggregation added last, for [`Aggregate::run`]'s rows.
    pub fn alias(mut self, name: impl Into<String>) -> Self {
        if let Some(last) = self.names.last_mut() {
            *last = name.into();
        }
        self
    }

    /// The number of entities (an `Int64`).
    pub fn count(self) -> Self {
        self.with(pb::AggregateFunction::Count, "")
    }

    /// The number of entities with a value at `path`.
    pub fn count_of(self, path: &str) -> Self {
        self.with(pb::AggregateFunction::Count, path)
    }

    /// The sum of the numbers at `path`: an `Int64` for integers, a `Double` once any is one.
    pub fn sum(self, path: &str) -> Self {
        self.with(pb::AggregateFunction::Sum, path)
    }

    /// The average of the numbers at `path`, a `Double`.
    pub fn avg(self, path: &str) -> Self {
        self.with(pb::AggregateFunction::Avg, path)
    }

    /// The least value at `path` (numbers by value, other types as indexes order them).
    pub fn min(self, path: &str) -> Self {
        self.with(pb::AggregateFunction::Min, path)
    }

    /// The greatest value at `path`.
    pub fn max(self, path: &str) -> Self {
        self.with(pb::AggregateFunction::Max, path)
    }

    /// One answer per distinct value at `path` (and at the other group_by paths).
    pub fn group_by(mut self, path: impl Into<String>) -> Self {
        self.group_by.push(path.into());
        self
    }

    /// Asks the server: each group as a `Row` (a struct, a map or [`Properties`]) of the columns
    /// [`Aggregate`] names, in the order of the groups' keys. Two columns of one name, or a group
    /// that does not decode as `Row`, is an error naming it.
    pub async fn run<Row: DeserializeOwned>(&self) -> Result<Vec<Row>> {
        let mut columns: Vec<&str> = self.group_by.iter().map(String::as_str).collect();
        columns.extend(self.names.iter().map(String::as_str));
        columns.push("entities");
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = columns.iter().find(|name| !seen.insert(**name)) {
            let why = format!("two columns of the aggregate are named {twice:?}: alias one");
            return Err(Error::invalid(why));
        }
        self.groups()
            .await?
            .into_iter()
            .map(|group| {
                let entities = i64::try_from(group.entities).unwrap_or(i64::MAX);
                let cells = group.keys.into_iter().chain(group.values);
                let row = columns
                    .iter()
                    .map(|name| (*name).to_owned())
                    .zip(cells.chain([Value::Int64(entities)]))
                    .collect();
                from_properties(row).map_err(|error| {
                    let type_name = std::any::type_name::<Row>();
                    let why = format!(
                        "an aggregate's group does not decode as {type_name}: {}",
                        error.0
                    );
                    Error::new(ErrorKind::Mapping, why)
                })
            })
            .collect()
    }

    /// Asks the server: the groups, in the order of their keys, each with its keys and values in
    /// the order they were added. A long aggregate takes several calls (the server examines a
    /// bounded number of entities a call and carries the groups so far in a continuation token):
    /// this sends each token back until the answer comes.
    pub async fn groups(&self) -> Result<Vec<AggregateGroup>> {
        let mut query = self.query.request().clone();
        let client: &Client = self.query.client();
        let answer = loop {
            let request = pb::AggregateEntitiesRequest {
                query: Some(query.clone()),
                aggregations: self.aggregations.clone(),
                group_by: self.group_by.clone(),
            };
            let answer = client
                .read(
                    request,
                    |mut c, r| async move { c.aggregate_entities(r).await },
                )
                .await?;
            match answer.continuation_token.is_empty() {
                true => break answer,
                false => query.continuation_token = answer.continuation_token,
            }
        };
        answer
            .groups
            .into_iter()
            .map(|group| {
                let values = |values: Vec<pb::Value>| -> Result<Vec<Value>> {
                    values
                        .into_iter()
                        .map(|value| value_from_pb("aggregate", value))
                        .collect()
                };
                Ok(AggregateGroup {
                    keys: values(group.keys)?,
                    values: values(group.values)?,
                    entities: group.entities,
                })
            })
            .collect()
    }
}
