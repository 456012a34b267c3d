//! What `/proc` says of a process: the one place its files are read and parsed (`stat`,
//! `status`, `environ`). Imports nothing of the crate; every answer is `None` when the process
//! is gone or the file does not read as expected.

/// `/proc/PID/stat`: the parent, the start time (clock ticks after boot) and the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    pub start: u64,
    pub name: String,
}

pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may itself contain spaces or parentheses.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 2..)?.split(' ').collect();
    // After the name: state(0) ppid(1) ... starttime(19).
    Some(Stat {
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        name,
    })
}

/// The process or thread exists and has not exited (a zombie has).
pub fn running(pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the name, which is in parentheses and may contain anything.
    text.rfind(')')
        .and_then(|close| text.get(close + 2..close + 3))
        .is_some_and(|state| !matches!(state, "Z" | "X" | "x"))
}

/// `/proc/PID/status` (of a process or a thread; `status_of_self` for this one).
#[derive(Clone, Debug)]
pub struct Status(String);

pub fn status(pid: u32) -> Option<Status> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .map(Status)
}

pub fn status_of_self() -> Option<Status> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .map(Status)
}

impl Status {
    /// The value of a field (`"Tgid"`), trimmed.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.0.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(str::trim)
        })
    }

    /// A hexadecimal mask (`SigPnd`, `CapEff`); 0 if absent.
    pub fn mask(&self, name: &str) -> u64 {
        self.field(name)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .unwrap_or(0)
    }

    /// The process a thread belongs to.
    pub fn tgid(&self) -> Option<u32> {
        self.field("Tgid")?.parse().ok()
    }

    /// The filesystem uid (the last of the four on the `Uid:` line).
    pub fn fs_uid(&self) -> Option<u32> {
        self.field("Uid")?.split_whitespace().nth(3)?.parse().ok()
    }

    /// The supplementary groups.
    pub fn groups(&self) -> Vec<u32> {
        self.field("Groups")
            .map(|g| {
                g.split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `/proc/PID/environ`: `NAME=value` entries.
pub fn environ(pid: u32) -> Option<Vec<Vec<u8>>> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        env.split(|&b| b == 0)
            .filter(|v| !v.is_empty())
            .map(<[u8]>::to_vec)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let stat = stat(me).unwrap();
        assert_eq!(stat.ppid, std::os::unix::process::parent_id());
        let status = status(me).unwrap();
        assert_eq!(status.tgid(), Some(me));
        assert_eq!(status.fs_uid(), Some(rustix::process::geteuid().as_raw()));
        assert!(environ(me).is_some());
        assert!(stat_of_a_name_with_parens().is_some());
    }

    fn stat_of_a_name_with_parens() -> Option<Stat> {
        let s = parse_stat("42 (a) b) S 7 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0")?;
        assert_eq!((s.ppid, s.start, s.name.as_str()), (7, 12345, "a) b"));
        Some(s)
    }
}
