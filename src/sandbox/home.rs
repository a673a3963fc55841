//! The home directory's share of a policy: the toolchain paths the agent may read, the tool
//! caches it may read (and write with `--tool-caches`), and the git identity it gets in
//! place of `~/.gitconfig`.
//!
//! A home directory is where credentials live (`~/.ssh`, `~/.aws`, `~/.netrc`, tokens in
//! `~/.config/gh`, exported keys in shell startup files), so it is granted by allow-list:
//! only the entries below, each checked after resolving symlinks so that a link cannot turn
//! `~/.local/bin` into the whole home. Everything else in it does not exist for the agent.
//! Shell startup files are deliberately not on the list: they often export tokens, and the
//! agent already inherits the caller's `PATH`.
//!
//! `~/.gitconfig` is not readable either (credential helpers, `url.*.insteadOf` with
//! embedded tokens, `http.extraHeader`). `git commit` still works: the user's
//! `user.name`/`user.email` are copied into a file of the run's own, named by
//! `GIT_CONFIG_GLOBAL`, and nothing else of the file is.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What the agent may do with a granted home path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HomeAccess {
    Read,
    Write,
}

/// Toolchains (read only): compilers, interpreters, version managers, user-installed tools.
pub const TOOLCHAINS: [&str; 17] = [
    ".cargo/bin",
    ".cargo/env",
    ".rustup",
    ".nvm",
    ".volta",
    ".bun/bin",
    ".deno/bin",
    ".pyenv",
    ".rbenv",
    ".asdf",
    ".local/bin",
    ".local/lib",
    "go/bin",
    ".sdkman/candidates",
    ".config/git/ignore",
    ".config/git/attributes",
    ".elan",
];

/// Tool caches: readable by default so offline builds work, writable with `--tool-caches`.
/// Only the cache parts: `~/.m2/settings.xml` and `~/.gradle/gradle.properties` hold
/// repository passwords, `~/.cargo/credentials.toml` a registry token.
pub const CACHES: [&str; 14] = [
    ".cargo/registry",
    ".cargo/git",
    ".npm/_cacache",
    ".cache/pip",
    ".cache/uv",
    ".cache/pypoetry",
    ".cache/go-build",
    ".cache/yarn",
    ".cache/node-gyp",
    ".cache/deno",
    "go/pkg/mod",
    ".m2/repository",
    ".gradle/caches",
    ".gradle/wrapper",
];

/// Home entries that are never visible, whatever is granted. Round twenty-five's review
/// added the files this module's own notes name as holding passwords and tokens
/// (`~/.m2/settings.xml`, `~/.gradle/gradle.properties`), cargo's older
/// `~/.cargo/credentials`, and the cloud, registry and database tools' keys: `--read
/// ~/.m2` or `--read ~/.gradle` had shown them. Round twenty-six added those of the other
/// tools that keep a password or token in the home directory: pip's config (an index URL
/// with credentials), rclone's, poetry's `auth.toml`, yarn's, bundler's, composer's,
/// helm's, terraform's, hub's and glab's, Copilot's, podman's `auth.json`, sops' age
/// keys, `pass`'s store, MySQL's, s3cmd's, boto's, OCI's, Databricks', Pulumi's,
/// Kaggle's, Hugging Face's token, sbt's, NuGet's, doctl's, fly's, uv's, 1Password's and
/// hcloud's, and Claude Code's own login (`~/.claude/.credentials.json`). Round
/// twenty-seven's review added the other coding agents' logins (OpenAI Codex's, Gemini
/// CLI's) and the deploy CLIs' (Supabase's, firebase-tools', Vercel's, wrangler's):
/// `--read ~/.codex` showed its token. Round twenty-eight's review added Claude Code's
/// device keys (`~/.claude/.device-keys.json`) and its global config (`~/.claude.json`,
/// the older `~/.claude/.config.json`: a Console API key is kept there as
/// `primaryApiKey` without a keychain, and MCP servers' `env` holds theirs), which the
/// CLI protects with its login, and Gemini CLI's `~/.gemini/.env` (its `GEMINI_API_KEY`)
/// and MCP OAuth tokens: `--read` of the file, or its hard link in the workspace, showed
/// them. Round twenty-nine's review added the global config's copies the CLI keeps
/// (`~/.claude/backups/.claude.json.backup.<ms>` and `.corrupted.<ms>`, the older CLIs'
/// `~/.claude.json.backup`), each with the same `primaryApiKey`, Codex's MCP OAuth tokens
/// without a keyring (`~/.codex/.credentials.json`) and Gemini CLI's token store
/// (`~/.gemini/mcp-oauth-tokens-v2.json`, encrypted with a key of the host and user
/// names): a hard link in the workspace showed them.
pub const NEVER_VISIBLE: [&str; 75] = [
    ".ssh",
    ".gnupg",
    ".aws",
    ".config/gh",
    ".config/git/credentials",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".docker",
    ".kube",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".config/gcloud",
    ".azure",
    ".terraform.d/credentials.tfrc.json",
    ".gem/credentials",
    ".local/share/keyrings",
    ".pgpass",
    ".vault-token",
    ".config/pip",
    ".pip",
    ".config/rclone",
    ".config/pypoetry/auth.toml",
    ".yarnrc",
    ".yarnrc.yml",
    ".bundle/config",
    ".config/composer/auth.json",
    ".composer/auth.json",
    ".config/helm",
    ".terraformrc",
    ".config/hub",
    ".config/glab-cli",
    ".config/github-copilot",
    ".config/containers/auth.json",
    ".config/sops",
    ".password-store",
    ".my.cnf",
    ".mylogin.cnf",
    ".s3cfg",
    ".boto",
    ".oci",
    ".databrickscfg",
    ".pulumi/credentials.json",
    ".kaggle",
    ".huggingface/token",
    ".cache/huggingface/token",
    ".ivy2/.credentials",
    ".sbt/.credentials",
    ".nuget/NuGet/NuGet.Config",
    ".config/doctl",
    ".fly/config.yml",
    ".local/share/uv/credentials",
    ".config/op",
    ".config/hcloud",
    ".claude/.credentials.json",
    ".claude/.device-keys.json",
    ".claude.json",
    ".claude/.config.json",
    ".claude/backups",
    ".claude.json.backup",
    ".codex/auth.json",
    ".codex/.credentials.json",
    ".gemini/oauth_creds.json",
    ".gemini/.env",
    ".gemini/mcp-oauth-tokens.json",
    ".gemini/mcp-oauth-tokens-v2.json",
    ".supabase/access-token",
    ".config/configstore/firebase-tools.json",
    ".local/share/com.vercel.cli/auth.json",
    ".config/.wrangler",
    ".wrangler",
];

