//! Round twenty-four's second review: this round's sandbox changes (the relocated
//! never-visible places, the account home, the scratch rules' glob escaping, the
//! placeholder registry written in place, and round twenty-four's fixes: hard links to
//! home keys masked as secrets, `xargs` list files held) attacked by one who has read
//! the code, through the built binary, root and uid 65534, each with an unconfined
//! control (`--mode danger-full-access`) showing the attack works without the sandbox.
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::sandbox_fixture::{self, CHECK_SCRIPT, CHECKS_LIST, Fixture, RepoStyle, run_text};

/// Every git fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round24b-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
const KNOWN_OPEN: &[&str] = &[];

/// [`sandbox_fixture::checks_attack`] on this file's repository and ratchet.
fn checks_attack(name: &str, files: &[(&str, &str)], alias: &str, attack: &str) {
    sandbox_fixture::checks_attack(&REPO, KNOWN_OPEN, name, files, alias, attack);
}

/// A secret's other name in the workspace and in a `--read` directory, read by the
/// agent: `prepare` writes the secret (returning its path and the variables that name
/// it); confined, neither name may show `SECRET`, unconfined both do.
fn linked_secret_attack(
    name: &str,
    prepare: impl Fn(&Path) -> (std::path::PathBuf, Vec<(&'static str, std::path::PathBuf)>),
) {
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new(
                "coder-round24b-link-",
                nobody,
                &["ws", "r", "home", "state"],
            );
            let (secret, vars) = prepare(fx.root());
            std::fs::hard_link(&secret, fx.root().join("ws/notes")).unwrap();
            std::fs::hard_link(&secret, fx.root().join("r/notes")).unwrap();
            fx.own(fx.root());
            let r = fx.root().join("r");
            let mut args = vec!["--read", r.to_str().unwrap()];
            if !confined {
                args.extend(["--mode", "danger-full-access"]);
            }
            let script = format!("cat notes '{}/notes'; echo SERVED", r.display());
            let mut cmd = fx.sandbox_in(&fx.root().join("ws"), &args, &script);
            for (var, value) in &vars {
                cmd.env(var, value);
            }
            let (_rc, out) = run_text(&mut cmd);
            let who = format!("{name}: nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: not served: {out}");
            let read = out.matches("SECRET").count();
            if confined && KNOWN_OPEN.contains(&name) {
                assert!(read > 0, "{who}: fixed? take it off KNOWN_OPEN: {out}");
            } else {
                assert_eq!(read, if confined { 0 } else { 2 }, "{who}: {out}");
            }
        }
    }
}

/// `XDG_CONFIG_HOME` outside the home directory (round twenty-four counts its `gh/` and
/// `git/credentials` as never visible): a hard link to its `gh/hosts.yml` in the
/// workspace and in a `--read` directory. Round twenty-four's hard-link masking looked
/// at the home directory's own entries only.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hard_link_to_a_relocated_config_homes_token_is_not_read() {
    linked_secret_attack("relocated gh token", |root| {
        let token = root.join("cfg/gh/hosts.yml");
        sandbox_fixture::write(&token, "GH-SECRET\n");
        (token, vec![("XDG_CONFIG_HOME", root.join("cfg"))])
    });
}

/// `AWS_SHARED_CREDENTIALS_FILE` naming a file outside the home directory: a hard link to
/// it in the workspace and in a `--read` directory.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hard_link_to_a_relocated_aws_credentials_file_is_not_read() {
    linked_secret_attack("relocated aws credentials", |root| {
        let creds = root.join("vault/aws-creds");
        sandbox_fixture::write(&creds, "AWS-SECRET\n");
        (creds.clone(), vec![("AWS_SHARED_CREDENTIALS_FILE", creds)])
    });
}

