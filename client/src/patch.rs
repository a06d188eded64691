//! [`Patch`]: changes the server applies to a stored entity inside its commit, in order, so that
//! a counter, a flag, a running maximum or a document's member or array changes without a
//! read-modify-write round trip, and without conflicts; optionally only while the entity meets a
//! condition.

use serde::Serialize;

use crate::entity::IfMatch;
use crate::mapping::to_value;
use crate::query::Filter;
use crate::value::Value;

/// One change of a [`Patch`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    Increment(String, Value),
    Set(String, Value),
    Remove(String),
    SetIfAbsent(String, Value),
    Max(String, Value),
    Min(String, Value),
    /// The path, the value, and how many elements to keep (0: all).
    Append(String, Value, u32),
    AddToSet(String, Value),
    RemoveValue(String, Value),
}

/// Steps applied in order to one entity by [`TableClient::patch`](crate::TableClient::patch) or
/// [`Transaction::patch`](crate::Transaction::patch). Without [`Patch::if_match`], a patch never
/// fails for a concurrent change: 64 clients incrementing one counter all count.
///
/// ```
/// use trestle_client::{Filter, Patch};
/// let visit = Patch::new()
///     .increment("Visits", 1i64)
///     .set("LastPage", "/pricing")
///     .set_if_absent("FirstSeen", "2026-11-24");
/// // A device's highest temperature, raised only while it is under the alarm threshold.
/// let reading = Patch::new()
///     .max("MaxTemp", 41.5)
///     .condition(Filter::lt("MaxTemp", 45.0));
/// ```
///
/// Every step names a path: a property, or a value inside a document property (`Address/City`,
/// `Comments/0/Text`), whose missing objects are created on the way:
///
/// ```
/// use trestle_client::Patch;
/// #[derive(serde::Serialize)]
/// struct Comment { author: String, text: String }
/// let comment = Comment { author: "ada".into(), text: "Nice".into() };
/// let post = Patch::new()
///     .append("RecentComments", &comment)
///     .keep_last(3)
///     .increment("Stats/Comments", 1i64)
///     .add_to_set("Tags", "rust");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct Patch {
    pub(crate) steps: Vec<Step>,
    pub(crate) if_match: Option<IfMatch>,
    pub(crate) upsert: bool,
    pub(crate) condition: Option<Filter>,
    /// Why a value given to a step could not be mapped: reported when the patch is sent.
    pub(crate) unmappable: Option<String>,
}

impl Patch {
    /// A patch of no steps yet.
    pub fn new() -> Patch {
        Patch::default()
    }

    /// Adds `by` (an `i32`, `i64` or `f64`) to the property, which must have that type; a missing
    /// property starts at zero. An overflow refuses the patch (`OutOfRangeInput`).
    pub fn increment(mut self, property: impl Into<String>, by: impl Into<Value>) -> Patch {
        self.steps.push(Step::Increment(property.into(), by.into()));
        self
    }

    /// Sets the property.
    pub fn set(mut self, property: impl Into<String>, value: impl Into<Value>) -> Patch {
        self.steps.push(Step::Set(property.into(), value.into()));
        self
    }

    /// Removes the property (nothing if it is absent).
    pub fn remove(mut self, property: impl Into<String>) -> Patch {
        self.steps.push(Step::Remove(property.into()));
        self
    }

    /// Sets the property only if the entity lacks it.
    pub fn set_if_absent(mut self, property: impl Into<String>, value: impl Into<Value>) -> Patch {
        self.steps
            .push(Step::SetIfAbsent(property.into(), value.into()));
        self
    }

    /// Keeps the larger of the property and `value` (an `i32`, `i64`, `f64` or
    /// [`DateTime`](crate::DateTime); the property of the same type); a missing property takes
    /// `value`. Never conflicts with concurrent patches of the entity.
    pub fn max(mut self, property: impl Into<String>, value: impl Into<Value>) -> Patch {
        self.steps.push(Step::Max(property.into(), value.into()));
        self
    }

    /// Keeps the smaller of the property and `value`, as [`Patch::max`].
    pub fn min(mut self, property: impl Into<String>, value: impl Into<Value>) -> Patch {
        self.steps.push(Step::Min(property.into(), value.into()));
        self
    }

    /// Appends `value` (anything the serde mapping stores: a struct becomes an object) to the
    /// array at `path`, created when missing. Follow with [`Patch::keep_last`] to bound it.
    pub fn append<T: Serialize + ?Sized>(mut self, path: impl Into<String>, value: &T) -> Patch {
        let path = path.into();
        match to_value(value) {
            Ok(value) => self.steps.push(Step::Append(path, value, 0)),
            Err(error) => self.unmappable = Some(format!("append to {path}: {error}")),
        }
        self
    }

    /// After the [`Patch::append`] just before, keeps only the array's last `count` elements: a
    /// post's most recent comments. (Without an append before it, it does nothing.)
    pub fn keep_last(mut self, count: u32) -> Patch {
        if let Some(Step::Append(_, _, keep)) = self.steps.last_mut() {
            *keep = count;
        }
        self
    }

    /// Appends `value` to the array at `path` (created when missing) unless an element equals
    /// it: a set of references.
    pub fn add_to_set(mut self, path: impl Into<String>, value: impl Into<Value>) -> Patch {
        self.steps.push(Step::AddToSet(path.into(), value.into()));
        self
    }

    /// Removes every element equal to `value` from the array at `path`.
    pub fn remove_value(mut self, path: impl Into<String>, value: impl Into<Value>) -> Patch {
        self.steps
            .push(Step::RemoveValue(path.into(), value.into()));
        self
    }

    /// Applies only while the entity meets `filter` (tested in its commit; an empty entity for an
    /// upsert that finds none); otherwise `is_precondition_failed()` and nothing changes. Needs
    /// read permission as well as update.
    pub fn condition(mut self, filter: Filter) -> Patch {
        self.condition = Some(filter);
        self
    }

    /// Applies only to this version of the entity (`is_precondition_failed()` otherwise).
    pub fn if_match(mut self, if_match: impl Into<IfMatch>) -> Patch {
        self.if_match = Some(if_match.into());
        self
    }

    /// Patches an empty entity when none exists (instead of `is_not_found()`); takes no
    /// [`Patch::if_match`].
    pub fn upsert(mut self) -> Patch {
        self.upsert = true;
        self
    }
}
