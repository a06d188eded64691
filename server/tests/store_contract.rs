//! The storage contract, checked against a model: random sequences of partition commits and
//! commits across partitions (with preconditions that hold and that fail), point reads, reads of
//! several keys at once, forward, reverse, prefix and bounded scans
//! resumed from where they stopped, and table deletion, each compared with a `BTreeMap` of what
//! the store should hold. [`check_contract`] speaks only the contract's traits, so every store runs
//! it unchanged: a new store adds one `#[test]` that opens it.

#[path = "../../tests/common/postgres.rs"]
mod postgres_cluster;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use trestle_server::model::{
    ChangeFeed, CheckCondition, Document, ETag, Effect, EntityKey, IfMatch, IndexDefinition,
    IndexScope, IndexState, KeyPosition, KeyRange, NewEntity, Operation, PatchCondition, PatchStep,
    Properties, StoredEntity, TableName, Ticks, UpsertMode, Value,
};
use trestle_server::storage::{
    read_entity, Commit, CommitOutcome, CreateRefusal, FeedBatch, KeyScan, PartitionBatch,
    PostgresOptions, PostgresStore, RejectReason, SettingsChange, SledStore, StorageError, Store,
    StoreOptions, Table, TableKey, Visit,
};

/// The store's one commit ([`Store::commit`]), run to its end from a test's thread.
fn commit_to(store: &Arc<dyn Store>, commit: Commit) -> CommitOutcome {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| tokio::runtime::Runtime::new().unwrap());
    runtime.block_on(store.clone().commit(commit)).unwrap()
}

/// A commit of `operations` on one partition of `table` ([`commit_to`]).
fn commit_on(
    store: &Arc<dyn Store>,
    table: &dyn Table,
    partition_key: &str,
    operations: Vec<Operation>,
) -> CommitOutcome {
    let commit = Commit::on_partition(table.name().clone(), partition_key.into(), operations);
    commit_to(store, commit)
}

/// splitmix64: a small deterministic generator, so a failing seed can be replayed.
struct Rng {
    state: u64,
}

impl Rng {
    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }

    /// One of `items`.
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const PARTITIONS: &[&str] = &["a", "ab", "b", "é"];
const ROWS: &[&str] = &["", "log-1", "log-2", "log-10", "m", "z", "zz", "ü"];

type Model = BTreeMap<(String, String), StoredEntity>;

fn key(partition_key: &str, row_key: &str) -> EntityKey {
    EntityKey::new(partition_key.into(), row_key.into()).unwrap()
}

fn new_entity(rng: &mut Rng, partition_key: &str, row_key: &str) -> NewEntity {
    let mut properties = Properties::new();
    for name in ["N", "S", "D"] {
        if rng.below(2) == 0 {
            let value = match name {
                "N" => Value::Int64(rng.below(100) as i64),
                "D" => document(rng),
                _ => Value::String(format!("s{}", rng.below(10))),
            };
            properties.insert(name.into(), value);
        }
    }
    NewEntity::new(key(partition_key, row_key), properties).unwrap()
}

/// A small document: an object holding a number, a null and an array of strings.
fn document(rng: &mut Rng) -> Value {
    let tags = (0..rng.below(3)).map(|i| Value::String(format!("t{i}")));
    let tags = Document::array(tags).unwrap();
    let members = [
        ("N".to_owned(), Value::Int64(rng.below(100) as i64)),
        ("Nothing".to_owned(), Value::Null),
        ("Tags".to_owned(), Value::Document(tags)),
    ];
    Value::Document(Document::object(members).unwrap())
}

/// An `if_match` for the row: `*`, its current ETag, or a stale one.
fn if_match(rng: &mut Rng, current: Option<&StoredEntity>) -> IfMatch {
    match (rng.below(3), current) {
        (0, _) | (_, None) => IfMatch::Any,
        (1, Some(entity)) => IfMatch::Tag(entity.etag()),
        (_, Some(entity)) => IfMatch::Tag(ETag::for_timestamp(Ticks(entity.timestamp.0 - 1))),
    }
}

