//! The end-to-end test harness: a real Trestle server in-process on an ephemeral loopback port over
//! a temporary data directory (or, with `TRESTLE_TEST_STORE=postgres`, a fresh PostgreSQL
//! database), and helpers to build requests and read errors.

#![allow(dead_code, unreachable_pub)]

pub mod bank;
pub mod oidc;
pub mod postgres;
pub mod rest;
pub mod skip;
pub mod tls;

use std::collections::BTreeMap;

use tokio::sync::oneshot;
use tonic::{Code, Status};
use tonic_types::StatusExt;
use trestle_proto::pb;
use trestle_server::storage::StoreConfig;

/// The generated gRPC client: these tests speak the wire contract directly.
pub type RawClient = pb::table_service_client::TableServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
>;

/// Sends `authorization: Bearer <credential>` with every request, when set.
#[derive(Clone, Default)]
pub struct Bearer(pub Option<String>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(credential) = &self.0 {
            let value = format!("Bearer {credential}").parse().expect("ASCII");
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }
}

/// A running server; shuts down when dropped.
pub struct TestServer {
    pub addr: std::net::SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    _data_dir: tempfile::TempDir,
}

/// Sends the in-process servers' log (warnings and errors, or what `RUST_LOG` asks for) to the
/// test's captured output, shown when the test fails: a failure the server logged says why.
fn show_server_log() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _already = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

impl TestServer {
    /// Binds 127.0.0.1:0 first, then serves: no port races, no sleeps.
    pub async fn start() -> TestServer {
        TestServer::start_with(|_| {}).await
    }

    /// Starts a server whose configuration `configure` adjusts, over the store the run tests:
    /// sled, or with `TRESTLE_TEST_STORE=postgres` a fresh PostgreSQL database
    /// ([`postgres::conformance_database`]).
    pub async fn start_with(configure: impl FnOnce(&mut trestle_server::Config)) -> TestServer {
        TestServer::start_serving(None, configure).await
    }

    /// [`TestServer::start_with`], serving the REST endpoint on `rest` too.
    pub async fn start_with_rest(
        rest: std::net::TcpListener,
        configure: impl FnOnce(&mut trestle_server::Config),
    ) -> TestServer {
        TestServer::start_serving(Some(rest), configure).await
    }

    async fn start_serving(
        rest: Option<std::net::TcpListener>,
        configure: impl FnOnce(&mut trestle_server::Config),
    ) -> TestServer {
        show_server_log();
        let data_dir = tempfile::tempdir().expect("temp dir");
        let database = tokio::task::spawn_blocking(postgres::conformance_database)
            .await
            .expect("the conformance database");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (shutdown, stop) = oneshot::channel::<()>();
        let mut config = trestle_server::Config::over(match database {
            Some(url) => StoreConfig::postgres(url),
            None => StoreConfig::embedded(data_dir.path()),
        });
        configure(&mut config);
        tokio::spawn(async move {
            let listeners = trestle_server::Listeners {
                grpc: listener,
                rest,
            };
            let served = trestle_server::serve(listeners, config, async {
                let _ = stop.await;
            })
            .await;
            match served {
                // The test ended (its runtime shutting down) while the server was starting.
                Err(trestle_server::ServeError::Startup(error)) if error.is_cancelled() => {}
                other => other.expect("server failed"),
            }
        });
        TestServer {
            addr,
            shutdown: Some(shutdown),
            _data_dir: data_dir,
        }
    }

    /// The server's address as a URI.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client connected to this server, with no credential.
    pub async fn client(&self) -> RawClient {
        self.client_with(Bearer(None)).await
    }

    /// A client sending `credential` (a token or an account key) with every request.
    pub async fn client_as(&self, credential: &str) -> RawClient {
        self.client_with(Bearer(Some(credential.to_owned()))).await
    }

    async fn client_with(&self, bearer: Bearer) -> RawClient {
        let channel = tonic::transport::Endpoint::from_shared(self.endpoint())
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        pb::table_service_client::TableServiceClient::with_interceptor(channel, bearer)
    }

    /// An SDK client connected to this server.
    pub async fn sdk(&self) -> trestle_client::Client {
        trestle_client::Client::connect(self.endpoint())
            .await
            .expect("connect")
    }

    /// A client with a fresh table of the given name.
    pub async fn client_with_table(&self, table: &str) -> RawClient {
        let mut client = self.client().await;
        client
            .create_table(pb::CreateTableRequest {
                table: table.into(),
                ..Default::default()
            })
            .await
            .expect("create table");
        client
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// Builds a property value.
pub fn string(s: &str) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::StringValue(s.into())),
    }
}

pub fn int32(v: i32) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Int32Value(v)),
    }
}

pub fn int64(v: i64) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Int64Value(v)),
    }
}

pub fn binary(v: Vec<u8>) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::BinaryValue(v)),
    }
}

