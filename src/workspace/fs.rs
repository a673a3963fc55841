//! The jailed workspace file operations (DESIGN §11): `read-file`, `search`, `update-file`,
//! `create-file`, `delete-file`, `list-folder` and `tree`, each taking a JSON payload and
//! answering a JSON value or a [`FsError`] `{"code": "C2xx", "message": …}`.
//!
//! Everything is confined to one base directory. A path is accepted only when it is
//! relative, stays inside the base lexically (`..` never climbs out), and the longest
//! existing ancestor of it, resolved through every symlink, still lies inside the base; a
//! dangling symlink or a symlink loop on the way is refused as an escape (`C215`), since
//! what it will point at when written is not ours to decide. Files matching the sandbox's
//! non-accessible globs ([`crate::sandbox::deny_globs`], the same list the mount masks use,
//! so the two can never disagree) are listed but flagged, and never read, written,
//! searched or deleted through — checked both on the name given and on the resolved name,
//! so a symlink `notes -> .env` is refused too. A name is not enough for a file with
//! more than one link: such a file is compared (device and inode) with the secrets the
//! sandbox's own scan finds in the base ([`DenyMatcher::secret_files`], run once per
//! operation, only when such a file is met), so `notes.txt`, a hard link of `.env`, is
//! refused and flagged as `.env` is (the sandbox masks it too).
//!
//! Files are opened with `O_NOFOLLOW` and the opened descriptor's real path is checked
//! again, and writes go through a descriptor of the verified parent directory
//! (`/proc/self/fd/N/…`), so swapping a component for a symlink between the check and the
//! use (an agent may be running in the same tree) reaches nothing outside the base.
//! Writes are atomic per file: a temporary file in the same directory, then a rename (or,
//! when `overwrite` is false, a hard link that fails on an existing name).
//!
//! This module knows nothing of MCP or of the command line: `commands::fs` and
//! `commands::mcp` both call [`Jail::run`].

use std::cell::OnceCell;
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::sandbox::{DenyMatcher, deny_globs};

/// Largest file `read-file` returns and `search` looks into.
pub const MAX_READ_BYTES: u64 = 10 * 1024 * 1024;
/// Largest file `create-file` and `update-file` write.
pub const MAX_WRITE_BYTES: usize = 10 * 1024 * 1024;
/// Longest line text a `search` match carries.
const MAX_MATCH_TEXT: usize = 500;

/// The error codes of the workspace tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FsCode {
    /// Bad input: malformed payload, absolute path, wrong kind of file, bad line numbers.
    C210,
    /// Not found, or non-accessible (a secret, or the OS refused).
    C211,
    /// Too large.
    C213,
    /// Escapes the base: lexically, through a symlink, or a dangling symlink.
    C215,
    /// Any other I/O failure.
    C216,
    /// Exists, and `overwrite` is false.
    C217,
}

/// One failed operation: what the caller sees as `{"code", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct FsError {
    pub code: FsCode,
    pub message: String,
}

impl FsError {
    fn new(code: FsCode, message: impl Into<String>) -> FsError {
        FsError {
            code,
            message: message.into(),
        }
    }

    /// The error object `{"code", "message"}`.
    pub fn to_json(&self) -> Value {
        json!({"code": format!("{:?}", self.code), "message": self.message})
    }

    /// An I/O failure on `path`, said in words where they are common (not "No such file or
    /// directory (os error 2)").
    fn io(what: &str, path: &str, e: &std::io::Error) -> FsError {
        let (code, reason) = match e.kind() {
            std::io::ErrorKind::NotFound => (FsCode::C211, "it does not exist".to_owned()),
            std::io::ErrorKind::PermissionDenied => (FsCode::C211, "permission denied".to_owned()),
            _ => (FsCode::C216, e.to_string()),
        };
        FsError::new(code, format!("{what} {path}: {reason}"))
    }
}

/// The seven operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    ReadFile,
    Search,
    UpdateFile,
    CreateFile,
    DeleteFile,
    ListFolder,
    Tree,
}

impl Verb {
    pub const ALL: [Verb; 7] = [
        Verb::ReadFile,
        Verb::Search,
        Verb::UpdateFile,
        Verb::CreateFile,
        Verb::DeleteFile,
        Verb::ListFolder,
        Verb::Tree,
    ];

