//! Round sixteen's second review: the read-only hold on files a git config includes
//! (`src/sandbox/scan.rs`, `guard_includes`), attacked by someone who has read it. Every
//! attack runs as root and as uid 65534, each with a control (`danger-full-access`)
//! showing that the user's own next `git status` runs the agent's payload without the
//! defence.
//!
//! Found open when this review started, closed with it:
//! * **A symlink earlier in the included path.** `include.path = ../link/shared.gitconfig`
//!   with `link -> conf`: the scan canonicalised the parent, pinned `conf` and held
//!   `conf/shared.gitconfig` read-only, but left the symlink `link` the agent's: it
//!   replaced `link` with a directory of its own holding a `shared.gitconfig` with an
//!   fsmonitor. Each symlink on the way is guarded now.
//! * **A chain of links to the included file.** `shared.gitconfig -> hop -> conf/x`: the
//!   first link and the end were held, `hop` was the agent's to re-point at a file of its
//!   own. Links are followed one hop at a time now, each guarded.
//! * **A relative include inside a linked config resolved where git does not.** git reads
//!   the includes of a file it opened through a link against the directory of the link's
//!   name; the scan read them against the link's target, held the wrong file and left the
//!   one git reads the agent's to write.
//! * **Includes spelled as git allows.** The config was read one key per line, its comment
//!   cut before the quotes: `[include] path = x` (a key on its header's line), `path =
//!   "a;b"`, a value continued with a backslash were missed, the files git included left
//!   the agent's. The values are read as git's own parser reads them now.
//! * **A workspace that is a linked worktree.** Its `.git` is a file naming a git dir
//!   outside it, whose (common) config includes a workspace file: only the configs of git
//!   dirs inside the tree and of a repository *above* it were read, so that file was the
//!   agent's. The git dir the root's `.git` file names is read too now.
//!
//! Blocked: a git dir the agent moves (`.git` to `.git2`, a gitfile naming it) to make
//! the next run's kept ledger index not apply (`a_git_dir_moved_by_the_agent_…`); a
//! linked worktree inside the workspace whose own `config.worktree` includes a file of
//! it (`an_inner_worktrees_own_config_include_is_held`).
//!
//! Fixed since (round seventeen): an include absent at run start, made by the agent to
//! include 300 files of its own, stopped every later run (its scan over the cap of
//! included files); an absent included file is now held absent for the run
//! (`an_absent_include_made_by_the_agent_does_not_fail_the_next_runs_scan`).

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, Launch, RepoStyle};
use common::{Fake, steps};
use serde_json::{Value, json};

const REPO: RepoStyle = RepoStyle {
    prefix: "coder-r16b-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// The payload: a config that runs `touch $M` on the user's next `git status`.
const PAYLOAD: &str = "printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\"";

/// For each arm and mode: `setup` prepares the committed workspace and the user's config
/// (`include.path` values relative to `.git`), `script` attacks and prints `PLANTED`.
/// Confined the user's `git status` must not run the payload (it must, when `open`:
/// a known-open ratchet); unconfined it must.
fn include_attack(name: &str, setup: fn(&Fx, &Path), includes: &[&str], script: &str) {
    let launch = |fx: &Fx, ws: &Path| {
        setup(fx, ws);
        fx.git(ws, &["add", "-A"]);
        fx.git(ws, &["commit", "-qm", "shared config"]);
        for include in includes {
            fx.git(ws, &["config", "--add", "include.path", include]);
        }
        Launch::default()
    };
    let fixture = |nobody| Fx::new(&REPO, nobody);
    sandbox_fixture::held_attack(
        name,
        false,
        &fixture,
        &launch,
        script,
        &["status", "--short"],
    );
}

/// `conf/shared.gitconfig`, included through the symlink `link -> conf`.
fn linked_conf(fx: &Fx, ws: &Path) {
    std::fs::create_dir_all(ws.join("conf")).unwrap();
    std::fs::write(ws.join("conf/shared.gitconfig"), "").unwrap();
    std::os::unix::fs::symlink("conf", ws.join("link")).unwrap();
    for entry in ["", "conf", "conf/shared.gitconfig", "link"] {
        fx.own_entry(&ws.join(entry));
    }
}

/// A symlink on the way to the included file, replaced by a directory of the agent's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_symlink_earlier_in_the_included_path_is_not_the_agents_to_replace() {
    let script = format!(
        "rm -f link; mkdir -p link; {PAYLOAD} > link/shared.gitconfig; \
         ln -sfn evil link2; echo PLANTED"
    );
    include_attack(
        "symlink on the way",
        linked_conf,
        &["../link/shared.gitconfig"],
        &script,
    );
}

