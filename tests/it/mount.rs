//! The mount as a filesystem: POSIX behaviour through real syscalls, compared step by step with
//! a plain directory; real tools; mount errors; unmounting; fsx; concurrent processes.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::common::{Workspace, daemon_pid, is_mounted, ok, python_command, sh, wait_for};

fn errno_of(e: std::io::Error) -> String {
    format!("errno {}", e.raw_os_error().unwrap_or(-1))
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn stat_line(p: &Path) -> String {
    match fs::symlink_metadata(p) {
        Err(e) => errno_of(e),
        Ok(m) => format!(
            "type {:o} mode {:o} size {} nlink {} uid {} gid {}",
            m.mode() & libc::S_IFMT,
            m.mode() & 0o7777,
            m.size(),
            m.nlink(),
            m.uid(),
            m.gid()
        ),
    }
}

/// A walk of the whole tree: path, type, mode, size and content of every entry.
pub fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let content = if m.file_type().is_symlink() {
                fs::read_link(&p).unwrap().to_string_lossy().into_owned()
            } else if m.is_file() && m.len() < 1 << 20 {
                blake3::hash(&fs::read(&p).unwrap()).to_hex()[..16].to_string()
            } else {
                String::new()
            };
            out.push(format!("{rel} {} {content}", stat_line(&p)));
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// Two tree listings are equal; on failure, show only the lines that differ.
pub fn assert_same(expected: &[String], actual: &[String]) {
    let missing: Vec<_> = expected.iter().filter(|l| !actual.contains(l)).collect();
    let extra: Vec<_> = actual.iter().filter(|l| !expected.contains(l)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "trees differ\nonly expected: {missing:#?}\nonly actual: {extra:#?}"
    );
}

/// Every step's outcome, so the same steps on a plain directory and on the mount compare.
fn posix_scenario(root: &Path) -> Vec<String> {
    let mut log = Vec::new();
    let mut step = |name: &str, result: String| log.push(format!("{name}: {result}"));
    let p = |rel: &str| root.join(rel);

    // Plain files, appends, exclusive creation.
    fs::write(p("a.txt"), "hello\n").unwrap();
    step("read", fs::read_to_string(p("a.txt")).unwrap());
    for line in ["one\n", "two\n"] {
        let mut f = OpenOptions::new().append(true).open(p("a.txt")).unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }
    step("append", fs::read_to_string(p("a.txt")).unwrap());
    let excl = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p("a.txt"));
    step(
        "o_excl",
        excl.map(|_| "ok".to_string()).unwrap_or_else(errno_of),
    );
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(p("a.txt"))
        .unwrap();
    f.seek(SeekFrom::Start(2)).unwrap();
    f.write_all(b"LL").unwrap();
    drop(f);
    step("overwrite", fs::read_to_string(p("a.txt")).unwrap());
    let f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(p("a.txt"))
        .unwrap();
    drop(f);
    step("o_trunc", stat_line(&p("a.txt")));
    fs::write(p("a.txt"), "hello again\n").unwrap();

    // Deep trees and odd names.
    let mut deep = root.to_path_buf();
    for i in 0..40 {
        deep.push(format!("d{i}"));
    }
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("leaf"), "deep").unwrap();
    step("deep", fs::read_to_string(deep.join("leaf")).unwrap());
    let names: Vec<OsString> = vec![
        "sp ace".into(),
        "tab\there".into(),
        "new\nline".into(),
        "ünïcødé".into(),
        OsString::from_vec(b"bad\xff\xfeutf8".to_vec()),
        "-dash".into(),
        ".hidden".into(),
        "x".repeat(255).into(),
    ];
    for name in &names {
        fs::write(root.join(name), name.as_bytes()).unwrap();
        step(
            "odd name",
            format!("{}", fs::read(root.join(name)).unwrap() == name.as_bytes()),
        );
    }
    step(
        "name too long",
        fs::write(root.join("y".repeat(256)), "")
            .map(|_| "ok".into())
            .unwrap_or_else(errno_of),
    );

    // Symlinks and hard links.
    std::os::unix::fs::symlink("a.txt", p("link")).unwrap();
    std::os::unix::fs::symlink("missing", p("dangling")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", p("outside")).unwrap();
    step(
        "readlink",
        fs::read_link(p("link")).unwrap().display().to_string(),
    );
    step("through link", fs::read_to_string(p("link")).unwrap());
    step(
        "dangling",
        fs::read(p("dangling"))
            .map(|_| "ok".into())
            .unwrap_or_else(errno_of),
    );
    step(
        "symlink stat",
        stat_line(&p("dangling"))
            .split(" nlink")
            .next()
            .unwrap()
            .to_string(),
    );
    fs::hard_link(p("a.txt"), p("hard")).unwrap();
    step("hard nlink", stat_line(&p("hard")));
    fs::write(p("hard"), "via hard link\n").unwrap();
    step("hard shared", fs::read_to_string(p("a.txt")).unwrap());

    // Permissions, ownership, timestamps.
    fs::set_permissions(p("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    step("chmod", stat_line(&p("a.txt")));
    fs::set_permissions(p("a.txt"), fs::Permissions::from_mode(0o4755)).unwrap();
    step("setuid bit", stat_line(&p("a.txt")));
    std::os::unix::fs::chown(p("a.txt"), Some(1000), Some(1000)).unwrap();
    step("chown", stat_line(&p("a.txt")));
    std::os::unix::fs::lchown(p("link"), Some(1001), Some(1001)).unwrap();
    step(
        "lchown",
        stat_line(&p("link"))
            .split(" size")
            .next()
            .unwrap()
            .to_string(),
    );
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 123,
        },
        libc::timespec {
            tv_sec: 1_500_000_000,
            tv_nsec: 456_789,
        },
    ];
    // SAFETY: utimensat with two valid timespecs and a NUL-terminated path.
    unsafe { libc::utimensat(libc::AT_FDCWD, c(&p("a.txt")).as_ptr(), times.as_ptr(), 0) };
    let m = fs::metadata(p("a.txt")).unwrap();
    step(
        "utimes",
        format!(
            "{} {} {} {}",
            m.atime(),
            m.atime_nsec(),
            m.mtime(),
            m.mtime_nsec()
        ),
    );

    // Extended attributes.
    let xattr = |path: &Path, op: &str| -> String {
        let cp = c(path);
        let name = CString::new("user.rewind.test").unwrap();
        let mut buf = [0u8; 64];
        // SAFETY: xattr calls with valid buffers and NUL-terminated strings.
        let r = unsafe {
            match op {
                "set" => libc::setxattr(cp.as_ptr(), name.as_ptr(), b"value".as_ptr().cast(), 5, 0)
                    as isize,
                "get" => libc::getxattr(
                    cp.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                ),
                "size" => libc::getxattr(cp.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0),
                "list" => libc::listxattr(cp.as_ptr(), buf.as_mut_ptr().cast(), buf.len()),
                _ => libc::removexattr(cp.as_ptr(), name.as_ptr()) as isize,
            }
        };
        if r < 0 {
            return errno_of(std::io::Error::last_os_error());
        }
        format!(
            "{r} {:?}",
            String::from_utf8_lossy(&buf[..r.max(0) as usize])
        )
    };
    let attrs = if xattr(&p("a.txt"), "set") == "0 \"\"" {
        ["get", "size", "list", "remove", "get"]
            .map(|op| xattr(&p("a.txt"), op))
            .join(" | ")
    } else {
        "unsupported".into()
    };
    step("xattr", attrs);

    // Special files.
    // SAFETY: mkfifo with a NUL-terminated path.
    unsafe { libc::mkfifo(c(&p("fifo")).as_ptr(), 0o644) };
    step("fifo", stat_line(&p("fifo")));

    // Renames, with flags.
    fs::write(p("r1"), "r1").unwrap();
    fs::write(p("r2"), "r2").unwrap();
    fs::rename(p("r1"), p("r3")).unwrap();
    step(
        "rename",
        format!(
            "{:?} {:?}",
            fs::read_to_string(p("r3")).ok(),
            fs::read(p("r1")).err().map(errno_of)
        ),
    );
    fs::rename(p("r3"), p("r2")).unwrap();
    step("rename over", fs::read_to_string(p("r2")).unwrap());
    fs::write(p("r4"), "r4").unwrap();
    let rename2 = |a: &str, b: &str, flags: u32| -> String {
        // SAFETY: renameat2 with NUL-terminated paths.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                c(&p(a)).as_ptr(),
                libc::AT_FDCWD,
                c(&p(b)).as_ptr(),
                flags,
            )
        };
        if r < 0 {
            errno_of(std::io::Error::last_os_error())
        } else {
            "ok".into()
        }
    };
    step("noreplace", rename2("r4", "r2", libc::RENAME_NOREPLACE));
    step("exchange", rename2("r4", "r2", libc::RENAME_EXCHANGE));
    step(
        "exchanged",
        format!(
            "{} {}",
            fs::read_to_string(p("r2")).unwrap(),
            fs::read_to_string(p("r4")).unwrap()
        ),
    );
    fs::create_dir(p("dirA")).unwrap();
    fs::write(p("dirA/inside"), "inside").unwrap();
    fs::rename(p("dirA"), p("dirB")).unwrap();
    step("dir rename", fs::read_to_string(p("dirB/inside")).unwrap());

    // Directory removal rules.
    step(
        "rmdir nonempty",
        fs::remove_dir(p("dirB"))
            .map(|_| "ok".into())
            .unwrap_or_else(errno_of),
    );
    step(
        "unlink dir",
        fs::remove_file(p("dirB"))
            .map(|_| "ok".into())
            .unwrap_or_else(errno_of),
    );
    fs::remove_file(p("dirB/inside")).unwrap();
    step(
        "rmdir",
        fs::remove_dir(p("dirB"))
            .map(|_| "ok".into())
            .unwrap_or_else(errno_of),
    );

    // Sparse and large files.
    let mut f = File::create(p("sparse")).unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(b"end").unwrap();
    // SAFETY: lseek on an fd we own.
    let data = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA) };
    step(
        "sparse",
        format!("{} data at {data}", stat_line(&p("sparse"))),
    );
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(p("large"))
        .unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"past 4 GiB", 5 << 30).unwrap();
    let mut buf = [0u8; 10];
    f.read_exact_at(&mut buf, 5 << 30).unwrap();
    step(
        "large",
        format!(
            "{} {}",
            stat_line(&p("large")),
            String::from_utf8_lossy(&buf)
        ),
    );
    f.set_len(1 << 33).unwrap();
    step("truncate up", stat_line(&p("large")));
    f.set_len(100).unwrap();
    step("truncate down", stat_line(&p("large")));
    drop(f);

    // Shared writable mmap.
    fs::write(p("mapped"), vec![b'.'; 8192]).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(p("mapped"))
        .unwrap();
    // SAFETY: map 8 KiB of a file we own, write inside it, unmap.
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(b"mmap!".as_ptr(), (m as *mut u8).add(4096), 5);
        libc::msync(m, 8192, libc::MS_SYNC);
        libc::munmap(m, 8192);
    }
    drop(f);
    let content = fs::read(p("mapped")).unwrap();
    step(
        "mmap",
        String::from_utf8_lossy(&content[4090..4105]).into_owned(),
    );

    // flock between two open file descriptions.
    let f1 = File::open(p("mapped")).unwrap();
    let f2 = File::open(p("mapped")).unwrap();
    // SAFETY: flock on fds we own.
    let r1 = unsafe { libc::flock(f1.as_raw_fd(), libc::LOCK_EX) };
    // SAFETY: flock on an fd this test owns.
    let r2 = unsafe { libc::flock(f2.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    let e2 = std::io::Error::last_os_error().raw_os_error();
    step("flock", format!("{r1} {r2} {e2:?}"));

    // The root as readdir sees it.
    let mut names: Vec<_> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    step(
        "readdir",
        format!("{} entries, first {:?}", names.len(), names.first()),
    );
    log
}

#[test]
fn posix_behaviour_matches_a_plain_directory() {
    let mut ws = Workspace::new();
    ws.mount();
    let expected = posix_scenario(&ws.plain());
    let actual = posix_scenario(&ws.path());
    for (e, a) in expected.iter().zip(&actual) {
        assert_eq!(e, a);
    }
    assert_eq!(expected.len(), actual.len());
    assert_same(&tree(&ws.plain()), &tree(&ws.path()));
}

/// File capabilities (`security.capability`, as `setcap` sets them): the mount answers the
/// kernel's check before each write from memory where it can, so it must still see one that is
/// set, and a write must drop it as on disk. With and without passthrough.
#[test]
fn file_capabilities_behave_as_on_disk() {
    let script = r#"
import errno, os, struct, sys
f = os.path.join(sys.argv[1], "tool")
with open(f, "wb") as h:
    h.write(b"x")
    h.write(b"y")
def caps():
    try:
        return os.getxattr(f, "security.capability").hex()
    except OSError as e:
        return errno.errorcode[e.errno]
print(caps())
# VFS_CAP_REVISION_2, effective; permitted CAP_NET_RAW.
os.setxattr(f, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0))
print(caps())
with open(f, "ab") as h:
    h.write(b"z")
print(caps())
os.setxattr(f, "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0))
os.remove(f)
with open(f, "wb") as h:
    h.write(b"new")
print(caps())
"#;
    let run = |dir: &Path| ok(python_command(dir, script).arg(dir).output().unwrap());
    for extra in [&[][..], &["--no-passthrough"][..]] {
        let mut ws = Workspace::new();
        ws.mount_with(extra);
        let plain = run(&ws.plain());
        assert_eq!(
            plain,
            "ENODATA\n0100000200200000000000000000000000000000\nENODATA\nENODATA\n"
        );
        assert_eq!(run(&ws.path()), plain, "{extra:?}");
    }
}

/// Passthrough reads are read ahead by the mount's own setting: the daemon gives it the disk's.
#[test]
fn the_mount_reads_ahead_as_much_as_the_disk() {
    let mut ws = Workspace::new();
    let dev = fs::metadata(ws.plain()).unwrap().dev();
    let disk = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let Ok(disk_kb) = fs::read_to_string(format!("/sys/class/bdi/{disk}/read_ahead_kb")) else {
        eprintln!("the temp dir's filesystem has no block device readahead: nothing to match");
        return;
    };
    ws.mount();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ours = info
        .lines()
        .rev()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f[4] == ws.path().to_str().unwrap())
        .unwrap()[2]
        .to_string();
    let kb = fs::read_to_string(format!("/sys/class/bdi/{ours}/read_ahead_kb")).unwrap();
    assert_eq!(kb, disk_kb);
}

