//! What the agent did to the workspace, and what may be done to it on a caller's behalf.
//!
//! The change [`ledger`] (a snapshot before and after a run, compared), the [`verify`]
//! command run under the run's sandbox, and the [`scope`] globs that bound what may change
//! (DESIGN §8); the private checkouts of `--worktree` ([`worktree`], DESIGN §10); and the path-jailed file operations of `coder mcp` and `coder fs` ([`fs`],
//! DESIGN §11).
//!
//! Nothing here trusts the model: a run's `changes` come from the files, never from what
//! the agent says it did. The snapshots run as coder, outside the sandbox, over a tree the
//! agent could write, so everything they execute is pinned down: git runs with a cleared
//! environment and every configuration that could run a program neutralised (see
//! [`git`]); the plain scan follows no symlink and stops at fixed caps (see [`scan`]).
//! Nothing here knows about the envelope or the supervisor; the pipeline attaches the
//! results.

pub mod fs;
pub mod git;
pub mod git_index;
pub mod ignored;
pub mod ledger;
pub mod mountinfo;
pub mod scan;
pub mod scan_cache;
pub mod scope;
pub mod verify;
pub mod worktree;

pub use ledger::{ChangeStatus, Changes, DiffText, FileChange, Ledger};