fn random_operation(rng: &mut Rng, model: &Model, partition_key: &str, row_key: &str) -> Operation {
    let current = model.get(&(partition_key.to_owned(), row_key.to_owned()));
    match rng.below(8) {
        0 | 1 => Operation::Insert(new_entity(rng, partition_key, row_key)),
        2 => Operation::Update(
            new_entity(rng, partition_key, row_key),
            if_match(rng, current),
        ),
        3 => Operation::Merge(
            new_entity(rng, partition_key, row_key),
            if_match(rng, current),
        ),
        4 => {
            let mode = if rng.below(2) == 0 {
                UpsertMode::Replace
            } else {
                UpsertMode::Merge
            };
            Operation::Upsert(new_entity(rng, partition_key, row_key), mode)
        }
        5 => Operation::Delete {
            key: key(partition_key, row_key),
            if_match: if_match(rng, current),
        },
        6 => {
            // Increments of N (an Int64) apply; of S (a String) they are refused.
            let steps = (0..1 + rng.below(3))
                .map(|_| match rng.below(4) {
                    0 => PatchStep::Increment {
                        property: if rng.below(4) == 0 { "S" } else { "N" }.into(),
                        by: Value::Int64(rng.below(5) as i64 - 2),
                    },
                    1 => PatchStep::Set {
                        property: "S".into(),
                        value: Value::String(format!("s{}", rng.below(10))),
                    },
                    2 => PatchStep::Remove {
                        property: "N".into(),
                    },
                    _ => PatchStep::SetIfAbsent {
                        property: "N".into(),
                        value: Value::Int64(7),
                    },
                })
                .collect();
            let upsert = rng.below(2) == 0;
            Operation::Patch {
                key: key(partition_key, row_key),
                steps,
                if_match: if upsert {
                    IfMatch::Any
                } else {
                    if_match(rng, current)
                },
                upsert,
                // Sometimes only while the counter is small: refused as the store finds it.
                condition: (rng.below(3) == 0).then(|| {
                    PatchCondition::new("N lt 50L".into(), |entity| {
                        matches!(entity.properties.get("N"), Some(Value::Int64(n)) if *n < 50)
                    })
                }),
            }
        }
        _ => Operation::Check {
            key: key(partition_key, row_key),
            condition: if rng.below(2) == 0 {
                CheckCondition::NotExists
            } else {
                CheckCondition::Exists(if_match(rng, current))
            },
        },
    }
}

/// A commit of 1 to 4 operations on distinct rows of one partition, checked against the model:
/// the first refused operation (by the model's own rules) is the one the store names, and
/// nothing changes; otherwise every effect lands, with timestamps that only grow.
fn commit(rng: &mut Rng, store: &Arc<dyn Store>, table: &dyn Table, model: &mut Model) {
    let partition_key = rng.pick(PARTITIONS);
    let operations = random_operations(rng, model, &[partition_key], 4);
    let expected = expect(model, &operations);
    let outcome = commit_on(store, table, partition_key, operations);
    check_outcome(outcome, expected, model);
}

/// A commit across 2 to 4 partitions of 1 to 3 operations each, in random order, checked against
/// the model as a single-partition commit is.
fn commit_across(rng: &mut Rng, store: &Arc<dyn Store>, name: &TableName, model: &mut Model) {
    let mut partitions = Vec::new();
    for _ in 0..2 + rng.below(3) {
        let partition_key = rng.pick(PARTITIONS);
        if !partitions.contains(&partition_key) {
            partitions.push(partition_key);
        }
    }
    let mut operations = random_operations(rng, model, &partitions, 3);
    for at in (1..operations.len()).rev() {
        operations.swap(at, rng.below(at + 1));
    }
    let expected = expect(model, &operations);
    let count = operations.len();
    let mut batches: Vec<PartitionBatch> = Vec::new();
    for (position, operation) in operations.into_iter().enumerate() {
        let partition_key = operation.partition_key().to_owned();
        let batch = match batches
            .iter()
            .position(|b| b.partition_key == partition_key)
        {
            Some(at) => &mut batches[at],
            None => {
                batches.push(PartitionBatch {
                    table: name.clone(),
                    partition_key,
                    operations: Vec::new(),
                    positions: Vec::new(),
                    seals_outcome: false,
                });
                batches.last_mut().unwrap()
            }
        };
        batch.operations.push(operation);
        batch.positions.push(position);
    }
    let outcome = commit_to(
        store,
        Commit {
            batches,
            operations: count,
        },
    );
    check_outcome(outcome, expected, model);
}

