//! Draining an effect queue so that it stays small in cache.

use std::collections::VecDeque;

/// `queue.pop_front()`, except that a queue found empty is rewound: a `VecDeque` that was
/// drained keeps its head where the last element left, so the next burst of pushes would go on
/// around the whole buffer, touching memory no recent burst touched. Rewound, every burst
/// starts at the front again. The pure cores hand out their effects through this.
///
/// ```
/// use std::collections::VecDeque;
/// use quorate_state::pop_rewinding;
///
/// let mut q: VecDeque<u32> = VecDeque::with_capacity(4);
/// let end = q.capacity() as u32 - 1;
/// q.extend(1..=end);
/// while pop_rewinding(&mut q).is_some() {}
/// // The head stopped at the last slot; rewound, the next burst starts at the front of the
/// // buffer in one piece instead of wrapping around its end.
/// q.extend([7, 8]);
/// assert_eq!(q.as_slices(), (&[7, 8][..], &[][..]));
/// ```
///
/// The rewind is `VecDeque::clear` on an empty queue, which in std resets the head (not a
/// documented promise: the example above checks it).
pub fn pop_rewinding<T>(queue: &mut VecDeque<T>) -> Option<T> {
    if queue.is_empty() {
        queue.clear();
        return None;
    }
    queue.pop_front()
}
