//! What the server's integration tests share: the built `trestle-server` binary as a child process
//! on an ephemeral port, requests and entities, and filling a table through the engine.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trestle_proto::pb;

/// Runs a `trestle-server` tool (`keygen`, `token`) to its exit: status, stdout, stderr.
pub fn run_tool(args: &[&str]) -> (ExitStatus, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_trestle-server"))
        .args(args)
        .output()
        .expect("run trestle-server");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A raw gRPC client of the table service.
pub type Client = pb::table_service_client::TableServiceClient<tonic::transport::Channel>;

/// A running `trestle-server` child process.
pub struct ServerProcess {
    pub child: Child,
    pub addr: String,
}

impl ServerProcess {
    /// Starts the binary on `data_dir` with default flags.
    pub fn start(data_dir: &Path) -> ServerProcess {
        ServerProcess::start_with(data_dir, &[])
    }

    /// Starts the binary on `data_dir` with `extra` flags, and reads the address it bound from its
    /// log.
    pub fn start_with(data_dir: &Path, extra: &[&str]) -> ServerProcess {
        ServerProcess::start_with_env(data_dir, extra, &[])
    }

    /// [`ServerProcess::start_with`] with `env` in the server's environment.
    pub fn start_with_env(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> ServerProcess {
        let mut child = command(data_dir, extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start trestle-server");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("server exited before serving")
                .expect("log line");
            if let Some(rest) = line.split("addr=").nth(1) {
                break rest.split_whitespace().next().expect("address").to_owned();
            }
        };
        // Keep draining the log so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        ServerProcess { child, addr }
    }

    /// Runs the binary on `data_dir` with `extra` flags to its exit, for starts that must fail:
    /// the exit status and everything it printed.
    pub fn run_to_exit(data_dir: &Path, extra: &[&str]) -> (ExitStatus, String) {
        let output = command(data_dir, extra)
            .output()
            .expect("run trestle-server");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status, printed)
    }

    pub async fn client(&self) -> Client {
        Client::connect(format!("http://{}", self.addr))
            .await
            .expect("connect")
    }

    /// A client sending `authorization: Bearer <credential>` with every request.
    pub async fn client_as(
        &self,
        credential: &str,
    ) -> pb::table_service_client::TableServiceClient<
        tonic::service::interceptor::InterceptedService<
            tonic::transport::Channel,
            impl tonic::service::Interceptor + Clone,
        >,
    > {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let value: tonic::metadata::MetadataValue<_> =
            format!("Bearer {credential}").parse().expect("ASCII");
        pb::table_service_client::TableServiceClient::with_interceptor(
            channel,
            move |mut request: tonic::Request<()>| {
                request
                    .metadata_mut()
                    .insert("authorization", value.clone());
                Ok(request)
            },
        )
    }

    /// SIGKILL: no chance to flush or clean up.
    pub fn kill_9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        self.child.wait().expect("reap")
    }
}

impl Drop for ServerProcess {
    /// A test that fails midway must not leave its server running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(data_dir: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trestle-server"));
    if !extra.contains(&"--listen") {
        command.args(["--listen", "127.0.0.1:0"]);
    }
    command.arg("--data-dir").arg(data_dir).args(extra);
    command
}

/// An entity with int64 properties.
pub fn entity(pk: &str, rk: &str, properties: &[(&str, i64)]) -> pb::Entity {
    pb::Entity {
        partition_key: pk.into(),
        row_key: rk.into(),
        properties: properties
            .iter()
            .map(|(name, v)| {
                (
                    name.to_string(),
                    pb::Value {
                        kind: Some(pb::value::Kind::Int64Value(*v)),
                    },
                )
            })
            .collect(),
        ..Default::default()
    }
}

/// A transaction operation inserting `entity`.
pub fn insert_op(entity: pb::Entity) -> pb::TransactionOperation {
    pb::TransactionOperation {
        operation: Some(pb::transaction_operation::Operation::Insert(
            pb::InsertOperation {
                entity: Some(entity),
            },
        )),
    }
}

/// Creates table `table`.
pub async fn create_table(client: &mut Client, table: &str) {
    client
        .create_table(pb::CreateTableRequest {
            table: table.into(),
            ..Default::default()
        })
        .await
        .expect("create table");
}