/// 1 to `rows` operations on distinct rows of each of `partitions`, in partition order.
fn random_operations(
    rng: &mut Rng,
    model: &Model,
    partitions: &[&str],
    rows: usize,
) -> Vec<Operation> {
    let mut operations: Vec<Operation> = Vec::new();
    for partition_key in partitions {
        let mut chosen: Vec<&str> = Vec::new();
        for _ in 0..1 + rng.below(rows) {
            let row = rng.pick(ROWS);
            if !chosen.contains(&row) {
                chosen.push(row);
                operations.push(random_operation(rng, model, partition_key, row));
            }
        }
    }
    operations
}

/// Each operation's row and effect, or the position of the first that cannot apply.
type Expected = Result<Vec<((String, String), Effect)>, usize>;

/// What the model expects of `operations` (on distinct rows): each one's row and effect, or the
/// position of the first that cannot apply.
fn expect(model: &Model, operations: &[Operation]) -> Expected {
    operations
        .iter()
        .enumerate()
        .map(|(index, operation)| {
            let row = (
                operation.partition_key().to_owned(),
                operation.row_key().to_owned(),
            );
            let effect = operation
                .clone()
                .resolve(model.get(&row).cloned(), Ticks(1));
            effect.map(|effect| (row, effect)).map_err(|_| index)
        })
        .collect()
}

/// Checks a commit's outcome against the model's expectation, and applies it to the model.
fn check_outcome(outcome: CommitOutcome, expected: Expected, model: &mut Model) {
    match (outcome, expected) {
        (Err(rejection), Err(index)) => {
            assert_eq!(rejection.index, index, "the refused operation");
            assert!(matches!(rejection.reason, RejectReason::Refused { .. }));
        }
        (Ok(committed), Ok(expected)) => {
            for ((row, effect), stored) in expected.into_iter().zip(committed.stored) {
                match effect {
                    Effect::Put(entity) => {
                        let stored = stored.expect("a put stores an entity");
                        assert_eq!(stored.key, entity.key);
                        assert_eq!(stored.properties, entity.properties);
                        if let Some(previous) = model.get(&row) {
                            assert!(stored.timestamp > previous.timestamp, "timestamps grow");
                        }
                        model.insert(row, stored);
                    }
                    Effect::Remove => {
                        model.remove(&row);
                    }
                    Effect::Nothing => {}
                }
            }
        }
        (outcome, expected) => {
            panic!("store answered {outcome:?}, the model expected {expected:?}")
        }
    }
}

/// Reads of 1 to 8 keys at once (some of a table that does not exist) see what the model holds.
fn reads_at_once(rng: &mut Rng, store: &dyn Store, name: &TableName, model: &Model) {
    let nowhere = TableName::parse("Nowhere").unwrap();
    let mut keys: Vec<TableKey> = Vec::new();
    for _ in 0..1 + rng.below(8) {
        let table = if rng.below(6) == 0 { &nowhere } else { name };
        let key = key(rng.pick(PARTITIONS), rng.pick(ROWS));
        if !keys.iter().any(|k| k.table == *table && k.key == key) {
            keys.push(TableKey {
                table: table.clone(),
                key,
            });
        }
    }
    let mut found = vec![None; keys.len()];
    store
        .get_many(&keys, &mut |position, view| {
            found[position] = Some(view.timestamp);
            Ok(())
        })
        .unwrap();
    for (key, found) in keys.iter().zip(found) {
        let row = (key.key.partition_key.clone(), key.key.row_key.clone());
        let expected = (key.table == *name)
            .then(|| model.get(&row).map(|entity| entity.timestamp))
            .flatten();
        assert_eq!(found, expected, "a read at once of {key:?}");
    }
}

