//! Round twenty-five's second review: this round's sandbox changes (fix25's masks of
//! relocated keys and of home keys' other names in the private root, the grants refused
//! for what a home key's symlink leads to) attacked by one who has read the code, through
//! the built binary, root and uid 65534, each with an unconfined control
//! (`--mode danger-full-access`) showing the attack works without the sandbox.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::sandbox_fixture::{self, Fixture, GitFx as Fx, RepoStyle, run_text};

/// Every git fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round25b-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
const KNOWN_OPEN: &[&str] = &[];

/// A directory of this test's own in `/opt` (a system directory the sandbox shows),
/// with `mode`.
fn opt_dir(mode: u32) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("coder-round25b-")
        .tempdir_in("/opt")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    dir
}

/// Runs `script` in `fx`'s workspace, confined or not, with `vars`; asserts that it ran
/// and returns whether `AWS-SECRET` showed, after checking it against the control and
/// [`KNOWN_OPEN`].
fn key_read(fx: &Fixture, name: &str, nobody: bool, confined: bool, script: &str) -> bool {
    let args: &[&str] = if confined {
        &[]
    } else {
        &["--mode", "danger-full-access"]
    };
    let mut cmd: Command = fx.sandbox_in(&fx.ws(), args, script);
    let (_rc, out) = run_text(&mut cmd);
    let who = format!("{name}: nobody={nobody} confined={confined}");
    assert!(out.contains("SERVED"), "{who}: not served: {out}");
    let read = out.contains("AWS-SECRET");
    if !confined {
        assert!(read, "{who}: control: {out}");
    } else if KNOWN_OPEN.contains(&name) {
        assert!(read, "{who}: fixed? take it off KNOWN_OPEN: {out}");
    } else {
        assert!(!read, "{who}: the key was read: {out}");
    }
    read
}

/// The fixture's home key `~/.aws/credentials`, written and owned by the run's user.
fn home_key(fx: &Fixture) -> PathBuf {
    let key = fx.root().join("home/.aws/credentials");
    sandbox_fixture::write(&key, "AWS-SECRET\n");
    fx.own(fx.root());
    key
}

/// A hard link to a home key in a system directory the run's user can enter but not
/// list (`/opt/backup`, mode 0711, root's): the helper's look for the key's other names
/// cannot read the directory and passes it by, while the agent opens the name it knows.
/// Control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_home_keys_other_name_in_a_directory_the_user_cannot_list_is_not_read() {
    let name = "home key linked into an unlistable /opt directory";
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round25b-unlisted-", nobody, &["ws", "home", "state"]);
            let key = home_key(&fx);
            let opt = opt_dir(0o711);
            let link = opt.path().join("credentials");
            std::fs::hard_link(&key, &link).unwrap();
            let script = format!("cat '{}'; echo SERVED", link.display());
            key_read(&fx, name, nobody, confined, &script);
        }
    }
}

/// A home key that is a symlink to a file in a system directory
/// (`~/.aws/credentials -> /opt/dotfiles/aws/credentials`, a dotfiles checkout kept
/// outside home): fix25 refuses a grant holding the target, but the private root shows
/// `/opt` without a grant, and the agent reads the target by its own name. Control:
/// unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_a_home_keys_symlink_leads_to_in_a_system_directory_is_not_read() {
    let name = "home key symlinked into /opt";
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round25b-symlink-", nobody, &["ws", "home", "state"]);
            let opt = opt_dir(0o755);
            let target = opt.path().join("aws-credentials");
            sandbox_fixture::write(&target, "AWS-SECRET\n");
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
            std::fs::create_dir_all(fx.root().join("home/.aws")).unwrap();
            std::os::unix::fs::symlink(&target, fx.root().join("home/.aws/credentials")).unwrap();
            fx.own(fx.root());
            let script = format!("cat '{}'; echo SERVED", target.display());
            key_read(&fx, name, nobody, confined, &script);
        }
    }
}

/// A relocated key directory whose file is a symlink elsewhere in a system directory
/// (`DOCKER_CONFIG=/opt/ci/docker`, `config.json -> /opt/ci/shared/docker.json`): fix25
/// masks the directory with an empty tmpfs, not what its symlinks lead to. Control:
/// unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_a_relocated_key_directorys_symlink_leads_to_is_not_read() {
    let name = "relocated docker config's symlink into /opt";
    let opt = opt_dir(0o755);
    let docker = opt.path().join("docker");
    let target = opt.path().join("shared/docker.json");
    sandbox_fixture::write(&target, "AWS-SECRET\n");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(
        opt.path().join("shared"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::create_dir_all(&docker).unwrap();
    std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&target, docker.join("config.json")).unwrap();
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round25b-reldir-", nobody, &["ws", "home", "state"]);
            fx.own(fx.root());
            let script = format!("cat '{}'; echo SERVED", target.display());
            let args: &[&str] = if confined {
                &[]
            } else {
                &["--mode", "danger-full-access"]
            };
            let mut cmd = fx.sandbox_in(&fx.ws(), args, &script);
            cmd.env("DOCKER_CONFIG", &docker);
            let (_rc, out) = run_text(&mut cmd);
            let who = format!("{name}: nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: not served: {out}");
            let read = out.contains("AWS-SECRET");
            if !confined {
                assert!(read, "{who}: control: {out}");
            } else if KNOWN_OPEN.contains(&name) {
                assert!(read, "{who}: fixed? take it off KNOWN_OPEN: {out}");
            } else {
                assert!(!read, "{who}: the key was read: {out}");
            }
        }
    }
}

