//! Round seventeen's second review: the holds of round seventeen on what a user's git
//! reads as config or runs as a hook (`src/sandbox/scan.rs`: other names of held files,
//! included files held absent, includes in a `--write` directory), attacked by someone who
//! has read them. Every attack runs as root and as uid 65534, each with a control
//! (`danger-full-access`) showing that the user's own next git runs the agent's payload
//! without the defence.
//!
//! Found open when this review started, closed with it:
//! * **An include spelled with `~/`.** The scan skipped every include starting with `~`
//!   ("the home directory is never in a writable tree"), but a workspace under the home
//!   directory is the usual case: `include.path = ~/proj/shared.gitconfig` left the file
//!   the agent's. `~/` and `~user/` are expanded as git expands them now.
//! * **A missing directory followed by `..`.** `include.path = ../missing/../x`: git finds
//!   nothing while `missing` is absent, but the scan's placeholder for it (an empty
//!   directory) made the path resolve, during the run, to `x`, which nothing held: the
//!   user's `git status` meanwhile (or after the run, while a concurrent run keeps the
//!   placeholder) read the agent's `x`. A missing name with `..` after it is held by a
//!   symlink to nowhere now, under which no path resolves.
//! * **A file on the way to the included path.** `include.path = ../README/x`, `README` a
//!   file: git finds nothing (`ENOTDIR`), and nothing was held: the agent replaced
//!   `README` with a directory holding `x`. The name that is not a directory is pinned
//!   now (still writable, not removable nor replaceable).
//!
//! * **A directory between a link and the included file.** `shared.gitconfig ->
//!   conf/real.gitconfig`: the link and the file were held, not `conf`, which the agent
//!   renamed and replaced with its own. The directory the resolved way ends in is pinned.
//! * **A hook linked into the work tree.** `.git/hooks/pre-commit ->
//!   ../../tools/pre-commit` (present or absent): `hooks/` was held, `tools/pre-commit`
//!   the agent's. What a symlink in a held directory leads to is held now.
//! * **The hooks of a repository above the workspace** (a workspace `sub/`), with a hard
//!   link or a symlink into it: held by nothing. They are looked at now.
//! * **Includes reached from outside every tree**: a symlink there into the workspace,
//!   or the includes of such a file, were held by no tree; and the user's global and
//!   system configs were not read at all (`~/.gitconfig` including a dotfiles
//!   workspace's file, or a link or a hard link into it; the enclosing repository's
//!   `config` with a hard link into a workspace below it).
//!
//! Blocked by the defences already there: includes spelled with `//`, `./`, an absolute
//! path, `..` of an existing directory, `includeIf "onbranch:"` on a branch the agent
//! makes; a hook's other name in a `--write` directory; the ledger and the work tree
//! after a run show nothing of the placeholders. Tried by hand, not kept as a test: an
//! earlier agent filling a nested repository's `hooks/` with 100 001 files to put the
//! next run's look into held directories over its cap (the end-of-run git guard moves
//! them into a quarantine directory, which is not held).
//!
//! No ratchet is left open here; what remains is in SECURITY.md, Known limits.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, Launch, RepoStyle};
use common::{KillOnDrop, wait_for_path, wait_within};

const REPO: RepoStyle = RepoStyle {
    prefix: "coder-r17b-",
    init: &["init", "-q"],
    readme_owned: true,
    env: &[],
};

/// The payload: a config that runs `touch $M` on the user's next `git status`.
const PAYLOAD: &str = "printf '[core]\\n\\tfsmonitor = touch %s; false\\n' \"$M\"";

/// What the user runs after the agent: `git status`, or a commit (which runs hooks).
const STATUS: &[&str] = &["status", "--short"];
const COMMIT: &[&str] = &["commit", "-q", "--allow-empty", "-m", "user's commit"];

/// How an attack is expected to end confined.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Confined {
    /// The user's git does not run the payload.
    Blocked,
    /// Known open: it still does (a ratchet; make it `Blocked` once fixed).
    Open,
}

