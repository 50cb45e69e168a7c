//! [`BudgetLedger`]: hierarchical budget accounts kept in any [`Store`].

use quorate_protocols::{Budget, RunId};

use super::account::{Account, AccountId, LedgerError, ReservationId, Settlement};
use crate::retry::{update, Change, UpdateError};
use crate::{Store, StoreError};

/// A budget-ledger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BudgetLedgerError {
    /// The account refused the operation (see [`LedgerError`]); nothing changed.
    #[error(transparent)]
    Refused(#[from] LedgerError),
    /// The backend failed; the operation may or may not have been applied (re-read).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Lost the CAS race too often.
    #[error("gave up on {account} after {attempts} CAS conflicts")]
    Contention {
        /// The account.
        account: AccountId,
        /// Conflicts seen.
        attempts: u32,
    },
}

/// Hierarchical budget accounts of one run, built only on [`Store`] compare-and-swap, so they
/// work on any backend.
///
/// * [`open_root`](Self::open_root) creates the run's account with a coordination reserve.
/// * [`allocate`](Self::allocate) carves a child slice out of a parent only while `reserve +
///   open children <= limit` in every component, then opens the child's account.
/// * [`reserve`](Self::reserve) before a call, [`settle`](Self::settle) after it with the actual
///   cost; the rest is released.
/// * [`close`](Self::close) freezes a child and returns its unused budget to the parent. Nothing
///   is ever copied: a slice lives in the parent's `children` until it comes back.
///
/// Multi-key operations are ordered so that a crash between their steps can only leave budget
/// held (never granted twice), and each step is idempotent: calling the operation again finishes
/// it.
///
/// ```
/// use quorate_protocols::{Budget, RunId, TaskId};
/// use quorate_state::{AccountId, BudgetLedger, MemoryStore};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let ledger = BudgetLedger::new(MemoryStore::new(), RunId::from_u128(1));
/// ledger.open_root(Budget::steps(10), Budget::steps(2)).await?;
/// let task = AccountId::Task(TaskId::from_u128(1));
/// ledger.allocate(AccountId::Root, task, Budget::steps(8)).await?;
/// // The reserve is not delegable: one more step does not fit.
/// assert!(ledger.allocate(AccountId::Root, AccountId::Task(TaskId::from_u128(2)), Budget::steps(1)).await.is_err());
/// let r = ledger.reserve(task, Budget::steps(3)).await?;
/// ledger.settle(task, r, Budget::steps(1)).await?;
/// assert_eq!(ledger.close(task).await?, Budget::steps(7)); // returned to the root
/// # Ok::<(), quorate_state::BudgetLedgerError>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct BudgetLedger<S> {
    store: S,
    run: RunId,
}

impl<S: Store<Account>> BudgetLedger<S> {
    /// A ledger for `run` kept in `store`.
    pub fn new(store: S, run: RunId) -> Self {
        Self { store, run }
    }

    /// The store key of an account.
    pub fn key(&self, account: AccountId) -> String {
        format!("budget/{}/{account}", self.run)
    }

    /// The backing store.
    pub fn store(&self) -> &S {
        &self.store
    }

    async fn apply<T>(
        &self,
        account: AccountId,
        f: impl FnMut(Option<&Account>) -> Result<Change<Account, T>, LedgerError>,
    ) -> Result<T, BudgetLedgerError> {
        update(&self.store, &self.key(account), f)
            .await
            .map(|done| done.value)
            .map_err(|e| match e {
                UpdateError::Refused(e) => BudgetLedgerError::Refused(e),
                UpdateError::Store(e) => BudgetLedgerError::Store(e),
                UpdateError::Contention { attempts } => {
                    BudgetLedgerError::Contention { account, attempts }
                }
            })
    }

    async fn modify<T>(
        &self,
        account: AccountId,
        mut f: impl FnMut(&mut Account) -> Result<T, LedgerError>,
    ) -> Result<T, BudgetLedgerError> {
        self.apply(account, |current| {
            let mut acc = current
                .cloned()
                .ok_or(LedgerError::UnknownAccount { account })?;
            let out = f(&mut acc)?;
            Ok(Change::Write(acc, out))
        })
        .await
    }

