//! The routing simulation behind BENCHMARKS.md: simulated backends with known success rates
//! per bucket, a seeded stream of tasks, and three policies — Thompson sampling (this
//! module's parent, learning through a [`Ledger`]), round-robin, and the best single
//! backend chosen in hindsight — compared by regret against the per-bucket oracle.
//!
//! Every policy writes its choices and outcomes in the recorded ledger format
//! ([`super::memory::Record`]); regret is computed back from those records and the true
//! rates, so a recorded ledger file can be checked independently (`scripts/route-sim`).
//! Regret here is *expected* (pseudo-)regret: the sum over tasks of the oracle's success
//! probability minus the chosen backend's, which removes the coin-flip noise of outcomes.

use super::bucket::Bucket;
use super::ledger::{Choice, Ledger, Verdict};
use super::memory::{MemoryLedger, Record};
use super::policy;
use super::rng::Rng;

/// A simulated backend: its true success probability per difficulty (`d0`, `d1`, `d2`),
/// plus [`READ_ONLY_BONUS`] for read-only tasks.
#[derive(Debug, Clone)]
pub struct SimBackend {
    pub name: &'static str,
    pub by_difficulty: [f64; 3],
}

/// Read-only tasks are easier for every backend.
pub const READ_ONLY_BONUS: f64 = 0.05;

/// The simulated backends of BENCHMARKS.md: no backend is best everywhere (glm is best on
/// short tasks, deepseek on long ones), so a per-bucket policy can beat any single one.
pub fn default_backends() -> Vec<SimBackend> {
    vec![
        SimBackend {
            name: "glm",
            by_difficulty: [0.85, 0.70, 0.40],
        },
        SimBackend {
            name: "deepseek",
            by_difficulty: [0.70, 0.72, 0.62],
        },
        SimBackend {
            name: "minimax",
            by_difficulty: [0.78, 0.60, 0.35],
        },
    ]
}

