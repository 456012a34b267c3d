//! Edges a hostile review found: ways to leave what the ignore rules say about a folder stale
//! (the per-folder cache of `history/ignore.rs` and its chains), checked against what a fresh
//! mount of the same tree says (each test ends by remounting and making the same kind of file
//! again: the fresh mount's answer is what this mount should have given); and edits right
//! after a close whose RELEASE is slow, which must stay a true chain in order.

use std::fs;

use serde_json::Value;

use crate::common::{Workspace, python, sh, wait_recorded_of};
use crate::record::{content, log};

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

// ---- b8df72c: an open for writing with no episode open does not wait ---------------------

/// A change's kind, path, and content before and after.
pub(crate) type Contents = (String, String, Option<Vec<u8>>, Option<Vec<u8>>);

/// Every change, oldest first, with its contents read from the store after unmounting; the
/// ids must be in order.
pub(crate) fn contents(ws: &mut Workspace) -> Vec<Contents> {
    let changes = log(ws);
    let ids: Vec<u64> = changes.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert!(ids.is_sorted(), "{ids:?}");
    ws.unmount();
    let store = rewind::store::Store::open(&ws.store()).unwrap();
    changes
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["path"].as_str().unwrap().to_string(),
                content(&store, &c["before"]),
                content(&store, &c["after"]),
            )
        })
        .collect()
}

/// The changes of `path` in `all` form a true chain from `start`: each one's before is the
/// last one's after, none leaves the content as it was, and the last ends at `last`.
pub(crate) fn assert_true_chain(all: &[Contents], path: &str, start: &[u8], last: Vec<u8>) {
    let of: Vec<&Contents> = all.iter().filter(|c| c.1 == path).collect();
    let mut prev = Some(start.to_vec());
    for c in &of {
        assert_eq!(
            c.2, prev,
            "a change's before is not the last one's after: {of:?}"
        );
        assert_ne!(c.2, c.3, "a change that changed nothing: {of:?}");
        prev = c.3.clone();
    }
    assert_eq!(
        prev,
        Some(last),
        "the last change is not the file's content: {of:?}"
    );
}

fn show(c: &[Contents]) -> Vec<String> {
    c.iter()
        .map(|(k, p, b, a)| {
            let s = |x: &Option<Vec<u8>>| {
                x.as_ref()
                    .map_or("-".into(), |v| String::from_utf8_lossy(v).into_owned())
            };
            format!("{k} {p} {}->{}", s(b), s(a))
        })
        .collect()
}

/// Two names of one file: the first written and closed with its RELEASE held back 1 s, then
/// the second opened `O_WRONLY|O_APPEND` (its episode is the same file's: it waits).
#[test]
fn hard_links_written_one_after_the_other_are_two_changes_in_order() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join("a"), "0").unwrap();
    fs::hard_link(ws.path().join("a"), ws.path().join("b")).unwrap();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_RELEASE_OF", "a:1000")]);
    python(
        &ws.path(),
        "import os\n\
         fd = os.open('a', os.O_WRONLY | os.O_TRUNC); os.write(fd, b'1'); os.close(fd)\n\
         fd = os.open('b', os.O_WRONLY | os.O_APPEND); os.write(fd, b'2'); os.close(fd)\n\
         fd = os.open('o', os.O_WRONLY | os.O_CREAT); os.write(fd, b'o'); os.close(fd)\n",
    );
    let c = show(&contents(&mut ws));
    // The change of the linked file is recorded under its first name.
    assert_eq!(
        c,
        ["modify a 0->1", "modify a 1->12", "create o -->o"],
        "{c:#?}"
    );
}

/// A new file closed (its RELEASE held back 1 s), opened again `O_TRUNC` at once, written and
/// closed, then another file: the create holds what the first writer wrote, the modify
/// follows it, and the other file comes last.
#[test]
fn a_new_file_opened_again_with_o_trunc_at_once_is_a_create_then_a_modify() {
    let mut ws = Workspace::new();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_RELEASE_OF", "n:1000")]);
    python(
        &ws.path(),
        "import os\n\
         fd = os.open('n', os.O_WRONLY | os.O_CREAT); os.write(fd, b'1'); os.close(fd)\n\
         fd = os.open('n', os.O_WRONLY | os.O_TRUNC); os.write(fd, b'2'); os.close(fd)\n\
         fd = os.open('o', os.O_WRONLY | os.O_CREAT); os.write(fd, b'o'); os.close(fd)\n",
    );
    let c = show(&contents(&mut ws));
    assert_eq!(
        c,
        ["create n -->1", "modify n 1->2", "create o -->o"],
        "{c:#?}"
    );
}

