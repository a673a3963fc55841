//! The CLI's per-run home in coder's scratch on a tmpfs (`config::scratch`, round
//! twenty): `/dev/shm/coder-<uid>` (or `$XDG_RUNTIME_DIR/coder`) instead of the state
//! directory. Each condition of the move, attacked through the binary as root and as uid
//! 65534:
//!
//! - `/dev/shm` is every user's and the name is predictable: a symlink or a directory that
//!   another user planted there first is never used (the run falls back to the state
//!   directory and says so), in both directions (65534 plants for root, root for 65534);
//! - the agent gets a private `/dev/shm`: the run's home is still there for the CLI, and
//!   nothing else of coder's scratch (another run's home with its login) is, nor can the
//!   agent move the path to its home;
//! - a `--write` or `--read` grant reaching the scratch is refused, as one reaching the
//!   state directory is;
//! - a small `/dev/shm` (Docker's 64 MiB) is passed over;
//! - what a run killed with SIGKILL left on the tmpfs is removed by the next run;
//! - the sandbox's run directory is there too (round twenty-one), the agent's `TMPDIR` on
//!   disk, and a killed run's git guard is done from its record on the tmpfs.
//!
//! Every scenario runs in a mount namespace of its own whose `/dev/shm` is a fresh tmpfs:
//! other tests and other users of this machine run coder at the same time, and a name
//! planted in the host's `/dev/shm` would be theirs too.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::sandbox_fixture::{self, NOBODY};
use common::{Bounded, CODER};

/// A tree for one arm: workspace `ws`, `home`, coder's `state`, in `/var/tmp`, given to
/// the arm's user, with a fake CLI running `payload`.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    victim: u32,
}

impl Tree {
    fn new(victim: u32, payload: &str) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("coder-scratch-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["ws", "home", "state", "xdg", "alias", "plain"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let bin = root.join("claude");
        std::fs::write(&bin, sandbox_fixture::payload_claude(payload)).unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        if victim == NOBODY {
            sandbox_fixture::give_to_nobody(&root);
        }
        Tree {
            _dir: dir,
            root,
            victim,
        }
    }

    fn attacker(&self) -> u32 {
        if self.victim == 0 { NOBODY } else { 0 }
    }

    /// The victim's scratch place in `/dev/shm`.
    fn shm_place(&self) -> String {
        format!("/dev/shm/coder-{}", self.victim)
    }

    /// Runs `script` as root in a mount namespace of its own whose `/dev/shm` is a fresh
    /// tmpfs mounted with `shm_opts`: what it printed. The script has `$VICTIM`,
    /// `$ATTACKER`, `$CODER`, `$ROOT`, `$PLACE` (the victim's `/dev/shm` place), the shell
    /// functions `victim CMD…` and `attacker CMD…` (the command as that user), and `run`
    /// (coder on the fake CLI as the victim, in `ws`, printing its envelope).
    fn scenario(&self, shm_opts: &str, script: &str) -> String {
        let prelude = r#"set -u
mount -t tmpfs -o "$SHM_OPTS" tmpfs /dev/shm || { echo NO-SHM-MOUNT; exit 97; }
as_uid() { u=$1; shift
  if [ "$u" = 0 ]; then "$@"; else setpriv --reuid="$u" --regid="$u" --clear-groups "$@"; fi; }
victim() { as_uid "$VICTIM" "$@"; }
attacker() { as_uid "$ATTACKER" "$@"; }
run() { victim "$CODER" --cd "$ROOT/ws" --claude-bin "$ROOT/claude" "$@" go; echo; }
"#;
        let mut cmd = Command::new("/usr/bin/timeout");
        cmd.args([
            "120",
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
        ])
        .arg(format!("{prelude}{script}"));
        sandbox_fixture::user_env(&mut cmd, &self.root, sandbox_fixture::PATH);
        cmd.env("SHM_OPTS", shm_opts)
            .env("VICTIM", self.victim.to_string())
            .env("ATTACKER", self.attacker().to_string())
            .env("CODER", CODER)
            .env("ROOT", &self.root)
            .env("PLACE", self.shm_place());
        sandbox_fixture::printed(&cmd.output_bounded())
    }
}

/// The rest of the line of `out` that starts with `key`.
fn line_after<'a>(out: &'a str, key: &str) -> &'a str {
    let at = out.find(key).unwrap_or_else(|| panic!("no {key} in {out}"));
    let rest = &out[at + key.len()..];
    &rest[..rest.find('\n').unwrap_or(rest.len())]
}