impl SimBackend {
    pub fn rate(&self, bucket: Bucket) -> f64 {
        let base = self.by_difficulty[usize::from(bucket.difficulty.min(2))];
        let bonus = if bucket.writes { 0.0 } else { READ_ONLY_BONUS };
        (base + bonus).min(0.99)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimPolicy {
    Thompson,
    RoundRobin,
    /// The backend with the best average rate over the task mix, known in advance.
    BestSingle,
}

impl SimPolicy {
    pub fn name(self) -> &'static str {
        match self {
            SimPolicy::Thompson => "thompson",
            SimPolicy::RoundRobin => "round-robin",
            SimPolicy::BestSingle => "best-single",
        }
    }
}

/// The seeded task stream: buckets uniformly over all twelve.
pub fn tasks(seed: u64, n: usize) -> Vec<Bucket> {
    let all = Bucket::all();
    let mut rng = Rng::seeded(seed ^ 0x7A5C_0DE5);
    (0..n)
        .map(|_| all[(rng.next_u64() % all.len() as u64) as usize])
        .collect()
}

/// The single backend with the best average rate over all buckets.
pub fn best_single(backends: &[SimBackend]) -> usize {
    let all = Bucket::all();
    let avg = |b: &SimBackend| all.iter().map(|k| b.rate(*k)).sum::<f64>();
    (0..backends.len())
        .max_by(|x, y| avg(&backends[*x]).total_cmp(&avg(&backends[*y])))
        .unwrap_or(0)
}

/// Runs `policy` over `tasks` and returns its recorded ledger.
pub fn run(
    policy: SimPolicy,
    backends: &[SimBackend],
    tasks: &[Bucket],
    seed: u64,
    draws: usize,
) -> Vec<Record> {
    let ledger = MemoryLedger::default();
    let names: Vec<String> = backends.iter().map(|b| b.name.to_owned()).collect();
    let mut policy_rng = Rng::seeded(seed);
    let mut outcome_rng = Rng::seeded(seed ^ 0x0u64.wrapping_sub(1));
    let single = best_single(backends);
    for (i, bucket) in tasks.iter().enumerate() {
        let (chosen, propensity) = match policy {
            SimPolicy::Thompson => {
                let tallies = ledger.tallies(&names).unwrap_or_default();
                let d = policy::decide(
                    &names,
                    *bucket,
                    &tallies,
                    &|_| false,
                    &mut policy_rng,
                    draws,
                );
                let idx = names.iter().position(|n| *n == d.chosen).unwrap_or(0);
                (idx, d.propensity)
            }
            SimPolicy::RoundRobin => (i % backends.len(), 1.0),
            SimPolicy::BestSingle => (single, 1.0),
        };
        let run_id = format!("sim-{i}");
        let _ = ledger.record_choice(&Choice {
            run_id: run_id.clone(),
            bucket: bucket.key(),
            chosen: names[chosen].clone(),
            candidates: names.clone(),
            propensity,
            policy: policy.name().to_owned(),
            at_unix_ms: i as i64,
        });
        let success = outcome_rng.uniform() < backends[chosen].rate(*bucket);
        let verdict = if success {
            Verdict::Success
        } else {
            Verdict::Failure
        };
        let _ = ledger.record_outcome(&run_id, verdict);
    }
    ledger.records()
}

/// Cumulative expected regret after each of the first `checkpoints` tasks, from a recorded
/// ledger: sum of (best rate in the task's bucket - chosen backend's rate).
pub fn regret(records: &[Record], backends: &[SimBackend], checkpoints: &[usize]) -> Vec<f64> {
    let all = Bucket::all();
    let mut total = 0.0;
    let mut seen = 0usize;
    let mut out = Vec::new();
    for record in records {
        let Record::Choice(c) = record else { continue };
        let (Some(bucket), Some(chosen)) = (
            all.iter().find(|b| b.key() == c.bucket),
            backends.iter().find(|b| b.name == c.chosen),
        ) else {
            continue;
        };
        let best = backends.iter().map(|b| b.rate(*bucket)).fold(0.0, f64::max);
        total += best - chosen.rate(*bucket);
        seen += 1;
        if checkpoints.contains(&seen) {
            out.push(total);
        }
    }
    out
}

/// Realized success rate of a recorded ledger (outcomes / choices).
pub fn success_rate(records: &[Record]) -> f64 {
    let (mut ok, mut n) = (0usize, 0usize);
    for r in records {
        if let Record::Outcome(o) = r {
            n += 1;
            ok += usize::from(o.verdict == super::memory::VerdictText::Success);
        }
    }
    if n == 0 { 0.0 } else { ok as f64 / n as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thompson_beats_round_robin_and_best_single_given_enough_tasks() {
        let backends = default_backends();
        let checkpoints = [30, 300, 1000];
        let mut sums = [[0.0; 3]; 3];
        for seed in 1..=3u64 {
            let tasks = tasks(seed, 1000);
            for (p, policy) in [
                SimPolicy::Thompson,
                SimPolicy::RoundRobin,
                SimPolicy::BestSingle,
            ]
            .into_iter()
            .enumerate()
            {
                let records = run(policy, &backends, &tasks, seed, 50);
                for (c, r) in regret(&records, &backends, &checkpoints).iter().enumerate() {
                    sums[p][c] += r;
                }
            }
        }
        // At 1,000 tasks the learnt policy is well ahead of both.
        assert!(sums[0][2] < sums[1][2] * 0.5, "{sums:?}");
        assert!(sums[0][2] < sums[2][2], "{sums:?}");
    }

    #[test]
    fn the_simulation_is_reproducible() {
        let backends = default_backends();
        let tasks = tasks(5, 100);
        let a = run(SimPolicy::Thompson, &backends, &tasks, 5, 50);
        let b = run(SimPolicy::Thompson, &backends, &tasks, 5, 50);
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
    }
}
