//! Tests of [`Account`]'s transitions.

use super::*;

const ME: AccountId = AccountId::Root;

fn child(n: u128) -> AccountId {
    AccountId::Task(TaskId::from_u128(n))
}

#[test]
fn reserve_is_never_delegated() {
    let mut a = Account::open(None, Budget::steps(10), Budget::steps(3)).unwrap();
    assert!(a.allocate(ME, child(1), Budget::steps(7)).unwrap());
    let err = a.allocate(ME, child(2), Budget::steps(1)).unwrap_err();
    assert_eq!(
        err,
        LedgerError::Insufficient {
            account: ME,
            component: Component::Steps,
            requested: 1,
            available: 0
        }
    );
    // The reserve is still the account's own to spend.
    let r = a.reserve(ME, Budget::steps(3)).unwrap();
    a.settle(ME, r, Budget::steps(2)).unwrap();
    assert!(a.invariant_holds());
}

#[test]
fn a_top_up_grows_an_open_slice_within_the_headroom_and_closes_with_it() {
    let mut a = Account::open(None, Budget::new(10, 4, 0, 0), Budget::steps(1)).unwrap();
    a.allocate(ME, child(1), Budget::new(3, 1, 0, 0)).unwrap();
    a.allocate(ME, child(2), Budget::new(2, 1, 0, 0)).unwrap();
    // A child that holds no slice (never allocated, or closed) gets none.
    assert_eq!(
        a.top_up(ME, child(3), Budget::steps(1)),
        Err(LedgerError::UnknownAccount { account: child(3) })
    );
    // 10 - 1 - 3 - 2 = 4 steps and 2 calls left; 3 calls do not fit, and nothing changes.
    let before = a.clone();
    assert!(matches!(
        a.top_up(ME, child(1), Budget::new(1, 3, 0, 0)),
        Err(LedgerError::Insufficient {
            component: Component::ToolCalls,
            requested: 3,
            available: 2,
            ..
        })
    ));
    assert_eq!(a, before);
    assert_eq!(
        a.top_up(ME, child(1), Budget::new(4, 2, 0, 0)),
        Ok(Budget::new(7, 3, 0, 0))
    );
    assert_eq!(a.headroom_for_children(), Ok(Budget::ZERO));
    assert!(a.invariant_holds());
    // Closed having spent 5 of its 7 steps: 2 come back.
    a.child_closed(child(1), Budget::new(5, 3, 0, 0)).unwrap();
    assert_eq!(a.headroom_for_children(), Ok(Budget::steps(2)));
    assert_eq!(
        a.top_up(ME, child(1), Budget::steps(1)),
        Err(LedgerError::UnknownAccount { account: child(1) })
    );
    assert!(a.invariant_holds());
}

#[test]
fn spend_now_equals_reserve_then_settle() {
    let mut a = Account::open(None, Budget::steps(3), Budget::ZERO).unwrap();
    let mut b = a.clone();
    for _ in 0..3 {
        a.spend_now(ME, Budget::steps(1)).unwrap();
        let r = b.reserve(ME, Budget::steps(1)).unwrap();
        b.settle(ME, r, Budget::steps(1)).unwrap();
    }
    assert_eq!(a.own_spent, b.own_spent);
    assert_eq!(
        a.spend_now(ME, Budget::steps(1)),
        b.reserve(ME, Budget::steps(1)).map(|_| ())
    );
    assert!(a.invariant_holds());
}

#[test]
fn spend_steps_tells_the_headroom_for_self_after_the_charge() {
    let limit = Budget::new(10, 5, 100, 7);
    // Nothing delegated or reserved (headroom_for_self's shortcut), then a child slice, a
    // closed child's spending and an open reservation (its whole sum).
    let mut a = Account::unreserved(limit);
    assert_eq!(a.spend_steps(ME, 1), Ok(Budget::new(9, 5, 100, 7)));
    assert_eq!(a.headroom_for_self(), Ok(Budget::new(9, 5, 100, 7)));
    assert!(a.allocate(ME, child(1), Budget::new(2, 1, 10, 0)).unwrap());
    assert!(a.allocate(ME, child(2), Budget::new(1, 0, 0, 0)).unwrap());
    assert!(a.child_closed(child(2), Budget::steps(1)).unwrap());
    let _held = a.reserve(ME, Budget::new(0, 1, 20, 1)).unwrap();
    let left = a.spend_steps(ME, 1).unwrap();
    assert_eq!(left, Budget::new(5, 3, 70, 6));
    assert_eq!(a.headroom_for_self(), Ok(left));
    // Refused as spend_now refuses, with nothing charged; likewise when closed.
    let before = a.clone();
    assert_eq!(
        a.spend_steps(ME, 6).map(|_| ()),
        before.clone().spend_now(ME, Budget::steps(6))
    );
    assert_eq!(a, before);
    assert!(a.invariant_holds());
    a.closed = true;
    assert_eq!(
        a.spend_steps(ME, 1).map(|_| ()),
        a.clone().spend_now(ME, Budget::steps(1))
    );
}

#[test]
fn settle_charges_actual_and_reports_overrun() {
    let mut a = Account::open(None, Budget::new(10, 5, 100, 0), Budget::ZERO).unwrap();
    let r = a.reserve(ME, Budget::new(1, 1, 50, 0)).unwrap();
    let s = a.settle(ME, r, Budget::new(1, 1, 70, 0)).unwrap();
    assert_eq!(s.charged, Budget::new(1, 1, 50, 0));
    assert_eq!(s.overrun, Budget::new(0, 0, 20, 0));
    assert_eq!(
        a.settle(ME, r, Budget::ZERO),
        Err(LedgerError::UnknownReservation {
            account: ME,
            reservation: r
        })
    );
}

#[test]
fn closing_returns_unused_and_is_idempotent() {
    let mut parent = Account::open(None, Budget::steps(10), Budget::ZERO).unwrap();
    parent.allocate(ME, child(1), Budget::steps(6)).unwrap();
    let mut c = Account::open(Some(ME), Budget::steps(6), Budget::ZERO).unwrap();
    let r = c.reserve(child(1), Budget::steps(2)).unwrap();
    c.settle(child(1), r, Budget::steps(2)).unwrap();
    assert_eq!(c.close(child(1)).unwrap(), Budget::steps(4));
    assert_eq!(c.close(child(1)).unwrap(), Budget::steps(4));
    assert!(parent.child_closed(child(1), c.spent().unwrap()).unwrap());
    assert!(!parent.child_closed(child(1), c.spent().unwrap()).unwrap());
    assert_eq!(parent.returned, Budget::steps(4));
    assert_eq!(parent.headroom_for_children().unwrap(), Budget::steps(8));
    assert!(c.reserve(child(1), Budget::steps(1)).is_err());
}

#[test]
fn terms_are_the_parent_the_limit_and_the_reserve() {
    let a = Account::open(Some(AccountId::Root), Budget::steps(5), Budget::steps(1)).unwrap();
    assert!(a.has_terms(Some(AccountId::Root), Budget::steps(5), Budget::steps(1)));
    assert!(!a.has_terms(None, Budget::steps(5), Budget::steps(1)));
    assert!(!a.has_terms(Some(AccountId::Root), Budget::steps(6), Budget::steps(1)));
    assert!(!a.has_terms(Some(AccountId::Root), Budget::steps(5), Budget::ZERO));
}
