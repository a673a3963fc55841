//! Plans (DESIGN §9) through the built binary: `coder plan` (the workspace read-only, the
//! plan file the one writable file) and `coder --plan FILE` (the plan carried out in a
//! fresh session).
//!
//! The real `claude` CLI runs against replay cassettes (`fixtures/cassettes/plan_*.json`):
//! a plan written with the Write tool and from the shell, a model that attacks the
//! confinement, a plan carried out. A fake agent (a shell script, for what no model
//! output can make the CLI do) attacks the confinement from inside as root and as uid
//! 65534. Bad input is refused before any run, as one-line `config_error`s.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::sandbox_fixture::Fixture;
use common::{Bounded, Coder, Fake, ReplayScene};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_coder");

/// A replay scene whose coder starts as `coder plan`.
struct Scene(ReplayScene);

impl Scene {
    fn new(cassette: &str) -> Scene {
        let scene = Scene(ReplayScene::new(cassette, 0));
        std::fs::write(scene.ws().join("a.txt"), "original\n").unwrap();
        std::fs::create_dir(scene.ws().join("src")).unwrap();
        std::fs::write(scene.ws().join("src/lib.rs"), "pub fn f() {}\n").unwrap();
        scene
    }

    fn ws(&self) -> &Path {
        self.0.workspace()
    }

    /// Beside the workspace, where the cassettes' `{{workspace}}/../plan.md` points.
    fn plan_beside(&self) -> PathBuf {
        self.0.fake.root().join("plan.md")
    }

    /// `coder plan --cd WS --claude-bin CLAUDE --config … --backend e2e`.
    fn plan(&self) -> Coder {
        self.0
            .fake
            .coder()
            .no_cd()
            .no_claude_bin()
            .arg("plan")
            .arg("--cd")
            .arg(self.ws())
            .arg("--claude-bin")
            .arg(&self.0.claude)
            .arg("--config")
            .arg(&self.0.config)
            .args(["--backend", "e2e"])
            .deadline(Duration::from_secs(120))
    }

    /// The run mode with the same backend.
    fn run(&self) -> Coder {
        self.0.coder_within(Duration::from_secs(120))
    }

    fn state_dir(&self) -> PathBuf {
        self.0.fake.state_dir()
    }
}

/// Every entry under `dir` (`.git` included): kind, mode and content, to prove nothing
/// changed.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                stack.push(path.clone());
                Vec::new()
            };
            out.insert(
                path.strip_prefix(dir).unwrap().to_path_buf(),
                (meta.mode(), content),
            );
        }
    }
    out
}

/// Asserts that `envelope` matches the published schema.
fn assert_schema(envelope: &Value) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/envelope.schema.json"),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(envelope)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{envelope}\n{errors:#?}");
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_plan_written_with_the_write_tool_is_in_the_envelope_and_nothing_else_changed() {
    let scene = Scene::new("plan_write.json");
    let before = snapshot(scene.ws());
    let plan = scene.plan_beside();
    let out = scene
        .plan()
        .arg("--plan-file")
        .arg(&plan)
        .args(["--edit", "plan a greeting"])
        .run();
    out.assert_success("Plan written: two steps.");
    let text = "# Plan\n\n1. Add greet() to src/lib.rs.\n2. Test it in tests/greet.rs.\n";
    assert_eq!(std::fs::read_to_string(&plan).unwrap(), text);
    let env = &out.envelope;
    assert_eq!(env["plan_file"], json!(plan.to_str().unwrap()), "{env}");
    assert_eq!(env["plan"], json!(text), "{env}");
    assert_eq!(env["changes"]["files_changed"], json!(0), "{env}");
    assert_eq!(snapshot(scene.ws()), before, "the workspace changed");
    assert_schema(env);
    // Not on a terminal: --edit opens nothing and says so.
    assert!(
        env["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w.as_str().unwrap().contains("--edit ignored"))),
        "{env}"
    );

    // `coder runs show` shows the plan's path and first lines.
    let run_id = Path::new(env["transcript"].as_str().unwrap())
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let shown = Command::new(BIN)
        .args(["runs", "show", &run_id])
        .env("CODER_STATE_DIR", scene.state_dir())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains(plan.to_str().unwrap()), "{shown}");
    assert!(shown.contains("1. Add greet() to src/lib.rs."), "{shown}");
}

