//! Adversarial suite: every attack runs through `coder sandbox` on the real kernel and must
//! fail, and everyday work must still succeed. It runs once as root (capabilities must be
//! dropped, or the masks could be unmounted) and once as `nobody` through a user namespace
//! when the machine allows one.
//!
//! "Blocked" is judged on what the user cares about, not on exit codes alone: no secret
//! marker may appear in the output, and no watched file on the host (secrets, dotfiles,
//! git hooks and config, Claude settings, files outside the workspace) may change.

mod common;

use common::Bounded;

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::sandbox_fixture::{
    NOBODY, PATH, Victim, as_owner, bash_sandbox, chown_tree, describe, temp_root, write,
};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    outside: PathBuf,
    settings: PathBuf,
    /// A path in the shared /tmp that no attack may create.
    tmp_marker: PathBuf,
    markers: Vec<String>,
    owner: Option<u32>,
}

/// The unconfined control's attacks act on the host: `U4`'s `mount --bind README.md .env`
/// left a bind mount in the host's mount namespace for every run of the suite (and the
/// temporary directory, busy, behind it). Detached here, before the directory goes.
impl Drop for Fixture {
    fn drop(&mut self) {
        let Ok(table) = fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let root = self.root.to_string_lossy().into_owned();
        let mut points: Vec<&str> = table
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| point.starts_with(&format!("{root}/")))
            .collect();
        // The deepest first.
        points.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in points {
            let _ = nix::mount::umount2(point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

fn git(ws: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(ws)
        .env("PATH", PATH)
        .stdout(Stdio::null())
        .status_bounded();
    assert!(status.success(), "git {args:?}");
}

impl Fixture {
    fn new(owner: Option<u32>) -> Fixture {
        let (dir, root) = temp_root(".tmp");
        let ws = root.join("ws");
        let home = root.join("home");
        let outside = root.join("outside");
        let id = uuid::Uuid::new_v4().simple().to_string();
        let mut markers = Vec::new();
        let mut secret = |path: PathBuf, name: &str| {
            let marker = format!("SECRET-{name}-{id}");
            write(&path, &format!("{marker}\n"));
            markers.push(marker);
        };
        secret(ws.join(".env"), "ENV");
        secret(ws.join(".env.local"), "ENVLOCAL");
        secret(ws.join("deep/a/b/.env"), "DEEPENV");
        secret(ws.join("config/app.pem"), "PEM");
        secret(ws.join("config/.ENV"), "UPPERENV");
        secret(ws.join("secrets/db.txt"), "DB");
        secret(ws.join("secrets/nested/x.key"), "KEY");
        secret(home.join(".ssh/id_rsa"), "SSH");
        secret(home.join(".config/gh/hosts.yml"), "GH");
        secret(outside.join("secret.txt"), "OUTSIDE");
        write(&ws.join("README.md"), "# demo\n");
        write(&ws.join("src/lib.txt"), "code\n");
        write(
            &ws.join(".gitignore"),
            ".env\n.env.*\nsecrets/\n*.pem\n*.key\n",
        );
        write(&home.join(".bashrc"), "# rc\n");
        let settings = home.join(".local/state/coder/claude/settings.json");
        write(&settings, "{}\n");
        std::os::unix::fs::symlink(".env", ws.join("link_to_env")).unwrap();
        std::os::unix::fs::symlink("../home/.ssh", ws.join("link_to_ssh")).unwrap();
        std::os::unix::fs::symlink("../outside", ws.join("link_to_outside")).unwrap();
        git(&ws, &["init", "-q"]);
        git(&ws, &["add", "README.md", "src", ".gitignore"]);
        git(&ws, &["commit", "-q", "-m", "init"]);
        if let Some(uid) = owner {
            for top in [&ws, &home, &outside] {
                chown_tree(top, uid);
            }
        }
        Fixture {
            _dir: dir,
            root,
            ws,
            home,
            outside,
            settings,
            tmp_marker: PathBuf::from(format!("/tmp/coder-escape-{id}")),
            markers,
            owner,
        }
    }

    /// Run `script` with bash under `coder sandbox`.
    fn run(&self, args: &[String], script: &str, env: &[(String, String)]) -> Output {
        // `timeout` keeps a misbehaving case from hanging the suite; it stays outside the
        // sandbox, as the parent the attacks try to signal.
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        bash_sandbox(self.owner, &self.ws, &self.home, &args, script)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output_bounded()
    }

    /// Content, mode and mtime of everything an attack could want to change.
    fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32, i64, i64)> {
        let mut map = BTreeMap::new();
        let skip = [self.home.join(".cache"), self.home.join(".local/state")];
        let mut roots = vec![
            self.home.clone(),
            self.outside.clone(),
            self.ws.join(".git/hooks"),
            self.ws.join(".git/config"),
            self.ws.join("secrets"),
            self.settings.clone(),
            self.tmp_marker.clone(),
        ];
        roots.extend(
            [
                ".env",
                ".env.local",
                "deep/a/b/.env",
                "config/app.pem",
                "config/.ENV",
            ]
            .iter()
            .map(|p| self.ws.join(p)),
        );
        while let Some(path) = roots.pop() {
            if skip.iter().any(|s| path.starts_with(s)) && path != self.settings {
                continue;
            }
            let Ok(meta) = fs::symlink_metadata(&path) else {
                map.insert(path, (b"<absent>".to_vec(), 0, 0, 0));
                continue;
            };
            let content = if meta.is_file() {
                fs::read(&path).unwrap()
            } else if meta.file_type().is_symlink() {
                fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else if meta.is_dir() {
                for entry in fs::read_dir(&path).unwrap() {
                    roots.push(entry.unwrap().path());
                }
                b"<dir>".to_vec()
            } else {
                b"<special>".to_vec()
            };
            // A directory is judged by its entries (walked above), not by its mtime, which
            // the first run changes by creating coder's own state under the home.
            let (mtime, nsec) = if meta.is_dir() {
                (0, 0)
            } else {
                (meta.mtime(), meta.mtime_nsec())
            };
            map.insert(path, (content, meta.mode(), mtime, nsec));
        }
        map
    }

    /// A listening pathname socket outside the workspace, like an SSH agent's.
    fn agent_socket(&self) -> UnixListener {
        let path = self.outside.join("agent.sock");
        let listener = UnixListener::bind(&path).unwrap();
        if let Some(uid) = self.owner {
            chown_tree(&path, uid);
        }
        listener
    }

    fn leaks(&self, out: &Output) -> Option<String> {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.markers
            .iter()
            .find(|m| text.contains(m.as_str()))
            .cloned()
    }
}

/// What must hold besides "no leak, nothing changed".
#[derive(Clone, Copy, PartialEq)]
enum Also {
    Nothing,
    Fails,
    StdoutIs(&'static str),
}

struct Attack {
    id: &'static str,
    script: String,
    also: Also,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

fn attack(id: &'static str, script: impl Into<String>, also: Also) -> Attack {
    Attack {
        id,
        script: script.into(),
        also,
        args: Vec::new(),
        env: Vec::new(),
    }
}

#[derive(Default)]
struct Tally {
    attacks: usize,
    blocked: usize,
    work: usize,
    worked: usize,
    failures: Vec<String>,
    blocked_ids: Vec<&'static str>,
}

/// The process the signal and /proc attacks aim at, with `env_marker` in its environment.
fn start_victim(owner: Option<u32>, env_marker: &str) -> Victim {
    let mut cmd = Command::new("/bin/sleep");
    cmd.arg("300").env_clear().env("VICTIM_SECRET", env_marker);
    Victim::spawn(as_owner(&mut cmd, owner))
}

fn attacks(
    fx: &Fixture,
    victim_pid: u32,
    allowed: u16,
    denied: u16,
    abstract_name: &str,
) -> Vec<Attack> {
    use Also::*;
    let ws = fx.ws.display().to_string();
    let home = fx.home.display().to_string();
    let outside = fx.outside.display().to_string();
    let py = "/usr/bin/python3";
    let tmp_marker = fx.tmp_marker.display().to_string();
    let mut list = vec![
        // Secrets must be unreadable, by every path trick.
        attack("R1 cat .env", "cat .env", Nothing),
        attack("R2 cat .env.local", "cat .env.local", Nothing),
        attack("R3 nested .env", "cat deep/a/b/.env", Nothing),
        attack("R4 *.pem", "cat config/app.pem", Nothing),
        attack(
            "R5 secrets/**",
            "cat secrets/db.txt secrets/nested/x.key",
            Nothing,
        ),
        attack("R6 case variant .ENV", "cat config/.ENV", Nothing),
        attack("R7 workspace symlink", "cat link_to_env", Nothing),
        attack("R8 new symlink", "ln -s .env l2 && cat l2", Nothing),
        attack("R9 dot-dot", "cat ../ws/.env src/../.env", Nothing),
        attack("R10 absolute path", format!("cat {ws}/.env"), Nothing),
        attack(
            "R11 /proc/self/root",
            format!("cat /proc/self/root{ws}/.env"),
            Nothing,
        ),
        attack("R12 /proc/self/cwd", "cat /proc/self/cwd/.env", Nothing),
        attack(
            "R13 O_PATH reopen via /proc/self/fd",
            format!(
                "{py} -c \"import os; fd=os.open('.env', os.O_PATH); print(open('/proc/self/fd/%d' % fd).read())\""
            ),
            Nothing,
        ),
        attack("R14 hard link", "ln .env hl; cat hl", Nothing),
        attack(
            "R15 hard link elsewhere",
            "ln .env src/hl; cat src/hl",
            Nothing,
        ),
        attack(
            "R16 rename then read",
            "mv .env renamed; cat renamed",
            Nothing,
        ),
        attack(
            "R17 move to tmp",
            "mv .env \"$TMPDIR/x\"; cat \"$TMPDIR/x\"",
            Nothing,
        ),
        attack("R18 copy", "cp .env copy.txt; cat copy.txt", Nothing),
        attack(
            "R19 tar",
            "tar cf - .env secrets config | tar xOf -",
            Nothing,
        ),
        attack("R20 dd", "dd if=.env status=none", Nothing),
        attack(
            "R21 python open",
            format!("{py} -c \"print(open('.env').read())\""),
            Nothing,
        ),
        attack(
            "R22 find -exec cat",
            "find . -name '.env*' -exec cat {} +",
            Nothing,
        ),
        attack("R23 grep -r", "grep -r SECRET . ", Nothing),
        attack("R24 stat size leak", "stat -c %s .env", StdoutIs("0")),
        attack(
            "R25 mmap",
            format!(
                "{py} -c \"import mmap; f=open('.env','rb'); print(mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)[:])\""
            ),
            Nothing,
        ),
        // Secrets must be unmodifiable.
        attack("M1 append", "echo pwned >> .env", Fails),
        attack("M2 truncate", ": > .env", Fails),
        attack("M3 rm", "rm -f .env", Fails),
        attack("M4 rename over", "mv -f README.md .env", Fails),
        attack("M5 rename secrets dir", "mv secrets secrets2", Fails),
        attack("M6 create in secrets/", "echo x > secrets/new.txt", Fails),
        attack("M7 chmod", "chmod 777 .env", Fails),
        attack("M8 touch -d", "touch -d 2001-01-01 .env", Fails),
        attack("M9 truncate(2)", "truncate -s 0 .env", Fails),
        attack("M10 replace by symlink", "ln -sf README.md .env", Fails),
        attack("M11 rm -r secrets", "rm -rf secrets", Fails),
        // The masks must stay.
        attack("U1 umount mask", "umount .env", Fails),
        attack("U2 lazy umount secrets", "umount -l secrets", Fails),
        attack(
            "U3 umount in new userns",
            "unshare -Urm sh -c 'umount -l .env; cat .env'",
            Nothing,
        ),
        attack(
            "U4 bind mount over mask",
            "mount --bind README.md .env",
            Fails,
        ),
        // No escape from the workspace.
        attack(
            "E1 append ~/.bashrc",
            format!("echo pwned >> {home}/.bashrc"),
            Fails,
        ),
        attack(
            "E2 ~/.ssh/authorized_keys",
            format!("mkdir -p {home}/.ssh; echo key >> {home}/.ssh/authorized_keys"),
            Fails,
        ),
        attack(
            "E3 write ~/.profile",
            format!("echo pwned > {home}/.profile"),
            Fails,
        ),
        attack(
            "E4 ~/.config/autostart",
            format!(
                "mkdir -p {home}/.config/autostart && echo x > {home}/.config/autostart/x.desktop"
            ),
            Fails,
        ),
        attack(
            "E5 read ~/.ssh",
            format!("cat {home}/.ssh/id_rsa; ls {home}/.ssh"),
            Nothing,
        ),
        attack(
            "E6 read via workspace symlink",
            "cat link_to_ssh/id_rsa",
            Nothing,
        ),
        attack(
            "E7 read ~/.config/gh",
            format!("cat {home}/.config/gh/hosts.yml"),
            Nothing,
        ),
        attack(
            "E8 read outside",
            format!("cat {outside}/secret.txt"),
            Nothing,
        ),
        attack(
            "E9 write outside",
            format!("echo x > {outside}/new.txt"),
            Fails,
        ),
        attack(
            "E10 write via symlink",
            "echo x > link_to_outside/new.txt",
            Fails,
        ),
        attack(
            "E11 chmod outside",
            format!("chmod 777 {outside}/secret.txt"),
            Fails,
        ),
        attack(
            "E12 move outside file in",
            format!("mv {outside}/secret.txt ."),
            Fails,
        ),
        attack(
            "E13 git hook",
            "echo 'touch /tmp/pwned' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
            Fails,
        ),
        attack(
            "E14 git config hooksPath",
            "git config core.hooksPath /tmp",
            Fails,
        ),
        // The CLI config dir is the run's own, fresh and thrown away: writing hooks there
        // works and reaches no other run (the shared file watched here stays unchanged).
        attack(
            "E15 Claude settings hooks",
            "echo '{\"hooks\":{}}' > \"$CLAUDE_CONFIG_DIR/settings.json\"",
            Nothing,
        ),
        attack("E16 shared /tmp", format!("echo x > {tmp_marker}"), Fails),
        attack(
            "E17 /proc/PID/environ",
            format!("cat /proc/{victim_pid}/environ"),
            Fails,
        ),
        attack(
            "E18 /proc/PID/root",
            format!("cat /proc/{victim_pid}/root{outside}/secret.txt"),
            Fails,
        ),
        attack("E19 /proc/1/environ", "cat /proc/1/environ", Fails),
        // Signals, sockets, network.
        attack(
            "S1 kill a process outside",
            format!("kill -TERM {victim_pid}"),
            Fails,
        ),
        attack("S2 signal the parent", "kill -0 $PPID", Fails),
        attack(
            "N1 TCP to a port not allowed",
            format!("exec 3<>/dev/tcp/127.0.0.1/{denied}"),
            Fails,
        ),
        attack(
            "N2 TCP listen",
            format!(
                "{py} -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\""
            ),
            Fails,
        ),
        attack(
            "N3 pathname UNIX socket outside",
            format!(
                "{py} -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{outside}/agent.sock'); print('connected')\""
            ),
            Fails,
        ),
        attack(
            "N4 abstract UNIX socket",
            format!(
                "{py} -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0{abstract_name}'); print('connected')\""
            ),
            Fails,
        ),
        attack(
            "X1 no leaked descriptors",
            "ls /proc/self/fd | wc -l",
            StdoutIs("4"),
        ),
        attack(
            "X2 read-only mode keeps the workspace",
            "echo x >> README.md",
            Fails,
        ),
        attack("X3 credential variables are dropped", "env", Nothing),
    ];
    let last = list.len() - 1;
    list[last].env = vec![("GITHUB_TOKEN".to_string(), fx.markers[0].clone())];
    for a in &mut list {
        if a.id.starts_with("X2") {
            a.args = vec!["--mode".to_string(), "read-only".to_string()];
        } else {
            a.args = vec!["--allow-host".to_string(), format!("127.0.0.1:{allowed}")];
        }
    }
    list
}

fn normal_work(allowed: u16) -> Vec<(&'static str, String)> {
    let c_program = "#include <stdio.h>\nint main(void) { puts(\"built\"); return 0; }\n";
    vec![
        ("W1 read", "cat README.md".to_string()),
        ("W2 create in subdir", "echo a > src/new.txt && cat src/new.txt".to_string()),
        ("W3 create at root", "echo b > new_root.txt && cat new_root.txt".to_string()),
        ("W4 append", "echo more >> README.md".to_string()),
        ("W5 atomic write + rename at root", "echo c > .README.md.tmp.1 && mv .README.md.tmp.1 README.md && cat README.md".to_string()),
        ("W6 mkdir + write", "mkdir -p d/e && echo d > d/e/f.txt".to_string()),
        ("W7 rm", "rm new_root.txt".to_string()),
        ("W8 list dotfiles and secrets", "ls -a | grep -qx .env && ls secrets | grep -qx db.txt".to_string()),
        ("W9 agent's own .env", "echo MINE=1 > src/.env && grep -q MINE src/.env".to_string()),
        ("W10 private tmp", "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"".to_string()),
        ("W11 git commit", "git add -A . && git -c user.name=a -c user.email=a@example.invalid commit -qm work && git log --oneline | wc -l | grep -qx 2".to_string()),
        ("W12 cc", format!("printf '{}' > hello.c && cc -o hello hello.c && ./hello", c_program.replace('\n', "\\n"))),
        ("W13 make", "printf 'hello2: hello.c\\n\\tcc -o $@ $<\\n' > Makefile && make -s hello2 && ./hello2".to_string()),
        ("W14 CONNECT through the proxy to the allowed port", format!("p=${{HTTPS_PROXY##*:}}; exec 3<>/dev/tcp/127.0.0.1/${{p%%/*}} && printf 'CONNECT 127.0.0.1:{allowed} HTTP/1.1\\r\\n\\r\\n' >&3 && IFS= read -r -t 10 l <&3 && [[ $l == 'HTTP/1.1 200 '* ]]")),
        ("W15 /dev/null and /dev/fd", "echo x > /dev/null && cat <(echo via-dev-fd)".to_string()),
        ("W16 python os.replace at root", "/usr/bin/python3 -c \"import os; open('p.tmp','w').write('p'); os.replace('p.tmp','p.txt')\" && cat p.txt".to_string()),
    ]
}

/// Run every attack and every normal-work check; `unconfined` runs them all under
/// `danger-full-access` instead, to show that the checks can fail.
fn run_suite(label: &str, owner: Option<u32>, unconfined: bool) -> Tally {
    let fx = Fixture::new(owner);
    let mut victim = start_victim(owner, &fx.markers[1]);
    let allowed_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let denied_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed = allowed_listener.local_addr().unwrap().port();
    let denied = denied_listener.local_addr().unwrap().port();
    let _unix = fx.agent_socket();
    let abstract_name = format!("coder-test-{}", uuid::Uuid::new_v4().simple());
    let _abstract =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap())
            .unwrap();

    let mut tally = Tally::default();
    let before = fx.snapshot();
    let count = attacks(&fx, victim.pid(), allowed, denied, &abstract_name).len();
    for i in 0..count {
        // Unconfined, attacks do damage (move the secret away, kill the victim): each one
        // then gets a fresh fixture and a live victim, so that each is judged on its own.
        let fresh;
        let mut _fresh_socket = None;
        let fx = if unconfined {
            fresh = Fixture::new(owner);
            _fresh_socket = Some(fresh.agent_socket());
            if !victim.alive() {
                victim = start_victim(owner, &fresh.markers[1]);
            }
            &fresh
        } else {
            &fx
        };
        let mut a = attacks(fx, victim.pid(), allowed, denied, &abstract_name).swap_remove(i);
        if unconfined {
            a.args = vec!["--mode".to_string(), "danger-full-access".to_string()];
        }
        let was = fx.snapshot();
        let victim_was_alive = victim.alive();
        let out = fx.run(&a.args, &a.script, &a.env);
        tally.attacks += 1;
        let mut why = Vec::new();
        if let Some(marker) = fx.leaks(&out) {
            why.push(format!("leaked {marker}"));
        }
        if fx.snapshot() != was {
            why.push("changed the host".to_string());
        }
        match a.also {
            Also::Fails if out.status.success() => why.push("succeeded".to_string()),
            Also::StdoutIs(s) if String::from_utf8_lossy(&out.stdout).trim() != s => {
                why.push(format!("stdout is not {s:?}"))
            }
            _ => {}
        }
        if out.status.code() == Some(71) {
            why.push("sandbox setup failed".to_string());
        }
        if victim_was_alive && !victim.alive() {
            why.push("killed a process outside".to_string());
        }
        if why.is_empty() {
            tally.blocked += 1;
            tally.blocked_ids.push(a.id);
        } else {
            tally.failures.push(format!(
                "[{label}] {}: {} ({})",
                a.id,
                why.join(", "),
                describe(&out)
            ));
        }
    }
    if fx.snapshot() != before {
        tally
            .failures
            .push(format!("[{label}] the attacks changed a watched file"));
    }
    let _ = fs::remove_file(&fx.tmp_marker);
    if unconfined {
        return tally;
    }
    for (id, script) in normal_work(allowed) {
        let out = fx.run(
            &["--allow-host".to_string(), format!("127.0.0.1:{allowed}")],
            &script,
            &[],
        );
        tally.work += 1;
        if out.status.success() {
            tally.worked += 1;
        } else {
            tally
                .failures
                .push(format!("[{label}] {id} failed: {}", describe(&out)));
        }
    }
    if fx.snapshot() != before {
        tally
            .failures
            .push(format!("[{label}] normal work changed a watched file"));
    }
    drop(allowed_listener);
    drop(denied_listener);
    let _ = &fx.root;
    tally
}

fn report(label: &str, tally: &Tally) {
    println!(
        "sandbox escape suite ({label}): {} attacks tried, {} blocked; {} normal-work checks, {} passed",
        tally.attacks, tally.blocked, tally.work, tally.worked
    );
    for failure in &tally.failures {
        println!("  FAIL {failure}");
    }
}

fn userns_available() -> bool {
    coder::sandbox::probe().user_namespaces
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn attacks_fail_and_work_succeeds_as_root() {
    common::require_root_and_user_namespaces();
    let tally = run_suite("root", None, false);
    report("root", &tally);
    assert!(
        tally.failures.is_empty(),
        "{} failures",
        tally.failures.len()
    );
    assert_eq!(tally.attacks, tally.blocked);
}

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn attacks_fail_and_work_succeeds_as_unprivileged_user() {
    common::require_root_and_user_namespaces();
    assert!(userns_available(), "coder's probe finds no user namespaces");
    let owner = Some(NOBODY);
    let tally = run_suite("unprivileged", owner, false);
    report("unprivileged", &tally);
    assert!(
        tally.failures.is_empty(),
        "{} failures",
        tally.failures.len()
    );
    assert_eq!(tally.attacks, tally.blocked);
}

#[test]
fn without_the_sandbox_the_same_attacks_succeed() {
    // The attacks are real and the checks can fail: unconfined, nearly all of them read a
    // secret, change the host, or reach what they aimed at.
    let tally = run_suite("unconfined", None, true);
    let succeeded = tally.attacks - tally.blocked;
    println!(
        "sandbox escape suite (unconfined control): {} attacks tried, {} succeeded; \
         not applicable without a sandbox: {:?}",
        tally.attacks, succeeded, tally.blocked_ids
    );
    assert!(
        succeeded * 10 >= tally.attacks * 8,
        "only {succeeded} of {} succeeded",
        tally.attacks
    );
}

#[test]
fn keystrokes_cannot_be_pushed_into_the_users_terminal() {
    // TIOCSTI on an inherited terminal types into the user's shell once the agent exits
    // (`dev.tty.legacy_tiocsti`). The sandbox gives the terminal up before the command runs.
    // script(1) (util-linux, an essential package) provides the pseudo-terminal.
    assert!(
        Path::new("/usr/bin/script").exists(),
        "script(1) is needed for a pseudo-terminal"
    );
    let fx = Fixture::new(None);
    let inject = |mode: &str| {
        let inner = format!(
            "{} sandbox --mode {mode} --cd {} -- /usr/bin/python3 -c \"import fcntl, termios; \
             fcntl.ioctl(0, termios.TIOCSTI, b'#'); print('INJECTED')\"",
            env!("CARGO_BIN_EXE_coder"),
            fx.ws.display()
        );
        let out = Command::new("/usr/bin/script")
            .args(["-qec", &inner, "/dev/null"])
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.home)
            .stdin(Stdio::null())
            .output_bounded();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let confined = inject("workspace-write");
    assert!(!confined.contains("INJECTED"), "{confined}");
    assert!(confined.contains("Operation not permitted"), "{confined}");
    println!(
        "TIOCSTI: confined refused; unconfined {}",
        if inject("danger-full-access").contains("INJECTED") {
            "injected (legacy_tiocsti on)"
        } else {
            "refused by the kernel too"
        }
    );
}