/// The home paths to grant, with their access. Missing entries are skipped; an entry that
/// resolves (through symlinks) to the home directory or an ancestor of it, or to a path
/// that holds or lies in a never-visible entry, is dropped.
pub(crate) fn home_grants(home: &Path, writable_caches: bool) -> Vec<(PathBuf, HomeAccess)> {
    home_grants_with(
        home,
        writable_caches,
        &KeyPlaces::default().grant_entries(home),
    )
}

/// [`home_grants`] with the never-visible entries as [`grant_entries_of`] gives them
/// (`never`, one a [`NEVER_VISIBLE`] entry): the policy takes them from the places it
/// resolved for the run ([`KeyPlaces::grant_entries`]) instead of a `realpath` of each
/// entry again (some 200 `readlink`s, round twenty-nine).
///
/// Each candidate is resolved from the home's canonical path one name at a time
/// ([`resolve_beneath`]), as a `realpath` of the whole path would put it: most are
/// missing, and a `realpath` read every ancestor's link again (some 100 `readlink`s).
pub(crate) fn home_grants_with(
    home: &Path,
    writable_caches: bool,
    never: &[PathBuf],
) -> Vec<(PathBuf, HomeAccess)> {
    let base = std::fs::canonicalize(home).ok();
    let safe = |rel: &str| -> Option<PathBuf> {
        let canonical = match base
            .as_deref()
            .and_then(|b| resolve_beneath(b, Path::new(rel)))
        {
            Some((path, true)) => path,
            // A name on the way is missing: so is the entry (`realpath` fails).
            Some((_, false)) => return None,
            None => std::fs::canonicalize(home.join(rel)).ok()?,
        };
        let reaches = home.starts_with(&canonical)
            || never
                .iter()
                .any(|n| n.starts_with(&canonical) || canonical.starts_with(n));
        (!reaches).then(|| home.join(rel))
    };
    let cache_access = if writable_caches {
        HomeAccess::Write
    } else {
        HomeAccess::Read
    };
    TOOLCHAINS
        .iter()
        .map(|rel| (*rel, HomeAccess::Read))
        .chain(CACHES.iter().map(|rel| (*rel, cache_access)))
        .filter_map(|(rel, access)| Some((safe(rel)?, access)))
        .collect()
}

/// `home`'s [`NEVER_VISIBLE`] entries as [`home_grants`] compares them: canonical where
/// they are, as written (`home` joined with the entry) where they are not.
fn grant_entries_of(home: &Path) -> Vec<PathBuf> {
    NEVER_VISIBLE
        .iter()
        .map(|rel| home.join(rel))
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect()
}

/// Most entries [`linked_never_visible`] looks at below one home directory's
/// never-visible entries; past it the run fails closed (a key's other name would go
/// unseen).
const MAX_NEVER_VISIBLE_ENTRIES: usize = 100_000;

/// (dev, ino) of each regular file in the never-visible `places` (the home directory's
/// [`NEVER_VISIBLE`] entries and those a variable moves elsewhere, resolved:
/// `policy::never_visible_places`; a symlink among their files followed to a file, as a
/// dotfiles manager's `~/.aws/credentials` -> `~/dotfiles/aws/credentials`; nothing
/// below them followed) that has more than one name. A hard link the user made to
/// `~/.ssh/authorized_keys` inside a grant (`cp -al`, a snapshotting backup) passed the
/// refusal of grants touching those entries, which compares paths, and the agent
/// appended its key through it (round twenty-three's second review): the scan masks such
/// names as secrets ([`super::scan`]). Round twenty-four's second review found the
/// relocated ones (`$XDG_CONFIG_HOME/gh/hosts.yml` outside the home directory,
/// `AWS_SHARED_CREDENTIALS_FILE`) and the stowed ones left out. The agent cannot make
/// one during the run (it sees none of these files), so the names that exist at the
/// start are all there are. Cost: a `stat` of each file there (a few dozen in the usual
/// home); the walk of the trees for the other names runs only when one has more than one
/// link. The other names the private root shows are looked for there too
/// ([`super::hostmask`], which walks it whole: no link count tells when all are found).
pub(crate) fn linked_never_visible(
    places: &[PathBuf],
) -> Result<HashSet<(u64, u64)>, super::SandboxError> {
    let mut found = HashSet::new();
    let mut looked = 0usize;
    // The places are canonical where they are ([`never_visible_places`]): a `realpath`
    // of each again (some 500 `readlink`s a run, round twenty-nine) changed none, and
    // one not there fails its `lstat` below as it failed the `realpath`.
    let mut pending: Vec<(PathBuf, usize)> =
        places.iter().map(|place| (place.clone(), 0)).collect();
    while let Some((path, depth)) = pending.pop() {
        looked += 1;
        if looked > MAX_NEVER_VISIBLE_ENTRIES || depth > 64 {
            return Err(super::SandboxError::ScanLimit {
                what: "the entries of the home directory's keys and tokens (~/.ssh, …)",
                limit: MAX_NEVER_VISIBLE_ENTRIES,
                path,
            });
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        // A symlink to a file counts as the file (a dotfiles manager's); one to a
        // directory is not followed (it may lead anywhere, `/` too).
        let meta = if meta.is_symlink() {
            std::fs::metadata(&path)
                .ok()
                .filter(|m| m.is_file())
                .unwrap_or(meta)
        } else {
            meta
        };
        if meta.is_file() && meta.nlink() > 1 {
            found.insert((meta.dev(), meta.ino()));
        } else if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            pending.extend(entries.flatten().map(|e| (e.path(), depth + 1)));
        }
    }
    Ok(found)
}

