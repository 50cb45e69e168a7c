//! A majority vote you can put in a pipeline: collect ballots from several agents, then decide.
//!
//! The answer type `A` is anything comparable, so the same vote is a right/wrong majority
//! (`A = bool`) or a plurality over many answers (`A = u32`, `String`, ...): the answer with the
//! most ballots wins, and only a tie between the top answers goes to the [`TiePolicy`]. With
//! [`TiePolicy::Draw`] and a uniform `draw`, each tied answer wins with probability
//! `1 / tied` (the seeded coin of the voting experiments).
//!
//! [`MajorityVote`] is a pure state machine (no I/O, no clock, no randomness of its own): cast
//! ballots with [`MajorityVote::cast`], then call [`MajorityVote::decide`]. It handles the cases
//! a real pipeline meets:
//!
//! * **Abstentions.** A [`Ballot::Abstain`] is recorded and paid for but counts for no answer
//!   and not towards the quorum.
//! * **Ties.** Several answers with the top count are resolved by the [`TiePolicy`]: report a
//!   [`Decision::Tie`], take the tied answer cast first, or pick one with a draw the caller
//!   supplies (so a seeded caller stays reproducible).
//! * **Budget per vote.** Every ballot (abstentions too) costs [`VoteConfig::cost_per_vote`];
//!   once the next ballot would exceed [`VoteConfig::budget`] it is refused with
//!   [`CastError::BudgetExhausted`] and the ballots already counted stand.
//! * **Correlated voters.** With [`VoteConfig::one_vote_per_source`], ballots that name the same
//!   evidence source count once (first sighting wins): voters who copied one source are one
//!   witness, not several.
//! * **Duplicates.** A second ballot from the same voter is refused.
//!
//! ```
//! use quorate_coordinator::vote::*;
//!
//! let mut vote = MajorityVote::new(VoteConfig { one_vote_per_source: true, ..VoteConfig::default() });
//! // Three voters read source 0 (which is wrong), two independent voters are right.
//! for voter in 0..3u32 { vote.cast(voter, Some(0), Ballot::Answer(false)).unwrap(); }
//! vote.cast(3, Some(1), Ballot::Answer(true)).unwrap();
//! vote.cast(4, Some(2), Ballot::Answer(true)).unwrap();
//! assert_eq!(vote.decide(0), Decision::Decided { answer: true, votes: 2, counted: 3 });
//! ```

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;

/// What one voter said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ballot<A> {
    /// An answer.
    Answer(A),
    /// The voter declined to answer (counts for nothing, still costs a vote).
    Abstain,
}

/// How a tie between answers with the same top count is resolved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TiePolicy {
    /// No decision: [`Decision::Tie`] lists the tied answers.
    #[default]
    NoDecision,
    /// The tied answer whose first ballot came first wins.
    FirstCast,
    /// The caller's draw picks: tied answer number `draw % tied` (in order of first ballot).
    Draw,
}

/// Settings of a vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VoteConfig {
    /// Tie resolution.
    pub ties: TiePolicy,
    /// Answers (not abstentions) needed before a decision is made.
    pub quorum: usize,
    /// What one ballot costs (in the caller's unit: tokens, cents...).
    pub cost_per_vote: u64,
    /// Total the vote may spend; `None`: unlimited.
    pub budget: Option<u64>,
    /// Count one ballot per evidence source.
    pub one_vote_per_source: bool,
}

impl Default for VoteConfig {
    /// Ties reported, quorum 1, free ballots, no budget, every ballot counted.
    fn default() -> Self {
        Self {
            ties: TiePolicy::NoDecision,
            quorum: 1,
            cost_per_vote: 0,
            budget: None,
            one_vote_per_source: false,
        }
    }
}

/// A ballot was refused; nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CastError {
    /// The voter already voted. Retrying cannot help.
    #[error("voter {voter} already voted")]
    DuplicateVoter {
        /// The voter.
        voter: String,
    },
    /// The ballot would take the vote past its budget. Retrying cannot help.
    #[error("vote budget exhausted: spent {spent} of {budget}, a ballot costs {cost}")]
    BudgetExhausted {
        /// Spent so far.
        spent: u64,
        /// One ballot's cost.
        cost: u64,
        /// The budget.
        budget: u64,
    },
}

/// What a cast ballot did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cast {
    /// The ballot counts for its answer.
    Counted,
    /// An abstention was recorded.
    Abstained,
    /// Its source had already voted; recorded and paid for, but not counted.
    SourceAlreadyCounted,
}

/// The outcome of a vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<A> {
    /// `answer` won with `votes` of the `counted` answers.
    Decided {
        /// The answer.
        answer: A,
        /// Ballots for it.
        votes: usize,
        /// Answers counted in all (abstentions and repeated sources excluded).
        counted: usize,
    },
    /// Several answers tied and the policy is [`TiePolicy::NoDecision`].
    Tie {
        /// The tied answers, in order of first ballot.
        answers: Vec<A>,
        /// Ballots each.
        votes: usize,
    },
    /// Fewer answers than the quorum.
    NoQuorum {
        /// Answers counted.
        counted: usize,
        /// Needed.
        quorum: usize,
    },
}

