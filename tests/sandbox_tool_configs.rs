//! Protected tool configs beyond the workspace root, attacked: files that programs the user
//! runs later, outside the sandbox, execute what they say, in a subdirectory or under a
//! git hook manager's name. Claude Code run in `pkg/` loads `pkg/.claude/settings.json`
//! (hooks are commands) and `pkg/.mcp.json` (MCP servers are commands), VS Code opened on
//! a subfolder its `.vscode/tasks.json`, direnv sources a nested `.envrc` on `cd`, and
//! pre-commit, lefthook, lint-staged and simple-git-hooks run what their configs name at
//! the user's next commit.
//!
//! Until this suite, the protected globs named the root's configs only (`.claude/**`,
//! `.envrc`, ...) and no hook manager's: the agent rewrote a nested config the user had,
//! made new ones (`mkdir -p pkg/.claude && echo '{"hooks":…}' > pkg/.claude/settings.json`),
//! and wrote `.pre-commit-config.yaml`. Now the defaults hold in every directory
//! (`**/.claude/**`, `**/.envrc`, ...) and cover the hook managers; what exists at the
//! start is held read-only, and what appears during the run is moved aside by the
//! end-of-run guard (`NAME.coder-quarantine-N`) and named in the envelope.
//!
//! Each class runs through `coder run` on a fake CLI whose payload is a shell script, as
//! root and as uid 65534, with a control: the same payload under `--sandbox
//! danger-full-access`, where the file the user's program reads holds the agent's text.
//! What is checked is that file: what Claude Code, the editor, direnv or the hook manager
//! would read and run at that path once coder is gone.

mod common;

use std::time::Duration;

use common::review_tree::{Tree, warned, who};
use common::sandbox_fixture::{GitFx, NOBODY, RepoStyle, arms};
use serde_json::Value;

/// The text the agent writes; a file holding it is the agent's.
const AGENT: &str = "AGENT-PAYLOAD";

/// One attack: the user's files (path, content) committed in the workspace before the
/// run, the payload the agent runs (it prints `PLANTED` when every write went through),
/// and the paths whose content the user's programs read afterwards.
struct Attack {
    name: &'static str,
    files: &'static [(&'static str, &'static str)],
    payload: &'static str,
    read_later: &'static [&'static str],
}

/// Runs `attack` for both arms, confined and unconfined. Confined, no path of
/// `read_later` holds the agent's text afterwards; one that the user had is unchanged, and
/// one the agent made was moved aside to `PATH.coder-quarantine-1`, which the envelope
/// reports (a warning naming the path, and `sandbox.quarantined` of kind `tool_config`).
/// Unconfined (the control), every one holds the agent's text.
fn run(attack: &Attack) {
    common::require_root_and_user_namespaces();
    for owner in [None, Some(NOBODY)] {
        for mode in ["danger-full-access", "workspace-write"] {
            let case = format!("{} {} {mode}", attack.name, who(owner));
            let dirs: Vec<String> = attack
                .files
                .iter()
                .filter_map(|(path, _)| std::path::Path::new(path).parent())
                .map(|dir| format!("ws/{}", dir.display()))
                .collect();
            let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
            let tree = Tree::repo("coder-toolcfg-", owner, &dirs, attack.files, &[]);
            let env = tree.run(&["--sandbox", mode], attack.payload);
            let ws = tree.ws();
            for path in attack.read_later {
                let text = std::fs::read_to_string(ws.join(path)).unwrap_or_default();
                let theirs = text.contains(AGENT);
                if mode == "danger-full-access" {
                    assert!(
                        theirs,
                        "{case}: control: {path} is not the agent's: {text:?}\n{env}"
                    );
                    continue;
                }
                assert!(!theirs, "{case}: {path} holds the agent's text\n{env}");
                match attack.files.iter().find(|(p, _)| p == path) {
                    Some((_, before)) => assert_eq!(&text, before, "{case}: {path}\n{env}"),
                    None => moved_aside(&case, &ws, path, &env),
                }
            }
        }
    }
}

