//! Aggregates over a query's matches (`AggregateEntities`): the count, sum, average, minimum and
//! maximum of property paths, optionally per group of other paths' values.
//!
//! Bounded by construction, beside the filter's costed work (`filter/cost.rs`, the request's work
//! budget): each entity costs at most [`MAX_AGGREGATIONS`] + [`MAX_GROUP_BY`] path lookups, each
//! bounded by the document bound as a filter's are; the groups kept are at most [`MAX_GROUPS`],
//! their keys at most [`MAX_GROUP_KEY_BYTES`] in all, so the memory a call holds and its answer
//! (within a client's default 4 MiB message) are bounded whatever the table holds. Past a bound
//! the call is refused, never answered in part. A long aggregate is carried across calls
//! ([`Aggregator::carried`], [`Aggregator::resume`]: its groups so far, in the sealed token
//! that resumes its scan), so no call examines more than a bound of entities.

use std::cmp::Ordering;
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use super::paths::{check_path, value_at};
use crate::model::encoding::{decode_value, encode_owned, Reader};
use crate::model::{put_value, quoted, type_tag, Path, ValidationError, Value, ValueRef};

/// The most aggregations of one call.
pub const MAX_AGGREGATIONS: usize = 16;
/// The most paths a call groups by.
pub const MAX_GROUP_BY: usize = 4;
/// The most groups one call keeps.
pub const MAX_GROUPS: usize = 1_000;
/// The most bytes the groups' keys hold in all (as indexes encode values).
pub const MAX_GROUP_KEY_BYTES: usize = 1024 * 1024;
/// About the most entities one call examines unless the server says otherwise
/// (`--aggregate-examined-per-call`; a call stops at the end of the chunk that passes it): a
/// longer aggregate answers a continuation token carrying its groups so far, and no groups.
pub const DEFAULT_EXAMINED_PER_CALL: u64 = 1_000_000;

/// What an aggregation computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// The entities, or those with a value at the path.
    Count,
    /// Of the numbers at the path.
    Sum,
    /// Of the numbers at the path, as a Double.
    Avg,
    /// The least value at the path, in index order.
    Min,
    /// The greatest value at the path, in index order.
    Max,
}

/// One aggregation: a function of a path (none only for [`Function::Count`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregation {
    pub function: Function,
    pub path: Option<String>,
}

/// A checked aggregate request: its aggregations and the paths it groups by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateSpec {
    aggregations: Vec<Aggregation>,
    group_by: Vec<String>,
}

impl AggregateSpec {
    /// Checks the counts and every path (a property name, then member names or positions).
    pub fn new(
        aggregations: Vec<Aggregation>,
        group_by: Vec<String>,
    ) -> Result<AggregateSpec, ValidationError> {
        let invalid = |why: String| Err(ValidationError::Argument(why));
        if aggregations.is_empty() || aggregations.len() > MAX_AGGREGATIONS {
            return invalid(format!(
                "{} aggregations asked; a call takes 1 to {MAX_AGGREGATIONS}",
                aggregations.len()
            ));
        }
        if group_by.len() > MAX_GROUP_BY {
            return invalid(format!(
                "{} group_by paths; a call groups by at most {MAX_GROUP_BY}",
                group_by.len()
            ));
        }
        for aggregation in &aggregations {
            match (&aggregation.path, aggregation.function) {
                (None, Function::Count) => {}
                (None, function) => {
                    return invalid(format!("{function:?} needs the path of a property"))
                }
                (Some(path), _) => check_path(path, "aggregate")?,
            }
        }
        for path in &group_by {
            check_path(path, "aggregate")?;
        }
        Ok(AggregateSpec {
            aggregations,
            group_by,
        })
    }