/// Single-quoted for `sh`.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn edit_opens_the_editor_on_the_plan_when_on_a_terminal() {
    let scene = Scene::new("plan_write.json");
    let plan = scene.plan_beside();
    let editor = scene.0.fake.root().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nprintf 'Edited by the user.\\n' >> \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let argv: Vec<String> = scene
        .plan()
        .arg("--plan-file")
        .arg(&plan)
        .args(["--edit", "-q", "plan a greeting"])
        .argv()
        .iter()
        .map(|a| sh_quote(a.to_str().unwrap()))
        .collect();
    // `script` gives coder a terminal for stdin and stdout.
    let out = common::run_bounded(
        Command::new("script")
            .args(["-qec", &format!("{} {}", sh_quote(BIN), argv.join(" "))])
            .arg("/dev/null")
            .stdin(std::process::Stdio::null())
            .env("CODER_STATE_DIR", scene.state_dir())
            .env("XDG_CONFIG_HOME", scene.0.fake.root().join("xdg-config"))
            .env("EDITOR", &editor)
            .env_remove("VISUAL")
            .env_remove("CODER_CONFIG")
            .env_remove("CODER_BACKEND"),
        Duration::from_secs(120),
    )
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or_else(|| panic!("no envelope: {stdout}"));
    let env: Value = serde_json::from_str(line.trim()).unwrap();
    let text = "# Plan\n\n1. Add greet() to src/lib.rs.\n2. Test it in tests/greet.rs.\n\
                Edited by the user.\n";
    assert_eq!(env["success"], json!(true), "{env}");
    assert_eq!(std::fs::read_to_string(&plan).unwrap(), text);
    assert_eq!(env["plan"], json!(text), "{env}");
    assert!(env.get("warnings").is_none(), "{env}");
}