/// Every entity of `table`, by (pk, rk), read page by page.
pub async fn all_entities(
    client: &mut Client,
    table: &str,
) -> std::collections::BTreeMap<(String, String), pb::Entity> {
    let mut all = std::collections::BTreeMap::new();
    let mut request = pb::QueryEntitiesRequest {
        table: table.into(),
        ..Default::default()
    };
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .expect("query")
            .into_inner();
        for e in page.entities {
            all.insert((e.partition_key.clone(), e.row_key.clone()), e);
        }
        if page.continuation_token.is_empty() {
            return all;
        }
        request.continuation_token = page.continuation_token;
    }
}

/// The names of every table, in order.
pub async fn table_names(client: &mut Client) -> Vec<String> {
    let tables = client
        .list_tables(pb::ListTablesRequest::default())
        .await
        .expect("list tables")
        .into_inner()
        .tables;
    tables.into_iter().map(|t| t.name).collect()
}

/// The int64 property `name` of `entity`.
pub fn int64(entity: &pb::Entity, name: &str) -> i64 {
    match entity.properties[name].kind {
        Some(pb::value::Kind::Int64Value(v)) => v,
        ref other => panic!("{name} is {other:?}"),
    }
}

/// Fills partition `p` of `table` with 4,000 entities of 8 KiB, 32 MiB, far more than HTTP/2's
/// flow-control window and the sockets' buffers hold for a reader that stopped; then opens a
/// scan of the table, reads its first batch and returns the stream, left unread.
pub async fn stalled_scan(
    client: &mut Client,
    table: &str,
) -> tonic::Streaming<pb::ScanEntitiesResponse> {
    let blob = "x".repeat(8 * 1024);
    for chunk in 0..40 {
        let operations = (0..100)
            .map(|i| {
                let mut row = entity("p", &format!("{chunk:02}-{i:03}"), &[]);
                row.properties.insert(
                    "Blob".into(),
                    pb::Value {
                        kind: Some(pb::value::Kind::StringValue(blob.clone())),
                    },
                );
                insert_op(row)
            })
            .collect();
        client
            .submit_transaction(pb::SubmitTransactionRequest {
                idempotency_key: String::new(),
                table: table.into(),
                partition_key: "p".into(),
                operations,
            })
            .await
            .unwrap();
    }
    let mut stream = client
        .scan_entities(pb::QueryEntitiesRequest {
            table: table.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().expect("a first batch");
    stream
}

/// Inserts `rows` entities (an int32 property `V`) into partition `p` of `table`, 100 to a
/// transaction, each durable before the next.
pub fn fill(engine: &trestle_server::Engine, table: &str, rows: usize) {
    fill_sized(engine, table, rows, 0);
}

/// Fills partition `p` of `table` with `rows` entities, each with an Int32 `V` and, when
/// `blob_bytes` is not 0, a string `Blob` of that many bytes.
pub fn fill_sized(engine: &trestle_server::Engine, table: &str, rows: usize, blob_bytes: usize) {
    use trestle_server::model::{EntityKey, NewEntity, Operation, Properties, Value};
    let blob = "x".repeat(blob_bytes);
    let fill = async {
        for chunk in 0..rows.div_ceil(100) {
            let operations = (0..100.min(rows - chunk * 100))
                .map(|i| {
                    let key = EntityKey::new("p".into(), format!("{chunk:04}-{i:03}")).unwrap();
                    let mut properties = Properties::from([("V".into(), Value::Int32(i as i32))]);
                    if blob_bytes > 0 {
                        properties.insert("Blob".into(), Value::String(blob.clone()));
                    }
                    Operation::Insert(NewEntity::new(key, properties).unwrap())
                })
                .collect();
            let pending = engine
                .transact(table, "p", operations, 0, None)
                .await
                .unwrap();
            engine.wait(pending).unwrap();
        }
    };
    // A runtime of its own on a thread of its own: callers are sync tests and async ones.
    std::thread::scope(|threads| {
        let filling = threads.spawn(|| tokio::runtime::Runtime::new().unwrap().block_on(fill));
        filling.join().unwrap()
    });
}

/// A free loopback address (`127.0.0.1:port`) for a listener of a child server.
pub fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// One HTTP/1.1 request on a fresh connection; the whole answer.
pub async fn http(addr: &str, request: &str) -> String {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// The value of the sample of `name` carrying every label of `labels` (`key="value"`), or 0.
pub fn sample(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| {
            line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "))
        })
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `/metrics` scraped from `addr` now.
pub async fn scrape(addr: &str) -> String {
    http(
        addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
}
