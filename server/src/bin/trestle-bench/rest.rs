//! The REST endpoint's workloads, as an HTTP client sees them: point reads, inserts, `$batch` of
//! 100 and partition scans of 1,000 per page, over keep-alive HTTP/1.1 connections (one per
//! worker) with a small client of its own, so that the figures compare with the gRPC rows of the
//! same run.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::measure::{drive, Measurement, OpResult, Rng};
use crate::workloads::{partition_key, row_key, Plan, MAIN_TABLE, SCAN_TABLE};

const ACCOUNT: &str = "devstoreaccount1";
const JSON: &str = "application/json;odata=minimalmetadata";

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    stream: BufReader<TcpStream>,
}

/// A response: status, the headers the workloads read, and the body.
struct Answer {
    status: u16,
    continuation: Option<String>,
    body: Vec<u8>,
}

impl Connection {
    async fn open(addr: &str) -> Connection {
        let stream = TcpStream::connect(addr)
            .await
            .expect("connect to the REST endpoint");
        stream.set_nodelay(true).expect("nodelay");
        Connection {
            stream: BufReader::new(stream),
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
            "{method} {path} HTTP/1.1\r\nHost: bench\r\nAccept: {JSON}\r\nx-ms-version: 2019-02-02\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
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
        let (mut length, mut continuation) = (0usize, None);
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
                "x-ms-continuation-nextpartitionkey" => {
                    continuation = Some(value.trim().to_owned())
                }
                _ => {}
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.expect("body");
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
    addr: String,
    slots: Arc<Vec<Mutex<Option<Connection>>>>,
}

impl Connections {
    fn new(addr: &str, workers: usize) -> Connections {
        Connections {
            addr: addr.to_owned(),
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
            *slot = Some(Connection::open(&self.addr).await);
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
async fn create_table(addr: &str, table: &str) {
    let mut connection = Connection::open(addr).await;
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

pub(crate) async fn point_read(addr: &str, plan: &Plan) -> Measurement {
    let connections = Connections::new(addr, 64);
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

pub(crate) async fn insert(addr: &str, plan: &Plan) -> Measurement {
    create_table(addr, "RestInsertBench").await;
    let connections = Connections::new(addr, 64);
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

/// A `$batch` body of 100 inserts on partition `pk`.
fn batch_body(pk: &str) -> String {
    let mut body =
        String::from("--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n");
    for n in 0..100 {
        body.push_str(&format!(
            "--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nPOST http://bench/{ACCOUNT}/RestTxBench HTTP/1.1\r\nContent-Type: application/json\r\nPrefer: return-no-content\r\n\r\n{}\r\n",
            entity_json(pk, &row_key(n), n as i32)
        ));
    }
    body.push_str("--changeset_c--\r\n--batch_b--\r\n");
    body
}

pub(crate) async fn batch_100(addr: &str, plan: &Plan) -> Measurement {
    create_table(addr, "RestTxBench").await;
    let connections = Connections::new(addr, 8);
    drive(8, plan.warmup, plan.duration, move |worker, seq| {
        let connections = connections.clone();
        let body = batch_body(&format!("w{worker}-{seq:09}"));
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

pub(crate) async fn scan(addr: &str, plan: &Plan) -> Measurement {
    let connections = Connections::new(addr, 2);
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
