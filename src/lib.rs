//! `coder` runs one coding task through the `claude` CLI, supervises it, confines it and
//! answers with exactly one JSON envelope.
//!
//! Data flows one way, and the modules follow it:
//! request ([`cli`]) -> child spec ([`child`]) -> supervised attempt ([`supervise`], reading
//! [`stream`] into an [`observation`], spawning through [`sandbox::helper`]) -> verdict
//! ([`outcome`]) -> envelope ([`envelope`]). [`run`] ties the run mode together.

pub mod child;
pub mod cli;
pub mod config;
pub mod doctor;
pub mod envelope;
pub mod observation;
pub mod outcome;
pub mod progress;
pub mod prompt;
pub mod replay;
pub mod retry;
pub mod run;
pub mod runs;
pub mod sandbox;
pub mod session;
pub mod stream;
pub mod supervise;
pub mod transcript;
