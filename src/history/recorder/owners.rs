//! Sessions belong to users. A session belongs to the uid that opened it: the uid of its first
//! change (the mounting user's for the default session, and for sessions recorded before
//! changes kept their uid). Another uid that names the session (`REWIND_SESSION`) is recorded
//! in a session of its own, `NAME~uidUID`, so that a rollback of one user's session never
//! undoes another user's work.

use super::{Recorder, lock};
use crate::history::name::MAX_LEN;
use crate::history::who::Who;

/// The name `uid`'s changes go under when `name` belongs to someone else.
pub fn own_name(name: &str, uid: u32) -> String {
    let suffix = format!("~uid{uid}");
    let mut end = MAX_LEN.saturating_sub(suffix.len()).min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &name[..end])
}

impl Recorder {
    /// The uid the mount runs as (its owner).
    pub(super) fn mount_uid() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    /// Move `who` to a session of its own uid's, when the one it names is another user's.
    pub(super) fn own_session(&self, who: &mut Who) {
        let Some(uid) = who.uid else {
            return;
        };
        // Each step makes a name that is new or taken by a third uid: a few suffice.
        for _ in 0..4 {
            if self.session_owner(&who.session, uid) == uid {
                return;
            }
            who.session = own_name(&who.session, uid);
        }
    }

    /// Whose `session` is; a session nobody has used yet becomes `claimant`'s.
    fn session_owner(&self, session: &str, claimant: u32) -> u32 {
        let mut owners = lock(&self.session_owners);
        if let Some(uid) = owners.get(session) {
            return *uid;
        }
        let mount = Self::mount_uid();
        let uid = if session == self.who.default_session() {
            mount
        } else {
            match self.history.session(session) {
                Ok(None) => claimant,
                Ok(Some(info)) => match self.history.change(info.first_id) {
                    Ok(Some(first)) => first.uid.unwrap_or(mount),
                    // Its first change is gone (retention) or unreadable: the mount's.
                    _ => mount,
                },
                Err(_) => mount,
            }
        };
        if owners.len() > 4096 {
            owners.clear();
        }
        owners.insert(session.to_string(), uid);
        uid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Name;

    #[test]
    fn own_names_are_valid_names() {
        assert_eq!(own_name("mine", 1000), "mine~uid1000");
        let long = "é".repeat(64);
        let name = own_name(&long, 4_294_967_295);
        assert!(name.len() <= MAX_LEN, "{name}");
        assert!(name.ends_with("~uid4294967295"));
        for n in [own_name("mine", 0), name, own_name("1", 5)] {
            Name::parse("session", &n).unwrap();
        }
    }
}
