//! One budget account and its pure transitions. No store, no I/O: the ledger reads an account,
//! applies one of these, and writes it back with CAS.

use std::fmt;

use quorate_protocols::{Budget, BudgetError, Component, TaskId};
use serde::{Deserialize, Serialize};

/// Names an account within a run: the run's root account, or a task's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccountId {
    /// The run's own account (the coordinator's).
    Root,
    /// A task's account.
    Task(TaskId),
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccountId::Root => f.write_str("root"),
            AccountId::Task(t) => write!(f, "{t}"),
        }
    }
}

/// Identifies one reservation within its account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReservationId(pub u64);

/// A ledger operation was refused. The account is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// Not enough headroom in `component`. Retrying helps only after budget is released.
    #[error("account {account}: {requested} {component} requested, {available} available")]
    Insufficient {
        /// The account.
        account: AccountId,
        /// The first component that does not fit.
        component: Component,
        /// What was asked.
        requested: u64,
        /// What was free.
        available: u64,
    },
    /// The account was closed; it takes no more allocations or reservations.
    #[error("account {account} is closed")]
    Closed {
        /// The account.
        account: AccountId,
    },
    /// No such account.
    #[error("account {account} does not exist")]
    UnknownAccount {
        /// The account.
        account: AccountId,
    },
    /// The account exists already (with different terms than requested).
    #[error("account {account} exists already")]
    AccountExists {
        /// The account.
        account: AccountId,
    },
    /// The reservation is not open (never made, or already settled).
    #[error("account {account}: reservation {reservation:?} is not open")]
    UnknownReservation {
        /// The account.
        account: AccountId,
        /// The reservation.
        reservation: ReservationId,
    },
    /// The child was allocated before with another slice.
    #[error(
        "child {child} already holds {allocated}; a second allocation of {requested} is refused"
    )]
    SliceMismatch {
        /// The child.
        child: AccountId,
        /// Its existing slice.
        allocated: Budget,
        /// The slice asked for now.
        requested: Budget,
    },
    /// The reserve asked for is larger than the limit.
    #[error("reserve {reserve} does not fit in limit {limit}")]
    ReserveExceedsLimit {
        /// The reserve.
        reserve: Budget,
        /// The limit.
        limit: Budget,
    },
    /// Children are still open; close them first (their unused budget comes back then).
    #[error("account {account} still has {open} open children")]
    ChildrenStillOpen {
        /// The account.
        account: AccountId,
        /// How many.
        open: usize,
    },
    /// Budget arithmetic overflowed.
    #[error(transparent)]
    Arithmetic(#[from] BudgetError),
}

/// What settling a reservation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    /// Charged to the account's spending.
    pub charged: Budget,
    /// Released back to headroom.
    pub released: Budget,
    /// How far the reported cost went beyond the reservation (not charged: the reservation is
    /// the most a call may cost; a tool that reports more is misbehaving and is reported).
    pub overrun: Budget,
}

/// The maps of an [`Account`]: keyed lookups only (a root account of a large run holds every
/// open slice, so a hash map rather than an ordered one). The keys are the ledger's own ids, not
/// input from other parties, so the maps share one hash key per process instead of drawing one
/// per map (which costs a little on every account opened). Iteration order therefore differs
/// between processes: whatever iterates these maps must not depend on the order (the one place
/// that closes open children, `Attempt::finish` in quorate-workers, sorts them first).
pub type AccountMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<ahash::AHasher>>;

