//! Property paths as aggregates and orderings read them: a property name, then member names or
//! array positions separated by `/` (`Address/City`, `Variants/0/Stock`).

use crate::model::{quoted, Path, ValidationError, ValueRef};

/// Checks `path`, which the request's `what` (`aggregate`, `order_by`) names.
pub(crate) fn check_path(path: &str, what: &str) -> Result<(), ValidationError> {
    Path::parse(path).map(drop).map_err(|_| {
        ValidationError::Argument(format!(
            "{what} path {} is invalid: a property name, then member names or array \
             positions separated by '/'",
            quoted(path)
        ))
    })
}

/// The value at `path`, `value` looking a property up; a null is no value.
pub(crate) fn value_at<'a>(
    path: &str,
    value: &impl Fn(&str) -> Option<ValueRef<'a>>,
) -> Option<ValueRef<'a>> {
    let (property, steps) = match path.split_once('/') {
        Some((property, steps)) => (property, Some(steps)),
        None => (path, None),
    };
    let found = match (value(property)?, steps) {
        (start, None) => Some(start),
        (ValueRef::Document(document), Some(steps)) => document.at(steps.split('/')),
        (_, Some(_)) => None,
    };
    found.filter(|found| !matches!(found, ValueRef::Null))
}