/// `shared.gitconfig -> hop`, `hop -> conf/real.gitconfig`: a chain of links to the
/// included file, the middle one re-pointed at a file of the agent's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_link_in_the_middle_of_a_chain_to_the_included_file_is_not_the_agents_to_repoint() {
    fn setup(fx: &Fx, ws: &Path) {
        std::fs::create_dir_all(ws.join("conf")).unwrap();
        std::fs::write(ws.join("conf/real.gitconfig"), "").unwrap();
        std::os::unix::fs::symlink("conf/real.gitconfig", ws.join("hop")).unwrap();
        std::os::unix::fs::symlink("hop", ws.join("shared.gitconfig")).unwrap();
        for entry in ["", "conf", "conf/real.gitconfig", "hop", "shared.gitconfig"] {
            fx.own_entry(&ws.join(entry));
        }
    }
    let script =
        format!("{PAYLOAD} > evil.gitconfig; rm -f hop; ln -s evil.gitconfig hop; echo PLANTED");
    include_attack("link chain", setup, &["../shared.gitconfig"], &script);
}

/// `shared.gitconfig -> conf/real.gitconfig`, which includes `local.gitconfig`: git reads
/// that relative to the name it opened (`shared.gitconfig`, at the root), not to where the
/// link leads, so the root's `local.gitconfig` is the one to hold.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_relative_include_inside_a_linked_config_is_resolved_as_git_does() {
    fn setup(fx: &Fx, ws: &Path) {
        std::fs::create_dir_all(ws.join("conf")).unwrap();
        std::fs::write(
            ws.join("conf/real.gitconfig"),
            "[include]\n\tpath = local.gitconfig\n",
        )
        .unwrap();
        std::fs::write(ws.join("local.gitconfig"), "").unwrap();
        std::fs::write(ws.join("conf/local.gitconfig"), "").unwrap();
        std::os::unix::fs::symlink("conf/real.gitconfig", ws.join("shared.gitconfig")).unwrap();
        for entry in [
            "",
            "conf",
            "conf/real.gitconfig",
            "conf/local.gitconfig",
            "local.gitconfig",
            "shared.gitconfig",
        ] {
            fx.own_entry(&ws.join(entry));
        }
    }
    let script = format!("{PAYLOAD} >> local.gitconfig; echo PLANTED");
    include_attack(
        "relative include through a link",
        setup,
        &["../shared.gitconfig"],
        &script,
    );
}

/// The user's config spells its includes in ways git reads and a line-by-line reading
/// misses: a key on its section header's line, a `;` inside quotes, a continued line.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn includes_spelled_as_git_allows_are_found() {
    fn setup(fx: &Fx, ws: &Path) {
        for file in ["one.gitconfig", "a;b.gitconfig", "cont.gitconfig"] {
            std::fs::write(ws.join(file), "").unwrap();
            fx.own_entry(&ws.join(file));
        }
        fx.own_entry(ws);
        let config = ws.join(".git/config");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(
            "[include] path = ../one.gitconfig\n[include]\n\tpath = \"../a;b.gitconfig\"\n\
             \tpath = ../co\\\nnt.gitconfig\n",
        );
        std::fs::write(&config, text).unwrap();
    }
    for file in ["one.gitconfig", "a;b.gitconfig", "cont.gitconfig"] {
        let script = format!("{PAYLOAD} >> '{file}'; echo PLANTED");
        include_attack(file, setup, &[], &script);
    }
}