    /// The spec as bytes, each function by its number and each path after its length: what
    /// carried state starts with.
    fn encoded(&self) -> Vec<u8> {
        let mut out = vec![self.aggregations.len() as u8, self.group_by.len() as u8];
        let mut put_path = |path: &str| {
            out.extend_from_slice(&(path.len() as u32).to_le_bytes());
            out.extend_from_slice(path.as_bytes());
        };
        for aggregation in &self.aggregations {
            put_path(aggregation.path.as_deref().unwrap_or_default());
        }
        self.group_by.iter().for_each(|path| put_path(path));
        out.extend(self.aggregations.iter().map(|a| a.function as u8));
        out
    }

    /// The properties the aggregations and groups read (what a scan must show of an entity).
    pub fn properties(&self) -> Vec<String> {
        let paths = self.aggregations.iter().filter_map(|a| a.path.as_deref());
        let mut names: Vec<String> = paths
            .chain(self.group_by.iter().map(String::as_str))
            .map(|path| Path::parse(path).map_or(path, |p| p.property()).to_owned())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// A sum so far: of integers while only integers were met, then of Doubles in the order met.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sum {
    Nothing,
    Integer(i64),
    Double(f64),
}

impl Sum {
    fn add(self, value: ValueRef<'_>, path: &str) -> Result<Sum, ValidationError> {
        let integer = match value {
            ValueRef::Int32(v) => i64::from(v),
            ValueRef::Int64(v) => v,
            ValueRef::Double(v) => {
                return Ok(Sum::Double(match self {
                    Sum::Nothing => v,
                    Sum::Integer(sum) => sum as f64 + v,
                    Sum::Double(sum) => sum + v,
                }))
            }
            _ => return Ok(self),
        };
        Ok(match self {
            Sum::Nothing => Sum::Integer(integer),
            Sum::Integer(sum) => Sum::Integer(sum.checked_add(integer).ok_or_else(|| {
                ValidationError::Argument(format!(
                    "the sum of {} passes Int64's range",
                    quoted(path)
                ))
            })?),
            Sum::Double(sum) => Sum::Double(sum + integer as f64),
        })
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            Sum::Nothing => None,
            Sum::Integer(sum) => Some(sum as f64),
            Sum::Double(sum) => Some(sum),
        }
    }
}

/// Writes `sum` as [`Aggregator::carried`] carries it: a tag, then the sum's bits.
fn put_sum(sum: Sum, out: &mut Vec<u8>) {
    match sum {
        Sum::Nothing => out.push(0),
        Sum::Integer(sum) => {
            out.push(1);
            out.extend_from_slice(&sum.to_le_bytes());
        }
        Sum::Double(sum) => {
            out.push(2);
            out.extend_from_slice(&sum.to_bits().to_le_bytes());
        }
    }
}

fn read_sum(reader: &mut Reader<'_>) -> Result<Sum, ValidationError> {
    Ok(match read_byte(reader)? {
        0 => Sum::Nothing,
        1 => Sum::Integer(i64::from_le_bytes(reader.take().map_err(not_carried)?)),
        2 => Sum::Double(f64::from_bits(u64::from_le_bytes(
            reader.take().map_err(not_carried)?,
        ))),
        _ => return Err(not_carried(())),
    })
}

fn read_byte(reader: &mut Reader<'_>) -> Result<u8, ValidationError> {
    Ok(reader.take::<1>().map_err(not_carried)?[0])
}

fn read_u64(reader: &mut Reader<'_>) -> Result<u64, ValidationError> {
    Ok(u64::from_le_bytes(reader.take().map_err(not_carried)?))
}

fn read_value(reader: &mut Reader<'_>) -> Result<Value, ValidationError> {
    Ok(decode_value(reader).map_err(not_carried)?.to_value())
}

/// The refusal of carried state that is not this aggregate's (a token of another call).
fn not_carried<E>(_: E) -> ValidationError {
    ValidationError::Argument("continuation token is not one of this aggregate's".into())
}

/// One aggregation's state in one group.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Count(u64),
    Sum(Sum),
    Avg {
        sum: Sum,
        numbers: u64,
    },
    /// The least or greatest value so far ([`order`]).
    Extreme(Option<Value>),
}

