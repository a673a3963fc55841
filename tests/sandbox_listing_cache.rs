//! The start scan's listings kept from one run to the next (`src/sandbox/listing_cache.rs`):
//! a directory whose (dev, ino, ctime) and place are what an earlier run listed is not
//! listed again, and one with nothing to look at is not even opened. Each test here
//! changes a workspace between runs the way a user (or a previous run's agent) could, and
//! checks that the next run masks and protects exactly what a run without the cache does.
//! The changed directories are aged past the racy margin before the checking run, so a
//! cache that ignored a moved ctime or a moved path would be used. Each runs as root and
//! as uid 65534.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_coder");

fn arms() -> Vec<bool> {
    common::require_root_and_user_namespaces();
    vec![false, true]
}

struct Fx {
    dir: tempfile::TempDir,
    nobody: bool,
}

impl Fx {
    /// A workspace of `dirs` old directories, each with a few plain files.
    fn new(nobody: bool, dirs: usize) -> Fx {
        let dir = tempfile::Builder::new()
            .prefix("coder-listing-cache-")
            .tempdir()
            .unwrap();
        let fx = Fx { dir, nobody };
        for d in ["ws", "home", "state", "outside"] {
            std::fs::create_dir_all(fx.root().join(d)).unwrap();
        }
        for i in 0..dirs {
            let d = fx.ws().join(format!("d{i}"));
            std::fs::create_dir_all(d.join("sub")).unwrap();
            for f in ["a.txt", "b.rs", "notes"] {
                std::fs::write(d.join(f), format!("{i} {f}\n")).unwrap();
            }
            std::fs::write(d.join("sub/c.txt"), "c\n").unwrap();
        }
        std::fs::set_permissions(
            fx.root(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        fx.own(&fx.root());
        fx
    }

    fn root(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    fn ws(&self) -> PathBuf {
        self.root().join("ws")
    }

    fn caches(&self) -> Vec<PathBuf> {
        let dir = self.root().join("state/listings");
        std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }

    fn own(&self, path: &Path) {
        if self.nobody {
            let o = Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(path)
                .output()
                .unwrap();
            assert!(o.status.success());
        }
    }

    /// `sh -c script` through `coder sandbox` with `args`, in the workspace.
    fn sandbox(&self, args: &[&str], script: &str) -> (i32, String) {
        let mut cmd = Command::new("timeout");
        cmd.arg("60");
        if self.nobody {
            cmd.args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]);
        }
        let o = cmd
            .arg(BIN)
            .arg("sandbox")
            .args(args)
            .arg("--cd")
            .arg(self.ws())
            .args(["--", "sh", "-c", script])
            .env("HOME", self.root().join("home"))
            .env("CODER_STATE_DIR", self.root().join("state"))
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.code().unwrap_or(-1), text)
    }