/// A budget account.
///
/// Invariant, per component: `children + children_spent + max(reserve, reserved + own_spent) <=
/// limit`. So the coordination reserve is never delegated, a child slice is never granted twice,
/// a reservation comes before spending, and spending never exceeds what was granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// The account that granted this one; `None` for the root.
    pub parent: Option<AccountId>,
    /// Everything this account was granted.
    pub limit: Budget,
    /// Kept for the account's own coordination work; never delegated to children.
    pub reserve: Budget,
    /// Open child slices.
    pub children: AccountMap<AccountId, Budget>,
    /// Sum of `children`.
    pub children_total: Budget,
    /// What closed children spent (their unused part came back).
    pub children_spent: Budget,
    /// Unused budget returned by closed children, summed over the account's life. Reporting
    /// only (never used in accounting), and saturating: slices can be granted and returned more
    /// often than `u64::MAX` fits.
    pub returned: Budget,
    /// Open reservations.
    pub reservations: AccountMap<ReservationId, Budget>,
    /// Sum of `reservations`.
    pub reserved_total: Budget,
    /// Settled own spending.
    pub own_spent: Budget,
    /// Next reservation number.
    pub next_reservation: u64,
    /// Closed accounts accept nothing.
    pub closed: bool,
}

impl Account {
    /// A fresh account granted `limit`, keeping `reserve` for itself.
    pub fn open(
        parent: Option<AccountId>,
        limit: Budget,
        reserve: Budget,
    ) -> Result<Self, LedgerError> {
        if !reserve.fits_within(&limit) {
            return Err(LedgerError::ReserveExceedsLimit { reserve, limit });
        }
        Ok(Self {
            parent,
            reserve,
            ..Self::unreserved(limit)
        })
    }

    /// A fresh account granted `limit`, with no parent and no reserve: what
    /// [`Account::open`]`(None, limit, Budget::ZERO)` opens, which cannot fail (a zero reserve
    /// fits any limit). No `Result` around it, so a caller can build it where it keeps it (an
    /// account is a few hundred bytes; a task attempt's is opened this way).
    #[must_use]
    pub fn unreserved(limit: Budget) -> Self {
        Self {
            parent: None,
            limit,
            reserve: Budget::ZERO,
            children: AccountMap::default(),
            children_total: Budget::ZERO,
            children_spent: Budget::ZERO,
            returned: Budget::ZERO,
            reservations: AccountMap::default(),
            reserved_total: Budget::ZERO,
            own_spent: Budget::ZERO,
            next_reservation: 0,
            closed: false,
        }
    }

    /// `true` if the account was opened with these terms (opening it again with them is a retry).
    #[must_use]
    pub fn has_terms(&self, parent: Option<AccountId>, limit: Budget, reserve: Budget) -> bool {
        self.parent == parent && self.limit == limit && self.reserve == reserve
    }

    /// Everything spent: own settled spending plus what closed children spent.
    pub fn spent(&self) -> Result<Budget, LedgerError> {
        Ok(self.own_spent.checked_add(&self.children_spent)?)
    }

    fn own_use(&self) -> Result<Budget, LedgerError> {
        Ok(self.reserved_total.checked_add(&self.own_spent)?)
    }

    /// What is left for new child slices: the limit less children, their spending, and the
    /// larger of the reserve and the account's own use.
    pub fn headroom_for_children(&self) -> Result<Budget, LedgerError> {
        let own = self.own_use()?;
        let held = own.max_each(&self.reserve);
        let used = self
            .children_total
            .checked_add(&self.children_spent)?
            .checked_add(&held)?;
        Ok(self.limit.checked_sub(&used)?)
    }

    /// What is left for the account's own reservations (the reserve is theirs to use).
    pub fn headroom_for_self(&self) -> Result<Budget, LedgerError> {
        if self.children_total == Budget::ZERO
            && self.children_spent == Budget::ZERO
            && self.reserved_total == Budget::ZERO
        {
            // Nothing delegated or reserved (most task attempts): only its own spending counts,
            // the same figure without adding zeros.
            return Ok(self.limit.checked_sub(&self.own_spent)?);
        }
        let used = self
            .children_total
            .checked_add(&self.children_spent)?
            .checked_add(&self.own_use()?)?;
        Ok(self.limit.checked_sub(&used)?)
    }