fn point_reads(table: &dyn Table, model: &Model) {
    for partition_key in PARTITIONS {
        for row_key in ROWS {
            let read = |view: trestle_server::storage::EntityView<'_>| {
                let properties: Properties = view
                    .properties()
                    .map(|p| p.map(|(name, value)| (name.to_owned(), value.to_value())))
                    .collect::<Result<_, _>>()?;
                Ok((view.timestamp, properties))
            };
            let read = read_entity(table, &key(partition_key, row_key), read).unwrap();
            let expected = model
                .get(&(partition_key.to_string(), row_key.to_string()))
                .map(|e| (e.timestamp, e.properties.clone()));
            assert_eq!(read, expected, "point read of ({partition_key}, {row_key})");
        }
    }
}

/// Random ranges of the kinds the planner emits: whole table, a partition, a row range, a row
/// prefix, a partition range, and two partitions at once.
fn random_ranges(rng: &mut Rng) -> Vec<KeyRange> {
    let pk = rng.pick(PARTITIONS);
    match rng.below(8) {
        0 => vec![KeyRange::all()],
        1 => vec![KeyRange::partition(pk)],
        2 => vec![KeyRange::rows(pk, rng.pick(ROWS), rng.pick(ROWS))],
        3 => vec![KeyRange::row_prefix(
            pk,
            rng.pick(&["log-", "log-1", "z", ""]),
        )],
        4 => vec![KeyRange {
            start: trestle_server::model::partition_start(rng.pick(PARTITIONS)),
            end: trestle_server::model::partition_end(rng.pick(PARTITIONS)),
        }],
        5 => vec![KeyRange::partition("a"), KeyRange::partition("b")],
        // `PartitionKey gt pk` and `PartitionKey lt pk`, as the planner makes them.
        6 => vec![KeyRange {
            start: Bound::Included(KeyPosition::after_rows(pk)),
            end: Bound::Unbounded,
        }],
        _ => vec![KeyRange {
            start: Bound::Unbounded,
            end: Bound::Excluded(KeyPosition::row(pk, "")),
        }],
    }
    .into_iter()
    .filter(|range| !range.is_empty())
    .collect()
}

/// A scan of random ranges, in random direction, read in chunks of random size that resume where
/// the previous one stopped: together they read exactly the model's keys in those ranges, in
/// order.
fn scan(rng: &mut Rng, table: &dyn Table, model: &Model) {
    let ranges = random_ranges(rng);
    let reverse = rng.below(2) == 0;
    let mut expected: Vec<(String, String)> = model
        .keys()
        .filter(|(pk, rk)| {
            let position = KeyPosition::row(pk.as_str(), rk.as_str());
            ranges.iter().any(|range| range.contains(&position))
        })
        .cloned()
        .collect();
    if reverse {
        expected.reverse();
    }
    let mut remaining = ranges;
    let mut read = Vec::new();
    loop {
        let chunk = 1 + rng.below(4);
        // The rows expected are a hint: right, too few, too many or unknown, the scan is whole.
        let expected_rows = match rng.below(4) {
            0 => None,
            1 => Some(chunk + 1),
            _ => Some(rng.below(8)),
        };
        let mut taken = 0;
        let stopped = table
            .visit(
                KeyScan {
                    ranges: &remaining,
                    reverse,
                    expected_rows,
                },
                &mut |entity| {
                    if taken == chunk {
                        return Ok(Visit::Stop);
                    }
                    taken += 1;
                    read.push((entity.partition_key.to_owned(), entity.row_key.to_owned()));
                    Ok(Visit::Next)
                },
            )
            .unwrap();
        let Some(position) = stopped else { break };
        remaining = remaining
            .iter()
            .map(|range| range.from(&position, reverse))
            .filter(|range| !range.is_empty())
            .collect();
    }
    assert_eq!(read, expected, "scan (reverse: {reverse})");
}

