//! The paragraph the model gets (through `--append-system-prompt`) about its sandbox.
//!
//! Agents route around denials they do not understand (copying files from elsewhere,
//! retrying with other tools), so the model is told up front what is masked, what it may
//! write and where it may connect, and that a denial is the sandbox, not a bug to work
//! around. The note names paths, never contents.

use std::fmt::Write as _;
use std::path::Path;

use super::policy::{Access, Mode, Policy};
use super::scan::MaskKind;

/// How many masked paths the note lists before summarising the rest.
const MAX_LISTED: usize = 40;

/// Describe `policy` to the model.
pub fn system_prompt_note(policy: &Policy) -> String {
    let mut note = String::new();
    let _ = writeln!(note, "# Sandbox (mode: {})", policy.mode);
    write_mode(&mut note, policy);
    if policy.mode == Mode::DangerFullAccess {
        return note;
    }
    let _ = writeln!(
        note,
        "- Outside it you can read system directories and installed toolchains; other \
         paths (other projects, ~/.ssh, credentials) do not exist for you."
    );
    write_writable(&mut note, policy);
    write_masks(&mut note, policy);
    write_network_and_limits(&mut note, policy);
    note
}

/// What the mode lets the agent do with the workspace (and the plan file).
fn write_mode(note: &mut String, policy: &Policy) {
    let ws = policy.workspace.display();
    match policy.mode {
        Mode::DangerFullAccess => {
            let _ = writeln!(
                note,
                "Commands run without a sandbox. Stay inside the workspace {ws} unless the \
                 task says otherwise, and do not read credentials or secrets."
            );
        }
        Mode::ReadOnly if policy.plan_file.is_some() => {
            let plan = policy
                .plan_file
                .as_ref()
                .map(|p| p.path.display().to_string())
                .unwrap_or_default();
            let _ = writeln!(
                note,
                "Commands run in a kernel sandbox. You may read the workspace {ws} but not \
                 change it. The only file you may write is the plan file {plan}: write it in \
                 place (it cannot be renamed, deleted or replaced, and nothing can be \
                 created beside it)."
            );
        }
        Mode::ReadOnly => {
            let _ = writeln!(
                note,
                "Commands run in a kernel sandbox. You may read the workspace {ws} but not \
                 change it: report the changes you would make instead of making them."
            );
        }
        Mode::WorkspaceWrite => {
            let _ = writeln!(
                note,
                "Commands run in a kernel sandbox. You may read and write the workspace {ws}."
            );
        }
    }
}

/// `$TMPDIR`, `/tmp` and the other writable places.
fn write_writable(note: &mut String, policy: &Policy) {
    let tmp = policy
        .env_set
        .get("TMPDIR")
        .map(String::as_str)
        .unwrap_or("$TMPDIR");
    let mut writable: Vec<String> = policy
        .roots
        .iter()
        .filter(|r| r.access == Access::Write && r.path != policy.workspace)
        .map(|r| r.path.display().to_string())
        .collect();
    writable.retain(|p| {
        !p.starts_with(&policy.run_dir.display().to_string())
            && !p.starts_with(&policy.tmp_dir.display().to_string())
    });
    let _ = writeln!(
        note,
        "- Use $TMPDIR ({tmp}) for temporary files; /tmp is {}.",
        if policy.roots.iter().any(|r| r.path == Path::new("/tmp")) {
            "writable too"
        } else {
            "not writable"
        }
    );
    if !writable.is_empty() {
        let _ = writeln!(note, "- Also writable: {}.", writable.join(", "));
    }
}

/// The masked secrets and the read-only names.
fn write_masks(note: &mut String, policy: &Policy) {
    let masked = masked_names(policy);
    if !masked.is_empty() {
        let _ = writeln!(
            note,
            "- Secret files are masked: they are listed but read as empty and cannot be \
             written, renamed or deleted. Do not try to recover their contents; ask the \
             user if the task needs them. Masked: {}.",
            masked.join(", ")
        );
    }
    let protected: Vec<String> = policy
        .masks
        .iter()
        .filter(|m| !m.secret && m.kind == MaskKind::ReadOnly)
        .map(|m| relative(policy, &m.path))
        .collect();
    if !protected.is_empty() {
        let _ = writeln!(note, "- Read-only: {}.", protected.join(", "));
    }
}

