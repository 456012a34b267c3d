//! Reviewer comments: added from the CLI (mounted and not), kept in the store, read by agents
//! from `.rewind/comments` and over MCP (`comments`, for the caller's own session, found from
//! its process tree), and gone from the open list once resolved.

use std::io::{Read, Write};

use rmcp::{ServiceExt, model::CallToolRequestParams, transport::TokioChildProcess};
use serde_json::{Value, json};

use crate::common::{REWIND, Workspace, ok, rw};

fn ctl(ws: &Workspace, line: &str) -> String {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(ws.path().join(".rewind/ctl"))
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut out = String::new();
    f.read_to_string(&mut out).unwrap();
    out
}

fn control(ws: &Workspace, name: &str) -> String {
    std::fs::read_to_string(ws.path().join(".rewind").join(name)).unwrap()
}

/// Sessions s1 and s2 each write a file; returns the id of s1's change.
fn scene(ws: &mut Workspace) -> u64 {
    ws.mount();
    for (s, file) in [("s1", "f.txt"), ("s2", "g.txt")] {
        let script = format!("printf 'one\\ntwo\\nthree\\n' > {file}");
        ok(rw(
            ws,
            &[
                "run",
                "--session",
                s,
                "--agent",
                "claude",
                "--",
                "bash",
                "-c",
                &script,
            ],
        ));
    }
    ok(rw(ws, &["sync"]));
    let log = ok(rw(ws, &["log", "--session", "s1", "--json"]));
    let v: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    v["id"].as_u64().unwrap()
}