/// Settings: none at first, then each as last written, until removed.
fn check_settings(store: &dyn Store) {
    assert_eq!(store.setting("cors").unwrap(), None);
    store.put_setting("cors", Some(b"one")).unwrap();
    store.put_setting("acl.7", Some(b"")).unwrap();
    store.put_setting("cors", Some(b"two")).unwrap();
    assert_eq!(store.setting("cors").unwrap().as_deref(), Some(&b"two"[..]));
    assert_eq!(store.setting("acl.7").unwrap().as_deref(), Some(&b""[..]));
    store.put_setting("acl.7", None).unwrap();
    assert_eq!(store.setting("acl.7").unwrap(), None);
    store.put_setting("acl.7", None).unwrap();
}

/// Runs `steps` random steps against `store`, checking each against the model.
pub fn check_contract(store: &Arc<dyn Store>, seed: u64, steps: usize) {
    if seed == 1 {
        check_settings(store.as_ref());
    }
    let mut rng = Rng { state: seed };
    let name = TableName::parse("Contract").unwrap();
    let mut table: Arc<dyn Table> = store
        .create_table(&name, &[], SettingsChange::default())
        .unwrap()
        .unwrap();
    let mut model = Model::new();
    for _ in 0..steps {
        match rng.below(20) {
            0..=6 => commit(&mut rng, store, table.as_ref(), &mut model),
            7..=9 => commit_across(&mut rng, store, &name, &mut model),
            10 => point_reads(table.as_ref(), &model),
            11 => reads_at_once(&mut rng, store.as_ref(), &name, &model),
            12..=18 => scan(&mut rng, table.as_ref(), &model),
            _ => {
                // Deleting the table: commits to its name are refused, its old handle reads
                // nothing; a table of the same name starts empty.
                assert!(store.delete_table(&name).unwrap());
                assert!(store.table(&name).unwrap().is_none());
                let insert = vec![Operation::Insert(new_entity(&mut rng, "a", "r"))];
                let gone = commit_on(store, table.as_ref(), "a", insert);
                assert!(matches!(
                    gone,
                    Err(rejection) if rejection.reason == RejectReason::TableGone
                ));
                assert_eq!(
                    table
                        .visit(KeyScan::forward(&[KeyRange::all()]), &mut |_| Ok(
                            Visit::Next
                        ))
                        .unwrap(),
                    None
                );
                model.clear();
                table = loop {
                    match store
                        .create_table(&name, &[], SettingsChange::default())
                        .unwrap()
                    {
                        Ok(table) => break table,
                        // Its rows are still being reclaimed.
                        Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                    }
                };
                point_reads(table.as_ref(), &model);
            }
        }
    }
    point_reads(table.as_ref(), &model);
}

#[test]
fn the_sled_store_keeps_the_contract() {
    for seed in [1, 2, 3, 0x5eed] {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), StoreOptions::default()).unwrap();
        check_contract(&(Arc::new(store) as Arc<dyn Store>), seed, 400);
    }
}

#[test]
fn the_postgres_store_keeps_the_contract() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    for seed in [1, 2, 3, 0x5eed] {
        let url = postgres.database(&format!("contract_{seed}"));
        let store = open_postgres(&url, 2, true).unwrap();
        check_contract(&(Arc::new(store) as Arc<dyn Store>), seed, 400);
    }
}

