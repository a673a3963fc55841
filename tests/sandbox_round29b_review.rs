//! Round twenty-nine's second review: the lead's made-scripts guard (a script a held
//! script runs by path, absent at the start, moved aside at the run's end if the run made
//! it) and the setup's cancel and byte budget, attacked by one who has read the code,
//! through the built binary, root and uid 65534, each with an unconfined control
//! (`--mode danger-full-access`).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, GitFx as Fx, RepoStyle, SCRIPT_PAYLOAD};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round29b-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
/// A name with a glob character or a backslash in it: the reader takes no such word for a
/// file's name (`may_name_a_file`: it cannot tell a quoted word from one the shell
/// expands), so nothing is held or moved aside for it.
const KNOWN_OPEN: &[&str] = &["a backslash in the name", "glob characters in the name"];

/// The user's `git fmt` runs `tools/ci.sh`, whose bytes are `ci`.
fn user_ci(fx: &Fx, ws: &Path, ci: &[u8]) {
    let path = fx.own_file(ws, "tools/ci.sh", "");
    std::fs::write(path, ci).unwrap();
    fx.git(ws, &["config", "alias.fmt", "!sh tools/ci.sh"]);
}

/// The agent's plant: the payload written at the shell word `path` (quoted as needed),
/// its directory made first.
fn made(path: &str) -> String {
    format!(
        "p={path} && mkdir -p \"$(dirname \"$p\")\" && {{ {SCRIPT_PAYLOAD}; }} > \"$p\" && echo PLANTED"
    )
}

/// One attack: the user's `tools/ci.sh` is `ci`, the agent runs `plant`, the user runs
/// `git fmt`. Both arms; control unconfined.
fn attack(name: &str, ci: &[u8], plant: &str) {
    if std::env::var("A29B_ONLY").is_ok_and(|o| o != name) {
        return;
    }
    let setup = |fx: &Fx, ws: &Path| user_ci(fx, ws, ci);
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, plant, &["fmt"]);
}

/// Names the guard's glob must spell literally: a backslash, glob characters, bytes that
/// are not UTF-8.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn made_scripts_with_unusual_names_are_moved_aside() {
    attack(
        "a backslash in the name",
        b"sh 'tools/a\\b.sh'\n",
        &made(r"'tools/a\b.sh'"),
    );
    attack(
        "glob characters in the name",
        b"sh 'tools/[x]*?.sh'\n",
        &made("'tools/[x]*?.sh'"),
    );
    attack(
        "a name that is not UTF-8",
        b"sh tools/\xff.sh\n",
        &made(r"$(printf 'tools/\377.sh')"),
    );
}

/// Ways to the file: `..` in it, the script's directory entered first, a hard link and a
/// symlink made at the name.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn made_scripts_by_other_ways_are_moved_aside() {
    attack(
        "dotdot from the script's directory",
        b"sh \"$(dirname \"$0\")/../scripts/lint.sh\"\n",
        &made("scripts/lint.sh"),
    );
    attack(
        "dotdot from the script's directory entered",
        b"cd \"$(dirname \"$0\")/..\" && sh scripts/lint.sh\n",
        &made("scripts/lint.sh"),
    );
    attack(
        "dotdot from the top",
        b"sh tools/../scripts/lint.sh\n",
        &made("scripts/lint.sh"),
    );
    attack(
        "the script's directory entered",
        b"cd \"$(dirname \"$0\")\" && sh ./local.sh\n",
        &made("tools/local.sh"),
    );
    attack(
        "a hard link made at the name",
        b"sh tools/local.sh\n",
        &format!(
            "{{ {SCRIPT_PAYLOAD}; }} > tools/other.sh && ln tools/other.sh tools/local.sh && echo PLANTED"
        ),
    );
    attack(
        "a symlink made at the name",
        b"sh tools/local.sh\n",
        &format!(
            "{{ {SCRIPT_PAYLOAD}; }} > other.sh && ln -s ../other.sh tools/local.sh && echo PLANTED"
        ),
    );
}
