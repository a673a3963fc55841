//! Thompson sampling over Beta posteriors per (backend, bucket), as pure logic: tallies in,
//! a decision (chosen backend, its propensity, every candidate's probability) out.
//!
//! **Cold start.** A bucket a backend has never seen should not start from a flat prior when
//! the backend's record elsewhere says something, nor trust that record as if it were this
//! bucket's. The prior of (backend, bucket) is the backend's *pooled* posterior mean `m`
//! (all its buckets, from a flat Beta(1, 1)) worth [`PRIOR_PSEUDO_COUNTS`] = 2 observations:
//! Beta(2m, 2(1 - m)); the bucket's own successes and failures are added to it. Two
//! observations in the bucket already weigh as much as the whole pooled history, so the
//! shrinkage fades fast.
//!
//! **Propensity.** The probability that Thompson sampling picks a given arm has no closed
//! form for more than two Beta arms, so it is estimated by Monte Carlo: [`DRAWS`] joint
//! draws of every posterior with the caller's seeded [`Rng`]; an arm's probability is the
//! share of draws it wins. The *first* of those draws is the actual choice, so the chosen
//! arm has won at least once and its propensity is never 0 (at least 1/[`DRAWS`]); the
//! standard error of each estimate is at most 0.5/sqrt([`DRAWS`]) ≈ 0.011.
//!
//! Cooling backends (a quota or rate-limit cooldown, DESIGN §10) are skipped; when every
//! candidate is cooling the policy still chooses among all of them, and the run then fails
//! fast on its cooldown with the reason the user needs, rather than with a routing error.

use serde::Serialize;

use super::bucket::Bucket;
use super::ledger::Tally;
use super::rng::Rng;

/// Weight of the pooled prior, in observations.
pub const PRIOR_PSEUDO_COUNTS: f64 = 2.0;
/// Monte Carlo draws behind each propensity.
pub const DRAWS: usize = 2_000;

/// Which policy made a choice (the ledger's `policy` text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    Thompson,
    /// Routing is off (`CODER_ROUTING=off`): the config's default backend, always.
    Pinned,
    /// A resumed session goes back to the backend it was made on.
    Session,
}

impl PolicyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Thompson => "thompson",
            PolicyKind::Pinned => "pinned",
            PolicyKind::Session => "session",
        }
    }
}

/// A Beta(alpha, beta) posterior, with the counts behind it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Posterior {
    pub alpha: f64,
    pub beta: f64,
    pub successes: u64,
    pub failures: u64,
}

impl Posterior {
    pub fn mean(&self) -> f64 {
        self.alpha / (self.alpha + self.beta)
    }
}

/// One candidate as the policy saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Arm {
    pub backend: String,
    pub posterior: Posterior,
    /// Probability this backend is chosen (0 when cooling).
    pub probability: f64,
    pub cooling: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub chosen: String,
    pub propensity: f64,
    pub policy: PolicyKind,
    pub arms: Vec<Arm>,
}

/// The posterior of `backend` in `bucket` given every tally of that backend.
pub fn posterior(backend: &str, bucket: &str, tallies: &[Tally]) -> Posterior {
    let mine = tallies.iter().filter(|t| t.backend == backend);
    let (mut total_s, mut total_f, mut s, mut f) = (0u64, 0u64, 0u64, 0u64);
    for t in mine {
        total_s += t.successes;
        total_f += t.failures;
        if t.bucket == bucket {
            s += t.successes;
            f += t.failures;
        }
    }
    let pooled_mean = (1.0 + total_s as f64) / (2.0 + (total_s + total_f) as f64);
    Posterior {
        alpha: PRIOR_PSEUDO_COUNTS * pooled_mean + s as f64,
        beta: PRIOR_PSEUDO_COUNTS * (1.0 - pooled_mean) + f as f64,
        successes: s,
        failures: f,
    }
}

/// Choose among `candidates` (non-empty, no duplicates) for `bucket`.
pub fn decide(
    candidates: &[String],
    bucket: Bucket,
    tallies: &[Tally],
    is_cooling: &dyn Fn(&str) -> bool,
    rng: &mut Rng,
    draws: usize,
) -> Decision {
    let key = bucket.key();
    let mut arms: Vec<Arm> = candidates
        .iter()
        .map(|b| Arm {
            backend: b.clone(),
            posterior: posterior(b, &key, tallies),
            probability: 0.0,
            cooling: is_cooling(b),
        })
        .collect();
    let all_cooling = arms.iter().all(|a| a.cooling);
    let live: Vec<usize> = (0..arms.len())
        .filter(|i| all_cooling || !arms[*i].cooling)
        .collect();
    let draws = draws.max(1);
    let mut wins = vec![0usize; arms.len()];
    let mut first = live[0];
    for round in 0..draws {
        let mut best = (live[0], f64::NEG_INFINITY);
        for &i in &live {
            let p = &arms[i].posterior;
            let x = rng.beta(p.alpha, p.beta);
            if x > best.1 {
                best = (i, x);
            }
        }
        wins[best.0] += 1;
        if round == 0 {
            first = best.0;
        }
    }
    for (arm, w) in arms.iter_mut().zip(&wins) {
        arm.probability = *w as f64 / draws as f64;
    }
    Decision {
        chosen: arms[first].backend.clone(),
        propensity: arms[first].probability,
        policy: PolicyKind::Thompson,
        arms,
    }
}

