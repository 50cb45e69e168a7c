//! Seeded message chaos: duplicate, reorder, drop and delay envelopes.
//!
//! [`Chaos`] is pure: given its seeded RNG it decides, per message, the list of delivery delays
//! ([`Chaos::deliveries`]): none would be a loss, two a duplicate. A dropped message is re-sent
//! by the transport after `resend_ms` (at-least-once delivery with retransmission), subject to the
//! same drop probability, and delivered for sure after [`MAX_RESENDS`] tries, so runs still end.
//! The re-sent copy is the same envelope with the same dedupe key.

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Retransmissions after which a dropped message is delivered regardless.
pub const MAX_RESENDS: u32 = 8;

/// Probabilities and delays of the chaos transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChaosConfig {
    /// Probability that a message is delivered twice.
    pub dup: f64,
    /// Probability that a message is held back long enough to be overtaken.
    pub reorder: f64,
    /// Probability that a transmission is lost (and re-sent after `resend_ms`).
    pub drop: f64,
    /// Upper bound of the random delay of every delivery, in milliseconds.
    pub delay_ms: u64,
    /// Retransmission timeout for dropped messages, in milliseconds.
    pub resend_ms: u64,
}

/// A `--chaos` specification was malformed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ChaosError {
    /// An item was not `key=value`.
    #[error("chaos item {item:?} is not key=value (expected e.g. dup=0.1,reorder=0.2,drop=0.05,delay=20)")]
    NotKeyValue {
        /// The item.
        item: String,
    },
    /// An unknown key.
    #[error("unknown chaos key {key:?}; known keys are dup, reorder, drop, delay, resend")]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A key given twice (which one was meant?).
    #[error("chaos key {key:?} is given more than once")]
    RepeatedKey {
        /// The key.
        key: String,
    },
    /// A probability outside `[0, 1]` or not a number.
    #[error("chaos {key} must be a probability in [0, 1], got {value:?}")]
    BadProbability {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// A delay that is not a whole number of milliseconds.
    #[error("chaos {key} must be whole milliseconds, got {value:?}")]
    BadMillis {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
}

impl FromStr for ChaosConfig {
    type Err = ChaosError;

    /// Parses `dup=P,reorder=P,drop=P,delay=MS[,resend=MS]`; omitted keys are 0 (resend: 50).
    ///
    /// ```
    /// use quorate_coordinator::chaos::ChaosConfig;
    /// let c: ChaosConfig = "dup=0.1,drop=0.05,delay=20".parse().unwrap();
    /// assert_eq!((c.dup, c.drop, c.delay_ms, c.resend_ms), (0.1, 0.05, 20, 50));
    /// assert!("drop=1.5".parse::<ChaosConfig>().is_err());
    /// assert_eq!(
    ///     "dup=0.1,dup=0.9".parse::<ChaosConfig>().unwrap_err().to_string(),
    ///     "chaos key \"dup\" is given more than once"
    /// );
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut c = ChaosConfig {
            resend_ms: 50,
            ..ChaosConfig::default()
        };
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| ChaosError::NotKeyValue {
                    item: item.to_string(),
                })?;
            if seen.contains(&key) {
                return Err(ChaosError::RepeatedKey {
                    key: key.to_string(),
                });
            }
            seen.push(key);
            let prob = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| ChaosError::BadProbability {
                        key: key.to_string(),
                        value: value.to_string(),
                    })
            };
            let millis = || {
                value.parse::<u64>().map_err(|_| ChaosError::BadMillis {
                    key: key.to_string(),
                    value: value.to_string(),
                })
            };
            match key {
                "dup" => c.dup = prob()?,
                "reorder" => c.reorder = prob()?,
                "drop" => c.drop = prob()?,
                "delay" => c.delay_ms = millis()?,
                "resend" => c.resend_ms = millis()?,
                _ => {
                    return Err(ChaosError::UnknownKey {
                        key: key.to_string(),
                    })
                }
            }
        }
        Ok(c)
    }
}

