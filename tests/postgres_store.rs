//! Trestle servers over one PostgreSQL database are one service: what one writes the other reads,
//! a continuation token from one resumes on the other, an ETag from one conditions a write on the
//! other, and a table one deletes is gone for both; a server reaches its database over TLS,
//! verified, when the URL asks for it; point reads and inserts, served awaited, never wait
//! behind the blocking calls; and a page's snapshot ends as the page answers. Each test starts
//! its own throwaway cluster (skipped where PostgreSQL is not installed, unless
//! `TRESTLE_REQUIRE_POSTGRES` is set).

mod common;

use common::postgres::Postgres;
use common::{assert_error, fill_partition, get_request, query_all, TestServer};
use tonic::Code;
use trestle_proto::pb;
use trestle_server::storage::{PostgresOptions, StoreConfig};

/// A throwaway cluster and the URL of its new database `name`; `None` where PostgreSQL is not
/// installed. (The cluster's programs and its admin connection block: off the runtime.)
async fn cluster_with_database(name: &'static str) -> Option<(Postgres, String)> {
    tokio::task::spawn_blocking(move || {
        let cluster = Postgres::start()?;
        let url = cluster.database(name);
        Some((cluster, url))
    })
    .await
    .unwrap()
}

/// A server keeping its store in the database at `url`.
async fn server_over(url: &str) -> TestServer {
    server_with(url, 4, None).await
}

