//! The attempt's own charges to its account: what earlier attempts of its task spent, and one
//! step per loop iteration.

use quorate_protocols::{Budget, Component};
use quorate_state::LedgerError;

use super::{shortfall, Attempt};

impl Attempt {
    /// Charges `already_spent` (what earlier attempts of the same task on this worker spent)
    /// up front, before the attempt runs, so every attempt together stays within the one slice
    /// the task was granted (a new attempt does not get the whole slice again). On an error
    /// the attempt must not run; the caller replies to its assignment ([`Self::envelope`]).
    pub(crate) fn charge_earlier(&mut self, already_spent: Budget) -> Result<(), LedgerError> {
        // A first attempt (the common case) has nothing to carry over: charging zero to a
        // fresh account changes nothing, so it is skipped.
        if already_spent != Budget::ZERO {
            let limit = self.account.limit;
            self.account
                .spend_now(self.account_id, already_spent.min(&limit))?;
        }
        Ok(())
    }

    /// Charges one loop step and returns the headroom left for the attempt's own use after it
    /// (what the agent is told remains); when the slice cannot, the component short and by how
    /// much.
    pub(super) fn charge_step(&mut self) -> Result<Budget, (Component, u64)> {
        match self.account.spend_steps(self.account_id, 1) {
            Ok(left) => Ok(left),
            Err(LedgerError::Insufficient {
                component,
                requested,
                available,
                ..
            }) => Err((component, shortfall(requested, available))),
            Err(_) => Err((Component::Steps, 1)),
        }
    }
}
