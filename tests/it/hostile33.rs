//! Round 33: a new user's pass over rollbacks of hard-linked files and the review page's
//! actions, on bb20d30. Each test failed before the fix named in its comment.

use std::fs;
use std::os::unix::fs::MetadataExt;

use crate::common::{Workspace, rw_ok, sync};
use crate::record::log;

/// The id of the newest change of `path`.
fn last_id(ws: &Workspace, path: &str) -> u64 {
    log(ws)
        .iter()
        .rfind(|c| c["path"] == path)
        .and_then(|c| c["id"].as_u64())
        .unwrap_or_else(|| panic!("no change of {path}"))
}

/// A rollback that takes away one name of a file with others (`undo` of a `link`) leaves
/// those names the file's real link count, seen through the mount.
// Failed before the rollback told the kernel of such a name as an entry gone and attributes
// changed rather than as a deleted file (`restore.rs` `entry_changed`): the kernel clears a
// deleted entry's inode's links, and `z1` showed a link count of 0 for good.
#[test]
fn a_rollback_removing_one_name_of_a_hard_linked_file_leaves_the_others_their_link_count() {
    let mut ws = Workspace::new();
    ws.mount();
    let p = |name: &str| ws.path().join(name);
    fs::write(p("z1"), "z\n").unwrap();
    sync(&ws);
    fs::hard_link(p("z1"), p("z2")).unwrap();
    fs::hard_link(p("z1"), p("z3")).unwrap();
    assert_eq!(fs::metadata(p("z1")).unwrap().nlink(), 3);
    let z3 = last_id(&ws, "z3");
    rw_ok(&ws, &["undo", &z3.to_string()]);
    assert!(!p("z3").exists());
    assert_eq!(fs::metadata(p("z1")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(p("z2")).unwrap().nlink(), 2);
    let z2 = last_id(&ws, "z2");
    rw_ok(&ws, &["undo", &z2.to_string()]);
    assert!(!p("z2").exists());
    assert_eq!(fs::metadata(p("z1")).unwrap().nlink(), 1);
    assert_eq!(fs::read_to_string(p("z1")).unwrap(), "z\n");
    ws.unmount();
}

/// A hunk revert of a file that has another name now (a hard link made after the change) puts
/// the hunk back in the file as it is, seen through both names, as one change (a `restore`).
// Failed before a hunk revert's plan was written in place (`Plan::in_place`): the rollback
// gave `a.txt` a file of its own (a delete and a create, two changes), `b.txt` kept `FIVE`,
// and `undo` of the revert's last change deleted `a.txt`.
#[test]
fn a_hunk_revert_of_a_hard_linked_file_rewrites_it_in_place() {
    let mut ws = Workspace::new();
    ws.mount();
    let p = |name: &str| ws.path().join(name);
    let ten: String = (1..=10).map(|n| format!("{n}\n")).collect();
    fs::write(p("a.txt"), &ten).unwrap();
    sync(&ws);
    crate::common::sh(&ws.path(), "sed -i 's/^5$/FIVE/' a.txt");
    sync(&ws);
    let change = last_id(&ws, "a.txt");
    fs::hard_link(p("a.txt"), p("b.txt")).unwrap();
    let before = log(&ws).len();
    rw_ok(
        &ws,
        &["rollback", "--change", &change.to_string(), "--hunk", "1"],
    );
    assert_eq!(fs::read_to_string(p("a.txt")).unwrap(), ten);
    assert_eq!(fs::read_to_string(p("b.txt")).unwrap(), ten);
    let (a, b) = (
        fs::metadata(p("a.txt")).unwrap(),
        fs::metadata(p("b.txt")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "still one file");
    let all = log(&ws);
    let made: Vec<_> = all[before..]
        .iter()
        .map(|c| format!("{} {}", c["kind"], c["path"]))
        .collect();
    assert_eq!(made, [r#""restore" "a.txt""#], "{made:?}");
    ws.unmount();
}

/// `rewind mount` run from inside the workspace (`cd proj && rewind mount .`) names the
/// processes still in the folder underneath the mount, whose writes by a relative path go
/// unrecorded, and says how to move onto the mount; a shell that does (`cd .`) is recorded.
// Failed before the mount looked (`cli/mount.rs` `warn_of_those_underneath`): nothing was
// said, and a new user's first agent run went unrecorded.
#[test]
fn mounting_the_folder_a_shell_is_in_names_it_and_cd_dot_moves_it_onto_the_mount() {
    let mut ws = Workspace::new();
    let mut shell = std::process::Command::new("bash")
        .args([
            "-c",
            "echo before > a.txt; while [ ! -e go ]; do sleep 0.05; done; \
             echo unrecorded > b.txt; cd .; echo recorded > c.txt",
        ])
        .current_dir(ws.path())
        .spawn()
        .unwrap();
    let out = ws
        .command(&["mount"])
        .arg(ws.path())
        .arg("--store")
        .arg(ws.store())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    ws.mark_mounted();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        said.contains(&format!("bash[{}]", shell.id())) && said.contains("`cd .`"),
        "{said}"
    );
    fs::write(ws.path().join("go"), "").unwrap();
    assert!(shell.wait().unwrap().success());
    let paths: Vec<String> = log(&ws)
        .iter()
        .map(|c| c["path"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(paths.contains(&"c.txt".to_string()), "{paths:?}\n{said}");
    assert!(!paths.contains(&"b.txt".to_string()), "{paths:?}\n{said}");
    ws.unmount();
}

/// `rewind turns` says a turn is rolled back only while it is: once its rollback is itself
/// undone, the turn is no longer marked. A file the turn made and removed again has nothing to
/// put back, and does not make a whole rollback look partial.
// Failed before the last rollback of each path decided, and such paths were left out
// (`turns::rolled_back`): the turn still said "(rolled back by rollback-1)" after
// `rollback --session rollback-1`, and "partly" while every file was put back.
#[test]
fn turns_says_rolled_back_only_while_it_is() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("a.txt"), "before\n").unwrap();
    sync(&ws);
    let ctl = |line: &str| fs::write(ws.path().join(".rewind/ctl"), format!("{line}\n")).unwrap();
    ctl("turn begin --session s1 --agent claude --prompt 'edit a'");
    let out = ws
        .command(&[
            "run",
            "--session",
            "s1",
            "--agent",
            "claude",
            "--",
            "sh",
            "-c",
        ])
        .arg("echo after > a.txt && seq 1 50 > scratch.txt && sleep 0.8 && rm scratch.txt")
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    ctl("turn end --session s1");
    sync(&ws);
    let turn = |ws: &Workspace| -> serde_json::Value {
        let json = rw_ok(ws, &["turns", "--session", "s1", "--json"]);
        serde_json::from_str(json.lines().next().unwrap()).unwrap()
    };
    assert!(turn(&ws)["rolled_back"].is_null(), "{}", turn(&ws));

    let undo = rw_ok(&ws, &["rollback", "--turn", "s1:1"]);
    assert_eq!(
        fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "before\n"
    );
    let t = turn(&ws);
    assert_eq!(t["rolled_back"], "whole", "{t}\n{undo}");
    assert_eq!(t["rolled_back_by"][0], "rollback-1", "{t}");
    assert!(rw_ok(&ws, &["turns"]).contains("(rolled back by rollback-1)"));

    rw_ok(&ws, &["rollback", "--session", "rollback-1"]);
    assert_eq!(
        fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "after\n"
    );
    let t = turn(&ws);
    assert!(t["rolled_back"].is_null(), "{t}");
    assert_eq!(t["rolled_back_by"], serde_json::json!([]), "{t}");
    assert!(!rw_ok(&ws, &["turns"]).contains("rolled back"));
    ws.unmount();
}

/// A prompt id two sessions' agents both used names neither turn on its own: the command is
/// refused, naming both; `SESSION:N` picks one.
// Failed before a prompt id was looked for in every turn (`TurnRef::resolve`): `--turn p0`
// meant the first session's turn, silently, where a bare number lists the choices.
#[test]
fn a_prompt_id_in_two_sessions_is_refused_naming_both() {
    let mut ws = Workspace::new();
    ws.mount();
    let ctl = |line: &str| fs::write(ws.path().join(".rewind/ctl"), format!("{line}\n")).unwrap();
    for s in ["s1", "s2"] {
        ctl(&format!(
            "turn begin --session {s} --agent claude --prompt 'same id' --prompt-id p0"
        ));
        ctl(&format!("turn end --session {s}"));
    }
    let out = crate::common::rw(&ws, &["log", "--turn", "p0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("s1:1") && err.contains("s2:1"), "{err}");
    rw_ok(&ws, &["log", "--turn", "s2:1"]);
    ws.unmount();
}

/// A background job an agent's shell command leaves running (`(sleep; codegen) &`) outlives
/// the command's shell and is reparented away from the agent; what the programs it starts
/// write is still the agent's, in the turn they write in, through the session name Claude
/// Code's SessionStart hook exports to every Bash command (`CLAUDE_ENV_FILE`, sourced before
/// each). A job started without it is not.
// Failed before the hook exported `REWIND_HOOK_SESSION` (`cli/hook.rs`
// `name_shell_commands`, `who.rs` `EnvNames`): `gen.txt` was recorded in the mount's
// session, in no turn, and `rollback --turn` left it.
#[test]
fn a_background_job_of_an_agents_shell_command_is_the_agents() {
    use crate::hostile24::{SESSION, agent_with_env, mounted, turn_log};
    let mut ws = Workspace::new();
    mounted(&mut ws, &[("a.txt", "a\n")], &[]);
    let env_file = ws.store().parent().unwrap().join("claude-env");
    let env_path = env_file.to_str().unwrap().to_string();
    agent_with_env(
        &ws,
        r#"
hook("SessionStart", source="startup", model="m")
prompt(1)
edit("a.txt", "by the agent\n")
job = "(sleep 0.5; sh -c 'echo generated > gen.txt') &"
subprocess.run(["bash", "-c", 'source "$CLAUDE_ENV_FILE"; ' + job], check=True)
subprocess.run(["bash", "-c", job.replace("generated > gen", "plain > plain")], check=True)
time.sleep(1.5)
stop(1)
"#,
        &[("CLAUDE_ENV_FILE", env_path.as_str())],
    );
    sync(&ws);
    let exported = fs::read_to_string(&env_file).unwrap_or_default();
    assert!(
        exported.contains(&format!("REWIND_HOOK_SESSION={SESSION}")),
        "{exported}"
    );
    let all = log(&ws);
    let last = |path: &str| all.iter().rfind(|c| c["path"] == path).expect(path).clone();
    let gen_ = last("gen.txt");
    assert_eq!(gen_["session"], SESSION, "{gen_}");
    assert_eq!(gen_["agent"], "claude", "{gen_}");
    assert_eq!(gen_["turn"], 1, "{gen_}");
    assert_ne!(
        last("plain.txt")["session"],
        SESSION,
        "reparented away, unnamed"
    );
    let in_turn: Vec<String> = turn_log(&ws, 1)
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(in_turn, ["a.txt", "gen.txt"], "{in_turn:?}");
    let dry = rw_ok(
        &ws,
        &["rollback", "--turn", &format!("{SESSION}:1"), "--dry-run"],
    );
    assert!(dry.contains("gen.txt"), "{dry}");
    ws.unmount();
}

/// `session start --pid N` names the process that sends it, one above it, or one it started;
/// never init (above every process: everything on the machine would be recorded as the
/// session), nor an unrelated process (the daemon here).
// Failed before the daemon checked (`ctl.rs`, `who::related`): `--pid 1` registered init,
// and the next change anyone made was recorded in that session.
#[test]
fn session_start_names_only_the_writer_its_parents_or_what_it_started() {
    let mut ws = Workspace::new();
    ws.mount();
    let daemon = crate::common::daemon_pid(&ws).to_string();
    for pid in ["1", daemon.as_str()] {
        let out = crate::common::rw(&ws, &["session", "start", "grab", "--pid", pid]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--pid {pid}: {err}");
        assert!(err.contains(&format!("process {pid} is neither")), "{err}");
    }
    // A process this one started (as `rewind mcp`'s parent registers it).
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let line = format!("session start mine --pid {}\n", child.id());
    fs::write(ws.path().join(".rewind/ctl"), line).unwrap();
    fs::write(ws.path().join("a.txt"), "by the test\n").unwrap();
    let a = log(&ws)
        .into_iter()
        .rfind(|c| c["path"] == "a.txt")
        .unwrap();
    assert_ne!(a["session"], "grab", "{a}");
    let _ = child.kill();
    let _ = child.wait();
    ws.unmount();
}

/// The dry run of a rollback of one file that gained a hard link since the point says what
/// the run does: the file gets its earlier content as a file of its own, and the new name
/// keeps what it has.
// Failed before the plan asked the daemon which files must be made files of their own
// (`Actor::detached`): the dry run said `revert a.txt (file)`, and the run separated it.
#[test]
fn a_rollback_of_a_file_linked_since_says_in_its_dry_run_that_it_separates_it() {
    let mut ws = Workspace::new();
    ws.mount();
    let p = |name: &str| ws.path().join(name);
    fs::write(p("a.txt"), "one\n").unwrap();
    sync(&ws);
    let point = last_id(&ws, "a.txt").to_string();
    fs::write(p("a.txt"), "two\n").unwrap();
    fs::hard_link(p("a.txt"), p("b.txt")).unwrap();
    sync(&ws);
    let args = ["rollback", "--file", "a.txt", "--to", &point];
    let dry = rw_ok(&ws, &[&args[..], &["--dry-run"]].concat());
    let run = rw_ok(&ws, &args);
    let steps = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| !l.starts_with("dry run:") && !l.starts_with("rollback-"))
            .map(String::from)
            .collect()
    };
    assert_eq!(steps(&dry), steps(&run), "dry run:\n{dry}run:\n{run}");
    assert!(
        steps(&dry).iter().any(|l| l.starts_with("separate a.txt")),
        "{dry}"
    );
    assert_eq!(fs::read_to_string(p("a.txt")).unwrap(), "one\n");
    assert_eq!(fs::read_to_string(p("b.txt")).unwrap(), "two\n");
    assert_eq!(fs::metadata(p("a.txt")).unwrap().nlink(), 1);
    assert_eq!(fs::metadata(p("b.txt")).unwrap().nlink(), 1);
    ws.unmount();
}

/// A busy unmount names the processes that keep it busy: one reading a file in it, one whose
/// current folder is in it.
// Failed before `unmount` named them (`holders`): it said only "see `fuser -vm`", and a
// running `rewind ui` (it reads `.rewind/events`) kept the mount busy without a word.
#[test]
fn a_busy_unmount_names_who_keeps_it_busy() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("f"), "f\n").unwrap();
    let mut reading = std::process::Command::new("sleep")
        .arg("60")
        .stdin(fs::File::open(ws.path().join("f")).unwrap())
        .spawn()
        .unwrap();
    let mut inside = std::process::Command::new("tail")
        .args(["-f", "/dev/null"])
        .current_dir(ws.path())
        .spawn()
        .unwrap();
    let out = crate::common::rw(&ws, &["unmount", ws.path().to_str().unwrap()]);
    let said = crate::common::stderr(&out);
    let _ = (reading.kill(), inside.kill());
    let _ = (reading.wait(), inside.wait());
    assert!(!out.status.success(), "{said}");
    for named in [
        format!("sleep[{}]", reading.id()),
        format!("tail[{}]", inside.id()),
    ] {
        assert!(said.contains(&named), "{named} not in: {said}");
    }
    ws.unmount();
}