    /// The verb's name: `read-file`, …
    pub fn name(self) -> &'static str {
        match self {
            Verb::ReadFile => "read-file",
            Verb::Search => "search",
            Verb::UpdateFile => "update-file",
            Verb::CreateFile => "create-file",
            Verb::DeleteFile => "delete-file",
            Verb::ListFolder => "list-folder",
            Verb::Tree => "tree",
        }
    }

    /// Parses `read-file` or `read_file`.
    pub fn parse(name: &str) -> Option<Verb> {
        let name = name.replace('_', "-");
        Verb::ALL.into_iter().find(|v| v.name() == name)
    }

    /// A one-line description, for `--help` and the MCP tool list.
    pub fn description(self) -> &'static str {
        match self {
            Verb::ReadFile => {
                "Read a text file (optionally lines start_line..=end_line, 1-based). Max 10 MiB."
            }
            Verb::Search => {
                "Search files under a folder for a regex (or literal); returns path, line, text."
            }
            Verb::UpdateFile => {
                "Edit a file: 1-based inclusive line ops (insert, remove, update_lines) applied \
                 bottom-up, overlapping ops rejected, then regex replacements; atomic."
            }
            Verb::CreateFile => "Create a file (overwrite:false by default; parents created).",
            Verb::DeleteFile => {
                "Delete a file, or a folder with recursive:true (refused if it holds a \
                 non-accessible entry)."
            }
            Verb::ListFolder => {
                "List a folder, paginated (offset, limit); non-accessible entries are flagged."
            }
            Verb::Tree => "A folder's tree, bounded by depth and a per-folder limit.",
        }
    }

    /// The JSON Schema of the verb's payload.
    pub fn input_schema(self) -> Value {
        let path = json!({"type": "string", "description": "path relative to the base"});
        let int = json!({"type": "integer", "minimum": 0});
        match self {
            Verb::ReadFile => object(
                json!({"path": path, "start_line": int, "end_line": int}),
                &["path"],
            ),
            Verb::Search => object(
                json!({"pattern": {"type": "string"}, "path": path,
                       "glob": {"type": "string", "description": "only file names matching"},
                       "literal": {"type": "boolean"}, "ignore_case": {"type": "boolean"},
                       "max_results": int}),
                &["pattern"],
            ),
            Verb::UpdateFile => object(
                json!({"path": path,
                       "ops": {"type": "array", "items": {"type": "object", "properties": {
                           "op": {"type": "string", "enum": ["insert", "remove", "update_lines"]},
                           "line": int, "start": int, "end": int, "content": {"type": "string"}},
                           "required": ["op"]}},
                       "replace": {"type": "array", "items": {"type": "object", "properties": {
                           "pattern": {"type": "string"}, "replacement": {"type": "string"},
                           "literal": {"type": "boolean"}, "count": int},
                           "required": ["pattern", "replacement"]}}}),
                &["path"],
            ),
            Verb::CreateFile => object(
                json!({"path": path, "content": {"type": "string"},
                       "overwrite": {"type": "boolean"}}),
                &["path", "content"],
            ),
            Verb::DeleteFile => object(
                json!({"path": path, "recursive": {"type": "boolean"}}),
                &["path"],
            ),
            Verb::ListFolder => object(json!({"path": path, "offset": int, "limit": int}), &[]),
            Verb::Tree => object(
                json!({"path": path, "depth": int, "per_folder_limit": int}),
                &[],
            ),
        }
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required,
           "additionalProperties": false})
}

/// A base directory and the matcher of its non-accessible files.
#[derive(Debug, Clone)]
pub struct Jail {
    base: PathBuf,
    deny: DenyMatcher,
}

/// A path accepted by the jail.
#[derive(Debug)]
struct Resolved {
    /// As given, normalised, relative to the base ("" for the base itself).
    rel: PathBuf,
    /// The real location: the resolved longest existing ancestor plus the rest.
    real: PathBuf,
}

impl Jail {
    /// A jail at `base` (which must be an existing directory) with the default
    /// non-accessible globs plus `extra_deny` (the config file's `deny`).
    pub fn new(base: &Path, extra_deny: &[String]) -> Result<Jail, FsError> {
        let real = fs::canonicalize(base).map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "no such directory".to_owned(),
                std::io::ErrorKind::PermissionDenied => {
                    "permission denied on the way to it".to_owned()
                }
                _ => e.to_string(),
            };
            FsError::new(
                FsCode::C210,
                format!("--base {}: {why}; give an existing folder", base.display()),
            )
        })?;
        if !real.is_dir() {
            return Err(FsError::new(
                FsCode::C210,
                format!("base {} is not a directory", base.display()),
            ));
        }
        let deny = DenyMatcher::new(&deny_globs(extra_deny.iter().cloned()))
            .map_err(|e| FsError::new(FsCode::C210, format!("deny globs: {e}")))?;
        Ok(Jail { base: real, deny })
    }

    /// The resolved base directory.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Runs `verb` on `payload`.
    pub fn run(&self, verb: Verb, payload: Value) -> Result<Value, FsError> {
        let call = Call {
            jail: self,
            secrets: OnceCell::new(),
        };
        match verb {
            Verb::ReadFile => call.read_file(parse(payload)?),
            Verb::Search => call.search(parse(payload)?),
            Verb::UpdateFile => call.update_file(parse(payload)?),
            Verb::CreateFile => call.create_file(parse(payload)?),
            Verb::DeleteFile => call.delete_file(parse(payload)?),
            Verb::ListFolder => call.list_folder(parse(payload)?),
            Verb::Tree => call.tree(parse(payload)?),
        }
    }
}

/// One operation of a [`Jail`], with what it learnt of the base's secrets: their other
/// names (hard links) are looked for once per operation, and only when a file with more
/// than one link is met.
struct Call<'j> {
    jail: &'j Jail,
    /// (dev, ino) of every file the sandbox masks as a secret in the base
    /// ([`DenyMatcher::secret_files`]), or why they could not be found.
    secrets: OnceCell<Result<HashSet<(u64, u64)>, FsError>>,
}

impl std::ops::Deref for Call<'_> {
    type Target = Jail;

    fn deref(&self) -> &Jail {
        self.jail
    }
}