/// Where the network goes, what never works, and what a denial means.
fn write_network_and_limits(note: &mut String, policy: &Policy) {
    let hosts: Vec<String> = policy.network.allow.iter().map(|h| h.to_string()).collect();
    let reachable = if hosts.is_empty() {
        "no host".to_string()
    } else {
        hosts.join(", ")
    };
    let _ = writeln!(
        note,
        "- Network: only through the HTTP(S) proxy already set in HTTPS_PROXY/HTTP_PROXY, \
         and only to {reachable}; other hosts are refused (HTTP 403) unless the user allows \
         them with --allow-host. UDP, direct connections and listening on TCP ports do not \
         work, so tests that start a server will fail."
    );
    let _ = writeln!(
        note,
        "- sudo, setuid programs, mount and signals to processes outside the sandbox do \
         not work."
    );
    let _ = writeln!(
        note,
        "If something fails with \"Permission denied\", \"Read-only file system\", \
         \"Operation not permitted\" or \"Device or resource busy\", or making a file \
         listed read-only fails with \"Not a directory\", that is the sandbox: say so in \
         your answer instead of looking for a way around it."
    );
}

/// Masked secrets as workspace-relative names; a masked directory stands for its files.
fn masked_names(policy: &Policy) -> Vec<String> {
    let dirs: Vec<&Path> = policy
        .masks
        .iter()
        .filter(|m| m.secret && m.is_dir)
        .map(|m| m.path.as_path())
        .collect();
    let mut names: Vec<String> = Vec::new();
    for mask in policy.masks.iter().filter(|m| m.secret) {
        if !mask.is_dir && dirs.iter().any(|d| mask.path.starts_with(d)) {
            continue;
        }
        let mut name = relative(policy, &mask.path);
        if mask.is_dir {
            name.push_str("/ (all files inside)");
        }
        names.push(name);
    }
    if names.len() > MAX_LISTED {
        let more = names.len() - MAX_LISTED;
        names.truncate(MAX_LISTED);
        names.push(format!("and {more} more"));
    }
    names
}

fn relative(policy: &Policy, path: &Path) -> String {
    path.strip_prefix(&policy.workspace)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::PolicyOptions;
    use std::fs;

    #[test]
    fn names_masks_ports_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let home = dir.path().join("home");
        fs::create_dir_all(ws.join("secrets")).unwrap();
        fs::create_dir_all(ws.join(".git")).unwrap();
        fs::create_dir_all(&home).unwrap();
        fs::write(ws.join(".env"), "TOKEN=do-not-print").unwrap();
        fs::write(ws.join("secrets/a.txt"), "x").unwrap();
        fs::write(ws.join(".git/config"), "[core]").unwrap();
        let mut opts = PolicyOptions::new(Mode::WorkspaceWrite, &ws);
        opts.home = Some(home.clone());
        opts.config_dir = Some(home.join("cfg"));
        opts.runs_dir = Some(home.join("runs"));
        opts.allow_hosts =
            vec![crate::sandbox::allow::HostPort::parse("api.example:8443").unwrap()];
        let policy = crate::sandbox::Policy::resolve(&opts).unwrap();
        let note = system_prompt_note(&policy);
        assert!(note.contains("workspace-write"), "{note}");
        assert!(note.contains(".env"), "{note}");
        assert!(note.contains("secrets/ (all files inside)"), "{note}");
        assert!(!note.contains("secrets/a.txt"), "{note}");
        assert!(note.contains(".git/hooks"), "{note}");
        assert!(note.contains("api.example:8443"), "{note}");
        assert!(!note.contains("do-not-print"), "{note}");
        policy.cleanup();
    }
}
