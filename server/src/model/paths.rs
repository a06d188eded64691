//! Paths into documents (`Address/City`, `Comments/0/Text`): checking them, and changing the
//! value at one by rebuilding the documents above it (each rebuilt document keeps every limit).

use super::document::{check_member_name, Document};
use super::entity::validate_property_name;
use super::{quoted, DocumentRef, ValidationError, Value, ValueRef};

/// A checked path: a property name, then member names or (inside arrays) element indexes,
/// separated by `/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path<'a> {
    text: &'a str,
}

impl<'a> Path<'a> {
    /// Checks `text`: a valid property name, then non-empty valid member names.
    pub fn parse(text: &'a str) -> Result<Path<'a>, ValidationError> {
        let mut steps = text.split('/');
        validate_property_name(steps.next().unwrap_or_default())?;
        for step in steps {
            check_member_name(step).map_err(|_| {
                ValidationError::Argument(format!(
                    "path {} has an empty or invalid step; steps are member names or element \
                     indexes separated by '/'",
                    quoted(text)
                ))
            })?;
        }
        Ok(Path { text })
    }

    /// The property the path starts at.
    pub fn property(&self) -> &'a str {
        self.text.split('/').next().unwrap_or_default()
    }

    /// Whether it names a whole property (no steps into a document).
    pub fn is_property(&self) -> bool {
        !self.text.contains('/')
    }

    /// The steps below the property.
    fn steps(&self) -> impl Iterator<Item = &'a str> {
        self.text.split('/').skip(1)
    }

    /// The path as written.
    pub fn as_str(&self) -> &'a str {
        self.text
    }
}

/// What a change does with the value at the end of a path: given the current value (`None` when
/// missing), the new one (`None` removes it).
pub(super) type Change<'c> =
    dyn FnMut(Option<Value>) -> Result<Option<Value>, ValidationError> + 'c;

/// Applies `change` at `path` below `current` (the property's value), rebuilding each document
/// on the way; intermediate objects are created where members are missing. A step through a
/// value that is no document, or an index out of an array's range, is refused naming the path.
pub(super) fn edit(
    current: Option<Value>,
    path: Path<'_>,
    change: &mut Change<'_>,
) -> Result<Option<Value>, ValidationError> {
    let steps: Vec<&str> = path.steps().collect();
    edit_below(current, path, &steps, 0, change)
}

fn edit_below(
    current: Option<Value>,
    path: Path<'_>,
    steps: &[&str],
    done: usize,
    change: &mut Change<'_>,
) -> Result<Option<Value>, ValidationError> {
    let Some(step) = steps.get(done) else {
        return change(current);
    };
    let here = || {
        let mut at = path.property().to_owned();
        for step in &steps[..done] {
            at.push('/');
            at.push_str(step);
        }
        at
    };
    let rebuilt = |document: Result<Document, ValidationError>| {
        document
            .map(|document| Some(Value::Document(document)))
            .map_err(|error| error.within(&here()))
    };
    match current {
        None => match edit_below(None, path, steps, done + 1, change)? {
            None => Ok(None),
            Some(value) => rebuilt(Document::object([((*step).to_owned(), value)])),
        },
        Some(Value::Document(document)) if !document.as_ref().is_array() => {
            let mut members: Vec<(String, Value)> = owned_entries(document.as_ref())
                .map(|(name, value)| (name.to_owned(), value))
                .collect();
            let at = members.iter().position(|(name, _)| name == step);
            let child = at.map(|at| members.remove(at).1);
            if let Some(value) = edit_below(child, path, steps, done + 1, change)? {
                members.push(((*step).to_owned(), value));
            }
            rebuilt(Document::object(members))
        }
        Some(Value::Document(document)) => {
            let mut elements: Vec<Value> = owned_entries(document.as_ref())
                .map(|(_, value)| value)
                .collect();
            let index = step
                .parse::<usize>()
                .ok()
                .filter(|index| *index < elements.len())
                .ok_or_else(|| {
                    ValidationError::Argument(format!(
                        "path {}: {} is an array of {} elements, and {} is not an index into it",
                        quoted(path.as_str()),
                        quoted(&here()),
                        elements.len(),
                        quoted(step)
                    ))
                })?;
            let element = elements.remove(index);
            if let Some(value) = edit_below(Some(element), path, steps, done + 1, change)? {
                elements.insert(index, value);
            }
            rebuilt(Document::array(elements))
        }
        Some(other) => Err(ValidationError::Argument(format!(
            "path {} runs through {}, which is {}, not an object or array",
            quoted(path.as_str()),
            quoted(&here()),
            other.type_name()
        ))),
    }
}

