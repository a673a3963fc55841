//! What a git config text names that the sandbox must hold out of the agent's reach: the
//! files it includes, the files of the work tree its commands run (a filter driver's
//! `sh tools/strip.sh`, an `!` alias, a relative `core.fsmonitor`), and the directories
//! it runs hooks from (`core.hooksPath`) or copies into new repositories
//! (`init.templateDir`).
//!
//! The reading is lenient, unlike [`super::gitconfig`]'s strict parser: that one decides
//! what of an agent's config may be *kept*, so anything odd keeps nothing; this one
//! decides what must be *held*, so anything odd must not hide a value git would still
//! read. Values are read as git's own parser reads them (a key on its header's line, `;`
//! and `#` inside double quotes, escapes, continued lines): a simpler reading missed what
//! git included (round sixteen's second review).
//!
//! Which words of a command are files cannot be known for sure: a command is a shell
//! line, and a script runs others. So every word that could be a path is offered
//! ([`command_words`]), and the scan holds those that name a file of a tree (one with a
//! `/` even when it does not exist yet). What such a script sources is followed too
//! ([`sourced_words`]), a few levels deep, and what it runs by path ([`run_words`], held
//! when present); what else it runs is not (SECURITY.md, Known limits).

/// The hook names git runs (githooks(5)), held when the hooks directory is the
/// workspace itself (`core.hooksPath = .`).
pub(super) const GIT_HOOK_NAMES: [&str; 28] = [
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// One `key = value` of a git config text, its section's name lowercased (the
/// subsection, `"strip"` of `[filter "strip"]`, is not kept: no rule here needs it).
struct ConfigEntry {
    section: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// The keys whose values git runs as commands, by section (lowercase); `"*"` is every
/// key of the section. The key is matched without case, as git does.
const COMMAND_KEYS: &[(&[u8], &[&[u8]])] = &[
    (b"alias", &[b"*"]),
    (b"browser", &[b"cmd", b"path"]),
    (
        b"core",
        &[
            b"alternaterefscommand",
            b"askpass",
            b"editor",
            b"fsmonitor",
            b"gitproxy",
            b"pager",
            b"sshcommand",
        ],
    ),
    (b"credential", &[b"helper"]),
    (b"diff", &[b"command", b"external", b"textconv"]),
    (b"difftool", &[b"cmd", b"path"]),
    (b"filter", &[b"clean", b"process", b"smudge"]),
    // `gpg.program`, `gpg.<format>.program`, `gpg.ssh.defaultKeyCommand`.
    (b"gpg", &[b"defaultkeycommand", b"program"]),
    (b"guitool", &[b"cmd"]),
    // Config-based hooks (`hook.<name>.command`, newer gits).
    (b"hook", &[b"command"]),
    (b"imap", &[b"tunnel"]),
    (b"instaweb", &[b"httpd"]),
    (b"interactive", &[b"difffilter"]),
    // git-lfs: `lfs.customtransfer.<name>.path`, `lfs.extension.<name>.clean`/`smudge`.
    (b"lfs", &[b"clean", b"path", b"smudge"]),
    (b"man", &[b"cmd", b"path"]),
    (b"merge", &[b"driver"]),
    (b"mergetool", &[b"cmd", b"path"]),
    (b"pager", &[b"*"]),
    (b"remote", &[b"receivepack", b"uploadpack"]),
    (
        b"sendemail",
        &[
            b"cccmd",
            b"headercmd",
            b"sendmailcmd",
            b"smtpserver",
            b"tocmd",
        ],
    ),
    (b"sequence", &[b"editor"]),
    (b"submodule", &[b"update"]),
    (b"tar", &[b"command"]),
    (b"trailer", &[b"cmd", b"command"]),
    (b"uploadpack", &[b"packobjectshook"]),
    (b"web", &[b"browser"]),
];

/// The values of `path` in the `[include]` and `[includeIf "…"]` sections.
pub(super) fn include_paths(text: &[u8]) -> Vec<Vec<u8>> {
    entries(text)
        .into_iter()
        .filter(|e| {
            (e.section == b"include" || e.section == b"includeif")
                && e.key.eq_ignore_ascii_case(b"path")
                && !e.value.is_empty()
        })
        .map(|e| e.value)
        .collect()
}

/// Every `core.hooksPath` of the text: the directory git runs hooks from, relative to the
/// top of the work tree (git takes the last of all its configs; each is held).
pub(super) fn hooks_paths(text: &[u8]) -> Vec<Vec<u8>> {
    entries(text)
        .into_iter()
        .filter(|e| {
            e.section == b"core" && e.key.eq_ignore_ascii_case(b"hookspath") && !e.value.is_empty()
        })
        .map(|e| e.value)
        .collect()
}

/// Every `init.templateDir` of the text: the directory whose `hooks/` and `config` git
/// copies into each repository it makes (`git init`, `git clone`).
pub(super) fn template_dirs(text: &[u8]) -> Vec<Vec<u8>> {
    entries(text)
        .into_iter()
        .filter(|e| {
            e.section == b"init"
                && e.key.eq_ignore_ascii_case(b"templatedir")
                && !e.value.is_empty()
        })
        .map(|e| e.value)
        .collect()
}

/// The last `core.worktree` of the text (git takes the last), when it has one: a git dir
/// not named `.git` (a submodule's `.git/modules/x`) finds its work tree by it.
pub(super) fn core_worktree(text: &[u8]) -> Option<Vec<u8>> {
    entries(text)
        .into_iter()
        .filter(|e| e.section == b"core" && e.key.eq_ignore_ascii_case(b"worktree"))
        .map(|e| e.value)
        .next_back()
}

/// A word of a command the config runs that may name a file.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct CommandWord {
    pub(super) word: Vec<u8>,
    /// The word has a `/`: it names a path whether or not a file is there now (a bare
    /// word names a file of the work tree only when one is there: `sh strip.sh`; absent,
    /// it is as likely a program on `PATH`).
    pub(super) is_path: bool,
    /// The word is the directory a glob of the command reads (`tools/checks` of `for f in
    /// tools/checks/*.sh`): every file there may run, those the agent would add too, so
    /// the directory is held whole, as a hooks directory is.
    pub(super) whole_dir: bool,
}

/// The words of every command the config runs ([`COMMAND_KEYS`]) that may name a file,
/// in the order met, each once: what is left of a shell line once its operators,
/// quotes and options are taken off (`--file=x` gives `x`), without words git or the
/// shell would expand (`%f`, `$HOME`) or that name no file (`.`, URLs). A word with a
/// glob gives the directory it reads, held whole ([`CommandWord::whole_dir`]).
pub(super) fn command_words(text: &[u8]) -> Vec<CommandWord> {
    let mut words: Vec<CommandWord> = Vec::new();
    for entry in entries(text).into_iter().filter(runs_a_command) {
        let line = entry.value.strip_prefix(b"!").unwrap_or(&entry.value);
        // A brace expansion and `$'…'` of a bash the line runs (`!bash -c "sh
        // tools/{x,y}.sh"`; round twenty-eight's review) read as bash reads them.
        for reading in brace_readings(&top_read_as_dot(line)) {
            line_words(&reading, NESTED_LINES, &mut words);
        }
    }
    words
}

/// The words of what `git submodule foreach` runs in each submodule (`!git submodule
/// foreach 'sh tools/x.sh'`), read as [`command_words`] reads a line: the scan reads them
/// in each submodule's directory ([`submodule_paths`]) as well as at the top, where
/// alone they were read until round twenty-two, and each submodule's `tools/x.sh` was
/// the agent's to write.
pub(super) fn foreach_words(text: &[u8]) -> Vec<CommandWord> {
    let mut words: Vec<CommandWord> = Vec::new();
    for entry in entries(text).into_iter().filter(runs_a_command) {
        let line = entry.value.strip_prefix(b"!").unwrap_or(&entry.value);
        let tokens = shell_tokens(&top_read_as_dot(line));
        let Some(at) = tokens
            .windows(2)
            .position(|w| w[0] == b"submodule" && w[1] == b"foreach")
        else {
            continue;
        };
        let rest: Vec<&Vec<u8>> = tokens[at + 2..]
            .iter()
            .skip_while(|t| t.starts_with(b"-"))
            .collect();
        let inner = rest
            .iter()
            .map(|t| t.as_slice())
            .collect::<Vec<_>>()
            .join(&b' ');
        line_words(&inner, NESTED_LINES, &mut words);
    }
    words.retain(|w| !w.word.starts_with(b"/") && !w.word.starts_with(b"~"));
    words
}

/// The list files whose entries an `xargs` of a command the config runs hands to a
/// program that runs them (`xargs -n1 -a tools/checks.list sh`, `xargs sh <
/// tools/checks.list`, `cat tools/checks.list | xargs -n1 sh`): the list is a word of
/// the line and held, but what it names is read by `xargs`, not by the shell, and was the
/// agent's to write (round twenty-three's review, a ratchet until round twenty-four).
/// The scan holds each entry of such a list ([`list_entries`]) as a word of the line.
/// Quoted lines are read as [`line_words`] reads them.
pub(super) fn xargs_lists(text: &[u8]) -> Vec<Vec<u8>> {
    let mut lists = Vec::new();
    for entry in entries(text).into_iter().filter(runs_a_command) {
        let line = entry.value.strip_prefix(b"!").unwrap_or(&entry.value);
        line_xargs_lists(&top_read_as_dot(line), NESTED_LINES, &mut lists);
    }
    lists
}

/// The list files an `xargs` of a shell script's lines runs ([`xargs_lists`] for a
/// script a held line runs: `tools/ci.sh` holding `xargs -n1 -a tools/checks.list sh`
/// left the list and its scripts the agent's, round twenty-four's second review), each
/// with where it is read from (the script's own directory when spelled from it).
pub(super) fn script_xargs_lists(script: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    let mut lists = Vec::new();
    for line in script_lines(script) {
        line_xargs_lists(&line, NESTED_LINES, &mut lists);
    }
    let mut found: Vec<(Vec<u8>, SourceBase)> = Vec::new();
    for entry in lists.iter().filter_map(|list| based(list)) {
        if !found.contains(&entry) {
            found.push(entry);
        }
    }
    found
}

/// The files a shell script reads whose lines it may run, when it runs anything
/// (a shell, an interpreter, `awk`'s `system`): what `cat`, `sed`, `awk`, `grep`, `cut`,
/// `head`, `tail`, `sort`, … read (in a command substitution too), and what a command reads on
/// standard input (`done < LIST`, `mapfile -t L < LIST`). Round twenty-five's review ran
/// a held script's list by `for f in $(cat LIST)`, `mapfile`, `while read … done < LIST`,
/// `sed 's/^/sh /' LIST | sh` and `awk '{ system("sh " $0) }' LIST`, where round
/// twenty-four held `xargs`'s lists only. Each with where it is read from, as
/// [`script_xargs_lists`]'s; a word that names no file there (`sed`'s program) is the
/// caller's to drop.
pub(super) fn script_read_lists(script: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    const READERS: &[&[u8]] = &[
        b"cat", b"sed", b"awk", b"gawk", b"mawk", b"head", b"tail", b"sort", b"uniq", b"grep",
        b"egrep", b"fgrep", b"cut", b"tac", b"nl", b"paste",
    ];
    let lines: Vec<Vec<u8>> = script_lines(script)
        .iter()
        .map(|line| substitutions_split(line))
        .collect();
    if !lines.iter().any(|line| runs_its_input(line)) {
        return Vec::new();
    }
    let mut found: Vec<(Vec<u8>, SourceBase)> = Vec::new();
    for command in lines.iter().flat_map(|line| pipelines(line)).flatten() {
        let words = shell_tokens(&command);
        let reads = words
            .first()
            .is_some_and(|w| READERS.contains(&program_name(w)));
        let operands = words
            .iter()
            .skip(1)
            .filter(|w| reads && !w.starts_with(b"-"))
            .cloned();
        for entry in operands
            .chain(redirected_from(&command))
            .filter_map(|w| based(&w))
        {
            if !found.contains(&entry) {
                found.push(entry);
            }
        }
    }
    found
}

/// `line` with its command substitutions (`$(…)`, `` `…` ``) and double quotes opened
/// into commands of their own (`for f in $(cat LIST)`: `cat LIST` a command).
fn substitutions_split(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut bytes = line.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        match b {
            b'$' if bytes.peek() == Some(&b'(') => {
                bytes.next();
                out.extend_from_slice(b" ; ");
            }
            // A process substitution too (`bash <(cat tools/x.sh)`: round twenty-seven's
            // review found its file the agent's to write).
            b'<' | b'>' if bytes.peek() == Some(&b'(') => {
                bytes.next();
                out.extend_from_slice(b" ; ");
            }
            b'`' | b')' => out.extend_from_slice(b" ; "),
            b'"' => out.push(b' '),
            b => out.push(b),
        }
    }
    out
}

/// Whether a line ([`substitutions_split`]) runs a program that may run what it is
/// given: a shell, an interpreter ([`RUNNERS`]' programs, `python*`), `run-parts` (round
/// twenty-seven's review), or `awk`'s `system(`; since round twenty-eight's review also
/// `find … -exec {}` (the files found run themselves) and a loop that runs its variable
/// as a command (`for f in "$d"/*; do "$f"; done`), which named no such program.
fn runs_its_input(line: &[u8]) -> bool {
    const NOT_PROGRAMS: &[&[u8]] = &[
        b"do", b"then", b"else", b"time", b"nohup", b"env", b"command", b"exec",
    ];
    let tokens = shell_tokens(line);
    let runs_found = tokens.windows(2).any(|pair| {
        [&b"-exec"[..], b"-execdir", b"-ok", b"-okdir"].contains(&pair[0].as_slice())
            && pair[1] == b"{}"
    });
    line.windows(7).any(|w| w == b"system(")
        || runs_found
        || loop_runs(&shell_words(line), line)
        || tokens.iter().any(|w| {
            let name = program_name(w);
            name.starts_with(b"python")
                || name == b"run-parts"
                || RUNNERS.contains(&name) && !NOT_PROGRAMS.contains(&name)
        })
}

/// The entries of an `xargs` list file ([`xargs_lists`]) that may name a file: each
/// word as `xargs` splits it (blanks and newlines, quotes taken off), and each whole
/// line (`-d '\n'`, `-0` lists of names with blanks).
pub(super) fn list_entries(list: &[u8]) -> Vec<Vec<u8>> {
    let mut found: Vec<Vec<u8>> = Vec::new();
    for line in list.split(|b| *b == b'\n' || *b == 0) {
        let whole = line.trim_ascii().to_vec();
        let words: Vec<Vec<u8>> = shell_tokens(line).into_iter().chain([whole]).collect();
        // And each piece between `:`, `,` and `;`: a script may split its list so
        // (`IFS=:`, `tr , '\n'`), and the whole word named no file (round twenty-five's
        // second review).
        let pieces = words
            .iter()
            .flat_map(|w| w.split(|b| matches!(b, b':' | b',' | b';')))
            .map(<[u8]>::to_vec);
        for word in words.clone().into_iter().chain(pieces) {
            if may_name_a_file(&word) && !found.contains(&word) {
                found.push(word);
            }
        }
    }
    found
}

/// What a script makes of a variable's value in its words: each word holding one
/// `$NAME` (or `${NAME}`) with text beside it (`"$f.sh"`: `("", ".sh")`; `"$d"/*.sh`:
/// `("", "/*.sh")`; `tools/$f`: `("tools/", "")`), at most [`MAX_AFFIXES`]. A list's
/// entries are held as the script completes them ([`completed_entries`]): a list naming
/// `tools/checks/a` for `sh "$f.sh"`, or the directory `tools/checks` for `for f in
/// "$d"/*.sh`, left the scripts run the agent's to write (round twenty-five's second
/// review).
pub(super) fn variable_affixes(script: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for line in script_lines(script) {
        let tokens = shell_tokens(&line);
        for (at, word) in tokens.iter().enumerate() {
            let word = match word.iter().position(|b| *b == b'=') {
                Some(at) if is_assignment(word) => word[at + 1..].to_vec(),
                _ => word.clone(),
            };
            // A directory a program runs the files of (`run-parts "$d"`, `find "$d"
            // -exec sh {} \;`): the listed directory held whole, as for `"$d"/*.sh`
            // (round twenty-seven's review).
            let walked = operand_of(&tokens, at)
                .is_some_and(|program| runs_dir(program, &tokens[at..]))
                && lone_reference(&word);
            let affix = if walked {
                Some((Vec::new(), b"/*".to_vec()))
            } else {
                one_expansion(&word)
            };
            let Some(affix) = affix else {
                continue;
            };
            if found.len() < MAX_AFFIXES && !found.contains(&affix) {
                found.push(affix);
            }
        }
    }
    found
}

/// The program whose operand `tokens[at]` is, past the options between them and the
/// values of `run-parts`' options spelled apart (`run-parts --exit-on-error "$d"`,
/// `run-parts --regex RE "$d"`: round twenty-eight's review found only the word right
/// after the program read as its directory).
fn operand_of(tokens: &[Vec<u8>], at: usize) -> Option<&[u8]> {
    const VALUED: &[&[u8]] = &[b"-a", b"-u", b"--arg", b"--umask", b"--regex"];
    let mut i = at.checked_sub(1)?;
    loop {
        let option = tokens[i].starts_with(b"-");
        let value = i > 0 && VALUED.contains(&tokens[i - 1].as_slice());
        if !(option || value) || i == 0 {
            return Some(&tokens[i]);
        }
        i -= 1;
    }
}

/// Whether `program`, given the directory `rest[0]` and the words after it, runs the
/// files it holds: `run-parts`, or `find` whose `-exec` (`-execdir`, `-ok`) runs a shell,
/// an interpreter or the file found (`{}`). A `find -exec rm` leaves it be (holding the
/// directory whole would stop the agent's work there).
fn runs_dir(program: &[u8], rest: &[Vec<u8>]) -> bool {
    match program_name(program) {
        b"run-parts" => true,
        b"find" => {
            let runs = |w: &Vec<u8>| {
                let name = program_name(w);
                RUNNERS.contains(&name) || name.starts_with(b"python")
            };
            // Or piped to an `xargs` that runs them (`find "$d" -print0 | xargs -0 sh`;
            // round twenty-eight's review).
            let xargs = rest.iter().position(|w| program_name(w) == b"xargs");
            xargs.is_some_and(|at| rest[at..].iter().any(runs))
                || rest.windows(2).any(|pair| {
                    let exec = [&b"-exec"[..], b"-execdir", b"-ok", b"-okdir"]
                        .contains(&pair[0].as_slice());
                    exec && (runs(&pair[1]) || pair[1] == b"{}")
                })
        }
        _ => false,
    }
}

/// Whether `word` is one `$NAME` or `${NAME}` and nothing else.
fn lone_reference(word: &[u8]) -> bool {
    let is_name = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    word.strip_prefix(b"$")
        .and_then(variable_reference)
        .is_some_and(|(name, len)| {
            len == word.len() - 1
                && !name.is_empty()
                && name.iter().all(is_name)
                && !name[0].is_ascii_digit()
        })
}

/// The most [`variable_affixes`] read from one script.
const MAX_AFFIXES: usize = 16;

/// The text before and after the one `$NAME` or `${NAME}` of `word`, when it has one
/// expansion only and text beside it.
fn one_expansion(word: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let at = word.iter().position(|b| *b == b'$')?;
    let after = &word[at + 1..];
    let (name, len) = variable_reference(after)?;
    let (before, rest) = (&word[..at], &after[len..]);
    let is_name = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let plain = |t: &[u8]| !t.iter().any(|b| b"$`\x01".contains(b));
    let named = !name.is_empty() && name.iter().all(is_name) && !name[0].is_ascii_digit();
    (named && plain(before) && plain(rest) && !(before.is_empty() && rest.is_empty()))
        .then(|| (before.to_vec(), rest.to_vec()))
}

/// The variable a `$` refers to, read from `after` (what follows the `$`): `{NAME}`'s
/// `NAME` (whatever is before the first `}`), or the longest run of ASCII letters, digits
/// and `_` (maybe empty); with how many bytes of `after` the reference takes. `None` for
/// a `{` never closed. Python's `os.path.expandvars` reads references so
/// ([`super::home`]'s relocating values); a script's words are read with it too.
pub(super) fn variable_reference(after: &[u8]) -> Option<(&[u8], usize)> {
    if let Some(braced) = after.strip_prefix(b"{") {
        let end = braced.iter().position(|b| *b == b'}')?;
        return Some((&braced[..end], end + 2));
    }
    let is_name = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let end = after
        .iter()
        .position(|b| !is_name(b))
        .unwrap_or(after.len());
    Some((&after[..end], end))
}

/// `entry` of a list as a script completes it with each of `affixes`
/// ([`variable_affixes`]): a file held when there, or a glob's directory held whole
/// (`tools/checks` of `tools/checks/*.sh`).
pub(super) fn completed_entries(entry: &[u8], affixes: &[(Vec<u8>, Vec<u8>)]) -> Vec<CommandWord> {
    let mut words: Vec<CommandWord> = Vec::new();
    for (before, after) in affixes {
        let word = [before.as_slice(), entry, after.as_slice()].concat();
        let (word, whole_dir) = match glob_dir(&word) {
            Some(dir) => (dir, true),
            None if may_name_a_file(&word) => (word, false),
            None => continue,
        };
        if !words
            .iter()
            .any(|w| w.word == word && w.whole_dir == whole_dir)
        {
            words.push(CommandWord {
                word,
                is_path: false,
                whole_dir,
            });
        }
    }
    words
}

/// The list files of one shell line ([`xargs_lists`]), added to `lists`.
fn line_xargs_lists(line: &[u8], depth: usize, lists: &mut Vec<Vec<u8>>) {
    for pipeline in pipelines(line) {
        let Some(xargs) = pipeline
            .iter()
            .map(|c| shell_tokens(c))
            .find(|words| words.first().is_some_and(|w| program_name(w) == b"xargs"))
        else {
            continue;
        };
        let Some(named) = xargs_list_options(&xargs) else {
            continue;
        };
        for command in &pipeline {
            let words = shell_tokens(command);
            if words.first().is_some_and(|w| program_name(w) == b"cat") {
                lists.extend(words[1..].iter().filter(|w| !w.starts_with(b"-")).cloned());
            }
            lists.extend(redirected_from(command));
        }
        lists.extend(named);
    }
    lists.retain(|l| may_name_a_file(l));
    let mut seen = Vec::new();
    lists.retain(|l| {
        let new = !seen.contains(l);
        seen.push(l.clone());
        new
    });
    if depth > 0 {
        for inner in shell_tokens(line)
            .iter()
            .filter(|t| t.iter().any(u8::is_ascii_whitespace))
        {
            line_xargs_lists(inner, depth - 1, lists);
        }
    }
}

/// The last name of a program's word (`/usr/bin/xargs`: `xargs`).
fn program_name(word: &[u8]) -> &[u8] {
    word.rsplit(|b| *b == b'/').next().unwrap_or(word)
}

/// The options of `xargs` that take a value (attached or as the next word).
const XARGS_VALUE_OPTIONS: &[&[u8]] = &[b"-a", b"-d", b"-E", b"-I", b"-L", b"-n", b"-P", b"-s"];

/// The options of `xargs` whose value is optional, attached only (`-i`, `-i{}`).
const XARGS_OPTIONAL_VALUE_OPTIONS: &[&[u8]] = &[b"-e", b"-i", b"-l"];

/// The long options of `xargs` that take a value (`--opt=VALUE` or the next word).
const XARGS_LONG_VALUE_OPTIONS: &[&[u8]] = &[
    b"--arg-file",
    b"--delimiter",
    b"--max-args",
    b"--max-procs",
    b"--max-chars",
    b"--process-slot-var",
];

/// The list files `xargs`'s own words name (`-a LIST`, `-aLIST`, `--arg-file[=]LIST`),
/// when the program it runs runs its entries: a shell or interpreter ([`RUNNERS`],
/// `python*`), the replace string itself (`-I{} {}`) or one of its arguments (`sh -c
/// '{}'` is a shell already). `None` when it runs another program (`xargs -a files
/// rustfmt` formats the files it names, which stay the agent's).
fn xargs_list_options(words: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    let mut lists = Vec::new();
    let mut replace: Option<Vec<u8>> = None;
    let mut rest = words.iter().skip(1);
    let program = loop {
        let word = rest.next()?;
        if !word.starts_with(b"-") {
            break word;
        }
        if let Some((long, value)) = XARGS_LONG_VALUE_OPTIONS.iter().find_map(|long| {
            let tail = word.strip_prefix(*long)?;
            match tail.strip_prefix(b"=") {
                Some(value) => Some((*long, Some(value.to_vec()))),
                None => tail.is_empty().then_some((*long, None)),
            }
        }) {
            let value = match value {
                Some(value) => value,
                None => rest.next()?.clone(),
            };
            if long == b"--arg-file" {
                lists.push(value);
            }
            continue;
        }
        if word == b"--replace" || word.starts_with(b"-i") {
            replace = Some(b"{}".to_vec());
        }
        if let Some(value) = word.strip_prefix(b"--replace=") {
            replace = Some(value.to_vec());
        }
        let optional = XARGS_OPTIONAL_VALUE_OPTIONS
            .iter()
            .any(|o| word.starts_with(o));
        let short = XARGS_VALUE_OPTIONS
            .iter()
            .find(|o| word.starts_with(o))
            .copied()
            .filter(|_| !optional);
        if let Some(short) = short {
            let value = match &word[short.len()..] {
                b"" => rest.next()?.clone(),
                attached => attached.to_vec(),
            };
            match short {
                b"-a" => lists.push(value),
                b"-I" => replace = Some(value),
                _ => {}
            }
        } else if let Some(value) = word.strip_prefix(b"-i").filter(|v| !v.is_empty()) {
            replace = Some(value.to_vec());
        }
    };
    let name = program_name(program);
    let runs = RUNNERS.contains(&name)
        || name.starts_with(b"python")
        || replace.is_some_and(|r| program.windows(r.len().max(1)).any(|w| w == r.as_slice()));
    runs.then_some(lists)
}