/// The user's config includes `../local.gitconfig`, absent when the run starts. The agent
/// made it include 300 files of its own, and every later run's scan was over its cap of
/// 256 included files and failed closed, until the user removed the files (a ratchet of
/// this suite until round seventeen). Now an included file that is absent is held absent
/// for the run: the agent cannot make it, and the next run starts. The control: the same
/// files made by an unconfined run fail the next run's scan.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_absent_include_made_by_the_agent_does_not_fail_the_next_runs_scan() {
    let plant = "mkdir inc; i=0; while [ $i -lt 300 ]; do \
                 printf '[include]\\n\\tpath = inc/%s\\n' $i >> local.gitconfig; \
                 : > inc/$i; i=$((i+1)); done 2>/dev/null; echo PLANTED";
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            fx.git(
                &ws,
                &["config", "--add", "include.path", "../local.gitconfig"],
            );
            let (rc, out) = fx.sandbox(mode, plant);
            assert!(rc == 0 && out.contains("PLANTED"), "nobody={nobody}: {out}");
            let (rc, out) = fx.sandbox("workspace-write", "echo NEXT");
            if mode == "danger-full-access" {
                assert!(
                    rc != 0 && !out.contains("NEXT") && out.contains("files git configs include"),
                    "nobody={nobody}: control: the next run started: {rc} {out}"
                );
            } else {
                assert!(
                    rc == 0 && out.contains("NEXT"),
                    "nobody={nobody}: the next run did not start: {out}"
                );
                assert!(
                    !ws.join("local.gitconfig").exists(),
                    "nobody={nobody}: the agent made the included file: {out}"
                );
            }
        }
    }
}

fn git_in(ws: &Path, args: &[&str]) {
    use common::Bounded;
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(ws)
        .output_bounded();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// Whether `envelope` lists `path` as `status`.
fn lists(envelope: &Value, path: &str, status: &str) -> bool {
    envelope["changes"]["files"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["path"] == path && f["status"] == status)
}

/// The ledger's kept index (`<state>/ledger-index/`), made not to apply: the agent forges
/// the user's index entry of `F.txt` (its blob id made that of the next run's edit, as
/// `ledger_snapshot::an_index_entry_the_agent_forged_does_not_hide_the_next_runs_edit`),
/// then `then` moves the git dir so the next run's key differs. The next run edits
/// `F.txt` to that content: is it listed?
fn forged_index_then(then: &str) -> (bool, String) {
    let forge = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/ledger/forge-index-entry.py"
    ))
    .unwrap();
    let command = format!(
        "python3 .fake-claude/forge.py F.txt 'forged\\n' > .fake-claude/forge.out 2>&1; {then}"
    );
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "run_tool", "command": command},
        steps::result_ok("planted"),
    ]));
    let ws = fake.workspace();
    std::fs::write(ws.join("F.txt"), "original\n").unwrap();
    std::fs::write(ws.join(".gitignore"), ".fake-claude/\n").unwrap();
    git_in(ws, &["init", "-q"]);
    git_in(ws, &["add", "-A"]);
    git_in(ws, &["commit", "-qm", "start"]);
    std::fs::write(fake.file("forge.py"), forge).unwrap();
    let out = fake.coder().args(["task"]).run();
    out.assert_success("planted");
    let forged = std::fs::read_to_string(fake.file("forge.out")).unwrap_or_default();
    assert!(
        forged.contains("FORGED"),
        "the forgery did not run: {forged}"
    );
    let moved = ws.join(".git").is_file();
    std::fs::write(
        fake.file("scenario.json"),
        serde_json::to_vec(&json!([
            steps::init(),
            {"step": "touch", "path": "../F.txt", "text": "forged\n"},
            steps::result_ok("edited"),
        ]))
        .unwrap(),
    )
    .unwrap();
    let out = fake.coder().args(["task"]).run();
    out.assert_success("edited");
    let explain = format!("moved={moved} {}", out.explain());
    (lists(&out.envelope, "F.txt", "modified"), explain)
}

