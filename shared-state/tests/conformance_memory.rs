//! The in-memory backend passes the conformance suite.

use quorate_state::{conformance, MemoryLog, MemoryStore, PackedLog};

#[test]
fn memory_store_passes_the_conformance_suite() {
    conformance::run_all(MemoryStore::new, MemoryStore::new, MemoryLog::new);
}

#[test]
fn packed_log_passes_the_conformance_suite() {
    conformance::run_all(MemoryStore::new, MemoryStore::new, PackedLog::<u64>::new);
}
