//! The commit planner: what a commit of operations does, decided once for every store. From the
//! operations, the rows as they stand and the commit's timestamp, it yields each operation's
//! result, the rows to write and to remove, and what the declared indexes must follow, or the
//! first operation that cannot apply and why. Stores keep what is theirs: locking, reading the
//! rows, writing the plan atomically, and their fast paths.

use super::{Effect, IndexedWrite, Operation, Refusal, StoredEntity, Ticks};

/// A commit, decided.
#[derive(Debug, Default)]
pub struct CommitPlan {
    /// Each operation's result, in order: the entity as stored, `None` for a delete or a check.
    pub results: Vec<Option<StoredEntity>>,
    /// The rows the commit changes, in operation order (a check changes none).
    pub changes: Vec<PlannedChange>,
    /// The before and after of every changed row, for the declared indexes (empty unless asked).
    pub indexed_writes: Vec<IndexedWrite>,
}

/// One row a commit changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedChange {
    /// The operation that changes it (0-based): its result holds the entity a write stores.
    pub operation: usize,
    /// The row's key in the commit's partition.
    pub row_key: String,
    /// Written (`true`: the operation's result) or removed.
    pub writes: bool,
}

/// The operation of a commit that cannot apply, and why: nothing of the commit happens.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRefusal {
    /// The operation (0-based).
    pub index: usize,
    /// Its row.
    pub row_key: String,
    /// What does not hold.
    pub refusal: Refusal,
}

