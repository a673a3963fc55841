//! What the agent did to the workspace, measured by coder itself (DESIGN §8): the change
//! [`ledger`] (a snapshot before and after a run, compared), the [`verify`] command run
//! under the run's sandbox, and the [`scope`] globs that bound what may change.
//!
//! Nothing here trusts the model: a run's `changes` come from the files, never from what
//! the agent says it did. The snapshots run as coder, outside the sandbox, over a tree the
//! agent could write, so everything they execute is pinned down: git runs with a cleared
//! environment and every configuration that could run a program neutralised (see
//! [`git`]); the plain scan follows no symlink and stops at fixed caps (see [`scan`]).
//! Nothing here knows about the envelope or the supervisor; the pipeline attaches the
//! results.

pub mod git;
pub mod ledger;
pub mod scan;
pub mod scope;
pub mod verify;

pub use ledger::{ChangeStatus, Changes, DiffText, FileChange, Ledger};