    /// `true` if the account invariant holds.
    #[must_use]
    pub fn invariant_holds(&self) -> bool {
        self.headroom_for_children().is_ok()
            && self.headroom_for_self().is_ok()
            && self.spent().is_ok_and(|s| s.fits_within(&self.limit))
            && Budget::checked_sum(self.children.values()).ok() == Some(self.children_total)
            && Budget::checked_sum(self.reservations.values()).ok() == Some(self.reserved_total)
    }

    fn fits(me: AccountId, requested: &Budget, available: &Budget) -> Result<(), LedgerError> {
        match requested.first_excess(available) {
            None => Ok(()),
            Some(component) => Err(LedgerError::Insufficient {
                account: me,
                component,
                requested: requested.get(component),
                available: available.get(component),
            }),
        }
    }

    fn ensure_open(&self, me: AccountId) -> Result<(), LedgerError> {
        if self.closed {
            Err(LedgerError::Closed { account: me })
        } else {
            Ok(())
        }
    }

    /// Grants `child` a slice. Returns `false` if the same slice was granted before (a retry).
    pub fn allocate(
        &mut self,
        me: AccountId,
        child: AccountId,
        slice: Budget,
    ) -> Result<bool, LedgerError> {
        // One lookup (a root account of a large run holds every open slice): the headroom is
        // worked out first, the entry then found or filled.
        let headroom = self.headroom_for_children();
        match self.children.entry(child) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let allocated = *e.get();
                if allocated == slice {
                    Ok(false)
                } else {
                    Err(LedgerError::SliceMismatch {
                        child,
                        allocated,
                        requested: slice,
                    })
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                if self.closed {
                    return Err(LedgerError::Closed { account: me });
                }
                Self::fits(me, &slice, &headroom?)?;
                self.children_total = self.children_total.checked_add(&slice)?;
                e.insert(slice);
                Ok(true)
            }
        }
    }

    /// Grows open child `child`'s slice by `extra`, out of this account's headroom for
    /// children (so `reserve + sum(slices) <= limit` still holds): a task that ran out of its
    /// slice and was granted a top-up. Returns the child's new slice. Nothing changes on an
    /// error.
    ///
    /// ```
    /// use quorate_protocols::{Budget, Component, TaskId};
    /// use quorate_state::{Account, AccountId, LedgerError};
    ///
    /// let mut root = Account::open(None, Budget::steps(10), Budget::steps(2)).unwrap();
    /// let child = AccountId::Task(TaskId::from_u128(1));
    /// root.allocate(AccountId::Root, child, Budget::steps(3)).unwrap();
    /// assert_eq!(root.top_up(AccountId::Root, child, Budget::steps(4)), Ok(Budget::steps(7)));
    /// // 10 - 2 (reserve) - 7 = 1 step left: a second top-up of 2 does not fit.
    /// assert_eq!(
    ///     root.top_up(AccountId::Root, child, Budget::steps(2)),
    ///     Err(LedgerError::Insufficient {
    ///         account: AccountId::Root, component: Component::Steps, requested: 2, available: 1,
    ///     })
    /// );
    /// assert!(root.invariant_holds());
    /// ```
    pub fn top_up(
        &mut self,
        me: AccountId,
        child: AccountId,
        extra: Budget,
    ) -> Result<Budget, LedgerError> {
        self.ensure_open(me)?;
        let &slice = self
            .children
            .get(&child)
            .ok_or(LedgerError::UnknownAccount { account: child })?;
        Self::fits(me, &extra, &self.headroom_for_children()?)?;
        let grown = slice.checked_add(&extra)?;
        self.children_total = self.children_total.checked_add(&extra)?;
        self.children.insert(child, grown);
        Ok(grown)
    }

    /// Reserves `amount` for the account's own next call.
    pub fn reserve(&mut self, me: AccountId, amount: Budget) -> Result<ReservationId, LedgerError> {
        self.ensure_open(me)?;
        Self::fits(me, &amount, &self.headroom_for_self()?)?;
        let id = ReservationId(self.next_reservation);
        self.next_reservation += 1;
        self.reserved_total = self.reserved_total.checked_add(&amount)?;
        self.reservations.insert(id, amount);
        Ok(id)
    }

    /// Spends `amount` at once: a reservation settled with exactly its amount, without the
    /// bookkeeping of an open reservation (for costs known up front, such as a loop step).
    pub fn spend_now(&mut self, me: AccountId, amount: Budget) -> Result<(), LedgerError> {
        self.ensure_open(me)?;
        Self::fits(me, &amount, &self.headroom_for_self()?)?;
        self.own_spent = self.own_spent.checked_add(&amount)?;
        Ok(())
    }

    /// [`spend_now`](Self::spend_now) of `steps` steps (a task attempt's loop step, the
    /// ledger's hot path), returning what is left for the account's own use after it (its
    /// [`headroom_for_self`](Self::headroom_for_self), worked out once): the agent is told what
    /// remains. Only steps are asked for, so only steps can be short.
    pub fn spend_steps(&mut self, me: AccountId, steps: u64) -> Result<Budget, LedgerError> {
        self.ensure_open(me)?;
        let headroom = self.headroom_for_self()?;
        let Some(left) = headroom.steps.checked_sub(steps) else {
            return Err(LedgerError::Insufficient {
                account: me,
                component: Component::Steps,
                requested: steps,
                available: headroom.steps,
            });
        };
        // Within the headroom, so within the limit: no overflow.
        self.own_spent.steps += steps;
        Ok(Budget {
            steps: left,
            ..headroom
        })
    }

    /// Settles a reservation with the actual cost: charges `min(actual, reserved)` per component,
    /// releases the rest, and reports any overrun.
    pub fn settle(
        &mut self,
        me: AccountId,
        id: ReservationId,
        actual: Budget,
    ) -> Result<Settlement, LedgerError> {
        let &reserved = self
            .reservations
            .get(&id)
            .ok_or(LedgerError::UnknownReservation {
                account: me,
                reservation: id,
            })?;
        let charged = actual.min(&reserved);
        let released = reserved.checked_sub(&charged)?;
        let overrun = actual.saturating_sub(&reserved);
        self.reserved_total = self.reserved_total.checked_sub(&reserved)?;
        self.own_spent = self.own_spent.checked_add(&charged)?;
        self.reservations.remove(&id);
        Ok(Settlement {
            charged,
            released,
            overrun,
        })
    }

    /// Closes the account. Open reservations are charged in full (their calls may have spent
    /// it: an unknown outcome is not free). Returns the unused budget that goes back to the
    /// parent. Closing twice returns the same amount and changes nothing.
    pub fn close(&mut self, me: AccountId) -> Result<Budget, LedgerError> {
        if !self.children.is_empty() {
            return Err(LedgerError::ChildrenStillOpen {
                account: me,
                open: self.children.len(),
            });
        }
        if !self.closed {
            self.own_spent = self.own_spent.checked_add(&self.reserved_total)?;
            self.reservations.clear();
            self.reserved_total = Budget::ZERO;
            self.closed = true;
        }
        Ok(self.limit.checked_sub(&self.spent()?)?)
    }

    /// Takes back a closed child's slice: its spending stays spent, the rest is returned.
    /// Returns `false` if that child was already credited (a retry).
    pub fn child_closed(
        &mut self,
        child: AccountId,
        child_spent: Budget,
    ) -> Result<bool, LedgerError> {
        let Some(slice) = self.children.remove(&child) else {
            return Ok(false);
        };
        let unused = slice.checked_sub(&child_spent)?;
        self.children_total = self.children_total.checked_sub(&slice)?;
        self.children_spent = self.children_spent.checked_add(&child_spent)?;
        self.returned = self.returned.saturating_add(&unused);
        Ok(true)
    }

    /// Corrects what a closed child was charged: `charged` (what [`child_closed`] was given)
    /// becomes `actual`, the child's spending as learned later (a cancelled child's worker
    /// reports after the parent closed the child with an estimate). The caller keeps `actual`
    /// within the child's slice, like `charged` (a closed child's slice is no longer known
    /// here); the difference is returned. A larger `actual` is taken back only from the
    /// headroom for children: what a close returned may have been delegated again since, and
    /// taking more would break the invariant (`Insufficient`, nothing changed; a caller that
    /// closes at the whole slice while the child may still spend never meets this).
    ///
    /// [`child_closed`]: Self::child_closed
    ///
    /// ```
    /// use quorate_protocols::{Budget, TaskId};
    /// use quorate_state::{Account, AccountId, LedgerError};
    ///
    /// let mut root = Account::open(None, Budget::steps(10), Budget::ZERO).unwrap();
    /// let child = AccountId::Task(TaskId::from_u128(1));
    /// root.allocate(AccountId::Root, child, Budget::steps(4)).unwrap();
    /// root.child_closed(child, Budget::steps(4)).unwrap(); // charged the whole slice
    /// root.child_recharged(AccountId::Root, Budget::steps(4), Budget::steps(1)).unwrap(); // it spent 1
    /// assert_eq!(root.spent().unwrap(), Budget::steps(1));
    /// assert_eq!(root.returned, Budget::steps(3));
    /// // A later figure of 2 (more than the 1 charged now): one step is taken back.
    /// root.child_recharged(AccountId::Root, Budget::steps(1), Budget::steps(2)).unwrap();
    /// assert_eq!(root.spent().unwrap(), Budget::steps(2));
    /// assert_eq!(root.returned, Budget::steps(2));
    /// // The 8 steps left go to another child; a figure of 3 no longer fits.
    /// let other = AccountId::Task(TaskId::from_u128(2));
    /// root.allocate(AccountId::Root, other, Budget::steps(8)).unwrap();
    /// assert!(matches!(
    ///     root.child_recharged(AccountId::Root, Budget::steps(2), Budget::steps(3)),
    ///     Err(LedgerError::Insufficient { requested: 1, available: 0, .. })
    /// ));
    /// assert_eq!(root.spent().unwrap(), Budget::steps(2));
    /// assert!(root.invariant_holds());
    /// ```
    pub fn child_recharged(
        &mut self,
        me: AccountId,
        charged: Budget,
        actual: Budget,
    ) -> Result<(), LedgerError> {
        let more = actual.saturating_sub(&charged);
        Self::fits(me, &more, &self.headroom_for_children()?)?;
        self.children_spent = self
            .children_spent
            .checked_sub(&charged)?
            .checked_add(&actual)?;
        self.returned = self
            .returned
            .saturating_add(&charged.saturating_sub(&actual))
            .saturating_sub(&more);
        Ok(())
    }

    /// Undoes an allocation whose child account could not be opened. Returns `false` if the
    /// child holds no slice or another one.
    pub fn deallocate(&mut self, child: AccountId, slice: Budget) -> Result<bool, LedgerError> {
        if self.children.get(&child) != Some(&slice) {
            return Ok(false);
        }
        self.children.remove(&child);
        self.children_total = self.children_total.checked_sub(&slice)?;
        Ok(true)
    }
}

trait MaxEach {
    fn max_each(&self, other: &Budget) -> Budget;
}

impl MaxEach for Budget {
    fn max_each(&self, other: &Budget) -> Budget {
        Budget::new(
            self.steps.max(other.steps),
            self.tool_calls.max(other.tool_calls),
            self.tokens.max(other.tokens),
            self.cost.max(other.cost),
        )
    }
}

#[cfg(test)]
#[path = "account_tests.rs"]
mod tests;