/// A home key kept elsewhere and linked into place by a dotfiles manager (`stow`:
/// `~/.aws/credentials` a symlink to `~/dotfiles/aws/credentials`): a hard link to the
/// file in the workspace and in a `--read` directory. The masking stat'ed the entries of
/// `~/.aws` without following their symlinks.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_hard_link_to_a_home_key_a_symlink_leads_to_is_not_read() {
    linked_secret_attack("stowed aws credentials", |root| {
        let creds = root.join("home/dotfiles/aws/credentials");
        sandbox_fixture::write(&creds, "AWS-SECRET\n");
        std::fs::create_dir_all(root.join("home/.aws")).unwrap();
        std::os::unix::fs::symlink(
            "../dotfiles/aws/credentials",
            root.join("home/.aws/credentials"),
        )
        .unwrap();
        (creds, vec![])
    });
}

/// The user's `tools/ci.sh`, run by `git fmt`, runs `xargs -n1 -a tools/checks.list sh`:
/// round twenty-four holds a list an alias names, not one a held script names; the agent
/// appends to the script the list names.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_xargs_list_in_a_held_script_names_are_not_the_agents_to_write() {
    checks_attack(
        "xargs -a in a held script",
        &[
            CHECKS_LIST,
            ("tools/ci.sh", "xargs -n1 -a tools/checks.list sh\n"),
        ],
        "!sh tools/ci.sh",
        &sandbox_fixture::append_to(CHECK_SCRIPT),
    );
}

/// The list named through a shell variable of the held script (`L=tools/checks.list;
/// xargs -n1 -a "$L" sh`): the scan reads the script's words, not what its variables hold,
/// so neither the list nor the script it names is held, and the agent's edit of
/// `tools/checks/a.sh` runs at the user's `git fmt` (found by the lead's last pass, a
/// ratchet until round twenty-five, which reads the script's simple assignments before
/// its commands). Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_xargs_list_a_variable_names_are_not_the_agents_to_write() {
    checks_attack(
        "xargs list named by a variable",
        &[
            CHECKS_LIST,
            (
                "tools/ci.sh",
                "L=tools/checks.list\nxargs -n1 -a \"$L\" sh\n",
            ),
        ],
        "!sh tools/ci.sh",
        &sandbox_fixture::append_to(CHECK_SCRIPT),
    );
}

/// The same, the variable exported and spelled braced (`export L=tools/checks.list;
/// xargs -n1 -a ${L} sh`), the agent rewriting the list to name a script of its own.
/// Held since round twenty-five (the script's simple assignments are read before its
/// commands). Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_xargs_list_a_braced_exported_variable_names_is_not_the_agents_to_rewrite() {
    checks_attack(
        "xargs list named by ${L}",
        &[
            CHECKS_LIST,
            (
                "tools/ci.sh",
                "export L=tools/checks.list; xargs -n1 -a ${L} sh\n",
            ),
        ],
        "!sh tools/ci.sh",
        &sandbox_fixture::rewrite_checks_list(),
    );
}

/// The variable set in a file the held script sources (`. tools/vars.sh` holding
/// `L=tools/checks.list`, then `xargs -n1 -a "$L" sh`): the agent appends to the script
/// the list names. Held since round twenty-five (the sourced files' simple assignments
/// are read with the script's, one level). Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_an_xargs_list_a_sourced_variable_names_are_not_the_agents_to_write() {
    checks_attack(
        "xargs list named by a sourced variable",
        &[
            CHECKS_LIST,
            ("tools/vars.sh", "L=tools/checks.list\n"),
            ("tools/ci.sh", ". tools/vars.sh\nxargs -n1 -a \"$L\" sh\n"),
        ],
        "!sh tools/ci.sh",
        &sandbox_fixture::append_to(CHECK_SCRIPT),
    );
}

/// The same list named by a held script, rewritten by the agent to name a script of its
/// own.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_xargs_list_a_held_script_names_is_not_the_agents_to_rewrite() {
    checks_attack(
        "xargs list in a held script rewritten",
        &[
            CHECKS_LIST,
            ("tools/ci.sh", "xargs -n1 -a tools/checks.list sh\n"),
        ],
        "!sh tools/ci.sh",
        &sandbox_fixture::rewrite_checks_list(),
    );
}

