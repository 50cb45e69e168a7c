//! A linearizability checker for concurrent histories, generic over a sequential model, and the
//! model of a versioned CAS register (one per store key).
//!
//! # The algorithm (Wing & Gong, with Lowe's memoization: "WGL")
//!
//! A history is a set of operations, each with a call time and, unless its reply was lost, a
//! return time and the value it returned. It is *linearizable* if every operation can be given a
//! point between its call and its return such that applying the operations in that order to
//! the sequential model returns exactly what was observed. An operation whose reply was lost
//! may take effect at any point after its call, or never (the caller cannot tell).
//!
//! The search keeps the set of operations already linearized (a bit set) and the model state.
//! At each step the candidates are the operations not yet linearized whose call precedes the
//! earliest return among the *completed* operations not yet linearized (anything called later
//! must come after that one). For each candidate, the model is asked whether the operation can
//! take effect in the current state with its observed return (a lost reply accepts any return);
//! if so the search descends, otherwise it tries the next candidate and backtracks when none is
//! left. The search succeeds when every completed operation is linearized (lost ones may stay
//! out). Each `(linearized set, state)` pair is explored once: a second visit cannot succeed
//! where the first failed, which keeps the search polynomial on the histories real clients
//! produce. Linearizability is compositional (P-compositionality), so a store history is
//! checked per key, each key as its own register.
//!
//! [`check`] returns `Ok(order)` with a witness order, or [`NotLinearizable`] with the size of
//! the longest linearizable prefix found.

use std::collections::HashSet;
use std::hash::Hash;

use quorate_protocols::Version;

/// A sequential specification.
pub trait Model: Clone + Eq + Hash {
    /// An operation (with its arguments).
    type Op;
    /// What an operation returns.
    type Ret;

    /// The state after `op` takes effect in this state, if that can return `observed`
    /// (`None`: the reply was lost, any return is fine). `None` if it cannot.
    fn step(&self, op: &Self::Op, observed: Option<&Self::Ret>) -> Option<Self>;
}

/// One operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<Op, Ret> {
    /// The client that issued it (for messages only).
    pub client: usize,
    /// What was asked.
    pub op: Op,
    /// When it was called (any monotonic clock shared by the clients).
    pub call: u64,
    /// When it returned and what it returned; `None` if the reply was lost.
    pub ret: Option<(u64, Ret)>,
}

/// The history has no linearization.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "not linearizable: at most {linearized} of {completed} completed operations could be ordered"
)]
pub struct NotLinearizable {
    /// Longest linearizable set of completed operations found.
    pub linearized: usize,
    /// Completed operations in the history.
    pub completed: usize,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Self(vec![0; n.div_ceil(64)])
    }
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }
    fn set(&mut self, i: usize, on: bool) {
        if on {
            self.0[i / 64] |= 1 << (i % 64);
        } else {
            self.0[i / 64] &= !(1 << (i % 64));
        }
    }
}

