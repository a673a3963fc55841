//! What the user's own programs run, found from what they read: git's configs and their
//! includes (wherever they are, the home directory's too), the commands a config names
//! (hooks, filters, aliases, `core.hooksPath`, templates) and, through bounded reads of
//! those scripts, what they run in turn (an interpreter, a virtualenv, an `env`
//! program on `PATH`, a sourced file, a list `xargs` reads). Each such file in a writable
//! tree is held read-only, and an absent one is held as a placeholder, so the agent
//! cannot plant what the user's next `git commit` would run outside the sandbox.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, fstat, fstatat};

use crate::sandbox::config_text::{self, CommandWord, include_paths};
use crate::sandbox::listing::Kind;
use crate::sandbox::{SandboxError, home};

use super::dirs::{file_kind, is_plain_relative, open_beneath, walk_error};
use super::links::linked_files_under;
use super::{ABSENT_TARGET, MaskKind, PlaceholderKind, Walker, mask};

impl<'a> Walker<'a, '_> {
    /// The files of this tree that the git config at `config` includes (`include.path`,
    /// `includeIf.*.path`), and those they include in turn: read-only, each directory
    /// between the tree's root and them pinned (a renamed parent would let the agent put
    /// a file of its own at the included path), a symlink on the last step guarded as a
    /// link. A config that includes a work-tree file (`include.path =
    /// ../shared.gitconfig`, a project's way to share settings) handed that file to the
    /// agent, and a `core.fsmonitor` or filter driver it wrote there ran in the user's own
    /// next `git status`, outside the sandbox. An included file that does not exist is
    /// held absent ([`Walker::hold_absent_include`]), and one in another writable tree is
    /// that tree's to hold ([`guard_foreign_includes`](crate::sandbox::scan::guard_foreign_includes)).
    ///
    /// Each file is read once (`seen`): an agent of an earlier run that made the included
    /// file include another fifty times, and that one another, had this walk git's 50^8
    /// includes. More than [`MAX_INCLUDED`] files fail the scan closed, as more secrets
    /// than its cap do.
    ///
    /// Relative includes are read against `base`, the directory of the name git opened
    /// `config` by (git does not resolve a symlink to the included file first).
    pub(super) fn guard_includes(
        &mut self,
        config: &Path,
        base: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        // git's own limit on nested includes.
        const MAX_INCLUDE_DEPTH: usize = 10;
        if depth > MAX_INCLUDE_DEPTH
            || !walk.seen.insert((config.to_path_buf(), base.to_path_buf()))
        {
            return Ok(());
        }
        if walk.seen.len() > MAX_INCLUDED {
            return Err(SandboxError::ScanLimit {
                what: "the number of files git configs include",
                limit: MAX_INCLUDED,
                path: config.to_path_buf(),
            });
        }
        let Some(text) = read_config(config) else {
            return Ok(());
        };
        for value in include_paths(&text) {
            let Some(named) = expand_user_path(Path::new(OsStr::from_bytes(&value))) else {
                continue;
            };
            self.guard_include(&base.join(named), depth, walk, NamedBy::Config)?;
        }
        self.guard_command_files(&text, depth, walk)
    }

    /// One included path, `target` as the config names it (unresolved): the file, or its
    /// first missing name, when it lies in this tree; otherwise it is left to the
    /// writable tree that holds it ([`ScanOutput::foreign_includes`](crate::sandbox::scan::ScanOutput::foreign_includes)).
    pub(super) fn guard_include(
        &mut self,
        target: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
        named_by: NamedBy,
    ) -> Result<(), SandboxError> {
        if let Some(absent) = self.guard_links_on_the_way(target, &mut 0)? {
            return self.hold_absent_include(target, &absent, depth, walk, named_by);
        }
        let (Some(named_parent), Some(name)) = (target.parent(), target.file_name()) else {
            return Ok(());
        };
        let Ok(parent) = fs::canonicalize(named_parent) else {
            return Ok(());
        };
        let Some(rel_parent) = self.rel_in_tree(&parent) else {
            return self.guard_named_elsewhere(target, named_parent, depth, walk, named_by);
        };
        let Some(dir) = self.pinned_dir(&rel_parent) else {
            return Ok(());
        };
        let path = parent.join(name);
        let Ok(st) = fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return Ok(());
        };
        if named_by == NamedBy::Command {
            self.guard_venv(&path, depth, walk)?;
        }
        match file_kind(&st) {
            Kind::File => {
                self.push(mask(path.clone(), MaskKind::ReadOnly, &st, false))?;
                if named_by == NamedBy::Config {
                    self.guard_includes(&path, named_parent, depth + 1, walk)?;
                }
                if named_by == NamedBy::Command {
                    self.guard_interpreter(&path, depth, walk)?;
                }
            }
            Kind::Symlink => {
                self.guard_link(path.clone(), &st)?;
                if named_by == NamedBy::Config
                    && let Ok(resolved) = fs::canonicalize(&path)
                {
                    self.guard_includes(&resolved, named_parent, depth + 1, walk)?;
                }
                if named_by == NamedBy::Command
                    && let Ok(resolved) = fs::canonicalize(&path)
                {
                    self.guard_interpreter(&resolved, depth, walk)?;
                }
            }
            Kind::Dir if named_by == NamedBy::HeldDir => {
                self.push(mask(path.clone(), MaskKind::ReadOnly, &st, false))?;
            }
            Kind::Dir | Kind::Other => {}
        }
        Ok(())
    }

    /// [`Walker::guard_include`] of a `target` named outside this tree: a link there may
    /// lead into it (a hook of a repository above the workspace, `.git/hooks/pre-commit
    /// -> ../../sub/tools/pre-commit`), and the file it leads to is held here (the links
    /// and directories on the way are, by [`Walker::guard_links_on_the_way`]); otherwise
    /// an include is another writable tree's to hold.
    pub(super) fn guard_named_elsewhere(
        &mut self,
        target: &Path,
        named_parent: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
        named_by: NamedBy,
    ) -> Result<(), SandboxError> {
        let resolved = fs::canonicalize(target).ok();
        let Some((resolved, rel)) = resolved.and_then(|r| Some((r.clone(), self.rel_in_tree(&r)?)))
        else {
            self.pass_on(target, depth, named_by, walk);
            if named_by == NamedBy::Config {
                // What a file outside this tree includes may be in it (`~/x.gitconfig`
                // including `~/proj/shared.gitconfig`): not read until round seventeen's
                // second review, so that file was the agent's.
                if let Ok(resolved) = fs::canonicalize(target) {
                    self.note_other_names(&resolved);
                    self.guard_includes(&resolved, named_parent, depth + 1, walk)?;
                }
            }
            return Ok(());
        };
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        let Ok(fd) = open_beneath(self.tree.fd, &rel, OFlag::O_PATH) else {
            return Ok(());
        };
        let st = fstat(fd.as_fd()).map_err(|e| walk_error(&resolved, "inspect", e))?;
        if file_kind(&st) == Kind::Dir && named_by == NamedBy::HeldDir {
            self.push(mask(resolved.clone(), MaskKind::ReadOnly, &st, false))?;
        } else if file_kind(&st) == Kind::File {
            self.push(mask(resolved.clone(), MaskKind::ReadOnly, &st, false))?;
            if named_by == NamedBy::Config {
                self.guard_includes(&resolved, named_parent, depth + 1, walk)?;
            }
            if named_by == NamedBy::Command {
                self.guard_interpreter(&resolved, depth, walk)?;
            }
        }
        Ok(())
    }

    /// The interpreter a held command file's `#!` line names by path, held as the file
    /// is (a link to it guarded as a link): a virtualenv's console script
    /// (`.venv/bin/fmt`, whose `#!` pip writes as the venv's own `python`, a link in the
    /// work tree) was held, and the agent replaced the link with its own program, which
    /// the kernel then ran for the user's `git fmt` (round twenty-one's review). A
    /// relative one is read from the top of the work tree, where git runs commands. One
    /// found through `PATH` (`#!/usr/bin/env python3`) is looked for in each directory
    /// the configs' commands put on `PATH` ([`config_text::path_dirs`]), held there
    /// present or not: `. .venv/bin/activate && tools/fmt.py` ran the venv's `python3`,
    /// a link the agent replaced (round twenty-one's review, a ratchet until round
    /// twenty-two). Chains are followed as far as the include depth.
    pub(super) fn guard_interpreter(
        &mut self,
        script: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let Some(line) = read_shebang(script) else {
            return Ok(());
        };
        let mut named: Vec<Vec<u8>> = line.first().cloned().into_iter().collect();
        match env_program(&line) {
            Some(name) if !name.contains(&b'/') => {
                named.extend(
                    walk.path_dirs
                        .iter()
                        .map(|dir| [dir.as_slice(), b"/", &name].concat()),
                );
                if !walk.env_programs.iter().any(|(known, _)| *known == name) {
                    walk.env_programs.push((name, depth));
                }
            }
            Some(path) => named.push(path),
            None => {}
        }
        for interpreter in named {
            self.guard_one_interpreter(&interpreter, depth, walk)?;
        }
        Ok(())
    }

    /// One interpreter of [`Walker::guard_interpreter`], read from the top of the work
    /// tree; chains followed as far as the include depth.
    pub(super) fn guard_one_interpreter(
        &mut self,
        interpreter: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        const MAX_DEPTH: usize = 10;
        let Some(target) = config_path(interpreter, walk.work_tree.as_deref()) else {
            return Ok(());
        };
        if depth >= MAX_DEPTH || !walk.commands.insert(target.clone()) {
            return Ok(());
        }
        self.guard_include(&target, depth + 1, walk, NamedBy::Command)
    }

    /// Directories put on `PATH` ([`config_text::path_dirs`], or a held script's
    /// [`config_text::script_path_dirs`]) added to the walk's, each with the programs of
    /// the `#!/usr/bin/env` lines met so far held in it: a `PATH` read after the script
    /// (one a file the line sources sets, `. ./env.sh && tools/fmt.py`; another config's
    /// line) was never searched for them (round twenty-three's review).
    pub(super) fn add_path_dirs(
        &mut self,
        dirs: Vec<Vec<u8>>,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for dir in dirs {
            if walk.path_dirs.contains(&dir) {
                continue;
            }
            walk.path_dirs.push(dir.clone());
            self.guard_path_dir(&dir, depth, walk)?;
            for (name, depth) in walk.env_programs.clone() {
                let interpreter = [dir.as_slice(), b"/", &name].concat();
                self.guard_one_interpreter(&interpreter, depth, walk)?;
            }
        }
        Ok(())
    }

    /// The directories a held `.envrc` (direnv's; a protected name, at `rel`) puts on
    /// `PATH` (`PATH_add tools/bin`, `PATH=$PWD/bin:$PATH`), read from its directory, as
    /// direnv does, and guarded as a held script's ([`Walker::guard_path_dir`]). Round
    /// thirty's second review: with the user's `.envrc` of `PATH_add tools/bin`, the
    /// agent made `tools/bin/git`, and the user's next `git status` in a direnv shell
    /// ran it.
    pub(super) fn guard_envrc_path(&mut self, rel: &Path) -> Result<(), SandboxError> {
        // Through a link, as direnv reads it.
        let Some(text) = read_script(&self.tree.root.join(rel)) else {
            return Ok(());
        };
        let base = match rel.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut walk = ConfigWalk::new(Some(self.tree.root.to_path_buf()));
        for entry in config_text::envrc_path_dirs(&text) {
            if entry.starts_with(b"/") || entry.starts_with(b"~") {
                continue;
            }
            let named = [base.as_os_str().as_bytes(), b"/", &entry].concat();
            self.guard_path_dir(&named, 0, &mut walk)?;
        }
        self.guard_envrc_sourced(&text, base, &mut walk)?;
        // The `.envrc` itself is a script direnv runs in its directory: what it sources,
        // runs by path or with a shell, as a held script's (round thirty-two's review:
        // its `source scripts/env.sh`, `bash scripts/setup.sh` and `eval "$(sh
        // scripts/env.sh)"` left the user's script the agent's to write, and direnv ran it
        // at the user's next `cd` there).
        let envrc = self.tree.root.join(rel);
        let dir = envrc.parent().unwrap_or(self.tree.root).to_path_buf();
        let python_path = config_text::envrc_pythonpath_dirs(&text);
        self.guard_python_path(python_path, &dir, &dir, 0, &mut walk)?;
        self.guard_what_it_reads(&envrc, &dir, 0, &mut walk)
    }

    /// The files a held `.envrc` has direnv source (`source_env_if_exists .envrc.local`,
    /// [`config_text::envrc_sourced_files`]), read from its directory `base`: held, and
    /// read as a held script, when there; moved aside at the run's end if the run made
    /// them. And the files its `dotenv` loads, moved aside so too. Round thirty-one's
    /// review: the agent made the `.envrc.local` of the common `source_env_if_exists
    /// .envrc.local`, and direnv ran it at the user's next `cd` into the project (no
    /// `direnv allow` asked for it).
    fn guard_envrc_sourced(
        &mut self,
        text: &[u8],
        base: &Path,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let mut sourced = self.envrc_files(config_text::envrc_sourced_files(text), base)?;
        sourced.extend(self.envrc_up_files(text, base));
        for path in sourced {
            if fs::symlink_metadata(&path).is_err() {
                self.move_aside_if_made(&path)?;
            } else if walk.commands.insert(path.clone()) {
                self.guard_include(&path, 0, walk, NamedBy::Command)?;
                let top = self.tree.root.to_path_buf();
                self.guard_what_it_reads(&path, &top, 0, walk)?;
            }
        }
        // The variables file `dotenv` loads, absent at the start: moved aside if the run
        // made it. Round thirty-one's review: the agent made the `.env` of `.envrc`'s
        // `dotenv_if_exists` with `GIT_CONFIG_COUNT=1`, `GIT_CONFIG_KEY_0=core.fsmonitor`
        // and a command, which the user's next `git status` in a direnv shell ran. (One
        // there at the start is a secret, masked, by the default deny globs.)
        // One there at the start held: the default deny globs mask `.env` and `.env.*`,
        // not the user's `dotenv vars.txt` (round thirty-two's review: the agent appended
        // the same settings to it).
        for path in self.envrc_files(config_text::envrc_dotenv_files(text), base)? {
            if fs::symlink_metadata(&path).is_err() {
                self.move_aside_if_made(&path)?;
            } else if walk.commands.insert(path.clone()) {
                self.guard_include(&path, 0, walk, NamedBy::Command)?;
            }
        }
        Ok(())
    }

    /// A directory of a writable tree that a held line or script puts on `PATH`
    /// (`PATH="$PWD/tools/bin:$PATH"`, read from the top): held whole when it is there,
    /// moved aside at the run's end if the run made it ([`Walker::move_aside_if_made`]).
    /// Round thirty's review: a program there absent at the start was the agent's to
    /// make, a `fmt-local` the script runs when there, or a `git` or `make` that the
    /// script's next `git …` found first, and the user's `git ci` ran it. Not the top of
    /// the tree nor what holds it (`PATH=.:$PATH`: the whole tree), nor a directory below
    /// one of [`BUILD_OUTPUT_DIRS`] (`node_modules/.bin`, an activated `.venv/bin`: the
    /// installers' to fill).
    fn guard_path_dir(
        &mut self,
        dir: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let Some(target) = config_path(dir, walk.work_tree.as_deref()) else {
            return Ok(());
        };
        let Some(rel) = target
            .strip_prefix(self.tree.root)
            .ok()
            .and_then(|rel| self.lexical_at_start(rel).transpose())
            .transpose()?
        else {
            return Ok(());
        };
        if below_build_output(&rel) {
            return Ok(());
        }
        let path = self.tree.root.join(&rel);
        if fs::symlink_metadata(&path).is_err() {
            return self.move_aside_if_made(&path);
        }
        if walk.commands.insert(path.clone()) {
            self.guard_include(&path, depth, walk, NamedBy::HeldDir)?;
        }
        Ok(())
    }

    /// What a virtualenv's interpreter reads at its start, held when a held command is
    /// one (`VENV/bin/python*` beside a `VENV/pyvenv.cfg`): `pyvenv.cfg` (its `home`,
    /// `include-system-site-packages`) and each `VENV/lib*/python*/site-packages/` whole,
    /// whose `.pth` files `site` runs and whose `sitecustomize`/`usercustomize` it
    /// imports: the held `tools/fmt.py` of `. .venv/bin/activate && tools/fmt.py` ran
    /// the agent's `.venv/lib/python3.11/site-packages/x.pth` (round twenty-two's known
    /// limit). The agent cannot install into that virtualenv during the run.
    pub(super) fn guard_venv(
        &mut self,
        program: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let is_python = program
            .file_name()
            .is_some_and(|n| n.as_bytes().starts_with(b"python"));
        let Some(bin) = program
            .parent()
            .filter(|b| b.file_name() == Some(OsStr::new("bin")))
        else {
            return Ok(());
        };
        let Some(venv) = bin.parent().filter(|_| is_python) else {
            return Ok(());
        };
        let cfg = venv.join("pyvenv.cfg");
        if !walk.commands.insert(cfg.clone()) {
            return Ok(());
        }
        if fs::symlink_metadata(&cfg).is_err() {
            return self.guard_python_prefix(venv, depth, walk);
        }
        self.guard_include(&cfg, depth + 1, walk, NamedBy::Link)?;
        let Ok(libs) = fs::read_dir(venv) else {
            return Ok(());
        };
        for lib in libs
            .flatten()
            .filter(|e| e.file_name().as_bytes().starts_with(b"lib"))
        {
            let Ok(versions) = fs::read_dir(lib.path()) else {
                continue;
            };
            for version in versions.flatten() {
                if version.file_name().as_bytes().starts_with(b"python") {
                    let site = version.path().join("site-packages");
                    self.guard_include(&site, depth + 1, walk, NamedBy::HeldDir)?;
                }
            }
        }
        Ok(())
    }

    /// A Python installed as a prefix (`PREFIX/bin/python*` beside a
    /// `PREFIX/lib*/python*/os.py`, no `pyvenv.cfg`: conda's `--prefix ./env`, pixi's
    /// `.pixi/envs/default`), held whole when a held command is its interpreter: it reads
    /// its stdlib, `site-packages` and (Debian's `site`) `lib/python3/dist-packages` from
    /// there at every start, and the agent's `.pth` there ran at the user's `git fmt`
    /// (round twenty-four's review, a ratchet until round twenty-five). Not when the
    /// prefix is the tree's top (that would hold the whole tree).
    fn guard_python_prefix(
        &mut self,
        prefix: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let Ok(libs) = fs::read_dir(prefix) else {
            return Ok(());
        };
        let stdlib = libs
            .flatten()
            .filter(|e| e.file_name().as_bytes().starts_with(b"lib"))
            .filter_map(|lib| fs::read_dir(lib.path()).ok())
            .flat_map(|versions| versions.flatten())
            .any(|v| {
                v.file_name().as_bytes().starts_with(b"python")
                    && fs::symlink_metadata(v.path().join("os.py")).is_ok()
            });
        let at_top = fs::canonicalize(prefix)
            .ok()
            .and_then(|p| self.rel_in_tree(&p))
            .is_some_and(|rel| rel.as_os_str().is_empty());
        if !stdlib || at_top {
            return Ok(());
        }
        self.guard_include(prefix, depth + 1, walk, NamedBy::HeldDir)
    }

    /// The names Python's `site` imports at every start (`sitecustomize*`,
    /// `usercustomize*`) in each directory a held line puts on `PYTHONPATH`
    /// ([`config_text::pythonpath_dirs`]; `top` the line's working directory, `own` the
    /// script's): those there held read-only, and each such name made during the run
    /// moved aside by the end-of-run guard, as a protected name is (its glob given to the
    /// guard, [`ScanOutput::made_aside_globs`](crate::sandbox::scan::ScanOutput::made_aside_globs)).
    /// Any other module the line's script imports from there is the agent's, as a held
    /// script's own imports are.
    pub(super) fn guard_python_path(
        &mut self,
        dirs: Vec<(Vec<u8>, config_text::SourceBase)>,
        top: &Path,
        own: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        const STARTUP: [&str; 2] = ["sitecustomize", "usercustomize"];
        for (dir, base) in dirs {
            let base = match base {
                config_text::SourceBase::WorkingDir => top,
                config_text::SourceBase::ScriptDir => own,
            };
            let Some(path) = config_path(&dir, Some(base)) else {
                continue;
            };
            let path = fs::canonicalize(&path).unwrap_or(path);
            let Some(rel) = path
                .strip_prefix(self.tree.root)
                .ok()
                .filter(|rel| is_plain_relative(rel))
                .and_then(Path::to_str)
            else {
                continue;
            };
            let prefix = match rel {
                "" => String::new(),
                rel => format!("{}/", globset::escape(rel)),
            };
            for name in STARTUP {
                let glob = format!("{prefix}{name}*");
                let root = self.tree.root.to_path_buf();
                if self.tree.writable
                    && !self
                        .out
                        .made_aside_globs
                        .contains(&(root.clone(), glob.clone()))
                {
                    self.out.made_aside_globs.push((root, glob));
                }
            }
            let Ok(entries) = fs::read_dir(&path) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if STARTUP
                    .iter()
                    .any(|s| name.as_bytes().starts_with(s.as_bytes()))
                {
                    self.guard_include(&entry.path(), depth + 1, walk, NamedBy::HeldDir)?;
                }
            }
        }
        Ok(())
    }

    /// `target`, named by a config outside this tree or a command of one, handed to the
    /// writable tree that holds it ([`ScanOutput::foreign_includes`](crate::sandbox::scan::ScanOutput::foreign_includes)); what a link names
    /// is asked of every writable tree already.
    pub(super) fn pass_on(
        &mut self,
        target: &Path,
        depth: usize,
        named_by: NamedBy,
        walk: &ConfigWalk,
    ) {
        if named_by != NamedBy::Link {
            self.out.foreign_includes.push(ForeignName {
                target: target.to_path_buf(),
                depth,
                named_by,
                work_tree: walk.work_tree.clone(),
            });
        }
    }

    /// The files of the work tree that the commands of a config text run
    /// ([`config_text::command_words`]), held as an included file is but not read as a
    /// config: a filter driver's `clean = sh tools/strip.sh`, selected by the project's
    /// `.gitattributes`, ran what the agent wrote in `tools/strip.sh` at the user's next
    /// `git add`, outside the sandbox (round seventeen's review). A word is read against
    /// the top of the work tree, where git runs these commands; a bare word (`sh
    /// strip.sh`) is held only when a file is there, one with a `/` also when absent.
    /// The directories the text names for git to run from (`core.hooksPath`,
    /// `init.templateDir`) are held too.
    pub(super) fn guard_command_files(
        &mut self,
        text: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        self.guard_hooks_paths(text, depth, walk)?;
        self.guard_template_dirs(text, depth, walk)?;
        self.guard_git_settings(&config_text::command_git_settings(text), depth, walk)?;
        let Some(top) = walk.work_tree.clone() else {
            return Ok(());
        };
        self.add_path_dirs(config_text::path_dirs(text), depth, walk)?;
        let python_path = config_text::pythonpath_dirs(text);
        self.guard_python_path(python_path, &top, &top, depth, walk)?;
        // First: a word met held-if-present is not looked at again.
        self.guard_entry_points(text, &top, depth, walk)?;
        for word in config_text::command_words(text)
            .into_iter()
            .chain(submodule_words(text, &top))
        {
            self.guard_command_word(word, &top, depth, walk)?;
        }
        self.guard_xargs_lists(text, &top, depth, walk)
    }

    /// The entry points an interpreter of the text's commands runs for a word that is no
    /// file ([`config_text::interpreted_entries`]), held present or not: in the
    /// directory the word names (`tools/fmt/index.js`, `package.json`, `__main__.py`),
    /// and beside it for node (`tools/fmt.js`, tried first), also when the word names
    /// nothing yet (a word with a `/`: the word itself is held absent then). Held only
    /// when present, the agent added them (round twenty-three's Known limits).
    pub(super) fn guard_entry_points(
        &mut self,
        text: &[u8],
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for (word, interpreter) in config_text::interpreted_entries(text) {
            let Some(target) = config_path(&word, Some(top)) else {
                continue;
            };
            let named: Vec<Vec<u8>> = match fs::metadata(&target) {
                Ok(meta) if meta.is_dir() => interpreter
                    .in_dir
                    .iter()
                    .map(|main| [&word[..], b"/", main].concat())
                    .chain(interpreter.suffixes.iter().map(|s| [&word[..], s].concat()))
                    .collect(),
                Ok(_) => continue,
                Err(_) if word.contains(&b'/') => interpreter
                    .suffixes
                    .iter()
                    .map(|s| [&word[..], s].concat())
                    .collect(),
                Err(_) => continue,
            };
            for entry in named {
                let word = CommandWord {
                    word: entry,
                    is_path: true,
                    whole_dir: false,
                };
                self.guard_command_word(word, top, depth, walk)?;
            }
        }
        Ok(())
    }

    /// The entries of each list file an `xargs` of the text's commands runs
    /// ([`config_text::xargs_lists`]), read from the top of the work tree, held as words
    /// of the line: `xargs -n1 -a tools/checks.list sh` ran the agent's
    /// `tools/checks/a.sh` (round twenty-three's review, a ratchet until round
    /// twenty-four). The list itself is held too (`-atools/checks.list` is no word of
    /// the line). A list larger than [`MAX_SCRIPT_BYTES`] is not read.
    pub(super) fn guard_xargs_lists(
        &mut self,
        text: &[u8],
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let lists = config_text::xargs_lists(text).into_iter().map(|l| (l, top));
        let entries = ListEntries {
            present_only: false,
            affixes: &[],
        };
        self.guard_lists(lists, top, depth, walk, entries)
    }

    /// [`Walker::guard_xargs_lists`] for `lists`, each read from its own base directory
    /// (a script's own lists may be spelled from its directory); their entries are words
    /// of a line run from `top`; with `present_only`, only those that exist (a file a
    /// script merely reads may list anything); each entry also as the script completes
    /// it ([`ListEntries::affixes`]).
    fn guard_lists<'p>(
        &mut self,
        lists: impl IntoIterator<Item = (Vec<u8>, &'p Path)>,
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
        entries: ListEntries<'_>,
    ) -> Result<(), SandboxError> {
        let ListEntries {
            present_only,
            affixes,
        } = entries;
        for (list, base) in lists {
            let is_path = list.contains(&b'/');
            let word = CommandWord {
                word: list.clone(),
                is_path,
                whole_dir: false,
            };
            self.guard_command_word(word, base, depth, walk)?;
            let Some(text) = walk.read_script(config_path(&list, Some(base)))? else {
                continue;
            };
            for entry in config_text::list_entries(&text) {
                // Only those there: an absent one would count towards the cap for nothing.
                for word in config_text::completed_entries(&entry, affixes) {
                    if config_path(&word.word, Some(top))
                        .is_some_and(|p| fs::symlink_metadata(p).is_ok())
                    {
                        self.guard_command_word(word, top, depth, walk)?;
                    }
                }
                let is_path = entry.contains(&b'/') && !present_only;
                let word = CommandWord {
                    word: entry,
                    is_path,
                    whole_dir: false,
                };
                self.guard_command_word(word, top, depth, walk)?;
            }
        }
        Ok(())
    }

    /// One word of [`Walker::guard_command_files`]: the file it names held (a glob's
    /// directory whole) and what that file reads in turn.
    pub(super) fn guard_command_word(
        &mut self,
        word: CommandWord,
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let CommandWord {
            word,
            is_path,
            whole_dir,
        } = word;
        let Some(target) = config_path(&word, Some(top)) else {
            return Ok(());
        };
        // A glob's directory is keyed apart from a file of the same name: one command
        // may name `ci` as a file, another read `ci/*`.
        let key = if whole_dir {
            target.join("*")
        } else {
            target.clone()
        };
        // Absent and held only when there: not keyed (see [`Walker::guard_one_script`]).
        if !is_path && fs::symlink_metadata(&target).is_err() || !walk.commands.insert(key) {
            return Ok(());
        }
        if walk.commands.len() > MAX_COMMAND_FILES {
            return Err(SandboxError::ScanLimit {
                what: "the number of files the commands of git configs name",
                limit: MAX_COMMAND_FILES,
                path: target,
            });
        }
        // A glob's directory is held whole, unless that is this tree or holds it
        // (`for f in sub/*` with the workspace in `sub`): as a hooks directory.
        let named_by = if !whole_dir {
            NamedBy::Command
        } else if fs::canonicalize(&target)
            .ok()
            .is_some_and(|dir| self.tree.root.starts_with(&dir))
        {
            return Ok(());
        } else {
            NamedBy::HeldDir
        };
        self.guard_include(&target, depth, walk, named_by)?;
        if named_by == NamedBy::Command {
            self.guard_what_it_reads(&target, top, depth, walk)?;
        }
        Ok(())
    }

    /// What a file the commands run makes run in turn, held like it
    /// ([`Walker::guard_one_script`]), then theirs, however deep: a file is read once
    /// (`walk.commands`), and more than [`MAX_COMMAND_FILES`] of them refuse the run
    /// ([`SandboxError::HeldScripts`]). Until round twenty-six the walk stopped four
    /// scripts down without a word, and the agent rewrote the sixth script of the user's
    /// `sh tools/s1.sh` chain. The files are taken from a queue, not by recursion, so a
    /// long chain costs no stack.
    pub(super) fn guard_what_it_reads(
        &mut self,
        file: &Path,
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        walk.scripts
            .push((file.to_path_buf(), top.to_path_buf(), depth));
        if walk.reading_scripts {
            return Ok(());
        }
        walk.reading_scripts = true;
        let mut result = Ok(());
        while let Some((file, top, depth)) = walk.scripts.pop() {
            result = self
                .tree
                .cancel
                .check()
                .and_then(|()| self.guard_one_script(&file, &top, depth, walk));
            if result.is_err() {
                walk.scripts.clear();
                break;
            }
        }
        walk.reading_scripts = false;
        result
    }

    /// One file of [`Walker::guard_what_it_reads`]: the files a shell script sources
    /// ([`config_text::sourced_words`], each read from the top of the work tree and from
    /// the script's own directory) or runs by path ([`config_text::run_words`], held only
    /// when present), and the file a `package.json`'s `main` names (node runs it for the
    /// directory), each held and queued; a file larger than [`MAX_SCRIPT_BYTES`] is not
    /// read.
    fn guard_one_script(
        &mut self,
        file: &Path,
        top: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let (Some(text), Some(dir)) = (walk.read_script(Some(file.to_path_buf()))?, file.parent())
        else {
            return Ok(());
        };
        let named = if file.file_name() == Some(OsStr::new("package.json")) {
            package_main_names(&text, dir)
        } else {
            self.guard_what_a_shell_script_sets(&text, top, dir, depth, walk)?;
            shell_script_names(&text, top, dir)
        };
        for (target, when_absent) in named {
            // Absent and held only when there: not keyed, or a later word naming it to be
            // held absent (`. tools/lib.sh` in another script) found it taken, and the
            // agent made the file the user's script sources (round twenty-seven's
            // review). Nor counted towards the cap.
            if fs::symlink_metadata(&target).is_err() {
                match when_absent {
                    WhenAbsent::Held => {}
                    WhenAbsent::Skipped => continue,
                    WhenAbsent::MovedAsideIfMade => {
                        self.move_aside_if_made(&target)?;
                        continue;
                    }
                }
            }
            if !walk.commands.insert(target.clone()) {
                continue;
            }
            // Past the cap the run is refused: what is left would be the agent's to write.
            // (Until round twenty-six a warning said so and the run went on.)
            if walk.commands.len() > MAX_COMMAND_FILES {
                return Err(SandboxError::HeldScripts {
                    limit: MAX_COMMAND_FILES,
                    path: target,
                });
            }
            self.guard_include(&target, depth, walk, NamedBy::Command)?;
            self.guard_what_it_reads(&target, top, depth, walk)?;
        }
        Ok(())
    }

    /// What a shell script held in [`Walker::guard_one_script`] sets up for what it runs,
    /// held: the `PATH` and `PYTHONPATH` entries it sets, the lists it feeds to `xargs`
    /// or reads its words from, the directories it runs every file of, and the git
    /// config it sets.
    fn guard_what_a_shell_script_sets(
        &mut self,
        text: &[u8],
        top: &Path,
        dir: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        // The `PATH` it sets is the line's when it is sourced (`. ./env.sh &&
        // tools/fmt.py`), read from the top as the line's is.
        let script_dir = match dir.strip_prefix(top) {
            Ok(rel) if rel.as_os_str().is_empty() => Path::new("."),
            Ok(rel) => rel,
            Err(_) => dir,
        };
        let script_dir = script_dir.as_os_str().as_bytes();
        self.add_path_dirs(config_text::script_path_dirs(text, script_dir), depth, walk)?;
        let python_path = config_text::script_pythonpath_dirs(text);
        self.guard_python_path(python_path, top, dir, depth, walk)?;
        // The `xargs` lists it runs, and what they name ([`Walker::guard_lists`]), its
        // variables read with those the files it sources set. And the files it reads
        // when it runs anything (`for f in $(cat LIST)`, `done < LIST`): those that are
        // files ([`config_text::script_read_lists`]).
        let based = |(list, base): (Vec<u8>, config_text::SourceBase)| match base {
            config_text::SourceBase::WorkingDir => (list, top),
            config_text::SourceBase::ScriptDir => (list, dir),
        };
        let with_sourced = [sourced_assignments(text, top, dir, walk)?, text.to_vec()].concat();
        let lists: Vec<(Vec<u8>, &Path)> = config_text::script_xargs_lists(&with_sourced)
            .into_iter()
            .map(based)
            .collect();
        let affixes = config_text::variable_affixes(&with_sourced);
        let entries = ListEntries {
            present_only: false,
            affixes: &affixes,
        };
        self.guard_lists(lists, top, depth, walk, entries)?;
        // Any file's lines may be read so: only its entries that exist are held.
        let read: Vec<(Vec<u8>, &Path)> = config_text::script_read_lists(&with_sourced)
            .into_iter()
            .map(based)
            .filter(|(list, base)| config_path(list, Some(base)).is_some_and(|p| p.is_file()))
            .collect();
        let entries = ListEntries {
            present_only: true,
            affixes: &affixes,
        };
        self.guard_lists(read, top, depth, walk, entries)?;
        self.guard_dirs_run_whole(text, top, dir, depth, walk)?;
        let settings = config_text::script_git_settings(text, dir.as_os_str().as_bytes());
        self.guard_git_settings(&settings, depth, walk)
    }

    /// The git config a command of the configs or a held script sets (`git -c
    /// core.hooksPath=ci/hooks`, `git config include.path ../ci/team.gitconfig`:
    /// [`config_text::script_git_settings`]), read as a config of the work tree's
    /// repository: its hooks directories and template directories held whole, the files
    /// it includes held and read as configs (a relative one from the git dir, where `git
    /// config` keeps it, and from the top), its commands' files held. Round twenty-nine's
    /// review: neither a directory nor a config file looks like a script, and the agent's
    /// `ci/hooks/pre-commit` or `core.fsmonitor` ran at the user's `git ci`. A text met
    /// [`MAX_SETTINGS_DEPTH`] settings down is not read (an alias setting an alias…).
    fn guard_git_settings(
        &mut self,
        settings: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        const MAX_SETTINGS_DEPTH: usize = 10;
        let Some(top) = walk.work_tree.clone() else {
            return Ok(());
        };
        if settings.is_empty() || depth > MAX_SETTINGS_DEPTH {
            return Ok(());
        }
        for value in include_paths(settings) {
            let Some(named) = expand_user_path(Path::new(OsStr::from_bytes(&value))) else {
                continue;
            };
            for base in [top.join(".git"), top.clone()] {
                self.guard_include(&base.join(&named), depth + 1, walk, NamedBy::Config)?;
            }
        }
        self.guard_command_files(settings, depth + 1, walk)
    }

    /// The directories a held shell script runs every file of, named literally
    /// ([`config_text::script_dirs_run_whole`]: `run-parts tools/checks`, `for f in
    /// tools/checks/*.sh; do sh "$f"; done`), read from the top and from the script's
    /// `dir`, held whole when there, as a glob of a config's own line is.
    fn guard_dirs_run_whole(
        &mut self,
        text: &[u8],
        top: &Path,
        dir: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for (word, base) in config_text::script_dirs_run_whole(text) {
            let bases = match base {
                config_text::SourceBase::WorkingDir => [top, dir],
                config_text::SourceBase::ScriptDir => [dir, top],
            };
            for base in bases {
                if !config_path(&word, Some(base)).is_some_and(|p| p.is_dir()) {
                    continue;
                }
                let word = CommandWord {
                    word: word.clone(),
                    is_path: false,
                    whole_dir: true,
                };
                self.guard_command_word(word, base, depth, walk)?;
            }
        }
        Ok(())
    }

    /// The hooks directory (`core.hooksPath`): relative to the top of the work tree, held
    /// whole. Only the workspace's own repository's was asked of the user's git
    /// (`users_hooks_dir`): a nested repository's `core.hooksPath = scripts/hooks`, or the
    /// user's global `core.hooksPath = git-hooks` in it, left `sub/scripts/hooks/pre-commit`
    /// the agent's to write, and the user's next commit there ran it (round eighteen's
    /// second review).
    pub(super) fn guard_hooks_paths(
        &mut self,
        text: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for value in config_text::hooks_paths(text) {
            let Some(target) = config_path(&value, walk.work_tree.as_deref()) else {
                continue;
            };
            if !walk.commands.insert(target.clone()) {
                continue;
            }
            // A hooks directory that is a work tree itself, or holds this tree
            // (`core.hooksPath = .`): its hooks by name, where there are any, not the
            // whole tree.
            let whole = fs::canonicalize(&target).ok().is_some_and(|dir| {
                Some(&dir) == walk.work_tree.as_ref() || self.tree.root.starts_with(&dir)
            });
            if !whole {
                self.guard_include(&target, depth, walk, NamedBy::HeldDir)?;
                self.guard_hook_scripts(&target, depth, walk)?;
                continue;
            }
            for hook in config_text::GIT_HOOK_NAMES {
                let hook = target.join(hook);
                if fs::symlink_metadata(&hook).is_ok() && walk.commands.insert(hook.clone()) {
                    self.guard_include(&hook, depth, walk, NamedBy::Command)?;
                }
            }
        }
        Ok(())
    }

    /// What the hooks in `dir` (a git dir's `hooks/`, a `core.hooksPath`) run, read as a
    /// held script's ([`Walker::guard_what_it_reads`], at the top of the work tree, where
    /// git runs hooks): the hooks were held, what they run by path was not, and the user's
    /// `pre-commit` of `sh tools/lint.sh` (or `exec ./scripts/pre-commit`, a hook manager's
    /// absolute path) ran the agent's edit of it at the next commit (round twenty-nine's
    /// review). One listing of the directory; only git's hook names.
    pub(super) fn guard_hook_scripts(
        &mut self,
        dir: &Path,
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        let Some(top) = walk.work_tree.clone() else {
            return Ok(());
        };
        let Ok(entries) = fs::read_dir(dir) else {
            return Ok(());
        };
        let hooks: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                config_text::GIT_HOOK_NAMES
                    .iter()
                    .any(|hook| OsStr::new(hook) == name)
            })
            .map(|e| e.path())
            .collect();
        for hook in hooks {
            self.guard_what_it_reads(&hook, &top, depth, walk)?;
        }
        Ok(())
    }

    /// The template directory (`init.templateDir`), whose `hooks/` and `config` git copies
    /// into every repository the user makes: the global `init.templateDir` of a dotfiles
    /// workspace's `git-templates` let the agent write a `post-checkout` the user's next
    /// `git clone` ran, anywhere (round eighteen's second review). Held whole, unless it
    /// holds this tree.
    pub(super) fn guard_template_dirs(
        &mut self,
        text: &[u8],
        depth: usize,
        walk: &mut ConfigWalk,
    ) -> Result<(), SandboxError> {
        for value in config_text::template_dirs(text) {
            let Some(target) = config_path(&value, walk.work_tree.as_deref()) else {
                continue;
            };
            let holds_tree = fs::canonicalize(&target)
                .ok()
                .is_some_and(|dir| self.tree.root.starts_with(&dir));
            if !holds_tree && walk.commands.insert(target.clone()) {
                self.guard_include(&target, depth, walk, NamedBy::HeldDir)?;
            }
        }
        Ok(())
    }

    /// A config file outside every tree (`path`, no symlink followed) with more than one
    /// name: its names in the trees are held ([`ScanOutput::outside_held`](crate::sandbox::scan::ScanOutput::outside_held)); a
    /// `~/.gitconfig` hard-linked into a dotfiles workspace was the agent's to write
    /// through that name (round seventeen's second review).
    pub(super) fn note_other_names(&mut self, path: &Path) {
        if let Ok(meta) = fs::symlink_metadata(path)
            && meta.file_type().is_file()
            && meta.nlink() > 1
        {
            self.out
                .outside_held
                .linked
                .insert((meta.dev(), meta.ino()));
        }
    }

    /// The directory at `rel` in this tree, opened `O_PATH`, with each directory from the
    /// root down to it pinned; `None` when it cannot be reached.
    pub(super) fn pinned_dir(&mut self, rel: &Path) -> Option<OwnedFd> {
        self.pin_dirs_down_to(rel).ok()?;
        open_beneath(self.tree.fd, rel, OFlag::O_PATH | OFlag::O_DIRECTORY).ok()
    }

    /// `dir` (canonical) relative to this tree's root, when it is in it.
    pub(super) fn rel_in_tree(&self, dir: &Path) -> Option<PathBuf> {
        let rel = dir.strip_prefix(self.tree.root).ok()?;
        is_plain_relative(rel).then(|| rel.to_path_buf())
    }

    /// An included path whose name `absent.path` (the included file itself, or a directory
    /// on the way to it) does not exist: a placeholder is made there and held read-only,
    /// so the agent cannot make the file the user's git would read next; its kind is
    /// [`AbsentAt`]'s. A name on the way that exists but is not a directory is pinned
    /// instead. The link is visible to the agent's own `git add -A`, hence the warning.
    pub(super) fn hold_absent_include(
        &mut self,
        target: &Path,
        absent: &AbsentName,
        depth: usize,
        walk: &ConfigWalk,
        named_by: NamedBy,
    ) -> Result<(), SandboxError> {
        let (Some(parent), Some(name)) = (absent.path.parent(), absent.path.file_name()) else {
            return Ok(());
        };
        let Ok(parent) = fs::canonicalize(parent) else {
            return Ok(());
        };
        let Some(rel_parent) = self.rel_in_tree(&parent) else {
            self.pass_on(target, depth, named_by, walk);
            return Ok(());
        };
        let Some(dir) = self.pinned_dir(&rel_parent) else {
            return Ok(());
        };
        let path = parent.join(name);
        let kind = match absent.place {
            AbsentAt::File | AbsentAt::DirThenUp => PlaceholderKind::Symlink,
            AbsentAt::Dir => PlaceholderKind::Dir,
            AbsentAt::NotADir => {
                return match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Ok(st) if file_kind(&st) != Kind::Dir => {
                        self.push(mask(path, MaskKind::Pin, &st, false))
                    }
                    _ => Ok(()),
                };
            }
        };
        match fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            // Held by an earlier include of the same path.
            Ok(_) => return Ok(()),
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(walk_error(&path, "inspect", e)),
        }
        let Some(st) = self.make_placeholder(dir.as_fd(), name, &path, kind)? else {
            return Ok(());
        };
        if kind == PlaceholderKind::Symlink {
            let by = match named_by {
                NamedBy::Config => "the repository's git config includes",
                NamedBy::Key => "a key variable of coder's environment names",
                NamedBy::Link => "a link in a directory held read-only names",
                NamedBy::Command => "a command of the repository's git config names",
                NamedBy::HeldDir => {
                    "a `core.hooksPath` or `init.templateDir` of a git config names"
                }
            };
            self.out.warnings.push(format!(
                "{}, which {by}, did not exist: the sandbox holds it absent for this run \
                 (a symlink to {ABSENT_TARGET}, removed afterwards), so the agent cannot \
                 create it",
                path.display()
            ));
        }
        self.push(mask(path, MaskKind::ReadOnly, &st, false))
    }

    /// The places a key variable names where nothing is yet ([`home::relocated_absent`]),
    /// held absent where they lie in this tree: the agent made the user's
    /// `KUBECONFIG=$PWD/kubeconfig` before the cluster was, with an exec credential plugin
    /// the user's next `kubectl` ran (round twenty-nine's review).
    fn hold_absent_keys(&mut self) -> Result<(), SandboxError> {
        let mut walk = ConfigWalk::new(None);
        for place in home::relocated_absent() {
            let in_tree = place
                .ancestors()
                .find_map(|dir| fs::canonicalize(dir).ok())
                .is_some_and(|dir| dir.starts_with(self.tree.root));
            if in_tree {
                self.guard_include(&place, 0, &mut walk, NamedBy::Key)?;
            }
        }
        Ok(())
    }

    /// [`Walker::guard_includes`] of the repository this tree lies in, when its git dir is
    /// above the tree (a workspace in a subdirectory of a repository), or named by the
    /// tree's own `.git` file (a workspace that is a linked worktree of a repository
    /// elsewhere): that git dir is out of the agent's reach, but what its config includes
    /// from the tree is not. (A `.git` directory at the root is the walk's, or the sandbox's
    /// placeholder.)
    pub(super) fn guard_enclosing_includes(&mut self) -> Result<(), SandboxError> {
        self.hold_absent_keys()?;
        // The user's global and system configs, read by every git the user runs: one
        // that is (a link to) a file of this tree, or includes one (a dotfiles repository
        // as the workspace, `[include] path = ~/dotfiles/gitconfig` in `~/.gitconfig`),
        // handed that file to the agent (round seventeen's second review).
        let own = self.tree.root.join(".git");
        let dot_git = std::iter::once(own.clone())
            .filter(|own| fs::symlink_metadata(own).is_ok_and(|m| m.is_file()))
            .chain(
                self.tree
                    .root
                    .ancestors()
                    .skip(1)
                    .map(|dir| dir.join(".git")),
            )
            .find(|dot_git| fs::symlink_metadata(dot_git).is_ok());
        // Where git runs the commands of those configs for this tree: the top of its
        // repository's work tree (this tree's root when it has a `.git` of its own). The
        // sandbox's placeholder `.git` (a link to nowhere, made before this) is none: git
        // passes it by, and with it taken for the tree's own the enclosing repository's
        // hooks and aliases were read at this tree's root, and `sh sub/tools/x.sh` of its
        // `pre-commit` held nothing (round twenty-nine's review).
        let placeholder = fs::read_link(&own).is_ok_and(|t| t == Path::new(ABSENT_TARGET));
        let top = match &dot_git {
            Some(enclosing) if placeholder || fs::symlink_metadata(&own).is_err() => {
                enclosing.parent()
            }
            _ => None,
        }
        .unwrap_or(self.tree.root)
        .to_path_buf();
        let mut walk = ConfigWalk::new(Some(top));
        for config in user_git_configs() {
            let base = config.parent().unwrap_or(Path::new("/")).to_path_buf();
            self.guard_include(&config, 0, &mut walk, NamedBy::Config)?;
            self.guard_includes(&config, &base, 0, &mut walk)?;
        }
        // The tree's own git dir's configs (the walk's too) read again with the user's,
        // as git reads them together: the `PATH` one's line sets is the other's
        // interpreters' (`alias.fmt = !PATH=tools/bin:$PATH git lint` in `~/.gitconfig`,
        // the repository's `alias.lint = !tools/fmt.py`, `#!/usr/bin/env python3`: round
        // twenty-three's review).
        if fs::symlink_metadata(&own).is_ok_and(|m| m.is_dir()) {
            for name in ["config", "config.worktree"] {
                self.guard_includes(&own.join(name), &own, 0, &mut walk)?;
            }
        }
        let Some(dot_git) = dot_git else {
            return Ok(());
        };
        let git_dir = if dot_git.is_dir() {
            Some(dot_git)
        } else {
            read_config(&dot_git).and_then(|text| {
                let line = text
                    .split(|b| *b == b'\n')
                    .find_map(|l| l.strip_prefix(b"gitdir:"))?;
                let parent = dot_git.parent()?;
                fs::canonicalize(parent.join(OsStr::from_bytes(trim_ascii(line)))).ok()
            })
        };
        let Some(git_dir) = git_dir else {
            return Ok(());
        };
        let mut configs = vec![git_dir.join("config"), git_dir.join("config.worktree")];
        if let Some(common) = read_config(&git_dir.join("commondir")).and_then(|text| {
            fs::canonicalize(git_dir.join(OsStr::from_bytes(trim_ascii(&text)))).ok()
        }) {
            configs.push(common.join("config"));
        }
        for config in &configs {
            let base = config.parent().unwrap_or(Path::new("/")).to_path_buf();
            self.note_other_names(config);
            self.guard_includes(config, &base, 0, &mut walk)?;
        }
        // Its hooks: one with a second name in this tree (a hard link), or a symlink into
        // it, was the agent's to write, and the user's next commit in the repository ran
        // it (round seventeen's second review). The hooks are in the common dir.
        for config in &configs {
            let Some(hooks) = config
                .parent()
                .and_then(|dir| fs::canonicalize(dir.join("hooks")).ok())
            else {
                continue;
            };
            let Ok(dir) = nix::fcntl::open(
                &hooks,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) else {
                continue;
            };
            let mut looked = 0;
            linked_files_under(
                dir,
                &hooks,
                self.limits,
                &mut looked,
                &mut self.out.outside_held,
            )?;
            // And what they run in this tree (`sh sub/tools/x.sh` of the repository's
            // `pre-commit`, the workspace in `sub`: round twenty-nine's review).
            self.guard_hook_scripts(&hooks, 0, &mut walk)?;
        }
        Ok(())
    }

    /// Each symlink of this tree on the way to the included path `target` (as the config
    /// names it, unresolved), guarded as a link, the directories above it pinned: the
    /// included file itself is found through the resolved path, and `include.path =
    /// ../link/shared.gitconfig` with `link -> conf` left `link` the agent's to replace
    /// with a directory holding a `shared.gitconfig` of its own. A link is followed one hop
    /// at a time (at most `MAX_HOPS`, the kernel's 40), so each link of a chain to the
    /// included file is guarded, not just the first and the end.
    ///
    /// Returns the first name on the (resolved) way that does not exist, if one does not.
    pub(super) fn guard_links_on_the_way(
        &mut self,
        target: &Path,
        hops: &mut usize,
    ) -> Result<Option<AbsentName>, SandboxError> {
        const MAX_HOPS: usize = 40;
        let mut so_far = PathBuf::new();
        let mut parts = target.components();
        while let Some(part) = parts.next() {
            so_far.push(part);
            let meta = match fs::symlink_metadata(&so_far) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let rest = parts.as_path();
                    let place = if rest.as_os_str().is_empty() {
                        AbsentAt::File
                    } else if rest.components().any(|c| c == Component::ParentDir) {
                        AbsentAt::DirThenUp
                    } else {
                        AbsentAt::Dir
                    };
                    return Ok(Some(AbsentName {
                        path: so_far,
                        place,
                    }));
                }
                // A name on the way that is not a directory (`README` of `../README/x`):
                // git finds nothing there, and the agent must not make it a directory.
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    return Ok(so_far.parent().map(|entry| AbsentName {
                        path: entry.to_path_buf(),
                        place: AbsentAt::NotADir,
                    }));
                }
                Err(_) => return Ok(None),
            };
            if !meta.file_type().is_symlink() {
                if meta.is_dir() && parts.clone().next() == Some(Component::ParentDir) {
                    // `conf/..`: `conf` renamed and replaced by a link would lead elsewhere.
                    self.pin_dir_on_the_way(&so_far);
                }
                continue;
            }
            self.guard_link_on_the_way(&so_far)?;
            *hops += 1;
            let Ok(link) = fs::read_link(&so_far) else {
                return Ok(None);
            };
            if *hops > MAX_HOPS {
                return Ok(None);
            }
            let next = so_far
                .parent()
                .unwrap_or(Path::new("/"))
                .join(link)
                .join(parts.as_path());
            return self.guard_links_on_the_way(&next, hops);
        }
        // The directory the way ends in: a link to `conf/real.gitconfig` held the link and
        // the file, and the agent renamed `conf` and made its own (round seventeen's
        // second review).
        if let Some(parent) = so_far.parent() {
            self.pin_dir_on_the_way(parent);
        }
        Ok(None)
    }

    /// [`Walker::guard_links_on_the_way`]: the directory `dir` (and each above it) pinned,
    /// when it is of this tree.
    pub(super) fn pin_dir_on_the_way(&mut self, dir: &Path) {
        let Some(rel) = fs::canonicalize(dir)
            .ok()
            .and_then(|dir| self.rel_in_tree(&dir))
        else {
            return;
        };
        // As for the other pins of this walk: a directory that cannot be opened is not
        // one the way goes through.
        let _ = self.pin_dirs_down_to(&rel);
    }

    /// [`Walker::guard_links_on_the_way`]: the symlink at `link`, when it is of this tree.
    pub(super) fn guard_link_on_the_way(&mut self, link: &Path) -> Result<(), SandboxError> {
        let (Some(parent), Some(name)) = (link.parent(), link.file_name()) else {
            return Ok(());
        };
        let Ok(parent) = fs::canonicalize(parent) else {
            return Ok(());
        };
        let Some(dir) = self
            .rel_in_tree(&parent)
            .and_then(|rel| self.pinned_dir(&rel))
        else {
            return Ok(());
        };
        let Ok(st) = fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return Ok(());
        };
        if matches!(file_kind(&st), Kind::Symlink) {
            self.guard_link(parent.join(name), &st)?;
        }
        Ok(())
    }

    /// Pins every directory of this tree from its root (excluded) down to `rel`.
    pub(super) fn pin_dirs_down_to(&mut self, rel: &Path) -> Result<(), SandboxError> {
        let mut so_far = PathBuf::new();
        for name in rel.components() {
            so_far.push(name);
            let path = self.tree.root.join(&so_far);
            if !self.out.pinned.insert(path.clone()) {
                continue;
            }
            let fd = open_beneath(self.tree.fd, &so_far, OFlag::O_PATH | OFlag::O_DIRECTORY)
                .map_err(|e| walk_error(&path, "open", e))?;
            let st =
                nix::sys::stat::fstat(fd.as_fd()).map_err(|e| walk_error(&path, "inspect", e))?;
            self.push(mask(path, MaskKind::Pin, &st, false))?;
        }
        Ok(())
    }
}

