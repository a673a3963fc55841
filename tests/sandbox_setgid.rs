//! Setgid directories in the workspace (issue 14, class 6): as root, a setgid directory
//! owned by another group would make every file later created in it (by the user too)
//! carry that group. The agent cannot make one: `chmod` with `S_ISGID` is refused by the
//! seccomp filter whatever the file type, `mkdir` drops the bit, and `chgrp` to a group the
//! process is not in needs `CAP_CHOWN`, which is dropped. A directory made inside a setgid
//! directory the user already had inherits the user's own group, which gives nothing.
//! Control: the same commands under `danger-full-access` do make one.

mod common;

use std::os::unix::fs::MetadataExt;

use common::sandbox_fixture::{Fixture, arms};

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn the_agent_cannot_make_a_setgid_directory() {
    for nobody in arms() {
        for mode in ["workspace-write", "danger-full-access"] {
            let fx = Fixture::new("coder-setgid-", nobody, &["ws", "home", "state"]);
            fx.own(fx.root());
            let root = fx.root();
            // Group 4 (adm) for root; nobody can only use its own group.
            let group = if nobody { "65534" } else { "4" };
            let script = format!(
                "mkdir -m 2775 a; mkdir b && chgrp {group} b; chmod g+s b; chmod 2755 b; \
                 python3 -c \"import os; os.mkdir('c', 0o2777); os.chmod('c', 0o2777)\"; \
                 echo DONE"
            );
            let (_, out) = fx.sandbox(&["--mode", mode], &script);
            assert!(out.contains("DONE"), "{out}");
            let setgid: Vec<String> = ["a", "b", "c"]
                .iter()
                .filter(|n| {
                    std::fs::metadata(root.join("ws").join(n)).is_ok_and(|m| m.mode() & 0o2000 != 0)
                })
                .map(|n| n.to_string())
                .collect();
            if mode == "danger-full-access" {
                assert!(!setgid.is_empty(), "control: nobody={nobody}: {out}");
            } else {
                assert!(
                    setgid.is_empty(),
                    "nobody={nobody}: setgid {setgid:?}: {out}"
                );
                let b = std::fs::metadata(root.join("ws/b")).unwrap();
                if !nobody {
                    assert_eq!(b.gid(), 0, "chgrp to another group: {out}");
                }
            }
        }
    }
}
