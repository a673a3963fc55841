//! The change ledger's "before" snapshot beside the sandbox's setup and the CLI's start
//! (issue 21; `src/pipeline/snapshot.rs`): what a caller sees stays what the serial
//! snapshot gave. The agent's edits are reported exactly (the egress proxy holds the
//! agent's first request until the snapshot is done), the sandbox's placeholders never
//! show, the `--verify` baseline check waits for it, an unconfined run takes it first,
//! and a change that lands while the walk is under way is flagged, never lost silently.
//!
//! `CODER_TEST_LEDGER_DELAY_MS` makes the snapshot start late (the same code otherwise),
//! so that the agent (or a fake child standing in for a CLI hook) is running by then.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Bounded, Fake, Outcome, ReplayScene};
use serde_json::{Value, json};

const DELAY_VAR: &str = "CODER_TEST_LEDGER_DELAY_MS";

/// `(path, status, added, removed)` of every listed change, the fake child's own files
/// (`.fake-claude/`) left out.
fn files(envelope: &Value) -> Vec<(String, String, u64, u64)> {
    envelope["changes"]["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes.files: {envelope}"))
        .iter()
        .filter(|f| !f["path"].as_str().unwrap().starts_with(".fake-claude/"))
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["status"].as_str().unwrap().to_owned(),
                f["lines_added"].as_u64().unwrap(),
                f["lines_removed"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn change(path: &str, status: &str, added: u64, removed: u64) -> (String, String, u64, u64) {
    (path.to_owned(), status.to_owned(), added, removed)
}

/// The run's warnings about a workspace that changed while the snapshot was taken.
fn concurrent_warnings(envelope: &Value) -> Vec<String> {
    envelope["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|w| w.contains("changed while the change ledger's snapshot was taken"))
        .map(str::to_owned)
        .collect()
}

fn outcome_ms(envelope: &Value, key: &str) -> u64 {
    envelope["metrics"]["outcome_ms"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no metrics.outcome_ms.{key}: {envelope}"))
}

/// The user's own `git ARGS` in `ws` (a test identity), which must succeed.
fn git_in(ws: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

fn write(ws: &Path, name: &str, text: &str) {
    std::fs::write(ws.join(name), text).unwrap();
}

/// A repository in `fake`'s workspace with `files` (and a `.gitignore` for the fake's own
/// files) committed.
fn committed(fake: &Fake, files: &[(&str, &str)]) {
    let ws = fake.workspace();
    for (name, text) in files {
        write(ws, name, text);
    }
    write(ws, ".gitignore", ".fake-claude/\n");
    git_in(ws, &["init", "-q"]);
    git_in(ws, &["add", "-A"]);
    git_in(ws, &["commit", "-qm", "start"]);
}

/// A fake whose runs change `a.txt` (committed as `a`) to `changed` and answer `done`.
fn edits_a_committed_file() -> Fake {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../a.txt", "text": "changed\n"},
        common::steps::result_ok("done"),
    ]));
    committed(&fake, &[("a.txt", "a\n")]);
    fake
}

/// Makes `fake`'s next runs write `text` to `path` (relative to the fake's own directory:
/// `../NAME` is a file of the workspace) and answer `said`.
fn next_runs_touch(fake: &Fake, path: &str, text: &str, said: &str) {
    std::fs::write(
        fake.file("scenario.json"),
        serde_json::to_vec(&json!([
            common::steps::init(),
            {"step": "touch", "path": path, "text": text},
            common::steps::result_ok(said),
        ]))
        .unwrap(),
    )
    .unwrap();
}

/// Whether `envelope` lists `path` with `status`.
fn lists(envelope: &Value, path: &str, status: &str) -> bool {
    files(envelope)
        .iter()
        .any(|(p, s, ..)| p == path && s == status)
}

/// Whether some warning of `envelope` passes `test`.
fn warned(envelope: &Value, test: impl Fn(&str) -> bool) -> bool {
    envelope["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(test)
}

/// The real CLI's replayed run (`ledger.json`: it edits `keep.txt`, deletes `gone.txt` and
/// adds `new.txt`) in a workspace holding the first two, committed to a git repository
/// when `git`, with the snapshot started 15 s late: its outcome, once it succeeded, listed
/// exactly those three changes and warned of no concurrent change.
fn replayed_edits_with_a_late_snapshot(git: bool) -> Outcome {
    let scene = ReplayScene::new("ledger.json", 0);
    let ws = scene.workspace();
    write(ws, "keep.txt", "first\nold\n");
    write(ws, "gone.txt", "a\nb\n");
    if git {
        write(ws, ".gitignore", ".fake-claude/\n");
        git_in(ws, &["init", "-q"]);
        git_in(ws, &["add", "-A"]);
        git_in(ws, &["commit", "-qm", "start"]);
    }
    let out = scene
        .coder_within(Duration::from_secs(120))
        // Well past the CLI's start, even on a loaded machine (2.5 s at load 12; over 8 s at
        // load 7 with four suites building and running beside it).
        .env(DELAY_VAR, "15000")
        .args(["--return-metrics", "change things"])
        .run();
    out.assert_success("Added, edited and deleted.");
    assert_eq!(
        files(&out.envelope),
        [
            change("gone.txt", "deleted", 0, 2),
            change("keep.txt", "modified", 1, 1),
            change("new.txt", "added", 2, 0),
        ],
        "{}",
        out.explain()
    );
    // With git, the CLI had started long before the snapshot: its net looked, and found
    // nothing of the run's (the sandbox's placeholders are older than the CLI's start).
    assert_eq!(concurrent_warnings(&out.envelope), Vec::<String>::new());
    out
}

/// The real CLI starts (about a second) while the snapshot has not even begun: its first
/// request waits in the proxy, so every edit of the agent lands after the snapshot and is
/// reported exactly, and the placeholders the sandbox made meanwhile (`.envrc`,
/// `.mcp.json`, `CLAUDE.local.md` are absent here) are not reported as deleted.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_proxy_holds_the_agent_until_the_snapshot_is_done() {
    let out = replayed_edits_with_a_late_snapshot(false);
    // The CLI asked before the snapshot was done, and was held.
    let waited = outcome_ms(&out.envelope, "ledger_wait_ms");
    assert!(
        (2000..16_000).contains(&waited),
        "ledger_wait_ms {waited}: {}",
        out.explain()
    );
    assert!(outcome_ms(&out.envelope, "ledger_before_ms") < 3000);
}

/// A fake child standing in for what could run before the CLI's first request (a hook):
/// it edits `keep.txt` and deletes `gone.txt` at once, while the snapshot has not looked
/// yet. The ledger cannot know what was there before: it says so, reports `keep.txt` as
/// modified all the same, and names the directory whose deletions it may have missed.
#[test]
fn a_change_while_the_snapshot_walks_is_flagged_not_lost() {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../keep.txt", "text": "new\n"},
        {"step": "run_tool", "command": "rm gone.txt"},
        common::steps::result_ok("done"),
    ]));
    write(fake.workspace(), "keep.txt", "old\n");
    write(fake.workspace(), "gone.txt", "a\n");
    let out = fake
        .coder()
        .env(DELAY_VAR, "1500")
        .args(["--return-metrics", "task"])
        .run();
    out.assert_success("done");
    assert_eq!(
        files(&out.envelope),
        // Its content then is the content now: no lines differ, but it is listed.
        [change("keep.txt", "modified", 0, 0)],
        "{}",
        out.explain()
    );
    let warnings = concurrent_warnings(&out.envelope);
    assert_eq!(warnings.len(), 1, "{}", out.explain());
    assert!(
        warnings[0].contains("keep.txt") && warnings[0].contains("changes: ."),
        "{warnings:?}"
    );
}