impl Call<'_> {
    /// Whether the file `meta` describes (not following a symlink) is another name of a
    /// secret: a regular file with more than one link whose inode the sandbox masks in the
    /// base under a name the globs match. A name matches no glob, so `notes.txt`, a hard
    /// link of `.env`, passed every check by name, while the sandbox masks it (round
    /// eighteen's review). When the secrets cannot be found (a scan over its caps), every
    /// such file is refused.
    fn other_name_of_secret(&self, meta: &fs::Metadata) -> Result<bool, FsError> {
        if !meta.file_type().is_file() || meta.nlink() < 2 {
            return Ok(false);
        }
        let secrets = self.secrets.get_or_init(|| {
            self.deny.secret_files(&self.base).map_err(|e| {
                FsError::new(
                    FsCode::C216,
                    format!("cannot tell which files are other names of secrets: {e}"),
                )
            })
        });
        match secrets {
            Ok(ids) => Ok(ids.contains(&(meta.dev(), meta.ino()))),
            Err(e) => Err(FsError::new(
                e.code,
                format!("a file with more than one name: {}", e.message),
            )),
        }
    }

    /// Refuses the file `meta` describes when it is another name of a secret.
    fn refuse_other_name(&self, input: &str, meta: &fs::Metadata) -> Result<(), FsError> {
        if self
            .other_name_of_secret(meta)
            .map_err(|e| FsError::new(e.code, format!("{input}: {}", e.message)))?
        {
            return Err(FsError::new(
                FsCode::C211,
                format!(
                    "{input}: non-accessible (another name, a hard link, of a file matching \
                     the sandbox's deny globs)"
                ),
            ));
        }
        Ok(())
    }

    /// Checks `input` against the jail: relative, lexically inside, resolved inside, not
    /// non-accessible.
    fn resolve(&self, input: &str) -> Result<Resolved, FsError> {
        let rel = lexical(input)?;
        let comps: Vec<Component> = rel.components().collect();
        let mut resolved = None;
        for keep in (0..=comps.len()).rev() {
            let candidate: PathBuf = comps[..keep]
                .iter()
                .fold(self.base.clone(), |p, c| p.join(c));
            match fs::canonicalize(&candidate) {
                Ok(real) => {
                    resolved = Some((real, keep));
                    break;
                }
                Err(e) => match fs::symlink_metadata(&candidate) {
                    Ok(m) if m.file_type().is_symlink() => {
                        return Err(FsError::new(
                            FsCode::C215,
                            format!("{input}: a dangling or looping symlink ({e})"),
                        ));
                    }
                    Ok(_) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(FsError::io("cannot resolve", input, &e));
                    }
                    _ => {}
                },
            }
        }
        let Some((existing, keep)) = resolved else {
            return Err(FsError::new(
                FsCode::C216,
                format!("{input}: base unreadable"),
            ));
        };
        let real = comps[keep..].iter().fold(existing, |p, c| p.join(c));
        if !real.starts_with(&self.base) {
            return Err(FsError::new(
                FsCode::C215,
                format!("{input}: resolves outside the base (through a symlink)"),
            ));
        }
        self.check_denied(input, &rel, &real)?;
        Ok(Resolved { rel, real })
    }

    fn check_denied(&self, input: &str, rel: &Path, real: &Path) -> Result<(), FsError> {
        let real_rel = real.strip_prefix(&self.base).unwrap_or(real);
        if self.deny.is_denied(rel) || self.deny.is_denied(real_rel) {
            return Err(FsError::new(
                FsCode::C211,
                format!("{input}: non-accessible (matches the sandbox's deny globs)"),
            ));
        }
        Ok(())
    }

    /// Verifies that an opened descriptor really is inside the base and accessible.
    fn verify_fd(&self, input: &str, file: &File) -> Result<PathBuf, FsError> {
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        let real = fs::read_link(&link).map_err(|e| FsError::io("cannot verify", input, &e))?;
        if !real.starts_with(&self.base) {
            return Err(FsError::new(
                FsCode::C215,
                format!("{input}: moved outside the base while being opened"),
            ));
        }
        let rel = real.strip_prefix(&self.base).unwrap_or(&real).to_path_buf();
        self.check_denied(input, &rel, &real)?;
        Ok(real)
    }

    /// Opens a folder without following a final symlink and checks the descriptor is in
    /// the base; the returned path (`/proc/self/fd/N`) reaches that very folder.
    fn open_dir(&self, input: &str, real: &Path) -> Result<(File, PathBuf), FsError> {
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(real)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTDIR) => FsError::new(FsCode::C210, format!("{input}: not a folder")),
                Some(libc::ELOOP) => FsError::new(FsCode::C215, format!("{input}: a symlink")),
                _ => FsError::io("cannot open", input, &e),
            })?;
        self.verify_fd(input, &dir)?;
        let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        Ok((dir, via))
    }

    /// A folder's entries, read through a verified descriptor; empty when the folder
    /// cannot be opened or is not (any longer) inside the base.
    fn entries(&self, real: &Path) -> Vec<(String, Kind)> {
        match self.open_dir("", real) {
            Ok((_dir, via)) => sorted_entries(&via),
            Err(_) => Vec::new(),
        }
    }

    fn is_denied_rel(&self, rel: &Path) -> bool {
        self.deny.is_denied(rel)
    }

    /// Opens a regular file for reading, with the race checks: the file, its size and its
    /// mode (of the opened file, never read again by path).
    fn open_file(&self, input: &str, real: &Path) -> Result<(File, u64, u32), FsError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(real)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => FsError::new(FsCode::C215, format!("{input}: a symlink")),
                _ => FsError::io("cannot open", input, &e),
            })?;
        self.verify_fd(input, &file)?;
        let meta = file
            .metadata()
            .map_err(|e| FsError::io("cannot stat", input, &e))?;
        self.refuse_other_name(input, &meta)?;
        if meta.is_dir() {
            return Err(FsError::new(FsCode::C210, format!("{input}: is a folder")));
        }
        if !meta.is_file() {
            return Err(FsError::new(
                FsCode::C210,
                format!("{input}: not a regular file"),
            ));
        }
        Ok((file, meta.len(), meta.permissions().mode()))
    }

    fn read_text(&self, input: &str, real: &Path) -> Result<(String, u32), FsError> {
        let (file, len, mode) = self.open_file(input, real)?;
        if len > MAX_READ_BYTES {
            return Err(too_large(input, len, MAX_READ_BYTES));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.take(MAX_READ_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| FsError::io("cannot read", input, &e))?;
        if bytes.len() as u64 > MAX_READ_BYTES {
            return Err(too_large(input, bytes.len() as u64, MAX_READ_BYTES));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| FsError::new(FsCode::C210, format!("{input}: not UTF-8 text")))?;
        Ok((text, mode))
    }

    /// Writes `bytes` to `real` atomically. `replace`: false refuses an existing name.
    fn write_atomic(
        &self,
        input: &str,
        real: &Path,
        bytes: &[u8],
        replace: bool,
        mode: u32,
    ) -> Result<(), FsError> {
        if bytes.len() > MAX_WRITE_BYTES {
            return Err(too_large(input, bytes.len() as u64, MAX_WRITE_BYTES as u64));
        }
        let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
            return Err(FsError::new(
                FsCode::C210,
                format!("{input}: not a file name"),
            ));
        };
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(parent)
            .map_err(|e| FsError::io("cannot open the folder of", input, &e))?;
        let dir_real = self.verify_fd(input, &dir)?;
        self.check_denied(input, Path::new(""), &dir_real.join(name))?;
        let via = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        if let Ok(meta) = fs::symlink_metadata(via.join(name)) {
            self.refuse_other_name(input, &meta)?;
        }
        let tmp_name = format!(
            ".{}.coder-tmp-{}",
            name.to_string_lossy(),
            uuid::Uuid::new_v4()
        );
        let tmp = via.join(&tmp_name);
        let result = write_new(&tmp, bytes, mode).and_then(|()| {
            if replace {
                fs::rename(&tmp, via.join(name))
            } else {
                fs::hard_link(&tmp, via.join(name))
            }
        });
        let _ = fs::remove_file(&tmp);
        result.map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => FsError::new(
                FsCode::C217,
                format!("{input}: exists and overwrite is false"),
            ),
            _ => FsError::io("cannot write", input, &e),
        })
    }

    fn read_file(&self, a: ReadArgs) -> Result<Value, FsError> {
        let r = self.resolve(&a.path)?;
        let (text, _) = self.read_text(&a.path, &r.real)?;
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let total = lines.len();
        let start = a.start_line.unwrap_or(1).max(1);
        let end = a.end_line.map_or(total, |e| e.min(total));
        if a.start_line.is_none() && a.end_line.is_none() {
            return Ok(json!({"path": a.path, "content": text, "size": text.len(),
                             "total_lines": total}));
        }
        if let Some(after) = a.end_line.filter(|&e| e < start) {
            return Err(FsError::new(
                FsCode::C210,
                format!("start_line {start} is after end_line {after}"),
            ));
        }
        if start > end.max(1) || (total > 0 && start > total) {
            return Err(FsError::new(
                FsCode::C210,
                format!(
                    "start_line {start} is past the end of {}: it has {total} line{}",
                    a.path,
                    if total == 1 { "" } else { "s" }
                ),
            ));
        }
        let content: String = lines
            .get(start.saturating_sub(1)..end)
            .unwrap_or_default()
            .concat();
        Ok(
            json!({"path": a.path, "content": content, "size": text.len(),
                  "total_lines": total, "start_line": start, "end_line": end}),
        )
    }

    fn search(&self, a: SearchArgs) -> Result<Value, FsError> {
        let dir = a.path.as_deref().unwrap_or(".");
        let r = self.resolve(dir)?;
        let pattern = if a.literal {
            regex::escape(&a.pattern)
        } else {
            a.pattern.clone()
        };
        let re = regex::RegexBuilder::new(&pattern)
            .case_insensitive(a.ignore_case)
            .size_limit(1 << 22)
            .build()
            .map_err(|e| FsError::new(FsCode::C210, format!("bad pattern: {e}")))?;
        let glob = match &a.glob {
            Some(g) => Some(
                globset::Glob::new(g)
                    .map_err(|e| FsError::new(FsCode::C210, format!("bad glob: {e}")))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let max = count_argument("max_results", a.max_results, 100, 1000)?;
        let mut found = Search {
            matches: Vec::new(),
            max,
            truncated: false,
            skipped_non_accessible: 0,
            skipped_large_or_binary: 0,
        };
        let meta = fs::metadata(&r.real).map_err(|e| FsError::io("cannot open", dir, &e))?;
        if meta.is_dir() {
            self.search_dir(&r.real, &r.rel, &re, glob.as_ref(), &mut found);
        } else {
            self.search_file(&r.real, &r.rel, &re, &mut found);
        }
        Ok(
            json!({"matches": found.matches, "truncated": found.truncated,
                  "skipped_non_accessible": found.skipped_non_accessible,
                  "skipped_large_or_binary": found.skipped_large_or_binary}),
        )
    }

    fn search_dir(
        &self,
        real: &Path,
        rel: &Path,
        re: &regex::Regex,
        glob: Option<&globset::GlobMatcher>,
        found: &mut Search,
    ) {
        for (name, kind) in self.entries(real) {
            if found.truncated {
                return;
            }
            let child_rel = rel.join(&name);
            if self.is_denied_rel(&child_rel) {
                found.skipped_non_accessible += 1;
                continue;
            }
            match kind {
                Kind::Dir if name != ".git" => {
                    self.search_dir(&real.join(&name), &child_rel, re, glob, found);
                }
                Kind::File if glob.is_none_or(|g| g.is_match(&name)) => {
                    self.search_file(&real.join(&name), &child_rel, re, found);
                }
                _ => {}
            }
        }
    }

    fn search_file(&self, real: &Path, rel: &Path, re: &regex::Regex, found: &mut Search) {
        let shown = rel.to_string_lossy().into_owned();
        let text = match self.read_text(&shown, real) {
            Ok((text, _)) => text,
            // Another name of a secret (or a file the OS refuses): non-accessible.
            Err(e) if e.code == FsCode::C211 => {
                found.skipped_non_accessible += 1;
                return;
            }
            Err(_) => {
                found.skipped_large_or_binary += 1;
                return;
            }
        };
        if text.as_bytes().iter().take(8192).any(|b| *b == 0) {
            found.skipped_large_or_binary += 1;
            return;
        }
        for (i, line) in text.lines().enumerate() {
            if re.is_match(line) {
                if found.matches.len() >= found.max {
                    found.truncated = true;
                    return;
                }
                found.matches.push(json!({"path": shown, "line": i + 1,
                                          "text": truncate(line, MAX_MATCH_TEXT)}));
            }
        }
    }

    fn update_file(&self, a: UpdateArgs) -> Result<Value, FsError> {
        if a.ops.is_empty() && a.replace.is_empty() {
            return Err(FsError::new(FsCode::C210, "give ops, replace, or both"));
        }
        let r = self.resolve(&a.path)?;
        let (text, mode) = self.read_text(&a.path, &r.real)?;
        let mut doc = Lines::parse(&text);
        let before = doc.lines.len();
        doc.apply(&a.ops)?;
        let mut out = doc.render();
        let mut counts = Vec::new();
        for rep in &a.replace {
            let (next, n) = replace(&out, rep)?;
            out = next;
            counts.push(n);
        }
        let after = Lines::parse(&out).lines.len();
        self.write_atomic(&a.path, &r.real, out.as_bytes(), true, mode)?;
        Ok(
            json!({"path": a.path, "lines_before": before, "lines_after": after,
                  "ops_applied": a.ops.len(), "replacements": counts, "size": out.len()}),
        )
    }

    fn create_file(&self, a: CreateArgs) -> Result<Value, FsError> {
        let r = self.resolve(&a.path)?;
        if r.rel.as_os_str().is_empty() {
            return Err(FsError::new(FsCode::C210, "path names the base itself"));
        }
        let existed = fs::symlink_metadata(&r.real).is_ok();
        if existed && !a.overwrite {
            return Err(FsError::new(
                FsCode::C217,
                format!("{}: exists and overwrite is false", a.path),
            ));
        }
        if existed && fs::metadata(&r.real).is_ok_and(|m| m.is_dir()) {
            return Err(FsError::new(
                FsCode::C210,
                format!("{}: is a folder", a.path),
            ));
        }
        let r = match r.real.parent() {
            Some(parent) if fs::symlink_metadata(parent).is_err() => {
                self.make_dirs(&a.path, parent)?;
                self.resolve(&a.path)?
            }
            _ => r,
        };
        self.write_atomic(&a.path, &r.real, a.content.as_bytes(), a.overwrite, 0o644)?;
        Ok(json!({"path": a.path, "size": a.content.len(), "created": !existed}))
    }

    /// Creates the missing folders of `real` one by one, each through a verified
    /// descriptor of its parent, so a swapped component cannot place them outside.
    fn make_dirs(&self, input: &str, real: &Path) -> Result<(), FsError> {
        let mut missing = Vec::new();
        let mut existing = real;
        while fs::symlink_metadata(existing).is_err() {
            let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                return Err(FsError::new(
                    FsCode::C216,
                    format!("{input}: no folder to create in"),
                ));
            };
            missing.push(name.to_os_string());
            existing = parent;
        }
        let mut current = existing.to_path_buf();
        for name in missing.into_iter().rev() {
            let (_dir, via) = self.open_dir(input, &current)?;
            match fs::create_dir(via.join(&name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(FsError::io("cannot create the folders of", input, &e)),
            }
            current.push(name);
        }
        Ok(())
    }

    fn delete_file(&self, a: DeleteArgs) -> Result<Value, FsError> {
        let rel = lexical(&a.path)?;
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Err(FsError::new(FsCode::C210, "cannot delete the base itself"));
        };
        let parent = match parent.to_string_lossy() {
            p if p.is_empty() => ".".to_string(),
            p => p.into_owned(),
        };
        let p = self.resolve(&parent)?;
        let real = p.real.join(name);
        self.check_denied(&a.path, &rel, &real)?;
        let meta =
            fs::symlink_metadata(&real).map_err(|e| FsError::io("cannot find", &a.path, &e))?;
        self.refuse_other_name(&a.path, &meta)?;
        if meta.is_dir() {
            if !a.recursive {
                return Err(FsError::new(
                    FsCode::C210,
                    format!("{}: is a folder; pass recursive:true", a.path),
                ));
            }
            if let Some(secret) = self.first_denied(&real, &rel) {
                return Err(FsError::new(
                    FsCode::C211,
                    format!(
                        "{}: holds a non-accessible entry ({})",
                        a.path,
                        secret.display()
                    ),
                ));
            }
            let count = count_entries(&real);
            let (_dir, via) = self.open_dir(&a.path, &p.real)?;
            // Not `remove_dir_all`, which recurses once per level with a descriptor per
            // level: a chain of nested folders an agent made deep enough ran the server
            // out of descriptors (the folder stayed) or overflowed its thread's stack.
            crate::config::run_dirs::try_remove_tree(&via.join(name))
                .map_err(|e| FsError::io("cannot delete", &a.path, &e))?;
            return Ok(json!({"path": a.path, "deleted": count, "kind": "folder"}));
        }
        let (_dir, via) = self.open_dir(&a.path, &p.real)?;
        fs::remove_file(via.join(name)).map_err(|e| FsError::io("cannot delete", &a.path, &e))?;
        Ok(json!({"path": a.path, "deleted": 1, "kind": kind_of(&meta).name()}))
    }

    /// The first entry below `real` (at `rel`) that is non-accessible: by its name, or as
    /// another name of a secret (or when that cannot be told).
    fn first_denied(&self, real: &Path, rel: &Path) -> Option<PathBuf> {
        for (name, kind) in self.entries(real) {
            let child = rel.join(&name);
            if self.is_denied_rel(&child) {
                return Some(child);
            }
            if kind == Kind::File
                && fs::symlink_metadata(real.join(&name))
                    .is_ok_and(|m| self.other_name_of_secret(&m).unwrap_or(true))
            {
                return Some(child);
            }
            if kind == Kind::Dir
                && let Some(found) = self.first_denied(&real.join(&name), &child)
            {
                return Some(found);
            }
        }
        None
    }

    fn list_folder(&self, a: ListArgs) -> Result<Value, FsError> {
        let input = a.path.as_deref().unwrap_or(".");
        let r = self.resolve(input)?;
        self.require_dir(input, &r.real)?;
        let (_dir, via) = self.open_dir(input, &r.real)?;
        let entries = sorted_entries(&via);
        let total = entries.len();
        let limit = count_argument("limit", a.limit, 200, 1000)?;
        let offset = a.offset.unwrap_or(0);
        let page: Vec<Value> = entries
            .iter()
            .skip(offset)
            .take(limit)
            .map(|(name, kind)| self.entry_json(&r.real, &r.rel, name, *kind))
            .collect();
        let next = (offset + page.len() < total).then_some(offset + page.len());
        Ok(
            json!({"path": input, "entries": page, "total": total, "offset": offset,
                  "next_offset": next}),
        )
    }

    /// A listed entry; a file with another name that is a secret's (or whose other names
    /// cannot be told) is flagged as a secret's own name is.
    fn entry_json(&self, real: &Path, rel: &Path, name: &str, kind: Kind) -> Value {
        let child_rel = rel.join(name);
        let meta = match kind {
            Kind::File => fs::symlink_metadata(real.join(name)).ok(),
            _ => None,
        };
        let denied = self.is_denied_rel(&child_rel)
            || (kind == Kind::Symlink && self.link_target_denied(&real.join(name)))
            || meta
                .as_ref()
                .is_some_and(|m| self.other_name_of_secret(m).unwrap_or(true));
        let mut v = json!({"name": name, "path": child_rel.to_string_lossy(),
                           "kind": kind.name(), "non_accessible": denied});
        if let Some(m) = meta.filter(|_| !denied) {
            v["size"] = json!(m.len());
        }
        v
    }

    /// Whether a symlink leads to a non-accessible file inside the base (by its name, or
    /// as another name of a secret).
    fn link_target_denied(&self, link: &Path) -> bool {
        fs::canonicalize(link).is_ok_and(|t| {
            t.strip_prefix(&self.base).is_ok_and(|rel| {
                self.is_denied_rel(rel)
                    || fs::symlink_metadata(&t)
                        .is_ok_and(|m| self.other_name_of_secret(&m).unwrap_or(true))
            })
        })
    }

    fn require_dir(&self, input: &str, real: &Path) -> Result<(), FsError> {
        let meta = fs::metadata(real).map_err(|e| FsError::io("cannot open", input, &e))?;
        if !meta.is_dir() {
            return Err(FsError::new(FsCode::C210, format!("{input}: not a folder")));
        }
        Ok(())
    }

    fn tree(&self, a: TreeArgs) -> Result<Value, FsError> {
        let input = a.path.as_deref().unwrap_or(".");
        let r = self.resolve(input)?;
        self.require_dir(input, &r.real)?;
        let depth = count_argument("depth", a.depth, 3, 10)?;
        let limit = count_argument("per_folder_limit", a.per_folder_limit, 50, 500)?;
        let children = self.tree_level(&r.real, &r.rel, depth, limit);
        Ok(
            json!({"path": input, "depth": depth, "per_folder_limit": limit,
                  "children": children.0, "omitted": children.1}),
        )
    }

    fn tree_level(
        &self,
        real: &Path,
        rel: &Path,
        depth: usize,
        limit: usize,
    ) -> (Vec<Value>, usize) {
        let entries = self.entries(real);
        let omitted = entries.len().saturating_sub(limit);
        let nodes = entries
            .iter()
            .take(limit)
            .map(|(name, kind)| {
                let mut node = self.entry_json(real, rel, name, *kind);
                let open = *kind == Kind::Dir
                    && depth > 1
                    && name != ".git"
                    && node["non_accessible"] == json!(false);
                if open {
                    let (children, omitted) =
                        self.tree_level(&real.join(name), &rel.join(name), depth - 1, limit);
                    node["children"] = json!(children);
                    node["omitted"] = json!(omitted);
                }
                node
            })
            .collect();
        (nodes, omitted)
    }
}

