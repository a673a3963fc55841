//! Round twenty-three's second review: the two changes of the round no one but their
//! authors had attacked, attacked through the built binary, root and uid 65534, each with
//! an unconfined control: the nested domain's writable roots (`nest.rs`: the CLI's own
//! scratch kept from tool commands) and the refusal of grants touching the home
//! directory's never-visible entries (`policy.rs`).

mod common;

use std::path::Path;

use common::sandbox_fixture::{self, owners};

/// The CLI's own scratch (`$CLAUDE_CODE_TMPDIR/claude-<uid>/`) is kept from tool commands
/// by the nested domain, but the CLI's file tools (Write, Edit, NotebookEdit) run in the
/// CLI's own domain, which writes there. A Bash call links `scratchlink` in the workspace
/// to `claude-<uid>/` (a symlink: Landlock checks no link target), and the Write tool
/// writes `{{workspace}}/scratchlink/planted-by-write`: it landed in `claude-<uid>/`, both
/// arms, until this review. coder now denies the CLI's file tools its scratch names by
/// the CLI's own permission rules (which check the symlink-resolved path). Real CLI,
/// offline against `fixtures/sandbox/cli_scratch_write_tool.json`, root and uid 65534;
/// control unconfined (no rules: the write lands).
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_clis_write_tool_does_not_write_its_own_scratch_through_a_link() {
    sandbox_fixture::write_tool_scratch_attack(None);
}

/// Other ways for a tool command into the CLI's scratch, all held: a hard link of a file
/// of `claude-<uid>/` into the workspace, a rename out of it, the nest wrapper
/// (`$CLAUDE_CODE_SHELL`) re-executed with `CLAUDE_CODE_TMPDIR` pointing at
/// `claude-<uid>/` (so that its cwd file would be made there) or with `CODER_NEST_WRITE`
/// listing `/` (domains intersect: the re-executed wrapper's domain is nested in the
/// tool's), a cwd file's name made a directory or a FIFO beforehand. Ordinary writes still
/// work: the workspace, `TMPDIR`, a `--write` directory, `/dev/shm`. Real CLI, offline
/// against `fixtures/sandbox/nest_escapes.json`, root and uid 65534; control unconfined
/// (the hard link, the rename and the names are made).
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn tool_commands_find_no_other_way_into_the_clis_scratch() {
    let escapes = ["hardlink", "rename", "cwdfile-as-dir", "fifo"];
    let held_only_confined = ["reexec", "reexec-root"];
    let work = ["ws", "tmpdir", "write-dir", "shm"];
    for owner in owners() {
        for confined in [true, false] {
            let run = sandbox_fixture::cli_probe(
                owner,
                confined,
                "nest_escapes.json",
                "find another way into the CLI's scratch",
                |root| {
                    let extra_dir = root.join("extra");
                    std::fs::create_dir_all(&extra_dir).unwrap();
                    std::fs::write(root.join("ws/extra-dir"), extra_dir.to_str().unwrap()).unwrap();
                    vec!["--write".to_owned(), extra_dir.to_str().unwrap().to_owned()]
                },
            );
            let (stdout, who, env) = (&run.stdout, &run.who, &run.envelope);
            assert!(
                stdout.contains("PROBED") && stdout.contains("WAITED"),
                "{who}: the Bash calls did not all run: {stdout}"
            );
            let says = |verdict: &str, name: &str| stdout.contains(&format!("{verdict} {name}\\n"));
            for name in work {
                assert!(
                    says("WROTE", name),
                    "{who}: {name} is not written: {stdout}"
                );
            }
            for name in escapes {
                let expected = if confined { "DENIED" } else { "WROTE" };
                assert!(says(expected, name), "{who}: {name}: {stdout}");
            }
            if confined {
                for name in held_only_confined {
                    assert!(says("DENIED", name), "{who}: {name}: {stdout}");
                }
                assert_eq!(env["result"], "The honest answer.", "{who}: {env}");
            }
        }
    }
}