/// `coder plan --plan-file FILE "plan it"` on `cassette`, whose model answers with its plan
/// instead of writing the file: the outcome and the file (the scene keeps it).
fn plan_by_answer(cassette: &str) -> (Scene, common::Outcome, PathBuf) {
    let scene = Scene::new(cassette);
    let plan = scene.plan_beside();
    let out = scene
        .plan()
        .arg("--plan-file")
        .arg(&plan)
        .arg("plan it")
        .run();
    (scene, out, plan)
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn an_answer_instead_of_a_written_plan_is_saved_as_the_plan() {
    let (_scene, out, plan) = plan_by_answer("plan_answer_only.json");
    let text = "# Plan\n\n1. Answer instead of writing the file.";
    out.assert_success(text);
    let env = &out.envelope;
    assert_eq!(std::fs::read_to_string(&plan).unwrap(), text);
    assert_eq!(env["plan"], json!(text), "{env}");
    assert!(
        env["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w.as_str().unwrap().contains("did not write the plan file"))),
        "{env}"
    );
}

/// The answer saved as the plan is redacted like the envelope: a token the model quoted
/// must not land in a file of the user's (often committed with the work).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn an_answer_saved_as_the_plan_is_redacted() {
    let (_scene, out, plan) = plan_by_answer("plan_answer_secret.json");
    let token = "ghp_Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNbVc";
    let saved = std::fs::read_to_string(&plan).unwrap();
    assert!(
        !saved.contains(token) && saved.contains("[REDACTED]") && saved.contains("# Plan"),
        "{saved}"
    );
    assert!(!out.stdout.contains(token), "{}", out.explain());
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_plan_written_from_the_shell_goes_to_the_default_file_of_the_run() {
    let scene = Scene::new("plan_bash.json");
    let before = snapshot(scene.ws());
    let out = scene.plan().arg("rename the helper").run();
    out.assert_success("Plan written from the shell.");
    let env = &out.envelope;
    let plan_file = PathBuf::from(env["plan_file"].as_str().unwrap());
    let run_id = Path::new(env["transcript"].as_str().unwrap())
        .file_stem()
        .unwrap()
        .to_owned();
    let plans = std::fs::canonicalize(scene.state_dir().join("plans")).unwrap();
    assert_eq!(
        plan_file,
        plans.join(format!("{}.md", run_id.to_str().unwrap()))
    );
    let text = "# Plan\n\n1. Rename the helper.\n";
    assert_eq!(std::fs::read_to_string(&plan_file).unwrap(), text);
    assert_eq!(env["plan"], json!(text));
    assert_eq!(snapshot(scene.ws()), before, "the workspace changed");
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_model_that_writes_elsewhere_is_refused_and_the_workspace_is_unchanged() {
    let scene = Scene::new("plan_attacks.json");
    git(scene.ws(), &["init", "-q"]);
    git(scene.ws(), &["add", "."]);
    git(scene.ws(), &["commit", "-qm", "base"]);
    let before = snapshot(scene.ws());
    let plan = scene.plan_beside();
    let out = scene
        .plan()
        .arg("--plan-file")
        .arg(&plan)
        .args(["--return-metrics", "plan it"])
        .run();
    out.assert_success("Plan written; other writes were refused.");
    let env = &out.envelope;
    assert_eq!(snapshot(scene.ws()), before, "the workspace changed: {env}");
    assert_eq!(env["changes"]["files_changed"], json!(0), "{env}");
    assert_schema(env);
    // The plan was neither moved, removed nor joined by a sibling.
    let beside: Vec<String> = std::fs::read_dir(scene.0.fake.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("plan") || n.starts_with("sibling"))
        .collect();
    assert_eq!(beside, ["plan.md"], "{env}");
    assert_eq!(
        env["plan"],
        json!("# Plan\n\nThe sandbox refused every other write.\n")
    );
    let denials = env["metrics"]["sandbox_denials"].as_array().unwrap();
    for path in [
        "a.txt",
        "made.txt",
        "hard.txt",
        "../plan.moved",
        "../sibling.md",
    ] {
        assert!(
            denials
                .iter()
                .any(|d| d["path"].as_str().is_some_and(|p| p.ends_with(path))),
            "no denial for {path}: {env}"
        );
    }
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_plan_file_inside_the_workspace_is_the_only_file_that_changes() {
    let scene = Scene::new("plan_in_workspace.json");
    git(scene.ws(), &["init", "-q"]);
    git(scene.ws(), &["add", "."]);
    git(scene.ws(), &["commit", "-qm", "base"]);
    let mut before = snapshot(scene.ws());
    let plan = scene.ws().join("PLAN.md");
    let out = scene
        .plan()
        .arg("--plan-file")
        .arg(&plan)
        .arg("plan it")
        .run();
    out.assert_success("Plan written in the workspace.");
    let env = &out.envelope;
    let text = "# Plan\n\nKept in the workspace.\n";
    assert_eq!(env["plan"], json!(text), "{env}");
    assert_eq!(env["plan_file"], json!(plan.to_str().unwrap()));
    let mut after = snapshot(scene.ws());
    let written = after.remove(Path::new("PLAN.md")).expect("PLAN.md");
    assert_eq!(written.1, text.as_bytes());
    // Everything but the plan is as it was (git metadata included).
    before.remove(Path::new("PLAN.md"));
    assert_eq!(after, before, "{env}");
    let changed: Vec<&str> = env["changes"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["PLAN.md"], "{env}");
}

#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_plan_is_carried_out_in_a_fresh_session_with_the_plan_in_its_prompt() {
    let scene = Scene::new("plan_execute.json");
    let plan = scene.plan_beside();
    std::fs::write(&plan, "# Plan\n\nStep one: rename frobnicate to frob.\n").unwrap();
    let out = scene
        .run()
        .arg("--plan")
        .arg(&plan)
        .arg("do the plan")
        .run();
    // The cassette answers only a request whose prompt holds the plan as its own section.
    out.assert_success("Carried out the plan.");
    assert_eq!(out.envelope["plan_file"], json!(plan.to_str().unwrap()));
    assert!(out.envelope.get("plan").is_none(), "{}", out.envelope);
}

/// `coder --cd ws --plan plan.md`, no task given: the plan is the task ("Carry out the
/// plan."), as answers are with `--answers`; it was refused ("the prompt is empty"), and
/// `coder prompt --plan plan.md` likewise (newuser32).
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_plan_needs_no_task_of_its_own() {
    let scene = Scene::new("plan_execute.json");
    let plan = scene.plan_beside();
    std::fs::write(&plan, "# Plan\n\nStep one: rename frobnicate to frob.\n").unwrap();
    let out = scene.run().arg("--plan").arg(&plan).run();
    out.assert_success("Carried out the plan.");
    assert_eq!(out.envelope["plan_file"], json!(plan.to_str().unwrap()));
    let printed = std::process::Command::new(common::CODER)
        .args(["prompt", "--plan"])
        .arg(&plan)
        .stdin(std::process::Stdio::null())
        .output_bounded();
    assert!(printed.status.success(), "{printed:?}");
    let text = String::from_utf8_lossy(&printed.stdout);
    assert!(
        text.contains("Carry out the plan.") && text.contains("Step one: rename frobnicate"),
        "{text}"
    );
}

/// A fake of the `coder plan` tests that needs no CLI: bad input is refused before any
/// child starts (the fake child would leave a record).
fn refused(fake: &Fake, args: &[&str], needle: &str) {
    let out = fake.coder().args(args).run();
    let detail = out.assert_failure("config_error", 78);
    let message = detail["message"].as_str().unwrap();
    assert!(
        message.contains(needle),
        "{args:?}: {needle:?} not in {message:?}"
    );
    assert!(!fake.has_record(), "{args:?}: a child was started");
}

#[test]
fn bad_plan_input_is_a_config_error_before_any_run() {
    let fake = Fake::new(json!([
        common::steps::init(),
        common::steps::result_ok("x")
    ]));
    let root = fake.root().to_path_buf();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let missing = s(&root.join("missing.md"));
    let empty = root.join("empty.md");
    std::fs::write(&empty, "  \n").unwrap();
    let empty = s(&empty);
    let good = root.join("good.md");
    std::fs::write(&good, "# Plan\n").unwrap();
    let good = s(&good);

    // `coder --plan FILE`: the file must exist and hold a plan; the session is fresh.
    refused(&fake, &["--plan", &missing, "t"], "--plan");
    refused(&fake, &["--plan", &empty, "t"], "empty");
    refused(
        &fake,
        &[
            "--plan",
            &good,
            "--session-id",
            "11111111-2222-4333-8444-555555555555",
            "t",
        ],
        "fresh session",
    );

    // `coder plan --plan-file`: somewhere this user can write a plain file.
    let ws = fake.workspace().to_path_buf();
    let plan = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            "plan".to_owned(),
            "--cd".into(),
            s(&ws),
            "--claude-bin".into(),
            s(fake.bin()),
        ];
        v.extend(extra.iter().map(|e| e.to_string()));
        v.push("task".into());
        v
    };
    let run = |args: Vec<String>, needle: &str| {
        let out = fake.coder().no_cd().no_claude_bin().args(&args).run();
        let detail = out.assert_failure("config_error", 78);
        let message = detail["message"].as_str().unwrap();
        assert!(message.contains(needle), "{args:?}: {message}");
        assert!(!fake.has_record(), "{args:?}: a child was started");
    };
    run(plan(&["--plan-file", "/usr/share/plan.md"]), "system tree");
    // A --request JSON asking for another sandbox is refused, as the flag is, not overridden.
    for mode in ["danger-full-access", "workspace-write"] {
        let request = root.join(format!("request-{mode}.json"));
        std::fs::write(
            &request,
            json!({"PROMPT": "task", "sandbox": mode}).to_string(),
        )
        .unwrap();
        let args = [
            "plan",
            "--cd",
            &s(&ws),
            "--claude-bin",
            &s(fake.bin()),
            "--request",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(s(&request));
        run(args, "read-only");
    }
    run(
        plan(&["--plan-file", &s(&root.join("no/such/dir/plan.md"))]),
        "does not exist",
    );
    run(plan(&["--plan-file", &s(&ws)]), "is a directory");
    // A symlinked directory is followed to where it leads, and judged there.
    let to_system = root.join("to-system");
    std::os::unix::fs::symlink("/usr/share", &to_system).unwrap();
    run(
        plan(&["--plan-file", &s(&to_system.join("plan.md"))]),
        "system tree",
    );
    let link = root.join("link.md");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    run(plan(&["--plan-file", &s(&link)]), "symlink");
    let hard = root.join("hard.md");
    std::fs::hard_link(&good, &hard).unwrap();
    run(plan(&["--plan-file", &s(&hard)]), "hard link");
    // In the workspace: never a tracked file, never git metadata.
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("tracked.md"), "keep me\n").unwrap();
    git(&ws, &["add", "tracked.md"]);
    git(&ws, &["commit", "-qm", "base"]);
    run(
        plan(&["--plan-file", &s(&ws.join("tracked.md"))]),
        "git tracks",
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("tracked.md")).unwrap(),
        "keep me\n"
    );
    run(
        plan(&["--plan-file", &s(&ws.join(".git/PLAN.md"))]),
        "git metadata",
    );
    // Where the sandbox would mask it, or grant it as part of a wider tree.
    std::fs::create_dir(ws.join("secrets")).unwrap();
    run(
        plan(&["--plan-file", &s(&ws.join("secrets/plan.md"))]),
        "masked or protected",
    );
    assert!(
        !ws.join("secrets/plan.md").exists(),
        "the refused plan file stayed"
    );
    run(
        plan(&[
            "--plan-file",
            &s(&ws.join(".vscode.plan.md")),
            "--protect",
            ".vscode.plan.md",
        ]),
        "masked or protected",
    );
    let shared = root.join("shared");
    std::fs::create_dir(&shared).unwrap();
    run(
        plan(&[
            "--read",
            &s(&shared),
            "--plan-file",
            &s(&shared.join("plan.md")),
        ]),
        "grants as a whole",
    );
    // What would widen the one writable file.
    run(plan(&["--sandbox", "workspace-write"]), "read-only");
    run(plan(&["--write", &s(&root)]), "--write");
    run(plan(&["--allow-tmp"]), "--allow-tmp");
    run(plan(&["--worktree"]), "--worktree");
    run(plan(&["--plan", &good]), "drop --plan");
}

