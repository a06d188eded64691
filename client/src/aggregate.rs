//! Aggregates computed by the server (`AggregateEntities`): counts, sums, averages, minimums and
//! maximums over a query's matches, optionally per group, without sending the entities.

use trestle_proto::pb;

use crate::client::Client;
use crate::convert::value_from_pb;
use crate::error::Result;
use crate::query::{Filter, Query};
use crate::value::{Properties, Value};

/// An aggregate over a query's matches. Build it from [`crate::TableClient::aggregate`] (or
/// [`Query::aggregate`]), add aggregations in the order the answer gives them, then [`run`].
///
/// ```
/// # async fn example(orders: trestle_client::TableClient) -> trestle_client::Result<()> {
/// use trestle_client::Filter;
/// let by_region = orders
///     .aggregate()
///     .partition("2026-12")
///     .filter(Filter::eq("Status", "paid"))
///     .sum("Amount")
///     .count()
///     .group_by("Region")
///     .run()
///     .await?;
/// for group in by_region {
///     println!("{:?}: {:?} in {} orders", group.keys[0], group.values[0], group.entities);
/// }
/// # Ok(()) }
/// ```
///
/// [`run`]: Aggregate::run
#[derive(Debug, Clone)]
#[must_use]
pub struct Aggregate {
    query: Query<Properties>,
    aggregations: Vec<pb::Aggregation>,
    group_by: Vec<String>,
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
        self.aggregations.push(pb::Aggregation {
            function: function as i32,
            path: path.to_owned(),
        });
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

    /// Asks the server: the groups, in the order of their keys.
    pub async fn run(&self) -> Result<Vec<AggregateGroup>> {
        let request = pb::AggregateEntitiesRequest {
            query: Some(self.query.request().clone()),
            aggregations: self.aggregations.clone(),
            group_by: self.group_by.clone(),
        };
        let client: &Client = self.query.client();
        let answer = client
            .read(
                request,
                |mut c, r| async move { c.aggregate_entities(r).await },
            )
            .await?;
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
