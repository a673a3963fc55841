//! Throughput of the stream path: what coder spends per byte and per event of the child's
//! stdout, measured on a realistic generated stream.
//!
//! Four stages, each on two streams:
//! - `split`: [`LineSplitter`] fed in the supervisor's 256 KiB read chunks;
//! - `decode`: [`decode_event`] on every line;
//! - `observe`: [`Observation::observe_line`] on every line (decode plus the bookkeeping:
//!   last lines, counters, pending tools, and the sandbox-denial check of tool results that
//!   a default `workspace-write` run does);
//! - `pipeline`: split and observe together, which is the CPU cost of one stdout pipe.
//!
//! Streams: `mixed` is a run as the CLI prints it (init, then turns of assistant text,
//! assistant tool_use and a user tool_result whose size follows a long tail up to several
//! megabytes, then the result), so its bytes are dominated by a few huge lines; `chatter`
//! is the same shape with tool results capped at 2 KiB, so its cost is per event. The
//! Python generator in fixtures/bench/gen_stream.py writes the same shape for the end-to-end
//! bench.
//!
//! Throughput is reported both as bytes/s and as lines (events)/s.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use coder::pipeline::observation::Observation;
use coder::sandbox::{Mode, Policy, PolicyOptions};
use coder::stream::Pipe;
use coder::stream::{DEFAULT_MAX_LINE_BYTES, Line, LineSplitter, decode_event};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// The supervisor's read size.
const READ_CHUNK: usize = 256 * 1024;
const SESSION: &str = "8f0c7a52-3c1e-4d5b-9a41-6f2e1b0d9c37";

/// splitmix64: a small deterministic generator, so every run benches the same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "to",
    "in",
    "is",
    "that",
    "for",
    "with",
    "function",
    "return",
    "value",
    "error",
    "test",
    "build",
    "module",
    "stream",
    "line",
    "event",
    "child",
    "process",
    "result",
    "session",
    "timeout",
    "signal",
    "pipe",
    "buffer",
    "parser",
    "request",
    "config",
    "naïve",
    "café",
    "résumé",
    "—",
    "“quoted”",
    "✓",
];

/// JSON string contents (no surrounding quotes) of `text`.
fn escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted[1..quoted.len() - 1].to_owned()
}

/// Code- and log-like lines, already escaped, each ending in an escaped newline.
fn corpus(rng: &mut Rng, count: usize) -> Vec<String> {
    (0..count)
        .map(|_| {
            let w = rng.pick(WORDS);
            let w2 = rng.pick(WORDS);
            let n = rng.range(1, 100_000);
            let text = match rng.below(9) {
                0 => format!("fn {w}_{n}(input: &str) -> Result<Value, Error> {{"),
                1 => format!("    let {w} = input.split(\"\\t\").map(|s| s.trim()).collect();"),
                2 => format!("    if {w}.is_empty() {{ return Err(Error::new(\"empty {w}\")); }}"),
                3 => format!("    println!(\"{{}}: {{:?}}\", \"{w}\", {w2});"),
                4 => "}".to_owned(),
                5 => format!("// {w} {w2}: see \"docs/{w}.md\""),
                6 => format!("const P_{n}: &str = \"C:\\\\Users\\\\{w}\\\\{w2}\";"),
                7 => format!("{n:>6}\t{w} {w2} {w} {w2}"),
                _ => String::new(),
            };
            escaped(&(text + "\n"))
        })
        .collect()
}

fn blob(rng: &mut Rng, corpus: &[String], size: usize) -> String {
    let mut out = String::with_capacity(size + 128);
    let mut at = rng.below(corpus.len());
    while out.len() < size {
        out.push_str(&corpus[at]);
        at = (at + 1) % corpus.len();
    }
    out
}

fn tool_result_size(rng: &mut Rng, cap: usize) -> usize {
    let roll = rng.below(100);
    let size = if roll < 70 {
        rng.range(200, 8 << 10)
    } else if roll < 95 {
        rng.range(8 << 10, 256 << 10)
    } else {
        rng.range(1 << 20, 4 << 20)
    };
    size.min(cap)
}

