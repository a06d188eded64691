//! `trestle`, the command line, against the real server (both stores): each command as a user
//! types it, its output in every format, typed properties kept exactly, and a table exported to
//! JSON lines and imported into another, twice (the second run skips or rewrites), and copied
//! from an Azure Table endpoint (another Trestle's REST endpoint, and Azurite, started from
//! `tests/azure-sdk`'s packages). The binary's own argument handling: cli/tests/binary.rs.

mod common;

use common::TestServer;
use trestle_cli::{parse, run, CliError};
use trestle_client::{EntityKey, Properties, Value};

/// Runs `trestle <args>` against `server` with `input` on standard input: what it printed.
async fn trestle(server: &TestServer, args: &[&str], input: &str) -> Result<String, CliError> {
    trestle_bytes(server, args, input.as_bytes()).await
}

/// [`trestle`] with `input` of any bytes.
async fn trestle_bytes(
    server: &TestServer,
    args: &[&str],
    input: &[u8],
) -> Result<String, CliError> {
    let endpoint = server.endpoint();
    let line = ["trestle", "--endpoint", &endpoint]
        .into_iter()
        .chain(args.iter().copied());
    let mut out = Vec::new();
    run(parse(line)?, &mut &input[..], &mut out).await?;
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

    // Sorted by age, oldest first, and the first two only.
    let oldest = ok(
        &server,
        &[
            "query",
            "People",
            "--order-by",
            "Age desc",
            "--limit",
            "2",
            "--format",
            "csv",
        ],
    )
    .await;
    let keys: Vec<&str> = oldest
        .split("\r\n")
        .skip(1)
        .filter(|r| !r.is_empty())
        .collect();
    assert_eq!(keys.len(), 2, "{oldest}");
    assert!(
        keys[0].starts_with("us,grace,") && keys[1].starts_with("uk,alan,"),
        "{oldest}"
    );
    let refused = trestle(&server, &["query", "People", "--order-by", "Age down"], "").await;
    assert!(refused.unwrap_err().to_string().contains("order_by path"));

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

    // Run again within the window: each transaction answers as it did (its idempotency key).
    let again = trestle(&server, &["import", "Copy"], &lines).await.unwrap();
    assert_eq!(again, "imported 251 entities, skipped 0 that existed\n");
    let unchanged = ok(&server, &["export", "Copy"]).await;
    assert_eq!(
        unchanged, copied,
        "nothing applied again, not even a new ETag"
    );
    // Another input naming the same entities: inserts skip what is there; upserts rewrite it.
    let reordered: String = lines
        .lines()
        .rev()
        .map(|line| format!("{line}\n"))
        .collect();
    let again = trestle(&server, &["import", "Copy"], &reordered)
        .await
        .unwrap();
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

    // Read as segments at once: the same lines, interleaved.
    let sorted = |text: &str| {
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    let parallel = ok(&server, &["export", "Source", "--parallel", "3"]).await;
    assert_eq!(sorted(&parallel), sorted(&exported));
    let refused = trestle(&server, &["export", "Source", "--parallel", "0"], "").await;
    assert!(refused.unwrap_err().to_string().contains("--parallel"));
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

/// The development account's key, which Azurite and an open Trestle check signatures with.
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A connection string to the table endpoint `rest` (`host:port`) of the development account,
/// signed with `key`.
fn connection_string(rest: &str, key: &str) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={key};\
         TableEndpoint=http://{rest}/devstoreaccount1;"
    )
}