/// The protected name at `path` was moved aside, with the agent's text, and the envelope
/// says so: a file beside itself (`PATH.coder-quarantine-1`), the contents of a protected
/// directory (`.claude`, `.vscode`) into `DIR.coder-quarantine-1/` beside it (the
/// directory stays: it may be another run's placeholder).
fn moved_aside(case: &str, ws: &std::path::Path, path: &str, env: &Value) {
    // The entry the guard moves: the protected directory (`.claude`, `.vscode`) when the
    // path lies in one, else the file.
    let entry = [
        "/.claude/",
        "/.vscode/",
        "/.idea/",
        "/.husky/",
        "/.githooks/",
    ]
    .iter()
    .find_map(|dir| path.find(dir).map(|i| &path[..i + dir.len() - 1]))
    .unwrap_or(path);
    assert!(
        std::fs::symlink_metadata(ws.join(path)).is_err(),
        "{case}: {path} is still there\n{env}"
    );
    let aside = format!("{entry}.coder-quarantine-1{}", &path[entry.len()..]);
    let kept = std::fs::read_to_string(ws.join(&aside)).unwrap_or_default();
    assert!(
        kept.contains(AGENT),
        "{case}: {aside} does not hold what the agent wrote: {kept:?}\n{env}"
    );
    let full = ws.join(entry).display().to_string();
    assert!(
        warned(env, "tool-config guard") && warned(env, &full),
        "{case}: no warning names {full}\n{env}"
    );
    let reported = env["sandbox"]["quarantined"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|q| q["path"] == full.as_str() && q["kind"] == "tool_config");
    assert!(reported, "{case}: sandbox.quarantined lacks {full}\n{env}");
}

/// The user's nested configs, rewritten: held read-only like the root's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn nested_tool_configs_the_user_has_are_not_the_agents_to_rewrite() {
    run(&Attack {
        name: "nested existing",
        files: &[
            ("pkg/.claude/settings.json", "{}\n"),
            ("pkg/.mcp.json", "{\"mcpServers\":{}}\n"),
            ("pkg/CLAUDE.local.md", "notes\n"),
            ("app/.vscode/tasks.json", "{}\n"),
            ("app/.envrc", "export A=1\n"),
        ],
        payload: "for f in pkg/.claude/settings.json pkg/.mcp.json pkg/CLAUDE.local.md \
                  app/.vscode/tasks.json app/.envrc; do \
                  echo 'touch /tmp/x # AGENT-PAYLOAD' > $f || exit 1; done; echo PLANTED",
        read_later: &[
            "pkg/.claude/settings.json",
            "pkg/.mcp.json",
            "pkg/CLAUDE.local.md",
            "app/.vscode/tasks.json",
            "app/.envrc",
        ],
    });
}

/// New nested configs: no placeholder can hold every directory's name, so the end-of-run
/// guard moves them aside.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn nested_tool_configs_the_agent_makes_are_moved_aside() {
    run(&Attack {
        name: "nested created",
        files: &[("pkg/lib.rs", "fn f() {}\n")],
        payload: "mkdir -p pkg/.claude new/.vscode && \
                  echo '{\"hooks\":{\"Stop\":[{\"hooks\":[{\"type\":\"command\",\
                  \"command\":\"touch /tmp/x\"}]}]}} AGENT-PAYLOAD' \
                  > pkg/.claude/settings.json && \
                  echo '{\"mcpServers\":{\"x\":{\"command\":\"sh\"}}} AGENT-PAYLOAD' \
                  > pkg/.mcp.json && \
                  echo 'AGENT-PAYLOAD' > new/.vscode/tasks.json && \
                  echo 'touch /tmp/x # AGENT-PAYLOAD' > new/.envrc && \
                  echo 'AGENT-PAYLOAD' > pkg/CLAUDE.local.md && echo PLANTED",
        read_later: &[
            "pkg/.claude/settings.json",
            "pkg/.mcp.json",
            "new/.vscode/tasks.json",
            "new/.envrc",
            "pkg/CLAUDE.local.md",
        ],
    });
}