struct Search {
    matches: Vec<Value>,
    max: usize,
    truncated: bool,
    skipped_non_accessible: usize,
    skipped_large_or_binary: usize,
}

/// Normalises a relative path lexically; `..` may not climb above the base.
fn lexical(input: &str) -> Result<PathBuf, FsError> {
    if input.is_empty() {
        return Err(FsError::new(
            FsCode::C210,
            "path is empty (use \".\" for the base)",
        ));
    }
    if input.contains('\0') {
        return Err(FsError::new(FsCode::C210, "path contains a NUL byte"));
    }
    let path = Path::new(input);
    if path.is_absolute() {
        return Err(FsError::new(
            FsCode::C210,
            format!("{input}: absolute paths are refused; give a path relative to the base"),
        ));
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if !out.pop() {
                    return Err(FsError::new(
                        FsCode::C215,
                        format!("{input}: climbs out of the base"),
                    ));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(FsError::new(FsCode::C210, format!("{input}: not relative")));
            }
        }
    }
    Ok(out)
}

fn parse<T: DeserializeOwned>(payload: Value) -> Result<T, FsError> {
    // serde takes a list for a struct too, and names the Rust type ("expected struct
    // ReadArgs with 3 elements").
    if !payload.is_object() {
        return Err(FsError::new(
            FsCode::C210,
            format!(
                "bad input: the payload must be a JSON object of the operation's fields, like \
                 {{\"path\": \"src/main.rs\"}} (got {payload})"
            ),
        ));
    }
    let culprit = culprit_key::<T>(&payload);
    serde_json::from_value(payload).map_err(|e| {
        // Rust's type names mean nothing to a caller.
        let e = ["usize", "u64", "u32"]
            .iter()
            .fold(e.to_string(), |text, rust| {
                text.replace(
                    &format!("expected {rust}"),
                    "expected a whole number, 0 or more",
                )
            });
        let message = match culprit {
            Some(key) => format!("bad input: {key}: {e}"),
            None => format!("bad input: {e}"),
        };
        FsError::new(FsCode::C210, message)
    })
}

