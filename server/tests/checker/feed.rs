//! Feed completeness: writers on every write path into a table that keeps a change feed and
//! expires entities (lone inserts, inserts many clients send at once, which a store may batch,
//! partition transactions, patches, deletes, entities with a time to live), followers that resume
//! from their saved cursor after every batch (on any server), and the checks: each follower saw
//! exactly the feed read from the start, record for record in the same order; every acknowledged
//! write has its record once; no record of a write refused; each entity's records in its commit
//! order; and replaying the feed gives the table as stored. (The list tables' feeds are checked
//! against the lists' version order by `check_list_feed`.) Each feed read whole through a filter
//! holds exactly the records it matches (`check_filtered`), and read by segments each after its
//! own cursor, as a consumer group's worker reads it, exactly those records (`check_segments`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use trestle_proto::pb;

use super::elle::{Element, Key, Outcome};
use super::lists::{list_of, outcome_of};
use super::rng::Rng;
use super::servers::{Client, Servers};

/// The table of the events workload.
pub(crate) const EVENTS: &str = "Events";

/// A write of the events workload, as its client saw it.
#[derive(Clone, Debug)]
pub(crate) struct Write {
    pub(crate) key: (String, String),
    pub(crate) kind: pb::ChangeKind,
    /// The ETag the write answered (inserts and patches acknowledged).
    pub(crate) etag: Option<String>,
    pub(crate) outcome: Outcome,
    /// Inserted with a time to live: the server removes it.
    pub(crate) expires: bool,
}

fn int64(entity: &pb::Entity, name: &str) -> i64 {
    match entity.properties.get(name).and_then(|v| v.kind.as_ref()) {
        Some(pb::value::Kind::Int64Value(n)) => *n,
        other => panic!("{name} is {other:?}"),
    }
}

fn event(pk: &str, rk: &str, ttl: bool) -> pb::Entity {
    let mut properties = BTreeMap::from([(
        "N".to_owned(),
        pb::Value {
            kind: Some(pb::value::Kind::Int64Value(0)),
        },
    )]);
    if ttl {
        let one_second = pb::Value {
            kind: Some(pb::value::Kind::Int32Value(1)),
        };
        properties.insert("TimeToLive".to_owned(), one_second);
    }
    pb::Entity {
        partition_key: pk.into(),
        row_key: rk.into(),
        properties,
        ..Default::default()
    }
}

/// Runs one writer of the events workload until `stop`: its writes.
pub(crate) async fn run_writer(
    writer: u64,
    servers: Servers,
    stop: Instant,
    seed: u64,
) -> Vec<Write> {
    let mut rng = Rng::new(seed);
    let mut writes = Vec::new();
    // This writer's entities that exist for sure and do not expire.
    let mut live: Vec<(String, String)> = Vec::new();
    for n in 0.. {
        if Instant::now() >= stop {
            break;
        }
        let mut client = servers.pick(&mut rng);
        let pk = format!("e{}", rng.below(4));
        match rng.below(10) {
            choice @ 0..=4 => {
                let expires = choice == 4;
                let rk = format!("{}{writer}-{n}", if expires { "t" } else { "w" });
                let request = pb::InsertEntityRequest {
                    idempotency_key: String::new(),
                    table: EVENTS.into(),
                    entity: Some(event(&pk, &rk, expires)),
                    return_no_content: true,
                };
                let answer = client.insert_entity(request).await;
                let write = written((pk, rk), pb::ChangeKind::Insert, expires, answer);
                if write.outcome == Outcome::Committed && !expires {
                    live.push(write.key.clone());
                }
                writes.push(write);
            }
            5..=6 if !live.is_empty() => {
                let key = live[rng.below(live.len())].clone();
                let request = pb::PatchEntityRequest {
                    table: EVENTS.into(),
                    partition_key: key.0.clone(),
                    row_key: key.1.clone(),
                    operations: vec![pb::PatchStep {
                        step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
                            property: "N".into(),
                            by: Some(pb::Value {
                                kind: Some(pb::value::Kind::Int64Value(1)),
                            }),
                        })),
                    }],
                    return_no_content: true,
                    ..Default::default()
                };
                let answer = client.patch_entity(request).await;
                writes.push(written(key, pb::ChangeKind::Patch, false, answer));
            }
            7 if !live.is_empty() => {
                let key = live.swap_remove(rng.below(live.len()));
                let request = pb::DeleteEntityRequest {
                    idempotency_key: String::new(),
                    table: EVENTS.into(),
                    partition_key: key.0.clone(),
                    row_key: key.1.clone(),
                    if_match: "*".into(),
                };
                let answer = client.delete_entity(request).await;
                let outcome = answer.err().map_or(Outcome::Committed, |s| outcome_of(&s));
                writes.push(Write {
                    key,
                    kind: pb::ChangeKind::Delete,
                    etag: None,
                    outcome,
                    expires: false,
                });
            }
            _ => writes.extend(insert_three(&mut client, writer, n, &mut live).await),
        }
    }
    writes
}