/// A feed reader that resumes after the last record of each read misses no record and reads
/// none twice while [`FEED_WRITERS`] threads commit inserts of one or two entities, each commit
/// its own transaction, for `writing`: commits end in another order than their transactions
/// were numbered, and a record must appear only once every earlier transaction has. Over
/// PostgreSQL the feed's horizon once paired each session's locks by its virtual transaction id,
/// which a committing session changes between its locks: 1 to 4 records a second were passed.
fn check_feed_under_concurrent_commits(store: Arc<dyn Store>, writing: Duration) {
    let name = TableName::parse("Feed").unwrap();
    let created = store
        .create_table(&name, &[], SettingsChange::default())
        .unwrap()
        .unwrap();
    let feed = ChangeFeed::new(0, false).unwrap();
    let change = SettingsChange {
        change_feed: Some(Some(feed)),
        ..SettingsChange::default()
    };
    assert!(created.set_settings(change).unwrap());
    let table = store.table(&name).unwrap().unwrap();
    let until = Instant::now() + writing;
    let batch = FeedBatch {
        records: 100,
        bytes: 1 << 20,
    };
    let read = std::thread::scope(|threads| {
        for writer in 0..FEED_WRITERS {
            let (store, table) = (store.clone(), table.clone());
            threads.spawn(move || {
                let mut rng = Rng { state: writer };
                let mut n = 0;
                while Instant::now() < until {
                    let partition_key = rng.pick(PARTITIONS);
                    let inserts = (0..1 + rng.below(2))
                        .map(|i| {
                            let row_key = format!("{writer}-{n}-{i}");
                            Operation::Insert(new_entity(&mut rng, partition_key, &row_key))
                        })
                        .collect();
                    commit_on(&store, table.as_ref(), partition_key, inserts).unwrap();
                    n += 1;
                }
            });
        }
        let reader = threads.spawn(|| {
            let (mut after, mut read) = (None, Vec::new());
            loop {
                let done = Instant::now() > until + Duration::from_millis(200);
                let changes = table.read_changes(after, batch).unwrap();
                after = changes.last().map(|change| change.position).or(after);
                read.extend(changes.iter().map(|change| change.position));
                if done && changes.is_empty() {
                    return read;
                }
            }
        });
        reader.join().unwrap()
    });
    let mut whole = Vec::new();
    loop {
        let changes = table.read_changes(whole.last().copied(), batch).unwrap();
        if changes.is_empty() {
            break;
        }
        whole.extend(changes.iter().map(|change| change.position));
    }
    let seen: std::collections::BTreeSet<_> = read.iter().collect();
    let missed: Vec<_> = whole.iter().filter(|at| !seen.contains(at)).collect();
    assert!(
        missed.is_empty(),
        "the reader missed {} of {} records, the first at {:?}",
        missed.len(),
        whole.len(),
        missed[0]
    );
    assert_eq!(read, whole, "the reader read every record once, in order");
}

/// Threads committing in [`check_feed_under_concurrent_commits`].
const FEED_WRITERS: u64 = 12;

#[test]
fn a_sled_feed_reader_misses_no_record_of_concurrent_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), StoreOptions::default()).unwrap();
    check_feed_under_concurrent_commits(Arc::new(store), Duration::from_secs(3));
}

#[test]
fn a_postgres_feed_reader_misses_no_record_of_concurrent_commits() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    let url = postgres.database("feed");
    let store = open_postgres(&url, FEED_WRITERS as usize + 2, true).unwrap();
    check_feed_under_concurrent_commits(Arc::new(store), Duration::from_secs(5));
}

/// Opens a PostgreSQL store over `url` with `pool_size` connections.
fn open_postgres(
    url: &str,
    pool_size: usize,
    purge_deleted_tables: bool,
) -> Result<PostgresStore, StorageError> {
    let options = PostgresOptions {
        ca_pem: None,
        pool_size,
        purge_deleted_tables,
    };
    PostgresStore::open(url, options)
}

