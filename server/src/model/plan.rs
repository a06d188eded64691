//! The commit planner: what a commit of operations does, decided once for every store. From the
//! operations, the rows as they stand, the table's indexes and the commit's timestamp, it yields
//! each operation's result, the rows to write and to remove, and the index entries to add and to
//! remove, or the first operation that cannot apply and why. Stores keep what is theirs: locking,
//! reading the rows, checking a unique entry against other partitions, writing the plan
//! atomically, and their fast paths.

use super::{
    validate_own_ttl, ChangeKind, Effect, EntityKey, Index, IndexEntry, Operation, Refusal,
    StoredEntity, Ticks, TimeToLive, UpsertMode, TTL_PROPERTY,
};

/// A commit, decided.
#[derive(Debug, Default)]
pub struct CommitPlan {
    /// Each operation's result, in order: the entity as stored, `None` for a delete or a check.
    pub results: Vec<Option<StoredEntity>>,
    /// The rows the commit changes, in operation order (a check changes none).
    pub changes: Vec<PlannedChange>,
    /// Index entries the commit removes. An entry that stays the same is neither removed nor
    /// added; a unique entry one entity of the commit gives up and another takes is both.
    pub removed_entries: Vec<IndexEntry>,
    /// Index entries the commit adds (or points at another entity).
    pub added_entries: Vec<AddedEntry>,
    /// The commit's time (an entity is stamped with it, or one tick past its previous stamp).
    pub stamped: Ticks,
}

impl CommitPlan {
    /// The unique values the commit adds: (index id, sort key).
    pub fn unique_values_added(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.added_entries
            .iter()
            .filter(|added| added.entry.unique)
            .map(|added| (added.entry.index_id, added.entry.sort_key.as_slice()))
    }
}

/// What a table asks of every commit's plan, beside its operations and rows.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanRules<'a> {
    /// The table's indexes (only those kept get entries).
    pub indexes: &'a [Index],
    /// When its entities expire, if they do.
    pub time_to_live: Option<TimeToLive>,
    /// Keep each changed row as it was ([`PlannedChange::before`]), for a change feed that
    /// records before images.
    pub before_images: bool,
}

/// One row a commit changes.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedChange {
    /// The operation that changes it (0-based): its result holds the entity a write stores.
    pub operation: usize,
    /// The row's key in the commit's partition.
    pub row_key: String,
    /// Written (`true`: the operation's result) or removed.
    pub writes: bool,
    /// How, as a change feed says it.
    pub kind: ChangeKind,
    /// The entity as it was (live) before the change, when the rules ask for before images.
    pub before: Option<StoredEntity>,
    /// The change replaces a row that had expired and that the sweep had not removed yet: a
    /// change feed shows its expiry first (with the expired entity as its before image, when
    /// the rules ask for before images), as if the sweep had come before.
    pub replaces_expired: Option<Expired>,
}

/// An expired row a change replaces.
#[derive(Debug, Clone, PartialEq)]
pub struct Expired {
    /// The entity that expired, when the rules ask for before images.
    pub before: Option<StoredEntity>,
}

/// An index entry a commit adds, and the operation whose entity it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedEntry {
    /// The entry.
    pub entry: IndexEntry,
    /// The operation (0-based).
    pub operation: usize,
    /// The entity's row, in the commit's partition.
    pub row_key: String,
    /// The index's name, for a refusal.
    pub index_name: String,
}