/// Unmounts its bind mount when dropped.
struct BindMount(PathBuf);

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A home key's one other name, shown twice by the private root (the host has
/// `/opt/backup` bind-mounted at `/opt/mirror` as well, and the private root's binds are
/// recursive): the look ends once the link count is accounted for, which the first of
/// the two paths does, and the second stays readable. Control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_home_keys_other_name_shown_at_two_places_is_read_at_neither() {
    let name = "home key's other name bind-mounted twice in /opt";
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round25b-twice-", nobody, &["ws", "home", "state"]);
            let key = home_key(&fx);
            let opt = opt_dir(0o755);
            let (backup, mirror) = (opt.path().join("backup"), opt.path().join("mirror"));
            for d in [&backup, &mirror] {
                std::fs::create_dir(d).unwrap();
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            std::fs::hard_link(&key, backup.join("credentials")).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
            let ok = Command::new("mount")
                .args(["--bind"])
                .arg(&backup)
                .arg(&mirror)
                .status()
                .unwrap();
            assert!(ok.success(), "mount --bind");
            let _mount = BindMount(mirror.clone());
            let script = format!(
                "cat '{}/credentials' '{}/credentials'; echo SERVED",
                backup.display(),
                mirror.display()
            );
            key_read(&fx, name, nobody, confined, &script);
        }
    }
}

/// A relocated key that has another name in a system directory
/// (`AWS_SHARED_CREDENTIALS_FILE=/opt/ci/aws-creds`, hard-linked at
/// `/opt/ci/backup/aws-creds`): fix25 masked its path twice, as a relocated place and as
/// a name its look found, and the second mask made the empty file a mount point, so
/// every run failed ("remove the empty mask: Device or resource busy"). The run goes on,
/// and neither name is read. Control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_relocated_key_with_another_name_is_masked_and_the_run_goes_on() {
    let name = "relocated key with a hard link in /opt";
    let opt = opt_dir(0o755);
    let creds = opt.path().join("aws-creds");
    let backup = opt.path().join("backup");
    sandbox_fixture::write(&creds, "AWS-SECRET\n");
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::create_dir(&backup).unwrap();
    std::fs::set_permissions(&backup, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::hard_link(&creds, backup.join("aws-creds")).unwrap();
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round25b-rellink-", nobody, &["ws", "home", "state"]);
            fx.own(fx.root());
            let script = format!(
                "cat '{}' '{}/aws-creds'; echo SERVED",
                creds.display(),
                backup.display()
            );
            let args: &[&str] = if confined {
                &[]
            } else {
                &["--mode", "danger-full-access"]
            };
            let mut cmd = fx.sandbox_in(&fx.ws(), args, &script);
            cmd.env("AWS_SHARED_CREDENTIALS_FILE", &creds);
            let (_rc, out) = run_text(&mut cmd);
            let who = format!("{name}: nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: not served: {out}");
            let read = out.contains("AWS-SECRET");
            assert_eq!(read, !confined, "{who}: {out}");
        }
    }
}

/// `AWS_SHARED_CREDENTIALS_FILE=$HOME/vault/aws-creds` (and `${HOME}/…`), the variable
/// left for botocore to expand (its `raw_config_parse` runs `os.path.expandvars` before
/// `expanduser`; a quoted assignment in a `.env` file or a systemd unit leaves it so):
/// attack25 counted absolute and `~`-spelled values only, so `--read ~/vault` was granted
/// and the agent read the key (closed in round twenty-six: the value's variables are
/// expanded); control: the same grant without the variable.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_a_relocated_key_spelled_with_home_variable_is_refused() {
    let name = "relocated key spelled with $HOME";
    for spelling in ["$HOME/vault/aws-creds", "${HOME}/vault/aws-creds"] {
        for nobody in sandbox_fixture::arms() {
            for set in [true, false] {
                let fx = Fixture::new("coder-round25b-homevar-", nobody, &["ws", "home", "state"]);
                let vault = fx.root().join("home/vault");
                sandbox_fixture::write(&vault.join("aws-creds"), "AWS-SECRET\n");
                fx.own(fx.root());
                let script = format!("cat '{}/aws-creds'; echo SERVED", vault.display());
                let grant = ["--read", vault.to_str().unwrap()];
                let mut cmd = fx.sandbox_in(&fx.ws(), &grant, &script);
                if set {
                    cmd.env("AWS_SHARED_CREDENTIALS_FILE", spelling);
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!("{name} ({spelling}): nobody={nobody} set={set}");
                let served = rc == 0 && out.contains("AWS-SECRET");
                if !set {
                    assert!(served, "{who}: control: {out}");
                } else if KNOWN_OPEN.contains(&name) {
                    assert!(served, "{who}: fixed? take it off KNOWN_OPEN: {out}");
                } else {
                    assert!(
                        !out.contains("AWS-SECRET"),
                        "{who}: the key was served: {out}"
                    );
                }
            }
        }
    }
}

