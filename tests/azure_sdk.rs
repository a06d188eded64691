//! The Azure Table REST endpoint under the official SDKs: `tests/azure-sdk/python_tables.py`
//! (azure-data-tables, from PyPI) and `tests/azure-sdk/js_tables.mjs` (@azure/data-tables, from
//! npm) run against a real server, and an entity crosses between the protocols with its types,
//! ETag and Timestamp intact. `.ci/run` installs both SDKs (a venv in `target/azure-sdk-venv`,
//! `npm ci` in `tests/azure-sdk`); elsewhere a missing SDK skips its part with a message, unless
//! `TRESTLE_REQUIRE_AZURE_SDKS=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::oidc::{Provider, Signer};
use common::TestServer;
use trestle_client::{DateTime, Properties, Value};
use trestle_proto::access::{self, Grant, KeyRing, Permissions};
use trestle_server::auth::Authenticator;

const SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/azure-sdk");

/// A server with the REST endpoint; its account URL.
async fn server() -> (TestServer, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rest = format!("http://{}/devstoreaccount1", listener.local_addr().unwrap());
    let server = TestServer::start_with_rest(listener, |_| {}).await;
    (server, rest)
}

fn required() -> bool {
    std::env::var("TRESTLE_REQUIRE_AZURE_SDKS").is_ok_and(|v| v == "1")
}

/// The Python with azure-data-tables: `TRESTLE_AZURE_PYTHON`, or the venv `.ci/run` makes.
fn python() -> Option<PathBuf> {
    let candidate = std::env::var_os("TRESTLE_AZURE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/azure-sdk-venv/bin/python")
        });
    let usable = Command::new(&candidate)
        .args(["-c", "import azure.data.tables"])
        .output()
        .is_ok_and(|out| out.status.success());
    usable.then_some(candidate)
}

fn node_sdk_installed() -> bool {
    Path::new(SDK_DIR)
        .join("node_modules/@azure/data-tables")
        .exists()
        && Command::new("node").arg("--version").output().is_ok()
}

