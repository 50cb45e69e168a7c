//! The attempt's own charges to its account: what earlier attempts of its task spent, and one
//! step per loop iteration (the ledger's fast path: every task's first step comes here).

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
    /// much. The same as [`spend_now`] of one step followed by [`headroom_for_self`], with the
    /// headroom worked out once (every task's first step comes here).
    ///
    /// [`spend_now`]: quorate_state::Account::spend_now
    /// [`headroom_for_self`]: quorate_state::Account::headroom_for_self
    pub(super) fn charge_step(&mut self) -> Result<Budget, (Component, u64)> {
        let account = &mut self.account;
        if account.closed {
            return Err((Component::Steps, 1));
        }
        // An attempt that has delegated nothing and holds no reservation (every attempt's
        // first step, and most attempts' every step) uses only what it spent itself: the
        // headroom is the limit less that, the same figure without summing the zeros.
        let headroom = if account.children_total == Budget::ZERO
            && account.children_spent == Budget::ZERO
            && account.reserved_total == Budget::ZERO
        {
            account.limit.checked_sub(&account.own_spent).ok()
        } else {
            account.headroom_for_self().ok()
        };
        let Some(headroom) = headroom else {
            return Err((Component::Steps, 1));
        };
        // One step asks for nothing of the other components: only steps can be short.
        let (Some(left), Some(spent)) = (
            headroom.steps.checked_sub(1),
            account.own_spent.steps.checked_add(1),
        ) else {
            return Err((Component::Steps, shortfall(1, headroom.steps)));
        };
        account.own_spent.steps = spent;
        Ok(Budget {
            steps: left,
            ..headroom
        })
    }
}