impl AddedEntry {
    /// The refusal of this entry's operation: its unique index holds the value for `holder`.
    pub fn taken_by(&self, holder: EntityKey) -> PlanRefusal {
        PlanRefusal {
            index: self.operation,
            row_key: self.row_key.clone(),
            refusal: Refusal::IndexValueTaken {
                index: self.index_name.clone(),
                holder,
            },
        }
    }
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

/// Plans a commit of `operations` on partition `partition_key`, each on the row `current` holds
/// at its position (as read by the store, with its properties if the operation or an index needs
/// them), stamped `now` (or one tick past an entity's previous timestamp), keeping every kept
/// index of the rules' `indexes`. Refuses the first operation that cannot apply, then the first that adds a
/// unique entry an earlier operation of the commit adds too. With a time to live (`ttl`), a row
/// that has expired at `now` is missing to every operation but an expiry, and a written entity's
/// own `TimeToLive` must be valid.
pub fn plan_commit(
    partition_key: &str,
    operations: Vec<Operation>,
    current: Vec<Option<StoredEntity>>,
    now: Ticks,
    rules: PlanRules<'_>,
) -> Result<CommitPlan, PlanRefusal> {
    debug_assert_eq!(operations.len(), current.len());
    let ttl = rules.time_to_live;
    let kept: Vec<&Index> = rules
        .indexes
        .iter()
        .filter(|index| index.is_kept())
        .collect();
    let mut plan = CommitPlan {
        results: Vec::with_capacity(operations.len()),
        changes: Vec::with_capacity(operations.len()),
        stamped: now,
        ..CommitPlan::default()
    };
    for (index, (operation, current)) in operations.into_iter().zip(current).enumerate() {
        let row_key = operation.row_key().to_owned();
        // Each entity's entries are bounded (MAX_INDEX_ENTRIES_PER_ENTITY): a write past the
        // bound is refused here, before anything is written.
        let entries_of = |entity: Option<&StoredEntity>| {
            kept.iter()
                .map(|kept| match entity {
                    Some(e) => kept.entries(partition_key, &row_key, &e.properties),
                    None => Ok(Vec::new()),
                })
                .collect::<Result<Vec<Vec<IndexEntry>>, _>>()
                .map_err(|too_many| PlanRefusal {
                    index,
                    row_key: row_key.clone(),
                    refusal: Refusal::Invalid(too_many.into()),
                })
        };
        let before = entries_of(current.as_ref())?;
        let (current, replaces_expired) = match (ttl, current, &operation) {
            (_, current, Operation::Expire { .. }) => (current, None),
            (Some(ttl), Some(row), _) if expired(ttl, &row, now) => {
                let before = Some(row).filter(|_| rules.before_images);
                (None, Some(Expired { before }))
            }
            (_, current, _) => (current, None),
        };
        let kind = change_kind(&operation, current.is_some());
        let before_image = current.clone().filter(|_| rules.before_images);
        let (result, writes) = match operation.resolve(current, now) {
            Err(refusal) => {
                return Err(PlanRefusal {
                    index,
                    row_key,
                    refusal,
                })
            }
            Ok(Effect::Put(entity)) => {
                if let Some(Err(invalid)) = ttl.map(|_| validate_own_ttl(&entity.properties)) {
                    return Err(PlanRefusal {
                        index,
                        row_key,
                        refusal: Refusal::Invalid(invalid),
                    });
                }
                (Some(entity), true)
            }
            Ok(Effect::Remove) => (None, false),
            Ok(Effect::Nothing) => {
                plan.results.push(None);
                continue;
            }
        };
        let after = entries_of(result.as_ref())?;
        plan.add_entry_changes(&kept, before, after, index, &row_key);
        plan.results.push(result);
        plan.changes.push(PlannedChange {
            operation: index,
            row_key,
            writes,
            kind,
            before: before_image,
            replaces_expired,
        });
    }
    match clash_within_commit(partition_key, &plan.added_entries) {
        Some(refusal) => Err(refusal),
        None => Ok(plan),
    }
}

impl CommitPlan {
    /// Adds the entries of the `kept` indexes that operation `operation` (on `row_key`) removes
    /// and adds, from the entries `before` it to those `after` it (each per index, in order).
    fn add_entry_changes(
        &mut self,
        kept: &[&Index],
        before: Vec<Vec<IndexEntry>>,
        after: Vec<Vec<IndexEntry>>,
        operation: usize,
        row_key: &str,
    ) {
        for ((old, new), kept) in before.into_iter().zip(after).zip(kept) {
            if old == new {
                continue;
            }
            let (removed, added) = differences(old, new);
            self.removed_entries.extend(removed);
            self.added_entries
                .extend(added.into_iter().map(|entry| AddedEntry {
                    entry,
                    operation,
                    row_key: row_key.to_owned(),
                    index_name: kept.definition.name.clone(),
                }));
        }
    }
}

/// Whether `row` has expired at `now` under `ttl`.
fn expired(ttl: TimeToLive, row: &StoredEntity, now: Ticks) -> bool {
    let own = row
        .properties
        .get(TTL_PROPERTY)
        .map(|value| value.borrowed());
    ttl.expired(row.timestamp, own, now)
}

/// How `operation` changes its row, which `existed` or not (for the change it makes, if any).
fn change_kind(operation: &Operation, existed: bool) -> ChangeKind {
    match operation {
        Operation::Delete { .. } => ChangeKind::Delete,
        Operation::Expire { .. } => ChangeKind::Expire,
        Operation::Insert(_) => ChangeKind::Insert,
        _ if !existed => ChangeKind::Insert,
        Operation::Update(..) | Operation::Upsert(_, UpsertMode::Replace) => ChangeKind::Replace,
        Operation::Merge(..) | Operation::Upsert(_, UpsertMode::Merge) => ChangeKind::Merge,
        Operation::Patch { .. } => ChangeKind::Patch,
        // A check changes nothing; its kind is never used.
        Operation::Check { .. } => ChangeKind::Replace,
    }
}

/// The entries of one index only in `old` (removed) and only in `new` (added), both in sort-key
/// order: an entry an entity keeps is neither.
fn differences(old: Vec<IndexEntry>, new: Vec<IndexEntry>) -> (Vec<IndexEntry>, Vec<IndexEntry>) {
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    let (mut old, mut new) = (old.into_iter().peekable(), new.into_iter().peekable());
    loop {
        match (old.peek(), new.peek()) {
            (Some(a), Some(b)) if a.sort_key == b.sort_key => {
                old.next();
                new.next();
            }
            (Some(a), Some(b)) if a.sort_key < b.sort_key => removed.extend(old.next()),
            (Some(_), Some(_)) | (None, Some(_)) => added.extend(new.next()),
            (Some(_), None) => removed.extend(old.next()),
            (None, None) => return (removed, added),
        }
    }
}

/// The refusal of the first entry that adds a unique value an earlier entry of the same commit
/// adds too (two of its entities with the same unique values).
fn clash_within_commit(partition_key: &str, added: &[AddedEntry]) -> Option<PlanRefusal> {
    added.iter().enumerate().find_map(|(at, entry)| {
        let earlier = added[..at]
            .iter()
            .find(|other| other.entry.unique && other.entry == entry.entry)?;
        Some(entry.taken_by(EntityKey {
            partition_key: partition_key.to_owned(),
            row_key: earlier.row_key.clone(),
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(indexes: &[Index], time_to_live: Option<TimeToLive>) -> PlanRules<'_> {
        PlanRules {
            indexes,
            time_to_live,
            before_images: false,
        }
    }
    use crate::model::{
        CheckCondition, EntityKey, IfMatch, IndexDefinition, IndexScope, IndexState, NewEntity,
        Properties, UpsertMode, ValidationError, Value,
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
    fn an_expired_row_is_missing_to_every_operation_but_an_expiry() {
        use crate::model::{ETag, TimeToLive, TICKS_PER_SECOND};
        let ttl = Some(TimeToLive {
            default_seconds: Some(1),
        });
        let now = Ticks(10 * TICKS_PER_SECOND);
        let expired = || Some(stored("a", 1, 0));
        let live = || Some(stored("a", 1, now.0 - 1));
        let update = || Operation::Update(entity("a", 2), IfMatch::Any);
        let refused = plan_commit("p", vec![update()], vec![expired()], now, rules(&[], ttl));
        assert_eq!(refused.unwrap_err().refusal, Refusal::NotFound);
        let inserted = plan_commit(
            "p",
            vec![Operation::Insert(entity("a", 2))],
            vec![expired()],
            now,
            rules(&[by_n(false)], ttl),
        )
        .unwrap();
        assert_eq!(inserted.changes[0].kind, ChangeKind::Insert);
        assert!(inserted.changes[0].replaces_expired.is_some());
        assert_eq!(
            inserted.removed_entries.len(),
            1,
            "the expired row's entry goes"
        );
        assert!(plan_commit("p", vec![update()], vec![live()], now, rules(&[], ttl)).is_ok());
        assert!(plan_commit("p", vec![update()], vec![expired()], now, rules(&[], None)).is_ok());
        let expire = |tag: ETag| Operation::Expire {
            key: key("a"),
            if_match: IfMatch::Tag(tag),
        };
        let removed = plan_commit(
            "p",
            vec![expire(ETag::for_timestamp(Ticks(0)))],
            vec![expired()],
            now,
            rules(&[], ttl),
        )
        .unwrap();
        assert_eq!(removed.changes[0].kind, ChangeKind::Expire);
        assert!(!removed.changes[0].writes);
        let rewritten = plan_commit(
            "p",
            vec![expire(ETag::for_timestamp(Ticks(0)))],
            vec![live()],
            now,
            rules(&[], ttl),
        )
        .unwrap();
        assert!(
            rewritten.changes.is_empty(),
            "a row rewritten since is left alone"
        );
        let mut own = entity("b", 1);
        own.properties
            .insert("TimeToLive".into(), crate::model::Value::Int32(0));
        let invalid = plan_commit(
            "p",
            vec![Operation::Insert(own)],
            vec![None],
            now,
            rules(&[], ttl),
        );
        assert!(matches!(invalid.unwrap_err().refusal, Refusal::Invalid(_)));
    }

    #[test]
    fn every_kind_of_operation_plans_its_change_and_result() {
        let operations = vec![
            Operation::Insert(entity("a", 1)),
            Operation::Update(entity("b", 2), IfMatch::Any),
            Operation::Merge(entity("c", 3), IfMatch::Any),
            Operation::Upsert(entity("d", 4), UpsertMode::Replace),
            Operation::Delete {
                key: key("e"),
                if_match: IfMatch::Any,
            },
            Operation::Check {
                key: key("f"),
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
        let plan = plan_commit(
            "p",
            operations,
            current,
            Ticks(100),
            rules(&[by_n(false)], None),
        )
        .unwrap();
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
        // N changes from 0 on b, c and e (removed), is new on a and d: the index follows.
        let added: Vec<_> = plan
            .added_entries
            .iter()
            .map(|a| a.row_key.as_str())
            .collect();
        assert_eq!(added, ["a", "b", "c", "d"]);
        assert_eq!(plan.removed_entries.len(), 3);
        let unindexed = plan_commit(
            "p",
            vec![Operation::Insert(entity("a", 1))],
            vec![None],
            Ticks(1),
            rules(&[], None),
        )
        .unwrap();
        assert!(unindexed.added_entries.is_empty() && unindexed.removed_entries.is_empty());
    }

    /// An index `ByN` over property `N`.
    fn by_n(unique: bool) -> Index {
        let definition =
            IndexDefinition::new("ByN".into(), vec!["N".into()], IndexScope::Table, unique)
                .unwrap();
        Index {
            id: 7,
            definition,
            state: IndexState::Ready,
        }
    }

    #[test]
    fn an_entry_that_stays_the_same_is_neither_removed_nor_added() {
        let plan = plan_commit(
            "p",
            vec![Operation::Merge(entity("a", 1), IfMatch::Any)],
            vec![Some(stored("a", 1, 5))],
            Ticks(100),
            rules(&[by_n(true)], None),
        )
        .unwrap();
        assert!(plan.added_entries.is_empty() && plan.removed_entries.is_empty());
        let failed = Index {
            state: IndexState::Failed("a conflict".into()),
            ..by_n(true)
        };
        let plan = plan_commit(
            "p",
            vec![Operation::Insert(entity("b", 2))],
            vec![None],
            Ticks(100),
            rules(&[failed], None),
        )
        .unwrap();
        assert!(plan.added_entries.is_empty(), "a failed index is not kept");
    }

    #[test]
    fn two_entities_of_one_commit_never_take_one_unique_value() {
        let operations = vec![
            Operation::Insert(entity("a", 1)),
            Operation::Insert(entity("b", 2)),
            Operation::Insert(entity("c", 1)),
        ];
        let refused = plan_commit(
            "p",
            operations.clone(),
            vec![None, None, None],
            Ticks(100),
            rules(&[by_n(true)], None),
        )
        .unwrap_err();
        assert_eq!((refused.index, refused.row_key.as_str()), (2, "c"));
        assert_eq!(
            refused.refusal,
            Refusal::IndexValueTaken {
                index: "ByN".into(),
                holder: key("a"),
            }
        );
        // Not unique: both entries are added.
        let plan = plan_commit(
            "p",
            operations,
            vec![None, None, None],
            Ticks(1),
            rules(&[by_n(false)], None),
        )
        .unwrap();
        assert_eq!(plan.added_entries.len(), 3);
        // One entity gives a unique value up and another takes it in the same commit.
        let plan = plan_commit(
            "p",
            vec![
                Operation::Update(entity("a", 9), IfMatch::Any),
                Operation::Insert(entity("b", 1)),
            ],
            vec![Some(stored("a", 1, 5)), None],
            Ticks(100),
            rules(&[by_n(true)], None),
        )
        .unwrap();
        assert_eq!(plan.removed_entries, [plan.added_entries[1].entry.clone()]);
        assert_eq!(plan.added_entries[1].row_key, "b");
    }

    #[test]
    fn an_entry_taken_elsewhere_refuses_the_operation_adding_it() {
        let plan = plan_commit(
            "p",
            vec![
                Operation::Check {
                    key: key("z"),
                    condition: CheckCondition::NotExists,
                },
                Operation::Insert(entity("a", 1)),
            ],
            vec![None, None],
            Ticks(100),
            rules(&[by_n(true)], None),
        )
        .unwrap();
        let holder = EntityKey::new("q".into(), "x".into()).unwrap();
        let refused = plan.added_entries[0].taken_by(holder.clone());
        assert_eq!((refused.index, refused.row_key.as_str()), (1, "a"));
        assert_eq!(
            refused.refusal,
            Refusal::IndexValueTaken {
                index: "ByN".into(),
                holder,
            }
        );
    }

    #[test]
    fn the_first_refused_operation_is_the_plans_answer() {
        let operations = vec![
            Operation::Insert(entity("a", 1)),
            Operation::Insert(entity("b", 2)),
            Operation::Delete {
                key: key("c"),
                if_match: IfMatch::Any,
            },
        ];
        let refused = plan_commit(
            "p",
            operations,
            vec![None, Some(stored("b", 0, 5)), None],
            Ticks(100),
            rules(&[], None),
        )
        .unwrap_err();
        assert_eq!(refused.index, 1);
        assert_eq!(refused.row_key, "b");
        assert_eq!(refused.refusal, Refusal::AlreadyExists);
        let missing = plan_commit(
            "p",
            vec![Operation::Update(entity("x", 1), IfMatch::Any)],
            vec![None],
            Ticks(1),
            rules(&[], None),
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
        let invalid = plan_commit(
            "p",
            vec![merge],
            vec![Some(wide)],
            Ticks(1),
            rules(&[], None),
        )
        .unwrap_err();
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
            "p",
            vec![Operation::Update(entity("a", 1), IfMatch::Any)],
            vec![Some(stored("a", 0, 500))],
            Ticks(100),
            rules(&[], None),
        )
        .unwrap();
        assert_eq!(plan.results[0].as_ref().unwrap().timestamp, Ticks(501));
        let fresh = plan_commit(
            "p",
            vec![Operation::Upsert(entity("a", 1), UpsertMode::Merge)],
            vec![None],
            Ticks(100),
            rules(&[], None),
        )
        .unwrap();
        assert_eq!(fresh.results[0].as_ref().unwrap().timestamp, Ticks(100));
    }

    #[test]
    fn an_array_index_adds_and_removes_only_the_elements_that_change() {
        let entry = |key: &str| IndexEntry {
            index_id: 7,
            sort_key: key.as_bytes().to_vec(),
            unique: false,
        };
        let (removed, added) = differences(
            vec![entry("b1"), entry("b2"), entry("b4")],
            vec![entry("b2"), entry("b3"), entry("b4"), entry("b5")],
        );
        assert_eq!(removed, vec![entry("b1")]);
        assert_eq!(added, vec![entry("b3"), entry("b5")]);
        let (removed, added) = differences(vec![entry("a")], Vec::new());
        assert_eq!((removed, added), (vec![entry("a")], Vec::new()));
    }
}