/// The path a value of a git config names (`~/` expanded, as git does), relative to the
/// top of the work tree `top`; without one, only an absolute path names anything.
pub(super) fn config_path(value: &[u8], top: Option<&Path>) -> Option<PathBuf> {
    let named = expand_user_path(Path::new(OsStr::from_bytes(value)))?;
    match top {
        Some(top) => Some(top.join(named)),
        None if named.is_absolute() => Some(named),
        None => None,
    }
}

/// An include's path as git expands it (`interpolate_path`): `~/` (or `~` alone) from
/// `HOME`, `~user/` from the user's entry; `None` when git cannot expand it either (it
/// then skips the include). The scan skipped every include starting with `~` ("the home
/// directory is never in a writable tree"), but a workspace under the home directory is
/// the usual case: `include.path = ~/proj/shared.gitconfig` left the file the agent's
/// (round seventeen's second review). coder runs with the user's `HOME`, as the user's git
/// does.
pub(super) fn expand_user_path(named: &Path) -> Option<PathBuf> {
    let bytes = named.as_os_str().as_bytes();
    let Some(rest) = bytes.strip_prefix(b"~") else {
        return Some(named.to_path_buf());
    };
    let (user, tail) = match rest.iter().position(|b| *b == b'/') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &b""[..]),
    };
    let home = if user.is_empty() {
        PathBuf::from(std::env::var_os("HOME")?)
    } else {
        let name = std::str::from_utf8(user).ok()?;
        nix::unistd::User::from_name(name).ok()??.dir
    };
    Some(home.join(OsStr::from_bytes(tail)))
}