/// The commands of a line grouped by pipeline (`a | b; c` gives `[[a, b], [c]]`), split
/// where a shell splits them outside quotes (`|`, `;`, `&`, `&&`, `||`, a line break).
fn pipelines(line: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut pipelines = Vec::new();
    let mut current = Vec::new();
    let mut command = Vec::new();
    let mut quote: Option<u8> = None;
    let mut bytes = line.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if b == b'\\' => {
                command.push(b);
                if let Some(next) = bytes.next() {
                    command.push(next);
                }
                continue;
            }
            None if b == b'|' && bytes.peek() != Some(&b'|') => {
                current.push(std::mem::take(&mut command));
                continue;
            }
            None if b"|;&\n".contains(&b) => {
                while bytes.next_if(|n| b"|&".contains(n)).is_some() {}
                current.push(std::mem::take(&mut command));
                pipelines.push(std::mem::take(&mut current));
                continue;
            }
            None => {}
        }
        command.push(b);
    }
    current.push(command);
    pipelines.push(current);
    pipelines.retain(|p| p.iter().any(|c| !c.trim_ascii().is_empty()));
    pipelines
}

/// The files a command reads its standard input from (`< FILE`, `<FILE`), outside
/// quotes; a here-document or here-string (`<<`, `<<<`) and `<(…)` name none.
fn redirected_from(command: &[u8]) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    let mut quote: Option<u8> = None;
    for (at, &b) in command.iter().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if b == b'<' => {
                let rest = &command[at + 1..];
                let before = command[..at].last();
                if before == Some(&b'<') || rest.first().is_some_and(|n| b"<(&".contains(n)) {
                    continue;
                }
                found.extend(shell_tokens(rest).into_iter().next());
            }
            None => {}
        }
    }
    found
}

/// The `submodule.*.path` values of a `.gitmodules` text: the directories, from the top
/// of the work tree, `git submodule foreach` runs its command in.
pub(super) fn submodule_paths(gitmodules: &[u8]) -> Vec<Vec<u8>> {
    entries(gitmodules)
        .into_iter()
        .filter(|e| e.section == b"submodule" && e.key.eq_ignore_ascii_case(b"path"))
        .map(|e| e.value)
        .filter(|p| may_name_a_file(p) && !p.starts_with(b"/"))
        .collect()
}

/// How deep a shell line quoted in another (`sh -c 'cd "my tools" && ./fmt.sh'`) is read
/// as a line of its own.
const NESTED_LINES: usize = 3;

/// The words of one shell line, added to `words` ([`command_words`]); a quoted word with
/// a blank in it is read again as a line of its own, `depth` levels down.
fn line_words(line: &[u8], depth: usize, words: &mut Vec<CommandWord>) {
    let plain = shell_words(line);
    // The words as the shell reads them, quotes and backslashes taken as it takes
    // them: `sh 'tools/strip it.sh'` and `sh tools/strip\ it.sh` name one file, and
    // the plain split offered `tools/strip` and `it.sh` (round twenty's review, for
    // the backslash). One that differs from every plain word is offered too, held
    // only when a file is there if it has a blank in it: the same quotes may hold a
    // shell line (`sh -c 'a.sh && b.sh'`), whose words the plain split offers, but
    // only as the outer line splits them: `sh -c 'cd "my tools" && ./fmt.sh'` was
    // read in `my/` (round twenty-one's review), so such a word is read as a line too.
    // Sets, not lists (round thirty-two's review: a line of 28,000 words took seconds,
    // each word looked for among all the others).
    let plain_set: std::collections::HashSet<&[u8]> = plain.iter().map(Vec::as_slice).collect();
    let tokens: Vec<Vec<u8>> = shell_tokens(line)
        .into_iter()
        .filter(|t| !plain_set.contains(t.as_slice()))
        .collect();
    let has_blank = |w: &[u8]| w.iter().any(u8::is_ascii_whitespace);
    // A bare word read in the directory keeps its bareness: held only when a file is
    // there (`cd tools && make lint` names no file `tools/make`).
    let moved = words_in_entered_dirs(&plain)
        .into_iter()
        .chain(words_in_entered_dirs(&shell_tokens(line)))
        .chain(entry_points(&plain))
        .chain(after_expansions(line).into_iter().map(|w| (w, false)))
        .map(|(w, is_path)| {
            let may_be_absent = is_path && !has_blank(&w);
            (w, may_be_absent)
        });
    let quoted = tokens.iter().map(|w| (w.clone(), !has_blank(w)));
    let runners: std::collections::HashSet<Vec<u8>> =
        dirs_run_whole(&plain, line).into_iter().collect();
    // A glob the shell does not expand (quoted: `find . -name '*.sh'`, `git ls-files
    // '*.rs'`) reads no directory: held whole, `cd src && git ls-files '*.rs'` froze `src`.
    let patterns: std::collections::HashSet<Vec<u8>> = marked_shell_tokens(line)
        .into_iter()
        .filter_map(|(w, quoted_glob)| quoted_glob.then_some(w))
        .collect();
    let is_pattern = |w: &[u8]| ends_with_one_of(w, &patterns);
    // What a held script's reader finds in a line (`node -r ./tools/hook` loads
    // `tools/hook.js`, `perl -Itools -MHook` `tools/Hook.pm`), when there: the plain
    // words offered only `./tools/hook` and `-MHook` (round twenty-seven's review).
    let run = run_words(line)
        .into_iter()
        .filter(|(_, base)| *base == SourceBase::WorkingDir)
        .map(|(w, _)| (w, false));
    let plain = plain.iter().map(|w| (w.clone(), true));
    // Where each word found so far is in `words`, the first of it.
    let mut met: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
    for (at, found) in words.iter().enumerate() {
        met.entry(found.word.clone()).or_insert(at);
    }
    for (word, may_be_absent) in plain.chain(moved).chain(quoted).chain(run) {
        let word = match word.iter().rposition(|b| *b == b'=') {
            Some(at) => word[at + 1..].to_vec(),
            None if word.first() == Some(&b'-') => continue,
            None => word,
        };
        // A directory whose files a program runs, read where the line runs it
        // (`cd tools && run-parts checks`: `tools/checks`).
        let runs_whole = |w: &[u8]| ends_with_one_of(w, &runners);
        let (word, whole_dir) = match glob_dir(&word).filter(|_| !is_pattern(&word)) {
            Some(dir) => (dir, true),
            None if runs_whole(&word) => (word, true),
            None => (word, false),
        };
        if !may_name_a_file(&word) {
            continue;
        }
        let is_path = may_be_absent && word.contains(&b'/');
        // A word met before as a file (`cd ci && for f in *`: `ci`) is a glob's
        // directory all the same.
        match met.get(&word).map(|&at| &mut words[at]) {
            Some(met) if whole_dir && !met.whole_dir => {
                met.whole_dir = true;
                met.is_path |= is_path;
            }
            Some(_) => {}
            None => {
                met.insert(word.clone(), words.len());
                words.push(CommandWord {
                    word,
                    is_path,
                    whole_dir,
                });
            }
        }
    }
    if depth > 0 {
        for inner in tokens.iter().filter(|t| has_blank(t)) {
            line_words(inner, depth - 1, words);
        }
    }
}

/// Whether `word` is one of `names`, or ends in `/` and one of them.
fn ends_with_one_of(word: &[u8], names: &std::collections::HashSet<Vec<u8>>) -> bool {
    names.contains(word)
        || word
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .any(|(at, _)| names.contains(&word[at + 1..]))
}

/// The directory a word with a glob reads (`tools/checks` of `tools/checks/*.sh`, `tools`
/// of `tools/*/run.sh`): the shell runs what it finds there, so a file the agent adds is
/// run as well as the user's (round twenty-one's review: such a word was dropped as one
/// the shell expands). `None` for a word without a glob, or one that names no directory
/// before it (`*.sh`: the top itself is not held whole). Only a glob in a word's last
/// name that expands nothing else is one: a regular expression (`'src/.*\.rs'`,
/// `^src/a*`) held the project's sources whole.
fn glob_dir(word: &[u8]) -> Option<Vec<u8>> {
    if !is_glob(word) {
        return None;
    }
    let glob = word.iter().position(|b| GLOB.contains(b))?;
    let end = word[..glob].iter().rposition(|b| *b == b'/')?;
    let last = &word[end + 1..];
    let dir = &word[..end];
    (!dir.is_empty() && !last.contains(&b'/') && !last.starts_with(b".*")).then(|| dir.to_vec())
}

/// The paths a line names right after an expansion coder cannot read, read from the top
/// of the work tree as bare words are (held only when a file is there): the user's own
/// alias for the top (`alias.root = rev-parse --show-toplevel`, then `sh "$(git
/// root)"/tools/fmt.sh`) or a variable holding it (`T=$(git root) && sh ${T}/tools/x.sh`)
/// left the word `/tools/fmt.sh`, an absolute path held nowhere, and the agent wrote the
/// script (round twenty-one's review). Where the expansion is something else (`$HOME/x`),
/// a file of that name at the top is held for nothing.
fn after_expansions(line: &[u8]) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    for at in (1..line.len()).filter(|&i| line[i] == b'/') {
        let before = line[..at].strip_suffix(b"\"").unwrap_or(&line[..at]);
        let name = before
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count();
        let variable = name > 0 && before[..before.len() - name].ends_with(b"$");
        if !(variable || matches!(before.last(), Some(b')' | b'`' | b'}'))) {
            continue;
        }
        let rest = &line[at + 1..];
        let end = rest
            .iter()
            .position(|b| b.is_ascii_whitespace() || b"\"';&|()<>`".contains(b))
            .unwrap_or(rest.len());
        found.push(rest[..end].to_vec());
    }
    found
}

/// The directories of a line whose every file a program runs: `run-parts DIR`, and the
/// starting points of a `find` whose files the line runs (`-exec`, `-execdir`, `-ok`,
/// `-okdir`, or piped to `xargs`). Such a word named a directory, which the scan does not
/// hold, and the agent wrote the user's script there or added its own (round twenty-one's
/// review), or looped over by a `for` whose body runs the loop's variable ([`loop_runs`]:
/// `for f in $(find tools/checks -type f); do sh "$f"; done`, round twenty-two).
fn dirs_run_whole(words: &[Vec<u8>], line: &[u8]) -> Vec<Vec<u8>> {
    let runs_found = loop_runs(words, line)
        || words.iter().any(|w| {
            [&b"-exec"[..], b"-execdir", b"-ok", b"-okdir", b"xargs"].contains(&w.as_slice())
        });
    let mut dirs = Vec::new();
    let mut words = words.iter().peekable();
    while let Some(word) = words.next() {
        let name = word.rsplit(|b| *b == b'/').next().unwrap_or(word);
        if name == b"run-parts" {
            // Its options with a separate value (`-a ARG`, `-u UMASK`, `--regex RE`: round
            // twenty-eight's review found the `RE` taken for the directory) are passed over.
            const VALUED: &[&[u8]] = &[b"-a", b"-u", b"--arg", b"--umask", b"--regex"];
            while let Some(next) = words.next_if(|w| w.starts_with(b"-")) {
                if VALUED.contains(&next.as_slice()) {
                    words.next();
                }
            }
            dirs.extend(words.next().cloned());
        } else if name == b"find" && runs_found {
            while words
                .next_if(|w| [&b"-H"[..], b"-L", b"-P"].contains(&w.as_slice()))
                .is_some()
            {}
            // A shell keyword ends the command (`` for f in `find d`; do ``: the
            // backquote's end is not a word).
            // So does the program the list is piped to (`find d | while read f`, `find d |
            // xargs sh`: the words keep no `|`).
            let ends = |w: &[u8]| {
                const ENDS: &[&[u8]] = &[
                    b"!", b"do", b"done", b"then", b"fi", b"while", b"until", b"|", b"xargs",
                ];
                w.starts_with(b"-") || ENDS.contains(&w)
            };
            while let Some(start) = words.next_if(|w| !ends(w)) {
                dirs.push(start.clone());
            }
        }
    }
    dirs.retain(|d| may_name_a_file(d));
    dirs
}

/// The words after which a shell line runs what follows ([`loop_runs`],
/// [`xargs_list_options`]): keywords that start a command, shells and interpreters.
const RUNNERS: &[&[u8]] = &[
    b"do", b"then", b"else", b"sh", b"bash", b"dash", b"zsh", b"ksh", b".", b"source", b"exec",
    b"env", b"nohup", b"time", b"command", b"perl", b"ruby", b"node",
];

/// Whether a `for VAR in …` loop of the line runs its variable: `$VAR` (or `${VAR}`,
/// quoted or not) where a command starts (after `do`, `then`, `else`, `;`, `&`, `|`) or
/// after a program that runs its argument (`sh`, `.`, `python3`, `exec`, …). One that
/// passes it to another program (`rustfmt "$f"`) does not run it.
fn loop_runs(words: &[Vec<u8>], line: &[u8]) -> bool {
    let for_vars = words
        .windows(3)
        .filter(|w| w[0] == b"for" && w[2] == b"in")
        .map(|w| w[1].clone());
    // `find d | while read f; do sh "$f"; done` (`read -r f`, `IFS= read -r f`): the
    // variables `read` sets are run as a `for`'s is (round twenty-three).
    for var in for_vars.chain(read_vars(words)) {
        let spellings = [
            [b"$", var.as_slice()].concat(),
            [b"${", var.as_slice(), b"}"].concat(),
        ];
        for (at, _) in line.iter().enumerate().filter(|(_, b)| **b == b'$') {
            let rest = &line[at..];
            let Some(spelled) = spellings.iter().find(|s| rest.starts_with(s)) else {
                continue;
            };
            let after = rest.get(spelled.len()).copied();
            if after.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
                continue;
            }
            let before = line[..at].strip_suffix(b"\"").unwrap_or(&line[..at]);
            let before = before.trim_ascii_end();
            if before.last().is_some_and(|b| b";&|".contains(b)) {
                return true;
            }
            let word = before
                .rsplit(|b| b.is_ascii_whitespace() || b";&|(".contains(b))
                .next()
                .unwrap_or(before);
            let name = word.rsplit(|b| *b == b'/').next().unwrap_or(word);
            if RUNNERS.contains(&name) || name.starts_with(b"python") {
                return true;
            }
        }
    }
    false
}

/// The variables a `read` of the line sets (`find d | while read -r f; do sh "$f"; done`,
/// round twenty-three): each word after `read` up to the command's end, options passed
/// over (`IFS= read -r f`).
fn read_vars(words: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut vars = Vec::new();
    for (at, _) in words.iter().enumerate().filter(|(_, w)| *w == b"read") {
        for word in &words[at + 1..] {
            let name = word.strip_suffix(b";").unwrap_or(word);
            // An option, or an option's quoted empty value (`-d ''`). An option's other
            // value (`-n 1`, `-p PROMPT`) is taken for a variable too: one variable too
            // many holds more, never less.
            if name.starts_with(b"-") || name.is_empty() {
                continue;
            }
            if !name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                break;
            }
            vars.push(name.to_vec());
            if name.len() != word.len() {
                break;
            }
        }
    }
    vars
}

/// The bytes of a shell glob.
const GLOB: &[u8] = b"*?[";

/// `word` has a glob and expands nothing else ([`may_name_a_file`] without the glob,
/// nor a regular expression's `^`), or is `*`.
fn is_glob(word: &[u8]) -> bool {
    let rest: Vec<u8> = word
        .iter()
        .copied()
        .filter(|b| !GLOB.contains(b) && *b != b']')
        .collect();
    // `*` alone is every file of the directory the line is in; `[` alone is `test`.
    let every_file = rest.is_empty() && word.iter().all(|b| *b == b'*');
    word.iter().any(|b| GLOB.contains(b))
        && !word.contains(&b'^')
        && (every_file || may_name_a_file(&rest))
}

/// How a shell line spells the top of the work tree, where git runs these commands:
/// `"$(git rev-parse --show-toplevel)/tools/fmt.sh"` left the word `/tools/fmt.sh`,
/// taken for an absolute path, and the script the agent's to write (round eighteen's
/// second review). The shell's own names for the directory it is in (`$PWD`, `$(pwd)`)
/// are the same place, and were not read as it until round twenty's review. Each comes
/// with what it is read as: `.`, `./` for `--show-cdup` (which prints the way up with its
/// `/`, or nothing), and `.git` for the git dir as `rev-parse` prints it (`--git-dir`,
/// `--git-common-dir`, `--absolute-git-dir`): a git dir's files other than its config,
/// hooks and info are the agent's to write, and `sh "$(git rev-parse
/// --git-dir)/scripts/x.sh"` ran what it wrote there (round twenty-one's review). For a
/// work tree whose `.git` is a file, `.git/x` names nothing, as before.
const TOP_SPELLINGS: &[(&[u8], &[u8])] = &[
    (b"$(git rev-parse --show-toplevel)", b"."),
    (b"`git rev-parse --show-toplevel`", b"."),
    (b"$(git rev-parse --show-cdup)", b"./"),
    (b"`git rev-parse --show-cdup`", b"./"),
    (b"$(git rev-parse --git-dir)", b".git"),
    (b"`git rev-parse --git-dir`", b".git"),
    (b"$(git rev-parse --git-common-dir)", b".git"),
    (b"`git rev-parse --git-common-dir`", b".git"),
    (b"$(git rev-parse --absolute-git-dir)", b".git"),
    (b"`git rev-parse --absolute-git-dir`", b".git"),
    (b"${PWD}", b"."),
    (b"$(pwd)", b"."),
    (b"`pwd`", b"."),
    (b"$(pwd -P)", b"."),
    (b"$(pwd -L)", b"."),
    (b"$PWD", b"."),
    // bash's tilde-plus (round twenty-nine's review: `sh ~+/tools/x.sh`).
    (b"~+/", b"./"),
];

/// `line` with each of [`TOP_SPELLINGS`] read as what it names. A spelling ending in a
/// name (`$PWD`) is one only where the name ends.
fn top_read_as_dot(line: &[u8]) -> Vec<u8> {
    top_read_as(line, b".")
}

/// [`top_read_as_dot`] where the shell's own names for the directory it is in (`$PWD`,
/// `$(pwd)`, `~+/`) name `here` (relative to the top) instead; git's for the top stay.
fn top_read_as(line: &[u8], here: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    'bytes: while i < line.len() {
        // The bytes up to the next one a spelling starts with (`$`, a backquote, `~`) are
        // copied as they are: a held script of 256 KiB was read byte by byte against each
        // spelling, some ten times over.
        let starts_one = |b: &u8| TOP_SPELLINGS.iter().any(|(s, _)| s.first() == Some(b));
        let Some(next) = line[i..].iter().position(starts_one) else {
            out.extend_from_slice(&line[i..]);
            break;
        };
        out.extend_from_slice(&line[i..i + next]);
        i += next;
        for (spelling, read_as) in TOP_SPELLINGS {
            let name_goes_on = || {
                spelling.last().is_some_and(u8::is_ascii_alphabetic)
                    && line
                        .get(i + spelling.len())
                        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
            };
            if line[i..].starts_with(spelling) && !name_goes_on() {
                let is_git = spelling.windows(9).any(|w| w == b"rev-parse");
                match *read_as {
                    b"." if !is_git => out.extend_from_slice(here),
                    b"./" if !is_git => out.extend_from_slice(&[here, b"/"].concat()),
                    _ => out.extend_from_slice(read_as),
                }
                i += spelling.len();
                continue 'bytes;
            }
        }
        out.push(line[i]);
        i += 1;
    }
    out
}

/// The words of a shell line after it enters a directory, read in that directory as the
/// shell runs them: `cd tools && ./strip.sh` runs `tools/strip.sh`, and the word alone,
/// read at the top of the work tree, held `./strip.sh` there instead, leaving the script
/// git runs the agent's to write. A directory is entered by `cd DIR` or `pushd DIR`, and
/// by a program's `-C DIR` or `--chdir[=]DIR` (`env -C tools ./fmt.sh`, found by
/// attacking the `cd` rule; `git -C`, `make -C` alike: a bare word read there is held
/// only when a file is there). A later one goes on from the first (`cd a && cd b`:
/// `a/b`). Every word after it is offered so, to the line's end: which of them run in
/// the new directory cannot be told for sure (`(cd a && x) && y`), and a word offered in
/// a directory it does not run in is held for nothing. A word that is absolute, an
/// option, or names the home directory stays as it is. Each comes with whether it names
/// a path by itself (has a `/`), as [`CommandWord::is_path`] needs.
fn words_in_entered_dirs(words: &[Vec<u8>]) -> Vec<(Vec<u8>, bool)> {
    entered_dirs_and_path(words).0
}

/// Words read in the directory a line entered, each with whether it names a path by
/// itself ([`words_in_entered_dirs`]).
type MovedWords = Vec<(Vec<u8>, bool)>;

/// [`words_in_entered_dirs`], and the directories the line puts on `PATH` (`PATH=DIR:…`,
/// a sourced `DIR/activate`), each read in the directory the line is in there.
fn entered_dirs_and_path(words: &[Vec<u8>]) -> (MovedWords, Vec<Vec<u8>>) {
    let relative = |w: &[u8]| !w.starts_with(b"/") && !w.starts_with(b"~") && !w.starts_with(b"-");
    let in_dir = |dir: &[u8], w: &[u8]| [dir, b"/", w].concat();
    let mut here: Option<Vec<u8>> = None;
    let mut path_dirs: Vec<Vec<u8>> = Vec::new();
    let mut program: &[u8] = b"";
    let mut moved = Vec::new();
    let mut searched = Vec::new();
    let mut words = words.iter().peekable();
    while let Some(word) = words.next() {
        let in_here = |dir: &[u8]| match &here {
            Some(base) if relative(dir) => in_dir(base, dir),
            _ => dir.to_vec(),
        };
        if let Some(dirs) = word.strip_prefix(b"PATH=".as_slice()) {
            let dirs = dirs.split(|b| *b == b':').filter_map(path_entry);
            searched.extend(dirs.clone().map(in_here));
            path_dirs.extend(dirs.map(<[u8]>::to_vec));
            continue;
        }
        // A virtualenv's `activate` sourced (`. .venv/bin/activate && lint`) puts its
        // directory first on `PATH`: `lint` runs `.venv/bin/lint` (round twenty-one's
        // review). The script's word itself is read as any other.
        if word == b"." || word == b"source" {
            let activated = words
                .peek()
                .and_then(|w| w.strip_suffix(b"/activate".as_slice()));
            searched.extend(activated.filter(|d| may_name_a_file(d)).map(in_here));
            path_dirs.extend(activated.and_then(path_entry).map(<[u8]>::to_vec));
        }
        if let Some(dir) = entered_dir(word, program, &mut words) {
            here = Some(match here.take() {
                Some(base) if relative(&dir) => in_dir(&base, &dir),
                _ => dir,
            });
            continue;
        }
        if !word.starts_with(b"-") {
            program = word;
        }
        if !relative(word) || !(may_name_a_file(word) || is_glob(word)) {
            continue;
        }
        if let Some(dir) = &here {
            moved.push((in_dir(dir, word), word.contains(&b'/')));
        }
        if word.contains(&b'/') {
            continue;
        }
        // A bare word run from a `PATH=DIR:$PATH` the line set (`PATH=tools/bin:$PATH
        // fmt` runs `tools/bin/fmt`; round twenty's review): read in each of its
        // directories that names a file, as the shell searches them.
        for dir in &path_dirs {
            let dir = match &here {
                Some(base) if relative(dir) => in_dir(base, dir),
                _ => dir.clone(),
            };
            moved.push((in_dir(&dir, word), false));
        }
    }
    (moved, searched)
}

/// One entry of a `PATH=` word that names a directory coder can read: an empty one is
/// the working directory, as `.` is (`PATH=:$PATH`, `PATH=.:$PATH`: both were dropped,
/// as nothing and as a word of dots, and the agent added `./python3` at the top for a
/// held script's `#!/usr/bin/env python3`; round twenty-three's review). `None` for
/// one the shell expands.
fn path_entry(dir: &[u8]) -> Option<&[u8]> {
    let is_dots = dir.iter().all(|b| *b == b'.' || *b == b'/');
    match dir {
        b"" => Some(b"."),
        _ if is_dots || may_name_a_file(dir) => Some(dir),
        _ => None,
    }
}

/// The relative and empty entries of a `PATH` value (the user's own: `.:$PATH`,
/// `bin:$PATH`), each read where git runs a command: the top of the work tree. A held
/// script's `#!/usr/bin/env python3` found the agent's `./python3` there (round
/// twenty-three's Known limits).
pub(super) fn relative_path_entries(path: &[u8]) -> Vec<Vec<u8>> {
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    for dir in path.split(|b| *b == b':').filter_map(path_entry) {
        if !dir.starts_with(b"/") && !dir.starts_with(b"~") && !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.to_vec());
        }
    }
    dirs
}

/// The directories of the work tree that the commands of the config put on `PATH`
/// (`PATH=tools/bin:$PATH x`, `. .venv/bin/activate && x`), read where each line is
/// then: a held script's interpreter found through `PATH` (`#!/usr/bin/env python3`)
/// is looked for there (the scan holds `DIR/python3`, present or not), as the shell
/// the command runs in finds it first (round twenty-one's review, a ratchet: the
/// agent replaced the venv's `python3` link). Quoted lines are read as
/// [`line_words`] reads them.
pub(super) fn path_dirs(text: &[u8]) -> Vec<Vec<u8>> {
    let mut dirs = Vec::new();
    for entry in entries(text).into_iter().filter(runs_a_command) {
        let line = entry.value.strip_prefix(b"!").unwrap_or(&entry.value);
        line_path_dirs(&top_read_as_dot(line), NESTED_LINES, &mut dirs);
    }
    dirs
}

