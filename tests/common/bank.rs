//! A bank over a real server, for tests of transactions across partitions: 200 accounts in 50
//! partitions of two tables, in 20 groups of 10 spread over both tables and many partitions.
//! Clients move amounts between two accounts of one group with `TransactWrite` (both balances,
//! ETag-conditioned, and a transfer record, in three partitions of up to three tables); readers
//! take `GetEntities` snapshots of whole groups, whose sums never change. After the load, every
//! balance must equal its opening balance plus the recorded transfers, every acknowledged transfer
//! must be recorded, and every group must hold its opening total. Shared by the end-to-end suite
//! (both stores) and the SIGKILL tests.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use tonic::transport::Channel;
use tonic::Code;
use trestle_proto::pb;

/// The client the bank drives.
pub type BankClient = pb::table_service_client::TableServiceClient<Channel>;

pub const ACCOUNTS: usize = 200;
pub const GROUPS: usize = 20;
pub const PARTITIONS: usize = 50;
pub const OPENING_BALANCE: i64 = 1_000;
pub const TABLES: [&str; 2] = ["Checking", "Savings"];
pub const TRANSFERS: &str = "Transfers";
/// How long a client riding through unavailability waits before going on.
const RIDE_THROUGH_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// An account's table and keys: accounts 0..100 in `Checking`, the rest in `Savings`, in
/// partition `p<n % 50>`; the group is `n % 20`.
pub fn account(n: usize) -> (&'static str, String, String) {
    (
        TABLES[n / (ACCOUNTS / 2)],
        format!("p{:02}", n % PARTITIONS),
        format!("acct-{n:03}"),
    )
}

/// The accounts of group `group`.
pub fn members(group: usize) -> Vec<usize> {
    (0..ACCOUNTS).filter(|n| n % GROUPS == group).collect()
}

// Shared source, included by path by each test model (a test crate may hold both).
#[allow(clippy::duplicate_mod)]
#[path = "rng.rs"]
mod rng;
pub use rng::Rng;

/// A transfer a client saw acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Transfer {
    /// The record's keys in `Transfers`.
    pub record: (String, String),
    pub from: usize,
    pub to: usize,
    pub amount: i64,
}

pub async fn connect(endpoint: &str) -> BankClient {
    BankClient::connect(endpoint.to_owned())
        .await
        .expect("connect")
}

fn int64(value: i64) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Int64Value(value)),
    }
}

fn balance_of(entity: &pb::Entity) -> i64 {
    int64_property(entity, "Balance")
}

fn int64_property(entity: &pb::Entity, name: &str) -> i64 {
    match entity.properties.get(name).and_then(|v| v.kind.as_ref()) {
        Some(pb::value::Kind::Int64Value(value)) => *value,
        other => panic!("{name} is {other:?}"),
    }
}

fn account_entity(n: usize, balance: i64) -> pb::Entity {
    let (_, partition_key, row_key) = account(n);
    pb::Entity {
        partition_key,
        row_key,
        properties: [("Balance".to_owned(), int64(balance))].into(),
        ..Default::default()
    }
}

fn operation(
    table: &str,
    pk: &str,
    op: pb::transaction_operation::Operation,
) -> pb::TableOperation {
    pb::TableOperation {
        table: table.into(),
        partition_key: pk.into(),
        operation: Some(pb::TransactionOperation {
            operation: Some(op),
        }),
    }
}

/// Creates the tables and opens every account (in transactions across partitions of 100).
pub async fn open(client: &mut BankClient) {
    for table in TABLES.iter().chain([&TRANSFERS]) {
        client
            .create_table(pb::CreateTableRequest {
                table: table.to_string(),
                ..Default::default()
            })
            .await
            .expect("create table");
    }
    for chunk in (0..ACCOUNTS).collect::<Vec<_>>().chunks(100) {
        let operations = chunk
            .iter()
            .map(|&n| {
                let (table, pk, _) = account(n);
                let entity = Some(account_entity(n, OPENING_BALANCE));
                operation(
                    table,
                    &pk,
                    pb::transaction_operation::Operation::Insert(pb::InsertOperation { entity }),
                )
            })
            .collect();
        client
            .transact_write(pb::TransactWriteRequest {
                operations,
                idempotency_key: String::new(),
            })
            .await
            .expect("open accounts");
    }
}

