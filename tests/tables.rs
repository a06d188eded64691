//! Tables: create, delete, list, name rules and their errors.

mod common;

use common::*;
use tonic::Code;
use trestle_proto::pb;

fn create(table: &str) -> pb::CreateTableRequest {
    pb::CreateTableRequest {
        table: table.into(),
        ..Default::default()
    }
}

fn list(prefix: &str, page_size: u32, page_token: &str) -> pb::ListTablesRequest {
    pb::ListTablesRequest {
        prefix: prefix.into(),
        page_size,
        page_token: page_token.into(),
    }
}

#[tokio::test]
async fn create_list_and_delete_tables() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let created = client
        .create_table(create("Customers"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.name, "Customers");
    client.create_table(create("orders")).await.unwrap();
    let listed = client
        .list_tables(list("", 0, ""))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = listed.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["Customers", "orders"]);
    assert!(listed.next_page_token.is_empty());

    client
        .delete_table(pb::DeleteTableRequest {
            table: "CUSTOMERS".into(),
        })
        .await
        .unwrap();
    let listed = client
        .list_tables(list("", 0, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        listed.tables,
        [pb::Table {
            name: "orders".into(),
            ..pb::Table::default()
        }]
    );
    let gone = client.get_entity(get_request("Customers", "p", "r")).await;
    assert_error(gone, Code::NotFound, "TableNotFound");
}

#[tokio::test]
async fn table_names_are_unique_ignoring_case_and_keep_their_case() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    client.create_table(create("MixedCase")).await.unwrap();
    assert_error(
        client.create_table(create("mixedcase")).await,
        Code::AlreadyExists,
        "TableAlreadyExists",
    );
    let mut other = server.client().await;
    other
        .insert_entity(insert_request("MIXEDCASE", entity("p", "r", &[])))
        .await
        .unwrap();
    let listed = client
        .list_tables(list("mixed", 0, ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        listed.tables,
        [pb::Table {
            name: "MixedCase".into(),
            ..pb::Table::default()
        }]
    );
}

#[tokio::test]
async fn invalid_table_names_are_refused() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let longest = format!("a{}", "b".repeat(62));
    client.create_table(create("abc")).await.unwrap();
    client.create_table(create(&longest)).await.unwrap();
    for bad in [
        "ab",
        "1abc",
        "my_table",
        "with-dash",
        "",
        &format!("{longest}c"),
        "tables",
        "Tables",
    ] {
        let status = assert_error(
            client.create_table(create(bad)).await,
            Code::InvalidArgument,
            "OutOfRangeInput",
        );
        assert!(
            status.message().contains(&format!("'{bad}'")),
            "{}",
            status.message()
        );
    }
    assert_eq!(
        client
            .list_tables(list("", 0, ""))
            .await
            .unwrap()
            .into_inner()
            .tables
            .len(),
        2
    );
}

#[tokio::test]
async fn missing_tables_are_not_found() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let status = assert_error(
        client
            .delete_table(pb::DeleteTableRequest {
                table: "Nope".into(),
            })
            .await,
        Code::NotFound,
        "TableNotFound",
    );
    assert!(status.message().contains("Nope"));
    assert_error(
        client
            .insert_entity(insert_request("Nope", entity("p", "r", &[])))
            .await,
        Code::NotFound,
        "TableNotFound",
    );
    assert_error(
        client.get_entity(get_request("bad_name", "p", "r")).await,
        Code::NotFound,
        "TableNotFound",
    );
}

