//! A model of a table with four declared indexes, for model-based tests over a real server:
//! random writes, merges, upserts, patches, deletes and transactions, each applied to the server
//! and to the model, then every index read through the server compared with the one recomputed
//! from the model's entities. Two indexes order by values inside documents: a unique one at a
//! path (`Contact/Email`) and a multi-valued one over an array's elements (`Tags/*`). Shared by
//! the end-to-end suite (both stores) and the SIGKILL test.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;

use tonic::transport::Channel;
use trestle_proto::pb;

/// The client the model drives.
pub type ModelClient = pb::table_service_client::TableServiceClient<Channel>;

/// The model's table.
pub const TABLE: &str = "Modelled";
/// `Contact/Email` (a member of a document): unique over the table.
pub const BY_EMAIL: &str = "ByEmail";
/// `Tags/*`: one entry per distinct element of the `Tags` array, over the table.
pub const BY_TAG: &str = "ByTag";
/// The tags entities draw from.
pub const TAGS: [&str; 3] = ["t0", "t1", "t2"];
/// `Last`, then `First`: over the table.
pub const BY_NAME: &str = "ByName";
/// `Score` (Int32) within each partition.
pub const BY_SCORE: &str = "ByScore";

const PARTITIONS: [&str; 3] = ["a", "b", "c"];
const ROWS: usize = 6;

/// An entity's properties as the model keeps them (every one optional: indexes are sparse).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Props {
    pub email: Option<String>,
    pub last: Option<String>,
    pub first: Option<String>,
    pub score: Option<i32>,
    pub tags: Option<Vec<String>>,
}

// Shared source, included by path by each test model (a test crate may hold both).
#[allow(clippy::duplicate_mod)]
#[path = "rng.rs"]
mod rng;
pub use rng::Rng;

/// One write of a step.
#[derive(Debug, Clone)]
enum Write {
    Insert(String, Props),
    Replace(String, Props),
    Merge(String, Props),
    Delete(String),
    /// Sets `Score` (or removes it) by a patch with upsert.
    PatchScore(String, Option<i32>),
    /// Adds a tag to `Tags` unless it holds it (a patch's add_to_set, with upsert).
    AddTag(String, String),
}

/// The entities the model holds, by (PartitionKey, RowKey).
#[derive(Debug, Default)]
pub struct Model {
    pub entities: BTreeMap<(String, String), Props>,
}

impl Model {
    /// The table's creation request, with its three indexes.
    pub fn create_request() -> pb::CreateTableRequest {
        let index =
            |name: &str, properties: &[&str], scope: pb::IndexScope, unique| pb::IndexDefinition {
                name: name.into(),
                properties: properties.iter().map(|p| p.to_string()).collect(),
                scope: scope as i32,
                unique,
            };
        pb::CreateTableRequest {
            table: TABLE.into(),
            indexes: vec![
                index(BY_EMAIL, &["Contact/Email"], pb::IndexScope::Table, true),
                index(BY_NAME, &["Last", "First"], pb::IndexScope::Table, false),
                index(BY_SCORE, &["Score"], pb::IndexScope::Partition, false),
                index(BY_TAG, &["Tags/*"], pb::IndexScope::Table, false),
            ],
            ..Default::default()
        }
    }

    /// Runs one random step on the server and the model; checks that the server accepted or
    /// refused it as the model says, and why.
    pub async fn step(&mut self, client: &mut ModelClient, rng: &mut Rng) {
        let (partition, writes) = random_step(rng);
        let expected = self.apply(&partition, &writes);
        let outcome = send(client, &partition, &writes).await;
        let reason = outcome.err().map(|status| error_reason(&status));
        assert_eq!(
            reason, expected,
            "step on partition {partition}: {writes:?}"
        );
    }

    /// The model of what the server holds now (to check its indexes against its entities).
    pub async fn read_back(client: &mut ModelClient) -> Model {
        let request = pb::QueryEntitiesRequest {
            table: TABLE.into(),
            ..Default::default()
        };
        let mut entities = BTreeMap::new();
        for entity in pages(client, request)
            .await
            .into_iter()
            .flat_map(|p| p.entities)
        {
            let key = (entity.partition_key.clone(), entity.row_key.clone());
            entities.insert(key, props_of(&entity));
        }
        Model { entities }
    }