// ---- the confinement attacked from inside, as root and as uid 65534 ----

/// The fake agent: runs each attack on the plan-mode confinement, records in the plan
/// file (the one writable file) whether the kernel allowed it, and ends with a result
/// event. The plan path is the line of the prompt that names it.
const ATTACKER: &str = r#"#!/bin/sh
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac
  shift
done
prompt=$(cat)
plan=$(printf '%s\n' "$prompt" | grep -m1 '^/.*\.md$')
ws=$(pwd)
dir=$(dirname "$plan")
printf '{"type":"system","subtype":"init","session_id":"%s","cwd":"%s","tools":[],"model":"fake"}\n' "$sid" "$ws"
report=""
try() {
  name=$1; shift
  if ( "$@" ) >/dev/null 2>&1; then report="$report ALLOWED:$name"; else report="$report DENIED:$name"; fi
}
try write_ws sh -c "echo x > '$ws/a.txt'"
try create_ws sh -c "echo x > '$ws/new.txt'"
try rm_ws rm "$ws/a.txt"
try mv_ws mv "$ws/a.txt" "$ws/b.txt"
try hardlink_ws ln "$ws/a.txt" "$ws/hard.txt"
try symlink_ws ln -s /etc/passwd "$ws/sym"
try mkdir_ws mkdir "$ws/d"
case "$prompt" in *"with metadata"*)
  try chmod_ws chmod 777 "$ws/a.txt"
  try touch_ws touch -d 2001-01-01 "$ws/a.txt"
  try exec_plan sh -c "printf '#!/bin/sh\ntrue\n' > '$plan' && chmod 700 '$plan' && '$plan'; rc=\$?; chmod 600 '$plan'; exit \$rc"
