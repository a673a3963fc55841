//! Finding an executable the way `execvp` does: a name with a `/` is a path, any other name
//! is looked up in the directories of `PATH`, in order, and the first regular file with an
//! execute bit wins.
//!
//! Callers differ in one explicit choice, [`RelativeDirs`]: a relative `PATH` entry (`.`,
//! or the empty entry, which means the current directory) is either resolved against a base
//! directory, as `execvp` would, or skipped (`coder doctor`, which reports what a clean
//! shell would find and must not pick up a file from wherever it was started).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What to do with relative entries of `PATH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelativeDirs {
    /// Resolve them against the base directory (what `execvp` does in that directory).
    FromBase,
    /// Ignore them.
    Skip,
}

/// Whether `name` names a file by its path (it holds a `/`) rather than a command.
pub fn has_dir_part(name: &OsStr) -> bool {
    name.as_bytes().contains(&b'/')
}

/// Whether `path` is a regular file (after symlinks) with an execute bit.
pub fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The first executable `dir/name` for the directories of `path_var`, relative ones taken
/// from `base` or skipped. The path is returned as found (`base` joined to a relative
/// directory), not canonicalised.
pub fn find_on_path(
    name: &OsStr,
    path_var: &OsStr,
    base: &Path,
    relative: RelativeDirs,
) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .filter_map(|dir| match (dir.is_absolute(), relative) {
            (true, _) => Some(dir),
            (false, RelativeDirs::FromBase) => Some(base.join(dir)),
            (false, RelativeDirs::Skip) => None,
        })
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable_file(candidate))
}

/// Why exec of an existing `program` said "No such file or directory": the interpreter its
/// `#!` line names (`/nonexistent/node`) does not exist. `None` when `program` is not such
/// a script (then the message as the kernel gave it is the right one).
pub fn missing_interpreter(program: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let mut file = std::fs::File::open(program).ok()?;
    let n = file.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let interpreter = String::from_utf8_lossy(line).trim().to_owned();
    let first = interpreter.split_whitespace().next()?;
    (!Path::new(first).exists()).then_some(interpreter)
}

/// The message of a failed exec of `program` with `desc` (the errno's text): an existing
/// script whose `#!` interpreter is missing says so, where the kernel's ENOENT read as if
/// `program` itself were missing.
pub fn exec_failure(program: &Path, desc: &str, enoent: bool) -> String {
    match enoent.then(|| missing_interpreter(program)).flatten() {
        Some(interpreter) => format!(
            "cannot execute {}: it is a script whose interpreter does not exist (its first \
             line: #!{interpreter})",
            program.display()
        ),
        None => format!("cannot execute {}: {desc}", program.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_executable_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("tool"), "not executable").unwrap();
        std::fs::write(b.join("tool"), "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(b.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([&a, &b]).unwrap();
        assert_eq!(
            find_on_path(
                OsStr::new("tool"),
                &path,
                Path::new("/"),
                RelativeDirs::Skip
            ),
            Some(b.join("tool"))
        );
        assert_eq!(
            find_on_path(
                OsStr::new("tool"),
                OsStr::new("a:b"),
                dir.path(),
                RelativeDirs::FromBase
            ),
            Some(dir.path().join("b/tool"))
        );
        assert_eq!(
            find_on_path(
                OsStr::new("tool"),
                OsStr::new("a:b"),
                dir.path(),
                RelativeDirs::Skip
            ),
            None
        );
        assert!(has_dir_part(OsStr::new("./tool")));
        assert!(!has_dir_part(OsStr::new("tool")));
    }
}
