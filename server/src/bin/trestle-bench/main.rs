//! `trestle-bench`: starts a `trestle-server` on a temporary data directory (or targets
//! `--endpoint`), loads data, runs each workload for a fixed time after a warm-up, and prints one
//! table with every figure also as a ratio to a bare tonic echo measured in the same run. The echo
//! runs in a process of its own (this binary with `--serve-echo`), as the server it is compared
//! with does, so that its calls cross processes as the server's do and its CPU is measured apart.
//!
//! Running: `cargo run --release -p trestle-server --bin trestle-bench -- [--quick] [--json]`.

#![allow(clippy::print_stdout)]

mod echo;
mod engine_only;
mod measure;
mod workloads;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use measure::{Measurement, ProcessSample};
use trestle_proto::bench_pb::echo_client::EchoClient;
use workloads::{Client, Plan};

/// The allocator `trestle-server` uses, so that the echo baseline is the same kind of process as
/// the server it is compared with, and the load generator spends less of the shared cores.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ALL_WORKLOADS: &[&str] = &[
    "echo_unary",
    "echo_stream",
    "point_read",
    "insert",
    "tx_insert_100",
    "tx_hot_update",
    "scan_paged",
    "scan_stream",
    "filter_scan",
    "partition_range_scan",
    "delete_table",
    "mixed",
];

/// Command line of `trestle-bench`.
#[derive(Debug, Parser)]
#[command(
    name = "trestle-bench",
    about = "Trestle's benchmark, with an in-run gRPC echo baseline"
)]
struct Args {
    /// Seconds each workload is measured (after a warm-up). Default 20, or 4 with --quick.
    #[arg(long)]
    duration: Option<u64>,
    /// Comma-separated workloads to run (default: all).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// A small data set (100,000 entities instead of 1,000,000): CI-sized, under two minutes.
    #[arg(long)]
    quick: bool,
    /// One JSON object per line instead of the table.
    #[arg(long)]
    json: bool,
    /// Benchmark a running server instead of starting one (server CPU and RSS are then unknown).
    #[arg(long)]
    endpoint: Option<String>,
    /// Run point_read, insert and tx_insert_100 against the storage engine inside this process
    /// instead (no server, no gRPC): the ceiling the server's figures approach on this machine.
    /// CPU and RSS are then this process's.
    #[arg(long, conflicts_with = "endpoint")]
    engine_only: bool,
    /// Internal: serve only the echo baseline and print its address. The benchmark runs its
    /// baseline in a process of its own this way, as the server it is compared with runs.
    #[arg(long, hide = true)]
    serve_echo: bool,
}

/// One row of the report.
#[derive(Debug, Default)]
struct Row {
    workload: String,
    ops_per_s: Option<f64>,
    entities_per_s: Option<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    p999_ms: Option<f64>,
    server_cpu_cores: Option<f64>,
    server_rss_mib: Option<f64>,
    ratio_to_echo: Option<f64>,
    note: String,
}

/// A child process serving on loopback: a `trestle-server` on a temporary data directory, or
/// this benchmark serving the echo baseline.
struct ServerProcess {
    child: Child,
    addr: String,
    /// The server's data directory, removed with the process (none for the echo).
    data_dir: Option<PathBuf>,
}

impl ServerProcess {
    /// Starts a `trestle-server` (next to this binary) on a fresh temporary data directory.
    fn start() -> ServerProcess {
        let exe = std::env::current_exe()
            .expect("current exe")
            .with_file_name("trestle-server");
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let nth = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let data_dir =
            std::env::temp_dir().join(format!("trestle-bench-{}-{nth}", std::process::id()));
        let mut command = Command::new(&exe);
        command
            .args([
                "--listen",
                "127.0.0.1:0",
                "--log-level",
                "warn,trestle_server=info",
                "--data-dir",
            ])
            .arg(&data_dir);
        ServerProcess::spawn(command, Some(data_dir))
    }

    /// Starts this benchmark as the echo baseline's own process.
    fn start_echo() -> ServerProcess {
        let mut command = Command::new(std::env::current_exe().expect("current exe"));
        command.arg("--serve-echo");
        ServerProcess::spawn(command, None)
    }

