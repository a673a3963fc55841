//! The seven operations of the jail, one method each on a [`Call`]: what each reads from
//! its payload, and how it answers. Every path goes through [`Call::resolve`] and the
//! checks of `mod.rs` first; nothing here opens a path by itself.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use super::lines::{LineOp, Lines, Replace, replace};
use super::{
    Call, FsCode, FsError, Kind, MAX_MATCH_TEXT, count_entries, kind_of, lexical, sorted_entries,
    truncate,
};

impl Call<'_> {
    pub(super) fn read_file(&self, a: ReadArgs) -> Result<Value, FsError> {
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

    pub(super) fn search(&self, a: SearchArgs) -> Result<Value, FsError> {
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
            .map_err(|e| super::bad_regex("bad pattern", &e))?;
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
        let mut out = json!({"matches": found.matches, "truncated": found.truncated,
                  "skipped_non_accessible": found.skipped_non_accessible,
                  "skipped_large_or_binary": found.skipped_large_or_binary});
        add_notes(&mut out, [over_limit("max_results", a.max_results, max)]);
        Ok(out)
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

    pub(super) fn update_file(&self, a: UpdateArgs) -> Result<Value, FsError> {
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

    pub(super) fn create_file(&self, a: CreateArgs) -> Result<Value, FsError> {
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

    pub(super) fn delete_file(&self, a: DeleteArgs) -> Result<Value, FsError> {
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

    pub(super) fn list_folder(&self, a: ListArgs) -> Result<Value, FsError> {
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
        let mut out = json!({"path": input, "entries": page, "total": total,
                  "offset": offset, "next_offset": next});
        add_notes(&mut out, [over_limit("limit", a.limit, limit)]);
        Ok(out)
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

    pub(super) fn tree(&self, a: TreeArgs) -> Result<Value, FsError> {
        let input = a.path.as_deref().unwrap_or(".");
        let r = self.resolve(input)?;
        self.require_dir(input, &r.real)?;
        let depth = count_argument("depth", a.depth, 3, 10)?;
        let limit = count_argument("per_folder_limit", a.per_folder_limit, 50, 500)?;
        let children = self.tree_level(&r.real, &r.rel, depth, limit);
        let mut out = json!({"path": input, "depth": depth, "per_folder_limit": limit,
                  "children": children.0, "omitted": children.1});
        add_notes(
            &mut out,
            [
                over_limit("depth", a.depth, depth),
                over_limit("per_folder_limit", a.per_folder_limit, limit),
            ],
        );
        Ok(out)
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

pub(super) struct Search {
    matches: Vec<Value>,
    max: usize,
    truncated: bool,
    skipped_non_accessible: usize,
    skipped_large_or_binary: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    path: String,
    start_line: Option<usize>,
    end_line: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(default)]
    literal: bool,
    #[serde(default)]
    ignore_case: bool,
    max_results: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct UpdateArgs {
    path: String,
    #[serde(default)]
    ops: Vec<LineOp>,
    #[serde(default)]
    replace: Vec<Replace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateArgs {
    path: String,
    content: String,
    #[serde(default)]
    overwrite: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteArgs {
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListArgs {
    path: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TreeArgs {
    path: Option<String>,
    depth: Option<usize>,
    per_folder_limit: Option<usize>,
}

/// A count the caller may give (`name`): `default` when absent, at most `max` (a larger
/// one is lowered, and the answer says what was used where it matters); 0 is refused,
/// since it would ask for nothing (it was raised to 1 silently: `limit: 0` listed one
/// entry).
/// What a result says of a count given over its limit (`used`), which was taken as the
/// limit: a model reading the result learns it got less than it asked for.
fn over_limit(name: &str, given: Option<usize>, used: usize) -> Option<String> {
    given
        .filter(|&n| n > used)
        .map(|n| format!("{name} {n} is over its limit of {used}: {used} was used"))
}

/// Puts `notes` (those that are some) into `out` as `"notes"`, when there are any.
fn add_notes<const N: usize>(out: &mut Value, notes: [Option<String>; N]) {
    let notes: Vec<String> = notes.into_iter().flatten().collect();
    if !notes.is_empty() {
        out["notes"] = json!(notes);
    }
}

pub(super) fn count_argument(
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
