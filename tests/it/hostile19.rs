//! The nineteenth hostile pass (round 14), on a94279f: recovery records a file with several
//! names once (`names_of_linked`, `other_names`, the `recorded` set of `record_external`), an
//! exchange moves both files' episodes and markers, a rename over an open edit drops its
//! marker first. Most attacks change hard-linked files while nothing is mounted (no crash:
//! unmount, plain tools on the backing directory, mount: the scan records `external`
//! changes), then ask the history about every name (`log --json`, `diff`, `cat --at`), roll
//! the changes back, and remount (which must record nothing more). The others kill the daemon
//! with hard links and open edits about.

use std::fs;
use std::os::unix::fs::MetadataExt;

use serde_json::Value;

use crate::common::{Workspace, rw, rw_ok, sh, sync};
use crate::hostile17::every_file_has_its_newest_change;
use crate::hostile18::{cat_at, lines, of, recorded_files};
use crate::record::{killed_after, log};

/// Unmount, run `script` (bash) in the backing directory, mount again: the changes recorded
/// before, and all of them after.
fn while_unmounted(ws: &mut Workspace, script: &str) -> (Vec<Value>, Vec<Value>) {
    let before = log(ws);
    ws.unmount();
    sh(&ws.path(), script);
    ws.mount();
    let all = log(ws);
    eprintln!(
        "before:\n{}\nrecorded by the scan:\n{}",
        lines(&before),
        lines(&all[before.len()..])
    );
    (before, all)
}

/// A further unmount and mount records nothing.
fn remount_records_nothing(ws: &mut Workspace) {
    let n = log(ws).len();
    ws.unmount();
    ws.mount();
    let again = log(ws);
    assert_eq!(
        again.len(),
        n,
        "the remount recorded:\n{}",
        lines(&again[n.min(again.len())..])
    );
}

fn id(c: &Value) -> u64 {
    c["id"].as_u64().unwrap()
}

