//! An adversarial review of the start scan's listings kept between runs
//! (`src/sandbox/listing_cache.rs`): a directory whose (dev, ino), ctime and path below the
//! scanned root are what an earlier run listed is not listed again. Each attack here tries
//! to make a *later* run miss what a run without the kept listings finds: a secret it
//! should mask, a git dir it should guard. The attacker is the agent of an earlier run (or
//! of a run beside it) that can do what its grants allow. Each attack has a control showing
//! its effect where the protection is absent (`danger-full-access`, or no kept listings),
//! and runs as root and as uid 65534.

mod common;

use std::hash::Hasher;
use std::ops::Deref;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::sandbox_fixture::{Fixture, Umount, arms, must_run, run_text, view_one_script};

struct Fx {
    fx: Fixture,
}

impl Deref for Fx {
    type Target = Fixture;

    fn deref(&self) -> &Fixture {
        &self.fx
    }
}

impl Fx {
    /// Two workspaces (`ws1`, `ws2`) of `dirs` old directories, each with a few plain files
    /// and a subdirectory; coder's state directory is `state`.
    fn new(nobody: bool, dirs: usize) -> Fx {
        let fx = Fixture::new(
            "coder-listing-cache-review-",
            nobody,
            &["ws1", "ws2", "home", "state"],
        )
        .without_env("XDG_RUNTIME_DIR");
        for ws in ["ws1", "ws2"] {
            for i in 0..dirs {
                let d = fx.root().join(ws).join(format!("d{i}"));
                std::fs::create_dir_all(d.join("sub")).unwrap();
                for f in ["a.txt", "b.rs"] {
                    std::fs::write(d.join(f), format!("{i} {f}\n")).unwrap();
                }
                std::fs::write(d.join("sub/c.txt"), "c\n").unwrap();
            }
        }
        fx.own(fx.root());
        Fx { fx }
    }

    fn ws(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// Bind-mount the fixture's root at a second path; returns that path.
    fn bind_alias(&mut self) -> PathBuf {
        let alias = PathBuf::from(format!("{}-alias", self.root().display()));
        std::fs::create_dir_all(&alias).unwrap();
        let root = self.root().to_path_buf();
        self.fx.mount(&["--bind"], &root, &alias);
        alias
    }

    /// `sh -c script` through `coder sandbox` in the workspace `ws` with `args`.
    fn sandbox(&self, ws: &str, args: &[&str], script: &str) -> (i32, String) {
        run_text(&mut self.sandbox_in(&self.ws(ws), args, script))
    }

    /// What the sandbox in `ws` shows of `path`: its content or `DENIED`, then whether it
    /// can be written.
    fn view(&self, ws: &str, args: &[&str], path: &str) -> String {
        let (rc, out) = self.sandbox(ws, args, &view_one_script(path));
        assert_eq!(rc, 0, "nobody={}: {out}", self.nobody);
        out
    }

    /// [`Fx::view`] of several paths in one run, a line each: `path: content state`.
    fn view_all(&self, ws: &str, args: &[&str], paths: &[&str]) -> String {
        self.view_in(&self.ws(ws), args, paths)
    }
}

/// The kept listings file with the record of `rel` given the ctime `ctime` (seconds,
/// nanoseconds), checksum redone: what anyone who can read a genuine file and `stat` the
/// directory can write. The format is documented in `src/sandbox/listing_cache.rs`.
fn with_ctime(genuine: &[u8], rel: &str, ctime: (i64, u32)) -> Vec<u8> {
    let mut bytes = genuine[..genuine.len() - 8].to_vec();
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let mut at = 16 + 8;
    let trees = u32_at(&bytes, at);
    at += 4;
    let mut found = false;
    for _ in 0..trees {
        let records = u64_at(&bytes, at);
        at += 8;
        for _ in 0..records {
            let ctime_at = at + 16;
            at += 8 + 8 + 8 + 4 + 8 + 1;
            let len = u32_at(&bytes, at) as usize;
            let name = bytes[at + 4..at + 4 + len].to_vec();
            at += 4 + len;
            for _ in 0..2 {
                let pairs = u32_at(&bytes, at);
                at += 4;
                for _ in 0..pairs {
                    at += 1;
                    at += 4 + u32_at(&bytes, at) as usize;
                }
            }
            if name == rel.as_bytes() {
                bytes[ctime_at..ctime_at + 8].copy_from_slice(&ctime.0.to_le_bytes());
                bytes[ctime_at + 8..ctime_at + 12].copy_from_slice(&ctime.1.to_le_bytes());
                found = true;
            }
        }
    }
    assert_eq!(at, bytes.len(), "the format changed");
    assert!(found, "no record of {rel}");
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x6b65_7074, 0x6469_7273);
    h.write(&bytes);
    bytes.extend_from_slice(&h.finish().to_le_bytes());
    bytes
}