/// The directories a shell script puts on `PATH` (`PATH="$PWD/tools/bin:$PATH"`), each
/// line read as a config's command line is ([`path_dirs`]): a file a command line
/// sources sets the line's `PATH` (round twenty-three's review: `. ./env.sh &&
/// tools/fmt.py` ran the agent's `tools/bin/python3`). The script's variables are put
/// in and its own directory (`$(dirname "$0")`) read as `script_dir` (relative to the
/// top), and bash's `PATH+=X` read as `PATH=$PATH X`: round thirty's second review
/// found `PATH="$(dirname "$0")/bin:$PATH"`, `B=tools/bin` then `PATH="$PWD/$B:$PATH"`,
/// and `PATH+=:$PWD/tools/bin` each unread, and the agent's `tools/bin/fmt-local` ran
/// at the user's `git ci`.
pub(super) fn script_path_dirs(text: &[u8], script_dir: &[u8]) -> Vec<Vec<u8>> {
    let mut dirs = Vec::new();
    if !text
        .windows(5)
        .any(|w| w == b"PATH=" || w == b"PATH+" || w == b" PATH")
    {
        return dirs;
    }
    for line in script_lines(&path_defaults_read_plain(text)) {
        let line = path_set_by_a_builtin(&path_append_read_as_assignment(&line));
        let line = line_with_script_dir(&line, script_dir);
        if line.windows(5).any(|w| w == b"PATH=") {
            line_path_dirs(&line, NESTED_LINES, &mut dirs);
        }
    }
    dirs
}

/// The directories a direnv `.envrc` puts on `PATH`, relative to its directory:
/// [`script_path_dirs`] with direnv's `PATH_add DIR…` and `path_add PATH DIR…` read as
/// `PATH=DIR:$PATH`.
pub(super) fn envrc_path_dirs(text: &[u8]) -> Vec<Vec<u8>> {
    let mut script = Vec::with_capacity(text.len());
    for line in continued_lines(text) {
        script.extend_from_slice(&line);
        script.push(b'\n');
        // Each command of the line (`[ -d bin ] && PATH_add bin`, `watch_file x;
        // PATH_add bin`, `then PATH_add bin`: round thirty-one's review found those after
        // the line's first unread).
        for command in pipelines(&line).into_iter().flatten() {
            let tokens = shell_tokens(&command);
            let start = command_start(&tokens);
            let dirs = match tokens[start..].split_first() {
                Some((first, dirs)) if first == b"PATH_add" => dirs.to_vec(),
                Some((first, rest))
                    if first == b"path_add" && rest.first().is_some_and(|v| v == b"PATH") =>
                {
                    rest[1..].to_vec()
                }
                Some((first, rest)) if first == b"layout" => {
                    rest.first().map(|n| layout_dirs(n)).unwrap_or_default()
                }
                Some((first, _)) => first
                    .strip_prefix(b"layout_")
                    .map(layout_dirs)
                    .unwrap_or_default(),
                None => continue,
            };
            for dir in &dirs {
                script.extend_from_slice(b"PATH=");
                script.extend_from_slice(dir);
                script.extend_from_slice(b":$PATH\n");
            }
        }
    }
    script_path_dirs(&script, b".")
}

/// `text` with the shell's `${PATH:+:$PATH}` (a `:` and `PATH` when it is set; and kin)
/// spelled `:$PATH`. Round thirty-one's review: a held script's `export
/// PATH="$PWD/tools/bin${PATH:+:$PATH}"` was read as no directory (the entry holds a
/// `$`), and the agent's `tools/bin/fmt-local` ran at the user's `git ci`.
fn path_defaults_read_plain(text: &[u8]) -> Vec<u8> {
    const SPELLINGS: &[(&[u8], &[u8])] = &[
        (b"${PATH:+:$PATH}", b":$PATH"),
        (b"${PATH:+:${PATH}}", b":$PATH"),
        (b"${PATH:+\":$PATH\"}", b":$PATH"),
        (b"${PATH:+\":${PATH}\"}", b":$PATH"),
        (b"${PATH:+$PATH:}", b"$PATH:"),
        (b"${PATH:+${PATH}:}", b"$PATH:"),
        (b"${PATH:+\"$PATH:\"}", b"$PATH:"),
        (b"${PATH:+\"${PATH}:\"}", b"$PATH:"),
    ];
    // One pass (a script of many of them costs no search from its start for each).
    spellings_read_as(text, SPELLINGS)
}

/// The files a direnv `.envrc` has direnv source (`source_env FILE`,
/// `source_env_if_exists FILE`: direnv runs them as part of the `.envrc`, with no `direnv
/// allow` of their own), or sources itself (bash's `source FILE`, `. FILE`: bash looks for
/// a name without a `/` in the directory too, when `PATH` has none), relative to its
/// directory; absolute ones and `~` left out. Round thirty-two's review: `[ -f
/// .envrc.local ] && source .envrc.local`, absent at the start, was the agent's to make,
/// and direnv ran it at the user's next `cd` there.
pub(super) fn envrc_sourced_files(text: &[u8]) -> Vec<Vec<u8>> {
    const SOURCING: &[&[u8]] = &[b"source_env", b"source_env_if_exists", b"source", b"."];
    envrc_files_given_to(text, SOURCING, None)
}

/// The files a direnv `.envrc` has direnv look for in its parent directories and source
/// there (`source_up [FILE]`, `source_up_if_exists [FILE]`; `.envrc` when none is named):
/// the nearest parent's that has one. Round thirty-two's review: a nested `.envrc`'s
/// `source_up .envrc.local`, absent at the start, was the agent's to make at the top.
pub(super) fn envrc_up_files(text: &[u8]) -> Vec<Vec<u8>> {
    const UP: &[&[u8]] = &[b"source_up", b"source_up_if_exists"];
    envrc_files_given_to(text, UP, Some(b".envrc"))
}

/// The files a direnv `.envrc` loads variables from (`dotenv [FILE]`, `dotenv_if_exists
/// [FILE]`; `.env` when none is named), relative to its directory; absolute ones and `~`
/// left out.
pub(super) fn envrc_dotenv_files(text: &[u8]) -> Vec<Vec<u8>> {
    envrc_files_given_to(text, &[b"dotenv", b"dotenv_if_exists"], Some(b".env"))
}

/// The word after any of `commands` in each command of `text` (or `default` when the
/// command has none), each once, where it may name a file relative to the `.envrc`; the
/// `.envrc`'s directory spelled `$PWD` (and kin) read as `.` (round thirty-two's review:
/// `source_env_if_exists "$PWD/.envrc.local"` was not read).
fn envrc_files_given_to(text: &[u8], commands: &[&[u8]], default: Option<&[u8]>) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    for line in continued_lines(text) {
        if line.trim_ascii_start().starts_with(b"#") {
            continue;
        }
        for command in pipelines(&top_read_as_dot(&line)).into_iter().flatten() {
            let tokens = shell_tokens(&command);
            // The shell's `.` and `source` only where a command starts (`find . -name x`
            // sources nothing); direnv's own names anywhere, as before.
            let start = command_start(&tokens);
            let named = |(i, t): (usize, &Vec<u8>)| {
                commands.contains(&t.as_slice()) && (i == start || !is_shell_source(t))
            };
            let Some(at) = tokens.iter().enumerate().position(named) else {
                continue;
            };
            let Some(file) = tokens.get(at + 1).cloned().or(default.map(<[u8]>::to_vec)) else {
                continue;
            };
            if may_name_a_file(&file)
                && !file.starts_with(b"/")
                && !file.starts_with(b"~")
                && !files.contains(&file)
            {
                files.push(file);
            }
        }
    }
    files
}

/// The directories a direnv `.envrc` puts on `PYTHONPATH` with direnv's `path_add
/// PYTHONPATH DIR…`, relative to its directory (its `PYTHONPATH=` lines are read with the
/// `.envrc` as a held script). Round thirty-two's review: `path_add PYTHONPATH src` left
/// `src/sitecustomize.py` the agent's, and the user's next `python3` in a direnv shell
/// ran it.
pub(super) fn envrc_pythonpath_dirs(text: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    let mut script = Vec::new();
    for line in continued_lines(text) {
        for command in pipelines(&line).into_iter().flatten() {
            let tokens = shell_tokens(&command);
            if let [first, var, dirs @ ..] = &tokens[command_start(&tokens)..]
                && first == b"path_add"
                && var == b"PYTHONPATH"
            {
                for dir in dirs {
                    script.extend_from_slice(b"PYTHONPATH=");
                    script.extend_from_slice(dir);
                    script.push(b'\n');
                }
            }
        }
    }
    script_pythonpath_dirs(&script)
}

/// Words that open a command without being it (`then PATH_add bin`, `! source x`).
const COMMAND_KEYWORDS: &[&[u8]] = &[
    b"if", b"then", b"else", b"elif", b"do", b"while", b"until", b"{", b"(", b"!", b"builtin",
    b"command",
];

/// Where the command of `tokens` starts: past [`COMMAND_KEYWORDS`].
fn command_start(tokens: &[Vec<u8>]) -> usize {
    tokens
        .iter()
        .position(|t| !COMMAND_KEYWORDS.contains(&t.as_slice()))
        .unwrap_or(tokens.len())
}

/// The shell's own ways to source a file: `.` and `source`.
fn is_shell_source(word: &[u8]) -> bool {
    word == b"." || word == b"source"
}

/// The directories of the tree direnv's `layout NAME` puts on `PATH`: `layout go`'s
/// `bin`; the layout directory `.direnv` for the others (`layout python3`'s
/// `.direnv/python-VERSION/bin`, a virtualenv direnv makes only when it is not there;
/// `layout ruby`'s `.direnv/bin`; perl's, julia's), held whole; none for node's and
/// php's (`node_modules/.bin`, `vendor/bin`: the installers'). Round thirty-one's
/// review: the agent made `.direnv/python-3.11.7/bin/git` (or `bin/git`,
/// `.direnv/bin/git`), and the user's next `git` in a direnv shell ran it.
fn layout_dirs(name: &[u8]) -> Vec<Vec<u8>> {
    match name {
        b"go" => vec![b"bin".to_vec()],
        b"node" | b"php" => Vec::new(),
        _ => vec![b".direnv".to_vec()],
    }
}

/// `line` with a builtin that sets `PATH` from its operands read as assigning them, each
/// an entry: `printf -v PATH FORMAT ARG…` as `PATH=ARG:…`, `read [-r] PATH <<< WORD` as
/// `PATH=WORD`. Round thirty-one's ratchet (`printf -v PATH '%s:%s' "$PWD/tools/bin"
/// "$PATH"` left `tools/bin/fmt-local` the agent's), closed in round thirty-two's review.
fn path_set_by_a_builtin(line: &[u8]) -> Vec<u8> {
    let mut out = line.to_vec();
    for command in pipelines(line).into_iter().flatten() {
        let tokens = shell_tokens(&command);
        let words = &tokens[command_start(&tokens)..];
        let values: Vec<&[u8]> = match words {
            [printf, v, var, _format, args @ ..]
                if printf == b"printf" && v == b"-v" && var == b"PATH" =>
            {
                args.iter().map(Vec::as_slice).collect()
            }
            [read, rest @ ..] if read == b"read" => {
                // `<<<` is no word of [`shell_tokens`]: the command is looked at for it.
                let here = command.windows(3).any(|w| w == b"<<<");
                let mut rest = rest.iter().skip_while(|w| w.starts_with(b"-"));
                match (rest.next(), rest.next()) {
                    (Some(var), Some(word)) if var == b"PATH" && here => vec![word.as_slice()],
                    _ => continue,
                }
            }
            _ => continue,
        };
        out.extend_from_slice(b"; PATH=");
        out.extend_from_slice(&values.join(b":".as_slice()));
    }
    out
}

/// `line` with each `PATH+=` (bash's append) spelled `PATH=$PATH`.
fn path_append_read_as_assignment(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.windows(6).position(|w| w == b"PATH+=") {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(b"PATH=$PATH");
        rest = &rest[at + 6..];
    }
    out.extend_from_slice(rest);
    out
}

/// The directories a config's command lines put on `PYTHONPATH` (`PYTHONPATH=src
/// tools/fmt.py`), read from the top of the work tree: Python's `site` imports
/// `sitecustomize` and `usercustomize` from any entry of `sys.path` at every start, and
/// with a held `activate` setting `PYTHONPATH=$PWD/src` the agent's `src/sitecustomize.py`
/// ran at the user's `git fmt` (round twenty-four's review, a ratchet until round
/// twenty-five). Only entries that may name a directory of the tree.
pub(super) fn pythonpath_dirs(text: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    let mut dirs = Vec::new();
    for entry in entries(text).into_iter().filter(runs_a_command) {
        let line = entry.value.strip_prefix(b"!").unwrap_or(&entry.value);
        line_pythonpath_dirs(&top_read_as_dot(line), &mut dirs);
    }
    dirs
}

/// [`pythonpath_dirs`] of a shell script's lines (a held `activate`, a sourced
/// `env.sh`), its variables read ([`script_lines`]); an entry spelled from the script's
/// own directory read from there.
pub(super) fn script_pythonpath_dirs(script: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    let mut dirs = Vec::new();
    if !script.windows(11).any(|w| w == b"PYTHONPATH=") {
        return dirs;
    }
    for line in script_lines(script) {
        line_pythonpath_dirs(&line, &mut dirs);
    }
    dirs
}

/// The `PYTHONPATH=` entries of one shell line, each with where it is read from.
fn line_pythonpath_dirs(line: &[u8], dirs: &mut Vec<(Vec<u8>, SourceBase)>) {
    for token in shell_tokens(line) {
        let Some(value) = token.strip_prefix(b"PYTHONPATH=".as_slice()) else {
            continue;
        };
        for entry in value.split(|b| *b == b':') {
            let entry = if entry.is_empty() {
                b".".as_slice()
            } else {
                entry
            };
            let based = match entry.strip_prefix(SCRIPT_DIR_MARK) {
                Some(rest) => Some(([b".", rest].concat(), SourceBase::ScriptDir)),
                None => path_entry(entry).map(|e| (e.to_vec(), SourceBase::WorkingDir)),
            };
            if let Some(found) = based.filter(|(e, _)| !e.starts_with(b"~") && !e.contains(&1))
                && !dirs.contains(&found)
            {
                dirs.push(found);
            }
        }
    }
}

/// The `PATH` directories of one shell line ([`path_dirs`]), added to `dirs`.
fn line_path_dirs(line: &[u8], depth: usize, dirs: &mut Vec<Vec<u8>>) {
    let tokens = shell_tokens(line);
    let found = entered_dirs_and_path(&shell_words(line))
        .1
        .into_iter()
        .chain(entered_dirs_and_path(&tokens).1);
    for dir in found {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    if depth > 0 {
        for inner in tokens
            .iter()
            .filter(|t| t.iter().any(u8::is_ascii_whitespace))
        {
            line_path_dirs(inner, depth - 1, dirs);
        }
    }
}

/// The options of an interpreter that take their value as the next word (`python3 -W
/// ignore tools/fmt`, `node -r ./hook tools/fmt`): that word is neither the program nor
/// the directory run. Read as the program, it hid the directory after it (round twenty-
/// one).
const VALUE_OPTIONS: &[&[u8]] = &[
    // python
    b"-W",
    b"-X",
    b"--check-hash-based-pycs",
    // node
    b"-r",
    b"--require",
    b"--import",
    b"--loader",
    b"--experimental-loader",
    b"-C",
    b"--conditions",
    b"--input-type",
    b"--title",
    b"--env-file",
];

/// The file an interpreter runs when it is given a directory (`python3 tools/fmt` runs
/// `tools/fmt/__main__.py`, `node tools/fmt` its `index.js`): the word names a
/// directory, which the scan does not hold, and the file run was the agent's (round
/// twenty's review). Offered as bare words are, held only when a file is there. For
/// node, also the directory's `package.json`, whose `main` names the file node runs
/// instead (the scan reads it; round twenty-one). Other files a program reads by
/// convention (`make`'s `Makefile`) are not followed (SECURITY.md, Known limits).
fn entry_points(words: &[Vec<u8>]) -> Vec<(Vec<u8>, bool)> {
    let mut found = Vec::new();
    for (word, interpreter) in interpreted_words(words) {
        for main in interpreter.in_dir {
            found.push(([&word[..], b"/", main].concat(), false));
        }
        for suffix in interpreter.suffixes {
            found.push(([&word[..], suffix].concat(), false));
        }
    }
    found
}

/// The words an interpreter of the line is given to run (`tools/fmt` of `node -r ./x
/// tools/fmt`), each with the interpreter.
fn interpreted_words(words: &[Vec<u8>]) -> Vec<(Vec<u8>, &'static Interpreter)> {
    let mut found = Vec::new();
    let mut program: &[u8] = b"";
    let mut words = words.iter();
    while let Some(word) = words.next() {
        // `python3 -m tools.fmt` runs `tools/fmt.py` (or the package's `__main__.py`)
        // after the `__init__.py` of each package on the way ([`python_module_words`]).
        if let Some(module) = python_module(program, word, &mut words) {
            found.extend(python_module_words(&module));
            program = b"";
            continue;
        }
        // `-c code`, `node -e code`: no directory follows.
        if [&b"-m"[..], b"-c", b"-e"].contains(&word.as_slice()) {
            words.next();
            program = b"";
            continue;
        }
        if VALUE_OPTIONS.contains(&word.as_slice()) && interpreter(program).is_some() {
            words.next();
            continue;
        }
        if word.starts_with(b"-") {
            continue;
        }
        if let Some(interpreter) = interpreter(program)
            && may_name_a_file(word)
        {
            found.push((word.clone(), interpreter));
        }
        program = word;
    }
    found
}

/// The module of python's `-m MOD` (or `-mMOD`, or `m` ending a cluster of python's
/// options that take no value: `-um MOD`, `-Bm MOD`) when `program` is a python. Round
/// twenty-eight's review: `python3 -um tools.strip` left `tools/strip.py` the agent's.
fn python_module<'a>(
    program: &[u8],
    word: &[u8],
    words: &mut impl Iterator<Item = &'a Vec<u8>>,
) -> Option<Vec<u8>> {
    const FLAGS: &[u8] = b"bBdEiIOPqRsSuvx";
    if interpreter(program) != Some(&PYTHON) {
        return None;
    }
    let cluster = word
        .strip_prefix(b"-")
        .filter(|_| !word.starts_with(b"--"))?;
    let at = cluster.iter().position(|b| !FLAGS.contains(b))?;
    match cluster[at..].strip_prefix(b"m")? {
        b"" => words.next().cloned(),
        attached => Some(attached.to_vec()),
    }
}

/// The words [`interpreted_words`] gives for python's `-m a.b.c`, read from the
/// working directory (the first entry of `sys.path` then): `./a/b/c` as a module (`.py`,
/// or a package's `__init__.py` and `__main__.py`) and `./a`, `./a/b` as packages (their
/// `__init__.py`, imported first). Round twenty-five's review: `git fmt` =
/// `!python3 -m tools.fmt` held neither `tools/fmt.py` nor `tools/__init__.py`, and the
/// agent's edit of either ran.
fn python_module_words(module: &[u8]) -> Vec<(Vec<u8>, &'static Interpreter)> {
    if !may_name_a_file(module) || module.contains(&b'/') {
        return Vec::new();
    }
    let parts: Vec<&[u8]> = module.split(|b| *b == b'.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Vec::new();
    }
    (1..=parts.len())
        .map(|n| {
            let word = [&b"./"[..], &parts[..n].join(&b'/')].concat();
            let kind = if n == parts.len() {
                &PYTHON_MODULE
            } else {
                &PYTHON_PACKAGE
            };
            (word, kind)
        })
        .collect()
}

/// What an interpreter looks for when it is given a word that is not a file.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Interpreter {
    /// The files it runs (or reads for what to run) in the directory the word names.
    pub(super) in_dir: &'static [&'static [u8]],
    /// The suffixes it tries on the word before the directory (node: `tools/fmt.js`
    /// before `tools/fmt/`).
    pub(super) suffixes: &'static [&'static [u8]],
}

/// Python's: a directory's `__main__` (compiled too).
const PYTHON: Interpreter = Interpreter {
    in_dir: &[b"__main__.py", b"__main__.pyc"],
    suffixes: &[],
};

/// Python's for the module `-m` names: `X.py`, or the package `X/`'s `__init__.py`
/// and `__main__.py`.
const PYTHON_MODULE: Interpreter = Interpreter {
    in_dir: &[b"__init__.py", b"__main__.py", b"__main__.pyc"],
    suffixes: &[b".py"],
};

/// Python's for a package on the way to the module `-m` names: its `__init__.py`.
const PYTHON_PACKAGE: Interpreter = Interpreter {
    in_dir: &[b"__init__.py"],
    suffixes: &[],
};

/// node's (CommonJS resolution of the main module: `X.js`, `X.json`, `X.node`, then
/// `X/package.json`'s `main`, `X/index.js`, `X/index.node`).
const NODE: Interpreter = Interpreter {
    in_dir: &[b"index.js", b"package.json", b"index.node"],
    suffixes: &[b".js", b".node"],
};

/// The interpreter named `program`, if it is one that runs a directory it is given.
fn interpreter(program: &[u8]) -> Option<&'static Interpreter> {
    let name = program.rsplit(|b| *b == b'/').next().unwrap_or(program);
    if name.starts_with(b"python") {
        Some(&PYTHON)
    } else if name == b"node" || name == b"nodejs" {
        Some(&NODE)
    } else {
        None
    }
}

