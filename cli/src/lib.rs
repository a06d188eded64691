//! `trestle`, the command line of Trestle, built on its SDK: tables, entities with typed
//! properties, queries printed as a table, JSON lines or CSV, counts, a table's export to and
//! import from JSON lines that keep every type, and a copy of a table from an Azure Table
//! endpoint. [`run`] does what one command line asks, writing
//! to the given output, so that the tests drive it against a real server without a process.

mod args;
mod azure;
mod output;
mod transfer;
mod values;

use std::io::{BufRead, Write};

use clap::CommandFactory;
use futures_util::TryStreamExt;
use trestle_client::{Client, Entity, IfMatch, Properties, Query, UpsertMode};

pub use args::{Cli, Command, Format, ImportMode};

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line or an input line is wrong.
    #[error("{0}")]
    Usage(String),
    /// The server refused or could not be reached.
    #[error("{}{}", .0.message(), .0.reason().map(|r| format!(" ({r})")).unwrap_or_default())]
    Server(#[from] trestle_client::Error),
    /// The source of a copy refused, could not be reached or answered what is not a table.
    #[error("the source: {0}")]
    Source(String),
    /// Writing the output failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
}

/// The command line `args` (the program's name first), or what is wrong with it.
pub fn parse<I, T>(args: I) -> Result<Cli, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser;
    Cli::try_parse_from(args).map_err(|error| CliError::Usage(error.to_string()))
}

/// Runs `cli`, reading `input` (for `import`) and writing its answer to `out`; progress of long
/// work goes to standard error when it is a terminal.
pub async fn run(cli: Cli, input: &mut dyn BufRead, out: &mut dyn Write) -> Result<(), CliError> {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "trestle", out);
        return Ok(());
    }
    let client = connect(cli.endpoint, cli.token).await?;
    match cli.command {
        Command::Tables { prefix } => {
            for name in client.list_tables(&prefix).await? {
                writeln!(out, "{name}")?;
            }
        }
        Command::Create { table } => client.table(table).create().await?,
        Command::Drop { table } => client.table(table).delete_table().await?,
        Command::Get {
            table,
            partition_key,
            row_key,
            format,
        } => {
            let key = (partition_key, row_key);
            let entity = client.table(table).get::<Properties>(key).await?;
            output::print(format, &[entity], out)?;
        }
        Command::Put(write) => {
            writeln!(out, "{}", put(&client, write, UpsertMode::Replace).await?)?
        }
        Command::Merge(write) => {
            writeln!(out, "{}", put(&client, write, UpsertMode::Merge).await?)?
        }
        Command::Delete {
            table,
            partition_key,
            row_key,
            if_match,
        } => {
            let key = (partition_key, row_key);
            let if_match = if_match.map_or(IfMatch::Any, |etag| IfMatch::Tag(etag.into()));
            client.table(table).delete(key, if_match).await?;
        }
        Command::Query {
            query,
            select,
            reverse,
            order_by,
            limit,
            format,
        } => {
            let order = Order {
                reverse,
                order_by,
                limit,
            };
            let entities = find(&client, &query, select, order).await?;
            output::print(format, &entities, out)?;
        }
        Command::Count { query } => {
            let count = transfer::while_counting(query_of(&client, &query).count()).await?;
            writeln!(out, "{count}")?;
        }
        Command::Aggregate {
            query,
            aggregations,
            group_by,
        } => {
            let mut aggregate = query_of(&client, &query).aggregate();
            for aggregation in &aggregations {
                aggregate = with_aggregation(aggregate, aggregation)?;
            }
            for path in &group_by {
                aggregate = aggregate.group_by(path.clone());
            }
            let groups = transfer::while_counting(aggregate.groups()).await?;
            let mut header = group_by.clone();
            header.extend(aggregations.iter().cloned());
            header.push("entities".to_owned());
            let rows = groups.iter().map(|group| {
                let cells = group.keys.iter().chain(&group.values).map(values::cell);
                cells.chain([group.entities.to_string()]).collect()
            });
            output::columns(out, header, rows.collect())?;
        }
        Command::Export {
            table,
            filter,
            parallel,
        } => transfer::export(&client.table(table), filter, parallel, out).await?,
        Command::Import { table, mode } => {
            let report = transfer::import(&client.table(table), mode, input).await?;
            writeln!(out, "{report}")?;
        }
        Command::Copy {
            from,
            table,
            to_table,
            filter,
            mode,
        } => {
            let into = client.table(to_table.unwrap_or_else(|| table.clone()));
            let azure = azure::AzureTables::from_connection_string(&from)?;
            let report = transfer::copy(&azure, &table, filter, &into, mode).await?;
            writeln!(out, "{report}")?;
        }
        // Answered above, before connecting.
        Command::Completions { .. } => {}
    }
    Ok(())
}

