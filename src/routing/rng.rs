//! A small seeded random source and the Beta sampler the Thompson policy draws from.
//!
//! Why not the `rand` crate: the policy needs uniform, normal, Gamma and Beta draws and
//! nothing else, and its simulation (BENCHMARKS.md) must give the same numbers for the
//! same seed on every machine and every future version. A 40-line generator we own
//! (xoshiro256**, seeded through SplitMix64, both public-domain reference algorithms)
//! guarantees that; `rand`'s value streams are allowed to change between its versions.
//! Gamma draws use Marsaglia and Tsang's method (2000); Beta(a, b) is X / (X + Y) for
//! X ~ Gamma(a), Y ~ Gamma(b).

/// xoshiro256** (Blackman and Vigna), seeded from one `u64` through SplitMix64.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn seeded(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// Seeded from the operating system's randomness (a v4 UUID's bits).
    pub fn from_entropy() -> Self {
        let bits = uuid::Uuid::new_v4().as_u128();
        Rng::seeded((bits as u64) ^ ((bits >> 64) as u64))
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1): never 0, so logarithms stay finite.
    fn open_uniform(&mut self) -> f64 {
        loop {
            let u = self.uniform();
            if u > 0.0 {
                return u;
            }
        }
    }

    /// Standard normal (Marsaglia's polar method).
    pub fn normal(&mut self) -> f64 {
        loop {
            let u = 2.0 * self.uniform() - 1.0;
            let v = 2.0 * self.uniform() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                return u * (-2.0 * s.ln() / s).sqrt();
            }
        }
    }

    /// Gamma(shape, 1) for `shape > 0` (Marsaglia–Tsang; shapes below 1 through the
    /// boost Gamma(a) = Gamma(a + 1) * U^(1/a)).
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.open_uniform().powf(1.0 / shape);
            return self.gamma(shape + 1.0) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.open_uniform();
            if u < 1.0 - 0.0331 * x * x * x * x || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
                return d * v;
            }
        }
    }

    /// Beta(a, b) for `a, b > 0`.
    pub fn beta(&mut self, a: f64, b: f64) -> f64 {
        let x = self.gamma(a);
        let y = self.gamma(b);
        if x + y == 0.0 {
            // Both underflowed (tiny shapes): the mean is the honest answer.
            return a / (a + b);
        }
        x / (x + y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(samples: &[f64]) -> (f64, f64) {
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var)
    }

    #[test]
    fn same_seed_same_stream_and_uniform_is_in_range() {
        let (mut a, mut b) = (Rng::seeded(7), Rng::seeded(7));
        for _ in 0..1000 {
            let (x, y) = (a.uniform(), b.uniform());
            assert_eq!(x, y);
            assert!((0.0..1.0).contains(&x));
        }
        assert_ne!(Rng::seeded(7).next_u64(), Rng::seeded(8).next_u64());
    }

    /// Mean and variance of Gamma(k) are both k; with n = 40,000 draws the sample mean's
    /// standard error is sqrt(k / n), and 5 of them is far beyond chance for a fixed seed.
    #[test]
    fn gamma_matches_its_moments_for_small_and_large_shapes() {
        let mut rng = Rng::seeded(42);
        for k in [0.3, 0.8, 1.0, 2.5, 10.0, 150.0] {
            let draws: Vec<f64> = (0..40_000).map(|_| rng.gamma(k)).collect();
            assert!(draws.iter().all(|x| *x >= 0.0 && x.is_finite()));
            let (mean, var) = moments(&draws);
            let se = (k / 40_000.0f64).sqrt();
            assert!((mean - k).abs() < 5.0 * se, "k={k}: mean {mean}");
            assert!((var - k).abs() / k < 0.06, "k={k}: variance {var}");
        }
    }

    /// Beta(a, b): mean a/(a+b), variance ab/((a+b)^2 (a+b+1)); plus a Kolmogorov–Smirnov
    /// check against the exact CDF of Beta(2, 1), which is x^2.
    #[test]
    fn beta_matches_its_moments_and_distribution() {
        let mut rng = Rng::seeded(1234);
        for (a, b) in [(1.0, 1.0), (0.4, 1.6), (3.0, 7.0), (50.0, 5.0)] {
            let draws: Vec<f64> = (0..40_000).map(|_| rng.beta(a, b)).collect();
            assert!(draws.iter().all(|x| (0.0..=1.0).contains(x)));
            let (mean, var) = moments(&draws);
            let want_var = a * b / ((a + b).powi(2) * (a + b + 1.0));
            assert!((mean - a / (a + b)).abs() < 5.0 * (want_var / 40_000.0).sqrt());
            assert!((var - want_var).abs() / want_var < 0.06, "({a},{b}): {var}");
        }
        let mut draws: Vec<f64> = (0..20_000).map(|_| rng.beta(2.0, 1.0)).collect();
        draws.sort_by(f64::total_cmp);
        let n = draws.len() as f64;
        let ks = draws
            .iter()
            .enumerate()
            .map(|(i, x)| ((i as f64 + 1.0) / n - x * x).abs())
            .fold(0.0, f64::max);
        // The 99.9% critical value is 1.95 / sqrt(n).
        assert!(ks < 1.95 / n.sqrt(), "KS distance {ks}");
    }
}