/// `git fmt` = `!find tools -name checks.list -exec xargs -n1 -a {} sh ;`: the list is
/// found, not named; the agent appends to the script it names.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_scripts_a_found_xargs_list_names_are_not_the_agents_to_write() {
    checks_attack(
        "find -exec xargs -a",
        &[CHECKS_LIST],
        "!find tools -name checks.list -exec xargs -n1 -a {} sh \\;",
        &sandbox_fixture::append_to(CHECK_SCRIPT),
    );
}

/// The same stowed key (`~/.aws/credentials` a symlink to `~/dotfiles/aws/credentials`),
/// no hard link: `--read ~/dotfiles` (a directory inside the home directory, which may be
/// granted) holds the file `~/.aws/credentials` names. The refusal compares the grant with
/// the never-visible entries resolved (`~/.aws` itself), not with what their entries'
/// symlinks lead to. Control: the same grant with `~/.aws/credentials` a file of its own.
/// Closed in round twenty-five (the symlinks' targets count as never visible): refused.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_what_a_home_keys_symlink_leads_to_is_refused() {
    let name = "read the stowed dir";
    for nobody in sandbox_fixture::arms() {
        for stowed in [true, false] {
            let fx = Fixture::new(
                "coder-round24b-stow-",
                nobody,
                &["ws", "home/.aws", "state"],
            );
            let home = fx.root().join("home");
            sandbox_fixture::write(&home.join("dotfiles/aws/credentials"), "AWS-SECRET\n");
            if stowed {
                std::os::unix::fs::symlink(
                    "../dotfiles/aws/credentials",
                    home.join(".aws/credentials"),
                )
                .unwrap();
            } else {
                sandbox_fixture::write(&home.join(".aws/credentials"), "OTHER\n");
            }
            fx.own(fx.root());
            let dotfiles = home.join("dotfiles");
            let script = format!("cat '{}/aws/credentials'; echo SERVED", dotfiles.display());
            let (rc, out) = fx.sandbox(&["--read", dotfiles.to_str().unwrap()], &script);
            let who = format!("{name}: nobody={nobody} stowed={stowed}");
            if !stowed {
                assert!(
                    rc == 0 && out.contains("AWS-SECRET"),
                    "{who}: control: {out}"
                );
            } else if KNOWN_OPEN.contains(&name) {
                assert!(
                    out.contains("AWS-SECRET"),
                    "{who}: fixed? take it off KNOWN_OPEN: {out}"
                );
            } else {
                assert!(
                    rc != 0 && !out.contains("AWS-SECRET") && out.contains("never"),
                    "{who}: the key was read, or not refused: {out}"
                );
            }
        }
    }
}

/// `AWS_SHARED_CREDENTIALS_FILE` (and `AWS_CONFIG_FILE`) naming a file outside the home
/// directory: round twenty-four counts it never visible, but spelled it `FILE/` (a path
/// joined with `""`), which names nothing, so `--read` of its directory was granted and
/// the agent read the keys. Control: the same grant without the variable.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_grant_holding_a_relocated_aws_credentials_file_is_refused() {
    for nobody in sandbox_fixture::arms() {
        for var in ["AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"] {
            for set in [true, false] {
                let fx = Fixture::new("coder-round24b-aws-", nobody, &["ws", "home", "state"]);
                let vault = fx.root().join("vault");
                sandbox_fixture::write(&vault.join("aws-creds"), "AWS-SECRET\n");
                fx.own(fx.root());
                let script = format!("cat '{}/aws-creds'; echo SERVED", vault.display());
                let mut cmd =
                    fx.sandbox_in(&fx.ws(), &["--read", vault.to_str().unwrap()], &script);
                if set {
                    cmd.env(var, vault.join("aws-creds"));
                }
                let (rc, out) = run_text(&mut cmd);
                let who = format!("nobody={nobody} {var} set={set}");
                if set {
                    assert!(
                        rc != 0 && !out.contains("AWS-SECRET") && out.contains("never"),
                        "{who}: the key was served: {out}"
                    );
                } else {
                    assert!(
                        rc == 0 && out.contains("AWS-SECRET"),
                        "{who}: control: {out}"
                    );
                }
            }
        }
    }
}