/// The config files every git of the user reads besides a repository's own, as git finds
/// them in coder's environment (the user's): the system one (`GIT_CONFIG_SYSTEM` or
/// `/etc/gitconfig`, unless `GIT_CONFIG_NOSYSTEM`) and the global ones
/// (`GIT_CONFIG_GLOBAL`, or `$XDG_CONFIG_HOME/git/config` and `~/.gitconfig`).
pub(super) fn user_git_configs() -> Vec<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut configs = Vec::new();
    let no_system = env("GIT_CONFIG_NOSYSTEM").is_some_and(|v| {
        !matches!(
            v.to_string_lossy().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    });
    if !no_system {
        configs
            .push(env("GIT_CONFIG_SYSTEM").map_or_else(|| "/etc/gitconfig".into(), PathBuf::from));
    }
    if let Some(global) = env("GIT_CONFIG_GLOBAL") {
        configs.push(PathBuf::from(global));
    } else {
        let home = env("HOME").map(PathBuf::from);
        if let Some(xdg) = env("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".config")))
        {
            configs.push(xdg.join("git/config"));
        }
        if let Some(home) = home {
            configs.push(home.join(".gitconfig"));
        }
    }
    configs.retain(|c| c.is_absolute());
    configs
}

/// The simple assignments of the files a shell script sources ([`config_text::sourced_words`],
/// read from the top and from the script's directory), one a line: a held `tools/ci.sh`
/// of `. tools/vars.sh` then `xargs -n1 -a "$L" sh`, `L` set in `vars.sh`. One level.
fn sourced_assignments(
    text: &[u8],
    top: &Path,
    dir: &Path,
    walk: &mut ConfigWalk,
) -> Result<Vec<u8>, SandboxError> {
    let mut out = Vec::new();
    for (word, base) in config_text::sourced_words(text) {
        let base = match base {
            config_text::SourceBase::WorkingDir => top,
            config_text::SourceBase::ScriptDir => dir,
        };
        let Some(sourced) = walk.read_script(config_path(&word, Some(base)))? else {
            continue;
        };
        out.extend(config_text::assignment_lines(&sourced));
    }
    Ok(out)
}

/// The first name on the way to an included path that does not exist, or the name that is
/// not a directory where the way needs one ([`Walker::guard_links_on_the_way`]).
pub(super) struct AbsentName {
    pub(super) path: PathBuf,
    pub(super) place: AbsentAt,
}

/// What names a path [`Walker::guard_include`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NamedBy {
    /// A git config's include: the file is a config, whose own includes are held too, and
    /// one outside this tree is another writable tree's to hold.
    Config,
    /// A symlink in a directory held read-only ([`guard_held_links`](crate::sandbox::scan::guard_held_links)), given as the path:
    /// what it leads to is not read; every writable tree is asked already.
    Link,
    /// A word of a command a git config runs ([`Walker::guard_command_files`]): the file
    /// is not read; one outside this tree is another writable tree's to hold.
    Command,
    /// A key variable of coder's environment (`KUBECONFIG`, `AWS_CONFIG_FILE`, …) names
    /// it, and nothing is there: held absent ([`Walker::hold_absent_keys`]).
    Key,
    /// A `core.hooksPath` or `init.templateDir` of a git config: the directory is held
    /// whole (read-only), or absent; one outside this tree is another writable tree's to
    /// hold.
    HeldDir,
}

