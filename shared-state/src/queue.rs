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
/// let mut q: VecDeque<u32> = VecDeque::with_capacity(8);
/// q.extend([1, 2, 3]);
/// assert_eq!(pop_rewinding(&mut q), Some(1));
/// assert_eq!((pop_rewinding(&mut q), pop_rewinding(&mut q)), (Some(2), Some(3)));
/// assert_eq!(pop_rewinding(&mut q), None);
/// // The next burst starts at the front of the buffer.
/// q.push_back(4);
/// assert_eq!(q.as_slices(), (&[4][..], &[][..]));
/// ```
pub fn pop_rewinding<T>(queue: &mut VecDeque<T>) -> Option<T> {
    if queue.is_empty() {
        queue.clear();
        return None;
    }
    queue.pop_front()
}