impl State {
    fn new(function: Function) -> State {
        match function {
            Function::Count => State::Count(0),
            Function::Sum => State::Sum(Sum::Nothing),
            Function::Avg => State::Avg {
                sum: Sum::Nothing,
                numbers: 0,
            },
            Function::Min | Function::Max => State::Extreme(None),
        }
    }

    fn add(
        &mut self,
        aggregation: &Aggregation,
        value: Option<ValueRef<'_>>,
    ) -> Result<(), ValidationError> {
        let path = aggregation.path.as_deref().unwrap_or_default();
        match self {
            State::Count(count) => {
                if aggregation.path.is_none() || value.is_some() {
                    *count += 1;
                }
            }
            State::Sum(sum) => {
                if let Some(value) = value {
                    *sum = sum.add(value, path)?;
                }
            }
            State::Avg { sum, numbers } => {
                if let Some(value) = value.filter(is_number) {
                    *sum = sum.add(value, path)?;
                    *numbers += 1;
                }
            }
            State::Extreme(kept) => {
                let Some(value) = value.filter(|v| !matches!(v, ValueRef::Document(_))) else {
                    return Ok(());
                };
                let better = match kept {
                    None => true,
                    Some(best) => {
                        let ordering = order(value, best.borrowed());
                        match aggregation.function {
                            Function::Min => ordering == Ordering::Less,
                            _ => ordering == Ordering::Greater,
                        }
                    }
                };
                if better {
                    *kept = Some(value.to_value());
                }
            }
        }
        Ok(())
    }

    /// Writes the state as [`Aggregator::carried`] carries it (its function is the spec's).
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            State::Count(count) => out.extend_from_slice(&count.to_le_bytes()),
            State::Sum(sum) => put_sum(*sum, out),
            State::Avg { sum, numbers } => {
                put_sum(*sum, out);
                out.extend_from_slice(&numbers.to_le_bytes());
            }
            State::Extreme(None) => out.push(0),
            State::Extreme(Some(value)) => {
                out.push(1);
                encode_owned(value, out);
            }
        }
    }

    /// The state of `function` that [`State::put`] wrote.
    fn read(function: Function, reader: &mut Reader<'_>) -> Result<State, ValidationError> {
        Ok(match function {
            Function::Count => State::Count(read_u64(reader)?),
            Function::Sum => State::Sum(read_sum(reader)?),
            Function::Avg => State::Avg {
                sum: read_sum(reader)?,
                numbers: read_u64(reader)?,
            },
            Function::Min | Function::Max => match read_byte(reader)? {
                0 => State::Extreme(None),
                _ => State::Extreme(Some(read_value(reader)?)),
            },
        })
    }

    fn result(self) -> Value {
        match self {
            State::Count(count) => Value::Int64(count as i64),
            State::Sum(Sum::Nothing) | State::Extreme(None) => Value::Null,
            State::Sum(Sum::Integer(sum)) => Value::Int64(sum),
            State::Sum(Sum::Double(sum)) => Value::Double(sum),
            State::Avg { sum, numbers } => match sum.as_f64() {
                Some(sum) if numbers > 0 => Value::Double(sum / numbers as f64),
                _ => Value::Null,
            },
            State::Extreme(Some(value)) => value,
        }
    }
}

