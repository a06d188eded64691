//! Access control end to end: account keys and scoped tokens against a server with a key ring,
//! every refusal with its code and Azure reason, queries narrowed to the granted range, health and
//! reflection open (or protected), and no secret in any error message.

mod common;

use common::{
    assert_error, entity, get_request, insert_request, int32, query_all, transaction, tx_check,
    tx_delete, tx_insert, tx_upsert, TestServer,
};
use tonic::Code;
use trestle_proto::access::{mint, Grant, KeyBounds, KeyRing, Permissions};
use trestle_proto::pb;
use trestle_server::auth::Authenticator;

const TABLE: &str = "Orders";

struct Secured {
    server: TestServer,
    keys: KeyRing,
}

impl Secured {
    async fn start() -> Secured {
        Secured::start_with(false).await
    }

    async fn start_with(protect_introspection: bool) -> Secured {
        let keys = KeyRing::generate().unwrap();
        let authenticator = Authenticator::with_keys(keys.clone());
        let server = TestServer::start_with(|config| {
            config.authenticator = authenticator;
            config.protect_introspection = protect_introspection;
        })
        .await;
        let secured = Secured { server, keys };
        let mut admin = secured.admin().await;
        admin
            .create_table(pb::CreateTableRequest {
                table: TABLE.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        for pk in ["a", "b", "c", "d"] {
            for rk in ["1", "2", "3"] {
                admin
                    .insert_entity(insert_request(TABLE, entity(pk, rk, &[("N", int32(1))])))
                    .await
                    .unwrap();
            }
        }
        secured
    }

    /// A client with the account key: an operator.
    async fn admin(&self) -> common::RawClient {
        self.server
            .client_as(&self.keys.signing_key().secret_text())
            .await
    }

    /// A client with a token granting `letters` on `table`, partitions [b, d).
    /// A client with a token for `letters` on `table` (every table if `None`), bounded to
    /// partitions `b` to `d`.
    async fn scoped(&self, letters: &str, table: Option<&str>) -> common::RawClient {
        self.server.client_as(&self.token(letters, table)).await
    }

    /// A client with a token for `letters` on `table`, without key bounds.
    async fn unbounded(&self, letters: &str, table: Option<&str>) -> common::RawClient {
        let token = mint(self.keys.signing_key(), &grant(letters, table));
        self.server.client_as(&token).await
    }

    fn token(&self, letters: &str, table: Option<&str>) -> String {
        let mut grant = grant(letters, table);
        grant.partitions = KeyBounds {
            start: Some("b".into()),
            end: Some("d".into()),
        };
        mint(self.keys.signing_key(), &grant)
    }
}

/// A grant of `letters` on `table` (every table if `None`) for ten minutes.
fn grant(letters: &str, table: Option<&str>) -> Grant {
    let mut grant = Grant::new(Permissions::parse(letters).unwrap(), 600);
    grant.table = table.map(str::to_owned);
    grant
}

fn all_of(table: &str) -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: table.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn requests_without_a_valid_credential_are_unauthenticated() {
    let secured = Secured::start().await;
    let mut anonymous = secured.server.client().await;
    let status = assert_error(
        anonymous.get_entity(get_request(TABLE, "b", "1")).await,
        Code::Unauthenticated,
        "AuthenticationFailed",
    );
    assert!(status.message().contains("Bearer"), "{status:?}");

    let valid = secured.token("r", Some(TABLE));
    let (signed, signature) = valid.rsplit_once('.').unwrap();
    let other_keys = KeyRing::generate().unwrap();
    let expired = {
        let mut grant = Grant::new(Permissions::READ, 600);
        grant.not_before -= 1200;
        grant.expires -= 1200;
        mint(secured.keys.signing_key(), &grant)
    };
    let early = {
        let mut grant = Grant::new(Permissions::READ, 600);
        grant.not_before += 300;
        grant.expires += 300;
        mint(secured.keys.signing_key(), &grant)
    };
    let flipped = if signature.starts_with('A') { "B" } else { "A" };
    let tampered_signature = format!("{signed}.{flipped}{}", &signature[1..]);
    let cases = [
        ("tampered", format!("{signed}x.{signature}")),
        ("bad signature", tampered_signature),
        (
            "unknown key",
            mint(
                other_keys.signing_key(),
                &Grant::new(Permissions::READ, 600),
            ),
        ),
        ("other key's secret", other_keys.signing_key().secret_text()),
        ("expired", expired),
        ("not yet valid", early),
        ("junk", "not-a-token".into()),
    ];
    for (what, credential) in cases {
        let mut client = secured.server.client_as(&credential).await;
        let status = assert_error(
            client.get_entity(get_request(TABLE, "b", "1")).await,
            Code::Unauthenticated,
            "AuthenticationFailed",
        );
        let secret = secured.keys.signing_key().secret_text();
        assert!(
            !status.message().contains(&secret) && !status.message().contains(&credential),
            "{what}: the message repeats a credential: {status:?}"
        );
    }
}

#[tokio::test]
async fn the_account_key_is_full_access() {
    let secured = Secured::start().await;
    let mut admin = secured.admin().await;
    let (all, _) = query_all(&mut admin, all_of(TABLE)).await;
    assert_eq!(all.len(), 12);
    admin
        .create_table(pb::CreateTableRequest {
            table: "Other".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let listed = admin
        .list_tables(pb::ListTablesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .tables;
    assert_eq!(listed.len(), 2);
}

#[tokio::test]
async fn each_operation_needs_its_permission_letter() {
    let secured = Secured::start().await;
    let mut read_only = secured.scoped("r", Some(TABLE)).await;
    read_only
        .get_entity(get_request(TABLE, "b", "1"))
        .await
        .unwrap();
    let status = assert_error(
        read_only
            .insert_entity(insert_request(TABLE, entity("b", "9", &[])))
            .await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    assert!(status.message().contains("\"a\""), "{status:?}");
    assert_error(
        read_only
            .delete_entity(pb::DeleteEntityRequest {
                idempotency_key: String::new(),
                table: TABLE.into(),
                partition_key: "b".into(),
                row_key: "1".into(),
                if_match: "*".into(),
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    // Upsert needs add and update, as in Azure.
    let mut add_only = secured.scoped("a", Some(TABLE)).await;
    add_only
        .insert_entity(insert_request(TABLE, entity("b", "9", &[])))
        .await
        .unwrap();
    assert_error(
        add_only
            .upsert_entity(pb::UpsertEntityRequest {
                table: TABLE.into(),
                entity: Some(entity("b", "9", &[])),
                mode: pb::UpsertMode::Replace as i32,
                ..Default::default()
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    let mut add_update = secured.scoped("au", Some(TABLE)).await;
    add_update
        .upsert_entity(pb::UpsertEntityRequest {
            table: TABLE.into(),
            entity: Some(entity("b", "9", &[("N", int32(2))])),
            mode: pb::UpsertMode::Replace as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    // A patch needs update; one that may create (upsert) needs add too.
    let patch = |upsert| pb::PatchEntityRequest {
        table: TABLE.into(),
        partition_key: "b".into(),
        row_key: "1".into(),
        operations: vec![pb::PatchStep {
            step: Some(pb::patch_step::Step::Remove(pb::RemoveStep {
                property: "X".into(),
            })),
        }],
        upsert,
        ..Default::default()
    };
    assert_error(
        add_only.patch_entity(patch(false)).await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    let mut update_only = secured.scoped("u", Some(TABLE)).await;
    update_only.patch_entity(patch(false)).await.unwrap();
    assert_error(
        update_only.patch_entity(patch(true)).await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    add_update.patch_entity(patch(true)).await.unwrap();
    // Tables: create/delete need `c`, listing needs `l` and a token for every table.
    assert_error(
        add_update
            .create_table(pb::CreateTableRequest {
                table: TABLE.into(),
                ..Default::default()
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    assert_error(
        secured
            .scoped("rlc", Some(TABLE))
            .await
            .list_tables(pb::ListTablesRequest::default())
            .await,
        Code::PermissionDenied,
        "AuthorizationResourceTypeMismatch",
    );
    let mut lister = secured.unbounded("l", None).await;
    assert_eq!(
        lister
            .list_tables(pb::ListTablesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .tables
            .len(),
        1
    );
    let mut manager = secured.unbounded("c", Some("Scratch")).await;
    manager
        .create_table(pb::CreateTableRequest {
            table: "scratch".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_error(
        manager
            .delete_table(pb::DeleteTableRequest {
                table: TABLE.into(),
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationResourceTypeMismatch",
    );
}

#[tokio::test]
async fn a_token_for_another_table_or_range_is_refused() {
    let secured = Secured::start().await;
    let mut elsewhere = secured.scoped("raud", Some("Invoices")).await;
    assert_error(
        elsewhere.get_entity(get_request(TABLE, "b", "1")).await,
        Code::PermissionDenied,
        "AuthorizationResourceTypeMismatch",
    );
    let mut ranged = secured.scoped("raud", Some(TABLE)).await;
    for pk in ["a", "d"] {
        let status = assert_error(
            ranged.get_entity(get_request(TABLE, pk, "1")).await,
            Code::PermissionDenied,
            "AuthorizationFailure",
        );
        assert!(status.message().contains(pk), "{status:?}");
    }
    assert_error(
        ranged
            .insert_entity(insert_request(TABLE, entity("d", "9", &[])))
            .await,
        Code::PermissionDenied,
        "AuthorizationFailure",
    );
    // The table is matched ignoring case, as table names are.
    ranged
        .get_entity(get_request("orders", "c", "3"))
        .await
        .unwrap();
}

#[tokio::test]
async fn every_operation_and_key_across_partitions_is_checked_before_any_applies() {
    let secured = Secured::start().await;
    let mut writer = secured.scoped("raud", Some(TABLE)).await;
    let across = |pk: &str, operation: pb::TransactionOperation| pb::TableOperation {
        table: TABLE.into(),
        partition_key: pk.into(),
        operation: Some(operation),
    };
    // The second operation is outside the grant's partitions [b, d): nothing applies.
    let status = assert_error(
        writer
            .transact_write(pb::TransactWriteRequest {
                idempotency_key: String::new(),
                operations: vec![
                    across("b", tx_insert(entity("b", "7", &[]))),
                    across("d", tx_delete("1", "*")),
                ],
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationFailure",
    );
    assert_eq!(common::operation_index(&status), Some(1));
    let key = |pk: &str, rk: &str| pb::EntityRef {
        table: TABLE.into(),
        partition_key: pk.into(),
        row_key: rk.into(),
    };
    let read = |keys| pb::GetEntitiesRequest {
        keys,
        select: vec![],
    };
    let found = writer
        .get_entities(read(vec![key("b", "7"), key("c", "1")]))
        .await
        .unwrap()
        .into_inner()
        .entities;
    assert!(found[0].entity.is_none(), "the refused transaction applied");
    assert!(found[1].entity.is_some());
    let status = assert_error(
        writer
            .get_entities(read(vec![key("b", "1"), key("a", "1")]))
            .await,
        Code::PermissionDenied,
        "AuthorizationFailure",
    );
    assert_eq!(common::operation_index(&status), Some(1));
    // Another table is outside a grant for this one.
    let elsewhere = pb::TableOperation {
        table: "Invoices".into(),
        ..across("b", tx_insert(entity("b", "8", &[])))
    };
    assert_error(
        writer
            .transact_write(pb::TransactWriteRequest {
                idempotency_key: String::new(),
                operations: vec![across("b", tx_insert(entity("b", "9", &[]))), elsewhere],
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationResourceTypeMismatch",
    );
}

#[tokio::test]
async fn every_operation_of_a_transaction_is_checked_before_any_applies() {
    let secured = Secured::start().await;
    let mut writer = secured.scoped("ad", Some(TABLE)).await;
    let status = assert_error(
        writer
            .submit_transaction(transaction(
                TABLE,
                "b",
                vec![
                    tx_insert(entity("b", "7", &[])),
                    tx_delete("1", "*"),
                    tx_check("2", "*", false),
                ],
            ))
            .await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    assert_eq!(common::operation_index(&status), Some(2));
    assert_error(
        writer
            .submit_transaction(transaction(
                TABLE,
                "b",
                vec![
                    tx_insert(entity("b", "7", &[])),
                    tx_upsert(entity("b", "8", &[]), pb::UpsertMode::Merge),
                ],
            ))
            .await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    assert_error(
        writer
            .submit_transaction(transaction(
                TABLE,
                "d",
                vec![tx_insert(entity("d", "7", &[]))],
            ))
            .await,
        Code::PermissionDenied,
        "AuthorizationFailure",
    );
    // Nothing of the refused transactions applied.
    let mut admin = secured.admin().await;
    assert_error(
        admin.get_entity(get_request(TABLE, "b", "7")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
    writer
        .submit_transaction(transaction(
            TABLE,
            "b",
            vec![tx_insert(entity("b", "7", &[])), tx_delete("1", "*")],
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn queries_are_narrowed_to_the_granted_range_or_refused() {
    let secured = Secured::start().await;
    let mut reader = secured.scoped("r", Some(TABLE)).await;
    let (narrowed, _) = query_all(&mut reader, all_of(TABLE)).await;
    let partitions: Vec<_> = narrowed.iter().map(|e| e.partition_key.as_str()).collect();
    assert_eq!(partitions, ["b", "b", "b", "c", "c", "c"]);

    let filtered = pb::QueryEntitiesRequest {
        filter: "PartitionKey ge 'a' and RowKey eq '2'".into(),
        ..all_of(TABLE)
    };
    let (rows, _) = query_all(&mut reader, filtered.clone()).await;
    assert_eq!(
        common::keys(&rows),
        [("b".into(), "2".into()), ("c".into(), "2".into())]
    );
    let count = reader
        .count_entities(filtered)
        .await
        .unwrap()
        .into_inner()
        .count;
    assert_eq!(count, 2);
    let mut stream = reader
        .scan_entities(pb::QueryEntitiesRequest {
            reverse: true,
            ..all_of(TABLE)
        })
        .await
        .unwrap()
        .into_inner();
    let mut streamed = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        streamed.extend(batch.entities);
    }
    assert_eq!(streamed.len(), 6);
    assert_eq!(streamed[0].partition_key, "c");

    assert_error(
        reader
            .query_entities(pb::QueryEntitiesRequest {
                partition_key: Some("a".into()),
                ..all_of(TABLE)
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationFailure",
    );
    let (inside, _) = query_all(
        &mut reader,
        pb::QueryEntitiesRequest {
            partition_key: Some("c".into()),
            ..all_of(TABLE)
        },
    )
    .await;
    assert_eq!(inside.len(), 3);
}

#[tokio::test]
async fn row_ranges_narrow_every_partition() {
    let secured = Secured::start().await;
    let mut grant = Grant::new(Permissions::READ, 600);
    grant.rows = KeyBounds {
        start: Some("2".into()),
        end: None,
    };
    let mut reader = secured
        .server
        .client_as(&mint(secured.keys.signing_key(), &grant))
        .await;
    let (rows, _) = query_all(&mut reader, all_of(TABLE)).await;
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|e| e.row_key.as_str() >= "2"));
    assert_error(
        reader.get_entity(get_request(TABLE, "a", "1")).await,
        Code::PermissionDenied,
        "AuthorizationFailure",
    );
}

async fn health_status(
    server: &TestServer,
    credential: Option<&str>,
) -> Result<i32, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::with_interceptor(
        channel,
        common::Bearer(credential.map(str::to_owned)),
    );
    health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|r| r.into_inner().status)
}

#[tokio::test]
async fn health_is_open_unless_introspection_is_protected() {
    let open = Secured::start().await;
    assert!(health_status(&open.server, None).await.is_ok());

    let protected = Secured::start_with(true).await;
    let refused = health_status(&protected.server, None).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    let token = protected.token("r", Some(TABLE));
    assert!(health_status(&protected.server, Some(&token)).await.is_ok());
}

#[tokio::test]
async fn the_sdk_sends_its_token() {
    let secured = Secured::start().await;
    let client = trestle_client::Client::builder()
        .endpoint(secured.server.endpoint())
        .token(secured.token("ra", Some(TABLE)))
        .connect()
        .await
        .unwrap();
    let orders = client.table(TABLE);
    let row = orders
        .get::<trestle_client::Properties>(("c", "1"))
        .await
        .unwrap();
    assert_eq!(row.value.get_i32("N"), Some(1));
    let error = orders
        .delete(("c", "1"), trestle_client::IfMatch::Any)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), trestle_client::ErrorKind::PermissionDenied);
    assert_eq!(
        error.code(),
        Some(trestle_client::ErrorCode::AuthorizationPermissionMismatch)
    );
    let anonymous = secured.server.sdk().await;
    let error = anonymous.list_tables("").await.unwrap_err();
    assert_eq!(error.kind(), trestle_client::ErrorKind::Unauthenticated);
}

#[tokio::test]
async fn indexes_are_managed_with_c_on_unbounded_keys_read_with_r_and_stay_in_scope() {
    let secured = Secured::start().await;
    let by_n = pb::CreateIndexRequest {
        table: TABLE.into(),
        index: Some(pb::IndexDefinition {
            name: "ByN".into(),
            properties: vec!["N".into()],
            scope: pb::IndexScope::Table as i32,
            unique: false,
        }),
    };
    let mut reader = secured.unbounded("r", Some(TABLE)).await;
    assert_error(
        reader.create_index(by_n.clone()).await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
    let bounded_manager = secured
        .scoped("c", Some(TABLE))
        .await
        .create_index(by_n.clone())
        .await;
    assert_eq!(bounded_manager.unwrap_err().code(), Code::PermissionDenied);
    let mut manager = secured.unbounded("c", Some(TABLE)).await;
    manager.create_index(by_n).await.unwrap();
    let get = pb::GetTableRequest {
        table: TABLE.into(),
    };
    assert_error(
        secured
            .unbounded("r", Some("Other"))
            .await
            .get_table(get.clone())
            .await,
        Code::PermissionDenied,
        "AuthorizationResourceTypeMismatch",
    );
    let mut ready = false;
    for _ in 0..300 {
        let table = reader.get_table(get.clone()).await.unwrap().into_inner();
        if table.indexes[0].state == pb::IndexState::Ready as i32 {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(ready);
    // A token bounded to partitions b..d reads only those through the index too.
    let mut scoped = secured.scoped("r", Some(TABLE)).await;
    let through_index = pb::QueryEntitiesRequest {
        table: TABLE.into(),
        index: "ByN".into(),
        ..Default::default()
    };
    let page = scoped
        .query_entities(through_index)
        .await
        .unwrap()
        .into_inner();
    let partitions: Vec<&str> = page
        .entities
        .iter()
        .map(|e| e.partition_key.as_str())
        .collect();
    assert_eq!(partitions, ["b", "b", "b", "c", "c", "c"]);
    assert_error(
        reader
            .drop_index(pb::DropIndexRequest {
                table: TABLE.into(),
                index: "ByN".into(),
            })
            .await,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
}

#[tokio::test]
async fn a_backup_streams_for_the_account_key_only_and_only_from_the_embedded_store() {
    let secured = Secured::start().await;
    let mut scoped = secured.unbounded("raudlc", None).await;
    let refused = scoped.backup(pb::BackupRequest {}).await;
    assert_error(
        refused,
        Code::PermissionDenied,
        "AuthorizationResourceTypeMismatch",
    );
    let mut admin = secured.admin().await;
    let answer = admin.backup(pb::BackupRequest {}).await;
    if common::postgres::conformance_database_in_use() {
        // The PostgreSQL store is backed up with the database's own tools.
        assert_error(answer, Code::Unimplemented, "NotImplemented");
        return;
    }
    let mut chunks = answer.unwrap().into_inner();
    let header = chunks.message().await.unwrap().unwrap().header.unwrap();
    let tables: Vec<&str> = header.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tables, [TABLE]);
    let mut rows = 0;
    loop {
        let chunk = chunks.message().await.unwrap().unwrap();
        rows += chunk.rows.len();
        if chunk.complete {
            break;
        }
    }
    assert_eq!(rows, 12);
    assert!(chunks.message().await.unwrap().is_none());
}

#[tokio::test]
async fn a_token_bounded_to_a_range_reads_only_that_ranges_changes() {
    let secured = Secured::start().await;
    let mut admin = secured.admin().await;
    admin
        .create_table(pb::CreateTableRequest {
            table: "Feed".into(),
            change_feed: true,
            ..Default::default()
        })
        .await
        .unwrap();
    for pk in ["a", "b", "c", "d"] {
        admin
            .insert_entity(insert_request("Feed", entity(pk, "1", &[("N", int32(1))])))
            .await
            .unwrap();
    }
    let read = |follow| pb::ReadChangesRequest {
        table: "Feed".into(),
        follow,
        ..Default::default()
    };
    let mut scoped = secured.scoped("r", Some("Feed")).await;
    let mut stream = scoped.read_changes(read(false)).await.unwrap().into_inner();
    let mut seen = Vec::new();
    let mut cursor = String::new();
    while let Some(batch) = stream.message().await.unwrap() {
        seen.extend(batch.changes.into_iter().map(|c| c.partition_key));
        cursor = batch.cursor;
    }
    assert_eq!(seen, ["b", "c"], "partitions b to d (exclusive) only");
    assert!(
        !cursor.is_empty(),
        "the cursor passes the records not shown"
    );
    let mut other_table = secured.scoped("r", Some(TABLE)).await;
    let refused = other_table.read_changes(read(false)).await;
    assert_error(
        refused,
        Code::PermissionDenied,
        "AuthorizationResourceTypeMismatch",
    );
    let mut no_read = secured.unbounded("a", Some("Feed")).await;
    let refused = no_read.read_changes(read(true)).await;
    assert_error(
        refused,
        Code::PermissionDenied,
        "AuthorizationPermissionMismatch",
    );
}
