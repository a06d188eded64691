//! Documents end to end: nested objects and arrays in an entity's properties, written and read
//! through the SDK's serde mapping and raw gRPC, every leaf type exact (point reads and scans,
//! which encode straight from the stored bytes); every limit refused with the path at fault and
//! nothing stored. The Azure SDKs' view of a document is in tests/azure_sdk.rs.

mod common;

use std::collections::BTreeMap;

use common::{assert_error, entity, get_request, insert_request, string, TestServer};
use serde::{Deserialize, Serialize};
use tonic::Code;
use trestle_client::{DateTime, Filter, IndexDefinition, Patch, Properties, Value};
use trestle_proto::pb;

const T: &str = "Documents";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Address {
    city: String,
    zip: String,
    since: Option<DateTime>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Holding {
    symbol: String,
    number_held: i64,
    ratio: f64,
    id: uuid::Uuid,
    receipt: Vec<u8>,
}

/// The Cosmos DB guide's person: embedded addresses, contact details of different shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Person {
    name: String,
    addresses: Vec<Address>,
    contact: BTreeMap<String, String>,
    holdings: Vec<Holding>,
    scores: Vec<Option<i32>>,
    nickname: Option<String>,
    tags: Vec<String>,
    empty: BTreeMap<String, i32>,
}

fn ada() -> Person {
    Person {
        name: "Ada".into(),
        addresses: vec![
            Address {
                city: "Seattle".into(),
                zip: "98101".into(),
                since: Some(DateTime::from_ticks(17_000_000_001_234_567)),
            },
            Address {
                city: "London".into(),
                zip: "N1".into(),
                since: None,
            },
        ],
        contact: [("email", "ada@example.com"), ("phone", "+44 20")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
        holdings: vec![Holding {
            symbol: "zaza".into(),
            number_held: (1 << 53) + 1,
            ratio: 1.0,
            id: uuid::Uuid::from_u128(0x0011_2233_4455_6677_8899_aabb_ccdd_eeff),
            receipt: vec![0, 1, 255],
        }],
        scores: vec![Some(3), None, Some(-1)],
        nickname: None,
        tags: Vec::new(),
        empty: BTreeMap::new(),
    }
}

#[tokio::test]
async fn nested_structs_vectors_options_and_maps_round_trip_exactly() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let table = client.table(T);
    table.create().await.unwrap();
    table.insert(("people", "ada"), &ada()).await.unwrap();

    let read = table.get::<Person>(("people", "ada")).await.unwrap();
    assert_eq!(read.value, ada());
    let scanned = table
        .query::<Person>()
        .partition("people")
        .all()
        .await
        .unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].value, ada());

    // Seen without the struct: the exact types, a path into the document, nulls in the array.
    let dynamic = table.get::<Properties>(("people", "ada")).await.unwrap();
    let properties = dynamic.value;
    assert_eq!(
        properties.get_path("Holdings/0/NumberHeld"),
        Some(&Value::Int64((1 << 53) + 1))
    );
    assert_eq!(
        properties.get_path("Holdings/0/Ratio"),
        Some(&Value::Double(1.0))
    );
    assert_eq!(
        properties.get_path("Holdings/0/Receipt"),
        Some(&Value::Binary(vec![0, 1, 255]))
    );
    assert!(matches!(
        properties.get_path("Holdings/0/Id"),
        Some(Value::Guid(_))
    ));
    assert_eq!(
        properties.get_path("Addresses/0/Since"),
        Some(&Value::DateTime(DateTime::from_ticks(
            17_000_000_001_234_567
        )))
    );
    assert_eq!(properties.get_path("Addresses/1/Since"), None);
    assert_eq!(properties.get_path("Scores/1"), Some(&Value::Null));
    assert_eq!(properties.get_path("Tags"), Some(&Value::Array(Vec::new())));
    assert_eq!(
        properties.get("Nickname"),
        None,
        "None is an absent property"
    );

    // Written back as it was read, the document is unchanged.
    table
        .update(("people", "ada"), &properties, &dynamic.etag)
        .await
        .unwrap();
    let again = table.get::<Person>(("people", "ada")).await.unwrap();
    assert_eq!(again.value, ada());
}

