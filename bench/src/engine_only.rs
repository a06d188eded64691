//! `--engine-only`: the point-read, insert and transaction workloads run against Trestle's storage
//! engine inside the benchmark process, with no server process, gRPC or network. Each operation
//! is the call the server makes for the same request (on a runtime thread, then an async wait for
//! the group commit), so these figures are the ceiling the served ones approach on this machine:
//! what the engine costs, apart from gRPC and the client sharing the two cores.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use trestle_server::engine::Waiting;
use trestle_server::model::{EntityKey, NewEntity, Operation, Value};
use trestle_server::storage::{StoreConfig, Ticket};
use trestle_server::Engine;

use crate::measure::{drive, Measurement, OpResult, Rng};
use crate::workloads::{partition_key, row_key, small_properties, Plan, MAIN_TABLE};

const INSERT_TABLE: &str = "InsertBench";
const TX_TABLE: &str = "TxBench";
/// A transaction's request size, for the engine's 4 MiB check: about what 100 small entities
/// take on the wire.
const TX_REQUEST_BYTES: usize = 100 * 200;

/// The engine on a temporary data directory (removed when dropped), with the server's defaults.
pub(crate) struct EngineUnderTest {
    handle: Handle,
    data_dir: PathBuf,
}

/// What each workload task holds: the engine and the durable ticket it publishes.
#[derive(Clone)]
struct Handle {
    engine: Arc<Engine>,
    durable: watch::Receiver<Ticket>,
}

impl EngineUnderTest {
    pub(crate) fn open() -> EngineUnderTest {
        let data_dir =
            std::env::temp_dir().join(format!("trestle-engine-bench-{}", std::process::id()));
        let engine = Engine::open(&StoreConfig::embedded(&data_dir)).expect("open the engine");
        // As the server does: the flusher publishes each durable ticket, writers await theirs.
        let (publish, durable) = watch::channel(engine.durable());
        engine.on_durable(Box::new(move |ticket| {
            publish.send_replace(ticket);
        }));
        for table in [MAIN_TABLE, INSERT_TABLE, TX_TABLE] {
            engine.create_table(table).expect("create table");
        }
        let engine = Arc::new(engine);
        EngineUnderTest {
            handle: Handle { engine, durable },
            data_dir,
        }
    }

    /// Fills the main table as the gRPC benchmark does: 100-insert transactions, 8 at a time.
    pub(crate) async fn load(&self, plan: &Plan) {
        let chunks: Arc<Vec<(u64, u64)>> = Arc::new(
            (0..plan.partitions)
                .flat_map(|p| {
                    (0..plan.rows_per_partition)
                        .step_by(100)
                        .map(move |r| (p, r))
                })
                .collect(),
        );
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let rows = plan.rows_per_partition;
        let mut loaders = Vec::new();
        for _ in 0..8 {
            let (handle, chunks, next) = (self.handle.clone(), chunks.clone(), next.clone());
            loaders.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(p, first)) = chunks.get(i) else {
                        return;
                    };
                    let pk = partition_key(p);
                    handle
                        .transact_inserts(MAIN_TABLE, &pk, first..(first + 100).min(rows))
                        .await;
                }
            }));
        }
        for loader in loaders {
            loader.await.expect("loader");
        }
    }

    /// `GetEntity` of random keys of the loaded main table, 64 at a time.
    pub(crate) async fn point_read(&self, plan: &Plan) -> Measurement {
        let (engine, plan2) = (self.handle.engine.clone(), plan.clone());
        drive(64, plan.warmup, plan.duration, move |worker, seq| {
            let mut rng = Rng::new((worker as u64) << 32 | seq);
            let key = EntityKey::new(
                partition_key(rng.below(plan2.partitions)),
                row_key(rng.below(plan2.rows_per_partition)),
            )
            .expect("valid key");
            let found = engine.get(
                MAIN_TABLE,
                &key,
                &[],
                |entity| Ok(entity.stored_len()),
                Waiting::Allowed,
            );
            async move {
                found.expect("get");
                OpResult::entities(1)
            }
        })
        .await
    }

    /// Durable single inserts into random partitions, 64 at a time.
    pub(crate) async fn insert(&self, plan: &Plan) -> Measurement {
        let handle = self.handle.clone();
        drive(64, plan.warmup, plan.duration, move |worker, seq| {
            let handle = handle.clone();
            async move {
                let mut rng = Rng::new((worker as u64) << 32 | seq);
                let pk = format!("p{:08}", rng.below(100_000_000));
                let entity = small_entity(&pk, &format!("w{worker:02}-{seq:09}"), seq as i32);
                let pending = handle
                    .engine
                    .write(INSERT_TABLE, Operation::Insert(entity), None)
                    .await
                    .expect("insert");
                handle.until_durable(pending.ticket).await;
                OpResult::entities(1)
            }
        })
        .await
    }

    /// Durable transactions of 100 inserts into a new partition each, 8 at a time.
    pub(crate) async fn tx_insert_100(&self, plan: &Plan) -> Measurement {
        let handle = self.handle.clone();
        drive(8, plan.warmup, plan.duration, move |worker, seq| {
            let handle = handle.clone();
            async move {
                let pk = format!("w{worker:02}-{seq:09}");
                handle.transact_inserts(TX_TABLE, &pk, 0..100).await;
                OpResult::entities(100)
            }
        })
        .await
    }
}

impl Drop for EngineUnderTest {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Handle {
    /// Commits one transaction inserting `rows` into partition `pk`, and waits until it is durable.
    async fn transact_inserts(&self, table: &str, pk: &str, rows: std::ops::Range<u64>) {
        let operations = rows
            .map(|r| Operation::Insert(small_entity(pk, &row_key(r), r as i32)))
            .collect();
        let pending = self
            .engine
            .transact(table, pk, operations, TX_REQUEST_BYTES, None)
            .await
            .expect("transaction");
        self.until_durable(pending.ticket).await;
    }

    async fn until_durable(&self, ticket: Option<Ticket>) {
        if let Some(ticket) = ticket {
            self.durable
                .clone()
                .wait_for(|durable| *durable >= ticket)
                .await
                .expect("the engine is open");
        }
    }
}

/// The benchmark's small entity as the engine takes it.
fn small_entity(pk: &str, rk: &str, v: i32) -> NewEntity {
    let key = EntityKey::new(pk.to_owned(), rk.to_owned()).expect("valid key");
    let properties = small_properties(
        v,
        |s| Value::String(s.to_owned()),
        Value::Int32,
        Value::Int64,
    );
    NewEntity::new(key, properties).expect("valid entity")
}
