//! Round eighteen's second review: the holds of round eighteen on the files of the work tree
//! that the user's git config runs (`src/sandbox/config_text.rs`, `src/sandbox/scan.rs`
//! `guard_command_files`), attacked by someone who has read them. Every attack runs as
//! root and as uid 65534, each with a control (`danger-full-access`) showing that the
//! user's own next git runs the agent's payload without the defence.
//!
//! Found open when this review started, closed with it:
//! * **The user's global config in a nested work tree.** `~/.gitconfig`'s commands were
//!   read against the workspace's top only, but git runs them at the top of whichever
//!   work tree the user is in: `alias.fmt = !sh tools/fmt.sh` ran `sub/tools/fmt.sh` in a
//!   repository nested in the workspace, which nothing held.
//! * **A linked worktree in the workspace.** The repository's config runs its commands
//!   in a linked worktree too (`.worktrees/feat/tools/fmt.sh`), and a git dir reached
//!   through a `.git` file (a linked worktree's `.git/worktrees/feat`, a separate git dir)
//!   had no work tree to read them against.
//! * **A nested repository's hooks directory.** `core.hooksPath` was asked of the user's
//!   git for the workspace's own repository only: a nested one's `core.hooksPath =
//!   scripts/hooks` (its own config, or the user's global one) left its hooks the
//!   agent's to write, and the user's next commit there ran them.
//! * **Keys that run commands, missing from the list**: `core.alternateRefsCommand`,
//!   `gpg.ssh.defaultKeyCommand`, `imap.tunnel`, `instaweb.httpd`, `guitool.*.cmd`,
//!   `hook.*.command`, and git-lfs's `lfs.customtransfer.*.path`,
//!   `lfs.extension.*.clean` and `.smudge`.
//! * **Words the split misread**: `"$(git rev-parse --show-toplevel)/tools/fmt.sh"` left
//!   `/tools/fmt.sh`, taken for an absolute path; `sh 'tools/strip it.sh'` was split at
//!   its blank.
//! * **The ledger's CPU budget, per git.** Round eighteen stopped a git of coder's past
//!   60 s of CPU, but a snapshot runs one `git add` per repository nested in the
//!   workspace (up to 256): each nested repository's `.gitignore` sized to hold its add
//!   just under the budget held the ledger for as many budgets, in the run and in every
//!   later run's "before". The gits of one snapshot, and of the "after" with its diffs,
//!   share one budget now. (coder's own git, unconfined: as root only, no control mode.)
//! * **A template directory in the workspace.** The global `init.templateDir` naming a
//!   dotfiles workspace's `git-templates`: git copies its hooks into every repository
//!   the user makes, and the user's next `git clone` ran the agent's `post-checkout`.
//! * **A read-only git dir left for the next run.** An agent that left
//!   `.git/worktrees/x` with a `HEAD` and mode 0555 failed every later unprivileged
//!   run's setup: the scan could not make its placeholders there, and failed closed,
//!   since the directory is the user's (who may `chmod` it). coder gives the owner's
//!   write and search bits back now, and says so.
//! * **A git dir of a `HEAD` alone.** The scan took every `.git/modules/*` with a
//!   `HEAD` for a git dir and read its config; the end-of-run guard asks git's own test
//!   (`HEAD` and `objects` and `refs`, or `commondir`). The agent left a `HEAD` and a
//!   `config` whose commands named more files than the scan takes: every later run
//!   failed at setup. The same for `sub/.git` (a directory, or a `.git` file naming
//!   one) of a `HEAD` alone; and worse: the next run's scan recorded such a `sub/.git`
//!   as the user's, its agent completed it (`objects/`, `refs/`), the end-of-run guard
//!   left the known repository alone, and the user's `git status` in `sub` ran the first
//!   agent's `core.fsmonitor`.
//!
//! Blocked by the defences already there (kept as tests): a placeholder's directory
//! made read-only by one run's agent, to free the name for the next run's; a nested
//! repository made read-only without `hooks/` (the end-of-run git guard moves it away);
//! a held script written through a hard link of it elsewhere in the work tree.
//! Looked at, nothing found: `nobody_may_create` (another user's directory or a
//! read-only mount): the agent runs with coder's user's credentials and no capability
//! over a directory of another user, its mounts keep the read-only flag (cloned
//! recursively), and the directories on the way to a held name are pinned, so it cannot
//! be renamed and replaced; a "before" that falls back to the plain walk is flagged
//! (`truncated`, a warning, and `--scope` fails on a cut walk), not silent.

