//! Declared secondary indexes end to end, on either store: a model-based test of every write path
//! against three indexes; queries in index order with ranges from the filter, reverse and
//! continuation; unique indexes under racing inserts; builds over a populated table while writes
//! go on; drops; and every refusal with its reason.

mod common;

#[path = "common/index_model.rs"]
mod index_model;

use common::{assert_error, entity, int32, int64, reason, string, RawClient, TestServer};
use index_model::{Model, ModelClient, Rng};
use tonic::Code;
use trestle_proto::pb;

const T: &str = "People";

fn definition(
    name: &str,
    properties: &[&str],
    scope: pb::IndexScope,
    unique: bool,
) -> pb::IndexDefinition {
    pb::IndexDefinition {
        name: name.into(),
        properties: properties.iter().map(|p| p.to_string()).collect(),
        scope: scope as i32,
        unique,
    }
}

async fn model_client(server: &TestServer) -> ModelClient {
    ModelClient::connect(server.endpoint()).await.unwrap()
}

async fn create_with(client: &mut RawClient, indexes: Vec<pb::IndexDefinition>) -> pb::Table {
    client
        .create_table(pb::CreateTableRequest {
            table: T.into(),
            indexes,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn insert(client: &mut RawClient, entity: pb::Entity) -> Result<pb::Entity, tonic::Status> {
    client
        .insert_entity(common::insert_request(T, entity))
        .await
        .map(|r| r.into_inner())
}

fn index_query(index: &str, filter: &str) -> pb::QueryEntitiesRequest {
    pb::QueryEntitiesRequest {
        table: T.into(),
        index: index.into(),
        filter: filter.into(),
        ..Default::default()
    }
}

fn row_keys(entities: &[pb::Entity]) -> Vec<String> {
    entities.iter().map(|e| e.row_key.clone()).collect()
}

async fn state_of(client: &mut RawClient, index: &str) -> pb::Index {
    let table = client
        .get_table(pb::GetTableRequest { table: T.into() })
        .await
        .unwrap()
        .into_inner();
    table
        .indexes
        .into_iter()
        .find(|i| i.definition.as_ref().unwrap().name == index)
        .expect("the index is listed")
}

/// Waits until `index` leaves BUILDING; returns its state.
async fn built(client: &mut RawClient, index: &str) -> pb::Index {
    for _ in 0..600 {
        let index = state_of(client, index).await;
        if index.state != pb::IndexState::Building as i32 {
            return index;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("index {index} still building after 30 s");
}

#[tokio::test]
async fn random_writes_keep_every_index_equal_to_the_one_recomputed_from_the_entities() {
    let server = TestServer::start().await;
    let mut client = model_client(&server).await;
    client.create_table(Model::create_request()).await.unwrap();
    let mut model = Model::default();
    let mut rng = Rng::new(0x5eed_1dea);
    for _ in 0..200 {
        model.step(&mut client, &mut rng).await;
        model.check(&mut client).await;
    }
    assert!(
        model.entities.len() > 3,
        "the run reached a populated table"
    );
}

#[tokio::test]
async fn queries_come_in_index_order_with_ranges_from_the_filter() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let table = create_with(
        &mut client,
        vec![
            definition("ByName", &["Last", "First"], pb::IndexScope::Table, false),
            definition("ByAge", &["Age"], pb::IndexScope::Partition, false),
        ],
    )
    .await;
    assert_eq!(table.indexes.len(), 2);
    assert!(table
        .indexes
        .iter()
        .all(|i| i.state == pb::IndexState::Ready as i32));
    let people = [
        ("p1", "1", "Ng", "Zoe", 41),
        ("p2", "2", "Ng", "Al", 30),
        ("p1", "3", "Li", "Bo", 25),
        ("p2", "4", "Ng", "Al", 35),
        ("p1", "5", "Ngo", "Cy", 30),
    ];
    for (pk, rk, last, first, age) in people {
        let properties = [
            ("Last", string(last)),
            ("First", string(first)),
            ("Age", int32(age)),
        ];
        insert(&mut client, entity(pk, rk, &properties))
            .await
            .unwrap();
    }
    // No Last: not in ByName (sparse); an Int64 Age: another type, after every Int32.
    insert(
        &mut client,
        entity(
            "p1",
            "6",
            &[("First", string("Nobody")), ("Age", int64(20))],
        ),
    )
    .await
    .unwrap();

    let (all, _) = common::query_all(&mut client, index_query("ByName", "")).await;
    assert_eq!(row_keys(&all), ["3", "2", "4", "1", "5"]);

    let page = client
        .query_entities(index_query("ByName", "Last eq 'Ng'"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(row_keys(&page.entities), ["2", "4", "1"]);
    let stats = page.stats.unwrap();
    assert_eq!(stats.plan, "index:ByName");
    assert_eq!(
        stats.entities_examined, 3,
        "the range holds exactly the matches"
    );

    let bounded = index_query("ByName", "Last eq 'Ng' and First ge 'B' and First lt 'Zz'");
    let (found, _) = common::query_all(&mut client, bounded).await;
    assert_eq!(row_keys(&found), ["1"]);
    let prefix = index_query("ByName", "Last ge 'Ng' and Last lt 'Nh' and First ne 'Al'");
    let (found, _) = common::query_all(&mut client, prefix).await;
    assert_eq!(row_keys(&found), ["1", "5"]);

    let mut paged = index_query("ByName", "");
    paged.page_size = 2;
    paged.reverse = true;
    let (found, pages) = common::query_all(&mut client, paged).await;
    assert_eq!(row_keys(&found), ["5", "1", "4", "2", "3"]);
    assert_eq!(pages, [2, 2, 1]);

    let mut in_partition = index_query("ByAge", "Age ge 30");
    in_partition.partition_key = Some("p1".into());
    let (found, _) = common::query_all(&mut client, in_partition).await;
    assert_eq!(row_keys(&found), ["5", "1"]);
    let (found, _) = common::query_all(&mut client, index_query("ByAge", "")).await;
    assert_eq!(
        row_keys(&found),
        ["3", "5", "1", "6", "2", "4"],
        "by partition, then age"
    );
    let (found, _) = common::query_all(&mut client, index_query("ByAge", "Age gt 10L")).await;
    assert_eq!(
        row_keys(&found),
        ["6"],
        "an Int64 literal selects Int64 values"
    );

    // Counting and streaming take the index too.
    let count = client
        .count_entities(index_query("ByName", "Last eq 'Ng'"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(count.count, 3);
    let mut stream = client
        .scan_entities(index_query("ByName", "Last eq 'Ng'"))
        .await
        .unwrap()
        .into_inner();
    let mut streamed = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        streamed.extend(batch.entities);
    }
    assert_eq!(row_keys(&streamed), ["2", "4", "1"]);
}

#[tokio::test]
async fn a_unique_index_admits_one_of_racing_inserts() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    create_with(
        &mut client,
        vec![definition(
            "ByEmail",
            &["Email"],
            pb::IndexScope::Table,
            true,
        )],
    )
    .await;
    for round in 0..5 {
        let email = format!("ada{round}@example.com");
        let racers = (0..16).map(|n| {
            let mut client = client.clone();
            let email = email.clone();
            tokio::spawn(async move {
                let entity = entity(
                    &format!("p{n}"),
                    &format!("r{round}"),
                    &[("Email", string(&email))],
                );
                insert(&mut client, entity).await
            })
        });
        let mut winners = 0;
        for racer in futures_util::future::join_all(racers).await {
            match racer.unwrap() {
                Ok(_) => winners += 1,
                Err(status) => {
                    assert_eq!(status.code(), Code::AlreadyExists);
                    assert_eq!(reason(&status), "IndexValueAlreadyExists");
                    assert!(status.message().contains("ByEmail"), "{}", status.message());
                    // The holder need not be the caller's to see: its keys are never named.
                    assert!(
                        !status.message().contains("PartitionKey"),
                        "{}",
                        status.message()
                    );
                }
            }
        }
        assert_eq!(winners, 1, "round {round}");
        let (found, _) = common::query_all(
            &mut client,
            index_query("ByEmail", &format!("Email eq '{email}'")),
        )
        .await;
        assert_eq!(found.len(), 1);
    }
    // A refused write changes nothing; moving a value frees it for another entity.
    let first = insert(&mut client, entity("q", "1", &[("Email", string("x@y"))]))
        .await
        .unwrap();
    let refused = insert(&mut client, entity("q", "2", &[("Email", string("x@y"))])).await;
    assert_error(refused, Code::AlreadyExists, "IndexValueAlreadyExists");
    let gone = client.get_entity(common::get_request(T, "q", "2")).await;
    assert_error(gone, Code::NotFound, "ResourceNotFound");
    client
        .update_entity(pb::UpdateEntityRequest {
            table: T.into(),
            entity: Some(entity("q", "1", &[("Email", string("z@y"))])),
            if_match: first.etag,
            ..Default::default()
        })
        .await
        .unwrap();
    insert(&mut client, entity("q", "2", &[("Email", string("x@y"))]))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_index_declared_on_a_populated_table_is_built_while_writes_go_on() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for partition in 0..6 {
        let pk = format!("p{partition}");
        for first in (0..600).step_by(100) {
            let operations = (first..first + 100)
                .map(|n| {
                    common::tx_insert(entity(&pk, &format!("{n:04}"), &[("Rank", int32(n % 97))]))
                })
                .collect();
            client
                .submit_transaction(common::transaction(T, &pk, operations))
                .await
                .unwrap();
        }
    }
    let declared = client
        .create_index(pb::CreateIndexRequest {
            table: T.into(),
            index: Some(definition(
                "ByRank",
                &["Rank"],
                pb::IndexScope::Table,
                false,
            )),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(declared.state, pb::IndexState::Building as i32);
    // Writes go on during the build: new ranks, removals, deletions, new entities.
    let writer = {
        let mut client = client.clone();
        tokio::spawn(async move {
            for n in 0..300 {
                let pk = format!("p{}", n % 6);
                let rk = format!("{:04}", (n * 7) % 600);
                let request = pb::MergeEntityRequest {
                    table: T.into(),
                    entity: Some(entity(&pk, &rk, &[("Rank", int32(1000 + n))])),
                    if_match: "*".into(),
                    ..Default::default()
                };
                client.merge_entity(request).await.unwrap();
                if n % 10 == 0 {
                    let delete = pb::DeleteEntityRequest {
                        idempotency_key: String::new(),
                        table: T.into(),
                        partition_key: pk.clone(),
                        row_key: format!("{:04}", (n * 13 + 1) % 600),
                        if_match: "*".into(),
                    };
                    let _ = client.delete_entity(delete).await;
                    let fresh = entity(&pk, &format!("new{n}"), &[("Rank", int32(-n))]);
                    insert(&mut client, fresh).await.unwrap();
                }
            }
        })
    };
    let early = client.query_entities(index_query("ByRank", "")).await;
    if let Err(status) = early {
        assert_eq!(reason(&status), "IndexNotReady");
        assert_eq!(status.code(), Code::FailedPrecondition);
    }
    writer.await.unwrap();
    let index = built(&mut client, "ByRank").await;
    assert_eq!(index.state, pb::IndexState::Ready as i32, "{index:?}");

    let (everything, _) = common::query_all(
        &mut client,
        pb::QueryEntitiesRequest {
            table: T.into(),
            ..Default::default()
        },
    )
    .await;
    let mut expected: Vec<(i32, String, String)> = everything
        .iter()
        .map(|e| match e.properties["Rank"].kind {
            Some(pb::value::Kind::Int32Value(rank)) => {
                (rank, e.partition_key.clone(), e.row_key.clone())
            }
            _ => unreachable!(),
        })
        .collect();
    expected.sort();
    let (indexed, _) = common::query_all(&mut client, index_query("ByRank", "")).await;
    let indexed: Vec<(String, String)> = common::keys(&indexed);
    let expected: Vec<(String, String)> =
        expected.into_iter().map(|(_, pk, rk)| (pk, rk)).collect();
    assert_eq!(indexed, expected);
}

#[tokio::test]
async fn a_unique_build_over_duplicates_fails_and_drops_free_the_name() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    for (rk, email) in [("1", "a@x"), ("2", "b@x"), ("3", "a@x")] {
        insert(&mut client, entity("p", rk, &[("Email", string(email))]))
            .await
            .unwrap();
    }
    let unique = definition("ByEmail", &["Email"], pb::IndexScope::Table, true);
    client
        .create_index(pb::CreateIndexRequest {
            table: T.into(),
            index: Some(unique.clone()),
        })
        .await
        .unwrap();
    let failed = built(&mut client, "ByEmail").await;
    assert_eq!(failed.state, pb::IndexState::Failed as i32);
    assert!(failed.failure.contains("same values"), "{}", failed.failure);
    let query = client.query_entities(index_query("ByEmail", "")).await;
    assert_error(query, Code::FailedPrecondition, "IndexNotReady");

    client
        .drop_index(pb::DropIndexRequest {
            table: T.into(),
            index: "byemail".into(),
        })
        .await
        .unwrap();
    let query = client.query_entities(index_query("ByEmail", "")).await;
    assert_error(query, Code::NotFound, "IndexNotFound");
    client
        .delete_entity(pb::DeleteEntityRequest {
            idempotency_key: String::new(),
            table: T.into(),
            partition_key: "p".into(),
            row_key: "3".into(),
            if_match: "*".into(),
        })
        .await
        .unwrap();
    client
        .create_index(pb::CreateIndexRequest {
            table: T.into(),
            index: Some(unique),
        })
        .await
        .unwrap();
    assert_eq!(
        built(&mut client, "ByEmail").await.state,
        pb::IndexState::Ready as i32
    );
    let (found, _) = common::query_all(&mut client, index_query("ByEmail", "")).await;
    assert_eq!(row_keys(&found), ["1", "2"]);

    // A deleted table's indexes go with it.
    client
        .delete_table(pb::DeleteTableRequest { table: T.into() })
        .await
        .unwrap();
    common::create_when_reclaimed(&mut client, T).await;
    let query = client.query_entities(index_query("ByEmail", "")).await;
    assert_error(query, Code::NotFound, "IndexNotFound");
}

#[tokio::test]
async fn bad_definitions_and_queries_are_refused_with_their_reasons() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let bad = [
        definition("", &["A"], pb::IndexScope::Table, false),
        definition("9Lives", &["A"], pb::IndexScope::Table, false),
        definition("ByNothing", &[], pb::IndexScope::Table, false),
        definition(
            "ByTooMany",
            &["A", "B", "C", "D", "E"],
            pb::IndexScope::Table,
            false,
        ),
        definition("Twice", &["A", "A"], pb::IndexScope::Table, false),
        definition("ByKey", &["RowKey"], pb::IndexScope::Table, false),
        pb::IndexDefinition {
            scope: 7,
            ..definition("BadScope", &["A"], pb::IndexScope::Table, false)
        },
    ];
    for definition in bad {
        let refused = client
            .create_table(pb::CreateTableRequest {
                table: T.into(),
                indexes: vec![definition.clone()],
                ..Default::default()
            })
            .await;
        assert_eq!(
            refused.unwrap_err().code(),
            Code::InvalidArgument,
            "{definition:?}"
        );
    }
    let twice = vec![
        definition("ByA", &["A"], pb::IndexScope::Table, false),
        definition("bya", &["B"], pb::IndexScope::Table, false),
    ];
    let refused = client
        .create_table(pb::CreateTableRequest {
            table: T.into(),
            indexes: twice,
            ..Default::default()
        })
        .await;
    assert_error(refused, Code::AlreadyExists, "IndexAlreadyExists");
    let table = client
        .get_table(pb::GetTableRequest { table: T.into() })
        .await;
    assert_error(table, Code::NotFound, "TableNotFound");

    let nine = (0..9)
        .map(|n| definition(&format!("I{n}"), &["A"], pb::IndexScope::Table, false))
        .collect::<Vec<_>>();
    let refused = client
        .create_table(pb::CreateTableRequest {
            table: T.into(),
            indexes: nine.clone(),
            ..Default::default()
        })
        .await;
    assert_error(refused, Code::ResourceExhausted, "TooManyIndexes");
    create_with(&mut client, nine[..8].to_vec()).await;
    let create = |definition| pb::CreateIndexRequest {
        table: T.into(),
        index: Some(definition),
    };
    let refused = client.create_index(create(nine[8].clone())).await;
    assert_error(refused, Code::ResourceExhausted, "TooManyIndexes");
    let refused = client.create_index(create(nine[0].clone())).await;
    assert_error(refused, Code::AlreadyExists, "IndexAlreadyExists");
    let refused = client
        .drop_index(pb::DropIndexRequest {
            table: T.into(),
            index: "Missing".into(),
        })
        .await;
    assert_error(refused, Code::NotFound, "IndexNotFound");

    let refused = client.query_entities(index_query("Missing", "")).await;
    assert_error(refused, Code::NotFound, "IndexNotFound");
    let mut with_rows = index_query("I0", "");
    with_rows.partition_key = Some("p".into());
    with_rows.row_key_prefix = "r".into();
    let refused = client.query_entities(with_rows).await;
    assert_error(refused, Code::InvalidArgument, "InvalidInput");
    // A token of one index query does not resume another.
    for n in 0..3 {
        insert(
            &mut client,
            entity("p", &format!("r{n}"), &[("A", int32(n))]),
        )
        .await
        .unwrap();
    }
    let mut paged = index_query("I0", "");
    paged.page_size = 1;
    let page = client
        .query_entities(paged.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(!page.continuation_token.is_empty());
    let mut other = index_query("I1", "");
    other.continuation_token = page.continuation_token;
    let refused = client.query_entities(other).await;
    assert_error(refused, Code::InvalidArgument, "InvalidInput");
}

#[tokio::test]
async fn the_sdk_declares_waits_for_queries_and_drops_indexes() {
    use trestle_client::{Filter, IndexDefinition, IndexScope, IndexState};

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Book {
        #[serde(rename = "Author")]
        author: String,
        #[serde(rename = "Year")]
        year: i32,
    }
    let server = TestServer::start().await;
    let books = server.sdk().await.table("Books");
    books
        .create_with_indexes([IndexDefinition::table("ByAuthor", ["Author", "Year"])])
        .await
        .unwrap();
    for (shelf, isbn, author, year) in [
        ("s1", "1", "Le Guin", 1969),
        ("s2", "2", "Le Guin", 1974),
        ("s1", "3", "Banks", 1987),
    ] {
        let book = Book {
            author: author.into(),
            year,
        };
        books.insert((shelf, isbn), &book).await.unwrap();
    }
    let by_year = books
        .create_index(IndexDefinition::partition("ByYear", ["Year"]))
        .await
        .unwrap();
    assert_eq!(by_year.definition.scope, IndexScope::Partition);
    let ready = books
        .wait_for_index("ByYear", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(ready.state, IndexState::Ready);
    assert_eq!(books.indexes().await.unwrap().len(), 2);

    let le_guin = books
        .query::<Book>()
        .index("ByAuthor")
        .filter(Filter::eq("Author", "Le Guin").and(Filter::ge("Year", 1970)))
        .all()
        .await
        .unwrap();
    assert_eq!(le_guin.len(), 1);
    assert_eq!(le_guin[0].value.year, 1974);
    let page = books
        .query::<Book>()
        .index("ByYear")
        .partition("s1")
        .page()
        .await
        .unwrap();
    assert_eq!(page.stats.plan, "index:ByYear");
    let years: Vec<i32> = page.items.iter().map(|b| b.value.year).collect();
    assert_eq!(years, [1969, 1987]);

    books.drop_index("ByYear").await.unwrap();
    let missing = books
        .query::<Book>()
        .index("ByYear")
        .page()
        .await
        .unwrap_err();
    assert_eq!(
        missing.code(),
        Some(trestle_client::ErrorCode::IndexNotFound)
    );
    let missing = books
        .wait_for_index("ByYear", std::time::Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(missing.is_not_found());
}

/// An array of `n` distinct strings.
fn books(n: usize) -> pb::Value {
    let values = (0..n).map(|i| string(&format!("book-{i:05}"))).collect();
    pb::Value {
        kind: Some(pb::value::Kind::ArrayValue(pb::ArrayValue { values })),
    }
}

/// A multi-valued index keeps at most 1,000 entries of one entity: a write that would need more
/// is refused with the reason and changes nothing, one at the bound is indexed, and a build over
/// an entity written past the bound before the index was declared ends FAILED, naming it.
#[tokio::test]
async fn an_entity_has_at_most_a_thousand_entries_in_a_multi_valued_index() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let by_book = definition("ByBook", &["Books/*"], pb::IndexScope::Table, false);
    create_with(&mut client, vec![by_book.clone()]).await;
    let status = assert_error(
        insert(&mut client, entity("p", "wide", &[("Books", books(9_999))])).await,
        Code::InvalidArgument,
        "InvalidInput",
    );
    assert!(status.message().contains("9999 entries"), "{status:?}");
    assert!(status.message().contains("at most 1000"), "{status:?}");
    let missing = client.get_entity(common::get_request(T, "p", "wide")).await;
    assert_error(missing, Code::NotFound, "ResourceNotFound");
    insert(&mut client, entity("p", "full", &[("Books", books(1_000))]))
        .await
        .unwrap();
    let found = client
        .query_entities(index_query("ByBook", "Books/any(b: b eq 'book-00999')"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(row_keys(&found.entities), ["full"]);

    // Written before the index existed: its build cannot index it.
    let mut later = server.client_with_table("Shelves").await;
    later
        .insert_entity(common::insert_request(
            "Shelves",
            entity("p", "wide", &[("Books", books(1_500))]),
        ))
        .await
        .unwrap();
    later
        .create_index(pb::CreateIndexRequest {
            table: "Shelves".into(),
            index: Some(by_book),
        })
        .await
        .unwrap();
    let table = loop {
        let table = later
            .get_table(pb::GetTableRequest {
                table: "Shelves".into(),
            })
            .await
            .unwrap()
            .into_inner();
        if table.indexes[0].state != pb::IndexState::Building as i32 {
            break table;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let index = &table.indexes[0];
    assert_eq!(index.state, pb::IndexState::Failed as i32, "{index:?}");
    assert!(index.failure.contains("1500 entries"), "{}", index.failure);
}

/// Writes that keep an index's most entries per entity (1,000 each) do not hold back another
/// table: point reads of an unrelated table go on meanwhile, each answered well within the
/// seconds such a write once held them (an upsert of 10,000 elements stalled them 4.2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wide_multi_valued_index_writes_do_not_stall_another_tables_reads() {
    let server = TestServer::start().await;
    let mut client = server.client().await;
    let by_book = definition("ByBook", &["Books/*"], pb::IndexScope::Table, false);
    create_with(&mut client, vec![by_book]).await;
    let mut other = server.client_with_table("Unrelated").await;
    other
        .insert_entity(common::insert_request(
            "Unrelated",
            entity("p", "r", &[("V", int32(1))]),
        ))
        .await
        .unwrap();

    let mut writers = Vec::new();
    for writer in 0..3 {
        let mut client = server.client().await;
        writers.push(tokio::spawn(async move {
            let start = std::time::Instant::now();
            let mut written = 0;
            while start.elapsed() < std::time::Duration::from_secs(3) {
                // Each upsert replaces the shelf's 1,000 entries with 1,000 others.
                let values = (0..1_000)
                    .map(|i| string(&format!("book-{written}-{i:04}")))
                    .collect();
                let shelf = pb::Value {
                    kind: Some(pb::value::Kind::ArrayValue(pb::ArrayValue { values })),
                };
                let request = pb::UpsertEntityRequest {
                    table: T.into(),
                    entity: Some(entity("p", &format!("shelf-{writer}"), &[("Books", shelf)])),
                    ..Default::default()
                };
                client.upsert_entity(request).await.unwrap();
                written += 1;
            }
            written
        }));
    }
    let mut slowest = std::time::Duration::ZERO;
    let mut reads = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(3) {
        let asked = std::time::Instant::now();
        other
            .get_entity(common::get_request("Unrelated", "p", "r"))
            .await
            .unwrap();
        slowest = slowest.max(asked.elapsed());
        reads += 1;
    }
    let mut written = 0;
    for writer in writers {
        written += writer.await.unwrap();
    }
    assert!(written >= 3, "the wide writes did not run ({written})");
    assert!(
        slowest < std::time::Duration::from_secs(1),
        "a read of another table waited {slowest:?} behind wide index writes \
         ({written} upserts, {reads} reads)"
    );
}