/// A whole stream of about `target` bytes: init, turns, result. Tool results are at most
/// `result_cap` bytes (each printed twice, as the CLI does).
fn generate(target: usize, result_cap: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let corpus = corpus(&mut rng, 50_000);
    let mut out = String::with_capacity(target + (16 << 20));
    out.push_str(&format!(
        r#"{{"type":"system","subtype":"init","cwd":"/home/u/ws","session_id":"{SESSION}","tools":["Task","Bash","Edit","Read","Write"],"mcp_servers":[],"model":"glm-4.7","permissionMode":"acceptEdits","apiKeySource":"none","claude_code_version":"2.1.330","uuid":"c8b1db93-cc04-4eaa-9ceb-9d6770b73f31"}}"#
    ));
    out.push('\n');
    let mut turn = 0u64;
    while out.len() < target {
        turn += 1;
        let tail = format!(
            r#""parent_tool_use_id":null,"session_id":"{SESSION}","uuid":"{turn:08x}-0000-4000-8000-{:012x}","timestamp":"2026-11-21T12:28:02.574Z""#,
            turn.wrapping_mul(2_654_435_761) % (1 << 48)
        );
        let head = format!(
            r#"{{"type":"assistant","message":{{"id":"msg_bench_{turn:08x}","type":"message","role":"assistant","model":"glm-4.7","content":["#
        );
        let foot = format!(
            r#"],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"output_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":{}}},"context_management":null}},{tail},"request_id":"req_{turn:08x}"}}"#,
            rng.range(10, 90_000),
            rng.range(1, 4000),
            rng.range(0, 90_000)
        );
        let words: Vec<&str> = (0..rng.range(20, 400)).map(|_| rng.pick(WORDS)).collect();
        let text = escaped(&(words.join(" ") + "\n\nNext: run \"cargo test\"."));
        out.push_str(&format!(
            "{head}{{\"type\":\"text\",\"text\":\"{text}\"}}{foot}\n"
        ));

        let size = tool_result_size(&mut rng, result_cap);
        let content = blob(&mut rng, &corpus, size);
        let tool = format!("toolu_bench_{turn:08x}");
        let path = format!("/home/u/ws/src/{}_{turn}.rs", rng.pick(WORDS));
        let (tool_use, echo) = if rng.chance(50) {
            (
                format!(
                    r#"{{"type":"tool_use","id":"{tool}","name":"Bash","input":{{"command":"cargo test --lib {} 2>&1 | tail -n 200","description":"Run the tests"}}}}"#,
                    rng.pick(WORDS)
                ),
                format!(
                    r#"{{"stdout":"{content}","stderr":"","interrupted":false,"isImage":false,"noOutputExpected":false}}"#
                ),
            )
        } else {
            (
                format!(
                    r#"{{"type":"tool_use","id":"{tool}","name":"Read","input":{{"file_path":"{path}"}}}}"#
                ),
                format!(
                    r#"{{"type":"text","file":{{"filePath":"{path}","content":"{content}","numLines":100,"startLine":1,"totalLines":100}}}}"#
                ),
            )
        };
        out.push_str(&format!("{head}{tool_use}{foot}\n"));
        out.push_str(&format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{tool}","type":"tool_result","content":"{content}","is_error":false}}]}},{tail},"tool_use_result":{echo},"tool_result_meta":[{{"id":"{tool}","permission_decision":{{"decision":"accept","source":"config","reason_type":"rule"}}}}]}}"#
        ));
        out.push('\n');
    }
    out.push_str(&format!(
        r#"{{"duration_api_ms":42,"stop_reason":"end_turn","session_id":"{SESSION}","total_cost_usd":0.5,"usage":{{"input_tokens":12,"output_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}},"permission_denials":[],"terminal_reason":"completed","is_error":false,"num_turns":{turn},"subtype":"success","api_error_status":null,"result":"done","type":"result","duration_ms":166,"uuid":"21dfd091-0f6e-4c88-af14-a8619d7355bd"}}"#
    ));
    out.push('\n');
    out.into_bytes()
}

fn split(stream: &[u8]) -> Vec<Line> {
    let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE_BYTES);
    let mut lines = Vec::new();
    for chunk in stream.chunks(READ_CHUNK) {
        splitter.feed(chunk, |line| lines.push(line));
    }
    lines.extend(splitter.finish());
    lines
}