/// Runs `program args` with the endpoint (and `env`) in its environment; its stdout, or a panic
/// with both streams.
async fn run(program: &Path, args: &[&str], endpoint: &str, env: &[(&str, &str)]) -> String {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(SDK_DIR)
        .env("TRESTLE_REST_ENDPOINT", endpoint)
        .envs(env.iter().copied());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("run the SDK's script");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{}\n{stdout}\n{}",
        program.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Why the Python SDK's tests skip.
const NO_PYTHON_SDK: &str = "no Python with azure-data-tables: `pip install azure-data-tables` \
     (or set TRESTLE_AZURE_PYTHON to a Python that has it)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_works_unchanged_and_its_entities_cross_to_grpc() {
    let Some(python) = python() else {
        assert!(!required(), "azure-data-tables is not installed");
        common::skip::skipped(
            "the_python_sdk_works_unchanged_and_its_entities_cross_to_grpc",
            NO_PYTHON_SDK,
        );
        return;
    };
    let (server, endpoint) = server().await;
    // Written over gRPC, for the Python SDK to read with its types.
    let from_grpc = server.sdk().await.table("FromGrpc");
    from_grpc.create().await.unwrap();
    let typed = Properties::default()
        .with("Int64", Value::Int64(-(1 << 60)))
        .with("Double", Value::Double(2.0))
        .with(
            "When",
            "1999-12-31T23:59:59.9999999Z".parse::<DateTime>().unwrap(),
        )
        .with(
            "Guid",
            Value::Guid("00112233-4455-6677-8899-aabbccddeeff".parse().unwrap()),
        )
        .with("Bytes", Value::Binary(b"grpc".to_vec()));
    from_grpc
        .insert(("typed", "from-grpc"), &typed)
        .await
        .unwrap();

    let out = run(&python, &["python_tables.py"], &endpoint, &[]).await;
    assert!(out.contains("python sdk: ok"), "{out}");

    // Read over gRPC with the Rust SDK: the same types, ETag and Timestamp.
    let table = server.sdk().await.table("CrossProtocol");
    let entity = table.get::<Properties>(("typed", "all")).await.unwrap();
    let value = |name: &str| entity.value.0.get(name).cloned();
    assert_eq!(value("Text"), Some(Value::String("héllo".into())));
    assert_eq!(value("Int32"), Some(Value::Int32(i32::MAX)));
    assert_eq!(value("Int64"), Some(Value::Int64((1 << 53) + 1)));
    assert_eq!(value("Double"), Some(Value::Double(1.0)));
    assert_eq!(value("Bool"), Some(Value::Bool(true)));
    let when = "2024-02-29T12:30:45.123456Z".parse::<DateTime>().unwrap();
    assert_eq!(value("When"), Some(Value::DateTime(when)));
    assert_eq!(
        value("Guid"),
        Some(Value::Guid(
            "6f9619ff-8b86-d011-b42d-00c04fc964ff".parse().unwrap()
        ))
    );
    assert_eq!(value("Bytes"), Some(Value::Binary(vec![0, 1, 0xfe, 0xff])));
    let etag_line = out.lines().find_map(|l| l.strip_prefix("etag ")).unwrap();
    assert_eq!(entity.etag.as_str(), etag_line);
    let timestamp_line = out
        .lines()
        .find_map(|l| l.strip_prefix("timestamp "))
        .unwrap();
    let timestamp = entity.timestamp.to_rfc3339();
    assert_eq!(
        timestamp[..26],
        timestamp_line.replace("+00:00", "Z")[..26],
        "the Timestamp to the microsecond Python keeps"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_key_file_the_sdk_signs_with_its_keys_and_not_the_development_key() {
    let Some(python) = python() else {
        assert!(!required(), "azure-data-tables is not installed");
        common::skip::skipped(
            "with_a_key_file_the_sdk_signs_with_its_keys_and_not_the_development_key",
            NO_PYTHON_SDK,
        );
        return;
    };
    let keys = KeyRing::generate().unwrap();
    let account_key = keys.signing_key().secret_base64();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}/devstoreaccount1", listener.local_addr().unwrap());
    let server_keys = keys.clone();
    let _server = TestServer::start_with_rest(listener, move |config| {
        config.authenticator = Authenticator::with_keys(server_keys);
    })
    .await;
    let mut grant = Grant::new(Permissions::READ, 600);
    grant.table = Some("PyKeyed".into());
    let read_token = access::mint(keys.signing_key(), &grant);
    let env = [
        ("TRESTLE_ACCOUNT_KEY", account_key.as_str()),
        ("TRESTLE_READ_TOKEN", read_token.as_str()),
    ];
    let out = run(&python, &["python_tables.py", "keyed"], &endpoint, &env).await;
    assert!(out.contains("python sdk, keyed: ok"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_js_sdk_works_unchanged() {
    if !node_sdk_installed() {
        assert!(
            !required(),
            "@azure/data-tables is not installed in tests/azure-sdk"
        );
        common::skip::skipped(
            "the_js_sdk_works_unchanged",
            "no @azure/data-tables: run `npm ci` in tests/azure-sdk",
        );
        return;
    }
    let (_server, endpoint) = server().await;
    let out = run(Path::new("node"), &["js_tables.mjs"], &endpoint, &[]).await;
    assert!(out.contains("js sdk: ok"), "{out}");
}

/// Written over gRPC: a person whose address and tags are documents holding every leaf type.
async fn write_documents(server: &TestServer) {
    let table = server.sdk().await.table("Docs");
    table.create().await.unwrap();
    let address = [
        ("Big", Value::Int64((1 << 60) + 1)),
        ("City", Value::from("Seattle")),
        ("Gone", Value::Null),
        (
            "Id",
            Value::Guid("00112233-4455-6677-8899-aabbccddeeff".parse().unwrap()),
        ),
        ("Ok", Value::Bool(true)),
        ("Ratio", Value::Double(1.0)),
        ("Raw", Value::Binary(vec![1, 2])),
        (
            "Since",
            Value::DateTime("2024-02-29T12:30:45.1234567Z".parse().unwrap()),
        ),
        ("Zip", Value::Int32(98101)),
    ];
    let person = Properties::default()
        .with("Name", "Ada")
        .with(
            "Address",
            Value::Object(address.map(|(n, v)| (n.to_owned(), v)).into()),
        )
        .with(
            "Tags",
            Value::Array(vec![
                "x".into(),
                Value::Int32(2),
                Value::Null,
                Value::Array(Vec::new()),
            ]),
        );
    table.insert(("people", "ada"), &person).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sdks_read_a_document_as_its_json_text() {
    let python = python();
    let node = node_sdk_installed();
    if python.is_none() || !node {
        assert!(!required(), "an Azure SDK is not installed");
        common::skip::skipped(
            "both_sdks_read_a_document_as_its_json_text",
            "needs azure-data-tables and @azure/data-tables",
        );
        return;
    }
    let (server, endpoint) = server().await;
    write_documents(&server).await;
    let python = python.unwrap();
    let out = run(&python, &["python_tables.py", "documents"], &endpoint, &[]).await;
    assert!(out.contains("python sdk, documents: ok"), "{out}");
    let out = run(
        Path::new("node"),
        &["js_tables.mjs", "documents"],
        &endpoint,
        &[],
    )
    .await;
    assert!(out.contains("js sdk, documents: ok"), "{out}");
}

/// The REST endpoint over TLS (`--rest-tls-cert`, `--rest-tls-key`): both official SDKs talk
/// `https` to it, trusting the test's CA (`REQUESTS_CA_BUNDLE`, `NODE_EXTRA_CA_CERTS`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sdks_talk_https_to_the_rest_endpoint_with_a_certificate() {
    let python = python();
    if python.is_none() || !node_sdk_installed() {
        assert!(!required(), "an Azure SDK is not installed");
        common::skip::skipped(
            "both_sdks_talk_https_to_the_rest_endpoint_with_a_certificate",
            "needs azure-data-tables and @azure/data-tables",
        );
        return;
    }
    let certificates = common::tls::certificates();
    let ca_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca_file.path(), &certificates.ca_pem).unwrap();
    let ca = ca_file.path().to_str().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let endpoint = format!("https://localhost:{port}/devstoreaccount1");
    let identity = certificates.identity.clone();
    let _server = TestServer::start_with_rest(listener, move |config| {
        config.rest_tls = Some(identity);
    })
    .await;
    let env = [("REQUESTS_CA_BUNDLE", ca)];
    let out = run(
        &python.unwrap(),
        &["python_tables.py", "tls"],
        &endpoint,
        &env,
    )
    .await;
    assert!(out.contains("python sdk, tls: ok"), "{out}");
    let env = [("NODE_EXTRA_CA_CERTS", ca)];
    let out = run(
        Path::new("node"),
        &["js_tables.mjs", "tls"],
        &endpoint,
        &env,
    )
    .await;
    assert!(out.contains("js sdk, tls: ok"), "{out}");
}

/// OAuth bearer tokens (`--oauth-jwks`) through both SDKs' `TokenCredential` path, over https:
/// tokens minted by a test identity provider for Azure's data roles, and an expired one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sdks_authenticate_with_oauth_bearer_tokens() {
    let python = python();
    if python.is_none() || !node_sdk_installed() {
        assert!(!required(), "an Azure SDK is not installed");
        common::skip::skipped(
            "both_sdks_authenticate_with_oauth_bearer_tokens",
            "needs azure-data-tables and @azure/data-tables",
        );
        return;
    }
    let provider = Provider::new();
    let dir = tempfile::tempdir().unwrap();
    let validator = provider.validator(&dir.path().join("jwks.json"));
    let certificates = common::tls::certificates();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &certificates.ca_pem).unwrap();
    let ca = ca_file.to_str().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let endpoint = format!("https://localhost:{port}/devstoreaccount1");
    let identity = certificates.identity.clone();
    let _server = TestServer::start_with_rest(listener, move |config| {
        config.rest_tls = Some(identity);
        config.authenticator = Authenticator::open().with_oidc(validator);
    })
    .await;
    let contributor = provider.token(
        Signer::Rsa,
        &Provider::claims(&["Storage Table Data Contributor"]),
    );
    let reader = provider.token(
        Signer::Ec,
        &Provider::claims(&["Storage Table Data Reader"]),
    );
    let mut expired_claims = Provider::claims(&["Storage Table Data Contributor"]);
    expired_claims["exp"] = (common::oidc::now() - 3600).into();
    let expired = provider.token(Signer::Rsa, &expired_claims);
    let tokens = [
        ("TRESTLE_OAUTH_CONTRIBUTOR", contributor.as_str()),
        ("TRESTLE_OAUTH_READER", reader.as_str()),
        ("TRESTLE_OAUTH_EXPIRED", expired.as_str()),
    ];
    let env = [&tokens[..], &[("REQUESTS_CA_BUNDLE", ca)]].concat();
    let out = run(
        &python.unwrap(),
        &["python_tables.py", "oauth"],
        &endpoint,
        &env,
    )
    .await;
    assert!(out.contains("python sdk, oauth: ok"), "{out}");
    let env = [&tokens[..], &[("NODE_EXTRA_CA_CERTS", ca)]].concat();
    let out = run(
        Path::new("node"),
        &["js_tables.mjs", "oauth"],
        &endpoint,
        &env,
    )
    .await;
    assert!(out.contains("js sdk, oauth: ok"), "{out}");
}
