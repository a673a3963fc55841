"""A real MCP client (the official Python SDK) driving `coder mcp` over stdio.

Run by tests/mcp_server.rs: `python3 client.py SCENARIO`. The server command, its base
folder and the cassettes come from the environment (MCP_TEST_*). Exits 0 when every
check passed; any failed check raises, printing what was seen.
"""

import asyncio
import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

CODER = os.environ["MCP_TEST_CODER"]
BASE = os.environ["MCP_TEST_BASE"]
CASSETTES = os.environ.get("MCP_TEST_CASSETTES", "")


def server():
    return StdioServerParameters(
        command=CODER, args=["mcp", "--base", BASE], env=dict(os.environ)
    )


def procs_in(folder):
    """Processes whose working directory lies in `folder`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == folder or cwd.startswith(folder + "/"):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")
            except OSError:
                cmd = b"?"
            found.append(f"{pid}: {cmd.decode(errors='replace')}")
    return found


async def wait_no_procs(folder, seconds):
    deadline = time.monotonic() + seconds
    while True:
        left = procs_in(folder)
        if not left:
            return
        assert time.monotonic() < deadline, f"processes left behind: {left}"
        await anyio.sleep(0.1)


def structured(result):
    assert result.structured_content is not None, result
    # The text content carries the same JSON.
    text = result.content[0].text
    assert json.loads(text) == result.structured_content, (text, result.structured_content)
    return result.structured_content


def fs_error(result, code):
    assert result.is_error, result
    s = structured(result)
    assert s["code"] == code, s
    assert s["message"], s


def tool_error(result, needle):
    assert result.is_error, result
    text = " ".join(c.text for c in result.content)
    assert needle in text, text


async def basic(session):
    tools = {t.name: t for t in (await session.list_tools()).tools}
    expected = {"coder", "coder_wait", "coder_status", "coder_cancel", "read-file", "search",
                "update-file", "create-file", "delete-file", "list-folder", "tree"}
    assert set(tools) == expected, set(tools)
    coder = tools["coder"].input_schema
    assert coder["required"] == ["PROMPT"], coder
    for p in ["PROMPT", "cd", "sandbox", "SESSION_ID", "return_all_messages", "return_metrics",
              "timeout", "max_duration", "max_retries", "wait_s", "backend"]:
        assert p in coder["properties"], p
    assert tools["update-file"].input_schema["required"] == ["path"]
    for p in ["verify", "verify_timeout", "repair_turns", "no_verify_baseline", "scope",
              "return_diff", "worktree", "json_schema", "allow_questions", "answers"]:
        assert p in coder["properties"], p
    # The run tools say what they return; the SDK validates every result against it.
    for name in ["coder", "coder_wait"]:
        out = tools[name].output_schema
        assert out is not None and out["type"] == "object", (name, out)
        assert out["anyOf"][1]["properties"]["status"]["const"] == "running", out

    # The file tools.
    r = structured(await session.call_tool("create-file", {"path": "src/m.txt", "content": "a\nb\n"}))
    assert r["created"] is True, r
    r = structured(await session.call_tool("update-file", {
        "path": "src/m.txt", "ops": [{"op": "insert", "line": 3, "content": "c"}],
        "replace": [{"pattern": "^a$", "replacement": "A"}]}))
    assert r["lines_after"] == 3, r
    r = structured(await session.call_tool("read-file", {"path": "src/m.txt"}))
    assert r["content"] == "A\nb\nc\n", r
    r = structured(await session.call_tool("search", {"pattern": "^c$"}))
    assert r["matches"] == [{"path": "src/m.txt", "line": 3, "text": "c"}], r
    r = structured(await session.call_tool("list-folder", {}))
    names = {e["name"]: e for e in r["entries"]}
    assert names[".env"]["non_accessible"] is True, r
    r = structured(await session.call_tool("tree", {"depth": 2}))
    assert any(n["name"] == "src" and n["children"] for n in r["children"]), r
    fs_error(await session.call_tool("read-file", {"path": "/etc/passwd"}), "C210")
    fs_error(await session.call_tool("read-file", {"path": "../outside"}), "C215")
    fs_error(await session.call_tool("read-file", {"path": ".env"}), "C211")
    fs_error(await session.call_tool("read-file", {"path": "missing"}), "C211")
    fs_error(await session.call_tool("create-file", {"path": "src/m.txt", "content": ""}), "C217")
    fs_error(await session.call_tool("read-file", {"path": 3}), "C210")
    r = structured(await session.call_tool("delete-file", {"path": "src/m.txt"}))
    assert r["deleted"] == 1, r

    # Bad input never kills the server.
    try:
        await session.call_tool("no_such_tool", {})
        raise AssertionError("an unknown tool was accepted")
    except Exception as e:  # MCPError
        assert "no_such_tool" in str(e), e
    tool_error(await session.call_tool("coder", {}), "PROMPT")
    tool_error(await session.call_tool("coder", {"PROMPT": "x", "timeout": "soon"}), "timeout")
    tool_error(await session.call_tool("coder", {"PROMPT": "x", "cd": "../.."}), "outside")
    tool_error(await session.call_tool("coder", {"PROMPT": "x", "bogus": 1}), "bogus")
    # Every argument of the wrong type is named at once, a count with its range.
    tool_error(await session.call_tool("coder", {"PROMPT": "x", "timeout": "soon",
                                                 "repair_turns": "x", "worktree": "yes"}),
               'timeout must be a number of seconds (got "soon"); repair_turns must be a '
               'whole number from 0 to 10 (got "x"); worktree must be true or false (got "yes")')
    tool_error(await session.call_tool("coder_status", {"run_id": "nope"}), "unknown run_id")
    tool_error(await session.call_tool("coder_wait", {"run_id": "nope"}), "unknown run_id")
    tool_error(await session.call_tool("coder_cancel", {}), "run_id")
    # A wait outside 0..3600 s is refused, never clamped; the run is not started.
    tool_error(await session.call_tool("coder", {"PROMPT": "x", "wait_s": -1}),
               "wait_s must be a number of seconds from 0 to 3600 (got -1)")
    tool_error(await session.call_tool("coder", {"PROMPT": "x", "wait_s": 86400}),
               "wait_s must be a number of seconds from 0 to 3600")
    tool_error(await session.call_tool("coder_wait", {"run_id": "nope", "wait_s": -0.5}),
               "wait_s must be a number of seconds from 0 to 3600 (got -0.5)")
    assert len((await session.list_tools()).tools) == len(expected)


async def run(session):
    backend = f"replay:{CASSETTES}/plain.json"
    result = await session.call_tool("coder", {"PROMPT": "say hi", "backend": backend,
                                               "return_metrics": True, "wait_s": 50},
                                     read_timeout_seconds=90)
    env = structured(result)
    assert not result.is_error, env
    assert env["success"] is True, env
    assert env["result"] == "Hello from the replay cassette.", env
    assert len(env["SESSION_ID"]) == 36, env
    assert "metrics" in env, env
    run_id = env["run_id"]
    # coder's own parameters pass through: a check before and after, the diff.
    checked = await session.call_tool("coder", {"PROMPT": "say hi", "backend": backend,
                                                "verify": "true", "repair_turns": 0,
                                                "verify_timeout": 30, "return_diff": True,
                                                "scope": ["src/*"], "wait_s": 50},
                                      read_timeout_seconds=90)
    checked_env = structured(checked)
    assert not checked.is_error, checked_env
    assert checked_env["verification"]["verdict"] == "passed", checked_env
    assert checked_env["verification"]["command"] == "true", checked_env
    bad = await session.call_tool("coder", {"PROMPT": "say hi", "backend": backend,
                                            "repair_turns": 99, "wait_s": 50},
                                  read_timeout_seconds=90)
    bad_env = structured(bad)
    assert bad.is_error and bad_env["error_kind"] == "config_error", bad_env
    # Named as the tool's argument the caller gave, never as a flag.
    assert bad_env["error"].startswith("repair_turns must be a whole number"), bad_env
    # Questions (issue 19): the model asks, the run ends needs_input; the answers, passed
    # as a list, resume the session.
    ask_backend = f"replay:{CASSETTES}/ask_user.json"
    asked = await session.call_tool("coder", {"PROMPT": "paint the fence", "backend": ask_backend,
                                              "allow_questions": True, "wait_s": 50},
                                    read_timeout_seconds=90)
    asked_env = structured(asked)
    assert asked.is_error and asked_env["error_kind"] == "needs_input", asked_env
    assert [q["question"] for q in asked_env["questions"]] == [
        "Which colour should the fence be?", "Should the gate be painted too?"], asked_env
    # The resume hint says how to answer in this tool's arguments, not as a command line
    # the caller has no shell for; followed as written (with the answers), it resumes.
    hint = asked_env["error_detail"]["resume_hint"]
    assert "--" not in hint and "coder tool" in hint, hint
    arguments = json.loads(hint[hint.index("{"):hint.rindex("}") + 1])
    assert arguments["SESSION_ID"] == asked_env["SESSION_ID"], hint
    # One "…" for each of the two questions, so the caller sees it must answer both.
    assert arguments["backend"] == ask_backend and arguments["answers"] == ["…", "…"], hint
    # The plain hint beside it names no flag (it said --session-id SESSION_ID --answers).
    assert "--" not in asked_env["error_detail"]["hint"], asked_env
    arguments.update({"answers": ["blue", "no, leave the gate"], "wait_s": 50})
    answered = await session.call_tool("coder", arguments, read_timeout_seconds=90)
    answered_env = structured(answered)
    assert not answered.is_error, answered_env
    assert answered_env["result"] == "Painted the fence blue and left the gate alone.", answered_env
    # Structured results: the schema object passes through to the CLI (the cassette
    # expects it in the StructuredOutput tool) and the answer comes back as `structured`.
    schema = {"type": "object",
              "properties": {"verdict": {"enum": ["pass", "fail"]},
                             "count": {"type": "integer", "minimum": 0}},
              "required": ["verdict", "count"]}
    shaped = await session.call_tool("coder", {"PROMPT": "check", "wait_s": 50,
                                               "backend": f"replay:{CASSETTES}/structured_ok.json",
                                               "json_schema": schema},
                                     read_timeout_seconds=90)
    shaped_env = structured(shaped)
    assert not shaped.is_error, shaped_env
    assert shaped_env["structured"] == {"verdict": "pass", "count": 3}, shaped_env
    status = structured(await session.call_tool("coder_status", {"run_id": run_id}))
    assert status["status"] == "done" and status["envelope"]["success"] is True, status
    await wait_no_procs(BASE, 10)
    print("RUN_ID", run_id)


async def long(session):
    backend = f"replay:{CASSETTES}/slow.json"
    args = {"PROMPT": "wait for me", "backend": backend, "wait_s": 1}
    r = structured(await session.call_tool("coder", args, read_timeout_seconds=30))
    assert r["status"] == "running", r
    run_id = r["run_id"]
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    r = structured(await session.call_tool("coder_wait", {"run_id": run_id, "wait_s": 3},
                                           read_timeout_seconds=30, progress_callback=on_progress))
    assert r["status"] == "running", r
    assert seen and run_id in seen[0][1], seen
    # Progress says what the run is doing (phase, turns, tokens), read from its journal.
    assert any(": running" in m and "turn(s)" in m and "tokens in/out" in m for _, m in seen), seen
    r = structured(await session.call_tool("coder_status", {"run_id": run_id}))
    assert r["status"] == "running" and r["elapsed_s"] >= 3, r
    assert procs_in(BASE), "the run should be working in the base"
    # Giving up on a coder_wait stops the waiting, not the run.
    with anyio.move_on_after(1.5):
        await session.call_tool("coder_wait", {"run_id": run_id, "wait_s": 20}, read_timeout_seconds=30)
        raise AssertionError("the wait should have been cancelled")
    r = structured(await session.call_tool("coder_status", {"run_id": run_id}))
    assert r["status"] == "running", r
    result = await session.call_tool("coder_cancel", {"run_id": run_id}, read_timeout_seconds=60)
    env = structured(result)
    assert result.is_error and env["error_kind"] == "cancelled", env
    # Said as who stopped it: it said "cancelled by SIGTERM", the signal the server uses.
    assert env["error"] == "cancelled by coder_cancel", env
    r = structured(await session.call_tool("coder_status", {"run_id": run_id}))
    assert r["envelope"]["error"] == "cancelled by coder_cancel", r
    await wait_no_procs(BASE, 10)

    # A request the caller cancels cancels its run; its envelope says so (the run's id
    # comes with the progress notifications).
    seen.clear()
    with anyio.move_on_after(3):
        await session.call_tool("coder", dict(args, wait_s=40), read_timeout_seconds=60,
                                progress_callback=on_progress)
        raise AssertionError("the call should have been cancelled")
    await wait_no_procs(BASE, 20)
    assert seen, "no progress before the cancel"
    cancelled_id = seen[0][1].split(":")[0].split()[-1]
    r = structured(await session.call_tool("coder_wait", {"run_id": cancelled_id, "wait_s": 10},
                                           read_timeout_seconds=30))
    r = structured(await session.call_tool("coder_status", {"run_id": cancelled_id}))
    assert r["status"] == "done", (r, seen)
    assert r["envelope"]["error"].startswith("cancelled by the MCP client"), r
    # The server is still fine.
    assert len((await session.list_tools()).tools) == 11


async def worktree(session):
    """A worktree run that asks: its resume hint names the tool's arguments that start the
    next run from its branch (worktree_base), and followed as written, they do."""
    ask_backend = f"replay:{CASSETTES}/ask_user.json"
    asked = await session.call_tool("coder", {"PROMPT": "paint the fence", "cd": "repo",
                                              "backend": ask_backend, "worktree": True,
                                              "allow_questions": True, "wait_s": 50},
                                    read_timeout_seconds=90)
    asked_env = structured(asked)
    assert asked.is_error and asked_env["error_kind"] == "needs_input", asked_env
    branch = asked_env["worktree"]["branch"]
    hint = asked_env["error_detail"]["resume_hint"]
    assert "--" not in hint and "coder tool" in hint, hint
    assert f"worktree true and worktree_base {json.dumps(branch)}" in hint, hint
    cd = json.loads(hint[hint.index("with cd ") + 8:hint.index(", worktree true")])
    assert cd == os.path.join(BASE, "repo"), hint
    # The hint's cd is absolute; the tool's description says so too (it said "relative to
    # the server's base" only, so a caller had no reason to pass the hint's path on).
    tools = {t.name: t for t in (await session.list_tools()).tools}
    described = tools["coder"].input_schema["properties"]["cd"]["description"]
    assert "absolute" in described and "inside the server's base" in described, described
    # The plain hint does not send the caller to resume a session a worktree run lost.
    assert "--" not in asked_env["error_detail"]["hint"], asked_env
    # Followed: a new run in a worktree of that branch.
    backend = f"replay:{CASSETTES}/plain.json"
    next_run = await session.call_tool("coder", {"PROMPT": "blue, and not the gate", "cd": cd,
                                                 "backend": backend, "worktree": True,
                                                 "worktree_base": branch, "wait_s": 50},
                                       read_timeout_seconds=90)
    next_env = structured(next_run)
    assert not next_run.is_error, next_env
    assert next_env["worktree"]["base_ref"] == branch, next_env
    # Without worktree, a base would be ignored: refused, named as the tool's arguments.
    tool = await session.call_tool("coder", {"PROMPT": "x", "cd": "repo", "backend": backend,
                                             "worktree_base": branch, "wait_s": 50},
                                   read_timeout_seconds=90)
    tool_env = structured(tool)
    assert tool.is_error and tool_env["error_kind"] == "config_error", tool_env
    assert tool_env["error"].startswith("worktree_base needs worktree (true)"), tool_env
    # A base that names no commit is named as the tool's argument, never as a flag.
    bad = await session.call_tool("coder", {"PROMPT": "x", "cd": "repo", "backend": backend,
                                            "worktree": True, "worktree_base": "no-such-ref",
                                            "wait_s": 50},
                                  read_timeout_seconds=90)
    bad_env = structured(bad)
    assert bad.is_error and bad_env["error_kind"] == "config_error", bad_env
    assert bad_env["error"] == 'worktree_base "no-such-ref" names no commit in the repository', \
        bad_env
    await wait_no_procs(BASE, 10)


async def disconnect_start(session):
    backend = f"replay:{CASSETTES}/slow.json"
    r = structured(await session.call_tool(
        "coder", {"PROMPT": "wait for me", "backend": backend, "wait_s": 2},
        read_timeout_seconds=30))
    assert r["status"] == "running", r
    assert procs_in(BASE), "the run should be working in the base"


async def main(scenario):
    async with stdio_client(server()) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            if scenario == "basic":
                await basic(session)
            elif scenario == "run":
                await run(session)
            elif scenario == "worktree":
                await worktree(session)
            elif scenario == "long":
                await long(session)
            elif scenario == "disconnect":
                await disconnect_start(session)
            else:
                raise SystemExit(f"unknown scenario {scenario}")
    if scenario == "disconnect":
        # The client is gone: the server must have stopped the run, tree and all.
        await wait_no_procs(BASE, 25)
    print("OK", scenario)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
