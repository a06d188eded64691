//! Online backup and restore of the embedded store, with the built binary: a backup taken while
//! writers insert entities and commit transactions across two tables holds every entity
//! acknowledged before it began with its ETag and Timestamp, and every transaction whole or not
//! at all; the restored data directory serves it, declared indexes, stored access policies and
//! CORS rules included; a backup that is altered, truncated or unfinished, or holds a record
//! damaged before it was backed up, is refused, and nothing is written over.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use support::{all_entities, entity, insert_op, run_tool, Client, ServerProcess};
use trestle_proto::pb;

/// Acknowledged inserts: (table, pk, rk) -> (ETag, Timestamp).
type Acknowledged = Arc<Mutex<BTreeMap<(String, String, String), (String, String)>>>;

async fn create(client: &mut Client, table: &str, indexes: Vec<pb::IndexDefinition>) {
    client
        .create_table(pb::CreateTableRequest {
            table: table.into(),
            indexes,
            ..Default::default()
        })
        .await
        .unwrap();
}

fn index(name: &str, property: &str, unique: bool) -> pb::IndexDefinition {
    pb::IndexDefinition {
        name: name.into(),
        properties: vec![property.into()],
        scope: pb::IndexScope::Table as i32,
        unique,
    }
}

fn remember(acknowledged: &Acknowledged, table: &str, stored: &pb::Entity) {
    let timestamp = stored
        .timestamp
        .map(|t| format!("{t:?}"))
        .unwrap_or_default();
    acknowledged.lock().unwrap().insert(
        (
            table.into(),
            stored.partition_key.clone(),
            stored.row_key.clone(),
        ),
        (stored.etag.clone(), timestamp),
    );
}

