//! What the supervisor does with an accepted reply's calls (the reply rules themselves are
//! [`crate::rules::judge`]).

impl super::SupervisorCore {
    /// Logs what a worker reported of its calls (in its order), for task `i`. Most replies
    /// carry none: an empty list is neither allocated nor freed.
    pub(super) fn record_calls(
        &mut self,
        now: u64,
        i: u32,
        calls: Vec<quorate_workers::CallEvent>,
    ) {
        for call in calls {
            for kind in self.blobs.events(call) {
                self.record(now, Some(i), kind);
            }
        }
    }
}