fn keys_of(accounts: &[usize]) -> Vec<pb::EntityRef> {
    accounts
        .iter()
        .map(|&n| {
            let (table, partition_key, row_key) = account(n);
            pb::EntityRef {
                table: table.into(),
                partition_key,
                row_key,
            }
        })
        .collect()
}

/// Reads `accounts` at one instant: each one's entity.
pub async fn read_accounts(
    client: &mut BankClient,
    accounts: &[usize],
) -> Result<Vec<pb::Entity>, tonic::Status> {
    let response = client
        .get_entities(pb::GetEntitiesRequest {
            keys: keys_of(accounts),
            select: vec![],
        })
        .await?;
    Ok(response
        .into_inner()
        .entities
        .into_iter()
        .map(|found| found.entity.expect("every account exists"))
        .collect())
}

/// What a client does when the service answers `ServiceUnavailable` (`UNAVAILABLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// Stop, as on any other failure (a killed server).
    Stop,
    /// Wait a moment and go on (the database failing over); the transfer that failed may or may
    /// not have committed, which its record tells.
    RideThrough,
}

/// Moves amounts between accounts of one group until `stop`, as client `client_no`: each
/// acknowledged transfer is added to the returned list. A conflict (another client changed an
/// account since it was read) is tried again, `ServiceUnavailable` as `unavailable` says; any
/// other failure ends the loop (a killed server).
pub async fn transfer_until(
    endpoint: String,
    client_no: usize,
    stop: Instant,
    unavailable: Unavailable,
) -> (Vec<Transfer>, Option<tonic::Status>) {
    let ride_through = |status: &tonic::Status| {
        unavailable == Unavailable::RideThrough && status.code() == Code::Unavailable
    };
    let mut client = connect(&endpoint).await;
    let mut rng = Rng::new(0x9e37_79b9 ^ ((client_no as u64 + 1) * 7919));
    let mut done = Vec::new();
    let mut sequence = 0;
    while Instant::now() < stop {
        let group = members(rng.below(GROUPS));
        let from = group[rng.below(group.len())];
        let to = loop {
            let to = group[rng.below(group.len())];
            if to != from {
                break to;
            }
        };
        let read = match read_accounts(&mut client, &[from, to]).await {
            Ok(read) => read,
            Err(status) if ride_through(&status) => {
                tokio::time::sleep(RIDE_THROUGH_PAUSE).await;
                continue;
            }
            Err(status) => return (done, Some(status)),
        };
        let (source, target) = (&read[0], &read[1]);
        let amount = (1 + rng.below(50) as i64).min(balance_of(source));
        if amount == 0 {
            continue;
        }
        sequence += 1;
        let record = (format!("c{client_no:02}"), format!("{sequence:08}"));
        let transfer = Transfer {
            record: record.clone(),
            from,
            to,
            amount,
        };
        match client
            .transact_write(transfer_request(&transfer, source, target))
            .await
        {
            Ok(_) => done.push(transfer),
            Err(status) if status.code() == Code::FailedPrecondition => {}
            Err(status) if ride_through(&status) => tokio::time::sleep(RIDE_THROUGH_PAUSE).await,
            Err(status) => return (done, Some(status)),
        }
    }
    (done, None)
}

