//! The routing ledger in the store: one row per routed run (its choice and propensity),
//! completed with the run's verdict; tallies are counted per (backend, bucket) from the rows
//! that have an outcome. Every coder sharing the store reads every other's rows.

use crate::routing::ledger::{Choice, Ledger, LedgerError, Tally, Verdict};

use super::sql::{Col, Val};
use super::{Store, StoreError, now_ms};

impl From<StoreError> for LedgerError {
    fn from(e: StoreError) -> LedgerError {
        LedgerError(e.to_string())
    }
}

impl Ledger for Store {
    fn record_choice(&self, choice: &Choice) -> Result<(), LedgerError> {
        let candidates =
            serde_json::to_string(&choice.candidates).map_err(|e| LedgerError(e.to_string()))?;
        let params: Vec<Val> = vec![
            choice.run_id.clone().into(),
            choice.bucket.clone().into(),
            choice.chosen.clone().into(),
            candidates.into(),
            choice.propensity.into(),
            choice.policy.clone().into(),
            choice.at_unix_ms.into(),
        ];
        self.call(move |conn| {
            conn.exec(
                "INSERT INTO routing_choices (run_id, bucket, chosen, candidates, propensity,
                   policy, at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (run_id) DO UPDATE SET bucket = excluded.bucket,
                   chosen = excluded.chosen, candidates = excluded.candidates,
                   propensity = excluded.propensity, policy = excluded.policy,
                   at_ms = excluded.at_ms",
                &params,
            )
            .map(|_| ())
        })?;
        Ok(())
    }

    fn record_outcome(&self, run_id: &str, verdict: Verdict) -> Result<(), LedgerError> {
        let outcome = match verdict {
            Verdict::Success => "success",
            Verdict::Failure => "failure",
        };
        let params: Vec<Val> = vec![run_id.into(), outcome.into(), now_ms().into()];
        self.call(move |conn| {
            conn.exec(
                "UPDATE routing_choices SET outcome = $2, outcome_at_ms = $3 WHERE run_id = $1",
                &params,
            )
            .map(|_| ())
        })?;
        Ok(())
    }

    fn tallies(&self, backends: &[String]) -> Result<Vec<Tally>, LedgerError> {
        let rows = self.call(|conn| {
            conn.query(
                "SELECT chosen, bucket,
                   SUM(CASE WHEN outcome = 'success' THEN 1 ELSE 0 END),
                   SUM(CASE WHEN outcome = 'failure' THEN 1 ELSE 0 END)
                 FROM routing_choices WHERE outcome IS NOT NULL
                 GROUP BY chosen, bucket ORDER BY chosen, bucket",
                &[],
                &[Col::Text, Col::Text, Col::Int, Col::Int],
            )
        })?;
        Ok(rows
            .into_iter()
            .map(|r| Tally {
                backend: r[0].text().unwrap_or_default().to_owned(),
                bucket: r[1].text().unwrap_or_default().to_owned(),
                successes: r[2].int().unwrap_or(0).max(0) as u64,
                failures: r[3].int().unwrap_or(0).max(0) as u64,
            })
            .filter(|t| backends.is_empty() || backends.contains(&t.backend))
            .collect())
    }

    fn forget(&self, backend: Option<&str>) -> Result<u64, LedgerError> {
        let backend = backend.map(str::to_owned);
        Ok(self.call(move |conn| match backend {
            Some(b) => conn.exec("DELETE FROM routing_choices WHERE chosen = $1", &[b.into()]),
            None => conn.exec("DELETE FROM routing_choices", &[]),
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Location;

    pub(crate) fn choice(run_id: &str, chosen: &str, bucket: &str) -> Choice {
        Choice {
            run_id: run_id.into(),
            bucket: bucket.into(),
            chosen: chosen.into(),
            candidates: vec!["glm".into(), "deepseek".into()],
            propensity: 0.41,
            policy: "thompson".into(),
            at_unix_ms: 1,
        }
    }

    /// The contract every ledger keeps, checked on a given store (also run on PostgreSQL
    /// by the fleet tests through the binary).
    pub(crate) fn ledger_contract(store: &Store) {
        store
            .record_choice(&choice("r1", "glm", "d1/new/write"))
            .unwrap();
        store
            .record_choice(&choice("r2", "glm", "d1/new/write"))
            .unwrap();
        store
            .record_choice(&choice("r3", "deepseek", "d1/new/write"))
            .unwrap();
        store
            .record_choice(&choice("r4", "glm", "d2/new/read"))
            .unwrap();
        store.record_outcome("r1", Verdict::Success).unwrap();
        store.record_outcome("r2", Verdict::Failure).unwrap();
        store.record_outcome("r3", Verdict::Success).unwrap();
        store.record_outcome("nobody", Verdict::Success).unwrap();
        let all = store.tallies(&[]).unwrap();
        assert_eq!(
            all,
            vec![
                Tally {
                    backend: "deepseek".into(),
                    bucket: "d1/new/write".into(),
                    successes: 1,
                    failures: 0
                },
                Tally {
                    backend: "glm".into(),
                    bucket: "d1/new/write".into(),
                    successes: 1,
                    failures: 1
                },
            ],
            "r4 has no outcome yet"
        );
        assert_eq!(store.tallies(&["glm".into()]).unwrap().len(), 1);
        assert_eq!(store.forget(Some("glm")).unwrap(), 3);
        assert_eq!(store.tallies(&[]).unwrap().len(), 1);
        assert_eq!(store.forget(None).unwrap(), 1);
    }

    #[test]
    fn sqlite_keeps_the_ledger_contract() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Location::Sqlite(dir.path().join("s.db"))).unwrap();
        ledger_contract(&store);
    }
}