/// The order of MIN and MAX: that of indexes (EDM type, then value), except that numbers of any
/// type are one type, in the place of Double, compared by value (integers exactly; NaN above
/// every other number).
fn order(a: ValueRef<'_>, b: ValueRef<'_>) -> Ordering {
    let rank = |value: ValueRef<'_>| match is_number(&value) {
        true => type_tag(ValueRef::Double(0.0)),
        false => type_tag(value),
    };
    let as_f64 = |value: ValueRef<'_>| match value {
        ValueRef::Int32(v) => f64::from(v),
        ValueRef::Int64(v) => v as f64,
        ValueRef::Double(v) => v,
        _ => f64::NAN,
    };
    let integer = |value: ValueRef<'_>| match value {
        ValueRef::Int32(v) => Some(i64::from(v)),
        ValueRef::Int64(v) => Some(v),
        _ => None,
    };
    rank(a).cmp(&rank(b)).then_with(|| {
        if let (Some(x), Some(y)) = (integer(a), integer(b)) {
            return x.cmp(&y);
        }
        if is_number(&a) {
            return as_f64(a).total_cmp(&as_f64(b));
        }
        let encoded = |value| {
            let mut bytes = Vec::new();
            put_value(&mut bytes, value);
            bytes
        };
        encoded(a).cmp(&encoded(b))
    })
}

fn is_number(value: &ValueRef<'_>) -> bool {
    matches!(
        value,
        ValueRef::Int32(_) | ValueRef::Int64(_) | ValueRef::Double(_)
    )
}

/// One group's answer: its key values, each aggregation's result, and its entities.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub keys: Vec<Value>,
    pub values: Vec<Value>,
    pub entities: u64,
}

/// A group being aggregated.
#[derive(Debug)]
struct Running {
    keys: Vec<Value>,
    states: Vec<State>,
    entities: u64,
}

/// The aggregation of a query's matches, an entity at a time.
#[derive(Debug)]
pub struct Aggregator {
    spec: AggregateSpec,
    /// The groups by their keys' index encoding (sorted by it for the answer).
    groups: HashMap<Vec<u8>, Running, FxBuildHasher>,
    key_bytes: usize,
    /// The key of the entity being added (kept to spare an allocation per entity).
    key: Vec<u8>,
}

impl Aggregator {
    /// Nothing aggregated yet.
    pub fn new(spec: AggregateSpec) -> Aggregator {
        Aggregator {
            spec,
            groups: HashMap::default(),
            key_bytes: 0,
            key: Vec::new(),
        }
    }