    /// Applies `writes` to the model if they all hold and the unique index stays unique; returns
    /// the reason the server must give otherwise.
    fn apply(&mut self, partition: &str, writes: &[Write]) -> Option<String> {
        let mut next = self.entities.clone();
        for write in writes {
            let key = |row: &String| (partition.to_owned(), row.clone());
            match write {
                Write::Insert(row, props) => {
                    if next.contains_key(&key(row)) {
                        return Some("EntityAlreadyExists".into());
                    }
                    next.insert(key(row), props.clone());
                }
                Write::Replace(row, props) => {
                    next.insert(key(row), props.clone());
                }
                Write::Merge(row, props) => {
                    let Some(current) = next.get_mut(&key(row)) else {
                        return Some("ResourceNotFound".into());
                    };
                    merge(current, props);
                }
                Write::Delete(row) => {
                    if next.remove(&key(row)).is_none() {
                        return Some("ResourceNotFound".into());
                    }
                }
                Write::PatchScore(row, score) => {
                    next.entry(key(row)).or_default().score = *score;
                }
                Write::AddTag(row, tag) => {
                    let tags = next
                        .entry(key(row))
                        .or_default()
                        .tags
                        .get_or_insert_default();
                    if !tags.contains(tag) {
                        tags.push(tag.clone());
                    }
                }
            }
        }
        let mut emails: Vec<&String> = next.values().filter_map(|p| p.email.as_ref()).collect();
        let count = emails.len();
        emails.sort();
        emails.dedup();
        if emails.len() < count {
            return Some("IndexValueAlreadyExists".into());
        }
        self.entities = next;
        None
    }

    /// The keys index `name` should hold, in its order.
    pub fn expected(&self, name: &str) -> Vec<(String, String)> {
        let mut rows: Vec<(Vec<String>, (String, String))> = Vec::new();
        for (key, props) in &self.entities {
            let sort = match name {
                BY_EMAIL => props.email.clone().map(|e| vec![e]),
                BY_NAME => props
                    .last
                    .clone()
                    .zip(props.first.clone())
                    .map(|(l, f)| vec![l, f, key.0.clone(), key.1.clone()]),
                // Scores are -2..=3: offset so that text order is number order.
                _ => props
                    .score
                    .map(|s| vec![key.0.clone(), format!("{:02}", s + 10), key.1.clone()]),
            };
            if let Some(sort) = sort {
                rows.push((sort, key.clone()));
            }
        }
        rows.sort();
        rows.into_iter().map(|(_, key)| key).collect()
    }

    /// The keys holding `tag`, in ByTag's order for that tag (by keys).
    pub fn tagged(&self, tag: &str) -> Vec<(String, String)> {
        let holds = |props: &Props| {
            props
                .tags
                .as_ref()
                .is_some_and(|t| t.iter().any(|t| t == tag))
        };
        let keys = self.entities.iter().filter(|(_, props)| holds(props));
        keys.map(|(key, _)| key.clone()).collect()
    }

    /// Checks every index and the entities against the model, through the server.
    pub async fn check(&self, client: &mut ModelClient) {
        for name in [BY_EMAIL, BY_NAME, BY_SCORE] {
            let found = read_index(client, name, "", false).await;
            assert_eq!(found, self.expected(name), "index {name}");
            let mut backwards = read_index(client, name, "", true).await;
            backwards.reverse();
            assert_eq!(backwards, found, "index {name} read in reverse");
        }
        for tag in TAGS {
            let filter = format!("Tags/any(t: t eq '{tag}')");
            let found = read_index(client, BY_TAG, &filter, false).await;
            assert_eq!(found, self.tagged(tag), "index {BY_TAG}, {tag}");
            let mut backwards = read_index(client, BY_TAG, &filter, true).await;
            backwards.reverse();
            assert_eq!(backwards, found, "index {BY_TAG} read in reverse, {tag}");
        }
        let stored = Model::read_back(client).await.entities;
        assert_eq!(stored, self.entities, "entities");
    }
}

/// Every page of `request`, following its continuation tokens.
pub async fn pages(
    client: &mut ModelClient,
    mut request: pb::QueryEntitiesRequest,
) -> Vec<pb::QueryEntitiesResponse> {
    let mut pages = Vec::new();
    loop {
        let page = client
            .query_entities(request.clone())
            .await
            .unwrap()
            .into_inner();
        request.continuation_token = page.continuation_token.clone();
        pages.push(page);
        if request.continuation_token.is_empty() {
            return pages;
        }
    }
}

/// Every key index `name` holds (that `filter` matches), in its order (or the reverse), a page
/// of 4 at a time.
pub async fn read_index(
    client: &mut ModelClient,
    name: &str,
    filter: &str,
    reverse: bool,
) -> Vec<(String, String)> {
    let request = pb::QueryEntitiesRequest {
        table: TABLE.into(),
        index: name.into(),
        filter: filter.into(),
        page_size: 4,
        reverse,
        ..Default::default()
    };
    let mut keys = Vec::new();
    for page in pages(client, request).await {
        assert_eq!(page.stats.unwrap().plan, format!("index:{name}"));
        keys.extend(
            page.entities
                .into_iter()
                .map(|e| (e.partition_key, e.row_key)),
        );
    }
    keys
}

