//! Routing: which backend runs a task when the caller says `--backend auto` (DESIGN §10).
//!
//! The policy (Thompson sampling over per-(backend, bucket) Beta posteriors) lives here as
//! pure logic; what it learns from is a [`ledger::Ledger`], implemented by the store
//! (SQLite or PostgreSQL) so that every coder sharing a store learns from every run. This
//! module never opens a database itself: it only sees the trait.

pub mod ledger;
