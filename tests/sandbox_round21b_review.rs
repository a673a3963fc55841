//! Round twenty-one's second review: perf21's move of the sandbox's run directory to the
//! scratch place (`config::scratch`, `sandbox::policy::RunPlaces`) and fix21's walk of
//! `/tmp` for new `.git` pointers (`sandbox::gitguard::move_new_tops_aside`), attacked by
//! someone who wrote neither, through the built binary as root and as uid 65534.
//!
//! Found open when this review started, closed with it:
//! * **A dead run's record forged in `$XDG_RUNTIME_DIR/coder`.** A run only takes
//!   `$XDG_RUNTIME_DIR/coder` as its scratch place where `XDG_RUNTIME_DIR` is a private
//!   tmpfs outside `/tmp` and `/dev/shm`, but the dead-run guard read every scratch place
//!   "of this user" by ownership and mode alone, `$XDG_RUNTIME_DIR/coder` under `/tmp`
//!   included (`XDG_RUNTIME_DIR=/tmp/runtime-<user>` is common where no systemd login
//!   made one). An agent with `--allow-tmp` made that directory (0700, its user is the
//!   user's) with `sandbox/<dev>-<ino of the state dir>/<coder's pid>-<x>/git-guard.json`
//!   naming any tree of the user's; the next run took it for a killed run's record and
//!   "quarantined" the hooks and config of the user's repositories there.
//!
//! * **Another user's pointer in the sticky `/tmp`.** fix21's end-of-run walk of `/tmp`
//!   (`--allow-tmp`) stopped closed where it could not rename a new `.git` pointer that
//!   leads to the user's repository: one of another user in the sticky `/tmp` (`EPERM`).
//!   Its record was kept as a stopped guard, and every later confined run of the
//!   workspace was refused (exit 71) until that user removed it. The agent cannot make a
//!   file of another user's: such a pointer is passed over now.
//!
//! Every scenario runs in a mount namespace of its own whose `/dev/shm` and `/tmp` are
//! fresh tmpfs: other tests and users of this machine use the host's.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::sandbox_fixture::{self, NOBODY};
use common::{Bounded, CODER};

/// A tree for one arm (`ws`, `home`, coder's `state`) in `/var/tmp`, given to the arm's
/// user.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    victim: u32,
}