/// The words the commands of the config give an interpreter to run (`node tools/fmt`,
/// `python3 tools/fmt`), with the interpreter, read as [`line_words`] reads lines: when
/// such a word names a directory (or nothing yet, for node), the scan holds the entry
/// points it would run there present or not. Held only when present, node's
/// `tools/fmt/index.js` and `package.json` absent at the start, and `tools/fmt.js`
/// beside the directory, were the agent's to add (round twenty-three's Known limits).
pub(super) fn interpreted_entries(text: &[u8]) -> Vec<(Vec<u8>, &'static Interpreter)> {
    fn read(line: &[u8], depth: usize, found: &mut Vec<(Vec<u8>, &'static Interpreter)>) {
        for pair in interpreted_words(&shell_words(line))
            .into_iter()
            .chain(interpreted_words(&shell_tokens(line)))
        {
            if !found.contains(&pair) {
                found.push(pair);
            }
        }
        if depth > 0 {
            for inner in shell_tokens(line)
                .iter()
                .filter(|t| t.iter().any(u8::is_ascii_whitespace))
            {
                read(inner, depth - 1, found);
            }
        }
    }
    let mut found = Vec::new();
    for entry in entries(text).into_iter().filter(runs_a_command) {
        let value = entry.value.strip_prefix(b"!").unwrap_or(&entry.value);
        read(&top_read_as_dot(value), NESTED_LINES, &mut found);
    }
    found
}

/// The files a shell script sources (`. ./tools/lib.sh`, `source tools/lib.sh`): they run
/// as the script does, and a held `tools/hook.sh` sourcing the agent's `tools/lib.sh`
/// ran it all the same (round twenty's Known limits, closed in round twenty-one). Each
/// word after a `.` or `source` that may name a file, read as the other words are (the
/// top spelled `$PWD` read as `.`), with where the shell reads it from: the directory
/// the script runs in, or the script's own when the word starts with it (`$(dirname
/// "$0")`, `${0%/*}`, `BASH_SOURCE`'s, each read as `.`). Comment lines are passed over.
/// A makefile's `include`, `-include` and `sinclude` lines are read so too (round
/// twenty-nine's review: a held `tools/ci.mk`'s `-include tools/local.mk`, absent, was the
/// agent's to make, and the user's `make -f tools/ci.mk` ran its `$(shell …)`).
pub(super) fn sourced_words(script: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    const MAKE_INCLUDES: &[&[u8]] = &[b"include", b"-include", b"sinclude"];
    let mut found: Vec<(Vec<u8>, SourceBase)> = Vec::new();
    for line in script_lines(script) {
        let tokens = shell_tokens(&line);
        // make splits at blanks alone (`$(DEPS)` is one word, and names nothing here).
        let make_words: Vec<Vec<u8>> = line
            .split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        let included = make_words
            .first()
            .filter(|first| MAKE_INCLUDES.contains(&first.as_slice()))
            .map(|_| &make_words[1..])
            .unwrap_or_default();
        let sourced = tokens
            .windows(2)
            .filter(|pair| pair[0] == b"." || pair[0] == b"source")
            .map(|pair| pair[1].clone());
        let mut ssh_configs = Vec::new();
        ssh_config_words(&tokens, NESTED_LINES, &mut ssh_configs);
        for word in included.iter().cloned().chain(sourced).chain(ssh_configs) {
            if let Some(entry) = based(&word)
                && !found.contains(&entry)
            {
                found.push(entry);
            }
        }
    }
    found
}

/// The config files `ssh` (or `scp`, `sftp`) is given by `-F FILE` (`-FFILE`) in
/// `tokens`, and in their quoted lines `depth` levels down (`GIT_SSH_COMMAND='ssh -F
/// ci/ssh_config'`), added to `out`: ssh runs its `ProxyCommand`, `LocalCommand`,
/// `KnownHostsCommand` and `Match exec` as the user, so such a file is code, which no look
/// tells from data (round twenty-nine's review, a ratchet until round thirty's: the
/// agent's `ProxyCommand` in `ci/ssh_config` ran at the user's `git sync`). Read as a
/// sourced file is: held, or held absent when named with a `/`.
fn ssh_config_words(tokens: &[Vec<u8>], depth: usize, out: &mut Vec<Vec<u8>>) {
    const SSH: &[&[u8]] = &[b"ssh", b"scp", b"sftp", b"autossh"];
    let is_ssh = |t: &[u8]| SSH.contains(&t.rsplit(|b| *b == b'/').next().unwrap_or(t));
    // ssh's options that take a value (the next word when not attached).
    const VALUED: &[u8] = b"BbcDEeFIiJLlmOoPpQRSWw";
    if let Some(at) = tokens.iter().position(|t| is_ssh(t)) {
        let mut rest = tokens[at + 1..].iter();
        // Its options, up to the host (what follows is the remote command's).
        while let Some(token) = rest.next() {
            let Some(cluster) = token.strip_prefix(b"-".as_slice()) else {
                break;
            };
            let Some(at) = cluster.iter().position(|b| VALUED.contains(b)) else {
                continue;
            };
            let value = match &cluster[at + 1..] {
                [] => rest.next().cloned(),
                attached => Some(attached.to_vec()),
            };
            if cluster[at] == b'F' {
                out.extend(value);
            }
        }
    }
    if depth > 0 {
        for token in tokens
            .iter()
            .filter(|t| t.iter().any(u8::is_ascii_whitespace))
        {
            let line = match token.iter().position(|b| *b == b'=') {
                Some(eq) if is_assignment(token) => &token[eq + 1..],
                _ => token.as_slice(),
            };
            ssh_config_words(&shell_tokens(line), depth - 1, out);
        }
    }
}

/// The scripts a shell script runs by path, read as [`sourced_words`] reads what it
/// sources: a command's program when it has a `/` (`./tools/other.sh`, `"$(dirname
/// "$0")"/other.sh`), and the file a shell or interpreter is given (`sh tools/other.sh`,
/// `python3 tools/x.py`). A held hook's `sh tools/other.sh` ran the agent's
/// `tools/other.sh` (round twenty-three's Known limits). The scan holds those present at
/// the start (an absent one may be a build's output, `./target/debug/x`, which a
/// placeholder would keep the agent's build from making).
pub(super) fn run_words(script: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    let mut found: Vec<(Vec<u8>, SourceBase)> = Vec::new();
    script_run_words(script, NESTED_LINES, &mut found);
    found
}

/// Every word of a shell script's lines that may name a file, read as the line of a
/// config's command is read ([`line_words`]: quoted lines within, `=` values, words after
/// `cd DIR` or `-C DIR` read there too), with where the shell reads it from. Round
/// twenty-eight's review found a held script's file run by spellings the run words
/// ([`run_words`]) do not follow, one program or syntax at a time (`bash -lc 'sh
/// tools/x.sh'`, `sh -c '. tools/x.sh'`, `xargs sh tools/x.sh`, `strace -o LOG sh …`,
/// `setarch`, `sg -c`, `unshare`, `watch`, `coproc`, `trap '…' EXIT`, a `case` arm,
/// backquotes, `eval '…'`, a function of the script's own that runs `"$@"`,
/// `NODE_OPTIONS='--require ./tools/hook.js'`, `env -C scripts sh x.sh`, `tclsh`): the
/// scan holds each of these words that names a script of the tree when the run starts,
/// whatever the program around it ([`super::scan`]'s `looks_like_a_script`).
/// An absolute word too: the scan holds one only where it lies in the work tree (round
/// twenty-nine's review: a hook naming the user's script by its absolute path, `strace -o
/// LOG sh /home/u/proj/tools/x.sh`, left it the agent's; a system file, `/usr/bin/time`,
/// is not read for words). Nothing past a file's first NUL (an executable's strings are no shell words, and reading its long lines as words
/// took minutes; a shell script with a payload appended, `makeself`'s, keeps its lines).
/// Each line read apart, the words kept once by a set, so the reading stays linear in
/// the script's size.
pub(super) fn script_words(script: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    let script = &script[..script.iter().position(|b| *b == 0).unwrap_or(script.len())];
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    for line in script_lines(script).iter().flat_map(|l| brace_readings(l)) {
        let mut words = Vec::new();
        line_words(&line, NESTED_LINES, &mut words);
        for word in words.into_iter().filter(|w| !w.whole_dir) {
            if let Some(entry) = based(&word.word)
                && seen.insert(entry.clone())
            {
                found.push(entry);
            }
        }
    }
    found
}

/// `line` as the shell reads its words for [`script_words`]: `$'…'` read as `'…'`, and
/// once for each word of a brace expansion (`sh tools/{fmt,lint}.sh`; the first groups
/// without a `$` before them, at most [`MAX_LINE_READINGS`] readings). Round
/// twenty-eight's review found both spellings' `tools/fmt.sh` the agent's.
fn brace_readings(line: &[u8]) -> Vec<Vec<u8>> {
    let mut plain = Vec::with_capacity(line.len());
    let mut bytes = line.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        // `$'…'`, and bash's `$"…"` (a string it translates; round twenty-nine's review).
        if b == b'$' && matches!(bytes.peek(), Some(b'\'' | b'"')) {
            continue;
        }
        plain.push(b);
    }
    // With the groups each reading has had expanded: at most [`MAX_BRACE_GROUPS`], so
    // that a line of many groups costs a bounded number of copies and scans of it.
    let mut readings = vec![(plain, 0)];
    let mut done = Vec::new();
    while let Some((reading, groups)) = readings.pop() {
        let group = (groups < MAX_BRACE_GROUPS)
            .then(|| brace_group(&reading))
            .flatten();
        let Some((open, close)) = group else {
            done.push(reading);
            continue;
        };
        for word in reading[open + 1..close].split(|b| *b == b',') {
            if readings.len() + done.len() >= MAX_LINE_READINGS {
                break;
            }
            let next = [&reading[..open], word, &reading[close + 1..]].concat();
            readings.push((next, groups + 1));
        }
    }
    done
}

/// The most brace groups of one line [`brace_readings`] expands, one after the other
/// (past [`MAX_LINE_READINGS`] readings the later ones would not be read anyway). Round
/// twenty-nine's second review: a 250 KiB line of groups was scanned and copied once per
/// group, 45 s of the setup (debug build) for one script under the scan's byte budget.
const MAX_BRACE_GROUPS: usize = 8;

/// The first `{…,…}` of `line` not after a `$` and holding no `$`, `{` or blank: where
/// its braces are.
fn brace_group(line: &[u8]) -> Option<(usize, usize)> {
    let mut from = 0;
    // The first `}` after the last `{` looked at: the same for every `{` before it, found
    // once (a line of 128 KiB of `{` took 30 s, a scan to its end for each).
    let mut close_at = 0;
    while let Some(open) = line[from..]
        .iter()
        .position(|b| *b == b'{')
        .map(|i| i + from)
    {
        from = open + 1;
        if open > 0 && line[open - 1] == b'$' {
            continue;
        }
        if close_at <= open {
            close_at = open + 1 + line[open + 1..].iter().position(|b| *b == b'}')?;
        }
        let len = close_at - open - 1;
        let inner = &line[open + 1..open + 1 + len];
        let plain = !inner.iter().any(|b| b"${ \t".contains(b));
        if plain && inner.contains(&b',') {
            return Some((open, open + 1 + len));
        }
    }
    None
}

/// The git config a shell script's lines give the git they run or keep for good, as a
/// config text: `git -c KEY=VALUE`, `git config [--add] KEY VALUE` (and `set`),
/// `GIT_CONFIG_KEY_n=KEY GIT_CONFIG_VALUE_n=VALUE`, each `KEY VALUE` pair of a line (a
/// dotted key next to its value), quoted lines read within, `$PWD` and the script's
/// own directory (`$(dirname "$0")`) read as `script_dir`. Round twenty-nine's review:
/// a `core.hooksPath` or an `include.path` set so named a directory or a config file,
/// which no "script" look tells ([`script_words`]), and the agent's hook or
/// `core.fsmonitor` there ran at the user's `git ci`. The scan reads the text as a
/// config of the repository (hooks, includes, commands).
///
/// Round thirty's review: `GIT_CONFIG_KEY_n` and `GIT_CONFIG_VALUE_n` exported on lines
/// of their own, `GIT_CONFIG_PARAMETERS`, and `git --config-env=KEY=NAME` each left
/// `core.hooksPath=ci/gh` unread; they are read as the settings they give.
pub(super) fn script_git_settings(script: &[u8], script_dir: &[u8]) -> Vec<u8> {
    let script = &script[..script.iter().position(|b| *b == 0).unwrap_or(script.len())];
    let script = config_env_read_as_c(script);
    let mut out = Vec::new();
    let mut numbered = NumberedSettings::default();
    for line in script_lines(&script) {
        let line = line_with_script_dir(&line, script_dir);
        for reading in brace_readings(&line) {
            numbered.record(&reading);
            line_git_settings(&reading, NESTED_LINES, &mut out);
        }
    }
    numbered.push_to(&mut out);
    out
}

/// `script` with each `--config-env=KEY=NAME` (or `--config-env KEY=NAME`: git takes
/// `KEY`'s value from the variable `NAME`) spelled `-c KEY=${NAME}`, for the script's
/// variables to be read in.
fn config_env_read_as_c(script: &[u8]) -> Vec<u8> {
    const SPELLINGS: &[&[u8]] = &[b"--config-env=", b"--config-env "];
    let mut out = Vec::with_capacity(script.len());
    let mut i = 0;
    while i < script.len() {
        let rest = &script[i..];
        let Some(spelling) = SPELLINGS.iter().find(|s| rest.starts_with(s)) else {
            out.push(script[i]);
            i += 1;
            continue;
        };
        let arg = &rest[spelling.len()..];
        let end = arg
            .iter()
            .position(|b| b.is_ascii_whitespace() || b";&|()<>`\"'".contains(b))
            .unwrap_or(arg.len());
        let word = &arg[..end];
        let name_at = word.iter().rposition(|b| *b == b'=').map(|eq| eq + 1);
        let is_name =
            |n: &[u8]| !n.is_empty() && n.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
        match name_at {
            Some(at) if at > 1 && is_name(&word[at..]) => {
                let eq = at - 1;
                out.extend_from_slice(b"-c ");
                out.extend_from_slice(&word[..=eq]);
                out.extend_from_slice(b"${");
                out.extend_from_slice(&word[at..]);
                out.push(b'}');
            }
            _ => {
                out.extend_from_slice(spelling);
                out.extend_from_slice(word);
            }
        }
        i += spelling.len() + end;
    }
    out
}

/// [`script_git_settings`] of the command lines of a config text (an alias's `!git -c
/// core.hooksPath=ci/hooks commit`), read at the top of the work tree.
pub(super) fn command_git_settings(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries(text).into_iter().filter(runs_a_command) {
        let line = entry.value.strip_prefix(b"!").unwrap_or(&entry.value);
        let mut numbered = NumberedSettings::default();
        for reading in brace_readings(&top_read_as_dot(line)) {
            numbered.record(&reading);
            line_git_settings(&reading, NESTED_LINES, &mut out);
        }
        numbered.push_to(&mut out);
    }
    out
}

/// `line` with [`SCRIPT_DIR_MARK`] read as `dir`.
fn line_with_script_dir(line: &[u8], dir: &[u8]) -> Vec<u8> {
    spellings_read_as(line, &[(SCRIPT_DIR_MARK, dir)])
}

/// `text` with each of `spellings` (each `(spelling, read as)`) read as it says, in one
/// pass: where several start at a byte, the first listed. Round thirty-two's review: a
/// search from the line's start for each one put in (a line of 1,800 `x=$(dirname
/// "$0") ;` took 10 s of setup in a debug build, and the time grew with the square).
fn spellings_read_as(text: &[u8], spellings: &[(&[u8], &[u8])]) -> Vec<u8> {
    let starts_one = |b: &u8| spellings.iter().any(|(s, _)| s.first() == Some(b));
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let Some(next) = text[i..].iter().position(starts_one) else {
            out.extend_from_slice(&text[i..]);
            break;
        };
        out.extend_from_slice(&text[i..i + next]);
        i += next;
        match spellings.iter().find(|(s, _)| text[i..].starts_with(s)) {
            Some((spelling, read_as)) => {
                out.extend_from_slice(read_as);
                i += spelling.len();
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    out
}

/// The `KEY VALUE` pairs of one shell line ([`script_git_settings`]) added to `out` as
/// config lines; a quoted word with a blank in it read as a line too, `depth` levels down.
fn line_git_settings(line: &[u8], depth: usize, out: &mut Vec<u8>) {
    // The line's own assignments put in (`HP=ci/gh git --config-env=core.hooksPath=HP`).
    // At most a few, each read over the whole line.
    let mut vars = ScriptVars::default();
    // Only those the line uses (`${NAME}`, what `--config-env` becomes, or `$NAME`):
    // round thirty's second review put eight others before `HP=ci/gh` on the line,
    // which hid it.
    // The names found once (round thirty-two's review: a search of the line for each
    // assignment of it grew with the square of its length).
    let used = mentioned_names(line);
    let mentioned = |t: &Vec<u8>| {
        t.iter()
            .position(|b| *b == b'=')
            .is_some_and(|eq| used.contains(&t[..eq]))
    };
    let tokens = shell_tokens(line);
    let assignments = tokens
        .into_iter()
        .filter(|t| is_assignment(t) && mentioned(t));
    for token in assignments.take(MAX_LINE_ASSIGNMENTS) {
        if let Some(eq) = token.iter().position(|b| *b == b'=') {
            let value = &token[eq + 1..];
            if !value.is_empty() && !value.iter().any(|b| b"$`".contains(b)) {
                vars.add(&token[..eq], value);
            }
        }
    }
    for reading in vars.substitute(line) {
        let tokens = shell_tokens(&reading);
        for at in 0..tokens.len() {
            if let Some((key, value)) = setting_at(&tokens, at) {
                push_setting(out, &key, value);
            }
        }
        if depth > 0 {
            // A quoted line, and `GIT_CONFIG_PARAMETERS`' `'KEY'='VALUE'` list.
            let inner = tokens.iter().filter_map(|t| {
                t.strip_prefix(b"GIT_CONFIG_PARAMETERS=".as_slice()).or(t
                    .iter()
                    .any(u8::is_ascii_whitespace)
                    .then_some(t.as_slice()))
            });
            for inner in inner {
                line_git_settings(inner, depth - 1, out);
            }
        }
    }
}

/// Most assignments of one line [`line_git_settings`] puts in.
const MAX_LINE_ASSIGNMENTS: usize = 64;

/// Most pairs [`NumberedSettings`] makes of one number's keys and values; past it, each
/// value of that number is read as the value of each of [`FALLBACK_KEYS`] instead.
const MAX_NUMBERED_PAIRS: usize = 256;

/// What a numbered value is read as when its number has too many keys and values to
/// pair ([`MAX_NUMBERED_PAIRS`]): a directory of hooks, an included config, a command.
const FALLBACK_KEYS: &[&[u8]] = &[b"core.hooksPath", b"include.path", b"core.fsmonitor"];

/// The `GIT_CONFIG_KEY_n=KEY` and `GIT_CONFIG_VALUE_n=VALUE` of a script's lines, paired
/// by `n` across lines (`export GIT_CONFIG_KEY_0=core.hooksPath` on a line of its own).
/// No cap drops one: round thirty's second review put 64 settings of no consequence
/// before `GIT_CONFIG_KEY_64=core.hooksPath` (a cap of 64 numbered keys then), which
/// was not read, and the agent's hook ran at the user's `git ci`.
#[derive(Default)]
struct NumberedSettings(std::collections::BTreeMap<Vec<u8>, NumberedPair>);

/// The distinct keys and values one number is given.
#[derive(Default)]
struct NumberedPair {
    keys: std::collections::BTreeSet<Vec<u8>>,
    values: std::collections::BTreeSet<Vec<u8>>,
}

impl NumberedSettings {
    /// Record the numbered keys and values of `line`.
    fn record(&mut self, line: &[u8]) {
        for token in shell_tokens(line) {
            let Some(eq) = token.iter().position(|b| *b == b'=') else {
                continue;
            };
            let (name, value) = (&token[..eq], token[eq + 1..].to_vec());
            let (n, is_key) = match (
                name.strip_prefix(b"GIT_CONFIG_KEY_".as_slice()),
                name.strip_prefix(b"GIT_CONFIG_VALUE_".as_slice()),
            ) {
                (Some(n), _) => (n, true),
                (_, Some(n)) => (n, false),
                _ => continue,
            };
            let pair = self.0.entry(n.to_vec()).or_default();
            let list = if is_key {
                &mut pair.keys
            } else {
                &mut pair.values
            };
            list.insert(value);
        }
    }

    /// Each key with each value of its number, as config lines added to `out`.
    fn push_to(&self, out: &mut Vec<u8>) {
        for pair in self.0.values() {
            let fallback: std::collections::BTreeSet<Vec<u8>>;
            let keys = if pair.keys.len().saturating_mul(pair.values.len()) <= MAX_NUMBERED_PAIRS {
                &pair.keys
            } else {
                fallback = FALLBACK_KEYS.iter().map(|k| k.to_vec()).collect();
                &fallback
            };
            for key in keys {
                for value in &pair.values {
                    let tokens = [[key.as_slice(), b"=", value].concat()];
                    if let Some((key, value)) = setting_at(&tokens, 0) {
                        push_setting(out, &key, value);
                    }
                }
            }
        }
    }
}

/// The setting the token at `at` makes, when it is one: `KEY=VALUE` (`git -c`), `KEY`
/// then `VALUE` (`git config`) (`GIT_CONFIG_KEY_n`: [`NumberedSettings`]);
/// `GIT_CONFIG_GLOBAL=FILE` (and `_SYSTEM`, `GIT_CONFIG`) an include of `FILE`.
/// Not a value the shell builds, an option or a test's operator: those name nothing here.
fn setting_at(tokens: &[Vec<u8>], at: usize) -> Option<(ConfigKey<'_>, &[u8])> {
    let token = &tokens[at];
    let next = || tokens.get(at + 1).map(Vec::as_slice);
    // A config file git reads whole: as if included.
    const CONFIG_FILES: &[&[u8]] = &[b"GIT_CONFIG_GLOBAL", b"GIT_CONFIG_SYSTEM", b"GIT_CONFIG"];
    let (key, value) = match token.iter().position(|b| *b == b'=') {
        Some(eq) if CONFIG_FILES.contains(&&token[..eq]) => {
            (&b"include.path"[..], &token[eq + 1..])
        }
        Some(eq) if config_key(&token[..eq]).is_some() => (&token[..eq], &token[eq + 1..]),
        None => (token.as_slice(), next()?),
        Some(_) => return None,
    };
    let names = value.iter().any(u8::is_ascii_alphanumeric)
        && !value.starts_with(b"-")
        && !value.iter().any(|b| b"$`".contains(b));
    Some((config_key(key).filter(|_| names)?, value))
}

/// `key = "value"` in its section, as a config text's lines, added to `out`.
fn push_setting(out: &mut Vec<u8>, key: &ConfigKey<'_>, value: &[u8]) {
    let quoted: Vec<u8> = value
        .iter()
        .filter(|b| **b != b'\n')
        .flat_map(|b| match b {
            b'"' | b'\\' => vec![b'\\', *b],
            _ => vec![*b],
        })
        .collect();
    let sub = match key.sub {
        Some(sub) => [b" \"", sub, b"\""].concat(),
        None => Vec::new(),
    };
    let line = [
        b"[",
        key.section,
        &sub,
        b"]\n\t",
        key.name,
        b" = \"",
        &quoted,
        b"\"\n",
    ];
    out.extend_from_slice(&line.concat());
}

/// A git config key (`core.hooksPath`, `includeIf.gitdir:x/.path`) in its parts.
struct ConfigKey<'a> {
    section: &'a [u8],
    sub: Option<&'a [u8]>,
    name: &'a [u8],
}

/// `word` as a git config key: a section of letters, digits and `-`, a name starting
/// with a letter; `None` for any other word.
fn config_key(word: &[u8]) -> Option<ConfigKey<'_>> {
    let first = word.iter().position(|b| *b == b'.')?;
    let last = word.iter().rposition(|b| *b == b'.')?;
    let (section, name) = (&word[..first], &word[last + 1..]);
    let plain = |s: &[u8]| s.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-');
    let sub = (first != last).then(|| &word[first + 1..last]);
    let good = !section.is_empty()
        && plain(section)
        && name.first().is_some_and(u8::is_ascii_alphabetic)
        && plain(name)
        && sub.is_none_or(|s| !s.contains(&b'"') && !s.contains(&b'\n'));
    good.then_some(ConfigKey { section, sub, name })
}

/// The directories of the tree a shell script runs every file of, named literally:
/// `run-parts DIR`, `find DIR … -exec sh {}` (or piped to `xargs`, or to a loop that runs
/// its variable), and the directory of a glob in a line of a `for` loop when the script
/// runs a loop's variable (`for f in tools/checks/*.sh; do sh "$f"; done`, one line or
/// several) or hands it to `xargs` (`ls tools/checks/*.sh | xargs -n1 sh`). Round
/// twenty-eight's review: each left `tools/checks/a.sh` the agent's to rewrite, and a new
/// `tools/checks/b.sh` its to add, and the user's `git fmt` ran them (only a directory a
/// list names, `"$d"`, was held whole). Held whole by the scan when there. Relative
/// words only; nothing past a NUL (as [`script_words`]).
pub(super) fn script_dirs_run_whole(script: &[u8]) -> Vec<(Vec<u8>, SourceBase)> {
    let script = &script[..script.iter().position(|b| *b == 0).unwrap_or(script.len())];
    let lines = script_lines(script);
    let joined = lines.join(&b';');
    let runs_a_loop = loop_runs(&shell_words(&joined), &joined);
    let mut found = Vec::new();
    for line in &lines {
        line_dirs_run_whole(line, runs_a_loop, NESTED_LINES, &mut found);
    }
    found
}

/// [`script_dirs_run_whole`] of one line, added to `found`; a quoted word with a blank
/// in it read as a line of its own (`bash -c 'for f in tools/checks/*.sh; do …'`),
/// `depth` levels down.
fn line_dirs_run_whole(
    line: &[u8],
    runs_a_loop: bool,
    depth: usize,
    found: &mut Vec<(Vec<u8>, SourceBase)>,
) {
    let words = shell_words(line);
    let line_loop = loop_runs(&words, line);
    let runs_a_loop = runs_a_loop || line_loop;
    let globs_run = (runs_a_loop && words.iter().any(|w| w == b"for"))
        || words.iter().any(|w| program_name(w) == b"xargs");
    let tokens = marked_shell_tokens(line);
    let globs = tokens
        .iter()
        .filter(|(_, quoted)| globs_run && !quoted)
        .filter_map(|(w, _)| glob_dir(w));
    // A `find` whose `-exec` runs no shell, interpreter or found file (`find src -exec rm
    // {} \;`) holds nothing: [`dirs_run_whole`] of an alias's line holds it for any.
    let finds = words.iter().any(|w| program_name(w) == b"find");
    let runners = if !finds || runs_dir(b"find", &words) || line_loop {
        dirs_run_whole(&words, line)
    } else {
        Vec::new()
    };
    for dir in runners.into_iter().chain(globs) {
        if !dir.starts_with(b"/") {
            push_based(&dir, found);
        }
    }
    if depth > 0 {
        for (inner, _) in tokens
            .iter()
            .filter(|(t, _)| t.iter().any(u8::is_ascii_whitespace))
        {
            line_dirs_run_whole(inner, runs_a_loop, depth - 1, found);
        }
    }
}

/// [`run_words`] of `script`, added to `found`; a shell's `-c` string read as a script
/// of its own, `depth` levels down.
fn script_run_words(script: &[u8], depth: usize, found: &mut Vec<(Vec<u8>, SourceBase)>) {
    // The directory the script has entered (`cd scripts`, `pushd scripts`), from the
    // top: what it runs by a relative name is offered there too (round twenty-seven's
    // review: `cd scripts && sh x.sh` left `scripts/x.sh` the agent's to write). Kept
    // to the script's end (a subshell's `cd` too): a word offered where it does not run
    // is held for nothing.
    let mut entered: Option<Vec<u8>> = None;
    substituted_script_files(script, found);
    // The script's functions that run their arguments (`run() { "$@"; }`).
    let mut wrappers = Wrappers::default();
    for line in script_lines(script) {
        let pipelines = pipelines(&line);
        for pipeline in &pipelines {
            piped_into_a_shell(pipeline, found);
        }
        for command in pipelines.into_iter().flatten() {
            wrappers.read(&command);
            let command = called_through_a_wrapper(&command, &wrappers.names).unwrap_or(command);
            let mark = found.len();
            if let Some(dir) = command_run_words(&command, depth, found) {
                entered = match (&entered, dir) {
                    (_, None) => None,
                    (_, Some(dir)) if dir.starts_with(SCRIPT_DIR_MARK) => Some(dir),
                    (Some(base), Some(dir)) => Some([base.as_slice(), b"/", &dir].concat()),
                    (None, Some(dir)) => Some(dir),
                };
            }
            let Some(dir) = &entered else {
                continue;
            };
            let moved: Vec<Vec<u8>> = found[mark..]
                .iter()
                .filter(|(w, base)| *base == SourceBase::WorkingDir && !w.starts_with(b"/"))
                .map(|(w, _)| [dir.as_slice(), b"/", w].concat())
                .collect();
            for word in moved {
                push_based(&word, found);
            }
        }
    }
}

