//! The world's seeded random numbers.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// A deterministic random number source.
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// The source for `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.0.next_u64() % n }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.0.next_u64() as f64 / u64::MAX as f64) < p
    }

    /// A fresh 64-bit number (seeds for the nodes' own generators).
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}