impl Tree {
    fn new(victim: u32) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix("coder-r21b-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for d in ["ws", "home", "state", "xdg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
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

    /// Runs `script` as root in a mount namespace of its own with fresh tmpfs on
    /// `/dev/shm` and `/tmp` (coder's binary bound at `$ROOT/coder-bin` first: a checkout
    /// under `/tmp`, as CI's may be, would be hidden): what it printed. The script has `$VICTIM`, `$CODER`, `$ROOT`,
    /// `$PLACE` (the victim's `/dev/shm` place) and `victim CMD…` (as the victim, with
    /// `XDG_RUNTIME_DIR=/tmp/runtime-$VICTIM`, made 0700 by the victim as a login without
    /// systemd would).
    fn scenario(&self, script: &str) -> String {
        let prelude = r#"set -u
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || { echo NO-SHM-MOUNT; exit 97; }
touch "$ROOT/coder-bin" && mount --bind "$CODER" "$ROOT/coder-bin" || { echo NO-BIN-MOUNT; exit 97; }
CODER=$ROOT/coder-bin
mount -t tmpfs -o mode=1777 tmpfs /tmp || { echo NO-TMP-MOUNT; exit 97; }
export XDG_RUNTIME_DIR=/tmp/runtime-$VICTIM
victim() { if [ "$VICTIM" = 0 ]; then "$@"; else setpriv --reuid="$VICTIM" --regid="$VICTIM" --clear-groups "$@"; fi; }
victim mkdir -m 700 "$XDG_RUNTIME_DIR"
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
        cmd.env("VICTIM", self.victim.to_string())
            .env("CODER", CODER)
            .env("ROOT", &self.root)
            .env("PLACE", format!("/dev/shm/coder-{}", self.victim));
        sandbox_fixture::printed(&cmd.output_bounded())
    }
}

/// The user's repository `home/proj` (never granted) with a hook and a config, the
/// state directory's `<dev>-<ino>[-<birth ns>]` (as `config::scratch` names it) as
/// `$DI`, and `plant DIR`: a dead run's record in `DIR/sandbox/$DI/<pid>-<x>` naming
/// `home` as its tree.
const SETUP: &str = r##"cd "$ROOT"
victim git init -q home/proj
victim sh -c 'printf "#!/bin/sh\nexit 0\n" > home/proj/.git/hooks/pre-commit; chmod +x home/proj/.git/hooks/pre-commit'
victim git -C home/proj config core.fsmonitor false
victim "$CODER" sandbox --cd "$ROOT/ws" -- true >/dev/null 2>&1
B=$(stat -c '%.9W' "$ROOT/state" | tr -d .); B=${B#${B%%[!0]*}}
if [ -n "$B" ]; then DI=$(printf '%x-%x-%x' $(stat -c '%d %i' "$ROOT/state") "$B"); else DI=$(printf '%x-%x' $(stat -c '%d %i' "$ROOT/state")); fi
check() { [ -x home/proj/.git/hooks/pre-commit ] && echo HOOK-KEPT
  grep -q fsmonitor home/proj/.git/config && echo CONFIG-KEPT; }
"##;

/// The agent's plant: `sandbox/<dev>-<ino>/<coder's pid, from its TMPDIR's name>-<x>/
/// git-guard.json` in `$XDG_RUNTIME_DIR/coder` under the host's `/tmp`, which
/// `--allow-tmp` gives it; the next run must not act on it. The control: the same record
/// in the victim's own scratch place (`/dev/shm/coder-<uid>`, which only the user writes)
/// is acted on, so the record is one the dead-run guard takes.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_dead_runs_record_forged_in_a_runtime_dir_under_tmp_is_not_acted_on() {
    for victim in sandbox_fixture::victims() {
        let tree = Tree::new(victim);
        let out = tree.scenario(&format!(
            r#"{SETUP}
agent="umask 077; p=\${{TMPDIR##*/}}; p=\${{p%%-*}}
d=$XDG_RUNTIME_DIR/coder/sandbox/$DI/\$p-0123456789abcdef0123456789abcdef
mkdir -p \$d && chmod 700 $XDG_RUNTIME_DIR/coder && printf '{{\"roots\":[\"$ROOT/home\"],\"known\":[]}}' > \$d/git-guard.json && echo PLANTED"
victim "$CODER" sandbox --allow-tmp --cd "$ROOT/ws" -- sh -c "$agent" 2>&1
ls "$XDG_RUNTIME_DIR"/coder/sandbox/*/*/git-guard.json >/dev/null 2>&1 && echo RECORD-THERE
echo "== next"
victim "$CODER" sandbox --cd "$ROOT/ws" -- true 2>&1
echo "== after"
check
echo "== control"
victim sh -c "umask 077; mkdir -p $PLACE/sandbox/$DI/999999-0123456789abcdef0123456789abcdef && printf '{{\"roots\":[\"$ROOT/home\"],\"known\":[]}}' > $PLACE/sandbox/$DI/999999-0123456789abcdef0123456789abcdef/git-guard.json"
victim "$CODER" sandbox --cd "$ROOT/ws" -- true 2>&1
echo "== control after"
check
"#
        ));
        for want in ["PLANTED", "RECORD-THERE"] {
            assert!(out.contains(want), "uid {victim}: no {want}: {out}");
        }
        let attack = &out[out.find("== next").unwrap()..out.find("== control").unwrap()];
        assert!(
            !attack.contains("killed"),
            "uid {victim}: the next run did a guard from the agent's forged record: {out}"
        );
        for want in ["HOOK-KEPT", "CONFIG-KEPT"] {
            assert!(
                attack.contains(want),
                "uid {victim}: the agent's forged record moved the user's files ({want}): {out}"
            );
        }
        let control = &out[out.find("== control").unwrap()..];
        assert!(
            control.contains("after an earlier run whose coder was killed")
                && !control.contains("HOOK-KEPT"),
            "uid {victim}: control: the record in the user's own place was not acted on: {out}"
        );
    }
}

/// Attacks still open: each asserts that it still works, so the list can only shrink.
const KNOWN_OPEN: &[&str] = &[];

/// A pointer older than the run, whose target the run made. Run one (`--allow-tmp`)
/// leaves `/tmp/x/.git` reading `gitdir: /tmp/y`, with nothing at `/tmp/y` (led nowhere:
/// left), and `/tmp/x/tools/fmt.sh`. Run two (`--allow-tmp`) makes `/tmp/y` a symlink to
/// the workspace's `.git`: the walk looks at `.git` entries changed since the run's start
/// only, and `/tmp/x/.git` is older; `/tmp/y` is not a `.git` name. The user's `git fmt`
/// in `/tmp/x` then ran the agent's script (open here until round twenty-two, which
/// looks at every pointer, old or new). Control: `--mode danger-full-access`. (The runs
/// are 2.5 s apart: a start time is taken two seconds early, for coarse file times.)
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_old_pointer_in_tmp_whose_target_a_later_run_makes_leads_to_the_users_config() {
    let open = KNOWN_OPEN.contains(&"old pointer, new target");
    for victim in sandbox_fixture::victims() {
        for mode in ["workspace-write", "danger-full-access"] {
            let tree = Tree::new(victim);
            let out = tree.scenario(&format!(
                r##"cd "$ROOT"
victim git init -q ws
victim git -C ws config alias.fmt '!sh tools/fmt.sh'
one="mkdir -p /tmp/x/tools && printf '#!/bin/sh\ntouch $ROOT/marker\n' > /tmp/x/tools/fmt.sh && echo 'gitdir: /tmp/y' > /tmp/x/.git && echo PLANTED-ONE"
two="ln -s $ROOT/ws/.git /tmp/y && echo PLANTED-TWO"
victim "$CODER" sandbox --mode {mode} --allow-tmp --cd "$ROOT/ws" -- sh -c "$one" 2>&1
# Runs further apart than the start time's slack (two seconds): a later session's run.
sleep 2.5
victim "$CODER" sandbox --mode {mode} --allow-tmp --cd "$ROOT/ws" -- sh -c "$two" 2>&1
(cd /tmp/x && victim git fmt) >/dev/null 2>&1
[ -e "$ROOT/marker" ] && echo PAYLOAD-RAN
"##
            ));
            for want in ["PLANTED-ONE", "PLANTED-TWO"] {
                assert!(out.contains(want), "uid {victim} {mode}: no {want}: {out}");
            }
            let confined = mode == "workspace-write";
            assert_eq!(
                out.contains("PAYLOAD-RAN"),
                !confined || open,
                "uid {victim} {mode} (known open: {open}): {out}"
            );
        }
    }
}

/// Another local user's directory deeper than the guard's cap (256) in the shared
/// `/tmp`: the end-of-run walk of `/tmp` stops there and fails closed, its record is kept
/// as a stopped guard, and every later confined run of the victim's workspace is refused
/// (exit 71), with `--allow-tmp` or without, until that user removes it (which the victim,
/// not root, cannot do in the sticky `/tmp`). The attacker is the other arm's user. Open
/// here until round twenty-two, which passes over another user's directories. The
/// control: the same tree made by the victim's own agent still stops the walk, closed,
/// and the next run is refused.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn another_users_deep_directory_in_tmp_refuses_every_later_run() {
    let open = KNOWN_OPEN.contains(&"deep dir of another user in /tmp");
    for victim in sandbox_fixture::victims() {
        let attacker = if victim == 0 { NOBODY } else { 0 };
        let tree = Tree::new(victim);
        let out = tree.scenario(&format!(
            r#"cd "$ROOT"
victim git init -q ws
setpriv --reuid={attacker} --regid={attacker} --clear-groups sh -c 'cd /tmp && for i in $(seq 300); do mkdir d && cd d || exit; done && echo DEEP'
victim "$CODER" sandbox --allow-tmp --cd "$ROOT/ws" -- true >/dev/null 2>&1
echo "first=$?"
victim "$CODER" sandbox --cd "$ROOT/ws" -- echo SECOND-RAN 2>&1
echo "second=$?"
echo "== control"
victim "$CODER" sandbox --allow-tmp --cd "$ROOT/ws" -- sh -c 'mkdir /tmp/own && cd /tmp/own && for i in $(seq 300); do mkdir d && cd d || exit; done && echo OWN-DEEP' 2>&1
victim "$CODER" sandbox --cd "$ROOT/ws" -- echo THIRD-RAN 2>&1
echo "third=$?"
"#
        ));
        assert!(out.contains("DEEP"), "uid {victim}: {out}");
        let (attack, control) = out.split_at(out.find("== control").unwrap());
        let refused = attack.contains("second=71") && !attack.contains("SECOND-RAN");
        assert_eq!(refused, open, "uid {victim} (known open: {open}): {out}");
        assert!(
            control.contains("OWN-DEEP")
                && control.contains("third=71")
                && !control.contains("THIRD-RAN"),
            "uid {victim}: control: the agent's own deep tree did not stop the walk: {out}"
        );
    }
}

