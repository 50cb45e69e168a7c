//! Boxes kept for reuse, so that a message moving between two actors costs no allocation once
//! the run is under way.
//!
//! An envelope crosses actors boxed (a few hundred bytes: the box moves, the envelope is not
//! copied). Without reuse every task costs an allocation and a free per message. With it, the
//! side that is done with a box hands it back (the worker returns its assignments' boxes with
//! its replies, the supervisor its replies' boxes with the next assignments) and the other side
//! writes its next envelope into one of them.
//!
//! A pool only ever changes where a value is stored, never which value: reuse is invisible to
//! every decision, so the cores that hold pools stay deterministic.

/// Boxes of `T` ready for reuse, at most [`BoxPool::CAP`] (or the cap it was made with). A box
/// in the pool may still hold the value it carried last: it is dropped when the box is reused
/// (or the pool dropped).
///
/// ```
/// use quorate_protocols::BoxPool;
///
/// let mut pool = BoxPool::default();
/// let first = pool.boxed(1_u64);
/// let at = &*first as *const u64;
/// pool.give(first);
/// let second = pool.boxed(2);
/// assert_eq!(*second, 2);
/// assert_eq!(&*second as *const u64, at, "the same allocation, reused");
/// ```
#[derive(Debug)]
pub struct BoxPool<T> {
    boxes: Vec<Box<T>>,
    cap: usize,
}

impl<T> Default for BoxPool<T> {
    fn default() -> Self {
        Self::with_cap(Self::CAP)
    }
}

impl<T> BoxPool<T> {
    /// Most boxes a pool keeps; one given beyond it is freed. Two batches' worth of
    /// envelopes per worker's queue is plenty: boxes come back as fast as they go out.
    pub const CAP: usize = 4096;

    /// An empty pool that keeps at most `cap` boxes (`0`: none, every box given is freed).
    #[must_use]
    pub fn with_cap(cap: usize) -> Self {
        Self {
            boxes: Vec::new(),
            cap,
        }
    }

    /// `value` in a box: a reused one if the pool has any, else a new one.
    #[inline]
    pub fn boxed(&mut self, value: T) -> Box<T> {
        match self.boxes.pop() {
            Some(mut spare) => {
                *spare = value;
                spare
            }
            None => Box::new(value),
        }
    }

    /// Keeps `spare` for reuse (frees it if the pool is full).
    #[inline]
    pub fn give(&mut self, spare: Box<T>) {
        if self.boxes.len() < self.cap {
            self.boxes.push(spare);
        }
    }

    /// Keeps every box of `spares` for reuse (up to the pool's cap).
    pub fn give_all(&mut self, spares: impl IntoIterator<Item = Box<T>>) {
        for spare in spares {
            self.give(spare);
        }
    }

    /// Moves every box of this pool to `other` (up to its cap).
    pub fn pass_to(&mut self, other: &mut BoxPool<T>) {
        other.give_all(self.boxes.drain(..));
    }

    /// Up to `n` boxes out of the pool (to hand to the actor that will fill them).
    #[must_use]
    pub fn take(&mut self, n: usize) -> Vec<Box<T>> {
        let keep = self.boxes.len().saturating_sub(n);
        self.boxes.split_off(keep)
    }
}