mod common;

use std::path::Path;
use std::time::Duration;

use common::sandbox_fixture::{self, GitFx as Fx, Launch, RepoStyle};
use common::{Bounded, Fake};
use serde_json::{Value, json};

const REPO: RepoStyle = RepoStyle {
    prefix: "coder-r18b-",
    init: &["init", "-q"],
    readme_owned: true,
    env: &[],
};

/// The payload a script of the work tree gets: `touch "$M"` appended.
const SCRIPT_PAYLOAD: &str = "printf 'touch \"%s\"\\n' \"$M\"";

/// How an attack is expected to end confined.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Confined {
    /// The user's git does not run the payload.
    Blocked,
    /// Known open: it still does (a ratchet; make it `Blocked` once fixed).
    #[allow(dead_code)]
    Open,
}

/// One attack per arm and mode: `setup` prepares the workspace, `script` attacks (in the
/// workspace) and prints `PLANTED`; then the user's own `user` git in the workspace.
/// Unconfined (the control) it must run the payload; confined as `expect` says.
fn attack(name: &str, setup: fn(&Fx, &Path), script: &str, user: &[&str], expect: Confined) {
    let launch = |fx: &Fx, ws: &Path| {
        setup(fx, ws);
        Launch::default()
    };
    let open = expect == Confined::Open;
    sandbox_fixture::held_attack(
        name,
        open,
        &|nobody| Fx::new(&REPO, nobody),
        &launch,
        script,
        user,
    );
}

/// `git init` and one commit of everything in `dir`, as the user.
fn commit_all(fx: &Fx, dir: &Path) {
    fx.git(dir, &["init", "-q"]);
    fx.git(dir, &["add", "."]);
    fx.git(dir, &["commit", "-qm", "x"]);
}

/// The user's `~/.gitconfig`, given to the arm's user.
fn global_config(fx: &Fx, text: &str) {
    let home = fx.root().join("home");
    fx.own_file(&home, ".gitconfig", text);
}

/// `~/.gitconfig` has an alias that runs a script of whichever work tree the user is
/// in; the workspace holds a repository `sub` with that script. The agent appends its
/// payload to `sub/tools/fmt.sh`, and the user's `git -C sub fmt` ran it: the scan read
/// the global config's commands against the workspace's top only.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_global_alias_script_of_a_nested_repository_is_not_the_agents_to_write() {
    attack(
        "global alias, nested repository",
        |fx, ws| {
            global_config(fx, "[alias]\n\tfmt = !sh tools/fmt.sh\n");
            fx.own_file(ws, "sub/tools/fmt.sh", "true\n");
            commit_all(fx, &ws.join("sub"));
        },
        &format!("{SCRIPT_PAYLOAD} >> sub/tools/fmt.sh; echo PLANTED"),
        &["-C", "sub", "fmt"],
        Confined::Blocked,
    );
}

/// A global filter driver that the nested repository's `.gitattributes` selects, its
/// script absent at the start: the agent makes `sub/scripts/strip.sh`, and the user's
/// next `git add` in `sub` ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_global_filter_script_absent_in_a_nested_repository_is_not_the_agents_to_make() {
    attack(
        "global filter, nested repository, absent",
        |fx, ws| {
            global_config(fx, "[filter \"strip\"]\n\tclean = sh scripts/strip.sh\n");
            fx.own_file(ws, "sub/.gitattributes", "*.txt filter=strip\n");
            fx.own_file(ws, "sub/a.txt", "a\n");
            fx.git(&ws.join("sub"), &["init", "-q"]);
        },
        &format!(
            "mkdir -p sub/scripts; {{ {SCRIPT_PAYLOAD}; echo cat; }} > sub/scripts/strip.sh; \
             echo PLANTED"
        ),
        &["-C", "sub", "add", "-A"],
        Confined::Blocked,
    );
}