/// Another user plants `/tmp/.git` reading `gitdir: <victim's workspace>/.git` while the
/// victim's `--allow-tmp` run is under way; the victim's next run (without `--allow-tmp`)
/// starts. Root renames a file of uid 65534's aside (reported); uid 65534 cannot move
/// root's from the sticky `/tmp` and passes it over.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn another_users_pointer_in_sticky_tmp_does_not_refuse_later_runs() {
    for victim in sandbox_fixture::victims() {
        let attacker = if victim == 0 { NOBODY } else { 0 };
        let tree = Tree::new(victim);
        let out = tree.scenario(&format!(
            r#"cd "$ROOT"
victim git init -q ws
agent="touch /tmp/ready; i=0; while [ ! -e /tmp/go ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i+1)); done; echo AGENT-DONE"
victim "$CODER" sandbox --allow-tmp --cd "$ROOT/ws" -- sh -c "$agent" 2>&1 &
i=0; while [ ! -e /tmp/ready ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
setpriv --reuid={attacker} --regid={attacker} --clear-groups sh -c "echo 'gitdir: $ROOT/ws/.git' > /tmp/.git && touch /tmp/go && echo PLANTED"
wait $!
echo "first=$?"
victim "$CODER" sandbox --cd "$ROOT/ws" -- echo SECOND-RAN 2>&1
echo "second=$?"
"#
        ));
        for want in ["PLANTED", "AGENT-DONE", "SECOND-RAN", "second=0"] {
            assert!(out.contains(want), "uid {victim}: no {want}: {out}");
        }
    }
}
