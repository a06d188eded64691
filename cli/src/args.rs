//! The command line: every command, its arguments and flags.

use clap::{Parser, Subcommand, ValueEnum};

/// trestle: look at and change the data of a Trestle server.
#[derive(Debug, Parser)]
#[command(name = "trestle", version, about)]
pub struct Cli {
    /// The server's address.
    #[arg(
        long,
        env = "TRESTLE_ENDPOINT",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub endpoint: String,
    /// An account key or scoped token, sent with every request. A key may begin with `-`.
    #[arg(
        long,
        env = "TRESTLE_TOKEN",
        global = true,
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    pub token: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// A command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Lists the tables (whose name starts with --prefix, ignoring case).
    Tables {
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Creates a table.
    Create { table: String },
    /// Deletes a table and everything in it.
    Drop { table: String },
    /// Prints one entity.
    Get {
        table: String,
        #[arg(allow_hyphen_values = true)]
        partition_key: String,
        #[arg(allow_hyphen_values = true)]
        row_key: String,
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
    },
    /// Inserts or replaces an entity: properties as `Name=Ada` (a String) or `Age:int32=42`
    /// (types string, int32, int64, double, bool, datetime, guid, binary in base64, json for a
    /// document or any JSON value).
    Put(Write),
    /// Merges properties into an entity, inserting it if missing.
    Merge(Write),
    /// Deletes an entity.
    Delete {
        table: String,
        #[arg(allow_hyphen_values = true)]
        partition_key: String,
        #[arg(allow_hyphen_values = true)]
        row_key: String,
        /// Only this version (an ETag); any version without it.
        #[arg(long)]
        if_match: Option<String>,
    },
    /// Prints the entities a query finds.
    Query {
        #[command(flatten)]
        query: QueryArgs,
        /// Only these properties (comma-separated; paths into documents allowed).
        #[arg(long, value_delimiter = ',')]
        select: Vec<String>,
        /// Newest first: in reverse key order.
        #[arg(long)]
        reverse: bool,
        /// Sorted by these paths, each optionally followed by `desc` (comma-separated; at most 4):
        /// `--order-by "Age desc,Name"`.
        #[arg(long)]
        order_by: Option<String>,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Counts the entities a query finds.
    Count {
        #[command(flatten)]
        query: QueryArgs,
    },
    /// Aggregates the entities a query finds, computed by the server: each of `count`,
    /// `count:PATH`, `sum:PATH`, `avg:PATH`, `min:PATH`, `max:PATH`, a column each, per group of
    /// the --group-by paths' values.
    Aggregate {
        #[command(flatten)]
        query: QueryArgs,
        /// The aggregations, in the order of their columns (e.g. `count sum:Amount`).
        #[arg(required = true)]
        aggregations: Vec<String>,
        /// Paths whose values make a group (comma-separated; at most 4).
        #[arg(long, value_delimiter = ',')]
        group_by: Vec<String>,
    },
    /// Writes a table's entities (those --filter matches) as JSON lines that keep every type.
    Export {
        table: String,
        #[arg(long)]
        filter: Option<String>,
        /// Reads the table as this many segments at once (1 to 1024), each in key order, their
        /// lines interleaved as they come.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
        parallel: u32,
    },
    /// Reads JSON lines (as `export` writes them, in any order) into a table, created if missing:
    /// transactions of up to 100 entities of one partition, 8 at once. Run again after an
    /// interruption: `--mode upsert` rewrites what is there, `--mode insert` skips what exists.
    Import {
        table: String,
        #[arg(long, value_enum, default_value_t = ImportMode::Insert)]
        mode: ImportMode,
    },
    /// Copies a table of an Azure Table endpoint (Azure, Azurite or another Trestle's REST
    /// endpoint) into a table here, created if missing, page by page with every type kept. Each
    /// entity's Timestamp and ETag are this server's. Run again after an interruption: `--mode
    /// insert` skips what was copied, `--mode upsert` rewrites it.
    Copy {
        /// The source's Azure Storage connection string (`AccountName=..;AccountKey=..;
        /// TableEndpoint=..`, a `SharedAccessSignature`, or `UseDevelopmentStorage=true`).
        #[arg(long, env = "AZURE_STORAGE_CONNECTION_STRING", hide_env_values = true)]
        from: String,
        /// The source table.
        #[arg(long)]
        table: String,
        /// The table written here (the source's name without it).
        #[arg(long)]
        to_table: Option<String>,
        /// Only the source's entities this Azure `$filter` matches.
        #[arg(long)]
        filter: Option<String>,
        #[arg(long, value_enum, default_value_t = ImportMode::Insert)]
        mode: ImportMode,
    },
    /// Prints a shell's completion script (`trestle completions bash > /etc/bash_completion.d/trestle`).
    Completions { shell: clap_complete::Shell },
}

/// An entity to write and its properties.
#[derive(Debug, clap::Args)]
pub struct Write {
    pub table: String,
    #[arg(allow_hyphen_values = true)]
    pub partition_key: String,
    #[arg(allow_hyphen_values = true)]
    pub row_key: String,
    /// `Name=value` or `Name:type=value`.
    pub properties: Vec<String>,
}

/// Which entities a query reads.
#[derive(Debug, clap::Args)]
pub struct QueryArgs {
    pub table: String,
    /// One partition.
    #[arg(long, allow_hyphen_values = true)]
    pub partition: Option<String>,
    /// RowKeys starting with this (with --partition).
    #[arg(long, requires = "partition", allow_hyphen_values = true)]
    pub prefix: Option<String>,
    /// An Azure `$filter`, e.g. "Age ge 30 and Address/City eq 'Seattle'".
    #[arg(long)]
    pub filter: Option<String>,
}

/// How entities are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns, for reading.
    Table,
    /// One JSON object a line, every type kept (as `export` writes).
    Json,
    /// Comma-separated values with a header row.
    Csv,
}

/// How `import` and `copy` treat an entity that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportMode {
    /// Keep it, and skip the one imported.
    Insert,
    /// Replace it.
    Upsert,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from(args).expect("parsed").command
    }

    #[test]
    fn keys_may_begin_with_a_hyphen_and_flags_still_follow_them() {
        let Command::Get {
            partition_key,
            row_key,
            format,
            ..
        } = parse(&["trestle", "get", "T", "-1", "-r", "--format", "csv"])
        else {
            panic!("not a get");
        };
        assert_eq!((partition_key.as_str(), row_key.as_str()), ("-1", "-r"));
        assert_eq!(format, Format::Csv);
        let Command::Delete {
            partition_key,
            if_match,
            ..
        } = parse(&["trestle", "delete", "T", "-p", "r", "--if-match", "W/\"x\""])
        else {
            panic!("not a delete");
        };
        assert_eq!(
            (partition_key.as_str(), if_match.as_deref()),
            ("-p", Some("W/\"x\""))
        );
        let Command::Put(write) = parse(&["trestle", "put", "T", "-p", "-r", "Amount:int32=-5"])
        else {
            panic!("not a put");
        };
        assert_eq!(
            (write.partition_key.as_str(), write.row_key.as_str()),
            ("-p", "-r")
        );
        assert_eq!(write.properties, ["Amount:int32=-5"]);
        let Command::Query { query, limit, .. } = parse(&[
            "trestle",
            "query",
            "T",
            "--partition",
            "-p",
            "--prefix",
            "-r",
            "--limit",
            "3",
        ]) else {
            panic!("not a query");
        };
        assert_eq!(query.partition.as_deref(), Some("-p"));
        assert_eq!(query.prefix.as_deref(), Some("-r"));
        assert_eq!(limit, Some(3));
    }

    #[test]
    fn keys_without_a_hyphen_parse_as_before() {
        let Command::Get {
            partition_key,
            row_key,
            format,
            ..
        } = parse(&["trestle", "get", "T", "p", "r", "--format", "table"])
        else {
            panic!("not a get");
        };
        assert_eq!((partition_key.as_str(), row_key.as_str()), ("p", "r"));
        assert_eq!(format, Format::Table);
        assert!(Cli::try_parse_from(["trestle", "get", "T", "p"]).is_err());
    }
}
