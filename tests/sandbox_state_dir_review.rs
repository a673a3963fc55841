//! An adversarial review of the refusal of grants that reach coder's state directory
//! (`refuse_writable_coder_dirs` in `src/sandbox/policy.rs`): the placeholder locks and
//! registry, every run's directory and git-guard record, transcripts and sessions live
//! there, so an agent that may write any part of it could unmask another run, plant a dead
//! run's record or read other runs' transcripts. Each attack runs as root and as uid 65534.

mod common;

use std::path::Path;

use common::sandbox_fixture::{Fixture, arms};

/// A bind mount of a *part* of the state directory (its placeholder locks, its
/// transcripts) is another path into it: a `--write` grant of that mount is refused like a
/// grant naming the part by its own path, and the agent never runs. The checks compared
/// the grant with the state directory itself and its ancestors by (device, inode), so a
/// mount of a directory below it passed and the agent wrote the locks. Control: a grant of
/// a plain directory mounted the same way runs.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_bind_mount_of_a_part_of_the_state_directory_is_refused() {
    for nobody in arms() {
        for part in ["placeholders", "runs"] {
            let mut fx = Fixture::new(
                "coder-state-dir-review-",
                nobody,
                &["ws", "home", "state", "plain", "alias"],
            )
            .without_env("XDG_RUNTIME_DIR");
            fx.own(fx.root());
            let (rc, out) = fx.sandbox(&[], "true");
            assert_eq!(rc, 0, "nobody={nobody} {part}: a first run: {out}");
            let source = fx.root().join("state").join(part);
            std::fs::create_dir_all(&source).unwrap();
            fx.own(&source);
            let alias = fx.root().join("alias");
            fx.mount(&["--bind"], &source, &alias);
            let planted = alias.join("PLANTED");
            let script = format!("touch '{}' && echo PLANTED", planted.display());

            let (rc, out) = fx.sandbox(&["--write", alias.to_str().unwrap()], &script);
            assert_ne!(rc, 0, "nobody={nobody} {part}: not refused: {out}");
            assert!(
                out.contains("coder's state directory") && !out.contains("PLANTED"),
                "nobody={nobody} {part}: the agent ran: {out}"
            );
            assert!(
                !source.join("PLANTED").exists(),
                "nobody={nobody} {part}: the agent wrote into the state directory"
            );

            let plain = fx.root().join("plain");
            let (rc, out) = fx.sandbox(
                &["--write", plain.to_str().unwrap()],
                &format!(
                    "touch '{}' && echo WROTE",
                    Path::new(&plain).join("x").display()
                ),
            );
            assert!(
                rc == 0 && out.contains("WROTE"),
                "nobody={nobody} {part}: control: {out}"
            );
        }
    }
}
