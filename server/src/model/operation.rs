//! Write operations: what a single-entity write or one step of a transaction asks for.

use super::patch::{self, PatchCondition, PatchStep};
#[cfg(test)]
use super::ETag;
use super::{
    validate_shape, EntityKey, IfMatch, NewEntity, Properties, StoredEntity, Ticks, ValidationError,
};

/// How an upsert treats an existing entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertMode {
    /// Insert-or-replace.
    Replace,
    /// Insert-or-merge.
    Merge,
}

/// What a `check` operation asserts about its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckCondition {
    /// The row exists and matches (any version for `IfMatch::Any`).
    Exists(IfMatch),
    /// The row does not exist.
    NotExists,
}

/// One write, on a row of the operation's partition.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Insert an entity that must not exist.
    Insert(NewEntity),
    /// Replace an existing entity.
    Update(NewEntity, IfMatch),
    /// Merge into an existing entity.
    Merge(NewEntity, IfMatch),
    /// Insert, or replace / merge an existing entity.
    Upsert(NewEntity, UpsertMode),
    /// Remove an expired entity if it still has this ETag (the server's own housekeeping of
    /// time to live, never a client's; it resolves against the row as stored, expired or not).
    Expire { key: EntityKey, if_match: IfMatch },
    /// Delete an existing entity.
    Delete { key: EntityKey, if_match: IfMatch },
    /// Apply patch steps to the stored entity (or, with `upsert`, to an empty one if it does
    /// not exist).
    Patch {
        key: EntityKey,
        steps: Vec<PatchStep>,
        if_match: IfMatch,
        upsert: bool,
        /// Required of the entity (an empty one when `upsert` finds none) before the steps apply.
        condition: Option<PatchCondition>,
    },
    /// Assert a precondition without writing.
    Check {
        key: EntityKey,
        condition: CheckCondition,
    },
}

impl Operation {
    /// The entity the operation acts on.
    pub fn key(&self) -> &EntityKey {
        match self {
            Operation::Insert(e)
            | Operation::Update(e, _)
            | Operation::Merge(e, _)
            | Operation::Upsert(e, _) => &e.key,
            Operation::Patch { key, .. }
            | Operation::Delete { key, .. }
            | Operation::Expire { key, .. }
            | Operation::Check { key, .. } => key,
        }
    }

    /// The partition the operation acts on.
    pub fn partition_key(&self) -> &str {
        &self.key().partition_key
    }

    /// Whether resolving the operation needs the current row's properties (a merge does); the
    /// others need only whether it exists and its timestamp.
    pub fn reads_current_properties(&self) -> bool {
        matches!(
            self,
            Operation::Merge(..)
                | Operation::Upsert(_, UpsertMode::Merge)
                | Operation::Patch { .. }
        )
    }

    /// The row the operation acts on.
    pub fn row_key(&self) -> &str {
        &self.key().row_key
    }
}

/// What an operation does to its row, once its precondition holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Store this entity.
    Put(StoredEntity),
    /// Remove the row.
    Remove,
    /// Leave the row alone (a check).
    Nothing,
}

/// Why an operation cannot apply to the row as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The row must exist and does not.
    NotFound,
    /// The row must not exist and does.
    AlreadyExists,
    /// The row's ETag is not the one required.
    ConditionNotSatisfied,
    /// A patch's condition is false of the entity.
    PatchConditionFalse {
        /// The condition, as the client wrote it.
        condition: String,
    },
    /// The merged entity breaks a limit.
    Invalid(ValidationError),
    /// A unique index holds the written values for another entity.
    IndexValueTaken {
        /// The index.
        index: String,
        /// The entity holding the values.
        holder: EntityKey,
    },
}

impl Operation {
    /// Decides the operation's effect on its row given the row's `current` content, Azure's way;
    /// the written entity takes the operation's own keys and properties, uncopied.
    ///
    /// A written entity gets `now`, or one tick past its previous timestamp if that is not
    /// earlier, so that each entity's timestamp (and so its ETag) strictly increases.
    pub fn resolve(self, current: Option<StoredEntity>, now: Ticks) -> Result<Effect, Refusal> {
        let put = |key, properties, previous: Option<Ticks>| {
            let timestamp = previous.map_or(now, |p| now.max(Ticks(p.0 + 1)));
            Effect::Put(StoredEntity {
                key,
                properties,
                timestamp,
            })
        };
        match (self, current) {
            (Operation::Expire { if_match, .. }, Some(old)) if if_match.matches(&old.etag()) => {
                Ok(Effect::Remove)
            }
            // Rewritten (or removed) since it was found expired: left alone.
            (Operation::Expire { .. }, _) => Ok(Effect::Nothing),
            (Operation::Patch { upsert: false, .. }, None) => Err(Refusal::NotFound),
            (Operation::Patch { if_match, .. }, Some(old)) if !if_match.matches(&old.etag()) => {
                Err(Refusal::ConditionNotSatisfied)
            }
            (
                Operation::Patch {
                    key,
                    steps,
                    condition,
                    ..
                },
                old,
            ) => {
                let previous = old.as_ref().map(|old| old.timestamp);
                let (key, patched) = apply_patch(key, &steps, condition, old)?;
                Ok(put(key, patched, previous))
            }
            (Operation::Insert(_), Some(_)) => Err(Refusal::AlreadyExists),
            (Operation::Insert(new), None) => Ok(put(new.key, new.properties, None)),
            (
                Operation::Update(_, _)
                | Operation::Merge(_, _)
                | Operation::Delete { .. }
                | Operation::Check {
                    condition: CheckCondition::Exists(_),
                    ..
                },
                None,
            ) => Err(Refusal::NotFound),
            (
                Operation::Update(_, if_match)
                | Operation::Merge(_, if_match)
                | Operation::Delete { if_match, .. }
                | Operation::Check {
                    condition: CheckCondition::Exists(if_match),
                    ..
                },
                Some(old),
            ) if !if_match.matches(&old.etag()) => Err(Refusal::ConditionNotSatisfied),
            (Operation::Update(new, _), Some(old)) => {
                Ok(put(new.key, new.properties, Some(old.timestamp)))
            }
            (Operation::Upsert(new, UpsertMode::Replace), old) => {
                Ok(put(new.key, new.properties, old.map(|old| old.timestamp)))
            }
            (Operation::Merge(new, _) | Operation::Upsert(new, UpsertMode::Merge), Some(old)) => {
                let mut merged = old.properties;
                merged.extend(new.properties);
                validate_shape(&new.key, &merged).map_err(Refusal::Invalid)?;
                Ok(put(new.key, merged, Some(old.timestamp)))
            }
            (Operation::Upsert(new, UpsertMode::Merge), None) => {
                Ok(put(new.key, new.properties, None))
            }
            (Operation::Delete { .. }, Some(_)) => Ok(Effect::Remove),
            (
                Operation::Check {
                    condition: CheckCondition::NotExists,
                    ..
                },
                Some(_),
            ) => Err(Refusal::AlreadyExists),
            (Operation::Check { .. }, _) => Ok(Effect::Nothing),
        }
    }
}