/// The workspace holds a linked worktree of its own repository (`git worktree add
/// .worktrees/feat`, a common layout): the repository's alias runs `tools/fmt.sh` at
/// the top of that worktree too. The agent appends to `.worktrees/feat/tools/fmt.sh`,
/// and the user's `git fmt` there ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_linked_worktrees_alias_script_is_not_the_agents_to_write() {
    attack(
        "repository alias, linked worktree",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt.sh", "true\n");
            fx.git(ws, &["add", "tools"]);
            fx.git(ws, &["commit", "-qm", "tools"]);
            fx.git(ws, &["config", "alias.fmt", "!sh tools/fmt.sh"]);
            fx.git(ws, &["worktree", "add", "-q", ".worktrees/feat"]);
        },
        &format!("{SCRIPT_PAYLOAD} >> .worktrees/feat/tools/fmt.sh; echo PLANTED"),
        &["-C", ".worktrees/feat", "fmt"],
        Confined::Blocked,
    );
}

/// A repository of the workspace whose git dir is elsewhere in the workspace (`git init
/// --separate-git-dir`, `sub/.git` a file), without `core.worktree`: its config's
/// fsmonitor runs `sub/fsmon.sh`, which the agent appends to.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_separate_git_dirs_fsmonitor_script_is_not_the_agents_to_write() {
    attack(
        "separate git dir fsmonitor",
        |fx, ws| {
            let script = fx.own_file(ws, "sub/fsmon.sh", "#!/bin/sh\n");
            std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let git_dir = ws.join("gitdirs/sub");
            fx.own_file(ws, "gitdirs/.keep", "");
            fx.git(
                &ws.join("sub"),
                &[
                    "init",
                    "-q",
                    "--separate-git-dir",
                    git_dir.to_str().unwrap(),
                ],
            );
            fx.git(&ws.join("sub"), &["add", "."]);
            fx.git(&ws.join("sub"), &["commit", "-qm", "x"]);
            fx.git(&ws.join("sub"), &["config", "core.fsmonitor", "./fsmon.sh"]);
        },
        &format!("{SCRIPT_PAYLOAD} >> sub/fsmon.sh; echo PLANTED"),
        &["-C", "sub", "status", "--short"],
        Confined::Blocked,
    );
}

/// A repository nested in the workspace runs its hooks from `scripts/hooks` of its own
/// work tree (`core.hooksPath` in its config): the agent writes
/// `sub/scripts/hooks/pre-commit`, and the user's next commit in `sub` ran it. Only the
/// workspace's own repository's hooks directory was asked for.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_nested_repositorys_hooks_path_is_not_the_agents_to_write() {
    attack(
        "nested core.hooksPath",
        |fx, ws| {
            fx.own_file(ws, "sub/scripts/hooks/.keep", "");
            commit_all(fx, &ws.join("sub"));
            fx.git(
                &ws.join("sub"),
                &["config", "core.hooksPath", "scripts/hooks"],
            );
        },
        &format!(
            "{{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > sub/scripts/hooks/pre-commit; \
             chmod +x sub/scripts/hooks/pre-commit; echo PLANTED"
        ),
        &[
            "-C",
            "sub",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "user's commit",
        ],
        Confined::Blocked,
    );
}

/// The same with the user's global `core.hooksPath = git-hooks` (relative: each work
/// tree's own), for a repository nested in the workspace whose `git-hooks` is absent.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_global_hooks_path_of_a_nested_repository_is_not_the_agents_to_make() {
    attack(
        "global core.hooksPath, nested, absent",
        |fx, ws| {
            global_config(fx, "[core]\n\thooksPath = git-hooks\n");
            fx.own_file(ws, "sub/a.txt", "a\n");
            commit_all(fx, &ws.join("sub"));
        },
        &format!(
            "mkdir -p sub/git-hooks; {{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > sub/git-hooks/pre-commit; \
             chmod +x sub/git-hooks/pre-commit; echo PLANTED"
        ),
        &[
            "-C",
            "sub",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "user's commit",
        ],
        Confined::Blocked,
    );
}