#[test]
fn comments_reach_the_control_directory_and_go_when_resolved() {
    let mut ws = Workspace::new();
    let id = scene(&mut ws);
    let n = id.to_string();
    let added = ok(rw(
        &ws,
        &[
            "comment", "add", "--change", &n, "--path", "f.txt", "--line", "2", "rename", "two",
        ],
    ));
    assert_eq!(added, format!("comment 1 added on change {id}\n"));
    // Through ctl too, with text that mentions --dry-run (a comment has no dry run).
    let out = ctl(
        &ws,
        "comment add --session s2 'try it with --dry-run first'",
    );
    assert_eq!(out, "comment 2 added on session s2\n");

    let all = control(&ws, "comments");
    let user = ok(std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap());
    let uid = rustix::process::geteuid().as_raw();
    assert!(
        all.starts_with(&format!(
            "comment 1 (open) on change {id}, f.txt line 2 (session s1)\n  by {} (uid {uid}), ",
            user.trim()
        )),
        "{all}"
    );
    assert!(
        all.contains(
            "\n  > 2: two\n    rename two\n\ncomment 2 (open) on session s2 (session s2)\n"
        ),
        "{all}"
    );
    assert!(all.contains("    try it with --dry-run first\n"), "{all}");
    let s1 = control(&ws, "sessions/s1/comments");
    assert!(s1.contains("rename two") && !s1.contains("dry-run"), "{s1}");
    let s2 = control(&ws, "sessions/s2/comments");
    assert!(s2.contains("dry-run") && !s2.contains("rename"), "{s2}");
    assert_eq!(all, ok(rw(&ws, &["comment", "list"])));

    // JSON: one object a line, with what the comment is about.
    let json = ok(rw(&ws, &["comment", "list", "--json", "--session", "s1"]));
    let v: Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(
        (
            &v["id"],
            &v["change"],
            &v["path"],
            &v["line"],
            &v["context"]
        ),
        (
            &json!(1),
            &json!(id),
            &json!("f.txt"),
            &json!(2),
            &json!("2: two")
        )
    );
    assert_eq!((&v["state"], &v["session"]), (&json!("open"), &json!("s1")));

    // Resolved: gone from the open list, still in --all.
    assert_eq!(
        ok(rw(&ws, &["comment", "resolve", "1"])),
        format!("comment 1 on change {id} resolved\n")
    );
    assert!(!control(&ws, "comments").contains("rename two"));
    assert_eq!(control(&ws, "sessions/s1/comments"), "");
    let every = ok(rw(&ws, &["comment", "list", "--all"]));
    assert!(every.contains("comment 1 (resolved)"), "{every}");
    let again = rw(&ws, &["comment", "resolve", "1"]);
    assert_eq!(again.status.code(), Some(2));

    // Bad input: a clear error, nothing kept.
    for bad in [
        &["comment", "add", "--change", "999", "x"][..],
        &["comment", "add", "--session", "nosuch", "x"],
        &["comment", "add", "--change", &n, "--path", "g.txt", "x"],
        &["comment", "add", "--change", &n, "--line", "2", "x"],
        &["comment", "add", "--change", &n, "   "],
        &[
            "comment", "add", "--change", &n, "--path", "f.txt", "--line", "4", "x",
        ],
        &[
            "comment", "add", "--change", &n, "--path", "f.txt", "--hunk", "2", "x",
        ],
    ] {
        let o = rw(&ws, bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
    let every = ok(rw(&ws, &["comment", "list", "--all", "--json"]));
    assert_eq!(every.lines().count(), 2, "{every}");

    // Unmounted: added on the store, there at the next mount.
    ws.unmount();
    let out = ok(rw(
        &ws,
        &[
            "comment", "add", "--change", &n, "--path", "f.txt", "--hunk", "1", "again",
        ],
    ));
    assert_eq!(out, format!("comment 3 added on change {id}\n"));
    let listed = ok(rw(&ws, &["comment", "list", "--session", "s1"]));
    assert!(
        listed.contains("  > @@ -0,0 +1,3 @@\n    again\n"),
        "{listed}"
    );
    ws.mount();
    assert_eq!(control(&ws, "sessions/s1/comments"), listed);
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// `rewind mcp` in the workspace, its process registered as `session` (as `rewind hook`
/// registers the agent that starts it).
async fn connect(ws: &Workspace, session: &str) -> Client {
    let mut cmd = tokio::process::Command::new(REWIND);
    cmd.arg("mcp")
        .current_dir(ws.path())
        .env("XDG_DATA_HOME", ws.store().parent().unwrap().join("data"))
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT");
    let transport = TokioChildProcess::new(cmd).expect("spawn rewind mcp");
    let pid = transport.id().expect("its pid");
    let answer = ctl(ws, &format!("session start {session} --pid {pid}"));
    assert!(answer.contains("started"), "{answer}");
    ().serve(transport).await.expect("initialize")
}

/// The text of a `comments` call that must succeed.
async fn call(client: &Client, args: Value) -> String {
    let Value::Object(args) = args else {
        panic!("an object")
    };
    let request = CallToolRequestParams::new("comments").with_arguments(args);
    let r = client.call_tool(request).await.expect("call");
    assert_ne!(r.is_error, Some(true), "{r:?}");
    r.content
        .iter()
        .filter_map(|c| c.as_text())
        .map(|t| t.text.clone())
        .collect()
}

/// The MCP tool lists the open comments of the session the server's process tree is
/// attributed to (here a registration of the server itself, as `rewind hook` registers the
/// agent process that starts it).
#[tokio::test]
async fn the_mcp_tool_lists_the_callers_open_comments() {
    let mut ws = Workspace::new();
    let id = scene(&mut ws);
    let n = id.to_string();
    ok(rw(
        &ws,
        &[
            "comment", "add", "--change", &n, "--path", "f.txt", "--line", "3", "three?",
        ],
    ));
    ok(rw(&ws, &["comment", "add", "--session", "s2", "for s2"]));

    let s1 = connect(&ws, "s1").await;
    let text = call(&s1, json!({})).await;
    assert!(
        text.starts_with(&format!(
            "comment 1 (open) on change {id}, f.txt line 3 (session s1)\n"
        )),
        "{text}"
    );
    assert!(text.contains("\n  > 3: three\n    three?\n"), "{text}");
    assert!(!text.contains("for s2"), "{text}");
    let everyone = call(&s1, json!({"all_sessions": true})).await;
    assert!(
        everyone.contains("three?") && everyone.contains("for s2"),
        "{everyone}"
    );

    let s2 = connect(&ws, "s2").await;
    let text = call(&s2, json!({})).await;
    assert!(
        text.contains("for s2") && !text.contains("three?"),
        "{text}"
    );
    ok(rw(&ws, &["comment", "resolve", "2"]));
    assert_eq!(
        call(&s2, json!({})).await,
        "no open comments for session s2\n"
    );
    s1.cancel().await.expect("cancel");
    s2.cancel().await.expect("cancel");
}