/// Every entity of `table`, keys and properties, in key order.
async fn contents(server: &TestServer, table: &str) -> Vec<(EntityKey, Properties)> {
    let entities = server.sdk().await.table(table).entities().all().await;
    entities
        .unwrap()
        .into_iter()
        .map(|entity| (entity.key, entity.value))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_reads_another_trestles_rest_endpoint_page_by_page_with_every_type() {
    let (server, rest) = common::rest::server(|_| {}).await;
    let from = connection_string(&rest.to_string(), DEV_KEY);
    let source = server.sdk().await.table("Source");
    source.create().await.unwrap();
    // 2,300 entities in 3 partitions: three pages of Azure's 1,000 at most.
    let guid = "00112233-4455-6677-8899-aabbccddeeff".parse().unwrap();
    for start in (0..2_300).step_by(100) {
        let partition = format!("p{}", start / 100 % 3);
        let mut tx = source.transaction(partition);
        for n in start..start + 100 {
            let mut properties = Properties::new();
            properties.set("Name", Value::String(format!("entity {n}")));
            properties.set("Count", Value::Int32(n));
            properties.set("Big", Value::Int64((i64::from(n) << 40) + 1));
            properties.set("Ratio", Value::Double(f64::from(n) / 8.0));
            properties.set("Whole", Value::Double(2.0));
            properties.set("Even", Value::Bool(n % 2 == 0));
            properties.set(
                "When",
                Value::DateTime("2026-11-25T12:00:00.1234567Z".parse().unwrap()),
            );
            properties.set("Id", Value::Guid(guid));
            properties.set("Raw", Value::Binary(vec![(n % 256) as u8, 0, 255]));
            tx.insert(format!("r{n:05}"), &properties).unwrap();
        }
        tx.commit().await.unwrap();
    }

    let args = [
        "copy",
        "--from",
        &from,
        "--table",
        "Source",
        "--to-table",
        "Copied",
    ];
    assert_eq!(
        ok(&server, &args).await,
        "copied 2300 entities, skipped 0 that existed\n"
    );
    let original = contents(&server, "Source").await;
    assert_eq!(original.len(), 2_300);
    assert!(
        contents(&server, "Copied").await == original,
        "every entity of the copy equals the original's, every type kept"
    );
    // Run again (as after an interruption) within the window: each transaction answers as it
    // did, applying nothing again.
    assert_eq!(
        ok(&server, &args).await,
        "copied 2300 entities, skipped 0 that existed\n"
    );
    assert!(contents(&server, "Copied").await == original);
    let mut upsert = args.to_vec();
    upsert.extend(["--mode", "upsert"]);
    assert_eq!(
        ok(&server, &upsert).await,
        "copied 2300 entities, skipped 0 that existed\n"
    );
    // A filter, and the source's name kept without --to-table (here: into another server).
    let other = TestServer::start().await;
    let line = [
        "trestle",
        "--endpoint",
        &other.endpoint(),
        "copy",
        "--from",
        &from,
        "--table",
        "Source",
        "--filter",
        "PartitionKey eq 'p1' and Count lt 150",
    ];
    let mut out = Vec::new();
    run(parse(line).unwrap(), &mut "".as_bytes(), &mut out)
        .await
        .unwrap();
    assert_eq!(out, b"copied 50 entities, skipped 0 that existed\n");
    let wanted: Vec<_> = original
        .iter()
        .filter(|(key, properties)| {
            key.partition_key == "p1" && matches!(properties.0["Count"], Value::Int32(n) if n < 150)
        })
        .cloned()
        .collect();
    assert!(
        contents(&other, "Source").await == wanted,
        "the filter's 50"
    );

    let missing = ["copy", "--from", &from, "--table", "Nowhere"];
    let error = trestle(&server, &missing, "")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("404") && error.contains("TableNotFound"),
        "{error}"
    );
}

/// Azurite's table service, started from `tests/azure-sdk`'s packages on a free loopback port,
/// stopped when dropped.
struct Azurite {
    process: std::process::Child,
    addr: String,
}

