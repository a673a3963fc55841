//! Ledgers that are not the store: [`MemoryLedger`] (unit tests, the simulation) and
//! [`FileLedger`], an append-only JSON-lines file: the recorded ledger format in which the
//! simulation writes and re-reads its runs. Real runs record to the store
//! ([`super::open_store`]).
//!
//! The file format is also the "recorded ledger format" the simulation writes and reads
//! (`scripts/route-sim`), one JSON object a line:
//! `{"choice": {"run_id", "bucket", "chosen", "candidates", "propensity", "policy", "at_unix_ms"}}`
//! or `{"outcome": {"run_id", "verdict": "success"|"failure"}}`.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::ledger::{Choice, Ledger, LedgerError, Tally, Verdict};

/// One line of the recorded ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Record {
    Choice(ChoiceRecord),
    Outcome(OutcomeRecord),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChoiceRecord {
    pub run_id: String,
    pub bucket: String,
    pub chosen: String,
    pub candidates: Vec<String>,
    pub propensity: f64,
    pub policy: String,
    pub at_unix_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutcomeRecord {
    pub run_id: String,
    pub verdict: VerdictText,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictText {
    Success,
    Failure,
}

impl From<Verdict> for VerdictText {
    fn from(v: Verdict) -> Self {
        match v {
            Verdict::Success => VerdictText::Success,
            Verdict::Failure => VerdictText::Failure,
        }
    }
}

impl From<&Choice> for ChoiceRecord {
    fn from(c: &Choice) -> Self {
        ChoiceRecord {
            run_id: c.run_id.clone(),
            bucket: c.bucket.clone(),
            chosen: c.chosen.clone(),
            candidates: c.candidates.clone(),
            propensity: c.propensity,
            policy: c.policy.clone(),
            at_unix_ms: c.at_unix_ms,
        }
    }
}

/// The tallies a sequence of records comes to: each choice's first outcome counts.
pub fn tally_records<'a>(
    records: impl IntoIterator<Item = &'a Record>,
    backends: &[String],
) -> Vec<Tally> {
    let mut choices: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    let mut counted: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    let mut done = std::collections::BTreeSet::new();
    for record in records {
        match record {
            Record::Choice(c) => {
                choices.insert(&c.run_id, (&c.chosen, &c.bucket));
            }
            Record::Outcome(o) => {
                let Some((backend, bucket)) = choices.get(o.run_id.as_str()) else {
                    continue;
                };
                if !done.insert(o.run_id.clone()) {
                    continue;
                }
                if !backends.is_empty() && !backends.iter().any(|b| b == backend) {
                    continue;
                }
                let entry = counted
                    .entry((backend.to_string(), bucket.to_string()))
                    .or_default();
                match o.verdict {
                    VerdictText::Success => entry.0 += 1,
                    VerdictText::Failure => entry.1 += 1,
                }
            }
        }
    }
    counted
        .into_iter()
        .map(|((backend, bucket), (successes, failures))| Tally {
            backend,
            bucket,
            successes,
            failures,
        })
        .collect()
}

/// Records of `backend` (or all when `None`) dropped: their choices and those choices'
/// outcomes. Returns the records kept and how many choices went.
fn forget_records(records: Vec<Record>, backend: Option<&str>) -> (Vec<Record>, u64) {
    let forget_all = backend.is_none();
    let gone: std::collections::BTreeSet<String> = records
        .iter()
        .filter_map(|r| match r {
            Record::Choice(c) if backend.is_none_or(|b| b == c.chosen) => Some(c.run_id.clone()),
            _ => None,
        })
        .collect();
    let removed = gone.len() as u64;
    let kept = records
        .into_iter()
        .filter(|r| match r {
            Record::Choice(c) => !gone.contains(&c.run_id),
            Record::Outcome(o) => !forget_all && !gone.contains(&o.run_id),
        })
        .collect();
    (kept, removed)
}

/// A ledger in memory (tests, the simulation).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    records: Mutex<Vec<Record>>,
}

impl MemoryLedger {
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Vec<Record>) -> T) -> Result<T, LedgerError> {
        let mut guard = self
            .records
            .lock()
            .map_err(|_| LedgerError("poisoned".into()))?;
        Ok(f(&mut guard))
    }
}

impl Ledger for MemoryLedger {
    fn record_choice(&self, choice: &Choice) -> Result<(), LedgerError> {
        self.with(|r| r.push(Record::Choice(choice.into())))
    }

    fn record_outcome(&self, run_id: &str, verdict: Verdict) -> Result<(), LedgerError> {
        self.with(|r| {
            r.push(Record::Outcome(OutcomeRecord {
                run_id: run_id.to_owned(),
                verdict: verdict.into(),
            }))
        })
    }

    fn tallies(&self, backends: &[String]) -> Result<Vec<Tally>, LedgerError> {
        self.with(|r| tally_records(r.iter(), backends))
    }

