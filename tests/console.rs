//! The web console (`--console-listen`) of a keyed server: in a real headless Chromium
//! (`tests/azure-sdk/console_browser.mjs`, puppeteer-core driving the installed browser) a user
//! signs in with the account key, changes the service's CORS rules, creates a table, inserts and
//! edits an entity, runs a filter, changes the table's settings (access policies too), watches a change arrive in a feed's tail and reads the
//! dashboard; a bad credential, a read-only token deleting a table or turning a feed off and a
//! request without the CSRF token are refused; what the page did is then read back over gRPC. The page's screenshot is kept in
//! `target/ci-artifacts/`. Raw HTTP covers what a browser would not send: no cookie, a cookie
//! without the CSRF token, a credential of the request's own, an oversized sign-in.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::TestServer;
use trestle_proto::access::{self, Grant, KeyRing, Permissions};
use trestle_proto::pb;
use trestle_server::auth::Authenticator;

const NODE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/azure-sdk");

/// A keyed server serving the console; the console's address and the keys.
async fn server() -> (TestServer, String, KeyRing) {
    let keys = KeyRing::generate().unwrap();
    let console = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = console.local_addr().unwrap().to_string();
    let authenticator = Authenticator::with_keys(keys.clone());
    let server = TestServer::start_with(move |config| {
        config.authenticator = authenticator;
        config.console_listen = Some(Arc::new(console));
    })
    .await;
    (server, address, keys)
}

/// Chromium's path and puppeteer-core, if both are installed.
fn browser() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    let chromium = std::env::split_paths(&path)
        .flat_map(|dir| [dir.join("chromium"), dir.join("chromium-browser")])
        .find(|candidate| candidate.is_file())?;
    Path::new(NODE_DIR)
        .join("node_modules/puppeteer-core")
        .exists()
        .then_some(chromium)
}

