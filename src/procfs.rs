//! What `/proc` says of a process: the one place its files are read and parsed (`stat`,
//! `status`, `environ`, and this process's `mountinfo`). Imports nothing of the crate; every
//! answer about a process is `None` when the process is gone or the file does not read as
//! expected. `mountinfo` is an error when it cannot be read (whether a path is mounted must
//! not be guessed).

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

/// The process is stopped (`SIGSTOP`, `^Z`) or held by a debugger: it runs nothing until it
/// is let go.
pub fn stopped(pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    text.rfind(')')
        .and_then(|close| text.get(close + 2..close + 3))
        .is_some_and(|state| matches!(state, "T" | "t"))
}

/// The process or thread is gone, or going: exited, or killed. One killed while it waits on
/// the mount for an answer stays until it gets one, with SIGKILL pending (a signal that
/// terminates by default, sent to a process that does not handle it, arrives as SIGKILL).
pub fn gone_or_killed(pid: u32) -> bool {
    if !running(pid) {
        return true;
    }
    let Some(status) = status(pid) else {
        return true;
    };
    let kill = 1 << (libc::SIGKILL - 1);
    (status.mask("SigPnd") | status.mask("ShdPnd")) & kill != 0
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

    /// `NSpid`: the process's pid in each PID namespace it is in, from the outermost one
    /// this `/proc` shows to its own.
    pub fn ns_pids(&self) -> Vec<u32> {
        self.field("NSpid")
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
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

/// The PID namespace a process is in (the inode `/proc/PID/ns/pid` links to).
pub fn pid_namespace(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|l| l.to_string_lossy().into_owned())
}

/// Every process `/proc` shows.
pub fn processes() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
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

/// One line of `/proc/self/mountinfo`: what is mounted where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// `major:minor`.
    pub device: String,
    /// Where it is mounted, unescaped.
    pub point: String,
    /// Its filesystem type (`fuse`, `fuse.NAME`, `ext4`, ...).
    pub fstype: String,
    /// Its source (for rewind, `rewind:<workspace>`), unescaped.
    pub source: String,
}

/// This process's mounts, in the order mounted (the last one at a path is the visible one).
pub fn mountinfo() -> std::io::Result<Vec<Mount>> {
    Ok(std::fs::read_to_string("/proc/self/mountinfo")?
        .lines()
        .filter_map(parse_mount)
        .collect())
}

/// `ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`.
fn parse_mount(line: &str) -> Option<Mount> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    Some(Mount {
        device: fields.get(2)?.to_string(),
        point: unescape(fields.get(4)?),
        fstype: fields.get(sep + 1).copied().unwrap_or("").to_string(),
        source: fields.get(sep + 2).map(|s| unescape(s)).unwrap_or_default(),
    })
}

/// mountinfo writes a space, tab, newline or backslash in a path as `\NNN` (octal).
fn unescape(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
        assert_eq!(status.ns_pids().last(), Some(&me));
        assert_eq!(pid_namespace(me), pid_namespace(std::process::id()));
        assert!(pid_namespace(me).is_some_and(|ns| ns.starts_with("pid:[")));
        assert!(processes().any(|p| p == me));
        assert!(environ(me).is_some());
        assert!(stat_of_a_name_with_parens().is_some());
    }

    #[test]
    fn reads_a_mount_line_with_escaped_names() {
        let line = "36 25 0:32 / /tmp/my\\040work rw,nosuid - fuse rewind:/tmp/my\\040work rw";
        assert_eq!(
            parse_mount(line),
            Some(Mount {
                device: "0:32".into(),
                point: "/tmp/my work".into(),
                fstype: "fuse".into(),
                source: "rewind:/tmp/my work".into(),
            })
        );
        assert_eq!(parse_mount("no separator here"), None);
        assert!(mountinfo().unwrap().iter().any(|m| m.point == "/"));
    }

    fn stat_of_a_name_with_parens() -> Option<Stat> {
        let s = parse_stat("42 (a) b) S 7 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0")?;
        assert_eq!((s.ppid, s.start, s.name.as_str()), (7, 12345, "a) b"));
        Some(s)
    }
}
