//! The modification time and size of every file in a directory, taken ahead of time so
//! that the session records' retention at the end of a run does not stat each of the
//! hundreds of files a state directory keeps on the run's serial path (the transcripts'
//! retention runs beside the child instead, see [`crate::journal::transcript`]).
//!
//! A run takes these while its child runs (coder is waiting then); retention lists the
//! directory again at the end (names only, no stat) and stats only what the earlier pass
//! did not see, so it decides on the directory as it is at the end, as before. Files
//! another coder is writing right now may have grown since; the next run's retention
//! sees their final size. This module reads, it never deletes.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::time::SystemTime;

/// What an earlier pass found in one directory: name to (modification time, size).
#[derive(Debug, Default)]
pub struct DirStats(HashMap<OsString, (SystemTime, u64)>);

impl DirStats {
    /// Stats every entry of `dir` (an empty set when it cannot be listed).
    pub fn of(dir: &Path) -> DirStats {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return DirStats::default();
        };
        DirStats(
            entries
                .flatten()
                .filter_map(|e| {
                    let meta = e.metadata().ok()?;
                    Some((e.file_name(), (meta.modified().ok()?, meta.len())))
                })
                .collect(),
        )
    }

    /// What the earlier pass saw of `name`, if it saw it.
    pub fn get(&self, name: &OsStr) -> Option<(SystemTime, u64)> {
        self.0.get(name).copied()
    }
}