/// Checks `history` against `init` (see the module docs). Returns a witness order of the
/// operations that took effect (indices into `history`).
pub fn check<M: Model>(
    init: &M,
    history: &[Operation<M::Op, M::Ret>],
) -> Result<Vec<usize>, NotLinearizable> {
    let n = history.len();
    let completed = history.iter().filter(|o| o.ret.is_some()).count();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| history[i].call);
    let mut done = Bits::new(n);
    let mut done_completed = 0;
    let mut best = 0;
    let mut seen: HashSet<(Bits, M)> = HashSet::new();
    // Stack of (state before, op linearized, position in `order` to resume from).
    let mut stack: Vec<(M, usize, usize)> = Vec::new();
    let mut state = init.clone();
    let mut from = 0;
    loop {
        if done_completed == completed {
            return Ok(stack.iter().map(|&(_, i, _)| i).collect());
        }
        // Earliest return among completed, not yet linearized operations.
        let horizon = history
            .iter()
            .enumerate()
            .filter(|(i, o)| !done.get(*i) && o.ret.is_some())
            .map(|(_, o)| o.ret.as_ref().map_or(u64::MAX, |r| r.0))
            .min()
            .unwrap_or(u64::MAX);
        let mut advanced = false;
        for (pos, &i) in order.iter().enumerate().skip(from) {
            let op = &history[i];
            if op.call > horizon {
                break;
            }
            if done.get(i) {
                continue;
            }
            let Some(next) = state.step(&op.op, op.ret.as_ref().map(|r| &r.1)) else {
                continue;
            };
            done.set(i, true);
            if !seen.insert((done.clone(), next.clone())) {
                done.set(i, false);
                continue;
            }
            stack.push((std::mem::replace(&mut state, next), i, pos + 1));
            if op.ret.is_some() {
                done_completed += 1;
                best = best.max(done_completed);
            }
            from = 0;
            advanced = true;
            break;
        }
        if advanced {
            continue;
        }
        // Backtrack.
        let Some((prev, i, resume)) = stack.pop() else {
            return Err(NotLinearizable {
                linearized: best,
                completed,
            });
        };
        done.set(i, false);
        if history[i].ret.is_some() {
            done_completed -= 1;
        }
        state = prev;
        from = resume;
    }
}

/// An operation on one key of a versioned CAS store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOp<V> {
    /// `get`.
    Get,
    /// `cas(expected, value)`.
    Cas {
        /// Expected version (`None`: absent).
        expected: Option<Version>,
        /// New value.
        value: V,
    },
    /// `delete(expected)`.
    Delete {
        /// Expected version.
        expected: Version,
    },
}

/// What an operation on one key returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterRet<V> {
    /// `get`: the value and version, or absent.
    Value(Option<(V, Version)>),
    /// `cas` committed with this new version.
    Committed(Version),
    /// `delete` removed the key.
    Deleted,
    /// `cas` or `delete` conflicted; the current value and version, or absent.
    Conflict(Option<(V, Version)>),
}

/// The version a register holds: observed, or assigned by an operation whose reply was lost
/// (unknown until a later read shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Ver {
    Known(Version),
    Unseen,
}

/// The sequential model of one key of a versioned CAS store: absent, or a value at a version.
/// A committed write gets a fresh version; a version the model has not observed (the write's
/// reply was lost) matches the first version a later read reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Register<V>(Option<(V, Ver)>);

impl<V> Default for Register<V> {
    fn default() -> Self {
        Self(None)
    }
}

impl<V: Clone + Eq + Hash> Register<V> {
    /// The register as `observed` shows it, if consistent (binding an unseen version).
    fn matches(&self, observed: &Option<(V, Version)>) -> Option<Self> {
        match (&self.0, observed) {
            (None, None) => Some(self.clone()),
            (Some((v, Ver::Known(k))), Some((ov, ok))) if v == ov && k == ok => Some(self.clone()),
            (Some((v, Ver::Unseen)), Some((ov, ok))) if v == ov => {
                Some(Self(Some((v.clone(), Ver::Known(*ok)))))
            }
            _ => None,
        }
    }

    fn at(&self, expected: Option<Version>) -> bool {
        match (&self.0, expected) {
            (None, None) => true,
            (Some((_, Ver::Known(k))), Some(e)) => *k == e,
            _ => false,
        }
    }
}

impl<V: Clone + Eq + Hash> Model for Register<V> {
    type Op = RegisterOp<V>;
    type Ret = RegisterRet<V>;