/// A server keeping its store in the database at `url`, `pool_size` connections a set,
/// verifying the database's TLS certificate with `ca_pem` (the system's roots if `None`).
async fn server_with(url: &str, pool_size: usize, ca_pem: Option<Vec<u8>>) -> TestServer {
    let store = StoreConfig::Postgres {
        url: url.to_owned(),
        options: PostgresOptions {
            pool_size,
            ca_pem,
            ..PostgresOptions::default()
        },
    };
    TestServer::start_with(move |config| config.store = store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_over_one_database_are_one_service() {
    let Some((cluster, url)) = cluster_with_database("shared").await else {
        return;
    };
    let (first, second) = (server_over(&url).await, server_over(&url).await);
    let mut one = first.client_with_table("Shared").await;
    let mut other = second.client().await;
    let same_name = pb::CreateTableRequest {
        table: "shared".into(),
        ..Default::default()
    };
    let twice = other.create_table(same_name).await;
    assert_error(twice, Code::AlreadyExists, "TableAlreadyExists");
    fill_partition(&mut one, "Shared", "p", 30).await;
    let read = other
        .get_entity(get_request("Shared", "p", "000007"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.row_key, "000007");

    // A continuation token from one server resumes on the other.
    let mut request = pb::QueryEntitiesRequest {
        table: "Shared".into(),
        page_size: 10,
        ..Default::default()
    };
    let mut seen = Vec::new();
    for turn in 0..3 {
        let client = if turn == 1 { &mut other } else { &mut one };
        let page = client
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        seen.extend(page.entities.into_iter().map(|e| e.row_key));
        request.continuation_token = page.continuation_token;
    }
    assert_eq!(seen.len(), 30);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "in key order, once each"
    );

    // A partition of more rows than the store reads with one statement (a page without a filter
    // asks for the rows it needs, 1,024; a filtered page reads until it has its matches), forward
    // and reverse: every row once, in order, and page by page.
    fill_partition(&mut one, "Shared", "big", 2_500).await;
    for (filter, expected) in [("", 2_500), ("V lt 50", 1_250)] {
        for reverse in [false, true] {
            let whole = pb::QueryEntitiesRequest {
                table: "Shared".into(),
                partition_key: Some("big".into()),
                filter: filter.into(),
                reverse,
                ..Default::default()
            };
            let (entities, pages) = query_all(&mut other, whole).await;
            let rows: Vec<&str> = entities.iter().map(|e| e.row_key.as_str()).collect();
            assert_eq!(rows.len(), expected, "{filter:?}, reverse: {reverse}");
            let ordered = rows.windows(2).all(|w| (w[0] < w[1]) != reverse);
            assert!(ordered, "{filter:?}, reverse: {reverse}");
            assert_eq!(pages[0], 1_000, "{filter:?}, reverse: {reverse}");
        }
    }

    // An ETag read on one server conditions a write on the other.
    let mut changed = read.clone();
    changed.etag.clear();
    changed.timestamp = None;
    let update = |if_match: &str| pb::UpdateEntityRequest {
        table: "Shared".into(),
        entity: Some(changed.clone()),
        if_match: if_match.into(),
        ..Default::default()
    };
    one.update_entity(update(&read.etag)).await.unwrap();
    assert_error(
        other.update_entity(update(&read.etag)).await,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    );

    // A table deleted through one server is gone for both.
    let deletion = pb::DeleteTableRequest {
        table: "Shared".into(),
    };
    other.delete_table(deletion).await.unwrap();
    let gone = one.get_entity(get_request("Shared", "p", "000007")).await;
    assert_error(gone, Code::NotFound, "TableNotFound");
    drop((first, second));
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}

/// A throwaway CA's certificate (PEM), and a certificate and key it signed for 127.0.0.1.
fn database_certificates() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let certificate = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), certificate.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reaches_its_database_over_verified_tls_when_the_url_asks() {
    let (ca_pem, certificate, key) = database_certificates();
    let started = tokio::task::spawn_blocking(move || {
        let files = tempfile::tempdir().unwrap();
        let (cert_file, key_file) = (
            files.path().join("server.crt"),
            files.path().join("server.key"),
        );
        std::fs::write(&cert_file, certificate).unwrap();
        std::fs::write(&key_file, key).unwrap();
        std::fs::set_permissions(
            &key_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        common::postgres::hand_to_postgres(files.path());
        let (cert_setting, key_setting) = (
            format!("ssl_cert_file={}", cert_file.display()),
            format!("ssl_key_file={}", key_file.display()),
        );
        let cluster =
            Postgres::start_with(&["-c", "ssl=on", "-c", &cert_setting, "-c", &key_setting])?;
        let url = cluster.database("tls");
        Some((cluster, url, files))
    })
    .await
    .unwrap();
    let Some((_cluster, url, _files)) = started else {
        return;
    };
    let tls_url = format!("{url} sslmode=require");

    // Verified against the CA given: served, and every connection of the server is encrypted.
    let server = server_with(&tls_url, 4, Some(ca_pem.into_bytes())).await;
    let mut client = server.client_with_table("Secret").await;
    fill_partition(&mut client, "Secret", "p", 3).await;
    client
        .get_entity(get_request("Secret", "p", "000001"))
        .await
        .unwrap();
    let admin_url = url.clone();
    let (encrypted, plain) = tokio::task::spawn_blocking(move || {
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        let row = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl)
                 FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                 WHERE a.datname = 'tls' AND a.pid <> pg_backend_pid()",
                &[],
            )
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    })
    .await
    .unwrap();
    assert!(
        encrypted >= 4 && plain == 0,
        "{encrypted} encrypted, {plain} plain"
    );

    // A certificate the server cannot verify (its CA is not among the system's roots): refused
    // at start, saying why.
    let refused = tokio::task::spawn_blocking(move || {
        let options = trestle_server::storage::PostgresOptions {
            ca_pem: None,
            pool_size: 1,
            purge_deleted_tables: true,
        };
        trestle_server::storage::PostgresStore::open(&tls_url, options).unwrap_err()
    })
    .await
    .unwrap()
    .to_string();
    assert!(
        refused.contains("cannot connect") && refused.to_lowercase().contains("certificate"),
        "{refused}"
    );
}

