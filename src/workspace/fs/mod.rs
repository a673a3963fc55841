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

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::sandbox::{DenyMatcher, deny_globs};

mod lines;
mod verbs;

pub use lines::{LineOp, Lines};

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
        let line = json!({"type": "integer", "minimum": 1, "description": "1-based"});
        // A count: at least 1, its default, and its limit (more is taken as the limit,
        // and the result's notes say so).
        let count = |default: usize, max: usize, what: &str| {
            json!({"type": "integer", "minimum": 1, "maximum": max, "default": default,
                   "description": format!("{what} (default {default}, at most {max})")})
        };
        match self {
            Verb::ReadFile => object(
                json!({"path": path, "start_line": line, "end_line": line}),
                &["path"],
            ),
            Verb::Search => object(
                json!({"pattern": {"type": "string"}, "path": path,
                       "glob": {"type": "string", "description": "only file names matching"},
                       "literal": {"type": "boolean"}, "ignore_case": {"type": "boolean"},
                       "max_results": count(100, 1000, "matches returned")}),
                &["pattern"],
            ),
            Verb::UpdateFile => object(
                json!({"path": path,
                       "ops": {"type": "array", "items": {"type": "object", "properties": {
                           "op": {"type": "string", "enum": ["insert", "remove", "update_lines"],
                                  "description": "insert takes line and content; remove takes \
                                  start and end; update_lines takes start, end and content"},
                           "line": {"type": "integer", "minimum": 1, "description":
                                    "insert: the line the content goes before (1-based; the \
                                     last line + 1 appends)"},
                           "start": line, "end": line, "content": {"type": "string"}},
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
            Verb::ListFolder => object(
                json!({"path": path, "offset": int,
                       "limit": count(200, 1000, "entries returned")}),
                &[],
            ),
            Verb::Tree => object(
                json!({"path": path, "depth": count(3, 10, "levels shown"),
                       "per_folder_limit": count(50, 500, "entries shown per folder")}),
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

/// A regex that does not compile, as one line (`what: regex parse error: ( ^ error:
/// unclosed group`): the regex crate's message spans lines, with the pattern and a caret
/// under the fault, and came out with its line breaks in the JSON message.
fn bad_regex(what: &str, e: &regex::Error) -> FsError {
    let text = e.to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    FsError::new(FsCode::C210, format!("{what}: {}", words.join(" ")))
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

#[cfg(test)]
mod tests {
    use super::verbs::count_argument;
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