    fn forget(&self, backend: Option<&str>) -> Result<u64, LedgerError> {
        self.with(|r| {
            let (kept, removed) = forget_records(std::mem::take(r), backend);
            *r = kept;
            removed
        })
    }
}

/// The append-only JSON-lines ledger at `<state>/routing-ledger.jsonl` (0600). Appends are
/// single `write` calls on an `O_APPEND` descriptor, so concurrent coders do not interleave
/// lines; `forget` rewrites the file through a temporary and a rename (a record appended by
/// another coder during that rewrite can be lost: the store has no such gap).
#[derive(Debug, Clone)]
pub struct FileLedger {
    path: PathBuf,
}

impl FileLedger {
    pub fn new(path: PathBuf) -> Self {
        FileLedger { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record in the file; undecodable lines are skipped (a torn last line).
    pub fn read(&self) -> Result<Vec<Record>, LedgerError> {
        match fs::read(&self.path) {
            Ok(bytes) => Ok(bytes
                .split(|b| *b == b'\n')
                .filter_map(|line| serde_json::from_slice(line).ok())
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_error(&self.path, e)),
        }
    }

    fn append(&self, record: &Record) -> Result<(), LedgerError> {
        let mut line = serde_json::to_vec(record).map_err(|e| LedgerError(e.to_string()))?;
        line.push(b'\n');
        if let Some(parent) = self.path.parent() {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| io_error(parent, e))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .map_err(|e| io_error(&self.path, e))?;
        file.write_all(&line).map_err(|e| io_error(&self.path, e))
    }
}

fn io_error(path: &Path, e: std::io::Error) -> LedgerError {
    LedgerError(format!("{}: {e}", path.display()))
}

impl Ledger for FileLedger {
    fn record_choice(&self, choice: &Choice) -> Result<(), LedgerError> {
        self.append(&Record::Choice(choice.into()))
    }

    fn record_outcome(&self, run_id: &str, verdict: Verdict) -> Result<(), LedgerError> {
        self.append(&Record::Outcome(OutcomeRecord {
            run_id: run_id.to_owned(),
            verdict: verdict.into(),
        }))
    }

    fn tallies(&self, backends: &[String]) -> Result<Vec<Tally>, LedgerError> {
        Ok(tally_records(self.read()?.iter(), backends))
    }

    fn forget(&self, backend: Option<&str>) -> Result<u64, LedgerError> {
        if !self.path.exists() {
            return Ok(0);
        }
        let (kept, removed) = forget_records(self.read()?, backend);
        let mut text = Vec::new();
        for r in &kept {
            text.extend(serde_json::to_vec(r).map_err(|e| LedgerError(e.to_string()))?);
            text.push(b'\n');
        }
        let tmp = self
            .path
            .with_extension(format!("tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = OpenOptions::new()
                .create_new(true)
                .write(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&text)?;
            fs::rename(&tmp, &self.path)
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            io_error(&self.path, e)
        })?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(run: &str, backend: &str, bucket: &str) -> Choice {
        Choice {
            run_id: run.into(),
            bucket: bucket.into(),
            chosen: backend.into(),
            candidates: vec!["a".into(), "b".into()],
            propensity: 0.5,
            policy: "thompson".into(),
            at_unix_ms: 1,
        }
    }

    fn exercise(ledger: &dyn Ledger) {
        ledger.record_choice(&choice("1", "a", "x")).unwrap();
        ledger.record_choice(&choice("2", "a", "x")).unwrap();
        ledger.record_choice(&choice("3", "b", "y")).unwrap();
        ledger.record_outcome("1", Verdict::Success).unwrap();
        ledger.record_outcome("1", Verdict::Failure).unwrap(); // a second outcome is ignored
        ledger.record_outcome("2", Verdict::Failure).unwrap();
        ledger.record_outcome("3", Verdict::Success).unwrap();
        ledger.record_outcome("nope", Verdict::Success).unwrap();
        let all = ledger.tallies(&[]).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].successes, all[0].failures), (1, 1));
        assert_eq!(ledger.tallies(&["b".into()]).unwrap().len(), 1);
        assert_eq!(ledger.forget(Some("a")).unwrap(), 2);
        let left = ledger.tallies(&[]).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].backend, "b");
        assert_eq!(ledger.forget(None).unwrap(), 1);
        assert!(ledger.tallies(&[]).unwrap().is_empty());
    }

    #[test]
    fn memory_ledger_tallies_and_forgets() {
        exercise(&MemoryLedger::default());
    }

    #[test]
    fn file_ledger_tallies_and_forgets_and_skips_torn_lines() {
        let dir = std::env::temp_dir().join(format!("coder-ledger-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        let ledger = FileLedger::new(dir.join("l.jsonl"));
        exercise(&ledger);
        ledger.record_choice(&choice("9", "a", "x")).unwrap();
        let mut f = OpenOptions::new().append(true).open(ledger.path()).unwrap();
        f.write_all(b"{\"outcome\": {\"run_i").unwrap();
        assert_eq!(ledger.read().unwrap().len(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }
}
