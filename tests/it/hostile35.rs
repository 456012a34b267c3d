//! Round 35: a hostile pass on 897db83, living in the workspace as a user would. Each test
//! failed before the fix named in its comment.

use std::fs;

use crate::common::{Workspace, rw, rw_ok, stderr, stdout, sync};

/// A checkpoint named `+1` is reached by its name, not read as change 1: `cat --at`,
/// `.rewind/at/` and a rollback's plan all answer for the checkpoint.
// Failed before a point's id had to be digits only (`Point::parse` took `u64::from_str`,
// which reads `+1` as 1): `cat --at +1` gave the first version, exit 0.
#[test]
fn a_checkpoint_named_plus_a_number_is_that_checkpoint() {
    let mut ws = Workspace::new();
    ws.mount();
    for v in ["v1", "v2", "v3"] {
        fs::write(ws.path().join("f"), format!("{v}\n")).unwrap();
        sync(&ws);
    }
    rw_ok(&ws, &["checkpoint", "+1"]);
    assert_eq!(rw_ok(&ws, &["cat", "f", "--at", "+1"]), "v3\n");
    assert_eq!(
        fs::read_to_string(ws.path().join(".rewind/at/+1/f")).unwrap(),
        "v3\n"
    );
    let dry = rw(&ws, &["rollback", "--to", "+1", "--dry-run"]);
    assert!(stdout(&dry).starts_with("nothing to roll back"), "{dry:?}");
    ws.unmount();
}

/// A time that is no time rewind can name (past the year 2554, or a day that does not exist)
/// and an id too large for one are refused saying so, not as a checkpoint that does not
/// exist; a duration longer ago than 1970 is the state before anything was recorded.
// Failed before `Point::parse` told things shaped as times and ids from names: `there is no
// checkpoint named "2999-01-01T00:00:00Z"`.
#[test]
fn points_shaped_as_times_that_are_none_say_why() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("f"), "v1\n").unwrap();
    sync(&ws);
    for (at, why) in [
        (
            "2999-01-01T00:00:00Z",
            "rewind's times run from 1970 to 2554",
        ),
        ("2026-02-30T00:00:00Z", "no valid RFC 3339 time"),
        ("99999999999999999999", "no change id is that large"),
    ] {
        let out = rw(&ws, &["cat", "f", "--at", at]);
        assert_eq!(out.status.code(), Some(2), "{at}: {out:?}");
        assert!(
            stderr(&out).contains(why) && !stderr(&out).contains("checkpoint"),
            "{at}: {}",
            stderr(&out)
        );
    }
    let out = rw(&ws, &["cat", "f", "--at", "1000000d"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("did not exist"), "{}", stderr(&out));
    let refused = rw(&ws, &["checkpoint", "2026-02-30T00:00:00Z"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    ws.unmount();
}

/// A session or agent that made no change is refused by name (exit 2), where it used to
/// select nothing and read as "already rolled back"; an id as `REWIND_SESSION` gave it names
/// the session it was recorded under.
// Failed before the selection asked for the session and agent (`existing_session`,
// `existing_agent`): `rollback --session sessAA` said `nothing to roll back`, exit 0, and
// `rollback --session a/b` too, although `rewind sessions` listed it (as `%a%2Fb`).
#[test]
fn a_session_or_agent_no_change_has_is_refused_by_name() {
    let mut ws = Workspace::new();
    ws.mount();
    crate::common::sh(
        &ws.path(),
        "echo base > f; REWIND_SESSION=sessA REWIND_AGENT=agentA sh -c 'echo a > f'; \
         REWIND_SESSION=a/b sh -c 'echo b > g'; true",
    );
    sync(&ws);
    for args in [
        &["rollback", "--session", "sessAA", "--dry-run"][..],
        &["rollback", "--session", "sessAA"],
        &["log", "--session", "no-such-session"],
        &["log", "--agent", "agentZ"],
        &["export", "--session", "nope"],
    ] {
        let out = rw(&ws, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            stderr(&out).contains("there is no session") || stderr(&out).contains("agent"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(fs::read_to_string(ws.path().join("f")).unwrap(), "a\n");
    let dry = rw_ok(&ws, &["rollback", "--session", "a/b", "--dry-run"]);
    assert!(dry.contains("remove   g"), "{dry}");
    assert!(rw_ok(&ws, &["log", "--agent", "agentA"]).contains("agentA@sessA"));
    assert!(rw_ok(&ws, &["log", "--session", "sess"]).contains("agentA@sessA"));
    ws.unmount();
}