/// The git hook managers' configs the user has, at the root and nested: held read-only.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn hook_manager_configs_the_user_has_are_not_the_agents_to_rewrite() {
    run(&Attack {
        name: "hook managers existing",
        files: &[
            (".pre-commit-config.yaml", "repos: []\n"),
            ("lefthook.yml", "pre-commit:\n  commands: {}\n"),
            ("web/.lintstagedrc.json", "{}\n"),
            ("web/package.json", "{}\n"),
            (".simple-git-hooks.json", "{}\n"),
        ],
        payload: "for f in .pre-commit-config.yaml lefthook.yml web/.lintstagedrc.json \
                  .simple-git-hooks.json; do \
                  echo '# AGENT-PAYLOAD' >> $f || exit 1; done; echo PLANTED",
        read_later: &[
            ".pre-commit-config.yaml",
            "lefthook.yml",
            "web/.lintstagedrc.json",
            ".simple-git-hooks.json",
        ],
    });
}

/// New hook manager configs, at the root and nested: moved aside at the run's end.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn hook_manager_configs_the_agent_makes_are_moved_aside() {
    run(&Attack {
        name: "hook managers created",
        files: &[("web/package.json", "{}\n")],
        payload: "printf 'repos:\\n- repo: local\\n  hooks:\\n  - id: x\\n    name: x\\n    \
                  entry: touch /tmp/x\\n    language: system\\n# AGENT-PAYLOAD\\n' \
                  > .pre-commit-config.yaml && \
                  printf 'pre-commit:\\n  commands:\\n    x:\\n      run: touch /tmp/x # \
                  AGENT-PAYLOAD\\n' > web/.lefthook.yaml && \
                  echo 'export default {\"*\": \"touch /tmp/x\"} // AGENT-PAYLOAD' \
                  > web/lint-staged.config.mjs && \
                  echo '{\"pre-commit\":\"touch /tmp/x\"} AGENT-PAYLOAD' \
                  > simple-git-hooks.json && echo PLANTED",
        read_later: &[
            ".pre-commit-config.yaml",
            "web/.lefthook.yaml",
            "web/lint-staged.config.mjs",
            "simple-git-hooks.json",
        ],
    });
}