esac
try git_ws git -C "$ws" tag planted
try mv_plan mv "$plan" "$plan.moved"
try rm_plan rm "$plan"
try sibling sh -c "echo x > '$dir/sibling.md'"
try symlink_sibling ln -s /etc/passwd "$dir/evil"
try hardlink_plan_into_ws ln "$plan" "$ws/planlink"
try write_plan sh -c "printf '# Plan by the fake agent\n' > '$plan'"
printf '%s\n' "$report" >> "$plan"
printf '{"type":"result","subtype":"success","is_error":false,"result":"attacks done","session_id":"%s","num_turns":1,"usage":{"input_tokens":1,"output_tokens":1}}\n' "$sid"
"#;

/// Each attack the fake agent makes and what the kernel must answer; the metadata ones
/// (`chmod`, `utimes`, executing the plan) only where the workspace mount is read-only.
const EXPECTED: [(&str, bool); 17] = [
    ("write_ws", false),
    ("create_ws", false),
    ("rm_ws", false),
    ("mv_ws", false),
    ("hardlink_ws", false),
    ("symlink_ws", false),
    ("mkdir_ws", false),
    ("chmod_ws", false),
    ("touch_ws", false),
    ("git_ws", false),
    ("mv_plan", false),
    ("rm_plan", false),
    ("sibling", false),
    ("symlink_sibling", false),
    ("hardlink_plan_into_ws", false),
    ("exec_plan", false),
    // The control: the plan file itself is writable.
    ("write_plan", true),
];