/// A never-visible entry of the home directory that does not exist yet counts where it
/// would be made: `--cd ~/.config` without `gh/` let the agent make `gh/config.yml` (`gh`
/// runs an alias's `!command`), and a workspace holding where a dangling `~/.aws` symlink
/// points let it make `aws/config` (`credential_process` runs a command): the refusal
/// compared only the entries that existed. Both refused now, nothing made. Control:
/// `--cd ~/.config/nvim` runs and writes.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_absent_never_visible_entry_is_not_the_agents_to_make() {
    use sandbox_fixture::{Fixture, run_text};
    for nobody in sandbox_fixture::arms() {
        let fx = Fixture::new("coder-round23b-absent-", nobody, &["ws", "home", "state"]);
        let home = fx.root().join("home");
        sandbox_fixture::write(&home.join(".config/nvim/init.lua"), "NVIM\n");
        std::fs::create_dir_all(home.join("data")).unwrap();
        std::os::unix::fs::symlink("data/aws", home.join(".aws")).unwrap();
        fx.own(fx.root());
        let cases = [
            (
                ".config",
                "mkdir gh && echo 'aliases: {co: \"!id\"}' > gh/config.yml",
            ),
            (
                "data",
                "mkdir aws && printf '[default]\\ncredential_process=id\\n' > aws/config",
            ),
        ];
        for (dir, script) in cases {
            let ws = home.join(dir);
            let (rc, out) = run_text(&mut fx.sandbox_in(&ws, &[], script));
            assert!(
                rc != 0 && out.contains("never visible to an agent"),
                "nobody={nobody} --cd ~/{dir}: served: {out}"
            );
        }
        assert!(
            !home.join(".config/gh").exists(),
            "nobody={nobody}: gh made"
        );
        assert!(!home.join("data/aws").exists(), "nobody={nobody}: aws made");
        let nvim = home.join(".config/nvim");
        let (rc, out) = run_text(&mut fx.sandbox_in(&nvim, &[], "cat init.lua; echo x > y"));
        assert!(
            rc == 0 && out.contains("NVIM") && nvim.join("y").exists(),
            "nobody={nobody}: control: {out}"
        );
    }
}

/// `coder plan --plan-file ~/.ssh/authorized_keys` (or `~/.netrc`, absent) made the key
/// file the one file the agent writes: its Bash tool appended a key of its own (checked
/// by hand before the fix), though `--write ~/.ssh` is refused. Refused now, the file
/// unchanged. Control: a plan file elsewhere in the home directory runs. Real CLI,
/// offline against `fixtures/sandbox/plan_key_file.json`, root and uid 65534.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn a_plan_file_among_the_home_directorys_keys_is_refused() {
    use sandbox_fixture::{Fixture, run_text};
    let claude = common::real_claude();
    let cassette = format!(
        "replay:{}/fixtures/sandbox/plan_key_file.json",
        env!("CARGO_MANIFEST_DIR")
    );
    for nobody in sandbox_fixture::arms() {
        let fx = Fixture::new(
            "coder-round23b-plan-",
            nobody,
            &["ws", "home/plans", "state"],
        );
        let home = fx.root().join("home");
        let keys = home.join(".ssh/authorized_keys");
        sandbox_fixture::write(&keys, "USER-KEY\n");
        fx.own(fx.root());
        let plan = |file: &Path| {
            let mut cmd = fx.command(common::CODER);
            cmd.args(["plan", "--cd"])
                .arg(fx.root().join("ws"))
                .arg("--plan-file")
                .arg(file)
                .arg("--claude-bin")
                .arg(&claude)
                .args(["--backend", &cassette, "make a plan"])
                .env("PATH", sandbox_fixture::PATH)
                .env("ANTHROPIC_AUTH_TOKEN", "test-token")
                .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9");
            run_text(&mut cmd)
        };
        for file in [keys.clone(), home.join(".netrc")] {
            let (rc, out) = plan(&file);
            assert!(
                rc != 0 && out.contains("keys and tokens"),
                "nobody={nobody} --plan-file {}: {out}",
                file.display()
            );
        }
        assert_eq!(std::fs::read_to_string(&keys).unwrap(), "USER-KEY\n");
        assert!(
            !home.join(".netrc").exists(),
            "nobody={nobody}: .netrc made"
        );
        let (rc, out) = plan(&home.join("plans/p.md"));
        assert!(
            rc == 0 && out.contains("plan done"),
            "nobody={nobody}: control: {out}"
        );
    }
}