/// One walk of git configs and what they include ([`Walker::guard_includes`]).
pub(super) struct ConfigWalk {
    /// Each config read, with the directory its relative includes are read against: each
    /// is read once.
    pub(super) seen: HashSet<(PathBuf, PathBuf)>,
    /// The files the configs' commands name, each looked at once.
    pub(super) commands: HashSet<PathBuf>,
    /// The top of the work tree git runs the configs' commands in, when there is one.
    pub(super) work_tree: Option<PathBuf>,
    /// The directories the configs' commands put on `PATH` ([`config_text::path_dirs`]).
    pub(super) path_dirs: Vec<Vec<u8>>,
    /// The programs held scripts' `#!/usr/bin/env` lines run, each with its depth: held
    /// in every directory of `path_dirs`, those added later too.
    pub(super) env_programs: Vec<(Vec<u8>, usize)>,
    /// The scripts [`Walker::guard_what_it_reads`] has yet to read, each with the top of
    /// the work tree it runs in and its config's depth.
    pub(super) scripts: Vec<(PathBuf, PathBuf, usize)>,
    /// Whether a [`Walker::guard_what_it_reads`] is taking files from `scripts` (one
    /// further down only adds to it).
    pub(super) reading_scripts: bool,
    /// The bytes of scripts and lists read so far ([`ConfigWalk::read_script`]).
    script_bytes: u64,
}

