//! `coder` runs one coding task through the `claude` CLI, supervises it, confines it and
//! answers with exactly one JSON envelope.
//!
//! Data flows one way, and the modules follow it:
//! request ([`cli`]) -> child spec ([`child`], [`config`], [`prompt`]) -> supervised
//! attempt(s) ([`supervise`], [`stream`], [`sandbox`], [`retry`]) -> outcome ([`outcome`])
//! -> envelope ([`envelope`]).

pub mod outcome;
pub mod sandbox;
