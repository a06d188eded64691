//! A small deterministic random source (xorshift), so that a failing run replays from its seed.
//! Shared by the test models (`index_model.rs`, `bank.rs`), which include it by path.
#![allow(dead_code, unreachable_pub)]

/// xorshift64.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