/// The files a pipeline feeds a shell as its script (`cat tools/local | sh`, `cat a b |
/// bash -s`): the operands of a `cat` whose output a shell of no operand reads, added
/// to `found`. Round thirty's second review: a held script's `[ -f tools/local ] && cat
/// tools/local | sh`, `tools/local` absent at the start, left it the agent's to make
/// (a read list is held only when it is there), and the user's `git ci` ran it.
fn piped_into_a_shell(pipeline: &[Vec<u8>], found: &mut Vec<(Vec<u8>, SourceBase)>) {
    const SHELLS: &[&[u8]] = &[b"sh", b"bash", b"dash", b"zsh", b"ksh"];
    let (Some(first), Some(last)) = (pipeline.first(), pipeline.last()) else {
        return;
    };
    let last = shell_tokens(last);
    let fed = pipeline.len() > 1
        && last.split_first().is_some_and(|(program, rest)| {
            SHELLS.contains(&program_name(program)) && rest.iter().all(|w| w.starts_with(b"-"))
        });
    let first = shell_tokens(first);
    let Some((program, operands)) = first.split_first() else {
        return;
    };
    if fed && program_name(program) == b"cat" {
        for operand in operands.iter().filter(|w| !w.starts_with(b"-")) {
            push_based(operand, found);
        }
    }
}

/// The name of the function `command` starts to define (`run() {`, `function run {`) and
/// the words of its body on the same command (as [`pipelines`] splits it: `run() {
/// "$@"`).
fn function_defined(command: &[u8]) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    let (name, after) = match command.windows(2).position(|w| w == b"()") {
        Some(at) => {
            let name = command[..at].split(u8::is_ascii_whitespace).next_back()?;
            (name.to_vec(), shell_tokens(&command[at + 2..]))
        }
        None => {
            let tokens = shell_tokens(command);
            let at = tokens.iter().position(|t| t == b"function")?;
            (tokens.get(at + 1)?.clone(), tokens[at + 2..].to_vec())
        }
    };
    let body = match after.split_first() {
        Some((open, body)) if open == b"{" || open == b"(" => body.to_vec(),
        _ => return None,
    };
    let plain = !name.is_empty()
        && name
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(b));
    plain.then_some((name, body))
}

/// Whether a command of a function's body (its words) runs the function's arguments:
/// `"$@"` (or `${@}`) where the command starts, after `exec`, `command`, `time` or
/// `eval`.
fn runs_its_arguments(tokens: &[Vec<u8>]) -> bool {
    const BEFORE: &[&[u8]] = &[b"exec", b"command", b"time", b"eval"];
    let words = &tokens[command_start(tokens)..];
    let at = words
        .iter()
        .position(|w| !BEFORE.contains(&w.as_slice()))
        .unwrap_or(words.len());
    matches!(words.get(at).map(Vec::as_slice), Some(b"$@" | b"${@}"))
}

/// The functions of a script that run their arguments ([`runs_its_arguments`] anywhere in
/// their body), read command by command: the one being defined and the depth of its
/// braces. Round thirty-one's review (round thirty's ratchet): a held script's `run() {
/// "$@"; }` then `run sh tools/local`, `tools/local` absent at the start, left it the
/// agent's to make, and the user's `git ci` ran it; round thirty-two's review found a body
/// of several lines, or one that first says what it runs (`echo "+ $*" >&2; "$@"`), unread.
#[derive(Default)]
struct Wrappers {
    /// Their names.
    names: Vec<Vec<u8>>,
    /// The function whose body is being read, and its braces still open.
    open: Option<(Vec<u8>, i64)>,
}

impl Wrappers {
    /// Reads `command`, the next command of the script.
    fn read(&mut self, command: &[u8]) {
        let tokens = match function_defined(command) {
            Some((name, body)) => {
                self.open = Some((name, 1));
                body
            }
            None => shell_tokens(command),
        };
        let Some((name, depth)) = &mut self.open else {
            return;
        };
        if runs_its_arguments(&tokens) && !self.names.contains(name) {
            self.names.push(name.clone());
        }
        for token in &tokens {
            match token.as_slice() {
                b"{" => *depth += 1,
                b"}" => *depth -= 1,
                _ => {}
            }
        }
        if *depth <= 0 {
            self.open = None;
        }
    }
}

/// `command` without its program when that is one of `wrappers` (functions that run their
/// arguments, [`Wrappers`]): the command the call runs, its words
/// quoted again.
fn called_through_a_wrapper(command: &[u8], wrappers: &[Vec<u8>]) -> Option<Vec<u8>> {
    let tokens = shell_tokens(command);
    let (first, rest) = tokens.split_first()?;
    if !wrappers.contains(first) || rest.is_empty() {
        return None;
    }
    let words: Vec<Vec<u8>> = rest
        .iter()
        .map(
            |w| match w.iter().any(|b| b.is_ascii_whitespace()) && !w.contains(&b'\'') {
                true => [b"'".as_slice(), w, b"'"].concat(),
                false => w.clone(),
            },
        )
        .collect();
    Some(words.join(&b' '))
}

/// The files a command line is the text of (`eval "$(cat tools/local)"`, `sh -c "$(cat
/// tools/local)"`, `$(< FILE)`, backquotes): of `script` that is one command substitution
/// of `cat FILE…` or `< FILE`, each file, added to `found`. Round thirty-one's review:
/// `tools/local` absent at the start so run was the agent's to make, and the user's `git
/// ci` ran it.
fn substituted_script_files(script: &[u8], found: &mut Vec<(Vec<u8>, SourceBase)>) {
    let script = script.trim_ascii();
    let inner = script
        .strip_prefix(b"$(")
        .and_then(|s| s.strip_suffix(b")"))
        .or_else(|| script.strip_prefix(b"`").and_then(|s| s.strip_suffix(b"`")));
    let Some(inner) = inner.map(<[u8]>::trim_ascii) else {
        return;
    };
    if let Some(file) = inner.strip_prefix(b"<") {
        if let Some(word) = shell_tokens(file).first() {
            push_based(word, found);
        }
        return;
    }
    let tokens = shell_tokens(inner);
    if let Some((program, operands)) = tokens.split_first()
        && program_name(program) == b"cat"
    {
        for operand in operands.iter().filter(|w| !w.starts_with(b"-")) {
            push_based(operand, found);
        }
    }
}

/// The directory a `cd DIR` or `pushd DIR` command enters (`Some(None)`: one that cannot
/// be read, absolute or built by the shell, so the words after it are not moved).
fn entered_by(name: &[u8], mut words: impl Iterator<Item = Vec<u8>>) -> Option<Option<Vec<u8>>> {
    if name != b"cd" && name != b"pushd" {
        return None;
    }
    let dir = words.find(|w| !w.starts_with(b"-"))?;
    // The script's own directory (`cd "$(dirname "$0")"`, `cd "$(dirname "$0")/.."`):
    // what it runs after is read from there (round twenty-nine's second review: its
    // `sh ./local.sh` was read from the top alone, and the agent's `tools/local.sh` ran).
    if let Some(rest) = dir.strip_prefix(SCRIPT_DIR_MARK) {
        let plain = !rest.iter().any(|b| b"$`~\x01".contains(b));
        return Some((plain && (rest.is_empty() || rest.starts_with(b"/"))).then_some(dir));
    }
    let literal = !dir.starts_with(b"/") && !dir.iter().any(|b| b"$`~\x01".contains(b));
    Some((literal && may_name_a_file(&dir)).then_some(dir))
}

/// [`script_run_words`] of one command: the files it runs added to `found`; the
/// directory it enters, if it is a `cd` ([`entered_by`]).
fn command_run_words(
    command: &[u8],
    depth: usize,
    found: &mut Vec<(Vec<u8>, SourceBase)>,
) -> Option<Option<Vec<u8>>> {
    const SHELLS: &[&[u8]] = &[
        b"sh", b"bash", b"dash", b"zsh", b"ksh", b"perl", b"ruby", b"node", b"nodejs",
    ];
    let mut tokens = shell_tokens(command);
    // A function's body (`f() { sh tools/x.sh; }`: the tokens lose the `()`).
    if command.windows(2).any(|w| w == b"()")
        && let Some(at) = tokens.iter().position(|w| w == b"{")
    {
        tokens.drain(..=at);
    }
    // `BASH_ENV=tools/env.sh bash …` (or exported before): every bash that runs
    // a script sources it first (round twenty-seven's review).
    for value in tokens.iter().filter_map(|t| t.strip_prefix(b"BASH_ENV=")) {
        push_based(value, found);
    }
    // A variable git (or another program) runs as a command line, set for a command or
    // exported (`GIT_SSH_COMMAND="ssh -o ProxyCommand='sh ci/proxy'" git fetch`): its value
    // read as a line of the script. Round thirty-one's review: `ci/proxy`, absent at the
    // start, was the agent's to make, and the user's `git sync` ran it.
    if depth > 0 {
        for token in tokens.iter().filter(|t| is_assignment(t)) {
            let Some(eq) = token.iter().position(|b| *b == b'=') else {
                continue;
            };
            if COMMAND_VARIABLES.contains(&&token[..eq]) {
                script_run_words(&token[eq + 1..], depth - 1, found);
            }
        }
    }
    let at = wrapped_program_at(&tokens);
    // `script -qec 'sh tools/x.sh' /dev/null`, `su -c '…' bob`, `flock LOCK -c
    // '…'` (a wrapper, its string past its operand): a command string.
    let inner = tokens
        .iter()
        .take(at + 1)
        .enumerate()
        .find_map(|(i, word)| command_string(program_name(word), tokens[i + 1..].iter()));
    if depth > 0
        && let Some(inner) = inner
    {
        script_run_words(inner, depth - 1, found);
        return None;
    }
    // `eval` is a wrapper there too (`eval sh tools/x.sh`); its words are one line.
    let from = match at.checked_sub(1) {
        Some(before) if program_name(&tokens[before]) == b"eval" => before,
        _ => at.min(tokens.len()),
    };
    if depth > 0
        && let Some(inner) = inner_command_line(&tokens[from..])
    {
        script_run_words(&inner, depth - 1, found);
        return None;
    }
    let mut words = tokens.iter().skip(at);
    let program = words.next()?;
    let program = default_program(program).unwrap_or(program);
    let name = program_name(program);
    if let Some(dir) = entered_by(name, words.clone().cloned()) {
        return Some(dir);
    }
    let shell = SHELLS.contains(&name) || name.starts_with(b"python");
    if shell && depth > 0 && name != b"perl" && name != b"ruby" && !name.starts_with(b"node") {
        let mut rest = words.clone();
        if rest.any(|w| w == b"-c")
            && let Some(inner) = rest.next()
        {
            script_run_words(inner, depth - 1, found);
            return None;
        }
    }
    // A shell named by its path (`/bin/sh tools/x.sh`) runs its file all the
    // same: until round twenty-six's second review only `/bin/sh` was held.
    let by_path = program.contains(&b'/').then_some(program);
    let files = if shell {
        interpreted_files(name, words)
    } else {
        program_files(name, words)
    };
    for word in by_path.into_iter().map(<[u8]>::to_vec).chain(files) {
        push_based(&word, found);
    }
    None
}

/// Variables whose value a program runs as a command line (git's, ssh's, the editor and
/// pager programs run): [`command_run_words`] reads their values as lines.
const COMMAND_VARIABLES: &[&[u8]] = &[
    b"GIT_SSH_COMMAND",
    b"GIT_SSH",
    b"GIT_EDITOR",
    b"GIT_SEQUENCE_EDITOR",
    b"GIT_PAGER",
    b"GIT_EXTERNAL_DIFF",
    b"GIT_ASKPASS",
    b"SSH_ASKPASS",
    b"EDITOR",
    b"VISUAL",
    b"PAGER",
];

/// The command line a command (`tokens`, from its program) runs of its own words, when
/// it is one that does: `eval WORDS`, `trap 'LINE' SIGNALS`, `xargs [OPTIONS] PROGRAM
/// ARGS` (the program and its arguments), a shell's `-c` in a cluster of options (`bash
/// -lc 'LINE'`, `sh -ec 'LINE'`). Round thirty's review: a file without a script's
/// suffix (`tools/local`) so run, absent at the start, was the agent's to make (the any
/// word reader moves aside absent names with a script's suffix only), and the user's
/// `git ci` ran it.
fn inner_command_line(tokens: &[Vec<u8>]) -> Option<Vec<u8>> {
    const SHELLS: &[&[u8]] = &[b"sh", b"bash", b"dash", b"zsh", b"ksh"];
    let (program, rest) = tokens.split_first()?;
    let name = program_name(program);
    let line = |words: &[Vec<u8>]| Some(words.join(&b' ')).filter(|l| !l.is_empty());
    match name {
        b"eval" => line(rest),
        b"trap" => rest.iter().find(|w| !w.starts_with(b"-")).cloned(),
        b"xargs" => line(&rest[xargs_options_len(rest)..]),
        _ if SHELLS.contains(&name) => {
            let cluster = |w: &&Vec<u8>| {
                w.len() > 2 && w.starts_with(b"-") && w[1] != b'-' && w.contains(&b'c')
            };
            let at = rest
                .iter()
                .take_while(|w| w.starts_with(b"-"))
                .position(|w| cluster(&w))?;
            rest.get(at + 1).cloned()
        }
        _ => None,
    }
}

/// How many of `words` (after `xargs`) are its options and their values.
fn xargs_options_len(words: &[Vec<u8>]) -> usize {
    let mut at = 0;
    while let Some(word) = words.get(at) {
        if !word.starts_with(b"-") {
            break;
        }
        let separate = XARGS_LONG_VALUE_OPTIONS.contains(&word.as_slice())
            || XARGS_VALUE_OPTIONS.contains(&word.as_slice());
        at += if separate { 2 } else { 1 };
    }
    at.min(words.len())
}

/// The files a program that reads its own program from one runs (`make -f tools/ci.mk`,
/// `awk -f tools/x.awk`, `sed -f tools/x.sed`, whose `e` command runs a shell): `-f FILE`,
/// `-fFILE`, `--file[=]FILE` (make's `--makefile` too). Until round twenty-seven's review
/// the file was the agent's to write, and its recipe ran at the user's `git fmt`.
fn program_files<'a>(name: &[u8], mut words: impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    const PROGRAM_FILE_READERS: &[&[u8]] = &[
        b"make", b"gmake", b"awk", b"gawk", b"mawk", b"nawk", b"sed", b"gsed",
    ];
    if !PROGRAM_FILE_READERS.contains(&name) {
        return Vec::new();
    }
    let mut files = Vec::new();
    while let Some(word) = words.next() {
        let long = [&b"--file"[..], b"--makefile"]
            .iter()
            .find_map(|o| word.strip_prefix(*o));
        let value = match (long, word.strip_prefix(b"-f")) {
            (Some(b""), _) | (None, Some(b"")) => words.next().cloned(),
            (Some(rest), _) => rest.strip_prefix(b"=").map(<[u8]>::to_vec),
            (None, Some(attached)) if !word.starts_with(b"--") => Some(attached.to_vec()),
            _ => None,
        };
        files.extend(value);
    }
    files
}

/// `word` read as [`based`] reads it, added to `found` once.
fn push_based(word: &[u8], found: &mut Vec<(Vec<u8>, SourceBase)>) {
    if let Some(entry) = based(word)
        && !found.contains(&entry)
    {
        found.push(entry);
    }
}

/// The command string of a program that runs one through a shell, `name` (`script -c
/// CMD`, `su -c CMD`, `runuser -c CMD`, `flock LOCK -c CMD`; `-c` may end a cluster of short options, as
/// in `script -qec`, or be spelled `--command[=]CMD`), among its `words`.
fn command_string<'a>(
    name: &[u8],
    mut words: impl Iterator<Item = &'a Vec<u8>>,
) -> Option<&'a [u8]> {
    if name == b"env" {
        return split_string(words);
    }
    if [&b"ssh"[..], b"scp", b"sftp"].contains(&name) {
        return ssh_command_option(words);
    }
    if ![&b"script"[..], b"su", b"runuser", b"flock"].contains(&name) {
        return None;
    }
    while let Some(word) = words.next() {
        if let Some(value) = word.strip_prefix(b"--command=") {
            return Some(value);
        }
        let cluster = word.starts_with(b"-") && !word.starts_with(b"--") && word.ends_with(b"c");
        if cluster || word == b"--command" {
            return words.next().map(Vec::as_slice);
        }
    }
    None
}

/// The command line an `-o` option of ssh's (scp's, sftp's) runs among its `words`:
/// `-o ProxyCommand=LINE`, `-oProxyCommand LINE`, `LocalCommand`, `KnownHostsCommand`.
/// Round thirty's second review: a held script's `ssh -o ProxyCommand='sh ci/proxy'`,
/// `ci/proxy` absent at the start, left it the agent's to make, and the user's `git
/// sync` ran it.
fn ssh_command_option<'a>(mut words: impl Iterator<Item = &'a Vec<u8>>) -> Option<&'a [u8]> {
    const KEYS: &[&[u8]] = &[b"proxycommand", b"localcommand", b"knownhostscommand"];
    while let Some(word) = words.next() {
        let option = match word.strip_prefix(b"-o") {
            Some([]) => words.next()?.as_slice(),
            Some(attached) => attached,
            None => continue,
        };
        let at = option
            .iter()
            .position(|b| *b == b'=' || b.is_ascii_whitespace())
            .unwrap_or(option.len());
        if KEYS.iter().any(|k| option[..at].eq_ignore_ascii_case(k)) {
            let value = &option[at..];
            let start = value
                .iter()
                .position(|b| *b != b'=' && !b.is_ascii_whitespace())
                .unwrap_or(value.len());
            return Some(&value[start..]);
        }
    }
    None
}

/// The string `env -S STRING` (`-SSTRING`, `--split-string[=]STRING`) splits into a
/// command line, among `env`'s `words`: `env -S 'sh tools/x.sh'` in a held script ran the
/// agent's edit of `tools/x.sh` (round twenty-six's second review, a ratchet until round
/// twenty-seven's).
fn split_string<'a>(mut words: impl Iterator<Item = &'a Vec<u8>>) -> Option<&'a [u8]> {
    while let Some(word) = words.next() {
        if word == b"-S" || word == b"--split-string" {
            return words.next().map(Vec::as_slice);
        }
        if let Some(value) = word.strip_prefix(b"--split-string=") {
            return Some(value);
        }
        if let Some(value) = word
            .strip_prefix(b"-S")
            .filter(|_| !word.starts_with(b"--"))
        {
            return Some(value);
        }
        if !word.starts_with(b"-") {
            return None;
        }
    }
    None
}

/// The default of a program word spelled `${NAME:-default}` (or `${NAME-default}`): the
/// program run when the variable is unset, which the held scripts' reader took for no
/// program at all (`${CI_SHELL:-sh} tools/x.sh`; round twenty-six's second review, a
/// ratchet until round twenty-seven's).
fn default_program(word: &[u8]) -> Option<&[u8]> {
    let inner = word.strip_prefix(b"${")?.strip_suffix(b"}")?;
    let is_name = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let end = inner.iter().position(|b| !is_name(b))?;
    let rest = &inner[end..];
    let default = rest
        .strip_prefix(b":-")
        .or_else(|| rest.strip_prefix(b"-"))?;
    (end > 0 && !default.is_empty() && !default.iter().any(|b| b"${}`".contains(b)))
        .then_some(default)
}

/// The files a shell or interpreter runs among its `words` (those after its name): the
/// first word that is neither an option nor an option's value (`bash -o pipefail
/// tools/x.sh`: round twenty-six's second review found `pipefail` taken for the file, and
/// the agent's edit of `tools/x.sh` ran), and before it the modules node preloads and ruby
/// requires (`node -r ./tools/hook.js tools/fmt.js` runs the hook first: passed over as
/// an option's value, it was the agent's to write; the lead's last pass of round
/// twenty-six). Python's and node's options that take a value are [`VALUE_OPTIONS`].
///
/// Round twenty-seven's review: each as the interpreter completes it (held when there):
/// python's `-m tools.strip` (`tools/strip.py`, the packages' `__init__.py`), node's
/// suffixes and directory (`node tools/fmt` runs `tools/fmt.js`, `-r ./tools/hook` loads
/// `tools/hook.js`), node's `--require=FILE` spelled in one word and the `--env-file`
/// (whose `NODE_OPTIONS` node obeys), and perl's modules (`-Itools -MHook` loads
/// `tools/Hook.pm`) and `-I DIR` spelled apart; each ran the agent's edit before.
fn interpreted_files<'a>(name: &[u8], words: impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    if name.starts_with(b"python") {
        python_files(words)
    } else if name.starts_with(b"node") {
        node_files(words)
    } else if name == b"perl" {
        perl_files(words)
    } else if name == b"ruby" {
        ruby_files(words)
    } else {
        shell_files(words)
    }
}

/// [`interpreted_files`] of a shell: the first word past its options and their values.
fn shell_files<'a>(mut words: impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    const SHELL_VALUE_OPTIONS: &[&[u8]] =
        &[b"-o", b"+o", b"-O", b"+O", b"--rcfile", b"--init-file"];
    while let Some(word) = words.next() {
        if SHELL_VALUE_OPTIONS.contains(&word.as_slice()) {
            words.next();
        } else if !word.starts_with(b"-") && !word.starts_with(b"+") {
            return vec![word.clone()];
        }
    }
    Vec::new()
}

/// [`interpreted_files`] of python: its file, or the module `-m` names as python finds
/// it from the working directory ([`python_module_words`]: `tools/strip.py`, the
/// package's `__init__.py` and `__main__.py`, each package's `__init__.py` on the way).
fn python_files<'a>(mut words: impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    while let Some(word) = words.next() {
        if let Some(module) = python_module(b"python", word, &mut words) {
            // Not the module's word itself: a package's directory is no file it runs.
            return python_module_words(&module)
                .into_iter()
                .flat_map(|(word, kind)| completions(&word, kind).into_iter().skip(1))
                .collect();
        }
        if word == b"-c" {
            break;
        }
        if VALUE_OPTIONS.contains(&word.as_slice()) {
            words.next();
        } else if !word.starts_with(b"-") {
            return vec![word.clone()];
        }
    }
    Vec::new()
}

/// [`interpreted_files`] of node: the modules it preloads (`-r`, `--require`, `--import`,
/// `--loader`, spelled apart or with `=`), its `--env-file`, and its main file, each as
/// node completes it ([`NODE`]'s suffixes and directory).
fn node_files<'a>(mut words: impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    const NODE_PRELOADS: &[&[u8]] = &[
        b"-r",
        b"--require",
        b"--import",
        b"--loader",
        b"--experimental-loader",
    ];
    let mut files = Vec::new();
    while let Some(word) = words.next() {
        if [&b"-e"[..], b"-p", b"--eval", b"--print"].contains(&word.as_slice()) {
            break;
        }
        let (option, attached) = match word.iter().position(|b| *b == b'=') {
            Some(at) if word.starts_with(b"--") => (&word[..at], Some(word[at + 1..].to_vec())),
            _ => (word.as_slice(), None),
        };
        let preload = NODE_PRELOADS.contains(&option);
        if preload || option == b"--env-file" {
            let value = attached.or_else(|| words.next().cloned());
            match value {
                Some(value) if preload => files.extend(completions(&value, &NODE)),
                Some(value) => files.push(value),
                None => {}
            }
        } else if VALUE_OPTIONS.contains(&word.as_slice()) {
            words.next();
        } else if !word.starts_with(b"-") {
            files.extend(completions(word, &NODE));
            break;
        }
    }
    files
}

/// An option's value: attached to the option (`-Itools`), else the next word (`-I tools`).
fn attached_or_next<'a>(
    attached: &[u8],
    words: &mut impl Iterator<Item = &'a Vec<u8>>,
) -> Option<Vec<u8>> {
    if attached.is_empty() {
        words.next().cloned()
    } else {
        Some(attached.to_vec())
    }
}

/// [`interpreted_files`] of perl: its file, and the modules it loads (`-MMod`, `-mMod`)
/// in each directory `-I` puts first (`-Itools -MHook`: `tools/Hook.pm`).
fn perl_files<'a>(mut words: impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    let (mut dirs, mut modules, mut files) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(word) = words.next() {
        if word == b"-e" || word == b"-E" {
            break;
        }
        if let Some(dir) = word.strip_prefix(b"-I") {
            let dir = attached_or_next(dir, &mut words);
            dirs.extend(dir);
        } else if let Some(module) = word.strip_prefix(b"-M").or(word.strip_prefix(b"-m")) {
            let module = module.strip_prefix(b"-").unwrap_or(module);
            let module = module.split(|b| *b == b'=').next().unwrap_or(module);
            modules.push(
                module
                    .split(|b| *b == b':')
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(&b'/'),
            );
        } else if !word.starts_with(b"-") {
            files.push(word.clone());
            break;
        }
    }
    for dir in &dirs {
        for module in &modules {
            files.push([dir.as_slice(), b"/", module, b".pm"].concat());
        }
    }
    files
}

/// [`interpreted_files`] of ruby: the files it requires (`-r FILE`, `-rFILE`; `.rb`
/// added, also in each `-I` directory), then its file.
fn ruby_files<'a>(mut words: impl Iterator<Item = &'a Vec<u8>>) -> Vec<Vec<u8>> {
    let (mut dirs, mut required, mut files) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(word) = words.next() {
        if word == b"-e" {
            break;
        }
        if let Some(dir) = word.strip_prefix(b"-I") {
            let dir = attached_or_next(dir, &mut words);
            dirs.extend(dir);
        } else if let Some(file) = word.strip_prefix(b"-r") {
            let file = attached_or_next(file, &mut words);
            required.extend(file);
        } else if !word.starts_with(b"-") {
            files.push(word.clone());
            break;
        }
    }
    for file in required {
        for dir in &dirs {
            files.push([dir.as_slice(), b"/", &file, b".rb"].concat());
        }
        files.push([file.as_slice(), b".rb"].concat());
        files.push(file);
    }
    files
}

