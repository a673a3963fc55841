//! The routing ledger: the one interface between the routing policy and the store.
//!
//! Every choice is recorded with its propensity (the probability the policy gave the chosen
//! backend) so that the recorded history can be replayed and evaluated offline; every run's
//! outcome is recorded against its choice. The policy reads back per-(backend, bucket)
//! tallies. Implementations: the store (SQLite, PostgreSQL) and an in-memory one for tests
//! and simulations.

/// One routing decision, as the policy made it.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// coder's run id (the journal's id), which the outcome is later recorded against.
    pub run_id: String,
    /// The request's bucket, in its stable text form (e.g. `"d2/new/write"`).
    pub bucket: String,
    pub chosen: String,
    pub candidates: Vec<String>,
    /// Probability the policy assigned to `chosen` at decision time, in (0, 1].
    pub propensity: f64,
    /// `"thompson"`, or `"pinned"` when routing is off.
    pub policy: String,
    pub at_unix_ms: i64,
}

/// What a routed run came to: the verify verdict when there was one, else run success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Success,
    Failure,
}

/// Outcomes recorded for one (backend, bucket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub backend: String,
    pub bucket: String,
    pub successes: u64,
    pub failures: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("routing ledger: {0}")]
pub struct LedgerError(pub String);

/// Where routing choices and their outcomes are kept.
pub trait Ledger: Send + Sync {
    fn record_choice(&self, choice: &Choice) -> Result<(), LedgerError>;
    /// Records the outcome of the run `run_id`; a run with no recorded choice is ignored.
    fn record_outcome(&self, run_id: &str, verdict: Verdict) -> Result<(), LedgerError>;
    /// Tallies of every bucket for the given backends (all backends when empty).
    fn tallies(&self, backends: &[String]) -> Result<Vec<Tally>, LedgerError>;
    /// Forgets what was learned about one backend, or about all; returns rows removed.
    fn forget(&self, backend: Option<&str>) -> Result<u64, LedgerError>;
}

/// A shared store is a ledger too (the run keeps one handle for routing and admission).
impl<T: Ledger + ?Sized> Ledger for std::sync::Arc<T> {
    fn record_choice(&self, choice: &Choice) -> Result<(), LedgerError> {
        (**self).record_choice(choice)
    }
    fn record_outcome(&self, run_id: &str, verdict: Verdict) -> Result<(), LedgerError> {
        (**self).record_outcome(run_id, verdict)
    }
    fn tallies(&self, backends: &[String]) -> Result<Vec<Tally>, LedgerError> {
        (**self).tallies(backends)
    }
    fn forget(&self, backend: Option<&str>) -> Result<u64, LedgerError> {
        (**self).forget(backend)
    }
}
