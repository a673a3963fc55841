//! The start scan's listings kept from one run to the next (`src/sandbox/listing_cache.rs`):
//! a directory whose (dev, ino, ctime) and place are what an earlier run listed is not
//! listed again, and one with nothing to look at is not even opened. Each test here
//! changes a workspace between runs the way a user (or a previous run's agent) could, and
//! checks that the next run masks and protects exactly what a run without the cache does.
//! The changed directories are aged past the racy margin before the checking run, so a
//! cache that ignored a moved ctime or a moved path would be used. Each runs as root and
//! as uid 65534.

mod common;

use std::process::Command;

use common::sandbox_fixture::{Fixture, arms, must_run, run_text};

/// A workspace of `dirs` old directories, each with a few plain files, given to the arm's
/// user; `outside` beside it.
fn workspace(nobody: bool, dirs: usize) -> Fixture {
    let fx = Fixture::new(
        "coder-listing-cache-",
        nobody,
        &["ws", "home", "state", "outside"],
    )
    .without_env("XDG_RUNTIME_DIR");
    for i in 0..dirs {
        let d = fx.ws().join(format!("d{i}"));
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for f in ["a.txt", "b.rs", "notes"] {
            std::fs::write(d.join(f), format!("{i} {f}\n")).unwrap();
        }
        std::fs::write(d.join("sub/c.txt"), "c\n").unwrap();
    }
    fx.own(fx.root());
    fx
}

/// Secrets that reach an old directory between runs, by every way a name can arrive (a new
/// file, a rename within the directory, a directory moved in from outside, a hard link),
/// are masked by the next run, and by the run after once the directories are old again.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn secrets_added_between_runs_to_old_directories_are_masked() {
    for nobody in arms() {
        let fx = workspace(nobody, 6);
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
        fx.own(fx.root());
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
        let fx = workspace(nobody, 2);
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
        let fx = workspace(nobody, 3);
        let other = fx.root().join("outside/tree");
        std::fs::create_dir_all(other.join("old")).unwrap();
        std::fs::write(other.join("old/app.key"), "other-tree-key\n").unwrap();
        fx.own(fx.root());
        common::age_past_the_racy_margin(fx.root());
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

/// A run whose agent could write coder's state directory (here it is under `/tmp` and the
/// run has `--allow-tmp`; a workspace or `--write` path reaching it is refused alike) is
/// refused before anything runs: the agent could otherwise plant listings a later run
/// trusts. The refusal leaves the genuine listings in place (nothing to forget: no agent
/// ran).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_whose_agent_could_write_the_listings_is_refused() {
    for nobody in arms() {
        let fx = workspace(nobody, 2);
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
        let state = fx.ws().parent().unwrap().join("tmp-state");
        assert!(state.starts_with("/tmp"), "{}", state.display());
        let inside = state.join("listings");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::copy(&genuine[0], inside.join(&name)).unwrap();
        fx.own(&state);
        let cache = inside.join(&name);

        let script = format!("printf forged > {}; echo PLANTED", cache.display());
        let (rc, out) = run_text(
            fx.sandbox_in(&fx.ws(), &["--allow-tmp"], &script)
                .env("CODER_STATE_DIR", &state),
        );
        assert_ne!(rc, 0, "nobody={nobody}: the run was not refused: {out}");
        assert!(
            out.contains("lies under /tmp, which --allow-tmp gives the agent"),
            "nobody={nobody}: {out}"
        );
        assert!(
            !out.contains("PLANTED"),
            "nobody={nobody}: the agent ran: {out}"
        );
        assert_eq!(
            std::fs::read(&cache).unwrap(),
            std::fs::read(&genuine[0]).unwrap(),
            "nobody={nobody}: the genuine cache changed"
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
        let fx = workspace(nobody, 4);
        let ws = fx.ws();
        std::fs::write(ws.join(".env"), "top\n").unwrap();
        std::fs::write(ws.join("d0/sub/deep.pem"), "deep\n").unwrap();
        std::fs::create_dir_all(ws.join("d1/secrets/inner")).unwrap();
        std::fs::write(ws.join("d1/secrets/inner/x"), "x\n").unwrap();
        std::fs::create_dir_all(ws.join(".vscode")).unwrap();
        std::fs::write(ws.join(".vscode/tasks.json"), "{}\n").unwrap();
        std::os::unix::fs::symlink("../.env", ws.join("d2/.env")).unwrap();
        must_run(
            Command::new("git")
                .args(["init", "-q"])
                .arg(ws.join("d3/repo")),
        );
        fx.own(fx.root());
        common::age_past_the_racy_margin(fx.root());
        let mounts = "sed 's/ - .*//' /proc/self/mountinfo | awk '{print $5, $6}' \
                      | grep -v -e '/sandbox/' -e '/sandbox-tmp/' | sort";
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