/// Plans a commit of `operations`, each on the row `current` holds at its position (as read by
/// the store, with its properties if the operation or an index needs them), stamped `now` (or one
/// tick past an entity's previous timestamp). With `indexed`, the plan lists every changed row's
/// properties before and after.
pub fn plan_commit(
    operations: Vec<Operation>,
    current: Vec<Option<StoredEntity>>,
    now: Ticks,
    indexed: bool,
) -> Result<CommitPlan, PlanRefusal> {
    debug_assert_eq!(operations.len(), current.len());
    let mut plan = CommitPlan {
        results: Vec::with_capacity(operations.len()),
        changes: Vec::with_capacity(operations.len()),
        indexed_writes: Vec::new(),
    };
    for (index, (operation, current)) in operations.into_iter().zip(current).enumerate() {
        let row_key = operation.row_key().to_owned();
        let before = match indexed {
            true => current.as_ref().map(|entity| entity.properties.clone()),
            false => None,
        };
        let (result, writes) = match operation.resolve(current, now) {
            Err(refusal) => {
                return Err(PlanRefusal {
                    index,
                    row_key,
                    refusal,
                })
            }
            Ok(Effect::Put(entity)) => (Some(entity), true),
            Ok(Effect::Remove) => (None, false),
            Ok(Effect::Nothing) => {
                plan.results.push(None);
                continue;
            }
        };
        if indexed {
            plan.indexed_writes.push(IndexedWrite {
                operation: index,
                row_key: row_key.clone(),
                before,
                after: result.as_ref().map(|entity| entity.properties.clone()),
            });
        }
        plan.results.push(result);
        plan.changes.push(PlannedChange {
            operation: index,
            row_key,
            writes,
        });
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        CheckCondition, EntityKey, IfMatch, NewEntity, Properties, UpsertMode, ValidationError,
        Value,
    };

    fn key(row: &str) -> EntityKey {
        EntityKey::new("p".into(), row.into()).unwrap()
    }

    fn entity(row: &str, n: i32) -> NewEntity {
        let mut properties = Properties::new();
        properties.insert("N".into(), Value::Int32(n));
        NewEntity::new(key(row), properties).unwrap()
    }

    fn stored(row: &str, n: i32, at: i64) -> StoredEntity {
        StoredEntity {
            key: key(row),
            properties: entity(row, n).properties,
            timestamp: Ticks(at),
        }
    }

    #[test]
    fn every_kind_of_operation_plans_its_change_and_result() {
        let operations = vec![
            Operation::Insert(entity("a", 1)),
            Operation::Update(entity("b", 2), IfMatch::Any),
            Operation::Merge(entity("c", 3), IfMatch::Any),
            Operation::Upsert(entity("d", 4), UpsertMode::Replace),
            Operation::Delete {
                row_key: "e".into(),
                if_match: IfMatch::Any,
            },
            Operation::Check {
                row_key: "f".into(),
                condition: CheckCondition::NotExists,
            },
        ];
        let current = vec![
            None,
            Some(stored("b", 0, 5)),
            Some(stored("c", 0, 5)),
            None,
            Some(stored("e", 0, 5)),
            None,
        ];
        let plan = plan_commit(operations, current, Ticks(100), true).unwrap();
        let changes: Vec<_> = plan
            .changes
            .iter()
            .map(|c| (c.operation, c.row_key.as_str(), c.writes))
            .collect();
        assert_eq!(
            changes,
            [
                (0, "a", true),
                (1, "b", true),
                (2, "c", true),
                (3, "d", true),
                (4, "e", false)
            ]
        );
        assert_eq!(plan.results.len(), 6);
        assert!(plan.results[4].is_none() && plan.results[5].is_none());
        assert_eq!(plan.results[0].as_ref().unwrap().timestamp, Ticks(100));
        assert_eq!(plan.indexed_writes.len(), 5);
        assert!(plan.indexed_writes[4].after.is_none());
        assert!(plan.indexed_writes[1].before.is_some());
        let unindexed = plan_commit(
            vec![Operation::Insert(entity("a", 1))],
            vec![None],
            Ticks(1),
            false,
        )
        .unwrap();
        assert!(unindexed.indexed_writes.is_empty());
    }

    #[test]
    fn the_first_refused_operation_is_the_plans_answer() {
        let operations = vec![
            Operation::Insert(entity("a", 1)),
            Operation::Insert(entity("b", 2)),
            Operation::Delete {
                row_key: "c".into(),
                if_match: IfMatch::Any,
            },
        ];
        let refused = plan_commit(
            operations,
            vec![None, Some(stored("b", 0, 5)), None],
            Ticks(100),
            false,
        )
        .unwrap_err();
        assert_eq!(refused.index, 1);
        assert_eq!(refused.row_key, "b");
        assert_eq!(refused.refusal, Refusal::AlreadyExists);
        let missing = plan_commit(
            vec![Operation::Update(entity("x", 1), IfMatch::Any)],
            vec![None],
            Ticks(1),
            false,
        )
        .unwrap_err();
        assert_eq!(missing.refusal, Refusal::NotFound);
        let mut too_many = Properties::new();
        for n in 0..200 {
            too_many.insert(format!("P{n}"), Value::Int32(n));
        }
        let mut wide = stored("w", 0, 5);
        wide.properties = too_many.clone();
        let mut more = Properties::new();
        for n in 200..260 {
            more.insert(format!("P{n}"), Value::Int32(n));
        }
        let merge = Operation::Merge(NewEntity::new(key("w"), more).unwrap(), IfMatch::Any);
        let invalid = plan_commit(vec![merge], vec![Some(wide)], Ticks(1), false).unwrap_err();
        assert!(matches!(
            invalid.refusal,
            Refusal::Invalid(ValidationError::TooManyProperties { .. })
        ));
    }

    #[test]
    fn timestamps_increase_per_entity_even_after_a_clock_set_back() {
        // The row was stamped at 500 by a server whose clock ran ahead; this commit's clock says
        // 100: the entity is stamped one tick after its previous timestamp.
        let plan = plan_commit(
            vec![Operation::Update(entity("a", 1), IfMatch::Any)],
            vec![Some(stored("a", 0, 500))],
            Ticks(100),
            false,
        )
        .unwrap();
        assert_eq!(plan.results[0].as_ref().unwrap().timestamp, Ticks(501));
        let fresh = plan_commit(
            vec![Operation::Upsert(entity("a", 1), UpsertMode::Merge)],
            vec![None],
            Ticks(100),
            false,
        )
        .unwrap();
        assert_eq!(fresh.results[0].as_ref().unwrap().timestamp, Ticks(100));
    }
}
