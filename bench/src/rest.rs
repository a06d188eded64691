//! The REST endpoint's workloads, as an HTTP client sees them: point reads, inserts, `$batch` of
//! 100 and partition scans of 1,000 per page, over keep-alive HTTP/1.1 connections (one per
//! worker) with a small client of its own, so that the figures compare with the gRPC rows of the
//! same run. The same workloads run against Azurite (`--azurite`), signed with the development
//! key as Azurite requires, over data loaded the same way.

use std::sync::Arc;
use std::time::SystemTime;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ring::hmac;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::measure::{drive, Measurement, OpResult, Rng};
use crate::workloads::{partition_key, row_key, Plan, MAIN_TABLE, SCAN_PARTITION, SCAN_TABLE};

const ACCOUNT: &str = "devstoreaccount1";
const JSON: &str = "application/json;odata=minimalmetadata";
/// The development account's well-known key, which Azurite checks signatures with.
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Where the workloads send their requests, and whether they sign them.
#[derive(Clone)]
pub(crate) struct Endpoint {
    addr: String,
    /// SharedKeyLite with the development key (Azurite); unsigned when `None` (Trestle in open
    /// mode, where the benchmark's server runs).
    signing: Option<Arc<hmac::Key>>,
}

impl Endpoint {
    /// Trestle's REST endpoint at `addr`, in open mode.
    pub(crate) fn open(addr: &str) -> Endpoint {
        Endpoint {
            addr: addr.to_owned(),
            signing: None,
        }
    }

    /// Azurite's table endpoint at `addr` (`host:port`).
    pub(crate) fn azurite(addr: &str) -> Endpoint {
        let key = STANDARD
            .decode(DEV_KEY)
            .expect("the development key is base64");
        Endpoint {
            addr: addr.to_owned(),
            signing: Some(Arc::new(hmac::Key::new(hmac::HMAC_SHA256, &key))),
        }
    }
}

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    stream: BufReader<TcpStream>,
    signing: Option<Arc<hmac::Key>>,
}

/// A response: status, the headers the workloads read, and the body.
struct Answer {
    status: u16,
    continuation: Option<String>,
    body: Vec<u8>,
}

impl Connection {
    async fn open(endpoint: &Endpoint) -> Connection {
        let stream = TcpStream::connect(&endpoint.addr)
            .await
            .expect("connect to the REST endpoint");
        stream.set_nodelay(true).expect("nodelay");
        Connection {
            stream: BufReader::new(stream),
            signing: endpoint.signing.clone(),
        }
    }

    async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {JSON}\r\nx-ms-version: 2019-02-02\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(key) = &self.signing {
            // SharedKeyLite: the date and the resource (the path, account first), signed.
            let date = httpdate::fmt_http_date(SystemTime::now());
            let resource = path.split('?').next().unwrap_or(path);
            let to_sign = format!("{date}\n/{ACCOUNT}{resource}");
            let signature = STANDARD.encode(hmac::sign(key, to_sign.as_bytes()));
            request.push_str(&format!(
                "x-ms-date: {date}\r\nAuthorization: SharedKeyLite {ACCOUNT}:{signature}\r\n"
            ));
        }
        request.push_str("\r\n");
        let stream = self.stream.get_mut();
        stream.write_all(request.as_bytes()).await.expect("send");
        stream.write_all(body).await.expect("send body");
        let mut line = String::new();
        self.stream.read_line(&mut line).await.expect("status line");
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let (mut length, mut continuation, mut chunked) = (0usize, None, false);
        loop {
            line.clear();
            self.stream.read_line(&mut line).await.expect("header");
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').expect("a header");
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().expect("a length"),
                "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
                "x-ms-continuation-nextpartitionkey" => {
                    continuation = Some(value.trim().to_owned())
                }
                _ => {}
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.expect("body");
        // Azurite answers in chunks: each a hexadecimal size line, the bytes and a line end.
        while chunked {
            line.clear();
            self.stream.read_line(&mut line).await.expect("chunk size");
            let size = usize::from_str_radix(line.trim(), 16).expect("a chunk size");
            let start = body.len();
            body.resize(start + size + 2, 0);
            self.stream
                .read_exact(&mut body[start..])
                .await
                .expect("chunk");
            body.truncate(start + size);
            chunked = size > 0;
        }
        Answer {
            status,
            continuation,
            body,
        }
    }
}