    fn step(&self, op: &RegisterOp<V>, observed: Option<&RegisterRet<V>>) -> Option<Self> {
        match (op, observed) {
            (RegisterOp::Get, None) => Some(self.clone()),
            (RegisterOp::Get, Some(RegisterRet::Value(seen))) => self.matches(seen),
            (RegisterOp::Cas { expected, value }, observed) => match observed {
                None if self.at(*expected) => Some(Self(Some((value.clone(), Ver::Unseen)))),
                None => Some(self.clone()),
                Some(RegisterRet::Committed(v)) if self.at(*expected) => {
                    Some(Self(Some((value.clone(), Ver::Known(*v)))))
                }
                Some(RegisterRet::Conflict(current)) if !self.at(*expected) => {
                    self.matches(current)
                }
                _ => None,
            },
            (RegisterOp::Delete { expected }, observed) => match observed {
                None if self.at(Some(*expected)) => Some(Self(None)),
                None => Some(self.clone()),
                Some(RegisterRet::Deleted) if self.at(Some(*expected)) => Some(Self(None)),
                Some(RegisterRet::Conflict(current)) if !self.at(Some(*expected)) => {
                    self.matches(current)
                }
                _ => None,
            },
            _ => None,
        }
    }
}

/// A store the [`stress`] harness can drive synchronously, one key as one register.
pub trait RegisterStore: Sync {
    /// `get`.
    fn get(&self, key: &str) -> RegisterRet<u64>;
    /// `cas`.
    fn cas(&self, key: &str, expected: Option<Version>, value: u64) -> RegisterRet<u64>;
    /// `delete`.
    fn delete(&self, key: &str, expected: Version) -> RegisterRet<u64>;
}

impl RegisterStore for crate::MemoryStore<u64> {
    fn get(&self, key: &str) -> RegisterRet<u64> {
        RegisterRet::Value(self.get_now(key).map(|v| (v.value, v.version)))
    }

    fn cas(&self, key: &str, expected: Option<Version>, value: u64) -> RegisterRet<u64> {
        match self.cas_now(key, expected, value) {
            crate::CasOutcome::Committed(v) => RegisterRet::Committed(v),
            crate::CasOutcome::Conflict { current } => {
                RegisterRet::Conflict(current.map(|c| (c.value, c.version)))
            }
        }
    }

    fn delete(&self, key: &str, expected: Version) -> RegisterRet<u64> {
        match self.delete_now(key, expected) {
            crate::DeleteOutcome::Deleted => RegisterRet::Deleted,
            crate::DeleteOutcome::Conflict { current } => {
                RegisterRet::Conflict(current.map(|c| (c.value, c.version)))
            }
        }
    }
}

/// One operation on a `u64` register.
pub type RegisterOperation = Operation<RegisterOp<u64>, RegisterRet<u64>>;

/// Per key, the history of one [`stress`] run.
pub type KeyHistory = (String, Vec<RegisterOperation>);

/// Runs `clients` threads doing `ops` operations each on `keys` keys of `store` (gets, and CAS
/// and deletes at the version the client last saw), timing each call and return on one shared
/// counter. A fraction `lost_per_mille / 1000` of the replies is dropped (the client learns
/// nothing; the history records the operation as pending forever). Returns the history per key.
pub fn stress<S: RegisterStore>(
    store: &S,
    clients: usize,
    ops: usize,
    keys: usize,
    lost_per_mille: u64,
    seed: u64,
) -> Vec<KeyHistory> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    let clock = AtomicU64::new(0);
    let histories: Vec<Mutex<Vec<RegisterOperation>>> =
        (0..keys).map(|_| Mutex::new(Vec::new())).collect();
    let names: Vec<String> = (0..keys).map(|k| format!("lin/{seed}/{k}")).collect();
    let start = std::sync::Barrier::new(clients);
    std::thread::scope(|s| {
        for client in 0..clients {
            let (clock, histories, names, start) = (&clock, &histories, &names, &start);
            s.spawn(move || {
                start.wait();
                let mut x = seed ^ (client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut next = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let mut seen: Vec<Option<Version>> = vec![None; names.len()];
                for i in 0..ops {
                    let k = (next() % names.len() as u64) as usize;
                    let key = &names[k];
                    let value = (client * 1_000_000 + i) as u64;
                    let op = match next() % 20 {
                        0..=7 => RegisterOp::Get,
                        8..=16 => RegisterOp::Cas {
                            expected: seen[k],
                            value,
                        },
                        _ => match seen[k] {
                            Some(expected) => RegisterOp::Delete { expected },
                            None => RegisterOp::Get,
                        },
                    };
                    let call = clock.fetch_add(1, Ordering::SeqCst);
                    let ret = match &op {
                        RegisterOp::Get => store.get(key),
                        RegisterOp::Cas { expected, value } => store.cas(key, *expected, *value),
                        RegisterOp::Delete { expected } => store.delete(key, *expected),
                    };
                    let at = clock.fetch_add(1, Ordering::SeqCst);
                    let lost = next() % 1000 < lost_per_mille;
                    if !lost {
                        seen[k] = match &ret {
                            RegisterRet::Value(v) | RegisterRet::Conflict(v) => {
                                v.as_ref().map(|(_, ver)| *ver)
                            }
                            RegisterRet::Committed(v) => Some(*v),
                            RegisterRet::Deleted => None,
                        };
                    }
                    let entry = Operation {
                        client,
                        op,
                        call,
                        ret: (!lost).then_some((at, ret)),
                    };
                    histories[k]
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(entry);
                }
            });
        }
    });
    names
        .into_iter()
        .zip(histories)
        .map(|(name, h)| {
            let h = h
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (name, h)
        })
        .collect()
}

