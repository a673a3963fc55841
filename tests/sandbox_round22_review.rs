//! Round twenty-two's review: the parts of the sandbox little attacked so far, attacked by
//! someone who did not write them (the egress proxy, the seccomp table, inherited
//! descriptors and `/proc`, the CLI's own `git`, what coder prints of the agent's text).
//! Every attack runs through the built binary, as root and as uid 65534 where the sandbox
//! decides, each with its control.
//!
//! Found open when this review started, closed with it (each test failed on the branch's
//! start, `f91ccfe`):
//! * **C1 controls in `--log-metrics`.** The metrics line coder prints on stderr quotes the
//!   agent's text (a denial's path, a tool call's name) as serde writes it, which escapes
//!   C0 only: a U+009B (CSI to some terminals) from a tool result went to the terminal raw.
//!   Round twenty-one escaped the envelope, `coder runs --json` and `coder fs`; this line
//!   was left.
//!
//! Looked at and held (see the report in SECURITY.md's round-twenty-two paragraph):
//! the i386 system-call ABI (`int 0x80` `unshare(CLONE_NEWUSER)`: the process is killed by
//! the filter's architecture check); `TIOCSTI` on an inherited terminal under `coder
//! sandbox` (no `/dev/tty`, and the ioctl is refused); `socketpair` of every family but
//! AF_UNIX; the CLI's own `git` calls (run with `core.fsmonitor`, `core.hooksPath` and the
//! like overridden, at the workspace's top, never in the Bash tool's `cd`); the proxy's
//! parsing (exact `host:port` after normalisation, an IPv4-mapped IPv6 literal or an
//! integer IPv4 spelling of an allowed address is refused, a kept-alive connection is
//! pinned to its checked upstream).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::Bounded;
use common::sandbox_fixture::{self, owners};
use serde_json::Value;

/// A fake `claude` whose one Bash call gets a result naming a path with C1 controls (as
/// `cat` prints a name the agent chose), under a tool name with them too.
const C1_CLAUDE: &str = r#"#!/bin/bash
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac; shift
done
cat >/dev/null
echo '{"type":"system","subtype":"init","session_id":"'"$sid"'","tools":["Bash"],"model":"m"}'
echo '{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash\u009b2J","input":{"command":"cat x"}}]},"session_id":"'"$sid"'"}'
echo '{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"cat: /w/\u009b2J\u009b31mevil: Permission denied","is_error":true}]},"session_id":"'"$sid"'"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$sid"'","num_turns":1}'
"#;

/// `--log-metrics` prints the run's metrics on stderr, a terminal as often as not; they
/// quote the agent's text. Confined (the denial is recognised only there), as root and as
/// uid 65534: no raw C1 control reaches stderr. Control: the decoded line holds the
/// agent's U+009B, so the text did reach it and is escaped, not dropped.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_metrics_line_prints_no_c1_control_of_the_agents() {
    for owner in owners() {
        let (_dir, root) = sandbox_fixture::temp_root("coder-round22-");
        for d in ["ws", "home", "bin"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let bin = root.join("bin/claude");
        std::fs::write(&bin, C1_CLAUDE).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(uid) = owner {
            sandbox_fixture::chown_tree(&root, uid);
        }
        let out = sandbox_fixture::coder_as(
            &root,
            owner,
            &root.join("ws"),
            &bin,
            &["--log-metrics"],
            "say done",
        )
        .output_bounded();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{owner:?}: {}",
            sandbox_fixture::printed(&out)
        );
        let line = stderr
            .lines()
            .find(|l| l.starts_with("{\"wall_ms\""))
            .unwrap_or_else(|| panic!("{owner:?}: no metrics line: {stderr}"));
        let metrics: Value = serde_json::from_str(line).unwrap();
        let quoted = metrics["sandbox_denials"].to_string() + &metrics["tool_calls"].to_string();
        assert!(
            quoted.contains('\u{9b}'),
            "{owner:?}: control: the agent's text is in the metrics: {line}"
        );
        assert!(
            !stderr.contains('\u{9b}'),
            "{owner:?}: a raw C1 control of the agent's reached stderr: {stderr:?}"
        );
    }
}