/// An entity with the given properties.
pub fn entity(pk: &str, rk: &str, properties: &[(&str, pb::Value)]) -> pb::Entity {
    pb::Entity {
        partition_key: pk.into(),
        row_key: rk.into(),
        properties: properties
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

pub fn insert_request(table: &str, entity: pb::Entity) -> pb::InsertEntityRequest {
    pb::InsertEntityRequest {
        table: table.into(),
        entity: Some(entity),
        ..Default::default()
    }
}

pub fn get_request(table: &str, pk: &str, rk: &str) -> pb::GetEntityRequest {
    pb::GetEntityRequest {
        table: table.into(),
        partition_key: pk.into(),
        row_key: rk.into(),
        select: vec![],
    }
}

/// The `ErrorInfo.reason` of a status.
pub fn reason(status: &Status) -> String {
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_default()
}

/// The `operationIndex` of a transaction error.
pub fn operation_index(status: &Status) -> Option<usize> {
    let details = status.get_error_details();
    let info = details.error_info()?;
    info.metadata
        .get("operationIndex")
        .map(|i| i.parse().expect("numeric index"))
}

/// Asserts the status code, the Azure reason and the `trestle` domain of an error.
#[track_caller]
pub fn assert_error<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: Code,
    expected_reason: &str,
) -> Status {
    let status = result.expect_err("expected an error");
    assert_eq!(status.code(), code, "code of {status:?}");
    assert_eq!(reason(&status), expected_reason, "reason of {status:?}");
    let details = status.get_error_details();
    assert_eq!(details.error_info().expect("ErrorInfo").domain, "trestle");
    status
}

/// A transaction operation.
pub fn tx_insert(entity: pb::Entity) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    pb::TransactionOperation {
        operation: Some(Operation::Insert(pb::InsertOperation {
            entity: Some(entity),
        })),
    }
}

pub fn tx_update(entity: pb::Entity, if_match: &str) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    pb::TransactionOperation {
        operation: Some(Operation::Update(pb::UpdateOperation {
            entity: Some(entity),
            if_match: if_match.into(),
        })),
    }
}

pub fn tx_merge(entity: pb::Entity, if_match: &str) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    pb::TransactionOperation {
        operation: Some(Operation::Merge(pb::MergeOperation {
            entity: Some(entity),
            if_match: if_match.into(),
        })),
    }
}

pub fn tx_upsert(entity: pb::Entity, mode: pb::UpsertMode) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    pb::TransactionOperation {
        operation: Some(Operation::Upsert(pb::UpsertOperation {
            entity: Some(entity),
            mode: mode as i32,
        })),
    }
}

pub fn tx_delete(row_key: &str, if_match: &str) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    pb::TransactionOperation {
        operation: Some(Operation::Delete(pb::DeleteOperation {
            row_key: row_key.into(),
            if_match: if_match.into(),
        })),
    }
}

pub fn tx_check(row_key: &str, if_match: &str, must_not_exist: bool) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    pb::TransactionOperation {
        operation: Some(Operation::Check(pb::CheckOperation {
            row_key: row_key.into(),
            if_match: if_match.into(),
            must_not_exist,
        })),
    }
}

pub fn transaction(
    table: &str,
    pk: &str,
    operations: Vec<pb::TransactionOperation>,
) -> pb::SubmitTransactionRequest {
    pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: table.into(),
        partition_key: pk.into(),
        operations,
    }
}

/// Inserts `rows` entities into partition `pk` of `table`, 100 per transaction: row keys `000000`,
/// `000001`, … and `V` = the row's place in its transaction.
pub async fn fill_partition(client: &mut RawClient, table: &str, pk: &str, rows: usize) {
    for first in (0..rows).step_by(100) {
        let ops = (first..rows.min(first + 100))
            .map(|n| {
                let v = int32((n - first) as i32);
                tx_insert(entity(pk, &format!("{n:06}"), &[("V", v)]))
            })
            .collect();
        client
            .submit_transaction(transaction(table, pk, ops))
            .await
            .unwrap();
    }
}

/// Follows continuation tokens to the end of a query; returns every entity and the page sizes.
pub async fn query_all(
    client: &mut RawClient,
    request: pb::QueryEntitiesRequest,
) -> (Vec<pb::Entity>, Vec<usize>) {
    let mut request = request;
    let mut entities = Vec::new();
    let mut pages = Vec::new();
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .expect("query page")
            .into_inner();
        pages.push(page.entities.len());
        entities.extend(page.entities);
        if page.continuation_token.is_empty() {
            return (entities, pages);
        }
        request.continuation_token = page.continuation_token;
    }
}

/// Every entity a server stream of `request` yields.
pub async fn scan_all(
    client: &mut RawClient,
    request: pb::QueryEntitiesRequest,
) -> Vec<pb::Entity> {
    let mut stream = client.scan_entities(request).await.unwrap().into_inner();
    let mut entities = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        entities.extend(batch.entities);
    }
    entities
}

/// The (PartitionKey, RowKey) pairs of entities.
pub fn keys(entities: &[pb::Entity]) -> Vec<(String, String)> {
    entities
        .iter()
        .map(|e| (e.partition_key.clone(), e.row_key.clone()))
        .collect()
}

/// Creates `table`, waiting while a deleted namesake is still being reclaimed.
pub async fn create_when_reclaimed(client: &mut RawClient, table: &str) -> pb::Table {
    loop {
        let request = pb::CreateTableRequest {
            table: table.into(),
            ..Default::default()
        };
        match client.create_table(request).await {
            Ok(created) => return created.into_inner(),
            Err(status) if reason(&status) == "TableBeingDeleted" => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            Err(status) => panic!("unexpected {status:?}"),
        }
    }
}