/// The agent moves `.git` to `.git2` and leaves a gitfile naming it, so that the next
/// run's git dir, and the key of its kept index, differ and the ledger starts from the
/// forged index: blocked, the sandbox holds `.git` in place (`moved=false`) and the edit is
/// listed. The control is the forgery alone, which the kept index answers.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_dir_moved_by_the_agent_does_not_unkeep_the_index() {
    common::require_root_and_user_namespaces();
    let (listed, out) = forged_index_then("true");
    assert!(listed, "control: the kept index shows the edit: {out}");
    let (listed, out) = forged_index_then("mv .git .git2 && printf 'gitdir: .git2\\n' > .git");
    assert!(listed, "the edit of F.txt is hidden: {out}");
}

/// `script` through `coder sandbox --mode MODE` in `cd` (`M` names the marker), which must
/// succeed and print `PLANTED`; then the user's own `git status` in `user_dir`, which runs
/// the payload when the mode is the control (`danger-full-access`) and only then.
fn planted_then_status(fx: &Fx, mode: &str, cd: &Path, script: &str, user_dir: &Path) {
    let nobody = fx.nobody;
    let (rc, out) = sandbox_fixture::run_text(
        fx.sandbox_in(cd, &["--mode", mode], script)
            .env("M", fx.marker()),
    );
    assert!(
        rc == 0 && out.contains("PLANTED"),
        "nobody={nobody} {mode}: {out}"
    );
    let _ = std::fs::remove_file(fx.marker());
    let git_out = fx.git(user_dir, &["status", "--short"]);
    let ran = fx.marker().exists();
    assert_eq!(
        ran,
        mode == "danger-full-access",
        "nobody={nobody} {mode}: the user's git ran the payload: {ran}\n{out}\n{git_out}"
    );
}

/// The workspace is a linked worktree (`wt/`) of a repository outside it (`main/`), whose
/// config includes a file of the workspace by its absolute path.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_linked_worktrees_include_of_a_workspace_file_is_held() {
    let script = format!("{PAYLOAD} >> shared.gitconfig; echo PLANTED");
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let main = fx.ws();
            let wt = fx.root().join("wt");
            fx.git(&main, &["worktree", "add", "-q", "../wt"]);
            std::fs::write(wt.join("shared.gitconfig"), "").unwrap();
            fx.own_entry(&wt.join("shared.gitconfig"));
            fx.git(&wt, &["add", "-A"]);
            fx.git(&wt, &["commit", "-qm", "shared config"]);
            let include = wt.join("shared.gitconfig");
            fx.git(
                &main,
                &["config", "include.path", include.to_str().unwrap()],
            );
            planted_then_status(&fx, mode, &wt, &script, &wt);
        }
    }
}

/// The repository has a linked worktree inside the workspace (`wtx/`) whose own
/// `config.worktree` (`extensions.worktreeConfig`) includes a file of it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_inner_worktrees_own_config_include_is_held() {
    let script = format!("{PAYLOAD} >> wtx/shared.gitconfig; echo PLANTED");
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            let wtx = ws.join("wtx");
            std::fs::write(ws.join(".gitignore"), "/wtx/\n").unwrap();
            fx.own_entry(&ws.join(".gitignore"));
            fx.git(&ws, &["add", "-A"]);
            fx.git(&ws, &["commit", "-qm", "ignore"]);
            fx.git(&ws, &["worktree", "add", "-q", "wtx"]);
            std::fs::write(wtx.join("shared.gitconfig"), "").unwrap();
            fx.own_entry(&wtx.join("shared.gitconfig"));
            fx.git(&ws, &["config", "extensions.worktreeConfig", "true"]);
            let include = wtx.join("shared.gitconfig");
            let include = include.to_str().unwrap();
            fx.git(&wtx, &["config", "--worktree", "include.path", include]);
            planted_then_status(&fx, mode, &ws, &script, &wtx);
        }
    }
}