#[test]
fn a_deleted_tables_purge_left_unfinished_is_finished_by_the_next_store_to_open() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    let url = postgres.database("purge");
    let name = TableName::parse("Purged").unwrap();
    let not_purging: Arc<dyn Store> = Arc::new(open_postgres(&url, 1, false).unwrap());
    let table = not_purging
        .create_table(&name, &[], SettingsChange::default())
        .unwrap()
        .unwrap();
    // More rows than one purge statement deletes.
    for chunk in 0..(trestle_server::storage::PURGE_BATCH as usize * 2 / 100 + 1) {
        let inserts = (0..100)
            .map(|n| {
                let row_key = format!("{chunk:04}-{n:03}");
                Operation::Insert(NewEntity::new(key("p", &row_key), Properties::new()).unwrap())
            })
            .collect();
        commit_on(&not_purging, table.as_ref(), "p", inserts).unwrap();
    }
    assert!(not_purging.delete_table(&name).unwrap());
    assert_eq!(
        not_purging
            .create_table(&name, &[], SettingsChange::default())
            .unwrap()
            .unwrap_err(),
        CreateRefusal::BeingDeleted
    );
    drop(not_purging);

    let purging = open_postgres(&url, 1, true).unwrap();
    let started = std::time::Instant::now();
    let old_table = table;
    let table = loop {
        match purging
            .create_table(&name, &[], SettingsChange::default())
            .unwrap()
        {
            Ok(table) => break table,
            Err(refusal) => assert_eq!(refusal, CreateRefusal::BeingDeleted),
        }
        assert!(started.elapsed().as_secs() < 60, "the purge did not finish");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut seen = 0;
    table
        .visit(KeyScan::forward(&[KeyRange::all()]), &mut |_| {
            seen += 1;
            Ok(Visit::Next)
        })
        .unwrap();
    assert_eq!(seen, 0, "the new table starts empty");
    // A handle on the purged table reads nothing (its catalog row is gone too).
    let read = read_entity(old_table.as_ref(), &key("p", "0000-000"), |_| Ok(()));
    assert!(read.unwrap().is_none());
}

#[test]
fn a_postgres_store_that_cannot_reach_its_database_says_where() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://someone@127.0.0.1:{port}/somewhere");
    let message = open_postgres(&url, 1, true).unwrap_err().to_string();
    assert!(
        message.contains("cannot connect to PostgreSQL database \"somewhere\" as user \"someone\"")
            && message.contains(&format!("127.0.0.1:{port}")),
        "{message}"
    );
    let message = open_postgres("not a url =", 1, true)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("not a PostgreSQL connection string"),
        "{message}"
    );
}

#[test]
fn a_postgres_user_who_may_not_create_tables_is_told_so_at_start() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    let url = postgres.database("locked");
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute("CREATE ROLE reader LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC;")
        .unwrap();
    let as_reader = url.replace("user=trestle", "user=reader");
    let message = open_postgres(&as_reader, 1, true).unwrap_err().to_string();
    assert!(
        message.contains("cannot create Trestle's tables") && message.contains("permission denied"),
        "{message}"
    );
}

#[test]
fn the_postgres_store_records_its_schema_version_and_refuses_a_newer_one() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    let url = postgres.database("versions");
    let store = open_postgres(&url, 1, true).unwrap();
    drop(store);
    // Reopening the same version is fine; a database of a newer version is refused, untouched.
    open_postgres(&url, 1, true).unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let newer = (trestle_server::storage::SCHEMA_VERSION + 1).to_be_bytes();
    admin
        .execute(
            "UPDATE trestle_meta SET value = $1 WHERE key = 'schema_version'",
            &[&newer.as_slice()],
        )
        .unwrap();
    let refused = open_postgres(&url, 1, true).unwrap_err();
    let message = refused.to_string();
    let current = trestle_server::storage::SCHEMA_VERSION;
    assert!(
        message.contains(&format!("version {}", current + 1))
            && message.contains(&format!("build's {current}")),
        "{message}"
    );
}

/// A call that panics on a store of one connection (a scan's visitor, here) gives its slot back:
/// the next call gets a connection, outside the transaction the panic left, instead of waiting
/// forever.
#[test]
fn a_call_that_panics_leaves_the_postgres_store_its_connection() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    let url = postgres.database("panics");
    let store: Arc<dyn Store> = Arc::new(open_postgres(&url, 1, false).unwrap());
    let name = TableName::parse("Scanned").unwrap();
    let table = store
        .create_table(&name, &[], SettingsChange::default())
        .unwrap()
        .unwrap();
    let inserts = (0..3)
        .map(|n| {
            let entity = NewEntity::new(key("p", &n.to_string()), Properties::new()).unwrap();
            Operation::Insert(entity)
        })
        .collect();
    commit_on(&store, table.as_ref(), "p", inserts).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        table.visit(KeyScan::forward(&[KeyRange::all()]), &mut |_| {
            panic!("a visitor's bug")
        })
    }));
    assert!(panicked.is_err());
    let (done, answered) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let insert = NewEntity::new(key("p", "after"), Properties::new()).unwrap();
        let committed = commit_on(&store, table.as_ref(), "p", vec![Operation::Insert(insert)]);
        let _ = done.send(committed.is_ok());
    });
    let committed = answered
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the store still has its connection");
    assert!(committed, "a write after the panic commits");
}