/// The write of `key` that `answer` tells of.
fn written(
    key: (String, String),
    kind: pb::ChangeKind,
    expires: bool,
    answer: Result<tonic::Response<pb::Entity>, tonic::Status>,
) -> Write {
    let (etag, outcome) = match answer {
        Ok(entity) => (Some(entity.into_inner().etag), Outcome::Committed),
        Err(status) => (None, outcome_of(&status)),
    };
    Write {
        key,
        kind,
        etag,
        outcome,
        expires,
    }
}

/// Inserts three entities in one partition transaction.
async fn insert_three(
    client: &mut Client,
    writer: u64,
    n: u64,
    live: &mut Vec<(String, String)>,
) -> Vec<Write> {
    let pk = format!("tx{writer}");
    let rows: Vec<String> = (0..3).map(|i| format!("x{writer}-{n}-{i}")).collect();
    let operations = rows
        .iter()
        .map(|rk| pb::TransactionOperation {
            operation: Some(pb::transaction_operation::Operation::Insert(
                pb::InsertOperation {
                    entity: Some(event(&pk, rk, false)),
                },
            )),
        })
        .collect();
    let request = pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: EVENTS.into(),
        partition_key: pk.clone(),
        operations,
    };
    let (etags, outcome) = match client.submit_transaction(request).await {
        Ok(done) => {
            let results = done.into_inner().results;
            (
                results.into_iter().map(|r| Some(r.etag)).collect(),
                Outcome::Committed,
            )
        }
        Err(status) => (vec![None; 3], outcome_of(&status)),
    };
    rows.into_iter()
        .zip(etags)
        .map(|(rk, etag)| {
            let key = (pk.clone(), rk);
            if outcome == Outcome::Committed {
                live.push(key.clone());
            }
            Write {
                key,
                kind: pb::ChangeKind::Insert,
                etag,
                outcome,
                expires: false,
            }
        })
        .collect()
}

/// A record as a reader received it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seen {
    pub(crate) cursor: String,
    pub(crate) kind: pb::ChangeKind,
    pub(crate) key: (String, String),
    pub(crate) entity: Option<pb::Entity>,
    pub(crate) transaction: u64,
}

fn seen(change: pb::Change) -> Seen {
    Seen {
        kind: change.kind(),
        cursor: change.cursor,
        key: (change.partition_key, change.row_key),
        entity: change.entity,
        transaction: change.transaction_id,
    }
}