/// The word of `out` (up to a space, a quote or a line's end) after `key`: what the fake
/// CLI reported in its result.
fn word_after<'a>(out: &'a str, key: &str) -> &'a str {
    let at = out.find(key).unwrap_or_else(|| panic!("no {key} in {out}"));
    let rest = &out[at + key.len()..];
    &rest[..rest.find([' ', '"', '\n']).unwrap_or(rest.len())]
}

/// The config dir the fake CLI reported (`HOME=<dir>` in its result).
fn home_of(out: &str) -> PathBuf {
    let at = out
        .find("HOME=")
        .unwrap_or_else(|| panic!("no HOME= in {out}"));
    let rest = &out[at + 5..];
    let end = rest.find([' ', '"', ',']).unwrap_or(rest.len());
    PathBuf::from(&rest[..end])
}

/// The control, and the agent's view: with nothing planted, the run's home is made in
/// `/dev/shm/coder-<uid>` (the name anyone can predict), the CLI finds and writes it inside
/// the sandbox, and the agent sees nothing else of the scratch: not another live run's
/// home with its login (a decoy whose PID is alive), not a way to move or add to the path
/// to its home. The agent's own `/dev/shm` stays writable. After the run its home is gone
/// and the live decoy is kept.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_clis_home_is_on_the_tmpfs_bound_alone_and_its_path_fixed() {
    for victim in sandbox_fixture::victims() {
        let place = format!("/dev/shm/coder-{victim}");
        let payload = format!(
            r#"echo "HOME=$CLAUDE_CONFIG_DIR"
touch "$CLAUDE_CONFIG_DIR/written" && echo WROTE-HOME
echo "SEEN=$(ls -A {place}/cli-runs | tr '\n' :)"
cat {place}/cli-runs/*-decoy/claude/.credentials.json 2>/dev/null && echo READ-OTHER
mv {place} /dev/shm/moved 2>/dev/null && echo MOVED-TOP
mv {place}/cli-runs {place}/gone 2>/dev/null && echo MOVED-RUNS
mkdir {place}/cli-runs/planted 2>/dev/null && echo PLANTED
touch /dev/shm/mine && echo SHM-WRITABLE"#
        );
        let tree = Tree::new(victim, &payload);
        let out = tree.scenario(
            "mode=1777",
            r#"decoy="$PLACE/cli-runs/$$-decoy/claude"
victim sh -c "umask 077 && mkdir -p '$decoy' && echo login > '$decoy/.credentials.json'"
run
echo "AFTER=$(ls -A "$PLACE/cli-runs" | tr '\n' :)"
cat "$decoy/.credentials.json" && echo DECOY-KEPT
"#,
        );
        let home = home_of(&out);
        assert!(
            home.starts_with(format!("{place}/cli-runs/")),
            "uid {victim}: the home is not on the tmpfs: {out}"
        );
        for want in ["WROTE-HOME", "SHM-WRITABLE", "DECOY-KEPT"] {
            assert!(out.contains(want), "uid {victim}: no {want}: {out}");
        }
        let run_name = home
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert!(
            out.contains(&format!("SEEN={run_name}:")),
            "uid {victim}: the agent saw more of the scratch than its own home: {out}"
        );
        for never in ["READ-OTHER", "MOVED-TOP", "MOVED-RUNS", "PLANTED"] {
            assert!(!out.contains(never), "uid {victim}: {never}: {out}");
        }
        let after = line_after(&out, "AFTER=");
        assert!(
            after.contains("-decoy:") && !after.contains(run_name),
            "uid {victim}: the run's home outlived it, or the decoy went: {out}"
        );
    }
}

/// `/dev/shm/coder-<uid>` made first by another user, as a symlink to a directory of
/// theirs or as a directory of theirs open to all, is never used: the run's home goes to
/// the state directory, the run's warnings say why, and nothing lands in the attacker's
/// directory. uid 65534 plants for root, root for uid 65534. The control is the test
/// above: with nothing planted the home is made at that very name.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_scratch_directory_planted_by_another_user_is_never_used() {
    for victim in sandbox_fixture::victims() {
        for plant in [
            "attacker mkdir -m 777 /dev/shm/bait && attacker ln -s /dev/shm/bait \"$PLACE\"",
            "attacker mkdir -m 777 \"$PLACE\" && attacker ln -s \"$PLACE\" /dev/shm/bait",
            "attacker mkdir -m 700 \"$PLACE\" && attacker ln -s \"$PLACE\" /dev/shm/bait",
        ] {
            let tree = Tree::new(victim, r#"echo "HOME=$CLAUDE_CONFIG_DIR""#);
            let out = tree.scenario(
                "mode=1777",
                &format!(
                    "{plant} || exit 98\nrun\necho \"BAIT=$(ls -A /dev/shm/bait/ | tr '\\n' :)\"\n"
                ),
            );
            let home = home_of(&out);
            let state = tree.root.join("state/cli-runs");
            assert!(
                home.starts_with(&state),
                "uid {victim}, {plant}: the home is not in the state directory: {out}"
            );
            assert!(
                out.contains("not used for this run's scratch"),
                "uid {victim}, {plant}: no warning: {out}"
            );
            assert!(
                line_after(&out, "BAIT=").is_empty(),
                "uid {victim}, {plant}: something landed in the attacker's directory: {out}"
            );
        }
    }
}

/// A `--write` or `--read` grant reaching the scratch (here through a bind mount of it,
/// another path to the same directory, or `$XDG_RUNTIME_DIR` holding it) is refused as
/// one reaching the state directory is, and the agent never runs; so is a `--read` of the
/// state directory's `sandbox-tmp/`, the agents' locked `TMPDIR`s. Control: a plain
/// directory mounted the same way is granted.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_reaching_the_scratch_is_refused() {
    for victim in sandbox_fixture::victims() {
        let tree = Tree::new(victim, r#"echo "HOME=$CLAUDE_CONFIG_DIR""#);
        let out = tree.scenario(
            "mode=1777",
            r#"run >/dev/null
mount --bind "$PLACE" "$ROOT/alias"
sb() { victim "$CODER" sandbox "$@" --cd "$ROOT/ws" -- sh -c 'echo AGENT-RAN' 2>&1; echo "rc=$?"; }
echo "== write-alias"; sb --write "$ROOT/alias"
echo "== read-alias"; sb --read "$ROOT/alias"
echo "== read-tmpdirs"; sb --read "$ROOT/state/sandbox-tmp"
umount "$ROOT/alias"; mount --bind "$ROOT/plain" "$ROOT/alias"
echo "== control"; sb --write "$ROOT/alias"
mount -t tmpfs -o "mode=700,uid=$VICTIM,gid=$VICTIM" tmpfs "$ROOT/xdg"
export XDG_RUNTIME_DIR="$ROOT/xdg"
echo "== xdg-run"; run
echo "== read-xdg"; sb --read "$ROOT/xdg"
echo "== end"
"#,
        );
        let part = |name: &str| {
            let start = out
                .find(&format!("== {name}\n"))
                .unwrap_or_else(|| panic!("no {name}: {out}"));
            let rest = &out[start + name.len() + 4..];
            rest[..rest.find("== ").unwrap_or(rest.len())].to_string()
        };
        // `read-tmpdirs`: the agents' `TMPDIR`s, each a locked run directory on disk
        // (round twenty-one), reached by a `--read` that could hold their locks.
        for refused in ["write-alias", "read-alias", "read-tmpdirs", "read-xdg"] {
            let text = part(refused);
            assert!(
                !text.contains("AGENT-RAN") && !text.contains("rc=0"),
                "uid {victim}: {refused} was granted: {out}"
            );
            // The scratch place reached through its alias is named as what it is, with the
            // variable that moves it (it was called the state directory, and the advice was
            // to set CODER_STATE_DIR). `read-xdg` reaches the runs directory first.
            assert!(
                refused == "read-xdg"
                    || refused == "read-tmpdirs" && text.contains("reaches its lock files")
                    || text.contains("coder's scratch directory")
                        && text.contains("CODER_SCRATCH_DIR"),
                "uid {victim}: {refused}: {text}"
            );
        }
        assert!(
            part("control").contains("AGENT-RAN"),
            "uid {victim}: control: {out}"
        );
        let xdg_home = home_of(&part("xdg-run"));
        assert!(
            xdg_home.starts_with(tree.root.join("xdg/coder/cli-runs")),
            "uid {victim}: a tmpfs XDG_RUNTIME_DIR was not taken first: {out}"
        );
    }
}

/// A `/dev/shm` with less room than coder asks of a scratch place (Docker's 64 MiB) is
/// passed over, quietly: the home goes to the state directory.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_small_shm_is_passed_over() {
    for victim in sandbox_fixture::victims() {
        let tree = Tree::new(victim, r#"echo "HOME=$CLAUDE_CONFIG_DIR""#);
        let out = tree.scenario("mode=1777,size=64m", "run\n");
        let home = home_of(&out);
        assert!(
            home.starts_with(tree.root.join("state/cli-runs")),
            "uid {victim}: the home went to a 64 MiB /dev/shm: {out}"
        );
        assert!(!out.contains("warnings"), "uid {victim}: a warning: {out}");
    }
}

/// A run killed with SIGKILL leaves its home on the tmpfs (no code of coder's runs); the
/// next run removes it, as it removes one in the state directory.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_killed_runs_home_on_the_tmpfs_is_removed_by_the_next_run() {
    for victim in sandbox_fixture::victims() {
        let tree = Tree::new(
            victim,
            r#"if [ ! -e "$PWD/home.txt" ]; then echo "$CLAUDE_CONFIG_DIR" > "$PWD/home.txt"; sleep 60; fi
echo "HOME=$CLAUDE_CONFIG_DIR""#,
        );
        let out = tree.scenario(
            "mode=1777",
            r#"cd "$ROOT"
if [ "$VICTIM" = 0 ]; then "$CODER" --cd "$ROOT/ws" --claude-bin "$ROOT/claude" go >/dev/null 2>&1 &
else setpriv --reuid="$VICTIM" --regid="$VICTIM" --clear-groups "$CODER" --cd "$ROOT/ws" --claude-bin "$ROOT/claude" go >/dev/null 2>&1 &
fi
pid=$!
i=0; while [ ! -s "$ROOT/ws/home.txt" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
kill -9 $pid; wait $pid
left=$(dirname "$(cat "$ROOT/ws/home.txt")")
[ -d "$left" ] && echo "LEFT=$left"
run
[ -e "$left" ] || echo PRUNED
"#,
        );
        let left = out
            .split("LEFT=")
            .nth(1)
            .unwrap_or_else(|| panic!("uid {victim}: the killed run left nothing: {out}"));
        assert!(
            left.starts_with(&format!("/dev/shm/coder-{victim}/cli-runs/")),
            "uid {victim}: {out}"
        );
        assert!(out.contains("PRUNED"), "uid {victim}: not removed: {out}");
    }
}

/// The sandbox's run directory of coder's own files (the git guard's record, the git
/// identity, `nest/`) is in the scratch place too (round twenty-one), and the agent's
/// `TMPDIR` is a locked directory of its own on disk (the state directory's
/// `sandbox-tmp/`). A run killed with SIGKILL after its agent armed a new repository
/// (`core.fsmonitor`) leaves both; the next run reads the scratch place's runs, does the
/// dead run's git guard from its record there, and removes both leftovers. Control: between
/// the two runs the user's git runs the payload.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_killed_runs_sandbox_directory_on_the_tmpfs_is_guarded_and_removed_by_the_next_run() {
    for victim in sandbox_fixture::victims() {
        let tree = Tree::new(victim, r#"echo "HOME=$CLAUDE_CONFIG_DIR""#);
        let out = tree.scenario(
            "mode=1777",
            r#"cd "$ROOT"
agent="echo \"\$TMPDIR\" > tmpdir.txt; echo junk > \"\$TMPDIR/junk\"
git init -q n && git -C n config core.fsmonitor \"touch '$ROOT/marker'; false\"
echo ready > ready.txt; exec sleep 60"
if [ "$VICTIM" = 0 ]; then "$CODER" sandbox --cd "$ROOT/ws" -- sh -c "$agent" >/dev/null 2>&1 &
else setpriv --reuid="$VICTIM" --regid="$VICTIM" --clear-groups "$CODER" sandbox --cd "$ROOT/ws" -- sh -c "$agent" >/dev/null 2>&1 &
fi
pid=$!
i=0; while [ ! -s "$ROOT/ws/ready.txt" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
own=$(ls -d "$PLACE"/sandbox/*/*-* | head -1)
tmp=$(cat "$ROOT/ws/tmpdir.txt")
echo "OWN=$own"
echo "TMP=$tmp"
[ -f "$own/git-guard.json" ] && echo RECORD-ON-TMPFS
kill -9 $pid; wait $pid
[ -f "$tmp/junk" ] && echo TMP-LEFT
[ -f "$own/git-guard.json" ] && echo RECORD-LEFT
victim git -C "$ROOT/ws/n" status --short >/dev/null 2>&1
[ -e "$ROOT/marker" ] && echo ARMED && rm -f "$ROOT/marker"
echo "== next"
victim "$CODER" sandbox --cd "$ROOT/ws" -- true 2>&1
echo "== after"
victim git -C "$ROOT/ws/n" status --short >/dev/null 2>&1
[ -e "$ROOT/marker" ] && echo PAYLOAD-RAN
[ -e "$own" ] || echo OWN-PRUNED
[ -e "$tmp" ] || echo TMP-PRUNED
"#,
        );
        let own = line_after(&out, "OWN=");
        let tmp = line_after(&out, "TMP=");
        assert!(
            own.starts_with(&format!("/dev/shm/coder-{victim}/sandbox/")),
            "uid {victim}: the run directory is not in the scratch place: {out}"
        );
        let state_tmp = tree.root.join("state/sandbox-tmp");
        assert!(
            std::path::Path::new(tmp).starts_with(&state_tmp),
            "uid {victim}: TMPDIR is not on disk in the state directory: {out}"
        );
        for want in ["RECORD-ON-TMPFS", "TMP-LEFT", "RECORD-LEFT", "ARMED"] {
            assert!(out.contains(want), "uid {victim}: no {want}: {out}");
        }
        let next = &out[out.find("== next").unwrap()..out.find("== after").unwrap()];
        assert!(
            next.contains("after an earlier run whose coder was killed"),
            "uid {victim}: the next run did not do the killed run's guard: {out}"
        );
        assert!(!out.contains("PAYLOAD-RAN"), "uid {victim}: {out}");
        for want in ["OWN-PRUNED", "TMP-PRUNED"] {
            assert!(out.contains(want), "uid {victim}: no {want}: {out}");
        }
    }
}