#[tokio::test]
async fn list_tables_pages_with_tokens_and_filters_by_prefix() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    for i in 0..25 {
        client
            .create_table(create(&format!("Log{i:02}")))
            .await
            .unwrap();
    }
    client.create_table(create("Other")).await.unwrap();
    let (mut names, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let page = client
            .list_tables(list("log", 10, &token))
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        names.extend(page.tables.into_iter().map(|t| t.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(pages, 3);
    assert_eq!(
        names,
        (0..25).map(|i| format!("Log{i:02}")).collect::<Vec<_>>()
    );

    assert_error(
        client.list_tables(list("", 1001, "")).await,
        Code::InvalidArgument,
        "OutOfRangeInput",
    );
    assert_error(
        client.list_tables(list("", 0, "garbage!")).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
}

#[tokio::test]
async fn deleting_a_large_table_makes_it_disappear_at_once() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table("Big").await;
    fill_partition(&mut client, "Big", "p", 2000).await;
    client
        .delete_table(pb::DeleteTableRequest {
            table: "Big".into(),
        })
        .await
        .unwrap();
    let query = pb::QueryEntitiesRequest {
        table: "Big".into(),
        ..Default::default()
    };
    assert_error(
        client.query_entities(query).await,
        Code::NotFound,
        "TableNotFound",
    );
    assert!(client
        .list_tables(list("", 0, ""))
        .await
        .unwrap()
        .into_inner()
        .tables
        .is_empty());

    // Once reclaimed, the name is free again and the new table starts empty.
    let recreated = create_when_reclaimed(&mut client, "Big").await;
    assert_eq!(recreated.name, "Big");
    let query = pb::QueryEntitiesRequest {
        table: "Big".into(),
        ..Default::default()
    };
    assert!(client
        .query_entities(query)
        .await
        .unwrap()
        .into_inner()
        .entities
        .is_empty());
}

#[tokio::test]
async fn creating_a_table_while_its_namesake_is_reclaimed_is_table_being_deleted() {
    // Reclamation paused, so the deleted table stays "being deleted" for the whole test.
    let server =
        TestServer::start_with(|config| config.store.set_reclaim_deleted_tables(false)).await;
    let mut client = server.client_with_table("Events").await;
    client
        .insert_entity(insert_request("Events", entity("p", "r", &[])))
        .await
        .unwrap();
    client
        .delete_table(pb::DeleteTableRequest {
            table: "Events".into(),
        })
        .await
        .unwrap();
    let status = assert_error(
        client.create_table(create("events")).await,
        Code::AlreadyExists,
        "TableBeingDeleted",
    );
    assert!(
        status.message().contains("being deleted"),
        "{}",
        status.message()
    );
    assert_error(
        client.get_entity(get_request("Events", "p", "r")).await,
        Code::NotFound,
        "TableNotFound",
    );
    client.create_table(create("Other")).await.unwrap();
}

fn policy(id: &str, permissions: &str, expiry_seconds: i64) -> pb::AccessPolicy {
    pb::AccessPolicy {
        id: id.into(),
        start: None,
        expiry: Some(prost_types::Timestamp {
            seconds: expiry_seconds,
            nanos: 0,
        }),
        permissions: permissions.into(),
    }
}

#[tokio::test]
async fn stored_access_policies_are_kept_checked_and_forgotten_with_their_table() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table("Acl").await;
    let set = |policies: Vec<pb::AccessPolicy>| pb::SetTableAccessPoliciesRequest {
        table: "acl".into(),
        access_policies: policies,
    };
    let kept = client
        .set_table_access_policies(set(vec![
            policy("readers", "r", 4_000_000_000),
            policy("writers", "dua", 4_000_000_000),
        ]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(kept.access_policies[1].permissions, "aud");
    let described = |client: &mut RawClient| {
        let mut client = client.clone();
        async move {
            client
                .get_table(pb::GetTableRequest {
                    table: "Acl".into(),
                })
                .await
                .unwrap()
                .into_inner()
                .access_policies
        }
    };
    assert_eq!(described(&mut client).await, kept.access_policies);
    let six: Vec<_> = (0..6)
        .map(|n| policy(&format!("p{n}"), "r", 4_000_000_000))
        .collect();
    for bad in [
        six,
        vec![
            policy("twice", "r", 4_000_000_000),
            policy("twice", "a", 4_000_000_000),
        ],
        vec![policy("write", "w", 4_000_000_000)],
        vec![policy(&"x".repeat(65), "r", 4_000_000_000)],
    ] {
        assert_error(
            client.set_table_access_policies(set(bad)).await,
            Code::InvalidArgument,
            "InvalidInput",
        );
    }
    assert_eq!(
        described(&mut client).await,
        kept.access_policies,
        "a refusal changes nothing"
    );
    assert_error(
        client
            .set_table_access_policies(pb::SetTableAccessPoliciesRequest {
                table: "Missing".into(),
                access_policies: vec![],
            })
            .await,
        Code::NotFound,
        "TableNotFound",
    );
    client
        .delete_table(pb::DeleteTableRequest {
            table: "Acl".into(),
        })
        .await
        .unwrap();
    loop {
        match client.create_table(create("Acl")).await {
            Ok(_) => break,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
    assert!(
        described(&mut client).await.is_empty(),
        "a new table starts with none"
    );
    client.set_table_access_policies(set(vec![])).await.unwrap();
}
