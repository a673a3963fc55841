//! The routing simulation of BENCHMARKS.md (run it with `scripts/route-sim`).
//!
//! `route_sim [--seeds N] [--tasks N] [--draws N] [--ledger-out DIR]`: every policy over the
//! same seeded task streams; prints a Markdown table of expected regret after 30, 300 and
//! 3,000 tasks (mean and standard deviation over the seeds). `--ledger-out` writes each
//! policy's recorded ledger of the first seed (`<policy>.jsonl`, the format of
//! `<state>/routing-ledger.jsonl`). `route_sim --check FILE` recomputes the regret of a
//! recorded ledger against the simulated backends' true rates.

use coder::routing::memory::{FileLedger, Record};
use coder::routing::sim::{self, SimPolicy};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let backends = sim::default_backends();
    let checkpoints = [30usize, 300, 3000];
    if let Some(i) = args.iter().position(|a| a == "--check") {
        let path = std::path::PathBuf::from(&args[i + 1]);
        let records = FileLedger::new(path).read().expect("read the ledger");
        let n = records
            .iter()
            .filter(|r| matches!(r, Record::Choice(_)))
            .count();
        let at: Vec<usize> = checkpoints.iter().copied().filter(|c| *c <= n).collect();
        println!(
            "choices {n}, regret at {at:?}: {:?}",
            sim::regret(&records, &backends, &at)
        );
        println!("realized success rate {:.3}", sim::success_rate(&records));
        return;
    }
    let seeds: u64 = arg(&args, "--seeds", 20);
    let tasks_n: usize = arg(&args, "--tasks", 3000);
    let draws: usize = arg(&args, "--draws", 200);
    let out_dir: Option<String> = arg(&args, "--ledger-out", String::new())
        .parse::<String>()
        .ok()
        .filter(|s| !s.is_empty());
    println!(
        "simulated backends (true success rate; read-only tasks +{:.2}):",
        sim::READ_ONLY_BONUS
    );
    println!("\n| backend | d0 | d1 | d2 |\n|---|---|---|---|");
    for b in &backends {
        let r = b.by_difficulty;
        println!("| {} | {:.2} | {:.2} | {:.2} |", b.name, r[0], r[1], r[2]);
    }
    println!(
        "\nbest single backend in hindsight: {}; {seeds} seeds, {tasks_n} tasks each, buckets uniform over 12\n",
        backends[sim::best_single(&backends)].name
    );
    println!(
        "| policy | regret @30 | regret @300 | regret @3000 | success rate |\n|---|---|---|---|---|"
    );
    for policy in [
        SimPolicy::Thompson,
        SimPolicy::RoundRobin,
        SimPolicy::BestSingle,
    ] {
        let mut regrets = vec![Vec::new(); checkpoints.len()];
        let mut rates = Vec::new();
        for seed in 1..=seeds {
            let tasks = sim::tasks(seed, tasks_n);
            let records = sim::run(policy, &backends, &tasks, seed, draws);
            if seed == 1
                && let Some(dir) = &out_dir
            {
                let path = std::path::Path::new(dir).join(format!("{}.jsonl", policy.name()));
                let text: String = records
                    .iter()
                    .map(|r| serde_json::to_string(r).expect("json") + "\n")
                    .collect();
                std::fs::write(path, text).expect("write the ledger");
            }
            for (i, r) in sim::regret(&records, &backends, &checkpoints)
                .into_iter()
                .enumerate()
            {
                regrets[i].push(r);
            }
            rates.push(sim::success_rate(&records));
        }
        let cells: Vec<String> = regrets
            .iter()
            .map(|r| {
                let (m, sd) = mean_sd(r);
                format!("{m:.1} ± {sd:.1}")
            })
            .collect();
        println!(
            "| {} | {} | {:.3} |",
            policy.name(),
            cells.join(" | "),
            mean_sd(&rates).0
        );
    }
}
