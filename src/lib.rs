//! `coder` runs one coding task through the `claude` CLI, supervises it, confines it and
//! answers with exactly one JSON envelope.
//!
//! Data flows one way, and the folders follow it (DESIGN §7):
//! [`pipeline`] turns a request into a child spec, runs supervised attempts
//! ([`supervise`], reading the child's output through [`stream`] and spawning it through
//! [`sandbox`]'s helper), classifies each into an outcome, decides on retries and builds
//! the envelope; [`journal`] records what happened. [`config`] resolves backends,
//! [`replay`] is the built-in scripted backend, [`exit`] the error kinds and exit codes.
//! Subcommand entry points live in [`commands`], which nothing else imports.

pub mod commands;
pub mod config;
pub mod doctor;
pub mod exit;
pub mod journal;
pub mod le_reader;
pub mod phases;
pub mod pipeline;
pub mod replay;
pub mod routing;
pub mod sandbox;
pub mod store;
pub mod stream;
pub mod supervise;
pub mod text;
pub mod workspace;
