//! Faults against the real server process: SIGKILL in the middle of a `DeleteTable` and of
//! 100-operation transactions that insert or overwrite rows (all or nothing after restart), and a
//! full disk (writes refused with
//! `InsufficientStorage`, reads go on, nothing acknowledged lost, writes resume once space is freed).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{entity, insert_op, Client, ServerProcess};
use tonic::Code;
use tonic_types::StatusExt;
use trestle_proto::pb;

fn reason(status: &tonic::Status) -> String {
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_default()
}

async fn create(client: &mut Client, table: &str) {
    client
        .create_table(pb::CreateTableRequest {
            table: table.into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// A transaction inserting rows `0..rows` into partition `pk`.
fn fill_partition(table: &str, pk: &str, rows: usize) -> pb::SubmitTransactionRequest {
    pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: table.into(),
        partition_key: pk.into(),
        operations: (0..rows)
            .map(|i| insert_op(entity(pk, &format!("{i:03}"), &[("I", i as i64)])))
            .collect(),
    }
}

/// A transaction setting `V` = `n` on rows `0..100` of partition `pk`, replacing what is there.
fn overwrite_partition(table: &str, pk: &str, n: i64) -> pb::SubmitTransactionRequest {
    pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: table.into(),
        partition_key: pk.into(),
        operations: (0..100)
            .map(|i| pb::TransactionOperation {
                operation: Some(pb::transaction_operation::Operation::Upsert(
                    pb::UpsertOperation {
                        entity: Some(entity(pk, &format!("{i:03}"), &[("V", n)])),
                        mode: pb::UpsertMode::Replace.into(),
                    },
                )),
            })
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_delete_table_leaves_it_whole_or_gone() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut saw_gone = false;
    for cycle in 0..6u64 {
        let table = format!("Doomed{cycle}");
        let server = ServerProcess::start(data_dir.path());
        let mut client = server.client().await;
        create(&mut client, &table).await;
        for p in 0..20 {
            client
                .submit_transaction(fill_partition(&table, &format!("p{p:02}"), 100))
                .await
                .unwrap();
        }
        let mut deleter = client.clone();
        let name = table.clone();
        let delete = tokio::spawn(async move {
            deleter
                .delete_table(pb::DeleteTableRequest { table: name })
                .await
        });
        // Kill at a different moment each cycle: before, during and after the deletion.
        std::thread::sleep(Duration::from_micros(700 * cycle));
        server.kill_9();
        let acknowledged = delete.await.unwrap().is_ok();

        let restarted = ServerProcess::start(data_dir.path());
        let mut client = restarted.client().await;
        if support::table_names(&mut client).await.contains(&table) {
            assert!(!acknowledged, "an acknowledged delete came back");
            let rows = support::all_entities(&mut client, &table).await;
            assert_eq!(rows.len(), 2000, "a half-deleted table is visible");
        } else {
            let get = client
                .get_entity(pb::GetEntityRequest {
                    table: table.clone(),
                    partition_key: "p00".into(),
                    row_key: "000".into(),
                    select: vec![],
                })
                .await
                .unwrap_err();
            assert_eq!(get.code(), Code::NotFound);
            // Reclamation finishes after the restart: the name can be used again, empty.
            loop {
                match client
                    .create_table(pb::CreateTableRequest {
                        table: table.clone(),
                        ..Default::default()
                    })
                    .await
                {
                    Ok(_) => break,
                    Err(status) if reason(&status) == "TableBeingDeleted" => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    Err(status) => panic!("{status:?}"),
                }
            }
            assert!(support::all_entities(&mut client, &table).await.is_empty());
            saw_gone = true;
        }
        restarted.kill_9();
    }
    assert!(saw_gone, "no cycle saw the delete land");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_100_operation_transactions_applies_each_wholly_or_not_at_all() {
    const TABLE: &str = "Batches";
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data_dir.path());
    create(&mut server.client().await, TABLE).await;
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut writers = Vec::new();
    for writer in 0..4 {
        let mut client = server.client().await;
        let acknowledged = acknowledged.clone();
        writers.push(tokio::spawn(async move {
            for n in 0.. {
                let pk = format!("w{writer}-{n:05}");
                match client
                    .submit_transaction(fill_partition(TABLE, &pk, 100))
                    .await
                {
                    Ok(_) => acknowledged.lock().unwrap().push(pk),
                    Err(_) => return,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    server.kill_9();
    for writer in writers {
        writer.await.unwrap();
    }

    let restarted = ServerProcess::start(data_dir.path());
    let stored = support::all_entities(&mut restarted.client().await, TABLE).await;
    let mut rows_per_partition: BTreeMap<&str, usize> = BTreeMap::new();
    for (pk, _) in stored.keys() {
        *rows_per_partition.entry(pk.as_str()).or_default() += 1;
    }
    let acknowledged = acknowledged.lock().unwrap();
    assert!(acknowledged.len() >= 4, "the load made progress");
    for pk in acknowledged.iter() {
        assert_eq!(rows_per_partition.get(pk.as_str()), Some(&100), "lost {pk}");
    }
    for (pk, rows) in rows_per_partition {
        assert_eq!(rows, 100, "transaction {pk} is partly applied");
    }
    restarted.kill_9();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_transactions_overwriting_rows_leaves_each_partition_at_one_of_them() {
    const TABLE: &str = "Overwrites";
    const WRITERS: usize = 4;
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data_dir.path());
    let mut client = server.client().await;
    create(&mut client, TABLE).await;
    for writer in 0..WRITERS {
        let pk = format!("w{writer}");
        client
            .submit_transaction(overwrite_partition(TABLE, &pk, 0))
            .await
            .unwrap();
    }
    // Each writer overwrites its own partition again and again: V = 1, 2, 3, ...
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let mut client = server.client().await;
        writers.push(tokio::spawn(async move {
            let pk = format!("w{writer}");
            let mut acknowledged = 0;
            for n in 1.. {
                match client
                    .submit_transaction(overwrite_partition(TABLE, &pk, n))
                    .await
                {
                    Ok(_) => acknowledged = n,
                    Err(_) => return acknowledged,
                }
            }
            unreachable!()
        }));
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    server.kill_9();
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.push(writer.await.unwrap());
    }

    let restarted = ServerProcess::start(data_dir.path());
    let stored = support::all_entities(&mut restarted.client().await, TABLE).await;
    assert_eq!(stored.len(), WRITERS * 100, "a row was lost or added");
    for (writer, acknowledged) in acknowledged.into_iter().enumerate() {
        let pk = format!("w{writer}");
        let values: std::collections::BTreeSet<i64> = stored
            .iter()
            .filter(|((p, _), _)| *p == pk)
            .map(|(_, e)| support::int64(e, "V"))
            .collect();
        assert_eq!(values.len(), 1, "{pk} is partly overwritten: {values:?}");
        let v = *values.first().unwrap();
        // The last acknowledged transaction, or the one in flight when the server died.
        assert!(
            v == acknowledged || v == acknowledged + 1,
            "{pk} holds {v}, acknowledged {acknowledged}"
        );
        assert!(acknowledged > 0, "{pk}'s writer made progress");
    }
    restarted.kill_9();
}

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a `size_mib` tmpfs, or says why it cannot (not root, no mount permission).
    fn mount(at: &Path, size_mib: u64) -> Result<Tmpfs, String> {
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "mount -t tmpfs failed (it needs root): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Tmpfs(at.to_owned()))
    }

    fn free_bytes(&self) -> u64 {
        let stats = rustix::fs::statvfs(&self.0).unwrap();
        stats.f_bavail * stats.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_recovers() {
    const MIB: u64 = 1024 * 1024;
    const TABLE: &str = "Full";
    let mount_point = tempfile::tempdir().unwrap();
    let tmpfs = match Tmpfs::mount(mount_point.path(), 128) {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            eprintln!("SKIPPED a_full_disk_refuses_writes_keeps_reads_and_recovers: {why}");
            return;
        }
    };
    let data_dir = mount_point.path().join("data");
    let mut server = ServerProcess::start_with(&data_dir, &["--min-free-mib", "16"]);
    let mut client = server.client().await;
    create(&mut client, TABLE).await;
    for p in 0..5 {
        client
            .submit_transaction(fill_partition(TABLE, &format!("p{p}"), 100))
            .await
            .unwrap();
    }

    // Leave 8 MiB free: under the 16 MiB reserve.
    let filler = mount_point.path().join("filler");
    let fill = tmpfs.free_bytes().saturating_sub(8 * MIB);
    std::fs::write(&filler, vec![0u8; fill as usize]).unwrap();
    let refusals = [
        client
            .insert_entity(pb::InsertEntityRequest {
                table: TABLE.into(),
                entity: Some(entity("q", "1", &[("V", 1)])),
                ..Default::default()
            })
            .await
            .unwrap_err(),
        client
            .submit_transaction(fill_partition(TABLE, "q", 10))
            .await
            .unwrap_err(),
        client
            .create_table(pb::CreateTableRequest {
                table: "Another".into(),
                ..Default::default()
            })
            .await
            .unwrap_err(),
    ];
    for status in refusals {
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert_eq!(reason(&status), "InsufficientStorage");
        assert!(status.message().contains("MiB free"), "{status:?}");
    }
    // Reads go on.
    assert_eq!(support::all_entities(&mut client, TABLE).await.len(), 500);

    // Space freed: writes resume.
    std::fs::remove_file(&filler).unwrap();
    client
        .submit_transaction(fill_partition(TABLE, "q", 10))
        .await
        .unwrap();
    server.kill_9();
    server = ServerProcess::start_with(&data_dir, &["--min-free-mib", "16"]);
    let stored = support::all_entities(&mut server.client().await, TABLE).await;
    assert_eq!(stored.len(), 510, "an acknowledged write was lost");
    server.kill_9();
    drop(tmpfs);
}
