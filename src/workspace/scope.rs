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

/// A glob that does not compile, named as the caller gave the scope (`--scope`, `"scope"
/// in the --request JSON`, the MCP tool's `scope`).
#[derive(Debug, thiserror::Error)]
#[error("{given} {glob:?} is not a valid glob: {reason}")]
pub struct ScopeError {
    pub given: String,
    pub glob: String,
    pub reason: String,
}

impl Scope {
    /// `given`: how the caller named the scope, for the error.
    pub fn new(globs: &[String], given: &str) -> Result<Scope, ScopeError> {
        let mut builder = GlobSetBuilder::new();
        for glob in globs {
            let trimmed = glob.trim().trim_start_matches("./");
            if let Some(reason) = unreachable_reason(trimmed) {
                return Err(ScopeError {
                    given: given.to_owned(),
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
                        given: given.to_owned(),
                        glob: glob.clone(),
                        reason: e.kind().to_string(),
                    })?;
                builder.add(compiled);
            }
        }
        let set = builder.build().map_err(|e| ScopeError {
            given: given.to_owned(),
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
        let scope = Scope::new(
            &["src/**/*.rs".into(), "docs".into(), "README.md".into()],
            "--scope",
        )
        .unwrap();
        assert!(scope.allows("src/a.rs"));
        assert!(scope.allows("src/x/y.rs"));
        assert!(scope.allows("docs/a/b.md"));
        assert!(scope.allows("README.md"));
        assert!(!scope.allows("src/a.txt"));
        assert!(!scope.allows("Cargo.toml"));
        assert_eq!(scope.outside(["src/a.rs", "x"]), vec!["x".to_owned()]);
        assert!(Scope::new(&["a[".into()], "--scope").is_err());
        assert!(Scope::new(&["".into()], "--scope").is_err());
    }

    /// The error names the scope as the caller gave it: it said `--scope` also for a
    /// `--request` file's or the MCP tool's `scope`.
    #[test]
    fn an_error_names_the_scope_as_given() {
        let given = "\"scope\" in the --request JSON";
        let e = Scope::new(&["ok".into(), "a[".into()], given).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{given} \"a[\" is not a valid glob")),
            "{text}"
        );
        assert!(!text.contains("--scope"), "{text}");
    }
}