/// A REST GET of `path` on `rest`: the status and the whole answer.
async fn rest_get(rest: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut socket = tokio::net::TcpStream::connect(rest).await.unwrap();
    common::rest::exchange(&mut socket, "GET", path, b"").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_fault_answers_both_protocols_without_its_internal_text() {
    let Some((cluster, url)) = cluster_with_database("faulty").await else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rest = listener.local_addr().unwrap();
    let store = StoreConfig::Postgres {
        url: url.clone(),
        options: PostgresOptions {
            pool_size: 2,
            ..PostgresOptions::default()
        },
    };
    let server = TestServer::start_with_rest(listener, move |config| config.store = store).await;
    let mut client = server.client_with_table("Faulty").await;
    fill_partition(&mut client, "Faulty", "p", 3).await;
    let entity_path = "/devstoreaccount1/Faulty(PartitionKey='p',RowKey='000001')";
    assert_eq!(rest_get(rest, entity_path).await.0, 200);

    // The entities' relation gone under the server: an internal fault, whose text (the
    // database's "relation ... does not exist") stays in the server log.
    let admin_url = url.clone();
    tokio::task::spawn_blocking(move || {
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        admin
            .batch_execute("ALTER TABLE trestle_entities RENAME TO trestle_entities_hidden")
            .unwrap();
    })
    .await
    .unwrap();
    let refused = client
        .get_entity(get_request("Faulty", "p", "000001"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Internal);
    assert_eq!(
        refused.message(),
        "internal error; the server log has the details"
    );
    let (status, answer) = rest_get(rest, entity_path).await;
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer.contains("x-ms-error-code: InternalError"),
        "{answer}"
    );
    assert!(
        answer.contains("internal error; the server log has the details")
            && !answer.contains("relation")
            && !answer.contains("trestle_entities"),
        "{answer}"
    );

    // The database down: unavailable, in the same fixed words on both protocols.
    tokio::task::spawn_blocking(move || cluster.kill())
        .await
        .unwrap();
    let down = client
        .get_entity(get_request("Faulty", "p", "000001"))
        .await
        .unwrap_err();
    assert_eq!(down.code(), Code::Unavailable, "{down:?}");
    assert!(down
        .message()
        .starts_with("the store's database cannot be reached"));
    let (status, answer) = rest_get(rest, entity_path).await;
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer.contains("x-ms-error-code: ServiceUnavailable")
            && answer.contains("the store's database cannot be reached")
            && !answer.contains("127.0.0.1"),
        "{answer}"
    );
}