/// One connection per worker, opened on first use.
#[derive(Clone)]
struct Connections {
    endpoint: Endpoint,
    slots: Arc<Vec<Mutex<Option<Connection>>>>,
}

impl Connections {
    fn new(endpoint: &Endpoint, workers: usize) -> Connections {
        Connections {
            endpoint: endpoint.clone(),
            slots: Arc::new((0..workers).map(|_| Mutex::new(None)).collect()),
        }
    }

    async fn call(
        &self,
        worker: usize,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let mut slot = self.slots[worker].lock().await;
        if slot.is_none() {
            *slot = Some(Connection::open(&self.endpoint).await);
        }
        slot.as_mut()
            .expect("opened")
            .call(method, path, headers, body)
            .await
    }
}

/// The JSON of an entity like the gRPC workloads' (`V` and nine small properties).
fn entity_json(pk: &str, rk: &str, v: i32) -> String {
    format!(
        r#"{{"PartitionKey":"{pk}","RowKey":"{rk}","V":{v},"S0":"value-00","S1":"value-01","S2":"value-02","S3":"value-03","S4":"value-04","L0@odata.type":"Edm.Int64","L0":"0","L1@odata.type":"Edm.Int64","L1":"{v}","L2@odata.type":"Edm.Int64","L2":"{}","L3@odata.type":"Edm.Int64","L3":"{}"}}"#,
        i64::from(v) * 2,
        i64::from(v) * 3
    )
}

/// Creates a table over REST.
async fn create_table(endpoint: &Endpoint, table: &str) {
    let mut connection = Connection::open(endpoint).await;
    let body = format!(r#"{{"TableName":"{table}"}}"#);
    let answer = connection
        .call(
            "POST",
            &format!("/{ACCOUNT}/Tables"),
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
        .await;
    assert!(
        matches!(answer.status, 201 | 204),
        "create table: {}",
        answer.status
    );
}

pub(crate) async fn point_read(endpoint: &Endpoint, plan: &Plan) -> Measurement {
    let connections = Connections::new(endpoint, 64);
    let plan = plan.clone();
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let connections = connections.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let path = format!(
            "/{ACCOUNT}/{MAIN_TABLE}(PartitionKey='{}',RowKey='{}')",
            partition_key(rng.below(plan.partitions)),
            row_key(rng.below(plan.rows_per_partition))
        );
        async move {
            let answer = connections.call(worker, "GET", &path, &[], b"").await;
            assert_eq!(
                answer.status,
                200,
                "{}",
                String::from_utf8_lossy(&answer.body)
            );
            OpResult::entities(1)
        }
    })
    .await
}

pub(crate) async fn insert(endpoint: &Endpoint, plan: &Plan) -> Measurement {
    create_table(endpoint, "RestInsertBench").await;
    let connections = Connections::new(endpoint, 64);
    drive(64, plan.warmup, plan.duration, move |worker, seq| {
        let connections = connections.clone();
        let mut rng = Rng::new((worker as u64) << 32 | seq);
        let body = entity_json(
            &format!("p{:08}", rng.below(100_000_000)),
            &format!("w{worker:02}-{seq:09}"),
            seq as i32,
        );
        async move {
            let headers = [
                ("Content-Type", "application/json"),
                ("Prefer", "return-no-content"),
            ];
            let path = format!("/{ACCOUNT}/RestInsertBench");
            let answer = connections
                .call(worker, "POST", &path, &headers, body.as_bytes())
                .await;
            assert_eq!(
                answer.status,
                204,
                "{}",
                String::from_utf8_lossy(&answer.body)
            );
            OpResult::entities(1)
        }
    })
    .await
}

/// A `$batch` body inserting `rows` (RowKey and `V`) into partition `pk` of `table`.
fn batch_body(table: &str, pk: &str, rows: impl Iterator<Item = (String, i32)>) -> String {
    let mut body =
        String::from("--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n");
    for (rk, v) in rows {
        body.push_str(&format!(
            "--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nPOST http://127.0.0.1/{ACCOUNT}/{table} HTTP/1.1\r\nContent-Type: application/json\r\nPrefer: return-no-content\r\n\r\n{}\r\n",
            entity_json(pk, &rk, v)
        ));
    }
    body.push_str("--changeset_c--\r\n--batch_b--\r\n");
    body
}