/// A majority (plurality) vote over answers of type `A` from voters named by `V` (any
/// `Eq + Hash` name: an index, an `AgentId`); casting a ballot is O(1) in the number of voters
/// and O(distinct answers) in the tally.
#[derive(Clone, Debug)]
pub struct MajorityVote<A, V = u32> {
    config: VoteConfig,
    /// Voters seen (a set: casting stays O(1) with thousands of voters).
    voters: HashSet<V>,
    sources: HashSet<u64>,
    /// Distinct answers in order of first ballot, with their counts.
    tally: Vec<(A, usize)>,
    counted: usize,
    spent: u64,
}

impl<A: Clone + PartialEq, V: Eq + Hash + Debug> MajorityVote<A, V> {
    /// An empty vote.
    #[must_use]
    pub fn new(config: VoteConfig) -> Self {
        Self {
            config,
            voters: HashSet::new(),
            sources: HashSet::new(),
            tally: Vec::new(),
            counted: 0,
            spent: 0,
        }
    }

    /// Casts `voter`'s ballot, read from evidence `source` (if known).
    pub fn cast(
        &mut self,
        voter: V,
        source: Option<u64>,
        ballot: Ballot<A>,
    ) -> Result<Cast, CastError> {
        if self.voters.contains(&voter) {
            return Err(CastError::DuplicateVoter {
                voter: format!("{voter:?}"),
            });
        }
        let cost = self.config.cost_per_vote;
        if let Some(budget) = self.config.budget {
            if self.spent.saturating_add(cost) > budget {
                return Err(CastError::BudgetExhausted {
                    spent: self.spent,
                    cost,
                    budget,
                });
            }
        }
        self.spent += cost;
        self.voters.insert(voter);
        let answer = match ballot {
            Ballot::Abstain => return Ok(Cast::Abstained),
            Ballot::Answer(answer) => answer,
        };
        if let (true, Some(source)) = (self.config.one_vote_per_source, source) {
            if !self.sources.insert(source) {
                return Ok(Cast::SourceAlreadyCounted);
            }
        }
        self.counted += 1;
        match self.tally.iter_mut().find(|(a, _)| *a == answer) {
            Some((_, count)) => *count += 1,
            None => self.tally.push((answer, 1)),
        }
        Ok(Cast::Counted)
    }

    /// Ballots received (all kinds).
    #[must_use]
    pub fn ballots(&self) -> usize {
        self.voters.len()
    }

    /// What the ballots cost so far.
    #[must_use]
    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// The decision so far; `draw` is used only by [`TiePolicy::Draw`].
    #[must_use]
    pub fn decide(&self, draw: u64) -> Decision<A> {
        if self.counted < self.config.quorum.max(1) {
            return Decision::NoQuorum {
                counted: self.counted,
                quorum: self.config.quorum.max(1),
            };
        }
        let top = self.tally.iter().map(|(_, c)| *c).max().unwrap_or(0);
        let tied: Vec<&A> = self
            .tally
            .iter()
            .filter(|(_, c)| *c == top)
            .map(|(a, _)| a)
            .collect();
        let winner = match (tied.len(), self.config.ties) {
            (1, _) | (_, TiePolicy::FirstCast) => tied[0],
            (len, TiePolicy::Draw) => tied[(draw % len as u64) as usize],
            (_, TiePolicy::NoDecision) => {
                return Decision::Tie {
                    answers: tied.into_iter().cloned().collect(),
                    votes: top,
                }
            }
        };
        Decision::Decided {
            answer: winner.clone(),
            votes: top,
            counted: self.counted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_abstentions_budget() {
        let config = VoteConfig {
            cost_per_vote: 3,
            budget: Some(10),
            ..VoteConfig::default()
        };
        let mut vote: MajorityVote<bool> = MajorityVote::new(config);
        assert_eq!(
            vote.decide(0),
            Decision::NoQuorum {
                counted: 0,
                quorum: 1
            }
        );
        assert_eq!(vote.cast(0, None, Ballot::Answer(true)), Ok(Cast::Counted));
        assert_eq!(vote.cast(1, None, Ballot::Abstain), Ok(Cast::Abstained));
        assert!(matches!(
            vote.cast(1, None, Ballot::Answer(true)),
            Err(CastError::DuplicateVoter { .. })
        ));
        assert_eq!(vote.cast(2, None, Ballot::Answer(false)), Ok(Cast::Counted));
        assert_eq!(
            vote.cast(3, None, Ballot::Answer(false)),
            Err(CastError::BudgetExhausted {
                spent: 9,
                cost: 3,
                budget: 10
            })
        );
        assert_eq!(
            vote.decide(0),
            Decision::Tie {
                answers: vec![true, false],
                votes: 1
            }
        );
        let mut draw = vote.clone();
        draw.config.ties = TiePolicy::Draw;
        assert!(matches!(
            draw.decide(1),
            Decision::Decided { answer: false, .. }
        ));
    }
}