    /// Opens the run's root account. Opening it again with the same terms is a no-op.
    pub async fn open_root(&self, limit: Budget, reserve: Budget) -> Result<(), BudgetLedgerError> {
        self.open(AccountId::Root, None, limit, reserve).await
    }

    async fn open(
        &self,
        account: AccountId,
        parent: Option<AccountId>,
        limit: Budget,
        reserve: Budget,
    ) -> Result<(), BudgetLedgerError> {
        let fresh = Account::open(parent, limit, reserve)?;
        self.apply(account, |current| match current {
            None => Ok(Change::Write(fresh.clone(), ())),
            Some(a) if a.has_terms(parent, limit, reserve) => Ok(Change::Keep(())),
            Some(_) => Err(LedgerError::AccountExists { account }),
        })
        .await
    }

    /// Carves `slice` out of `parent` for `child` and opens the child's account (no reserve of
    /// its own). Calling it again with the same slice finishes an interrupted allocation.
    pub async fn allocate(
        &self,
        parent: AccountId,
        child: AccountId,
        slice: Budget,
    ) -> Result<(), BudgetLedgerError> {
        self.allocate_with_reserve(parent, child, slice, Budget::ZERO)
            .await
    }

    /// Like [`allocate`](Self::allocate), with a coordination reserve inside the child's slice
    /// (for a child that delegates further).
    pub async fn allocate_with_reserve(
        &self,
        parent: AccountId,
        child: AccountId,
        slice: Budget,
        child_reserve: Budget,
    ) -> Result<(), BudgetLedgerError> {
        // Validate the child's terms, and that its id is free or holds exactly these terms,
        // before charging the parent.
        let fresh = Account::open(Some(parent), slice, child_reserve)?;
        if let Some(existing) = self.store.get(&self.key(child)).await? {
            let e = existing.value;
            if e.closed || !e.has_terms(fresh.parent, slice, child_reserve) {
                return Err(LedgerError::AccountExists { account: child }.into());
            }
        }
        // Charge the parent first: a crash after this leaves the slice held, never granted twice.
        self.modify(parent, |acc| acc.allocate(parent, child, slice))
            .await?;
        match self.open(child, Some(parent), slice, child_reserve).await {
            Err(BudgetLedgerError::Refused(LedgerError::AccountExists { account })) => {
                // Someone else took the id in between: give the slice back.
                self.modify(parent, |acc| acc.deallocate(child, slice))
                    .await?;
                Err(LedgerError::AccountExists { account }.into())
            }
            other => other,
        }
    }

    /// Reserves `amount` on `account` before a call.
    pub async fn reserve(
        &self,
        account: AccountId,
        amount: Budget,
    ) -> Result<ReservationId, BudgetLedgerError> {
        self.modify(account, |acc| acc.reserve(account, amount))
            .await
    }

    /// Settles a reservation with the actual cost.
    pub async fn settle(
        &self,
        account: AccountId,
        reservation: ReservationId,
        actual: Budget,
    ) -> Result<Settlement, BudgetLedgerError> {
        self.modify(account, |acc| acc.settle(account, reservation, actual))
            .await
    }

    /// Closes `account` and credits its parent; returns the unused budget. Idempotent.
    pub async fn close(&self, account: AccountId) -> Result<Budget, BudgetLedgerError> {
        let (unused, parent, spent) = self
            .modify(account, |acc| {
                let unused = acc.close(account)?;
                Ok((unused, acc.parent, acc.spent()?))
            })
            .await?;
        if let Some(parent) = parent {
            self.modify(parent, |acc| acc.child_closed(account, spent))
                .await?;
        }
        Ok(unused)
    }

    /// The account as stored now.
    pub async fn account(&self, account: AccountId) -> Result<Account, BudgetLedgerError> {
        self.store
            .get(&self.key(account))
            .await?
            .map(|v| v.value)
            .ok_or(BudgetLedgerError::Refused(LedgerError::UnknownAccount {
                account,
            }))
    }
}