/// One HTTP/1.1 exchange with the console on a fresh connection: the status and the whole
/// answer (a refusal may come before the body is read: a failed write is not an error here).
async fn http(console: &str, method: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: console\r\nx-ms-version: 2019-02-02\r\n{headers}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = tokio::net::TcpStream::connect(console).await.unwrap();
    let _ = socket.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

/// Signs in with `credential`: the cookie header to send and the CSRF token.
async fn sign_in(console: &str, credential: &str) -> (String, String) {
    let body = format!(r#"{{"credential":"{credential}"}}"#);
    let (status, answer) = http(console, "POST", "/session", "", &body).await;
    assert_eq!(status, 200, "{answer}");
    let cookie = answer
        .lines()
        .find_map(|line| line.strip_prefix("set-cookie: "))
        .and_then(|cookie| cookie.split(';').next())
        .expect("a session cookie")
        .to_owned();
    assert!(answer.contains("HttpOnly; SameSite=Strict"), "{answer}");
    let json: serde_json::Value =
        serde_json::from_str(answer.rsplit("\r\n\r\n").next().unwrap()).unwrap();
    (cookie, json["csrf"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_drives_the_console_in_a_browser() {
    let Some(chromium) = browser() else {
        assert!(
            std::env::var_os("TRESTLE_REQUIRE_BROWSER").is_none(),
            "chromium or puppeteer-core (`npm ci` in tests/azure-sdk) is not installed"
        );
        common::skip::skipped(
            "a_user_drives_the_console_in_a_browser",
            "no headless browser: `apt-get install chromium` and `npm ci` in tests/azure-sdk",
        );
        return;
    };
    let (server, console, keys) = server().await;
    let key = keys.signing_key().secret_text();
    let mut client = server.client_as(&key).await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Orders".into(),
            change_feed: true,
            indexes: vec![pb::IndexDefinition {
                name: "ByAmount".into(),
                properties: vec!["Amount".into()],
                scope: pb::IndexScope::Table as i32,
                unique: false,
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    let read_only = access::mint(
        keys.signing_key(),
        &Grant::new(Permissions::parse("rl").unwrap(), 3600),
    );
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let store = std::env::var("TRESTLE_TEST_STORE").unwrap_or_else(|_| "sled".into());
    let screenshot = artifacts.join(format!("console-{store}.png"));
    let _ = std::fs::remove_file(&screenshot);
    let mut run = std::process::Command::new("node");
    run.arg("console_browser.mjs")
        .current_dir(NODE_DIR)
        .env("CONSOLE_URL", format!("http://{console}/"))
        .env("CONSOLE_KEY", &key)
        .env("CONSOLE_READ_TOKEN", &read_only)
        .env("CONSOLE_SCREENSHOT", &screenshot)
        .env("CHROMIUM", chromium);
    // Each of the script's steps gives up after 20 s, so the run ends.
    let out = tokio::task::spawn_blocking(move || run.output())
        .await
        .unwrap()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let says = |field: &str, part: &str| {
        let shown = seen[field].to_string();
        assert!(shown.contains(part), "{field}: {shown} lacks {part:?}");
    };
    says("badCredential", "neither an account key");
    says("who", "account key");
    assert_eq!(seen["forgedStatus"], 403, "{seen}");
    says("headers", "Profile");
    // Each EDM type as itself: an Int64 marked as one, the DateTime, the document expandable.
    says("adaCells", "36Int64");
    says("adaCells", "2020-01-02T03:04:05");
    assert_eq!(seen["documentExpandable"], 1, "{seen}");
    says("etagShown", "W/");
    assert_eq!(seen["filtered"], serde_json::json!(["ada"]));
    says("pageStats", "plan table_scan");
    says("pageStats", "examined 2");
    says(
        "cors",
        "https://app.example · GET,PUT · headers x-ms-* · exposed none · max age 3600 s",
    );
    assert!(
        !seen["cors"].to_string().contains("other.example"),
        "{seen}"
    );
    assert_eq!(seen["readOnlyCorsHidden"], true, "{seen}");
    says("feedSet", "Change feed: kept 3600 s, with before images");
    says("indexDeclared", "ByAge");
    says("indexDeclared", "table");
    assert!(
        !seen["indexDropped"].to_string().contains("ByAge"),
        "{seen}"
    );
    says("ttlSet", "Time to live: per entity");
    says(
        "policies",
        "readers · r · from any time · until 2030-01-01T00:00:00",
    );
    assert!(!seen["policies"].to_string().contains("writers"), "{seen}");
    says("policyFacts", "Access policies: readers.");
    says("readOnlyFeed", "AuthorizationPermissionMismatch");
    says("settings", "ByAmount");
    says("settings", "ready");
    says("settings", "Change feed: kept");
    says("tail", "insert");
    says("tail", "(s7, o1)");
    says("dashboard", "REST requests");
    says("readOnlyWho", "token");
    says("readOnlyDelete", "AuthorizationPermissionMismatch");
    assert_eq!(seen["pageErrors"], serde_json::json!([]));
    assert!(std::fs::metadata(&screenshot).unwrap().len() > 10_000);

    // What the page did, read back over gRPC.
    let ada = client
        .get_entity(common::get_request("Console", "p1", "ada"))
        .await
        .unwrap()
        .into_inner();
    let age = ada.properties["Age"].clone();
    assert_eq!(age, common::int64(37));
    let tables = client
        .list_tables(pb::ListTablesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = tables.tables.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"Console"),
        "the read-only token deleted it: {names:?}"
    );
    assert!(!names.contains(&"Forged"), "{names:?}");
    let settings = client
        .get_table(pb::GetTableRequest {
            table: "Console".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let feed = (
        settings.change_feed,
        settings.change_feed_retention_seconds,
        settings.change_feed_before_images,
    );
    assert_eq!(feed, (true, 3600, true), "{settings:?}");
    assert!(settings.time_to_live, "{settings:?}");
    assert!(settings.indexes.is_empty(), "{:?}", settings.indexes);
    let policies: Vec<(&str, &str)> = (settings.access_policies.iter())
        .map(|policy| (policy.id.as_str(), policy.permissions.as_str()))
        .collect();
    assert_eq!(policies, [("readers", "r")], "{settings:?}");
    let (cookie, csrf) = sign_in(&console, &key).await;
    let signed = format!("Cookie: {cookie}\r\nx-trestle-csrf: {csrf}\r\n");
    let service = "/api/devstoreaccount1/?restype=service&comp=properties";
    let (status, properties) = http(&console, "GET", service, &signed, "").await;
    assert_eq!(status, 200, "{properties}");
    assert_eq!(properties.matches("<CorsRule>").count(), 1, "{properties}");
    assert!(
        properties.contains("<AllowedOrigins>https://app.example</AllowedOrigins>"),
        "{properties}"
    );
}

#[tokio::test]
async fn calls_without_a_session_or_its_csrf_token_change_nothing() {
    let (server, console, keys) = server().await;
    let create = r#"{"TableName":"Sneaky"}"#;
    let json = "Content-Type: application/json\r\n";
    // No session.
    let (status, answer) = http(
        &console,
        "POST",
        "/api/devstoreaccount1/Tables",
        json,
        create,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("sign in to the console first"), "{answer}");
    // A bad credential opens none.
    let (status, answer) = http(&console, "POST", "/session", "", r#"{"credential":"nope"}"#).await;
    assert_eq!(status, 403, "{answer}");
    assert!(!answer.contains("set-cookie"), "{answer}");
    let (status, _) = http(&console, "POST", "/session", "", "not json").await;
    assert_eq!(status, 400);
    let oversized = format!(r#"{{"credential":"{}"}}"#, "k".repeat(64 * 1024));
    let (status, _) = http(&console, "POST", "/session", "", &oversized).await;
    assert_eq!(status, 413);

    let key = keys.signing_key().secret_text();
    let (cookie, csrf) = sign_in(&console, &key).await;
    let with_cookie = format!("Cookie: {cookie}\r\n{json}");
    // The cookie without the CSRF token, or with another token.
    for headers in [
        with_cookie.clone(),
        format!("{with_cookie}x-trestle-csrf: {}\r\n", "0".repeat(64)),
    ] {
        let (status, answer) = http(
            &console,
            "POST",
            "/api/devstoreaccount1/Tables",
            &headers,
            create,
        )
        .await;
        assert_eq!(status, 403, "{answer}");
        assert!(answer.contains("x-trestle-csrf"), "{answer}");
    }
    let signed = format!("{with_cookie}x-trestle-csrf: {csrf}\r\n");
    // A credential of the request's own is refused: the console acts as its session only.
    let own = format!("{signed}Authorization: Bearer {key}\r\n");
    let (status, answer) = http(
        &console,
        "POST",
        "/api/devstoreaccount1/Tables",
        &own,
        create,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    let sas = "/api/devstoreaccount1/Tables?sv=2019-02-02&sig=forged";
    let (status, _) = http(&console, "POST", sas, &signed, create).await;
    assert_eq!(status, 403);
    let mut client = server.client_as(&key).await;
    let listed = client
        .list_tables(pb::ListTablesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tables.is_empty(), "{:?}", listed.tables);

    // Signed in, the same call is made as the session's key; the console's own calls work.
    let (status, answer) = http(
        &console,
        "POST",
        "/api/devstoreaccount1/Tables",
        &signed,
        create,
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = http(&console, "GET", "/console/tables/Sneaky", &signed, "").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""name":"Sneaky""#), "{answer}");
    let (status, answer) = http(
        &console,
        "GET",
        "/console/tables/Sneaky/changes",
        &signed,
        "",
    )
    .await;
    assert_eq!(status, 400, "no feed: {answer}");
    let bad_position = "/console/tables/Sneaky/changes?after=x";
    let (status, answer) = http(&console, "GET", bad_position, &signed, "").await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = http(&console, "GET", "/console/metrics", &signed, "").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("trestle_requests_total"), "{answer}");

    // Signed out, the cookie is worth nothing.
    let (status, _) = http(&console, "DELETE", "/session", &signed, "").await;
    assert_eq!(status, 204);
    let (status, _) = http(&console, "GET", "/console/tables/Sneaky", &signed, "").await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_token_sees_only_what_it_grants() {
    let (server, console, keys) = server().await;
    let key = keys.signing_key().secret_text();
    let mut client = server.client_as(&key).await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Mine".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let token = access::mint(
        keys.signing_key(),
        &Grant::new(Permissions::parse("r").unwrap(), 3600),
    );
    let (cookie, csrf) = sign_in(&console, &token).await;
    let signed = format!("Cookie: {cookie}\r\nx-trestle-csrf: {csrf}\r\n");
    // The metrics describe every table's traffic: an account key's only.
    let (status, answer) = http(&console, "GET", "/console/metrics", &signed, "").await;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("reads the server's metrics"), "{answer}");
    let (status, answer) = http(&console, "GET", "/console/tables/Mine", &signed, "").await;
    assert_eq!(status, 200, "{answer}");
    let json = "Content-Type: application/json\r\n";
    let write = format!("{signed}{json}");
    let entity = r#"{"PartitionKey":"p","RowKey":"r"}"#;
    let (status, answer) = http(
        &console,
        "POST",
        "/api/devstoreaccount1/Mine",
        &write,
        entity,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
}

/// The settings calls change a table as gRPC's `SetChangeFeed`, `SetTimeToLive`, `CreateIndex`
/// and `DropIndex` do, for a caller who may manage the table only; a bad body is refused with
/// what is wrong, and changes nothing.
#[tokio::test]
async fn settings_change_only_for_a_manager_and_bad_bodies_change_nothing() {
    let (server, console, keys) = server().await;
    let key = keys.signing_key().secret_text();
    let mut client = server.client_as(&key).await;
    client
        .create_table(pb::CreateTableRequest {
            table: "Tuned".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let json = "Content-Type: application/json\r\n";
    let (cookie, csrf) = sign_in(&console, &key).await;
    let signed = format!("Cookie: {cookie}\r\nx-trestle-csrf: {csrf}\r\n{json}");
    let settings = "/console/tables/Tuned/settings";
    let indexes = "/console/tables/Tuned/indexes";
    for (path, body, says) in [
        (settings, "not json", "the body is not"),
        (
            settings,
            r#"{"changeFeed": {"retention": 5}}"#,
            "unknown field",
        ),
        (settings, r#"{"feed": null}"#, "unknown field"),
        (
            settings,
            r#"{"changeFeed": {"retentionSeconds": 99999999999}}"#,
            "retention",
        ),
        (
            settings,
            r#"{"timeToLive": {"defaultSeconds": -1}}"#,
            "the body is not",
        ),
        (
            indexes,
            r#"{"name": "ByAge", "paths": ["Age"], "scope": "galaxy"}"#,
            "galaxy",
        ),
        (indexes, r#"{"name": "ByAge", "paths": []}"#, "ByAge"),
        (indexes, r#"{"name": "", "paths": ["Age"]}"#, "name"),
    ] {
        let method = if path == settings { "PUT" } else { "POST" };
        let (status, answer) = http(&console, method, path, &signed, body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer.contains(says), "{body}: {answer}");
    }
    let (status, answer) = http(
        &console,
        "DELETE",
        "/console/tables/Tuned/indexes/Nope",
        &signed,
        "",
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = http(
        &console,
        "PUT",
        "/console/tables/Gone/settings",
        &signed,
        "{}",
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    let untouched = |table: pb::Table| {
        assert!(!table.change_feed && !table.time_to_live, "{table:?}");
        assert!(table.indexes.is_empty(), "{table:?}");
    };
    let describe = || pb::GetTableRequest {
        table: "Tuned".into(),
    };
    untouched(client.get_table(describe()).await.unwrap().into_inner());

    // A token that may read the table may not change it; without the CSRF token, nobody may.
    let token = access::mint(
        keys.signing_key(),
        &Grant::new(Permissions::parse("raud").unwrap(), 3600),
    );
    let (token_cookie, token_csrf) = sign_in(&console, &token).await;
    let reader = format!("Cookie: {token_cookie}\r\nx-trestle-csrf: {token_csrf}\r\n{json}");
    let no_csrf = format!("Cookie: {cookie}\r\n{json}");
    let feed_on = r#"{"changeFeed": {"retentionSeconds": 60}}"#;
    let by_age = r#"{"name": "ByAge", "paths": ["Age"]}"#;
    for headers in [&reader, &no_csrf] {
        let (status, answer) = http(&console, "PUT", settings, headers, feed_on).await;
        assert_eq!(status, 403, "{answer}");
        let (status, answer) = http(&console, "POST", indexes, headers, by_age).await;
        assert_eq!(status, 403, "{answer}");
    }
    untouched(client.get_table(describe()).await.unwrap().into_inner());

    // The account key changes each, and each answer is the table's settings after it.
    let both = r#"{"changeFeed": {"retentionSeconds": 60, "beforeImages": true},
                   "timeToLive": {"defaultSeconds": 30}}"#;
    let (status, answer) = http(&console, "PUT", settings, &signed, both).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""retentionSeconds":60"#), "{answer}");
    assert!(answer.contains(r#""defaultSeconds":30"#), "{answer}");
    let (status, answer) = http(&console, "POST", indexes, &signed, by_age).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""name":"ByAge""#), "{answer}");
    let table = client.get_table(describe()).await.unwrap().into_inner();
    assert!(
        table.change_feed && table.change_feed_before_images,
        "{table:?}"
    );
    assert_eq!(table.change_feed_retention_seconds, 60);
    assert_eq!(
        (table.time_to_live, table.default_time_to_live_seconds),
        (true, 30)
    );
    assert_eq!(table.indexes.len(), 1, "{:?}", table.indexes);
    // Only what a body names changes; null turns a setting off.
    let (status, answer) = http(
        &console,
        "PUT",
        settings,
        &signed,
        r#"{"timeToLive": null}"#,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = http(
        &console,
        "DELETE",
        "/console/tables/Tuned/indexes/ByAge",
        &signed,
        "",
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let table = client.get_table(describe()).await.unwrap().into_inner();
    assert!(table.change_feed && !table.time_to_live, "{table:?}");
    assert!(table.indexes.is_empty(), "{table:?}");
}