/// The list spelled from the held script's own directory (`xargs -n1 -a
/// "$(dirname "$0")"/checks.list sh` in `tools/ci.sh`): the agent appends to the script
/// it names.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn an_xargs_list_spelled_from_a_held_scripts_directory_is_held() {
    checks_attack(
        "xargs -a from the script's dir",
        &[
            CHECKS_LIST,
            (
                "tools/ci.sh",
                "xargs -n1 -a \"$(dirname \"$0\")\"/checks.list sh\n",
            ),
        ],
        "!sh tools/ci.sh",
        &sandbox_fixture::rewrite_checks_list(),
    );
}

/// The placeholder registry is written over in place (round twenty-four): a coder killed
/// between the write and the cut leaves the new list padded with blanks, one that left a
/// registry past the padding limit (1 MiB) has it emptied first, and one killed mid-way
/// may leave text that does not parse. Each: a placeholder (`ws/.vscode`, an empty
/// directory) a killed run registered; the next run in the tree must read the padded or
/// long registry, remove that placeholder, and leave a registry that parses and is cut
/// to its text; a registry that does not parse is started afresh (its placeholder stays,
/// an ordinary empty directory) and the run goes on. Control: the same placeholder
/// unregistered stays.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_registry_left_padded_long_or_torn_is_read_and_cut() {
    for nobody in sandbox_fixture::arms() {
        for (case, removed) in [
            ("padded", true),
            ("long", true),
            ("torn", false),
            ("unregistered", false),
        ] {
            let fx = Fixture::new("coder-round24b-reg-", nobody, &["ws", "home", "state"]);
            fx.own(fx.root());
            let ws = fx.ws();
            let (rc, out) = fx.sandbox(&[], "echo FIRST");
            assert!(rc == 0 && out.contains("FIRST"), "{case}: first run: {out}");
            let registry = fx.root().join("state/placeholders/registry.json");
            assert!(registry.is_file(), "{case}: no registry after a run");
            let left = ws.join(".vscode");
            std::fs::create_dir(&left).unwrap();
            fx.own_entry(&left);
            let meta = std::fs::symlink_metadata(&left).unwrap();
            use std::os::unix::fs::MetadataExt;
            let entry = serde_json::json!([{
                "path": left.to_str().unwrap(),
                "kind": "dir",
                "dev": meta.dev(),
                "ino": meta.ino(),
            }])
            .to_string();
            let text = match case {
                "padded" => format!("{entry}{}", " ".repeat(5000)),
                "long" => format!("{entry}{}", "\n".repeat(2 << 20)),
                "torn" => format!("{entry}{}", &entry[..entry.len() / 2]),
                _ => "[]".to_string(),
            };
            std::fs::write(&registry, text).unwrap();
            let (rc, out) = fx.sandbox(&[], "echo SECOND");
            let who = format!("nobody={nobody} {case}");
            assert!(
                rc == 0 && out.contains("SECOND"),
                "{who}: second run: {out}"
            );
            assert_eq!(
                !left.exists(),
                removed,
                "{who}: the killed run's placeholder"
            );
            let after = std::fs::read(&registry).unwrap();
            let parsed: serde_json::Value = serde_json::from_slice(&after)
                .unwrap_or_else(|e| panic!("{who}: the registry does not parse: {e}"));
            assert_eq!(parsed, serde_json::json!([]), "{who}: registry {parsed}");
            assert_eq!(after.trim_ascii().len(), after.len(), "{who}: blanks left");
        }
    }
}

/// The scratch rules' escaping (round twenty-four) keeps each non-ASCII character as it
/// is: a state directory spelled with multibyte UTF-8 beside glob characters
/// (`stäte-ü[é]*`): the Write tool must find no way into the CLI's scratch through a
/// workspace link (held). A state directory whose name is not UTF-8 (`st\xffte`) was
/// tried too and not kept: the confined CLI does not start (node's lossy spelling of it
/// is no directory: "EROFS ... mkdir"), which fails closed. Real CLI, offline against `fixtures/sandbox/cli_scratch_write_tool.json`;
/// control unconfined.
#[test]
#[ignore = "needs the claude CLI, root and user namespaces: scripts/test runs it"]
fn the_scratch_rules_hold_for_a_state_directory_spelled_beyond_ascii() {
    sandbox_fixture::write_tool_scratch_attack(Some(std::ffi::OsStr::new("stäte-ü[é]*")));
}