/// One attack per arm and mode: `fixture` makes the arm's [`Fx`], `setup` prepares the
/// workspace (returning where `coder sandbox` starts, relative to the workspace, and its
/// extra arguments), `script` attacks and prints `PLANTED`; then the user's own `user` git
/// in the workspace. Unconfined (the control) it must run the payload; confined as
/// `expect` says.
fn attack_with(
    name: &str,
    fixture: fn(bool) -> Fx,
    setup: fn(&Fx, &Path) -> (String, Vec<String>),
    script: &str,
    user: &[&str],
    expect: Confined,
) {
    let launch = |fx: &Fx, ws: &Path| {
        let (cd, args) = setup(fx, ws);
        Launch { cd, args }
    };
    let open = expect == Confined::Open;
    sandbox_fixture::held_attack(name, open, &fixture, &launch, script, user);
}

fn plain(nobody: bool) -> Fx {
    Fx::new(&REPO, nobody)
}

fn attack(
    name: &str,
    setup: fn(&Fx, &Path) -> (String, Vec<String>),
    script: &str,
    user: &[&str],
    expect: Confined,
) {
    attack_with(name, plain, setup, script, user, expect);
}

fn include(fx: &Fx, ws: &Path, value: &str) {
    fx.git(ws, &["config", "--add", "include.path", value]);
}

fn at_root() -> (String, Vec<String>) {
    (String::new(), Vec::new())
}

/// The user's `HOME` is the directory above the workspace (a workspace `~/ws`), and the
/// config includes `~/ws/shared.gitconfig`: git expands `~/` and reads the workspace's
/// file, the scan skipped every include starting with `~`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_include_spelled_from_the_home_directory_is_held() {
    attack_with(
        "~/ include",
        home_above,
        |fx, ws| {
            fx.own_file(ws, "shared.gitconfig", "");
            include(fx, ws, "~/ws/shared.gitconfig");
            at_root()
        },
        &format!("{PAYLOAD} >> shared.gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
}

/// `include.path = ../missing/../shared.gitconfig`: git includes nothing while `missing`
/// is absent, and the agent may not make it; but the scan's own placeholder there (an
/// empty directory) made the path resolve to `shared.gitconfig`, which nothing held, for
/// as long as the run lasted. The user's `git status` during the run read the agent's
/// payload. (Unconfined, the agent makes `missing` itself.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_placeholder_does_not_make_an_include_with_dot_dot_resolve() {
    let script = format!(
        "mkdir missing 2>/dev/null; {PAYLOAD} >> shared.gitconfig; : > planted; \
         i=0; while [ ! -e go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; \
         echo PLANTED"
    );
    for nobody in sandbox_fixture::arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = plain(nobody);
            let ws = fx.ws();
            fx.own_file(&ws, "shared.gitconfig", "");
            fx.own_entry(&ws);
            include(&fx, &ws, "../missing/../shared.gitconfig");
            let mut cmd = fx.sandbox_in(&ws, &["--mode", mode], &script);
            cmd.env("M", fx.marker())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = KillOnDrop::spawn(&mut cmd);
            wait_for_path(&ws.join("planted"), Duration::from_secs(30));
            let git_out = fx.git(&ws, STATUS);
            let ran = fx.marker().exists();
            std::fs::write(ws.join("go"), "").unwrap();
            let status = wait_within(&mut child, Duration::from_secs(60));
            assert!(status.success(), "nobody={nobody} {mode}: {status:?}");
            assert_eq!(
                ran,
                mode == "danger-full-access",
                "nobody={nobody} {mode}: the user's git during the run ran the payload: \
                 {ran}\n{git_out}"
            );
        }
    }
}