impl Azurite {
    /// Starts Azurite, or `None` (with the reason printed) where its package is not installed
    /// and the run does not require it.
    fn start() -> Option<Azurite> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/azure-sdk");
        let program = dir.join("node_modules/.bin/azurite-table");
        if !program.exists() {
            let required = std::env::var("TRESTLE_REQUIRE_AZURE_SDKS").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "Azurite is not installed: npm ci in tests/azure-sdk"
            );
            eprintln!("skipped: Azurite is not installed (npm ci in tests/azure-sdk)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut process = std::process::Command::new(program)
            .args(["--tableHost", "127.0.0.1", "--tablePort", &port.to_string()])
            .args(["--inMemoryPersistence", "--silent"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start Azurite");
        let mut lines =
            std::io::BufRead::lines(std::io::BufReader::new(process.stdout.take().unwrap()));
        let started = lines.any(|line| line.is_ok_and(|l| l.contains("successfully started")));
        assert!(started, "Azurite did not start");
        Some(Azurite {
            process,
            addr: format!("127.0.0.1:{port}"),
        })
    }

    /// Fills `table` with `count` entities of every type through the JavaScript SDK.
    fn seed(&self, table: &str, count: usize) {
        let output = std::process::Command::new("node")
            .args(["js_tables.mjs", "seed"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/azure-sdk"))
            .env(
                "TRESTLE_REST_ENDPOINT",
                format!("http://{}/devstoreaccount1", self.addr),
            )
            .env("TRESTLE_SEED_TABLE", table)
            .env("TRESTLE_SEED_COUNT", count.to_string())
            .output()
            .expect("run node");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Entity `n` as `js_tables.mjs seed` writes it.
fn seeded(n: usize) -> (EntityKey, Properties) {
    let mut properties = Properties::new();
    properties.set("Name", Value::String(format!("entity {n}")));
    properties.set("Count", Value::Int32(n as i32));
    properties.set("Big", Value::Int64(9_007_199_254_740_993 + n as i64));
    properties.set("Ratio", Value::Double(n as f64 + 0.25));
    properties.set("Whole", Value::Double(2.0));
    properties.set(
        "When",
        Value::DateTime("2024-02-29T12:30:45.1234567Z".parse().unwrap()),
    );
    properties.set(
        "Id",
        Value::Guid("00112233-4455-6677-8899-aabbccddeeff".parse().unwrap()),
    );
    properties.set("Raw", Value::Binary(vec![(n % 256) as u8, 1, 255]));
    properties.set("Even", Value::Bool(n % 2 == 0));
    (
        EntityKey::new(format!("p{}", n % 7), format!("r{n:06}")),
        properties,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_moves_a_table_out_of_azurite_with_every_type_kept() {
    let Some(azurite) = Azurite::start() else {
        return;
    };
    azurite.seed("Seeded", 1_500);
    let server = TestServer::start().await;
    let from = connection_string(&azurite.addr, DEV_KEY);
    let args = [
        "copy",
        "--from",
        &from,
        "--table",
        "Seeded",
        "--to-table",
        "FromAzure",
    ];
    assert_eq!(
        ok(&server, &args).await,
        "copied 1500 entities, skipped 0 that existed\n"
    );
    let mut expected: Vec<_> = (0..1_500).map(seeded).collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let copied = contents(&server, "FromAzure").await;
    assert_eq!(copied.len(), expected.len());
    for (got, want) in copied.iter().zip(&expected) {
        assert_eq!(got, want);
    }

    // Refusals name the source's answer; nothing is written.
    let wrong_key = connection_string(&azurite.addr, "AAAA");
    let refused = [
        "copy",
        "--from",
        &wrong_key,
        "--table",
        "Seeded",
        "--to-table",
        "Refused",
    ];
    let error = trestle(&server, &refused, "")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("403"), "{error}");
    let missing = [
        "copy",
        "--from",
        &from,
        "--table",
        "Nowhere",
        "--to-table",
        "Refused",
    ];
    let error = trestle(&server, &missing, "")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("404"), "{error}");
    let tables = server.sdk().await.list_tables("").await.unwrap();
    assert!(!tables.contains(&"Refused".to_owned()), "{tables:?}");
    drop(azurite);
    let gone = trestle(&server, &args, "").await.unwrap_err().to_string();
    assert!(gone.starts_with("the source: "), "{gone}");
}

/// An import reads and checks every line before it writes anything: 1,000 good lines and a cut
/// one, invalid UTF-8, a key that is not a string, or a member the format has not (a property
/// beside the keys) change nothing (not even the table is made), and each refusal names its line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_with_a_bad_line_anywhere_writes_nothing_and_names_the_line() {
    let server = TestServer::start().await;
    let good: String = (0..1_000)
        .map(|n| {
            format!(
                "{{\"PartitionKey\": \"p{}\", \"RowKey\": \"r{n}\"}}\n",
                n % 7
            )
        })
        .collect();
    let cut = format!("{good}{{\"PartitionKey\": \"p\", \"RowK");
    let refused = trestle(&server, &["import", "Staged"], &cut)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("line 1001: "), "{refused}");
    assert!(
        refused.to_string().contains("nothing was imported"),
        "{refused}"
    );
    let mut not_utf8 = good.clone().into_bytes();
    not_utf8.extend_from_slice(b"{\"PartitionKey\": \"p\", \"RowKey\": \"\xff\"}\n");
    let refused = trestle_bytes(&server, &["import", "Staged"], &not_utf8)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("line 1001: not UTF-8"),
        "{refused}"
    );
    let numbered = "{\"PartitionKey\": 7, \"RowKey\": \"r\"}\n";
    let refused = trestle(&server, &["import", "Staged"], numbered)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("line 1: PartitionKey must be a string"),
        "{refused}"
    );
    // A property beside the keys, not inside Properties, would be lost: refused.
    let beside = "{\"PartitionKey\": \"p\", \"RowKey\": \"r\", \"Age\": 36}\n";
    let refused = trestle(&server, &["import", "Staged"], beside)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("line 1: unknown member \"Age\""),
        "{refused}"
    );
    let untyped = "{\"PartitionKey\": \"p\", \"RowKey\": \"r\", \"Properties\": 7}\n";
    let refused = trestle(&server, &["import", "Staged"], untyped)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("line 1: Properties must be an object"),
        "{refused}"
    );
    let tables = ok(&server, &["tables"]).await;
    assert!(!tables.contains("Staged"), "{tables}");

    let report = trestle(&server, &["import", "Staged"], &good)
        .await
        .unwrap();
    assert_eq!(report, "imported 1000 entities, skipped 0 that existed\n");
}