impl fmt::Display for ChaosConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dup={},reorder={},drop={},delay={},resend={}",
            self.dup, self.reorder, self.drop, self.delay_ms, self.resend_ms
        )
    }
}

/// What the chaos transport did, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChaosCounts {
    /// Messages handed to the transport.
    pub messages: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Messages held back to be overtaken.
    pub reordered: u64,
    /// Transmissions lost (each was re-sent).
    pub dropped: u64,
}

/// The seeded chaos decision maker.
#[derive(Debug, Clone)]
pub struct Chaos {
    config: ChaosConfig,
    rng: ChaCha8Rng,
    counts: ChaosCounts,
}

impl Chaos {
    /// Chaos with `config`, seeded.
    #[must_use]
    pub fn new(config: ChaosConfig, seed: u64) -> Self {
        Self {
            config,
            rng: ChaCha8Rng::seed_from_u64(seed),
            counts: ChaosCounts::default(),
        }
    }

    /// What happened so far.
    #[must_use]
    pub fn counts(&self) -> ChaosCounts {
        self.counts
    }

    fn one_delivery(&mut self) -> u64 {
        let mut at = 0u64;
        let mut sends = 0;
        while sends < MAX_RESENDS && self.rng.gen_bool(self.config.drop) {
            self.counts.dropped += 1;
            at += self.config.resend_ms;
            sends += 1;
        }
        if self.config.delay_ms > 0 {
            at += self.rng.gen_range(0..=self.config.delay_ms);
        }
        if self.rng.gen_bool(self.config.reorder) {
            self.counts.reordered += 1;
            at += self.config.delay_ms.max(1) + self.rng.gen_range(0..=self.config.delay_ms.max(1));
        }
        at
    }

    /// The delays (ms from now) at which one message is delivered: one entry normally, two for a
    /// duplicate. Never empty: a loss becomes a later retransmission.
    pub fn deliveries(&mut self) -> Vec<u64> {
        self.counts.messages += 1;
        let mut out = vec![self.one_delivery()];
        if self.rng.gen_bool(self.config.dup) {
            self.counts.duplicated += 1;
            out.push(self.one_delivery());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_decisions() {
        let cfg: ChaosConfig = "dup=0.3,reorder=0.3,drop=0.3,delay=10".parse().unwrap();
        let a: Vec<_> = {
            let mut c = Chaos::new(cfg, 7);
            (0..100).map(|_| c.deliveries()).collect()
        };
        let mut c = Chaos::new(cfg, 7);
        let b: Vec<_> = (0..100).map(|_| c.deliveries()).collect();
        assert_eq!(a, b);
        let counts = c.counts();
        assert!(
            counts.duplicated > 10 && counts.dropped > 10 && counts.reordered > 10,
            "{counts:?}"
        );
        // A dropped transmission is re-sent after `resend_ms`, at most MAX_RESENDS times: with
        // drops, some delivery is at least one resend late, and none is later than all resends
        // plus the largest delay and reorder hold.
        let latest = *b.iter().flatten().max().unwrap();
        assert!(latest >= cfg.resend_ms, "some delivery waited for a resend");
        let bound = u64::from(MAX_RESENDS) * cfg.resend_ms + 3 * cfg.delay_ms + 1;
        assert!(latest <= bound, "{latest} > {bound}");
    }

    #[test]
    fn no_chaos_delivers_once_now() {
        let mut c = Chaos::new(ChaosConfig::default(), 1);
        assert!((0..50).all(|_| c.deliveries() == vec![0]));
    }

    #[test]
    fn errors_name_the_input() {
        assert_eq!(
            "dup=x".parse::<ChaosConfig>(),
            Err(ChaosError::BadProbability {
                key: "dup".into(),
                value: "x".into()
            })
        );
        assert_eq!(
            "jitter=3".parse::<ChaosConfig>(),
            Err(ChaosError::UnknownKey {
                key: "jitter".into()
            })
        );
        assert_eq!(
            "delay".parse::<ChaosConfig>(),
            Err(ChaosError::NotKeyValue {
                item: "delay".into()
            })
        );
    }
}