fn ctime(path: &Path) -> (i64, u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    (m.ctime(), m.ctime_nsec() as u32)
}

/// How the agent of a run with a grant over coder's state directory plants its listings.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Plant {
    /// Another workspace's cache file, the grant naming `<state>/listings` by its path.
    OtherWorkspace,
    /// Its own workspace's cache file, the grant naming `<state>/listings` through a bind
    /// mount (another path to the same directory).
    ThroughBindMount,
    /// `<state>/listings` replaced by a symlink to a directory of the agent's (through
    /// `--allow-tmp`: the state directory is under `/tmp`).
    SymlinkedDirectory,
}

/// An agent that may write coder's state directory (the user granted `--write` over its
/// listings, or `--allow-tmp` with the state directory under `/tmp`) would plant kept
/// listings that make a later run skip a directory ([`Plant`]). Such runs are refused now
/// (when this review was written they ran, and the run removed the listings its agent
/// could write before the agent started and after the run). The secret the user put in `d0`
/// after the genuine listing was kept must still be masked by the next run of that
/// workspace. Controls: the forged file, written outside any sandbox (a documented limit),
/// does hide the secret; `danger-full-access` reads it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_agent_that_can_write_the_state_directory_cannot_forge_a_later_runs_listings() {
    for nobody in arms() {
        for plant in [
            Plant::OtherWorkspace,
            Plant::ThroughBindMount,
            Plant::SymlinkedDirectory,
        ] {
            let mut fx = Fx::new(nobody, 3);
            let (agent_ws, state) = match plant {
                Plant::ThroughBindMount => ("ws2", fx.bind_alias().join("state")),
                _ => ("ws1", fx.root().join("state")),
            };
            common::age_past_the_racy_margin(fx.root());
            let (rc, out) = fx.sandbox("ws2", &[], "true");
            assert_eq!(rc, 0, "run 0: {out}");
            let caches = fx.caches();
            assert_eq!(caches.len(), 1, "run 0 kept its listings: {out}");
            let genuine = std::fs::read(&caches[0]).unwrap();
            let name = caches[0].file_name().unwrap().to_str().unwrap().to_string();

            // The user adds a secret to an old directory; it is old by the next run.
            std::fs::write(fx.ws("ws2").join("d0/.env"), "TOKEN=victim\n").unwrap();
            fx.own(fx.root());
            common::age_past_the_racy_margin(fx.root());
            let forged = with_ctime(&genuine, "d0", ctime(&fx.ws("ws2").join("d0")));
            std::fs::write(fx.ws(agent_ws).join("forged"), &forged).unwrap();
            // Not `own` of the workspace: a chown moves every ctime below it.
            fx.own(&fx.ws(agent_ws).join("forged"));

            // A grant holding the whole state directory is refused (the placeholder locks
            // live there): the listings directory, or the shared /tmp the fixture is in
            // for the plant that must replace that directory.
            let listings_grant = state.join("listings");
            let grant: Vec<&str> = match plant {
                Plant::SymlinkedDirectory => {
                    assert!(state.starts_with("/tmp"), "{}", state.display());
                    vec!["--allow-tmp"]
                }
                _ => vec!["--write", listings_grant.to_str().unwrap()],
            };
            let script = match plant {
                Plant::SymlinkedDirectory => format!(
                    "umask 077; mkdir fake && cp forged fake/{name} && rm -rf '{0}/listings' \
                     && ln -s \"$PWD/fake\" '{0}/listings' && echo PLANTED",
                    state.display()
                ),
                _ => format!(
                    "umask 077; mkdir -p '{0}/listings'; cat forged > '{0}/listings/{name}' \
                     && chmod 600 '{0}/listings/{name}' && echo PLANTED",
                    state.display()
                ),
            };
            // Every such grant is refused now, before the agent runs (a grant reaching any
            // part of coder's state directory): what follows checks the next run all the
            // same.
            let (rc, out) = fx.sandbox(agent_ws, &grant, &script);
            assert_ne!(rc, 0, "nobody={nobody} {plant:?}: the agent's run: {out}");
            assert!(
                out.contains("coder's state directory") && !out.contains("PLANTED"),
                "nobody={nobody} {plant:?}: the agent's run was not refused: {out}"
            );

            let seen = fx.view("ws2", &[], "d0/.env");
            assert!(
                !seen.contains("TOKEN=victim") && seen.trim_end().ends_with("fixed"),
                "nobody={nobody} {plant:?}: the agent's listings hid the secret from a later \
                 run: {seen}"
            );

            let listings = fx.root().join("state/listings");
            let _ = std::fs::remove_file(&listings);
            std::fs::create_dir_all(&listings).unwrap();
            std::fs::write(listings.join(&name), &forged).unwrap();
            std::fs::set_permissions(
                listings.join(&name),
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .unwrap();
            fx.own(&fx.root().join("state"));
            let outside = fx.view("ws2", &[], "d0/.env");
            assert!(
                outside.contains("TOKEN=victim"),
                "control: the forged listings are not taken even outside a sandbox: {outside}"
            );
            let control = fx.view("ws2", &["--mode", "danger-full-access"], "d0/.env");
            assert!(control.contains("TOKEN=victim"), "control: {control}");
        }
    }
}

