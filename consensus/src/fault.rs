//! Injected network faults ([`crate::FaultConfig`]): decided here, applied by the node to its
//! outgoing messages and by [`crate::Consensus::step`] to incoming ones, so cutting a link on
//! one side severs both directions. Drops use a seeded RNG so a failing schedule replays.

use crate::FaultConfig;
use hetsched_common::rng::SplitMix64;
use std::time::Duration;

/// The current faults and the RNG of drop decisions.
pub struct Faults {
    cfg: FaultConfig,
    rng: SplitMix64,
}

impl Default for Faults {
    fn default() -> Self {
        Self::new(FaultConfig::default())
    }
}

impl Faults {
    /// Faults from a configuration (the RNG restarts from its seed).
    pub fn new(cfg: FaultConfig) -> Self {
        let rng = SplitMix64::new(cfg.seed);
        Self { cfg, rng }
    }

    /// True when nothing is injected (the common case, checked first to stay cheap).
    pub fn healthy(&self) -> bool {
        !self.cfg.isolated
            && self.cfg.cut.is_empty()
            && self.cfg.drop_rate <= 0.0
            && self.cfg.delay.is_zero()
    }

    /// Whether a message to `to` may leave (cut, isolation, then a seeded drop).
    pub fn allow_out(&mut self, to: u64) -> bool {
        if self.cfg.isolated || self.cfg.cut.contains(&to) {
            return false;
        }
        !(self.cfg.drop_rate > 0.0 && self.rng.unit() < self.cfg.drop_rate)
    }

    /// Whether messages from `from` are accepted (cut links and isolation only; random drops
    /// are applied once, on the sending side).
    pub fn allow_in(&self, from: u64) -> bool {
        !(self.cfg.isolated || self.cfg.cut.contains(&from))
    }

    /// Extra delay on outgoing messages.
    pub fn delay(&self) -> Duration {
        self.cfg.delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_isolate_and_seeded_drops() {
        let mut f = Faults::default();
        assert!(f.healthy() && f.allow_out(2) && f.allow_in(2));
        f = Faults::new(FaultConfig {
            cut: [2].into(),
            ..Default::default()
        });
        assert!(!f.allow_out(2) && !f.allow_in(2) && f.allow_out(3) && f.allow_in(3));
        f = Faults::new(FaultConfig {
            isolated: true,
            ..Default::default()
        });
        assert!(!f.allow_out(3) && !f.allow_in(3));
        let drops = |seed| {
            let mut f = Faults::new(FaultConfig {
                seed,
                drop_rate: 0.5,
                ..Default::default()
            });
            (0..64).map(|_| f.allow_out(2)).collect::<Vec<_>>()
        };
        assert_eq!(drops(42), drops(42), "same seed, same schedule");
        let d = drops(42);
        assert!(d.iter().any(|&x| x) && d.iter().any(|&x| !x));
    }
}