impl ConfigWalk {
    pub(super) fn new(work_tree: Option<PathBuf>) -> ConfigWalk {
        ConfigWalk {
            seen: HashSet::new(),
            commands: HashSet::new(),
            work_tree,
            // The user's own `PATH` (coder runs with it, as the user's git does): its
            // relative entries name directories of the work tree.
            path_dirs: std::env::var_os("PATH")
                .map(|p| config_text::relative_path_entries(p.as_bytes()))
                .unwrap_or_default(),
            env_programs: Vec::new(),
            scripts: Vec::new(),
            reading_scripts: false,
            script_bytes: 0,
        }
    }

    /// The text of the script or list at `path` ([`read_script`]), counted towards
    /// [`MAX_WALK_SCRIPT_BYTES`]: past it the run is refused. The count of files alone
    /// bounded the walk at 1,024 scripts of 256 KiB, and round twenty-eight's review made
    /// every later run's setup take minutes with sixty such scripts the agent had planted
    /// where a held script's words named them.
    pub(super) fn read_script(
        &mut self,
        path: Option<PathBuf>,
    ) -> Result<Option<Vec<u8>>, SandboxError> {
        let Some(path) = path else {
            return Ok(None);
        };
        let Some(text) = read_script(&path) else {
            return Ok(None);
        };
        self.script_bytes += text.len() as u64;
        if self.script_bytes > MAX_WALK_SCRIPT_BYTES {
            return Err(SandboxError::HeldScriptBytes {
                limit_mib: MAX_WALK_SCRIPT_BYTES >> 20,
                path,
            });
        }
        Ok(Some(text))
    }
}