/// The decision when routing is off (or a resumed session names its backend): `backend`,
/// with certainty.
pub fn pinned(
    backend: &str,
    candidates: &[String],
    bucket: Bucket,
    tallies: &[Tally],
    kind: PolicyKind,
) -> Decision {
    let key = bucket.key();
    let arms = candidates
        .iter()
        .map(|b| Arm {
            backend: b.clone(),
            posterior: posterior(b, &key, tallies),
            probability: if b == backend { 1.0 } else { 0.0 },
            cooling: false,
        })
        .collect();
    Decision {
        chosen: backend.to_owned(),
        propensity: 1.0,
        policy: kind,
        arms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::bucket::BucketInput;

    fn tally(backend: &str, bucket: &str, s: u64, f: u64) -> Tally {
        Tally {
            backend: backend.into(),
            bucket: bucket.into(),
            successes: s,
            failures: f,
        }
    }

    fn bucket() -> Bucket {
        Bucket::of(BucketInput {
            prompt_bytes: 10,
            targets: 0,
            resumed: false,
            writes: true,
        })
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cold_start_is_shrunk_toward_the_pooled_posterior() {
        // No data at all: Beta(1, 1).
        let p = posterior("a", "d0/new/write", &[]);
        assert_eq!((p.alpha, p.beta), (1.0, 1.0));
        // 8 successes, 0 failures elsewhere: pooled mean 0.9, prior Beta(1.8, 0.2).
        let t = [tally("a", "d2/new/write", 8, 0)];
        let p = posterior("a", "d0/new/write", &t);
        assert!((p.alpha - 1.8).abs() < 1e-12 && (p.beta - 0.2).abs() < 1e-12);
        // The bucket's own data adds to that prior.
        let t = [
            tally("a", "d2/new/write", 8, 0),
            tally("a", "d0/new/write", 0, 3),
        ];
        let p = posterior("a", "d0/new/write", &t);
        let m = 9.0 / 13.0;
        assert!((p.alpha - 2.0 * m).abs() < 1e-12);
        assert!((p.beta - (2.0 * (1.0 - m) + 3.0)).abs() < 1e-12);
    }

    #[test]
    fn probabilities_sum_to_one_and_favour_the_better_arm() {
        let t = [
            tally("a", "d0/new/write", 40, 10),
            tally("b", "d0/new/write", 10, 40),
        ];
        let d = decide(
            &names(&["a", "b"]),
            bucket(),
            &t,
            &|_| false,
            &mut Rng::seeded(3),
            DRAWS,
        );
        let sum: f64 = d.arms.iter().map(|a| a.probability).sum();
        assert!((sum - 1.0).abs() < 1e-9);
        assert!(d.arms[0].probability > 0.99);
        assert_eq!(d.chosen, "a");
        assert!(d.propensity > 0.0 && d.propensity <= 1.0);
    }

    /// Two arms with no data are a fair coin: the estimate is within 4 standard errors.
    #[test]
    fn symmetric_arms_are_chosen_evenly() {
        let d = decide(
            &names(&["a", "b"]),
            bucket(),
            &[],
            &|_| false,
            &mut Rng::seeded(9),
            DRAWS,
        );
        let se = 0.5 / (DRAWS as f64).sqrt();
        assert!((d.arms[0].probability - 0.5).abs() < 4.0 * se);
        let mut counts = [0usize; 2];
        let mut rng = Rng::seeded(10);
        for _ in 0..2_000 {
            let d = decide(&names(&["a", "b"]), bucket(), &[], &|_| false, &mut rng, 50);
            counts[usize::from(d.chosen == "b")] += 1;
        }
        assert!(
            (counts[0] as f64 / 2_000.0 - 0.5).abs() < 0.045,
            "{counts:?}"
        );
    }

    #[test]
    fn cooling_backends_are_skipped_unless_all_are() {
        let cands = names(&["a", "b", "c"]);
        let mut rng = Rng::seeded(1);
        for _ in 0..50 {
            let d = decide(&cands, bucket(), &[], &|b| b != "c", &mut rng, 100);
            assert_eq!(d.chosen, "c");
            assert_eq!(d.propensity, 1.0);
        }
        let d = decide(&cands, bucket(), &[], &|_| true, &mut rng, 100);
        assert!(cands.contains(&d.chosen));
    }

    #[test]
    fn same_seed_same_decision() {
        let cands = names(&["a", "b", "c"]);
        let t = [
            tally("a", "d0/new/write", 3, 2),
            tally("c", "d0/new/write", 1, 1),
        ];
        let one = decide(&cands, bucket(), &t, &|_| false, &mut Rng::seeded(77), 500);
        let two = decide(&cands, bucket(), &t, &|_| false, &mut Rng::seeded(77), 500);
        assert_eq!(one, two);
    }
}