/// The key of `payload` whose value serde refuses (its own message names only the types:
/// "invalid type: integer `5`, expected a string"): the one whose removal leaves at most
/// a "missing field" error about that same key.
fn culprit_key<T: DeserializeOwned>(payload: &Value) -> Option<String> {
    let map = payload.as_object()?;
    let error = serde_json::from_value::<T>(payload.clone())
        .err()?
        .to_string();
    if error.starts_with("missing field") || error.starts_with("unknown field") {
        return None;
    }
    map.keys()
        .find(|key| {
            let mut without = map.clone();
            without.remove(*key);
            match serde_json::from_value::<T>(Value::Object(without)) {
                Ok(_) => true,
                Err(e) => e.to_string().starts_with(&format!("missing field `{key}`")),
            }
        })
        .cloned()
}

fn too_large(input: &str, len: u64, max: u64) -> FsError {
    FsError::new(
        FsCode::C213,
        format!("{input}: {len} bytes, more than the limit of {max}"),
    )
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Creates `path` with `bytes` and the permission bits of `mode`, never its setuid,
/// setgid or sticky bit: the mode an edit keeps was read from a file an agent in the same
/// tree may have swapped, and the tools run unconfined, as the user (round nineteen's
/// review: `update-file`, racing a swap of the file with a link to a setuid file, took
/// the mode by path and wrote the agent's text as a setuid-root file,
/// `sandbox_round19_review::an_edit_raced_with_a_setuid_file_writes_no_setuid_file`).
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode & 0o777)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// What a directory entry is (never following symlinks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "folder",
            Kind::Symlink => "symlink",
            Kind::Other => "other",
        }
    }
}

