//! Scan segments: a table's partitions split into `total` disjoint parts by a hash of the
//! PartitionKey, so that `total` workers can each read one part (DynamoDB's `Segment` and
//! `TotalSegments`). A partition lies whole in one segment, whatever is written meanwhile, so a
//! segment keeps a partition's snapshot rule and the segments together are exactly the table.

use super::ValidationError;

/// Most segments a table can be split into.
pub const MAX_TOTAL_SEGMENTS: u32 = 1024;

/// One segment of a table: the `index`th of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    index: u32,
    total: u32,
}

impl Segment {
    /// The segment a request names: `None` for `total` 0 (no segments); refused unless
    /// `index < total <= MAX_TOTAL_SEGMENTS`.
    pub fn of(index: u32, total: u32) -> Result<Option<Segment>, ValidationError> {
        if total == 0 {
            if index != 0 {
                return Err(ValidationError::Argument(
                    "segment needs total_segments".into(),
                ));
            }
            return Ok(None);
        }
        if total > MAX_TOTAL_SEGMENTS {
            return Err(ValidationError::Argument(format!(
                "total_segments is {total}; at most {MAX_TOTAL_SEGMENTS}"
            )));
        }
        if index >= total {
            return Err(ValidationError::Argument(format!(
                "segment is {index}; segments of {total} are numbered 0 to {}",
                total - 1
            )));
        }
        Ok(Some(Segment { index, total }))
    }

    /// Which segment of `total` holds `partition_key` ([`trestle_proto::segment::index_of`]).
    pub fn index_of(partition_key: &str, total: u32) -> u32 {
        trestle_proto::segment::index_of(partition_key, total)
    }

    /// Whether the segment holds `partition_key`'s partition.
    pub fn holds(&self, partition_key: &str) -> bool {
        Segment::index_of(partition_key, self.total) == self.index
    }

    /// The segment's number, from 0.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many segments the table is split into.
    pub fn total(&self) -> u32 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_is_in_exactly_one_segment_and_they_share_the_work() {
        for total in [1, 2, 4, 7, 1024] {
            let mut counts = vec![0usize; total as usize];
            for n in 0..10_000 {
                let pk = format!("p{n}");
                let holders: Vec<u32> = (0..total)
                    .filter(|&i| Segment::of(i, total).unwrap().unwrap().holds(&pk))
                    .collect();
                assert_eq!(holders.len(), 1, "{pk} of {total}");
                counts[holders[0] as usize] += 1;
            }
            if total <= 7 {
                let fair = 10_000 / total as usize;
                assert!(
                    counts.iter().all(|&c| c > fair * 8 / 10),
                    "{total}: {counts:?}"
                );
            }
        }
    }

    #[test]
    fn a_segment_outside_its_total_is_refused() {
        assert_eq!(Segment::of(0, 0).unwrap(), None);
        assert!(Segment::of(1, 0).is_err());
        assert!(Segment::of(4, 4).is_err());
        assert!(Segment::of(0, MAX_TOTAL_SEGMENTS + 1).is_err());
        assert!(Segment::of(MAX_TOTAL_SEGMENTS - 1, MAX_TOTAL_SEGMENTS).is_ok());
    }

    #[test]
    fn the_hash_stays_what_tokens_were_issued_under() {
        // Changing these moves partitions between segments under issued tokens.
        assert_eq!(Segment::index_of("", 1 << 16), 0xefd0);
        assert_eq!(Segment::index_of("a", 1 << 16), 0x82a2);
    }
}
