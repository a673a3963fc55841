//! The request's routing bucket: a coarse, deterministic class of the task, so that what a
//! backend is good at can be learnt per kind of work without splitting the history so finely
//! that no class ever has data.
//!
//! Three axes, 3 x 2 x 2 = 12 buckets: difficulty (`d0` short prompt, `d1` medium, `d2`
//! long, one step up when the run names three or more targets — `--scope` globs), new vs
//! resumed session, read-only vs writing sandbox. Only the request decides the bucket (never
//! the clock, the machine or a random draw), so `coder route explain` shows the bucket the
//! run will use.

use serde::Serialize;

/// Prompts up to this many bytes are `d0`.
pub const SHORT_PROMPT_BYTES: usize = 600;
/// Prompts up to this many bytes are `d1`; longer ones `d2`.
pub const MEDIUM_PROMPT_BYTES: usize = 6_000;
/// This many targets (scope globs) or more make a task one step harder.
pub const MANY_TARGETS: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Bucket {
    /// 0, 1 or 2.
    pub difficulty: u8,
    pub resumed: bool,
    pub writes: bool,
}

/// What the bucket is computed from.
#[derive(Debug, Clone, Copy)]
pub struct BucketInput {
    pub prompt_bytes: usize,
    pub targets: usize,
    pub resumed: bool,
    pub writes: bool,
}

impl Bucket {
    pub fn of(input: BucketInput) -> Bucket {
        let size = if input.prompt_bytes <= SHORT_PROMPT_BYTES {
            0
        } else if input.prompt_bytes <= MEDIUM_PROMPT_BYTES {
            1
        } else {
            2
        };
        let bump = u8::from(input.targets >= MANY_TARGETS);
        Bucket {
            difficulty: (size + bump).min(2),
            resumed: input.resumed,
            writes: input.writes,
        }
    }

    /// The stable text form the ledger keeps: `d1/new/write`.
    pub fn key(&self) -> String {
        format!(
            "d{}/{}/{}",
            self.difficulty,
            if self.resumed { "resumed" } else { "new" },
            if self.writes { "write" } else { "read" }
        )
    }

    /// The envelope's object form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "key": self.key(),
            "difficulty": self.difficulty,
            "session": if self.resumed { "resumed" } else { "new" },
            "access": if self.writes { "write" } else { "read" },
        })
    }

    /// Every bucket, in key order (for simulations and stats).
    pub fn all() -> Vec<Bucket> {
        let mut all = Vec::new();
        for difficulty in 0..3 {
            for resumed in [false, true] {
                for writes in [false, true] {
                    all.push(Bucket {
                        difficulty,
                        resumed,
                        writes,
                    });
                }
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(prompt_bytes: usize, targets: usize) -> BucketInput {
        BucketInput {
            prompt_bytes,
            targets,
            resumed: false,
            writes: true,
        }
    }

    #[test]
    fn difficulty_follows_size_and_targets_and_keys_are_stable() {
        assert_eq!(Bucket::of(input(10, 0)).key(), "d0/new/write");
        assert_eq!(Bucket::of(input(600, 0)).difficulty, 0);
        assert_eq!(Bucket::of(input(601, 0)).difficulty, 1);
        assert_eq!(Bucket::of(input(10, 3)).difficulty, 1);
        assert_eq!(Bucket::of(input(7_000, 0)).difficulty, 2);
        assert_eq!(Bucket::of(input(7_000, 5)).difficulty, 2);
        let b = Bucket::of(BucketInput {
            prompt_bytes: 10,
            targets: 0,
            resumed: true,
            writes: false,
        });
        assert_eq!(b.key(), "d0/resumed/read");
        assert_eq!(Bucket::all().len(), 12);
    }
}
