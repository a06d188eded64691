//! `trestle`, the command line, against the real server (both stores): each command as a user
//! types it, its output in every format, typed properties kept exactly, and a table exported to
//! JSON lines and imported into another, twice (the second run skips or rewrites). The binary's
//! own argument handling: cli/tests/binary.rs.

mod common;

use common::TestServer;
use trestle_cli::{parse, run, CliError};

/// Runs `trestle <args>` against `server` with `input` on standard input: what it printed.
async fn trestle(server: &TestServer, args: &[&str], input: &str) -> Result<String, CliError> {
    let endpoint = server.endpoint();
    let line = ["trestle", "--endpoint", &endpoint]
        .into_iter()
        .chain(args.iter().copied());
    let cli = parse(line)?;
    let mut out = Vec::new();
    run(cli, &mut input.as_bytes(), &mut out).await?;
    Ok(String::from_utf8(out).unwrap())
}

async fn ok(server: &TestServer, args: &[&str]) -> String {
    trestle(server, args, "")
        .await
        .unwrap_or_else(|e| panic!("trestle {args:?}: {e}"))
}

const EVERY_TYPE: &[&str] = &[
    "Name=Ada, \"the\" first",
    "Age:int32=36",
    "Big:int64=9007199254740993",
    "Ratio:double=1.0",
    "Active:bool=true",
    "Born:datetime=1815-12-10T00:00:00.1234567Z",
    "Id:guid=00112233-4455-6677-8899-aabbccddeeff",
    "Raw:binary=AAEC",
    r#"Address:json={"City": "London", "Lines": ["12 St James's Sq", null], "Floor": 2}"#,
];