/// The user's git identity (`user.name`, `user.email`) from `~/.gitconfig` and
/// `$XDG_CONFIG_HOME/git/config`, as the text of a config file holding only that. `include`
/// directives are not followed.
pub(crate) fn git_identity(home: &Path, xdg_config: Option<&Path>) -> String {
    let xdg = xdg_config.map_or_else(|| home.join(".config"), Path::to_path_buf);
    let mut name = None;
    let mut email = None;
    // git reads the XDG file first and ~/.gitconfig after it; the later value wins.
    for file in [xdg.join("git/config"), home.join(".gitconfig")] {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (key, value) in user_section(&text) {
            match key.as_str() {
                "name" => name = Some(value),
                "email" => email = Some(value),
                _ => {}
            }
        }
    }
    let mut out = String::new();
    if name.is_some() || email.is_some() {
        out.push_str("[user]\n");
        for (key, value) in [("name", name), ("email", email)] {
            if let Some(value) = value.filter(|v| !v.chars().any(char::is_control)) {
                let quoted = value.replace('\\', "\\\\").replace('"', "\\\"");
                out.push_str(&format!("\t{key} = \"{quoted}\"\n"));
            }
        }
    }
    out
}

/// `(key, value)` pairs of the `[user]` sections of a git config file, keys lowercased.
fn user_section(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut in_user = false;
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let header = rest.split(']').next().unwrap_or("").trim();
            in_user = header.eq_ignore_ascii_case("user");
            // `[user] name = x` on one line.
            let after = rest.split_once(']').map_or("", |(_, a)| a.trim());
            if in_user && !after.is_empty() {
                pairs.extend(key_value(after));
            }
            continue;
        }
        if in_user {
            pairs.extend(key_value(line));
        }
    }
    pairs
}

fn key_value(line: &str) -> Option<(String, String)> {
    let (key, value) = line.split_once('=')?;
    let key = key.trim().to_ascii_lowercase();
    if key.is_empty() || key.starts_with('#') || key.starts_with(';') {
        return None;
    }
    Some((key, config_value(value.trim())))
}

/// A git config value: quotes removed, `\"`, `\\`, `\t`, `\n` unescaped, a comment outside
/// quotes cut off, surrounding space trimmed.
fn config_value(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim().to_string()
}

/// Each home directory of this process, canonical: `$HOME`'s, the user entry's and the
/// invoking user's ([`invoking_user_home`]).
pub(crate) fn homes_here() -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = Vec::new();
    let found = env_path("HOME")
        .into_iter()
        .chain(account_home())
        .chain(invoking_user_home())
        .filter_map(|h| std::fs::canonicalize(h).ok());
    for home in found {
        if !homes.contains(&home) {
            homes.push(home);
        }
    }
    homes
}

/// The home directory (its user entry's) of the user who started coder through `sudo`,
/// `doas` or `pkexec` (`SUDO_USER`, `DOAS_USER`, the number `PKEXEC_UID`): that user's
/// keys are as much the caller's as the process's own. Until round twenty-six a `sudo
/// coder …` counted `$HOME` (root's, as `sudo` sets it) and root's entry only, and
/// `--read /home/alice/.ssh` was granted; under `pkexec` until round twenty-eight's
/// review. Only ever adds refusals and masks, so a variable set by hand is harmless.
pub(crate) fn invoking_user_home() -> Option<PathBuf> {
    let var = |name: &str| std::env::var(name).ok().filter(|n| !n.is_empty());
    let by_name = ["SUDO_USER", "DOAS_USER"]
        .iter()
        .find_map(|name| nix::unistd::User::from_name(&var(name)?).ok().flatten());
    let by_uid = || {
        let uid = var("PKEXEC_UID")?.parse().ok()?;
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
    };
    by_name
        .or_else(by_uid)
        .map(|user| user.dir)
        .filter(|dir| dir.is_absolute())
}

/// The home directory of this process's user entry (`/etc/passwd`), if it names one.
pub(crate) fn account_home() -> Option<PathBuf> {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|user| user.dir)
        .filter(|dir| dir.is_absolute())
}

/// Where each of `home`'s never-visible entries is, or would be made
/// ([`resolve_leniently`]), and where this process's environment moves the same keys
/// ([`RELOCATED_SECRETS`]). Resolved once for the checks of one path that all need them
/// (the policy's `touches_never_visible` and `home_mounted_beneath`): each resolution canonicalizes
/// every entry (glibc's `realpath`, a `readlink` per component: about ten system calls
/// an entry, some 250 µs a list here), and the two checks resolved it each.
///
/// The entries are resolved from the home directory's canonical path one name at a time
/// ([`resolve_beneath`]): a `realpath` of each entry, and of each missing entry's parent
/// again, read every ancestor's link anew (some 700 `readlink`s a home, two homes a run,
/// twice a run: about 1 ms on the run's path each time, round twenty-eight).
pub(crate) fn never_visible_places(home: &Path) -> Vec<PathBuf> {
    HomeKeys::resolve(home).places
}

/// One home directory's never-visible places ([`never_visible_places`]) and its
/// [`NEVER_VISIBLE`] entries as [`home_grants`] compares them ([`grant_entries_of`]),
/// from one resolution.
#[derive(Debug, Clone)]
struct HomeKeys {
    places: Vec<PathBuf>,
    /// Whether each of `places` may be there: `false` where a name on the way to it was
    /// found missing.
    there: Vec<bool>,
    grant_entries: Vec<PathBuf>,
}