    /// Adds the entity whose properties `value` looks up by name; refused past a bound (see the
    /// module's doc) or when an Int64 sum overflows.
    pub fn add<'a>(
        &mut self,
        value: impl Fn(&str) -> Option<ValueRef<'a>>,
    ) -> Result<(), ValidationError> {
        self.key.clear();
        for path in &self.spec.group_by {
            put_value(
                &mut self.key,
                value_at(path, &value).unwrap_or(ValueRef::Null),
            );
        }
        let group = match self.groups.get_mut(&self.key) {
            Some(group) => group,
            None => {
                if self.groups.len() == MAX_GROUPS {
                    return Err(ValidationError::Argument(format!(
                        "the entities make more than {MAX_GROUPS} groups; group by fewer values \
                         or filter the entities"
                    )));
                }
                self.key_bytes += self.key.len();
                if self.key_bytes > MAX_GROUP_KEY_BYTES {
                    return Err(ValidationError::Argument(format!(
                        "the groups' keys pass {MAX_GROUP_KEY_BYTES} bytes; group by shorter values"
                    )));
                }
                let running = Running {
                    keys: (self.spec.group_by.iter())
                        .map(|path| value_at(path, &value).map_or(Value::Null, |v| v.to_value()))
                        .collect(),
                    states: (self.spec.aggregations.iter())
                        .map(|a| State::new(a.function))
                        .collect(),
                    entities: 0,
                };
                self.groups.entry(self.key.clone()).or_insert(running)
            }
        };
        group.entities += 1;
        for (state, aggregation) in group.states.iter_mut().zip(&self.spec.aggregations) {
            let found = aggregation
                .path
                .as_deref()
                .and_then(|path| value_at(path, &value));
            state.add(aggregation, found)?;
        }
        Ok(())
    }

    /// The aggregation so far, to carry to the call that goes on with the scan
    /// ([`Aggregator::resume`]): the spec (so that only the same aggregate resumes it), then
    /// each group's keys, entities and states. At most the groups' bounds (their keys within
    /// [`MAX_GROUP_KEY_BYTES`], [`MAX_GROUPS`] groups of [`MAX_AGGREGATIONS`] states).
    pub fn carried(&self) -> Vec<u8> {
        let mut out = self.spec.encoded();
        out.extend_from_slice(&(self.groups.len() as u32).to_le_bytes());
        for group in self.groups.values() {
            group
                .keys
                .iter()
                .for_each(|key| encode_owned(key, &mut out));
            out.extend_from_slice(&group.entities.to_le_bytes());
            group.states.iter().for_each(|state| state.put(&mut out));
        }
        out
    }

    /// The aggregation [`Aggregator::carried`] carried, going on with `spec`; refused unless it
    /// is `spec`'s.
    pub fn resume(spec: AggregateSpec, carried: &[u8]) -> Result<Aggregator, ValidationError> {
        let spec_bytes = spec.encoded();
        let Some(groups) = carried.strip_prefix(spec_bytes.as_slice()) else {
            return Err(not_carried(()));
        };
        let mut reader = Reader::new(groups, "aggregate");
        let count = u32::from_le_bytes(reader.take().map_err(not_carried)?) as usize;
        if count > MAX_GROUPS {
            return Err(not_carried(()));
        }
        let mut aggregator = Aggregator::new(spec);
        for _ in 0..count {
            let keys = (aggregator.spec.group_by.iter())
                .map(|_| read_value(&mut reader))
                .collect::<Result<Vec<Value>, _>>()?;
            let entities = read_u64(&mut reader)?;
            let states = (aggregator.spec.aggregations.iter())
                .map(|aggregation| State::read(aggregation.function, &mut reader))
                .collect::<Result<Vec<State>, _>>()?;
            let mut key = Vec::new();
            keys.iter()
                .for_each(|value| put_value(&mut key, value.borrowed()));
            aggregator.key_bytes += key.len();
            let running = Running {
                keys,
                states,
                entities,
            };
            aggregator.groups.insert(key, running);
        }
        if !reader.is_empty() || aggregator.key_bytes > MAX_GROUP_KEY_BYTES {
            return Err(not_carried(()));
        }
        Ok(aggregator)
    }

    /// The groups in their keys' order; one group of nothing when none was met and there are no
    /// group_by paths.
    pub fn finish(self) -> Vec<Group> {
        let mut sorted: Vec<(Vec<u8>, Running)> = self.groups.into_iter().collect();
        sorted.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        let mut groups: Vec<Group> = sorted
            .into_iter()
            .map(|(_, group)| Group {
                keys: group.keys,
                values: group.states.into_iter().map(State::result).collect(),
                entities: group.entities,
            })
            .collect();
        if groups.is_empty() && self.spec.group_by.is_empty() {
            let states = self
                .spec
                .aggregations
                .iter()
                .map(|a| State::new(a.function));
            groups.push(Group {
                keys: Vec::new(),
                values: states.map(State::result).collect(),
                entities: 0,
            });
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Document, Ticks};

    fn aggregation(function: Function, path: &str) -> Aggregation {
        Aggregation {
            function,
            path: (!path.is_empty()).then(|| path.to_owned()),
        }
    }

    fn run(spec: AggregateSpec, rows: &[Vec<(&str, Value)>]) -> Result<Vec<Group>, String> {
        let mut aggregator = Aggregator::new(spec);
        for row in rows {
            aggregator
                .add(|name| {
                    row.iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| v.borrowed())
                })
                .map_err(|e| e.to_string())?;
        }
        Ok(aggregator.finish())
    }

    #[test]
    fn an_aggregation_carried_between_any_two_rows_goes_on_exactly() {
        let spec = AggregateSpec::new(
            vec![
                aggregation(Function::Count, "A"),
                aggregation(Function::Sum, "A"),
                aggregation(Function::Avg, "A"),
                aggregation(Function::Min, "A"),
                aggregation(Function::Max, "A"),
            ],
            vec!["G".into()],
        )
        .unwrap();
        let values = [
            Value::Int32(3),
            Value::Double(0.1),
            Value::Int64(-7),
            Value::String("s".into()),
            Value::DateTime(Ticks(42)),
            Value::Double(1e16),
        ];
        let rows: Vec<Vec<(&str, Value)>> = (0..24)
            .map(|n| {
                let group = ("G", Value::Int32(n % 3));
                match n % 4 {
                    3 => vec![group],
                    _ => vec![group, ("A", values[n as usize % values.len()].clone())],
                }
            })
            .collect();
        let whole = run(spec.clone(), &rows).unwrap();
        let add = |aggregator: &mut Aggregator, row: &Vec<(&str, Value)>| {
            let value = |name: &str| {
                row.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.borrowed())
            };
            aggregator.add(value).unwrap();
        };
        for split in 0..=rows.len() {
            let mut first = Aggregator::new(spec.clone());
            rows[..split].iter().for_each(|row| add(&mut first, row));
            let mut resumed = Aggregator::resume(spec.clone(), &first.carried()).unwrap();
            rows[split..].iter().for_each(|row| add(&mut resumed, row));
            assert_eq!(resumed.finish(), whole, "carried after {split} rows");
        }
        let other = AggregateSpec::new(vec![aggregation(Function::Count, "A")], vec![]).unwrap();
        let carried = Aggregator::new(spec).carried();
        assert!(Aggregator::resume(other, &carried).is_err());
    }

    #[test]
    fn every_function_over_mixed_and_missing_values() {
        let spec = AggregateSpec::new(
            vec![
                aggregation(Function::Count, ""),
                aggregation(Function::Count, "A"),
                aggregation(Function::Sum, "A"),
                aggregation(Function::Avg, "A"),
                aggregation(Function::Min, "A"),
                aggregation(Function::Max, "A"),
                aggregation(Function::Sum, "I"),
            ],
            vec![],
        )
        .unwrap();
        let rows = vec![
            vec![("A", Value::Int32(2)), ("I", Value::Int32(i32::MAX))],
            vec![("A", Value::Double(0.5)), ("I", Value::Int32(i32::MAX))],
            vec![("A", Value::String("x".into()))],
            vec![("A", Value::Null)],
            vec![],
        ];
        let groups = run(spec, &rows).unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(
            groups[0].values,
            [
                Value::Int64(5),
                Value::Int64(3),
                Value::Double(2.5),
                Value::Double(1.25),
                // Numbers by value, whatever their type; strings after them, as in indexes.
                Value::Double(0.5),
                Value::String("x".into()),
                Value::Int64(2 * i64::from(i32::MAX)),
            ]
        );
        assert_eq!(groups[0].entities, 5);
    }

    #[test]
    fn minimums_and_maximums_compare_numbers_by_value_whatever_their_type() {
        let spec = AggregateSpec::new(
            vec![
                aggregation(Function::Min, "N"),
                aggregation(Function::Max, "N"),
            ],
            vec![],
        )
        .unwrap();
        let rows = vec![
            vec![("N", Value::Double(5.0))],
            vec![("N", Value::Int32(1))],
            vec![("N", Value::Int64(i64::MAX))],
            vec![("N", Value::Int64(i64::MAX - 1))],
        ];
        let groups = run(spec, &rows).unwrap();
        assert_eq!(groups[0].values, [Value::Int32(1), Value::Int64(i64::MAX)]);
    }

    #[test]
    fn groups_come_in_index_order_with_missing_values_as_null() {
        let spec = AggregateSpec::new(
            vec![aggregation(Function::Sum, "Amount")],
            vec!["Region".into()],
        )
        .unwrap();
        let rows = vec![
            vec![
                ("Region", Value::String("west".into())),
                ("Amount", Value::Int64(5)),
            ],
            vec![
                ("Region", Value::String("east".into())),
                ("Amount", Value::Int64(1)),
            ],
            vec![("Amount", Value::Int64(7))],
            vec![
                ("Region", Value::String("west".into())),
                ("Amount", Value::Int64(2)),
            ],
        ];
        let groups = run(spec, &rows).unwrap();
        let shown: Vec<(Vec<Value>, Value, u64)> = groups
            .into_iter()
            .map(|g| (g.keys, g.values[0].clone(), g.entities))
            .collect();
        assert_eq!(
            shown,
            [
                (vec![Value::Null], Value::Int64(7), 1),
                (vec![Value::String("east".into())], Value::Int64(1), 1),
                (vec![Value::String("west".into())], Value::Int64(7), 2),
            ]
        );
    }

    #[test]
    fn paths_reach_into_documents_and_datetimes_order_by_instant() {
        let line = |price: f64| {
            let members = [("Price".to_owned(), Value::Double(price))];
            Value::Document(Document::object(members).unwrap())
        };
        let lines = |prices: &[f64]| {
            Value::Document(Document::array(prices.iter().map(|p| line(*p))).unwrap())
        };
        let spec = AggregateSpec::new(
            vec![
                aggregation(Function::Max, "Lines/0/Price"),
                aggregation(Function::Min, "At"),
            ],
            vec![],
        )
        .unwrap();
        let rows = vec![
            vec![
                ("Lines", lines(&[3.0, 9.0])),
                ("At", Value::DateTime(Ticks(20))),
            ],
            vec![("Lines", lines(&[4.0])), ("At", Value::DateTime(Ticks(10)))],
        ];
        let groups = run(spec, &rows).unwrap();
        assert_eq!(
            groups[0].values,
            [Value::Double(4.0), Value::DateTime(Ticks(10))]
        );
    }

    #[test]
    fn bounds_and_overflow_refuse_the_call() {
        let sum = AggregateSpec::new(vec![aggregation(Function::Sum, "N")], vec![]).unwrap();
        let rows = vec![
            vec![("N", Value::Int64(i64::MAX))],
            vec![("N", Value::Int64(1))],
        ];
        let refused = run(sum, &rows).unwrap_err();
        assert!(refused.contains("passes Int64's range"), "{refused}");

        let by_key =
            AggregateSpec::new(vec![aggregation(Function::Count, "")], vec!["K".into()]).unwrap();
        let rows: Vec<_> = (0..=MAX_GROUPS as i32)
            .map(|k| vec![("K", Value::Int32(k))])
            .collect();
        let refused = run(by_key.clone(), &rows).unwrap_err();
        assert!(refused.contains("more than 1000 groups"), "{refused}");
        assert_eq!(run(by_key, &rows[..MAX_GROUPS]).unwrap().len(), MAX_GROUPS);

        for (aggregations, group_by) in [
            (vec![], vec![]),
            (vec![aggregation(Function::Sum, "")], vec![]),
            (vec![aggregation(Function::Sum, "A//B")], vec![]),
            (vec![aggregation(Function::Count, "")], vec!["".to_owned()]),
            (vec![aggregation(Function::Count, ""); 17], vec![]),
            (
                vec![aggregation(Function::Count, "")],
                vec!["K".to_owned(); 5],
            ),
        ] {
            assert!(AggregateSpec::new(aggregations, group_by).is_err());
        }
    }

    #[test]
    fn nothing_matched_is_one_group_of_nothing() {
        let spec = AggregateSpec::new(
            vec![
                aggregation(Function::Count, ""),
                aggregation(Function::Sum, "A"),
                aggregation(Function::Min, "A"),
            ],
            vec![],
        )
        .unwrap();
        let groups = run(spec, &[]).unwrap();
        assert_eq!(
            groups,
            [Group {
                keys: vec![],
                values: vec![Value::Int64(0), Value::Null, Value::Null],
                entities: 0
            }]
        );
    }
}