    /// Spawns `command` and waits for the `addr=` it logs once it listens.
    fn spawn(mut command: Command, data_dir: Option<PathBuf>) -> ServerProcess {
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {:?} (build it with the same profile): {e}",
                command.get_program()
            )
        });
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let addr = loop {
            let line = lines.next().expect("server exited").expect("log line");
            if let Some(rest) = line.split("addr=").nth(1) {
                break rest.split_whitespace().next().expect("address").to_owned();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        ServerProcess {
            child,
            addr,
            data_dir,
        }
    }

    fn sample(&self) -> Option<ProcessSample> {
        ProcessSample::take(self.child.id())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(data_dir) = &self.data_dir {
            let _ = std::fs::remove_dir_all(data_dir);
        }
    }
}

/// Bytes under a directory.
fn disk_usage(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => disk_usage(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn row_of(
    workload: &str,
    mut m: Measurement,
    server: Option<(ProcessSample, ProcessSample)>,
    baseline: Option<f64>,
    entity_rate: bool,
) -> Row {
    let rate = if entity_rate {
        m.entities_per_s()
    } else {
        m.ops_per_s()
    };
    Row {
        workload: workload.to_owned(),
        ops_per_s: Some(m.ops_per_s()),
        entities_per_s: Some(m.entities_per_s()),
        p50_ms: m.percentile_ms(0.50),
        p99_ms: m.percentile_ms(0.99),
        p999_ms: m.percentile_ms(0.999),
        server_cpu_cores: server.map(|(a, b)| b.cores_since(&a)),
        server_rss_mib: server.map(|(_, b)| b.rss_bytes as f64 / (1 << 20) as f64),
        ratio_to_echo: baseline.map(|b| rate / b),
        note: String::new(),
    }
}

fn json_number(v: Option<f64>) -> String {
    v.map_or_else(|| "null".to_owned(), |v| format!("{v:.3}"))
}

fn print_json(row: &Row) {
    println!(
        "{{\"workload\": \"{}\", \"ops_per_s\": {}, \"entities_per_s\": {}, \"p50_ms\": {}, \"p99_ms\": {}, \"p999_ms\": {}, \"server_cpu_cores\": {}, \"server_rss_mib\": {}, \"ratio_to_echo\": {}, \"note\": \"{}\"}}",
        row.workload,
        json_number(row.ops_per_s),
        json_number(row.entities_per_s),
        json_number(row.p50_ms),
        json_number(row.p99_ms),
        json_number(row.p999_ms),
        json_number(row.server_cpu_cores),
        json_number(row.server_rss_mib),
        json_number(row.ratio_to_echo),
        row.note.replace('"', "'"),
    );
}

fn print_table(rows: &[Row]) {
    let cell = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
    };
    println!(
        "| {:<20} | {:>10} | {:>12} | {:>8} | {:>8} | {:>8} | {:>9} | {:>8} | {:>8} | note",
        "workload",
        "ops/s",
        "entities/s",
        "p50 ms",
        "p99 ms",
        "p999 ms",
        "cpu cores",
        "rss MiB",
        "vs echo"
    );
    println!("|{}|", ["-"; 10].map(|d| d.repeat(3)).join("|"));
    for row in rows {
        println!(
            "| {:<20} | {:>10} | {:>12} | {:>8} | {:>8} | {:>8} | {:>9} | {:>8} | {:>8} | {}",
            row.workload,
            cell(row.ops_per_s, 0),
            cell(row.entities_per_s, 0),
            cell(row.p50_ms, 2),
            cell(row.p99_ms, 2),
            cell(row.p999_ms, 2),
            cell(row.server_cpu_cores, 2),
            cell(row.server_rss_mib, 0),
            cell(row.ratio_to_echo, 2),
            row.note
        );
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.serve_echo {
        println!("addr={}", echo::start().await);
        std::future::pending::<()>().await;
    }
    let selected: Vec<&str> = if args.workloads.is_empty() {
        ALL_WORKLOADS.to_vec()
    } else {
        for w in &args.workloads {
            assert!(
                ALL_WORKLOADS.contains(&w.as_str()),
                "unknown workload {w}; known: {}",
                ALL_WORKLOADS.join(",")
            );
        }
        ALL_WORKLOADS
            .iter()
            .copied()
            .filter(|w| args.workloads.iter().any(|s| s == w))
            .collect()
    };
    let plan = Plan {
        partitions: if args.quick { 100 } else { 1000 },
        rows_per_partition: 1000,
        scan_partition_rows: 10_000,
        warmup: Duration::from_secs(if args.quick { 1 } else { 3 }),
        duration: Duration::from_secs(args.duration.unwrap_or(if args.quick { 4 } else { 20 })),
    };

    if args.engine_only {
        let rows = engine_only_rows(&selected, &plan).await;
        print_rows(&rows, args.json);
        return;
    }

    let server = args.endpoint.is_none().then(ServerProcess::start);
    let endpoint = args
        .endpoint
        .clone()
        .unwrap_or_else(|| format!("http://{}", server.as_ref().expect("server").addr));
    let client: Client = Client::connect(endpoint).await.expect("connect to trestle");
    let client = client.max_decoding_message_size(16 << 20);
    let echo_process = ServerProcess::start_echo();
    let echo = EchoClient::connect(format!("http://{}", echo_process.addr))
        .await
        .expect("connect to echo");
    let sample = || server.as_ref().and_then(ServerProcess::sample);

    let needs_main = selected.iter().any(|w| {
        matches!(
            *w,
            "point_read" | "filter_scan" | "partition_range_scan" | "mixed"
        )
    });
    if needs_main {
        let took = workloads::load(
            &client,
            workloads::MAIN_TABLE,
            plan.partitions,
            plan.rows_per_partition,
        )
        .await;
        eprintln!(
            "loaded {} entities in {:.1} s ({:.0} entities/s)",
            plan.entities(),
            took.as_secs_f64(),
            plan.entities() as f64 / took.as_secs_f64()
        );
    }
    if selected.iter().any(|w| w.starts_with("scan_")) {
        workloads::load_scan_table(&client, plan.scan_partition_rows).await;
    }

    let mut rows = Vec::new();
    let (mut unary_ceiling, mut stream_ceiling) = (None, None);
    for workload in selected {
        announce(workload, &plan);
        // The CPU and memory of the process serving this workload: the echo's for the baseline.
        let serving_sample = || {
            if workload.starts_with("echo") {
                echo_process.sample()
            } else {
                sample()
            }
        };
        let before = serving_sample();
        let (measurement, entity_rate, stream_like) = match workload {
            "echo_unary" => (workloads::echo_unary(&echo, &plan).await, false, false),
            "echo_stream" => (workloads::echo_stream(&echo, &plan).await, true, true),
            "point_read" => (workloads::point_read(&client, &plan).await, false, false),
            "insert" => (workloads::insert(&client, &plan).await, false, false),
            "tx_insert_100" => (workloads::tx_insert_100(&client, &plan).await, false, false),
            "tx_hot_update" => (workloads::tx_hot_update(&client, &plan).await, false, false),
            "scan_paged" => (workloads::scan_paged(&client, &plan).await, true, true),
            "scan_stream" => (workloads::scan_stream(&client, &plan).await, true, true),
            "filter_scan" | "partition_range_scan" => {
                let m = if workload == "filter_scan" {
                    workloads::filter_scan(&client, &plan).await
                } else {
                    workloads::partition_range_scan(&client, &plan).await
                };
                let server = before.zip(sample());
                let mut row = row_of(workload, m.clone(), server, stream_ceiling, true);
                row.ratio_to_echo = stream_ceiling.map(|c| m.extra_per_s() / c);
                row.note = format!(
                    "{:.0} entities examined/s, {:.0} returned/s",
                    m.extra_per_s(),
                    m.entities_per_s()
                );
                rows.push(row);
                continue;
            }
            "delete_table" => {
                // On a server of its own, so that other workloads' tables and garbage do not blur
                // the data directory's sizes.
                let own_server = server.as_ref().map(|_| ServerProcess::start());
                let own_client = match &own_server {
                    Some(own) => Client::connect(format!("http://{}", own.addr))
                        .await
                        .expect("connect to the delete_table server"),
                    None => client.clone(),
                };
                rows.push(delete_table(&own_client, &plan, own_server.as_ref()).await);
                continue;
            }
            _ => (workloads::mixed(&client, &plan).await, false, false),
        };
        let server_sample = before.zip(serving_sample());
        let baseline = if stream_like {
            stream_ceiling
        } else {
            unary_ceiling
        };
        let mut row = row_of(
            workload,
            measurement.clone(),
            server_sample,
            baseline,
            entity_rate,
        );
        match workload {
            "echo_unary" => {
                unary_ceiling = Some(measurement.ops_per_s());
                row.ratio_to_echo = Some(1.0);
            }
            "echo_stream" => {
                stream_ceiling = Some(measurement.entities_per_s());
                row.ratio_to_echo = Some(1.0);
                row.note = "messages/s in entities/s".into();
            }
            "tx_hot_update" => {
                let attempts = measurement.ops.max(1);
                row.note = format!(
                    "conflict rate {:.1}%",
                    100.0 * measurement.extra as f64 / attempts as f64
                );
            }
            _ => {}
        }
        rows.push(row);
    }
    print_rows(&rows, args.json);
}

fn print_rows(rows: &[Row], json: bool) {
    if json {
        rows.iter().for_each(print_json);
    } else {
        print_table(rows);
    }
}

/// The workloads `--engine-only` has a form of.
const ENGINE_WORKLOADS: &[&str] = &["point_read", "insert", "tx_insert_100"];

/// Says on stderr which workload runs now, and for how long.
fn announce(workload: &str, plan: &Plan) {
    eprintln!(
        "running {workload} for {} s after {} s of warm-up",
        plan.duration.as_secs(),
        plan.warmup.as_secs()
    );
}

/// The `--engine-only` run: the selected workloads that have an engine-only form, named
/// `engine_<workload>`.
async fn engine_only_rows(selected: &[&str], plan: &Plan) -> Vec<Row> {
    let engine = engine_only::EngineUnderTest::open();
    if selected.contains(&"point_read") {
        let took = Instant::now();
        engine.load(plan).await;
        eprintln!(
            "loaded {} entities in {:.1} s",
            plan.entities(),
            took.elapsed().as_secs_f64()
        );
    }
    let sample = || ProcessSample::take(std::process::id());
    let mut rows = Vec::new();
    for &workload in selected {
        if !ENGINE_WORKLOADS.contains(&workload) {
            continue;
        }
        let name = format!("engine_{workload}");
        announce(&name, plan);
        let before = sample();
        let measurement = match workload {
            "point_read" => engine.point_read(plan).await,
            "insert" => engine.insert(plan).await,
            _ => engine.tx_insert_100(plan).await,
        };
        rows.push(row_of(
            &name,
            measurement,
            before.zip(sample()),
            None,
            false,
        ));
    }
    rows
}

/// `DeleteTable` of a fully loaded table: its latency, and the data directory's size after loading
/// it, and after deleting it and loading another of the same size (the growth is the second size
/// over the first).
async fn delete_table(client: &Client, plan: &Plan, server: Option<&ServerProcess>) -> Row {
    let size = || {
        server
            .and_then(|s| s.data_dir.as_deref())
            .map_or(0, disk_usage)
    };
    let before_load = size();
    workloads::load(client, "Doomed", plan.partitions, plan.rows_per_partition).await;
    let after_first = size();
    let started = Instant::now();
    client
        .clone()
        .delete_table(trestle_proto::pb::DeleteTableRequest {
            table: "Doomed".into(),
        })
        .await
        .expect("delete");
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    workloads::load(client, "Reloaded", plan.partitions, plan.rows_per_partition).await;
    let after_second = size();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let growth = if after_first > 0 {
        after_second as f64 / after_first as f64 - 1.0
    } else {
        0.0
    };
    Row {
        workload: "delete_table".into(),
        p50_ms: Some(latency_ms),
        p99_ms: Some(latency_ms),
        note: format!(
            "{} entities; data dir {:.0} MiB before, {:.0} MiB after load, {:.0} MiB after delete + reload ({:+.0}% vs first load)",
            plan.entities(),
            mib(before_load),
            mib(after_first),
            mib(after_second),
            growth * 100.0
        ),
        ..Row::default()
    }
}