impl HomeKeys {
    fn resolve(home: &Path) -> HomeKeys {
        let base = std::fs::canonicalize(home).ok();
        let mut grant_entries = Vec::with_capacity(NEVER_VISIBLE.len());
        let mut resolved: Vec<(PathBuf, bool)> = Vec::with_capacity(NEVER_VISIBLE.len());
        for rel in NEVER_VISIBLE {
            let path = home.join(rel);
            match base
                .as_deref()
                .and_then(|b| resolve_beneath(b, Path::new(rel)))
            {
                Some((place, there)) => {
                    // Missing (`realpath` fails): the entry as written.
                    grant_entries.push(if there { place.clone() } else { path });
                    resolved.push((place, there));
                }
                None => {
                    grant_entries.push(std::fs::canonicalize(&path).unwrap_or(path.clone()));
                    resolved.push((resolve_leniently(&path, 0), true));
                }
            }
        }
        resolved.extend(relocated_unresolved().map(|path| (resolve_leniently(&path, 0), true)));
        // Where a name was found missing there is nothing to list (an `opendir` a place,
        // most of them missing, twice a run).
        let there: Vec<PathBuf> = resolved
            .iter()
            .filter(|(_, there)| *there)
            .map(|(place, _)| place.clone())
            .collect();
        let linked = symlinked_from(&there, home);
        let (mut places, mut there): (Vec<PathBuf>, Vec<bool>) = resolved.into_iter().unzip();
        there.extend(linked.iter().map(|_| true));
        places.extend(linked);
        HomeKeys {
            places,
            there,
            grant_entries,
        }
    }
}

/// The never-visible places ([`never_visible_places`]) of each home directory a run
/// counts, resolved once per run: the policy's checks of each path (the workspace, each
/// `--read` and `--write`), the scan's look for keys' other names and the masks of places
/// outside the home directory ([`places_outside_home`]) each resolved them again, some
/// 250 `readlink`s a run (round twenty-six's review). A home not among them (a caller
/// without a run) is resolved when asked, as before.
///
/// The run mode's check of the workspace resolves them too, a millisecond before the
/// policy: it hands them over ([`KeyHandoff`]) instead of the policy resolving them again
/// (round twenty-nine).
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyPlaces {
    homes: Vec<(PathBuf, HomeKeys)>,
}

impl KeyPlaces {
    /// The places of each of `homes` (canonical), resolved now.
    pub(crate) fn of(homes: impl IntoIterator<Item = PathBuf>) -> KeyPlaces {
        let mut keys = KeyPlaces::default();
        keys.add(homes);
        keys
    }

    /// The places of each of `homes` (canonical) not resolved yet, resolved now.
    pub(crate) fn add(&mut self, homes: impl IntoIterator<Item = PathBuf>) {
        for home in homes {
            if !self.homes.iter().any(|(h, _)| *h == home) {
                let keys = HomeKeys::resolve(&home);
                self.homes.push((home, keys));
            }
        }
    }

    fn of_home(&self, home: &Path) -> Option<&HomeKeys> {
        self.homes.iter().find(|(h, _)| h == home).map(|(_, k)| k)
    }

    /// `home`'s never-visible places: those resolved for it, or resolved now.
    pub(crate) fn places(&self, home: &Path) -> std::borrow::Cow<'_, [PathBuf]> {
        match self.of_home(home) {
            Some(keys) => std::borrow::Cow::Borrowed(&keys.places),
            None => std::borrow::Cow::Owned(never_visible_places(home)),
        }
    }

    /// `home`'s never-visible places that may be there ([`KeyPlaces::places`] without those
    /// a name on the way to was found missing): the look for their other names
    /// ([`linked_never_visible`]) `lstat`s each.
    pub(crate) fn places_there(&self, home: &Path) -> Vec<PathBuf> {
        match self.of_home(home) {
            Some(keys) => (keys.places.iter().zip(&keys.there))
                .filter(|(_, there)| **there)
                .map(|(place, _)| place.clone())
                .collect(),
            None => never_visible_places(home),
        }
    }

    /// `home`'s [`NEVER_VISIBLE`] entries as [`home_grants_with`] compares them: from the
    /// resolution made for it, or resolved now ([`grant_entries_of`]).
    pub(crate) fn grant_entries(&self, home: &Path) -> Vec<PathBuf> {
        match self.of_home(home) {
            Some(keys) => keys.grant_entries.clone(),
            None => grant_entries_of(home),
        }
    }
}

/// The never-visible places the run mode's check of the workspace resolved
/// ([`super::policy::workspace_refusal_keeping`]), handed to the run's policy once
/// ([`KeyHandoff::take`]): a copy of the request (a repair, a later turn) starts a run
/// later than the check, after an agent ran, and resolves them anew.
#[derive(Debug, Clone, Default)]
pub struct KeyHandoff(std::sync::Arc<std::sync::Mutex<Option<KeyPlaces>>>);

impl KeyHandoff {
    pub(crate) fn put(&self, keys: KeyPlaces) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(keys);
        }
    }

    /// What the check left, if nothing took it yet.
    pub(crate) fn take(&self) -> Option<KeyPlaces> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// Where the symlinks among the entries of the never-visible `places` lead (resolved,