const METADATA: [&str; 3] = ["chmod_ws", "touch_ws", "exec_plan"];

#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_fake_agent_cannot_break_out_of_plan_mode_as_root_or_as_nobody() {
    common::require_root_and_user_namespaces();
    for nobody in [false, true] {
        attack_plan_mode(nobody, false);
    }
}

/// The plan file inside the workspace: the workspace mount stays writable there (the
/// Write tool's in-place fallback), so Landlock alone refuses every write, rename, link
/// and removal but the plan's contents.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_fake_agent_cannot_break_out_of_plan_mode_with_the_plan_in_the_workspace() {
    common::require_root_and_user_namespaces();
    for nobody in [false, true] {
        attack_plan_mode(nobody, true);
    }
}

/// The tree of a fake agent's attack on the plan mode, and how coder runs in it: as the
/// arm's user, with a dummy token and an unreachable API, no user config.
fn plan_fixture(prefix: &str, nobody: bool) -> Fixture {
    let fx = Fixture::new(prefix, nobody, &["ws", "home", "state", "bin", "xdg"]);
    let xdg = fx.root().join("xdg");
    fx.with_var("XDG_CONFIG_HOME", xdg).with_dummy_backend()
}

fn attack_plan_mode(nobody: bool, in_workspace: bool) {
    let fx = plan_fixture("coder-plan-", nobody);
    let root = fx.root();
    let ws = root.join("ws");
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "a.txt"]);
    git(&ws, &["commit", "-qm", "base"]);
    let agent = root.join("bin/claude");
    std::fs::write(&agent, ATTACKER).unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    fx.own(root);
    let before = snapshot(&ws);
    let mut cmd = fx.command(BIN);
    if in_workspace {
        cmd.args(["plan", "--plan-file"])
            .arg(ws.join("PLAN.md"))
            .arg("attack the plan mode");
    } else {
        cmd.arg("plan").arg("attack the plan mode with metadata");
    }
    let out = cmd
        .arg("--cd")
        .arg(&ws)
        .arg("--claude-bin")
        .arg(&agent)
        .output_bounded();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let env: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "nobody={nobody}: no envelope ({e}): {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(env["success"], json!(true), "nobody={nobody}: {env}");
    let plan_file = PathBuf::from(env["plan_file"].as_str().unwrap());
    let plan = std::fs::read_to_string(&plan_file).unwrap();
    assert!(
        plan.starts_with("# Plan by the fake agent\n"),
        "nobody={nobody}: {plan}"
    );
    for (name, allowed) in EXPECTED {
        if in_workspace && METADATA.contains(&name) {
            continue;
        }
        let verdict = if allowed { "ALLOWED" } else { "DENIED" };
        assert!(
            plan.split_whitespace()
                .any(|w| w == format!("{verdict}:{name}")),
            "nobody={nobody}: {name} must be {verdict}: {plan}"
        );
    }
    let mut after = snapshot(&ws);
    if in_workspace {
        after.remove(Path::new("PLAN.md")).expect("PLAN.md");
    }
    assert_eq!(after, before, "nobody={nobody}: the workspace changed");
    if in_workspace {
        return;
    }
    let siblings: Vec<_> = std::fs::read_dir(plan_file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        siblings,
        [plan_file.file_name().unwrap()],
        "nobody={nobody}"
    );
    assert_eq!(std::fs::metadata(&plan_file).unwrap().nlink(), 1);
}