fn links(c: &Value) -> Vec<String> {
    let mut l: Vec<String> = c["links"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    l.sort();
    l
}

/// Whether `path` is named by change `c` (its path, the path it came from, or a link).
fn names(c: &Value, path: &str) -> bool {
    c["path"] == path || c["from"] == path || links(c).iter().any(|l| l == path)
}

/// `rewind cat PATH --at ID`, or `None` if it fails (the path did not exist then).
fn cat_at_or_none(ws: &Workspace, path: &str, id: u64) -> Option<String> {
    let out = rw(ws, &["cat", path, "--at", &id.to_string()]);
    if !out.status.success() {
        eprintln!(
            "cat {path} --at {id}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn read(ws: &Workspace, path: &str) -> String {
    fs::read_to_string(ws.path().join(path)).unwrap()
}

fn ino(ws: &Workspace, path: &str) -> u64 {
    fs::metadata(ws.path().join(path)).unwrap().ino()
}

/// `rollback --to ID --dry-run` (which must change nothing), then the rollback itself.
fn roll_back_to(ws: &Workspace, to: u64) {
    let snapshot = |ws: &Workspace| {
        sh(
            &ws.path(),
            "ls -la --time-style=+ . ; cat *.txt 2>/dev/null || true",
        )
    };
    let was = snapshot(ws);
    let dry = rw(ws, &["rollback", "--to", &to.to_string(), "--dry-run"]);
    eprintln!(
        "dry run ({}):\n{}{}",
        dry.status,
        String::from_utf8_lossy(&dry.stdout),
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(dry.status.success(), "the dry run failed");
    assert_eq!(snapshot(ws), was, "the dry run changed the workspace");
    let out = rw(ws, &["rollback", "--to", &to.to_string()]);
    eprintln!(
        "rollback ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the rollback failed");
    sync(ws);
}

/// `a.txt` ("one"), recorded, and `b.txt` a second name of it made through the mount.
fn linked_pair() -> Workspace {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(&ws, &[("a.txt", "one\n")]);
    fs::hard_link(ws.path().join("a.txt"), ws.path().join("b.txt")).unwrap();
    sync(&ws);
    ws
}

/// Two names of one file, changed through `script` while unmounted so that it holds `after`:
/// the scan records one change (`kind`, `external`) under one name with the other as its link;
/// both names hold `after` as of it and "one" just before; `diff` shows it (for a modify);
/// the rollback to just before puts "one" back under both names, still one file; a remount
/// records nothing.
fn one_change_of_both_names(script: &str, kind: &str, after: &str) {
    let mut ws = linked_pair();
    let (before, all) = while_unmounted(&mut ws, script);
    let new = &all[before.len()..];
    assert_eq!(new.len(), 1, "one change expected:\n{}", lines(new));
    let c = &new[0];
    assert_eq!(c["kind"], kind, "{}", lines(new));
    assert_eq!(c["agent"], "external", "{}", lines(new));
    let (name, other) = if c["path"] == "a.txt" {
        ("a.txt", "b.txt")
    } else {
        ("b.txt", "a.txt")
    };
    assert_eq!(links(c), vec![other.to_string()], "{c}");
    let at = id(c);
    for p in [name, other] {
        assert_eq!(cat_at(&ws, p, at), after, "{p} as of #{at}");
        assert_eq!(cat_at(&ws, p, at - 1), "one\n", "{p} as of #{}", at - 1);
        let mine: Vec<Value> = rw_ok(&ws, &["log", p, "--json"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(id(mine.last().unwrap()), at, "{p}: {}", lines(&mine));
    }
    if kind == "modify" {
        let diff = rw_ok(&ws, &["diff", &at.to_string()]);
        eprintln!("{diff}");
        assert!(diff.contains("\n-one\n"), "#{at}:\n{diff}");
        for l in after.lines() {
            assert!(diff.contains(&format!("\n+{l}\n")), "#{at}:\n{diff}");
        }
    }
    every_file_has_its_newest_change(&ws, &[]);
    roll_back_to(&ws, at - 1);
    assert_eq!(read(&ws, "a.txt"), "one\n");
    assert_eq!(read(&ws, "b.txt"), "one\n");
    assert_eq!(ino(&ws, "a.txt"), ino(&ws, "b.txt"), "no longer one file");
    let meta = fs::metadata(ws.path().join("a.txt")).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o644, "mode after the rollback");
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    ws.unmount();
}

#[test]
fn unmounted_edit_through_the_first_name_is_one_change_of_both() {
    one_change_of_both_names("printf 'two\\n' > a.txt", "modify", "two\n");
}

#[test]
fn unmounted_edit_through_the_second_name_is_one_change_of_both() {
    one_change_of_both_names("printf 'two\\n' > b.txt", "modify", "two\n");
}

#[test]
fn unmounted_edits_through_both_names_are_one_change_of_both() {
    one_change_of_both_names(
        "printf 'two\\n' > a.txt; sleep 0.05; printf 'three\\n' >> b.txt",
        "modify",
        "two\nthree\n",
    );
}

#[test]
fn unmounted_truncation_through_one_name_to_empty_is_one_change_of_both() {
    one_change_of_both_names(": > b.txt", "modify", "");
}

#[test]
fn unmounted_chmod_through_one_name_is_one_change_of_both() {
    one_change_of_both_names("chmod 600 b.txt", "chmod", "one\n");
}

/// A second name made while unmounted, and the file edited through the old name: the new name
/// is a create (it was not there before), never a change of a file that was not there; the
/// old name's modify goes from "one" to "two". `name` sorts after or before `a.txt`. The
/// rollback to just before removes the new name and puts "one" back.
///
/// Failed on a94279f (both variants), fixed since (`links_of`: only names the last mount knew
/// as this file, that changed with it): the scan's modify of `a.txt` carried the new name in its
/// `links` (`other_names` took every name the tree has now), so the history has the new name
/// changed "one" -> "two" by a change before (`z.txt`) or after (`0.txt`) its create: `diff` of
/// the modify shows `z.txt` `-one +two` while `cat z.txt --at` that id says it did not exist;
/// `cat 0.txt --at` its create gives "one" though the create's diff is `+two`; and the
/// rollback to before both links `z.txt` to `a.txt` ("link z.txt (to a.txt)") instead of
/// removing it.
fn name_added_and_edited(name: &str) {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(&ws, &[("a.txt", "one\n")]);
    let (before, all) = while_unmounted(
        &mut ws,
        &format!("ln a.txt {name}; printf 'two\\n' > a.txt"),
    );
    let new = &all[before.len()..];
    let first = id(&new[0]);
    for c in new {
        eprintln!("{}", rw_ok(&ws, &["diff", &id(c).to_string()]));
    }
    let mut wrong = Vec::new();
    // a.txt: one modify, one -> two.
    let a: Vec<&Value> = new.iter().filter(|c| names(c, "a.txt")).collect();
    assert_eq!(a.len(), 1, "{}", lines(new));
    assert_eq!(a[0]["kind"], "modify", "{}", lines(new));
    assert_eq!(cat_at(&ws, "a.txt", id(a[0])), "two\n");
    assert_eq!(cat_at(&ws, "a.txt", id(a[0]) - 1), "one\n");
    // The new name: its first change is its create, it is absent before it, and it holds
    // "two" as of every change naming it.
    let n: Vec<&Value> = new.iter().filter(|c| names(c, name)).collect();
    assert!(!n.is_empty(), "{}", lines(new));
    if n[0]["kind"] != "create" {
        wrong.push(format!(
            "the first change naming {name} is #{} {}, before its create",
            id(n[0]),
            n[0]["kind"]
        ));
    }
    let made = new
        .iter()
        .find(|c| c["path"] == name && c["kind"] == "create")
        .map(id);
    if let Some(m) = made {
        let was = cat_at_or_none(&ws, name, m - 1);
        if was.is_some() {
            wrong.push(format!(
                "{name} as of #{} (before its create): {was:?}",
                m - 1
            ));
        }
    }
    for c in &n {
        let s = cat_at_or_none(&ws, name, id(c));
        if s.as_deref() != Some("two\n") {
            wrong.push(format!("{name} as of #{}: {s:?}", id(c)));
        }
    }
    every_file_has_its_newest_change(&ws, &[]);
    roll_back_to(&ws, first - 1);
    let a_now = read(&ws, "a.txt");
    if a_now != "one\n" {
        wrong.push(format!("a.txt after the rollback: {a_now:?}"));
    }
    if ws.path().join(name).exists() {
        wrong.push(format!(
            "{name} after the rollback: still there, holding {:?}",
            read(&ws, name)
        ));
    }
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", lines(new));
    ws.unmount();
}

#[test]
fn a_name_added_after_while_unmounted_and_an_edit_through_the_old() {
    name_added_and_edited("z.txt");
}

#[test]
fn a_name_added_before_while_unmounted_and_an_edit_through_the_old() {
    name_added_and_edited("0.txt");
}

/// A name removed while unmounted and the file edited through the other: a delete of the
/// removed name (with "one") and a modify of the other (one -> two), no links left (the file
/// has one name). The rollback puts both names back as one file holding "one".
///
/// FAILS (only the last check; also on 3b620a8): contents and history are exact, but the
/// rollback brings `b.txt` back as a file of its own ("restore b.txt (file)", no link): the
/// scan's delete carries no `groups`, unlike a delete through the mount.
#[test]
#[ignore = "known: a delete the scan finds carries no link group (hostile19, round 14)"]
fn a_name_removed_while_unmounted_and_an_edit_through_the_other() {
    let mut ws = linked_pair();
    let (before, all) = while_unmounted(&mut ws, "rm b.txt; printf 'two\\n' > a.txt");
    let new = &all[before.len()..];
    let first = id(&new[0]);
    assert_eq!(new.len(), 2, "{}", lines(new));
    let d = of(new, "b.txt", "delete");
    assert_eq!(d.len(), 1, "{}", lines(new));
    assert_eq!(cat_at(&ws, "b.txt", id(&d[0]) - 1), "one\n");
    assert_eq!(cat_at_or_none(&ws, "b.txt", id(&d[0])), None);
    let m = of(new, "a.txt", "modify");
    assert_eq!(m.len(), 1, "{}", lines(new));
    assert!(links(&m[0]).is_empty(), "{}", m[0]);
    assert_eq!(cat_at(&ws, "a.txt", id(&m[0])), "two\n");
    every_file_has_its_newest_change(&ws, &[]);
    roll_back_to(&ws, first - 1);
    assert_eq!(read(&ws, "a.txt"), "one\n");
    assert_eq!(read(&ws, "b.txt"), "one\n");
    let linked_again = ino(&ws, "a.txt") == ino(&ws, "b.txt");
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    assert!(
        linked_again,
        "b.txt came back as a file of its own, not as a name of a.txt's file"
    );
    ws.unmount();
}

/// A file whose other name is in an ignored folder (`.gitignore`d, `node_modules/`) or outside
/// the workspace, changed through that name while unmounted: a change of the recorded name
/// alone (no link to an ignored or outside path), exact; a remount records nothing.
#[test]
fn unmounted_changes_through_a_name_the_history_does_not_see() {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(
        &ws,
        &[
            (".gitignore", "ignored/\n"),
            ("a.txt", "A one\n"),
            ("c.txt", "C one\n"),
            ("d.txt", "D one\n"),
        ],
    );
    let (before, all) = while_unmounted(
        &mut ws,
        "mkdir -p ignored node_modules
         ln a.txt ignored/a; printf 'A two\\n' > ignored/a
         ln c.txt node_modules/c; chmod 600 node_modules/c
         ln d.txt ../plain/d; printf 'D two\\n' > ../plain/d",
    );
    let new = &all[before.len()..];
    for c in new {
        assert!(links(c).is_empty(), "a link to an unrecorded name: {c}");
        let p = c["path"].as_str().unwrap();
        assert!(
            !p.starts_with("ignored") && !p.starts_with("node_modules"),
            "{}",
            lines(new)
        );
    }
    let a = of(new, "a.txt", "modify");
    assert_eq!(a.len(), 1, "{}", lines(new));
    assert_eq!(cat_at(&ws, "a.txt", id(&a[0])), "A two\n");
    assert_eq!(cat_at(&ws, "a.txt", id(&a[0]) - 1), "A one\n");
    assert_eq!(of(new, "c.txt", "chmod").len(), 1, "{}", lines(new));
    let d = of(new, "d.txt", "modify");
    assert_eq!(d.len(), 1, "{}", lines(new));
    assert_eq!(cat_at(&ws, "d.txt", id(&d[0])), "D two\n");
    assert_eq!(new.len(), 3, "{}", lines(new));
    every_file_has_its_newest_change(&ws, &["ignored/a", "node_modules/c"]);
    remount_records_nothing(&mut ws);
    ws.unmount();
}

/// `ln -f a.txt b.txt` while unmounted: `b.txt` (a file of its own, "B") becomes a second name
/// of `a.txt`'s file ("A"). `b.txt` changed; `a.txt` did not: no change may name it. The
/// rollback gives `b.txt` its own "B" back and leaves `a.txt` "A", as two files.
///
/// Failed on a94279f, fixed since (`links_of`), and the rollback destroyed data: the scan records `modify b.txt` with
/// `links: [a.txt]` and `before` B, so `log a.txt` lists it, `diff` shows `a.txt` `-B +A`,
/// `cat a.txt --at 2` (b.txt's create, before the unmount) now gives "B" (it held "A"), and `rollback --to` that id says
/// "revert a.txt (file)" and "link b.txt (to a.txt)": `a.txt` then holds "B\n" and its "A"
/// is gone from the workspace, `b.txt` still a name of the same file.
#[test]
fn a_name_linked_over_another_file_while_unmounted_changes_only_that_name() {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(&ws, &[("a.txt", "A\n"), ("b.txt", "B\n")]);
    let (before, all) = while_unmounted(&mut ws, "ln -f a.txt b.txt");
    let new = &all[before.len()..];
    assert!(!new.is_empty(), "nothing recorded");
    let first = id(&new[0]);
    let b: Vec<&Value> = new.iter().filter(|c| names(c, "b.txt")).collect();
    assert_eq!(b.len(), 1, "{}", lines(new));
    assert_eq!(cat_at(&ws, "b.txt", id(b[0])), "A\n");
    assert_eq!(cat_at(&ws, "b.txt", id(b[0]) - 1), "B\n");
    let diff = rw_ok(&ws, &["diff", &id(b[0]).to_string()]);
    eprintln!("{diff}");
    let a_log = rw_ok(&ws, &["log", "a.txt", "--json"]);
    let a_changes: Vec<Value> = a_log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|c: &Value| id(c) >= first)
        .collect();
    let mut wrong = Vec::new();
    if !a_changes.is_empty() {
        wrong.push(format!(
            "a.txt did not change, yet `log a.txt` lists: {}",
            lines(&a_changes)
        ));
    }
    let a_was = cat_at(&ws, "a.txt", id(b[0]) - 1);
    if a_was != "A\n" {
        wrong.push(format!(
            "a.txt as of #{}: {a_was:?}, not \"A\\n\"",
            id(b[0]) - 1
        ));
    }
    every_file_has_its_newest_change(&ws, &[]);
    roll_back_to(&ws, first - 1);
    for (p, want) in [("a.txt", "A\n"), ("b.txt", "B\n")] {
        let now = read(&ws, p);
        if now != want {
            wrong.push(format!("{p} after the rollback: {now:?}, not {want:?}"));
        }
    }
    if ino(&ws, "a.txt") == ino(&ws, "b.txt") {
        wrong.push("a.txt and b.txt still one file after the rollback".into());
    }
    remount_records_nothing(&mut ws);
    assert!(wrong.is_empty(), "{wrong:#?}\ndiff:\n{diff}");
    ws.unmount();
}

/// One name of a linked pair renamed while unmounted and the file edited under its new name:
/// `b.txt` changed ("one" -> "two"), `a.txt` is gone, `c.txt` is new; the history must not
/// say `c.txt` existed before it appeared, and the rollback to just before removes `c.txt` and
/// puts `a.txt` back, one file with `b.txt`.
///
/// Failed on a94279f, fixed since (`links_of`): `modify b.txt` (#4) carried `c.txt` in its links before `create c.txt`
/// (#5), and the rollback links `c.txt` to `b.txt` ("link c.txt (to b.txt)") instead of
/// removing it: `c.txt` is left holding "one".
#[test]
fn a_name_renamed_and_edited_while_unmounted() {
    let mut ws = linked_pair();
    let (before, all) = while_unmounted(&mut ws, "mv a.txt c.txt; printf 'two\\n' > c.txt");
    let new = &all[before.len()..];
    let first = id(&new[0]);
    for c in new {
        eprintln!("{}", rw_ok(&ws, &["diff", &id(c).to_string()]));
    }
    let mut wrong = Vec::new();
    let c: Vec<&Value> = new.iter().filter(|x| names(x, "c.txt")).collect();
    assert!(!c.is_empty(), "{}", lines(new));
    if !["create", "rename"].contains(&c[0]["kind"].as_str().unwrap()) {
        wrong.push(format!(
            "the first change naming c.txt is #{} {}, before it was made",
            id(c[0]),
            c[0]["kind"]
        ));
    }
    if let Some(m) = new
        .iter()
        .find(|x| x["path"] == "c.txt" && x["kind"] == "create")
    {
        let was = cat_at_or_none(&ws, "c.txt", id(m) - 1);
        if was.is_some() {
            wrong.push(format!(
                "c.txt as of #{} (before its create): {was:?}",
                id(m) - 1
            ));
        }
    }
    let b: Vec<&Value> = new.iter().filter(|x| names(x, "b.txt")).collect();
    assert_eq!(b.len(), 1, "{}", lines(new));
    assert_eq!(cat_at(&ws, "b.txt", id(b[0])), "two\n");
    assert_eq!(cat_at(&ws, "b.txt", id(b[0]) - 1), "one\n");
    every_file_has_its_newest_change(&ws, &[]);
    roll_back_to(&ws, first - 1);
    for p in ["a.txt", "b.txt"] {
        let now = fs::read_to_string(ws.path().join(p));
        if now.as_deref().ok() != Some("one\n") {
            wrong.push(format!("{p} after the rollback: {now:?}"));
        }
    }
    if ws.path().join("c.txt").exists() {
        wrong.push(format!(
            "c.txt after the rollback: still there, holding {:?}",
            read(&ws, "c.txt")
        ));
    }
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", lines(new));
    ws.unmount();
}

/// A new file fsynced (its create held back, with a marker) and given a second name, then a
/// SIGKILL: after the remount each name has exactly one change making it, both hold "N", and
/// no name is made twice.
#[test]
fn a_new_file_fsynced_and_linked_then_killed_is_made_once_per_name() {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(&ws, &[("x.txt", "x\n")]);
    let before = log(&ws);
    killed_after(
        &mut ws,
        &[],
        r#"
n = open("n.txt", "w")
n.write("N\n"); n.flush(); os.fsync(n.fileno())
os.link("n.txt", "m.txt")
"#,
    );
    let all = log(&ws);
    let new = &all[before.len()..];
    eprintln!("{}", lines(new));
    for p in ["n.txt", "m.txt"] {
        let making: Vec<&Value> = new
            .iter()
            .filter(|c| names(c, p) && c["before"].is_null())
            .collect();
        assert_eq!(
            making.len(),
            1,
            "{p} made {} times:\n{}",
            making.len(),
            lines(new)
        );
        for c in new.iter().filter(|c| names(c, p)) {
            assert_eq!(cat_at(&ws, p, id(c)), "N\n", "{p} as of #{}", id(c));
        }
    }
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    ws.unmount();
}

/// An edit open on `a.txt` (one of two names) when `a.txt` is unlinked, writes on after it,
/// then a SIGKILL (`wait` s later): the unlink cuts the edit (one -> two, by agentT, naming
/// both), then the delete of `a.txt`; the edit goes on under `b.txt` and its marker with it,
/// so the remount records two -> "two three" of `b.txt`. Nothing else.
fn a_name_unlinked_under_an_open_edit_then_killed(wait: f64) {
    let mut ws = linked_pair();
    let before = log(&ws);
    killed_after(
        &mut ws,
        &[],
        &format!(
            r#"
import time
a = open("a.txt", "r+")
a.write("two\n"); a.flush()
os.unlink("a.txt")
a.write("three\n"); a.flush()
time.sleep({wait})
"#
        ),
    );
    let all = log(&ws);
    let new = &all[before.len()..];
    eprintln!("{}", lines(new));
    for c in new.iter().filter(|c| c["kind"] == "modify") {
        eprintln!("{}", rw_ok(&ws, &["diff", &id(c).to_string()]));
    }
    assert_eq!(read(&ws, "b.txt"), "two\nthree\n");
    let mods: Vec<&Value> = new.iter().filter(|c| c["kind"] == "modify").collect();
    let del = of(new, "a.txt", "delete");
    assert_eq!(del.len(), 1, "{}", lines(new));
    // The content each name held as of each change.
    for m in &mods {
        let at = id(m);
        let b = cat_at(&ws, "b.txt", at);
        let b_before = cat_at(&ws, "b.txt", at - 1);
        assert_ne!(
            b,
            b_before,
            "#{at} changed nothing of b.txt:\n{}",
            lines(new)
        );
    }
    assert_eq!(
        cat_at(&ws, "b.txt", id(&del[0])),
        cat_at(&ws, "b.txt", id(&del[0]) - 1)
    );
    let last = id(new.last().unwrap());
    assert_eq!(cat_at(&ws, "b.txt", last), "two\nthree\n");
    // Each content change once: one -> two (the cut), two -> two three.
    assert_eq!(mods.len(), 2, "{}", lines(new));
    assert_eq!(new.len(), 3, "{}", lines(new));
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    ws.unmount();
}

#[test]
fn a_name_unlinked_under_an_open_edit_then_killed_at_once() {
    a_name_unlinked_under_an_open_edit_then_killed(0.0);
}

#[test]
fn a_name_unlinked_under_an_open_edit_then_killed_once_marked() {
    a_name_unlinked_under_an_open_edit_then_killed(0.6);
}

/// An edit open on `f.txt` when `f.txt` is exchanged (RENAME_EXCHANGE) with `other` (a folder,
/// or a file in an ignored folder), the edit going on `wait` s, then a SIGKILL; or closed and
/// a clean remount. Whatever is recorded, every file's newest change names what it holds, no
/// change of `f.txt` claims content it never had, and a further remount records nothing.
///
/// FAILS with an ignored file, killed (both variants; the closed one holds; also on 3b620a8):
/// the exchange moves the edit's marker to `ignored/x` before the rename's record puts that
/// path in the manifest, so `move_markers` finds it unrecorded and writes none; the scan then
/// records `modify ignored/x` by `external`. Its content before and after are exact now (the
/// `diff` failed with "never recorded" on a94279f: see the next test); only who made it is
/// lost.
fn exchanged_with(other: &str, setup: &str, kill: bool, wait: f64) {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(
        &ws,
        &[(".gitignore", "ignored/\n"), ("f.txt", "F before\n")],
    );
    sh(&ws.path(), setup);
    sync(&ws);
    let before = log(&ws);
    let script = format!(
        r#"
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
f = open("f.txt", "r+")
f.write("F during\n"); f.flush()
assert libc.renameat2(-100, b"f.txt", -100, b"{other}", 2) == 0, ctypes.get_errno()
f.write("F more\n"); f.flush()
time.sleep({wait})
"#
    );
    if kill {
        killed_after(&mut ws, &[], &script);
    } else {
        crate::common::python(&ws.path(), &format!("import os\n{script}\nf.close()\n"));
        sync(&ws);
        ws.unmount();
        ws.mount();
    }
    let all = log(&ws);
    let new = &all[before.len()..];
    eprintln!("{}", lines(new));
    let mut wrong = Vec::new();
    for c in new.iter().filter(|c| c["kind"] == "modify") {
        let out = rw(&ws, &["diff", &id(c).to_string()]);
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        if !out.status.success() {
            wrong.push(format!(
                "diff {}: {}",
                id(c),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // Only agentT wrote anything.
        if c["agent"] != "tester" && kill {
            wrong.push(format!("#{} {} by {}", id(c), c["path"], c["agent"]));
        }
    }
    // The edit went on at `other`: its last modify there holds all it wrote.
    let o = of(new, other, "modify");
    if o.len() != 1 {
        wrong.push(format!("{} modifies of {other}", o.len()));
    }
    for c in &o {
        let s = cat_at_or_none(&ws, other, id(c));
        if s.as_deref() != Some("F during\nF more\n") {
            wrong.push(format!("{other} as of #{}: {s:?}", id(c)));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", lines(new));
    // Whatever a change says f.txt held, it held: "F before", "F during" (the cut), or what
    // the exchange put there (a folder, or the ignored file's "X").
    for c in new.iter().filter(|c| names(c, "f.txt")) {
        if let Some(s) = cat_at_or_none(&ws, "f.txt", id(c)) {
            assert!(
                ["F before\n", "F during\n", "X\n"].contains(&s.as_str()),
                "f.txt as of #{} holds {s:?}, which it never held:\n{}",
                id(c),
                lines(new)
            );
        }
    }
    let m = of(new, "f.txt", "modify");
    assert!(m.len() <= 1, "{}", lines(new));
    // A file below a renamed folder has no `log` of its own (`rewind log e/inner.txt` is
    // empty after a plain `mv d e` through the mount too): not what this attacks.
    let skip: &[&str] = if other.starts_with("ignored") {
        &[other]
    } else {
        &["f.txt/inner.txt"]
    };
    every_file_has_its_newest_change(&ws, skip);
    remount_records_nothing(&mut ws);
    ws.unmount();
}

#[test]
fn an_open_file_exchanged_with_a_folder_then_killed() {
    exchanged_with("d", "mkdir d && touch d/inner.txt", true, 0.0);
}

#[test]
fn an_open_file_exchanged_with_a_folder_then_killed_once_marked() {
    exchanged_with("d", "mkdir d && touch d/inner.txt", true, 0.6);
}

#[test]
fn an_open_file_exchanged_with_a_folder_then_closed() {
    exchanged_with("d", "mkdir d && touch d/inner.txt", false, 0.0);
}

#[test]
#[ignore = "known: an edit exchanged into an ignored file loses who made it across a crash (hostile19, round 14)"]
fn an_open_file_exchanged_with_an_ignored_file_then_killed() {
    exchanged_with(
        "ignored/x",
        "mkdir ignored && printf 'X\\n' > ignored/x",
        true,
        0.0,
    );
}

#[test]
#[ignore = "known: an edit exchanged into an ignored file loses who made it across a crash (hostile19, round 14)"]
fn an_open_file_exchanged_with_an_ignored_file_then_killed_once_marked() {
    exchanged_with(
        "ignored/x",
        "mkdir ignored && printf 'X\\n' > ignored/x",
        true,
        0.6,
    );
}

#[test]
fn an_open_file_exchanged_with_an_ignored_file_then_closed() {
    exchanged_with(
        "ignored/x",
        "mkdir ignored && printf 'X\\n' > ignored/x",
        false,
        0.0,
    );
}

/// Two files exchanged through the mount (RENAME_EXCHANGE, no edit open), then both edited
/// while unmounted: the scan's modify of each goes from what the exchange left at its name,
/// exactly (`diff` shows it, `cat --at` the id before gives it).
///
/// Failed on a94279f and on 3b620a8, fixed since (`known_before` passes over a rename away
/// from the path): the last change naming `g.txt` is the exchange's second rename, `rename
/// e.txt <- g.txt`, whose `path` is not `g.txt`, so `known_before` took g.txt's content as unknown: `cat g.txt --at
/// 5` and `diff 6` say "the content of g.txt at that point was never recorded (it changed while
/// rewind was not mounted)", though mounted, before the scan, `cat g.txt --at 4` gave "E".
#[test]
fn files_exchanged_then_edited_while_unmounted_have_their_content_before() {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(&ws, &[("e.txt", "E\n"), ("g.txt", "G\n")]);
    crate::common::python(
        &ws.path(),
        r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
assert libc.renameat2(-100, b"e.txt", -100, b"g.txt", 2) == 0, ctypes.get_errno()
"#,
    );
    sync(&ws);
    assert_eq!(read(&ws, "e.txt"), "G\n");
    for at in [3, 4] {
        for p in ["e.txt", "g.txt"] {
            eprintln!(
                "mounted: cat {p} --at {at}: {:?}",
                cat_at_or_none(&ws, p, at)
            );
        }
    }
    let (before, all) =
        while_unmounted(&mut ws, "printf 'E2\\n' >> g.txt; printf 'G2\\n' >> e.txt");
    let new = &all[before.len()..];
    let mut wrong = Vec::new();
    for (p, was, now) in [("e.txt", "G\n", "G\nG2\n"), ("g.txt", "E\n", "E\nE2\n")] {
        let m = of(new, p, "modify");
        assert_eq!(m.len(), 1, "{}", lines(new));
        let at = id(&m[0]);
        if cat_at_or_none(&ws, p, at - 1).as_deref() != Some(was) {
            wrong.push(format!(
                "{p} as of #{}: {:?}",
                at - 1,
                cat_at_or_none(&ws, p, at - 1)
            ));
        }
        assert_eq!(cat_at(&ws, p, at), now);
        let diff = rw(&ws, &["diff", &at.to_string()]);
        if !diff.status.success() {
            wrong.push(format!(
                "diff {at} ({p}): {}",
                String::from_utf8_lossy(&diff.stderr).trim()
            ));
        }
    }
    remount_records_nothing(&mut ws);
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", lines(&all));
    ws.unmount();
}

/// A second name made while unmounted, nothing else: its create, and nothing of `a.txt` (whose
/// content, mode and mtime did not change).
#[test]
fn a_name_added_alone_while_unmounted_is_its_create_only() {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(&ws, &[("a.txt", "one\n")]);
    let (before, all) = while_unmounted(&mut ws, "ln a.txt z.txt");
    let new = &all[before.len()..];
    assert_eq!(new.len(), 1, "{}", lines(new));
    assert_eq!(new[0]["kind"], "create", "{}", lines(new));
    assert_eq!(new[0]["path"], "z.txt", "{}", lines(new));
    assert_eq!(cat_at(&ws, "z.txt", id(&new[0])), "one\n");
    assert_eq!(cat_at_or_none(&ws, "z.txt", id(&new[0]) - 1), None);
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    ws.unmount();
}

/// Two names of one file exchanged (RENAME_EXCHANGE of `a.txt` and `b.txt`, a no-op) while an
/// edit through `a.txt` is open, then a SIGKILL (`wait` s later): the edit is one modify, one
/// -> "two", naming both; nothing else.
fn two_names_exchanged_under_an_open_edit_then_killed(wait: f64) {
    let mut ws = linked_pair();
    let before = log(&ws);
    killed_after(
        &mut ws,
        &[],
        &format!(
            r#"
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
a = open("a.txt", "r+")
a.write("two\n"); a.flush()
assert libc.renameat2(-100, b"a.txt", -100, b"b.txt", 2) == 0, ctypes.get_errno()
time.sleep({wait})
"#
        ),
    );
    let all = log(&ws);
    let new = &all[before.len()..];
    eprintln!("{}", lines(new));
    let mods: Vec<&Value> = new.iter().filter(|c| c["kind"] == "modify").collect();
    assert_eq!(mods.len(), 1, "{}", lines(new));
    let at = id(mods[0]);
    for p in ["a.txt", "b.txt"] {
        assert_eq!(cat_at(&ws, p, at), "two\n", "{p}");
        assert_eq!(cat_at(&ws, p, at - 1), "one\n", "{p}");
    }
    every_file_has_its_newest_change(&ws, &[]);
    remount_records_nothing(&mut ws);
    ws.unmount();
}

#[test]
fn two_names_of_a_file_exchanged_under_an_open_edit_then_killed_at_once() {
    two_names_exchanged_under_an_open_edit_then_killed(0.0);
}

#[test]
fn two_names_of_a_file_exchanged_under_an_open_edit_then_killed_once_marked() {
    two_names_exchanged_under_an_open_edit_then_killed(0.6);
}

/// An edit of `a.txt` cut short by a SIGKILL (its marker written: open 0.6 s), then, before the
/// next mount, a second name `z.txt` made for it on the backing directory: the recovery's
/// modify of `a.txt` ("one" -> "two", agentT) and the scan's create of `z.txt`; the history
/// must not have `z.txt` changed before its create, and the rollback to before both removes
/// `z.txt`.
///
/// Failed on a94279f, as `name_added_and_edited` through the marker's path, fixed since: the
/// recovered modify carried `z.txt` in its links (`other_names` of the tree now).
#[test]
fn a_name_added_after_a_crash_before_the_next_mount() {
    let mut ws = Workspace::new();
    ws.mount();
    recorded_files(&ws, &[("a.txt", "one\n")]);
    let before = log(&ws);
    let pid = crate::common::daemon_pid(&ws);
    let script = format!(
        r#"
import os, signal, time
a = open("a.txt", "r+")
a.write("two\n"); a.flush()
time.sleep(0.6)
os.kill({pid}, signal.SIGKILL)
"#
    );
    let out = crate::common::python_command(&ws.path(), &script)
        .envs([("REWIND_SESSION", "agentT"), ("REWIND_AGENT", "tester")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gone = || {
        // SAFETY: kill with signal 0 only asks whether the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    };
    assert!(crate::common::wait_for(10, gone), "the daemon did not die");
    let status = std::process::Command::new("fusermount3")
        .arg("-uz")
        .arg(ws.path())
        .status()
        .unwrap();
    assert!(status.success());
    sh(&ws.path(), "ln a.txt z.txt");
    ws.mount();
    let all = log(&ws);
    let new = &all[before.len()..];
    eprintln!("{}", lines(new));
    let mut wrong = Vec::new();
    let m = of(new, "a.txt", "modify");
    assert_eq!(m.len(), 1, "{}", lines(new));
    assert_eq!(m[0]["agent"], "tester", "{}", lines(new));
    assert_eq!(cat_at(&ws, "a.txt", id(&m[0])), "two\n");
    let z: Vec<&Value> = new.iter().filter(|c| names(c, "z.txt")).collect();
    assert!(!z.is_empty(), "{}", lines(new));
    if z[0]["kind"] != "create" {
        wrong.push(format!(
            "the first change naming z.txt is #{} {}",
            id(z[0]),
            z[0]["kind"]
        ));
    }
    every_file_has_its_newest_change(&ws, &[]);
    roll_back_to(&ws, id(&new[0]) - 1);
    if read(&ws, "a.txt") != "one\n" {
        wrong.push(format!(
            "a.txt after the rollback: {:?}",
            read(&ws, "a.txt")
        ));
    }
    if ws.path().join("z.txt").exists() {
        wrong.push(format!(
            "z.txt after the rollback: still there, holding {:?}",
            read(&ws, "z.txt")
        ));
    }
    remount_records_nothing(&mut ws);
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", lines(new));
    ws.unmount();
}
