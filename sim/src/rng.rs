//! The simulation's one source of randomness: SplitMix64 from the scenario's seed.
//! Every value that would be random in production (run ids, backoff jitter seeds,
//! quinn's endpoint seeds, endpoint secrets, store node ids, message loss) is drawn
//! from here or from a stream forked from it, in a fixed order.

/// A seeded SplitMix64 generator: small, fast, and good enough to spread test values.
#[derive(Debug, Clone)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// 32 random bytes.
    pub fn bytes32(&mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_be_bytes());
        }
        out
    }

    /// An independent stream named `label`, the same for the same seed and label
    /// whatever was drawn before.
    pub fn fork(&self, label: &str) -> SimRng {
        SimRng::new(mix(self.state ^ hash(label)))
    }
}

/// SplitMix64's finalizer.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over a string: stable names to numbers.
pub fn hash(s: &str) -> u64 {
    s.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_forks_are_stable() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        assert_eq!(a.fork("x").next_u64(), b.fork("x").next_u64());
        assert_ne!(a.fork("x").next_u64(), a.fork("y").next_u64());
        assert_ne!(SimRng::new(8).next_u64(), SimRng::new(7).next_u64());
    }
}