#[tokio::test]
async fn commands_write_read_query_and_count_with_every_type_kept() {
    let server = TestServer::start().await;
    ok(&server, &["create", "People"]).await;
    assert_eq!(ok(&server, &["tables"]).await, "People\n");
    let mut put = vec!["put", "People", "uk", "ada"];
    put.extend(EVERY_TYPE);
    let etag = ok(&server, &put).await;
    assert!(etag.starts_with("W/\""), "{etag}");
    ok(
        &server,
        &["put", "People", "uk", "alan", "Name=Alan", "Age:int32=41"],
    )
    .await;
    ok(
        &server,
        &[
            "merge",
            "People",
            "us",
            "grace",
            "Name=Grace",
            "Age:int32=45",
        ],
    )
    .await;

    let json = ok(&server, &["get", "People", "uk", "ada"]).await;
    for typed in [
        r#""Age":{"Int32":36}"#,
        r#""Big":{"Int64":"9007199254740993"}"#,
        r#""Ratio":{"Double":1.0}"#,
        r#""Born":{"DateTime":"1815-12-10T00:00:00.1234567Z"}"#,
        r#""Raw":{"Binary":"AAEC"}"#,
        r#""Floor":{"Int64":"2"}"#,
        r#"{"Null":null}"#,
    ] {
        assert!(json.contains(typed), "{typed} in {json}");
    }

    let table = ok(&server, &["query", "People", "--filter", "Age ge 40"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("PartitionKey  RowKey  Timestamp"),
        "{table}"
    );
    assert!(lines[1].starts_with("uk            alan"), "{table}");
    assert!(lines[2].starts_with("us            grace"), "{table}");

    let csv = ok(
        &server,
        &[
            "query",
            "People",
            "--partition",
            "uk",
            "--select",
            "Name,Address/City",
            "--format",
            "csv",
        ],
    )
    .await;
    let rows: Vec<&str> = csv.split("\r\n").collect();
    assert_eq!(
        rows.len(),
        4,
        "a header, ada, alan and the last line's end: {csv}"
    );
    assert_eq!(rows[0], "PartitionKey,RowKey,Timestamp,Address,Name");
    let ada = format!(
        "uk,ada,{},\"{{\"\"City\"\":\"\"London\"\"}}\",\"Ada, \"\"the\"\" first\"",
        timestamp(&json)
    );
    assert_eq!(rows[1], ada, "a selected path, and quoting: {csv}");
    assert!(
        rows[2].starts_with("uk,alan,") && rows[2].ends_with(",,Alan"),
        "{csv}"
    );
    let newest = ok(
        &server,
        &[
            "query",
            "People",
            "--reverse",
            "--limit",
            "1",
            "--format",
            "json",
        ],
    )
    .await;
    assert!(
        newest.contains(r#""RowKey":"grace""#) && newest.lines().count() == 1,
        "{newest}"
    );
    let by_path = ok(
        &server,
        &["count", "People", "--filter", "Address/City eq 'London'"],
    )
    .await;
    assert_eq!(by_path, "1\n");
    assert_eq!(
        ok(
            &server,
            &["count", "People", "--partition", "uk", "--prefix", "a"]
        )
        .await,
        "2\n"
    );

    ok(&server, &["delete", "People", "uk", "alan"]).await;
    let stale = trestle(
        &server,
        &["delete", "People", "uk", "ada", "--if-match", "W/\"x\""],
        "",
    )
    .await;
    let stale = stale.unwrap_err().to_string();
    assert!(stale.ends_with("(UpdateConditionNotSatisfied)"), "{stale}");
    let gone = trestle(&server, &["get", "People", "uk", "alan"], "")
        .await
        .unwrap_err();
    assert!(gone.to_string().ends_with("(ResourceNotFound)"), "{gone}");
    ok(&server, &["drop", "People"]).await;
    assert_eq!(ok(&server, &["tables"]).await, "");
}

/// The Timestamp of the JSON line `json`.
fn timestamp(json: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    value["Timestamp"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn bad_properties_are_refused_before_anything_is_sent() {
    let server = TestServer::start().await;
    ok(&server, &["create", "Things"]).await;
    for (property, expected) in [
        ("NoEquals", "write Name=value"),
        ("N:int32=x", "not a int32"),
        ("N:int33=1", "the type is one of"),
        ("J:json={", "not a json"),
    ] {
        let refused = trestle(&server, &["put", "Things", "p", "r", property], "").await;
        let message = refused.unwrap_err().to_string();
        assert!(message.contains(expected), "{property}: {message}");
    }
    assert_eq!(ok(&server, &["count", "Things"]).await, "0\n");
}

#[tokio::test]
async fn a_table_exports_to_json_lines_and_imports_into_another_exactly_and_again() {
    let server = TestServer::start().await;
    ok(&server, &["create", "Source"]).await;
    ok(&server, &["create", "Copy"]).await;
    let mut put = vec!["put", "Source", "p0", "every"];
    put.extend(EVERY_TYPE);
    ok(&server, &put).await;
    // 250 entities in 3 partitions: batches of 100 of one partition, several at once.
    let mut lines = String::new();
    for n in 0..250 {
        let partition = format!("p{}", n % 3);
        let row = format!("r{n:03}");
        let value = format!("N:int64={n}");
        ok(&server, &["put", "Source", &partition, &row, &value]).await;
    }
    let exported = ok(&server, &["export", "Source"]).await;
    assert_eq!(exported.lines().count(), 251);
    lines.push_str(&exported);

    let report = trestle(&server, &["import", "Copy"], &lines).await.unwrap();
    assert_eq!(report, "imported 251 entities, skipped 0 that existed\n");
    let copied = ok(&server, &["export", "Copy"]).await;
    let without_versions = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .map(|line| {
                let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
                let object = value.as_object_mut().unwrap();
                object.remove("Timestamp");
                object.remove("ETag");
                value
            })
            .collect()
    };
    assert_eq!(without_versions(&copied), without_versions(&exported));

    // Interrupted and run again: inserts skip what is there; upserts rewrite it.
    let again = trestle(&server, &["import", "Copy"], &lines).await.unwrap();
    assert_eq!(again, "imported 0 entities, skipped 251 that existed\n");
    let upsert = trestle(&server, &["import", "Copy", "--mode", "upsert"], &lines)
        .await
        .unwrap();
    assert_eq!(upsert, "imported 251 entities, skipped 0 that existed\n");

    let broken = trestle(&server, &["import", "Copy"], "{\"PartitionKey\": \"p\"}\n").await;
    assert!(broken
        .unwrap_err()
        .to_string()
        .contains("line 1: no RowKey"));
    let filtered = ok(&server, &["export", "Source", "--filter", "N ge 248L"]).await;
    assert_eq!(filtered.lines().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_entities_round_trip_through_export_and_import() {
    let server = TestServer::start().await;
    ok(&server, &["create", "Big"]).await;
    // 100,000 entities in 50 partitions, with every scalar type and a document.
    let mut lines = String::new();
    for n in 0..100_000u32 {
        let line = serde_json::json!({
            "PartitionKey": format!("p{:02}", n % 50),
            "RowKey": format!("r{n:06}"),
            "Properties": {
                "N": {"Int32": n},
                "Big": {"Int64": (u64::from(n) << 33).to_string()},
                "Ratio": {"Double": f64::from(n) / 7.0},
                "Even": {"Boolean": n % 2 == 0},
                "When": {"DateTime": "2026-11-25T12:00:00.1234567Z"},
                "Name": {"String": format!("entity {n}")},
                "Doc": {"Object": {"Tags": {"Array": [{"String": "a"}, {"Null": null}]}}},
            },
        });
        lines.push_str(&line.to_string());
        lines.push('\n');
    }
    let report = trestle(&server, &["import", "Big"], &lines).await.unwrap();
    assert_eq!(report, "imported 100000 entities, skipped 0 that existed\n");
    let exported = ok(&server, &["export", "Big"]).await;
    // Into a table that does not exist yet: import creates it.
    let report = trestle(&server, &["import", "BigCopy"], &exported)
        .await
        .unwrap();
    assert_eq!(report, "imported 100000 entities, skipped 0 that existed\n");
    let copied = ok(&server, &["export", "BigCopy"]).await;
    let properties = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                serde_json::json!([value["PartitionKey"], value["RowKey"], value["Properties"]])
            })
            .collect()
    };
    let (original, copy) = (properties(&exported), properties(&copied));
    assert_eq!(original.len(), 100_000);
    assert!(
        original == copy,
        "every entity of the copy equals the original's"
    );
    let mut given = properties(&lines);
    given.sort_by(|a, b| (a[0].as_str(), a[1].as_str()).cmp(&(b[0].as_str(), b[1].as_str())));
    assert!(given == original, "what was imported is what was given");
}
