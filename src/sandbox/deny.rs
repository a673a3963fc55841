//! The non-accessible globs: the one list of files no confined agent may read, and the one
//! matcher that decides whether a path is such a file.
//!
//! The mount-based masks of a run ([`super::scan`]) and any later reader of files on the
//! agent's behalf (the jailed file tools of `coder fs` and `coder mcp`) must agree on what a secret is, so the
//! defaults, the config file's `deny` key and `--deny GLOB` are combined here and nowhere
//! else. User globs add to the defaults; they never replace them, so a typo in a config
//! file cannot silently unmask `.env`.

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::Path;

use globset::GlobSet;

use super::SandboxError;
use super::scan::{self, ScanLimits};

/// Files no confined mode may read or write: private keys, package-registry and cloud
/// credentials, dotenv files, anything under a `secrets/` directory.
pub const DEFAULT_DENY_GLOBS: [&str; 19] = [
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/secrets/**",
    "**/id_rsa*",
    "**/id_ed25519*",
    "**/id_ecdsa*",
    "**/*.p12",
    "**/*.pfx",
    "**/*.keystore",
    "**/.npmrc",
    "**/.pypirc",
    "**/.netrc",
    "**/.pgpass",
    "**/.git-credentials",
    "**/credentials.json",
    "**/service-account*.json",
    "**/kubeconfig",
];

/// The effective non-accessible globs: the defaults, then `extra` (the config file's
/// `deny`, then `--deny` flags), without duplicates and in that order.
pub fn deny_globs<I, S>(extra: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut globs: Vec<String> = DEFAULT_DENY_GLOBS.iter().map(|g| g.to_string()).collect();
    for glob in extra {
        let glob = glob.into();
        if !glob.trim().is_empty() && !globs.contains(&glob) {
            globs.push(glob);
        }
    }
    globs
}

/// Decides whether a path (relative to a scanned root: the workspace or an extra root) is
/// non-accessible. Matching is case-insensitive, `*` stays within one name and `**`
/// crosses directories, exactly as the mount scan matches.
#[derive(Debug, Clone)]
pub struct DenyMatcher {
    set: GlobSet,
}

impl DenyMatcher {
    pub fn new(globs: &[String]) -> Result<DenyMatcher, SandboxError> {
        Ok(DenyMatcher {
            set: scan::compile_globs(super::GlobList::Deny, globs)?,
        })
    }

    /// Whether `relative` is a secret or lies inside a directory of secrets.
    pub fn is_denied(&self, relative: &Path) -> bool {
        relative
            .ancestors()
            .filter(|p| !p.as_os_str().is_empty())
            .any(|p| self.set.is_match(p))
    }

    /// Device and inode of every regular file below `root` (a canonical directory) that a
    /// run's sandbox masks as a secret there: the files these globs match, what a symlink
    /// named like a secret leads to, and every other name (hard link) of those, found by
    /// the sandbox's own scan of `root` as a tree the agent may not write (so nothing is
    /// created in it and no git dir is guarded). A reader of files on the agent's behalf
    /// compares a file with more than one link against these: `notes.txt`, a hard link of
    /// `.env`, matches no glob by its name. The scan's caps hold: over one it fails.
    pub fn secret_files(&self, root: &Path) -> Result<HashSet<(u64, u64)>, SandboxError> {
        let fd = super::sys::open_nofollow_dir(root).map_err(|errno| SandboxError::Syscall {
            op: "open",
            path: root.display().to_string(),
            errno,
        })?;
        let tree = scan::TreeScan {
            root,
            fd: fd.as_fd(),
            writable: false,
            protect: None,
            protect_literal: &[],
            kept: None,
            cancel: &super::SetupCancel::default(),
        };
        let mut created = Vec::new();
        let found = scan::scan_trees(&[tree], &self.set, ScanLimits::default(), &mut created);
        // A tree the agent may not write gets no placeholder; should one appear, it goes.
        for placeholder in created {
            placeholder.remove();
        }
        Ok(found?
            .masks
            .iter()
            .filter(|m| m.secret && !m.is_dir)
            .map(|m| (m.dev, m.ino))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_globs_add_to_the_defaults_once() {
        let globs = deny_globs(["**/*.private", "**/.env", " "]);
        assert_eq!(globs.len(), DEFAULT_DENY_GLOBS.len() + 1);
        assert_eq!(globs.last().map(String::as_str), Some("**/*.private"));
    }

    #[test]
    fn every_default_matches_its_example_and_not_ordinary_files() {
        let m = DenyMatcher::new(&deny_globs(Vec::<String>::new())).unwrap();
        for denied in [
            ".env",
            "app/.env.production",
            "tls/server.PEM",
            "a.key",
            "secrets/x/y.txt",
            "keys/id_rsa",
            "keys/id_rsa.pub",
            "id_ed25519",
            "id_ecdsa_sk",
            "cert.p12",
            "cert.pfx",
            "android/release.keystore",
            ".npmrc",
            "sub/.pypirc",
            ".netrc",
            ".pgpass",
            ".git-credentials",
            "gcp/credentials.json",
            "service-account-prod.json",
            "deploy/kubeconfig",
        ] {
            assert!(m.is_denied(Path::new(denied)), "{denied}");
        }
        for allowed in [
            "README.md",
            "src/key.rs",
            "envrc",
            "credentials.yaml",
            "kube/config",
        ] {
            assert!(!m.is_denied(Path::new(allowed)), "{allowed}");
        }
    }
}
