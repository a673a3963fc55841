//! Round thirty-two's review: round thirty-one's review's fixes (a held script's `PATH`
//! spellings, a held `.envrc`'s `PATH_add`, `layout`, `source_env` and `dotenv` files,
//! functions running `"$@"`, a failed walk's placeholders) and the lead's fold of the
//! `.envrc` readers and `--return-diff`'s quarantine names, attacked by one who has read
//! the code, through the built binary, root and uid 65534, each with an unconfined
//! control (`--mode danger-full-access`).
//!
//! * **What a held `.envrc` runs besides direnv's own commands**: the `.envrc` was read
//!   only for `PATH_add`, `layout`, `source_env` and `dotenv`, never as the script direnv
//!   runs, so the user's `scripts/env.sh` it sources by bash's `source` or `.`, a
//!   `.envrc.local` it sources when there, a script it runs with `bash` or whose output
//!   it `eval`s were the agent's to write, and direnv ran them at the user's next `cd`
//!   there (no `direnv allow` is asked for them). `source_env_if_exists
//!   "$PWD/.envrc.local"` and a nested `.envrc`'s `source_up .envrc.local` alike.
//! * **An `.envrc` that is a link** (`ln -s config/envrc .envrc`, which direnv loads in
//!   the link's directory): never read, its `PATH_add tools/bin` left `tools/bin/git` the
//!   agent's (closed here); an `.envrc`'s `export PYTHONPATH="$PWD/src"` left
//!   `src/sitecustomize.py` the agent's, run by the user's next `python3` (closed with
//!   the `.envrc` read as a script).
//! * **A variables file of the user's that an `.envrc` loads** (`dotenv vars.txt`, a
//!   name the default deny globs do not mask): the agent appended numbered git settings
//!   of a `core.fsmonitor` (closed here: held).
//! * **`--return-diff` applied elsewhere**: a quarantined file whose name git quotes
//!   (`é/.claude/settings.json`) kept its section, and outside git coder's own diff wrote
//!   a path's line breaks as they are, so a file's name spelled a section of the agent's
//!   making `.envrc` (closed here: names quoted as git quotes them).
//! * **A function that runs its arguments, as scripts write them**: a body of several
//!   lines, or one that first says what it runs (`echo "+ $*" >&2; "$@"`): `run sh
//!   tools/local` was not read as `sh tools/local`, and the agent's `tools/local` ran
//!   (closed here: the function read whole).
//! * **A `cd` before `$PWD`** (round thirty-one's ratchet; `cd tools || exit 1`, `cd
//!   "$(dirname "$0")"`, `pushd` then `$(pwd)`): `$PWD` read at the top only (closed
//!   here: read in the directories entered too); `PATH` set by a builtin (`printf -v
//!   PATH`, round thirty-one's other ratchet; `read -r PATH <<<`), closed here.
//! * **Readers in time growing with the square of a script's size**: a script's lines
//!   each read against every variable met before (94 s of setup for 24 KiB), its own
//!   directory searched for from the line's start each time, a line's words each looked
//!   for among the others (closed here: one pass each).
//! * **Held, kept as tests**: `source_env tools` (a directory's `.envrc`, a protected
//!   name), `git -c core.sshCommand="$S"` and `GIT_SSH_COMMAND` built from a variable.
//! * Not tried: zsh's `path+=()` (not read, SECURITY.md; zsh is not on a fresh machine
//!   for a control), rsync's `-e` (no rsync here), mise's `mise.toml` (no mise here:
//!   Known limits), direnv's `use nix`/`use flake` (no nix: Known limits).
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use common::sandbox_fixture::{self, EnvrcUser, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round32-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
/// A quarantined file below a directory whose name is not UTF-8: `changes.files` names it
/// by a lossy path, so neither `quarantined_to` nor the diff's renaming finds it, and the
/// diff applied elsewhere makes the agent's settings.
const KNOWN_OPEN: &[&str] = &["a quarantined name that is not UTF-8"];

/// Whether the case `name` runs: `A32_ONLY` unset, or naming it.
fn chosen(name: &str) -> bool {
    std::env::var("A32_ONLY").map_or(true, |only| only == name)
}

/// The user's files of an attack (work-tree path, text), the first the `.envrc`.
type UserFiles = &'static [(&'static str, &'static str)];

/// The user's `.envrc` runs a file of the tree by the shell's own means: (name, the user's
/// files; where the agent appends its payload).
const ENVRC_RUNS: &[(&str, UserFiles, &str)] = &[
    (
        "source of the user's script",
        &[
            (".envrc", "source scripts/env.sh"),
            ("scripts/env.sh", "export A=1\n"),
        ],
        "scripts/env.sh",
    ),
    (
        ". of the user's script",
        &[
            (".envrc", ". ./scripts/env.sh"),
            ("scripts/env.sh", "export A=1\n"),
        ],
        "scripts/env.sh",
    ),
    (
        "source of a local file absent at the start",
        &[(".envrc", "[ -f .envrc.local ] && source .envrc.local")],
        ".envrc.local",
    ),
    (
        ". of a local file in an if, absent at the start",
        &[(
            ".envrc",
            "if [ -f .envrc.local ]; then . ./.envrc.local; fi",
        )],
        ".envrc.local",
    ),
    (
        "source of a virtualenv's activate absent at the start",
        &[(
            ".envrc",
            "[ -f .venv/bin/activate ] && source .venv/bin/activate",
        )],
        ".venv/bin/activate",
    ),
    (
        "bash of the user's script",
        &[
            (".envrc", "bash scripts/setup.sh"),
            ("scripts/setup.sh", "true\n"),
        ],
        "scripts/setup.sh",
    ),
    (
        "eval of a script's output",
        &[
            (".envrc", "eval \"$(sh scripts/env.sh)\""),
            ("scripts/env.sh", "echo export A=1\n"),
        ],
        "scripts/env.sh",
    ),
    (
        "source_env_if_exists of $PWD",
        &[(".envrc", "source_env_if_exists \"$PWD/.envrc.local\"")],
        ".envrc.local",
    ),
    (
        "source_up of a local file",
        &[("sub/.envrc", "source_up .envrc.local")],
        ".envrc.local",
    ),
    (
        "source_up_if_exists of a local file two up",
        &[
            ("a/b/.envrc", "source_up_if_exists .envrc.local"),
            ("a/.keep", ""),
        ],
        ".envrc.local",
    ),
    (
        "source_env of a directory",
        &[(".envrc", "source_env tools"), ("tools/.keep", "")],
        "tools/.envrc",
    ),
];

/// Each of [`ENVRC_RUNS`]: the agent appends a payload that creates the marker to the file
/// (making it when absent); the user's next `cd` there in a direnv shell runs it. Both
/// arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_an_envrc_runs_by_the_shells_own_means_is_not_the_agents_to_write() {
    let mut broken = Vec::new();
    for (name, files, target) in ENVRC_RUNS {
        if !chosen(name) {
            continue;
        }
        let open = KNOWN_OPEN.contains(name);
        let plant = format!(
            "mkdir -p \"$(dirname {target})\"; {} >> {target}; echo PLANTED",
            sandbox_fixture::SCRIPT_PAYLOAD
        );
        broken.extend(sandbox_fixture::envrc_attack(
            &REPO, open, name, files, &plant,
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The agent's files for the `--return-diff` attacks: a directory past ASCII holding
/// `.claude/settings.json` (git's diff quotes its name), and a file whose path holds line
/// breaks that spell a section creating `.envrc` (each `/` of it a directory).
const DIFF_PAYLOAD: &str = r#"mkdir -p 'é/.claude' && echo '{"hooks":{}}' > 'é/.claude/settings.json'
p=$'y\n--- /dev/null\n+++ b/.envrc\n@@ -0,0 +1 @@\n+touch PWNED\nz'
mkdir -p "$(dirname "$p")" && echo innocent > "$p"
echo ok > plain.txt"#;

/// What `patch -p1` makes of `diff` in a fresh directory below `root`: whether it made
/// `.envrc` and `settings` (`é/.claude/settings.json`).
fn applied(root: &std::path::Path, diff: &str, settings: &std::ffi::OsStr) -> (bool, bool) {
    use std::io::Write;
    let dir = root.join("applied");
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = std::process::Command::new("patch")
        .args(["-p1", "--batch", "--silent", "-d"])
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(diff.as_bytes())
        .unwrap();
    common::wait_within(&mut child, std::time::Duration::from_secs(60));
    let made = |rel: &std::ffi::OsStr| dir.join(rel).symlink_metadata().is_ok();
    (made(".envrc".as_ref()), made(settings))
}

/// `--return-diff` of a run whose agent made [`DIFF_PAYLOAD`], applied elsewhere with
/// `patch -p1` (what a caller does with it): confined, the end-of-run guard moved
/// `é/.claude/` aside and the diff must name it there (round thirty-two's review: git's
/// quoted `"b/\303\251/.claude/settings.json"` was left as it was, and the patch made the
/// agent's settings); and in a workspace outside git, coder's own diff wrote the path with
/// its line breaks, a section of the agent's making `.envrc` (both modes). Control
/// unconfined: the settings are the agent's to keep, and the patch makes them. Both arms,
/// in and outside git.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_returned_diff_names_no_file_the_agent_chose_and_no_quarantined_one() {
    use common::Bounded;
    use std::os::unix::fs::PermissionsExt;
    let mut broken = Vec::new();
    for owner in sandbox_fixture::owners() {
        for git in [false, true] {
            for confined in [true, false] {
                let (_dir, root) = sandbox_fixture::temp_root("coder-round32-diff-");
                for d in ["ws", "home", "state", "xdg"] {
                    std::fs::create_dir_all(root.join(d)).unwrap();
                }
                // Project settings of the user's: the change ledger's snapshot is taken
                // before the child starts. This fake child writes at once, where the real
                // CLI's first write waits on a request the proxy holds until the snapshot
                // is done; beside the snapshot, its files were reported changed with no
                // diff now and then (a CI run under load).
                sandbox_fixture::write(&root.join("ws/.claude/settings.json"), "{}\n");
                let claude = root.join("claude");
                sandbox_fixture::write(&claude, &sandbox_fixture::payload_claude(DIFF_PAYLOAD));
                let exec = std::fs::Permissions::from_mode(0o755);
                std::fs::set_permissions(&claude, exec).unwrap();
                if git {
                    common::git_init_with_a_commit(&root.join("ws"));
                }
                if let Some(uid) = owner {
                    sandbox_fixture::chown_tree(&root, uid);
                }
                let mut extra = vec!["--return-diff"];
                if !confined {
                    extra.extend(["--sandbox", "danger-full-access"]);
                }
                let ws = root.join("ws");
                let out = sandbox_fixture::coder_as(&root, owner, &ws, &claude, &extra, "go")
                    .output_bounded();
                let envelope: serde_json::Value =
                    serde_json::from_slice(&out.stdout).unwrap_or_default();
                let diff = envelope["diff"]["unified"].as_str().unwrap_or_default();
                let who = format!("{owner:?} git={git} confined={confined}");
                if !diff.contains("+ok") {
                    broken.push(format!(
                        "{who}: no diff: {}",
                        sandbox_fixture::printed(&out)
                    ));
                    continue;
                }
                let (envrc, settings) = applied(&root, diff, "é/.claude/settings.json".as_ref());
                if envrc {
                    broken.push(format!("{who}: the diff made .envrc:\n{diff}"));
                }
                if settings == confined {
                    broken.push(format!(
                        "{who}: the diff made the settings {settings}:\n{diff}"
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// The user's `.envrc` sets up what a program they run reads, or is a link: (name, the
/// user's side, the agent's plant).
const ENVRC_OTHERS: &[(&str, EnvrcUser, &str)] = &[
    (
        "an .envrc that is a link",
        EnvrcUser {
            files: &[
                ("config/envrc", "PATH_add tools/bin"),
                ("tools/bin/.keep", ""),
            ],
            link: Some((".envrc", "config/envrc")),
            then: "git status",
        },
        "mkdir -p tools/bin; printf '#!/bin/sh\\ntouch \"%s\"\\n' \"$M\" > tools/bin/git; \
         chmod +x tools/bin/git; echo PLANTED",
    ),
    (
        "PYTHONPATH of the tree",
        EnvrcUser {
            files: &[
                (".envrc", "export PYTHONPATH=\"$PWD/src\""),
                ("src/.keep", ""),
            ],
            link: None,
            then: "python3 -c pass",
        },
        "printf 'open(\"%s\", \"w\")\\n' \"$M\" > src/sitecustomize.py; echo PLANTED",
    ),
    (
        "path_add PYTHONPATH",
        EnvrcUser {
            files: &[(".envrc", "path_add PYTHONPATH src"), ("src/.keep", "")],
            link: None,
            then: "python3 -c pass",
        },
        "printf 'open(\"%s\", \"w\")\\n' \"$M\" > src/sitecustomize.py; echo PLANTED",
    ),
];

/// Each of [`ENVRC_OTHERS`]: the user's next command in a direnv shell there runs the
/// agent's payload. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_an_envrc_sets_up_or_links_to_is_not_the_agents_to_write() {
    let mut broken = Vec::new();
    for (name, user, plant) in ENVRC_OTHERS {
        if !chosen(name) {
            continue;
        }
        let open = KNOWN_OPEN.contains(name);
        broken.extend(sandbox_fixture::envrc_attack_by(
            &REPO,
            (open, name),
            user,
            plant,
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A held script of shapes the readers took in time growing with the square of their size:
/// 3,000 lines each assigning a variable of its own (each line was read against every
/// variable known: 94 s of setup in a debug build), a line of 1,800 `x=$(dirname "$0")
/// ;` (each one found by a search from the line's start: 10 s) and a line of 4,000
/// assignments before a command (each word looked for among all the others: 4.5 s).
fn slow_script() -> String {
    let vars: Vec<String> = (0..3000).map(|i| format!("v{i}=x")).collect();
    let dirname = "x=$(dirname \"$0\") ;".repeat(1800);
    let words: Vec<String> = (0..4000).map(|i| format!("a{i}=x")).collect();
    format!("{}\n{dirname}\n{} true\n", vars.join("\n"), words.join(" "))
}

/// The user's `git ci` runs [`slow_script`] (some 90 KiB): a confined run's setup reads it
/// in a few seconds (a debug build), not minutes. Round thirty-two's review: any script
/// the scan reads (one the agent made where a held script sources it without a `/`, say)
/// held every later run's start for minutes. Both arms; no control (only a confined run
/// scans).
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_held_script_of_many_variables_and_long_lines_is_read_in_linear_time() {
    let mut broken = Vec::new();
    for nobody in sandbox_fixture::arms() {
        let fx = sandbox_fixture::GitFx::new(&REPO, nobody);
        sandbox_fixture::user_ci(&fx, &fx.ws(), "sh", &slow_script());
        let started = std::time::Instant::now();
        let (rc, out) = fx.sandbox("workspace-write", "echo SERVED");
        let took = started.elapsed();
        if rc != 0 || !out.contains("SERVED") || took > std::time::Duration::from_secs(30) {
            broken.push(format!("nobody={nobody}: rc {rc} after {took:?}: {out}"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A held script's ssh command for git given through a variable: (name, the held
/// `tools/sync.sh`). Found held (kept as tests).
const SSH_BY_VARIABLE: &[(&str, &str)] = &[
    (
        "git -c core.sshCommand in a variable",
        "S=\"ssh -o ProxyCommand='sh ci/proxy' -o BatchMode=yes\"\n\
         git -c core.sshCommand=\"$S\" ls-remote ssh://git@example.invalid/x >/dev/null 2>&1; true",
    ),
    (
        "GIT_SSH_COMMAND from a variable",
        "P=\"sh ci/proxy\"\nexport GIT_SSH_COMMAND=\"ssh -o ProxyCommand='$P' -o BatchMode=yes\"\n\
         git ls-remote ssh://git@example.invalid/x >/dev/null 2>&1; true",
    ),
];

/// Each of [`SSH_BY_VARIABLE`]: the agent makes `ci/proxy` (executable), the user's `git
/// sync` = `!sh tools/sync.sh` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn what_ssh_runs_through_a_variable_git_is_given_is_not_the_agents_to_make() {
    for (name, script) in SSH_BY_VARIABLE {
        if !chosen(name) {
            continue;
        }
        sandbox_fixture::held_file_attack(
            &REPO,
            KNOWN_OPEN,
            name,
            |fx, ws| {
                fx.own_file(ws, "tools/sync.sh", &format!("{script}\n"));
                fx.git(ws, &["config", "alias.sync", "!sh tools/sync.sh"]);
            },
            "mkdir -p ci; printf 'touch \"%s\"\\n' \"$M\" > ci/proxy; chmod +x ci/proxy; \
             echo PLANTED",
            &["sync"],
        );
    }
}

/// The quarantined settings of [`the_returned_diff_names_no_file_the_agent_chose_and_no_quarantined_one`]
/// below a directory named by the byte 0xff (not UTF-8): the diff (git's `"b/\\377/…"`)
/// still makes them when applied elsewhere. A ratchet (KNOWN_OPEN); both arms, git.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_quarantined_name_that_is_not_utf8_keeps_its_diff_section() {
    use common::Bounded;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let name = "a quarantined name that is not UTF-8";
    let open = KNOWN_OPEN.contains(&name);
    let settings = std::ffi::OsStr::from_bytes(b"\xff/.claude/settings.json");
    let mut broken = Vec::new();
    for owner in sandbox_fixture::owners() {
        let (_dir, root) = sandbox_fixture::temp_root("coder-round32-diff8-");
        for d in ["ws", "home", "state", "xdg"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let claude = root.join("claude");
        let payload = "mkdir -p $'\\xff/.claude' && echo '{}' > $'\\xff/.claude/settings.json'; \
                       echo ok > plain.txt";
        sandbox_fixture::write(&claude, &sandbox_fixture::payload_claude(payload));
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        common::git_init_with_a_commit(&root.join("ws"));
        if let Some(uid) = owner {
            sandbox_fixture::chown_tree(&root, uid);
        }
        let ws = root.join("ws");
        let out = sandbox_fixture::coder_as(&root, owner, &ws, &claude, &["--return-diff"], "go")
            .output_bounded();
        let envelope: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let diff = envelope["diff"]["unified"].as_str().unwrap_or_default();
        let moved = ws.join(std::ffi::OsStr::from_bytes(
            b"\xff/.claude.coder-quarantine-1",
        ));
        if !diff.contains("+ok") || !moved.exists() {
            broken.push(format!("{owner:?}: not moved aside, or no diff: {diff}"));
            continue;
        }
        let (_, made) = applied(&root, diff, settings);
        if made != open {
            broken.push(format!(
                "{owner:?} (open {open}): the diff made the settings {made}:\n{diff}"
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A held script runs `tools/local`, absent at the start and without a script's suffix,
/// through a function of its own that runs its arguments, written as scripts write them:
/// (name, the held `tools/ci.sh`, run by bash).
const WRAPPERS: &[(&str, &str)] = &[
    (
        "a function of several lines",
        "run() {\n  \"$@\"\n}\n[ -f tools/local ] && run sh tools/local; true",
    ),
    (
        "a function that says what it runs first",
        "run() { echo \"+ $*\" >&2; \"$@\"; }\n[ -f tools/local ] && run sh tools/local; true",
    ),
    (
        "a function of several lines that says what it runs first",
        "run() {\n  echo \"+ $*\" >&2\n  \"$@\"\n}\n[ -f tools/local ] && run sh tools/local; true",
    ),
];

/// Each of [`WRAPPERS`]: the agent makes `tools/local` (executable), the user's `git ci`
/// runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_made_script_run_through_a_wrapper_as_scripts_write_them_is_moved_aside() {
    for (name, script) in WRAPPERS {
        if !chosen(name) {
            continue;
        }
        sandbox_fixture::held_file_attack(
            &REPO,
            KNOWN_OPEN,
            name,
            |fx, ws| sandbox_fixture::user_ci(fx, ws, "bash", script),
            &format!(
                "mkdir -p tools; {{ {}; }} > tools/local; chmod +x tools/local; echo PLANTED",
                sandbox_fixture::SCRIPT_PAYLOAD
            ),
            &["ci"],
        );
    }
}

/// The user's `.envrc` loads variables from a file of theirs that the default deny globs
/// do not mask: (name, the `.envrc`, the file).
const DOTENVS_THERE: &[(&str, &str, &str)] = &[
    (
        "dotenv of the user's vars.txt",
        "dotenv vars.txt",
        "vars.txt",
    ),
    (
        "dotenv_if_exists of the user's config/dev.env",
        "dotenv_if_exists config/dev.env",
        "config/dev.env",
    ),
];

/// Each of [`DOTENVS_THERE`], the file there with `A=1`: the agent appends numbered git
/// settings of a `core.fsmonitor` that creates the marker, which the user's next `git
/// status` in a direnv shell runs. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_variables_file_of_the_users_an_envrc_loads_is_not_the_agents_to_write() {
    let mut broken = Vec::new();
    for (name, text, file) in DOTENVS_THERE {
        if !chosen(name) {
            continue;
        }
        let open = KNOWN_OPEN.contains(name);
        let plant = format!(
            "printf 'GIT_CONFIG_COUNT=1\\nGIT_CONFIG_KEY_0=core.fsmonitor\\n\
             GIT_CONFIG_VALUE_0=\"touch %s; false\"\\n' \"$M\" >> {file}; echo PLANTED"
        );
        let files = [(".envrc", *text), (*file, "A=1\n")];
        broken.extend(sandbox_fixture::envrc_attack(
            &REPO, open, name, &files, &plant,
        ));
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A held script (run by bash) enters a directory, then puts `$PWD/bin` on `PATH`, or sets
/// `PATH` with a builtin: (name, the held `tools/ci.sh`). Round thirty-one's ratchets "a
/// cd before $PWD" and "printf -v PATH" are two more.
const CD_THEN_PWD: &[(&str, &str)] = &[
    (
        "cd or exit, then export",
        "cd tools || exit 1\nexport PATH=\"$PWD/bin:$PATH\"",
    ),
    (
        "cd to the script's directory",
        "cd \"$(dirname \"$0\")\"\nPATH=\"$PWD/bin:$PATH\"",
    ),
    (
        "pushd, then $(pwd)",
        "pushd tools >/dev/null\nPATH=\"$(pwd)/bin:$PATH\"",
    ),
    (
        "read PATH from a here-string",
        "read -r PATH <<< \"$PWD/tools/bin:$PATH\"",
    ),
];

/// Each of [`CD_THEN_PWD`]: `tools/bin` holds the user's `.keep`; the agent makes
/// `tools/bin/fmt-local`, the user's `git ci` runs it. Both arms; control unconfined.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_program_on_a_path_set_after_a_cd_is_not_the_agents_to_make() {
    for (name, path) in CD_THEN_PWD {
        if !chosen(name) {
            continue;
        }
        let script = format!("{path}\ncommand -v fmt-local >/dev/null && fmt-local; true");
        let attack = |name: &str,
                      setup: &dyn Fn(&sandbox_fixture::GitFx, &std::path::Path),
                      plant: &str,
                      user: &[&str]| {
            sandbox_fixture::held_file_attack(&REPO, KNOWN_OPEN, name, setup, plant, user)
        };
        sandbox_fixture::path_program_attack(
            attack,
            name,
            ("bash", &script),
            "tools/bin/fmt-local",
        );
    }
}