/// A coder killed before its end-of-run guard: its record (in its run directory) carries
/// the protected globs and what its scan held, and the next coder with the same state
/// directory moves aside what that run's agent made. The control is the hole in between:
/// the agent's nested configs are in place until the next run.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_tool_configs_of_a_killed_run_are_moved_aside_by_the_next_one() {
    const REPO: RepoStyle = RepoStyle {
        prefix: "coder-toolcfg-killed-",
        init: &["init", "-q"],
        readme_owned: false,
        env: &[],
    };
    for nobody in arms() {
        let fx = GitFx::new(&REPO, nobody);
        let mut child = fx
            .command(common::CODER)
            .args(["sandbox", "--cd"])
            .arg(fx.ws())
            .args([
                "--",
                "sh",
                "-c",
                "mkdir -p pkg/.claude sub && echo AGENT-PAYLOAD > pkg/.claude/settings.json && \
                 echo AGENT-PAYLOAD > sub/.envrc && echo READY && exec sleep 60",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::sandbox_fixture::kill_coder_when_ready(&mut child);
        let ws = fx.ws();
        // The hole a killed run leaves, until the next coder runs.
        for path in ["pkg/.claude/settings.json", "sub/.envrc"] {
            let text = std::fs::read_to_string(ws.join(path)).unwrap_or_default();
            assert!(text.contains(AGENT), "nobody={nobody}: control: {path}");
        }
        let (rc, out) = fx.sandbox("workspace-write", "echo RAN");
        assert_eq!(rc, 0, "{out}");
        for (entry, path, aside) in [
            (
                "pkg/.claude",
                "pkg/.claude/settings.json",
                "pkg/.claude.coder-quarantine-1/settings.json",
            ),
            ("sub/.envrc", "sub/.envrc", "sub/.envrc.coder-quarantine-1"),
        ] {
            assert!(
                std::fs::symlink_metadata(ws.join(path)).is_err(),
                "nobody={nobody}: {path} is still there: {out}"
            );
            let kept = std::fs::read_to_string(ws.join(aside)).unwrap_or_default();
            assert!(kept.contains(AGENT), "nobody={nobody}: {aside}: {out}");
            assert!(
                out.lines().any(
                    |l| l.contains("after an earlier run whose coder was killed")
                        && l.contains("tool-config guard")
                        && l.contains(&ws.join(entry).display().to_string())
                ),
                "nobody={nobody}: not reported: {out}"
            );
        }
    }
}

/// Another run's placeholder is not taken away from it. Run A (workspace `ws`) starts
/// first; run B (workspace `ws/sub`, the same state directory) starts while A's agent works
/// and holds `sub/.claude` absent with a read-only placeholder, which A's scan never saw:
/// A's agent writes `sub/.claude/settings.json` into it (the directory is a plain one in
/// A's namespace) and A ends. A's guard moves the agent's file aside but leaves the
/// directory where it is: renamed, B's read-only mount of it would have gone with it, and
/// B's agent, still running, would have made `.claude/settings.json` (whose hooks B's CLI
/// runs) in the freed name.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_runs_guard_leaves_another_runs_placeholder_in_place() {
    const REPO: RepoStyle = RepoStyle {
        prefix: "coder-toolcfg-beside-",
        init: &["init", "-q"],
        readme_owned: false,
        env: &[],
    };
    for nobody in arms() {
        let fx = GitFx::new(&REPO, nobody);
        let ws = fx.ws();
        let sub = ws.join("sub");
        std::fs::create_dir(&sub).unwrap();
        fx.own_entry(&sub);
        let wait_for = |path: &std::path::Path| {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !path.exists() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no {}",
                    path.display()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let a = fx
            .sandbox_in(
                &ws,
                &[],
                "touch a-started; i=0; while [ ! -e sub/b-started ] && [ $i -lt 2000 ]; do \
                 sleep 0.01; i=$((i+1)); done; \
                 echo AGENT-PAYLOAD > sub/.claude/settings.json && echo A-WROTE",
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&ws.join("a-started"));
        let b = fx
            .sandbox_in(
                &sub,
                &[],
                "touch b-started; i=0; while [ ! -e go ] && [ $i -lt 3000 ]; do \
                 sleep 0.01; i=$((i+1)); done; \
                 mkdir -p .claude 2>/dev/null; \
                 (echo AGENT-PAYLOAD > .claude/settings.json) 2>/dev/null && echo B-WROTE; \
                 echo B-DONE",
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let a = a.wait_with_output().unwrap();
        let a_out = common::sandbox_fixture::printed(&a);
        assert!(a_out.contains("A-WROTE"), "nobody={nobody}: A: {a_out}");
        assert!(
            a_out.contains("tool-config guard") && a_out.contains("sub/.claude"),
            "nobody={nobody}: A's guard: {a_out}"
        );
        std::fs::write(sub.join("go"), "").unwrap();
        let b = b.wait_with_output().unwrap();
        let b_out = common::sandbox_fixture::printed(&b);
        assert!(b_out.contains("B-DONE"), "nobody={nobody}: B: {b_out}");
        assert!(
            !b_out.contains("B-WROTE"),
            "nobody={nobody}: B's agent made .claude/settings.json: {a_out}\n{b_out}"
        );
        let kept = std::fs::read_to_string(sub.join(".claude.coder-quarantine-1/settings.json"))
            .unwrap_or_default();
        assert!(kept.contains(AGENT), "nobody={nobody}: {a_out}\n{b_out}");
    }
}

/// `--no-protect` keeps its meaning: no default glob holds, so the agent's nested configs
/// stay where it wrote them and nothing is moved aside; a `--protect` glob given with it
/// is held, and what appears under it is moved aside like a default's.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn no_protect_drops_the_defaults_and_a_protect_glob_is_guarded() {
    common::require_root_and_user_namespaces();
    for owner in [None, Some(NOBODY)] {
        let tree = Tree::repo(
            "coder-toolcfg-noprotect-",
            owner,
            &["ws/tools/a"],
            &[("tools/a/run.sh", "echo hi\n")],
            &[],
        );
        let env = tree.run(
            &["--no-protect", "--protect", "tools/*/*.sh"],
            "mkdir -p pkg/.claude tools/b && \
             echo AGENT-PAYLOAD > pkg/.claude/settings.json && \
             (echo AGENT-PAYLOAD > tools/a/run.sh) 2>/dev/null; \
             echo AGENT-PAYLOAD > tools/b/new.sh && echo PLANTED",
        );
        let ws = tree.ws();
        let case = who(owner);
        let read = |rel: &str| std::fs::read_to_string(ws.join(rel)).unwrap_or_default();
        assert!(
            read("pkg/.claude/settings.json").contains(AGENT),
            "{case}: --no-protect held a default glob\n{env}"
        );
        assert_eq!(read("tools/a/run.sh"), "echo hi\n", "{case}\n{env}");
        assert!(!ws.join("tools/b/new.sh").exists(), "{case}\n{env}");
        assert!(
            read("tools/b/new.sh.coder-quarantine-1").contains(AGENT),
            "{case}\n{env}"
        );
        let moved: Vec<&str> = env["sandbox"]["quarantined"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|q| q["path"].as_str())
            .collect();
        assert_eq!(
            moved,
            vec![ws.join("tools/b/new.sh").display().to_string()],
            "{case}\n{env}"
        );
    }
}

/// Packages ship tool configs (`.vscode/`, `.husky/`, `.envrc`): held read-only in
/// `node_modules`, they made `npm ci`, which removes the tree first, fail with "Read-only
/// file system", and the end-of-run guard moved aside what an install added. The
/// protected globs do not reach below `node_modules`, `vendor` or `site-packages`: no
/// program of the user's reads a package's tool configs. Control: the same names outside
/// a dependency tree are held.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_dependency_trees_tool_configs_are_the_installers_to_replace() {
    common::require_root_and_user_namespaces();
    let shipped = [
        "node_modules/pkg/.vscode/settings.json",
        "web/node_modules/@s/pkg/.husky/pre-commit",
        "vendor/github.com/x/y/.envrc",
        ".venv/lib/python3.12/site-packages/p/.vscode/launch.json",
    ];
    for owner in [None, Some(NOBODY)] {
        let case = who(owner);
        let mut files: Vec<(&str, &str)> = shipped.iter().map(|p| (*p, "{}\n")).collect();
        files.push(("lib/.vscode/settings.json", "{}\n"));
        let dirs: Vec<String> = files
            .iter()
            .filter_map(|(path, _)| std::path::Path::new(path).parent())
            .map(|dir| format!("ws/{}", dir.display()))
            .collect();
        let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
        let tree = Tree::repo("coder-toolcfg-", owner, &dirs, &files, &[]);
        // What `npm ci` does: each package's files removed, then written again.
        let payload = format!(
            "for f in {}; do d=$(dirname $f); rm -rf $d && mkdir -p $d && \
             echo AGENT-PAYLOAD > $f || exit 1; done; \
             echo AGENT-PAYLOAD > lib/.vscode/settings.json 2>/dev/null || echo HELD; \
             echo PLANTED",
            shipped.join(" ")
        );
        let env = tree.run(&["--sandbox", "workspace-write"], &payload);
        let result = env["result"].as_str().unwrap_or_default();
        assert!(
            result.contains("PLANTED") && result.contains("HELD"),
            "{case}: {env}"
        );
        let ws = tree.ws();
        for path in shipped {
            let text = std::fs::read_to_string(ws.join(path)).unwrap_or_default();
            assert!(
                text.contains("AGENT-PAYLOAD"),
                "{case}: {path}: {text:?}\n{env}"
            );
        }
        assert_eq!(
            std::fs::read_to_string(ws.join("lib/.vscode/settings.json")).unwrap(),
            "{}\n",
            "{case}: control: {env}"
        );
        assert!(!warned(&env, "tool-config guard"), "{case}: {env}");
    }
}