/// A document's members or elements (with empty names), owned.
fn owned_entries(document: DocumentRef<'_>) -> impl Iterator<Item = (&str, Value)> {
    document
        .entries(true)
        .map(|(name, value)| (name, value.to_value()))
}

/// What a `select` shows of one property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selected<'s> {
    /// Nothing: the selection names neither it nor a path into it.
    Nothing,
    /// All of it (named itself, or no selection at all).
    Whole,
    /// Only the values at these paths below it (each a list of member names).
    Paths(Vec<Vec<&'s str>>),
}

/// Whether `select` (all when empty) shows any of the property named by the bytes `name`.
pub fn selects(select: &[String], name: &[u8]) -> bool {
    select.is_empty()
        || select.iter().any(|entry| {
            let entry = entry.as_bytes();
            entry == name
                || (entry.len() > name.len()
                    && entry.starts_with(name)
                    && entry[name.len()] == b'/')
        })
}

/// What `select` (all when empty) shows of the property `name`.
pub fn selected<'s>(select: &'s [String], name: &str) -> Selected<'s> {
    if select.is_empty() {
        return Selected::Whole;
    }
    let mut paths = Vec::new();
    for entry in select {
        if entry == name {
            return Selected::Whole;
        }
        if let Some(rest) = entry
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            paths.push(rest.split('/').collect());
        }
    }
    match paths.is_empty() {
        true => Selected::Nothing,
        false => Selected::Paths(paths),
    }
}

/// The parts of `value` at `paths` (member names, or positions in arrays; through an array, the
/// elements the paths reach a value in, in their order: a path through a position reaches only
/// that element, any other path every element), or `None` when no path reaches a value.
pub fn prune(value: ValueRef<'_>, paths: &[Vec<&str>]) -> Option<Value> {
    if paths.iter().any(|path| path.is_empty()) {
        return Some(value.to_value());
    }
    let ValueRef::Document(document) = value else {
        return None;
    };
    if document.is_array() {
        // A path whose first step is a position reaches into that element only; the others
        // into every element.
        let elements: Vec<Value> = document
            .elements()
            .enumerate()
            .filter_map(|(at, element)| {
                let here: Vec<Vec<&str>> = paths
                    .iter()
                    .filter_map(|path| match path[0].parse::<usize>() {
                        Ok(position) => (position == at).then(|| path[1..].to_vec()),
                        Err(_) => Some(path.clone()),
                    })
                    .collect();
                match here.is_empty() {
                    true => None,
                    false => prune(element, &here),
                }
            })
            .collect();
        if elements.is_empty() {
            return None;
        }
        return Document::array(elements).ok().map(Value::Document);
    }
    let members: Vec<(String, Value)> = document
        .members()
        .filter_map(|(name, member)| {
            let below: Vec<Vec<&str>> = paths
                .iter()
                .filter(|path| path[0] == name)
                .map(|path| path[1..].to_vec())
                .collect();
            if below.is_empty() {
                return None;
            }
            prune(member, &below).map(|value| (name.to_owned(), value))
        })
        .collect();
    if members.is_empty() {
        return None;
    }
    Document::object(members).ok().map(Value::Document)
}