/// Checks every key's history as a [`Register`]; the first key that is not linearizable.
pub fn check_histories(histories: &[KeyHistory]) -> Result<(), (String, NotLinearizable)> {
    for (key, history) in histories {
        check(&Register::default(), history).map_err(|e| (key.clone(), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Op = Operation<RegisterOp<u8>, RegisterRet<u8>>;

    fn op(call: u64, ret: Option<u64>, op: RegisterOp<u8>, r: RegisterRet<u8>) -> Op {
        Operation {
            client: 0,
            op,
            call,
            ret: ret.map(|t| (t, r)),
        }
    }

    const V1: Version = Version::new(1);
    const V2: Version = Version::new(2);

    #[test]
    fn concurrent_creates_one_wins() {
        let cas = |value| RegisterOp::Cas {
            expected: None,
            value,
        };
        let h = vec![
            op(0, Some(10), cas(1), RegisterRet::Committed(V1)),
            op(1, Some(9), cas(2), RegisterRet::Conflict(Some((1, V1)))),
            op(
                11,
                Some(12),
                RegisterOp::Get,
                RegisterRet::Value(Some((1, V1))),
            ),
        ];
        assert!(check(&Register::default(), &h).is_ok());
    }

    #[test]
    fn two_commits_from_the_same_version_are_flagged() {
        let cas = |value| RegisterOp::Cas {
            expected: None,
            value,
        };
        let h = vec![
            op(0, Some(10), cas(1), RegisterRet::Committed(V1)),
            op(1, Some(9), cas(2), RegisterRet::Committed(V2)),
        ];
        assert!(check(&Register::default(), &h).is_err());
    }

    #[test]
    fn a_lost_write_may_or_may_not_have_happened() {
        let create = RegisterOp::Cas {
            expected: None,
            value: 7,
        };
        let lost = op(0, None, create, RegisterRet::Committed(V1));
        let absent = op(5, Some(6), RegisterOp::Get, RegisterRet::Value(None));
        let present = op(
            7,
            Some(8),
            RegisterOp::Get,
            RegisterRet::Value(Some((7, V1))),
        );
        assert!(check(&Register::default(), &[lost.clone(), absent.clone()]).is_ok());
        assert!(check(&Register::default(), &[lost.clone(), present.clone()]).is_ok());
        assert!(check(&Register::default(), &[lost, absent, present]).is_ok());
        let stale = op(9, Some(10), RegisterOp::Get, RegisterRet::Value(None));
        let seen = op(
            7,
            Some(8),
            RegisterOp::Get,
            RegisterRet::Value(Some((7, V1))),
        );
        let create = RegisterOp::Cas {
            expected: None,
            value: 7,
        };
        let lost = op(0, None, create, RegisterRet::Committed(V1));
        assert!(
            check(&Register::default(), &[lost, seen, stale]).is_err(),
            "once seen, a write cannot be undone"
        );
    }
}