#[test]
fn the_postgres_store_upgrades_a_version_1_database_to_declared_indexes() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    let url = postgres.database("upgrade");
    // A version-1 database: no index column, relations or sequence, version 1 recorded.
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "CREATE TABLE trestle_meta (key text PRIMARY KEY, value bytea NOT NULL);
             CREATE TABLE trestle_tables (id bigserial PRIMARY KEY, folded text NOT NULL,
                 name text NOT NULL, live boolean NOT NULL);
             CREATE UNIQUE INDEX trestle_tables_live ON trestle_tables (folded) WHERE live;
             CREATE TABLE trestle_entities (table_id bigint NOT NULL, pk bytea NOT NULL,
                 rk bytea NOT NULL, record bytea NOT NULL, PRIMARY KEY (table_id, pk, rk));
             INSERT INTO trestle_meta VALUES ('schema_version', '\\x00000001');
             INSERT INTO trestle_tables (folded, name, live) VALUES ('old', 'Old', true);",
        )
        .unwrap();
    let store = open_postgres(&url, 1, true).unwrap();
    let version: Vec<u8> = admin
        .query_one(
            "SELECT value FROM trestle_meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        version,
        trestle_server::storage::SCHEMA_VERSION.to_be_bytes()
    );
    // The old table is there, without indexes, and takes one.
    let old = store
        .table(&TableName::parse("Old").unwrap())
        .unwrap()
        .unwrap();
    assert!(old.indexes().unwrap().indexes.is_empty());
    let definition =
        IndexDefinition::new("ByA".into(), vec!["A".into()], IndexScope::Table, false).unwrap();
    let index = old.create_index(definition).unwrap().unwrap();
    assert_eq!(index.state, IndexState::Building);
}

#[test]
fn a_dropped_index_and_a_deleted_tables_indexes_are_purged_from_the_database() {
    let Some(postgres) = postgres_cluster::Postgres::start() else {
        return;
    };
    let url = postgres.database("dropped");
    let store: Arc<dyn Store> = Arc::new(open_postgres(&url, 2, true).unwrap());
    let definition = |name: &str| {
        IndexDefinition::new(name.into(), vec!["N".into()], IndexScope::Table, false).unwrap()
    };
    let name = TableName::parse("Indexed").unwrap();
    let table = store
        .create_table(
            &name,
            &[definition("ByN"), definition("AlsoByN")],
            SettingsChange::default(),
        )
        .unwrap()
        .unwrap();
    for chunk in 0..30 {
        let inserts = (0..100)
            .map(|n| {
                let key = EntityKey::new("p".into(), format!("{chunk:02}-{n:03}")).unwrap();
                let properties = Properties::from([("N".to_owned(), Value::Int32(n))]);
                Operation::Insert(NewEntity::new(key, properties).unwrap())
            })
            .collect();
        commit_on(&store, table.as_ref(), "p", inserts).unwrap();
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let entries = |admin: &mut postgres::Client| -> i64 {
        admin
            .query_one("SELECT count(*) FROM trestle_index_entries", &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(entries(&mut admin), 6_000);
    assert!(table.drop_index("byn").unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while entries(&mut admin) > 3_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped index's entries stay"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(store.delete_table(&name).unwrap());
    while entries(&mut admin) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the deleted table's entries stay"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pending = |admin: &mut postgres::Client| -> i64 {
        admin
            .query_one("SELECT count(*) FROM trestle_dropped_indexes", &[])
            .unwrap()
            .get(0)
    };
    while pending(&mut admin) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "purged indexes are not forgotten"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
