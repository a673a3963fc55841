//! Why one of coder's gits failed: it could not start, it failed, or the watcher
//! ([`super::watch`]) stopped it for doing what no git of coder's has a reason to do.

/// Why a git snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("git {what} failed: {stderr}")]
    Failed { what: &'static str, stderr: String },
    #[error(
        "the repository's config defines a filter driver coder cannot switch off on git's \
         command line (a name with `=`, or not UTF-8): {name:?}; git is not run, since it \
         would run it"
    )]
    Driver { name: String },
    #[error("cannot read the change ledger's own index (an index format coder does not know)")]
    Index,
    #[error(
        "git stopped while it waited to open a FIFO (a named pipe) in the work tree, such as \
         a `.gitignore` or `.gitattributes` made a FIFO; nothing would ever have written it"
    )]
    Fifo,
    #[error(
        "git stopped while its open of a file of the work tree waited for another process \
         to give up a lease on it (`F_SETLEASE`): the kernel makes such an open wait for \
         the holder, up to `/proc/sys/fs/lease-break-time` (45 s) per file"
    )]
    Leased,
    #[error(
        "git stopped while it held {what} open, which no git of coder's reads (a file of the \
         work tree that the config includes, made a symlink to it?): its read may never end"
    )]
    NotAFile { what: String },
    #[error(
        "git stopped after {seconds} s of reading the repository's configuration alone, which \
         takes a git milliseconds (a config that includes a file of the work tree, made to \
         include others many times over?)"
    )]
    ConfigTooSlow { seconds: u64 },
    #[error(
        "git stopped after reading more than {gib} GiB of the workspace's files (a sparse \
         file of terabytes costs its writer nothing and git hours); the plain walk compares \
         what is past its own 1 GiB by size and time"
    )]
    ReadTooMuch { gib: u64 },
    #[error(
        "git stopped after {:.1} s of CPU time (with the gits of coder's before it in the \
         same snapshot or diff), far more than it needs for any real workspace (a \
         `.gitignore` of the work tree with a great many patterns, each matched against \
         every new file?)",
        *.millis as f64 / 1000.0
    )]
    CpuTooMuch { millis: u64 },
}

impl GitError {
    /// Whether coder's watcher killed the git (see [`watched_run`](crate::workspace::git::watch::watched_run)).
    pub(crate) fn was_killed(&self) -> bool {
        matches!(
            self,
            GitError::Fifo
                | GitError::Leased
                | GitError::NotAFile { .. }
                | GitError::ConfigTooSlow { .. }
                | GitError::ReadTooMuch { .. }
                | GitError::CpuTooMuch { .. }
        )
    }
}