/// `--verify`'s baseline check runs in the workspace with no proxy in its way: it waits
/// for the snapshot, so what it writes is the run's change (`check.log`, added), not a
/// concurrent change.
#[test]
fn the_baseline_check_waits_for_the_snapshot() {
    let fake = Fake::new(json!(common::steps::answer("done")));
    let out = fake
        .coder()
        .env(DELAY_VAR, "1500")
        .args([
            "--return-metrics",
            "--verify",
            "echo checked >> check.log",
            "task",
        ])
        .run();
    out.assert_success("done");
    assert_eq!(
        files(&out.envelope),
        [change("check.log", "added", 2, 0)],
        "{}",
        out.explain()
    );
    assert_eq!(concurrent_warnings(&out.envelope), Vec::<String>::new());
    assert!(outcome_ms(&out.envelope, "ledger_wait_ms") >= 1000);
}

/// `danger-full-access` has no proxy to hold the agent: the snapshot is taken before the
/// child starts, as it always was, and the run waits for all of it.
#[test]
fn an_unconfined_run_takes_the_snapshot_first() {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../keep.txt", "text": "new\n"},
        common::steps::result_ok("done"),
    ]));
    write(fake.workspace(), "keep.txt", "old\n");
    let out = fake
        .coder()
        .env(DELAY_VAR, "1000")
        .args([
            "--sandbox",
            "danger-full-access",
            "--return-metrics",
            "task",
        ])
        .run();
    out.assert_success("done");
    assert_eq!(
        files(&out.envelope),
        [change("keep.txt", "modified", 1, 1)],
        "{}",
        out.explain()
    );
    assert_eq!(concurrent_warnings(&out.envelope), Vec::<String>::new());
    let (waited, took) = (
        outcome_ms(&out.envelope, "ledger_wait_ms"),
        outcome_ms(&out.envelope, "ledger_before_ms"),
    );
    assert!(
        waited >= 1000 && waited >= took,
        "wait {waited}, before {took}"
    );
}

/// The same in a git work tree: git's snapshot (a private index) runs while the sandbox
/// makes its placeholders (in the work tree and the git dir), and the result is git's
/// view of exactly the agent's edits, with no warning from its safety net.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn the_git_ledger_beside_the_setup_sees_exactly_the_agents_edits() {
    let out = replayed_edits_with_a_late_snapshot(true);
    assert!(outcome_ms(&out.envelope, "ledger_wait_ms") >= 2000);
}