#[test]
fn unmount_leaves_the_directory_as_last_written() {
    let mut ws = Workspace::new();
    fs::write(ws.path().join("before"), "was here before the mount").unwrap();
    ws.mount();
    assert_eq!(
        fs::read_to_string(ws.path().join("before")).unwrap(),
        "was here before the mount"
    );
    sh(
        &ws.path(),
        "mkdir -p src && echo 'fn main() {}' > src/main.rs && echo x >> before && rm -f gone",
    );
    let seen = tree(&ws.path());
    ws.unmount();
    assert_same(&seen, &tree(&ws.path()));
    assert_eq!(
        fs::read_to_string(ws.path().join("before")).unwrap(),
        "was here before the mountx\n"
    );
}

#[test]
fn real_tools_work_through_the_mount() {
    let mut ws = Workspace::new();
    ws.mount();
    let script = r#"
        git init -q -b main repo && cd repo
        git config user.email t@example.com && git config user.name t
        mkdir -p src && for i in $(seq 1 50); do echo "line $i" > src/f$i.txt; done
        git add -A && git commit -qm one
        sed -i 's/line/LINE/' src/f*.txt
        git checkout -q -b feature && git commit -qam two
        git checkout -q main && git status --porcelain
        tar cf ../src.tar src && mkdir ../copy && tar xf ../src.tar -C ../copy
        python3 -c "import pathlib; pathlib.Path('py.txt').write_text('from python\n')"
        cp -r src ../src-copy && rm -rf ../src-copy/f1*.txt
        git log --oneline --all | wc -l
        cat src/f7.txt
    "#;
    let on_plain = sh(&ws.plain(), script);
    let on_mount = sh(&ws.path(), script);
    assert_eq!(on_plain, on_mount);
    assert!(on_mount.ends_with("2\nline 7\n"), "{on_mount}");
    // The tarball embeds mtimes, which differ between the two runs.
    let strip = |t: Vec<String>| {
        t.into_iter()
            .filter(|l| !l.contains(".git") && !l.starts_with("src.tar"))
            .collect::<Vec<_>>()
    };
    assert_same(&strip(tree(&ws.plain())), &strip(tree(&ws.path())));
}