/// A patch's `steps` applied to the entity `old` (an empty one if none) if its `condition` holds:
/// the entity's key and its properties after.
fn apply_patch(
    key: EntityKey,
    steps: &[PatchStep],
    condition: Option<PatchCondition>,
    old: Option<StoredEntity>,
) -> Result<(EntityKey, Properties), Refusal> {
    // The entity as it stands: an empty one, with no timestamp yet, for an upsert that finds none.
    let current = match old {
        Some(old) => StoredEntity { key, ..old },
        None => StoredEntity {
            key,
            properties: Properties::new(),
            timestamp: Ticks::MIN,
        },
    };
    if let Some(condition) = condition {
        if !condition.holds(&current) {
            return Err(Refusal::PatchConditionFalse {
                condition: condition.text().to_owned(),
            });
        }
    }
    let patched = patch::apply(steps, current.properties).map_err(Refusal::Invalid)?;
    validate_shape(&current.key, &patched).map_err(Refusal::Invalid)?;
    Ok((current.key, patched))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EntityKey, Properties, Value};

    fn entity(props: &[(&str, i32)]) -> NewEntity {
        let key = EntityKey::new("p".into(), "r".into()).unwrap();
        let properties: Properties = props
            .iter()
            .map(|(n, v)| (n.to_string(), Value::Int32(*v)))
            .collect();
        NewEntity::new(key, properties).unwrap()
    }

    fn stored(props: &[(&str, i32)], timestamp: i64) -> StoredEntity {
        let new = entity(props);
        StoredEntity {
            key: new.key,
            properties: new.properties,
            timestamp: Ticks(timestamp),
        }
    }

    #[test]
    fn merge_keeps_and_replace_drops_absent_properties() {
        let old = stored(&[("a", 1), ("b", 2)], 10);
        let merged = Operation::Merge(entity(&[("b", 3)]), IfMatch::Any)
            .resolve(Some(old.clone()), Ticks(20));
        assert_eq!(merged, Ok(Effect::Put(stored(&[("a", 1), ("b", 3)], 20))));
        let replaced =
            Operation::Update(entity(&[("b", 3)]), IfMatch::Any).resolve(Some(old), Ticks(20));
        assert_eq!(replaced, Ok(Effect::Put(stored(&[("b", 3)], 20))));
    }

    #[test]
    fn timestamps_strictly_increase_even_if_the_clock_lags() {
        let old = stored(&[], 50);
        let written =
            Operation::Upsert(entity(&[]), UpsertMode::Replace).resolve(Some(old), Ticks(20));
        assert_eq!(written, Ok(Effect::Put(stored(&[], 51))));
    }

    #[test]
    fn preconditions_are_checked() {
        let old = stored(&[], 10);
        let stale = IfMatch::Tag(ETag::for_timestamp(Ticks(9)));
        let fresh = IfMatch::Tag(old.etag());
        let delete = |if_match| Operation::Delete {
            key: EntityKey::new("p".into(), "r".into()).unwrap(),
            if_match,
        };
        assert_eq!(
            delete(stale.clone()).resolve(Some(old.clone()), Ticks(11)),
            Err(Refusal::ConditionNotSatisfied)
        );
        assert_eq!(
            delete(fresh).resolve(Some(old.clone()), Ticks(11)),
            Ok(Effect::Remove)
        );
        assert_eq!(
            delete(IfMatch::Any).resolve(None, Ticks(11)),
            Err(Refusal::NotFound)
        );
        assert_eq!(
            Operation::Insert(entity(&[])).resolve(Some(old.clone()), Ticks(11)),
            Err(Refusal::AlreadyExists)
        );
        let must_not_exist = Operation::Check {
            key: EntityKey::new("p".into(), "r".into()).unwrap(),
            condition: CheckCondition::NotExists,
        };
        assert_eq!(
            must_not_exist.clone().resolve(Some(old), Ticks(11)),
            Err(Refusal::AlreadyExists)
        );
        assert_eq!(must_not_exist.resolve(None, Ticks(11)), Ok(Effect::Nothing));
    }
}