/// `word` and what `interpreter` tries for it: the word with each suffix, and the files
/// it runs in the directory the word names.
fn completions(word: &[u8], interpreter: &Interpreter) -> Vec<Vec<u8>> {
    // A name with a suffix is run as it is (`tools/fmt.js`).
    let name = program_name(word);
    if name.contains(&b'.') && name != b"." && name != b".." {
        return vec![word.to_vec()];
    }
    std::iter::once(word.to_vec())
        .chain(interpreter.suffixes.iter().map(|s| [word, s].concat()))
        .chain(interpreter.in_dir.iter().map(|m| [word, b"/", m].concat()))
        .collect()
}

/// Whether a word before a command's program leaves the program to come: a keyword
/// (`if`, `then`, `do`, `{`), a function's head (`f()`), a variable set for the command,
/// a program that runs the rest of its words (`exec`, `command`, `env`, `nice`,
/// `timeout`, `nohup`, `setsid`, `stdbuf`, `sudo`, …) or an option or number of one
/// (`nice -n 5`, `timeout 30`). Round twenty-five's review: `env sh tools/x.sh`,
/// `timeout 30 sh …`, `nice -n 5 sh …` and `f() { sh …; }` in a held script ran the
/// agent's edit of `tools/x.sh`.
fn runs_the_next_word(word: &[u8]) -> bool {
    const PREFIXES: &[&[u8]] = &[
        b"if", b"then", b"else", b"elif", b"do", b"while", b"until", b"!", b"exec", b"command",
        b"nohup", b"time", b"{", b"(", b"()", b"env", b"nice", b"timeout", b"stdbuf", b"ionice",
        b"setsid", b"chrt", b"taskset", b"sudo", b"doas", b"builtin", b"eval", b"flock",
        b"setpriv", b"prlimit",
    ];
    // Named by its path too (`/usr/bin/env sh tools/x.sh`; round twenty-six's second
    // review), and `eval sh tools/x.sh` runs its words as a command.
    PREFIXES.contains(&program_name(word))
        || is_assignment(word)
        || word.ends_with(b"()")
        || word.starts_with(b"-")
        || word.first().is_some_and(u8::is_ascii_digit)
}

/// Where a command's program is among its `tokens`: past the words that leave it to come
/// ([`runs_the_next_word`]), and past the value of a wrapper's option that takes one
/// ([`WRAPPER_VALUE_OPTIONS`]: `env -u X`, `timeout -s KILL`, `ionice -c idle`, `sudo -u
/// bob`), which ended the reading until round twenty-six: the value was taken for the
/// program and `env -u X sh tools/x.sh` ran the agent's edit of `tools/x.sh`.
fn wrapped_program_at(tokens: &[Vec<u8>]) -> usize {
    let mut wrapper: &[u8] = b"";
    // A wrapper's operand before its command (`flock FILE`, `taskset MASK`, `chrt
    // PRIORITY`) still to come: `taskset f sh tools/x.sh` took `f` for the program
    // (round twenty-six's second review).
    let mut operand = false;
    let mut at = 0;
    while let Some(word) = tokens.get(at) {
        if operand && !word.starts_with(b"-") {
            operand = false;
            at += 1;
            continue;
        }
        if !runs_the_next_word(word) {
            break;
        }
        let takes_value = WRAPPER_VALUE_OPTIONS
            .iter()
            .any(|(name, options)| *name == wrapper && options.contains(&word.as_slice()));
        if !word.starts_with(b"-") && !word.first().is_some_and(u8::is_ascii_digit) {
            wrapper = program_name(word);
            operand = WRAPPER_OPERAND.contains(&wrapper);
        }
        at += if takes_value { 2 } else { 1 };
    }
    at
}

/// The wrappers that take one operand before the command they run.
const WRAPPER_OPERAND: &[&[u8]] = &[b"flock", b"taskset", b"chrt"];

/// The options of [`runs_the_next_word`]'s wrappers that take the next word as their
/// value (spelled apart; `-uX` and `--unset=X` are one word).
const WRAPPER_VALUE_OPTIONS: &[(&[u8], &[&[u8]])] = &[
    (b"env", &[b"-u", b"--unset", b"-C", b"--chdir"]),
    (b"timeout", &[b"-s", b"--signal", b"-k", b"--kill-after"]),
    (b"nice", &[b"-n", b"--adjustment"]),
    (
        b"ionice",
        &[
            b"-c",
            b"--class",
            b"-n",
            b"--classdata",
            b"-p",
            b"--pid",
            b"-P",
            b"--pgid",
            b"-u",
            b"--uid",
        ],
    ),
    (
        b"stdbuf",
        &[b"-i", b"-o", b"-e", b"--input", b"--output", b"--error"],
    ),
    (
        b"sudo",
        &[
            b"-u",
            b"--user",
            b"-g",
            b"--group",
            b"-C",
            b"--close-from",
            b"-D",
            b"--chdir",
            b"-h",
            b"--host",
            b"-p",
            b"--prompt",
            b"-r",
            b"--role",
            b"-t",
            b"--type",
            b"-U",
            b"--other-user",
            b"-T",
            b"--command-timeout",
            b"-R",
            b"--chroot",
        ],
    ),
    (b"doas", &[b"-u", b"-C"]),
    (b"exec", &[b"-a"]),
    // GNU time (`/usr/bin/time -o LOG`; round twenty-seven's review).
    (b"time", &[b"-o", b"--output", b"-f", b"--format"]),
    (b"prlimit", &[b"-p", b"--pid"]),
    (
        b"flock",
        &[
            b"-w",
            b"--wait",
            b"--timeout",
            b"-E",
            b"--conflict-exit-code",
        ],
    ),
    (
        b"setpriv",
        &[
            b"--reuid",
            b"--regid",
            b"--euid",
            b"--egid",
            b"--ruid",
            b"--rgid",
            b"--groups",
            b"--inh-caps",
            b"--ambient-caps",
            b"--bounding-set",
            b"--securebits",
            b"--pdeathsig",
            b"--selinux-label",
            b"--apparmor-profile",
            b"--landlock-access",
            b"--landlock-rule",
        ],
    ),
];

/// `NAME=value` (a variable set for the command).
fn is_assignment(word: &[u8]) -> bool {
    word.iter().position(|b| *b == b'=').is_some_and(|at| {
        at > 0
            && word[..at]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'_')
    })
}

/// Stands for a script's directory in its lines until their words are split
/// ([`script_lines`]).
const SCRIPT_DIR_MARK: &[u8] = b"\x01SCRIPT_DIR\x01";

/// The lines of a shell script but its comment lines, the top spelled `$PWD` read as
/// `.`, and its own directory (`$(dirname "$0")`, `${0%/*}`, `BASH_SOURCE`'s) as
/// [`SCRIPT_DIR_MARK`].
fn script_lines(script: &[u8]) -> Vec<Vec<u8>> {
    const SCRIPT_DIR: &[&[u8]] = &[
        b"$(dirname \"$0\")",
        b"$(dirname $0)",
        b"$(dirname -- \"$0\")",
        b"$(dirname \"${BASH_SOURCE[0]}\")",
        b"$(dirname \"$BASH_SOURCE\")",
        b"${0%/*}",
        b"${BASH_SOURCE%/*}",
        b"${BASH_SOURCE[0]%/*}",
        b"$(dirname \"$(realpath \"$0\")\")",
        b"$(dirname \"$(readlink -f \"$0\")\")",
        b"$(dirname \"$(realpath \"${BASH_SOURCE[0]}\")\")",
        b"$(dirname \"$(readlink -f \"${BASH_SOURCE[0]}\")\")",
    ];
    let script_dir: Vec<(&[u8], &[u8])> =
        SCRIPT_DIR.iter().map(|s| (*s, SCRIPT_DIR_MARK)).collect();
    let mut lines = Vec::new();
    let mut vars = ScriptVars::default();
    // The directories the script entered (`cd tools`), newest last: a line after one reads
    // its `$PWD` at the top and there too (round thirty-two's review closed round
    // thirty-one's ratchet: `cd tools` then `PATH=$PWD/bin:$PATH` left `tools/bin` the
    // agent's). Which of them a line runs in cannot be told for sure (`if`, a subshell):
    // both are read, a directory held for nothing at worst.
    let mut entered: Vec<Vec<u8>> = Vec::new();
    for raw in continued_lines(script) {
        if raw.trim_ascii_start().starts_with(b"#") {
            continue;
        }
        let at_top = top_read_as_dot(&raw);
        let elsewhere = entered
            .iter()
            .map(|dir| top_read_as(&raw, dir))
            .filter(|reading| *reading != at_top)
            .collect::<Vec<_>>();
        for (n, mut line) in std::iter::once(at_top).chain(elsewhere).enumerate() {
            if line.contains(&b'$') {
                line = spellings_read_as(&line, &script_dir);
            }
            if line.windows(2).any(|w| w == b"$(") {
                line = cd_pwd_read_as_dir(&line);
            }
            if n == 0 {
                enter(&mut entered, &line);
            }
            // Read again once its own assignments are known (`L=x; xargs -a "$L" sh`),
            // and a `for` loop's words (`for s in fmt lint; do sh tools/$s.sh; done`:
            // round twenty-eight's review found `tools/fmt.sh` the agent's).
            for line in vars.substitute(&line) {
                vars.record(&line);
                vars.record_loop(&line);
            }
            lines.extend(vars.substitute(&line));
        }
    }
    lines
}

/// Most directories [`script_lines`] reads a line's `$PWD` in besides the top.
const MAX_ENTERED: usize = 4;

/// The directory a line of a script enters by `cd DIR` or `pushd DIR` (a literal relative
/// one, or the script's own, [`SCRIPT_DIR_MARK`]), added to `entered` (joined to the last
/// one entered): at most [`MAX_ENTERED`], the newest kept.
fn enter(entered: &mut Vec<Vec<u8>>, line: &[u8]) {
    for command in pipelines(line).into_iter().flatten() {
        let tokens = shell_tokens(&command);
        let words = &tokens[command_start(&tokens)..];
        let Some((first, rest)) = words.split_first() else {
            continue;
        };
        if first != b"cd" && first != b"pushd" {
            continue;
        }
        let Some(dir) = rest.iter().find(|w| !w.starts_with(b"-")) else {
            continue;
        };
        let own = dir.starts_with(SCRIPT_DIR_MARK);
        let plain = may_name_a_file(dir)
            && !dir.starts_with(b"/")
            && !dir.starts_with(b"~")
            && !dir.split(|b| *b == b'/').any(|part| part == b"..");
        let dir = match entered.last() {
            _ if own => dir.clone(),
            Some(last) if plain => [last.as_slice(), b"/", dir].concat(),
            None if plain => dir.clone(),
            _ => continue,
        };
        if !entered.contains(&dir) {
            entered.push(dir);
        }
        if entered.len() > MAX_ENTERED {
            entered.remove(0);
        }
    }
}

/// The lines of a shell text, one ending in a backslash joined to the next as the shell
/// joins them (not a comment line's). Round thirty-one's review: a held script's `export
/// PATH=\` with `"$PWD/tools/bin:$PATH"` on the next line was read as two lines, neither
/// setting `PATH`, and the agent's `tools/bin/fmt-local` ran at the user's `git ci`.
fn continued_lines(text: &[u8]) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    let mut joined: Option<Vec<u8>> = None;
    for part in text.split(|b| *b == b'\n') {
        let mut line = joined.take().unwrap_or_default();
        line.extend_from_slice(part);
        let comment = line.trim_ascii_start().starts_with(b"#");
        if !comment && line.ends_with(b"\\") && !line.ends_with(b"\\\\") {
            line.pop();
            joined = Some(line);
            continue;
        }
        lines.push(line);
    }
    lines.extend(joined);
    lines
}

/// `line` with each `$(cd DIR && pwd)` (`; pwd`, `pwd -P`, `cd -- DIR`, `CDPATH= cd`,
/// `cd DIR >/dev/null 2>&1`) read as `DIR`, where `DIR` is the script's own directory
/// ([`SCRIPT_DIR_MARK`]) or a literal relative one: the directory it prints. Round
/// thirty-one's review: `DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"` then
/// `PATH="$DIR/bin:$PATH"`, the commonest spelling of a script's own directory, left
/// `tools/bin` the agent's, and its `fmt-local` ran at the user's `git ci`.
fn cd_pwd_read_as_dir(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.windows(2).position(|w| w == b"$(") {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(close) = after.iter().position(|b| *b == b')') else {
            out.extend_from_slice(&rest[at..]);
            return out;
        };
        match cd_pwd_dir(&after[..close]) {
            Some(dir) => out.extend_from_slice(&dir),
            None => out.extend_from_slice(&rest[at..at + 2 + close + 1]),
        }
        rest = &after[close + 1..];
    }
    out.extend_from_slice(rest);
    out
}

/// The directory `inner` (a command substitution's text) prints when it is `cd DIR &&
/// pwd` ([`cd_pwd_read_as_dir`]).
fn cd_pwd_dir(inner: &[u8]) -> Option<Vec<u8>> {
    let split = inner
        .windows(2)
        .rposition(|w| w == b"&&")
        .map(|at| (at, 2))
        .or_else(|| inner.iter().rposition(|b| *b == b';').map(|at| (at, 1)))?;
    let (cd, pwd) = (&inner[..split.0], inner[split.0 + split.1..].trim_ascii());
    if !matches!(pwd, b"pwd" | b"pwd -P" | b"pwd -L") {
        return None;
    }
    let tokens = shell_tokens(cd);
    let mut words = tokens.iter().skip_while(|t| is_assignment(t));
    if words.next()? != b"cd" {
        return None;
    }
    let dir = words.find(|w| !w.starts_with(b"-"))?;
    let plain =
        !dir.is_empty() && !dir.starts_with(b"/") && !dir.iter().any(|b| b"$`~".contains(b));
    (plain && (dir.starts_with(SCRIPT_DIR_MARK) || may_name_a_file(dir))).then(|| dir.clone())
}

/// The simple assignments of a shell script met so far (`L=tools/checks.list`, `export
/// L=…`), each variable with every value it was given: a held `tools/ci.sh` of `L=
/// tools/checks.list` then `xargs -n1 -a "$L" sh` left the list and the scripts it names
/// the agent's, the scan reading the script's words and not what its variables hold
/// (round twenty-four's second review, a ratchet until round twenty-five). A value that
/// still holds a `$` or a backquote once the variables known are put in is not known.
#[derive(Default)]
struct ScriptVars {
    /// Each variable with its values, in the order they were first met.
    vars: Vec<(Vec<u8>, Vec<Vec<u8>>)>,
    /// Where each variable is in `vars`.
    index: std::collections::HashMap<Vec<u8>, usize>,
}

/// Most readings of one line [`ScriptVars::substitute`] makes (a variable given several
/// values is read with each).
const MAX_LINE_READINGS: usize = 16;

impl ScriptVars {
    /// `line` with each known variable (`$NAME`, `${NAME}`) put in, once per value. Only
    /// the variables the line names are looked at, in the order they were met: round
    /// thirty-two's review found each line read against every variable known, and a
    /// script of 3,000 `vN=x` lines took 94 s of setup (6,000 more than 300 s). A value
    /// holds no `$` ([`ScriptVars::record`]), so every reading names what the line does.
    fn substitute(&self, line: &[u8]) -> Vec<Vec<u8>> {
        let mut named: Vec<usize> = mentioned_names(line)
            .into_iter()
            .filter_map(|name| self.index.get(name).copied())
            .collect();
        named.sort_unstable();
        let mut readings = vec![line.to_vec()];
        for (name, values) in named.into_iter().map(|at| &self.vars[at]) {
            let mut next = Vec::new();
            for reading in &readings {
                for value in values {
                    if next.len() < MAX_LINE_READINGS {
                        next.push(put_in(reading, name, value));
                    }
                }
            }
            readings = next;
        }
        readings
    }

    /// Record the words a `for NAME in WORDS` of `line` gives its variable, when each is
    /// literal (no `$`, no backquote, no glob: a glob's loop is read whole, its
    /// directory held, [`script_dirs_run_whole`], which the variable put in would hide).
    fn record_loop(&mut self, line: &[u8]) {
        for command in pipelines(line).into_iter().flatten() {
            let tokens = shell_tokens(&command);
            let Some(at) = tokens
                .windows(3)
                .position(|w| w[0] == b"for" && w[2] == b"in" && !w[1].is_empty())
            else {
                continue;
            };
            let name = &tokens[at + 1];
            if !name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                continue;
            }
            let values = &tokens[at + 3..];
            let end = values
                .iter()
                .position(|v| v == b"do")
                .unwrap_or(values.len());
            let literal = |v: &Vec<u8>| !v.iter().any(|b| b"$`".contains(b)) && !is_glob(v);
            if values[..end].iter().all(literal) {
                for value in &values[..end] {
                    self.add(name, value);
                }
            }
        }
    }

    /// `value` recorded for the variable `name`, once; past [`MAX_LINE_READINGS`] values
    /// none (a line is read with that many at most, the first).
    fn add(&mut self, name: &[u8], value: &[u8]) {
        match self.index.get(name) {
            Some(&at) => {
                let values = &mut self.vars[at].1;
                if values.len() < MAX_LINE_READINGS && !values.iter().any(|v| v == value) {
                    values.push(value.to_vec());
                }
            }
            None => {
                self.index.insert(name.to_vec(), self.vars.len());
                self.vars.push((name.to_vec(), vec![value.to_vec()]));
            }
        }
    }

    /// Record the assignments of `line`'s commands that do nothing else.
    fn record(&mut self, line: &[u8]) {
        const DECLARE: &[&[u8]] = &[b"export", b"readonly", b"local", b"declare", b"typeset"];
        for command in pipelines(line).into_iter().flatten() {
            let tokens = shell_tokens(&command);
            let words: Vec<&Vec<u8>> = tokens
                .iter()
                .skip_while(|w| DECLARE.contains(&w.as_slice()))
                .collect();
            if words.is_empty() || !words.iter().all(|w| is_assignment(w)) {
                continue;
            }
            for word in words {
                let Some(at) = word.iter().position(|b| *b == b'=') else {
                    continue;
                };
                let (name, value) = (&word[..at], &word[at + 1..]);
                if value.is_empty() || value.contains(&b'$') || value.contains(&b'`') {
                    continue;
                }
                self.add(name, value);
            }
        }
    }
}

/// The lines of a shell script that only assign variables ([`ScriptVars`]), each ended
/// by a newline: what a script that sources it knows of its variables.
pub(super) fn assignment_lines(script: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in script.split(|b| *b == b'\n') {
        let mut vars = ScriptVars::default();
        vars.record(line);
        if !vars.vars.is_empty() {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

/// The variables `line` names (`$NAME` not followed by more of a name, or `${NAME}`), as
/// [`put_in`] puts them in, in one pass.
fn mentioned_names(line: &[u8]) -> std::collections::HashSet<&[u8]> {
    let is_name = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let mut names = std::collections::HashSet::new();
    let mut i = 0;
    while let Some(at) = line[i..].iter().position(|b| *b == b'$') {
        let start = i + at + 1;
        let braced = line.get(start) == Some(&b'{');
        let from = start + usize::from(braced);
        let len = line[from..].iter().take_while(|b| is_name(b)).count();
        let closed = !braced || line.get(from + len) == Some(&b'}');
        if len > 0 && closed {
            names.insert(&line[from..from + len]);
        }
        i = from + len;
    }
    names
}

/// `line` with `$NAME` (not followed by more of a name) and `${NAME}` read as `value`.
fn put_in(line: &[u8], name: &[u8], value: &[u8]) -> Vec<u8> {
    let braced = [b"${".as_slice(), name, b"}"].concat();
    let plain = [b"$".as_slice(), name].concat();
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let rest = &line[i..];
        if rest.starts_with(&braced) {
            out.extend_from_slice(value);
            i += braced.len();
        } else if rest.starts_with(&plain)
            && !rest
                .get(plain.len())
                .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            out.extend_from_slice(value);
            i += plain.len();
        } else {
            out.push(line[i]);
            i += 1;
        }
    }
    out
}

/// A word of [`script_lines`] with where the shell reads it from, when it may name a
/// file.
fn based(word: &[u8]) -> Option<(Vec<u8>, SourceBase)> {
    let (word, base) = match word.strip_prefix(SCRIPT_DIR_MARK) {
        Some(rest) => ([b".", rest].concat(), SourceBase::ScriptDir),
        None => (word.to_vec(), SourceBase::WorkingDir),
    };
    (may_name_a_file(&word) && !word.contains(&1)).then_some((word, base))
}

/// Where the shell reads a sourced file's word from ([`sourced_words`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum SourceBase {
    /// The directory the script runs in (git's: the top of the work tree).
    WorkingDir,
    /// The script's own directory.
    ScriptDir,
}

/// The file `main` of a `package.json` names (`None`: none, or not JSON): node runs it
/// when the directory is given.
pub(super) fn package_main(text: &[u8]) -> Option<Vec<u8>> {
    let value: serde_json::Value = serde_json::from_slice(text).ok()?;
    let main = value.get("main")?.as_str()?.as_bytes();
    may_name_a_file(main).then(|| main.to_vec())
}

/// The programs whose `-C` takes its directory in the same word too (`env -Ctools`,
/// `make -Ctools`, `tar -Cdir`): attacking round nineteen's `-C DIR` rule, `!env -Ctools
/// ./fmt.sh` held nothing (round twenty's review). Other programs' `-CX` is left alone
/// (`grep -C3`, `ls -CF` enter nothing).
const ATTACHED_C_PROGRAMS: &[&[u8]] = &[b"env", b"make", b"gmake", b"tar", b"bsdtar"];

/// The directory `word` enters (`cd DIR`, `pushd DIR`, `-C DIR`, `--chdir[=]DIR` and its
/// kin `--directory` and `--cwd`, and an attached `-CDIR` of one of
/// [`ATTACHED_C_PROGRAMS`]), taking it from `rest` when it is the next word; `program` is
/// the last word before it that was not an option.
fn entered_dir<'a>(
    word: &[u8],
    program: &[u8],
    rest: &mut impl Iterator<Item = &'a Vec<u8>>,
) -> Option<Vec<u8>> {
    const LONG: [&[u8]; 3] = [b"--chdir", b"--directory", b"--cwd"];
    if word == b"cd" || word == b"pushd" {
        return rest.find(|w| !w.starts_with(b"-")).cloned();
    }
    if word == b"-C" || LONG.contains(&word) {
        return rest.next().cloned();
    }
    for long in LONG {
        if let Some(dir) = word.strip_prefix(long).and_then(|w| w.strip_prefix(b"=")) {
            return Some(dir.to_vec());
        }
    }
    let program = program.rsplit(|b| *b == b'/').next().unwrap_or(program);
    word.strip_prefix(b"-C")
        .filter(|dir| !dir.is_empty() && ATTACHED_C_PROGRAMS.contains(&program))
        .map(<[u8]>::to_vec)
}

/// `line` split where a shell would split it outside quotes (blanks and operators), the
/// quotes and backslashes taken off as the shell takes them: `sh 'tools/strip it.sh'` and
/// `sh tools/strip\ it.sh` give `tools/strip it.sh`, `tools/f\mt.sh` gives `tools/fmt.sh`
/// (a backslash in double quotes escapes only `$`, `` ` ``, `"`, `\` and a line break).
fn shell_tokens(line: &[u8]) -> Vec<Vec<u8>> {
    marked_shell_tokens(line)
        .into_iter()
        .map(|(w, _)| w)
        .collect()
}

/// [`shell_tokens`], each with whether a glob character of it was quoted or escaped
/// (`-name '*.sh'`: a pattern for the program, which the shell does not expand).
fn marked_shell_tokens(line: &[u8]) -> Vec<(Vec<u8>, bool)> {
    let mut words = Vec::new();
    let mut word = Vec::new();
    let mut quoted_glob = false;
    let mut quote: Option<u8> = None;
    let mut bytes = line.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(b'"') if b == b'\\' => match bytes.peek() {
                Some(&next) if b"$`\"\\\n".contains(&next) => {
                    bytes.next();
                    if next != b'\n' {
                        word.push(next);
                    }
                }
                _ => word.push(b),
            },
            Some(_) => {
                quoted_glob |= GLOB.contains(&b);
                word.push(b);
            }
            None if b == b'\\' => match bytes.next() {
                Some(b'\n') | None => {}
                Some(next) => {
                    quoted_glob |= GLOB.contains(&next);
                    word.push(next);
                }
            },
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if b.is_ascii_whitespace() || b";&|()<>`".contains(&b) => {
                if !word.is_empty() {
                    words.push((std::mem::take(&mut word), quoted_glob));
                }
                quoted_glob = false;
            }
            None => word.push(b),
        }
    }
    if !word.is_empty() {
        words.push((word, quoted_glob));
    }
    words
}

fn runs_a_command(entry: &ConfigEntry) -> bool {
    COMMAND_KEYS.iter().any(|(section, keys)| {
        entry.section == *section
            && keys
                .iter()
                .any(|k| *k == b"*" || entry.key.eq_ignore_ascii_case(k))
    })
}