/// A fake agent that marks the plan, then stays silent until coder's idle timeout stops it
/// (the test swaps the plan path meanwhile); no tool call, so coder retries with the same
/// policy.
const MARK_THEN_FAIL: &str = r#"#!/bin/sh
sid=""
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) sid="$2"; shift;; esac
  shift
done
prompt=$(cat)
plan=$(printf '%s\n' "$prompt" | grep -m1 '^/.*\.md$')
printf '{"type":"system","subtype":"init","session_id":"%s","tools":[],"model":"fake"}\n' "$sid"
printf 'ATTEMPT\n' >> "$plan"
exec timeout 5 tail -f /dev/null
"#;

/// The plan path swapped for a symbolic or a hard link to another file of the user's (the
/// plan moved aside) between two attempts:
/// the helper re-checks the file by device and inode before every attempt and refuses to
/// mount what the path now leads to.
#[test]
#[ignore = "needs root and user namespaces: scripts/test runs it"]
fn a_plan_path_swapped_for_a_link_between_attempts_is_refused() {
    common::require_root_and_user_namespaces();
    for (nobody, hard) in [(false, false), (false, true), (true, false), (true, true)] {
        let fx = plan_fixture("coder-plan-swap-", nobody);
        let root = fx.root();
        let victim = root.join("victim.txt");
        std::fs::write(&victim, "the user's file\n").unwrap();
        let agent = root.join("bin/claude");
        std::fs::write(&agent, MARK_THEN_FAIL).unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        fx.own(root);
        let plan = root.join("plan.md");
        let mut cmd = fx.command(BIN);
        cmd.args([
            "plan",
            "--max-retries",
            "1",
            "--timeout",
            "2",
            "--plan-file",
        ])
        .arg(&plan)
        .arg("--cd")
        .arg(root.join("ws"))
        .arg("--claude-bin")
        .arg(&agent)
        .arg("plan it")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        let child = common::KillOnDrop::spawn(&mut cmd);
        // The first attempt marked the plan: swap the path while it still runs.
        common::wait_for_path(&plan, Duration::from_secs(30));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&plan).is_ok_and(|t| t.contains("ATTEMPT")) {
            assert!(std::time::Instant::now() < deadline, "no first attempt");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::rename(&plan, root.join("plan.orig")).unwrap();
        if hard {
            std::fs::hard_link(&victim, &plan).unwrap();
        } else {
            std::os::unix::fs::symlink(&victim, &plan).unwrap();
        }
        let mut child = child;
        let mut stdout = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
        let _ = child.wait();
        let env: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("nobody={nobody}: no envelope ({e}): {stdout}"));
        assert_eq!(
            env["error_kind"],
            json!("sandbox_error"),
            "nobody={nobody} hard={hard}: {env}"
        );
        assert!(
            env["error"]
                .as_str()
                .unwrap()
                .contains("changed after it was checked"),
            "nobody={nobody} hard={hard}: {env}"
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "the user's file\n",
            "nobody={nobody}"
        );
        // Nor is the other file read into the envelope.
        assert!(
            !env.to_string().contains("the user's file"),
            "nobody={nobody} hard={hard}: {env}"
        );
    }
}