/// `include.path = ../README/shared.gitconfig`, `README` a tracked file: git finds nothing
/// there (`ENOTDIR`), and nothing was held. The agent replaces `README` with a directory
/// holding the included file.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_file_on_the_way_to_an_included_path_is_not_replaced_by_a_directory() {
    attack(
        "file on the way",
        |fx, ws| {
            fx.own_entry(ws);
            include(fx, ws, "../README/shared.gitconfig");
            at_root()
        },
        &format!(
            "rm -f README && mkdir README && {PAYLOAD} > README/shared.gitconfig; echo PLANTED"
        ),
        STATUS,
        Confined::Blocked,
    );
}

/// A hook that is a symlink into the work tree (`.git/hooks/pre-commit ->
/// ../../tools/pre-commit`, the usual way a project installs its hooks): `hooks/` is held,
/// the file the link leads to is the agent's to write.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hook_linked_into_the_work_tree_is_not_the_agents_to_write() {
    attack(
        "symlinked hook",
        |fx, ws| {
            let tool = fx.own_file(ws, "tools/pre-commit", "#!/bin/sh\n");
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::symlink("../../tools/pre-commit", ws.join(".git/hooks/pre-commit"))
                .unwrap();
            at_root()
        },
        "printf 'touch \"%s\"\\n' \"$M\" >> tools/pre-commit; echo PLANTED",
        COMMIT,
        Confined::Blocked,
    );
}

/// The same hook link, its target made by the agent: absent at the start (a hook the
/// project has not written yet), or in a directory of its own put in place of `tools`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hook_link_is_not_filled_nor_redirected() {
    const HOOK: &str = "printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\"";
    fn linked(fx: &Fx, ws: &Path, with_file: bool) {
        fx.own_file(ws, "tools/README", "");
        if with_file {
            let tool = fx.own_file(ws, "tools/pre-commit", "#!/bin/sh\n");
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        fx.own_entry(ws);
        std::os::unix::fs::symlink("../../tools/pre-commit", ws.join(".git/hooks/pre-commit"))
            .unwrap();
    }
    attack(
        "hook link to a missing file",
        |fx, ws| {
            linked(fx, ws, false);
            at_root()
        },
        &format!("{HOOK} > tools/pre-commit; chmod +x tools/pre-commit; echo PLANTED"),
        COMMIT,
        Confined::Blocked,
    );
    attack(
        "hook link into a renamed directory",
        |fx, ws| {
            linked(fx, ws, true);
            at_root()
        },
        &format!(
            "mv tools tools2 && mkdir tools && {HOOK} > tools/pre-commit && \
             chmod +x tools/pre-commit; echo PLANTED"
        ),
        COMMIT,
        Confined::Blocked,
    );
}

/// The workspace is a subdirectory (`sub/`) of the user's repository, whose hook has a
/// second name (a hard link) in it, or is a symlink into it: the repository's git dir is
/// outside the workspace and held by nothing, so neither was looked at.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hook_of_the_enclosing_repository_is_not_written_through_its_other_name() {
    attack(
        "enclosing hook+hard link",
        |fx, ws| {
            let tool = fx.own_file(ws, "sub/tools/pre-commit", "#!/bin/sh\n");
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::hard_link(&tool, ws.join(".git/hooks/pre-commit")).unwrap();
            ("sub".to_string(), Vec::new())
        },
        "printf 'touch \"%s\"\\n' \"$M\" >> tools/pre-commit; echo PLANTED",
        COMMIT,
        Confined::Blocked,
    );
    attack(
        "enclosing hook linked into the workspace",
        |fx, ws| {
            let tool = fx.own_file(ws, "sub/tools/pre-commit", "#!/bin/sh\n");
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::symlink(
                "../../sub/tools/pre-commit",
                ws.join(".git/hooks/pre-commit"),
            )
            .unwrap();
            ("sub".to_string(), Vec::new())
        },
        "printf 'touch \"%s\"\\n' \"$M\" >> tools/pre-commit; echo PLANTED",
        COMMIT,
        Confined::Blocked,
    );
}

