//! Which segment of a table (or of its change feed) holds a partition: the one hash the server
//! splits scans and feeds by and the SDK's feed processor dispatches a worker's changes to its
//! ranges by. Fixed for good: tokens, checkpoints and workers rely on it.

/// Which of `total` segments holds `partition_key`: the high bits of `total` times the FNV-1a
/// (64-bit) hash of its UTF-8 bytes, mixed by MurmurHash3's 64-bit finalizer (FNV-1a alone
/// leaves keys that differ in their last bytes close together).
pub fn index_of(partition_key: &str, total: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in partition_key.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    ((u128::from(hash) * u128::from(total)) >> 64) as u32
}