/// The agent's view of its run directory in the scratch place (round twenty-one: the git
/// identity and the nesting wrapper are read grants in `/dev/shm`, where the agent's
/// private tmpfs has every Landlock right): both are there for the CLI (its shell and
/// git's global config), read-only, on the skeleton (the wrapper cannot be swapped, the
/// identity not rewritten, the directory not moved or added to), and nothing else of the
/// scratch's runs is (a live decoy run's guard record is not readable). Its `TMPDIR` is on
/// disk, writable.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_run_directory_on_the_tmpfs_is_read_only_and_alone() {
    for victim in sandbox_fixture::victims() {
        let payload = r#"own=$(dirname "$(dirname "$CLAUDE_CODE_SHELL")")
echo "OWN=$own"
echo "TMP=$TMPDIR"
echo "SEEN=$(ls -A "$(dirname "$own")" | tr '\n' :)"
[ -f "$GIT_CONFIG_GLOBAL" ] && cat "$GIT_CONFIG_GLOBAL" >/dev/null && echo READ-GITCONFIG
[ -L "$CLAUDE_CODE_SHELL" ] && echo SHELL-THERE
(echo x >> "$GIT_CONFIG_GLOBAL") 2>/dev/null && echo WROTE-GITCONFIG
ln -sf /bin/sh "$CLAUDE_CODE_SHELL" 2>/dev/null && echo SWAPPED-SHELL
mkdir "$own/planted" 2>/dev/null && echo PLANTED
mv "$own" "$own.x" 2>/dev/null && echo MOVED-OWN
cat "$(dirname "$own")"/*-decoy/git-guard.json 2>/dev/null && echo READ-OTHER
touch "$TMPDIR/t" && echo TMP-WRITABLE
echo "HOME=$CLAUDE_CONFIG_DIR""#;
        let tree = Tree::new(victim, payload);
        let out = tree.scenario(
            "mode=1777",
            r#"run >/dev/null
runs=$(ls -d "$PLACE"/sandbox/*)
decoy="$runs/$$-decoy"
victim sh -c "umask 077 && mkdir '$decoy' && echo '{}' > '$decoy/git-guard.json'"
run
[ -f "$decoy/git-guard.json" ] && echo DECOY-KEPT
"#,
        );
        let own = word_after(&out, "OWN=");
        assert!(
            own.starts_with(&format!("/dev/shm/coder-{victim}/sandbox/")),
            "uid {victim}: the run directory is not in the scratch place: {out}"
        );
        assert!(
            std::path::Path::new(word_after(&out, "TMP=")).starts_with(tree.root.join("state")),
            "uid {victim}: TMPDIR is not on disk: {out}"
        );
        let name = own.rsplit('/').next().unwrap();
        assert_eq!(
            word_after(&out, "SEEN="),
            format!("{name}:"),
            "uid {victim}: the agent saw more of the scratch's runs than its own: {out}"
        );
        for want in [
            "READ-GITCONFIG",
            "SHELL-THERE",
            "TMP-WRITABLE",
            "DECOY-KEPT",
        ] {
            assert!(out.contains(want), "uid {victim}: no {want}: {out}");
        }
        for never in [
            "WROTE-GITCONFIG",
            "SWAPPED-SHELL",
            "PLANTED",
            "MOVED-OWN",
            "READ-OTHER",
        ] {
            assert!(!out.contains(never), "uid {victim}: {never}: {out}");
        }
    }
}