/// Includes in every spelling git reads the same (`//`, `./`, an absolute path, a
/// trailing component reached through `..` of an existing directory, `includeIf` on a
/// branch the agent can switch to), each of an existing file: all held.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn includes_spelled_in_other_ways_are_held() {
    attack(
        "spellings",
        |fx, ws| {
            for file in ["a.gitconfig", "b.gitconfig", "c.gitconfig", "d/e.gitconfig"] {
                fx.own_file(ws, file, "");
            }
            fx.own_file(ws, "f.gitconfig", "");
            fx.own_entry(ws);
            include(fx, ws, "..//a.gitconfig");
            include(fx, ws, "./.././b.gitconfig");
            include(fx, ws, ws.join("c.gitconfig").to_str().unwrap());
            include(fx, ws, "../d/../d/e.gitconfig");
            fx.git(
                ws,
                &["config", "includeIf.onbranch:evil.path", "../f.gitconfig"],
            );
            at_root()
        },
        &format!(
            "for f in a.gitconfig b.gitconfig c.gitconfig d/e.gitconfig f.gitconfig; do \
             {PAYLOAD} >> $f 2>/dev/null; done; \
             git checkout -q -b evil 2>/dev/null; echo PLANTED"
        ),
        STATUS,
        Confined::Blocked,
    );
}