fn line_of<'a>(out: &'a str, path: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{path}: ")))
        .unwrap_or_else(|| panic!("no line for {path}: {out}"))
}

/// Old directories changed between runs in ways that keep something of the old record: two
/// kept directories swapped in one `renameat2(RENAME_EXCHANGE)` (each now sits where a
/// path glob names the other's files), a kept directory removed and made again at the same
/// path (its inode number may be reused), and a directory whose times are set back with
/// `touch -d` after a secret arrives. The next run, with the directories old again, masks
/// what a run without kept listings masks.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn swapped_remade_and_backdated_directories_are_listed_again() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 4);
        let ws = fx.ws("ws2");
        std::fs::write(ws.join("d1/sub/c.txt"), "swapped-in\n").unwrap();
        fx.own(fx.root());
        let deny = ["--deny", "d0/sub/*.txt"];
        common::age_past_the_racy_margin(fx.root());
        let before = fx.view_all("ws2", &deny, &["d1/sub/c.txt"]);
        assert!(
            before.contains("swapped-in writable"),
            "not a match yet: {before}"
        );
        assert_eq!(fx.caches().len(), 1, "no listings kept: {before}");

        let path = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let (a, b) = (path(&ws.join("d0/sub")), path(&ws.join("d1/sub")));
        // SAFETY: two NUL-terminated paths; renameat2 reads them only.
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        let old_ino = std::fs::metadata(ws.join("d2/sub")).unwrap().ino();
        std::fs::remove_dir_all(ws.join("d2/sub")).unwrap();
        std::fs::create_dir(ws.join("d2/sub")).unwrap();
        std::fs::write(ws.join("d2/sub/.env"), "remade\n").unwrap();
        let new_ino = std::fs::metadata(ws.join("d2/sub")).unwrap().ino();
        std::fs::write(ws.join("d3/.env"), "backdated\n").unwrap();
        must_run(
            Command::new("touch")
                .args(["-d", "2001-01-01"])
                .arg(ws.join("d3")),
        );
        fx.own(fx.root());
        common::age_past_the_racy_margin(fx.root());

        let paths = ["d0/sub/c.txt", "d2/sub/.env", "d3/.env"];
        let after = fx.view_all("ws2", &deny, &paths);
        for (p, content) in paths.iter().zip(["swapped-in", "remade", "backdated"]) {
            let line = line_of(&after, p);
            assert!(
                !line.contains(content) && line.ends_with("fixed"),
                "nobody={nobody} (inode reused: {}): {p} readable or writable: {after}",
                old_ino == new_ino
            );
        }
        let control = fx.view_all("ws2", &["--mode", "danger-full-access"], &paths);
        for (p, content) in paths.iter().zip(["swapped-in", "remade", "backdated"]) {
            assert!(line_of(&control, p).contains(content), "control: {control}");
        }
    }
}

