//! The command line exactly as operators (and tests outside the repo) use it: `keygen`, `token`,
//! `--key-file`, and the refusal to serve open mode on a non-loopback address.

mod support;

use std::os::unix::fs::PermissionsExt;

use support::{entity, run_tool, ServerProcess};
use tonic::Code;
use trestle_proto::pb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keygen_then_token_then_serve_with_the_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("trestle.keys");
    let key_path = key_file.to_str().unwrap();

    let (status, _, stderr) = run_tool(&["keygen", "--out", key_path]);
    assert!(status.success(), "{stderr}");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key file is private");
    let written = std::fs::read_to_string(&key_file).unwrap();
    let (status, _, stderr) = run_tool(&["keygen", "--out", key_path]);
    assert!(!status.success(), "keygen overwrote a key file");
    assert!(stderr.contains("exists"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&key_file).unwrap(), written);

    let token = |extra: &[&str]| {
        let mut args = vec!["token", "--key-file", key_path];
        args.extend_from_slice(extra);
        let (status, stdout, stderr) = run_tool(&args);
        assert!(status.success(), "{stderr}");
        let token = stdout.trim().to_owned();
        assert!(!stderr.contains(&token) && !written.contains(&token));
        token
    };
    let admin_token = token(&["--permissions", "raudlc", "--ttl", "60"]);
    let ranged_token = token(&[
        "--permissions",
        "ra",
        "--table",
        "Orders",
        "--partition-start",
        "m",
        "--partition-end",
        "n",
    ]);
    let (status, _, stderr) = run_tool(&["token", "--key-file", key_path, "--permissions", "rx"]);
    assert!(!status.success() && stderr.contains("'x'"), "{stderr}");

    let server = ServerProcess::start_with(&dir.path().join("data"), &["--key-file", key_path]);
    let mut anonymous = server.client().await;
    let refused = anonymous
        .create_table(pb::CreateTableRequest {
            table: "Orders".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);

    let mut admin = server.client_as(&admin_token).await;
    admin
        .create_table(pb::CreateTableRequest {
            table: "Orders".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut ranged = server.client_as(&ranged_token).await;
    let insert = |pk: &str| pb::InsertEntityRequest {
        table: "Orders".into(),
        entity: Some(entity(pk, "1", &[("V", 1)])),
        ..Default::default()
    };
    ranged.insert_entity(insert("m")).await.unwrap();
    ranged.insert_entity(insert("mz")).await.unwrap();
    let outside = ranged.insert_entity(insert("n")).await.unwrap_err();
    assert_eq!(outside.code(), Code::PermissionDenied);
    let deleted = ranged
        .delete_table(pb::DeleteTableRequest {
            table: "Orders".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(deleted.code(), Code::PermissionDenied);
    server.kill_9();
}

#[test]
fn connection_string_carries_the_first_key_as_azure_sdks_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("trestle.keys");
    let key_path = key_file.to_str().unwrap();
    let (status, _, stderr) = run_tool(&["keygen", "--out", key_path]);
    assert!(status.success(), "{stderr}");
    let written = std::fs::read_to_string(&key_file).unwrap();
    let secret = written
        .lines()
        .find(|l| !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap();
    // The same 32 bytes in standard, padded base64.
    let account_key = format!("{}=", secret.replace('-', "+").replace('_', "/"));

    let (status, stdout, stderr) = run_tool(&["connection-string", "--key-file", key_path]);
    assert!(status.success(), "{stderr}");
    assert_eq!(
        stdout.trim(),
        format!(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={account_key};\
             TableEndpoint=http://127.0.0.1:10002/devstoreaccount1;"
        )
    );
    let (status, stdout, _) = run_tool(&[
        "connection-string",
        "--key-file",
        key_path,
        "--endpoint",
        "http://tables.internal:8080/",
    ]);
    assert!(status.success());
    assert!(stdout.contains(";TableEndpoint=http://tables.internal:8080/devstoreaccount1;"));
    let (status, _, stderr) = run_tool(&["connection-string", "--key-file", "/nonexistent"]);
    assert!(
        !status.success() && stderr.contains("/nonexistent"),
        "{stderr}"
    );
}

#[test]
fn open_mode_is_refused_on_a_non_loopback_address() {
    let dir = tempfile::tempdir().unwrap();
    let (status, printed) = ServerProcess::run_to_exit(dir.path(), &["--listen", "0.0.0.0:0"]);
    assert!(!status.success(), "served open mode on 0.0.0.0: {printed}");
    assert!(
        printed.contains("--key-file") && printed.contains("--insecure-open"),
        "unclear refusal: {printed}"
    );
}

#[test]
fn an_unreadable_key_file_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("broken.keys");
    std::fs::write(&key_file, "only-an-id\n").unwrap();
    let (status, printed) =
        ServerProcess::run_to_exit(dir.path(), &["--key-file", key_file.to_str().unwrap()]);
    assert!(!status.success());
    assert!(printed.contains("line 1"), "{printed}");
}

#[test]
fn a_shutdown_grace_that_is_not_a_whole_number_of_seconds_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["-1", "1.5", "soon"] {
        let flag = format!("--shutdown-grace-secs={bad}");
        let (status, printed) = ServerProcess::run_to_exit(dir.path(), &[&flag]);
        assert!(!status.success(), "served with a grace of {bad}: {printed}");
        assert!(
            printed.contains("--shutdown-grace-secs") && printed.contains(bad),
            "unclear refusal of {bad}: {printed}"
        );
    }
}
