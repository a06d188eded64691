//! `--store`: the PostgreSQL side of the benchmark. A throwaway cluster (the tests' own harness)
//! when asked for, and the database's ceiling for the same work as four workloads, measured with
//! `pgbench` running one prepared statement per operation over the very rows the server loaded:
//! Trestle's overhead over raw SQL is the distance between a `[postgres]` row and its `pgbench`
//! row.

use std::process::Command;

use crate::workloads::{self, Plan};
use crate::Row;

#[path = "../../tests/common/postgres.rs"]
mod cluster;

pub(crate) use cluster::Postgres as Cluster;

/// The shared buffers of `--store postgres`'s cluster: room for the benchmark's whole data set.
/// With PostgreSQL's default of 128 MB, inserts over 1,000,000 entities made backends write
/// dirty pages out while holding a table's extension lock (each write waiting for the log's
/// flush first), and every other insert into the table waited 60-250 ms behind it.
pub(crate) const SHARED_BUFFERS: &str = "shared_buffers=1GB";

/// A workload's `pgbench` form: its clients, its script, and the entities one run of the script
/// reads or writes.
struct Ceiling {
    workload: &'static str,
    clients: usize,
    script: String,
    entities: f64,
}

/// The `pgbench` rows for the selected workloads that have a SQL form, each noting how much of it
/// the same run's `[postgres]` row reached.
pub(crate) fn ceilings(url: &str, selected: &[&str], plan: &Plan, measured: &[Row]) -> Vec<Row> {
    let mut client =
        postgres::Client::connect(url, postgres::NoTls).expect("connect to the database");
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS bench_ceiling (LIKE trestle_entities INCLUDING ALL);
             TRUNCATE bench_ceiling",
        )
        .expect("the ceiling's scratch table");
    let mut table_id = |name: &str| -> i64 {
        client
            .query_one(
                "SELECT coalesce(max(id), 0) FROM trestle_tables WHERE folded = $1 AND live",
                &[&name.to_lowercase()],
            )
            .expect("table id")
            .get(0)
    };
    let (main, scan) = (
        table_id(workloads::MAIN_TABLE),
        table_id(workloads::SCAN_TABLE),
    );
    let record_bytes: i32 = client
        .query_one(
            "SELECT coalesce(max(length(record)), 200) FROM trestle_entities WHERE table_id = $1",
            &[&main.max(scan)],
        )
        .expect("a record's size")
        .get(0);
    let record = format!("decode(repeat('ab', {record_bytes}), 'hex')");
    let key = |prefix: &str, var: &str| {
        format!("convert_to('{prefix}' || lpad(:{var}::text, 4, '0'), 'UTF8')")
    };
    let all = [
        Ceiling {
            workload: "point_read",
            clients: 64,
            script: format!(
                "\\set p random(0, {})\n\\set r random(0, {})\n\
                 SELECT t.live, e.record FROM trestle_tables t LEFT JOIN trestle_entities e \
                 ON e.table_id = t.id AND e.pk = {} AND e.rk = {} WHERE t.id = {main};\n",
                plan.partitions - 1,
                plan.rows_per_partition - 1,
                key("p", "p"),
                key("r", "r"),
            ),
            entities: 1.0,
        },
        Ceiling {
            workload: "insert",
            clients: 64,
            script: format!(
                "INSERT INTO bench_ceiling VALUES (1, convert_to(gen_random_uuid()::text, 'UTF8'), \
                 convert_to('r', 'UTF8'), {record});\n"
            ),
            entities: 1.0,
        },
        Ceiling {
            workload: "tx_insert_100",
            clients: 8,
            script: format!(
                "INSERT INTO bench_ceiling SELECT 2, convert_to(gen_random_uuid()::text, 'UTF8'), \
                 convert_to(lpad(g::text, 4, '0'), 'UTF8'), {record} FROM generate_series(1, 100) g;\n"
            ),
            entities: 100.0,
        },
        Ceiling {
            workload: "scan_paged",
            clients: 2,
            script: format!(
                "SELECT pk, rk, record FROM trestle_entities WHERE table_id = {scan} \
                 AND pk = convert_to('s', 'UTF8') ORDER BY rk;\n"
            ),
            entities: plan.scan_partition_rows as f64,
        },
    ];
    let mut rows = Vec::new();
    for ceiling in all.iter().filter(|c| selected.contains(&c.workload)) {
        crate::announce(&format!("pgbench {}", ceiling.workload), plan);
        let tps = pgbench(url, ceiling, plan);
        let entities_per_s = tps * ceiling.entities;
        let reached = measured
            .iter()
            .find(|row| row.workload == format!("{} [postgres]", ceiling.workload))
            .and_then(|row| row.entities_per_s)
            .map(|trestle| {
                format!(
                    "; Trestle [postgres] reaches {:.0}% of it",
                    100.0 * trestle / entities_per_s
                )
            })
            .unwrap_or_default();
        rows.push(Row {
            workload: format!("pgbench {}", ceiling.workload),
            ops_per_s: Some(tps),
            entities_per_s: Some(entities_per_s),
            note: format!(
                "the database's ceiling: {} clients, one prepared statement per op{reached}",
                ceiling.clients
            ),
            ..Default::default()
        });
    }
    rows
}

/// Runs `pgbench` with the ceiling's script for the plan's warm-up and duration; transactions/s.
fn pgbench(url: &str, ceiling: &Ceiling, plan: &Plan) -> f64 {
    let script = std::env::temp_dir().join(format!(
        "trestle-bench-{}-{}.sql",
        std::process::id(),
        ceiling.workload
    ));
    std::fs::write(&script, &ceiling.script).expect("write the pgbench script");
    let seconds = (plan.warmup + plan.duration).as_secs().max(1).to_string();
    let output = Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-j", "2", "-T", &seconds])
        .args(["-c", &ceiling.clients.to_string()])
        .arg("-f")
        .arg(&script)
        .arg(url)
        .output()
        .expect("pgbench (PostgreSQL's, on PATH)");
    let _ = std::fs::remove_file(&script);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "pgbench failed: {printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    printed
        .lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|tps| tps.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench's output: {printed}"))
}
