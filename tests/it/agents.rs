//! Agents (issue 14): every agent's hook configuration installed and removed (merging with the
//! user's own), the payloads each agent sends, the installed hook commands run for real through
//! the agents' shells (mounted, unmounted, timed), stand-in agents that drive their real hooks
//! against a mounted workspace two at a time while editing files directly and through the shell,
//! then per-turn `turns`, `log --turn`, `diff --turn`, `.rewind/turns/` and per-turn rollback;
//! and `rewind mcp` spoken to with rmcp's client.
//!
//! The ported unit-level tests (install, parse, runtime with a fake rewind) come from the
//! standalone prototype; their fixtures are in `tests/it/fixtures/agents/AGENT/EVENT.json`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rewind::agent::{Agent, is_rewind_command};
use serde_json::Value;

use crate::common::{Workspace, ok, rw};

/// A realistic payload of `agent`'s `event`, as the agent sends it.
fn fixture(agent: Agent, event: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/fixtures/agents")
        .join(agent.as_str())
        .join(format!("{event}.json"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn fixture_json(agent: Agent, event: &str) -> Value {
    serde_json::from_slice(&fixture(agent, event)).unwrap()
}

/// The rewind binary as `rewind agent install` writes it into the hooks: `rewind`, found on
/// PATH (the test build's folder is first there, `path_with_rewind`).
fn real_rewind() -> String {
    "rewind".to_string()
}

/// The `XDG_DATA_HOME` the workspace's commands run with (beside its store).
fn data_home(ws: &Workspace) -> PathBuf {
    ws.store().parent().unwrap().join("data")
}

/// Where `rewind hook` logs what went wrong.
fn hook_log(ws: &Workspace) -> String {
    std::fs::read_to_string(data_home(ws).join("rewind/hook.log")).unwrap_or_default()
}

/// One JSON object a line.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// What a hook command gave back.
#[derive(Debug)]
struct HookRun {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Run `shell` (e.g. `["bash", "-c"]`) on `cmd` with `stdin`, in `dir`, as an agent runs a hook.
fn run_hook(shell: &[&str], cmd: &str, stdin: &[u8], dir: &Path, data: &Path) -> HookRun {
    let mut child = Command::new(shell[0])
        .args(&shell[1..])
        .arg(cmd)
        .current_dir(dir)
        .env("XDG_DATA_HOME", data)
        .env("PATH", crate::common::path_with_rewind())
        .env("HOME", {
            let home = data.join("home");
            std::fs::create_dir_all(&home).unwrap();
            crate::common::login_profile(&home);
            home
        })
        .env_remove("REWIND_SESSION")
        .env_remove("REWIND_AGENT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A hook that exits without reading (missing binary) closes the pipe: ignore EPIPE.
    let _ = std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin);
    let out = child.wait_with_output().unwrap();
    HookRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The agents whose hooks are shell commands (OpenCode's is a plugin).
const COMMAND_AGENTS: [Agent; 4] = [Agent::Claude, Agent::Codex, Agent::Gemini, Agent::Cursor];

/// The shell each agent runs a hook command with (src/agent/NOTES.md): Claude Code and Gemini
/// CLI `bash -c`, Codex `$SHELL -lc` (a login shell), Cursor a shell string (`sh -c`).
fn agent_shell(agent: Agent) -> &'static [&'static str] {
    match agent {
        Agent::Claude | Agent::Gemini => &["bash", "-c"],
        Agent::Codex => &["bash", "-lc"],
        Agent::Cursor | Agent::Opencode => &["sh", "-c"],
    }
}

/// Exactly what the agent must read on the hook's stdout.
fn expected_stdout(agent: Agent, event: &str) -> String {
    rewind::agent::reply(agent, event)
        .map(|r| r + "\n")
        .unwrap_or_default()
}

/// The hook config file `rewind agent install` writes for `agent`, and whether its handlers
/// are nested in groups (`{"hooks": [...]}`) or flat (Cursor).
fn config_file(agent: Agent) -> (&'static str, bool) {
    match agent {
        Agent::Claude => (".claude/settings.json", true),
        Agent::Codex => (".codex/hooks.json", true),
        Agent::Gemini => (".gemini/settings.json", true),
        Agent::Cursor => (".cursor/hooks.json", false),
        Agent::Opencode => (".opencode/plugins/rewind.js", false),
    }
}

/// rewind's commands in the agent's installed config: (event, command), in file order.
fn installed_commands(ws: &Path, agent: Agent) -> Vec<(String, String)> {
    let (rel, nested) = config_file(agent);
    let text = std::fs::read_to_string(ws.join(rel)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for (event, entries) in v["hooks"].as_object().unwrap() {
        let Some(entries) = entries.as_array() else {
            continue;
        };
        for e in entries {
            let handlers = if nested {
                e["hooks"].as_array().cloned().unwrap_or_default()
            } else {
                vec![e.clone()]
            };
            for h in handlers {
                if let Some(cmd) = h["command"].as_str()
                    && is_rewind_command(cmd, agent)
                {
                    out.push((event.clone(), cmd.to_string()));
                }
            }
        }
    }
    out
}

/// A token unique to this test run, for session and prompt ids.
fn unique(label: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let seed = format!(
        "{label} {} {} {:?}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
    );
    blake3::hash(seed.as_bytes()).to_hex().to_string()
}

/// A fresh id shaped like a UUID.
fn uuid_like(label: &str) -> String {
    let h = unique(label);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// install/uninstall against folders holding the user's own configuration (the library).
mod install {
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    use rewind::agent::{
        Agent, Error, events, hook_command, install, is_rewind_command, opencode_plugin_source,
        uninstall,
    };
    use serde_json::{Value, json};

    const FAKE_REWIND: &str = "/usr/local/bin/rewind";

    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "rewind-agents-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    fn read(p: &Path) -> String {
        fs::read_to_string(p).unwrap()
    }

    fn json_of(p: &Path) -> Value {
        serde_json::from_str(&read(p)).unwrap()
    }

    fn pretty(v: &Value) -> String {
        serde_json::to_string_pretty(v).unwrap() + "\n"
    }

    /// All commands in a nested hooks object, per event.
    fn nested_commands(hooks: &Value, event: &str) -> Vec<String> {
        hooks[event]
            .as_array()
            .map(|groups| {
                groups
                    .iter()
                    .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
                    .filter_map(|h| h["command"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn flat_commands(hooks: &Value, event: &str) -> Vec<String> {
        hooks[event]
            .as_array()
            .map(|hs| {
                hs.iter()
                    .filter_map(|h| h["command"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn count_ours(agent: Agent, cmds: &[String]) -> usize {
        cmds.iter().filter(|c| is_rewind_command(c, agent)).count()
    }

    // ---------------------------------------------------------------- Claude Code

    fn claude_user_settings() -> Value {
        json!({
            "$schema": "https://json.schemastore.org/claude-code-settings.json",
            "permissions": { "allow": ["Bash(cargo test:*)"], "deny": ["Read(./.env)"] },
            "env": { "RUST_LOG": "debug" },
            "hooks": {
                "PreToolUse": [
                    { "matcher": "Bash", "hooks": [ { "type": "command", "command": "./scripts/check-bash.sh", "timeout": 30 } ] }
                ],
                "Notification": [
                    { "hooks": [ { "type": "command", "command": "notify-send 'Claude needs you'" } ] }
                ]
            },
            "statusLine": { "type": "command", "command": "~/.claude/statusline.sh" }
        })
    }

    #[test]
    fn claude_merge_idempotent_and_clean_uninstall() {
        let ws = TempDir::new();
        let p = ws.path().join(".claude/settings.json");
        let original = pretty(&claude_user_settings());
        write(&p, &original);

        let written = install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        assert_eq!(written, vec![p.clone()]);
        let v = json_of(&p);
        // Unrelated settings intact.
        for k in ["$schema", "permissions", "env", "statusLine"] {
            assert_eq!(v[k], claude_user_settings()[k], "{k}");
        }
        // The user's hooks keep their place; ours come after.
        assert_eq!(
            v["hooks"]["PreToolUse"][0],
            claude_user_settings()["hooks"]["PreToolUse"][0]
        );
        assert_eq!(v["hooks"]["PreToolUse"][1]["matcher"], "*");
        assert_eq!(
            v["hooks"]["Notification"],
            claude_user_settings()["hooks"]["Notification"]
        );
        for &e in events(Agent::Claude) {
            let cmds = nested_commands(&v["hooks"], e);
            assert_eq!(count_ours(Agent::Claude, &cmds), 1, "{e}");
            assert!(cmds.contains(&hook_command(Agent::Claude, FAKE_REWIND, e)));
        }
        assert_eq!(
            v["hooks"]["Stop"][0],
            json!({"hooks": [{
                "type": "command",
                "command": "/usr/local/bin/rewind hook claude Stop || true",
                "timeout": 5
            }]})
        );

        // Installing twice changes nothing.
        let after_first = read(&p);
        assert!(
            install(Agent::Claude, ws.path(), FAKE_REWIND)
                .unwrap()
                .is_empty()
        );
        assert_eq!(read(&p), after_first);

        // A new rewind path updates our entries in place (still one per event).
        install(Agent::Claude, ws.path(), "/opt/rewind 2/bin/rewind").unwrap();
        let v2 = json_of(&p);
        for &e in events(Agent::Claude) {
            let cmds = nested_commands(&v2["hooks"], e);
            assert_eq!(count_ours(Agent::Claude, &cmds), 1, "{e}");
            assert!(cmds.contains(&hook_command(Agent::Claude, "/opt/rewind 2/bin/rewind", e)));
        }
        assert_eq!(
            v2["hooks"]["PreToolUse"][0],
            claude_user_settings()["hooks"]["PreToolUse"][0]
        );

        // Uninstall restores the file byte for byte.
        assert_eq!(
            uninstall(Agent::Claude, ws.path()).unwrap(),
            vec![p.clone()]
        );
        assert_eq!(read(&p), original);
        assert!(uninstall(Agent::Claude, ws.path()).unwrap().is_empty());
        assert_eq!(read(&p), original);
    }

    #[test]
    fn claude_fresh_workspace_creates_and_removes_everything() {
        let ws = TempDir::new();
        let written = install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        let p = ws.path().join(".claude/settings.json");
        assert_eq!(written, vec![p.clone()]);
        let v = json_of(&p);
        assert_eq!(
            v.as_object().unwrap().keys().collect::<Vec<_>>(),
            vec!["hooks"]
        );
        let keys: Vec<&String> = v["hooks"].as_object().unwrap().keys().collect();
        assert_eq!(keys, events(Agent::Claude).iter().collect::<Vec<_>>());
        uninstall(Agent::Claude, ws.path()).unwrap();
        assert!(!p.exists());
        assert!(!ws.path().join(".claude").exists());
        assert!(ws.path().exists());
    }

    #[test]
    fn claude_keeps_dot_claude_dir_with_other_files() {
        let ws = TempDir::new();
        write(
            &ws.path().join(".claude/commands/review.md"),
            "Review the diff.\n",
        );
        install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        uninstall(Agent::Claude, ws.path()).unwrap();
        assert!(!ws.path().join(".claude/settings.json").exists());
        assert_eq!(
            read(&ws.path().join(".claude/commands/review.md")),
            "Review the diff.\n"
        );
    }

    #[test]
    fn our_handler_inside_a_user_group_is_moved_out() {
        let ws = TempDir::new();
        let p = ws.path().join(".claude/settings.json");
        let user = json!({"hooks": {"PostToolUse": [{"matcher": "Edit|Write", "hooks": [
            {"type": "command", "command": "prettier --write \"$CLAUDE_PROJECT_DIR\""},
            {"type": "command", "command": "/old/path/rewind hook claude PostToolUse"}
        ]}]}});
        write(&p, &pretty(&user));
        install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        let v = json_of(&p);
        assert_eq!(
            v["hooks"]["PostToolUse"][0],
            json!({"matcher": "Edit|Write", "hooks": [
                {"type": "command", "command": "prettier --write \"$CLAUDE_PROJECT_DIR\""}
            ]})
        );
        assert_eq!(v["hooks"]["PostToolUse"][1]["matcher"], "*");
        assert_eq!(
            count_ours(Agent::Claude, &nested_commands(&v["hooks"], "PostToolUse")),
            1
        );
    }

    #[test]
    fn stale_entries_under_other_events_are_removed_on_install() {
        let ws = TempDir::new();
        let p = ws.path().join(".claude/settings.json");
        let user = json!({"hooks": {
            "Notification": [{"hooks": [{"type": "command", "command": "rewind hook claude Notification"}]}],
            "SubagentStop": [{"hooks": [{"type": "command", "command": "echo done"}]}]
        }});
        write(&p, &pretty(&user));
        install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        let v = json_of(&p);
        assert!(v["hooks"].get("Notification").is_none());
        assert_eq!(v["hooks"]["SubagentStop"], user["hooks"]["SubagentStop"]);
    }

    #[test]
    fn other_agents_entries_are_not_touched() {
        let ws = TempDir::new();
        let p = ws.path().join(".claude/settings.json");
        // e.g. a Codex hook command that someone put in Claude's settings.
        let user = json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "rewind hook codex Stop"}]}]}});
        write(&p, &pretty(&user));
        install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        uninstall(Agent::Claude, ws.path()).unwrap();
        assert_eq!(json_of(&p), user);
    }

    #[test]
    fn indentation_and_missing_trailing_newline_are_preserved() {
        let ws = TempDir::new();
        let p = ws.path().join(".claude/settings.json");
        let original = "{\n    \"model\": \"opus\",\n    \"hooks\": {\n        \"Stop\": [\n            {\n                \"hooks\": [\n                    {\n                        \"type\": \"command\",\n                        \"command\": \"say done\"\n                    }\n                ]\n            }\n        ]\n    }\n}";
        write(&p, original);
        install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        let text = read(&p);
        assert!(text.contains("\n    \"model\": \"opus\""));
        assert!(!text.ends_with('\n'));
        uninstall(Agent::Claude, ws.path()).unwrap();
        assert_eq!(read(&p), original);
    }

    #[test]
    fn unparseable_files_are_errors_and_untouched() {
        let cases: &[(Agent, &str, &str)] = &[
            (
                Agent::Claude,
                ".claude/settings.json",
                "{\n  \"hooks\": {,\n}\n",
            ),
            // Gemini accepts comments in settings.json, serde_json does not: refuse.
            (
                Agent::Gemini,
                ".gemini/settings.json",
                "{\n  // my settings\n  \"theme\": \"Dracula\"\n}\n",
            ),
            (Agent::Cursor, ".cursor/hooks.json", "not json"),
            (Agent::Codex, ".codex/hooks.json", "{\"hooks\": [}"),
            (
                Agent::Codex,
                ".codex/config.toml",
                "model = \"o3\"\n[hooks\n",
            ),
        ];
        for (agent, rel, text) in cases {
            let ws = TempDir::new();
            let p = ws.path().join(rel);
            write(&p, text);
            for result in [
                install(*agent, ws.path(), FAKE_REWIND),
                uninstall(*agent, ws.path()),
            ] {
                match result {
                    Err(e @ Error::Parse { .. }) => {
                        let msg = e.to_string();
                        assert!(msg.contains(rel), "{msg}");
                    }
                    other => panic!("{agent} {rel}: expected a parse error, got {other:?}"),
                }
                assert_eq!(read(&p), *text);
            }
        }
    }

    #[test]
    fn wrong_shapes_are_errors_and_untouched() {
        let cases: &[(Agent, &str, &str)] = &[
            (Agent::Claude, ".claude/settings.json", "[1, 2]\n"),
            (Agent::Claude, ".claude/settings.json", "{\"hooks\": []}\n"),
            (
                Agent::Claude,
                ".claude/settings.json",
                "{\"hooks\": {\"Stop\": {\"hooks\": []}}}\n",
            ),
            (
                Agent::Cursor,
                ".cursor/hooks.json",
                "{\"version\": 1, \"hooks\": {\"stop\": \"./x.sh\"}}\n",
            ),
            (
                Agent::Gemini,
                ".gemini/settings.json",
                "{\"hooks\": \"off\"}\n",
            ),
        ];
        for (agent, rel, text) in cases {
            let ws = TempDir::new();
            let p = ws.path().join(rel);
            write(&p, text);
            let r = install(*agent, ws.path(), FAKE_REWIND);
            assert!(
                matches!(r, Err(Error::Shape { .. })),
                "{agent} {text}: {r:?}"
            );
            assert_eq!(read(&p), *text);
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlinked_settings_stay_symlinks() {
        let ws = TempDir::new();
        let target = ws.path().join("dotfiles/claude-settings.json");
        let original = pretty(&json!({"model": "opus"}));
        write(&target, &original);
        fs::create_dir_all(ws.path().join(".claude")).unwrap();
        let link = ws.path().join(".claude/settings.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        install(Agent::Claude, ws.path(), FAKE_REWIND).unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(read(&target).contains("rewind hook claude Stop"));
        uninstall(Agent::Claude, ws.path()).unwrap();
        assert_eq!(read(&target), original);
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    // ------------------------------------------------------------------ Gemini CLI

    #[test]
    fn gemini_merge_idempotent_and_clean_uninstall() {
        let ws = TempDir::new();
        let p = ws.path().join(".gemini/settings.json");
        let user = json!({
            "general": { "vimMode": true },
            "hooksConfig": { "enabled": true, "disabled": ["noisy"] },
            "hooks": {
                "BeforeTool": [
                    { "matcher": "write_file|replace", "hooks": [
                        { "name": "secret-scan", "type": "command", "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/scan.sh", "timeout": 5000 }
                    ] }
                ],
                "PreCompress": [ { "hooks": [ { "type": "command", "command": "echo compress >&2" } ] } ]
            },
            "mcpServers": { "github": { "command": "github-mcp" } }
        });
        let original = pretty(&user);
        write(&p, &original);
        assert_eq!(
            install(Agent::Gemini, ws.path(), FAKE_REWIND).unwrap(),
            vec![p.clone()]
        );
        let v = json_of(&p);
        assert_eq!(v["general"], user["general"]);
        assert_eq!(v["hooksConfig"], user["hooksConfig"]);
        assert_eq!(v["mcpServers"], user["mcpServers"]);
        assert_eq!(v["hooks"]["BeforeTool"][0], user["hooks"]["BeforeTool"][0]);
        assert_eq!(v["hooks"]["PreCompress"], user["hooks"]["PreCompress"]);
        for &e in events(Agent::Gemini) {
            assert_eq!(
                count_ours(Agent::Gemini, &nested_commands(&v["hooks"], e)),
                1,
                "{e}"
            );
        }
        assert_eq!(
            v["hooks"]["AfterTool"][0],
            json!({"hooks": [{
                "name": "rewind",
                "type": "command",
                "command": "/usr/local/bin/rewind hook gemini AfterTool 2>/dev/null || true",
                "timeout": 5000
            }]})
        );
        let once = read(&p);
        assert!(
            install(Agent::Gemini, ws.path(), FAKE_REWIND)
                .unwrap()
                .is_empty()
        );
        assert_eq!(read(&p), once);
        uninstall(Agent::Gemini, ws.path()).unwrap();
        assert_eq!(read(&p), original);
    }

    #[test]
    fn gemini_non_event_keys_inside_hooks_survive() {
        // Older Gemini CLI versions kept `enabled` / `disabled` inside `hooks`.
        let ws = TempDir::new();
        let p = ws.path().join(".gemini/settings.json");
        let user = json!({"hooks": {"enabled": true, "disabled": ["x"]}});
        let original = pretty(&user);
        write(&p, &original);
        install(Agent::Gemini, ws.path(), FAKE_REWIND).unwrap();
        let v = json_of(&p);
        assert_eq!(v["hooks"]["enabled"], true);
        assert_eq!(v["hooks"]["disabled"], json!(["x"]));
        uninstall(Agent::Gemini, ws.path()).unwrap();
        assert_eq!(read(&p), original);
    }

    // ---------------------------------------------------------------------- Cursor

    #[test]
    fn cursor_merge_idempotent_and_clean_uninstall() {
        let ws = TempDir::new();
        let p = ws.path().join(".cursor/hooks.json");
        let user = json!({
            "version": 1,
            "hooks": {
                "afterFileEdit": [ { "command": "./hooks/format.sh" } ],
                "beforeShellExecution": [ { "command": "./hooks/block-git.sh", "timeout": 10, "failClosed": true } ]
            }
        });
        let original = pretty(&user);
        write(&p, &original);
        install(Agent::Cursor, ws.path(), FAKE_REWIND).unwrap();
        let v = json_of(&p);
        assert_eq!(v["version"], 1);
        assert_eq!(
            v["hooks"]["afterFileEdit"][0],
            user["hooks"]["afterFileEdit"][0]
        );
        assert_eq!(
            v["hooks"]["beforeShellExecution"],
            user["hooks"]["beforeShellExecution"]
        );
        for &e in events(Agent::Cursor) {
            assert_eq!(
                count_ours(Agent::Cursor, &flat_commands(&v["hooks"], e)),
                1,
                "{e}"
            );
        }
        assert_eq!(
            v["hooks"]["beforeSubmitPrompt"][0],
            json!({
                "command": "/usr/local/bin/rewind hook cursor beforeSubmitPrompt || echo '{\"continue\":true}'",
                "timeout": 5
            })
        );
        assert_eq!(
            v["hooks"]["stop"][0]["command"],
            "/usr/local/bin/rewind hook cursor stop || echo '{}'"
        );
        let once = read(&p);
        assert!(
            install(Agent::Cursor, ws.path(), FAKE_REWIND)
                .unwrap()
                .is_empty()
        );
        assert_eq!(read(&p), once);
        uninstall(Agent::Cursor, ws.path()).unwrap();
        assert_eq!(read(&p), original);
    }

    #[test]
    fn cursor_fresh_file_has_version_and_is_removed_again() {
        let ws = TempDir::new();
        install(Agent::Cursor, ws.path(), FAKE_REWIND).unwrap();
        let p = ws.path().join(".cursor/hooks.json");
        let v = json_of(&p);
        assert_eq!(
            v.as_object().unwrap().keys().collect::<Vec<_>>(),
            vec!["version", "hooks"]
        );
        assert_eq!(v["version"], 1);
        uninstall(Agent::Cursor, ws.path()).unwrap();
        assert!(!p.exists());
        assert!(!ws.path().join(".cursor").exists());
    }

    // ----------------------------------------------------------------------- Codex

    #[test]
    fn codex_json_merge_idempotent_and_clean_uninstall() {
        let ws = TempDir::new();
        let p = ws.path().join(".codex/hooks.json");
        let user = json!({"hooks": {
            "PreToolUse": [ { "matcher": "^Bash$", "hooks": [
                { "type": "command", "command": "python3 .codex/hooks/policy.py", "statusMessage": "Checking Bash command" }
            ] } ],
            "PermissionRequest": [ { "hooks": [ { "type": "command", "command": "notify-send approval" } ] } ]
        }});
        let original = pretty(&user);
        write(&p, &original);
        // config.toml without hooks: we must not write there, and it stays byte-identical.
        let toml = "# project codex settings\nmodel = \"gpt-5.3-codex\"  # fast\n\n[features]\nhooks = true\n";
        let tp = ws.path().join(".codex/config.toml");
        write(&tp, toml);

        assert_eq!(
            install(Agent::Codex, ws.path(), FAKE_REWIND).unwrap(),
            vec![p.clone()]
        );
        assert_eq!(read(&tp), toml);
        let v = json_of(&p);
        assert_eq!(
            v.as_object().unwrap().keys().collect::<Vec<_>>(),
            vec!["hooks"],
            "hooks.json rejects other top-level keys"
        );
        assert_eq!(v["hooks"]["PreToolUse"][0], user["hooks"]["PreToolUse"][0]);
        assert_eq!(
            v["hooks"]["PermissionRequest"],
            user["hooks"]["PermissionRequest"]
        );
        for &e in events(Agent::Codex) {
            assert_eq!(
                count_ours(Agent::Codex, &nested_commands(&v["hooks"], e)),
                1,
                "{e}"
            );
        }
        assert_eq!(v["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"], 3);
        assert_eq!(v["hooks"]["Stop"][0]["hooks"][0]["timeout"], 5);
        assert!(v["hooks"]["PreToolUse"][1].get("matcher").is_none());
        let once = read(&p);
        assert!(
            install(Agent::Codex, ws.path(), FAKE_REWIND)
                .unwrap()
                .is_empty()
        );
        assert_eq!(read(&p), once);
        uninstall(Agent::Codex, ws.path()).unwrap();
        assert_eq!(read(&p), original);
        assert_eq!(read(&tp), toml);
    }

    const CODEX_TOML: &str = r#"# Codex project config — keep comments!
model = "gpt-5.3-codex"
approval_policy = "on-request"   # ask before running

[features]
hooks = true

# Lint after every turn.
[[hooks.Stop]]

[[hooks.Stop.hooks]]
type = "command"
command = "cargo clippy --quiet"   # fast enough
timeout = 120

[mcp_servers.docs]
command = "docs-mcp"
args = ["--stdio"]
"#;

    #[test]
    fn codex_toml_inline_hooks_are_extended_in_place_with_comments_kept() {
        let ws = TempDir::new();
        let tp = ws.path().join(".codex/config.toml");
        write(&tp, CODEX_TOML);
        assert_eq!(
            install(Agent::Codex, ws.path(), FAKE_REWIND).unwrap(),
            vec![tp.clone()]
        );
        assert!(
            !ws.path().join(".codex/hooks.json").exists(),
            "no second representation in the same layer"
        );
        let text = read(&tp);
        // Every original line is still there, in order.
        let mut rest = text.as_str();
        for line in CODEX_TOML.lines().filter(|l| !l.trim().is_empty()) {
            let i = rest
                .find(line)
                .unwrap_or_else(|| panic!("lost line {line:?} in\n{text}"));
            rest = &rest[i + line.len()..];
        }
        let parsed: toml_edit::DocumentMut = text.parse().unwrap();
        let hooks = parsed["hooks"].as_table().unwrap();
        for &e in events(Agent::Codex) {
            let groups = hooks[e]
                .as_array_of_tables()
                .unwrap_or_else(|| panic!("{e} in\n{text}"));
            let cmds: Vec<String> = groups
                .iter()
                .flat_map(|g| g["hooks"].as_array_of_tables().unwrap().iter())
                .map(|h| h["command"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(count_ours(Agent::Codex, &cmds), 1, "{e}");
        }
        // The user's Stop hook is still first.
        assert_eq!(
            hooks["Stop"].as_array_of_tables().unwrap().get(0).unwrap()["hooks"][0]["command"]
                .as_str(),
            Some("cargo clippy --quiet")
        );
        assert_eq!(
            parsed["mcp_servers"]["docs"]["command"].as_str(),
            Some("docs-mcp")
        );

        let once = read(&tp);
        assert!(
            install(Agent::Codex, ws.path(), FAKE_REWIND)
                .unwrap()
                .is_empty()
        );
        assert_eq!(read(&tp), once);

        // New rewind path: updated in place, still one each.
        install(Agent::Codex, ws.path(), "/home/me/.cargo/bin/rewind").unwrap();
        let t2 = read(&tp);
        assert_eq!(t2.matches("hook codex PreToolUse").count(), 1);
        assert!(t2.contains("/home/me/.cargo/bin/rewind hook codex PreToolUse"));

        assert_eq!(
            uninstall(Agent::Codex, ws.path()).unwrap(),
            vec![tp.clone()]
        );
        assert_eq!(read(&tp), CODEX_TOML);
    }

    #[test]
    fn codex_stale_toml_entries_are_removed_when_installing_to_json() {
        let ws = TempDir::new();
        let tp = ws.path().join(".codex/config.toml");
        let jp = ws.path().join(".codex/hooks.json");
        let toml = "model = \"o3\"\n\n[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"/old/rewind hook codex Stop\"\n";
        write(&tp, toml);
        write(&jp, "{\n  \"hooks\": {}\n}\n");
        let written = install(Agent::Codex, ws.path(), FAKE_REWIND).unwrap();
        assert_eq!(written, vec![jp.clone(), tp.clone()]);
        assert_eq!(read(&tp), "model = \"o3\"\n");
        assert_eq!(
            count_ours(
                Agent::Codex,
                &nested_commands(&json_of(&jp)["hooks"], "Stop")
            ),
            1
        );
    }

    #[test]
    fn codex_fresh_workspace_uses_hooks_json() {
        let ws = TempDir::new();
        install(Agent::Codex, ws.path(), FAKE_REWIND).unwrap();
        assert!(ws.path().join(".codex/hooks.json").exists());
        assert!(!ws.path().join(".codex/config.toml").exists());
        uninstall(Agent::Codex, ws.path()).unwrap();
        assert!(!ws.path().join(".codex").exists());
    }

    // -------------------------------------------------------------------- OpenCode

    #[test]
    fn opencode_plugin_file_lifecycle() {
        let ws = TempDir::new();
        let user_plugin = ws.path().join(".opencode/plugins/notify.js");
        write(&user_plugin, "export const Notify = async () => ({})\n");
        let cfg = ws.path().join("opencode.json");
        write(
            &cfg,
            "{\n  \"$schema\": \"https://opencode.ai/config.json\"\n}\n",
        );

        let p = ws.path().join(".opencode/plugins/rewind.js");
        assert_eq!(
            install(Agent::Opencode, ws.path(), FAKE_REWIND).unwrap(),
            vec![p.clone()]
        );
        let src = read(&p);
        assert!(src.starts_with("// rewind-managed-plugin"));
        assert!(src.contains("const REWIND = \"/usr/local/bin/rewind\""));
        assert!(
            install(Agent::Opencode, ws.path(), FAKE_REWIND)
                .unwrap()
                .is_empty()
        );

        // A path with quotes and backslashes is embedded as a valid JS string literal.
        install(Agent::Opencode, ws.path(), "/opt/we\"ird\\path/rewind").unwrap();
        assert!(read(&p).contains(r#"const REWIND = "/opt/we\"ird\\path/rewind""#));

        assert_eq!(
            uninstall(Agent::Opencode, ws.path()).unwrap(),
            vec![p.clone()]
        );
        assert!(!p.exists());
        assert_eq!(
            read(&user_plugin),
            "export const Notify = async () => ({})\n"
        );
        assert_eq!(
            read(&cfg),
            "{\n  \"$schema\": \"https://opencode.ai/config.json\"\n}\n"
        );
    }

    #[test]
    fn opencode_does_not_overwrite_a_foreign_plugin_and_cleans_empty_dirs() {
        let ws = TempDir::new();
        let p = ws.path().join(".opencode/plugins/rewind.js");
        write(&p, "export const Mine = async () => ({})\n");
        assert!(matches!(
            install(Agent::Opencode, ws.path(), FAKE_REWIND),
            Err(Error::Shape { .. })
        ));
        assert!(uninstall(Agent::Opencode, ws.path()).unwrap().is_empty());
        assert_eq!(read(&p), "export const Mine = async () => ({})\n");

        let ws = TempDir::new();
        install(Agent::Opencode, ws.path(), FAKE_REWIND).unwrap();
        uninstall(Agent::Opencode, ws.path()).unwrap();
        assert!(!ws.path().join(".opencode").exists());
    }

    #[test]
    fn opencode_legacy_singular_directory_copy_is_replaced() {
        let ws = TempDir::new();
        let legacy = ws.path().join(".opencode/plugin/rewind.js");
        write(&legacy, &opencode_plugin_source("/old/rewind"));
        let written = install(Agent::Opencode, ws.path(), FAKE_REWIND).unwrap();
        assert_eq!(
            written,
            vec![
                ws.path().join(".opencode/plugins/rewind.js"),
                legacy.clone()
            ]
        );
        assert!(!legacy.exists());
    }

    // ------------------------------------------------------------------ all agents

    #[test]
    fn install_uninstall_in_one_workspace_for_all_agents() {
        let ws = TempDir::new();
        for a in Agent::ALL {
            install(a, ws.path(), FAKE_REWIND).unwrap();
        }
        for a in Agent::ALL {
            assert!(
                install(a, ws.path(), FAKE_REWIND).unwrap().is_empty(),
                "{a} not idempotent"
            );
        }
        for a in Agent::ALL {
            assert!(!uninstall(a, ws.path()).unwrap().is_empty(), "{a}");
        }
        assert_eq!(
            fs::read_dir(ws.path()).unwrap().count(),
            0,
            "workspace left non-empty"
        );
    }

    #[test]
    fn codex_toml_with_inline_array_hooks_falls_back_to_hooks_json() {
        let ws = TempDir::new();
        let tp = ws.path().join(".codex/config.toml");
        let toml = "[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"say done\"\n\n[hooks]\nPreToolUse = [{ hooks = [{ type = \"command\", command = \"check.sh\" }] }]\n";
        write(&tp, toml);
        let written = install(Agent::Codex, ws.path(), FAKE_REWIND).unwrap();
        assert_eq!(written, vec![ws.path().join(".codex/hooks.json")]);
        assert_eq!(read(&tp), toml);
        uninstall(Agent::Codex, ws.path()).unwrap();
        assert_eq!(read(&tp), toml);
        assert!(!ws.path().join(".codex/hooks.json").exists());
    }
}

/// Payload parsing against realistic fixtures, malformed input and random bytes.
mod parse {
    use rewind::agent::{Agent, HookEvent, events, parse, reply};

    use super::fixture;

    fn s(x: &str) -> String {
        x.to_string()
    }

    fn some(x: &str) -> Option<String> {
        Some(x.to_string())
    }

    const CLAUDE_SID: &str = "8c3b1f2e-5d4a-4f6b-9a7e-2b1c0d9e8f7a";
    const CODEX_SID: &str = "019a6f3c-2b4d-7e81-9c0a-5d3f8e1b2a47";
    const GEMINI_SID: &str = "3f9d2c71-8a4e-4b0f-b6d5-1e7c9a2f4b83";
    const CURSOR_SID: &str = "a1b2c3d4-e5f6-4789-8abc-def012345678";
    const OPENCODE_SID: &str = "ses_6f1c2a9b3ffeQ2m7Xw1Zk8d4Rt";

    fn expected() -> Vec<(Agent, &'static str, HookEvent)> {
        use HookEvent::*;
        vec![
            (
                Agent::Claude,
                "SessionStart",
                SessionStart {
                    session_id: s(CLAUDE_SID),
                },
            ),
            (
                Agent::Claude,
                "UserPromptSubmit",
                Prompt {
                    session_id: s(CLAUDE_SID),
                    prompt: s("Add a --dry-run flag to the sync command"),
                    prompt_id: some("0b7c5e1a-93d2-4c61-a0f4-6e2d8b91c3aa"),
                },
            ),
            (
                Agent::Claude,
                "PreToolUse",
                ToolStart {
                    session_id: s(CLAUDE_SID),
                    tool: s("Edit"),
                    tool_id: some("toolu_01HxQ2b7V9kLmN3pR5sT8uWy"),
                },
            ),
            (
                Agent::Claude,
                "PostToolUse",
                ToolEnd {
                    session_id: s(CLAUDE_SID),
                    tool: s("Bash"),
                    tool_id: some("toolu_01JzR4c8W0mNoP4qS6tU9vXz"),
                },
            ),
            (
                Agent::Claude,
                "Stop",
                Stop {
                    session_id: s(CLAUDE_SID),
                },
            ),
            (
                Agent::Claude,
                "SessionEnd",
                SessionEnd {
                    session_id: s(CLAUDE_SID),
                },
            ),
            (
                Agent::Codex,
                "SessionStart",
                SessionStart {
                    session_id: s(CODEX_SID),
                },
            ),
            (
                Agent::Codex,
                "UserPromptSubmit",
                Prompt {
                    session_id: s(CODEX_SID),
                    prompt: s("Fix the flaky test in tests/net.rs"),
                    prompt_id: some("019a6f3d-0e6a-7b12-8f44-a1c2d3e4f5a6"),
                },
            ),
            (
                Agent::Codex,
                "PreToolUse",
                ToolStart {
                    session_id: s(CODEX_SID),
                    tool: s("Bash"),
                    tool_id: some("call_8QmV2kT7pLx3RzN1bC5dF0aE"),
                },
            ),
            (
                Agent::Codex,
                "PostToolUse",
                ToolEnd {
                    session_id: s(CODEX_SID),
                    tool: s("apply_patch"),
                    tool_id: some("call_4HnW8sY1qMz6TcR9vB2xK7pJ"),
                },
            ),
            (
                Agent::Codex,
                "Stop",
                Stop {
                    session_id: s(CODEX_SID),
                },
            ),
            (
                Agent::Codex,
                "SessionEnd",
                SessionEnd {
                    session_id: s(CODEX_SID),
                },
            ),
            (
                Agent::Gemini,
                "SessionStart",
                SessionStart {
                    session_id: s(GEMINI_SID),
                },
            ),
            (
                Agent::Gemini,
                "BeforeAgent",
                Prompt {
                    session_id: s(GEMINI_SID),
                    prompt: s("Rename Config::load to Config::from_path everywhere"),
                    prompt_id: None,
                },
            ),
            (
                Agent::Gemini,
                "BeforeTool",
                ToolStart {
                    session_id: s(GEMINI_SID),
                    tool: s("replace"),
                    tool_id: None,
                },
            ),
            (
                Agent::Gemini,
                "AfterTool",
                ToolEnd {
                    session_id: s(GEMINI_SID),
                    tool: s("run_shell_command"),
                    tool_id: None,
                },
            ),
            (
                Agent::Gemini,
                "AfterAgent",
                Stop {
                    session_id: s(GEMINI_SID),
                },
            ),
            (
                Agent::Gemini,
                "SessionEnd",
                SessionEnd {
                    session_id: s(GEMINI_SID),
                },
            ),
            (
                Agent::Cursor,
                "sessionStart",
                SessionStart {
                    session_id: s(CURSOR_SID),
                },
            ),
            (
                Agent::Cursor,
                "beforeSubmitPrompt",
                Prompt {
                    session_id: s(CURSOR_SID),
                    prompt: s("Make the retry loop exponential"),
                    prompt_id: some("7f6e5d4c-3b2a-4190-8f7e-6d5c4b3a2910"),
                },
            ),
            (
                Agent::Cursor,
                "preToolUse",
                ToolStart {
                    session_id: s(CURSOR_SID),
                    tool: s("Write"),
                    tool_id: some("tool_9c1d7e0f-2a3b-4c5d-8e9f-0a1b2c3d4e5f"),
                },
            ),
            (
                Agent::Cursor,
                "postToolUse",
                ToolEnd {
                    session_id: s(CURSOR_SID),
                    tool: s("Shell"),
                    tool_id: some("tool_1e2f3a4b-5c6d-4e7f-8a9b-0c1d2e3f4a5b"),
                },
            ),
            (
                Agent::Cursor,
                "postToolUseFailure",
                ToolEnd {
                    session_id: s(CURSOR_SID),
                    tool: s("Shell"),
                    tool_id: None,
                },
            ),
            (
                Agent::Cursor,
                "afterFileEdit",
                ToolEnd {
                    session_id: s(CURSOR_SID),
                    tool: s("edit"),
                    tool_id: None,
                },
            ),
            (
                Agent::Cursor,
                "stop",
                Stop {
                    session_id: s(CURSOR_SID),
                },
            ),
            (
                Agent::Cursor,
                "sessionEnd",
                SessionEnd {
                    session_id: s(CURSOR_SID),
                },
            ),
            (
                Agent::Cursor,
                "beforeShellExecution",
                ToolStart {
                    session_id: s(CURSOR_SID),
                    tool: s("Shell"),
                    tool_id: None,
                },
            ),
            (
                Agent::Cursor,
                "afterShellExecution",
                ToolEnd {
                    session_id: s(CURSOR_SID),
                    tool: s("Shell"),
                    tool_id: None,
                },
            ),
            (
                Agent::Opencode,
                "session.created",
                SessionStart {
                    session_id: s(OPENCODE_SID),
                },
            ),
            (
                Agent::Opencode,
                "chat.message",
                Prompt {
                    session_id: s(OPENCODE_SID),
                    prompt: s("Add pagination to GET /users"),
                    prompt_id: some("msg_9a0b1c2d3e4fA5b6C7d8E9f0G1"),
                },
            ),
            (
                Agent::Opencode,
                "tool.execute.before",
                ToolStart {
                    session_id: s(OPENCODE_SID),
                    tool: s("edit"),
                    tool_id: some("toolu_01Kp7Qx2Lm9Rt4Vw6Yz8Ab3C"),
                },
            ),
            (
                Agent::Opencode,
                "tool.execute.after",
                ToolEnd {
                    session_id: s(OPENCODE_SID),
                    tool: s("edit"),
                    tool_id: some("toolu_01Kp7Qx2Lm9Rt4Vw6Yz8Ab3C"),
                },
            ),
            (
                Agent::Opencode,
                "session.idle",
                Stop {
                    session_id: s(OPENCODE_SID),
                },
            ),
            (
                Agent::Opencode,
                "session.deleted",
                SessionEnd {
                    session_id: s(OPENCODE_SID),
                },
            ),
        ]
    }

    #[test]
    fn fixtures_parse_to_expected_events() {
        for (agent, event, want) in expected() {
            let got = parse(agent, event, &fixture(agent, event))
                .unwrap_or_else(|e| panic!("{agent} {event}: {e}"));
            assert_eq!(got, want, "{agent} {event}");
        }
    }

    #[test]
    fn every_installed_event_has_a_fixture_and_is_not_ignored() {
        let table = expected();
        for agent in Agent::ALL {
            for &event in events(agent) {
                let (_, _, want) = table
                    .iter()
                    .find(|(a, e, _)| *a == agent && *e == event)
                    .unwrap_or_else(|| panic!("no expectation for {agent} {event}"));
                assert_ne!(*want, HookEvent::Ignored, "{agent} {event}");
            }
        }
    }

    #[test]
    fn fixture_hook_event_name_matches_file_name() {
        for (agent, event, _) in expected() {
            let v: serde_json::Value = serde_json::from_slice(&fixture(agent, event)).unwrap();
            assert_eq!(v["hook_event_name"], event, "{agent} {event}");
        }
    }

    #[test]
    fn unknown_events_are_ignored_but_still_need_a_json_object() {
        for agent in Agent::ALL {
            assert_eq!(
                parse(agent, "Notification", br#"{"session_id":"x"}"#).unwrap(),
                HookEvent::Ignored
            );
            assert_eq!(parse(agent, "", br#"{}"#).unwrap(), HookEvent::Ignored);
            assert!(parse(agent, "Notification", b"[1,2]").is_err());
            assert!(parse(agent, "Notification", b"").is_err());
        }
    }

    #[test]
    fn subagent_and_extra_fields_are_tolerated() {
        let p = br#"{"session_id":"s1","transcript_path":null,"cwd":"/p","hook_event_name":"PreToolUse",
        "agent_id":"a-1","agent_type":"Explore","tool_name":"Grep","tool_input":{"pattern":"x"},
        "tool_use_id":"toolu_1","effort":{"level":"high"},"new_field_from_the_future":[1,{"a":2}]}"#;
        assert_eq!(
            parse(Agent::Claude, "PreToolUse", p).unwrap(),
            HookEvent::ToolStart {
                session_id: s("s1"),
                tool: s("Grep"),
                tool_id: some("toolu_1")
            }
        );
        // Older Claude Code: no prompt_id. Empty prompt (e.g. only an image pasted) is allowed.
        let p = br#"{"session_id":"s1","hook_event_name":"UserPromptSubmit","prompt":""}"#;
        assert_eq!(
            parse(Agent::Claude, "UserPromptSubmit", p).unwrap(),
            HookEvent::Prompt {
                session_id: s("s1"),
                prompt: s(""),
                prompt_id: None
            }
        );
        // Claude Code PostToolUseFailure (not installed, parsed if configured by hand).
        let p = br#"{"session_id":"s1","hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_use_id":"t","error":"x"}"#;
        assert_eq!(
            parse(Agent::Claude, "PostToolUseFailure", p).unwrap(),
            HookEvent::ToolEnd {
                session_id: s("s1"),
                tool: s("Bash"),
                tool_id: some("t")
            }
        );
    }

    #[test]
    fn claude_hooks_run_by_cursor_are_ignored() {
        // Cursor can execute .claude/settings.json hooks; its payload carries cursor_version.
        let p = br#"{"conversation_id":"c","generation_id":"g","cursor_version":"2.6.11","hook_event_name":"preToolUse",
        "session_id":"c","tool_name":"Shell","tool_use_id":"t"}"#;
        assert_eq!(
            parse(Agent::Claude, "PreToolUse", p).unwrap(),
            HookEvent::Ignored
        );
    }

    #[test]
    fn cursor_session_falls_back_to_session_id() {
        let p =
            br#"{"hook_event_name":"sessionStart","session_id":"abc","is_background_agent":true}"#;
        assert_eq!(
            parse(Agent::Cursor, "sessionStart", p).unwrap(),
            HookEvent::SessionStart {
                session_id: s("abc")
            }
        );
    }

    #[test]
    fn missing_or_mistyped_required_fields_are_errors() {
        let cases: &[(Agent, &str, &[u8])] = &[
            (
                Agent::Claude,
                "SessionStart",
                br#"{"hook_event_name":"SessionStart"}"#,
            ),
            (Agent::Claude, "SessionStart", br#"{"session_id":""}"#),
            (Agent::Claude, "SessionStart", br#"{"session_id":42}"#),
            (Agent::Claude, "UserPromptSubmit", br#"{"session_id":"s"}"#),
            (
                Agent::Claude,
                "UserPromptSubmit",
                br#"{"session_id":"s","prompt":["x"]}"#,
            ),
            (
                Agent::Claude,
                "PreToolUse",
                br#"{"session_id":"s","tool_use_id":"t"}"#,
            ),
            (
                Agent::Codex,
                "UserPromptSubmit",
                br#"{"turn_id":"t","prompt":"p"}"#,
            ),
            (
                Agent::Codex,
                "PostToolUse",
                br#"{"session_id":"s","tool_name":null}"#,
            ),
            (Agent::Gemini, "BeforeAgent", br#"{"session_id":"s"}"#),
            (Agent::Gemini, "AfterTool", br#"{"session_id":"s"}"#),
            (
                Agent::Cursor,
                "beforeSubmitPrompt",
                br#"{"generation_id":"g","prompt":"p"}"#,
            ),
            (Agent::Cursor, "preToolUse", br#"{"conversation_id":"c"}"#),
            (
                Agent::Opencode,
                "tool.execute.before",
                br#"{"session_id":"s"}"#,
            ),
            (Agent::Opencode, "chat.message", br#"{"prompt":"p"}"#),
        ];
        for (agent, event, payload) in cases {
            let r = parse(*agent, event, payload);
            assert!(
                r.is_err(),
                "{agent} {event} {}: {r:?}",
                String::from_utf8_lossy(payload)
            );
        }
    }

    #[test]
    fn malformed_payloads_are_errors() {
        let bad: &[&[u8]] = &[
            b"",
            b"   \n",
            b"null",
            b"\"string\"",
            b"42",
            b"[]",
            b"{",
            b"{\"session_id\": \"s\",}",
            b"\xff\xfe{}",
            b"{\"session_id\":\"\xff\"}",
            b"{} {}",
        ];
        for agent in Agent::ALL {
            for &event in events(agent) {
                for b in bad {
                    let r = parse(agent, event, b);
                    assert!(
                        r.is_err(),
                        "{agent} {event} {:?}: {r:?}",
                        String::from_utf8_lossy(b)
                    );
                    // The error message names the agent and event.
                    let msg = r.unwrap_err().to_string();
                    assert!(msg.contains(agent.as_str()) && msg.contains(event), "{msg}");
                }
            }
        }
    }

    /// xorshift64*: a tiny deterministic PRNG.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let alphabet =
            b"{}[]\":,0123456789.-eEtrufalsn \\/u\n\tabcdefghijklmnopqrstuvwxyz_\xff\xc3\xa9";
        let mut checked = 0u32;
        for agent in Agent::ALL {
            let mut evs: Vec<&str> = events(agent).to_vec();
            evs.extend(["Unknown", "", "beforeShellExecution", "PostToolUseFailure"]);
            for event in evs {
                // Pure noise, JSON-ish noise, and mutations of every fixture.
                for _ in 0..300 {
                    let len = rng.below(200);
                    let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    let _ = parse(agent, event, &bytes);
                    let bytes: Vec<u8> = (0..len)
                        .map(|_| alphabet[rng.below(alphabet.len())])
                        .collect();
                    let _ = parse(agent, event, &bytes);
                    checked += 2;
                }
                for (a, e, _) in expected() {
                    let mut base = fixture(a, e);
                    for _ in 0..20 {
                        let mut m = base.clone();
                        match rng.below(4) {
                            0 => m.truncate(rng.below(m.len() + 1)),
                            1 => {
                                let i = rng.below(m.len());
                                m[i] ^= 1 << rng.below(8);
                            }
                            2 => {
                                let i = rng.below(m.len());
                                m.insert(i, alphabet[rng.below(alphabet.len())]);
                            }
                            _ => {
                                let i = rng.below(m.len());
                                m.remove(i);
                            }
                        }
                        let _ = parse(agent, event, &m);
                        checked += 1;
                    }
                    base.clear();
                }
            }
        }
        assert!(checked > 10_000);
    }

    #[test]
    fn deeply_nested_json_does_not_overflow_the_stack() {
        let deep = format!(
            "{{\"session_id\":\"s\",\"x\":{}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        for agent in Agent::ALL {
            assert!(parse(agent, events(agent)[0], deep.as_bytes()).is_err());
        }
    }

    #[test]
    fn replies_are_json_and_never_grant_permissions() {
        for agent in Agent::ALL {
            for &event in events(agent)
                .iter()
                .chain(["beforeShellExecution", "beforeMCPExecution", "Unknown"].iter())
            {
                if let Some(r) = reply(agent, event) {
                    let v: serde_json::Value =
                        serde_json::from_str(&r).unwrap_or_else(|e| panic!("{agent} {event}: {e}"));
                    assert!(v.is_object());
                    assert!(
                        !r.contains("permission")
                            && !r.contains("decision")
                            && !r.contains("allow"),
                        "{r}"
                    );
                    assert!(!r.contains("false"), "{r}");
                }
            }
        }
        assert_eq!(
            reply(Agent::Cursor, "beforeSubmitPrompt").as_deref(),
            Some(r#"{"continue":true}"#)
        );
        assert_eq!(reply(Agent::Cursor, "preToolUse").as_deref(), Some("{}"));
        assert_eq!(reply(Agent::Gemini, "BeforeAgent").as_deref(), Some("{}"));
        for e in events(Agent::Claude) {
            assert_eq!(reply(Agent::Claude, e), None);
        }
        for e in events(Agent::Codex) {
            assert_eq!(reply(Agent::Codex, e), None);
        }
        for e in events(Agent::Opencode) {
            assert_eq!(reply(Agent::Opencode, e), None);
        }
    }

    #[test]
    fn agent_names_round_trip() {
        for a in Agent::ALL {
            assert_eq!(a.as_str().parse::<Agent>().unwrap(), a);
            assert_eq!(a.to_string(), a.as_str());
        }
        assert!("Claude".parse::<Agent>().is_err());
        assert!("copilot".parse::<Agent>().is_err());
    }
}

/// The installed hook commands through real shells, with a fake rewind that logs what it gets
/// or fails; and the OpenCode plugin under node.
mod runtime {
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU32, Ordering};

    use rewind::agent::{
        Agent, HookEvent, events, hook_command, opencode_plugin_source, parse, reply,
    };

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(label: &str) -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            // Spaces and a quote in the path exercise the command quoting.
            let p = std::env::temp_dir().join(format!(
                "rewind rt '{label}' {}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A stand-in for the rewind binary: logs its argv and stdin (one file per call,
    /// named by time, so concurrent calls do not interleave), prints `stdout`,
    /// writes `stderr`, exits with `code`.
    fn fake_rewind(dir: &Path, stdout: &str, stderr: &str, code: i32) -> PathBuf {
        let p = dir.join("rewind");
        let script = format!(
            "#!/bin/sh\nd=$(dirname \"$0\")\nf=\"$d/call.$(date +%s%N).$$\"\n{{ printf '%s\\n' \"$*\"; cat; printf '\\n--END--\\n'; }} > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\nprintf '%s' '{stdout}'\nprintf '%s' '{stderr}' >&2\nexit {code}\n"
        );
        fs::write(&p, script).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    struct Out {
        code: i32,
        stdout: String,
        stderr: String,
    }

    fn run_shell(shell: &str, cmd: &str, stdin: &[u8]) -> Out {
        let mut child = Command::new(shell)
            .arg("-c")
            .arg(cmd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The shell may exit without reading stdin (missing binary): ignore EPIPE like the agents do.
        let _ = child.stdin.take().unwrap().write_all(stdin);
        let o = child.wait_with_output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    fn shells() -> Vec<&'static str> {
        ["sh", "bash", "dash", "zsh"]
            .into_iter()
            .filter(|s| {
                Command::new(s)
                    .arg("-c")
                    .arg("true")
                    .status()
                    .is_ok_and(|st| st.success())
            })
            .collect()
    }

    const COMMAND_AGENTS: [Agent; 4] = [Agent::Claude, Agent::Codex, Agent::Gemini, Agent::Cursor];

    #[test]
    fn hook_commands_pass_argv_and_stdin_through_the_shell() {
        for shell in shells() {
            let dir = TempDir::new("argv");
            let rewind = fake_rewind(&dir.0, "", "", 0);
            for agent in COMMAND_AGENTS {
                for &event in events(agent) {
                    clear_log(&dir.0);
                    let payload =
                        format!("{{\"session_id\":\"s'1 \\\"x\\\"\",\"event\":\"{event}\"}}");
                    let out = run_shell(
                        shell,
                        &hook_command(agent, rewind.to_str().unwrap(), event),
                        payload.as_bytes(),
                    );
                    assert_eq!(out.code, 0, "{shell} {agent} {event}: {}", out.stderr);
                    let log = read_log(&dir.0);
                    assert_eq!(
                        log,
                        format!("hook {agent} {event}\n{payload}\n--END--\n"),
                        "{shell} {agent} {event}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_missing_or_failing_rewind_never_blocks_the_agent() {
        for shell in shells() {
            let dir = TempDir::new("missing");
            let missing = dir.0.join("no-such-dir/rewind");
            let failing = fake_rewind(
                &dir.0,
                "",
                "error: unrecognized subcommand 'hook'\nUsage: rewind ...",
                2,
            );
            for rewind in [missing.to_str().unwrap(), failing.to_str().unwrap()] {
                for agent in COMMAND_AGENTS {
                    for &event in events(agent) {
                        let out = run_shell(shell, &hook_command(agent, rewind, event), b"{}");
                        let ctx = format!("{shell} {agent} {event} {rewind}");
                        // Exit 2 would block the tool / prompt in every one of these agents.
                        assert_eq!(out.code, 0, "{ctx}");
                        match agent {
                            Agent::Claude | Agent::Codex => assert_eq!(out.stdout, "", "{ctx}"),
                            // Gemini would turn stderr into a message (or a deny) when stdout is empty.
                            Agent::Gemini => assert_eq!(
                                (out.stdout.as_str(), out.stderr.as_str()),
                                ("", ""),
                                "{ctx}"
                            ),
                            Agent::Cursor => {
                                assert_eq!(
                                    out.stdout.trim_end(),
                                    reply(agent, event).unwrap(),
                                    "{ctx}"
                                );
                            }
                            Agent::Opencode => unreachable!(),
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_working_rewind_reply_reaches_the_agent_unchanged() {
        let dir = TempDir::new("reply");
        for agent in COMMAND_AGENTS {
            for &event in events(agent) {
                let r = reply(agent, event).unwrap_or_default();
                let rewind = fake_rewind(&dir.0, &r, "", 0);
                let out = run_shell(
                    "sh",
                    &hook_command(agent, rewind.to_str().unwrap(), event),
                    b"{}",
                );
                assert_eq!(
                    (out.code, out.stdout.as_str()),
                    (0, r.as_str()),
                    "{agent} {event}"
                );
            }
        }
    }

    fn node_available() -> bool {
        Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Runs the generated plugin under node against a fake rewind and returns the
    /// (argv, payload) pairs rewind received.
    fn run_plugin(driver: &str, rewind: &str, timeout_ms: Option<u64>) -> (Out, TempDir) {
        let dir = TempDir::new("opencode");
        let mut src = opencode_plugin_source(rewind);
        if let Some(ms) = timeout_ms {
            src = src.replace(
                "const TIMEOUT_MS = 5000",
                &format!("const TIMEOUT_MS = {ms}"),
            );
        }
        fs::write(dir.0.join("rewind-plugin.mjs"), src).unwrap();
        fs::write(dir.0.join("driver.mjs"), driver).unwrap();
        let out = Command::new("node")
            .arg(dir.0.join("driver.mjs"))
            .current_dir(&dir.0)
            .output()
            .unwrap();
        (
            Out {
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            },
            dir,
        )
    }

    /// Concatenation of the calls logged in `dir`, oldest first.
    fn read_log(dir: &Path) -> String {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("call.") && !n.ends_with(".tmp"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|n| fs::read_to_string(dir.join(n)).unwrap())
            .collect()
    }

    fn clear_log(dir: &Path) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("call.") {
                let _ = fs::remove_file(e.path());
            }
        }
    }

    fn logged_calls(log: &str) -> Vec<(String, String)> {
        log.split("\n--END--\n")
            .filter(|c| !c.is_empty())
            .map(|c| {
                let (argv, payload) = c.split_once('\n').unwrap();
                (argv.to_string(), payload.to_string())
            })
            .collect()
    }

    const V1_DRIVER: &str = r#"
import * as mod from "./rewind-plugin.mjs"
const check = (c, m) => { if (!c) { console.error("FAIL " + m); process.exitCode = 1 } }
process.on("unhandledRejection", (e) => { console.error("FAIL unhandled " + e); process.exitCode = 1 })
check(mod.default.id === "rewind", "id")
check(typeof mod.default.server === "function" && typeof mod.default.setup === "function", "default shape")
check(mod.RewindPlugin === mod.default.server, "legacy named export")
const hooks = await mod.default.server({ directory: "/home/dev/proj", project: {}, client: {}, $: null })
const sid = "ses_6f1c2a9b3ffeQ2m7Xw1Zk8d4Rt"
await hooks.event({ event: { type: "session.created", properties: { info: { id: sid, title: "t" } } } })
await hooks["chat.message"](
  { sessionID: sid, agent: "build", messageID: "msg_1" },
  { message: { id: "msg_1", sessionID: sid, role: "user" },
    parts: [{ type: "text", text: "Add pagination" }, { type: "text", text: "ctx", synthetic: true }, { type: "file", url: "x" }] })
await hooks["tool.execute.before"]({ tool: "edit", sessionID: sid, callID: "call_1" }, { args: { filePath: "/x" } })
await hooks["tool.execute.after"]({ tool: "edit", sessionID: sid, callID: "call_1", args: {} }, { title: "", output: "", metadata: {} })
await hooks.event({ event: { type: "session.idle", properties: { sessionID: sid } } })
await hooks.event({ event: { type: "message.updated", properties: { info: { id: "m" } } } })
await hooks.event({ event: { type: "session.deleted", properties: { info: { id: sid } } } })
// Garbage in must not throw out.
await hooks.event(undefined); await hooks.event({}); await hooks.event({ event: null })
await hooks["chat.message"](undefined, undefined); await hooks["chat.message"]({}, { parts: "x" })
await hooks["tool.execute.before"](undefined, undefined); await hooks["tool.execute.after"](null)
await mod.default.server(undefined)
console.log("done")
"#;

    #[test]
    fn opencode_plugin_v1_forwards_events_to_rewind() {
        if !node_available() {
            eprintln!("node not found; skipping");
            return;
        }
        let bin = TempDir::new("bin");
        let rewind = fake_rewind(&bin.0, "ignored output", "ignored", 3);
        let (out, _dir) = run_plugin(V1_DRIVER, rewind.to_str().unwrap(), None);
        assert_eq!((out.code, out.stdout.trim()), (0, "done"), "{}", out.stderr);
        let log = read_log(&bin.0);
        let calls = logged_calls(&log);
        let got: Vec<(String, HookEvent)> = calls
            .iter()
            .map(|(argv, payload)| {
                let event = argv
                    .strip_prefix("hook opencode ")
                    .unwrap_or_else(|| panic!("argv {argv}"));
                (
                    event.to_string(),
                    parse(Agent::Opencode, event, payload.as_bytes()).unwrap(),
                )
            })
            .collect();
        let sid = "ses_6f1c2a9b3ffeQ2m7Xw1Zk8d4Rt".to_string();
        let call = Some("call_1".to_string());
        let want = vec![
            (
                "session.created".into(),
                HookEvent::SessionStart {
                    session_id: sid.clone(),
                },
            ),
            (
                "chat.message".into(),
                HookEvent::Prompt {
                    session_id: sid.clone(),
                    prompt: "Add pagination".into(),
                    prompt_id: Some("msg_1".into()),
                },
            ),
            (
                "tool.execute.before".into(),
                HookEvent::ToolStart {
                    session_id: sid.clone(),
                    tool: "edit".into(),
                    tool_id: call.clone(),
                },
            ),
            (
                "tool.execute.after".into(),
                HookEvent::ToolEnd {
                    session_id: sid.clone(),
                    tool: "edit".into(),
                    tool_id: call,
                },
            ),
            (
                "session.idle".into(),
                HookEvent::Stop {
                    session_id: sid.clone(),
                },
            ),
            (
                "session.deleted".into(),
                HookEvent::SessionEnd { session_id: sid },
            ),
        ];
        assert_eq!(got, want);
        // Every event the plugin emits is one we declare.
        for (e, _) in &got {
            assert!(events(Agent::Opencode).contains(&e.as_str()), "{e}");
        }
    }

    #[test]
    fn opencode_plugin_survives_missing_and_hanging_rewind() {
        if !node_available() {
            eprintln!("node not found; skipping");
            return;
        }
        let (out, _d) = run_plugin(V1_DRIVER, "/nonexistent/rewind", None);
        assert_eq!((out.code, out.stdout.trim()), (0, "done"), "{}", out.stderr);

        let bin = TempDir::new("hang");
        let hang = bin.0.join("rewind");
        fs::write(&hang, "#!/bin/sh\nexec sleep 30\n").unwrap();
        fs::set_permissions(&hang, fs::Permissions::from_mode(0o755)).unwrap();
        let start = std::time::Instant::now();
        let (out, _d) = run_plugin(V1_DRIVER, hang.to_str().unwrap(), Some(200));
        assert_eq!((out.code, out.stdout.trim()), (0, "done"), "{}", out.stderr);
        assert!(start.elapsed().as_secs() < 20, "hung rewind was not killed");
    }

    const V2_AND_LEGACY_DRIVER: &str = r#"
import * as mod from "./rewind-plugin.mjs"
const check = (c, m) => { if (!c) { console.error("FAIL " + m); process.exitCode = 1 } }
process.on("unhandledRejection", (e) => { console.error("FAIL unhandled " + e); process.exitCode = 1 })
// v2: hooks registered on a context.
const reg = {}
const ctx = {
  session: { hook: async (name, cb) => { reg["session." + name] = cb; return { dispose: async () => {} } } },
  tool: { hook: async (name, cb) => { reg["tool." + name] = cb; return { dispose: async () => {} } } },
  event: { subscribe: () => (async function* () {
    yield { type: "session.created", properties: { info: { id: "ses_v2" } } }
    yield { type: "session.idle", properties: { sessionID: "ses_v2" } }
  })() },
}
await mod.default.setup(ctx)
check(typeof reg["session.prompt"] === "function", "prompt hook registered")
await reg["session.prompt"]({ sessionID: "ses_v2", messageID: "msg_v2", prompt: { text: "hello v2" } })
await reg["tool.execute.before"]({ tool: "bash", sessionID: "ses_v2", id: "call_v2", input: { command: "ls" } })
await reg["tool.execute.after"]({ tool: "bash", sessionID: "ses_v2", id: "call_v2", status: "completed" })
await new Promise((r) => setTimeout(r, 300))
// Contexts that lack or break things must not throw.
await mod.default.setup({})
await mod.default.setup(undefined)
await mod.default.setup({ session: { hook: () => { throw new Error("x") } }, tool: { hook: 5 }, event: { subscribe: () => { throw new Error("y") } } })
// OpenCode <= 1.3.3 calls every export; the named one gives the hooks, the default object throws (caught by OpenCode).
let hooksFromLegacy = 0
for (const [, fn] of Object.entries(mod)) { try { const h = await fn({}); if (h && h["tool.execute.before"]) hooksFromLegacy++ } catch {} }
check(hooksFromLegacy === 1, "legacy loader gets one hook set")
console.log("done")
"#;

    #[test]
    fn opencode_plugin_v2_and_legacy_loaders() {
        if !node_available() {
            eprintln!("node not found; skipping");
            return;
        }
        let bin = TempDir::new("bin2");
        let rewind = fake_rewind(&bin.0, "", "", 0);
        let (out, _dir) = run_plugin(V2_AND_LEGACY_DRIVER, rewind.to_str().unwrap(), None);
        assert_eq!((out.code, out.stdout.trim()), (0, "done"), "{}", out.stderr);
        let log = read_log(&bin.0);
        let mut got: Vec<(String, HookEvent)> = logged_calls(&log)
            .iter()
            .map(|(argv, payload)| {
                let event = argv.strip_prefix("hook opencode ").unwrap();
                (
                    event.to_string(),
                    parse(Agent::Opencode, event, payload.as_bytes()).unwrap(),
                )
            })
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        let sid = "ses_v2".to_string();
        let call = Some("call_v2".to_string());
        let mut want = vec![
            (
                "session.created".to_string(),
                HookEvent::SessionStart {
                    session_id: sid.clone(),
                },
            ),
            (
                "session.idle".to_string(),
                HookEvent::Stop {
                    session_id: sid.clone(),
                },
            ),
            (
                "chat.message".to_string(),
                HookEvent::Prompt {
                    session_id: sid.clone(),
                    prompt: "hello v2".into(),
                    prompt_id: Some("msg_v2".into()),
                },
            ),
            (
                "tool.execute.before".to_string(),
                HookEvent::ToolStart {
                    session_id: sid.clone(),
                    tool: "bash".into(),
                    tool_id: call.clone(),
                },
            ),
            (
                "tool.execute.after".to_string(),
                HookEvent::ToolEnd {
                    session_id: sid,
                    tool: "bash".into(),
                    tool_id: call,
                },
            ),
        ];
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want);
    }
}

/// `rewind agent install|uninstall` through the CLI in a mounted workspace that already holds
/// the user's own settings and hooks.
mod cli_install {
    use std::fs;

    use rewind::agent::{Agent, events, hook_command, is_rewind_command};
    use serde_json::{Value, json};

    use super::{config_file, installed_commands, ok, real_rewind, rw};
    use crate::common::Workspace;

    const CODEX_TOML: &str = "# Codex project config\nmodel = \"gpt-5.3-codex\"\n\n[[hooks.Stop]]\n\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = \"cargo clippy --quiet\"   # keep me\ntimeout = 120\n";
    const USER_PLUGIN: &str = "export const Notify = async () => ({})\n";

    /// The user's own files, before rewind is installed: (path, content).
    fn user_files() -> Vec<(&'static str, String)> {
        let pretty = |v: Value| serde_json::to_string_pretty(&v).unwrap() + "\n";
        vec![
            (
                ".claude/settings.json",
                pretty(json!({
                    "permissions": { "allow": ["Bash(cargo test:*)"] },
                    "hooks": {
                        "PreToolUse": [{ "matcher": "Bash", "hooks": [
                            { "type": "command", "command": "./scripts/check-bash.sh", "timeout": 30 }
                        ] }],
                        "Notification": [{ "hooks": [{ "type": "command", "command": "notify-send hi" }] }]
                    },
                    "statusLine": { "type": "command", "command": "~/.claude/statusline.sh" }
                })),
            ),
            (".codex/config.toml", CODEX_TOML.to_string()),
            (
                ".gemini/settings.json",
                // Four-space indentation and no final newline are kept as they are.
                {
                    let mut out = Vec::new();
                    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
                    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
                    serde::Serialize::serialize(
                        &json!({
                            "general": { "vimMode": true },
                            "hooks": { "BeforeTool": [{ "matcher": "write_file", "hooks": [
                                { "name": "scan", "type": "command", "command": "./scan.sh", "timeout": 5000 }
                            ] }] }
                        }),
                        &mut ser,
                    )
                    .unwrap();
                    String::from_utf8(out).unwrap()
                },
            ),
            (
                ".cursor/hooks.json",
                pretty(json!({
                    "version": 1,
                    "hooks": { "afterFileEdit": [{ "command": "./hooks/format.sh" }] }
                })),
            ),
            (".opencode/plugins/notify.js", USER_PLUGIN.to_string()),
            (
                "opencode.json",
                "{\n  \"$schema\": \"https://opencode.ai/config.json\"\n}\n".to_string(),
            ),
        ]
    }

    fn read(ws: &Workspace, rel: &str) -> String {
        fs::read_to_string(ws.path().join(rel)).unwrap()
    }

    #[test]
    fn install_merges_is_idempotent_and_uninstall_restores_the_users_files() {
        let mut ws = Workspace::new();
        for (rel, text) in user_files() {
            let p = ws.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, text).unwrap();
        }
        ws.mount();
        let exe = real_rewind();

        for agent in Agent::ALL {
            let out = ok(rw(&ws, &["agent", "install", agent.as_str()]));
            let file = if agent == Agent::Codex {
                // The user's inline [[hooks.*]] tables are extended in place.
                ".codex/config.toml"
            } else {
                config_file(agent).0
            };
            assert!(
                out.contains(&format!(
                    "{agent}: wrote {}",
                    ws.path().join(file).display()
                )),
                "{agent}: {out}"
            );
            let once = read(&ws, file);
            // Idempotent: nothing written the second time, the file is byte for byte the same.
            let again = ok(rw(&ws, &["agent", "install", agent.as_str()]));
            assert!(again.contains("already set up"), "{agent}: {again}");
            assert_eq!(read(&ws, file), once, "{agent}");
        }

        // What each file now holds: the user's entries first and unchanged, ours once per
        // event, running the real binary.
        let v: Value = serde_json::from_str(&read(&ws, ".claude/settings.json")).unwrap();
        let user: Value = serde_json::from_str(&user_files()[0].1).unwrap();
        assert_eq!(v["permissions"], user["permissions"]);
        assert_eq!(v["statusLine"], user["statusLine"]);
        assert_eq!(v["hooks"]["Notification"], user["hooks"]["Notification"]);
        assert_eq!(v["hooks"]["PreToolUse"][0], user["hooks"]["PreToolUse"][0]);
        for agent in [Agent::Claude, Agent::Gemini, Agent::Cursor] {
            let cmds = installed_commands(&ws.path(), agent);
            let mut got: Vec<&str> = cmds.iter().map(|(e, _)| e.as_str()).collect();
            got.sort_unstable();
            let mut want = events(agent).to_vec();
            want.sort_unstable();
            assert_eq!(got, want, "{agent}: one of ours per event");
            for (event, cmd) in &cmds {
                assert_eq!(cmd, &hook_command(agent, &exe, event), "{agent} {event}");
            }
        }
        let gemini = read(&ws, ".gemini/settings.json");
        assert!(
            gemini.contains("\n    \"general\""),
            "indentation kept:\n{gemini}"
        );
        assert!(!gemini.ends_with('\n'), "no final newline added");
        let cursor: Value = serde_json::from_str(&read(&ws, ".cursor/hooks.json")).unwrap();
        assert_eq!(
            cursor["hooks"]["afterFileEdit"][0]["command"],
            "./hooks/format.sh"
        );
        assert_eq!(cursor["version"], 1);

        let toml = read(&ws, ".codex/config.toml");
        assert!(!ws.path().join(".codex/hooks.json").exists());
        let mut rest = toml.as_str();
        for line in CODEX_TOML.lines().filter(|l| !l.trim().is_empty()) {
            let i = rest
                .find(line)
                .unwrap_or_else(|| panic!("lost {line:?}:\n{toml}"));
            rest = &rest[i + line.len()..];
        }
        let doc: toml_edit::DocumentMut = toml.parse().unwrap();
        for &event in events(Agent::Codex) {
            let cmds: Vec<String> = doc["hooks"][event]
                .as_array_of_tables()
                .unwrap_or_else(|| panic!("{event}:\n{toml}"))
                .iter()
                .flat_map(|g| g["hooks"].as_array_of_tables().unwrap().iter())
                .map(|h| h["command"].as_str().unwrap().to_string())
                .collect();
            let ours: Vec<&String> = cmds
                .iter()
                .filter(|c| is_rewind_command(c, Agent::Codex))
                .collect();
            assert_eq!(
                ours,
                vec![&hook_command(Agent::Codex, &exe, event)],
                "{event}"
            );
        }
        let plugin = read(&ws, ".opencode/plugins/rewind.js");
        assert!(plugin.starts_with("// rewind-managed-plugin"));
        assert!(
            plugin.contains(&format!(
                "const REWIND = {}",
                serde_json::to_string(&exe).unwrap()
            )),
            "the plugin spawns the real binary"
        );

        // The installs went through the mount, so they are history like any other change.
        let log = ok(rw(&ws, &["log", "--json"]));
        for rel in [
            ".claude/settings.json",
            ".cursor/hooks.json",
            ".opencode/plugins/rewind.js",
        ] {
            assert!(
                log.contains(&format!("\"path\":\"{rel}\"")),
                "{rel} not recorded"
            );
        }

        // Uninstall removes only ours: every user file comes back byte for byte.
        for agent in Agent::ALL {
            let out = ok(rw(&ws, &["agent", "uninstall", agent.as_str()]));
            // OpenCode's plugin file is rewind's alone: it goes; the others hold the user's too.
            let done = if agent == Agent::Opencode {
                "removed"
            } else {
                "updated"
            };
            assert!(out.contains(done), "{agent}: {out}");
            let again = ok(rw(&ws, &["agent", "uninstall", agent.as_str()]));
            assert!(again.contains("no rewind hooks"), "{agent}: {again}");
        }
        for (rel, text) in user_files() {
            assert_eq!(read(&ws, rel), text, "{rel} after uninstall");
        }
        assert!(!ws.path().join(".opencode/plugins/rewind.js").exists());
        ws.unmount();
        for (rel, text) in user_files() {
            assert_eq!(read(&ws, rel), text, "{rel} on the disk underneath");
        }
    }

    /// Hooks can be set up before the first mount, in any folder.
    #[test]
    fn install_works_before_the_first_mount_and_refuses_a_broken_file() {
        let ws = Workspace::new();
        for agent in Agent::ALL {
            ok(rw(&ws, &["agent", "install", agent.as_str()]));
        }
        assert_eq!(
            installed_commands(&ws.path(), Agent::Cursor).len(),
            events(Agent::Cursor).len()
        );
        for agent in Agent::ALL {
            ok(rw(&ws, &["agent", "uninstall", agent.as_str()]));
        }
        assert_eq!(
            fs::read_dir(ws.path()).unwrap().count(),
            0,
            "all cleaned up"
        );

        // A settings file that does not parse: exit 2, named, untouched.
        let p = ws.path().join(".claude/settings.json");
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, "{ \"hooks\": {,}\n").unwrap();
        let out = rw(&ws, &["agent", "install", "claude"]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(".claude/settings.json"));
        assert_eq!(fs::read_to_string(&p).unwrap(), "{ \"hooks\": {,}\n");
        // And an agent rewind does not know.
        let out = rw(&ws, &["agent", "install", "copilot"]);
        assert_eq!(out.status.code(), Some(2));
    }
}

/// The installed hook commands, run for real with the real binary: exit status, stdout and
/// stderr exactly as each agent needs them, mounted, unmounted and outside any workspace; and
/// what they record. How long they take is measured by `cargo bench --bench hook`.
mod real_hooks {
    use std::fs;

    use rewind::agent::{Agent, HookEvent, events, parse};
    use serde_json::Value;

    use super::{
        COMMAND_AGENTS, agent_shell, data_home, expected_stdout, fixture_json, hook_log,
        installed_commands, json_lines, ok, run_hook, rw, uuid_like,
    };
    use crate::common::Workspace;

    /// A fixture payload with the agent's session id replaced by `sid`.
    fn with_session(agent: Agent, event: &str, sid: &str) -> Vec<u8> {
        let mut v = fixture_json(agent, event);
        let o = v.as_object_mut().unwrap();
        for key in ["session_id", "conversation_id"] {
            if o.get(key)
                .is_some_and(|s| s.as_str().is_some_and(|s| !s.is_empty()))
            {
                o.insert(key.into(), Value::from(sid));
            }
        }
        serde_json::to_vec(&v).unwrap()
    }

    /// Run every installed command of every command agent once, in `dir`; each must exit 0
    /// with exactly the agent's reply on stdout, and on stderr nothing when a daemon took the
    /// event, one line saying nothing was recorded when none did (Gemini's command drops it).
    fn run_all(
        ws: &Workspace,
        cmds: &[(Agent, String, String)],
        sid: &str,
        dir: &std::path::Path,
        daemon: bool,
    ) {
        for (agent, event, cmd) in cmds {
            let payload = with_session(*agent, event, sid);
            let r = run_hook(agent_shell(*agent), cmd, &payload, dir, &data_home(ws));
            let ctx = format!("{agent} {event} in {}: {r:?}", dir.display());
            assert_eq!(r.code, 0, "{ctx}");
            assert_eq!(r.stdout, expected_stdout(*agent, event), "{ctx}");
            if daemon || *agent == Agent::Gemini {
                assert_eq!(r.stderr, "", "{ctx}");
            } else {
                assert!(
                    r.stderr.starts_with("rewind hook: ")
                        && r.stderr.ends_with("; nothing recorded\n")
                        && r.stderr.lines().count() == 1,
                    "{ctx}"
                );
            }
        }
    }

    #[test]
    fn installed_commands_exit_0_with_the_exact_reply_mounted_or_not() {
        let mut ws = Workspace::new();
        ws.mount();
        let mut cmds = Vec::new();
        for agent in COMMAND_AGENTS {
            ok(rw(&ws, &["agent", "install", agent.as_str()]));
            for (event, cmd) in installed_commands(&ws.path(), agent) {
                cmds.push((agent, event, cmd));
            }
        }
        assert_eq!(
            cmds.len(),
            COMMAND_AGENTS
                .iter()
                .map(|a| events(*a).len())
                .sum::<usize>()
        );

        // Mounted: each agent's whole sequence of events, in the order they come.
        let sid = uuid_like("real-hooks");
        run_all(&ws, &cmds, &sid, &ws.path(), true);
        assert_eq!(hook_log(&ws), "", "no hook failed");
        // They did their work: one closed turn per agent session, with the prompt's first line
        // and the agent's prompt id.
        let turns = json_lines(&ok(rw(&ws, &["turns", "--json"])));
        assert_eq!(turns.len(), 4, "{turns:?}");
        for agent in COMMAND_AGENTS {
            let session = format!("{agent}-{sid}");
            let t = turns
                .iter()
                .find(|t| t["session"] == session.as_str())
                .unwrap_or_else(|| panic!("no turn for {session}: {turns:?}"));
            let prompt_event = events(agent)[1];
            let HookEvent::Prompt {
                prompt, prompt_id, ..
            } = parse(agent, prompt_event, &super::fixture(agent, prompt_event)).unwrap()
            else {
                panic!("{agent} {prompt_event} is not a prompt")
            };
            assert_eq!(t["turn"], 1);
            assert_eq!(t["agent"], agent.as_str());
            assert_eq!(t["prompt"], prompt.as_str());
            assert_eq!(t["prompt_id"], serde_json::json!(prompt_id));
            assert!(t["end_id"].is_u64(), "turn closed by the stop event: {t}");
        }

        // A payload that is not JSON, or lacks its session: still exit 0, the exact reply, one
        // line on stderr saying nothing was recorded (Gemini's command drops it); the problem
        // goes to hook.log.
        for (agent, event, cmd) in &cmds {
            for bad in [&b"not json"[..], b"{}", b""] {
                let r = run_hook(agent_shell(*agent), cmd, bad, &ws.path(), &data_home(&ws));
                let ctx = format!("{agent} {event} {bad:?}: {r:?}");
                assert_eq!(r.code, 0, "{ctx}");
                if *agent == Agent::Gemini {
                    assert_eq!(r.stderr, "", "{ctx}");
                } else {
                    assert!(
                        r.stderr.starts_with("rewind hook: ")
                            && r.stderr.ends_with("; nothing recorded\n")
                            && r.stderr.lines().count() == 1,
                        "{ctx}"
                    );
                }
                assert_eq!(r.stdout, expected_stdout(*agent, event), "{ctx}");
            }
        }
        let log = hook_log(&ws);
        assert!(log.contains("claude UserPromptSubmit: invalid"), "{log}");
        assert!(log.contains("cursor beforeSubmitPrompt: invalid"), "{log}");

        // Unmounted: the hooks cannot record, and must not get in the agent's way.
        ws.unmount();
        let before = hook_log(&ws).lines().count();
        run_all(&ws, &cmds, &sid, &ws.path(), false);
        let log = hook_log(&ws);
        let new: Vec<&str> = log.lines().skip(before).collect();
        assert_eq!(new.len(), cmds.len(), "{log}");
        assert!(new.iter().all(|l| l.contains("not mounted")), "{new:?}");

        // Outside any workspace.
        let elsewhere = tempfile::tempdir().unwrap();
        run_all(&ws, &cmds, &sid, elsewhere.path(), false);
        assert!(
            fs::read_dir(elsewhere.path()).unwrap().next().is_none(),
            "nothing written there"
        );
    }
}

/// Stand-in agents: a process that is not a shell (python3, or node for OpenCode) runs its
/// agent's installed hooks exactly as the agent does (the command strings from the config files,
/// through the agent's shell, payloads shaped like the fixtures; OpenCode: the installed plugin
/// itself), and edits files as the agent's tools do: writes from the agent process itself, and
/// shell commands it spawns (sed -i, python3 -c, rm, mv, mkdir), over three prompts. Two run at
/// once in one workspace, their turns overlapping. Then every turn is checked against what it did.
pub mod standin {
    use std::collections::{BTreeMap, BTreeSet};
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};

    use rewind::agent::{Agent, events, is_rewind_command, shell_quote};
    use serde_json::{Value, json};

    use super::{
        agent_shell, config_file, data_home, expected_stdout, fixture_json, hook_log, json_lines,
        ok, rw, unique, uuid_like,
    };
    use crate::common::Workspace;

    /// The stand-in for the agents whose hooks are shell commands.
    const PY_STANDIN: &str = r#"
import json, os, subprocess, sys, time

plan = json.load(open(sys.argv[1]))
os.chdir(plan["workspace"])
# Like Claude Code, the hooks are read once, at session start.
with open(plan["config"]) as f:
    config = json.load(f)

def commands(event):
    out = []
    for entry in config.get("hooks", {}).get(event, []):
        if plan["nested"]:
            out += [h["command"] for h in entry.get("hooks", []) if h.get("type") == "command"]
        else:
            out.append(entry["command"])
    return out

def barrier(label):
    open(os.path.join(plan["sync"], plan["name"] + "." + label), "w").close()
    if not plan.get("peer"):
        return
    theirs = os.path.join(plan["sync"], plan["peer"] + "." + label)
    deadline = time.time() + 120
    while not os.path.exists(theirs):
        if time.time() > deadline:
            sys.exit("barrier %s: %s never came" % (label, plan["peer"]))
        time.sleep(0.005)

results = []
for step in plan["steps"]:
    if "hook" in step:
        data = json.dumps(step["payload"]).encode()
        for cmd in commands(step["hook"]):
            r = subprocess.run(plan["shell"] + [cmd], input=data, capture_output=True)
            results.append({"event": step["hook"], "command": cmd, "code": r.returncode,
                            "stdout": r.stdout.decode(errors="replace"),
                            "stderr": r.stderr.decode(errors="replace")})
    elif "write" in step:
        with open(step["write"], "w") as f:
            f.write(step["content"])
    elif "atomic" in step:
        tmp = step["atomic"] + ".~edit"
        with open(tmp, "w") as f:
            f.write(step["content"])
        os.replace(tmp, step["atomic"])
    elif "rename" in step:
        os.replace(step["rename"], step["to"])
    elif "sh" in step:
        r = subprocess.run(["bash", "-c", step["sh"]])
        if r.returncode != 0:
            sys.exit("step failed (%d): %s" % (r.returncode, step["sh"]))
    elif "barrier" in step:
        barrier(step["barrier"])
with open(plan["results"], "w") as f:
    json.dump(results, f)
"#;

    /// The stand-in for OpenCode: loads the installed plugin and calls its hooks as OpenCode
    /// does; the plugin spawns `rewind hook opencode EVENT` itself (no shell).
    const NODE_STANDIN: &str = r#"
import { readFileSync, writeFileSync, renameSync, existsSync } from "node:fs"
import { spawnSync } from "node:child_process"
import { join } from "node:path"
import { pathToFileURL } from "node:url"

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"))
process.chdir(plan.workspace)
process.on("unhandledRejection", (e) => { console.error("unhandled " + e); process.exit(4) })
const mod = await import(pathToFileURL(plan.config).href)
const hooks = await mod.default.server({ directory: plan.workspace, worktree: plan.workspace, project: { id: "p" }, client: {}, $: undefined })
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function barrier(label) {
  writeFileSync(join(plan.sync, plan.name + "." + label), "")
  if (!plan.peer) return
  const theirs = join(plan.sync, plan.peer + "." + label)
  const deadline = Date.now() + 120000
  while (!existsSync(theirs)) {
    if (Date.now() > deadline) { console.error(`barrier ${label}: ${plan.peer} never came`); process.exit(3) }
    await sleep(5)
  }
}
for (const s of plan.steps) {
  if (s.oc === "event") await hooks.event(s.arg)
  else if (s.oc !== undefined) await hooks[s.oc](s.input, s.output)
  else if (s.write !== undefined) writeFileSync(s.write, s.content)
  else if (s.atomic !== undefined) { writeFileSync(s.atomic + ".~edit", s.content); renameSync(s.atomic + ".~edit", s.atomic) }
  else if (s.sh !== undefined) {
    const r = spawnSync("bash", ["-c", s.sh], { stdio: "inherit" })
    if (r.status !== 0) { console.error(`step failed (${r.status}): ${s.sh}`); process.exit(3) }
  }
  else if (s.barrier !== undefined) await barrier(s.barrier)
}
writeFileSync(plan.results, "[]")
"#;

    /// Files of one agent: path → content (`None`: a folder).
    pub type Files = BTreeMap<String, Option<String>>;

    /// One edit, made the way an agent's tool makes it.
    #[derive(Clone, Debug)]
    pub enum Op {
        /// `mkdir PATH`, through the shell.
        Mkdir(String),
        /// The agent process writes the file itself (a Write tool).
        Write(String, String),
        /// The agent process writes a temporary file and renames it over the target (an Edit
        /// tool's save).
        Edit(String, String),
        /// `sed -i 's/FROM/TO/' PATH`, through the shell.
        Sed(String, String, String),
        /// `python3 -c "open(PATH, 'w').write(...)"`, through the shell.
        PyWrite(String, String),
        /// `rm PATH`, through the shell.
        Rm(String),
        /// `mv FROM TO`, through the shell.
        Mv(String, String),
    }

    /// A change as `rewind log --json` must show it.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Expect {
        pub kind: &'static str,
        pub path: String,
        pub from: Option<String>,
        pub process: String,
        pub added: usize,
        pub removed: usize,
    }

    /// Lines added and removed between two texts (a minimal line diff: via the longest common
    /// subsequence).
    fn line_stat(old: &str, new: &str) -> (usize, usize) {
        let a: Vec<&str> = old.lines().collect();
        let b: Vec<&str> = new.lines().collect();
        let mut l = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                l[i][j] = if a[i] == b[j] {
                    l[i + 1][j + 1] + 1
                } else {
                    l[i + 1][j].max(l[i][j + 1])
                };
            }
        }
        (b.len() - l[0][0], a.len() - l[0][0])
    }

    /// `sed 's/FROM/TO/'`: the first match on each line.
    fn sed(text: &str, from: &str, to: &str) -> String {
        text.split_inclusive('\n')
            .map(|l| l.replacen(from, to, 1))
            .collect()
    }

    impl Op {
        pub fn is_shell(&self) -> bool {
            !matches!(self, Op::Write(..) | Op::Edit(..))
        }

        /// The path the tool call is about.
        pub fn target(&self) -> &str {
            match self {
                Op::Mkdir(p)
                | Op::Write(p, _)
                | Op::Edit(p, _)
                | Op::Sed(p, ..)
                | Op::PyWrite(p, _)
                | Op::Rm(p)
                | Op::Mv(p, _) => p,
            }
        }

        pub fn shell(&self) -> Option<String> {
            let q = |s: &str| shell_quote(s);
            Some(match self {
                Op::Mkdir(p) => format!("mkdir {}", q(p)),
                Op::Sed(p, from, to) => {
                    format!("sed -i {} {}", q(&format!("s/{from}/{to}/")), q(p))
                }
                Op::PyWrite(p, content) => format!(
                    "python3 -c {}",
                    q(&format!("open({p:?}, 'w').write({content:?})"))
                ),
                Op::Rm(p) => format!("rm {}", q(p)),
                Op::Mv(from, to) => format!("mv {} {}", q(from), q(to)),
                Op::Write(..) | Op::Edit(..) => return None,
            })
        }

        /// The stand-in's step.
        pub fn step(&self) -> Value {
            match self {
                Op::Write(p, c) => json!({"write": p, "content": c}),
                Op::Edit(p, c) => json!({"atomic": p, "content": c}),
                _ => json!({"sh": self.shell().unwrap()}),
            }
        }

        /// Apply to the model; the change rewind must record.
        pub fn apply(&self, files: &mut Files, agent_process: &str) -> Expect {
            let e =
                |kind, path: &str, from: Option<&str>, process: &str, (added, removed)| Expect {
                    kind,
                    path: path.to_string(),
                    from: from.map(str::to_string),
                    process: process.to_string(),
                    added,
                    removed,
                };
            let text =
                |files: &Files, p: &str| -> Option<String> { files.get(p).cloned().flatten() };
            match self {
                Op::Mkdir(p) => {
                    assert!(files.insert(p.clone(), None).is_none());
                    e("mkdir", p, None, "mkdir", (0, 0))
                }
                Op::Write(p, c) | Op::Edit(p, c) | Op::PyWrite(p, c) => {
                    let old = text(files, p);
                    let process = if matches!(self, Op::PyWrite(..)) {
                        "python3"
                    } else {
                        agent_process
                    };
                    if matches!(self, Op::Edit(..)) {
                        assert!(old.is_some(), "an edit saves over an existing file");
                    }
                    let kind = if old.is_some() { "modify" } else { "create" };
                    let stat = line_stat(old.as_deref().unwrap_or(""), c);
                    files.insert(p.clone(), Some(c.clone()));
                    e(kind, p, None, process, stat)
                }
                Op::Sed(p, from, to) => {
                    let old = text(files, p).unwrap();
                    let new = sed(&old, from, to);
                    assert_ne!(old, new, "the sed changes something");
                    let stat = line_stat(&old, &new);
                    files.insert(p.clone(), Some(new));
                    e("modify", p, None, "sed", stat)
                }
                Op::Rm(p) => {
                    let old = files.remove(p).unwrap().unwrap();
                    e("delete", p, None, "rm", (0, old.lines().count()))
                }
                Op::Mv(from, to) => {
                    let c = files.remove(from).unwrap();
                    assert!(files.insert(to.clone(), c).is_none());
                    e("rename", to, Some(from), "mv", (0, 0))
                }
            }
        }
    }

    /// The three prompts every stand-in works through, on its own files `src/PREFIX_*`:
    /// scaffold (mkdir, direct write, python -c, an edit's save), a refactor done entirely
    /// through the shell (sed -i, python -c, rm, mv), and docs (direct write, sed -i).
    pub fn script(p: &str) -> Vec<(String, Vec<Op>)> {
        let s = |x: &str| x.to_string();
        let main = format!("src/{p}_main.py");
        let pkg = format!("src/{p}_pkg");
        vec![
            (
                format!(
                    "Scaffold the {p} package\nPut the helpers in a pkg folder; keep main small."
                ),
                vec![
                    Op::Mkdir(pkg.clone()),
                    Op::Write(
                        format!("{pkg}/util.py"),
                        s("def helper():\n    return 42\n\n\nHELPERS = [helper]\n"),
                    ),
                    Op::PyWrite(format!("{pkg}/tmp.txt"), s("scratch 1\nscratch 2\n")),
                    Op::Edit(main.clone(), initial_main().replace("return 1", "return 2")),
                ],
            ),
            (
                format!("Refactor {p} with the shell\n(sed, python, rm and mv only)"),
                vec![
                    Op::Sed(main, s("alpha"), s("beta")),
                    Op::PyWrite(format!("{pkg}/notes.txt"), s("one\ntwo\nthree\n")),
                    Op::Rm(format!("{pkg}/tmp.txt")),
                    Op::Mv(format!("{pkg}/util.py"), format!("{pkg}/helpers.py")),
                ],
            ),
            (
                format!("Document {p} and its --dry-run flag"),
                vec![
                    Op::Write(
                        format!("src/{p}_README.md"),
                        format!("# {p}\n\nA package.\n"),
                    ),
                    Op::Sed(format!("src/{p}_config.txt"), s("debug"), s("info")),
                ],
            ),
        ]
    }

    fn initial_main() -> String {
        "import os\n\n\ndef alpha():\n    return 1\n\n\nprint(alpha())\n".to_string()
    }

    /// What a stand-in's files are before it starts.
    pub fn initial_files(p: &str) -> Files {
        Files::from([
            (format!("src/{p}_main.py"), Some(initial_main())),
            (
                format!("src/{p}_config.txt"),
                Some("level = debug\nretries = 3\ncolor = auto\n".to_string()),
            ),
        ])
    }

    /// One stand-in agent: who it is and what it will do.
    pub struct Kit {
        pub agent: Agent,
        /// Its name among the stand-ins (barrier files), also the prefix of its files.
        pub name: String,
        /// The agent's own session id.
        pub sid: String,
        /// The session rewind records it as.
        pub session: String,
        tag: String,
        pub turns: Vec<(String, Vec<Op>)>,
        /// `states[t]`: its files after turn t (`states[0]`: before it started).
        pub states: Vec<Files>,
        /// `expects[t - 1]`: the changes of turn t.
        pub expects: Vec<Vec<Expect>>,
    }

    impl Kit {
        pub fn new(agent: Agent, n: usize) -> Kit {
            let name = format!("{agent}{n}");
            let sid = match agent {
                Agent::Opencode => format!("ses_{}", &unique("oc")[..26]),
                _ => uuid_like(&name),
            };
            let session = format!("{agent}-{sid}");
            let turns = script(&name);
            let mut states = vec![initial_files(&name)];
            let mut expects = Vec::new();
            let process = if agent == Agent::Opencode {
                "node"
            } else {
                "python3"
            };
            for (_, ops) in &turns {
                let mut files = states.last().unwrap().clone();
                expects.push(ops.iter().map(|op| op.apply(&mut files, process)).collect());
                states.push(files);
            }
            Kit {
                agent,
                tag: unique(&name),
                name,
                sid,
                session,
                turns,
                states,
                expects,
            }
        }

        /// The agent's own id of prompt `turn`, where it has one.
        pub fn prompt_id(&self, turn: usize) -> Option<String> {
            let h = blake3::hash(format!("{} prompt {turn}", self.tag).as_bytes())
                .to_hex()
                .to_string();
            let uuid = format!(
                "{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            );
            match self.agent {
                Agent::Claude | Agent::Codex | Agent::Cursor => Some(uuid),
                Agent::Opencode => Some(format!("msg_{}", &h[..26])),
                Agent::Gemini => None,
            }
        }

        /// The agent's id of the tool call making op `i` of `turn`, where it has one.
        pub fn tool_id(&self, turn: usize, i: usize) -> Option<String> {
            let h = blake3::hash(format!("{} tool {turn} {i}", self.tag).as_bytes())
                .to_hex()
                .to_string();
            match self.agent {
                Agent::Claude | Agent::Opencode => Some(format!("toolu_01{}", &h[..22])),
                Agent::Codex => Some(format!("call_{}", &h[..24])),
                Agent::Cursor => Some(format!("tool_{}-{}-{}", &h[..8], &h[8..12], &h[12..24])),
                Agent::Gemini => None,
            }
        }

        /// The agent's name for the tool that makes `op`.
        pub fn tool_name(&self, op: &Op) -> &'static str {
            let (shell, write, edit) = match self.agent {
                Agent::Claude => ("Bash", "Write", "Edit"),
                Agent::Codex => ("Bash", "apply_patch", "apply_patch"),
                Agent::Gemini => ("run_shell_command", "write_file", "replace"),
                Agent::Cursor => ("Shell", "Write", "Write"),
                Agent::Opencode => ("bash", "write", "edit"),
            };
            match op {
                Op::Write(..) => write,
                Op::Edit(..) => edit,
                _ => shell,
            }
        }

        /// The tool call's input, as the agent's tool takes it.
        fn tool_input(&self, op: &Op, ws: &Path) -> Value {
            let abs = ws.join(op.target()).to_str().unwrap().to_string();
            match (op, self.agent) {
                (op, Agent::Codex) if !op.is_shell() => json!({"command": format!(
                    "*** Begin Patch\n*** Update File: {}\n*** End Patch\n",
                    op.target()
                )}),
                (Op::Write(_, c) | Op::Edit(_, c), Agent::Cursor) => {
                    json!({"file_path": abs, "contents": c})
                }
                (Op::Write(_, c) | Op::Edit(_, c), _) => json!({"file_path": abs, "content": c}),
                (op, Agent::Opencode) => json!({"command": op.shell().unwrap()}),
                (op, _) => json!({"command": op.shell().unwrap(), "description": "edit files"}),
            }
        }

        /// The names of the agent's events: session start, prompt, tool start, tool end, stop,
        /// session end.
        fn event(&self, i: usize) -> &'static str {
            let names: [&str; 6] = match self.agent {
                Agent::Claude | Agent::Codex => [
                    "SessionStart",
                    "UserPromptSubmit",
                    "PreToolUse",
                    "PostToolUse",
                    "Stop",
                    "SessionEnd",
                ],
                Agent::Gemini => [
                    "SessionStart",
                    "BeforeAgent",
                    "BeforeTool",
                    "AfterTool",
                    "AfterAgent",
                    "SessionEnd",
                ],
                Agent::Cursor => [
                    "sessionStart",
                    "beforeSubmitPrompt",
                    "preToolUse",
                    "postToolUse",
                    "stop",
                    "sessionEnd",
                ],
                Agent::Opencode => unreachable!(),
            };
            names[i]
        }

        /// A hook step: the agent's fixture for `event`, with this session's ids (and the
        /// prompt id of `turn`) wherever the fixture has them, and `extra` replacing fields the
        /// fixture has (never adding any: the shape stays the agent's).
        fn hook(&self, event: &str, turn: Option<usize>, extra: Value, ws: &Path) -> Value {
            let mut v = fixture_json(self.agent, event);
            let o = v.as_object_mut().unwrap();
            let ws_s = ws.to_str().unwrap();
            let mut common = vec![
                ("session_id", json!(self.sid)),
                ("conversation_id", json!(self.sid)),
                ("cwd", json!(ws_s)),
                ("workspace_roots", json!([ws_s])),
                (
                    "transcript_path",
                    json!(format!(
                        "/home/dev/.{}/sessions/{}.jsonl",
                        self.agent, self.sid
                    )),
                ),
            ];
            if let Some(id) = turn.and_then(|t| self.prompt_id(t)) {
                for k in ["prompt_id", "turn_id", "generation_id"] {
                    common.push((k, json!(id)));
                }
            }
            for (k, val) in common {
                if o.get(k).is_some_and(|x| !x.is_null() && x != "") {
                    o.insert(k.to_string(), val);
                }
            }
            for (k, val) in extra.as_object().unwrap() {
                assert!(
                    o.contains_key(k),
                    "{} {event} payloads have no {k}",
                    self.agent
                );
                o.insert(k.clone(), val.clone());
            }
            json!({"hook": event, "payload": v})
        }

        /// The stand-in's steps: session start; per prompt: the prompt, each tool call
        /// bracketed by its hooks, the stop; session end. Two barriers a turn make the turns of
        /// two stand-ins overlap: `open` after the prompt, `mid` after the first tool call.
        pub fn steps(&self, ws: &Path) -> Vec<Value> {
            if self.agent == Agent::Opencode {
                return self.opencode_steps(ws);
            }
            let mut steps = vec![self.hook(self.event(0), None, json!({}), ws)];
            for (t0, (prompt, ops)) in self.turns.iter().enumerate() {
                let t = t0 + 1;
                steps.push(self.hook(self.event(1), Some(t), json!({"prompt": prompt}), ws));
                steps.push(json!({"barrier": format!("t{t}-open")}));
                for (i, op) in ops.iter().enumerate() {
                    let mut call = json!({
                        "tool_name": self.tool_name(op),
                        "tool_input": self.tool_input(op, ws),
                    });
                    if let Some(id) = self.tool_id(t, i) {
                        call["tool_use_id"] = json!(id);
                    }
                    steps.push(self.hook(self.event(2), Some(t), call.clone(), ws));
                    steps.push(op.step());
                    let mut done = call;
                    match self.agent {
                        Agent::Claude => {
                            done["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false, "isImage": false});
                        }
                        Agent::Codex => done["tool_response"] = json!("Success."),
                        Agent::Gemini => {
                            done["tool_response"] =
                                json!({"llmContent": "done", "returnDisplay": "done"});
                        }
                        Agent::Cursor => {
                            done["tool_output"] = json!("done");
                            done["duration"] = json!(12);
                            if !op.is_shell() {
                                // Cursor also reports the file edit.
                                let abs = ws.join(op.target()).to_str().unwrap().to_string();
                                steps.push(self.hook(
                                    "afterFileEdit",
                                    Some(t),
                                    json!({"file_path": abs, "edits": [{"old_string": "", "new_string": "x"}]}),
                                    ws,
                                ));
                            }
                        }
                        Agent::Opencode => unreachable!(),
                    }
                    steps.push(self.hook(self.event(3), Some(t), done, ws));
                    if i == 0 {
                        steps.push(json!({"barrier": format!("t{t}-mid")}));
                    }
                }
                let stop = match self.agent {
                    Agent::Claude | Agent::Codex => json!({"last_assistant_message": "Done."}),
                    Agent::Gemini => json!({"prompt": prompt, "prompt_response": "Done."}),
                    _ => json!({}),
                };
                steps.push(self.hook(self.event(4), Some(t), stop, ws));
            }
            steps.push(self.hook(self.event(5), None, json!({}), ws));
            steps
        }

        /// OpenCode's: the plugin's v1 hooks called with what OpenCode passes them.
        fn opencode_steps(&self, ws: &Path) -> Vec<Value> {
            let sid = &self.sid;
            let event = |ty: &str, props: Value| json!({"oc": "event", "arg": {"event": {"type": ty, "properties": props}}});
            let mut steps = vec![event(
                "session.created",
                json!({"info": {"id": sid, "title": "New session"}}),
            )];
            for (t0, (prompt, ops)) in self.turns.iter().enumerate() {
                let t = t0 + 1;
                let mid = self.prompt_id(t).unwrap();
                steps.push(json!({"oc": "chat.message",
                    "input": {"sessionID": sid, "agent": "build", "model": {"providerID": "anthropic", "modelID": "claude-sonnet-4-6"}, "messageID": mid},
                    "output": {"message": {"id": mid, "sessionID": sid, "role": "user"},
                               "parts": [{"type": "text", "text": prompt},
                                         {"type": "text", "text": "<system-reminder>plan mode</system-reminder>", "synthetic": true}]}}));
                steps.push(json!({"barrier": format!("t{t}-open")}));
                for (i, op) in ops.iter().enumerate() {
                    let input = json!({"tool": self.tool_name(op), "sessionID": sid, "callID": self.tool_id(t, i).unwrap()});
                    let args = self.tool_input(op, ws);
                    steps.push(json!({"oc": "tool.execute.before", "input": input, "output": {"args": args}}));
                    steps.push(op.step());
                    let mut after = input.clone();
                    after["args"] = args;
                    steps.push(json!({"oc": "tool.execute.after", "input": after, "output": {"title": "", "output": "done", "metadata": {}}}));
                    if i == 0 {
                        steps.push(json!({"barrier": format!("t{t}-mid")}));
                    }
                }
                steps.push(event("session.idle", json!({"sessionID": sid})));
            }
            steps.push(event("session.deleted", json!({"info": {"id": sid}})));
            steps
        }

        /// Number of hook steps (each runs exactly one of our commands).
        fn hook_steps(steps: &[Value]) -> usize {
            steps.iter().filter(|s| s.get("hook").is_some()).count()
        }

        pub fn prompt_line(&self, turn: usize) -> &str {
            self.turns[turn - 1].0.lines().next().unwrap()
        }

        /// The `tool` of a change made by op `i` of `turn`, as `log --json` shows it.
        pub fn tool_json(&self, turn: usize, i: usize) -> Value {
            let op = &self.turns[turn - 1].1[i];
            json!({"name": self.tool_name(op), "id": self.tool_id(turn, i)})
        }

        /// The turn as `--turn` takes it: by prompt id where the agent has one.
        pub fn turn_ref(&self, turn: usize) -> String {
            self.prompt_id(turn)
                .unwrap_or_else(|| format!("{}:{turn}", self.session))
        }
    }

    /// A workspace with stand-ins ready to run.
    pub struct Scene {
        pub ws: Workspace,
        pub kits: Vec<Kit>,
        dir: tempfile::TempDir,
    }

    /// The user's own hook config before rewind is installed (our hooks are merged into it, and
    /// the stand-in runs the user's hooks too, as the agent would).
    fn user_config(agent: Agent) -> Option<(&'static str, Value)> {
        let cmd = |c: &str| json!({"type": "command", "command": c});
        Some(match agent {
            Agent::Claude => (
                ".claude/settings.json",
                json!({"permissions": {"allow": ["Bash(sed:*)"]}, "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [cmd("true")]}]}}),
            ),
            Agent::Codex => (
                ".codex/hooks.json",
                json!({"hooks": {"Stop": [{"hooks": [cmd("true")]}]}}),
            ),
            Agent::Gemini => (
                ".gemini/settings.json",
                json!({"general": {"vimMode": true}, "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [{"name": "lint", "type": "command", "command": "true"}]}]}}),
            ),
            Agent::Cursor => (
                ".cursor/hooks.json",
                json!({"version": 1, "hooks": {"afterFileEdit": [{"command": "true"}]}}),
            ),
            Agent::Opencode => return None,
        })
    }

    impl Scene {
        /// A mounted workspace holding each stand-in's starting files and the user's own hook
        /// configs, with rewind installed for each agent through the CLI.
        pub fn new(agents: &[Agent]) -> Scene {
            let mut ws = Workspace::new();
            fs::create_dir(ws.path().join("src")).unwrap();
            let kits: Vec<Kit> = agents
                .iter()
                .enumerate()
                .map(|(i, a)| Kit::new(*a, i + 1))
                .collect();
            for kit in &kits {
                for (p, c) in &kit.states[0] {
                    fs::write(ws.path().join(p), c.as_ref().unwrap()).unwrap();
                }
                if let Some((rel, v)) = user_config(kit.agent) {
                    let p = ws.path().join(rel);
                    fs::create_dir_all(p.parent().unwrap()).unwrap();
                    fs::write(&p, serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
                }
            }
            ws.mount();
            for a in agents.iter().map(|a| a.as_str()).collect::<BTreeSet<_>>() {
                ok(rw(&ws, &["agent", "install", a]));
            }
            let dir = tempfile::Builder::new()
                .prefix("rewind-standin-")
                .tempdir()
                .unwrap();
            fs::create_dir(dir.path().join("sync")).unwrap();
            fs::create_dir(dir.path().join("home")).unwrap();
            crate::common::login_profile(&dir.path().join("home"));
            Scene { ws, kits, dir }
        }

        fn spawn(
            &self,
            kit: &Kit,
            peer: Option<&Kit>,
            steps: Vec<Value>,
        ) -> (Child, PathBuf, Vec<Value>) {
            let ws = self.ws.path();
            let results = self.dir.path().join(format!("{}.results.json", kit.name));
            let (rel, nested) = config_file(kit.agent);
            let plan = json!({
                "workspace": ws,
                "config": ws.join(rel),
                "nested": nested,
                "shell": agent_shell(kit.agent),
                "name": kit.name,
                "peer": peer.map(|p| &p.name),
                "sync": self.dir.path().join("sync"),
                "results": results,
                "steps": steps,
            });
            let plan_path = self.dir.path().join(format!("{}.plan.json", kit.name));
            fs::write(&plan_path, serde_json::to_vec_pretty(&plan).unwrap()).unwrap();
            let mut cmd = if kit.agent == Agent::Opencode {
                let script = self.dir.path().join("standin.mjs");
                fs::write(&script, NODE_STANDIN).unwrap();
                let mut c = Command::new("node");
                c.arg(script);
                c
            } else {
                let script = self.dir.path().join("standin.py");
                fs::write(&script, PY_STANDIN).unwrap();
                let mut c = Command::new("python3");
                c.arg(script);
                c
            };
            cmd.arg(&plan_path)
                .current_dir(&ws)
                .env("XDG_DATA_HOME", data_home(&self.ws))
                .env("PATH", crate::common::path_with_rewind())
                .env("HOME", self.dir.path().join("home"))
                .env("SHELL", "/bin/bash")
                .env_remove("REWIND_SESSION")
                .env_remove("REWIND_AGENT")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (cmd.spawn().unwrap(), results, steps)
        }

        /// Run the stand-ins, all at once (each the other's peer when there are two), and
        /// check every hook they ran: exit 0, exactly the agent's reply, nothing on stderr.
        pub fn run(&self) {
            let ws = self.ws.path();
            self.run_steps(self.kits.iter().map(|k| k.steps(&ws)).collect());
        }

        /// Run the stand-ins on the given steps (one list each).
        pub fn run_steps(&self, steps: Vec<Vec<Value>>) {
            let running: Vec<_> = steps
                .into_iter()
                .enumerate()
                .map(|(i, steps)| {
                    let peer = match self.kits.len() {
                        2 => Some(&self.kits[1 - i]),
                        _ => None,
                    };
                    self.spawn(&self.kits[i], peer, steps)
                })
                .collect();
            for ((child, results, steps), kit) in running.into_iter().zip(&self.kits) {
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "stand-in {} failed ({}):\n{}\n{}",
                    kit.name,
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let results: Vec<Value> =
                    serde_json::from_slice(&fs::read(&results).unwrap()).unwrap();
                if kit.agent == Agent::Opencode {
                    continue;
                }
                let ours: Vec<&Value> = results
                    .iter()
                    .filter(|r| is_rewind_command(r["command"].as_str().unwrap(), kit.agent))
                    .collect();
                assert_eq!(
                    ours.len(),
                    Kit::hook_steps(&steps),
                    "{}: one of ours per hook",
                    kit.name
                );
                for r in &results {
                    let event = r["event"].as_str().unwrap();
                    assert!(events(kit.agent).contains(&event), "{event} is installed");
                    assert_eq!(r["code"], 0, "{}: {r}", kit.name);
                }
                for r in ours {
                    let event = r["event"].as_str().unwrap();
                    assert_eq!(
                        r["stdout"],
                        expected_stdout(kit.agent, event).as_str(),
                        "{}: {r}",
                        kit.name
                    );
                    assert_eq!(r["stderr"], "", "{}: {r}", kit.name);
                }
            }
            assert_eq!(hook_log(&self.ws), "", "a hook failed");
        }

        /// The files of stand-in `kit` in the workspace now (through the mount).
        pub fn files(&self, kit: &Kit) -> Files {
            let mut out = Files::new();
            fn walk(root: &Path, rel: &str, prefix: &str, out: &mut Files) {
                for e in fs::read_dir(root.join(rel)).unwrap() {
                    let e = e.unwrap();
                    let name = e.file_name().into_string().unwrap();
                    let p = format!("{rel}/{name}");
                    if rel == "src" && !name.starts_with(&format!("{prefix}_")) {
                        continue;
                    }
                    if e.file_type().unwrap().is_dir() {
                        out.insert(p.clone(), None);
                        walk(root, &p, prefix, out);
                    } else {
                        out.insert(p.clone(), Some(fs::read_to_string(root.join(&p)).unwrap()));
                    }
                }
            }
            walk(&self.ws.path(), "src", &kit.name, &mut out);
            out
        }

        /// Everything in `src/` belongs to one of the stand-ins.
        pub fn no_strays(&self) {
            for e in fs::read_dir(self.ws.path().join("src")).unwrap() {
                let name = e.unwrap().file_name().into_string().unwrap();
                assert!(
                    self.kits
                        .iter()
                        .any(|k| name.starts_with(&format!("{}_", k.name))),
                    "stray file src/{name}"
                );
            }
        }

        pub fn rw(&self, args: &[&str]) -> String {
            ok(rw(&self.ws, args))
        }
    }

    // ---- the checks ---------------------------------------------------------------------

    /// `rewind turns` (text and JSON): each turn with its number, prompt's first line, prompt
    /// id, agent, files changed and lines added and removed, closed.
    fn check_turns(sc: &Scene) -> Vec<Vec<Value>> {
        let text = sc.rw(&["turns"]);
        let mut all = Vec::new();
        for kit in &sc.kits {
            let turns = json_lines(&sc.rw(&["turns", "--session", &kit.session, "--json"]));
            assert_eq!(turns.len(), 3, "{}: {turns:?}", kit.name);
            for (t0, turn) in turns.iter().enumerate() {
                let t = t0 + 1;
                let ex = &kit.expects[t0];
                let files: BTreeSet<&str> = ex
                    .iter()
                    .filter(|e| e.kind != "mkdir")
                    .map(|e| e.path.as_str())
                    .collect();
                let added: usize = ex.iter().map(|e| e.added).sum();
                let removed: usize = ex.iter().map(|e| e.removed).sum();
                let ctx = format!("{} turn {t}: {turn}", kit.name);
                assert_eq!(turn["session"], kit.session.as_str(), "{ctx}");
                assert_eq!(turn["turn"], t, "{ctx}");
                assert_eq!(turn["agent"], kit.agent.as_str(), "{ctx}");
                assert_eq!(turn["prompt"], kit.prompt_line(t), "{ctx}");
                assert_eq!(turn["prompt_id"], json!(kit.prompt_id(t)), "{ctx}");
                assert_eq!(
                    (turn["added"].as_u64(), turn["removed"].as_u64()),
                    (Some(added as u64), Some(removed as u64)),
                    "{ctx}"
                );
                assert_eq!(
                    turn["files"],
                    files.len(),
                    "{ctx}: files changed ({files:?})"
                );
                assert!(
                    turn["end_id"].as_u64() >= turn["start_id"].as_u64(),
                    "{ctx}: closed"
                );
                let line = format!("{}:{t}", kit.session);
                let l = text
                    .lines()
                    .find(|l| l.starts_with(&format!("{line} ")))
                    .unwrap_or_else(|| panic!("{line} not in\n{text}"));
                for want in [
                    format!(" {} files ", files.len()),
                    format!(" +{added} "),
                    format!(" -{removed} "),
                    kit.prompt_line(t).to_string(),
                ] {
                    assert!(l.contains(&want), "{want:?} not in {l:?}");
                }
                assert!(!l.contains("(open)"), "{l}");
            }
            all.push(turns);
        }
        all
    }

    /// `log --turn` shows exactly the turn's changes: kind, path, session, agent, turn, the
    /// process that made it (shell commands included) and the tool call; by prompt id the same;
    /// the text form is `.rewind/turns/S/N/log`.
    fn check_logs(sc: &Scene) {
        for kit in &sc.kits {
            for t in 1..=3 {
                let r = format!("{}:{t}", kit.session);
                let log = sc.rw(&["log", "--turn", &r, "--json"]);
                let changes = json_lines(&log);
                let ex = &kit.expects[t - 1];
                let got: Vec<String> = changes
                    .iter()
                    .map(|c| format!("{} {} {}", c["kind"], c["path"], c["process"]))
                    .collect();
                assert_eq!(changes.len(), ex.len(), "{} turn {t}: {got:#?}", kit.name);
                for (i, (c, e)) in changes.iter().zip(ex).enumerate() {
                    let ctx = format!("{} turn {t} change {i}: {c}", kit.name);
                    assert_eq!(c["kind"], e.kind, "{ctx}");
                    assert_eq!(c["path"], e.path.as_str(), "{ctx}");
                    assert_eq!(c["from"], json!(e.from), "{ctx}");
                    assert_eq!(c["process"], e.process.as_str(), "{ctx}");
                    assert_eq!(c["session"], kit.session.as_str(), "{ctx}");
                    assert_eq!(c["agent"], kit.agent.as_str(), "{ctx}");
                    assert_eq!(c["turn"], t, "{ctx}");
                    assert_eq!(c["tool"], kit.tool_json(t, i), "{ctx}");
                }
                if kit.prompt_id(t).is_some() {
                    assert_eq!(
                        sc.rw(&["log", "--turn", &kit.turn_ref(t), "--json"]),
                        log,
                        "by prompt id"
                    );
                }
                let text = sc.rw(&["log", "--turn", &r]);
                let file = fs::read_to_string(
                    sc.ws
                        .path()
                        .join(format!(".rewind/turns/{}/{t}/log", kit.session)),
                )
                .unwrap();
                assert_eq!(file, text, "{r}: .rewind/turns log");
            }
            // Nothing of its files is anyone else's, and the session did nothing outside turns.
            let all = json_lines(&sc.rw(&["log", "--json"]));
            for c in &all {
                let path = c["path"].as_str().unwrap();
                if path.starts_with(&format!("src/{}_", kit.name)) && c["kind"] != "restore" {
                    assert_eq!(c["session"], kit.session.as_str(), "{c}");
                }
                if c["session"] == kit.session.as_str() {
                    assert!(c["turn"].is_u64(), "outside any turn: {c}");
                }
            }
        }
    }

    fn write_tree(dir: &Path, files: &Files) {
        for (p, c) in files {
            let full = dir.join(p);
            match c {
                None => fs::create_dir_all(&full).unwrap(),
                Some(c) => {
                    fs::create_dir_all(full.parent().unwrap()).unwrap();
                    fs::write(full, c).unwrap();
                }
            }
        }
    }

    /// Regular files in a tree: path → content.
    fn read_tree(dir: &Path) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<String, String>) {
            for e in fs::read_dir(root.join(rel)).unwrap() {
                let e = e.unwrap();
                let p = rel.join(e.file_name());
                if e.file_type().unwrap().is_dir() {
                    walk(root, &p, out);
                } else if p.file_name().unwrap() != "turn.diff" {
                    out.insert(
                        p.to_str().unwrap().to_string(),
                        fs::read_to_string(root.join(&p)).unwrap(),
                    );
                }
            }
        }
        walk(dir, Path::new(""), &mut out);
        out
    }

    fn only_files(files: &Files) -> BTreeMap<String, String> {
        files
            .iter()
            .filter_map(|(p, c)| Some((p.clone(), c.clone()?)))
            .collect()
    }

    fn git_apply(dir: &Path, reverse: bool) {
        let mut cmd = Command::new("git");
        cmd.arg("apply");
        if reverse {
            cmd.arg("-R");
        }
        let out = cmd
            .arg("turn.diff")
            .current_dir(dir)
            .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git apply{}: {}",
            if reverse { " -R" } else { "" },
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `diff --turn` is exactly what the turn did: `git apply` takes it from the files as they
    /// were before the prompt to as they were after it, and back with `-R`; by prompt id the
    /// same; it is `.rewind/turns/S/N/diff`.
    fn check_diffs(sc: &Scene) {
        for kit in &sc.kits {
            for t in 1..=3 {
                let r = format!("{}:{t}", kit.session);
                let diff = sc.rw(&["diff", "--turn", &r]);
                assert!(diff.starts_with("diff --git "), "{r}: {diff}");
                if kit.prompt_id(t).is_some() {
                    assert_eq!(
                        sc.rw(&["diff", "--turn", &kit.turn_ref(t)]),
                        diff,
                        "{r} by prompt id"
                    );
                }
                let file = fs::read_to_string(
                    sc.ws
                        .path()
                        .join(format!(".rewind/turns/{}/{t}/diff", kit.session)),
                )
                .unwrap();
                assert_eq!(file, diff, "{r}: .rewind/turns diff");
                // `--stat` lists the files the patch holds, and counts them as `turns` does.
                let stat = sc.rw(&["diff", "--turn", &r, "--stat"]);
                let files: BTreeSet<&str> = kit.expects[t - 1]
                    .iter()
                    .filter(|e| e.kind != "mkdir")
                    .map(|e| e.path.as_str())
                    .collect();
                let entries: Vec<&str> = stat.lines().filter(|l| l.contains(" | ")).collect();
                assert_eq!(entries.len(), files.len(), "{r}:\n{stat}");
                for e in &entries {
                    assert!(
                        !e.split(" | ").next().unwrap().trim().is_empty(),
                        "{r}: a nameless entry:\n{stat}"
                    );
                }
                let n = files.len();
                let summary = format!(" {n} file{} changed", if n == 1 { "" } else { "s" });
                assert!(
                    stat.lines().last().unwrap().starts_with(&summary),
                    "{r}:\n{stat}"
                );
                for reverse in [false, true] {
                    let dir = tempfile::tempdir().unwrap();
                    let (from, to) = if reverse {
                        (&kit.states[t], &kit.states[t - 1])
                    } else {
                        (&kit.states[t - 1], &kit.states[t])
                    };
                    write_tree(dir.path(), from);
                    fs::write(dir.path().join("turn.diff"), &diff).unwrap();
                    git_apply(dir.path(), reverse);
                    assert_eq!(
                        read_tree(dir.path()),
                        only_files(to),
                        "{r} applied{}:\n{diff}",
                        if reverse { " in reverse" } else { "" }
                    );
                }
            }
        }
    }

    /// The two stand-ins' turns overlap: each turn of one holds a change of the other.
    fn check_interleaved(sc: &Scene, turns: &[Vec<Value>]) {
        for (k, kit) in sc.kits.iter().enumerate() {
            let other = &sc.kits[1 - k];
            let theirs: Vec<u64> =
                json_lines(&sc.rw(&["log", "--session", &other.session, "--json"]))
                    .iter()
                    .map(|c| c["id"].as_u64().unwrap())
                    .collect();
            for turn in &turns[k] {
                let (start, end) = (
                    turn["start_id"].as_u64().unwrap(),
                    turn["end_id"].as_u64().unwrap(),
                );
                assert!(
                    theirs.iter().any(|id| *id > start && *id <= end),
                    "{}'s turn {} ({start}..={end}) holds none of {}'s changes {theirs:?}",
                    kit.name,
                    turn["turn"],
                    other.name
                );
            }
        }
    }

    /// What a turn looks like (for comparing before and after a remount).
    fn turn_views(sc: &Scene, via_ctl_dir: bool) -> Vec<String> {
        let mut out = vec![sc.rw(&["turns", "--json"])];
        for kit in &sc.kits {
            for t in 1..=3 {
                let r = format!("{}:{t}", kit.session);
                out.push(sc.rw(&["log", "--turn", &r, "--json"]));
                out.push(sc.rw(&["diff", "--turn", &r]));
                if via_ctl_dir {
                    let dir = sc
                        .ws
                        .path()
                        .join(format!(".rewind/turns/{}/{t}", kit.session));
                    out.push(fs::read_to_string(dir.join("log")).unwrap());
                    out.push(fs::read_to_string(dir.join("diff")).unwrap());
                }
            }
        }
        out
    }

    /// Run `rewind rollback ARGS`, which must fully succeed; returns the rollback's session.
    fn rollback(sc: &Scene, args: &[&str]) -> String {
        let mut all = vec!["rollback"];
        all.extend(args);
        let out = sc.rw(&all);
        assert!(out.contains(", skipped 0, failed 0"), "{all:?}: {out}");
        let name = out
            .lines()
            .last()
            .and_then(|l| l.split(':').next())
            .unwrap()
            .to_string();
        assert!(name.starts_with("rollback-"), "{out}");
        name
    }

    /// The files of `kit` after its turns `kept` only.
    fn state_with(kit: &Kit, kept: &[usize]) -> Files {
        let mut files = kit.states[0].clone();
        for &t in kept {
            for op in &kit.turns[t - 1].1 {
                op.apply(&mut files, "");
            }
        }
        files
    }

    /// Two stand-ins at once, then everything checked, the remount, and the rollbacks.
    pub fn pair(a: Agent, b: Agent) {
        let mut sc = Scene::new(&[a, b]);
        sc.run();
        for kit in &sc.kits {
            assert_eq!(
                sc.files(kit),
                kit.states[3],
                "{}: its files after its three prompts",
                kit.name
            );
        }
        sc.no_strays();
        let turns = check_turns(&sc);
        check_logs(&sc);
        check_diffs(&sc);
        check_interleaved(&sc, &turns);

        // Turns are kept in the store: the same after an unmount (read from the store) and
        // after the next mount (also under .rewind/turns/).
        let before = turn_views(&sc, true);
        sc.ws.unmount();
        assert_eq!(
            sc.rw(&["turns", "--json"]),
            before[0],
            "turns while unmounted"
        );
        sc.ws.mount();
        assert_eq!(turn_views(&sc, true), before, "turns after a remount");
        let listed: BTreeSet<String> = fs::read_dir(sc.ws.path().join(".rewind/turns"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            listed,
            sc.kits.iter().map(|k| k.session.clone()).collect(),
            ".rewind/turns/"
        );

        let (ka, kb) = (&sc.kits[0], &sc.kits[1]);
        // .rewind/ctl takes the same commands (one per write, the answer read back).
        let ctl = |line: &str| -> String {
            use std::io::{Read, Write};
            let mut f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(sc.ws.path().join(".rewind/ctl"))
                .unwrap();
            f.write_all(line.as_bytes())
                .unwrap_or_else(|e| panic!("{line}: {e}"));
            let mut out = String::new();
            f.read_to_string(&mut out).unwrap();
            out
        };
        assert_eq!(ctl("turns --json"), sc.rw(&["turns", "--json"]));
        let t2 = format!("{}:2", ka.session);
        assert_eq!(
            ctl(&format!("diff --turn {t2}")),
            sc.rw(&["diff", "--turn", &t2])
        );
        assert_eq!(
            ctl(&format!("log --turn {} --json", kb.turn_ref(3))),
            sc.rw(&["log", "--turn", &kb.turn_ref(3), "--json"])
        );
        let log_len = || json_lines(&sc.rw(&["log", "--json"])).len();
        let everything = |sc: &Scene| (sc.files(&sc.kits[0]), sc.files(&sc.kits[1]));

        // A dry run changes nothing.
        let (n, now) = (log_len(), everything(&sc));
        let dry = sc.rw(&["rollback", "--turn", &ka.turn_ref(2), "--dry-run"]);
        assert!(
            dry.contains("dry run: 5 paths would be restored, 0 skipped"),
            "{dry}"
        );
        assert_eq!(
            (log_len(), everything(&sc)),
            (n, now),
            "a dry run changed something"
        );

        // The acceptance criterion: rolling back the prompt that worked through the shell puts
        // that agent's files back as they were before it (later prompts' work stays), and the
        // other agent's work, made at the same time, stays.
        let rb = rollback(&sc, &["--turn", &ka.turn_ref(2)]);
        assert_eq!(
            sc.files(ka),
            state_with(ka, &[1, 3]),
            "{}: turn 2 undone, 1 and 3 kept",
            ka.name
        );
        assert_eq!(sc.files(kb), kb.states[3], "{}'s work stays", kb.name);
        sc.no_strays();
        for c in json_lines(&sc.rw(&["log", "--session", &rb, "--json"])) {
            assert_eq!(
                (c["kind"].as_str(), c["agent"].as_str()),
                (Some("restore"), Some("rewind")),
                "{c}"
            );
        }
        // The rollback is undone as a session of its own.
        rollback(&sc, &["--session", &rb]);
        assert_eq!(sc.files(ka), ka.states[3]);
        assert_eq!(sc.files(kb), kb.states[3]);

        // Back to just before prompt 2: prompts 2 and 3 undone.
        rollback(&sc, &["--to-turn", &format!("{}:2", ka.session)]);
        assert_eq!(
            sc.files(ka),
            ka.states[1],
            "{}: back to just before prompt 2",
            ka.name
        );
        assert_eq!(sc.files(kb), kb.states[3], "{}'s work stays", kb.name);

        // And the other one back to before its first prompt (by its prompt id where it has
        // one), leaving the first one's state alone.
        rollback(&sc, &["--to-turn", &kb.turn_ref(1)]);
        assert_eq!(
            sc.files(kb),
            kb.states[0],
            "{}: back to before its first prompt",
            kb.name
        );
        assert_eq!(sc.files(ka), ka.states[1]);
        sc.no_strays();
    }

    #[test]
    fn claude_and_codex_at_once() {
        pair(Agent::Claude, Agent::Codex);
    }

    #[test]
    fn gemini_and_cursor_at_once() {
        pair(Agent::Gemini, Agent::Cursor);
    }

    #[test]
    fn opencode_and_claude_at_once() {
        pair(Agent::Opencode, Agent::Claude);
    }

    /// Two sessions of the same agent at once are two sessions.
    #[test]
    fn two_codex_sessions_at_once() {
        pair(Agent::Codex, Agent::Codex);
    }

    /// One agent saves a file by writing a temporary and renaming it over the target (as
    /// editors, `sed -i` and agents' edit tools do); between the two, another agent's hooks end
    /// a tool call and a turn (each makes the daemon settle). The save must still be one
    /// `modify` of the target, in the first agent's turn.
    #[test]
    fn another_agents_hooks_do_not_split_a_save_by_rename() {
        let sc = Scene::new(&[Agent::Claude, Agent::Codex]);
        let (a, b) = (&sc.kits[0], &sc.kits[1]);
        let ws = sc.ws.path();
        let main = format!("src/{}_main.py", a.name);
        let tmp = format!("{main}.~edit");
        let new = initial_main().replace("return 1", "return 2");
        let edit = Op::Edit(main.clone(), new.clone());
        let call = json!({"tool_name": "Edit", "tool_input": a.tool_input(&edit, &ws), "tool_use_id": a.tool_id(1, 0)});
        let mut done = call.clone();
        done["tool_response"] = json!({"filePath": ws.join(&main)});
        let a_steps = vec![
            a.hook("SessionStart", None, json!({}), &ws),
            a.hook(
                "UserPromptSubmit",
                Some(1),
                json!({"prompt": "Return 2"}),
                &ws,
            ),
            a.hook("PreToolUse", Some(1), call, &ws),
            json!({"write": tmp, "content": new}),
            json!({"barrier": "saved"}),
            json!({"barrier": "settled"}),
            json!({"rename": tmp, "to": main}),
            a.hook("PostToolUse", Some(1), done, &ws),
            a.hook(
                "Stop",
                Some(1),
                json!({"last_assistant_message": "Done."}),
                &ws,
            ),
        ];
        let shell = Op::Sed(
            format!("src/{}_config.txt", b.name),
            "debug".into(),
            "info".into(),
        );
        let call = json!({"tool_name": "Bash", "tool_input": b.tool_input(&shell, &ws), "tool_use_id": b.tool_id(1, 0)});
        let mut done = call.clone();
        done["tool_response"] = json!("ok");
        // Inside the window (which must stay well under the 0.5 s a new file is held back):
        // only the hook that ends B's tool call, which makes the daemon settle.
        let b_steps = vec![
            b.hook("SessionStart", None, json!({}), &ws),
            b.hook(
                "UserPromptSubmit",
                Some(1),
                json!({"prompt": "Less logging"}),
                &ws,
            ),
            b.hook("PreToolUse", Some(1), call, &ws),
            shell.step(),
            json!({"barrier": "saved"}),
            b.hook("PostToolUse", Some(1), done, &ws),
            json!({"barrier": "settled"}),
            b.hook(
                "Stop",
                Some(1),
                json!({"last_assistant_message": "Done."}),
                &ws,
            ),
        ];
        sc.run_steps(vec![a_steps, b_steps]);
        assert_eq!(fs::read_to_string(ws.join(&main)).unwrap(), new);
        let all = sc.rw(&["log"]);
        assert!(
            !all.contains(".~edit"),
            "the temporary file shows in the history:\n{all}"
        );
        let turn = json_lines(&sc.rw(&["log", "--turn", &format!("{}:1", a.session), "--json"]));
        assert_eq!(turn.len(), 1, "{turn:#?}");
        assert_eq!(
            (turn[0]["kind"].as_str(), turn[0]["path"].as_str()),
            (Some("modify"), Some(main.as_str()))
        );
        assert_eq!(
            turn[0]["tool"],
            json!({"name": "Edit", "id": a.tool_id(1, 0)})
        );
    }
}

/// `rewind mcp`, spoken to with rmcp's own client over the real protocol (and once with raw
/// JSON-RPC lines), spawned in a mounted workspace whose history holds a stand-in agent's turns.
mod mcp {
    use std::collections::BTreeSet;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use rewind::agent::Agent;
    use rmcp::{
        RoleClient, ServiceError, ServiceExt,
        model::{CallToolRequestParams, CallToolResult, ErrorCode, Tool},
        service::RunningService,
        transport::TokioChildProcess,
    };
    use serde_json::{Value, json};

    use super::standin::Scene;
    use super::{data_home, json_lines, ok, rw};
    use crate::common::{REWIND, Workspace};

    type Client = RunningService<RoleClient, ()>;

    /// `rewind mcp` started as an MCP client starts it: in the project folder.
    async fn connect(ws: &Workspace) -> Client {
        let mut cmd = tokio::process::Command::new(REWIND);
        cmd.arg("mcp")
            .current_dir(ws.path())
            .env("XDG_DATA_HOME", data_home(ws))
            .env_remove("REWIND_SESSION")
            .env_remove("REWIND_AGENT");
        let transport = TokioChildProcess::new(cmd).expect("spawn rewind mcp");
        ().serve(transport).await.expect("initialize")
    }

    async fn call(
        client: &Client,
        tool: &'static str,
        args: Value,
    ) -> Result<CallToolResult, ServiceError> {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
            .await
    }

    fn text(r: &CallToolResult) -> String {
        r.content
            .iter()
            .filter_map(|c| c.as_text())
            .map(|t| t.text.as_str())
            .collect()
    }

    /// The text of a call that must succeed.
    async fn ok_call(client: &Client, tool: &'static str, args: Value) -> String {
        let r = call(client, tool, args.clone()).await.expect("call");
        assert_ne!(r.is_error, Some(true), "{tool} {args}: {}", text(&r));
        text(&r)
    }

    fn tool_error(r: Result<CallToolResult, ServiceError>) -> String {
        let r = r.expect("a tool error is a result, not a protocol error");
        assert_eq!(
            r.is_error,
            Some(true),
            "expected a tool error, got {}",
            text(&r)
        );
        text(&r)
    }

    fn props(t: &Tool) -> BTreeSet<String> {
        t.input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn required(t: &Tool) -> BTreeSet<String> {
        t.input_schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn initialize_and_list_tools_with_schemas_and_annotations() {
        let mut ws = Workspace::new();
        ws.mount();
        let client = connect(&ws).await;
        let info = client.peer_info().expect("peer info after initialize");
        let server = info.server_info.as_ref().expect("server info");
        assert_eq!(server.name, "rewind");
        assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
        assert!(info.capabilities.tools.is_some());
        let instructions = info.instructions.as_deref().expect("instructions");
        assert!(instructions.contains("apply: true"), "{instructions}");
        assert!(instructions.contains("DRY RUN"), "{instructions}");

        let tools = client.list_all_tools().await.expect("list tools");
        let names: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(
            names,
            set(&[
                "cat",
                "checkpoint",
                "comments",
                "diff",
                "history",
                "rollback",
                "show",
                "turns",
                "undo",
                "whoami"
            ])
        );
        let tool = |n: &str| tools.iter().find(|t| t.name == n).unwrap();
        for t in &tools {
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            assert_eq!(
                t.input_schema["additionalProperties"], false,
                "{} rejects unknown arguments",
                t.name
            );
            assert!(
                t.description.as_deref().is_some_and(|d| !d.is_empty()),
                "{}",
                t.name
            );
            let a = t
                .annotations
                .as_ref()
                .unwrap_or_else(|| panic!("{} has no annotations", t.name));
            assert!(a.title.is_some(), "{}", t.name);
            assert_eq!(a.open_world_hint, Some(false), "{}", t.name);
        }
        for n in ["history", "diff", "turns", "whoami", "show", "cat"] {
            let a = tool(n).annotations.clone().unwrap();
            assert_eq!(a.read_only_hint, Some(true), "{n}");
            assert_ne!(a.destructive_hint, Some(true), "{n}");
        }
        for n in ["rollback", "undo"] {
            let a = tool(n).annotations.clone().unwrap();
            assert_eq!(a.read_only_hint, Some(false), "{n}");
            assert_eq!(a.destructive_hint, Some(true), "{n}");
            assert!(
                tool(n).description.as_deref().unwrap().contains("apply"),
                "{n} says it previews"
            );
        }
        let cp = tool("checkpoint").annotations.clone().unwrap();
        assert_eq!(
            (cp.read_only_hint, cp.destructive_hint),
            (Some(false), Some(false))
        );

        assert_eq!(
            props(tool("history")),
            set(&[
                "path", "session", "agent", "turn", "since", "until", "limit", "full"
            ])
        );
        assert!(required(tool("history")).is_empty());
        assert_eq!(
            tool("history").input_schema["properties"]["limit"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(
            props(tool("diff")),
            set(&[
                "id", "session", "agent", "turn", "since", "from", "to", "paths", "stat"
            ])
        );
        assert_eq!(props(tool("turns")), set(&["session"]));
        assert_eq!(props(tool("checkpoint")), set(&["name", "force"]));
        assert_eq!(required(tool("checkpoint")), set(&["name"]));
        let r = tool("rollback");
        assert_eq!(
            props(r),
            set(&[
                "session", "agent", "turn", "to_turn", "since", "to", "file", "change", "hunk",
                "path", "force", "apply"
            ])
        );
        assert_eq!(r.input_schema["properties"]["apply"]["type"], "boolean");
        assert_eq!(r.input_schema["properties"]["apply"]["default"], false);
        assert_eq!(props(tool("undo")), set(&["id", "force", "apply"]));
        assert_eq!(required(tool("undo")), set(&["id"]));
        assert_eq!(
            tool("undo").input_schema["properties"]["id"]["type"],
            "integer"
        );
        client.cancel().await.expect("cancel");
    }

    /// Every tool against a real history: what it answers is what the CLI says; rollback and
    /// undo change nothing unless `apply: true`, and then they do.
    #[tokio::test]
    async fn tools_work_on_the_workspace_history() {
        let mut sc = Scene::new(&[Agent::Claude]);
        sc.run();
        let kit = &sc.kits[0];
        let s = kit.session.clone();
        let client = connect(&sc.ws).await;

        // history with `full`: `log -n 50 --json` (what the CLI prints, line for line); by
        // default the same changes, compact.
        let full = ok_call(&client, "history", json!({"full": true})).await;
        assert_eq!(full, sc.rw(&["log", "-n", "50", "--json"]));
        let all = ok_call(&client, "history", json!({})).await;
        assert_eq!(all, rewind::mcp::compact_history(&full));
        assert_eq!(
            json_lines(&all).len(),
            1 + 4 + 4 + 2,
            "the install, then the 3 turns"
        );
        let t2 = format!("{s}:2");
        let turn = json_lines(&ok_call(&client, "history", json!({"turn": t2})).await);
        let kinds: Vec<&str> = turn.iter().map(|c| c["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["modify", "create", "delete", "rename"]);
        assert!(
            turn.iter()
                .all(|c| c["session"] == s.as_str() && c["turn"] == 2)
        );
        let main = format!("src/{}_main.py", kit.name);
        let of_main =
            json_lines(&ok_call(&client, "history", json!({"path": main, "limit": 1})).await);
        assert_eq!(of_main.len(), 1);
        assert_eq!(
            (of_main[0]["path"].as_str(), of_main[0]["turn"].as_u64()),
            (Some(main.as_str()), Some(2))
        );

        // diff, turns: the CLI's output.
        assert_eq!(
            ok_call(&client, "diff", json!({"turn": t2})).await,
            sc.rw(&["diff", "--turn", &t2])
        );
        let id = turn[0]["id"].as_u64().unwrap();
        assert_eq!(
            ok_call(&client, "diff", json!({"id": id})).await,
            sc.rw(&["diff", &id.to_string()])
        );
        assert_eq!(
            ok_call(&client, "diff", json!({"session": s, "stat": true})).await,
            sc.rw(&["diff", "--session", &s, "--stat"])
        );
        let turns = ok_call(&client, "turns", json!({})).await;
        assert_eq!(turns, sc.rw(&["turns"]));
        assert_eq!(turns.lines().count(), 3);
        assert_eq!(
            ok_call(&client, "turns", json!({"session": s})).await,
            turns
        );

        // checkpoint: made for real; a taken name is an error the model can read.
        ok_call(&client, "checkpoint", json!({"name": "mcp-green"})).await;
        assert_eq!(
            sc.rw(&["diff", "--from", "mcp-green"]),
            "",
            "the checkpoint is now"
        );
        let e = tool_error(call(&client, "checkpoint", json!({"name": "mcp-green"})).await);
        assert!(e.contains("exists") && e.contains("--force"), "{e}");
        ok_call(
            &client,
            "checkpoint",
            json!({"name": "mcp-green", "force": true}),
        )
        .await;

        // rollback without apply: a dry run that says so and changes nothing.
        let log_len = || json_lines(&sc.rw(&["log", "--json"])).len();
        let n = log_len();
        let preview = ok_call(&client, "rollback", json!({"turn": t2})).await;
        assert!(preview.starts_with("DRY RUN"), "{preview}");
        assert!(
            preview.contains("dry run: 5 paths would be restored, 0 skipped"),
            "{preview}"
        );
        assert_eq!(sc.files(kit), kit.states[3], "a preview changed the files");
        assert_eq!(log_len(), n, "a preview recorded something");
        // With apply: done.
        let done = ok_call(
            &client,
            "rollback",
            json!({"turn": kit.turn_ref(2), "apply": true}),
        )
        .await;
        assert!(!done.contains("DRY RUN"), "{done}");
        assert!(
            done.contains("rollback-1: restored 5 paths, skipped 0, failed 0"),
            "{done}"
        );
        let mut want = kit.states[1].clone();
        for op in &kit.turns[2].1 {
            op.apply(&mut want, "");
        }
        assert_eq!(sc.files(kit), want, "turn 2 undone, turns 1 and 3 kept");

        // undo: one change, previewed, then applied.
        let config = format!("src/{}_config.txt", kit.name);
        let last =
            json_lines(&ok_call(&client, "history", json!({"path": config, "limit": 1})).await);
        let id = last[0]["id"].as_u64().unwrap();
        let n = log_len();
        let preview = ok_call(&client, "undo", json!({"id": id})).await;
        assert!(preview.starts_with("DRY RUN"), "{preview}");
        assert_eq!(log_len(), n);
        assert!(
            std::fs::read_to_string(sc.ws.path().join(&config))
                .unwrap()
                .contains("info")
        );
        let done = ok_call(&client, "undo", json!({"id": id, "apply": true})).await;
        assert!(!done.contains("DRY RUN"), "{done}");
        assert_eq!(
            std::fs::read_to_string(sc.ws.path().join(&config)).unwrap(),
            kit.states[0][&config].clone().unwrap()
        );
        let restores =
            json_lines(&ok_call(&client, "history", json!({"since": n.to_string()})).await);
        assert!(
            !restores.is_empty()
                && restores
                    .iter()
                    .all(|c| c["kind"] == "restore" && c["agent"] == "rewind")
        );
        client.cancel().await.expect("cancel");

        // Unmounted, the same history is read from the store.
        sc.ws.unmount();
        let client = connect(&sc.ws).await;
        assert_eq!(
            ok_call(&client, "history", json!({"full": true})).await,
            ok(rw(&sc.ws, &["log", "-n", "50", "--json"]))
        );
        assert_eq!(
            ok_call(&client, "turns", json!({})).await,
            ok(rw(&sc.ws, &["turns"]))
        );
        client.cancel().await.expect("cancel");
    }

    #[tokio::test]
    async fn bad_arguments_are_errors_not_crashes() {
        let mut ws = Workspace::new();
        std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
        ws.mount();
        std::fs::write(ws.path().join("a.txt"), "b\n").unwrap();
        let client = connect(&ws).await;

        // Wrong JSON types, missing or unknown fields: rejected before anything runs, as a tool
        // error (isError: true) naming the problem.
        for (tool, args, why) in [
            ("history", json!({"limit": "lots"}), "invalid type"),
            ("undo", json!({}), "missing field `id`"),
            ("undo", json!({"id": -1}), "invalid value"),
            (
                "rollback",
                json!({"session": "s1", "apply": "yes"}),
                "invalid type",
            ),
            (
                "rollback",
                json!({"session": "s1", "dry_run": false}),
                "unknown field `dry_run`",
            ),
            ("checkpoint", json!({"name": 5}), "invalid type"),
        ] {
            let e = tool_error(call(&client, tool, args.clone()).await);
            assert!(e.contains(why), "{tool} {args}: {e}");
        }
        // An unknown tool: a protocol error (invalid params).
        match call(&client, "format_disk", json!({})).await {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{e:?}");
            }
            other => panic!("expected an MCP error, got {other:?}"),
        }
        // Well-typed but meaningless.
        let e = tool_error(call(&client, "rollback", json!({})).await);
        assert!(e.contains("say what to roll back"), "{e}");
        let e = tool_error(call(&client, "rollback", json!({"session": "s1", "agent": "a"})).await);
        assert!(e.contains("exactly one"), "{e}");
        let e = tool_error(call(&client, "diff", json!({"to": "x"})).await);
        assert!(e.contains("needs `from`"), "{e}");
        let e = tool_error(call(&client, "history", json!({"session": "--force"})).await);
        assert!(e.contains("must not start with '-'"), "{e}");
        let e = tool_error(call(&client, "checkpoint", json!({"name": "two words"})).await);
        assert!(e.contains("one word"), "{e}");
        // rewind itself refusing: its message, as a tool error.
        let e = tool_error(call(&client, "diff", json!({"id": 999_999})).await);
        assert!(e.contains("there is no change 999999"), "{e}");
        let e = tool_error(call(&client, "history", json!({"since": "not-a-point"})).await);
        assert!(e.contains("not-a-point"), "{e}");
        let e = tool_error(
            call(
                &client,
                "rollback",
                json!({"turn": "nosuch:9", "apply": true}),
            )
            .await,
        );
        assert!(e.contains("there is no turn nosuch:9"), "{e}");
        // Nothing was touched, and the server is still there.
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "b\n"
        );
        let h = json_lines(&ok_call(&client, "history", json!({})).await);
        assert_eq!(h.len(), 1);
        client.cancel().await.expect("cancel");
    }

    /// A client on an older protocol over raw JSON-RPC lines: stdout carries nothing but
    /// JSON-RPC, and the server exits 0 once stdin closes.
    #[test]
    fn raw_stdio_session_and_exit_on_eof() {
        let mut ws = Workspace::new();
        std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
        ws.mount();
        std::fs::write(ws.path().join("a.txt"), "b\n").unwrap();
        let mut child = Command::new(REWIND)
            .arg("mcp")
            .current_dir(ws.path())
            .env("XDG_DATA_HOME", data_home(&ws))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut send = |v: Value| {
            writeln!(stdin, "{v}").unwrap();
            stdin.flush().unwrap();
        };
        let mut recv = || -> Value {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line:?}"))
        };
        send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        );
        let init = recv();
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        assert_eq!(init["result"]["serverInfo"]["name"], "rewind");
        send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        let list = recv();
        let rollback = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "rollback")
            .expect("rollback listed")
            .clone();
        assert_eq!(
            rollback["annotations"]["destructiveHint"], true,
            "{rollback}"
        );
        assert_eq!(rollback["annotations"]["readOnlyHint"], false, "{rollback}");
        // A real preview: the one change, not applied.
        send(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "rollback", "arguments": {"since": "0"}}}),
        );
        let res = recv();
        let t = res["result"]["content"][0]["text"].as_str().unwrap();
        assert!(t.starts_with("DRY RUN"), "{t}");
        assert!(t.contains("revert   a.txt"), "{t}");
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
            "b\n"
        );
        send(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "undo", "arguments": {"id": "x"}}}),
        );
        assert_eq!(recv()["result"]["isError"], true);
        send(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "nope", "arguments": {}}}),
        );
        assert_eq!(recv()["error"]["code"], -32602);
        drop(stdin);
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                child.kill().ok();
                panic!("rewind mcp did not exit after stdin closed");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        assert!(status.success(), "exit status {status}");
        assert_eq!(rest, "", "output after the last response");

        // stdin closed before any request: nothing to serve, exit 0, nothing printed.
        let out = Command::new(REWIND)
            .arg("mcp")
            .current_dir(ws.path())
            .env("XDG_DATA_HOME", data_home(&ws))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    }
}
