//! The change ledger's warm "before" snapshot of a plain workspace, alone (no sandbox, no
//! CLI): `cargo run --release --example ledger_warm -- WORKSPACE STATE_DIR [RUNS]`. The
//! first run fills the scan cache; each run prints its time, files reused and read. For
//! profiling the scan apart from a run (`perf record`, `perf stat`).

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(ws), Some(state)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: ledger_warm WORKSPACE STATE_DIR [RUNS]");
        std::process::exit(2);
    };
    let runs: usize = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(5);
    if std::env::var_os("LEDGER_WARM_LOAD_ONLY").is_some() {
        // The scan cache's load alone (what its thread does beside the listing).
        let canonical = std::fs::canonicalize(ws).unwrap_or_else(|_| ws.into());
        let Some(cache) =
            coder::workspace::scan_cache::CacheFile::for_workspace(state.as_ref(), &canonical)
        else {
            eprintln!("no cache for this file system");
            std::process::exit(1);
        };
        for _ in 0..runs {
            let t = Instant::now();
            let loaded = cache.load();
            let took = t.elapsed();
            let entries = loaded.as_ref().map(|l| l.scan.entries.len());
            drop(loaded);
            println!("load {:.1} ms {entries:?}", took.as_secs_f64() * 1e3);
        }
        return;
    }
    for _ in 0..runs {
        let t = Instant::now();
        let mut ledger = coder::workspace::Ledger::before_cached(ws.as_ref(), state.as_ref());
        let took = t.elapsed();
        ledger.keep_cache(false);
        let counts = ledger.scan_counts();
        drop(ledger);
        println!("before {:.1} ms {counts:?}", took.as_secs_f64() * 1e3);
    }
}