/// `gpg.ssh.defaultKeyCommand` (the key an SSH-signed commit takes when `user.signingKey`
/// is unset) names a script of the work tree: the key was not among the commands read,
/// the agent appended its payload, and the user's next signed commit ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_default_key_command_script_is_not_the_agents_to_write() {
    attack(
        "gpg.ssh.defaultKeyCommand",
        |fx, ws| {
            fx.own_file(ws, "tools/key.sh", "echo key::ssh-ed25519 AAAA\n");
            fx.git(ws, &["config", "gpg.format", "ssh"]);
            fx.git(
                ws,
                &["config", "gpg.ssh.defaultKeyCommand", "sh tools/key.sh"],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/key.sh; echo PLANTED"),
        &["commit", "-q", "--allow-empty", "-S", "-m", "signed"],
        Confined::Blocked,
    );
}

/// An alias names its script from the top of the work tree as the shell finds it
/// (`"$(git rev-parse --show-toplevel)/tools/fmt.sh"`, a common spelling): the scan took
/// the word after the substitution, `/tools/fmt.sh`, for an absolute path, and held
/// nothing; the agent appended its payload, and the user's `git fmt` ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_named_from_the_top_by_rev_parse_is_not_the_agents_to_write() {
    attack(
        "rev-parse --show-toplevel",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt.sh", "true\n");
            fx.git(
                ws,
                &[
                    "config",
                    "alias.fmt",
                    "!sh \"$(git rev-parse --show-toplevel)/tools/fmt.sh\"",
                ],
            );
        },
        &format!("{SCRIPT_PAYLOAD} >> tools/fmt.sh; echo PLANTED"),
        &["fmt"],
        Confined::Blocked,
    );
}

/// A filter driver's script has a space in its name, quoted as the shell wants it
/// (`sh 'tools/strip it.sh'`): the scan split the word at the space and held neither
/// half; the agent appended its payload, and the user's next `git add` ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_quoted_script_name_with_a_space_is_not_the_agents_to_write() {
    attack(
        "quoted name with a space",
        |fx, ws| {
            fx.own_file(ws, "tools/strip it.sh", "cat\n");
            fx.own_file(ws, ".gitattributes", "*.txt filter=strip\n");
            fx.own_file(ws, "a.txt", "a\n");
            fx.git(
                ws,
                &["config", "filter.strip.clean", "sh 'tools/strip it.sh'"],
            );
        },
        &format!(
            "{{ {SCRIPT_PAYLOAD}; cat 'tools/strip it.sh'; }} > t; cat t > 'tools/strip it.sh'; \
             echo b >> a.txt; echo PLANTED"
        ),
        &["add", "-A"],
        Confined::Blocked,
    );
}

/// `git` as the test user in `dir`, which must succeed.
fn git_in(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output_bounded();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// The CPU time this process's reaped children have used.
fn children_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_CHILDREN).unwrap();
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::from_micros((t.tv_sec() * 1_000_000 + t.tv_usec()) as u64)
    };
    micros(usage.user_time()) + micros(usage.system_time())
}