/// A home key's *directory* linked into place (`~/.aws/sso` -> `~/dotfiles/aws-sso/`)
/// whose token has a hard link in the workspace, with no grant: attack25's ratchet
/// (`sandbox_round25_review::a_home_keys_directory_a_symlink_leads_to_is_not_read`) stops
/// at the refusal of `--read ~/dotfiles` once fix25 counts symlink targets, so the hard
/// link is checked here on its own. Control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_stowed_key_directorys_token_linked_into_the_workspace_is_not_read() {
    let name = "stowed key directory's token linked into the workspace";
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new(
                "coder-round25b-stowlink-",
                nobody,
                &["ws", "home/.aws", "state"],
            );
            let home = fx.root().join("home");
            let token = home.join("dotfiles/aws-sso/cache/token.json");
            sandbox_fixture::write(&token, "AWS-SECRET\n");
            std::os::unix::fs::symlink("../dotfiles/aws-sso", home.join(".aws/sso")).unwrap();
            std::fs::hard_link(&token, fx.ws().join("notes")).unwrap();
            fx.own(fx.root());
            key_read(&fx, name, nobody, confined, "cat notes; echo SERVED");
        }
    }
}

/// The user's `tools/checks.list` holds `list`; the user's held `tools/ci.sh` (run by
/// `git fmt` = `!INTERP tools/ci.sh`) is `script`, which runs the scripts the list names
/// (`tools/checks/a.sh` among them); the agent appends to `tools/checks/a.sh`. Control:
/// unconfined (the harness's).
fn list_attack(name: &str, interp: &str, list: &str, script: &str) {
    let setup = |fx: &Fx, ws: &Path| {
        sandbox_fixture::own_script(fx, ws, "tools/checks/a.sh");
        fx.own_file(ws, "tools/checks.list", list);
        fx.own_file(ws, "tools/ci.sh", script);
        let alias = format!("!{interp} tools/ci.sh");
        fx.git(ws, &["config", "alias.fmt", &alias]);
    };
    let attack = format!(
        "{} >> tools/checks/a.sh; echo PLANTED",
        sandbox_fixture::SCRIPT_PAYLOAD
    );
    sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, &attack, &["fmt"]);
}

/// `for f in $(< LIST)` (bash's cat-less spelling).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_bash_redirect_substitution_lists_are_not_the_agents_to_write() {
    list_attack(
        "for over $(< list)",
        "bash",
        "tools/checks/a.sh\n",
        "for f in $(< tools/checks.list); do sh \"$f\"; done\n",
    );
}

/// A list of `:`-separated entries split by `IFS=:`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_ifs_split_list_names_are_not_the_agents_to_write() {
    list_attack(
        "IFS=: list",
        "sh",
        "tools/checks/a.sh:tools/checks/a.sh\n",
        "IFS=:\nfor f in $(cat tools/checks.list); do sh \"$f\"; done\n",
    );
}

/// A list of `,`-separated entries split by `tr` before `xargs`.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_comma_list_tr_splits_names_are_not_the_agents_to_write() {
    list_attack(
        "tr-split comma list",
        "sh",
        "tools/checks/a.sh,tools/checks/a.sh\n",
        "tr , '\\n' < tools/checks.list | xargs -n1 sh\n",
    );
}

/// A list naming a directory whose scripts the held script runs.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_in_a_directory_a_list_names_are_not_the_agents_to_write() {
    list_attack(
        "list of directories",
        "sh",
        "tools/checks\n",
        "for d in $(cat tools/checks.list); do for f in \"$d\"/*.sh; do sh \"$f\"; done; done\n",
    );
}

/// `while read` over a list named through a variable (`L=…; done < "$L"`).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_read_loop_over_a_variables_list_runs_are_not_the_agents_to_write() {
    list_attack(
        "read loop < $L",
        "sh",
        "tools/checks/a.sh\n",
        "L=tools/checks.list\nwhile read -r f; do sh \"$f\"; done < \"$L\"\n",
    );
}

/// `xargs -a LIST` inside a shell function the script calls.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_xargs_list_in_a_function_names_are_not_the_agents_to_write() {
    list_attack(
        "xargs -a in a function",
        "bash",
        "tools/checks/a.sh\n",
        "run() {\n  xargs -n1 -a tools/checks.list sh\n}\nrun\n",
    );
}

/// A here-document's lines fed to `xargs`, the script's names in it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_here_document_names_are_not_the_agents_to_write() {
    list_attack(
        "here-document to xargs",
        "sh",
        "\n",
        "xargs -n1 sh <<EOF\ntools/checks/a.sh\nEOF\n",
    );
}

/// The list's entries without their `.sh`, the script adding it.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_list_names_without_their_suffix_are_not_the_agents_to_write() {
    list_attack(
        "list without suffix",
        "sh",
        "tools/checks/a\n",
        "for f in $(cat tools/checks.list); do sh \"$f.sh\"; done\n",
    );
}