struct Input {
    name: &'static str,
    stream: Vec<u8>,
    lines: Vec<Line>,
}

fn inputs() -> Vec<Input> {
    let started = Instant::now();
    let streams = [
        ("mixed", generate(48 << 20, 4 << 20, 7)),
        ("chatter", generate(8 << 20, 2 << 10, 11)),
    ];
    let inputs: Vec<Input> = streams
        .into_iter()
        .map(|(name, stream)| Input {
            name,
            lines: split(&stream),
            stream,
        })
        .collect();
    for input in &inputs {
        let longest = input.lines.iter().map(|l| l.bytes.len()).max().unwrap_or(0);
        eprintln!(
            "stream {}: {:.1} MiB, {} lines, longest {:.1} MiB (generated in {:.1?})",
            input.name,
            input.stream.len() as f64 / (1 << 20) as f64,
            input.lines.len(),
            longest as f64 / (1 << 20) as f64,
            started.elapsed()
        );
    }
    inputs
}

/// The policy of a default run (`workspace-write`) in a scratch workspace, so observing
/// includes the denial check a real run does.
fn default_policy(scratch: &std::path::Path) -> Option<Arc<Policy>> {
    let workspace = scratch.join("ws");
    std::fs::create_dir_all(&workspace).ok()?;
    let mut options = PolicyOptions::new(Mode::WorkspaceWrite, workspace);
    options.config_dir = Some(scratch.join("config"));
    options.runs_dir = Some(scratch.join("runs"));
    match Policy::resolve(&options) {
        Ok(policy) => Some(Arc::new(policy)),
        Err(e) => {
            eprintln!("no sandbox policy ({e}); observing without the denial check");
            None
        }
    }
}

fn stream_path(c: &mut Criterion) {
    let inputs = inputs();
    let scratch = tempfile::tempdir().ok();
    let policy = scratch.as_ref().and_then(|d| default_policy(d.path()));
    let observation =
        || Observation::new(Instant::now(), false, Vec::new()).with_sandbox(policy.clone());
    for stage in ["split", "decode", "observe", "pipeline"] {
        let mut group = c.benchmark_group(stage);
        group.sample_size(10);
        group.warm_up_time(Duration::from_secs(1));
        group.measurement_time(Duration::from_secs(4));
        for input in &inputs {
            group.throughput(Throughput::ElementsAndBytes {
                elements: input.lines.len() as u64,
                bytes: input.stream.len() as u64,
            });
            let id = BenchmarkId::from_parameter(input.name);
            match stage {
                "split" => group.bench_with_input(id, input, |b, input| {
                    b.iter(|| {
                        let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE_BYTES);
                        let mut count = 0usize;
                        for chunk in input.stream.chunks(READ_CHUNK) {
                            splitter.feed(chunk, |line| {
                                count += 1;
                                black_box(line);
                            });
                        }
                        black_box(splitter.finish());
                        count
                    })
                }),
                "decode" => group.bench_with_input(id, input, |b, input| {
                    b.iter(|| {
                        input
                            .lines
                            .iter()
                            .filter(|line| black_box(decode_event(&line.bytes)).is_ok())
                            .count()
                    })
                }),
                "observe" => group.bench_with_input(id, input, |b, input| {
                    b.iter(|| {
                        let mut observation = observation();
                        for line in &input.lines {
                            black_box(observation.observe_line(Pipe::Stdout, line));
                        }
                        observation.events
                    })
                }),
                _ => group.bench_with_input(id, input, |b, input| {
                    b.iter(|| {
                        let mut observation = observation();
                        let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE_BYTES);
                        for chunk in input.stream.chunks(READ_CHUNK) {
                            splitter.feed(chunk, |line| {
                                black_box(observation.observe_line(Pipe::Stdout, &line));
                            });
                        }
                        if let Some(line) = splitter.finish() {
                            observation.observe_line(Pipe::Stdout, &line);
                        }
                        observation.events
                    })
                }),
            };
        }
        group.finish();
    }
    if let Some(policy) = &policy {
        policy.cleanup();
    }
}

criterion_group!(benches, stream_path);
criterion_main!(benches);
