//! Leaves read back from the log after many small updates. With a cache far smaller than the
//! table, reads page leaves in, a leaf updated since its last consolidation from its base and
//! each linked update, and such a leaf is written back whole as it is read (the vendored sled's
//! `TRESTLE.md`, items 6 and 7). Every read sees the last acknowledged write, also while writers
//! race the reads on the same leaves, and so does the server started again after a SIGKILL.

mod support;

use std::collections::BTreeMap;

use support::{entity, int64, ServerProcess};
use trestle_proto::pb;

const TABLE: &str = "Updated";
const PARTITIONS: u64 = 20;
const ROWS: u64 = 1_000;
const ROUNDS: i64 = 6;

fn key(partition: u64, row: u64) -> (String, String) {
    (format!("p{partition:02}"), format!("r{row:04}"))
}

/// Whether round `round` updates the row `row` of `partition`: about half of the rows, a
/// different half each round.
fn updated_in(round: i64, partition: u64, row: u64) -> bool {
    let mixed = (row * 2_654_435_761 + partition * 40_503 + round as u64 * 97_531) % 1_009;
    mixed % 2 == 0
}

fn padded(partition: u64, row: u64, round: i64) -> pb::Entity {
    let (pk, rk) = key(partition, row);
    let mut entity = entity(&pk, &rk, &[("Round", round)]);
    let pad = pb::Value {
        kind: Some(pb::value::Kind::StringValue("x".repeat(120))),
    };
    entity.properties.insert("Pad".into(), pad);
    entity
}

/// Commits, in one transaction, round `round` of the rows `rows` of `partition` (1 to 100 of
/// them): their inserts in round 0, else merges.
async fn commit_round(client: &mut support::Client, partition: u64, rows: &[u64], round: i64) {
    let operations = rows
        .iter()
        .map(|&row| {
            let entity = Some(padded(partition, row, round));
            let operation = match round {
                0 => pb::transaction_operation::Operation::Insert(pb::InsertOperation { entity }),
                _ => pb::transaction_operation::Operation::Merge(pb::MergeOperation {
                    entity,
                    if_match: "*".into(),
                }),
            };
            pb::TransactionOperation {
                operation: Some(operation),
            }
        })
        .collect();
    let request = pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: TABLE.into(),
        partition_key: key(partition, 0).0,
        operations,
    };
    client.submit_transaction(request).await.expect("commit");
}

/// Writes round `round` (0: the inserts; then merges of the rows the round updates), a
/// transaction of up to 100 operations at a time, recording each row's round in `expected`.
async fn write_round(
    client: &mut support::Client,
    round: i64,
    expected: &mut BTreeMap<(String, String), i64>,
) {
    for partition in 0..PARTITIONS {
        let rows: Vec<u64> = (0..ROWS)
            .filter(|&row| round == 0 || updated_in(round, partition, row))
            .collect();
        for chunk in rows.chunks(100) {
            commit_round(client, partition, chunk, round).await;
            for &row in chunk {
                expected.insert(key(partition, row), round);
            }
        }
    }
}

/// Reads every row, by a scan and by a point read of every seventh, and checks each against
/// `expected`.
async fn check_all(client: &mut support::Client, expected: &BTreeMap<(String, String), i64>) {
    let scanned = support::all_entities(client, TABLE).await;
    assert_eq!(scanned.len(), expected.len(), "rows scanned");
    for (key, round) in expected {
        assert_eq!(int64(&scanned[key], "Round"), *round, "{key:?} scanned");
    }
    for ((pk, rk), round) in expected.iter().step_by(7) {
        let request = pb::GetEntityRequest {
            table: TABLE.into(),
            partition_key: pk.clone(),
            row_key: rk.clone(),
            select: vec![],
        };
        let read = client.get_entity(request).await.expect("read");
        assert_eq!(int64(&read.into_inner(), "Round"), *round, "{pk}/{rk} read");
    }
}

/// A server over `data_dir` whose cache (1 MiB) holds a small part of the table.
fn start(data_dir: &std::path::Path) -> ServerProcess {
    ServerProcess::start_with(data_dir, &["--cache-mib", "1"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaves_read_back_after_many_updates_show_the_last_write_also_after_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut client = server.client().await;
    support::create_table(&mut client, TABLE).await;
    let mut expected = BTreeMap::new();
    for round in 0..=ROUNDS {
        write_round(&mut client, round, &mut expected).await;
    }
    check_all(&mut client, &expected).await;
    // Read again at once: the leaves the first reads wrote back whole are read from there.
    check_all(&mut client, &expected).await;
    server.kill_9();

    let server = start(dir.path());
    let mut client = server.client().await;
    check_all(&mut client, &expected).await;
    write_round(&mut client, ROUNDS + 1, &mut expected).await;
    check_all(&mut client, &expected).await;
    server.kill_9();

    let server = start(dir.path());
    check_all(&mut server.client().await, &expected).await;
}

/// Writers that each own every tenth row merge their rows again and again while readers scan
/// and read the same leaves, all under a 1 MiB cache, so that leaves are written back whole by
/// reads while writes link updates to them: at the end, and after a SIGKILL, every row holds
/// its writer's last acknowledged round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_racing_on_the_same_leaves_lose_no_write() {
    const WRITERS: u64 = 10;
    const WRITER_ROUNDS: i64 = 12;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut client = server.client().await;
    support::create_table(&mut client, TABLE).await;
    let mut expected = BTreeMap::new();
    write_round(&mut client, 0, &mut expected).await;

    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut last = BTreeMap::new();
                for round in 1..=WRITER_ROUNDS {
                    for partition in 0..PARTITIONS {
                        let rows: Vec<u64> = (writer..ROWS).step_by(WRITERS as usize).collect();
                        commit_round(&mut client, partition, &rows, round).await;
                        last.extend(rows.into_iter().map(|row| (key(partition, row), round)));
                    }
                }
                last
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    let scanned = support::all_entities(&mut client, TABLE).await;
                    assert_eq!(scanned.len() as u64, PARTITIONS * ROWS, "rows scanned");
                }
            })
        })
        .collect();
    for writer in writers {
        expected.extend(writer.await.unwrap());
    }
    for reader in readers {
        reader.await.unwrap();
    }
    check_all(&mut client, &expected).await;
    server.kill_9();

    let server = start(dir.path());
    check_all(&mut server.client().await, &expected).await;
}