/// Every RELEASE slow (30 ms): a file renamed over one just closed, then opened `O_TRUNC`.
#[test]
fn a_file_renamed_over_one_just_closed_then_truncated_keeps_a_true_chain() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join("x"), "x0").unwrap();
    fs::write(ws.path().join("y"), "y0").unwrap();
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_RELEASE", "30")]);
    python(
        &ws.path(),
        "import os\n\
         fd = os.open('x', os.O_WRONLY | os.O_APPEND); os.write(fd, b'1'); os.close(fd)\n\
         fd = os.open('y', os.O_WRONLY | os.O_APPEND); os.write(fd, b'1'); os.close(fd)\n\
         os.rename('y', 'x')\n\
         fd = os.open('x', os.O_WRONLY | os.O_TRUNC); os.write(fd, b'2'); os.close(fd)\n\
         fd = os.open('x', os.O_WRONLY | os.O_APPEND); os.write(fd, b'3'); os.close(fd)\n",
    );
    let c = show(&contents(&mut ws));
    assert_eq!(
        c,
        [
            "modify x x0->x01",
            "modify y y0->y01",
            "rename x x01->y01",
            "modify x y01->2",
            "modify x 2->23"
        ],
        "{c:#?}"
    );
}

/// Every RELEASE slow by a random 0-3 ms: 60 open-write-close of three existing files in a
/// seeded random order, `O_TRUNC` or `O_APPEND`. Each is one change, in the order made, each
/// from what the one before it left.
#[test]
fn sixty_edits_of_three_files_with_slow_releases_are_sixty_changes_in_order() {
    let mut ws = Workspace::new();
    for f in ["f0", "f1", "f2"] {
        fs::write(ws.path().join(f), f).unwrap();
    }
    ws.mount_with_env(&[] as &[&str], &[("REWIND_TEST_SLOW_RELEASE", "2")]);
    let out = python(
        &ws.path(),
        "import os, random\n\
         random.seed(11)\n\
         for i in range(60):\n\
         \x20   f = 'f%d' % random.randrange(3)\n\
         \x20   t = random.random() < 0.5\n\
         \x20   fd = os.open(f, os.O_WRONLY | (os.O_TRUNC if t else os.O_APPEND))\n\
         \x20   os.write(fd, b'%d,' % i); os.close(fd)\n\
         \x20   print(f, 'T' if t else 'A')\n",
    );
    let mut model: std::collections::HashMap<String, String> = ["f0", "f1", "f2"]
        .iter()
        .map(|f| (f.to_string(), f.to_string()))
        .collect();
    let mut expected = Vec::new();
    for (i, line) in out.lines().enumerate() {
        let (f, how) = line.split_once(' ').unwrap();
        let before = model[f].clone();
        let after = if how == "T" {
            format!("{i},")
        } else {
            format!("{before}{i},")
        };
        expected.push(format!("modify {f} {before}->{after}"));
        model.insert(f.to_string(), after);
    }
    let c = show(&contents(&mut ws));
    assert_eq!(c, expected);
}

/// What held: a `.gitignore` emptied by `truncate(2)` (a SETATTR with no handle), and one
/// switched by `git checkout` (unlink, then a new file), each seen by the next write.
#[test]
fn a_gitignore_truncated_by_path_or_switched_by_git_checkout_is_seen_at_once() {
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("gen")).unwrap();
    fs::write(ws.path().join(".gitignore"), "gen/\n").unwrap();
    ws.mount();
    sh(&ws.path(), "echo a > gen/a.txt && echo t > t.txt");
    wait_recorded_of(&ws, "t.txt", 1);
    assert!(!recorded(&ws, "gen/a.txt"));
    python(&ws.path(), "import os\nos.truncate('.gitignore', 0)\n");
    sh(&ws.path(), "echo b > gen/b.txt");
    wait_recorded_of(&ws, "gen/b.txt", 1);

    sh(
        &ws.path(),
        "git init -q -b one . && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m 0 \
         && git checkout -q -b two && printf 'gen/\\n' > .gitignore && git add .gitignore \
         && git -c user.name=t -c user.email=t@t commit -q -m 1 && git checkout -q one \
         && printf '' > .gitignore && git checkout -q -f two && echo c > gen/c.txt \
         && echo u > u.txt",
    );
    wait_recorded_of(&ws, "u.txt", 1);
    assert_eq!(
        fs::read_to_string(ws.path().join(".gitignore")).unwrap(),
        "gen/\n"
    );
    assert!(!recorded(&ws, "gen/c.txt"), "{:?}", paths(&log(&ws)));
}
