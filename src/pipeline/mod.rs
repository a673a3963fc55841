//! The run, in the order its data flows: [`request`] (flags or `--request`) ->
//! [`prompt`] (the task with its framing) -> [`child`] (argv and environment of the CLI) ->
//! supervised attempts (in [`crate::supervise`]) whose output becomes an [`observation`] ->
//! [`outcome`] (success or an error kind; [`provider`] says what an upstream failure is) -> [`retry`] (whether another attempt is safe) ->
//! [`session`] (records for safe resumes) -> [`envelope`]; [`structured`] judges a
//! `--json-schema` answer. [`run`] drives one run through these steps; [`many`] wraps it in
//! a `--worktree` checkout and a `--backend auto` choice; [`plan`] places and reads the plan
//! file of `coder plan` and `--plan` (DESIGN §9).
//!
//! Nothing here prints or parses argv; that is the run command's job
//! (`commands::run`). Nothing here confines or spawns processes; that is the sandbox's and
//! the supervisor's.

pub mod admission;
pub mod child;
pub mod cli_home;
pub mod envelope;
pub mod fallback;
pub mod many;
pub mod observation;
pub mod outcome;
pub mod plan;
pub mod prompt;
pub mod provider;
pub mod questions;
pub mod request;
pub mod retry;
pub mod run;
pub mod session;
pub mod snapshot;
pub mod structured;