/// The files node runs for a `package.json` held script's directory: its `main` (held
/// absent), and `main.js` and `main/index.js` when there.
fn package_main_names(text: &[u8], dir: &Path) -> Vec<(PathBuf, WhenAbsent)> {
    let Some(main) = config_text::package_main(text) else {
        return Vec::new();
    };
    let main = PathBuf::from(OsStr::from_bytes(&main));
    let mut with_js = main.clone().into_os_string();
    with_js.push(".js");
    vec![
        (dir.join(&main), WhenAbsent::Held),
        (dir.join(with_js), WhenAbsent::Skipped),
        (dir.join(&main).join("index.js"), WhenAbsent::Skipped),
    ]
}

/// The files a held shell script sources ([`config_text::sourced_words`]) or runs by path
/// ([`config_text::run_words`]), each read from where the shell reads it (`top`, the work
/// tree's, or the script's `dir`) and from the other, and the scripts it names by any word
/// ([`scripts_named`]), with what becomes of each when absent: held absent only from
/// where the shell reads it (a placeholder made from the other would be made for
/// nothing); what it runs by path moved aside at the run's end if the run made it.
fn shell_script_names(text: &[u8], top: &Path, dir: &Path) -> Vec<(PathBuf, WhenAbsent)> {
    let run = config_text::run_words(text)
        .into_iter()
        .map(|(word, base)| (word, base, false));
    let read = config_text::sourced_words(text)
        .into_iter()
        .map(|(word, base)| (word, base, true))
        .chain(run)
        .flat_map(|(word, base, sourced)| {
            let first_absent = match sourced {
                true if word.contains(&b'/') => WhenAbsent::Held,
                true => WhenAbsent::Skipped,
                false => WhenAbsent::MovedAsideIfMade,
            };
            let (first, other) = match base {
                config_text::SourceBase::WorkingDir => (top, dir),
                config_text::SourceBase::ScriptDir => (dir, top),
            };
            [(first, first_absent), (other, WhenAbsent::Skipped)]
                .into_iter()
                .filter_map(|(base, absent)| Some((config_path(&word, Some(base))?, absent)))
                .collect::<Vec<_>>()
        });
    let named = scripts_named(text, top, dir)
        .into_iter()
        .map(|(path, absent)| match absent {
            true => (path, WhenAbsent::MovedAsideIfMade),
            false => (path, WhenAbsent::Skipped),
        });
    read.chain(named).collect()
}