/// A relocated never-visible place inside a system directory the sandbox shows read-only
/// (`AWS_SHARED_CREDENTIALS_FILE=/opt/ci/aws-creds`, `DOCKER_CONFIG=/opt/ci/docker`, as
/// a CI image sets them): round twenty-four counts them never visible for the refusal of
/// grants, but nothing masks them where the system's paths show them, and the agent reads
/// them. Open (a ratchet, [`KNOWN_OPEN`]); control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_relocated_key_in_a_system_directory_is_not_read() {
    let name = "relocated into /opt";
    let opt = tempfile::Builder::new()
        .prefix("coder-round24b-")
        .tempdir_in("/opt")
        .unwrap();
    std::fs::set_permissions(opt.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let creds = opt.path().join("aws-creds");
    let docker = opt.path().join("docker");
    sandbox_fixture::write(&creds, "AWS-SECRET\n");
    sandbox_fixture::write(&docker.join("config.json"), "DOCKER-SECRET\n");
    for f in [&creds, &docker.join("config.json")] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round24b-opt-", nobody, &["ws", "home", "state"]);
            fx.own(fx.root());
            let script = format!(
                "cat '{}' '{}/config.json'; echo SERVED",
                creds.display(),
                docker.display()
            );
            let args: &[&str] = if confined {
                &[]
            } else {
                &["--mode", "danger-full-access"]
            };
            let mut cmd = fx.sandbox_in(&fx.ws(), args, &script);
            cmd.env("AWS_SHARED_CREDENTIALS_FILE", &creds)
                .env("DOCKER_CONFIG", &docker);
            let (_rc, out) = run_text(&mut cmd);
            let who = format!("{name}: nobody={nobody} confined={confined}");
            assert!(out.contains("SERVED"), "{who}: not served: {out}");
            let read = out.matches("-SECRET").count();
            if !confined {
                assert_eq!(read, 2, "{who}: control: {out}");
            } else if KNOWN_OPEN.contains(&name) {
                assert!(read > 0, "{who}: fixed? take it off KNOWN_OPEN: {out}");
            } else {
                assert_eq!(read, 0, "{who}: the keys were read: {out}");
            }
        }
    }
}

/// A hard link to a home key whose other name is outside every grant but inside a system
/// directory the sandbox shows (`/opt/backup/credentials`, a backup tool's snapshot):
/// round twenty-four masks a key's other names in the trees it scans only, and the agent
/// reads it. Open (a ratchet, [`KNOWN_OPEN`]; SECURITY.md's known limit on secrets in
/// system directories); control: unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_home_keys_other_name_in_a_system_directory_is_not_read() {
    let name = "home key linked into /opt";
    for nobody in sandbox_fixture::arms() {
        for confined in [true, false] {
            let fx = Fixture::new("coder-round24b-optlink-", nobody, &["ws", "home", "state"]);
            let key = fx.root().join("home/.aws/credentials");
            sandbox_fixture::write(&key, "AWS-SECRET\n");
            fx.own(fx.root());
            let opt = tempfile::Builder::new()
                .prefix("coder-round24b-")
                .tempdir_in("/opt")
                .unwrap();
            std::fs::set_permissions(opt.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            let link = opt.path().join("credentials");
            std::fs::hard_link(&key, &link).unwrap();
            std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o644)).unwrap();
            let script = format!("cat '{}'; echo SERVED", link.display());
            let args: &[&str] = if confined {
                &[]
            } else {
                &["--mode", "danger-full-access"]
            };
            let (_rc, out) = run_text(&mut fx.sandbox_in(&fx.ws(), args, &script));
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