/// `shared.gitconfig -> conf/real.gitconfig`, included: the link and the file it leads
/// to were held, not the directory `conf` between them. The agent renames `conf` and
/// makes its own, holding a `real.gitconfig` of its own.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_directory_a_linked_include_leads_into_is_not_renamed() {
    attack(
        "renamed directory behind a link",
        |fx, ws| {
            fx.own_file(ws, "conf/real.gitconfig", "");
            std::os::unix::fs::symlink("conf/real.gitconfig", ws.join("shared.gitconfig")).unwrap();
            fx.own_entry(&ws.join("shared.gitconfig"));
            fx.own_entry(ws);
            include(fx, ws, "../shared.gitconfig");
            at_root()
        },
        &format!("mv conf conf2 && mkdir conf && {PAYLOAD} > conf/real.gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
}

/// [`an_include_spelled_from_the_home_directory_is_held`]'s fixture: the user's `HOME` is
/// the directory above the workspace.
fn home_above(nobody: bool) -> Fx {
    let fx = Fixture::new(REPO.prefix, nobody, &["ws", "home", "state"]);
    let root = fx.root().to_path_buf();
    Fx::on(fx.with_var("HOME", root), &REPO)
}

/// The user's *global* config (`~/.gitconfig`) includes a file of the workspace (a
/// dotfiles repository, `~/ws`, shared settings kept in it), or is itself a symlink into
/// it (`stow`): only repository configs were read, and the agent wrote the file the
/// user's every git reads.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_users_global_config_is_not_written_through_the_workspace() {
    attack_with(
        "global include",
        home_above,
        |fx, ws| {
            fx.own_file(ws, "git/extra.gitconfig", "");
            let global = ws.parent().unwrap().join(".gitconfig");
            std::fs::write(&global, "[include]\n\tpath = ~/ws/git/extra.gitconfig\n").unwrap();
            fx.own_entry(&global);
            at_root()
        },
        &format!("{PAYLOAD} >> git/extra.gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
    attack_with(
        "global config linked into the workspace",
        home_above,
        |fx, ws| {
            fx.own_file(ws, "gitconfig", "");
            let global = ws.parent().unwrap().join(".gitconfig");
            std::os::unix::fs::symlink("ws/gitconfig", &global).unwrap();
            fx.own_entry(&global);
            at_root()
        },
        &format!("{PAYLOAD} >> gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
    attack_with(
        "global config with another name in the workspace",
        home_above,
        |fx, ws| {
            fx.own_file(ws, "gitconfig", "");
            let global = ws.parent().unwrap().join(".gitconfig");
            std::fs::hard_link(ws.join("gitconfig"), &global).unwrap();
            at_root()
        },
        &format!("{PAYLOAD} >> gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
    attack(
        "enclosing config with another name in the workspace",
        |fx, ws| {
            std::fs::create_dir_all(ws.join("sub")).unwrap();
            fx.own_entry(&ws.join("sub"));
            std::fs::hard_link(ws.join(".git/config"), ws.join("sub/repo.gitconfig")).unwrap();
            ("sub".to_string(), Vec::new())
        },
        &format!("{PAYLOAD} >> repo.gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
}

/// The placeholders of absent included files (a symlink to nowhere, an empty directory)
/// are coder's, not the agent's: a run that changes nothing lists no change, and nothing
/// of them is left in the work tree after it. Blocked (both arms).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_placeholders_of_absent_includes_are_not_changes() {
    use common::review_tree::{Tree, changes, result, who};
    for owner in sandbox_fixture::owners() {
        let tree = Tree::repo(
            "coder-r17b-ledger-",
            owner,
            &[],
            &[("README", "hello\n")],
            &[("include.path", "../absent.gitconfig")],
        );
        tree.git(&["config", "--add", "include.path", "../new/dir/x.gitconfig"]);
        tree.git(&["config", "--add", "include.path", "../m/../y.gitconfig"]);
        let env = tree.run(&[], "ls -d absent.gitconfig new m 2>&1; git status --short");
        let who = who(owner);
        assert!(
            result(&env).contains("absent.gitconfig") && result(&env).contains("new"),
            "{who}: the placeholders were not there during the run: {env}"
        );
        assert_eq!(
            changes(&env),
            Vec::<(String, String)>::new(),
            "{who}: {env}"
        );
        for name in ["absent.gitconfig", "new", "m", "y.gitconfig"] {
            assert!(
                std::fs::symlink_metadata(tree.ws().join(name)).is_err(),
                "{who}: {name} left in the work tree: {env}"
            );
        }
    }
}

/// Held files reached from elsewhere: the user's config includes a file outside every
/// tree that is a symlink into the workspace (it was passed on as "another tree's" and
/// held by none; fixed with the enclosing hooks), and a hook with its other name in a
/// `--write` directory (blocked: the second walk visits every tree).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn held_files_reached_from_outside_the_workspace_are_held() {
    attack(
        "include through a link outside",
        |fx, ws| {
            fx.own_file(ws, "shared.gitconfig", "");
            let outside = fx.root().join("outside");
            std::fs::create_dir_all(&outside).unwrap();
            std::os::unix::fs::symlink("../ws/shared.gitconfig", outside.join("link.gitconfig"))
                .unwrap();
            include(fx, ws, outside.join("link.gitconfig").to_str().unwrap());
            at_root()
        },
        &format!("{PAYLOAD} >> shared.gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
    attack(
        "include of an include outside",
        |fx, ws| {
            fx.own_file(ws, "shared.gitconfig", "");
            let outside = fx.root().join("outside");
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(
                outside.join("a.gitconfig"),
                "[include]\n\tpath = ../ws/shared.gitconfig\n",
            )
            .unwrap();
            include(fx, ws, outside.join("a.gitconfig").to_str().unwrap());
            at_root()
        },
        &format!("{PAYLOAD} >> shared.gitconfig; echo PLANTED"),
        STATUS,
        Confined::Blocked,
    );
    attack(
        "hook with its other name in a --write dir",
        |fx, ws| {
            let w = fx.root().join("w");
            std::fs::create_dir_all(&w).unwrap();
            fx.own_entry(&w);
            let tool = w.join("pre-commit");
            std::fs::write(&tool, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
            fx.own_entry(&tool);
            std::fs::hard_link(&tool, ws.join(".git/hooks/pre-commit")).unwrap();
            (
                String::new(),
                vec!["--write".to_string(), w.display().to_string()],
            )
        },
        "printf 'touch \"%s\"\\n' \"$M\" >> ../w/pre-commit; echo PLANTED",
        COMMIT,
        Confined::Blocked,
    );
}
