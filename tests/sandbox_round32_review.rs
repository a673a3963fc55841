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
//!
//! `KNOWN_OPEN` lists attacks still open: an attack on it asserts that its payload still
//! lands, so the list can only shrink.

mod common;

use common::sandbox_fixture::{self, RepoStyle};

/// Every fixture here: the user's repository on git's default branch.
const REPO: RepoStyle = RepoStyle {
    prefix: "coder-round32-",
    init: &["init", "-q"],
    readme_owned: false,
    env: &[],
};

/// Attacks still open (a ratchet; SECURITY.md, Known limits).
const KNOWN_OPEN: &[&str] = &[];

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
