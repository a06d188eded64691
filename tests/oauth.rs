//! OAuth bearer tokens (Entra ID style, `--oauth-jwks`): JWTs a test identity provider signs,
//! checked over gRPC and REST for signature, lifetime, issuer, audience and roles, each refusal
//! with Azure's code and nothing written; beside account keys or alone; and a key set served over
//! HTTP, fetched at start and again when the provider rolls its keys over.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::oidc::{Provider, Signer};
use common::rest::{assert_refused, exchange_with};
use common::{entity, get_request, insert_request, int32, reason, TestServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;
use trestle_proto::access::{mint, Grant, KeyRing, Permissions};
use trestle_proto::pb;
use trestle_server::auth::Authenticator;
use trestle_server::oidc::{JwksSource, Oidc};

const TABLE: &str = "Orders";
const CONTRIBUTOR: &str = "Storage Table Data Contributor";
const READER: &str = "Storage Table Data Reader";

struct Federated {
    server: TestServer,
    rest: SocketAddr,
    provider: Provider,
    _dir: tempfile::TempDir,
}

impl Federated {
    /// A server taking the provider's tokens (and `keys`' credentials, if any), with one entity
    /// `p`/`r` in table `Orders`.
    async fn start(keys: Option<KeyRing>) -> Federated {
        let provider = Provider::new();
        let dir = tempfile::tempdir().unwrap();
        let validator = provider.validator(&dir.path().join("jwks.json"));
        let (server, rest) = common::rest::server(move |config| {
            let authenticator = keys.map_or_else(Authenticator::open, Authenticator::with_keys);
            config.authenticator = authenticator.with_oidc(validator);
        })
        .await;
        let federated = Federated {
            server,
            rest,
            provider,
            _dir: dir,
        };
        let mut writer = federated.client(&[CONTRIBUTOR]).await;
        writer
            .create_table(pb::CreateTableRequest {
                table: TABLE.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        writer
            .insert_entity(insert_request(TABLE, entity("p", "r", &[("N", int32(1))])))
            .await
            .unwrap();
        federated
    }

    fn token(&self, roles: &[&str]) -> String {
        self.provider.token(Signer::Rsa, &Provider::claims(roles))
    }

    async fn client(&self, roles: &[&str]) -> common::RawClient {
        self.server.client_as(&self.token(roles)).await
    }

    /// A REST GET of `p`/`r` with `authorization`: the status and the answer.
    async fn rest_get(&self, authorization: &str) -> (u16, String) {
        let mut socket = tokio::net::TcpStream::connect(self.rest).await.unwrap();
        let path = format!("/devstoreaccount1/{TABLE}(PartitionKey='p',RowKey='r')");
        let headers = format!("Authorization: {authorization}\r\n");
        exchange_with(&mut socket, "GET", &path, &headers, b"").await
    }

    /// A REST insert of `p`/`key` with `authorization`.
    async fn rest_insert(&self, authorization: &str, key: &str) -> (u16, String) {
        let mut socket = tokio::net::TcpStream::connect(self.rest).await.unwrap();
        let headers = format!("Authorization: {authorization}\r\n");
        let body = json!({"PartitionKey": "p", "RowKey": key}).to_string();
        let path = format!("/devstoreaccount1/{TABLE}");
        exchange_with(&mut socket, "POST", &path, &headers, body.as_bytes()).await
    }

    /// Whether `p`/`key` exists, read with a Reader's token.
    async fn exists(&self, key: &str) -> bool {
        let mut reader = self.client(&[READER]).await;
        match reader.get_entity(get_request(TABLE, "p", key)).await {
            Ok(_) => true,
            Err(status) if status.code() == Code::NotFound => false,
            Err(status) => panic!("{status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_token_gets_its_roles_permissions_over_grpc_and_rest() {
    let federated = Federated::start(None).await;
    // ES256 as well as RS256; a Reader reads and lists but does not write.
    let reader = federated
        .provider
        .token(Signer::Ec, &Provider::claims(&[READER]));
    let mut client = federated.server.client_as(&reader).await;
    client
        .get_entity(get_request(TABLE, "p", "r"))
        .await
        .unwrap();
    client
        .list_tables(pb::ListTablesRequest::default())
        .await
        .unwrap();
    let refused = client
        .insert_entity(insert_request(TABLE, entity("p", "w", &[])))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert_eq!(reason(&refused), "AuthorizationPermissionMismatch");
    let bearer = format!("Bearer {reader}");
    assert_eq!(federated.rest_get(&bearer).await.0, 200);
    let answer = federated.rest_insert(&bearer, "w").await;
    assert_refused(&answer, 403, "AuthorizationPermissionMismatch");
    assert!(!federated.exists("w").await);
    // A token of both roles has the union of their permissions: it writes over REST.
    let contributor = format!("Bearer {}", federated.token(&[READER, CONTRIBUTOR]));
    assert_eq!(federated.rest_insert(&contributor, "w").await.0, 201);
    assert!(federated.exists("w").await);
}

/// A token claiming `claims`, signed right.
fn signed(federated: &Federated, claims: &Value) -> String {
    federated.provider.token(Signer::Rsa, claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_invalid_token_is_refused_with_azures_code_and_writes_nothing() {
    let federated = Federated::start(None).await;
    let now = common::oidc::now();
    let with = |field: &str, value: Value| {
        let mut claims = Provider::claims(&[CONTRIBUTOR]);
        match value {
            Value::Null => claims.as_object_mut().unwrap().remove(field),
            value => claims
                .as_object_mut()
                .unwrap()
                .insert(field.to_owned(), value),
        };
        claims
    };
    let provider = &federated.provider;
    let valid = signed(&federated, &Provider::claims(&[CONTRIBUTOR]));
    let [header, _, signature] =
        <[&str; 3]>::try_from(valid.split('.').collect::<Vec<_>>()).unwrap();
    let forged_claims = with("roles", json!([CONTRIBUTOR, "Owner"]));
    let forged_payload = {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(forged_claims.to_string())
    };
    let other_provider = Provider::of_generation(1);
    let invalid = [
        (
            "expired",
            signed(&federated, &with("exp", json!(now - 301))),
        ),
        ("without exp", signed(&federated, &with("exp", Value::Null))),
        (
            "not yet valid",
            signed(&federated, &with("nbf", json!(now + 3600))),
        ),
        (
            "for another audience",
            signed(&federated, &with("aud", json!("https://vault.azure.net"))),
        ),
        (
            "from another issuer",
            signed(&federated, &with("iss", json!("https://evil.example/v2.0"))),
        ),
        (
            "without an issuer",
            signed(&federated, &with("iss", Value::Null)),
        ),
        (
            "with a tampered payload",
            format!("{header}.{forged_payload}.{signature}"),
        ),
        (
            "signed by a key of the same id elsewhere",
            other_provider.token(Signer::Rsa, &Provider::claims(&[CONTRIBUTOR])),
        ),
        (
            "naming an unknown key",
            provider.token_with_header(
                Signer::Rsa,
                &json!({"alg": "RS256", "kid": "rsa-9"}),
                &Provider::claims(&[CONTRIBUTOR]),
            ),
        ),
        (
            "claiming another algorithm than its key's",
            provider.token_with_header(
                Signer::Ec,
                &json!({"alg": "RS256", "kid": provider.kid(Signer::Ec)}),
                &Provider::claims(&[CONTRIBUTOR]),
            ),
        ),
        (
            "unsigned (alg none)",
            format!("{}.{forged_payload}.", {
                use base64::Engine as _;
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#)
            }),
        ),
        ("cut short", valid[..valid.len() - 10].to_owned()),
    ];
    for (what, token) in &invalid {
        assert_refusal(
            &federated,
            token,
            what,
            Code::Unauthenticated,
            401,
            "InvalidAuthenticationInfo",
        )
        .await;
    }
    let roleless = [
        (
            "without roles",
            signed(&federated, &with("roles", Value::Null)),
        ),
        (
            "with an unmapped role",
            signed(
                &federated,
                &with("roles", json!(["Storage Blob Data Owner"])),
            ),
        ),
    ];
    for (what, token) in &roleless {
        assert_refusal(
            &federated,
            token,
            what,
            Code::PermissionDenied,
            403,
            "AuthorizationPermissionMismatch",
        )
        .await;
    }
    // On a server with no key file: anything else is not a credential at all.
    let keys = KeyRing::generate().unwrap();
    let own_token = mint(keys.signing_key(), &Grant::new(Permissions::READ, 60));
    for (what, token) in [
        ("a Trestle token", own_token.as_str()),
        ("a key", "c2VjcmV0"),
    ] {
        assert_refusal(
            &federated,
            token,
            what,
            Code::Unauthenticated,
            403,
            "AuthenticationFailed",
        )
        .await;
    }
    let mut anonymous = federated.server.client().await;
    let status = anonymous
        .get_entity(get_request(TABLE, "p", "r"))
        .await
        .unwrap_err();
    assert_eq!(reason(&status), "AuthenticationFailed");
}

/// Asserts that `token` (`what`) is refused with `code` over gRPC and `status` over REST, both
/// with Azure's `reason`, for a read and a write, and that the write changed nothing.
async fn assert_refusal(
    federated: &Federated,
    token: &str,
    what: &str,
    code: Code,
    status: u16,
    reason_code: &str,
) {
    let mut client = federated.server.client_as(token).await;
    for refused in [
        client
            .get_entity(get_request(TABLE, "p", "r"))
            .await
            .map(drop),
        client
            .insert_entity(insert_request(TABLE, entity("p", "x", &[])))
            .await
            .map(drop),
    ] {
        let refused = refused.expect_err(what);
        assert_eq!(
            (refused.code(), reason(&refused).as_str()),
            (code, reason_code),
            "{what}: {refused:?}"
        );
    }
    let bearer = format!("Bearer {token}");
    assert_refused(&federated.rest_get(&bearer).await, status, reason_code);
    assert_refused(
        &federated.rest_insert(&bearer, "x").await,
        status,
        reason_code,
    );
    assert!(!federated.exists("x").await, "{what} wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_server_takes_oauth_tokens_beside_its_keys_and_tokens() {
    let keys = KeyRing::generate().unwrap();
    let federated = Federated::start(Some(keys.clone())).await;
    let own_token = mint(keys.signing_key(), &Grant::new(Permissions::READ, 60));
    for credential in [
        keys.signing_key().secret_text(),
        own_token,
        federated.token(&[READER]),
    ] {
        let mut client = federated.server.client_as(&credential).await;
        client
            .get_entity(get_request(TABLE, "p", "r"))
            .await
            .unwrap();
    }
}

/// Serves `jwks` (as it is at each request) over HTTP on a loopback port; its URL.
async fn serve_jwks(jwks: Arc<Mutex<(u16, String)>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/discovery/v2.0/keys",
        listener.local_addr().unwrap()
    );
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let (status, body) = jwks.lock().unwrap().clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_set_url_is_fetched_at_start_and_again_after_the_provider_rolls_its_keys() {
    let (first, second) = (Provider::of_generation(1), Provider::of_generation(2));
    let jwks = Arc::new(Mutex::new((500, String::new())));
    let url = serve_jwks(jwks.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = first.settings(&dir.path().join("unused.json"));
    settings.jwks = JwksSource::Url(url.clone());
    settings.refresh = Duration::from_secs(1);
    // A provider that cannot answer stops the start, saying why.
    let failing = Arc::new(Oidc::new(settings.clone()).unwrap());
    let error = failing.start().await.unwrap_err().to_string();
    assert!(error.contains(&url) && error.contains("500"), "{error}");
    jwks.lock().unwrap().1 = first.jwks();
    jwks.lock().unwrap().0 = 200;
    let validator = Oidc::new(settings).unwrap();
    let server = TestServer::start_with(move |config| {
        config.authenticator = Authenticator::open().with_oidc(validator);
    })
    .await;
    let claims = Provider::claims(&[READER]);
    let mut client = server.client_as(&first.token(Signer::Rsa, &claims)).await;
    client
        .get_entity(get_request(TABLE, "p", "r"))
        .await
        .expect_err("no table yet");
    let mut rolled = server.client_as(&second.token(Signer::Rsa, &claims)).await;
    let refused = rolled
        .list_tables(pb::ListTablesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "InvalidAuthenticationInfo");
    // The provider publishes its new keys: within a refresh, tokens they sign are taken.
    jwks.lock().unwrap().1 = second.jwks();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match rolled.list_tables(pb::ListTablesRequest::default()).await {
            Ok(_) => break,
            Err(status) => assert!(tokio::time::Instant::now() < deadline, "{status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And the old keys, gone from the set, no longer sign anything.
    let refused = client
        .list_tables(pb::ListTablesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "InvalidAuthenticationInfo");
}