/// Plans can hold questions (DESIGN §9): `coder plan` offers `ask_user` by default, and a
/// model that asks ends the plan run `needs_input` with its questions and session, and the
/// workspace untouched.
#[test]
#[ignore = "needs the claude CLI: scripts/test runs it"]
fn a_plan_run_may_ask_instead_of_planning() {
    let scene = Scene::new("plan_question.json");
    let before = snapshot(scene.ws());
    let out = scene.plan().arg("plan the migration").run();
    out.assert_failure("needs_input", 5);
    let questions = out.envelope["questions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(questions.len(), 1, "{}", out.explain());
    assert_eq!(
        questions[0]["question"],
        "Which database should the migration target?"
    );
    assert!(out.session_id().is_some(), "{}", out.explain());
    assert_eq!(snapshot(scene.ws()), before, "the workspace changed");
    assert_schema(&out.envelope);

    // The hint answers in a plan run, on the same plan file: it said `coder --cd …`,
    // which would carry the plan session on as a plain workspace-write run.
    let plan_file = out.envelope["plan_file"].as_str().unwrap_or_default();
    let session = out.session_id().unwrap_or_default();
    let hint = out.detail()["resume_hint"].as_str().unwrap_or_default();
    assert!(
        !plan_file.is_empty()
            && hint.starts_with("answer with: coder plan --cd ")
            && hint.contains(&format!("--plan-file {plan_file} --session-id {session}"))
            && hint.contains(r#"--answers '["…"]'"#),
        "{}",
        out.explain()
    );
    // Answered by a plain run, the plan session would go on as a run that may write the
    // workspace: refused, naming how to go on planning and how to carry the plan out.
    let plain = scene
        .run()
        .args(["--session-id", session, "--answers", r#"["PostgreSQL"]"#])
        .run();
    plain.assert_failure("config_error", 78);
    let error = plain.envelope["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("is a plan session")
            && error.contains(&format!(
                "coder plan --plan-file {plan_file} --session-id {session}"
            ))
            && error.contains(&format!("coder --plan {plan_file}")),
        "{}",
        plain.explain()
    );
    assert_eq!(snapshot(scene.ws()), before, "the workspace changed");
    let answered = scene
        .plan()
        .args(["--plan-file", plan_file, "--session-id", session])
        .args(["--answers", r#"["PostgreSQL"]"#])
        .run();
    answered.assert_success("Plan: migrate to PostgreSQL in two steps.");
    assert_eq!(
        answered.envelope["plan_file"],
        plan_file,
        "{}",
        answered.explain()
    );
    assert_eq!(snapshot(scene.ws()), before, "the workspace changed");
}