/// Loads what the point reads and scans read, over REST (for Azurite): `partitions` ×
/// `rows_per_partition` entities in the main table (`with_main`) and the scan partition (`scan`
/// rows), in `$batch`es of 100 from 8 loaders.
pub(crate) async fn load(endpoint: &Endpoint, plan: &Plan, with_main: bool, scan: u64) {
    let mut batches = Vec::new();
    if with_main {
        create_table(endpoint, MAIN_TABLE).await;
        for p in 0..plan.partitions {
            for first in (0..plan.rows_per_partition).step_by(100) {
                let last = (first + 100).min(plan.rows_per_partition);
                batches.push((MAIN_TABLE, partition_key(p), first, last));
            }
        }
    }
    if scan > 0 {
        create_table(endpoint, SCAN_TABLE).await;
        for first in (0..scan).step_by(100) {
            batches.push((
                SCAN_TABLE,
                SCAN_PARTITION.to_owned(),
                first,
                (first + 100).min(scan),
            ));
        }
    }
    let batches = Arc::new(Mutex::new(batches));
    let loaders = (0..8).map(|_| {
        let (endpoint, batches) = (endpoint.clone(), batches.clone());
        tokio::spawn(async move {
            let mut connection = Connection::open(&endpoint).await;
            while let Some((table, pk, first, last)) = batches.lock().await.pop() {
                let rows = (first..last).map(|r| (row_key(r), r as i32));
                let body = batch_body(table, &pk, rows);
                let headers = [("Content-Type", "multipart/mixed; boundary=batch_b")];
                let path = format!("/{ACCOUNT}/$batch");
                let answer = connection
                    .call("POST", &path, &headers, body.as_bytes())
                    .await;
                let text = String::from_utf8_lossy(&answer.body);
                assert!(
                    answer.status == 202 && !text.contains("odata.error"),
                    "{text}"
                );
            }
        })
    });
    for loader in loaders.collect::<Vec<_>>() {
        loader.await.expect("a loader");
    }
}

pub(crate) async fn batch_100(endpoint: &Endpoint, plan: &Plan) -> Measurement {
    create_table(endpoint, "RestTxBench").await;
    let connections = Connections::new(endpoint, 8);
    drive(8, plan.warmup, plan.duration, move |worker, seq| {
        let connections = connections.clone();
        let pk = format!("w{worker}-{seq:09}");
        let body = batch_body("RestTxBench", &pk, (0..100).map(|n| (row_key(n), n as i32)));
        async move {
            let headers = [("Content-Type", "multipart/mixed; boundary=batch_b")];
            let path = format!("/{ACCOUNT}/$batch");
            let answer = connections
                .call(worker, "POST", &path, &headers, body.as_bytes())
                .await;
            let text = String::from_utf8_lossy(&answer.body);
            assert!(
                answer.status == 202 && !text.contains("odata.error"),
                "{text}"
            );
            OpResult::entities(100)
        }
    })
    .await
}

pub(crate) async fn scan(endpoint: &Endpoint, plan: &Plan) -> Measurement {
    let connections = Connections::new(endpoint, 2);
    drive(2, plan.warmup, plan.duration, move |worker, _| {
        let connections = connections.clone();
        async move {
            let base =
                format!("/{ACCOUNT}/{SCAN_TABLE}()?$filter=PartitionKey%20eq%20%27s%27&$top=1000");
            let (mut path, mut entities) = (base.clone(), 0u64);
            loop {
                let answer = connections.call(worker, "GET", &path, &[], b"").await;
                assert_eq!(answer.status, 200);
                entities += count_entities(&answer.body);
                match answer.continuation {
                    Some(token) => {
                        path = format!("{base}&NextPartitionKey={token}&NextRowKey=next")
                    }
                    None => return OpResult { entities, extra: 0 },
                }
            }
        }
    })
    .await
}

/// The entities of a page of query results, checked to be JSON as a client reads it but not
/// built (the server's cost is the figure, and a JSON tree per entity would make the client, on
/// the same two cores, the bottleneck): each entity has one `"PartitionKey":` member.
fn count_entities(body: &[u8]) -> u64 {
    serde_json::from_slice::<serde::de::IgnoredAny>(body).expect("a page of JSON");
    let member = b"\"PartitionKey\":";
    body.windows(member.len()).filter(|w| *w == member).count() as u64
}
