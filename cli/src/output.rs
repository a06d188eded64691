//! Entities printed: aligned columns, typed JSON lines, or CSV; aggregates in columns.

use std::collections::BTreeSet;
use std::io::Write;

use trestle_client::{Entity, Properties};

use crate::args::Format;
use crate::values::{cell, entity_line};

/// Prints `entities` in `format`.
pub(crate) fn print(
    format: Format,
    entities: &[Entity<Properties>],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match format {
        Format::Json => {
            for entity in entities {
                writeln!(out, "{}", entity_line(entity))?;
            }
            Ok(())
        }
        Format::Table => table(entities, out),
        Format::Csv => csv(entities, out),
    }
}

/// The header and one row of cells an entity, its properties in the columns of every property
/// any of them has (in name order).
fn rows(entities: &[Entity<Properties>]) -> (Vec<String>, Vec<Vec<String>>) {
    let names: BTreeSet<&String> = entities.iter().flat_map(|e| e.value.0.keys()).collect();
    let mut header: Vec<String> = ["PartitionKey", "RowKey", "Timestamp"]
        .map(str::to_owned)
        .to_vec();
    header.extend(names.iter().map(|name| (*name).clone()));
    let rows = entities
        .iter()
        .map(|entity| {
            let mut row = vec![
                entity.key.partition_key.clone(),
                entity.key.row_key.clone(),
                entity.timestamp.to_rfc3339(),
            ];
            row.extend(
                names
                    .iter()
                    .map(|name| entity.value.get(name).map(cell).unwrap_or_default()),
            );
            row
        })
        .collect();
    (header, rows)
}

fn table(entities: &[Entity<Properties>], out: &mut dyn Write) -> std::io::Result<()> {
    let (header, rows) = rows(entities);
    columns(out, header, rows)
}

/// Prints `header` and `rows` in aligned columns.
pub(crate) fn columns(
    out: &mut dyn Write,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[String], out: &mut dyn Write| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        writeln!(out, "{}", padded.join("  ").trim_end())
    };
    line(&header, out)?;
    for row in &rows {
        line(row, out)?;
    }
    Ok(())
}

fn csv(entities: &[Entity<Properties>], out: &mut dyn Write) -> std::io::Result<()> {
    let (header, rows) = rows(entities);
    for row in std::iter::once(&header).chain(&rows) {
        let fields: Vec<String> = row.iter().map(|field| csv_field(field)).collect();
        write!(out, "{}\r\n", fields.join(","))?;
    }
    Ok(())
}

/// A CSV field (RFC 4180): quoted, quotes doubled, when it holds a comma, a quote or a line break.
fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}