    /// What the sandbox shows of each of `paths` (relative to the workspace): its content,
    /// or `DENIED`, and whether it can be written.
    fn view(&self, args: &[&str], paths: &[&str]) -> String {
        let script = paths
            .iter()
            .map(|p| {
                format!(
                    "printf '%s: ' '{p}'; (cat '{p}' 2>/dev/null || echo DENIED) | tr '\\n' ' '; \
                     if (printf x >> '{p}') 2>/dev/null; then echo writable; else echo fixed; fi"
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let (rc, out) = self.sandbox(args, &script);
        assert_eq!(rc, 0, "nobody={}: {out}", self.nobody);
        out
    }
}

/// Secrets that reach an old directory between runs, by every way a name can arrive (a new
/// file, a rename within the directory, a directory moved in from outside, a hard link),
/// are masked by the next run, and by the run after once the directories are old again.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn secrets_added_between_runs_to_old_directories_are_masked() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 6);
        common::age_past_the_racy_margin(&fx.ws());
        let (rc, out) = fx.sandbox(&[], "true");
        assert_eq!(rc, 0, "run 1: {out}");
        assert_eq!(fx.caches().len(), 1, "run 1 kept its listings");

        std::fs::write(fx.ws().join("d0/.env"), "TOKEN=new-file\n").unwrap();
        std::fs::rename(fx.ws().join("d1/notes"), fx.ws().join("d1/server.pem")).unwrap();
        let moved = fx.root().join("outside/secrets");
        std::fs::create_dir_all(&moved).unwrap();
        std::fs::write(moved.join("db.txt"), "moved-in\n").unwrap();
        std::fs::rename(&moved, fx.ws().join("d2/sub/secrets")).unwrap();
        std::fs::write(fx.root().join("outside/id_rsa"), "hard-linked\n").unwrap();
        std::fs::hard_link(fx.root().join("outside/id_rsa"), fx.ws().join("d3/id_rsa")).unwrap();
        fx.own(&fx.root());
        let secrets = [
            "d0/.env",
            "d1/server.pem",
            "d2/sub/secrets/db.txt",
            "d3/id_rsa",
        ];
        for round in ["at once", "once old"] {
            if round == "once old" {
                common::age_past_the_racy_margin(&fx.ws());
            }
            let out = fx.view(&[], &secrets);
            for secret in secrets {
                let line = out
                    .lines()
                    .find(|l| l.starts_with(&format!("{secret}: ")))
                    .unwrap_or_else(|| panic!("no line for {secret}: {out}"));
                assert!(
                    !line.contains("new-file")
                        && !line.contains("moved-in")
                        && !line.contains("hard-linked")
                        && !line.contains("1 notes")
                        && line.ends_with("fixed"),
                    "nobody={nobody} {round}: {secret} readable or writable: {out}"
                );
            }
        }
        let control = fx.view(&["--mode", "danger-full-access"], &["d0/.env"]);
        assert!(control.contains("new-file"), "control: {control}");
    }
}

/// A directory kept by one run is found at another path after its parent is renamed: its
/// own ctime did not move, but a glob that names the path matches it now.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_directory_moved_under_a_path_a_glob_names_is_masked() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 2);
        let deny = ["--deny", "private/sub/*.txt"];
        common::age_past_the_racy_margin(&fx.ws());
        let before = fx.view(&deny, &["d1/sub/c.txt"]);
        assert!(
            before.contains("d1/sub/c.txt: c writable"),
            "not a match yet: {before}"
        );
        std::fs::rename(fx.ws().join("d1"), fx.ws().join("private")).unwrap();
        common::age_past_the_racy_margin(&fx.ws());
        let after = fx.view(&deny, &["private/sub/c.txt"]);
        assert!(
            !after.contains("private/sub/c.txt: c"),
            "nobody={nobody}: the moved directory's file is readable: {after}"
        );
        assert!(after.trim_end().ends_with("fixed"), "{after}");
    }
}

/// Another set of globs or trees than the kept listings were made for does not reuse
/// them: a `--protect` or `--deny` glob, or a `--read` tree, added on a later run applies
/// to old directories.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn other_globs_or_trees_do_not_reuse_the_listings() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 3);
        let other = fx.root().join("outside/tree");
        std::fs::create_dir_all(other.join("old")).unwrap();
        std::fs::write(other.join("old/app.key"), "other-tree-key\n").unwrap();
        fx.own(&fx.root());
        common::age_past_the_racy_margin(&fx.root());
        let (rc, out) = fx.sandbox(&[], "true");
        assert_eq!(rc, 0, "run 1: {out}");

        let protected = fx.view(&["--protect", "d2/*.rs"], &["d2/b.rs", "d2/a.txt"]);
        assert!(
            protected.contains("d2/b.rs: 2 b.rs fixed"),
            "nobody={nobody}: --protect of a later run ignored: {protected}"
        );
        assert!(
            protected.contains("d2/a.txt: 2 a.txt writable"),
            "{protected}"
        );
        let denied = fx.view(&["--deny", "d0/notes"], &["d0/notes"]);
        assert!(
            !denied.contains("0 notes"),
            "nobody={nobody}: --deny of a later run ignored: {denied}"
        );
        let read = ["--read", other.to_str().unwrap()];
        let path = format!("{}/old/app.key", other.display());
        let (rc, seen) = fx.sandbox(&read, &format!("cat '{path}' || true"));
        assert_eq!(rc, 0, "{seen}");
        assert!(
            !seen.contains("other-tree-key"),
            "nobody={nobody}: a secret in a --read tree added later is readable: {seen}"
        );
    }
}

