//! A script a held script runs by path that is absent at the start (an optional
//! `tools/local.sh`, a generated `tools/gen.sh`) is moved aside at the run's end if the
//! run made it. Until round twenty-nine it was the agent's to make (a Known limit since
//! round twenty-one: a placeholder would stop the agent's build from making such a
//! file), and the user's next `git fmt` ran the agent's payload outside the sandbox; the
//! same plant naming 1,100 scripts refused every later run (the held scripts' cap, round
//! twenty-seven's ratchet). Through the built binary, root and uid 65534, each with an
//! unconfined control (`--mode danger-full-access`), and what stays the agent's: a
//! program of a build's output directory (`target/`, `node_modules/`), and a script the
//! held script only reads where it exists.

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD, run_text};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-made-scripts-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// The user's `git fmt` runs `tools/ci.sh`, whose text is `ci`.
fn user_ci(fx: &Fx, ws: &Path, ci: &str) {
    fx.own_file(ws, "tools/ci.sh", ci);
    fx.git(ws, &["config", "alias.fmt", "!sh tools/ci.sh"]);
}

/// The agent makes the script the user's held `tools/ci.sh` runs when it is there, in
/// three spellings (a test first, a path from the top, the script's own directory), and
/// by the way to it: a directory absent at the start made a link to one of the agent's,
/// and one that was there renamed and replaced by such a link. The user's `git fmt` runs
/// it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_script_a_held_script_runs_that_the_agent_made_is_moved_aside() {
    let made = |path: &str| {
        format!(
            "mkdir -p \"$(dirname {path})\" && {{ {SCRIPT_PAYLOAD}; }} > {path} && echo PLANTED"
        )
    };
    let linked = format!(
        "mkdir -p elsewhere && {{ {SCRIPT_PAYLOAD}; }} > elsewhere/all.sh && \
         {{ mv tools/gen tools/old; ln -s ../elsewhere tools/gen; }} 2>/dev/null; echo PLANTED"
    );
    // (name, the held script, a directory of the user's, the agent's plant)
    let attacks: [(&str, &str, Option<&str>, String); 5] = [
        (
            "optional local script",
            "[ -f tools/local.sh ] && sh tools/local.sh\necho ci\n",
            None,
            made("tools/local.sh"),
        ),
        (
            "generated script",
            "sh tools/gen/all.sh\n",
            None,
            made("tools/gen/all.sh"),
        ),
        (
            "beside the script",
            "sh \"$(dirname \"$0\")/hook.sh\"\n",
            None,
            made("tools/hook.sh"),
        ),
        (
            "a link made on the way",
            "sh tools/gen/all.sh\n",
            None,
            linked.clone(),
        ),
        (
            "a directory on the way replaced by a link",
            "sh tools/gen/all.sh\n",
            Some("tools/gen/README"),
            linked,
        ),
    ];
    for (name, ci, user_dir, plant) in attacks {
        let setup = |fx: &Fx, ws: &Path| {
            user_ci(fx, ws, ci);
            if let Some(file) = user_dir {
                fx.own_file(ws, file, "the user's\n");
            }
        };
        sandbox_fixture::held_file_attack(&REPO, &[], name, setup, &plant, &["fmt"]);
    }
}

/// The guard says what it moved (a script the user's git runs, not a protected tool
/// config) and where, and the file is kept there for the user to look at; a later run in
/// the same workspace starts (the plant of round twenty-seven's cap ratchet no longer
/// refuses it). Both arms.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_moved_script_is_reported_and_kept_and_later_runs_start() {
    const CAP_PLANT: &str = r#"mkdir -p tools/g && i=0 && while [ $i -lt 1100 ]; do i=$((i+1)); : > tools/g/$i.sh; echo "sh tools/g/$i.sh"; done > tools/gen.sh && echo PLANTED"#;
    for nobody in sandbox_fixture::arms() {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        user_ci(&fx, &ws, "sh tools/gen.sh\n");
        let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], CAP_PLANT));
        assert!(rc == 0 && out.contains("PLANTED"), "nobody={nobody}: {out}");
        let line = out
            .lines()
            .find(|l| l.contains("tool-config guard: moved") && l.contains("tools/gen.sh"))
            .unwrap_or_else(|| panic!("nobody={nobody}: the move is reported: {out}"));
        // Said as what it is: a script the user's git runs, not a protected tool config.
        assert!(
            line.contains("a script your git commands") && !line.contains("protected"),
            "nobody={nobody}: {line}"
        );
        assert!(!ws.join("tools/gen.sh").exists(), "nobody={nobody}: moved");
        let kept = std::fs::read_dir(ws.join("tools"))
            .unwrap()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("gen.sh.coder-quarantine")
            });
        assert!(kept, "nobody={nobody}: kept beside its place for the user");
        let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], "echo LATER-RAN"));
        assert!(
            rc == 0 && out.contains("LATER-RAN"),
            "nobody={nobody}: a later run starts: rc {rc}: {out}"
        );
    }
}

/// What stays the agent's: a program of a build's output directory absent at the start
/// (`target/debug/fmt`, `node_modules/.bin/lint`, `build/bin/tool`, `out/x`: the agent's
/// build makes it, and the user's hook runs what the build made), and an `out/` there at
/// the start, which the agent's clean build removes whole (round twenty-nine's second
/// review: a `build/` so pinned failed `rm -rf build`). Both arms.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_build_output_a_held_script_runs_stays_where_the_agent_built_it() {
    const BUILT: [&str; 4] = [
        "target/debug/fmt",
        "node_modules/.bin/lint",
        "build/bin/tool",
        "out/x",
    ];
    for nobody in sandbox_fixture::arms() {
        let fx = Fx::new(&REPO, nobody);
        let ws = fx.ws();
        let runs: String = BUILT.iter().map(|p| format!("./{p}\n")).collect();
        user_ci(&fx, &ws, &runs);
        fx.own_file(&ws, "out/README", "old output\n");
        let build = format!(
            "rm -rf out && for f in {}; do mkdir -p \"$(dirname $f)\" && \
             printf '#!/bin/sh\\n' > $f && chmod +x $f; done && echo BUILT",
            BUILT.join(" ")
        );
        let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], &build));
        assert!(rc == 0 && out.contains("BUILT"), "nobody={nobody}: {out}");
        assert!(!out.contains("guard: moved"), "nobody={nobody}: {out}");
        for path in BUILT {
            assert!(ws.join(path).exists(), "nobody={nobody}: {path}: {out}");
        }
        assert!(!ws.join("out/README").exists(), "nobody={nobody}: {out}");
    }
}