/// What becomes of a file a held script names that is absent at the start.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WhenAbsent {
    /// Held absent, a placeholder: what the script sources by a path.
    Held,
    /// Nothing: a name read from the other directory (a placeholder would be made for
    /// nothing), a word that only names a script.
    Skipped,
    /// Moved aside at the run's end if the run made it
    /// ([`Walker::move_aside_if_made`]): what the script runs by path. A placeholder
    /// would stop the agent's build from making it (`./target/debug/x`).
    MovedAsideIfMade,
}

/// Directories whose files a build or an installer makes (npm's `node_modules`, Cargo's
/// `target`, a virtualenv): a held script's program absent there at the start is the
/// build's to make, not moved aside ([`Walker::move_aside_if_made`]).
const BUILD_OUTPUT_DIRS: [&str; 9] = [
    "node_modules",
    "vendor",
    "site-packages",
    "target",
    ".venv",
    "venv",
    // CMake's, Gradle's and most JavaScript bundlers' (round twenty-nine's second review:
    // a hook running `./build/bin/tool` had the agent's whole `build/` moved aside, and a
    // `build/` there at the start pinned, so the agent's `rm -rf build` failed).
    "build",
    "dist",
    "out",
];

impl Walker<'_, '_> {
    /// A file a held script runs by path, absent at the start: the end-of-run guard moves
    /// it aside if the run made it, or the first name on its way that was absent (its
    /// literal name one of
    /// [`ScanOutput::made_aside_globs`](crate::sandbox::scan::ScanOutput::made_aside_globs)),
    /// and the directories on its way that were there are pinned (not renamed nor
    /// replaced). Before round twenty-nine it was the agent's to make: a user's
    /// `tools/ci.sh` that runs an optional `tools/local.sh` ran the agent's payload at the
    /// user's next `git fmt`, and a `tools/gen.sh` the agent made to name 1,100 scripts
    /// refused every later run (the held scripts' cap). The way matters as much as the
    /// name: a `tools/gen` the agent made a link to a directory of its own held the
    /// `all.sh` the user's script runs where no name of the guard's looked. Not for a name
    /// in a tree the agent may not write, below one of [`BUILD_OUTPUT_DIRS`], with `..` in
    /// it, or with a link or a file on its way at the start (Known limits).
    fn move_aside_if_made(&mut self, target: &Path) -> Result<(), SandboxError> {
        if !self.tree.writable {
            return Ok(());
        }
        // Rebuilt from its components: `tools/./x.sh` (a script's own directory, read as
        // `./x.sh` there) is git's and the guard's `tools/x.sh`, `tools/../x.sh` is
        // `x.sh` ([`Walker::lexical_at_start`]).
        let Some(rel) = (match target.strip_prefix(self.tree.root) {
            Ok(rel) => self.lexical_at_start(rel)?,
            Err(_) => None,
        }) else {
            return Ok(());
        };
        if below_build_output(&rel) && !below_a_virtualenv(&rel) {
            return Ok(());
        }
        let mut so_far = PathBuf::new();
        for name in rel.components() {
            so_far.push(name);
            match fs::symlink_metadata(self.tree.root.join(&so_far)) {
                Err(_) => break,
                Ok(meta) if meta.is_dir() && so_far != rel => {}
                Ok(_) => return Ok(()),
            }
        }
        if let Some(parent) = so_far.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.pin_dirs_down_to(parent)?;
        }
        let entry = (self.tree.root.to_path_buf(), literal_glob(&so_far));
        if !self.out.made_aside_globs.contains(&entry) {
            self.out.made_aside_globs.push(entry);
        }
        Ok(())
    }
}

/// Whether a name of `rel` is a virtualenv's directory (`.venv`, `venv`): what a held
/// script runs there absent at the start is moved aside if the run made it, though the
/// directory is one of [`BUILD_OUTPUT_DIRS`]. Round thirty's review: the hook `pre-commit
/// install` writes (`INSTALL_PYTHON=/home/u/proj/.venv/bin/python3`, then `exec
/// "$INSTALL_PYTHON" -mpre_commit …` when it is there), with no `.venv` at the start,
/// ran the agent's `.venv/bin/python3` at the user's next commit. A virtualenv is no
/// output of the project's sources: what runs from it is the installer's, whatever the
/// agent wrote in the tree.
fn below_a_virtualenv(rel: &Path) -> bool {
    rel.components()
        .any(|c| c.as_os_str() == OsStr::new(".venv") || c.as_os_str() == OsStr::new("venv"))
}

/// Whether a name of `rel` is one of [`BUILD_OUTPUT_DIRS`].
fn below_build_output(rel: &Path) -> bool {
    rel.components().any(|c| {
        BUILD_OUTPUT_DIRS
            .iter()
            .any(|dir| c.as_os_str() == OsStr::new(dir))
    })
}

impl Walker<'_, '_> {
    /// `files` an `.envrc` in `base` names (relative to it), as paths in the tree where
    /// they resolve lexically at the start ([`Walker::lexical_at_start`]); others left out.
    fn envrc_files(
        &mut self,
        files: Vec<Vec<u8>>,
        base: &Path,
    ) -> Result<Vec<PathBuf>, SandboxError> {
        let mut paths = Vec::new();
        for file in files {
            if let Some(rel) = self.lexical_at_start(&base.join(OsStr::from_bytes(&file)))? {
                paths.push(self.tree.root.join(rel));
            }
        }
        Ok(paths)
    }

    /// The files a nested `.envrc` in `base` has direnv look for in its parents
    /// ([`config_text::envrc_up_files`]), as paths in the tree: each parent's up to the
    /// root, since direnv sources the nearest one there (the agent could make one nearer).
    fn envrc_up_files(&self, text: &[u8], base: &Path) -> Vec<PathBuf> {
        let files = config_text::envrc_up_files(text);
        let parents = base.ancestors().skip(1).map(|dir| self.tree.root.join(dir));
        let parents: Vec<PathBuf> = match base == Path::new(".") {
            true => Vec::new(),
            false => parents.collect(),
        };
        let mut paths = Vec::new();
        for dir in parents {
            for file in files.iter().filter(|f| !f.contains(&b'/')) {
                paths.push(dir.join(OsStr::from_bytes(file)));
            }
        }
        paths
    }

    /// `rel` (relative to the tree's root) with each `..` taken lexically, when every
    /// directory a `..` leaves was there at the start as a directory, not a link, from the
    /// root down: those are pinned, so that the kernel's walk at the user's next git
    /// command ends where this one does. Round twenty-nine's second review: `sh
    /// "$(dirname "$0")/../scripts/lint.sh"` in the user's `tools/ci.sh`, the file absent
    /// at the start, was left the agent's to make. `None` when a `..` leaves the tree or
    /// what it leaves was not such a directory.
    fn lexical_at_start(&mut self, rel: &Path) -> Result<Option<PathBuf>, SandboxError> {
        let mut out = PathBuf::new();
        for part in rel.components() {
            match part {
                Component::Normal(name) => out.push(name),
                Component::CurDir => {}
                Component::ParentDir => {
                    if out.as_os_str().is_empty() || !self.real_dirs_down_to(&out) {
                        return Ok(None);
                    }
                    self.pin_dirs_down_to(&out)?;
                    out.pop();
                }
                Component::RootDir | Component::Prefix(_) => return Ok(None),
            }
        }
        Ok((!out.as_os_str().is_empty()).then_some(out))
    }

    /// Whether every name from the tree's root down to `rel` is a directory, not a link.
    fn real_dirs_down_to(&self, rel: &Path) -> bool {
        let mut so_far = PathBuf::new();
        rel.components().all(|name| {
            so_far.push(name);
            fs::symlink_metadata(self.tree.root.join(&so_far)).is_ok_and(|m| m.is_dir())
        })
    }
}

/// A glob that matches `rel` alone, whatever its bytes (the guard's globs are
/// case-insensitive, backslash escapes): each glob character and backslash escaped, each
/// byte that is not UTF-8 matched by `?` (one byte: globset matches bytes). Round
/// twenty-nine's second review: a name that is not UTF-8 had no glob, and the file the
/// user's `tools/ci.sh` runs by it stayed where the agent made it.
fn literal_glob(rel: &Path) -> String {
    let mut glob = String::new();
    for chunk in rel.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if "?*[]{}\\".contains(c) {
                glob.push('\\');
            }
            glob.push(c);
        }
        glob.extend(std::iter::repeat_n('?', chunk.invalid().len()));
    }
    glob
}

/// The most bytes of scripts and lists one git dir's walk reads, all of them together
/// ([`ConfigWalk::read_script`]): thirty-two scripts of the largest size read, 8 MiB (the
/// 1,024 files of [`MAX_COMMAND_FILES`] at 8 KiB each).
pub(super) const MAX_WALK_SCRIPT_BYTES: u64 = 32 * MAX_SCRIPT_BYTES;

/// How [`Walker::guard_lists`] reads the entries of its lists.
#[derive(Clone, Copy)]
pub(super) struct ListEntries<'a> {
    /// Only entries that exist are held (a file a script merely reads may list anything).
    pub(super) present_only: bool,
    /// What the script puts before and after a variable's value
    /// ([`config_text::variable_affixes`]): each entry is held as completed so too.
    pub(super) affixes: &'a [(Vec<u8>, Vec<u8>)],
}

/// A path a config or a command of one names outside the tree whose config it is, left
/// to the writable tree that holds it ([`guard_foreign_includes`](crate::sandbox::scan::guard_foreign_includes)).
#[derive(Debug)]
pub(super) struct ForeignName {
    pub(super) target: PathBuf,
    pub(super) depth: usize,
    pub(super) named_by: NamedBy,
    pub(super) work_tree: Option<PathBuf>,
}

/// Where on the way to an included path [`AbsentName`] is, which decides how it is held.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AbsentAt {
    /// The included file's own name: a symlink to nowhere (an empty directory there would
    /// stop every git command).
    File,
    /// A directory above it: an empty directory (git shows none).
    Dir,
    /// A directory above it with `..` after it on the way (`missing/../x`): a symlink to
    /// nowhere. An empty directory made the path resolve (to `x`) where git found nothing
    /// at the start, and `x` was the agent's to write for as long as the placeholder
    /// stayed (round seventeen's second review).
    DirThenUp,
    /// An existing name that is not a directory (`README` of `README/x`): git finds
    /// nothing below it (`ENOTDIR`). It is pinned (still writable, not removed nor
    /// replaced): the agent replaced `README` with a directory holding `x`.
    NotADir,
}