/// A `--write` directory holding a hard link to `~/.ssh/authorized_keys` (one the user
/// made: `cp -al`, a backup tool's snapshot) was granted, since the refusal compares
/// paths, and the agent appended its key through the link (a ratchet until round
/// twenty-four). The scan now masks every name in the trees of a never-visible file with
/// more than one link: the agent reads it empty and cannot write it; the run is served.
/// Root and uid 65534; control: with `--mode danger-full-access` the key is read and the
/// write lands.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hard_link_to_a_home_key_in_a_grant_is_not_the_agents_to_write() {
    use sandbox_fixture::{Fixture, run_text};
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new(
                "coder-round23b-link-",
                nobody,
                &["ws", "w", "home", "state"],
            );
            let keys = fx.root().join("home/.ssh/authorized_keys");
            sandbox_fixture::write(&keys, "USER-KEY\n");
            let link = fx.root().join("w/notes");
            std::fs::hard_link(&keys, &link).unwrap();
            fx.own(fx.root());
            let w = fx.root().join("w");
            let mut args = vec!["--write", w.to_str().unwrap()];
            if !confined {
                args.extend(["--mode", "danger-full-access"]);
            }
            let script = format!(
                "cat '{0}'; echo AGENT-KEY >> '{0}'; echo SERVED",
                link.display()
            );
            let (_rc, out) = run_text(&mut fx.sandbox_in(&fx.root().join("ws"), &args, &script));
            let written = std::fs::read_to_string(&keys)
                .unwrap()
                .contains("AGENT-KEY");
            let who = format!("nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: not served: {out}");
            if confined {
                assert!(!written, "{who}: the agent's key landed: {out}");
                assert!(!out.contains("USER-KEY"), "{who}: the key was read: {out}");
            } else {
                assert!(written && out.contains("USER-KEY"), "{who}: control: {out}");
            }
        }
    }
}

/// A run started without `HOME` (a service, an MCP host's bare environment) compared its
/// workspace and grants with no home directory at all: `--cd /root` (root's own home, by
/// its user entry) and `--read /root` were granted, every dotfile and key with them. The
/// user entry's home counts now, as it does for `coder fs`'s base. Root only: uid 65534's
/// entry names `/nonexistent`. Control: a project directory runs without `HOME`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_run_without_home_still_refuses_the_users_home() {
    use sandbox_fixture::{Fixture, run_text};
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: its user entry's home is /root"
    );
    let fx = Fixture::new("coder-round23b-nohome-", false, &["ws", "state"]);
    let ws = fx.root().join("ws");
    let cases: [(&Path, &[&str]); 2] = [
        (Path::new("/root"), &["--mode", "read-only"]),
        (&ws, &["--mode", "read-only", "--read", "/root"]),
    ];
    for (cd, args) in cases {
        let mut cmd = fx.sandbox_in(cd, args, "ls -a /root >/dev/null && echo SERVED");
        let (rc, out) = run_text(cmd.env_remove("HOME"));
        assert!(
            rc != 0 && !out.contains("SERVED") && out.contains("home directory"),
            "--cd {} {args:?} without HOME: {out}",
            cd.display()
        );
    }
    let mut cmd = fx.sandbox_in(&ws, &[], "echo RAN");
    let (rc, out) = run_text(cmd.env_remove("HOME"));
    assert!(rc == 0 && out.contains("RAN"), "control: {out}");
}