/// A random step: one write, or a transaction of 2 or 3, on one partition.
fn random_step(rng: &mut Rng) -> (String, Vec<Write>) {
    let partition = PARTITIONS[rng.below(PARTITIONS.len())].to_owned();
    let writes = if rng.below(4) == 0 {
        let mut rows: Vec<usize> = (0..ROWS).collect();
        (0..2 + rng.below(2))
            .map(|_| {
                let row = rows.remove(rng.below(rows.len()));
                random_write(rng, row)
            })
            .collect()
    } else {
        let row = rng.below(ROWS);
        vec![random_write(rng, row)]
    };
    (partition, writes)
}

/// Sends a random step to the server without a model (for load that a crash interrupts).
pub async fn random_unchecked_step(client: &mut ModelClient, rng: &mut Rng) {
    let (partition, writes) = random_step(rng);
    let _ = send(client, &partition, &writes).await;
}

/// Sends `writes` on `partition`: one request, or a transaction of them.
async fn send(
    client: &mut ModelClient,
    partition: &str,
    writes: &[Write],
) -> Result<(), tonic::Status> {
    if let [write] = writes {
        return single(client, partition, write).await;
    }
    let request = pb::SubmitTransactionRequest {
        idempotency_key: String::new(),
        table: TABLE.into(),
        partition_key: partition.to_owned(),
        operations: writes
            .iter()
            .map(|w| transaction_op(partition, w))
            .collect(),
    };
    client.submit_transaction(request).await.map(drop)
}

fn random_write(rng: &mut Rng, row: usize) -> Write {
    let row = format!("r{row}");
    let pick = |rng: &mut Rng, options: usize| rng.below(options + 1).checked_sub(1);
    let props = Props {
        email: pick(rng, 8).map(|e| format!("e{e}@x")),
        last: pick(rng, 3).map(|l| ["Ng", "Li", "Ng "][l].to_owned()),
        first: pick(rng, 2).map(|f| ["Al", "Bo"][f].to_owned()),
        score: pick(rng, 6).map(|s| s as i32 - 2),
        tags: pick(rng, 4).map(|n| (0..n).map(|_| TAGS[rng.below(3)].to_owned()).collect()),
    };
    match rng.below(7) {
        0 => Write::Insert(row, props),
        1 => Write::Replace(row, props),
        2 => Write::Merge(row, props),
        3 => Write::Delete(row),
        4 => Write::AddTag(row, TAGS[rng.below(3)].to_owned()),
        _ => Write::PatchScore(row, pick(rng, 6).map(|s| s as i32 - 2)),
    }
}

fn merge(current: &mut Props, with: &Props) {
    if with.email.is_some() {
        current.email = with.email.clone();
    }
    if with.last.is_some() {
        current.last = with.last.clone();
    }
    if with.first.is_some() {
        current.first = with.first.clone();
    }
    if with.score.is_some() {
        current.score = with.score;
    }
    if with.tags.is_some() {
        current.tags = with.tags.clone();
    }
}

fn entity(partition: &str, row: &str, props: &Props) -> pb::Entity {
    let text = |s: &String| pb::Value {
        kind: Some(pb::value::Kind::StringValue(s.clone())),
    };
    let mut properties = BTreeMap::new();
    if let Some(email) = &props.email {
        let contact = pb::ObjectValue {
            members: BTreeMap::from([("Email".to_owned(), text(email))]),
        };
        properties.insert(
            "Contact".to_owned(),
            pb::Value {
                kind: Some(pb::value::Kind::ObjectValue(contact)),
            },
        );
    }
    if let Some(tags) = &props.tags {
        let tags = pb::ArrayValue {
            values: tags.iter().map(text).collect(),
        };
        properties.insert(
            "Tags".to_owned(),
            pb::Value {
                kind: Some(pb::value::Kind::ArrayValue(tags)),
            },
        );
    }
    if let Some(last) = &props.last {
        properties.insert("Last".to_owned(), text(last));
    }
    if let Some(first) = &props.first {
        properties.insert("First".to_owned(), text(first));
    }
    if let Some(score) = props.score {
        properties.insert(
            "Score".to_owned(),
            pb::Value {
                kind: Some(pb::value::Kind::Int32Value(score)),
            },
        );
    }
    pb::Entity {
        partition_key: partition.into(),
        row_key: row.into(),
        properties,
        ..Default::default()
    }
}