/// An earlier run's agent left eight repositories nested in the workspace (no commit
/// yet, so each is a part of its own to the ledger), each with a `.gitignore` of 20,000
/// patterns and 1,000 new files: each one's `git add` stays under the CPU budget (twice
/// what the slowest took here, 1 s at least, through the debug builds'
/// `CODER_TEST_GIT_CPU_BUDGET_MS`; 60 s in a release),
/// and together they spend more than twice it. With a budget per git, the ledger took
/// them all, in the "before" and again in the "after" (with 256 nested repositories,
/// 256 budgets each); now its gits share one, the "before" is stopped, the plain walk
/// measures the run and a warning says why. Control: the user's own `git add` of the
/// nested repositories takes more CPU than the budget between them, less in each.
#[test]
fn nested_repositories_do_not_multiply_the_ledgers_cpu_budget() {
    let fake = Fake::new(json!([
        common::steps::init(),
        {"step": "touch", "path": "../a.txt", "text": "changed\n"},
        common::steps::result_ok("done"),
    ]));
    let ws = fake.workspace();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    std::fs::write(ws.join(".gitignore"), ".fake-claude/\n").unwrap();
    git_in(ws, &["init", "-q"]);
    git_in(ws, &["add", "-A"]);
    git_in(ws, &["commit", "-qm", "start"]);
    let patterns: String = (0..20_000)
        .map(|i| format!("*a*b*c*d*e*f*g*h*{i}\n"))
        .collect();
    let nested: Vec<_> = (0..8).map(|n| ws.join(format!("n{n}"))).collect();
    for dir in &nested {
        std::fs::create_dir(dir).unwrap();
        git_in(dir, &["init", "-q"]);
        std::fs::write(dir.join(".gitignore"), &patterns).unwrap();
        for f in 0..1000 {
            std::fs::write(dir.join(format!("f{f}.txt")), "x\n").unwrap();
        }
    }
    // Control: each nested repository's `git add` stays under the budget (at most half
    // of it, room for the ledger's own gits, which write objects), all of them together
    // spend more than twice it. The budget is set from what one took on this machine
    // (1 s at least): a fixed one failed this control on a slower machine.
    let spent: Vec<Duration> = nested
        .iter()
        .map(|dir| {
            let before = children_cpu();
            git_in(dir, &["add", "-A", "--dry-run"]);
            children_cpu() - before
        })
        .collect();
    let most = spent.iter().copied().max().unwrap_or_default();
    let budget = (most * 2).max(Duration::from_millis(1000));
    let total: Duration = spent.iter().sum();
    assert!(
        total > budget * 2,
        "control: the git adds took {spent:?}, {total:?} in all, against a budget of {budget:?}"
    );
    let out = fake
        .coder()
        .env(
            "CODER_TEST_GIT_CPU_BUDGET_MS",
            budget.as_millis().to_string(),
        )
        .args(["task"])
        .deadline(Duration::from_secs(300))
        .run();
    out.assert_success("done");
    let warned = out.envelope["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|w| w.contains("s of CPU time"));
    assert!(warned, "{}", out.explain());
    let listed = out.envelope["changes"]["files"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["path"] == "a.txt" && f["status"] == "modified");
    assert!(listed, "{}", out.explain());
}

/// A filter driver names `tools/strip.sh`, absent in the user's `tools/`: the first run's
/// agent makes `tools/` read-only (its owner may `chmod` it; Landlock does not mediate
/// metadata), so that coder cannot remove its placeholder after the run, and the next
/// run's agent gives the mode back, removes the placeholder and writes the script; the
/// user's next `git add` ran it. Also: every later run must still start.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_placeholders_directory_made_read_only_does_not_free_the_name_in_a_later_run() {
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            fx.own_file(&ws, "tools/keep", "");
            fx.own_file(&ws, ".gitattributes", "*.txt filter=strip\n");
            fx.own_file(&ws, "a.txt", "a\n");
            fx.git(&ws, &["config", "filter.strip.clean", "sh tools/strip.sh"]);
            let first = "chmod 555 tools; echo PLANTED";
            let (rc, out) = sandbox_fixture::run_text(
                fx.sandbox_in(&ws, &["--mode", mode], first)
                    .env("M", fx.marker()),
            );
            assert_eq!(rc, 0, "nobody={nobody} {mode} first run: {out}");
            let left = std::fs::symlink_metadata(ws.join("tools/strip.sh")).is_ok();
            let second = format!(
                "chmod 755 tools; rm -f tools/strip.sh; \
                 {{ {SCRIPT_PAYLOAD}; echo cat; }} > tools/strip.sh; echo b >> a.txt; \
                 echo PLANTED"
            );
            let (rc, out) = sandbox_fixture::run_text(
                fx.sandbox_in(&ws, &["--mode", mode], &second)
                    .env("M", fx.marker()),
            );
            assert_eq!(
                rc, 0,
                "nobody={nobody} {mode} second run (left: {left}): {out}"
            );
            let _ = std::fs::remove_file(fx.marker());
            let git_out = fx.git(&ws, &["add", "-A"]);
            let ran = fx.marker().exists();
            assert_eq!(
                ran,
                mode == "danger-full-access",
                "nobody={nobody} {mode}: the user's git ran the payload: {ran} \
                 (placeholder left after the first run: {left})\n{out}\n{git_out}"
            );
        }
    }
}