/// The transaction of one transfer: both balances, conditional on the ETags read, and its record.
fn transfer_request(
    transfer: &Transfer,
    source: &pb::Entity,
    target: &pb::Entity,
) -> pb::TransactWriteRequest {
    use pb::transaction_operation::Operation;
    let update = |n: usize, read: &pb::Entity, change: i64| {
        let (table, pk, _) = account(n);
        let entity = Some(account_entity(n, balance_of(read) + change));
        let if_match = read.etag.clone();
        operation(
            table,
            &pk,
            Operation::Update(pb::UpdateOperation { entity, if_match }),
        )
    };
    let (pk, rk) = transfer.record.clone();
    let record = pb::Entity {
        partition_key: pk.clone(),
        row_key: rk,
        properties: [
            ("From".to_owned(), int64(transfer.from as i64)),
            ("To".to_owned(), int64(transfer.to as i64)),
            ("Amount".to_owned(), int64(transfer.amount)),
        ]
        .into(),
        ..Default::default()
    };
    let insert = Operation::Insert(pb::InsertOperation {
        entity: Some(record),
    });
    pb::TransactWriteRequest {
        idempotency_key: String::new(),
        operations: vec![
            update(transfer.from, source, -transfer.amount),
            update(transfer.to, target, transfer.amount),
            operation(TRANSFERS, &pk, insert),
        ],
    }
}

/// Takes snapshots of 1 to 10 whole groups until `stop`, checking each group's sum; returns how
/// many were taken. A failure ends the loop.
pub async fn snapshot_until(endpoint: String, reader_no: usize, stop: Instant) -> usize {
    let mut client = connect(&endpoint).await;
    let mut rng = Rng::new(0x5851_f42d ^ ((reader_no as u64 + 1) * 104_729));
    let mut taken = 0;
    while Instant::now() < stop {
        let mut groups = BTreeSet::new();
        for _ in 0..=rng.below(10) {
            groups.insert(rng.below(GROUPS));
        }
        let accounts: Vec<usize> = groups.iter().flat_map(|&g| members(g)).collect();
        let Ok(read) = read_accounts(&mut client, &accounts).await else {
            return taken;
        };
        for (group, entities) in groups.iter().zip(read.chunks(ACCOUNTS / GROUPS)) {
            let sum: i64 = entities.iter().map(balance_of).sum();
            assert_eq!(
                sum,
                OPENING_BALANCE * (ACCOUNTS / GROUPS) as i64,
                "a snapshot saw group {group} in the middle of a transfer"
            );
        }
        taken += 1;
    }
    taken
}

/// Checks the bank after the load: every acknowledged transfer recorded, every balance its
/// opening balance plus the recorded transfers (none applied in part), every group whole.
pub async fn check(client: &mut BankClient, acknowledged: &[Transfer]) {
    let mut records = BTreeMap::new();
    let mut continuation_token = String::new();
    loop {
        let page = client
            .query_entities(pb::QueryEntitiesRequest {
                table: TRANSFERS.into(),
                continuation_token,
                page_size: 1000,
                ..Default::default()
            })
            .await
            .expect("read transfers")
            .into_inner();
        for entity in page.entities {
            let amount = int64_property(&entity, "Amount");
            let from = int64_property(&entity, "From") as usize;
            let to = int64_property(&entity, "To") as usize;
            records.insert((entity.partition_key, entity.row_key), (from, to, amount));
        }
        continuation_token = page.continuation_token;
        if continuation_token.is_empty() {
            break;
        }
    }
    for transfer in acknowledged {
        assert_eq!(
            records.get(&transfer.record),
            Some(&(transfer.from, transfer.to, transfer.amount)),
            "acknowledged transfer {:?} is not recorded",
            transfer.record
        );
    }
    let mut expected = vec![OPENING_BALANCE; ACCOUNTS];
    for (from, to, amount) in records.values() {
        expected[*from] -= amount;
        expected[*to] += amount;
    }
    let all: Vec<usize> = (0..ACCOUNTS).collect();
    let mut balances = Vec::new();
    for chunk in all.chunks(100) {
        let read = read_accounts(client, chunk).await.expect("read accounts");
        balances.extend(read.iter().map(balance_of));
    }
    assert_eq!(
        balances, expected,
        "balances differ from the recorded transfers"
    );
    let total: i64 = balances.iter().sum();
    assert_eq!(total, OPENING_BALANCE * ACCOUNTS as i64);
}