fn props_of(entity: &pb::Entity) -> Props {
    let text = |name: &str| match entity.properties.get(name).and_then(|v| v.kind.clone()) {
        Some(pb::value::Kind::StringValue(s)) => Some(s),
        _ => None,
    };
    let kind = |name: &str| entity.properties.get(name).and_then(|v| v.kind.clone());
    let email = match kind("Contact") {
        Some(pb::value::Kind::ObjectValue(contact)) => match contact.members.get("Email") {
            Some(pb::Value {
                kind: Some(pb::value::Kind::StringValue(email)),
            }) => Some(email.clone()),
            _ => None,
        },
        _ => None,
    };
    let tags = match kind("Tags") {
        Some(pb::value::Kind::ArrayValue(tags)) => Some(
            tags.values
                .into_iter()
                .filter_map(|v| match v.kind {
                    Some(pb::value::Kind::StringValue(tag)) => Some(tag),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    };
    Props {
        email,
        tags,
        last: text("Last"),
        first: text("First"),
        score: match entity.properties.get("Score").and_then(|v| v.kind.clone()) {
            Some(pb::value::Kind::Int32Value(s)) => Some(s),
            _ => None,
        },
    }
}

/// The patch (with upsert) of a `PatchScore` or `AddTag` write.
fn patch_request(partition: &str, write: &Write) -> pb::PatchEntityRequest {
    let (row, step) = match write {
        Write::PatchScore(row, Some(score)) => (
            row,
            pb::patch_step::Step::Set(pb::SetStep {
                property: "Score".into(),
                value: Some(pb::Value {
                    kind: Some(pb::value::Kind::Int32Value(*score)),
                }),
            }),
        ),
        Write::AddTag(row, tag) => (
            row,
            pb::patch_step::Step::AddToSet(pb::SetStep {
                property: "Tags".into(),
                value: Some(pb::Value {
                    kind: Some(pb::value::Kind::StringValue(tag.clone())),
                }),
            }),
        ),
        Write::PatchScore(row, None) => (
            row,
            pb::patch_step::Step::Remove(pb::RemoveStep {
                property: "Score".into(),
            }),
        ),
        other => unreachable!("{other:?} is no patch"),
    };
    pb::PatchEntityRequest {
        table: TABLE.into(),
        partition_key: partition.into(),
        row_key: row.into(),
        operations: vec![pb::PatchStep { step: Some(step) }],
        upsert: true,
        ..Default::default()
    }
}

async fn single(
    client: &mut ModelClient,
    partition: &str,
    write: &Write,
) -> Result<(), tonic::Status> {
    match write {
        Write::Insert(row, props) => client
            .insert_entity(pb::InsertEntityRequest {
                table: TABLE.into(),
                entity: Some(entity(partition, row, props)),
                ..Default::default()
            })
            .await
            .map(drop),
        Write::Replace(row, props) => client
            .upsert_entity(pb::UpsertEntityRequest {
                table: TABLE.into(),
                entity: Some(entity(partition, row, props)),
                mode: pb::UpsertMode::Replace as i32,
                ..Default::default()
            })
            .await
            .map(drop),
        Write::Merge(row, props) => client
            .merge_entity(pb::MergeEntityRequest {
                table: TABLE.into(),
                entity: Some(entity(partition, row, props)),
                if_match: "*".into(),
                ..Default::default()
            })
            .await
            .map(drop),
        Write::Delete(row) => client
            .delete_entity(pb::DeleteEntityRequest {
                idempotency_key: String::new(),
                table: TABLE.into(),
                partition_key: partition.into(),
                row_key: row.clone(),
                if_match: "*".into(),
            })
            .await
            .map(drop),
        Write::PatchScore(..) | Write::AddTag(..) => client
            .patch_entity(patch_request(partition, write))
            .await
            .map(drop),
    }
}

fn transaction_op(partition: &str, write: &Write) -> pb::TransactionOperation {
    use pb::transaction_operation::Operation;
    let operation = match write {
        Write::Insert(row, props) => Operation::Insert(pb::InsertOperation {
            entity: Some(entity(partition, row, props)),
        }),
        Write::Replace(row, props) => Operation::Upsert(pb::UpsertOperation {
            entity: Some(entity(partition, row, props)),
            mode: pb::UpsertMode::Replace as i32,
        }),
        Write::Merge(row, props) => Operation::Merge(pb::MergeOperation {
            entity: Some(entity(partition, row, props)),
            if_match: "*".into(),
        }),
        Write::Delete(row) => Operation::Delete(pb::DeleteOperation {
            row_key: row.clone(),
            if_match: "*".into(),
        }),
        Write::PatchScore(..) | Write::AddTag(..) => {
            let patch = patch_request(partition, write);
            Operation::Patch(pb::PatchOperation {
                row_key: patch.row_key,
                operations: patch.operations,
                upsert: true,
                ..Default::default()
            })
        }
    };
    pb::TransactionOperation {
        operation: Some(operation),
    }
}

fn error_reason(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_else(|| format!("{status:?}"))
}