/// When the run's agent may write coder's state directory (here it is inside the
/// workspace), the listings cache is not used and nothing the agent leaves in its place
/// survives the run. A genuine cache of this workspace, planted where the run will look, is
/// gone before the agent starts; one the agent writes is gone after the run.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_cache_the_agent_can_write_is_neither_used_nor_left() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 2);
        common::age_past_the_racy_margin(&fx.ws());
        let (rc, out) = fx.sandbox(&[], "true");
        assert_eq!(rc, 0, "{out}");
        let genuine = fx.caches();
        assert_eq!(genuine.len(), 1, "{out}");
        let name = genuine[0]
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let inside = fx.ws().join("state/listings");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::copy(&genuine[0], inside.join(&name)).unwrap();
        fx.own(&fx.ws());

        let mut cmd = Command::new("timeout");
        cmd.arg("60");
        if nobody {
            cmd.args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]);
        }
        let script = format!(
            "set -e; test ! -e state/listings/{name} && echo GONE; \
             printf forged > state/listings/{name}; echo PLANTED"
        );
        let o = cmd
            .arg(BIN)
            .args(["sandbox", "--cd"])
            .arg(fx.ws())
            .args(["--", "sh", "-c", &script])
            .env("HOME", fx.root().join("home"))
            .env("CODER_STATE_DIR", fx.ws().join("state"))
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.status.code(), Some(0), "nobody={nobody}: {out}");
        assert!(
            out.contains("GONE"),
            "nobody={nobody}: the agent saw the cache: {out}"
        );
        assert!(out.contains("PLANTED"), "{out}");
        assert!(
            !inside.join(&name).exists(),
            "nobody={nobody}: the agent's cache stayed after the run: {out}"
        );
    }
}

/// On a mixed workspace (secrets at several depths, a directory of secrets, protected
/// names, a nested repository, a symlink to a secret), a run that reuses the listings
/// mounts exactly what a run without them does.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_with_kept_listings_mounts_what_a_fresh_run_does() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 4);
        let ws = fx.ws();
        std::fs::write(ws.join(".env"), "top\n").unwrap();
        std::fs::write(ws.join("d0/sub/deep.pem"), "deep\n").unwrap();
        std::fs::create_dir_all(ws.join("d1/secrets/inner")).unwrap();
        std::fs::write(ws.join("d1/secrets/inner/x"), "x\n").unwrap();
        std::fs::create_dir_all(ws.join(".vscode")).unwrap();
        std::fs::write(ws.join(".vscode/tasks.json"), "{}\n").unwrap();
        std::os::unix::fs::symlink("../.env", ws.join("d2/.env")).unwrap();
        let o = Command::new("git")
            .args(["init", "-q"])
            .arg(ws.join("d3/repo"))
            .output()
            .unwrap();
        assert!(o.status.success());
        fx.own(&fx.root());
        common::age_past_the_racy_margin(&fx.root());
        let mounts = "sed 's/ - .*//' /proc/self/mountinfo | awk '{print $5, $6}' \
                      | grep -v '/sandbox/' | sort";
        let (rc, fresh) = fx.sandbox(&[], mounts);
        assert_eq!(rc, 0, "{fresh}");
        assert_eq!(fx.caches().len(), 1, "no listings kept: {fresh}");
        let (rc, reused) = fx.sandbox(&[], mounts);
        assert_eq!(rc, 0, "{reused}");
        assert!(
            fresh.contains("/.env") && fresh.contains("deep.pem"),
            "{fresh}"
        );
        assert_eq!(fresh, reused, "nobody={nobody}: the mounts differ");
    }
}
