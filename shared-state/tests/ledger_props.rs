//! Property: any sequence of ledger operations, with values anywhere in `u64` (including near
//! `u64::MAX`), keeps every account's invariant (`children + children_spent + max(reserve,
//! reserved + own_spent) <= limit`, so `reserve + outstanding children <= limit` and `spent <=
//! granted`), and refusals change nothing. Runs through the real `BudgetLedger` on a
//! `MemoryStore`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use quorate_protocols::{Budget, RunId, TaskId};
use quorate_state::{
    Account, AccountId, BudgetLedger, BudgetLedgerError, LedgerError, MemoryStore, ReservationId,
};

#[derive(Clone, Debug)]
enum Op {
    Allocate {
        child: u8,
        slice: Budget,
    },
    Reserve {
        account: u8,
        amount: Budget,
    },
    Settle {
        account: u8,
        pick: usize,
        actual: Budget,
    },
    Close {
        child: u8,
    },
}

fn component() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..20, (u64::MAX - 20)..=u64::MAX, any::<u64>()]
}

fn budget() -> impl Strategy<Value = Budget> {
    (component(), component(), component(), component())
        .prop_map(|(a, b, c, d)| Budget::new(a, b, c, d))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6, budget()).prop_map(|(child, slice)| Op::Allocate { child, slice }),
        (0u8..7, budget()).prop_map(|(account, amount)| Op::Reserve { account, amount }),
        (0u8..7, any::<usize>(), budget()).prop_map(|(account, pick, actual)| Op::Settle {
            account,
            pick,
            actual
        }),
        (0u8..6, Just(())).prop_map(|(child, ())| Op::Close { child }),
    ]
}

/// Account 0 is the root; 1..=6 are task accounts.
fn account(n: u8) -> AccountId {
    if n == 0 {
        AccountId::Root
    } else {
        AccountId::Task(TaskId::from_u128(u128::from(n)))
    }
}

fn check(
    ledger: &BudgetLedger<MemoryStore<Account>>,
    ids: &[AccountId],
) -> Result<(), TestCaseError> {
    for &id in ids {
        if let Some(v) = ledger.store().get_now(&ledger.key(id)) {
            let a = v.value;
            prop_assert!(a.invariant_holds(), "invariant broken for {id}: {a:?}");
            let spent = a.spent().unwrap();
            prop_assert!(
                spent.fits_within(&a.limit),
                "{id} spent {spent} > granted {}",
                a.limit
            );
            let delegated = a.children_total.checked_add(&a.reserve).unwrap();
            prop_assert!(
                delegated.fits_within(&a.limit),
                "{id}: reserve + children > limit"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn ledger_operations_keep_invariants(limit in budget(), reserve in budget(), ops in proptest::collection::vec(op(), 1..60)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let ledger = BudgetLedger::new(MemoryStore::new(), RunId::from_u128(1));
            match ledger.open_root(limit, reserve).await {
                Ok(()) => {}
                Err(BudgetLedgerError::Refused(LedgerError::ReserveExceedsLimit { .. })) => {
                    prop_assert!(!reserve.fits_within(&limit));
                    return Ok(());
                }
                Err(e) => return Err(TestCaseError::fail(format!("open_root: {e}"))),
            }
            let ids: Vec<AccountId> = (0..7).map(account).collect();
            let mut open: BTreeMap<AccountId, Vec<ReservationId>> = BTreeMap::new();
            for op in ops {
                let before: Vec<_> = ids.iter().map(|&i| ledger.store().get_now(&ledger.key(i))).collect();
                let result = match op {
                    Op::Allocate { child, slice } => ledger.allocate(AccountId::Root, account(child + 1), slice).await.map(|_| ()),
                    Op::Reserve { account: a, amount } => ledger.reserve(account(a), amount).await.map(|r| {
                        open.entry(account(a)).or_default().push(r);
                    }),
                    Op::Settle { account: a, pick, actual } => {
                        let id = account(a);
                        let list = open.entry(id).or_default();
                        if list.is_empty() {
                            continue;
                        }
                        let r = list.remove(pick % list.len());
                        ledger.settle(id, r, actual).await.map(|s| {
                            assert!(s.charged.fits_within(&actual));
                        })
                    }
                    Op::Close { child } => ledger.close(account(child + 1)).await.map(|_| ()),
                };
                match result {
                    Ok(()) => {}
                    Err(BudgetLedgerError::Refused(_)) => {
                        // A refusal of a single-key step changes nothing. (A refused close may
                        // have closed the child before its parent's credit only if the credit
                        // itself failed, which cannot happen for a child the parent holds.)
                        let after: Vec<_> = ids.iter().map(|&i| ledger.store().get_now(&ledger.key(i))).collect();
                        prop_assert_eq!(before, after, "a refused operation changed state");
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("unexpected error: {e}"))),
                }
                check(&ledger, &ids)?;
            }
            Ok(())
        })?;
    }
}