/// A loopback proxy to `server` that forwards what its clients send until `budget` bytes have
/// gone through, then cuts every connection and refuses new ones: a server lost mid-call, as a
/// client sees it.
async fn cutting_proxy(server: &TestServer, budget: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let upstream = server.addr;
    let (cut, _) = tokio::sync::watch::channel(false);
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let mut stopped = cut.subscribe();
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stopped.wait_for(|cut| *cut) => return,
            };
            let Ok((client, _)) = accepted else { return };
            let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                return;
            };
            let (mut from_client, mut to_server) = (client, server);
            let (cut, sent) = (cut.clone(), sent.clone());
            tokio::spawn(async move {
                let (mut client_read, mut client_write) = from_client.split();
                let (mut server_read, mut server_write) = to_server.split();
                let mut stopped = cut.subscribe();
                let upward = async {
                    let mut buffer = vec![0; 16 * 1024];
                    loop {
                        let n = client_read.read(&mut buffer).await?;
                        if n == 0 {
                            return Ok::<_, std::io::Error>(());
                        }
                        server_write.write_all(&buffer[..n]).await?;
                        let total = sent.fetch_add(n, std::sync::atomic::Ordering::SeqCst) + n;
                        if total >= budget {
                            cut.send_replace(true);
                        }
                    }
                };
                let downward = tokio::io::copy(&mut server_read, &mut client_write);
                tokio::select! {
                    _ = upward => {}
                    _ = downward => {}
                    _ = stopped.wait_for(|cut| *cut) => {}
                }
            });
        }
    });
    endpoint
}

/// An import whose server is lost midway says how far it got and how to finish; run again once
/// the server is back, it finishes: the table then holds each line's entity exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_cut_off_midway_says_so_and_a_second_run_finishes_it() {
    let server = TestServer::start().await;
    // Fillers that do not compress: the cut comes midway whatever the transport does.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let lines: String = (0..5_000)
        .map(|n| {
            let filler: String = (0..25)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    format!("{:08x}", state >> 32)
                })
                .collect();
            format!(
                "{{\"PartitionKey\": \"p{}\", \"RowKey\": \"r{n:05}\", \"Properties\": \
                 {{\"N\": {{\"Int32\": {n}}}, \"F\": {{\"String\": \"{filler}\"}}}}}}\n",
                n % 50
            )
        })
        .collect();
    let proxy = cutting_proxy(&server, 400_000).await;
    let line = ["trestle", "--endpoint", &proxy, "import", "Cut"];
    let mut out = Vec::new();
    let cut = run(parse(line).unwrap(), &mut lines.as_bytes(), &mut out)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        cut.contains("entities had been written of 5000 read"),
        "{cut}"
    );
    assert!(cut.contains("run the same import again"), "{cut}");

    let report = trestle(&server, &["import", "Cut"], &lines).await.unwrap();
    let (written, skipped) = report
        .trim_end()
        .strip_prefix("imported ")
        .and_then(|rest| rest.split_once(" entities, skipped "))
        .and_then(|(written, rest)| Some((written, rest.strip_suffix(" that existed")?)))
        .unwrap_or_else(|| panic!("{report}"));
    let (written, skipped): (u64, u64) = (written.parse().unwrap(), skipped.parse().unwrap());
    // The transactions of the first run answer as they did; the rest are written.
    assert_eq!((written, skipped), (5_000, 0), "{report}");
    let before_cut: u64 = cut
        .split(" entities had been written")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{cut}"));
    assert!(
        before_cut > 0 && before_cut < 5_000,
        "the cut was not midway: {cut}"
    );

    let exported = ok(&server, &["export", "Cut"]).await;
    let mut numbers: Vec<u64> = exported
        .lines()
        .map(|line| {
            let entity: serde_json::Value = serde_json::from_str(line).unwrap();
            entity["Properties"]["N"]["Int32"].as_u64().unwrap()
        })
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..5_000).collect::<Vec<_>>());
}

/// `trestle aggregate` prints one aligned row per group: the group_by values, each aggregation in
/// the order named, and the entities; a misspelt aggregation is refused naming the forms.
#[tokio::test]
async fn aggregate_prints_a_row_per_group_in_the_order_asked() {
    let server = TestServer::start().await;
    ok(&server, &["create", "Sales"]).await;
    for (rk, region, amount) in [("a", "east", "5"), ("b", "west", "2"), ("c", "east", "4")] {
        let region = format!("Region={region}");
        let amount = format!("Amount:int32={amount}");
        ok(&server, &["put", "Sales", "p", rk, &region, &amount]).await;
    }
    let shown = ok(
        &server,
        &[
            "aggregate",
            "Sales",
            "--partition",
            "p",
            "--group-by",
            "Region",
            "sum:Amount",
            "count",
            "max:Amount",
        ],
    )
    .await;
    assert_eq!(
        shown,
        "Region  sum:Amount  count  max:Amount  entities\n\
         east    9           2      5           2\n\
         west    2           1      2           1\n"
    );
    let refused = trestle(&server, &["aggregate", "Sales", "total:Amount"], "")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("sum:Amount"), "{refused}");
}