/// The most files the git configs of one git dir may include, all levels together.
pub(super) const MAX_INCLUDED: usize = 256;

/// The largest script (or `package.json`) the scan reads for what it sources.
pub(super) const MAX_SCRIPT_BYTES: u64 = 256 * 1024;

/// The text of the regular file `path` (symlinks followed: the shell follows them), when
/// it is no larger than [`MAX_SCRIPT_BYTES`]; never waits on a FIFO. A file that says it
/// is empty is not opened (see [`looks_like_a_script`]: a kernel file system's).
pub(super) fn read_script(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let before = fs::metadata(path).ok()?;
    if !before.is_file() {
        return None;
    }
    if before.len() == 0 {
        return Some(Vec::new());
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_SCRIPT_BYTES {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_SCRIPT_BYTES).read_to_end(&mut text).ok()?;
    Some(text)
}

/// The scripts of the tree a shell script names by any word, wherever the word stands
/// ([`config_text::script_words`], read from the top and from the script's `dir`), held
/// only when there, as what it runs by path is: round twenty-eight's review ran a held
/// script's `tools/x.sh` through some twenty programs and syntaxes the run words did not
/// know (`bash -lc '…'`, `xargs sh …`, `strace -o LOG sh …`, a function of the script's
/// own), one spelling closed at a time before. Only a file that looks like a script
/// ([`looks_like_a_script`]): a `Cargo.toml` or `CHANGELOG.md` a release script edits
/// stays the agent's to edit. An absolute word only where it names a file of the work
/// tree: a system program's strings are no shell words (`/usr/bin/time`'s took minutes).
/// With each, whether it is absent with a script's name (`tools/local.sh`): moved aside
/// at the run's end if the run made it, as what the run words name (round twenty-nine's
/// second review: `xargs sh tools/local.sh`, `eval '…'`, `trap '…' EXIT`, `bash -lc
/// '…'`, a function's `"$@"`, a `case` arm ran the agent's `tools/local.sh`, absent at
/// the start).
fn scripts_named(text: &[u8], top: &Path, dir: &Path) -> Vec<(PathBuf, bool)> {
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    let real_top = fs::canonicalize(top).unwrap_or_else(|_| top.to_path_buf());
    let in_tree = |word: &[u8]| {
        fs::canonicalize(OsStr::from_bytes(word)).is_ok_and(|real| real.starts_with(&real_top))
    };
    for (word, base) in config_text::script_words(text) {
        if word.starts_with(b"/") && !in_tree(&word) {
            continue;
        }
        let bases = match base {
            config_text::SourceBase::WorkingDir => [top, dir],
            config_text::SourceBase::ScriptDir => [dir, top],
        };
        for base in bases {
            let Some(path) = config_path(&word, Some(base)) else {
                continue;
            };
            if !seen.insert(path.clone()) {
                continue;
            }
            if looks_like_a_script(&path) {
                found.push((path, false));
            } else if has_script_suffix(&path) && fs::symlink_metadata(&path).is_err() {
                found.push((path, true));
            }
        }
    }
    found
}

/// Whether `path` (symlinks followed) is a regular file a program may run: executable by
/// anyone, a `#!` line, or a name an interpreter or a program-file reader is given
/// (`.sh`, `.py`, `.js`, `.pm`, `.mk`, `.awk`, …; `.env`, whose `NODE_OPTIONS` node obeys).
fn looks_like_a_script(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    // An empty file holds no `#!` and is not opened: a kernel file system's files say
    // they are empty (`tracefs`' `trace_pipe`, `/proc`'s), and opening one acts (see
    // [`read_plain_file`]).
    has_script_suffix(path)
        || meta.mode() & 0o111 != 0
        || (meta.len() > 0 && starts_with_hash_bang(path))
}

/// Whether `path`'s name is one an interpreter or a program-file reader is given.
fn has_script_suffix(path: &Path) -> bool {
    const SUFFIXES: &[&str] = &[
        "sh", "bash", "zsh", "ksh", "dash", "fish", "py", "pyc", "pyw", "js", "mjs", "cjs", "ts",
        "mts", "cts", "jsx", "tsx", "node", "pl", "pm", "rb", "mk", "make", "awk", "sed", "tcl",
        "lua", "php", "r", "jl", "ps1", "env",
    ];
    path.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| SUFFIXES.contains(&e.to_ascii_lowercase().as_str()))
}

/// Whether the file at `path` starts with `#!` (read without waiting on a FIFO).
fn starts_with_hash_bang(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    else {
        return false;
    };
    let mut head = [0u8; 2];
    file.take(2).read_exact(&mut head).is_ok() && head == *b"#!"
}

/// The most files the commands of one git dir's configs may name, all levels together.
pub(super) const MAX_COMMAND_FILES: usize = 1024;

/// The text of the git config at `path`, a regular file of at most 1 MiB opened without
/// following a symlink on its last step or waiting on a FIFO; `None` otherwise.
pub(super) fn read_config(path: &Path) -> Option<Vec<u8>> {
    read_plain_file(path, 1 << 20)
}

/// The first `cap` bytes of `path` when it is a plain file (no symlink followed at its
/// end); `None` otherwise. Looked at before it is opened: opening a device may act (a
/// watchdog starts its timer, a tape rewinds), and the scan reads files outside every
/// tree too.
pub(super) fn read_plain_file(path: &Path, cap: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let before = fs::symlink_metadata(path).ok()?;
    if !before.is_file() {
        return None;
    }
    // Not opened when it says it is empty: a kernel file system's file (an include made a
    // link to `tracefs`' `trace_pipe`) would be, and the open acts: the git coder's ledger
    // ran at that moment failed with EBUSY (round thirty's CI, `sandbox_round15_review`).
    if before.len() == 0 {
        return Some(Vec::new());
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = Vec::new();
    file.take(cap).read_to_end(&mut text).ok()?;
    Some(text)
}

/// The words of what `git submodule foreach` runs ([`config_text::foreach_words`]), each
/// read in every submodule's directory the work tree's `.gitmodules` names, and those
/// their own `.gitmodules` name in turn ([`submodule_dirs`]).
pub(super) fn submodule_words(text: &[u8], top: &Path) -> Vec<CommandWord> {
    let words = config_text::foreach_words(text);
    if words.is_empty() {
        return Vec::new();
    }
    let paths = submodule_dirs(top);
    paths
        .iter()
        .flat_map(|path| {
            words.iter().map(move |w| CommandWord {
                word: [path.as_slice(), b"/", &w.word].concat(),
                is_path: w.is_path,
                whole_dir: w.whole_dir,
            })
        })
        .collect()
}

/// The submodule directories of the work tree at `top`, from its top: those its
/// `.gitmodules` names, and those theirs name, four levels deep and 256 in all. `git
/// submodule foreach --recursive` runs its command in a nested submodule too, and round
/// twenty-two read the top's `.gitmodules` alone: the agent wrote `sub/inner/tools/x.sh`
/// (round twenty-three's review). Without `--recursive` the nested ones are held for
/// nothing, which costs little.
pub(super) fn submodule_dirs(top: &Path) -> Vec<Vec<u8>> {
    const MAX_LEVELS: usize = 4;
    const MAX_DIRS: usize = 256;
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut level: Vec<Vec<u8>> = vec![Vec::new()];
    for _ in 0..MAX_LEVELS {
        let mut next = Vec::new();
        for base in &level {
            let gitmodules = top.join(OsStr::from_bytes(base)).join(".gitmodules");
            let Some(text) = read_plain_file(&gitmodules, MAX_SCRIPT_BYTES) else {
                continue;
            };
            for path in config_text::submodule_paths(&text) {
                let path = match base.is_empty() {
                    true => path,
                    false => [base.as_slice(), b"/", &path].concat(),
                };
                if dirs.len() < MAX_DIRS && !dirs.contains(&path) {
                    dirs.push(path.clone());
                    next.push(path);
                }
            }
        }
        level = next;
    }
    dirs
}

/// The words of `path`'s `#!` line (the interpreter path first), as the kernel reads it
/// (at most 256 bytes, blanks after `#!` skipped); `None` for a file without one.
pub(super) fn read_shebang(path: &Path) -> Option<Vec<Vec<u8>>> {
    let head = read_plain_file(path, 256)?;
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|b| *b == b'\n').unwrap_or(line.len())];
    let words: Vec<Vec<u8>> = line
        .split(|b| *b == b' ' || *b == b'\t')
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    (!words.is_empty()).then_some(words)
}

/// The program a `#!` line runs through `env` (`python3` of `#!/usr/bin/env python3`,
/// of `#!/usr/bin/env -S python3 -u`, of `#!/usr/bin/env -u X A=1 python3`); `None`
/// when the interpreter is not `env`, or names no program. A split string attached to
/// its option (`-Spython3`, `-vS python3`, `--split-string=python3 -u`: the kernel
/// passes the rest of the line as one argument, and `env` splits it) is read as the
/// words it holds: the program was taken for an option and passed over (round
/// twenty-three's review).
pub(super) fn env_program(line: &[Vec<u8>]) -> Option<Vec<u8>> {
    let (interpreter, args) = line.split_first()?;
    if interpreter.rsplit(|b| *b == b'/').next() != Some(b"env".as_slice()) {
        return None;
    }
    let mut args: std::collections::VecDeque<Vec<u8>> = args.iter().cloned().collect();
    while let Some(arg) = args.pop_front() {
        if let Some(option) = arg.strip_prefix(b"--") {
            if let Some(split) = option.strip_prefix(b"split-string=") {
                args.push_front(split.to_vec());
            } else if [b"unset".as_slice(), b"chdir", b"argv0"].contains(&option) {
                args.pop_front();
            }
        } else if let Some(cluster) = arg.strip_prefix(b"-") {
            env_short_options(cluster, &mut args);
        } else if !arg.contains(&b'=') {
            return Some(arg);
        }
    }
    None
}

/// One `-xyz` cluster of `env`'s short options ([`env_program`]): an option with a value
/// takes the rest of the cluster, or the next argument; `-S`'s value goes back on `args`
/// as words of their own.
pub(super) fn env_short_options(cluster: &[u8], args: &mut std::collections::VecDeque<Vec<u8>>) {
    const VALUE_OPTIONS: &[u8] = b"uCPaS";
    let Some(at) = cluster.iter().position(|b| VALUE_OPTIONS.contains(b)) else {
        return;
    };
    let rest = &cluster[at + 1..];
    let value = if rest.is_empty() {
        args.pop_front().unwrap_or_default()
    } else {
        rest.to_vec()
    };
    if cluster[at] == b'S' {
        for word in value
            .split(|b| *b == b' ' || *b == b'\t')
            .filter(|w| !w.is_empty())
            .rev()
        {
            args.push_front(word.to_vec());
        }
    }
}

pub(super) fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end.max(start)]
}
