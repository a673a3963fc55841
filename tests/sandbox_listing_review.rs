//! An adversarial review of the git guard's shortcut (`src/sandbox/listing.rs`): the
//! end-of-run guard reuses the start scan's listing of a directory whose (dev, ino, ctime)
//! has not moved. Each attack here tries to change what a directory *lists*, or what the
//! guard concludes from it, without moving its ctime, so that the guard trusts a stale
//! listing and misses a repository whose config runs the agent's command when the user's
//! own git runs afterwards. Each attack has a control under `danger-full-access` (no guard)
//! where the user's git does run the payload, and runs as root and as uid 65534.

mod common;

use std::process::Command;

use common::sandbox_fixture::{Fixture, GitFx as Fx, RepoStyle, arms, must_run};

/// Every fixture here: the user's repository on git's default branch, its README root's.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-listing-review-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// The agent's tool for ext4 encryption (fscrypt v2 ioctls, which need no privilege):
/// `encrypt DIR` sets a policy on an empty directory, `add`/`remove PATH` adds or removes
/// the key in the file system's keyring (any path on the file system names it). The key is
/// fixed, so the agent of a later run can add it again.
const FSCRYPT_PL: &str = r#"use strict; use Fcntl;
my ($op, $path) = @ARGV;
my $raw = join('', map { chr } 0..63);
sysopen(my $fh, $path, O_RDONLY) or die "open $path: $!";
sub add { my $b = pack("LLa32LLa32a64", 2, 0, "", 64, 0, "", $raw);
  ioctl($fh, 0xc0506617, $b) or die "add key: $!"; return substr($b, 8, 16); }
if ($op eq "add") { add(); }
elsif ($op eq "encrypt") { my $id = add(); my $p = pack("CCCCx4a16", 2, 1, 4, 0, $id);
  ioctl($fh, 0x800c6613, $p) or die "set policy: $!"; }
elsif ($op eq "remove") { my $id = add(); my $b = pack("LLa32La20", 2, 0, $id, 0, "");
  ioctl($fh, 0xc0406618, $b) or die "remove key: $!"; }
else { die "unknown op $op"; }
"#;

/// A workspace with a committed repository; on an ext4 file system with encryption
/// enabled when `ext4_encrypt`.
fn workspace(nobody: bool, ext4_encrypt: bool) -> Fx {
    let mut fx = Fixture::new(REPO.prefix, nobody, &["ws", "home", "state"]);
    if ext4_encrypt {
        let img = fx.root().join("ext4.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        must_run(
            Command::new("mkfs.ext4")
                .args(["-q", "-O", "encrypt"])
                .arg(&img),
        );
        let ws = fx.ws();
        fx.mount(&["-o", "loop"], &img, &ws);
    }
    Fx::on(fx, &REPO)
}

/// Checks what the user's git does in `dir` (relative to the workspace) with `args`:
/// the control (`danger-full-access`) must run the payload, the confined run must not.
fn user_git_runs_payload(fx: &Fx, dir: &str, args: &[&str]) -> (bool, String) {
    let _ = std::fs::remove_file(fx.marker());
    let out = fx.git(&fx.ws().join(dir), args);
    (fx.marker().exists(), out)
}

