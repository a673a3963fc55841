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

use common::review_tree::{Tree, warned, who};
use common::sandbox_fixture::NOBODY;
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

/// The protected name at `path` (or the directory of protected names holding it) was
/// moved aside beside itself, with the agent's text, and the envelope says so.
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
        std::fs::symlink_metadata(ws.join(entry)).is_err(),
        "{case}: {entry} is still there\n{env}"
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
