//! What a run leaves behind and shows while it runs: the JSONL [`transcript`] (one per
//! run, secrets redacted), the terminal [`progress`] line, and [`runs`], which reads
//! transcripts back for `coder runs`.
//!
//! The supervisor reports through the [`crate::supervise::Journal`] trait and knows
//! nothing of files or terminals; this module knows nothing of processes.

pub mod progress;
pub mod runs;
pub mod transcript;