fn object(members: &[(&str, pb::Value)]) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::ObjectValue(pb::ObjectValue {
            members: members
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.clone()))
                .collect(),
        })),
    }
}

fn array(values: Vec<pb::Value>) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::ArrayValue(pb::ArrayValue { values })),
    }
}

fn null() -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::NullValue(0)),
    }
}

/// Inserting `value` as property `P` is refused with `code` and `reason`, the message names
/// `path`, and nothing is stored.
async fn refused(
    client: &mut common::RawClient,
    value: pb::Value,
    code: Code,
    reason: &str,
    path: &str,
) {
    let request = insert_request(T, entity("p", "bad", &[("P", value)]));
    let status = assert_error(client.insert_entity(request).await, code, reason);
    assert!(
        status.message().contains(&format!("'{path}'")),
        "{path}: {}",
        status.message()
    );
    assert_error(
        client.get_entity(get_request(T, "p", "bad")).await,
        Code::NotFound,
        "ResourceNotFound",
    );
}

#[tokio::test]
async fn every_document_limit_is_refused_with_its_path_and_nothing_is_stored() {
    let server = TestServer::start().await;
    let mut client = server.client_with_table(T).await;
    let bad = Code::InvalidArgument;

    // 33 levels: the path names the element whose value nests too deep. (Objects that deep may be
    // refused before the server reads them, by the message decoder's own bound: InvalidInput too.)
    let mut deep = string("leaf");
    for _ in 0..33 {
        deep = array(vec![deep]);
    }
    refused(&mut client, deep, bad, "InvalidInput", "P/0").await;
    let mut deep = string("leaf");
    for _ in 0..33 {
        deep = object(&[("a", deep)]);
    }
    let request = insert_request(T, entity("p", "bad", &[("P", deep)]));
    assert_error(client.insert_entity(request).await, bad, "InvalidInput");

    let long = string(&"x".repeat(32 * 1024 + 1));
    let addresses = array(vec![
        object(&[("Zip", string("1"))]),
        object(&[("Zip", long)]),
    ]);
    refused(
        &mut client,
        object(&[("Addresses", addresses)]),
        bad,
        "PropertyValueTooLarge",
        "P/Addresses/1/Zip",
    )
    .await;

    let early = pb::Value {
        kind: Some(pb::value::Kind::DatetimeValue(prost_types::Timestamp {
            seconds: -20_000_000_000,
            nanos: 0,
        })),
    };
    refused(
        &mut client,
        array(vec![null(), early]),
        bad,
        "OutOfRangeInput",
        "P/1",
    )
    .await;

    let guid = pb::Value {
        kind: Some(pb::value::Kind::GuidValue("not-a-guid".into())),
    };
    refused(
        &mut client,
        object(&[("Id", guid)]),
        bad,
        "InvalidInput",
        "P/Id",
    )
    .await;
    refused(
        &mut client,
        object(&[("a/b", null())]),
        bad,
        "InvalidInput",
        "P/a/b",
    )
    .await;
    refused(
        &mut client,
        object(&[("", null())]),
        bad,
        "InvalidInput",
        "P",
    )
    .await;
    refused(
        &mut client,
        array(vec![pb::Value { kind: None }]),
        bad,
        "PropertiesNeedValue",
        "P/0",
    )
    .await;
    refused(&mut client, null(), bad, "PropertiesNeedValue", "P").await;
    let many = array(vec![null(); 10_000]);
    refused(&mut client, many, bad, "InvalidInput", "P/9999").await;

    // The entity's 1 MiB holds with documents, strings counted as UTF-16: 18 arrays of two
    // 15 KiB strings are over it.
    let chunk = string(&"y".repeat(15 * 1024));
    let big = array(vec![chunk; 2]);
    let properties: Vec<(String, pb::Value)> =
        (0..18).map(|i| (format!("Big{i}"), big.clone())).collect();
    let borrowed: Vec<(&str, pb::Value)> = properties
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    let request = insert_request(T, entity("p", "bad", &borrowed));
    assert_error(
        client.insert_entity(request).await,
        Code::ResourceExhausted,
        "EntityTooLarge",
    );

    // At the limits: 32 levels and 10,000 values are stored.
    let mut deepest = string("leaf");
    for _ in 0..32 {
        deepest = object(&[("a", deepest)]);
    }
    let most = array(vec![null(); 9_999]);
    let fits = entity("p", "fits", &[("Deep", deepest), ("Many", most)]);
    client
        .insert_entity(insert_request(T, fits.clone()))
        .await
        .unwrap();
    let stored = client
        .get_entity(get_request(T, "p", "fits"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stored.properties, fits.properties);
}

#[tokio::test]
async fn a_merge_replaces_a_document_whole_and_a_filter_never_matches_one_as_a_scalar() {
    let server = TestServer::start().await;
    let table = server.sdk().await.table(T);
    table.create().await.unwrap();
    let first = Properties::new().with(
        "Address",
        Value::Object([("City".to_owned(), Value::from("Seattle"))].into()),
    );
    let written = table.insert(("p", "r"), &first).await.unwrap();
    let second = Properties::new().with(
        "Address",
        Value::Object([("Zip".to_owned(), Value::from("98101"))].into()),
    );
    table.merge(("p", "r"), &second, &written).await.unwrap();
    let merged = table.get::<Properties>(("p", "r")).await.unwrap().value;
    assert_eq!(merged.get_path("Address/City"), None);
    assert_eq!(merged.get_path("Address/Zip"), Some(&Value::from("98101")));
    let matches = table
        .entities()
        .filter(trestle_client::Filter::raw("Address eq 'Seattle'"))
        .all()
        .await
        .unwrap();
    assert!(matches.is_empty());
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Comment {
    author: String,
    text: String,
}

#[tokio::test]
async fn patch_steps_change_values_at_paths_and_refusals_change_nothing() {
    let server = TestServer::start().await;
    let table = server.sdk().await.table(T);
    table.create().await.unwrap();
    table.insert(("people", "ada"), &ada()).await.unwrap();
    let patch = Patch::new()
        .set("Addresses/1/City", "Cambridge")
        .set("Contact/fax", "none")
        .increment("Holdings/0/NumberHeld", 10i64)
        .set("Stats/Visits/Today", 1)
        .remove("Addresses/0/Since")
        .add_to_set("Tags", "poet")
        .add_to_set("Tags", "poet")
        .add_to_set("Tags", "maths")
        .remove_value("Tags", "maths")
        .append(
            "Addresses",
            &Address {
                city: "Paris".into(),
                zip: "75001".into(),
                since: None,
            },
        );
    let patched = table
        .patch::<Properties>(("people", "ada"), &patch)
        .await
        .unwrap();
    let value = &patched.value;
    assert_eq!(
        value.get_path("Addresses/1/City"),
        Some(&Value::from("Cambridge"))
    );
    assert_eq!(
        value.get_path("Addresses/2/City"),
        Some(&Value::from("Paris"))
    );
    assert_eq!(value.get_path("Addresses/0/Since"), None);
    assert_eq!(value.get_path("Contact/fax"), Some(&Value::from("none")));
    assert_eq!(
        value.get_path("Holdings/0/NumberHeld"),
        Some(&Value::Int64((1 << 53) + 11))
    );
    assert_eq!(value.get_path("Stats/Visits/Today"), Some(&Value::Int32(1)));
    assert_eq!(
        value.get_path("Tags"),
        Some(&Value::Array(vec!["poet".into()]))
    );
    let stored = table.get::<Properties>(("people", "ada")).await.unwrap();
    assert_eq!(stored.value, patched.value);

    for (refused, expected) in [
        (
            Patch::new().set("Name/First", "A"),
            "runs through 'Name', which is String",
        ),
        (
            Patch::new().set("Addresses/7/City", "x"),
            "array of 3 elements, and '7'",
        ),
        (
            Patch::new().increment("Addresses/0/City", 1),
            "'Addresses/0/City' is String",
        ),
        (Patch::new().append("Name", "x"), "need an array"),
        // The first step would apply; the second refuses the whole patch.
        (
            Patch::new()
                .set("Contact/fax", "changed")
                .set("Tags/x", "y"),
            "'x' is not an index",
        ),
    ] {
        let error = table
            .patch::<Properties>(("people", "ada"), &refused)
            .await
            .unwrap_err();
        assert_eq!(error.reason(), Some("InvalidInput"), "{error}");
        assert!(error.message().contains(expected), "{expected}: {error}");
    }
    let after = table.get::<Properties>(("people", "ada")).await.unwrap();
    assert_eq!(after.etag, stored.etag, "nothing changed");
}

#[tokio::test]
async fn a_post_keeps_its_three_most_recent_comments_in_the_comment_transaction() {
    let server = TestServer::start().await;
    let table = server.sdk().await.table(T);
    table.create().await.unwrap();
    table
        .insert(
            ("post-1", "post"),
            &Properties::new().with("Title", "Hello"),
        )
        .await
        .unwrap();
    for n in 0..5 {
        let comment = Comment {
            author: format!("reader-{n}"),
            text: format!("comment {n}"),
        };
        let mut transaction = table.transaction("post-1");
        transaction
            .insert(format!("comment-{n}"), &comment)
            .unwrap();
        transaction
            .patch(
                "post",
                &Patch::new()
                    .append("RecentComments", &comment)
                    .keep_last(3)
                    .increment("CommentCount", 1),
            )
            .unwrap();
        transaction.commit().await.unwrap();
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Post {
        recent_comments: Vec<Comment>,
        comment_count: i32,
    }
    let post = table.get::<Post>(("post-1", "post")).await.unwrap().value;
    assert_eq!(post.comment_count, 5);
    let authors: Vec<&str> = post
        .recent_comments
        .iter()
        .map(|c| c.author.as_str())
        .collect();
    assert_eq!(authors, ["reader-2", "reader-3", "reader-4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_to_one_array_are_all_kept() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let table = client.table(T);
    table.create().await.unwrap();
    let writers = (0..32).map(|n| {
        let table = client.table(T);
        tokio::spawn(async move {
            let patch = Patch::new().append("Log", &n).upsert();
            table
                .patch::<Properties>(("p", "log"), &patch)
                .await
                .unwrap();
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap();
    }
    let log = table.get::<Properties>(("p", "log")).await.unwrap().value;
    let Some(Value::Array(entries)) = log.get("Log") else {
        panic!("{log:?}");
    };
    let mut seen: Vec<i32> = entries
        .iter()
        .map(|v| match v {
            Value::Int32(n) => *n,
            other => panic!("{other:?}"),
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..32).collect::<Vec<_>>());
}

#[tokio::test]
async fn paths_and_lambdas_filter_queries_over_grpc_and_rest() {
    let (server, rest) = common::rest::server(|_| {}).await;
    let table = server.sdk().await.table(T);
    table.create().await.unwrap();
    table.insert(("people", "ada"), &ada()).await.unwrap();
    let mut grace = ada();
    grace.name = "Grace".into();
    grace.addresses[0].city = "Arlington".into();
    grace.holdings[0].number_held = 5;
    table.insert(("people", "grace"), &grace).await.unwrap();

    let names = |entities: Vec<trestle_client::Entity<Person>>| {
        entities
            .into_iter()
            .map(|e| e.value.name)
            .collect::<Vec<_>>()
    };
    let seattle = Filter::path("Addresses").any("a", Filter::path("a/City").eq("Seattle"));
    let found = table.query::<Person>().filter(seattle).all().await.unwrap();
    assert_eq!(names(found), ["Ada"]);
    let big = Filter::path("h/Symbol")
        .eq("zaza")
        .and(Filter::path("h/NumberHeld").gt(50i64));
    let holders = Filter::path("Holdings").any("h", big);
    let found = table.query::<Person>().filter(holders).all().await.unwrap();
    assert_eq!(names(found), ["Ada"]);
    let email = Filter::path("Contact/email").eq("ada@example.com");
    let found = table.query::<Person>().filter(email).all().await.unwrap();
    assert_eq!(names(found), ["Ada", "Grace"]);

    let mut socket = tokio::net::TcpStream::connect(rest).await.unwrap();
    let path = format!(
        "/devstoreaccount1/{T}()?$filter={}",
        "Addresses/any(a:%20a/City%20eq%20'Arlington')"
    );
    let (status, answer) = common::rest::exchange(&mut socket, "GET", &path, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""Name":"Grace""#), "{answer}");
    assert!(!answer.contains(r#""Name":"Ada""#), "{answer}");
}

#[tokio::test]
async fn path_and_array_indexes_answer_lookups_and_follow_patches() {
    let server = TestServer::start().await;
    let client = server.sdk().await;
    let people = client.table("People");
    people
        .create_with_indexes([
            IndexDefinition::table("ByCity", ["Addresses/*/City"]),
            IndexDefinition::table("ByEmail", ["Contact/email"]).unique(),
        ])
        .await
        .unwrap();
    people.insert(("people", "ada"), &ada()).await.unwrap();
    let mut grace = ada();
    grace.name = "Grace".into();
    grace.addresses[1].city = "Seattle".into();
    grace
        .contact
        .insert("email".into(), "grace@example.com".into());
    people.insert(("people", "grace"), &grace).await.unwrap();

    // Which people live in Seattle: an index lookup, each person once (Grace has two addresses
    // there).
    let seattle = Filter::path("Addresses").any("a", Filter::path("a/City").eq("Seattle"));
    let page = people
        .query::<Person>()
        .index("ByCity")
        .filter(seattle)
        .page()
        .await
        .unwrap();
    assert_eq!(page.stats.plan, "index:ByCity");
    let names: Vec<&str> = page.items.iter().map(|e| e.value.name.as_str()).collect();
    assert_eq!(names, ["Ada", "Grace"]);
    let london = Filter::path("Addresses").any("a", Filter::path("a/City").eq("London"));
    let found = people
        .query::<Person>()
        .index("ByCity")
        .filter(london)
        .all()
        .await
        .unwrap();
    assert_eq!(found.len(), 1);

    // A multi-valued index answers only lookups that fix its array's value.
    let unpinned = Filter::path("Addresses").any("a", Filter::path("a/City").ge("A"));
    let error = people
        .query::<Person>()
        .index("ByCity")
        .filter(unpinned)
        .page()
        .await
        .unwrap_err();
    assert_eq!(error.reason(), Some("InvalidInput"), "{error}");
    assert!(error.message().contains("multi-valued"), "{error}");

    // Unique at a path: a second person with Ada's email is refused.
    let mut copy = ada();
    copy.name = "Copy".into();
    let taken = people.insert(("people", "copy"), &copy).await.unwrap_err();
    assert_eq!(taken.reason(), Some("IndexValueAlreadyExists"), "{taken}");
    // Unique and multi-valued cannot be declared.
    let refused = people
        .create_index(IndexDefinition::table("Bad", ["Tags/*"]).unique())
        .await
        .unwrap_err();
    assert!(
        refused.message().contains("unique and multi-valued"),
        "{refused}"
    );

    // Authors and books, linked by arrays of ids on both sides: "authors of b1" is an index
    // lookup, built in the background over existing authors, then kept by patches.
    let authors = client.table("Authors");
    authors.create().await.unwrap();
    for (author, books) in [("a1", vec!["b1", "b2"]), ("a2", vec!["b2"]), ("a3", vec![])] {
        let books: Vec<Value> = books.into_iter().map(Value::from).collect();
        let properties = Properties::new().with("Books", Value::Array(books));
        authors
            .insert(("authors", author), &properties)
            .await
            .unwrap();
    }
    authors
        .create_index(IndexDefinition::table("ByBook", ["Books/*"]))
        .await
        .unwrap();
    authors
        .wait_for_index("ByBook", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    let authors_of = |book: &str| {
        let filter = Filter::path("Books").any("b", Filter::path("b").eq(book));
        let query = authors.query::<Properties>().index("ByBook").filter(filter);
        async move {
            let found = query.all().await.unwrap();
            found.into_iter().map(|e| e.key.row_key).collect::<Vec<_>>()
        }
    };
    assert_eq!(authors_of("b1").await, ["a1"]);
    assert_eq!(authors_of("b2").await, ["a1", "a2"]);
    authors
        .patch::<Properties>(("authors", "a3"), &Patch::new().add_to_set("Books", "b1"))
        .await
        .unwrap();
    authors
        .patch::<Properties>(("authors", "a1"), &Patch::new().remove_value("Books", "b1"))
        .await
        .unwrap();
    assert_eq!(authors_of("b1").await, ["a3"]);
    assert_eq!(authors_of("b2").await, ["a1", "a2"]);
}

#[tokio::test]
async fn select_of_paths_returns_only_those_parts_over_grpc_and_rest() {
    let (server, rest) = common::rest::server(|_| {}).await;
    let table = server.sdk().await.table(T);
    table.create().await.unwrap();
    table.insert(("people", "ada"), &ada()).await.unwrap();
    let select = [
        "Name",
        "Addresses/City",
        "Contact/email",
        "Holdings/Missing",
    ];
    let found = table
        .query::<Properties>()
        .select(select)
        .all()
        .await
        .unwrap();
    let shown = &found[0].value;
    let names: Vec<&String> = shown.0.keys().collect();
    assert_eq!(
        names,
        ["Addresses", "Contact", "Name"],
        "Holdings: no path reached a value"
    );
    let cities = Value::Array(
        ["Seattle", "London"]
            .map(|city| Value::Object([("City".to_owned(), Value::from(city))].into()))
            .to_vec(),
    );
    assert_eq!(shown.get("Addresses"), Some(&cities));
    assert_eq!(
        shown.get("Contact"),
        Some(&Value::Object(
            [("email".to_owned(), Value::from("ada@example.com"))].into()
        ))
    );
    let mut raw = server.client().await;
    let mut request = get_request(T, "people", "ada");
    request.select = select.map(str::to_owned).to_vec();
    let point = raw.get_entity(request).await.unwrap().into_inner();
    let names: Vec<&String> = point.properties.keys().collect();
    assert_eq!(
        names,
        ["Addresses", "Contact", "Name"],
        "a point read selects the same"
    );

    let mut socket = tokio::net::TcpStream::connect(rest).await.unwrap();
    let path = format!("/devstoreaccount1/{T}()?$select=Name,Addresses/City");
    let (status, answer) = common::rest::exchange(&mut socket, "GET", &path, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.contains(r#""Addresses":"[{\"City\":\"Seattle\"},{\"City\":\"London\"}]""#),
        "{answer}"
    );
    assert!(!answer.contains("Holdings"), "{answer}");
}

/// Positions in paths (`Variants/0/Stock`) mean what they mean in a patch, wherever a path is
/// read: a query's filter (gRPC and REST), a patch's condition (so a conditional decrement sells
/// only the variant it addresses), a select, and an index's path, which follows the patches.
#[tokio::test]
async fn positions_in_paths_filter_select_condition_and_index_as_patches_address_them() {
    let (server, rest) = common::rest::server(|_| {}).await;
    let mut client = server.client().await;
    let index = pb::IndexDefinition {
        name: "ByFirstStock".into(),
        properties: vec!["Variants/0/Stock".into()],
        scope: pb::IndexScope::Table as i32,
        unique: false,
    };
    let request = pb::CreateTableRequest {
        table: "Shop".into(),
        indexes: vec![index],
        ..Default::default()
    };
    client.create_table(request).await.unwrap();
    let variant =
        |sku: &str, stock: i32| object(&[("Sku", string(sku)), ("Stock", common::int32(stock))]);
    for (row_key, variants) in [
        ("tee", vec![variant("tee-s", 2), variant("tee-m", 0)]),
        ("mug", vec![variant("mug", 0)]),
    ] {
        let product = entity("p", row_key, &[("Variants", array(variants))]);
        client
            .insert_entity(insert_request("Shop", product))
            .await
            .unwrap();
    }
    let query = |filter: &str, index: &str| pb::QueryEntitiesRequest {
        table: "Shop".into(),
        filter: filter.into(),
        index: index.into(),
        ..Default::default()
    };
    let rows = |answer: pb::QueryEntitiesResponse| -> Vec<String> {
        answer.entities.into_iter().map(|e| e.row_key).collect()
    };
    for (filter, expected) in [
        ("Variants/0/Stock gt 0", vec!["tee"]),
        ("Variants/1/Sku eq 'tee-m'", vec!["tee"]),
        ("Variants/1/Stock eq 0", vec!["tee"]),
        ("Variants/0/Stock eq 0", vec!["mug"]),
        ("Variants/5/Stock eq 0", vec![]),
    ] {
        let found = client.query_entities(query(filter, "")).await.unwrap();
        assert_eq!(rows(found.into_inner()), expected, "{filter}");
    }
    let refused = client
        .query_entities(query("Variants/-1/Stock gt 0", ""))
        .await;
    let status = assert_error(refused, Code::InvalidArgument, "InvalidInput");
    assert!(
        status.message().contains("negative positions"),
        "{status:?}"
    );

    // In the index's order, the first variant's stock: mug (0), then tee (2).
    let found = client
        .query_entities(query("Variants/0/Stock ge 0", "ByFirstStock"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.stats.as_ref().unwrap().plan, "index:ByFirstStock");
    assert_eq!(rows(found), ["mug", "tee"]);

    // A decrement conditioned on the variant it addresses sells two, then refuses.
    let sell = pb::PatchEntityRequest {
        table: "Shop".into(),
        partition_key: "p".into(),
        row_key: "tee".into(),
        operations: vec![pb::PatchStep {
            step: Some(pb::patch_step::Step::Increment(pb::IncrementStep {
                property: "Variants/0/Stock".into(),
                by: Some(common::int32(-1)),
            })),
        }],
        condition: "Variants/0/Stock gt 0".into(),
        ..Default::default()
    };
    for _ in 0..2 {
        client.patch_entity(sell.clone()).await.unwrap();
    }
    let sold_out = client.patch_entity(sell).await;
    assert_error(
        sold_out,
        Code::FailedPrecondition,
        "UpdateConditionNotSatisfied",
    );
    let found = client
        .query_entities(query("Variants/0/Stock eq 0", "ByFirstStock"))
        .await
        .unwrap();
    assert_eq!(
        rows(found.into_inner()),
        ["mug", "tee"],
        "the index follows"
    );

    // A select through a position shows that element alone.
    let mut read = get_request("Shop", "p", "tee");
    read.select = vec!["Variants/1/Sku".into()];
    let shown = client.get_entity(read).await.unwrap().into_inner();
    assert_eq!(
        shown.properties.get("Variants"),
        Some(&array(vec![object(&[("Sku", string("tee-m"))])]))
    );

    let mut socket = tokio::net::TcpStream::connect(rest).await.unwrap();
    let path = "/devstoreaccount1/Shop()?$filter=Variants/1/Sku%20eq%20'tee-m'";
    let (status, answer) = common::rest::exchange(&mut socket, "GET", path, b"").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""RowKey":"tee""#), "{answer}");
    assert!(!answer.contains(r#""RowKey":"mug""#), "{answer}");
}