fn kind_of(meta: &fs::Metadata) -> Kind {
    let t = meta.file_type();
    if t.is_symlink() {
        Kind::Symlink
    } else if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

/// A folder's entries by name, symlinks not followed; unreadable folders are empty.
fn sorted_entries(dir: &Path) -> Vec<(String, Kind)> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(String, Kind)> = rd
        .filter_map(Result::ok)
        .map(|e| {
            let kind = e
                .file_type()
                .map(|t| {
                    if t.is_symlink() {
                        Kind::Symlink
                    } else if t.is_dir() {
                        Kind::Dir
                    } else if t.is_file() {
                        Kind::File
                    } else {
                        Kind::Other
                    }
                })
                .unwrap_or(Kind::Other);
            (e.file_name().to_string_lossy().into_owned(), kind)
        })
        .collect();
    v.sort();
    v
}

fn count_entries(dir: &Path) -> usize {
    1 + sorted_entries(dir)
        .iter()
        .map(|(n, k)| {
            if *k == Kind::Dir {
                count_entries(&dir.join(n))
            } else {
                1
            }
        })
        .sum::<usize>()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    start_line: Option<usize>,
    end_line: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(default)]
    literal: bool,
    #[serde(default)]
    ignore_case: bool,
    max_results: Option<usize>,
}