/// A bare repository (a git dir not named `.git`) in an old directory stays guarded when
/// the run reuses the kept listings: its config and hooks are read-only to the agent, so
/// the user's git cannot be made to run the agent's command through them.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_bare_repository_in_a_kept_directory_stays_guarded() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 2);
        let ws = fx.ws("ws2");
        must_run(
            Command::new("git")
                .args(["init", "-q", "--bare"])
                .arg(ws.join("d0/sub/proj.git")),
        );
        fx.own(fx.root());
        common::age_past_the_racy_margin(fx.root());
        let paths = ["d0/sub/proj.git/config", "d0/sub/proj.git/description"];
        let first = fx.view_all("ws2", &[], &paths);
        assert_eq!(fx.caches().len(), 1, "no listings kept: {first}");
        for round in ["kept once", "kept twice"] {
            let out = fx.view_all("ws2", &[], &paths);
            assert!(
                line_of(&out, paths[0]).ends_with("fixed"),
                "nobody={nobody} {round}: the bare repository's config is writable: {out}"
            );
            let (rc, hook) = fx.sandbox(
                "ws2",
                &[],
                "printf '#!/bin/sh\\ntouch pwned\\n' > d0/sub/proj.git/hooks/post-checkout \
                 2>/dev/null && echo HOOKED; true",
            );
            assert_eq!(rc, 0, "{hook}");
            assert!(
                !hook.contains("HOOKED"),
                "nobody={nobody} {round}: a hook was planted: {hook}"
            );
        }
        let control = fx.view_all("ws2", &["--mode", "danger-full-access"], &paths);
        assert!(
            line_of(&control, paths[0]).ends_with("writable"),
            "control: {control}"
        );
    }
}

/// A workspace on a tmpfs that is unmounted and replaced by a fresh tmpfs holding the same
/// tree plus a secret: the new file system usually gets the old one's anonymous device
/// number, and its directories, made in the same order, the old inode numbers and paths.
/// Only the ctime tells them apart, and the next run masks the secret.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_fresh_tmpfs_reusing_device_and_inode_numbers_is_listed_again() {
    for nobody in arms() {
        let fx = Fx::new(nobody, 0);
        let ws = fx.ws("tws");
        std::fs::create_dir_all(&ws).unwrap();
        let make = |secret: bool| {
            must_run(
                Command::new("mount")
                    .args(["-t", "tmpfs", "-o", "mode=755", "tmpfs"])
                    .arg(&ws),
            );
            for i in 0..3 {
                let d = ws.join(format!("d{i}"));
                std::fs::create_dir_all(d.join("sub")).unwrap();
                std::fs::write(d.join("a.txt"), "a\n").unwrap();
            }
            if secret {
                std::fs::write(ws.join("d0/.env"), "TOKEN=tmpfs\n").unwrap();
            }
            fx.own(&ws);
            let m = std::fs::metadata(ws.join("d0")).unwrap();
            (Umount(ws.clone()), (m.dev(), m.ino()))
        };
        let (first, old_id) = make(false);
        common::age_past_the_racy_margin(&ws);
        let (rc, out) = fx.sandbox("tws", &[], "true");
        assert_eq!(rc, 0, "{out}");
        assert_eq!(fx.caches().len(), 1, "no listings kept: {out}");
        drop(first);
        let (_second, new_id) = make(true);
        common::age_past_the_racy_margin(&ws);
        let seen = fx.view("tws", &[], "d0/.env");
        assert!(
            !seen.contains("TOKEN=tmpfs") && seen.trim_end().ends_with("fixed"),
            "nobody={nobody} (dev and inode reused: {}): {seen}",
            old_id == new_id
        );
        let control = fx.view("tws", &["--mode", "danger-full-access"], "d0/.env");
        assert!(control.contains("TOKEN=tmpfs"), "control: {control}");
    }
}