/// The agent leaves a git dir that lacks `hooks/` (and `config`) and that it made
/// read-only (`chmod 555`): a new nested repository, a linked worktree's git dir, a
/// submodule's. The next run must make placeholders there, which an unprivileged coder
/// could not (the directory is its own user's, so the scan failed closed rather than
/// skip it): every later run failed at setup. It must still start.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_read_only_git_dir_the_agent_left_does_not_stop_later_runs() {
    let variants = [
        "git init -q sub && rm -rf sub/.git/hooks sub/.git/info && chmod 555 sub/.git",
        "mkdir -p .git/worktrees/x && echo 'ref: refs/heads/master' > .git/worktrees/x/HEAD \
         && chmod 555 .git/worktrees/x",
        "mkdir -p .git/modules/y && echo 'ref: refs/heads/master' > .git/modules/y/HEAD \
         && chmod 555 .git/modules/y",
    ];
    for (nobody, variant) in sandbox_fixture::arms()
        .into_iter()
        .flat_map(|nobody| variants.iter().map(move |v| (nobody, v)))
    {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        let first = format!("{variant}; echo PLANTED");
        let (rc, out) = sandbox_fixture::run_text(
            fx.sandbox_in(&ws, &["--mode", "workspace-write"], &first)
                .env("M", fx.marker()),
        );
        assert_eq!(rc, 0, "nobody={nobody} {variant}: first run: {out}");
        let (rc, out) = sandbox_fixture::run_text(
            fx.sandbox_in(&ws, &["--mode", "workspace-write"], "echo SECOND")
                .env("M", fx.marker()),
        );
        assert!(
            rc == 0 && out.contains("SECOND"),
            "nobody={nobody} {variant}: the next run did not start: {rc}\n{out}"
        );
    }
}

/// The user's global `init.templateDir` names a directory of the workspace (a dotfiles
/// repository's `git-templates`, whose `hooks/` git copies into every repository it
/// makes): the agent writes `git-templates/hooks/post-checkout`, and the user's next
/// `git clone`, anywhere, ran it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_template_directory_in_the_workspace_is_not_the_agents_to_write() {
    attack(
        "init.templateDir",
        |fx, ws| {
            fx.own_file(ws, "git-templates/hooks/.keep", "");
            let text = format!(
                "[init]\n\ttemplateDir = {}\n",
                ws.join("git-templates").display()
            );
            global_config(fx, &text);
        },
        &format!(
            "{{ echo '#!/bin/sh'; {SCRIPT_PAYLOAD}; }} > git-templates/hooks/post-checkout; \
             chmod +x git-templates/hooks/post-checkout; echo PLANTED"
        ),
        &["clone", "-q", ".", "../clone"],
        Confined::Blocked,
    );
}

/// The agent plants a git dir of its own where the scan reads configs: a `HEAD` alone in
/// `.git/worktrees/x` or `.git/modules/y` (no git reads that config, and the end-of-run
/// guard, git's test, leaves it), or a whole one in `.git/modules/z` (the guard makes its
/// config inert), whose commands name more files than the scan takes, or whose includes
/// are more than it reads: every later run must still start. The `HEAD`-only module
/// failed every later run at setup.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_dir_the_agent_planted_does_not_stop_later_runs_by_its_commands() {
    let words: String = (0..1100).map(|n| format!(" d{n}/x")).collect();
    let includes: String = (0..300)
        .map(|n| format!("[include]\\n\\tpath = i{n}\\n"))
        .collect();
    let variants = [
        format!(
            "mkdir -p .git/worktrees/x && echo 'ref: refs/heads/master' > .git/worktrees/x/HEAD \
             && printf '[alias]\\n\\ta = !sh{words}\\n' > .git/worktrees/x/config.worktree"
        ),
        format!(
            "mkdir -p .git/modules/y && echo 'ref: refs/heads/master' > .git/modules/y/HEAD \
             && printf '[core]\\n\\tworktree = ../../..\\n[alias]\\n\\ta = !sh{words}\\n' \
             > .git/modules/y/config"
        ),
        format!(
            "mkdir -p .git/modules/z/objects .git/modules/z/refs \
             && echo 'ref: refs/heads/master' > .git/modules/z/HEAD \
             && printf '[core]\\n\\tworktree = ../../..\\n[alias]\\n\\ta = !sh{words}\\n' \
             > .git/modules/z/config"
        ),
        format!(
            "mkdir -p .git/worktrees/w && echo 'ref: refs/heads/master' > .git/worktrees/w/HEAD \
             && printf '{includes}' > .git/worktrees/w/config.worktree"
        ),
        format!(
            "mkdir -p sub/.git && echo 'ref: refs/heads/master' > sub/.git/HEAD \
             && printf '[alias]\\n\\ta = !sh{words}\\n' > sub/.git/config"
        ),
        format!(
            "mkdir -p gd t && echo 'ref: refs/heads/master' > gd/HEAD \
             && echo 'gitdir: ../gd' > t/.git \
             && printf '[alias]\\n\\ta = !sh{words}\\n' > gd/config"
        ),
    ];
    for (nobody, variant) in sandbox_fixture::arms()
        .into_iter()
        .flat_map(|nobody| variants.iter().map(move |v| (nobody, v)))
    {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        let first = format!("{variant}; echo PLANTED");
        let (rc, out) = sandbox_fixture::run_text(
            fx.sandbox_in(&ws, &["--mode", "workspace-write"], &first)
                .env("M", fx.marker()),
        );
        assert_eq!(rc, 0, "nobody={nobody}: first run: {out}");
        let _ = std::fs::read_dir(ws.join(".git/modules/y")).map(|d| d.count());
        let (rc, out) = sandbox_fixture::run_text(
            fx.sandbox_in(&ws, &["--mode", "workspace-write"], "ls; echo SECOND")
                .env("M", fx.marker()),
        );
        assert!(
            rc == 0 && out.contains("SECOND") && !out.contains("d10"),
            "nobody={nobody} {}: the next run: {rc}\n{out}",
            &variant[..40]
        );
    }
}