/// Point reads, reads of many keys, queries (pages, streams, counts) and commits to tables
/// without indexes are served awaited, over connections of their own: with the server's one
/// blocking connection held by a merge into a table with an index (which commits go the blocking
/// way) that waits for a row another session has locked, reads (of either table), inserts and
/// merges of another table still answer; the merge finishes once the row is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_commits_are_served_while_the_blocking_connections_wait() {
    let Some((cluster, url)) = cluster_with_database("awaited").await else {
        return;
    };
    let server = server_with(&url, 1, None).await;
    let mut client = server.client().await;
    let by_n = pb::IndexDefinition {
        name: "ByN".into(),
        properties: vec!["N".into()],
        scope: pb::IndexScope::Table as i32,
        unique: false,
    };
    for (table, indexes) in [("Held", vec![by_n]), ("Free", Vec::new())] {
        let create = pb::CreateTableRequest {
            table: table.into(),
            indexes,
            ..Default::default()
        };
        client.create_table(create).await.unwrap();
        // The server learns of each table at its first commit.
        let first = common::entity("first", "r", &[("N", common::int32(0))]);
        client
            .insert_entity(common::insert_request(table, first))
            .await
            .unwrap();
    }
    let held = common::entity("held", "r", &[("N", common::int32(1))]);
    client
        .insert_entity(common::insert_request("Held", held.clone()))
        .await
        .unwrap();
    // Another session locks the entity's row: a merge of it waits, holding the one connection.
    let held_row =
        "SELECT 1 FROM trestle_entities WHERE pk = convert_to('held', 'UTF8') FOR UPDATE";
    let locker = Locker::hold(&url, held_row).await;
    let merge = {
        let mut client = client.clone();
        let request = pb::MergeEntityRequest {
            table: "Held".into(),
            entity: Some(common::entity("held", "r", &[("M", common::int32(2))])),
            if_match: "*".into(),
            ..Default::default()
        };
        tokio::spawn(async move { client.merge_entity(request).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !merge.is_finished(),
        "the merge did not wait for the locked row"
    );
    let served = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        for n in 0..20 {
            let entity = common::entity("free", &format!("{n:03}"), &[]);
            client
                .insert_entity(common::insert_request("Free", entity.clone()))
                .await
                .unwrap();
            client
                .merge_entity(pb::MergeEntityRequest {
                    table: "Free".into(),
                    entity: Some(entity),
                    if_match: "*".into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            client
                .get_entity(get_request("Free", "free", &format!("{n:03}")))
                .await
                .unwrap();
        }
        let key = |table: &str, pk: &str, rk: &str| pb::EntityRef {
            table: table.into(),
            partition_key: pk.into(),
            row_key: rk.into(),
        };
        let keys = vec![
            key("free", "free", "007"),
            key("Held", "held", "r"),
            key("Free", "free", "missing"),
        ];
        let many = client
            .get_entities(pb::GetEntitiesRequest {
                keys,
                select: vec![],
            })
            .await
            .unwrap()
            .into_inner()
            .entities;
        let found: Vec<bool> = many.iter().map(|f| f.entity.is_some()).collect();
        assert_eq!(found, [true, true, false]);
        let page = |table: &str, partition_key: &str| pb::QueryEntitiesRequest {
            table: table.into(),
            partition_key: Some(partition_key.into()),
            page_size: 15,
            ..Default::default()
        };
        let first = client.query_entities(page("Free", "free")).await.unwrap();
        let first = first.into_inner();
        let rest = pb::QueryEntitiesRequest {
            continuation_token: first.continuation_token.clone(),
            ..page("Free", "free")
        };
        let rest = client.query_entities(rest).await.unwrap().into_inner();
        assert_eq!((first.entities.len(), rest.entities.len()), (15, 5));
        assert!(rest.continuation_token.is_empty());
        let held_page = client.query_entities(page("held", "held")).await.unwrap();
        assert_eq!(held_page.into_inner().entities.len(), 1);
        let stream = pb::QueryEntitiesRequest {
            page_size: 7,
            ..page("Free", "free")
        };
        let mut stream = client.scan_entities(stream).await.unwrap().into_inner();
        let mut streamed = Vec::new();
        while let Some(batch) = stream.message().await.unwrap() {
            streamed.extend(batch.entities.into_iter().map(|e| e.row_key));
        }
        let expected: Vec<String> = (0..20).map(|n| format!("{n:03}")).collect();
        assert_eq!(streamed, expected);
        let counted = client.count_entities(page("Free", "free")).await.unwrap();
        assert_eq!(counted.into_inner().count, 20);
        let unknown = vec![key("Free", "free", "007"), key("Nowhere", "a", "b")];
        let refused = client
            .get_entities(pb::GetEntitiesRequest {
                keys: unknown,
                select: vec![],
            })
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
        assert_eq!(common::operation_index(&refused), Some(1));
        client
            .get_entity(get_request("Held", "held", "r"))
            .await
            .unwrap()
    })
    .await
    .expect("reads and commits waited for the blocking connection");
    assert!(!served.into_inner().properties.contains_key("M"));
    assert!(
        !merge.is_finished(),
        "the merge finished while the row was locked"
    );
    locker.release();
    merge.await.unwrap().unwrap();
    let merged = client
        .get_entity(get_request("Held", "held", "r"))
        .await
        .unwrap()
        .into_inner();
    assert!(merged.properties.contains_key("M") && merged.properties.contains_key("N"));
    drop(cluster);
}

/// Queries hold at most half of the awaited connections: with the entities' relation locked by
/// another session, of three pages of a query asked of a server whose pools hold four
/// connections, two wait for the lock in the database and the third for the queries' share of
/// the pool (the two other connections stay for point reads and commits); all three answer once
/// the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_hold_at_most_half_of_the_awaited_connections() {
    let Some((cluster, url)) = cluster_with_database("share").await else {
        return;
    };
    let server = server_with(&url, 4, None).await;
    let mut client = server.client_with_table("Shared").await;
    let entity = common::entity("p", "r", &[]);
    client
        .insert_entity(common::insert_request("Shared", entity))
        .await
        .unwrap();
    let locked = "LOCK TABLE trestle_entities IN ACCESS EXCLUSIVE MODE";
    let locker = Locker::hold(&url, locked).await;
    let pages: Vec<_> = (0..3)
        .map(|_| {
            let mut client = client.clone();
            let request = pb::QueryEntitiesRequest {
                table: "Shared".into(),
                partition_key: Some("p".into()),
                ..Default::default()
            };
            tokio::spawn(async move { client.query_entities(request).await })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let admin_url = url.clone();
    let waiting: i64 = tokio::task::spawn_blocking(move || {
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        let waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
            AND wait_event_type = 'Lock' AND query LIKE 'SELECT pk, rk, record%'";
        admin.query_one(waiting, &[]).unwrap().get(0)
    })
    .await
    .unwrap();
    assert_eq!(
        waiting, 2,
        "queries holding a connection each, waiting for the lock"
    );
    locker.release();
    for page in pages {
        let page = page.await.unwrap().unwrap().into_inner();
        assert_eq!(page.entities.len(), 1);
    }
    drop(cluster);
}

/// A commit served awaited that is dropped inside its transaction (its deadline passes while it
/// waits for the table's lock, which another session holds) leaves no transaction behind on a
/// connection lent again: with one awaited connection, a point read answers at once, and once the
/// lock is free the table takes commits as before, the dropped one not among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_dropped_inside_its_transaction_leaves_no_transaction_behind() {
    let Some((cluster, url)) = cluster_with_database("dropped").await else {
        return;
    };
    let server = server_with(&url, 1, None).await;
    let mut client = server.client_with_table("Locked").await;
    let kept = common::entity("p", "kept", &[("N", common::int32(1))]);
    client
        .insert_entity(common::insert_request("Locked", kept.clone()))
        .await
        .unwrap();
    // Another session takes the table's lock exclusively, as a deletion of the table does.
    let table_lock = "SELECT pg_advisory_xact_lock(29810, (id % 2147483647)::int4)
        FROM trestle_tables WHERE folded = 'locked' AND live";
    let locker = Locker::hold(&url, table_lock).await;
    let mut merge = tonic::Request::new(pb::MergeEntityRequest {
        table: "Locked".into(),
        entity: Some(common::entity("p", "kept", &[("M", common::int32(2))])),
        if_match: "*".into(),
        ..Default::default()
    });
    merge.set_timeout(std::time::Duration::from_millis(300));
    let expired = client.merge_entity(merge).await.unwrap_err();
    assert!(
        matches!(expired.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{expired:?}"
    );
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        client.get_entity(get_request("Locked", "p", "kept")),
    )
    .await
    .expect("the read waited behind the dropped commit's connection")
    .unwrap()
    .into_inner();
    assert!(!read.properties.contains_key("M"));
    locker.release();
    let other = common::entity("p", "other", &[("N", common::int32(3))]);
    client
        .insert_entity(common::insert_request("Locked", other))
        .await
        .unwrap();
    client
        .merge_entity(pb::MergeEntityRequest {
            table: "Locked".into(),
            entity: Some(common::entity("p", "kept", &[("O", common::int32(4))])),
            if_match: "*".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let kept = client
        .get_entity(get_request("Locked", "p", "kept"))
        .await
        .unwrap()
        .into_inner();
    assert!(kept.properties.contains_key("O") && !kept.properties.contains_key("M"));
    drop(cluster);
}

/// A page's snapshot ends as the page answers, its `COMMIT` sent without waiting for the reply:
/// with one awaited connection, the writes and pages lent it next run after that `COMMIT` (each
/// page sees the writes before it), and once the last page has answered no session of the
/// server's stays inside a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_end_their_snapshots_as_they_answer() {
    let Some((cluster, url)) = cluster_with_database("pages").await else {
        return;
    };
    let server = server_with(&url, 1, None).await;
    let mut client = server.client_with_table("Paged").await;
    fill_partition(&mut client, "Paged", "p", 300).await;
    let page_of = |partition_key: &str| pb::QueryEntitiesRequest {
        table: "Paged".into(),
        partition_key: Some(partition_key.into()),
        page_size: 50,
        ..Default::default()
    };
    for n in 0..20 {
        let page = client.query_entities(page_of("p")).await.unwrap();
        assert_eq!(page.into_inner().entities.len(), 50);
        let written = common::entity("q", &format!("{n:03}"), &[]);
        client
            .insert_entity(common::insert_request("Paged", written))
            .await
            .unwrap();
        let (seen, _) = query_all(&mut client, page_of("q")).await;
        assert_eq!(seen.len(), n + 1, "the page after insert {n}");
    }
    let admin_url = url.clone();
    let open = tokio::task::spawn_blocking(move || {
        let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
        let in_transaction = "SELECT count(*) FROM pg_stat_activity
            WHERE state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let open: i64 = admin.query_one(in_transaction, &[]).unwrap().get(0);
            if open == 0 || std::time::Instant::now() > deadline {
                return open;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
    assert_eq!(open, 0, "sessions left inside a transaction");
    drop(server);
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}

/// Another session of the database holding what a statement locked, in a transaction of its own,
/// until released.
struct Locker {
    unlock: std::sync::mpsc::Sender<()>,
    session: std::thread::JoinHandle<()>,
}

impl Locker {
    /// Runs `sql` in a transaction of a session of `url`'s database, once it has locked.
    async fn hold(url: &str, sql: &'static str) -> Locker {
        let (unlock, unlock_asked) = std::sync::mpsc::channel::<()>();
        let (ready, is_locked) = tokio::sync::oneshot::channel();
        let url = url.to_owned();
        let session = std::thread::spawn(move || {
            let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            let mut tx = admin.transaction().unwrap();
            tx.execute(sql, &[]).unwrap();
            ready.send(()).unwrap();
            // Released, or the test failed.
            let _ = unlock_asked.recv();
            tx.commit().unwrap();
        });
        is_locked.await.unwrap();
        Locker { unlock, session }
    }

    /// Ends the transaction, freeing what it locked.
    fn release(self) {
        self.unlock.send(()).unwrap();
        self.session.join().unwrap();
    }
}

/// A deleted table of a few entities (and change records) is purged in its deletion's own
/// transaction: its name is free at once, as on the embedded store, rather than after the
/// background purger's next pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_deleted_tables_name_is_free_at_once() {
    let Some((_cluster, url)) = cluster_with_database("recreated").await else {
        return;
    };
    let server = server_over(&url).await;
    let mut client = server.client().await;
    for round in 0..20 {
        let create = pb::CreateTableRequest {
            table: "Again".into(),
            change_feed: true,
            ..Default::default()
        };
        client
            .create_table(create)
            .await
            .unwrap_or_else(|status| panic!("round {round}: the name is not free: {status:?}"));
        for row in 0..10 {
            let entity = common::entity("p", &format!("r{row}"), &[("N", common::int32(round))]);
            client
                .insert_entity(common::insert_request("Again", entity))
                .await
                .unwrap();
        }
        let delete = pb::DeleteTableRequest {
            table: "Again".into(),
        };
        client.delete_table(delete).await.unwrap();
    }
}