/// or where a dangling one's target would be made), but for the home directory and its
/// ancestors: a dotfiles manager's `~/.aws/credentials` -> `~/dotfiles/aws/credentials`
/// (`stow`) made `--read ~/dotfiles` show the credentials, the refusal of grants having
/// compared them with `~/.aws` alone (round twenty-four's second review). What such a
/// symlink leads to is not entered. A bounded walk (as [`linked_never_visible`]'s, which
/// fails the run closed past the same cap: what is left unseen here never reaches an
/// agent); a few dozen `lstat`s in the usual home.
fn symlinked_from(places: &[PathBuf], home: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending: Vec<(PathBuf, usize)> = places.iter().map(|p| (p.clone(), 0)).collect();
    let mut looked = 0usize;
    while let Some((dir, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            looked += 1;
            if looked > MAX_NEVER_VISIBLE_ENTRIES {
                return found;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && depth < 64 {
                pending.push((entry.path(), depth + 1));
            } else if kind.is_symlink() {
                let target = resolve_leniently(&entry.path(), 0);
                if !home.starts_with(&target) {
                    found.push(target);
                }
            }
        }
    }
    found
}

/// The never-visible places this process's environment moves out of the home directory
/// ([`RELOCATED_SECRETS`]) that exist, canonical: masked where the private root shows
/// them ([`super::hostmask`]; a CI image's `AWS_SHARED_CREDENTIALS_FILE=/opt/ci/aws-creds`
/// was read through the system's `/opt`, round twenty-four's second review).
pub(crate) fn relocated_places() -> Vec<PathBuf> {
    relocated_unresolved()
        .filter_map(|path| std::fs::canonicalize(path).ok())
        .collect()
}

/// The never-visible places outside every home directory that exist, canonical: those a
/// variable moves ([`relocated_places`]) and where a home key's symlink leads
/// ([`never_visible_places`]: `~/.aws/credentials` -> `/opt/dotfiles/aws/credentials`,
/// or `config.json` in `DOCKER_CONFIG=/opt/ci/docker` -> `/opt/ci/shared/docker.json`):
/// the private root shows system directories without a grant, and such a target was
/// read by its own name there (round twenty-five's second review). Masked by
/// [`super::hostmask`].
pub(crate) fn places_outside_home(keys: &KeyPlaces) -> Vec<PathBuf> {
    let homes = homes_here();
    let mut places = relocated_places();
    for home in &homes {
        let outside = keys
            .places(home)
            .iter()
            // Canonical where they exist ([`resolve_leniently`]).
            .filter(|p| p.exists() && !homes.iter().any(|h| p.starts_with(h)))
            .cloned()
            .collect::<Vec<_>>();
        places.extend(outside);
    }
    places.sort();
    places.dedup();
    places
}

/// The first of [`RELOCATED_SECRETS`]'s places that is, or holds, one of the `system`
/// directories the private root shows: its variable, the place (canonical) and the system
/// directory. `DOCKER_CONFIG=/etc` made all of `/etc` a key, shown empty (the agent's
/// DNS, TLS roots and user names gone, failing in ways that did not name the variable),
/// and `DOCKER_CONFIG=/usr` stopped the secret scan with a `sandbox_error` blaming the
/// workspace (round twenty-six's second review). A place inside one (`/etc/docker`) is
/// masked as before, but not one inside a `whole` directory, every file of which the
/// system needs (the TLS trust stores: `DOCKER_CONFIG=/etc/ssl/certs/ca-certificates.crt`
/// hid the CA bundle as a key, round twenty-eight).
pub(crate) fn relocated_over_system(
    system: &[&str],
    whole: &[&str],
) -> Option<(&'static str, PathBuf, PathBuf)> {
    let canonical = |dirs: &[&str]| -> Vec<PathBuf> {
        dirs.iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .collect()
    };
    let (system, whole) = (canonical(system), canonical(whole));
    RELOCATED_SECRETS.iter().find_map(|(var, rel)| {
        env_paths(var)
            .into_iter()
            .map(|p| if rel.is_empty() { p } else { p.join(rel) })
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .find_map(|place| {
                let holds = |dir: &&PathBuf| dir.starts_with(&place);
                let held = (system.iter().find(holds)).or_else(|| {
                    whole
                        .iter()
                        .find(|dir| holds(dir) || place.starts_with(dir))
                })?;
                Some((*var, place.clone(), held.clone()))
            })
    })
}

/// [`RELOCATED_SECRETS`] as this process's environment spells them, where something is.
fn relocated_unresolved() -> impl Iterator<Item = PathBuf> {
    relocated_named().filter(|path| std::fs::symlink_metadata(path).is_ok())
}

/// Every place [`RELOCATED_SECRETS`] names in this process's environment, there or not.
fn relocated_named() -> impl Iterator<Item = PathBuf> {
    RELOCATED_SECRETS
        .iter()
        // `""` is the path itself: `join("")` would add a `/`, and a file named so (the
        // AWS variables') is no directory, so never there (round twenty-four's second
        // review: `--read` of the directory holding it was granted).
        .flat_map(|(var, rel)| {
            env_paths(var)
                .into_iter()
                .map(move |p| if rel.is_empty() { p } else { p.join(rel) })
        })
}

/// The places of [`RELOCATED_SECRETS`] where nothing is yet: they count where they exist
/// only (a variable may point into a project), and the scan holds them absent where they
/// lie in a writable tree (round twenty-nine's review: with `KUBECONFIG=$PWD/kubeconfig`
/// before the cluster was made, the agent made the kubeconfig and the user's next
/// `kubectl` ran its exec credential plugin; `AWS_CONFIG_FILE`'s `credential_process`
/// alike).
pub(crate) fn relocated_absent() -> Vec<PathBuf> {
    relocated_named()
        .filter(|path| path.is_absolute() && std::fs::symlink_metadata(path).is_err())
        .collect()
}

/// The never-visible entries a variable moves out of the home directory (a variable,
/// the entry relative to the path it names; `""` for the path itself). With
/// `XDG_CONFIG_HOME=~/cfg`, `--read ~/cfg` and `--cd ~/cfg` showed `gh/hosts.yml` and
/// `git/credentials`, which `~/.config` would not have (round twenty-four's review).
/// Counted where they exist (or are a link) only: a variable may point anywhere, into a
/// project too (a test's `XDG_CONFIG_HOME=<base>/.no-xdg`), and an absent one there
/// refusing the project would be refusing it for a name. Round twenty-five's review
/// added the variables of the other keys [`NEVER_VISIBLE`] lists (`KUBECONFIG`, a `:`
/// list as kubectl reads it; `CARGO_HOME`; npm's user config; `NETRC`) and of the cloud
/// and database tools' (`CLOUDSDK_CONFIG`, `GOOGLE_APPLICATION_CREDENTIALS`,
/// `AZURE_CONFIG_DIR`, `PGPASSFILE`): `--read` of the directory holding one showed it.
///
/// Round twenty-six added those of the keys it added to [`NEVER_VISIBLE`]
/// (`PIP_CONFIG_FILE`, `RCLONE_CONFIG`, `XDG_CONFIG_HOME`'s `pip/`, `rclone/`, …).
/// Round twenty-seven's review added Codex's `CODEX_HOME` and the XDG places of the
/// deploy CLIs' logins it added to [`NEVER_VISIBLE`], and Claude Code's own login where the CLI reads it
/// through a variable (`CLAUDE_CONFIG_DIR`, `CLAUDE_SECURESTORAGE_CONFIG_DIR`,
/// `CLAUDE_CODE_HOST_CREDS_FILE`): `--read` of a second profile's directory showed it.
/// Round twenty-eight's review added the CLI's global config in `CLAUDE_CONFIG_DIR`
/// (`.claude.json`, `.config.json`), which holds a Console API key.
const RELOCATED_SECRETS: [(&str, &str); 57] = [
    ("XDG_CONFIG_HOME", "gh"),
    ("XDG_CONFIG_HOME", "git/credentials"),
    ("GH_CONFIG_DIR", ""),
    ("GNUPGHOME", ""),
    ("DOCKER_CONFIG", ""),
    ("AWS_SHARED_CREDENTIALS_FILE", ""),
    ("AWS_CONFIG_FILE", ""),
    ("KUBECONFIG", ""),
    ("CARGO_HOME", "credentials.toml"),
    ("CARGO_HOME", "credentials"),
    ("NPM_CONFIG_USERCONFIG", ""),
    ("npm_config_userconfig", ""),
    ("NETRC", ""),
    ("CLOUDSDK_CONFIG", ""),
    ("GOOGLE_APPLICATION_CREDENTIALS", ""),
    ("AZURE_CONFIG_DIR", ""),
    ("PGPASSFILE", ""),
    ("PIP_CONFIG_FILE", ""),
    ("RCLONE_CONFIG", ""),
    ("POETRY_CONFIG_DIR", "auth.toml"),
    ("COMPOSER_HOME", "auth.json"),
    ("BUNDLE_USER_CONFIG", ""),
    ("TF_CLI_CONFIG_FILE", ""),
    ("REGISTRY_AUTH_FILE", ""),
    ("HELM_REGISTRY_CONFIG", ""),
    ("HELM_REPOSITORY_CONFIG", ""),
    ("HF_TOKEN_PATH", ""),
    ("HF_HOME", "token"),
    ("KAGGLE_CONFIG_DIR", ""),
    ("MYSQL_TEST_LOGIN_FILE", ""),
    ("BOTO_CONFIG", ""),
    ("XDG_CONFIG_HOME", "pip"),
    ("XDG_CONFIG_HOME", "rclone"),
    ("XDG_CONFIG_HOME", "pypoetry/auth.toml"),
    ("XDG_CONFIG_HOME", "composer/auth.json"),
    ("XDG_CONFIG_HOME", "helm"),
    ("XDG_CONFIG_HOME", "hub"),
    ("XDG_CONFIG_HOME", "glab-cli"),
    ("XDG_CONFIG_HOME", "github-copilot"),
    ("XDG_CONFIG_HOME", "containers/auth.json"),
    ("XDG_CONFIG_HOME", "sops"),
    ("XDG_CONFIG_HOME", "doctl"),
    ("XDG_CONFIG_HOME", "op"),
    ("XDG_CONFIG_HOME", "hcloud"),
    ("XDG_DATA_HOME", "uv/credentials"),
    ("CLAUDE_CONFIG_DIR", ".credentials.json"),
    ("CLAUDE_SECURESTORAGE_CONFIG_DIR", ".credentials.json"),
    ("CLAUDE_CODE_HOST_CREDS_FILE", ""),
    ("CLAUDE_CONFIG_DIR", ".claude.json"),
    ("CLAUDE_CONFIG_DIR", ".config.json"),
    ("CLAUDE_CONFIG_DIR", "backups"),
    ("CLAUDE_CONFIG_DIR", ".claude.json.backup"),
    ("CODEX_HOME", "auth.json"),
    ("CODEX_HOME", ".credentials.json"),
    ("XDG_CONFIG_HOME", "configstore/firebase-tools.json"),
    ("XDG_CONFIG_HOME", ".wrangler"),
    ("XDG_DATA_HOME", "com.vercel.cli/auth.json"),
];

/// The paths a variable of this process's environment names: absolute, or spelled from
/// `$HOME` with a leading `~` left for the tool to expand (botocore expands
/// `AWS_SHARED_CREDENTIALS_FILE=~/vault/creds`; round twenty-five's review: a relative
/// spelling was skipped and `--read ~/vault` granted); each entry of a `:` list for the
/// variables read as one (`KUBECONFIG`). Variables in the value (`$HOME/vault/creds`,
/// `${HOME}/…`, any set in this environment) are expanded first, as botocore's
/// `os.path.expandvars` does; a value still relative then is read against this process's
/// working directory (the user's shell's, which holds the variable and starts the user's
/// tools) and against the home directory (a login shell's, a user service's): until round
/// twenty-six neither spelling was counted and `--read ~/vault` showed the key.
fn env_paths(name: &str) -> Vec<PathBuf> {
    let Some(value) = std::env::var_os(name).filter(|v| !v.is_empty()) else {
        return Vec::new();
    };
    let value = expand_vars(value.as_bytes(), |var| std::env::var_os(var));
    let values: Vec<PathBuf> = if name == "KUBECONFIG" {
        std::env::split_paths(&value).collect()
    } else {
        vec![PathBuf::from(value)]
    };
    let bases: Vec<PathBuf> = std::env::current_dir()
        .ok()
        .into_iter()
        .chain(env_path("HOME"))
        .collect();
    values
        .into_iter()
        .filter(|p| !p.as_os_str().is_empty())
        .flat_map(|p| match tilde_expanded(p.clone()) {
            Some(path) => vec![path],
            None => bases.iter().map(|base| base.join(&p)).collect(),
        })
        .collect()
}

/// `value` with each `$NAME` and `${NAME}` (`NAME` of ASCII letters, digits and `_`)
/// that `lookup` knows replaced by its value, the rest left as written: Python's
/// `os.path.expandvars`.
fn expand_vars(value: &[u8], lookup: impl Fn(&OsStr) -> Option<OsString>) -> OsString {
    let mut out = Vec::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.iter().position(|b| *b == b'$') {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at + 1..];
        let known = super::config_text::variable_reference(after)
            .filter(|(name, _)| !name.is_empty())
            .and_then(|(name, len)| Some((lookup(OsStr::from_bytes(name))?, len)));
        // An unknown one is left as written: its `$` here, the rest read on.
        rest = match known {
            Some((found, len)) => {
                out.extend_from_slice(found.as_bytes());
                &after[len..]
            }
            None => {
                out.push(b'$');
                after
            }
        };
    }
    out.extend_from_slice(rest);
    OsString::from_vec(out)
}

