//! Ledgers built only on [`crate::Store`] compare-and-swap, so they work on any backend.

mod account;
mod budget;
mod idempotency;

pub use account::{Account, AccountId, AccountMap, LedgerError, ReservationId, Settlement};
pub use budget::{BudgetLedger, BudgetLedgerError};
pub use idempotency::{ActionRecord, Begin, IdempotencyError, IdempotencyRegistry};
