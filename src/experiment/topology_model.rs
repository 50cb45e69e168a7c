//! The closed forms of [`super::topology`]: who talks to whom, the token model, and what one
//! agent reads in a round. Pure arithmetic; the module docs of [`super::topology`] derive them.

use serde::{Deserialize, Serialize};

/// Who talks to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// A supervisor hub and `n - 1` workers.
    Star,
    /// Every participant talks to every other.
    AllToAll,
}

impl Topology {
    /// Messages per round for `n` participants: `2(n-1)` or `n(n-1)`.
    #[must_use]
    pub fn messages_per_round(self, n: u64) -> u64 {
        let others = n.saturating_sub(1);
        match self {
            Topology::Star => 2 * others,
            Topology::AllToAll => n * others,
        }
    }

    /// The name used in output.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Topology::Star => "star",
            Topology::AllToAll => "all-to-all",
        }
    }
}

/// What a participant reads each round (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TokenMode {
    /// Re-read the whole received history every round.
    #[default]
    Full,
    /// Read only the new messages.
    Delta,
    /// Read the new messages plus the previous round's artifact, not the dialogue.
    Artifact,
}

impl TokenMode {
    /// The name used on the command line and in output.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TokenMode::Full => "full",
            TokenMode::Delta => "delta",
            TokenMode::Artifact => "artifact",
        }
    }
}

/// The closed form of the token model: tokens read by all participants over `rounds` rounds.
#[must_use]
pub fn closed_form_tokens(
    topology: Topology,
    mode: TokenMode,
    n: u64,
    rounds: u64,
    m_tokens: u64,
) -> u64 {
    let m = topology.messages_per_round(n);
    match mode {
        TokenMode::Full => m_tokens * m * rounds * (rounds + 1) / 2,
        TokenMode::Delta => m_tokens * m * rounds,
        TokenMode::Artifact => {
            // Every participant produces output once n >= 2.
            let producers = if n >= 2 { n } else { 0 };
            m_tokens * m * rounds + m_tokens * producers * rounds.saturating_sub(1)
        }
    }
}

/// The largest context one agent reads in one round, per token mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReadPerRound {
    /// Re-reading the whole received history.
    pub full: u64,
    /// Only the new messages.
    pub delta: u64,
    /// New messages plus the previous round's artifact.
    pub artifact: u64,
}

impl ReadPerRound {
    /// The larger of the two reads in each mode.
    #[must_use]
    pub fn max(self, other: ReadPerRound) -> ReadPerRound {
        ReadPerRound {
            full: self.full.max(other.full),
            delta: self.delta.max(other.delta),
            artifact: self.artifact.max(other.artifact),
        }
    }

    /// The read in `mode`.
    #[must_use]
    pub fn get(self, mode: TokenMode) -> u64 {
        match mode {
            TokenMode::Full => self.full,
            TokenMode::Delta => self.delta,
            TokenMode::Artifact => self.artifact,
        }
    }
}

/// The closed form of the largest single-agent read of one round (see the module docs):
/// `(hub, worker)`; for all-to-all both are a peer's.
#[must_use]
pub fn closed_form_context(
    topology: Topology,
    n: u64,
    rounds: u64,
    m: u64,
) -> (ReadPerRound, ReadPerRound) {
    let others = n.saturating_sub(1);
    let artifact = if rounds > 1 && n >= 2 { m } else { 0 };
    let of = |inbox: u64| ReadPerRound {
        full: inbox * rounds,
        delta: inbox,
        artifact: inbox + artifact,
    };
    match topology {
        Topology::Star if n >= 2 => (of(others * m), of(m)),
        Topology::Star => (ReadPerRound::default(), ReadPerRound::default()),
        Topology::AllToAll => (of(others * m), of(others * m)),
    }
}