/// `path` when absolute; `~/REST` (or `~`) as `$HOME/REST`; else `None`.
fn tilde_expanded(path: PathBuf) -> Option<PathBuf> {
    if path.is_absolute() {
        return Some(path);
    }
    let rest = path.strip_prefix("~").ok()?;
    env_path("HOME").map(|home| home.join(rest))
}

/// `path` canonical where it exists; else its nearest existing ancestor canonical with
/// the rest appended, a dangling symlink on the way followed (at most 40 of them) to
/// where its target would be made.
fn resolve_leniently(path: &Path, hops: u32) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return path.to_path_buf();
    };
    let parent = resolve_leniently(parent, hops);
    let here = parent.join(name);
    match std::fs::read_link(&here) {
        Ok(target) if hops < 40 => resolve_leniently(&parent.join(target), hops + 1),
        _ => here,
    }
}

/// `base` (canonical) joined with `rel`, resolved as [`resolve_leniently`] resolves it,
/// with one `readlink` a name: where a name is there and no symlink, the path so far is
/// still canonical; where it is missing (or cannot be looked up: a file, a directory
/// without search permission), nothing beneath it is there either, and the rest is
/// joined as it is, as [`resolve_leniently`] does, and the path is said not to be there
/// (`false`). `None` where a name is a symlink or `rel` holds anything but plain names:
/// the caller resolves the whole path then.
fn resolve_beneath(base: &Path, rel: &Path) -> Option<(PathBuf, bool)> {
    use std::path::Component;
    let mut here = base.to_path_buf();
    let mut names = rel.components();
    while let Some(component) = names.next() {
        let Component::Normal(name) = component else {
            return None;
        };
        here.push(name);
        match std::fs::read_link(&here) {
            Ok(_) => return None,
            // There, and not a symlink.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(_) => {
                for component in names {
                    let Component::Normal(name) = component else {
                        return None;
                    };
                    here.push(name);
                }
                return Some((here, false));
            }
        }
    }
    Some((here, true))
}