/// Two runs: the first run's agent leaves `sub/.git` holding a `HEAD` and a `config`
/// with its `core.fsmonitor`, nothing else: git's test (and the end-of-run guard's) does
/// not take it for a git dir, so the guard leaves it. The next run's scan guards it as
/// the user's (every `.git` directory is), and its agent adds `objects/` and `refs/`:
/// now git takes it, the guard leaves it as known, and the user's `git status` in `sub`
/// ran the agent's fsmonitor.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_git_dir_completed_in_a_later_run_is_not_the_users() {
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fx::new(&REPO, nobody);
            let ws = fx.ws();
            let first = "mkdir -p sub/.git && echo 'ref: refs/heads/master' > sub/.git/HEAD \
                 && printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\" > sub/.git/config; \
                 echo PLANTED";
            let (rc, out) = sandbox_fixture::run_text(
                fx.sandbox_in(&ws, &["--mode", mode], first)
                    .env("M", fx.marker()),
            );
            assert_eq!(rc, 0, "nobody={nobody} {mode} first run: {out}");
            let second = "mkdir -p sub/.git/objects sub/.git/refs; echo PLANTED";
            let (rc, out) = sandbox_fixture::run_text(
                fx.sandbox_in(&ws, &["--mode", mode], second)
                    .env("M", fx.marker()),
            );
            assert_eq!(rc, 0, "nobody={nobody} {mode} second run: {out}");
            let _ = std::fs::remove_file(fx.marker());
            let git_out = fx.git(&ws.join("sub"), &["status", "--short"]);
            let ran = fx.marker().exists();
            assert_eq!(
                ran,
                mode == "danger-full-access",
                "nobody={nobody} {mode}: the user's git ran the payload: {ran}\n{out}\n{git_out}"
            );
        }
    }
}

/// The script an alias runs has a second name in the work tree (a hard link): the agent
/// appends its payload through that name. (Held: the scan holds every name of a held
/// file it finds in the tree.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_command_script_is_not_written_through_its_other_name() {
    attack(
        "alias script, hard link",
        |fx, ws| {
            fx.own_file(ws, "tools/fmt.sh", "true\n");
            fx.own_file(ws, "notes/keep", "");
            std::fs::hard_link(ws.join("tools/fmt.sh"), ws.join("notes/copy.txt")).unwrap();
            fx.git(ws, &["config", "alias.fmt", "!sh tools/fmt.sh"]);
        },
        &format!("{SCRIPT_PAYLOAD} >> notes/copy.txt; echo PLANTED"),
        &["fmt"],
        Confined::Blocked,
    );
}