/// ext4 encryption changes what a directory lists without touching it: with the key
/// absent, `getdents` returns encoded ("no-key") names; once any process adds the key to
/// the file system's keyring (fscrypt v2, no privilege needed), it returns the real names,
/// and the directory's ctime stays as it was. A first run plants a bare-repo shape (HEAD,
/// `objects` and `refs` as symlinks, a config with `core.fsmonitor`) in an encrypted
/// directory and removes the key, so its own guard sees only encoded names (and so does
/// anyone's git). A later run's scan lists the locked directory; its agent adds the key
/// back. The guard must see the repository as it now is, not as the scan listed it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_repo_in_an_encrypted_directory_unlocked_during_the_run_is_found() {
    for nobody in arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = workspace(nobody, true);
            std::fs::write(fx.ws().join("fscrypt.pl"), FSCRYPT_PL).unwrap();
            fx.own(&fx.ws());
            let (rc, out) = fx.sandbox(
                mode,
                "set -e; mkdir tools o r; perl fscrypt.pl encrypt tools; \
                 echo 'ref: refs/heads/main' > tools/HEAD; \
                 ln -s \"$PWD/o\" tools/objects; ln -s \"$PWD/r\" tools/refs; \
                 printf '[core]\\n\\tfsmonitor = \"touch %s; false\"\\n' \"$M\" > tools/config; \
                 perl fscrypt.pl remove .; test ! -e tools/HEAD; echo PLANTED",
            );
            assert_eq!(rc, 0, "nobody={nobody} {mode}: run 1: {out}");
            assert!(out.contains("PLANTED"), "run 1 did not plant: {out}");
            common::age_past_the_racy_margin(&fx.ws());
            let (rc, out) = fx.sandbox(
                mode,
                "set -e; perl fscrypt.pl add .; test -e tools/HEAD; echo PLANTED",
            );
            assert_eq!(rc, 0, "nobody={nobody} {mode}: run 2: {out}");
            assert!(out.contains("PLANTED"), "run 2 did not unlock: {out}");
            let (ran, git_out) = user_git_runs_payload(
                &fx,
                "",
                &["--git-dir=tools", "--work-tree=.", "status", "--short"],
            );
            if mode == "danger-full-access" {
                assert!(
                    ran,
                    "nobody={nobody}: control: the user's git must run the payload without \
                     the guard: {out}\n{git_out}"
                );
            } else {
                assert!(
                    !ran,
                    "nobody={nobody}: the user's git ran the agent's payload: {out}\n{git_out}"
                );
                assert!(
                    out.contains(&format!("{}", fx.ws().join("tools").display())),
                    "nobody={nobody}: no quarantine of tools: {out}"
                );
            }
        }
    }
}

/// Attacks that land in directories the start scan listed, old, and that the shortcut
/// must not hide: a repo made in an old directory that is then renamed away and back (its
/// inode and its parent's entry names are what the scan saw, only the ctimes moved: a
/// guard that trusts a record whatever its ctime misses it, checked); a submodule-style
/// git dir made in the user's old `.git/modules/` with its `.git` file in an old empty
/// directory; a repo in an old empty directory replaced by a new one of the same name
/// (an inode number may be reused). The last two are also found through directories the
/// scan keeps no record of, so they guard the guard as a whole.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn repos_planted_in_old_directories_are_found() {
    for nobody in arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = workspace(nobody, false);
            for d in [".git/modules", "x", "away/d", "reused"] {
                std::fs::create_dir_all(fx.ws().join(d)).unwrap();
            }
            fx.own(&fx.ws());
            common::age_past_the_racy_margin(&fx.ws());
            let fsmonitor = "core.fsmonitor \"touch '$M'; false\"";
            let (rc, out) = fx.sandbox(
                mode,
                &format!(
                    "set -e; git init -q --separate-git-dir=\"$PWD/.git/modules/x\" x; \
                     git -C x config {fsmonitor}; \
                     git init -q away/d/r; git -C away/d/r config {fsmonitor}; \
                     mv away/d away/e; mv away/e away/d; \
                     rmdir reused; mkdir reused; git init -q reused; \
                     git -C reused config {fsmonitor}; echo PLANTED"
                ),
            );
            assert_eq!(rc, 0, "nobody={nobody} {mode}: {out}");
            assert!(out.contains("PLANTED"), "{out}");
            let mut ran_in = Vec::new();
            let mut outs = String::new();
            for dir in ["x", "away/d/r", "reused"] {
                let (ran, git_out) = user_git_runs_payload(&fx, dir, &["status", "--short"]);
                if ran {
                    ran_in.push(dir);
                }
                outs.push_str(&git_out);
            }
            if mode == "danger-full-access" {
                assert_eq!(
                    ran_in,
                    ["x", "away/d/r", "reused"],
                    "nobody={nobody}: control: the user's git must run every payload \
                     without the guard: {out}\n{outs}"
                );
            } else {
                assert!(
                    ran_in.is_empty(),
                    "nobody={nobody}: the user's git ran the agent's payload in {ran_in:?}: \
                     {out}\n{outs}"
                );
            }
        }
    }
}