/// A snapshot that takes long holds the CLI's request, not the user: SIGTERM while the
/// proxy holds it ends the run at once, cancelled, saying the changes were not measured.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_run_cancelled_while_the_proxy_holds_it_ends_promptly() {
    let scene = ReplayScene::new("ledger.json", 0);
    let running = scene
        .coder_within(Duration::from_secs(120))
        .env(DELAY_VAR, "60000")
        .args(["--timeout", "100", "change things"])
        .spawn();
    // The CLI is running once its init event reaches the transcript; its first request
    // is held from then on.
    let runs = scene.fake.state_dir().join("runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_dir(&runs).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(r#""subtype":"init""#))
        })
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the CLI never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let signalled = std::time::Instant::now();
    running.signal(nix::sys::signal::Signal::SIGTERM);
    let out = running.wait();
    out.assert_failure("cancelled", 143);
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "took {:?} after SIGTERM",
        signalled.elapsed()
    );
    assert!(
        out.envelope["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| w
                .as_str()
                .is_some_and(|w| w.contains("changes are not measured"))),
        "{}",
        out.explain()
    );
    assert!(!scene.workspace().join("new.txt").exists(), "the agent ran");
}

/// coder's own `git` is not one of the run's processes: a fake child ends while the
/// "before" snapshot of a git workspace is still under way beside the run, and the stop of what is left of its process
/// tree leaves the snapshot's `git write-tree` alone (it used to SIGTERM it with the rest:
/// "git write-tree failed", no ledger). A `git` wrapper on `PATH` holds that write-tree
/// until the stop is over (the transcript's `egress` note is written after it), and tells
/// the child when the snapshot's `add` is done, so that its edit lands after.
#[test]
fn the_end_of_the_agents_tree_does_not_stop_the_snapshots_git() {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "wait_file", "path": "before-added", "timeout": 60},
        common::steps::touch("../made.txt"),
        common::steps::result_ok("done"),
    ]));
    let ws = fake.workspace();
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "git init: {out:?}");
    let path = git_wrapper(
        &fake,
        &format!(
            r#"*" add -A "*)
    "$real" "$@" || exit $?
    : > '{ws}/.fake-claude/before-added'
    exit 0 ;;
*" write-tree "*)
    if mkdir '{root}/held' 2>/dev/null; then
        i=0
        until grep -qs '"kind":"egress"' '{runs}'/*.jsonl; do
            i=$((i + 1)); [ $i -gt 6000 ] && break
            sleep 0.01
        done
    fi ;;"#,
            ws = ws.display(),
            root = fake.root().display(),
            runs = fake.state_dir().join("runs").display(),
        ),
    );
    let out = fake
        .coder()
        .env("PATH", path)
        .args(["--return-metrics", "task"])
        .run();
    out.assert_success("done");
    assert!(
        fake.root().join("held").exists(),
        "the snapshot's write-tree was not held"
    );
    assert_eq!(
        files(&out.envelope),
        [change("made.txt", "added", 1, 0)],
        "{}",
        out.explain()
    );
    // The child's own files (`.fake-claude/`, made while the snapshot ran) may be flagged;
    // nothing else is said.
    let others: Vec<&Value> = out.envelope["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| {
            !w.as_str()
                .is_some_and(|w| w.contains("changed while the change ledger's snapshot"))
        })
        .collect();
    assert_eq!(others, Vec::<&Value>::new(), "{}", out.explain());
}

/// A `git` on `PATH` for coder's snapshots: `case` (arms of a shell `case` on the
/// arguments, with `$real` the real git) runs first, then the real git.
fn git_wrapper(fake: &Fake, case: &str) -> std::ffi::OsString {
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = fake.root().join("holding-git");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("git");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nreal='{real}'\ncase \" $* \" in\n{case}\nesac\nexec \"$real\" \"$@\"\n",
            real = real.trim(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = bin.into_os_string();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap());
    path
}

/// A git workspace's snapshot is taken beside the run too, with the plain walk's safety
/// net: a fake child standing in for what could run before the CLI's first request edits
/// a tracked file and makes an untracked one while the snapshot's `git add` has not
/// looked yet (a `git` on `PATH` holds that `add` until both are written), so its
/// "before" holds them. The ledger cannot know what was there before: it reports both as
/// modified and says so, instead of nothing at all.
#[test]
fn a_change_while_the_git_snapshot_runs_is_flagged_not_lost() {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../keep.txt", "text": "new\n"},
        {"step": "touch", "path": "../made.txt", "text": "made\n"},
        common::steps::touch("written"),
        common::steps::result_ok("done"),
    ]));
    let ws = fake.workspace();
    write(ws, "keep.txt", "old\n");
    write(ws, ".gitignore", ".fake-claude/\n");
    let git = |args: &[&str]| git_in(ws, args);
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    // The first `add` (the "before") waits for the child's edits.
    let path = git_wrapper(
        &fake,
        &format!(
            r#"*" add -A "*)
    if mkdir '{root}/held' 2>/dev/null; then
        i=0
        until [ -e '{ws}/.fake-claude/written' ]; do
            i=$((i + 1)); [ $i -gt 6000 ] && break
            sleep 0.01
        done
    fi ;;"#,
            ws = ws.display(),
            root = fake.root().display(),
        ),
    );
    let out = fake
        .coder()
        .env("PATH", path)
        .args(["--return-metrics", "task"])
        .run();
    out.assert_success("done");
    assert!(
        fake.root().join("held").exists(),
        "the snapshot's add was not held"
    );
    assert!(
        ws.join(".fake-claude/written").exists(),
        "the child did not write"
    );
    assert_eq!(
        files(&out.envelope),
        [
            change("keep.txt", "modified", 0, 0),
            change("made.txt", "modified", 0, 0),
        ],
        "{}",
        out.explain()
    );
    let warnings = concurrent_warnings(&out.envelope);
    assert_eq!(warnings.len(), 1, "{}", out.explain());
    assert!(warnings[0].contains("keep.txt, made.txt"), "{warnings:?}");
}

/// A repository whose config includes a file of its work tree (`include.path`): an
/// unconfined agent writes a filter driver there and names it in `.gitattributes`. coder's
/// git (the "after" snapshot) must not run it. It did: the drivers were listed once,
/// at the run's start (db6c66e).
#[test]
fn a_filter_the_agent_defines_in_an_included_config_does_not_run_as_coder() {
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran-as-coder");
    let shared = format!(
        "[filter \"x\"]\n\tclean = \"touch '{}'; cat\"\n",
        marker.display()
    );
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../shared.gitconfig", "text": shared},
        {"step": "touch", "path": "../.gitattributes", "text": "*.txt filter=x\n"},
        {"step": "touch", "path": "../a.txt", "text": "changed\n"},
        common::steps::result_ok("done"),
    ]));
    let ws = fake.workspace();
    write(ws, "a.txt", "a\n");
    write(ws, ".gitignore", ".fake-claude/\n");
    let git = |args: &[&str]| git_in(ws, args);
    git(&["init", "-q"]);
    git(&["config", "include.path", "../shared.gitconfig"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    // Unconfined: a confined agent cannot make a file the config includes (the sandbox
    // holds it absent); coder's own git must run none of it all the same.
    let out = fake
        .coder()
        .args(["--sandbox", "danger-full-access", "task"])
        .run();
    out.assert_success("done");
    assert!(
        !marker.exists(),
        "the agent's filter ran as coder: {}",
        out.envelope
    );
    assert!(
        files(&out.envelope)
            .iter()
            .any(|(path, ..)| path == "a.txt"),
        "the edit is still reported: {}",
        out.envelope
    );
}

/// A parent may give coder descriptors without close-on-exec (a `make` jobserver's pipe),
/// which coder's git then inherits. The watcher that kills a git holding a pipe it was led
/// to open (an included config made a symlink to `/proc/self/fd/1`) must tell such a pipe
/// from one git opened: a run started with one still has its changes measured by git, with
/// no warning.
#[test]
fn a_pipe_coder_inherits_does_not_stop_the_ledgers_git() {
    let fake = edits_a_committed_file();
    let (read_end, _write_end) = nix::unistd::pipe().unwrap();
    let out = fake.coder().args(["task"]).inherit(read_end).run();
    out.assert_success("done");
    // The fake edits at once, beside the "before" snapshot: its line counts may be
    // unknown (a warning says so), but it is measured, and no git was stopped.
    assert!(
        lists(&out.envelope, "a.txt", "modified"),
        "{}",
        out.explain()
    );
    assert!(
        !warned(&out.envelope, |w| w.contains("git stopped")),
        "{}",
        out.explain()
    );
}

/// The same inherited pipe, reopened: the repository's config includes a file of the work
/// tree, which the agent made a symlink to `/proc/self/fd/N`, N the number of that pipe in
/// every process below coder. coder's git read it (a `make` jobserver's tokens, taken from
/// `make`) until the config deadline stopped it, since another descriptor of its own, the
/// inherited one, held the same pipe: "a pipe it made". It is stopped at once now.
#[test]
fn a_pipe_coder_inherits_reopened_through_an_include_stops_the_ledgers_git() {
    use std::os::fd::AsRawFd;
    let (read_end, _write_end) = nix::unistd::pipe().unwrap();
    let number = read_end.as_raw_fd();
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "run_tool", "command": format!("ln -sf /proc/self/fd/{number} shared.gitconfig")},
        common::steps::result_ok("linked"),
    ]));
    // Made by an unconfined run: an included file of the work tree is held by the
    // sandbox (read-only, or absent when it does not exist; `sandbox_gitguard`).
    committed(&fake, &[("a.txt", "a\n")]);
    git_in(
        fake.workspace(),
        &["config", "include.path", "../shared.gitconfig"],
    );
    let out = fake
        .coder()
        .args(["--sandbox", "danger-full-access", "task"])
        .inherit(read_end.try_clone().unwrap())
        .run();
    out.assert_success("linked");
    next_runs_touch(&fake, "../a.txt", "changed\n", "edited");
    let out = fake.coder().args(["task"]).inherit(read_end).run();
    out.assert_success("edited");
    assert!(
        lists(&out.envelope, "a.txt", "modified"),
        "{}",
        out.explain()
    );
    assert!(
        warned(&out.envelope, |w| w.contains("held pipe:")),
        "{}",
        out.explain()
    );
}

/// A workspace in a repository git refuses to read (here a config with a broken line; a
/// half-written `commondir` did the same, see `sandbox::scan`) still has its changes
/// measured, by the plain walk, and the run says why: it used to fall back silently, and a
/// user could not tell a git ledger from a plain one.
#[test]
fn a_repository_git_cannot_read_is_walked_and_the_run_says_why() {
    let fake = edits_a_committed_file();
    let config = fake.workspace().join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[core\n");
    std::fs::write(&config, text).unwrap();
    let out = fake.coder().args(["task"]).run();
    out.assert_success("done");
    assert!(
        lists(&out.envelope, "a.txt", "modified"),
        "{}",
        out.explain()
    );
    let said = warned(&out.envelope, |w| {
        w.contains("git rev-parse failed") && w.contains("bad config") && w.contains("plain walk")
    });
    assert!(said, "{}", out.explain());
}

/// The user's index is the agent's to write. An agent gave the entry of `F.txt` the file's
/// exact stat data (read with `stat`, the checksum made anew: `fixtures/ledger/
/// forge-index-entry.py`) and the id of the content the next run would write: git takes a
/// file whose stat data matches its entry as holding what the entry says, so the next
/// run's "before" held that content, and its edit of `F.txt` was reported unchanged. The
/// next run now starts from the index coder kept from the last one, in its state
/// directory. Control: the user's own git takes the forged entry.
#[test]
fn an_index_entry_the_agent_forged_does_not_hide_the_next_runs_edit() {
    let forge = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/ledger/forge-index-entry.py"
    ))
    .unwrap();
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "run_tool", "command": "python3 .fake-claude/forge.py F.txt 'forged\n' > .fake-claude/forge.out 2>&1"},
        common::steps::result_ok("planted"),
    ]));
    let ws = fake.workspace();
    committed(&fake, &[("F.txt", "original\n")]);
    std::fs::write(fake.file("forge.py"), forge).unwrap();
    let out = fake.coder().args(["task"]).run();
    out.assert_success("planted");
    let forged = std::fs::read_to_string(fake.file("forge.out")).unwrap_or_default();
    assert!(
        forged.contains("FORGED"),
        "the forgery did not run: {forged}"
    );
    // Control: the user's git now takes `F.txt` (still "original") as holding "forged".
    use common::Bounded;
    let staged = std::process::Command::new("git")
        .args(["ls-files", "-s", "F.txt"])
        .current_dir(ws)
        .output_bounded();
    let content = fake.root().join("forged.txt");
    std::fs::write(&content, "forged\n").unwrap();
    let forged_id = std::process::Command::new("git")
        .arg("hash-object")
        .arg(&content)
        .current_dir(ws)
        .output_bounded();
    let forged_id = String::from_utf8_lossy(&forged_id.stdout).trim().to_owned();
    assert!(
        String::from_utf8_lossy(&staged.stdout).contains(&forged_id),
        "control: the forged entry is not in the index: {staged:?}"
    );
    next_runs_touch(&fake, "../F.txt", "forged\n", "edited");
    let out = fake.coder().args(["task"]).run();
    out.assert_success("edited");
    assert!(
        lists(&out.envelope, "F.txt", "modified"),
        "the edit of F.txt is hidden: {}",
        out.explain()
    );
}

/// The index a run keeps for the next one names the blobs that run hashed into its own
/// object store, which goes with it: a file the last run made (no blob of it in the
/// repository) and this run edits is hashed again, and its line counts are there.
#[test]
fn a_file_the_last_run_made_is_measured_by_the_next_with_its_lines() {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../new.txt", "text": "one\n"},
        common::steps::result_ok("made"),
    ]));
    // Unconfined: the snapshot is taken before the agent starts, not beside it.
    let unconfined = ["--sandbox", "danger-full-access", "task"];
    committed(&fake, &[("a.txt", "a\n")]);
    let out = fake.coder().args(unconfined).run();
    out.assert_success("made");
    assert_eq!(files(&out.envelope), [change("new.txt", "added", 1, 0)]);
    next_runs_touch(&fake, "../new.txt", "one\ntwo\n", "edited");
    let out = fake.coder().args(unconfined).run();
    out.assert_success("edited");
    assert_eq!(
        files(&out.envelope),
        [change("new.txt", "modified", 1, 0)],
        "{}",
        out.explain()
    );
}

/// A state directory inside the workspace is refused (the agent could reach it), but the
/// ledger had started beside that check: its envelope listed coder's own files (the
/// ledger's private index and objects, written in that state directory) as the run's
/// changes. coder's own directory is never the agent's doing, in a git workspace or a
/// plain one.
#[test]
fn coders_own_state_directory_in_the_workspace_is_not_in_the_changes() {
    for with_git in [true, false] {
        let fake = one_file_workspace(with_git);
        let ws = fake.workspace();
        let out = fake
            .coder()
            .env("CODER_STATE_DIR", ws.join(".coder-state"))
            .args(["task"])
            .run();
        assert_eq!(
            out.envelope["error_kind"],
            "config_error",
            "{}",
            out.explain()
        );
        assert_eq!(
            files(&out.envelope),
            [],
            "git: {with_git}: {}",
            out.explain()
        );
    }
}

/// The race round fourteen left open: a filter driver defined in an included work-tree
/// file after coder's git had listed the drivers to switch off, and before its `git add`
/// read the config again (the agent of another run in the same tree can write it at any
/// moment). A `git` on `PATH` writes the driver at exactly that moment. The ledger's git
/// reads no config of the repository's now (its own git directory), so no listing can be
/// outrun: nothing runs, and the edit is measured.
#[test]
fn a_filter_defined_just_before_the_ledgers_git_add_does_not_run_as_coder() {
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran-as-coder");
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../a.txt", "text": "changed\n"},
        common::steps::result_ok("done"),
    ]));
    let ws = fake.workspace();
    write(ws, "a.txt", "a\n");
    write(ws, ".gitignore", ".fake-claude/\n");
    write(ws, ".gitattributes", "*.txt filter=x\n");
    write(ws, "shared.gitconfig", "");
    let git = |args: &[&str]| git_in(ws, args);
    git(&["init", "-q"]);
    git(&["config", "include.path", "../shared.gitconfig"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    let path = git_wrapper(
        &fake,
        &format!(
            r#"*" add -A "*)
    printf '[filter "x"]\n\tclean = "touch {marker}; cat"\n' > '{ws}/shared.gitconfig' ;;"#,
            marker = marker.display(),
            ws = ws.display(),
        ),
    );
    let out = fake.coder().env("PATH", path).args(["task"]).run();
    out.assert_success("done");
    assert!(
        !marker.exists(),
        "the driver ran as coder: {}",
        out.explain()
    );
    assert!(
        files(&out.envelope)
            .iter()
            .any(|(path, status, ..)| path == "a.txt" && status == "modified"),
        "{}",
        out.explain()
    );
}

/// A file system of the kernel's own mounted inside the workspace (`/proc` here; a run in
/// `/` has it as `proc/`) is not walked: its files come and go with every process, and a
/// run in `/` listed `proc/1/net/...` among the agent's changes after a walk of 26 s.
#[test]
#[ignore = "needs root (a mount namespace): scripts/test runs it"]
fn a_proc_mounted_in_the_workspace_is_not_in_the_changes() {
    common::require_root_and_user_namespaces();
    // Unconfined: the default sandbox refuses such a workspace (below).
    for sandbox in ["danger-full-access", "workspace-write"] {
        let fake = Fake::new(json!([
            common::steps::init(),
            {"step": "touch", "path": "../a.txt", "text": "changed\n"},
            common::steps::result_ok("done"),
        ]));
        let ws = fake.workspace();
        write(ws, "a.txt", "a\n");
        std::fs::create_dir(ws.join("p")).unwrap();
        // `sh -c SCRIPT MOUNT_POINT CODER ARGS…`: the mount point is `$0`.
        let mount = r#"mount -t proc proc "$0" && exec "$@""#;
        let out = fake
            .coder()
            .through([
                "unshare".into(),
                "--mount".into(),
                "--propagation".into(),
                "private".into(),
                "sh".into(),
                "-c".into(),
                mount.into(),
                ws.join("p").into_os_string(),
            ])
            .args(["--sandbox", sandbox, "task"])
            .run();
        if sandbox == "danger-full-access" {
            out.assert_success("done");
            assert_eq!(
                files(&out.envelope),
                [change("a.txt", "modified", 1, 1)],
                "{sandbox}: {}",
                out.explain()
            );
            continue;
        }
        // Confined, the workspace is refused before anything runs, and the message says
        // why (it used to be the scan's `EACCES` on some `proc/1/task/N/fdinfo`): a
        // mount for the caller to remove, a configuration error.
        assert_eq!(
            out.envelope["error_kind"],
            "config_error",
            "{}",
            out.explain()
        );
        let error = out.envelope["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("is a `proc` file system mounted inside")
                && error.contains(&ws.join("p").display().to_string()),
            "{}",
            out.explain()
        );
        assert_eq!(files(&out.envelope), []);
    }
}

/// The agent marks files `-diff` (or `binary`) in a `.gitattributes` of its own: git
/// takes such a text file's change as binary, and the envelope listed the edit with no
/// line counts and `--return-diff` without its lines ("Binary files differ"), code the
/// reader never saw. The ledger's private git dir now leaves `diff` unspecified above
/// every `.gitattributes`, so git looks at the content itself. Control: the user's own
/// `git diff` takes the file as binary.
#[test]
fn a_diff_attribute_the_agent_sets_does_not_hide_its_edit() {
    for attribute in ["-diff", "binary"] {
        let fake = Fake::new(json!([
            common::steps::init(),
            {"step": "touch", "path": "../.gitattributes", "text": format!("*.txt {attribute}\n")},
            {"step": "touch", "path": "../a.txt", "text": "a\nimport os; os.system('x')\n"},
            common::steps::result_ok("done"),
        ]));
        committed(&fake, &[("a.txt", "a\n")]);
        // Unconfined: the snapshot is taken before the agent starts, not beside it.
        let out = fake
            .coder()
            .args(["--sandbox", "danger-full-access", "--return-diff", "task"])
            .run();
        out.assert_success("done");
        assert_eq!(
            files(&out.envelope),
            [
                change(".gitattributes", "added", 1, 0),
                change("a.txt", "modified", 1, 0)
            ],
            "{attribute}: {}",
            out.explain()
        );
        let diff = out.envelope["diff"]["unified"].as_str().unwrap_or_default();
        assert!(
            diff.contains("+import os; os.system('x')"),
            "{attribute}: the edit is not in the diff: {diff}"
        );
        let mut user = std::process::Command::new("git");
        user.args(["diff", "--", "a.txt"])
            .current_dir(fake.workspace());
        let shown = String::from_utf8_lossy(&user.output_bounded().stdout).into_owned();
        assert!(
            shown.contains("Binary files"),
            "{attribute}: control: the user's git shows it as text: {shown}"
        );
    }
}

/// An earlier run's agent left a `.gitignore` of 20,000 patterns and 4,000 new files:
/// git matches every new file against every pattern, and the ledger's `git add` (coder's
/// own, unconfined) spun on it, hours at a real scale, with the run waiting, and every
/// later run in the workspace too. Now a git of coder's is stopped past its CPU budget
/// (60 s; 200 ms here through the debug builds' `CODER_TEST_GIT_CPU_BUDGET_MS`), the
/// plain walk measures the run and a warning says why. Control: the user's own `git add`
/// of the same tree takes more CPU than that budget.
#[test]
fn a_gitignore_of_very_many_patterns_does_not_hold_the_ledgers_git() {
    let fake = edits_a_committed_file();
    let ws = fake.workspace();
    let mut patterns = String::from(".fake-claude/\n");
    for i in 0..20_000 {
        patterns.push_str(&format!("*a*b*c*d*e*f*g*h*{i}\n"));
    }
    write(ws, ".gitignore", &patterns);
    for d in 0..40 {
        let dir = ws.join(format!("new{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}.txt")), "x\n").unwrap();
        }
    }
    let out = fake
        .coder()
        .env("CODER_TEST_GIT_CPU_BUDGET_MS", "200")
        .args(["task"])
        .deadline(Duration::from_secs(120))
        .run();
    out.assert_success("done");
    assert!(
        lists(&out.envelope, "a.txt", "modified"),
        "{}",
        out.explain()
    );
    assert!(
        warned(&out.envelope, |w| w.contains("s of CPU time")
            && w.contains(".gitignore")),
        "{}",
        out.explain()
    );
    // Control: the user's own git spends more than the budget on the same tree.
    use nix::sys::resource::{UsageWho, getrusage};
    let cpu = || {
        let usage = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
        let micros = |t: nix::sys::time::TimeVal| {
            Duration::from_micros((t.tv_sec() * 1_000_000 + t.tv_usec()) as u64)
        };
        micros(usage.user_time()) + micros(usage.system_time())
    };
    let before = cpu();
    let status = std::process::Command::new("git")
        .args(["add", "-A", "--dry-run"])
        .current_dir(ws)
        .stdout(std::process::Stdio::null())
        .output_bounded();
    assert!(status.status.success(), "{status:?}");
    let spent = cpu() - before;
    assert!(
        spent > Duration::from_millis(200),
        "control: the user's git took {spent:?}"
    );
}

/// What the lease test's agent runs: makes `l0` to `l2` in the workspace and holds a write
/// lease on each (`F_SETLEASE`, ignoring the `SIGIO` that asks it to give them up) in a
/// process of its own, edits `a.txt`, and lives on for a while.
const LEASE_HOLDER: &str = "import fcntl, os, signal, time
signal.signal(signal.SIGIO, signal.SIG_IGN)
fds = []
for name in ['l0', 'l1', 'l2']:
    with open(name, 'w') as f:
        f.write(name + '\\n')
    fd = os.open(name, os.O_RDONLY)
    fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)
    fds.append(fd)
open('.leased', 'w').close()
time.sleep(float(os.environ.get('HOLD', '60')))
";

/// An agent that takes write leases on its own files while the "before" snapshot is taken
/// beside it (started 1 s late through the debug build's hook): an open of a leased file
/// waits for the holder, up to 45 s per file, and the ledger's git, coder's own, waited in
/// `open` for as long as the agent lived (found after round eighteen). The watcher stops
/// such a git now (it sleeps in the kernel's lease break at two looks in a row): the
/// "before" falls back to the plain walk, whose own opens do not wait (`O_NONBLOCK`), with
/// a warning saying why, and the agent's edit is still reported. The control: the user's
/// own git, opening a file a process of theirs holds such a lease on, waits in the lease
/// break. As root and as uid 65534.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_lease_the_agent_holds_does_not_hold_the_ledgers_git() {
    use common::review_tree::{Tree, VAR_TMP, changes, warned, who};
    for owner in common::sandbox_fixture::owners() {
        let who = who(owner);
        let tree = Tree::repo("coder-lease-", owner, &[], &[("a.txt", "a\n")], &[]);
        let payload = format!(
            "HOLD=8 python3 -c \"{}\" >/dev/null 2>&1 &\n\
             until [ -e .leased ]; do sleep 0.05; done\n\
             echo changed > a.txt\n\
             sleep 4",
            LEASE_HOLDER.replace('"', "\\\"")
        );
        let env = tree.run_with(&[], &payload, &[(DELAY_VAR, "1000")]);
        assert!(
            warned(&env, "give up a lease"),
            "{who}: the before snapshot's git was not stopped on the lease: {env}"
        );
        assert!(
            changes(&env).contains(&("a.txt".to_owned(), "modified".to_owned())),
            "{who}: {env}"
        );
        // The control: the user's own git waits on such a lease.
        let dir = tempfile::Builder::new()
            .prefix("coder-lease-control-")
            .tempdir_in(VAR_TMP)
            .unwrap();
        if owner.is_some() {
            common::sandbox_fixture::give_to_nobody(dir.path());
        }
        let mut holder = std::process::Command::new("python3");
        holder
            .args(["-c", LEASE_HOLDER])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null());
        common::sandbox_fixture::as_owner(&mut holder, owner);
        let mut holder = holder.spawn().unwrap();
        let leased = dir.path().join(".leased");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !leased.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{who}: control: no lease"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut git = std::process::Command::new("git");
        git.args(["hash-object", "l0"])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stdin(std::process::Stdio::null());
        common::sandbox_fixture::as_owner(&mut git, owner);
        let mut git = git.spawn().unwrap();
        let wchan = format!("/proc/{}/wchan", git.id());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut waits = false;
        while !waits && std::time::Instant::now() < deadline && git.try_wait().unwrap().is_none() {
            waits = std::fs::read(&wchan).is_ok_and(|w| w == b"__break_lease");
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = git.kill();
        let _ = git.wait();
        let _ = holder.kill();
        let _ = holder.wait();
        assert!(
            waits,
            "{who}: control: the user's git did not wait on the lease"
        );
    }
}

/// A run whose setup fails (here: coder's state directory inside the workspace, refused
/// before anything runs) waited for the whole "before" snapshot under way beside the
/// setup, a walk of the workspace: 2.4 to 3 s for a `config_error` at 100k files, every
/// time (perf26b, round twenty-six). Nothing of the run started in the workspace, so its
/// changes are none, said at once: with the snapshot held back ten minutes by the test
/// hook, the envelope still comes within the test's deadline, `changes` empty.
#[test]
fn a_run_whose_setup_fails_does_not_wait_for_the_snapshot() {
    for with_git in [true, false] {
        let fake = one_file_workspace(with_git);
        let ws = fake.workspace();
        let out = fake
            .coder()
            .deadline(Duration::from_secs(60))
            .env("CODER_STATE_DIR", ws.join(".coder-state"))
            .env(DELAY_VAR, "600000")
            .args(["task"])
            .run();
        assert_eq!(
            out.envelope["error_kind"],
            "config_error",
            "git: {with_git}: {}",
            out.explain()
        );
        assert_eq!(
            files(&out.envelope),
            [],
            "git: {with_git}: {}",
            out.explain()
        );
    }
}

/// A fake whose model ends at once ("done"), in a workspace holding `a.txt` (committed,
/// the fake's own files ignored, when `with_git`).
fn one_file_workspace(with_git: bool) -> Fake {
    let fake = Fake::new(json!([
        common::steps::init(),
        common::steps::result_ok("done"),
    ]));
    let ws = fake.workspace();
    write(ws, "a.txt", "a\n");
    if with_git {
        write(ws, ".gitignore", ".fake-claude/\n");
        for args in [
            &["init", "-q"][..],
            &["add", "-A"],
            &["commit", "-qm", "start"],
        ] {
            git_in(ws, args);
        }
    }
    fake
}

/// A directory the last run's agent made and the user removed before this run (`rm -rf`,
/// `git clean -fd`) is named by the index the last run kept, but it was gone before this
/// run's first process started: no change while the snapshot was taken. Whenever the
/// child started before the snapshot was done, every such directory was named in a
/// warning that "the workspace changed while the change ledger's snapshot was taken".
/// A directory that does go while the snapshot is taken is still named.
#[test]
fn a_directory_removed_between_runs_is_no_change_during_the_snapshot() {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../made/deep/f.txt", "text": "made\n"},
        {"step": "touch", "path": "../keep/inner/k.txt", "text": "kept\n"},
        common::steps::result_ok("made"),
    ]));
    committed(&fake, &[("a.txt", "a\n")]);
    fake.coder().arg("task").run().assert_success("made");
    let ws = fake.workspace();
    std::fs::remove_dir_all(ws.join("made")).unwrap();
    // The next run's child removes keep/inner while the snapshot is held back.
    std::fs::write(
        fake.file("scenario.json"),
        serde_json::to_vec(&json!([
            common::steps::init(),
            {"step": "run_tool", "command": "rm -rf keep/inner"},
            common::steps::result_ok("done"),
        ]))
        .unwrap(),
    )
    .unwrap();
    let out = fake.coder().env(DELAY_VAR, "1500").arg("task").run();
    out.assert_success("done");
    assert!(!ws.join("keep/inner").exists(), "{}", out.explain());
    let warnings = concurrent_warnings(&out.envelope);
    assert_eq!(warnings.len(), 1, "{}", out.explain());
    assert!(
        warnings[0].ends_with("may be missing from the changes: keep, keep/inner"),
        "{warnings:?}"
    );
}
