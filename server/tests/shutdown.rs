//! `serve` embedded in a process that goes on after it: once its shutdown grace period is over it
//! closes the connections still open, and when it returns nothing holds the store any more.

mod support;

use std::time::{Duration, Instant};

use support::Client;
use tokio::sync::oneshot;
use trestle_proto::pb;
use trestle_server::engine::Waiting;
use trestle_server::model::EntityKey;
use trestle_server::storage::StoreConfig;
use trestle_server::Engine;

const TABLE: &str = "Embedded";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_closes_the_connections_still_open_after_its_grace_period_and_frees_the_store() {
    let data_dir = tempfile::tempdir().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = trestle_server::Config::new(data_dir.path());
    config.shutdown_grace = Duration::from_secs(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(trestle_server::serve(listener, config, async {
        let _ = stopped.await;
    }));
    let mut client = Client::connect(format!("http://{addr}")).await.unwrap();
    let request = pb::CreateTableRequest {
        table: TABLE.into(),
        ..Default::default()
    };
    client.create_table(request).await.unwrap();
    let mut stream = support::stalled_scan(&mut client, TABLE).await;

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("serve returns soon after its grace period")
        .unwrap()
        .expect("serve stops without an error");

    // The stream's connection is closed: reading on ends in an error, before all 4,000 rows.
    let mut rows = 0;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.message().await {
                Ok(Some(batch)) => rows += batch.entities.len(),
                Ok(None) => return Ok(()),
                Err(status) => return Err(status),
            }
        }
    })
    .await
    .expect("the stream ends");
    assert!(
        ended.is_err(),
        "the stream went on after serve returned: {rows} more rows"
    );

    // Nothing holds the store: it opens again (sled's own threads let go of its lock within
    // moments of the last handle), with the rows written before the shutdown.
    let opened_by = Instant::now() + Duration::from_secs(5);
    let engine = loop {
        match Engine::open(&StoreConfig::embedded(data_dir.path())) {
            Ok(engine) => break engine,
            Err(error) if Instant::now() < opened_by => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("the store is still held after serve returned: {error}"),
        }
    };
    let key = EntityKey {
        partition_key: "p".into(),
        row_key: "39-099".into(),
    };
    assert!(engine
        .get(TABLE, &key, &[], |_| Ok(()), Waiting::Allowed)
        .is_ok());
}