/// A client of the server at `endpoint`, presenting `token` if given.
async fn connect(endpoint: String, token: Option<String>) -> Result<Client, CliError> {
    let mut builder = Client::builder().endpoint(endpoint);
    if let Some(token) = token {
        builder = builder.token(token);
    }
    Ok(builder.connect().await?)
}

/// The entities `query` finds, with the properties `select` names (all if empty), in reverse
/// order if asked, at most `limit`.
/// The order and number of a query's results (`trestle query`).
struct Order {
    reverse: bool,
    /// Terms as `$orderby` writes them: `Age desc,Name`.
    order_by: Option<String>,
    limit: Option<usize>,
}

async fn find(
    client: &Client,
    query: &args::QueryArgs,
    select: Vec<String>,
    order: Order,
) -> Result<Vec<Entity<Properties>>, CliError> {
    let Order {
        reverse,
        order_by,
        limit,
    } = order;
    let mut found = query_of(client, query).select(select);
    if reverse {
        found = found.reverse();
    }
    for term in order_by.iter().flat_map(|terms| terms.split(',')) {
        let mut words = term.split_whitespace();
        let path = words.next().unwrap_or_default().to_owned();
        found = match words.next() {
            Some("desc") => found.order_by_desc(path),
            None | Some("asc") => found.order_by(path),
            // Anything else the server refuses as a path, naming the term.
            Some(_) => found.order_by(term.trim()),
        };
    }
    if let Some(limit) = limit {
        // A sorted page reads every match: let the first page hold what is asked.
        found = found.page_size(limit.clamp(1, 1000) as u32);
    }
    let mut stream = found.stream();
    let mut entities = Vec::new();
    while limit.is_none_or(|limit| entities.len() < limit) {
        match stream.try_next().await? {
            Some(entity) => entities.push(entity),
            None => break,
        }
    }
    Ok(entities)
}

/// Upserts the entity `write` describes; its new ETag.
async fn put(client: &Client, write: args::Write, mode: UpsertMode) -> Result<String, CliError> {
    let mut properties = Properties::new();
    for text in &write.properties {
        let (name, value) = values::parse_property(text)?;
        properties.set(name, value);
    }
    let etag = client
        .table(write.table)
        .upsert((write.partition_key, write.row_key), &properties, mode)
        .await?;
    Ok(etag.as_str().to_owned())
}

/// The query `args` describes, of every property.
/// `aggregate` with the aggregation `text` names (`count`, or `<function>:<path>`) added.
fn with_aggregation(
    aggregate: trestle_client::Aggregate,
    text: &str,
) -> Result<trestle_client::Aggregate, CliError> {
    Ok(match text.split_once(':') {
        None if text == "count" => aggregate.count(),
        Some(("count", path)) => aggregate.count_of(path),
        Some(("sum", path)) => aggregate.sum(path),
        Some(("avg", path)) => aggregate.avg(path),
        Some(("min", path)) => aggregate.min(path),
        Some(("max", path)) => aggregate.max(path),
        _ => {
            return Err(CliError::Usage(format!(
                "aggregation {text:?}: write count, or count:, sum:, avg:, min: or max: then a \
                 path (sum:Amount)"
            )))
        }
    })
}

fn query_of(client: &Client, args: &args::QueryArgs) -> Query<Properties> {
    let mut query = client.table(args.table.clone()).entities();
    if let Some(partition) = &args.partition {
        query = query.partition(partition.clone());
    }
    if let Some(prefix) = &args.prefix {
        query = query.row_key_prefix(prefix.clone());
    }
    if let Some(filter) = &args.filter {
        query = query.filter(trestle_client::Filter::raw(filter.clone()));
    }
    query
}