/// `line` split where a shell would split it into words and commands (blanks, `;`, `&`,
/// `|`, parentheses, redirections, backquotes), quotes taken off.
fn shell_words(line: &[u8]) -> Vec<Vec<u8>> {
    line.split(|b| b.is_ascii_whitespace() || b";&|()<>`".contains(b))
        .map(|w| {
            w.iter()
                .copied()
                .filter(|b| *b != b'"' && *b != b'\'')
                .collect::<Vec<u8>>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

fn may_name_a_file(word: &[u8]) -> bool {
    let expands = word.iter().any(|b| b"$%*?[{\\".contains(b));
    let is_url = word.windows(3).any(|w| w == b"://");
    let is_dots = word.iter().all(|b| *b == b'.' || *b == b'/');
    !word.is_empty() && !expands && !is_url && !is_dots
}

/// Every `key = value` of a config text, as git's parser reads it. What git would refuse
/// (a line that is neither a header nor a key) is skipped to its line's end.
fn entries(text: &[u8]) -> Vec<ConfigEntry> {
    let mut section = Vec::new();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(&c) = text.get(i) {
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'[' {
            let header = &text[i + 1..];
            let end = header
                .iter()
                .position(|b| matches!(b, b']' | b'\n'))
                .unwrap_or(header.len());
            let name_end = header[..end]
                .iter()
                .position(|b| matches!(b, b' ' | b'\t' | b'"' | b'.'))
                .unwrap_or(end);
            section = header[..name_end].to_ascii_lowercase();
            i += end + 2;
        } else if c.is_ascii_alphabetic() {
            let start = i;
            while text
                .get(i)
                .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'-')
            {
                i += 1;
            }
            let key = text[start..i].to_vec();
            while matches!(text.get(i), Some(b' ' | b'\t')) {
                i += 1;
            }
            if text.get(i) != Some(&b'=') {
                continue;
            }
            let (value, next) = config_value(text, i + 1);
            i = next;
            found.push(ConfigEntry {
                section: section.clone(),
                key,
                value,
            });
        } else {
            // A comment, or what git would refuse: the rest of the line.
            i += text[i..]
                .iter()
                .position(|b| *b == b'\n')
                .unwrap_or(text.len() - i);
        }
    }
    found
}

/// The value starting at `text[i]` (after its `=`), as git's `parse_value` reads it, and
/// where reading goes on; an invalid escape ends it there.
fn config_value(text: &[u8], mut i: usize) -> (Vec<u8>, usize) {
    let mut value = Vec::new();
    let mut quoted = false;
    let mut spaces = 0;
    while let Some(&c) = text.get(i) {
        i += 1;
        match c {
            b'\n' => break,
            b';' | b'#' if !quoted => {
                i += text[i..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .unwrap_or(text.len() - i);
                break;
            }
            b' ' | b'\t' if !quoted => {
                spaces += 1;
                continue;
            }
            _ => {}
        }
        if spaces > 0 && !value.is_empty() {
            value.resize(value.len() + spaces, b' ');
        }
        spaces = 0;
        match c {
            b'\\' => {
                let Some(&escaped) = text.get(i) else { break };
                i += 1;
                match escaped {
                    b'\n' => {}
                    b't' => value.push(b'\t'),
                    b'n' => value.push(b'\n'),
                    b'b' => value.push(8),
                    b'\\' | b'"' => value.push(escaped),
                    _ => break,
                }
            }
            b'"' => quoted = !quoted,
            _ => value.push(c),
        }
    }
    (value, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrappers_option_value_is_not_its_program() {
        for line in [
            "env -u X sh tools/x.sh",
            "timeout -s KILL 5 sh tools/x.sh",
            "nice -n 5 sh tools/x.sh",
            "ionice -c3 sh tools/x.sh",
            "ionice -c idle -n 7 sh tools/x.sh",
            "sudo -u bob env -C . FOO=1 sh tools/x.sh",
            "/bin/sh tools/x.sh",
            "/usr/bin/env sh tools/x.sh",
            "bash -o pipefail tools/x.sh",
            "bash -O extglob +o errexit tools/x.sh",
            "eval sh tools/x.sh",
            "exec -a ci sh tools/x.sh",
            "flock tools sh tools/x.sh",
            "flock -w 5 .git/lock sh tools/x.sh",
            "taskset f sh tools/x.sh",
            "taskset -c 0-1 sh tools/x.sh",
            "chrt -f 10 sh tools/x.sh",
            "setpriv --reuid 1000 --nnp sh tools/x.sh",
        ] {
            let words: Vec<Vec<u8>> = run_words(line.as_bytes())
                .into_iter()
                .map(|(w, _)| w)
                .collect();
            // A program named by its path is held too (`/bin/sh`, `/usr/bin/env`).
            let scripts: Vec<&Vec<u8>> = words.iter().filter(|w| w[0] != b'/').collect();
            assert_eq!(scripts, vec![&b"tools/x.sh".to_vec()], "{line}");
        }
    }

    #[test]
    fn the_modules_node_preloads_are_run_words_with_its_file() {
        for option in ["-r", "--require", "--import"] {
            let line = format!("node {option} ./tools/hook.js --title ci tools/fmt.js");
            let words: Vec<Vec<u8>> = run_words(line.as_bytes())
                .into_iter()
                .map(|(w, _)| w)
                .collect();
            assert_eq!(
                words,
                vec![b"./tools/hook.js".to_vec(), b"tools/fmt.js".to_vec()],
                "{line}"
            );
        }
    }

    #[test]
    fn the_files_an_interpreter_completes_are_run_words() {
        let words = |line: &str| -> Vec<String> {
            run_words(line.as_bytes())
                .into_iter()
                .map(|(w, _)| String::from_utf8(w).unwrap())
                .collect()
        };
        let has = |line: &str, want: &[&str]| {
            let got = words(line);
            for w in want {
                assert!(got.iter().any(|g| g == w), "{line}: {w} not in {got:?}");
            }
        };
        has(
            "python3 -m tools.strip",
            &["./tools/strip.py", "./tools/__init__.py"],
        );
        has("node tools/fmt", &["tools/fmt.js", "tools/fmt/index.js"]);
        has(
            "node -r ./tools/hook tools/fmt.js",
            &["./tools/hook.js", "tools/fmt.js"],
        );
        has(
            "node --require=./tools/hook.js x.js",
            &["./tools/hook.js", "x.js"],
        );
        has(
            "node --env-file tools/ci.env x.js",
            &["tools/ci.env", "x.js"],
        );
        has(
            "BASH_ENV=tools/env.sh bash tools/x.sh",
            &["tools/env.sh", "tools/x.sh"],
        );
        has("export BASH_ENV=tools/env.sh", &["tools/env.sh"]);
        has(
            "perl -Itools -MHook::Sub=x tools/x.pl",
            &["tools/Hook/Sub.pm", "tools/x.pl"],
        );
        has("perl -I tools tools/x.pl", &["tools/x.pl"]);
        has("ruby -Itools -rhook x.rb", &["tools/hook.rb", "x.rb"]);
        has("/usr/bin/time -o log sh tools/x.sh", &["tools/x.sh"]);
        has("prlimit --nofile=1024 sh tools/x.sh", &["tools/x.sh"]);
        has("script -qec 'sh tools/x.sh' /dev/null", &["tools/x.sh"]);
        has("su -c 'sh tools/x.sh' bob", &["tools/x.sh"]);
        has("flock -w 5 tools -c 'sh tools/x.sh'", &["tools/x.sh"]);
        has("env -S 'sh tools/e.sh'", &["tools/e.sh"]);
        has("env -i -S'FOO=1 sh tools/f.sh'", &["tools/f.sh"]);
        has("${CI_SHELL:-sh} tools/g.sh", &["tools/g.sh"]);
        has("${PY-python3} -m tools.h", &["./tools/h.py"]);
        has("cd scripts && sh x.sh", &["scripts/x.sh"]);
        has(
            "cd scripts\n./y.sh\ncd sub; sh z.sh",
            &["scripts/./y.sh", "scripts/sub/z.sh"],
        );
        assert!(!words("cd \"$d\"; sh x.sh").iter().any(|w| w.contains('$')));
        has("make -s -f tools/ci.mk lint", &["tools/ci.mk"]);
        has("make --makefile=tools/b.mk", &["tools/b.mk"]);
        has("awk -ftools/x.awk in", &["tools/x.awk"]);
        has("sed -n --file tools/x.sed in", &["tools/x.sed"]);
        // What is no file the interpreter runs stays out.
        assert_eq!(words("python3 -c 'print(1)'"), Vec::<String>::new());
        assert_eq!(words("node -e 1"), Vec::<String>::new());
        assert_eq!(words("node x.js"), ["x.js"]);
        // Round twenty-eight's review: `m` ending a cluster of flags.
        has("python3 -um tools.strip", &["./tools/strip.py"]);
        has("python3 -BIm tools.s", &["./tools/s.py"]);
        assert!(
            !words("python3 -Wm x.py")
                .iter()
                .any(|w| w.ends_with("m.py"))
        );
    }

    #[test]
    fn the_dirs_a_script_runs_every_file_of_are_read() {
        let dirs = |script: &str| -> Vec<String> {
            script_dirs_run_whole(script.as_bytes())
                .into_iter()
                .map(|(w, _)| String::from_utf8(w).unwrap())
                .collect()
        };
        for script in [
            "run-parts tools/checks",
            "run-parts --regex '.*' tools/checks",
            "for f in tools/checks/*.sh; do sh \"$f\"; done",
            "for f in tools/checks/*.sh; do\n sh \"$f\"\ndone",
            "bash -c 'for f in tools/checks/*.sh; do sh \"$f\"; done'",
            "ls tools/checks/*.sh | xargs -n1 sh",
            "find tools/checks -name '*.sh' -exec sh {} \\;",
        ] {
            assert_eq!(dirs(script), ["tools/checks"], "{script}");
        }
        // A glob no loop runs, or a pattern, holds nothing whole.
        assert_eq!(dirs("rm -f build/*.o"), Vec::<String>::new());
        assert_eq!(
            dirs("for f in src/*.rs; do rustfmt \"$f\"; done"),
            Vec::<String>::new()
        );
        assert_eq!(
            dirs("find src -name '*.rs' -exec rm {} \\;"),
            Vec::<String>::new()
        );
        assert_eq!(
            dirs("find src -name '*.orig' -exec rm {} \\;\nfor f in t/*.sh; do sh \"$f\"; done"),
            ["t"]
        );
        // A listed directory's program found past its options and their values.
        let affixes = |script: &str| variable_affixes(script.as_bytes());
        let whole = (Vec::new(), b"/*".to_vec());
        for script in [
            "run-parts --exit-on-error \"$d\"",
            "run-parts --regex '.*' \"$d\"",
            "find \"$d\" -print0 | xargs -0 -n1 sh",
        ] {
            assert!(affixes(script).contains(&whole), "{script}");
        }
        assert!(runs_its_input(b"find d -type f -exec {} ;"));
        assert!(runs_its_input(b"for f in d/*; do \"$f\"; done"));
    }

    #[test]
    fn the_lines_eval_trap_xargs_and_a_shells_option_cluster_run_are_read() {
        let runs = |script: &str| -> Vec<String> {
            run_words(script.as_bytes())
                .into_iter()
                .map(|(w, _)| String::from_utf8(w).unwrap())
                .collect()
        };
        for script in [
            "eval 'sh tools/local'",
            "eval sh tools/local",
            "trap 'sh tools/local' EXIT",
            "echo | xargs -n 1 -P4 sh tools/local",
            "bash -lc 'sh tools/local'",
            "sh -ec 'sh tools/local'",
        ] {
            assert!(runs(script).contains(&"tools/local".to_owned()), "{script}");
        }
        assert!(runs("trap - EXIT").is_empty());
    }

    #[test]
    fn an_ssh_config_given_by_dash_f_is_read_as_sourced() {
        let sourced = |script: &str| -> Vec<String> {
            sourced_words(script.as_bytes())
                .into_iter()
                .map(|(w, _)| String::from_utf8(w).unwrap())
                .collect()
        };
        assert_eq!(sourced("ssh -F ci/c host true"), ["ci/c"]);
        assert_eq!(sourced("ssh -qFci/c -o X=y host"), ["ci/c"]);
        assert_eq!(
            sourced("GIT_SSH_COMMAND='ssh -i k -F ci/c' git fetch"),
            ["ci/c"]
        );
        assert_eq!(sourced("rsync -e \"/usr/bin/scp -F ci/c\" a b"), ["ci/c"]);
        // The remote command's options are not ssh's.
        assert!(sourced("ssh host grep -F x y").is_empty());
        assert!(sourced("ssh -o F=1 host").is_empty());
    }

    #[test]
    fn the_git_config_a_line_sets_is_read_as_a_config() {
        let hooks = |script: &str| -> Vec<String> {
            let text = script_git_settings(script.as_bytes(), b"/w/tools");
            hooks_paths(&text)
                .into_iter()
                .map(|v| String::from_utf8(v).unwrap())
                .collect()
        };
        assert_eq!(hooks("git -c core.hooksPath=ci/gh commit"), ["ci/gh"]);
        assert_eq!(hooks("git config core.hooksPath ci/gh"), ["ci/gh"]);
        assert_eq!(
            hooks("git config --local core.hookspath 'ci/my hooks'"),
            ["ci/my hooks"]
        );
        assert_eq!(
            hooks("GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=h git x"),
            ["h"]
        );
        assert_eq!(hooks("bash -c 'git config core.hooksPath h'"), ["h"]);
        assert_eq!(
            hooks("git config core.hooksPath \"$(dirname \"$0\")/h\""),
            ["/w/tools/h"]
        );
        // Nothing the shell builds, no option, no operator.
        assert!(hooks("git config core.hooksPath \"$H\"").is_empty());
        assert!(hooks("[ \"$(git config core.hooksPath)\" = x ]").is_empty());
        assert!(hooks("python3 -m tools.strip x").is_empty());
        let text = script_git_settings(b"git -c include.path=$PWD/ci/x status", b"/w");
        assert_eq!(include_paths(&text), [b"./ci/x".to_vec()]);
        let text = script_git_settings(b"GIT_CONFIG_GLOBAL=ci/g git status", b"/w");
        assert_eq!(include_paths(&text), [b"ci/g".to_vec()]);
        let text = command_git_settings(b"[alias]\n\tci = !git -c core.hooksPath=ci/gh commit\n");
        assert_eq!(hooks_paths(&text), [b"ci/gh".to_vec()]);
        // Round thirty's review: other spellings of the same settings.
        assert_eq!(
            hooks("export GIT_CONFIG_KEY_0=core.hooksPath\nexport GIT_CONFIG_VALUE_0=h\ngit x"),
            ["h"]
        );
        assert_eq!(
            hooks("GIT_CONFIG_PARAMETERS=\"'core.hooksPath'='h' 'a.b'='c'\" git x"),
            ["h"]
        );
        assert_eq!(hooks("H=h git --config-env=core.hooksPath=H x"), ["h"]);
        assert_eq!(hooks("H=h\ngit --config-env core.hooksPath=H x"), ["h"]);
        assert!(hooks("git --config-env=core.hooksPath=H x").is_empty());
        // Round thirty's second review: past the caps of round thirty.
        let filler: String = (0..64)
            .map(|i| format!("export GIT_CONFIG_KEY_{i}=x.y{i}\nexport GIT_CONFIG_VALUE_{i}=v\n"))
            .collect();
        let past = format!(
            "{filler}export GIT_CONFIG_KEY_64=core.hooksPath\nexport GIT_CONFIG_VALUE_64=h\n"
        );
        assert_eq!(hooks(&past), ["h"]);
        let many: String = (0..20)
            .map(|i| format!("export GIT_CONFIG_KEY_0=x.y{i}\nexport GIT_CONFIG_VALUE_0=v{i}\n"))
            .collect();
        assert!(hooks(&format!("{many}export GIT_CONFIG_VALUE_0=h\n")).contains(&"h".to_string()));
        assert_eq!(
            hooks("A=1 B=1 C=1 D=1 E=1 F=1 G=1 H=1 HP=h git --config-env=core.hooksPath=HP x"),
            ["h"]
        );
    }

    #[test]
    fn a_scripts_words_name_its_files_wherever_they_stand() {
        let words = |script: &str| -> Vec<String> {
            script_words(script.as_bytes())
                .into_iter()
                .map(|(w, _)| String::from_utf8(w).unwrap())
                .collect()
        };
        let has = |script: &str, want: &str| {
            let got = words(script);
            assert!(
                got.iter().any(|g| g == want),
                "{script}: {want} not in {got:?}"
            );
        };
        has("bash -lc 'sh tools/x.sh'", "tools/x.sh");
        has("sh -c '. tools/x.sh'", "tools/x.sh");
        has("xargs sh tools/x.sh < /dev/null", "tools/x.sh");
        has("run() { \"$@\"; }\nrun sh tools/x.sh", "tools/x.sh");
        has("trap 'sh tools/x.sh' EXIT", "tools/x.sh");
        has("echo `sh tools/x.sh`", "tools/x.sh");
        has(
            "NODE_OPTIONS='--require ./tools/h.js' node x.js",
            "./tools/h.js",
        );
        has("export NODE_OPTIONS=--require=./tools/h.js", "./tools/h.js");
        has("env -C scripts sh x.sh", "scripts/x.sh");
        has("cd scripts && . ./x.sh", "scripts/./x.sh");
        has("sh tools/{fmt,lint}.sh", "tools/lint.sh");
        has("sh tools/{fmt,lint}.sh", "tools/fmt.sh");
        has("sh $'tools/x.sh'", "tools/x.sh");
        has(
            "for s in fmt lint; do sh tools/$s.sh; done",
            "tools/lint.sh",
        );
        has(
            "for s in fmt lint\ndo\n  sh \"tools/$s.sh\"\ndone",
            "tools/fmt.sh",
        );
        assert_eq!(brace_readings(b"echo ${X} {}"), [b"echo ${X} {}".to_vec()]);
        // An absolute word (the scan holds it only in the work tree); nothing of a binary.
        has("strace -o /dev/null sh /w/tools/x.sh", "/w/tools/x.sh");
        assert!(!words("\u{7f}ELF\0 sh tools/x.sh").contains(&"tools/x.sh".to_string()));
        has("sh tools/x.sh\nexit\n\0\u{1}payload", "tools/x.sh");
    }

    #[test]
    fn a_listed_directory_a_program_runs_is_held_whole() {
        let whole = |script: &str| {
            variable_affixes(script.as_bytes()).contains(&(Vec::new(), b"/*".to_vec()))
        };
        assert!(whole("for d in $(cat L); do run-parts \"$d\"; done"));
        assert!(whole(
            "for d in $(cat L); do find \"$d\" -name '*.sh' -exec sh {} \\; ; done"
        ));
        assert!(whole(
            "for d in $(cat L); do find $d -type f -execdir {} \\; ; done"
        ));
        assert!(!whole(
            "for d in $(cat L); do find \"$d\" -name '*.o' -exec rm {} +; done"
        ));
        assert!(!whole("for d in $(cat L); do find \"$d\" -delete; done"));
        assert!(!whole("for d in $(cat L); do cd \"$d\"; done"));
    }

    #[test]
    fn a_lists_entries_are_held_as_the_script_completes_them() {
        let script = b"for d in $(cat L); do for f in \"$d\"/*.sh; do sh \"$f\"; done; done\n\
                       for f in $(cat M); do sh \"${f}.sh\" tools/$f; X=$HOME; done\n";
        let affixes = variable_affixes(script);
        let pairs: Vec<(&[u8], &[u8])> = affixes
            .iter()
            .map(|(a, b)| (a.as_slice(), b.as_slice()))
            .collect();
        assert_eq!(
            pairs,
            vec![(&b""[..], &b"/*.sh"[..]), (b"", b".sh"), (b"tools/", b"")]
        );
        let words = completed_entries(b"tools/checks", &affixes);
        let got: Vec<(&[u8], bool)> = words
            .iter()
            .map(|w| (w.word.as_slice(), w.whole_dir))
            .collect();
        assert_eq!(
            got,
            vec![
                (&b"tools/checks"[..], true),
                (b"tools/checks.sh", false),
                (b"tools/tools/checks", false)
            ]
        );
    }

    #[test]
    fn the_files_a_script_that_runs_its_input_reads_are_lists() {
        let wd = |w: &str| (w.as_bytes().to_vec(), SourceBase::WorkingDir);
        for (script, lists) in [
            (
                "for f in $(cat a.list); do sh \"$f\"; done\n",
                vec![wd("a.list")],
            ),
            (
                "for f in `cat a.list`; do sh $f; done\n",
                vec![wd("a.list")],
            ),
            (
                "while read -r f; do\n  sh \"$f\"\ndone < a.list\n",
                vec![wd("a.list")],
            ),
            (
                "sed 's/^/sh /' a.list | sh\n",
                vec![wd("s/^/sh /"), wd("a.list")],
            ),
            ("awk '{ system(\"sh \" $0) }' a.list\n", vec![wd("a.list")]),
            (
                "grep -v '^#' a.list | while read -r f; do sh \"$f\"; done\n",
                vec![wd("^#"), wd("a.list")],
            ),
            // Nothing runs what it reads.
            (
                "cat a.list | sort > b.list\nrustfmt $(cat a.list)\n",
                vec![],
            ),
        ] {
            assert_eq!(script_read_lists(script.as_bytes()), lists, "{script}");
        }
    }

    #[test]
    fn include_values_are_read_as_git_reads_them() {
        let text = b"[include] path = ../one\n[include]\n\tpath = \"../a;b\" # c\n\
            \tpath = ../co\\\nnt\n\tpath = \"../q\\\"x\"\n\tpath = a  b \n[core] path = no\n";
        assert_eq!(
            include_paths(text),
            [
                b"../one".to_vec(),
                b"../a;b".to_vec(),
                b"../cont".to_vec(),
                b"../q\"x".to_vec(),
                b"a  b".to_vec(),
            ]
        );
    }

    #[test]
    fn the_paths_a_git_config_includes_are_read_from_its_include_sections() {
        let text = b"[core]\n\tpath = not/this\n[include]\n\tpath = ../shared.gitconfig\n\
            [includeIf \"gitdir:~/work/\"]\n    PATH = \"conf/git/x\" ; a comment\n\
            [Include]\npath=plain # trailing\n[user]\n\tname = a\n";
        assert_eq!(
            include_paths(text),
            [
                b"../shared.gitconfig".to_vec(),
                b"conf/git/x".to_vec(),
                b"plain".to_vec()
            ]
        );
    }

    fn words(text: &[u8]) -> Vec<(String, bool)> {
        command_words(text)
            .into_iter()
            .map(|w| (String::from_utf8(w.word).unwrap(), w.is_path))
            .collect()
    }

    #[test]
    fn the_words_of_the_commands_a_config_runs_are_offered_as_files() {
        let text = b"[filter \"strip\"]\n\tclean = sh tools/strip.sh %f\n\tsmudge = cat\n\
            [alias]\n\tst = \"!./scripts/st.sh --file=conf/x && echo $HOME\"\n\
            [core]\n\tfsmonitor = .git/fsmon\n\teditor = 'vim'\n\
            [Diff \"nb\"]\n\tTEXTCONV = python3 -m nbstrip ./nb.py\n\
            [submodule \"s\"]\n\tupdate = !run.sh\n";
        assert_eq!(
            words(text),
            [
                ("sh".into(), false),
                ("tools/strip.sh".into(), true),
                ("cat".into(), false),
                ("./scripts/st.sh".into(), true),
                ("conf/x".into(), true),
                ("echo".into(), false),
                (".git/fsmon".into(), true),
                ("vim".into(), false),
                ("python3".into(), false),
                ("nbstrip".into(), false),
                ("./nb.py".into(), true),
                // The module `-m` runs, offered where python looks for it.
                ("./nbstrip/__init__.py".into(), false),
                ("./nbstrip/__main__.py".into(), false),
                ("./nbstrip/__main__.pyc".into(), false),
                ("./nbstrip.py".into(), false),
                ("run.sh".into(), false),
            ]
        );
    }

    #[test]
    fn the_less_common_keys_that_run_commands_are_read() {
        let text = b"[core]\n\talternateRefsCommand = sh tools/refs.sh\n\
            [gpg \"ssh\"]\n\tdefaultKeyCommand = tools/key.sh\n\
            [imap]\n\ttunnel = tools/tunnel.sh\n[instaweb]\n\thttpd = tools/httpd.sh\n\
            [guitool \"lint\"]\n\tcmd = tools/lint.sh\n\
            [hook \"fmt\"]\n\tcommand = tools/fmt.sh\n\
            [lfs \"customtransfer.x\"]\n\tpath = tools/xfer.sh\n\
            [lfs \"extension.y\"]\n\tclean = tools/c.sh %f\n\tsmudge = tools/s.sh\n\
            [lfs]\n\turl = https://example.invalid/lfs\n";
        let named: Vec<String> = words(text).into_iter().map(|(w, _)| w).collect();
        assert_eq!(
            named,
            [
                "sh",
                "tools/refs.sh",
                "tools/key.sh",
                "tools/tunnel.sh",
                "tools/httpd.sh",
                "tools/lint.sh",
                "tools/fmt.sh",
                "tools/xfer.sh",
                "tools/c.sh",
                "tools/s.sh",
            ]
        );
    }

    #[test]
    fn the_top_spelled_by_rev_parse_and_quoted_blanks_are_read() {
        let text = b"[alias]\n\ta = !sh \\\"$(git rev-parse --show-toplevel)/tools/a.sh\\\"\n\
            \tb = !`git rev-parse --show-cdup`tools/b.sh\n\
            \tc = !sh 'tools/c d.sh' && sh -c 'x/e.sh && f.sh'\n";
        assert_eq!(
            words(text),
            [
                ("sh".into(), false),
                ("./tools/a.sh".into(), true),
                ("./tools/b.sh".into(), true),
                ("tools/c".into(), true),
                ("d.sh".into(), false),
                ("x/e.sh".into(), true),
                ("f.sh".into(), false),
                ("tools/c d.sh".into(), false),
                ("x/e.sh && f.sh".into(), false),
            ]
        );
    }

    #[test]
    fn the_words_after_cd_are_read_in_its_directory() {
        let text = b"[alias]\n\ta = !cd tools && ./fmt.sh && cd ../ci && sh lint.sh\n\
            \tb = \"!(cd -P /abs && x/y) ; pushd web >/dev/null; make -C . lint\"\n";
        assert_eq!(
            words(text),
            [
                ("cd".into(), false),
                ("tools".into(), false),
                ("./fmt.sh".into(), true),
                ("../ci".into(), true),
                ("sh".into(), false),
                ("lint.sh".into(), false),
                ("tools/./fmt.sh".into(), true),
                ("tools/../ci/sh".into(), false),
                ("tools/../ci/lint.sh".into(), false),
                ("/abs".into(), true),
                ("x/y".into(), true),
                ("pushd".into(), false),
                ("web".into(), false),
                ("/dev/null".into(), true),
                ("make".into(), false),
                ("lint".into(), false),
                ("/abs/x/y".into(), true),
                ("/abs/web/make".into(), false),
                ("/abs/web/./lint".into(), false),
            ]
        );
        let text = b"[alias]\n\ta = !env -C tools ./fmt.sh\n\tb = !env --chdir=ci sh lint.sh\n";
        assert_eq!(
            words(text),
            [
                ("env".into(), false),
                ("tools".into(), false),
                ("./fmt.sh".into(), true),
                ("tools/./fmt.sh".into(), true),
                ("ci".into(), false),
                ("sh".into(), false),
                ("lint.sh".into(), false),
                ("ci/sh".into(), false),
                ("ci/lint.sh".into(), false),
            ]
        );
    }

    #[test]
    fn what_round_twenty_found_unread_is_read() {
        let text = b"[alias]\n\ta = !sh tools/my\\\\ fmt.sh && sh tools/e\\\\sc.sh\n\
            \tb = !env -Ctools ./c.sh\n\tb2 = !cd 'my dir' && ./d.sh\n\
            \tc = !sh \\\"$PWD/p.sh\\\" $(pwd)/q.sh ${PWD}/r.sh $PWDX/s.sh\n\
            \td = !PATH=bin:$PATH x && python3 pkg && grep -C3 y && uv --directory u run v.py\n";
        let named: Vec<(String, bool)> = words(text)
            .into_iter()
            .filter(|(w, _)| w.contains('/'))
            .collect();
        for (want, is_path) in [
            ("tools/my fmt.sh", false),
            ("tools/esc.sh", true),
            ("tools/./c.sh", true),
            ("my dir/./d.sh", false),
            ("./p.sh", true),
            ("./q.sh", true),
            ("./r.sh", true),
            ("bin/x", false),
            ("pkg/__main__.py", false),
            ("u/v.py", false),
        ] {
            assert!(named.contains(&(want.into(), is_path)), "{want}: {named:?}");
        }
        assert!(
            !named
                .iter()
                .any(|(w, _)| w.starts_with("3/") || w.contains("s.sh"))
        );
    }

    #[test]
    fn what_round_twenty_one_reads_is_read() {
        let text = b"[alias]\n\ta = !python3 -W ignore -X dev tools/fmt && node -r ./h.js js/app\n";
        let named: Vec<(String, bool)> = words(text)
            .into_iter()
            .filter(|(w, _)| w.contains('/'))
            .collect();
        for want in [
            "tools/fmt/__main__.py",
            "js/app/index.js",
            "js/app/package.json",
        ] {
            assert!(named.contains(&(want.into(), false)), "{want}: {named:?}");
        }
        assert!(
            !named
                .iter()
                .any(|(w, _)| w.starts_with("ignore/") || w.starts_with("dev/")),
            "{named:?}"
        );
    }

    #[test]
    fn a_loop_that_runs_what_find_lists_holds_its_dirs_whole() {
        let dirs = |line: &str| {
            dirs_run_whole(&shell_words(line.as_bytes()), line.as_bytes())
                .into_iter()
                .map(|d| String::from_utf8(d).unwrap())
                .collect::<Vec<_>>()
        };
        for runs in [
            "for f in $(find tools/c -type f); do sh \"$f\"; done",
            "for f in `find tools/c`; do \"${f}\"; done",
            "for s in $(find tools/c); do echo x && $s; done",
            "for f in $(find tools/c); do python3 $f; done",
            "find tools/c -type f | while read f; do sh \"$f\"; done",
            "find tools/c -type f | while read -r f; do sh \"$f\"; done",
            "find tools/c -type f -print0 | while read -r -d '' f; do sh \"$f\"; done",
            "find tools/c | while IFS= read -r f; do \"$f\"; done",
        ] {
            assert_eq!(dirs(runs), ["tools/c"], "{runs}");
        }
        for lists in [
            "for f in $(find src -name x); do rustfmt \"$f\"; done",
            "for f in $(find src); do echo $foo; done",
            "find src | while read -r f; do rustfmt \"$f\"; done",
            "find src -name x",
            "find src | while read f; do rustfmt \"$f\"; done",
        ] {
            assert!(dirs(lists).is_empty(), "{lists}");
        }
    }

    #[test]
    fn what_submodule_foreach_runs_is_read_with_the_submodules() {
        let text = b"[alias]\n\ts = !git submodule foreach --recursive 'sh tools/x.sh'\n\
            \tt = !git status\n";
        let words: Vec<Vec<u8>> = foreach_words(text).into_iter().map(|w| w.word).collect();
        assert!(words.contains(&b"tools/x.sh".to_vec()), "{words:?}");
        assert!(!words.iter().any(|w| w == b"status"), "{words:?}");
        let modules =
            b"[submodule \"a\"]\n\tpath = libs/a\n\turl = x\n[submodule \"b\"]\n\tpath = /abs\n";
        assert_eq!(submodule_paths(modules), [b"libs/a".to_vec()]);
    }

    #[test]
    fn the_dirs_a_line_puts_on_path_are_read() {
        let text = b"[alias]\n\ta = !. .venv/bin/activate && x\n\
            \tb = !cd sub && PATH=tools/bin:$PATH:/opt/b y\n\
            \tc = !sh -c 'PATH=\"my bin:$PATH\" z'\n";
        let dirs: Vec<String> = path_dirs(text)
            .into_iter()
            .map(|d| String::from_utf8_lossy(&d).into_owned())
            .collect();
        for want in [".venv/bin", "sub/tools/bin", "/opt/b", "my bin"] {
            assert!(dirs.contains(&want.to_owned()), "{want}: {dirs:?}");
        }
        let dots = path_dirs(b"[alias]\n\ta = !PATH=:$PATH x\n\tb = !cd t && PATH=.:$PATH y\n");
        assert!(!dirs.iter().any(|d| d.contains('$')), "{dirs:?}");
        for want in [b".".as_slice(), b"t/."] {
            assert!(dots.iter().any(|d| d == want), "{dots:?}");
        }
    }

    #[test]
    fn a_lists_entries_split_by_colons_commas_and_semicolons_are_entries() {
        let found = list_entries(b"tools/a.sh:tools/b.sh,tools/c.sh;tools/d.sh\n");
        for want in ["tools/a.sh", "tools/b.sh", "tools/c.sh", "tools/d.sh"] {
            assert!(
                found.contains(&want.as_bytes().to_vec()),
                "{want}: {found:?}"
            );
        }
    }

    #[test]
    fn the_lists_an_xargs_runs_are_read() {
        let lists = |text: &[u8]| -> Vec<String> {
            xargs_lists(text)
                .into_iter()
                .map(|w| String::from_utf8(w).unwrap())
                .collect()
        };
        let text = b"[alias]\n\ta = !xargs -n1 -a tools/a.list sh\n\
            \tb = !xargs -atools/b.list -r bash\n\
            \tc = !xargs --arg-file=c.list python3\n\
            \td = !cat d.list | xargs -I{} sh -c '{}'\n\
            \te = !xargs -n1 sh < e.list && echo done\n\
            \tf = !xargs -a f.list rustfmt\n\
            \tg = !xargs -i -a g.list {}\n\
            \th = \"!sh -c 'xargs -a h.list sh'\"\n";
        assert_eq!(
            lists(text),
            [
                "tools/a.list",
                "tools/b.list",
                "c.list",
                "d.list",
                "e.list",
                "g.list",
                "h.list"
            ]
        );
        let entries: Vec<String> = list_entries(b"tools/a.sh\n'b c.sh' d.sh\n$HOME/x\n")
            .into_iter()
            .map(|w| String::from_utf8(w).unwrap())
            .collect();
        assert_eq!(entries, ["tools/a.sh", "b c.sh", "d.sh", "'b c.sh' d.sh"]);
    }

    #[test]
    fn the_pythonpath_a_line_sets_is_read() {
        let w = |s: &str| (s.as_bytes().to_vec(), SourceBase::WorkingDir);
        let config = b"[alias]\n\tfmt = !PYTHONPATH=src:lib:$PYTHONPATH tools/fmt.py\n";
        assert_eq!(pythonpath_dirs(config), [w("src"), w("lib")]);
        let script = b"S=\"$PWD/pkg\"\nPYTHONPATH=\"$PWD/src:$S\"; export PYTHONPATH\n\
            export PYTHONPATH=\"$(dirname \"$0\")\"/py:/abs\n# PYTHONPATH=no\n";
        assert_eq!(
            script_pythonpath_dirs(script),
            [
                w("./src"),
                w("./pkg"),
                (b"./py".to_vec(), SourceBase::ScriptDir),
                w("/abs")
            ]
        );
    }

    #[test]
    fn a_scripts_variables_are_read_in_its_lines() {
        let lists = |text: &[u8]| -> Vec<(String, SourceBase)> {
            script_xargs_lists(text)
                .into_iter()
                .map(|(w, b)| (String::from_utf8(w).unwrap(), b))
                .collect()
        };
        let w = |s: &str| (s.to_string(), SourceBase::WorkingDir);
        let script = b"L=tools/a.list\nxargs -n1 -a \"$L\" sh\n\
            export M=\"b.list\" N=c.list; xargs -a ${M} sh && xargs -a $N sh\n\
            D=\"$(dirname \"$0\")\"/d.list\nxargs -a \"$D\" sh\n\
            E=e1.list\nE=e2.list\nxargs -a $E sh\nxargs -a $LX sh\n\
            F=$(cat x)\nxargs -a \"$F\" sh\n";
        assert_eq!(
            lists(script),
            [
                w("tools/a.list"),
                w("b.list"),
                w("c.list"),
                ("./d.list".to_string(), SourceBase::ScriptDir),
                w("e1.list"),
                w("e2.list"),
            ]
        );
    }

    #[test]
    fn the_scripts_a_script_runs_by_path_are_read() {
        let script = b"#!/bin/sh\n# sh tools/comment.sh\nset -e\nsh tools/a.sh\n\
            ./b.sh --x && FOO=1 bash -e c.sh\nif true; then \"$(dirname \"$0\")\"/d.sh; fi\n\
            rustfmt src/main.rs | tools/e.sh\npython3 -u x.py\n";
        let words: Vec<(String, SourceBase)> = run_words(script)
            .into_iter()
            .map(|(w, b)| (String::from_utf8(w).unwrap(), b))
            .collect();
        let w = |s: &str| (s.to_string(), SourceBase::WorkingDir);
        assert_eq!(
            words,
            [
                w("tools/a.sh"),
                w("./b.sh"),
                w("c.sh"),
                ("./d.sh".to_string(), SourceBase::ScriptDir),
                w("tools/e.sh"),
                w("x.py"),
            ]
        );
        let script = b"env sh t/a.sh\nenv -i FOO=1 sh t/b.sh\ntimeout 30 sh t/c.sh\n\
            nice -n 5 t/d.sh\nbash -c 'sh t/e.sh'\nf() { sh t/f.sh; }\n";
        let words: Vec<String> = run_words(script)
            .into_iter()
            .map(|(w, _)| String::from_utf8(w).unwrap())
            .collect();
        assert_eq!(
            words,
            ["t/a.sh", "t/b.sh", "t/c.sh", "t/d.sh", "t/e.sh", "t/f.sh"]
        );
    }

    #[test]
    fn the_relative_entries_of_the_users_path_are_read() {
        let dirs = relative_path_entries(b".:/usr/bin::bin:~/x:$HOME/y:./tools/bin:.");
        assert_eq!(
            dirs,
            [b".".to_vec(), b"bin".to_vec(), b"./tools/bin".to_vec()]
        );
    }

    #[test]
    fn the_files_a_script_sources_are_read() {
        let script = b"#!/bin/sh\n# source not/this.sh\n. ./tools/lib.sh\n\
            source \"$(dirname \"$0\")/lib2.sh\" && . ${0%/*}/lib3.sh\n\
            . \"$HOME/.profile\"\nif true; then . \"$PWD/x.sh\"; fi\n";
        let found: Vec<(String, SourceBase)> = sourced_words(script)
            .into_iter()
            .map(|(w, base)| (String::from_utf8_lossy(&w).into_owned(), base))
            .collect();
        let at = |w: &str, base| (w.to_owned(), base);
        assert_eq!(
            found,
            [
                at("./tools/lib.sh", SourceBase::WorkingDir),
                at("./lib2.sh", SourceBase::ScriptDir),
                at("./lib3.sh", SourceBase::ScriptDir),
                at("./x.sh", SourceBase::WorkingDir),
            ]
        );
        // A makefile's includes (round twenty-nine's review), at a line's start only.
        let make = b"-include tools/local.mk $(DEPS)\nsinclude a.mk\ninclude b.mk c.mk\n\
            echo include d.mk\n";
        let found: Vec<Vec<u8>> = sourced_words(make).into_iter().map(|(w, _)| w).collect();
        assert_eq!(
            found,
            [&b"tools/local.mk"[..], b"a.mk", b"b.mk", b"c.mk"].map(<[u8]>::to_vec)
        );
    }

    #[test]
    fn a_package_json_main_is_read() {
        assert_eq!(
            package_main(b"{\"name\": \"x\", \"main\": \"lib/cli.js\"}"),
            Some(b"lib/cli.js".to_vec())
        );
        assert_eq!(package_main(b"{\"name\": \"x\"}"), None);
        assert_eq!(package_main(b"not json"), None);
        assert_eq!(package_main(b"{\"main\": \"$X\"}"), None);
    }

    #[test]
    fn what_round_twenty_one_found_unread_is_read() {
        let text = b"[alias]\n\ta = !for f in tools/checks/*.sh; do sh \\\"$f\\\"; done\n\
            \tb = !cd ci && for f in *; do ./$f; done\n\
            \tc = !sh -c 'cd \\\"my tools\\\" && ./fmt.sh'\n\
            \td = !sh \\\"$(git rev-parse --git-dir)/x.sh\\\" `git rev-parse --git-common-dir`/y.sh\n\
            \te = !grep -E 'src/.*\\\\.rs' ^lib/a* && ls *.md\n\
            \tf = !cd src && git ls-files '*.rs' && find lib -name 'x*'\n\
            \tg = !run-parts -u 022 hooks.d && cd t && find -L checks -type f -exec sh {} +\n\
            \th = !sh \\\"$(git root)\\\"/tools/r.sh && T=x && sh $T/tools/s.sh\n\
            \ti = !. .venv/bin/activate && ruff check\n";
        let all = command_words(text);
        let dirs: Vec<&[u8]> = all
            .iter()
            .filter(|w| w.whole_dir)
            .map(|w| w.word.as_slice())
            .collect();
        assert_eq!(
            dirs,
            [
                &b"tools/checks"[..],
                b"ci",
                b"hooks.d",
                b"checks",
                b"t/checks"
            ]
        );
        let named: Vec<(String, bool)> = words(text);
        for want in [
            "my tools/./fmt.sh",
            ".git/x.sh",
            ".git/y.sh",
            "tools/r.sh",
            "tools/s.sh",
            ".venv/bin/ruff",
        ] {
            assert!(named.iter().any(|(w, _)| w == want), "{want}: {named:?}");
        }
    }

    #[test]
    fn values_that_run_nothing_are_not_offered() {
        let text = b"[branch \"main\"]\n\tmerge = refs/heads/main\n\
            [remote \"origin\"]\n\turl = ../other\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
            [user]\n\tname = a/b\n[include]\n\tpath = conf/x\n\
            [credential]\n\thelper = https://x/y\n[core]\n\tpager = less -R .. . ${X}/y\n";
        // `${X}/y` is `y` read from the top, held only when a file is there
        // (`after_expansions`).
        assert_eq!(words(text), [("less".into(), false), ("y".into(), false)]);
    }

    #[test]
    fn every_hooks_path_is_read() {
        let text = b"[core]\n\thooksPath = scripts/hooks\n[Core] HOOKSPATH = \"~/h\"\n\
            [other]\n\thooksPath = no\n";
        assert_eq!(
            hooks_paths(text),
            [b"scripts/hooks".to_vec(), b"~/h".to_vec()]
        );
    }

    #[test]
    fn every_template_dir_is_read() {
        let text = b"[init]\n\ttemplateDir = ~/dotfiles/git-templates\n\
            [Init] TemplateDir = /x\n[core]\n\ttemplateDir = no\n";
        assert_eq!(
            template_dirs(text),
            [b"~/dotfiles/git-templates".to_vec(), b"/x".to_vec()]
        );
    }

    #[test]
    fn the_last_core_worktree_is_the_work_tree() {
        let text = b"[core]\n\tworktree = ../a\n[Core]\n\tWorkTree = \"../../../x\"\n";
        assert_eq!(core_worktree(text), Some(b"../../../x".to_vec()));
        assert_eq!(core_worktree(b"[core]\n\tbare = false\n"), None);
    }

    #[test]
    fn round30b_path_dirs_and_piped_scripts() {
        let dirs = |script: &str| -> Vec<String> {
            script_path_dirs(script.as_bytes(), b"tools")
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect()
        };
        assert!(dirs("PATH+=:$PWD/tools/bin\nx").contains(&"./tools/bin".to_string()));
        assert!(dirs("PATH=\"$(dirname \"$0\")/bin:$PATH\"\nx").contains(&"tools/bin".to_string()));
        assert!(dirs("B=tools/bin\nPATH=\"$PWD/$B:$PATH\"").contains(&"./tools/bin".to_string()));
        let runs = |script: &str| -> Vec<Vec<u8>> {
            run_words(script.as_bytes())
                .into_iter()
                .map(|(w, _)| w)
                .collect()
        };
        assert!(runs("cat tools/local | sh").contains(&b"tools/local".to_vec()));
        assert!(runs("cat tools/local | bash -s").contains(&b"tools/local".to_vec()));
        assert!(!runs("cat tools/list | grep x").contains(&b"tools/list".to_vec()));
        assert!(runs("ssh -o ProxyCommand='sh ci/proxy' h").contains(&b"ci/proxy".to_vec()));
        assert!(runs("ssh -o'ProxyCommand sh ci/proxy' h").contains(&b"ci/proxy".to_vec()));
        let envrc = |t: &str| -> Vec<Vec<u8>> { envrc_path_dirs(t.as_bytes()) };
        assert!(envrc("PATH_add tools/bin\n").contains(&b"tools/bin".to_vec()));
        assert!(envrc("path_add PATH bin\n").contains(&b"bin".to_vec()));
    }

    fn local_script() -> Vec<u8> {
        b"tools/local".to_vec()
    }

    #[test]
    fn round31_path_dirs_run_words_and_envrc() {
        let dirs = |script: &str| -> Vec<String> {
            script_path_dirs(script.as_bytes(), b"tools")
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect()
        };
        let has = |script: &str, dir: &str| dirs(script).contains(&dir.to_string());
        assert!(has(
            "export PATH=\\\n\"$PWD/tools/bin:$PATH\"\nx",
            "./tools/bin"
        ));
        assert!(has(
            "export PATH=\"$PWD/tools/bin${PATH:+:$PATH}\"",
            "./tools/bin"
        ));
        assert!(has(
            "DIR=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\"\nPATH=\"$DIR/bin:$PATH\"",
            "tools/bin"
        ));
        assert!(has(
            "H=$(cd \"$(dirname \"$0\")\" >/dev/null 2>&1; pwd -P)\nexport PATH=\"$H/bin:$PATH\"",
            "tools/bin"
        ));
        assert!(has("PATH=\"$(cd tools/bin && pwd):$PATH\"", "tools/bin"));
        assert!(has("# x \\\nPATH=tools/bin:$PATH", "tools/bin"));
        let runs = |script: &str| -> Vec<Vec<u8>> {
            run_words(script.as_bytes())
                .into_iter()
                .map(|(w, _)| w)
                .collect()
        };
        let local = b"tools/local".to_vec();
        assert!(runs("eval \"$(cat tools/local)\"").contains(&local));
        assert!(runs("sh -c \"$(cat tools/local)\"").contains(&local));
        assert!(runs("bash -c \"$(< tools/local)\"").contains(&local));
        assert!(!runs("echo \"$(cat tools/local)\"").contains(&local));
        let proxy = b"ci/proxy".to_vec();
        let ssh = "\"ssh -o ProxyCommand='sh ci/proxy'\"";
        assert!(runs(&format!("GIT_SSH_COMMAND={ssh} git fetch")).contains(&proxy));
        assert!(runs(&format!("export GIT_SSH_COMMAND={ssh}\ngit fetch")).contains(&proxy));
        let envrc = |t: &str| -> Vec<Vec<u8>> { envrc_path_dirs(t.as_bytes()) };
        let bin = b"tools/bin".to_vec();
        assert!(envrc("watch_file x; PATH_add tools/bin\n").contains(&bin));
        assert!(envrc("[ -d tools/bin ] && PATH_add tools/bin\n").contains(&bin));
        assert!(envrc("if true; then PATH_add tools/bin; fi\n").contains(&bin));
        assert!(envrc("PATH_add \\\n  tools/bin\n").contains(&bin));
        assert!(envrc("layout python3\n").contains(&b".direnv".to_vec()));
        assert!(envrc("layout_ruby\n").contains(&b".direnv".to_vec()));
        assert!(envrc("layout go\n").contains(&b"bin".to_vec()));
        assert!(envrc("layout node\n").is_empty());
        assert!(runs("run() { \"$@\"; }\nrun sh tools/local").contains(&local_script()));
        assert!(
            runs("function run { exec \"$@\"; }\nrun sh tools/local").contains(&local_script())
        );
        assert!(!runs("run() { echo \"$@\"; }\nrun sh tools/local").contains(&local_script()));
        let grouped = "[ -f x ] && { run() { \"$@\"; }; run sh tools/local; }";
        assert!(runs(grouped).contains(&local_script()));
        // Round thirty-two's review: a body of several lines, a first command before.
        let lines = "run() {\n  echo \"+ $*\" >&2\n  \"$@\"\n}\nrun sh tools/local";
        assert!(runs(lines).contains(&local_script()));
        let after = "run() { echo x; \"$@\"; }\nrun sh tools/local";
        assert!(runs(after).contains(&local_script()));
        let closed = "f() {\n  echo\n}\n\"$@\"\nf sh tools/local";
        assert!(!runs(closed).contains(&local_script()));
        let dotenv = |t: &str| envrc_dotenv_files(t.as_bytes());
        assert_eq!(dotenv("dotenv_if_exists\n"), [b".env".to_vec()]);
        assert_eq!(dotenv("dotenv .env.dev\n"), [b".env.dev".to_vec()]);
        let sourced = |t: &str| envrc_sourced_files(t.as_bytes());
        let local = [b".envrc.local".to_vec()];
        assert_eq!(sourced("source_env_if_exists .envrc.local\n"), local);
        assert_eq!(sourced("[ -f x ] && source_env .envrc.local\n"), local);
        assert!(sourced("source_env /etc/x\n# source_env y\n").is_empty());
    }

    /// Round thirty-two's review: an `.envrc`'s bash `source`/`.` of a file, a `$PWD`
    /// spelling of its directory, and `source_up FILE`.
    #[test]
    fn an_envrcs_shell_sources_pwd_and_source_up_are_read() {
        let sourced = |t: &str| envrc_sourced_files(t.as_bytes());
        let local = [b".envrc.local".to_vec()];
        assert_eq!(
            sourced("[ -f .envrc.local ] && source .envrc.local\n"),
            local
        );
        assert_eq!(sourced("if true; then . .envrc.local; fi\n"), local);
        assert_eq!(
            sourced("source_env_if_exists \"$PWD/.envrc.local\"\n"),
            [b"./.envrc.local".to_vec()]
        );
        assert!(sourced("find . -name x\ncd \"$PWD\"\n").is_empty());
        let up = |t: &str| envrc_up_files(t.as_bytes());
        assert_eq!(up("source_up\n"), [b".envrc".to_vec()]);
        assert_eq!(up("source_up_if_exists .envrc.local\n"), local);
        // A `cd` before `$PWD` (round thirty-one's ratchet): read there and at the top.
        let path = |t: &str| script_path_dirs(t.as_bytes(), b"tools");
        let dirs = path("cd tools || exit\nPATH=$PWD/bin:$PATH\n");
        assert!(dirs.contains(&b"tools/bin".to_vec()), "{dirs:?}");
        assert!(dirs.contains(&b"./bin".to_vec()), "{dirs:?}");
        // `printf -v PATH` (round thirty-one's ratchet) and `read PATH <<<`.
        let dirs = path("printf -v PATH '%s:%s' \"$PWD/tools/bin\" \"$PATH\"\n");
        assert!(dirs.contains(&b"./tools/bin".to_vec()), "{dirs:?}");
        let dirs = path("read -r PATH <<< \"$PWD/tools/bin:$PATH\"\n");
        assert!(dirs.contains(&b"./tools/bin".to_vec()), "{dirs:?}");
        let python = |t: &str| envrc_pythonpath_dirs(t.as_bytes());
        let src = (b"src".to_vec(), SourceBase::WorkingDir);
        assert_eq!(python("[ -d src ] && path_add PYTHONPATH src\n"), [src]);
        assert!(python("path_add PATH src\n").is_empty());
    }
}