/// Inserts into `Orders` (single writes) and, across `Orders` and `Lines`, pairs in one
/// transaction, until `stop`; every acknowledged entity is remembered.
async fn write_load(client: Client, writer: usize, stop: Arc<AtomicBool>, acks: Acknowledged) {
    let mut client = client;
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let row = format!("w{writer}-{n:06}");
        let order = entity(
            &format!("p{}", n % 5),
            &row,
            &[("N", n), ("Code", n * 10 + writer as i64)],
        );
        let stored = client
            .insert_entity(pb::InsertEntityRequest {
                table: "Orders".into(),
                entity: Some(order),
                // Keyed, so that the store holds idempotency records too (a backup leaves them
                // out, and the restore still serves every table).
                idempotency_key: format!("insert-{row}"),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        remember(&acks, "Orders", &stored);
        let pair = |table: &str| pb::TableOperation {
            table: table.into(),
            partition_key: "pairs".into(),
            operation: Some(insert_op(entity("pairs", &row, &[("N", n)]))),
        };
        client
            .transact_write(pb::TransactWriteRequest {
                idempotency_key: String::new(),
                operations: vec![pair("Orders"), pair("Lines")],
            })
            .await
            .unwrap();
        n += 1;
    }
}

fn tool(args: &[&str]) -> (bool, String) {
    let (status, _, stderr) = run_tool(args);
    (status.success(), stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_writes_restores_every_acknowledged_entity_and_whole_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let (server, rest) = with_rest(&dir.path().join("data"));
    let mut client = server.client().await;
    create(&mut client, "Orders", vec![index("ByCode", "Code", true)]).await;
    // Settings beside the entities: a stored access policy and a CORS rule.
    client
        .set_table_access_policies(pb::SetTableAccessPoliciesRequest {
            table: "Orders".into(),
            access_policies: vec![readers_policy()],
        })
        .await
        .unwrap();
    let answer = http(&rest, "PUT", SERVICE_PROPERTIES, CORS_PROPERTIES);
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    client
        .create_table(pb::CreateTableRequest {
            table: "Lines".into(),
            change_feed: true,
            change_feed_before_images: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let acks: Acknowledged = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|writer| {
            let client = client.clone();
            tokio::spawn(write_load(client, writer, stop.clone(), acks.clone()))
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;

    // Everything acknowledged before the backup begins must be in it.
    let before_backup = acks.lock().unwrap().clone();
    let backup_dir = dir.path().join("backup");
    let endpoint = format!("http://{}", server.addr);
    let backup = backup_dir.to_str().unwrap().to_owned();
    let (ok, printed) = tokio::task::spawn_blocking(move || {
        tool(&["backup", "--endpoint", &endpoint, "--to", &backup])
    })
    .await
    .unwrap();
    assert!(ok, "{printed}");
    assert!(printed.contains("backed up 2 tables"), "{printed}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    assert!(
        before_backup.len() > 50,
        "the load wrote {}",
        before_backup.len()
    );

    // A backup is never written over.
    let endpoint = format!("http://{}", server.addr);
    let (ok, printed) = tool(&[
        "backup",
        "--endpoint",
        &endpoint,
        "--to",
        backup_dir.to_str().unwrap(),
    ]);
    assert!(!ok && printed.contains("is not empty"), "{printed}");

    let restored_dir = dir.path().join("restored");
    let (ok, printed) = tool(&[
        "restore",
        "--from",
        backup_dir.to_str().unwrap(),
        "--data-dir",
        restored_dir.to_str().unwrap(),
    ]);
    assert!(ok, "{printed}");
    let (restored, restored_rest) = with_rest(&restored_dir);
    let mut restored_client = restored.client().await;
    let orders = all_entities(&mut restored_client, "Orders").await;
    let lines = all_entities(&mut restored_client, "Lines").await;
    for ((table, pk, rk), (etag, timestamp)) in &before_backup {
        assert_eq!(table, "Orders");
        let found = orders
            .get(&(pk.clone(), rk.clone()))
            .unwrap_or_else(|| panic!("{pk}/{rk}, acknowledged before the backup, is missing"));
        assert_eq!(&found.etag, etag);
        let found_timestamp = found
            .timestamp
            .map(|t| format!("{t:?}"))
            .unwrap_or_default();
        assert_eq!(&found_timestamp, timestamp);
    }
    // Each transaction across the two tables is in the backup whole, or not at all.
    let pairs = |table: &BTreeMap<(String, String), pb::Entity>| -> Vec<String> {
        table
            .keys()
            .filter(|(pk, _)| pk == "pairs")
            .map(|(_, rk)| rk.clone())
            .collect()
    };
    assert_eq!(pairs(&orders), pairs(&lines));
    assert!(!pairs(&lines).is_empty());
    // What the live server has now is at least what the backup has.
    let live = all_entities(&mut client, "Orders").await;
    for (key, entity) in &orders {
        assert_eq!(live[key].etag, entity.etag, "{key:?}");
    }

    // The change feed is kept again, with its before images (empty: records are not in a
    // backup).
    let lines_table = restored_client
        .get_table(pb::GetTableRequest {
            table: "Lines".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(lines_table.change_feed && lines_table.change_feed_before_images);

    // The settings are kept again: the stored access policy (so signatures naming it stay
    // valid) and the CORS rule.
    let orders_table = restored_client
        .get_table(pb::GetTableRequest {
            table: "Orders".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(orders_table.access_policies, vec![readers_policy()]);
    assert!(lines_table.access_policies.is_empty());
    let answer = http(&restored_rest, "GET", SERVICE_PROPERTIES, "");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("http://app.example"),
        "{answer}"
    );

    // The declared index was built anew over the restored entities, and answers.
    let ((pk, rk), sample) = orders.iter().find(|((pk, _), _)| pk != "pairs").unwrap();
    let code = support::int64(sample, "Code");
    let found = restored_client
        .query_entities(pb::QueryEntitiesRequest {
            table: "Orders".into(),
            index: "ByCode".into(),
            filter: format!("Code eq {code}L"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.entities.len(), 1);
    assert_eq!(
        (&found.entities[0].partition_key, &found.entities[0].row_key),
        (pk, rk)
    );
    drop(restored);

    refusals(dir.path(), &backup_dir);
    server.terminate();
}

/// A server on `data_dir` with the REST endpoint too (open mode), and that endpoint's address.
fn with_rest(data_dir: &Path) -> (ServerProcess, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rest = format!("127.0.0.1:{port}");
    (
        ServerProcess::start_with(data_dir, &["--rest-listen", &rest]),
        rest,
    )
}

const SERVICE_PROPERTIES: &str = "/devstoreaccount1/?restype=service&comp=properties";
const CORS_PROPERTIES: &str =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties>\
    <Cors><CorsRule><AllowedOrigins>http://app.example</AllowedOrigins>\
    <AllowedMethods>GET</AllowedMethods><AllowedHeaders>x-ms-*</AllowedHeaders>\
    <ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>600</MaxAgeInSeconds></CorsRule>\
    </Cors></StorageServiceProperties>";

fn readers_policy() -> pb::AccessPolicy {
    pb::AccessPolicy {
        id: "readers".into(),
        start: None,
        expiry: Some(prost_types::Timestamp {
            seconds: 4_102_444_800,
            nanos: 0,
        }),
        permissions: "r".into(),
    }
}

/// One unsigned request to the REST endpoint at `addr` (the connection closed after it): the
/// answer, head and body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    write!(
        socket,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nx-ms-version: 2019-02-02\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).unwrap();
    answer
}

/// Copies the backup in `from` to a new directory under `dir` called `name`.
fn copy_backup(from: &Path, dir: &Path, name: &str) -> std::path::PathBuf {
    let to = dir.join(name);
    std::fs::create_dir_all(to.join("tables")).unwrap();
    for entry in walk(from) {
        let relative = entry.strip_prefix(from).unwrap();
        std::fs::copy(&entry, to.join(relative)).unwrap();
    }
    to
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Restores of damaged copies of the backup in `backup` are refused before anything is written.
fn refusals(dir: &Path, backup: &Path) {
    let restore = |from: &Path, name: &str| {
        let data_dir = dir.join(name);
        let (ok, printed) = tool(&[
            "restore",
            "--from",
            from.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
        ]);
        assert!(!ok, "a restore of {} succeeded", from.display());
        assert!(!data_dir.exists(), "{printed}");
        printed
    };
    let rows = backup.join("tables/00001.rows");

    let altered = copy_backup(backup, dir, "altered");
    let mut bytes = std::fs::read(altered.join("tables/00001.rows")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(altered.join("tables/00001.rows"), &bytes).unwrap();
    let printed = restore(&altered, "from-altered");
    assert!(printed.contains("differs from the manifest"), "{printed}");

    let truncated = copy_backup(backup, dir, "truncated");
    let length = std::fs::metadata(&rows).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(truncated.join("tables/00001.rows"))
        .unwrap();
    file.set_len(length - 3).unwrap();
    let printed = restore(&truncated, "from-truncated");
    assert!(printed.contains("truncated"), "{printed}");

    // A record damaged in the store before the backup read it: cut short, the manifest agreeing.
    let damaged = copy_backup(backup, dir, "damaged-record");
    let (name, cut_row) = damage_first_record(&damaged);
    let printed = restore(&damaged, "from-damaged-record");
    assert!(printed.contains(&format!("table {name}")), "{printed}");
    assert!(printed.contains(&cut_row), "{printed}");
    assert!(printed.contains("cannot be read"), "{printed}");

    let bad_policy = copy_backup(backup, dir, "bad-policy");
    let manifest = std::fs::read_to_string(bad_policy.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"permissions\": \"r\""), "{manifest}");
    let manifest = manifest.replace("\"permissions\": \"r\"", "\"permissions\": \"rx\"");
    std::fs::write(bad_policy.join("manifest.json"), manifest).unwrap();
    let printed = restore(&bad_policy, "from-bad-policy");
    assert!(
        printed.contains("the access policies of table Orders"),
        "{printed}"
    );

    let unfinished = copy_backup(backup, dir, "unfinished");
    std::fs::remove_file(unfinished.join("manifest.json")).unwrap();
    let printed = restore(&unfinished, "from-unfinished");
    assert!(printed.contains("did not complete"), "{printed}");

    let occupied = dir.join("occupied");
    std::fs::create_dir_all(&occupied).unwrap();
    std::fs::write(occupied.join("something"), b"kept").unwrap();
    let (ok, printed) = tool(&[
        "restore",
        "--from",
        backup.to_str().unwrap(),
        "--data-dir",
        occupied.to_str().unwrap(),
    ]);
    assert!(!ok && printed.contains("is not empty"), "{printed}");
    assert_eq!(std::fs::read(occupied.join("something")).unwrap(), b"kept");
}

/// Cuts the first record of the first table's rows file in `backup` short, as a store with a
/// damaged record would have backed it up, and writes the manifest to agree: the table's name and
/// the row's RowKey.
fn damage_first_record(backup: &Path) -> (String, String) {
    use prost::Message;
    let manifest_path = backup.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let table = &mut manifest["tables"][0];
    let rows_path = backup.join(table["file"].as_str().unwrap());
    let bytes = std::fs::read(&rows_path).unwrap();
    let length = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    let mut row = pb::BackupRow::decode(&bytes[4..4 + length]).unwrap();
    row.record.truncate(row.record.len() - 2);
    let mut rewritten = Vec::new();
    rewritten.extend_from_slice(&(row.encoded_len() as u32).to_be_bytes());
    row.encode(&mut rewritten).unwrap();
    rewritten.extend_from_slice(&bytes[4 + length..]);
    std::fs::write(&rows_path, &rewritten).unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, &rewritten);
    let sha256: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    table["bytes"] = rewritten.len().into();
    table["sha256"] = sha256.into();
    let name = table["name"].as_str().unwrap().to_owned();
    std::fs::write(
        &manifest_path,
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
    (name, row.row_key)
}

#[tokio::test]
async fn a_backup_needs_an_account_key_and_a_stopped_server_leaves_no_backup() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let (ok, printed) = tool(&["keygen", "--out", keys.to_str().unwrap()]);
    assert!(ok, "{printed}");
    let server = ServerProcess::start_with(
        &dir.path().join("data"),
        &["--key-file", keys.to_str().unwrap()],
    );
    let (_, token, _) = run_tool(&[
        "token",
        "--key-file",
        keys.to_str().unwrap(),
        "--permissions",
        "raudlc",
    ]);
    let endpoint = format!("http://{}", server.addr);
    let to = dir.path().join("refused");
    let (ok, printed) = tool(&[
        "backup",
        "--endpoint",
        &endpoint,
        "--token",
        token.trim(),
        "--to",
        to.to_str().unwrap(),
    ]);
    assert!(
        !ok && printed.contains("only the account key takes a backup"),
        "{printed}"
    );
    assert!(!to.exists(), "a refused backup leaves nothing");
    let (ok, printed) = tool(&[
        "backup",
        "--endpoint",
        &endpoint,
        "--to",
        to.to_str().unwrap(),
    ]);
    assert!(!ok, "{printed}");
    assert!(!to.exists());
    let key = std::fs::read_to_string(&keys).unwrap();
    let line = key.lines().find(|line| !line.starts_with('#')).unwrap();
    let secret = line.split_whitespace().nth(1).unwrap().to_owned();
    let (ok, printed) = tool(&[
        "backup",
        "--endpoint",
        &endpoint,
        "--token",
        &secret,
        "--to",
        to.to_str().unwrap(),
    ]);
    assert!(ok, "{printed}");
    assert!(
        printed.contains("backed up 0 tables, 0 entities"),
        "{printed}"
    );
    server.terminate();
    let gone = dir.path().join("gone");
    let (ok, printed) = tool(&[
        "backup",
        "--endpoint",
        &endpoint,
        "--to",
        gone.to_str().unwrap(),
    ]);
    assert!(!ok && printed.contains("the server"), "{printed}");
    assert!(!gone.exists());
}