#[test]
fn fcntl_locks_exclude_other_processes() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("lockme"), "x").unwrap();
    let script = r#"
import fcntl, os, subprocess, sys, time
f = open("lockme", "r+")
fcntl.lockf(f, fcntl.LOCK_EX)
child = subprocess.run([sys.executable, "-c", """
import fcntl, sys
g = open('lockme', 'r+')
try:
    fcntl.lockf(g, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print('acquired')
except OSError as e:
    print('blocked', e.errno)
"""], capture_output=True, text=True)
print(child.stdout.strip())
fcntl.lockf(f, fcntl.LOCK_UN)
"#;
    let out = python_command(&ws.path(), script).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "blocked 11",
        "{out:?}"
    );
}

#[test]
fn mounting_bad_targets_gives_clear_errors() {
    let mut ws = Workspace::new();
    let missing = ws.path().join("missing");
    let out = ws.rewind(&[OsStr::new("mount"), missing.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "{out:?}"
    );

    let file = ws.path().join("file");
    fs::write(&file, "x").unwrap();
    let out = ws.rewind(&[OsStr::new("mount"), file.as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a directory"),
        "{out:?}"
    );

    let inside = ws.path().join("store-inside");
    let out = ws.rewind(&[
        OsStr::new("mount"),
        ws.path().as_os_str(),
        OsStr::new("--store"),
        inside.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("must not be inside"),
        "{out:?}"
    );

    ws.mount();
    let out = ws.rewind(&[OsStr::new("mount"), ws.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already mounted"),
        "{out:?}"
    );
}

#[test]
fn busy_unmount_says_how_to_force() {
    let mut ws = Workspace::new();
    ws.mount();
    let open = File::create(ws.path().join("held-open")).unwrap();
    let out = ws.rewind(&[OsStr::new("unmount"), ws.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("busy") && err.contains("--force"), "{err}");
    assert!(is_mounted(&ws.path()));
    let out = ws.rewind(&[
        OsStr::new("unmount"),
        OsStr::new("--force"),
        ws.path().as_os_str(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(!is_mounted(&ws.path()));
    drop(open);
}

/// A second mount of a store another daemon has open waits for it to let go (a daemon
/// finishing its unmount does within moments), then is refused plainly rather than with
/// RocksDB's lock error; the first mount goes on recording.
#[test]
fn a_second_mount_of_a_store_in_use_is_refused_plainly() {
    let mut ws = Workspace::new();
    ws.mount();
    let other = Workspace::new();
    let out = other
        .command(&[OsStr::new("mount"), other.path().as_os_str()])
        .arg("--store")
        .arg(ws.store())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(err.contains("in use by another process"), "{err}");
    assert!(!err.contains("lock file"), "{err}");
    assert!(!is_mounted(&other.path()));
    fs::write(ws.path().join("still"), "recorded\n").unwrap();
    let log = crate::common::rw(&ws, &["log"]);
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("still"),
        "{log:?}"
    );
    ws.unmount();
}

#[test]
fn sigterm_unmounts_cleanly() {
    let mut ws = Workspace::new();
    ws.mount();
    fs::write(ws.path().join("kept"), "kept").unwrap();
    let pid = daemon_pid(&ws);
    // SAFETY: kill(2) of the daemon we started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(
        wait_for(10, || !is_mounted(&ws.path())),
        "still mounted after SIGTERM"
    );
    assert!(
        // SAFETY: kill with signal 0 only asks whether the process exists.
        wait_for(10, || unsafe { libc::kill(pid, 0) } != 0),
        "daemon still running"
    );
    assert_eq!(fs::read_to_string(ws.path().join("kept")).unwrap(), "kept");
}

fn fsx() -> std::path::PathBuf {
    let candidates = [
        std::env::var_os("FSX").map(Into::into),
        std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/rewind/tools/bin/fsx")),
        Some("/usr/local/bin/fsx".into()),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p: &std::path::PathBuf| p.exists())
        .expect("fsx is not installed: run .ci/run, or `cargo install fsx --root ~/.cache/rewind/tools`")
}

#[test]
fn fsx_exercises_the_mount() {
    let mut ws = Workspace::new();
    ws.mount();
    let config = ws.path().parent().unwrap().join("fsx.toml");
    fs::write(&config, include_str!("../fsx.toml")).unwrap();
    let ops = std::env::var("REWIND_FSX_OPS").unwrap_or_else(|_| "20000".into());
    let out = Command::new(fsx())
        .args(["-N", &ops, "-S", "7", "-f"])
        .arg(&config)
        .arg("-P")
        .arg(ws.path().parent().unwrap())
        .arg(ws.path().join("fsx.data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fsx failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Several processes create, write, rename and delete in one tree at once; the result is what
/// their operations imply, and the mount still answers.
#[test]
fn concurrent_processes_leave_the_tree_their_operations_imply() {
    let mut ws = Workspace::new();
    ws.mount();
    let worker = r#"
import os, sys
w = int(sys.argv[1])
os.makedirs("shared/sub", exist_ok=True)
for i in range(300):
    tmp = f"shared/.w{w}-{i}.tmp"
    with open(tmp, "w") as f:
        f.write(f"worker {w} item {i}\n" * (i % 7 + 1))
    os.rename(tmp, f"shared/w{w}-{i}")
    if i % 3 == 0:
        os.unlink(f"shared/w{w}-{i}")
    elif i % 3 == 1:
        os.rename(f"shared/w{w}-{i}", f"shared/sub/w{w}-{i}")
    if i % 50 == 0:
        os.makedirs(f"shared/dir-{w}-{i}/deep", exist_ok=True)
        os.rmdir(f"shared/dir-{w}-{i}/deep")
"#;
    let children: Vec<_> = (0..4)
        .map(|w| {
            python_command(&ws.path(), worker)
                .arg(w.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut expected = Vec::new();
    for w in 0..4 {
        for i in 0..300 {
            let content = format!("worker {w} item {i}\n").repeat(i % 7 + 1);
            match i % 3 {
                0 => {}
                1 => expected.push((format!("shared/sub/w{w}-{i}"), content)),
                _ => expected.push((format!("shared/w{w}-{i}"), content)),
            }
            if i % 50 == 0 {
                expected.push((format!("shared/dir-{w}-{i}"), String::new()));
            }
        }
    }
    expected.sort();
    let mut actual = Vec::new();
    for dir in ["shared", "shared/sub"] {
        for e in fs::read_dir(ws.path().join(dir)).unwrap() {
            let e = e.unwrap();
            let rel = format!("{dir}/{}", e.file_name().to_string_lossy());
            if e.file_type().unwrap().is_dir() {
                if rel != "shared/sub" {
                    assert_eq!(
                        fs::read_dir(e.path()).unwrap().count(),
                        0,
                        "{rel} not empty"
                    );
                    actual.push((rel, String::new()));
                }
            } else {
                actual.push((rel, fs::read_to_string(e.path()).unwrap()));
            }
        }
    }
    actual.sort();
    assert_eq!(actual.len(), expected.len());
    assert!(
        actual == expected,
        "tree differs from what the operations imply"
    );
    // Still answering, and the backing directory agrees after unmounting.
    let seen = tree(&ws.path());
    ws.unmount();
    assert_same(&seen, &tree(&ws.path()));
}

#[test]
fn reads_see_writes_across_handles_and_processes() {
    let mut ws = Workspace::new();
    ws.mount();
    let path = ws.path().join("shared.txt");
    let mut w = File::create(&path).unwrap();
    let mut r = File::open(&path).unwrap();
    w.write_all(b"first").unwrap();
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "first");
    let out = sh(
        &ws.path(),
        "echo -n ' second' >> shared.txt && cat shared.txt",
    );
    assert_eq!(out, "first second");
    assert_eq!(fs::metadata(&path).unwrap().len(), 12);
}

/// Without passthrough (as when not root) the kernel's writeback cache is used and file data
/// goes through the daemon: the same POSIX behaviour.
#[test]
fn without_passthrough_behaviour_is_the_same() {
    let mut ws = Workspace::new();
    ws.mount_with(&["--no-passthrough"]);
    let expected = posix_scenario(&ws.plain());
    let actual = posix_scenario(&ws.path());
    for (e, a) in expected.iter().zip(&actual) {
        // Here SEEK_DATA treats the whole file as data (holes are not reported): POSIX allows
        // it, and it is what keeps a sparse-aware copy from skipping data still in the cache.
        if e.starts_with("sparse:") {
            assert!(a.ends_with("data at 0"), "{a}");
            continue;
        }
        assert_eq!(e, a);
    }
    assert_same(&tree(&ws.plain()), &tree(&ws.path()));
    let script = "for i in $(seq 1 100); do echo line $i >> log.txt; done; sed -i 's/line/LINE/' log.txt; wc -l < log.txt";
    assert_eq!(sh(&ws.path(), script).trim(), "100");
}