/// Follows `table`'s feed until `stop`, resuming from the saved cursor after every batch (each
/// time on a server `rng` picks): the records received and the cursor.
pub(crate) async fn follow(
    table: &'static str,
    servers: Servers,
    stop: Instant,
) -> (Vec<Seen>, String) {
    let mut rng = Rng::new(table.len() as u64 * 7919);
    let (mut records, mut cursor) = (Vec::new(), String::new());
    while Instant::now() < stop {
        let mut client = servers.pick(&mut rng);
        let request = pb::ReadChangesRequest {
            table: table.into(),
            cursor: cursor.clone(),
            follow: true,
            ..Default::default()
        };
        let batch = async {
            let mut stream = client.read_changes(request).await?.into_inner();
            stream.message().await
        };
        match tokio::time::timeout(Duration::from_millis(500), batch).await {
            Ok(Ok(Some(batch))) => {
                records.extend(batch.changes.into_iter().map(seen));
                cursor = batch.cursor;
            }
            Ok(Ok(None)) | Err(_) => {}
            Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    (records, cursor)
}

/// `table`'s feed after `cursor` to its end now, read until a server answers.
pub(crate) async fn read_to_end(servers: &Servers, table: &str, cursor: &str) -> Vec<Seen> {
    read_filtered(servers, table, cursor, "").await
}

/// What every feed is read through too, once whole: a filtered feed must show exactly the
/// records whose entity it matches (none of a delete or expiry: these tables keep no before
/// images).
pub(crate) const FILTER: &str = "PartitionKey ne 'p0'";

/// [`read_to_end`] through `filter` (empty: none).
async fn read_filtered(servers: &Servers, table: &str, cursor: &str, filter: &str) -> Vec<Seen> {
    let request = pb::ReadChangesRequest {
        table: table.into(),
        cursor: cursor.into(),
        filter: filter.into(),
        ..Default::default()
    };
    read_whole(servers, request).await
}

/// The records `request` reads to the end of the feed now, read until a server answers.
async fn read_whole(servers: &Servers, request: pb::ReadChangesRequest) -> Vec<Seen> {
    let mut rng = Rng::new(11);
    for _ in 0..100 {
        let mut client = servers.pick(&mut rng);
        let read = async {
            let mut stream = client.read_changes(request.clone()).await?.into_inner();
            let mut records = Vec::new();
            while let Some(batch) = stream.message().await? {
                records.extend(batch.changes.into_iter().map(seen));
            }
            Ok::<_, tonic::Status>(records)
        };
        match read.await {
            Ok(records) => return records,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    panic!("no server answered a read of {}'s feed", request.table);
}

/// `table`'s feed read as a consumer group's worker reads it, several segments at once each after
/// its own cursor (segments 0 and 2 of 4 from the start, 1 and 3 after the middle record), holds
/// exactly those records of `from_start` (the feed read whole), in order.
pub(crate) async fn check_segments(servers: &Servers, table: &str, from_start: &[Seen]) {
    let middle = from_start.len() / 2;
    let after = from_start
        .get(middle)
        .map(|r| r.cursor.clone())
        .unwrap_or_default();
    let from = |segment: u32| pb::SegmentCursor {
        segment,
        cursor: if segment % 2 == 1 {
            after.clone()
        } else {
            String::new()
        },
    };
    let request = pb::ReadChangesRequest {
        table: table.into(),
        total_segments: 4,
        segment_cursors: (0..4).map(from).collect(),
        ..Default::default()
    };
    let read = read_whole(servers, request).await;
    let wanted: Vec<&str> = (from_start.iter().enumerate())
        .filter(|(at, r)| {
            let segment = trestle_proto::segment::index_of(&r.key.0, 4);
            segment % 2 == 0 || after.is_empty() || *at > middle
        })
        .map(|(_, r)| r.cursor.as_str())
        .collect();
    let got: Vec<&str> = read.iter().map(|r| r.cursor.as_str()).collect();
    assert_eq!(
        got, wanted,
        "{table}: the feed read by segments, each from its cursor"
    );
}

/// `table`'s feed read whole through [`FILTER`] holds exactly the records of `from_start` (the
/// feed read whole) whose entity it matches, in order.
pub(crate) async fn check_filtered(servers: &Servers, table: &str, from_start: &[Seen]) {
    let filtered = read_filtered(servers, table, "", FILTER).await;
    let cursors = |records: &mut dyn Iterator<Item = &Seen>| {
        records.map(|r| r.cursor.clone()).collect::<Vec<_>>()
    };
    let matching = from_start
        .iter()
        .filter(|r| r.entity.is_some() && r.key.0 != "p0");
    let (got, wanted) = (
        cursors(&mut filtered.iter()),
        cursors(&mut matching.into_iter()),
    );
    assert_eq!(got, wanted, "{table}: the feed read through {FILTER:?}");
}

/// The follower of `table` saw exactly the feed as read from its start.
pub(crate) fn check_follower(table: &str, followed: &[Seen], from_start: &[Seen]) {
    let cursors = |records: &[Seen]| records.iter().map(|r| r.cursor.clone()).collect::<Vec<_>>();
    let (got, all) = (cursors(followed), cursors(from_start));
    if got != all {
        let missed: Vec<_> = from_start
            .iter()
            .filter(|r| !got.contains(&r.cursor))
            .collect();
        let extra: Vec<_> = followed
            .iter()
            .filter(|r| !all.contains(&r.cursor))
            .collect();
        panic!(
            "{table}: the follower resuming from its cursor saw {} records, the feed from its \
             start holds {}: missed {missed:#?}, not in the feed {extra:#?}",
            got.len(),
            all.len(),
        );
    }
}

/// The list tables' feeds against the lists: each key's records extend its list by one element
/// each, from an insert of one element to the final list.
pub(crate) fn check_list_feed(table: &str, feed: &[Seen], finals: &BTreeMap<Key, Vec<Element>>) {
    let mut by_key: BTreeMap<Key, Vec<&Seen>> = BTreeMap::new();
    for record in feed {
        let (pk, rk) = &record.key;
        by_key
            .entry(format!("{table}/{pk}/{rk}"))
            .or_default()
            .push(record);
    }
    for (key, list) in finals.iter().filter(|(key, _)| key.starts_with(table)) {
        let records = by_key.remove(key).unwrap_or_default();
        let mut before: Vec<Element> = Vec::new();
        for (at, record) in records.iter().enumerate() {
            let expected_kind = match at {
                0 => pb::ChangeKind::Insert,
                _ => pb::ChangeKind::Replace,
            };
            assert_eq!(record.kind, expected_kind, "{key}: record {at} {record:?}");
            let after = list_of(record.entity.as_ref().expect("an entity"));
            assert!(
                after.len() == before.len() + 1 && after.starts_with(&before),
                "{key}: record {at} holds {after:?} after {before:?}"
            );
            before = after;
        }
        assert_eq!(
            &before, list,
            "{key}: the feed ends at another list than stored"
        );
    }
    assert!(
        by_key.is_empty(),
        "records of keys the workload never wrote: {by_key:?}"
    );
}

/// The events feed against the writes and the table as stored (`stored`: by key, the ETag and
/// `N` of each entity).
pub(crate) fn check_events_feed(
    feed: &[Seen],
    writes: &[Write],
    stored: &BTreeMap<(String, String), (String, i64)>,
) {
    let mut by_key: BTreeMap<&(String, String), Vec<&Seen>> = BTreeMap::new();
    for record in feed {
        by_key.entry(&record.key).or_default().push(record);
    }
    let mut writes_of: BTreeMap<&(String, String), Vec<&Write>> = BTreeMap::new();
    for write in writes {
        writes_of.entry(&write.key).or_default().push(write);
    }
    // Every acknowledged write has its record, once.
    for write in writes.iter().filter(|w| w.outcome == Outcome::Committed) {
        let records = by_key
            .get(&write.key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let matching = records
            .iter()
            .filter(|r| r.kind == write.kind)
            .filter(|r| match &write.etag {
                Some(etag) => r.entity.as_ref().is_some_and(|e| &e.etag == etag),
                None => true,
            })
            .count();
        assert_eq!(matching, 1, "{write:?}: records {records:#?}");
    }
    for (key, records) in &by_key {
        let attempts = writes_of.get(key).map(Vec::as_slice).unwrap_or_default();
        let possible = |kind: pb::ChangeKind| {
            attempts
                .iter()
                .filter(|w| w.kind == kind && w.outcome != Outcome::Failed)
                .count()
        };
        let expires = attempts.iter().any(|w| w.expires);
        // Each entity's records in commit order: its insert, patches counting up, then its end.
        let mut expected_n = 0;
        let mut ended = false;
        for (at, record) in records.iter().enumerate() {
            assert!(!ended, "{key:?}: a record after its end: {records:#?}");
            match record.kind {
                pb::ChangeKind::Insert => assert_eq!(at, 0, "{key:?}: {records:#?}"),
                pb::ChangeKind::Patch => {
                    expected_n += 1;
                    let n = int64(record.entity.as_ref().expect("an entity"), "N");
                    assert_eq!(n, expected_n, "{key:?}: {records:#?}");
                }
                pb::ChangeKind::Delete => ended = true,
                pb::ChangeKind::Expire => {
                    assert!(expires, "{key:?} expired without a time to live");
                    ended = true;
                }
                other => panic!("{key:?}: a {other:?} record"),
            }
        }
        // No record of a write refused, none more than the writes that may have committed.
        for kind in [
            pb::ChangeKind::Insert,
            pb::ChangeKind::Patch,
            pb::ChangeKind::Delete,
        ] {
            let count = records.iter().filter(|r| r.kind == kind).count();
            assert!(
                count <= possible(kind),
                "{key:?}: {count} {kind:?} records of {} writes that may have committed",
                possible(kind)
            );
        }
        // Replayed, the feed gives the table as stored.
        let last = records.last().expect("a record");
        let replayed = match last.kind {
            pb::ChangeKind::Delete | pb::ChangeKind::Expire => None,
            _ => last
                .entity
                .as_ref()
                .map(|e| (e.etag.clone(), int64(e, "N"))),
        };
        if !(expires && replayed.is_some()) {
            assert_eq!(stored.get(*key), replayed.as_ref(), "{key:?}: {records:#?}");
        }
    }
    for key in stored.keys() {
        assert!(
            by_key.contains_key(key),
            "{key:?} is stored but has no record"
        );
    }
}

/// How many entities the events workload inserted with a time to live that may have committed.
pub(crate) fn expiring(writes: &[Write]) -> usize {
    writes
        .iter()
        .filter(|w| w.expires && w.outcome == Outcome::Committed)
        .count()
}