/// An absolute path a non-empty variable of this process's environment names.
pub(super) fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_grant_reaches_a_never_visible_entry() {
        for granted in TOOLCHAINS.iter().chain(CACHES.iter()) {
            for never in NEVER_VISIBLE {
                let (g, n) = (Path::new(granted), Path::new(never));
                assert!(
                    !g.starts_with(n) && !n.starts_with(g),
                    "{granted} / {never}"
                );
            }
        }
    }

    /// Resolved name by name from the canonical home ([`resolve_beneath`]), every entry
    /// is where a `realpath` of the whole path puts it ([`resolve_leniently`], what
    /// [`never_visible_places`] did before round twenty-eight): a relative symlink with
    /// `..`, a dangling one, a loop, a file where a directory would be, a symlinked file
    /// in a directory that is there, entries missing at every depth; from the home's own
    /// path and from a symlink to it.
    #[test]
    fn never_visible_places_are_where_a_whole_path_resolution_puts_them() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/authorized_keys"), "k").unwrap();
        std::fs::create_dir_all(elsewhere.join("cfg/gh")).unwrap();
        std::fs::create_dir_all(elsewhere.join("files")).unwrap();
        std::fs::write(elsewhere.join("files/settings.xml"), "s").unwrap();
        symlink("../elsewhere/cfg", home.join(".config")).unwrap();
        symlink("/nonexistent-coder-test/aws", home.join(".aws")).unwrap();
        symlink(".kube", home.join(".kube")).unwrap();
        std::fs::write(home.join(".local"), "a file").unwrap();
        std::fs::create_dir_all(home.join(".m2")).unwrap();
        symlink(
            elsewhere.join("files/settings.xml"),
            home.join(".m2/settings.xml"),
        )
        .unwrap();
        std::fs::create_dir_all(home.join(".gradle")).unwrap();
        std::fs::create_dir_all(home.join(".docker")).unwrap();
        let linked_home = dir.path().join("linked-home");
        symlink(&home, &linked_home).unwrap();
        std::fs::write(elsewhere.join("files/key"), "k").unwrap();
        symlink("../../elsewhere/files/key", home.join(".ssh/id_linked")).unwrap();
        symlink(elsewhere.join("files"), home.join(".docker/linked-dir")).unwrap();
        for home in [&home, &linked_home] {
            let mut whole: Vec<PathBuf> = NEVER_VISIBLE
                .iter()
                .map(|rel| home.join(rel))
                .chain(relocated_unresolved())
                .map(|path| resolve_leniently(&path, 0))
                .collect();
            let linked = symlinked_from(&whole, home);
            whole.extend(linked);
            assert_eq!(never_visible_places(home), whole, "{}", home.display());
        }
        let canonical = std::fs::canonicalize(&home).unwrap();
        let places = never_visible_places(&home);
        let at = |rel: &str| places[NEVER_VISIBLE.iter().position(|n| *n == rel).unwrap()].clone();
        assert_eq!(at(".ssh"), canonical.join(".ssh"));
        assert_eq!(
            at(".config/gh"),
            std::fs::canonicalize(elsewhere.join("cfg/gh")).unwrap()
        );
        assert_eq!(at(".aws"), PathBuf::from("/nonexistent-coder-test/aws"));
        assert_eq!(at(".gnupg"), canonical.join(".gnupg"));
        // The symlinks inside the keys that are there are followed.
        let key = std::fs::canonicalize(elsewhere.join("files/key")).unwrap();
        assert!(places.contains(&key), "{places:?}");
    }

    /// [`home_grants`] as it was before round twenty-nine: every candidate and every
    /// never-visible entry resolved by a `realpath` of the whole path.
    fn home_grants_whole(home: &Path, writable_caches: bool) -> Vec<(PathBuf, HomeAccess)> {
        let never = grant_entries_of(home);
        let safe = |path: &Path| -> bool {
            let Ok(canonical) = std::fs::canonicalize(path) else {
                return false;
            };
            !home.starts_with(&canonical)
                && !never
                    .iter()
                    .any(|n| n.starts_with(&canonical) || canonical.starts_with(n))
        };
        let cache = match writable_caches {
            true => HomeAccess::Write,
            false => HomeAccess::Read,
        };
        TOOLCHAINS
            .iter()
            .map(|rel| (home.join(rel), HomeAccess::Read))
            .chain(CACHES.iter().map(|rel| (home.join(rel), cache)))
            .filter(|(path, _)| safe(path))
            .collect()
    }

    /// The grants and the keys' other names from the places resolved once for the run
    /// ([`KeyPlaces`], the handoff of the run mode's check) are those a `realpath` of
    /// every path gave: grants that are there, missing, a file where a directory would
    /// be, symlinked to the home, into a key, into a key beneath a symlinked ancestor,
    /// dangling, in a loop; keys with other names (a hard link, a symlink to one); from
    /// the home's own path and from a symlink to it.
    #[test]
    fn grants_and_key_links_from_the_run_s_places_are_those_of_whole_path_resolutions() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let elsewhere = dir.path().join("elsewhere");
        for d in [".ssh", ".cargo/registry", ".local", ".m2", ".cache"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::create_dir_all(elsewhere.join("cfg/git")).unwrap();
        std::fs::create_dir_all(elsewhere.join("cfg/gh")).unwrap();
        std::fs::write(elsewhere.join("cfg/git/ignore"), "*.o").unwrap();
        std::fs::write(home.join(".ssh/authorized_keys"), "k").unwrap();
        std::fs::hard_link(home.join(".ssh/authorized_keys"), elsewhere.join("ak")).unwrap();
        std::fs::write(elsewhere.join("token"), "t").unwrap();
        std::fs::hard_link(elsewhere.join("token"), elsewhere.join("token2")).unwrap();
        symlink(elsewhere.join("token"), home.join(".netrc")).unwrap();
        symlink("../elsewhere/cfg", home.join(".config")).unwrap();
        symlink(&home, home.join(".local/bin")).unwrap();
        symlink(home.join(".ssh"), home.join(".rustup")).unwrap();
        symlink("../../elsewhere/cfg/gh", home.join(".cache/pip")).unwrap();
        symlink("/nonexistent-coder-test/repo", home.join(".m2/repository")).unwrap();
        symlink(".nvm", home.join(".nvm")).unwrap();
        std::fs::write(home.join(".npm"), "a file").unwrap();
        std::fs::create_dir_all(elsewhere.join("rustup")).unwrap();
        symlink(elsewhere.join("rustup"), home.join(".elan")).unwrap();
        let linked_home = dir.path().join("linked-home");
        symlink(&home, &linked_home).unwrap();
        for home in [&home, &linked_home] {
            let keys = KeyPlaces::of([home.clone()]);
            for writable in [false, true] {
                let got = home_grants_with(home, writable, &keys.grant_entries(home));
                assert_eq!(got, home_grants_whole(home, writable), "{}", home.display());
            }
            let places = keys.places(home);
            let canonical: Vec<PathBuf> = places
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .collect();
            let links = linked_never_visible(&keys.places_there(home)).unwrap();
            assert_eq!(links, linked_never_visible(&canonical).unwrap());
            assert_eq!(links, linked_never_visible(&places).unwrap());
            assert_eq!(links.len(), 2, "{links:?}");
        }
        let grants: Vec<PathBuf> = home_grants(&home, false).into_iter().map(|g| g.0).collect();
        assert!(
            grants.contains(&home.join(".config/git/ignore")),
            "{grants:?}"
        );
        assert!(grants.contains(&home.join(".elan")), "{grants:?}");
        assert!(!grants.contains(&home.join(".cache/pip")), "{grants:?}");
    }

    #[test]
    fn a_symlink_to_the_home_or_a_secret_is_not_granted() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join(".cargo/registry")).unwrap();
        std::fs::create_dir_all(home.join(".local")).unwrap();
        std::os::unix::fs::symlink(&home, home.join(".local/bin")).unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), home.join(".rustup")).unwrap();
        let grants = home_grants(&home, false);
        assert_eq!(
            grants,
            vec![(home.join(".cargo/registry"), HomeAccess::Read)],
            "{grants:?}"
        );
        let grants = home_grants(&home, true);
        assert_eq!(
            grants,
            vec![(home.join(".cargo/registry"), HomeAccess::Write)]
        );
    }

    #[test]
    fn variables_in_a_relocating_value_are_expanded_as_python_does() {
        let lookup = |name: &OsStr| match name.as_bytes() {
            b"HOME" => Some(OsString::from("/h")),
            b"X_1" => Some(OsString::from("x")),
            _ => None,
        };
        for (value, want) in [
            ("$HOME/vault/c", "/h/vault/c"),
            ("${HOME}/vault/c", "/h/vault/c"),
            ("$HOME$X_1/${X_1}y", "/hx/xy"),
            ("$NOPE/a/${NOPE}", "$NOPE/a/${NOPE}"),
            ("a$/b/$", "a$/b/$"),
            ("${HOME/x", "${HOME/x"),
            ("${}/x", "${}/x"),
        ] {
            let got = expand_vars(value.as_bytes(), lookup);
            assert_eq!(got, OsString::from(want), "{value}");
        }
    }

    #[test]
    fn only_the_identity_of_the_gitconfig_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        std::fs::write(
            home.join(".gitconfig"),
            "[credential]\n\thelper = store\n[User]\n\tName = \"Ada \\\"L\\\" Lovelace\" # c\n\
             email = ada@example.invalid\n[url \"https://tok@github.com/\"]\n\tinsteadOf = gh:\n",
        )
        .unwrap();
        let text = git_identity(home, None);
        assert_eq!(
            text,
            "[user]\n\tname = \"Ada \\\"L\\\" Lovelace\"\n\temail = \"ada@example.invalid\"\n"
        );
        assert!(git_identity(&home.join("none"), None).is_empty());
    }
}
