//! `$apply`, OData's data aggregation extension, as far as `AggregateEntities` goes: a query's
//! aggregate over REST (Azure's Table service has none; documented as Trestle's own). Taken:
//!
//! ```text
//! aggregate(Amount with sum as Total, $count as Orders)
//! groupby((Region))
//! groupby((Region,Address/City),aggregate(Amount with average as Mean))
//! ```
//!
//! with the methods `sum`, `average`, `min` and `max`, and `$count`. Anything else (`filter(...)`
//! in `$apply`, `countdistinct`, several transformations) is refused naming what is not taken.
//! What it parses becomes the same [`AggregateSpec`] as gRPC's request, so every bound of
//! aggregates (the groups, their keys, the work budget) holds as it does there.

use crate::model::ValidationError;
use crate::query::aggregate::{AggregateSpec, Aggregation, Function};

/// A parsed `$apply`: the aggregate and each answer column's name, the group_by paths' first and
/// then the aggregations' (`None`: a count added for a bare `groupby`, not shown).
#[derive(Debug)]
pub(super) struct Apply {
    pub(super) spec: AggregateSpec,
    pub(super) columns: Vec<Option<String>>,
}

impl Apply {
    /// Parses `text`, or says what in it is not taken.
    pub(super) fn parse(text: &str) -> Result<Apply, ValidationError> {
        let text = text.trim();
        let (group_by, aggregations) = if let Some(inner) = call_of(text, "groupby") {
            let inner = inner.trim_start();
            let Some(rest) = inner.strip_prefix('(') else {
                return invalid("groupby takes its paths in parentheses: groupby((Region))");
            };
            let close = rest.find(')').ok_or_else(|| {
                ValidationError::Argument("groupby's paths lack their closing ')'".into())
            })?;
            let paths = split_list(&rest[..close]);
            let after = rest[close + 1..].trim();
            let aggregations = match after.strip_prefix(',') {
                Some(aggregate) => {
                    let aggregate = aggregate.trim();
                    let inner = call_of(aggregate, "aggregate").ok_or_else(|| {
                        ValidationError::Argument(format!(
                            "groupby takes an aggregate(...) after its paths, not {aggregate:?}"
                        ))
                    })?;
                    Some(inner)
                }
                None if after.is_empty() => None,
                None => return invalid(format!("unexpected {after:?} in groupby")),
            };
            (paths, aggregations)
        } else if let Some(inner) = call_of(text, "aggregate") {
            (Vec::new(), Some(inner))
        } else {
            return invalid(format!(
                "$apply takes aggregate(...) or groupby((...)[,aggregate(...)]), not {text:?}"
            ));
        };
        let mut columns: Vec<Option<String>> = group_by.iter().cloned().map(Some).collect();
        let mut parsed = Vec::new();
        match aggregations {
            Some(list) => {
                for expression in split_list(list) {
                    let (aggregation, alias) = aggregation_of(&expression)?;
                    parsed.push(aggregation);
                    columns.push(Some(alias));
                }
            }
            None => {
                parsed.push(Aggregation {
                    function: Function::Count,
                    path: None,
                });
                columns.push(None);
            }
        }
        let mut names: Vec<&String> = columns.iter().flatten().collect();
        names.sort();
        if let Some(twice) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return invalid(format!("$apply names two columns {:?}", twice[0]));
        }
        Ok(Apply {
            spec: AggregateSpec::new(parsed, group_by)?,
            columns,
        })
    }
}

fn invalid<T>(why: impl Into<String>) -> Result<T, ValidationError> {
    Err(ValidationError::Argument(why.into()))
}

/// The text inside `name(...)` if `text` is that call whole.
fn call_of<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let rest = text.strip_prefix(name)?.trim_start().strip_prefix('(')?;
    rest.strip_suffix(')')
}

/// The comma-separated items of `list`, trimmed; none empty.
fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

/// One `path with method as Alias` or `$count as Alias`.
fn aggregation_of(expression: &str) -> Result<(Aggregation, String), ValidationError> {
    let words: Vec<&str> = expression.split_whitespace().collect();
    let shape = || {
        ValidationError::Argument(format!(
            "{expression:?} is not `<path> with <sum|average|min|max> as <name>` or `$count as <name>`"
        ))
    };
    let (aggregation, alias) = match words.as_slice() {
        ["$count", "as", alias] => {
            let count = Aggregation {
                function: Function::Count,
                path: None,
            };
            (count, alias)
        }
        [path, "with", method, "as", alias] => {
            let function = match *method {
                "sum" => Function::Sum,
                "average" => Function::Avg,
                "min" => Function::Min,
                "max" => Function::Max,
                other => {
                    return invalid(format!(
                        "aggregation method {other:?} is not sum, average, min or max"
                    ))
                }
            };
            let path = Some((*path).to_owned());
            (Aggregation { function, path }, alias)
        }
        _ => return Err(shape()),
    };
    let named = alias.chars().next().is_some_and(char::is_alphabetic)
        && alias.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !named {
        return invalid(format!("{alias:?} is not a name for a column"));
    }
    Ok((aggregation, (*alias).to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_and_groups_parse_into_the_spec_and_their_columns() {
        let apply = Apply::parse("aggregate(Amount with sum as Total, $count as Orders)").unwrap();
        assert_eq!(apply.columns, [Some("Total".into()), Some("Orders".into())]);
        let apply =
            Apply::parse("groupby((Region, Address/City),aggregate(Amount with average as Mean))")
                .unwrap();
        let columns = ["Region", "Address/City", "Mean"].map(|c| Some(c.to_owned()));
        assert_eq!(apply.columns, columns);
        let distinct = Apply::parse("groupby((Region))").unwrap();
        assert_eq!(distinct.columns, [Some("Region".into()), None]);
    }

    #[test]
    fn what_is_not_taken_is_refused_naming_it() {
        for (text, says) in [
            ("filter(Amount gt 5)", "$apply takes aggregate"),
            ("aggregate(Amount with countdistinct as N)", "countdistinct"),
            ("aggregate(Amount as N)", "is not `<path> with"),
            ("aggregate(Amount with sum as 9lives)", "not a name"),
            ("groupby(Region)", "in parentheses"),
            ("groupby((Region),filter(x))", "takes an aggregate"),
            (
                "aggregate($count as N, Amount with max as N)",
                "two columns",
            ),
            ("aggregate()", "aggregations asked"),
        ] {
            let refused = Apply::parse(text).unwrap_err().to_string();
            assert!(refused.contains(says), "{text}: {refused}");
        }
    }
}
