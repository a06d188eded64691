//! Declared indexes across SIGKILL: after random writes to a table with three indexes and a kill
//! of the real binary (after the writes were acknowledged, and in the middle of eight writers'
//! load), every index read after the restart equals the one recomputed from the entities; and a
//! build the kill cut short resumes at the restart and ends `READY`, complete.

mod support;

#[path = "../../tests/common/index_model.rs"]
mod index_model;

use index_model::{Model, Rng};
use support::ServerProcess;
use trestle_proto::pb;

#[tokio::test]
async fn indexes_equal_their_entities_after_sigkill_and_restart() {
    let data_dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data_dir.path());
    let mut client = server.client().await;
    client.create_table(Model::create_request()).await.unwrap();
    let mut model = Model::default();
    let mut rng = Rng::new(0xdead_beef);
    for _ in 0..150 {
        model.step(&mut client, &mut rng).await;
    }
    model.check(&mut client).await;

    // A table big enough that its index is still building when the process is killed.
    let request = pb::CreateTableRequest {
        table: "Backlog".into(),
        ..Default::default()
    };
    client.create_table(request).await.unwrap();
    for partition in 0..20 {
        let pk = format!("p{partition:02}");
        for first in (0..1000).step_by(100) {
            let operations = (first..first + 100)
                .map(|n| {
                    support::insert_op(support::entity(
                        &pk,
                        &format!("{n:04}"),
                        &[("Rank", (n * 37 % 1000) as i64)],
                    ))
                })
                .collect();
            let request = pb::SubmitTransactionRequest {
                idempotency_key: String::new(),
                table: "Backlog".into(),
                partition_key: pk.clone(),
                operations,
            };
            client.submit_transaction(request).await.unwrap();
        }
    }
    let declared = client
        .create_index(pb::CreateIndexRequest {
            table: "Backlog".into(),
            index: Some(pb::IndexDefinition {
                name: "ByRank".into(),
                properties: vec!["Rank".into()],
                scope: pb::IndexScope::Table as i32,
                unique: false,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(declared.state, pb::IndexState::Building as i32);
    server.kill_9();

    let server = ServerProcess::start(data_dir.path());
    let mut client = server.client().await;
    model.check(&mut client).await;

    // Eight writers at once, killed mid-flight: whatever landed, every index equals the one
    // recomputed from the entities found after the restart.
    let writers: Vec<_> = (0..8)
        .map(|writer| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let mut rng = Rng::new(0xfeed + writer);
                loop {
                    index_model::random_unchecked_step(&mut client, &mut rng).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    server.kill_9();
    for writer in writers {
        writer.abort();
    }
    let server = ServerProcess::start(data_dir.path());
    let mut client = server.client().await;
    let found = Model::read_back(&mut client).await;
    found.check(&mut client).await;

    let mut state = pb::IndexState::Building as i32;
    for _ in 0..600 {
        let table = client
            .get_table(pb::GetTableRequest {
                table: "Backlog".into(),
            })
            .await
            .unwrap()
            .into_inner();
        state = table.indexes[0].state;
        if state != pb::IndexState::Building as i32 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, pb::IndexState::Ready as i32);
    let request = pb::QueryEntitiesRequest {
        table: "Backlog".into(),
        index: "ByRank".into(),
        ..Default::default()
    };
    let ranks: Vec<i64> = index_model::pages(&mut client, request)
        .await
        .iter()
        .flat_map(|page| &page.entities)
        .map(|e| support::int64(e, "Rank"))
        .collect();
    assert_eq!(ranks.len(), 20_000);
    assert!(
        ranks.windows(2).all(|pair| pair[0] <= pair[1]),
        "index order"
    );
}
