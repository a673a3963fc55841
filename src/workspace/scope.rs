//! `--scope GLOB`: the paths a run may change. A change the ledger finds outside every
//! glob makes the run a `scope_violation` (DESIGN §8); nothing is reverted, the caller
//! decides.
//!
//! Globs match paths relative to the workspace, `/`-separated, with `globset`'s rules
//! (`*` does not cross `/`, `**` does); a glob naming a directory (`src` or `src/`) also
//! covers everything below it.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// A compiled set of scope globs.
#[derive(Debug, Clone)]
pub struct Scope {
    set: GlobSet,
    globs: Vec<String>,
}

/// A glob that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("--scope {glob:?} is not a valid glob: {reason}")]
pub struct ScopeError {
    pub glob: String,
    pub reason: String,
}

impl Scope {
    pub fn new(globs: &[String]) -> Result<Scope, ScopeError> {
        let mut builder = GlobSetBuilder::new();
        for glob in globs {
            let trimmed = glob.trim().trim_start_matches("./");
            if let Some(reason) = unreachable_reason(trimmed) {
                return Err(ScopeError {
                    glob: glob.clone(),
                    reason: reason.into(),
                });
            }
            let base = trimmed.trim_end_matches('/');
            for pattern in [base.to_owned(), format!("{base}/**")] {
                let compiled = GlobBuilder::new(&pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| ScopeError {
                        glob: glob.clone(),
                        reason: e.kind().to_string(),
                    })?;
                builder.add(compiled);
            }
        }
        let set = builder.build().map_err(|e| ScopeError {
            glob: globs.join(" "),
            reason: e.to_string(),
        })?;
        Ok(Scope {
            set,
            globs: globs.to_vec(),
        })
    }

    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    pub fn allows(&self, path: &str) -> bool {
        self.set.is_match(path)
    }

    /// The paths outside the scope, in order.
    pub fn outside<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        paths
            .into_iter()
            .filter(|p| !self.allows(p))
            .map(str::to_owned)
            .collect()
    }
}

/// Why `glob` (trimmed) could never match a changed path, which are relative to the
/// workspace: a scope of it alone would make every change a violation.
fn unreachable_reason(glob: &str) -> Option<&'static str> {
    if glob.is_empty() {
        Some("it is empty")
    } else if glob.starts_with('/') {
        Some("it is absolute; scope globs are relative to the workspace, like src/** or docs")
    } else if glob.split('/').any(|part| part == "..") {
        Some("it leaves the workspace (..); scope globs are relative to the workspace")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_directories() {
        let scope = Scope::new(&["src/**/*.rs".into(), "docs".into(), "README.md".into()]).unwrap();
        assert!(scope.allows("src/a.rs"));
        assert!(scope.allows("src/x/y.rs"));
        assert!(scope.allows("docs/a/b.md"));
        assert!(scope.allows("README.md"));
        assert!(!scope.allows("src/a.txt"));
        assert!(!scope.allows("Cargo.toml"));
        assert_eq!(scope.outside(["src/a.rs", "x"]), vec!["x".to_owned()]);
        assert!(Scope::new(&["a[".into()]).is_err());
        assert!(Scope::new(&["".into()]).is_err());
    }
}