/// One line operation of `update-file`; lines are 1-based and inclusive.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum LineOp {
    /// Inserts `content`'s lines before line `line` (`line` = last + 1 appends).
    Insert { line: usize, content: String },
    /// Removes lines `start..=end`.
    Remove { start: usize, end: usize },
    /// Replaces lines `start..=end` with `content`'s lines.
    UpdateLines {
        start: usize,
        end: usize,
        content: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Replace {
    pattern: String,
    replacement: String,
    #[serde(default)]
    literal: bool,
    /// At most this many replacements; 0 or absent: all.
    count: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    path: String,
    #[serde(default)]
    ops: Vec<LineOp>,
    #[serde(default)]
    replace: Vec<Replace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateArgs {
    path: String,
    content: String,
    #[serde(default)]
    overwrite: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteArgs {
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    path: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TreeArgs {
    path: Option<String>,
    depth: Option<usize>,
    per_folder_limit: Option<usize>,
}

fn replace(text: &str, rep: &Replace) -> Result<(String, usize), FsError> {
    let pattern = if rep.literal {
        regex::escape(&rep.pattern)
    } else {
        rep.pattern.clone()
    };
    let re = regex::RegexBuilder::new(&pattern)
        .multi_line(true)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| FsError::new(FsCode::C210, format!("bad replace pattern: {e}")))?;
    let limit = rep.count.unwrap_or(0);
    let found = re.find_iter(text).count();
    let n = if limit == 0 { found } else { found.min(limit) };
    let out = if rep.literal {
        re.replacen(text, limit, regex::NoExpand(&rep.replacement))
    } else {
        re.replacen(text, limit, rep.replacement.as_str())
    };
    if out.len() > MAX_WRITE_BYTES {
        return Err(too_large(
            "result",
            out.len() as u64,
            MAX_WRITE_BYTES as u64,
        ));
    }
    Ok((out.into_owned(), n))
}

/// A text file as lines, remembering whether it ended with a newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    pub lines: Vec<String>,
    pub trailing_newline: bool,
}

impl Lines {
    pub fn parse(text: &str) -> Lines {
        let trailing_newline = text.ends_with('\n');
        let body = text.strip_suffix('\n').unwrap_or(text);
        let lines = if text.is_empty() {
            Vec::new()
        } else {
            body.split('\n').map(str::to_string).collect()
        };
        Lines {
            lines,
            trailing_newline,
        }
    }

    pub fn render(&self) -> String {
        let mut out = self.lines.join("\n");
        if self.trailing_newline && !self.lines.is_empty() {
            out.push('\n');
        }
        out
    }

    /// Applies `ops` bottom-up after checking each against the current line count and
    /// the others for overlap, so every op's numbers refer to the file as read.
    pub fn apply(&mut self, ops: &[LineOp]) -> Result<(), FsError> {
        let n = self.lines.len();
        let mut spans: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, index); insert: end = start - 1
        for (i, op) in ops.iter().enumerate() {
            let (s, e) = match op {
                LineOp::Insert { line, .. } => {
                    if *line == 0 || *line > n + 1 {
                        return Err(bad_line(
                            i,
                            format!("insert line {line} outside 1..={}", n + 1),
                        ));
                    }
                    (*line, *line - 1)
                }
                LineOp::Remove { start, end } | LineOp::UpdateLines { start, end, .. } => {
                    if *start == 0 || start > end || *end > n {
                        return Err(bad_line(
                            i,
                            format!("lines {start}..={end} outside 1..={n}"),
                        ));
                    }
                    (*start, *end)
                }
            };
            spans.push((s, e, i));
        }
        for (a, x) in spans.iter().enumerate() {
            for y in &spans[a + 1..] {
                if overlaps(*x, *y) {
                    return Err(FsError::new(
                        FsCode::C210,
                        format!("ops {} and {} overlap", x.2 + 1, y.2 + 1),
                    ));
                }
            }
        }
        // Bottom-up: by start descending; at one start a range goes before an insert.
        let is_range = |x: &(usize, usize, usize)| x.1 >= x.0;
        spans.sort_by(|x, y| y.0.cmp(&x.0).then(is_range(y).cmp(&is_range(x))));
        for (s, _, i) in spans {
            match &ops[i] {
                LineOp::Insert { content, .. } => {
                    let new = content_lines(content);
                    self.lines.splice(s - 1..s - 1, new);
                }
                LineOp::Remove { end, .. } => {
                    self.lines.drain(s - 1..*end);
                }
                LineOp::UpdateLines { end, content, .. } => {
                    self.lines.splice(s - 1..*end, content_lines(content));
                }
            }
        }
        if n == 0 && !self.lines.is_empty() {
            self.trailing_newline = true;
        }
        Ok(())
    }
}

fn bad_line(i: usize, msg: String) -> FsError {
    FsError::new(FsCode::C210, format!("op {}: {msg}", i + 1))
}

/// Whether two spans (start, end, _) collide. An insert is (L, L-1): a point before L.
fn overlaps(x: (usize, usize, usize), y: (usize, usize, usize)) -> bool {
    let x_ins = x.1 < x.0;
    let y_ins = y.1 < y.0;
    match (x_ins, y_ins) {
        (true, true) => x.0 == y.0,
        (true, false) => y.0 < x.0 && x.0 <= y.1,
        (false, true) => x.0 < y.0 && y.0 <= x.1,
        (false, false) => x.0 <= y.1 && y.0 <= x.1,
    }
}

/// `content`'s lines: one trailing newline is not an extra empty line.
fn content_lines(content: &str) -> Vec<String> {
    content
        .strip_suffix('\n')
        .unwrap_or(content)
        .split('\n')
        .map(str::to_string)
        .collect()
}

/// A count the caller may give (`name`): `default` when absent, at most `max` (a larger
/// one is lowered, and the answer says what was used where it matters); 0 is refused,
/// since it would ask for nothing (it was raised to 1 silently: `limit: 0` listed one
/// entry).
fn count_argument(
    name: &str,
    given: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, FsError> {
    match given {
        None => Ok(default),
        Some(0) => Err(FsError::new(
            FsCode::C210,
            format!("{name} must be 1 or more (leave it out for {default}; at most {max})"),
        )),
        Some(n) => Ok(n.min(max)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(text: &str, ops: Value) -> Result<String, FsError> {
        let ops: Vec<LineOp> = serde_json::from_value(ops).unwrap();
        let mut l = Lines::parse(text);
        l.apply(&ops)?;
        Ok(l.render())
    }

    #[test]
    fn a_count_of_zero_is_refused_and_a_large_one_lowered() {
        let e = count_argument("limit", Some(0), 200, 1000).unwrap_err();
        assert_eq!(e.code, FsCode::C210);
        assert!(e.message.starts_with("limit must be 1 or more"), "{e}");
        assert_eq!(count_argument("limit", None, 200, 1000), Ok(200));
        assert_eq!(count_argument("limit", Some(5000), 200, 1000), Ok(1000));
        assert_eq!(count_argument("limit", Some(7), 200, 1000), Ok(7));
    }

    #[test]
    fn line_ops_refer_to_the_file_as_read() {
        let out = apply(
            "a\nb\nc\nd\n",
            json!([{"op": "insert", "line": 1, "content": "top"},
                   {"op": "update_lines", "start": 2, "end": 2, "content": "B1\nB2"},
                   {"op": "remove", "start": 4, "end": 4},
                   {"op": "insert", "line": 5, "content": "end\n"}]),
        )
        .unwrap();
        assert_eq!(out, "top\na\nB1\nB2\nc\nend\n");
    }

    #[test]
    fn overlapping_and_out_of_range_ops_are_rejected() {
        let e = apply(
            "a\nb\nc\n",
            json!([{"op": "remove", "start": 1, "end": 2},
                   {"op": "update_lines", "start": 2, "end": 3, "content": "x"}]),
        )
        .unwrap_err();
        assert_eq!(e.code, FsCode::C210);
        let e = apply(
            "a\nb\nc\n",
            json!([{"op": "remove", "start": 1, "end": 2},
                   {"op": "insert", "line": 2, "content": "x"}]),
        )
        .unwrap_err();
        assert!(e.message.contains("overlap"), "{e}");
        let e = apply("a\n", json!([{"op": "remove", "start": 1, "end": 2}])).unwrap_err();
        assert_eq!(e.code, FsCode::C210);
        // An insert right before a range is not an overlap.
        let out = apply(
            "a\nb\n",
            json!([{"op": "insert", "line": 1, "content": "x"},
                   {"op": "update_lines", "start": 1, "end": 1, "content": "A"}]),
        )
        .unwrap();
        assert_eq!(out, "x\nA\nb\n");
    }

    #[test]
    fn lexical_rules() {
        assert_eq!(lexical("a/./b/../c").unwrap(), PathBuf::from("a/c"));
        assert_eq!(lexical("/etc/passwd").unwrap_err().code, FsCode::C210);
        assert_eq!(lexical("a/../../x").unwrap_err().code, FsCode::C215);
        assert_eq!(lexical("").unwrap_err().code, FsCode::C210);
    }

    #[test]
    fn no_trailing_newline_is_kept() {
        assert_eq!(
            apply("a\nb", json!([{"op": "remove", "start": 1, "end": 1}])).unwrap(),
            "b"
        );
    }
}
