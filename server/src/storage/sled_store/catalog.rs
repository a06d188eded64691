//! The table catalog: which tables exist, their sled tree, and which are being reclaimed.
//!
//! A record, keyed by the folded (lower-case) name, is `[format u8 = 1][state u8][id u64 BE][name]`.
//! Deletion first marks the record `Deleting` (durably), so the table is gone for every reader at
//! once; the background reclaimer drops the tree and only then removes the record. A crash at any
//! point leaves either a live table or a `Deleting` record that the next start finishes.

use super::StorageError;
use crate::model::TableName;

const FORMAT_V1: u8 = 1;

/// The lifecycle state of a catalog record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableState {
    Active,
    Deleting,
}

/// One catalog record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableRecord {
    pub(crate) id: u64,
    pub(crate) state: TableState,
    pub(crate) name: TableName,
}

impl TableRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![
            FORMAT_V1,
            match self.state {
                TableState::Active => 0,
                TableState::Deleting => 1,
            },
        ];
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(self.name.as_str().as_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<TableRecord, StorageError> {
        let corrupt = || StorageError::Corrupt("unreadable catalog record".into());
        if bytes.len() < 10 || bytes[0] != FORMAT_V1 {
            return Err(corrupt());
        }
        let state = match bytes[1] {
            0 => TableState::Active,
            1 => TableState::Deleting,
            _ => return Err(corrupt()),
        };
        let id = u64::from_be_bytes(bytes[2..10].try_into().map_err(|_| corrupt())?);
        let name = std::str::from_utf8(&bytes[10..]).map_err(|_| corrupt())?;
        let name = TableName::stored(name).map_err(|_| corrupt())?;
        Ok(TableRecord { id, state, name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let record = TableRecord {
            id: 7,
            state: TableState::Deleting,
            name: TableName::parse("MyTable").unwrap(),
        };
        assert_eq!(TableRecord::decode(&record.encode()).unwrap(), record);
        assert!(TableRecord::decode(&[1, 0]).is_err());
    }
}
