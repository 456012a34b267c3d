//! Round 11, hostile: ways to leave what the ignore rules say about a folder stale (the
//! per-folder cache of `history/ignore.rs` and its chains), checked against what a fresh mount
//! of the same tree says. Each test ends by remounting and making the same kind of file again:
//! the fresh mount's answer is what this mount should have given.

use std::fs;

use serde_json::Value;

use crate::common::{Workspace, python, sh, wait_recorded_of};
use crate::record::log;

fn paths(changes: &[Value]) -> Vec<String> {
    changes
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

fn recorded(ws: &Workspace, path: &str) -> bool {
    paths(&log(ws)).iter().any(|p| p == path)
}

/// After `rm .rewindignore`, nothing says `*.log` is ignored: a fresh mount records a new
/// `.log` file, so this one must too. `names_changed` only forgets folders and the three rule
/// files of `RULE_FILES`; `.rewindignore` is read again only when written or renamed *to*.
#[test]
fn a_removed_rewindignore_stops_ignoring() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join(".rewindignore"), "*.log\n").unwrap();
    ws.mount();
    sh(&ws.path(), "echo a > a.log && echo t > t.txt");
    wait_recorded_of(&ws, "t.txt", 1);
    assert!(!recorded(&ws, "a.log"));
    sh(&ws.path(), "rm .rewindignore && echo b > b.log");
    wait_recorded_of(&ws, ".rewindignore", 1);
    // Asked before the remount below, whose scan records what it finds unrecorded.
    let b_recorded = recorded(&ws, "b.log");
    let fresh_would = {
        // What a fresh mount of the same tree says about a new .log file.
        ws.unmount();
        ws.mount();
        sh(&ws.path(), "echo c > c.log");
        recorded(&ws, "c.log")
    };
    assert!(fresh_would, "a fresh mount does not record c.log either");
    assert!(
        b_recorded,
        "b.log, written after .rewindignore was removed, is not recorded, \
         while a fresh mount records c.log: {:?}",
        paths(&log(&ws))
    );
}

/// The same, `.rewindignore` renamed away (`mv .rewindignore .rewindignore.off`).
#[test]
fn a_rewindignore_renamed_away_stops_ignoring() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join(".rewindignore"), "*.log\n").unwrap();
    ws.mount();
    sh(&ws.path(), "echo a > a.log && echo t > t.txt");
    wait_recorded_of(&ws, "t.txt", 1);
    sh(
        &ws.path(),
        "mv .rewindignore .rewindignore.off && echo b > b.log",
    );
    wait_recorded_of(&ws, ".rewindignore.off", 1);
    assert!(
        recorded(&ws, "b.log"),
        "b.log, written after .rewindignore was renamed away, is not recorded: {:?}",
        paths(&log(&ws))
    );
}

/// `os.mknod("venv/pyvenv.cfg")` makes the folder a venv as much as `touch` would, but a MKNOD
/// records the new file (`after_new`) without `note_rules`: the folder's cached entry (read
/// when `venv/a.txt` was written) still says it holds no marker.
#[test]
fn a_pyvenv_cfg_made_by_mknod_makes_its_folder_ignored() {
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("venv")).unwrap();
    ws.mount();
    sh(&ws.path(), "echo a > venv/a.txt");
    wait_recorded_of(&ws, "venv/a.txt", 1);
    python(
        &ws.path(),
        "import os\nos.mknod('venv/pyvenv.cfg')\nopen('venv/b.txt', 'w').write('b')\n",
    );
    sh(&ws.path(), "echo t > t.txt");
    wait_recorded_of(&ws, "t.txt", 1);
    let stale = recorded(&ws, "venv/b.txt");
    ws.unmount();
    ws.mount();
    sh(&ws.path(), "echo c > venv/c.txt && echo u > u.txt");
    wait_recorded_of(&ws, "u.txt", 1);
    assert!(
        !recorded(&ws, "venv/c.txt"),
        "a fresh mount records venv/c.txt"
    );
    assert!(
        !stale,
        "venv/b.txt, written after venv/pyvenv.cfg was made (mknod), is recorded, \
         while a fresh mount ignores venv/: {:?}",
        paths(&log(&ws))
    );
}

/// A `.gitignore` given its name by a hard link (`ln template .gitignore`): LINK records the new
/// name (`after_link`) without `note_rules`, so the workspace folder's cached entry still has
/// no `.gitignore`, and `gen/` goes on being recorded.
#[test]
fn a_gitignore_made_by_a_hard_link_ignores_the_folder_it_names() {
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("gen")).unwrap();
    fs::write(ws.path().join("template"), "gen/\n").unwrap();
    ws.mount();
    sh(&ws.path(), "echo a > gen/a.txt");
    wait_recorded_of(&ws, "gen/a.txt", 1);
    sh(
        &ws.path(),
        "ln template .gitignore && echo b > gen/b.txt && echo t > t.txt",
    );
    wait_recorded_of(&ws, "t.txt", 1);
    let stale = recorded(&ws, "gen/b.txt");
    ws.unmount();
    ws.mount();
    sh(&ws.path(), "echo c > gen/c.txt && echo u > u.txt");
    wait_recorded_of(&ws, "u.txt", 1);
    assert!(
        !recorded(&ws, "gen/c.txt"),
        "a fresh mount records gen/c.txt"
    );
    assert!(
        !stale,
        "gen/b.txt, written after .gitignore named gen/ (made by ln), is recorded, \
         while a fresh mount ignores gen/: {:?}",
        paths(&log(&ws))
    );
}

/// A `.gitignore` written through another name of the same file (a hard link): its episode's
/// path is the other name, so `note_rules` at its end does not see a rule file.
#[test]
fn a_gitignore_written_through_another_name_ignores_the_folder_it_names() {
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("gen")).unwrap();
    fs::write(ws.path().join(".gitignore"), "*.tmp\n").unwrap();
    fs::hard_link(ws.path().join(".gitignore"), ws.path().join("rules")).unwrap();
    ws.mount();
    sh(&ws.path(), "echo a > gen/a.txt");
    wait_recorded_of(&ws, "gen/a.txt", 1);
    sh(&ws.path(), "echo gen/ >> rules");
    wait_recorded_of(&ws, "rules", 1);
    sh(&ws.path(), "echo b > gen/b.txt && echo t > t.txt");
    wait_recorded_of(&ws, "t.txt", 1);
    let stale = recorded(&ws, "gen/b.txt");
    assert_eq!(
        fs::read_to_string(ws.path().join(".gitignore")).unwrap(),
        "*.tmp\ngen/\n"
    );
    ws.unmount();
    ws.mount();
    sh(&ws.path(), "echo c > gen/c.txt && echo u > u.txt");
    wait_recorded_of(&ws, "u.txt", 1);
    assert!(
        !recorded(&ws, "gen/c.txt"),
        "a fresh mount records gen/c.txt"
    );
    assert!(
        !stale,
        "gen/b.txt, written after .gitignore came to name gen/ (through its link `rules`), \
         is recorded, while a fresh mount ignores gen/: {:?}",
        paths(&log(&ws))
    );
}
