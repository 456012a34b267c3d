//! Trust I (issue 10), items 1, 4 and 5: every program that lives in the workspace runs through
//! the mount, every open flag behaves as on the disk underneath, `fsyncdir` reaches the disk,
//! `O_TMPFILE` works as on disk (and a linked one is recorded), and real tools (git, npm and npx, a
//! venv with pip, cc, make, vim) give the same outputs, exit codes and trees through the mount as
//! on a plain directory. Each test runs twice: with FUSE passthrough (root's default) and without
//! it (`--no-passthrough`: the writeback cache, which is also what a plain user's mount uses).
//!
//! The tools these tests drive are Debian packages: git, gcc (cc), make, vim, python3 and
//! python3-venv, nodejs and npm, strace. A missing one fails the test with its package's name.
//!
//! How the tool flows compare: a flow runs first in the workspace directory *before* it is
//! mounted (a plain directory on the disk underneath), then the directory is emptied, mounted,
//! and the same flow runs again at the same path. Running both at one path means that nothing
//! embedding an absolute path (a venv's scripts and `pyvenv.cfg`, npm's `file:` specs, git's
//! messages) differs for that reason. After every step the outcome (exit status, stdout,
//! stderr) and the whole tree (type, mode, size, link count, owner, content) are compared.
//! Timestamps are never compared (they necessarily differ between two runs), nor durations in
//! tools' messages; what else is ignored, and why, is said at each flow. The shorter checks
//! (programs run, open flags) compare the mount with `Workspace::plain`, a folder beside it.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{Workspace, daemon_pid, ok, python_command, rw_ok, sh, wait_for};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// How file data moves through the mount.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Data {
    /// FUSE passthrough: the kernel reads and writes the backing file itself.
    Passthrough,
    /// No passthrough: the writeback cache, data through the daemon.
    Writeback,
}

/// Mount the workspace with `data`, and check that the mount really uses it.
fn mount(ws: &mut Workspace, data: Data) {
    match data {
        Data::Passthrough => ws.mount(),
        Data::Writeback => ws.mount_with(&["--no-passthrough"]),
    }
    let status = rw_ok(ws, &["status"]);
    let want = match data {
        Data::Passthrough => "data path: passthrough",
        Data::Writeback => "data path: writeback",
    };
    assert!(
        status.contains(want),
        "the mount should use {data:?}; `rewind status` says:\n{status}"
    );
}

/// The changes `rewind log PATH --json` lists.
fn log_of(ws: &Workspace, path: &str) -> Vec<serde_json::Value> {
    rw_ok(ws, &["log", path, "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Fail loudly, naming the Debian package, when a tool these tests drive is missing.
fn require(tool: &str, package: &str) {
    let found = Command::new("bash")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{tool}` is not installed: these tests need the Debian package `{package}` \
         (scripts/setup should install it when REWIND_TEST=1)"
    );
}

/// python3 with a working `venv` and `ensurepip` (Debian splits them out of python3).
fn require_venv() {
    require("python3", "python3");
    let ok = Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "python3 cannot make venvs with pip: these tests need the Debian package `python3-venv`"
    );
}

/// A temp directory outside the workspace, for sources and packages the flows use.
fn outside() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rewind-programs-")
        .tempdir()
        .unwrap()
}

/// A shell command in `dir`, with an environment cleared of what would change a tool's
/// behaviour between machines (git, pip and npm settings, rewind's attribution).
fn tool_command(dir: &Path, script: &str, env: &[(String, String)]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdin(Stdio::null());
    const DROP: [&str; 11] = [
        "GIT_",
        "PIP_",
        "npm_config_",
        "NPM_CONFIG_",
        "REWIND_",
        "PYTHON",
        "VIRTUAL_ENV",
        "MAKEFLAGS",
        "MFLAGS",
        "MAKELEVEL",
        "CARGO_MAKEFLAGS",
    ];
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if DROP.iter().any(|p| name.starts_with(p)) {
            cmd.env_remove(&k);
        }
    }
    cmd.env("LC_ALL", "C").env("TZ", "UTC").env("TERM", "dumb");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Durations in tools' messages ("added 1 package in 535ms") necessarily differ between runs.
fn scrub_durations(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(" in ") {
        out.push_str(&rest[..i + 4]);
        rest = &rest[i + 4..];
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let unit = ["ms", "s", "m"]
            .into_iter()
            .find(|u| rest[digits..].starts_with(u));
        if digits > 0
            && let Some(unit) = unit
        {
            let after = rest[digits + unit.len()..].chars().next();
            if after.is_none_or(|c| !c.is_alphanumeric()) {
                out.push_str("TIME");
                rest = &rest[digits + unit.len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Run one step; its outcome as text (the script, exit status, stdout, stderr).
fn run_step(dir: &Path, script: &str, env: &[(String, String)]) -> (i32, String) {
    let out = tool_command(dir, script, env).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    let text = format!(
        "$ {script}\nexit {code}\n--- stdout\n{}--- stderr\n{}",
        scrub_durations(&String::from_utf8_lossy(&out.stdout)),
        scrub_durations(&String::from_utf8_lossy(&out.stderr))
    );
    (code, text)
}

/// What of an entry a tree listing keeps.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    /// Type, mode, size, link count, owner and content.
    All,
    /// Everything but the content (which necessarily differs, as said where it is chosen).
    NoContent,
}

/// Every entry under `root`, sorted: path, type, mode, size, link count, owner and content
/// (a hash; a symlink's target). Folder sizes are left out: ext4's depend on every name a
/// folder ever held, not on what it holds.
fn listing(root: &Path, keep: &dyn Fn(&str) -> Keep) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let how = keep(&rel);
            let m = fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let (kind, size, content) = if ft.is_symlink() {
                let target = fs::read_link(&p).unwrap();
                ("link", m.size().to_string(), target.display().to_string())
            } else if ft.is_dir() {
                stack.push(p.clone());
                ("dir", "-".to_string(), String::new())
            } else if ft.is_file() {
                let hash = if how == Keep::All {
                    blake3::hash(&fs::read(&p).unwrap()).to_hex()[..16].to_string()
                } else {
                    "(content not compared)".to_string()
                };
                ("file", m.size().to_string(), hash)
            } else {
                ("other", m.size().to_string(), String::new())
            };
            out.push(format!(
                "{rel} {kind} mode {:o} size {size} links {} owner {}:{} {content}",
                m.mode() & 0o7777,
                m.nlink(),
                m.uid(),
                m.gid()
            ));
        }
    }
    out.sort();
    out
}

/// The lines of two listings that differ, for a short failure message.
fn listing_diff(plain: &[String], mounted: &[String]) -> String {
    let only_plain: Vec<&String> = plain.iter().filter(|l| !mounted.contains(l)).collect();
    let only_mounted: Vec<&String> = mounted.iter().filter(|l| !plain.contains(l)).collect();
    format!(
        "only on the plain directory: {only_plain:#?}\nonly through the mount: {only_mounted:#?}"
    )
}

/// One step's outcome and the tree after it.
struct Outcome {
    code: i32,
    text: String,
    tree: Vec<String>,
}

/// A real tool's workflow: the same steps on a plain directory and through the mount.
struct Flow<'a> {
    /// Run in the (still plain) workspace directory before each run: files that exist before
    /// the mount, so that the mount finds them there as a user's project.
    setup: &'a dyn Fn(&Path),
    /// Shell scripts, each run in the workspace directory, in order.
    steps: &'a [&'a str],
    /// Extra environment; `{run}` in a value becomes `plain` or `mounted`.
    env: Vec<(&'a str, String)>,
    /// What of each path (relative to the workspace) the tree comparison keeps.
    keep: &'a dyn Fn(&str) -> Keep,
    /// Compare contents after every step (else after the last, and only metadata before: for
    /// big trees, which would take long to read again after every step).
    content_every_step: bool,
}

fn run_steps(dir: &Path, flow: &Flow, run: &str) -> Vec<Outcome> {
    let env: Vec<(String, String)> = flow
        .env
        .iter()
        .map(|(k, v)| (k.to_string(), v.replace("{run}", run)))
        .collect();
    let metadata_only = |_: &str| Keep::NoContent;
    flow.steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let (code, text) = run_step(dir, step, &env);
            let last = i + 1 == flow.steps.len();
            let keep: &dyn Fn(&str) -> Keep = if flow.content_every_step || last {
                flow.keep
            } else {
                &metadata_only
            };
            Outcome {
                code,
                text,
                tree: listing(dir, keep),
            }
        })
        .collect()
}

/// Run `flow` on the plain workspace directory, then at the same path through a mount with
/// `data`; every step must succeed on the plain directory and give the same outcome and tree
/// through the mount. Returns the mounted workspace, for checks of its history.
fn compare_flow(data: Data, flow: &Flow) -> Workspace {
    let mut ws = Workspace::new();
    let dir = ws.path();
    (flow.setup)(&dir);
    let plain = run_steps(&dir, flow, "plain");
    for o in &plain {
        assert_eq!(
            o.code, 0,
            "a step failed on the plain directory, so the flow tests nothing:\n{}",
            o.text
        );
    }
    // Empty the directory, set it up again and mount it: the same steps at the same path.
    fs::remove_dir_all(&dir).unwrap();
    fs::create_dir(&dir).unwrap();
    (flow.setup)(&dir);
    mount(&mut ws, data);
    let mounted = run_steps(&dir, flow, "mounted");
    for (i, (p, m)) in plain.iter().zip(&mounted).enumerate() {
        assert_eq!(
            p.text, m.text,
            "{data:?}: step {i} gives another outcome through the mount than on the plain \
             directory\n=== plain:\n{}\n=== mounted:\n{}",
            p.text, m.text
        );
        assert!(
            p.tree == m.tree,
            "{data:?}: after step {i} the tree through the mount differs from the plain \
             directory's\n{}\n{}",
            p.text,
            listing_diff(&p.tree, &m.tree)
        );
    }
    ws
}

/// Run `script` in `plain` and in the mounted workspace; outcomes and trees must be equal.
/// Returns the plain directory's outcome.
fn compare_script(ws: &Workspace, data: Data, script: &str) -> String {
    let plain_dir = ws.plain();
    let (code_plain, plain) = run_step(&plain_dir, script, &[]);
    let (code_mounted, mounted) = run_step(&ws.path(), script, &[]);
    assert_eq!(
        (code_plain, &plain),
        (code_mounted, &mounted),
        "{data:?}: the script's outcome differs through the mount"
    );
    let all = |_: &str| Keep::All;
    let (tp, tm) = (listing(&plain_dir, &all), listing(&ws.path(), &all));
    assert!(
        tp == tm,
        "{data:?}: the trees differ after the script\n{}",
        listing_diff(&tp, &tm)
    );
    plain
}

/// Compile C source into `dir/name` (outside the workspace): a probe the tests run.
fn compile(dir: &Path, name: &str, source: &str) -> PathBuf {
    require("cc", "gcc");
    let src = dir.join(format!("{name}.c"));
    fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args(["-Wall", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

// ---------------------------------------------------------------------------------------------
// 1. Programs in the workspace run
// ---------------------------------------------------------------------------------------------

/// Every way a program that lives in the workspace gets run. Each line of output is compared
/// with the same script on a plain directory; the expected lines are also checked outright.
const RUN_PROGRAMS: &str = r#"
set -u
out() { sed 's/^.*: //'; }

# A copied binary (exec adds __FMODE_EXEC to the open), through a symlink and a hard link.
cp /bin/true t; ./t; echo "copied binary: $?"
ln -s t t-symlink; ./t-symlink; echo "through a symlink: $?"
ln t t-hardlink; ./t-hardlink; echo "through a hard link: $?"
mkdir bin; cp /bin/echo bin/say; PATH="$PWD/bin:$PATH" say "found on PATH"

# Scripts with a shebang: sh, env python3, and one without the execute bit.
printf '#!/bin/sh\necho "sh script $0 $*"\n' > s.sh; chmod +x s.sh; ./s.sh a b; echo "sh script: $?"
printf '#!/usr/bin/env python3\nimport sys\nprint("python script", sys.argv[1:])\n' > p.py
chmod 755 p.py; ./p.py x y; echo "python script: $?"
printf '#!/bin/sh\necho never\n' > noexec.sh; chmod 644 noexec.sh
./noexec.sh 2>&1 | out; echo "not executable: ${PIPESTATUS[0]}"

# Compiled here and run (as `cargo run` does), with a shared library mapped executable.
printf '#include <stdio.h>\nint foo(void);\nint main(void) { printf("foo is %%d\\n", foo()); return 3; }\n' > main.c
printf 'int foo(void) { return 42; }\n' > foo.c
cc -shared -fPIC -o libfoo.so foo.c && cc -o main main.c -L. -lfoo
LD_LIBRARY_PATH=. ./main; echo "compiled here: $?"

# A ./configure-like loop: write a program, link it, run it at once, remove it.
for i in 1 2 3 4 5 6; do
  printf 'int main(void) { return %d; }\n' $i > conftest.c
  cc -o conftest conftest.c && ./conftest; printf '%s ' $?
  rm -f conftest conftest.c
done; echo "(configure-like)"

# A running program cannot be opened for writing, nor a program open for writing run.
cp /bin/sleep sl; ./sl 30 & pid=$!
for i in $(seq 1000); do [ "$(readlink /proc/$pid/exe)" = "$PWD/sl" ] && break; sleep 0.02; done
( exec 3>>sl ) 2>&1 | out; echo "write to a running program: ${PIPESTATUS[0]}"
kill $pid; wait $pid; echo "stopped: $?"
exec 4>>t; ./t 2>&1 | out; echo "run a program open for writing: ${PIPESTATUS[0]}"; exec 4>&-

# fexecve: from an O_PATH fd, and a script from an O_CLOEXEC fd (ENOENT, as on disk: the
# interpreter cannot reopen /dev/fd/N once exec closed it).
python3 - <<'EOF'
import os
def fexec(path, flags, argv, inheritable=False):
    fd = os.open(path, flags)  # Python opens with O_CLOEXEC unless told otherwise
    os.set_inheritable(fd, inheritable)
    pid = os.fork()
    if pid == 0:
        try:
            os.execve(fd, argv, {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "."})
        except OSError as e:
            print("fexecve", path, "failed:", os.strerror(e.errno), flush=True)
            os._exit(99)
    print("fexecve", path, "status", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
fexec("t", os.O_PATH, ["t"])
fexec("main", os.O_RDONLY, ["main"])
fexec("s.sh", os.O_RDONLY | os.O_CLOEXEC, ["s.sh"])
fexec("s.sh", os.O_RDONLY, ["s.sh", "kept fd"], inheritable=True)
EOF
echo done
"#;

fn programs_run(data: Data) {
    require("cc", "gcc");
    require("python3", "python3");
    let mut ws = Workspace::new();
    mount(&mut ws, data);
    let plain = compare_script(&ws, data, RUN_PROGRAMS);
    // The plain directory's outcome is what a disk gives: check it is what this test means.
    for expected in [
        "copied binary: 0",
        "through a symlink: 0",
        "through a hard link: 0",
        "found on PATH",
        "sh script ./s.sh a b",
        "python script ['x', 'y']",
        "Permission denied",
        "not executable: 126",
        "foo is 42",
        "compiled here: 3",
        "1 2 3 4 5 6 (configure-like)",
        "Text file busy",
        "write to a running program: 1",
        "run a program open for writing: 126",
        "fexecve t status 0",
        "fexecve main status 3",
        "fexecve s.sh failed: No such file or directory",
        "kept fd",
        "done",
    ] {
        assert!(
            plain.contains(expected),
            "expected {expected:?} in the outcome:\n{plain}"
        );
    }
}

#[test]
fn programs_in_the_workspace_run_with_passthrough() {
    programs_run(Data::Passthrough);
}

#[test]
fn programs_in_the_workspace_run_without_passthrough() {
    programs_run(Data::Writeback);
}

/// Every open flag the kernel can pass, each on a fresh case in the directory given: one line
/// per case with the outcome (ok or the errno's name), the flags the open file reports, its
/// close-on-exec bit and the data read or written.
const OPEN_PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* glibc defines O_LARGEFILE as 0 on 64-bit machines: the kernel's value. */
#define KO_LARGEFILE 0100000

static const char *err(int e) {
  static char b[64];
  snprintf(b, sizeof b, "E%d(%s)", e, strerror(e));
  return b;
}
static void fl(int fd) {
  int f = fcntl(fd, F_GETFL), d = fcntl(fd, F_GETFD);
  printf(" getfl=%o cloexec=%d", f & (O_ACCMODE|O_APPEND|O_NONBLOCK|O_SYNC|O_DSYNC|O_DIRECT|
         O_NOATIME|KO_LARGEFILE|O_PATH|O_DIRECTORY|O_ASYNC), d & FD_CLOEXEC);
}
static void show(const char *path) {
  struct stat st; char buf[4097];
  if (lstat(path, &st) < 0) { printf(" [%s %s]\n", path, err(errno)); return; }
  int fd = open(path, O_RDONLY|O_NOFOLLOW);
  ssize_t n = fd >= 0 ? pread(fd, buf, 4096, 0) : -1;
  unsigned sum = 0;
  for (ssize_t i = 0; i < n; i++) sum = sum * 31 + (unsigned char)buf[i];
  if (fd >= 0) close(fd);
  printf(" [%s mode=%o size=%lld head4k=%zd sum=%u]\n", path, st.st_mode, (long long)st.st_size, n, sum);
}
static int op(const char *name, const char *path, int flags) {
  int fd = open(path, flags, 0640);
  printf("%s: open=%s", name, fd < 0 ? err(errno) : "ok");
  if (fd >= 0) fl(fd);
  return fd;
}
static void rd(int fd, size_t n) {
  char b[64] = {0}; if (n > 63) n = 63;
  ssize_t r = read(fd, b, n);
  if (r < 0) printf(" read=%s", err(errno)); else printf(" read=%zd '%s'", r, b);
}
static void wr(int fd, const char *s) {
  ssize_t r = write(fd, s, strlen(s));
  if (r < 0) printf(" write=%s", err(errno)); else printf(" write=%zd", r);
}
static void end(int fd) { if (fd >= 0) close(fd); printf("\n"); }

int main(int argc, char **argv) {
  if (argc < 2 || chdir(argv[1]) < 0) { perror("chdir"); return 2; }
  umask(022);
  char *page = NULL;
  if (posix_memalign((void **)&page, 4096, 8192)) return 2;
  for (int i = 0; i < 8192; i++) page[i] = 'a' + i % 26;
  int fd = open("f", O_WRONLY|O_CREAT|O_TRUNC, 0644);
  if (fd < 0 || write(fd, page, 8192) != 8192) { perror("f"); return 2; }
  close(fd);
  if (symlink("f", "l") || symlink("newtarget", "dangling") || mkdir("d", 0755) || mkfifo("fifo", 0644)) {
    perror("setup"); return 2;
  }

  fd = op("rdonly", "f", O_RDONLY); rd(fd, 5); end(fd);
  fd = op("path", "f", O_PATH); rd(fd, 5);
  if (fd >= 0) { struct stat st; int r = fstat(fd, &st); printf(" fstat=%s size=%lld", r ? err(errno) : "ok", r ? -1LL : (long long)st.st_size); }
  end(fd);
  fd = op("path_nofollow_symlink", "l", O_PATH|O_NOFOLLOW);
  if (fd >= 0) { char t[64] = {0}; struct stat st; fstat(fd, &st); printf(" islnk=%d", S_ISLNK(st.st_mode));
    ssize_t n = readlinkat(fd, "", t, 63); printf(" readlink=%s", n < 0 ? err(errno) : t); }
  end(fd);
  fd = op("path_dir_as_dirfd", "d", O_PATH|O_DIRECTORY);
  if (fd >= 0) { int c = openat(fd, "made", O_WRONLY|O_CREAT|O_EXCL, 0600); printf(" openat=%s", c < 0 ? err(errno) : "ok");
    if (c >= 0) { wr(c, "via an O_PATH dirfd"); close(c); } }
  end(fd); show("d/made");

  fd = op("direct_read", "f", O_RDONLY|O_DIRECT);
  if (fd >= 0) { memset(page, 0, 8192); ssize_t r = read(fd, page, 4096); printf(" read=%s", r < 0 ? err(errno) : "ok");
    if (r >= 0) printf(" n=%zd head='%.8s'", r, page); }
  end(fd);
  fd = op("direct_write", "f", O_RDWR|O_DIRECT);
  if (fd >= 0) { memset(page, 'D', 4096); ssize_t r = pwrite(fd, page, 4096, 4096); printf(" pwrite=%s", r < 0 ? err(errno) : "ok");
    memset(page, 0, 4096); r = pread(fd, page, 4096, 4096); printf(" pread=%zd '%.4s'", r, page); }
  end(fd); show("f");
  fd = op("direct_create", "direct_new", O_WRONLY|O_CREAT|O_EXCL|O_DIRECT);
  if (fd >= 0) { memset(page, 'N', 4096); ssize_t r = write(fd, page, 4096); printf(" write=%s", r < 0 ? err(errno) : "ok"); }
  end(fd); show("direct_new");
  fd = op("direct_sync_write", "f", O_WRONLY|O_DIRECT|O_SYNC);
  if (fd >= 0) { memset(page, 'S', 4096); ssize_t r = pwrite(fd, page, 4096, 0); printf(" pwrite=%s", r < 0 ? err(errno) : "ok"); }
  end(fd); show("f");
  fd = op("direct_read_at_eof", "f", O_RDONLY|O_DIRECT);
  if (fd >= 0) { ssize_t r = pread(fd, page, 4096, 8192); printf(" pread=%s", r < 0 ? err(errno) : r == 0 ? "0" : "data"); }
  end(fd);

  fd = op("noatime", "f", O_RDONLY|O_NOATIME); rd(fd, 5); end(fd);
  fd = op("largefile", "f", O_RDONLY|KO_LARGEFILE);
  if (fd >= 0) { off_t o = lseek(fd, (off_t)5 << 30, SEEK_SET); printf(" lseek=%lld", (long long)o); rd(fd, 5); }
  end(fd);
  fd = op("cloexec", "f", O_RDONLY|O_CLOEXEC); end(fd);
  fd = op("no_cloexec", "f", O_RDONLY); end(fd);
  fd = op("sync", "f", O_WRONLY|O_SYNC); wr(fd, "sync"); end(fd); show("f");
  fd = op("dsync", "f", O_WRONLY|O_DSYNC); wr(fd, "DSYNC"); end(fd); show("f");
  fd = op("append", "f", O_WRONLY|O_APPEND);
  if (fd >= 0) { lseek(fd, 0, SEEK_SET); wr(fd, "APPENDED"); ssize_t r = pwrite(fd, "PW", 2, 0); printf(" pwrite=%zd", r); }
  end(fd); show("f");
  fd = op("append_rdwr", "f", O_RDWR|O_APPEND); rd(fd, 4); wr(fd, "+"); rd(fd, 4);
  if (fd >= 0) printf(" offset=%lld", (long long)lseek(fd, 0, SEEK_CUR));
  end(fd); show("f");
  fd = op("nonblock", "f", O_RDONLY|O_NONBLOCK); rd(fd, 4); end(fd);
  fd = op("fifo_nonblock_rd", "fifo", O_RDONLY|O_NONBLOCK); rd(fd, 4); end(-1);
  { int w = op("fifo_nonblock_wr_with_reader", "fifo", O_WRONLY|O_NONBLOCK); wr(w, "pipe"); if (w >= 0) close(w); rd(fd, 4); end(fd); }
  fd = op("fifo_nonblock_wr_no_reader", "fifo", O_WRONLY|O_NONBLOCK); end(fd);
  fd = op("async", "f", O_RDONLY|O_ASYNC); end(fd);
  fd = op("noctty", "f", O_RDONLY|O_NOCTTY); end(fd);
  fd = op("excl_no_creat", "f", O_RDONLY|O_EXCL); end(fd);
  fd = op("creat_excl_exists", "f", O_WRONLY|O_CREAT|O_EXCL); end(fd);
  fd = op("creat_excl_new", "new", O_WRONLY|O_CREAT|O_EXCL); wr(fd, "new"); end(fd); show("new");
  fd = op("creat_existing", "new", O_RDWR|O_CREAT); rd(fd, 3); end(fd);
  fd = op("creat_dangling_symlink", "dangling", O_WRONLY|O_CREAT); wr(fd, "through a link"); end(fd); show("newtarget");
  fd = op("creat_excl_symlink", "l", O_WRONLY|O_CREAT|O_EXCL); end(fd);
  fd = op("nofollow_symlink", "l", O_RDONLY|O_NOFOLLOW); end(fd);
  fd = op("follow_symlink", "l", O_RDONLY); rd(fd, 3); end(fd);
  fd = op("directory_on_file", "f", O_RDONLY|O_DIRECTORY); end(fd);
  fd = op("directory_on_dir", "d", O_RDONLY|O_DIRECTORY); end(fd);
  fd = op("rdwr_on_dir", "d", O_RDWR); end(fd);
  fd = op("creat_trailing_slash", "d/", O_WRONLY|O_CREAT); end(fd);
  fd = op("creat_missing_parent", "nodir/x", O_WRONLY|O_CREAT); end(fd);
  fd = op("trunc", "new", O_WRONLY|O_TRUNC); end(fd); show("new");
  int w = open("new", O_WRONLY); if (w >= 0) { wr(w, "again"); close(w); } printf("\n");
  fd = op("rdonly_trunc", "new", O_RDONLY|O_TRUNC); rd(fd, 5); end(fd); show("new");
  chmod("new", 0444);
  fd = op("write_readonly_mode_as_root", "new", O_WRONLY); wr(fd, "root"); end(fd); show("new");
  fd = op("creat_all_flags", "all", O_RDWR|O_CREAT|O_EXCL|O_SYNC|O_DSYNC|O_NOATIME|O_CLOEXEC|O_NONBLOCK|KO_LARGEFILE|O_APPEND);
  wr(fd, "x"); end(fd); show("all");
  fd = op("creat_trunc_append", "new", O_WRONLY|O_CREAT|O_TRUNC|O_APPEND); wr(fd, "a"); wr(fd, "b"); end(fd); show("new");
  return 0;
}
"#;

fn open_flags(data: Data) {
    let tools = outside();
    let probe = compile(tools.path(), "openprobe", OPEN_PROBE);
    let mut ws = Workspace::new();
    mount(&mut ws, data);
    let run = |dir: &Path| {
        let out = Command::new(&probe).arg(dir).output().unwrap();
        assert!(
            out.status.success(),
            "the probe failed in {}:\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = run(&ws.plain());
    let mounted = run(&ws.path());
    for (p, m) in plain.lines().zip(mounted.lines()) {
        assert_eq!(
            p, m,
            "{data:?}: an open behaves differently through the mount (first line: plain dir)"
        );
    }
    assert_eq!(plain, mounted);
    // The cases did what they are meant to on the disk, so the comparison means something.
    for expected in [
        "path: open=ok getfl=10000000 cloexec=0 read=E9(Bad file descriptor) fstat=ok size=8192",
        "path_nofollow_symlink: open=ok getfl=10000000 cloexec=0 islnk=1 readlink=f",
        "openat=ok write=19",
        "direct_read: open=ok getfl=140000 cloexec=0 read=ok n=4096 head='abcdefgh'",
        "pwrite=ok pread=4096 'DDDD'",
        "direct_create: open=ok getfl=140001 cloexec=0 write=ok",
        "noatime: open=ok getfl=1100000",
        "largefile: open=ok getfl=100000 cloexec=0 lseek=5368709120 read=0",
        "cloexec: open=ok getfl=100000 cloexec=1",
        "sync: open=ok getfl=4110001",
        "dsync: open=ok getfl=110001",
        "append: open=ok getfl=102001 cloexec=0 write=8 pwrite=2",
        "fifo_nonblock_wr_no_reader: open=E6(",
        "creat_excl_exists: open=E17(",
        "nofollow_symlink: open=E40(",
        "creat_trailing_slash: open=E21(",
    ] {
        assert!(
            plain.contains(expected),
            "expected {expected:?} in the probe's output:\n{plain}"
        );
    }
    let all = |_: &str| Keep::All;
    let (tp, tm) = (listing(&ws.plain(), &all), listing(&ws.path(), &all));
    assert!(
        tp == tm,
        "{data:?}: the trees differ\n{}",
        listing_diff(&tp, &tm)
    );
}

#[test]
fn every_open_flag_behaves_as_on_disk_with_passthrough() {
    open_flags(Data::Passthrough);
}

#[test]
fn every_open_flag_behaves_as_on_disk_without_passthrough() {
    open_flags(Data::Writeback);
}

/// O_DIRECT's alignment rules: the disk refuses an unaligned buffer, offset or length with
/// EINVAL, and a program that probes for them (or is wrong about them) must see the same.
const DIRECT_ALIGNMENT_PROBE: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void show(const char *what, ssize_t r) {
  printf("%s: %s\n", what, r < 0 ? strerror(errno) : r == 0 ? "0" : "ok");
}
int main(int argc, char **argv) {
  if (argc < 2 || chdir(argv[1]) < 0) return 2;
  char *b;
  if (posix_memalign((void **)&b, 4096, 16384)) return 2;
  memset(b, 'x', 16384);
  int fd = open("u", O_RDWR|O_CREAT|O_TRUNC, 0644);
  if (fd < 0 || write(fd, b, 8192) != 8192) return 2;
  close(fd);
  fd = open("u", O_RDWR|O_DIRECT);
  if (fd < 0) { perror("open"); return 2; }
  show("aligned read", pread(fd, b, 4096, 0));
  show("read into an unaligned buffer", pread(fd, b + 1, 4096, 0));
  show("read at an unaligned offset", pread(fd, b, 4096, 1));
  show("read of an unaligned length", pread(fd, b, 100, 0));
  show("write from an unaligned buffer", pwrite(fd, b + 1, 4096, 0));
  show("write at an unaligned offset", pwrite(fd, b, 4096, 3));
  show("write of an unaligned length", pwrite(fd, b, 100, 0));
  return 0;
}
"#;

fn direct_alignment(data: Data) {
    let tools = outside();
    let probe = compile(tools.path(), "directprobe", DIRECT_ALIGNMENT_PROBE);
    let mut ws = Workspace::new();
    mount(&mut ws, data);
    let run = |dir: &Path| {
        let out = Command::new(&probe).arg(dir).output().unwrap();
        assert!(
            out.status.success(),
            "the probe failed in {}",
            dir.display()
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = run(&ws.plain());
    assert!(
        plain.contains("read into an unaligned buffer: Invalid argument"),
        "the disk underneath should refuse unaligned direct I/O:\n{plain}"
    );
    let mounted = run(&ws.path());
    match data {
        Data::Passthrough => assert_eq!(
            plain, mounted,
            "{data:?}: O_DIRECT's alignment rules differ through the mount (left: the disk)"
        ),
        // Without passthrough the caller's buffer never reaches the daemon, only its offset
        // and length: those are checked as the disk checks them; an unaligned buffer is
        // accepted (README, "What works through the mount").
        Data::Writeback => {
            let without_buffers = |s: &str| -> Vec<String> {
                s.lines()
                    .filter(|l| !l.contains("unaligned buffer"))
                    .map(str::to_string)
                    .collect()
            };
            assert_eq!(
                without_buffers(&plain),
                without_buffers(&mounted),
                "{data:?}: O_DIRECT's offset and length rules differ through the mount"
            );
            for line in mounted.lines().filter(|l| l.contains("unaligned buffer")) {
                assert!(line.ends_with(": ok"), "{line}");
            }
        }
    }
}

#[test]
fn o_direct_alignment_as_on_disk_with_passthrough() {
    direct_alignment(Data::Passthrough);
}

#[test]
fn o_direct_alignment_as_on_disk_without_passthrough() {
    direct_alignment(Data::Writeback);
}

// ---------------------------------------------------------------------------------------------
// 4. fsyncdir and O_TMPFILE
// ---------------------------------------------------------------------------------------------

/// The standard durable save, in the folder `dir`: write a temp file, fsync it, rename it over
/// the target, fsync the folder (both fsync and fdatasync). Fails if any step fails.
fn durable_save(dir: &Path, env: &[(&str, &str)], then: &str) {
    let script = format!(
        r#"
import os, signal, sys
d = sys.argv[1]
with open(os.path.join(d, "save.tmp"), "w") as f:
    f.write("saved durably\n"); f.flush(); os.fsync(f.fileno())
os.rename(os.path.join(d, "save.tmp"), os.path.join(d, "save.txt"))
with open(os.path.join(d, "new.txt"), "w") as f:
    f.write("a new file\n")
fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
os.fsync(fd)
os.fdatasync(fd)
os.close(fd)
{then}
"#
    );
    let out = python_command(dir, &script)
        .arg(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the durable save failed in {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// strace attached to the daemon, watching its fsyncs, with fds shown as paths.
struct Strace {
    child: std::process::Child,
    log: PathBuf,
}

impl Strace {
    fn attach(pid: i32, log: PathBuf) -> Strace {
        require("strace", "strace");
        let mut child = Command::new("strace")
            .args([
                "-f",
                "-y",
                "-e",
                "trace=fsync,fdatasync,syncfs,sync_file_range",
                "-o",
            ])
            .arg(&log)
            .args(["-p", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // strace says "Process N attached" once it watches; everything after that is seen.
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            let n = err.read_line(&mut line).unwrap();
            assert!(n > 0, "strace could not attach to the daemon (pid {pid})");
            if line.contains("attached") {
                break;
            }
        }
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while err.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        Strace { child, log }
    }

    /// Detach and return the syscalls seen.
    fn finish(mut self) -> String {
        self.stop();
        fs::read_to_string(&self.log).unwrap()
    }

    /// Stop strace (it detaches from the daemon on SIGINT) and reap it, once.
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: signalling our own child, which has not been reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
            let _ = self.child.wait();
        }
    }
}

impl Drop for Strace {
    fn drop(&mut self) {
        self.stop();
    }
}

fn fsyncdir_reaches_the_disk(data: Data) {
    require("python3", "python3");
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("sub")).unwrap();
    fs::write(ws.path().join("sub/save.txt"), "old\n").unwrap();
    let backing_sub = ws.path().canonicalize().unwrap().join("sub");
    mount(&mut ws, data);
    let tools = outside();
    // The save itself first, then only the folder's fsync is watched.
    durable_save(&ws.path().join("sub"), &[], "");
    let strace = Strace::attach(daemon_pid(&ws), tools.path().join("strace.log"));
    sh(
        &ws.path(),
        r#"python3 -c '
import os
fd = os.open("sub", os.O_RDONLY | os.O_DIRECTORY)
os.fsync(fd)
os.fdatasync(fd)
os.close(fd)'"#,
    );
    let calls = strace.finish();
    // The daemon opened the folder underneath from its own fd at opendir; strace -y shows that
    // fd's path, the backing folder (the same path as the mount point, seen from below).
    let on_dir = |call: &str| {
        calls.lines().any(|l| {
            l.contains(&format!("{call}("))
                && l.contains(&format!("<{}>", backing_sub.display()))
                && l.trim_end().ends_with("= 0")
        })
    };
    assert!(
        on_dir("fsync"),
        "{data:?}: fsync of a folder through the mount did not fsync the folder underneath; \
         the daemon's fsyncs:\n{calls}"
    );
    assert!(
        on_dir("fdatasync"),
        "{data:?}: fdatasync of a folder through the mount did not reach the folder underneath; \
         the daemon's fsyncs:\n{calls}"
    );
    assert_eq!(
        fs::read_to_string(ws.path().join("sub/save.txt")).unwrap(),
        "saved durably\n"
    );
}

#[test]
fn fsyncdir_fsyncs_the_folder_underneath_with_passthrough() {
    fsyncdir_reaches_the_disk(Data::Passthrough);
}

#[test]
fn fsyncdir_fsyncs_the_folder_underneath_without_passthrough() {
    fsyncdir_reaches_the_disk(Data::Writeback);
}

/// fsyncdir also makes the folder's history durable: a create held back for 500 ms is recorded
/// by it, so a daemon killed right after the save loses nothing (without it, the next mount
/// would find the file and record it as `external`, losing who made it).
#[test]
fn fsyncdir_makes_the_history_of_a_save_durable() {
    require("python3", "python3");
    let mut ws = Workspace::new();
    fs::create_dir(ws.path().join("sub")).unwrap();
    fs::write(ws.path().join("sub/save.txt"), "old\n").unwrap();
    mount(&mut ws, Data::Passthrough);
    let pid = daemon_pid(&ws);
    // Killed at once after the folder's fsync, well within the 500 ms a create is held back.
    durable_save(
        &ws.path().join("sub"),
        &[("REWIND_SESSION", "durable"), ("REWIND_AGENT", "saver")],
        &format!("os.kill({pid}, signal.SIGKILL)"),
    );
    assert!(
        wait_for(10, || !Path::new(&format!("/proc/{pid}")).exists()),
        "the daemon did not die"
    );
    mount(&mut ws, Data::Passthrough);
    for (path, kind) in [("sub/new.txt", "create"), ("sub/save.txt", "modify")] {
        let log = log_of(&ws, path);
        assert_eq!(log.len(), 1, "one change for {path}: {log:#?}");
        assert_eq!(log[0]["kind"], kind, "{path}: {log:#?}");
        assert_eq!(
            (log[0]["session"].as_str(), log[0]["agent"].as_str()),
            (Some("durable"), Some("saver")),
            "{path} must keep who made it across the crash: {log:#?}"
        );
    }
    assert_eq!(
        fs::read_to_string(ws.path().join("sub/save.txt")).unwrap(),
        "saved durably\n"
    );
}

/// O_TMPFILE through the mount, as on disk: the kernel sends FUSE_TMPFILE (opcode 51), which
/// rewind serves with an O_TMPFILE in the backing folder (fuser is vendored with the opcode
/// added). Every case gives what the disk gives: files with and without write access, with
/// O_EXCL (never linkable), on a file and on a missing folder; a file linked into place through
/// /proc/self/fd (the way an unprivileged program names an O_TMPFILE) has everything written to
/// it, before and after its name; unnamed ones leave nothing. In the history, the linked file is
/// one `create` with its whole content, and the unnamed ones are not there at all.
fn tmpfile(data: Data) {
    require("python3", "python3");
    let mut ws = Workspace::new();
    mount(&mut ws, data);
    fs::write(ws.path().join("file"), "x").unwrap();
    fs::write(ws.plain().join("file"), "x").unwrap();
    let probe = r#"
import ctypes, os, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
def attempt(path, flags):
    try:
        fd = os.open(path, flags, 0o600)
        os.write(fd, b"anonymous")
        os.close(fd)
        return "ok"
    except OSError as e:
        return os.strerror(e.errno)
def linked(d, flags, name):
    try:
        fd = os.open(d, flags, 0o640)
    except OSError as e:
        return os.strerror(e.errno)
    os.write(fd, b"before its name\n")
    # linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, name, AT_SYMLINK_FOLLOW)
    r = libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, os.path.join(d, name).encode(), 0x400)
    err = ctypes.get_errno()
    os.write(fd, b"after\n")
    os.close(fd)
    return "ok" if r == 0 else os.strerror(err)
d = sys.argv[1]
print("rdwr:", attempt(d, os.O_TMPFILE | os.O_RDWR))
print("wronly excl:", attempt(d, os.O_TMPFILE | os.O_WRONLY | os.O_EXCL))
print("rdonly:", attempt(d, os.O_TMPFILE | os.O_RDONLY))
print("on a file:", attempt(os.path.join(d, "file"), os.O_TMPFILE | os.O_RDWR))
print("missing folder:", attempt(os.path.join(d, "missing"), os.O_TMPFILE | os.O_RDWR))
print("linked:", linked(d, os.O_TMPFILE | os.O_RDWR, "named"))
print("linked excl:", linked(d, os.O_TMPFILE | os.O_RDWR | os.O_EXCL, "never"))
print("named:", repr(open(os.path.join(d, "named")).read()), oct(os.stat(os.path.join(d, "named")).st_mode & 0o7777))
with tempfile.TemporaryFile(dir=d) as f:
    f.write(b"temporary"); f.seek(0)
    print("TemporaryFile:", f.read().decode())
print("left behind:", sorted(os.listdir(d)))
"#;
    let run = |dir: &Path| ok(python_command(dir, probe).arg(dir).output().unwrap());
    let mounted = run(&ws.path());
    let plain = run(&ws.plain());
    assert_eq!(
        plain, mounted,
        "{data:?}: O_TMPFILE through the mount (left: the disk)"
    );
    assert!(mounted.contains("rdwr: ok"), "{mounted}");
    assert!(
        mounted.contains(r"named: 'before its name\nafter\n' 0o640"),
        "{mounted}"
    );
    assert!(
        mounted.contains("left behind: ['file', 'named']"),
        "{mounted}"
    );
    // In the history: `file`, and `named` as one create with all its content. The kernel
    // sends the last RELEASE after close(2) has returned, so under load the end of `named`'s
    // write may reach the daemon after this: wait (bounded) for two changes, then compare.
    let mut log = String::new();
    wait_for(10, || {
        log = rw_ok(&ws, &["log", "--json"]);
        log.lines().count() >= 2
    });
    let changes: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let paths: Vec<(&str, &str)> = changes
        .iter()
        .map(|c| (c["kind"].as_str().unwrap(), c["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        paths,
        [("create", "file"), ("create", "named")],
        "{data:?}: the history of O_TMPFILEs:\n{log}"
    );
    let shown = rw_ok(&ws, &["cat", "named"]);
    assert_eq!(shown, "before its name\nafter\n");
}

#[test]
fn o_tmpfile_works_as_on_disk_with_passthrough() {
    tmpfile(Data::Passthrough);
}

#[test]
fn o_tmpfile_works_as_on_disk_without_passthrough() {
    tmpfile(Data::Writeback);
}

// ---------------------------------------------------------------------------------------------
// 5. Real tools: the same flow on a plain directory and through the mount
// ---------------------------------------------------------------------------------------------

/// A repository of 32 commits with two distant commits, tags A and B, that differ in every way
/// git can check out: renames, deletes, mode changes both ways, symlinks changed, a folder
/// become a file, a file become a symlink, binary content, a new deep tree.
const MAKE_REPO: &str = r#"
set -e
export GIT_AUTHOR_NAME=T GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=T GIT_COMMITTER_EMAIL=t@example.com
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main src
cd src
n=0
commit() {
  n=$((n+1))
  export GIT_AUTHOR_DATE="2024-01-01T00:00:$(printf %02d $n)Z" GIT_COMMITTER_DATE="2024-01-01T00:00:$(printf %02d $n)Z"
  git add -A; git commit -q -m "$1"
}
mkdir -p src docs tools swap
for f in a b c d e; do printf 'int %s(void) { return 1; }\n' $f > src/$f.c; done
printf 'all:\n\tcc -o app src/*.c\n' > Makefile
printf '#!/bin/sh\necho run\n' > run.sh; chmod 755 run.sh
printf 'print("tool")\n' > tools/tool.py
for i in $(seq 1 40); do echo "old line $i"; done > docs/old.md
head -c 3000 /dev/urandom > data.bin
echo 'in a folder' > swap/inside
echo 'a file' > filething
ln -s src/a.c link
printf '*.o\nbuild/\n' > .gitignore
commit "A: the first layout"
git tag A
for i in $(seq 1 25); do
  echo "change $i" >> src/c.c
  if [ $((i % 5)) = 0 ]; then echo "note $i" > docs/note$i.md; fi
  commit "step $i"
done
git mv src lib
git rm -q docs/old.md
chmod 644 run.sh; chmod 755 tools/tool.py
ln -sfn lib/b.c link
rm -r swap; echo 'now a file' > swap
rm filething; ln -s lib filething
head -c 5000 /dev/urandom > data.bin
mkdir -p deep/er/est; echo leaf > deep/er/est/leaf
printf 'int b(void) { return 2; }\n' > lib/b.c
commit "B: renamed, deleted, modes, symlinks"
git tag B
for i in $(seq 1 5); do echo "after $i" >> lib/d.c; commit "after $i"; done
"#;

fn git_flow(data: Data) {
    require("git", "git");
    let tools = outside();
    sh(tools.path(), MAKE_REPO);
    let src = tools.path().join("src");
    let clone = format!(
        "git clone --no-hardlinks {} repo && git -C repo log --oneline | wc -l",
        src.display()
    );
    let steps = [
        clone.as_str(),
        "cd repo && git checkout A && git status --porcelain",
        "cd repo && git checkout B && git status --porcelain",
        "cd repo && git checkout A && git checkout main && git ls-files -s",
        "cd repo && echo edit >> lib/a.c && rm lib/e.c && echo new > untracked.txt && chmod 755 Makefile \
         && git status --porcelain",
        "cd repo && git stash && git status --porcelain && git stash list",
        "cd repo && git stash pop && git status --porcelain",
        "cd repo && git stash -u && git stash list && git status --porcelain --ignored",
        "cd repo && git stash pop && git status --porcelain",
        "cd repo && git reset --hard A && git status --porcelain",
        "cd repo && git reset --hard origin/main && git status --porcelain",
        "cd repo && touch x.o && mkdir -p build/sub && echo o > build/sub/out && echo u > u.txt \
         && git status --porcelain --ignored",
        "cd repo && git clean -fdx && git status --porcelain --ignored",
        "cd repo && git fsck --full --strict && git rev-parse HEAD A B",
    ];
    let flow = Flow {
        setup: &|_| {},
        steps: &steps,
        // Fixed identity and dates: stash commits and reflogs are then the same in both runs.
        env: vec![
            ("GIT_AUTHOR_NAME", "T".into()),
            ("GIT_AUTHOR_EMAIL", "t@example.com".into()),
            ("GIT_COMMITTER_NAME", "T".into()),
            ("GIT_COMMITTER_EMAIL", "t@example.com".into()),
            ("GIT_AUTHOR_DATE", "2024-02-01T00:00:00Z".into()),
            ("GIT_COMMITTER_DATE", "2024-02-01T00:00:00Z".into()),
            ("GIT_CONFIG_NOSYSTEM", "1".into()),
            ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
        ],
        // `.git/index` caches each file's stat data (inode numbers, device, ctime and mtime),
        // which necessarily differ between two runs; its size and everything else in .git
        // (objects, refs, reflogs, config with the probed core.filemode and core.symlinks)
        // are compared. `--no-hardlinks`: a clone on the source's own filesystem hard-links
        // its objects and one across filesystems (into the mount) copies them; both copy here
        // so that link counts compare.
        keep: &|rel| {
            if rel == "repo/.git/index" {
                Keep::NoContent
            } else {
                Keep::All
            }
        },
        content_every_step: true,
    };
    compare_flow(data, &flow);
}

#[test]
fn git_clone_checkout_stash_reset_clean_as_on_disk_with_passthrough() {
    git_flow(Data::Passthrough);
}

#[test]
fn git_clone_checkout_stash_reset_clean_as_on_disk_without_passthrough() {
    git_flow(Data::Writeback);
}

/// A local npm package with a `bin`, packed into a tarball outside the workspace.
fn npm_package(dir: &Path) -> PathBuf {
    require("node", "nodejs");
    require("npm", "npm");
    require("npx", "npm");
    let pkg = dir.join("pkg");
    fs::create_dir_all(pkg.join("bin")).unwrap();
    fs::write(
        pkg.join("package.json"),
        r#"{ "name": "hello-tool", "version": "1.0.0", "description": "a local tool",
  "license": "MIT", "bin": { "hello-tool": "bin/hello.js" } }
"#,
    )
    .unwrap();
    fs::write(
        pkg.join("bin/hello.js"),
        "#!/usr/bin/env node\nconsole.log('hello from the tool:', process.argv.slice(2).join(' '));\n",
    )
    .unwrap();
    fs::write(dir.join("npmrc"), "").unwrap();
    let out = tool_command(
        &pkg,
        &format!("npm pack --pack-destination {}", dir.display()),
        &[(
            "npm_config_userconfig".into(),
            dir.join("npmrc").display().to_string(),
        )],
    )
    .env("npm_config_cache", dir.join("npm-cache-pack"))
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "npm pack failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tgz = dir.join("hello-tool-1.0.0.tgz");
    assert!(tgz.exists(), "npm pack made no {}", tgz.display());
    tgz
}

fn npm_flow(data: Data) {
    let tools = outside();
    let tgz = npm_package(tools.path());
    let install = format!(
        "npm install {} --offline --no-audit --no-fund",
        tgz.display()
    );
    let steps = [
        r#"printf '{ "name": "app", "version": "1.0.0", "private": true }\n' > package.json"#,
        install.as_str(),
        "npx hello-tool a b",
        "npx --offline hello-tool c d",
        "./node_modules/.bin/hello-tool direct",
        "npm exec --offline -- hello-tool via npm exec",
        "npm ls --offline",
        "npm uninstall hello-tool --offline --no-audit --no-fund && test ! -e node_modules/.bin/hello-tool",
        install.as_str(),
        "npx hello-tool again",
        "cat package.json package-lock.json",
    ];
    let base = tools.path().display().to_string();
    let flow = Flow {
        setup: &|_| {},
        steps: &steps,
        // A cache of each run's own, and no user configuration.
        env: vec![
            ("npm_config_cache", format!("{base}/npm-cache-{{run}}")),
            ("npm_config_userconfig", format!("{base}/npmrc")),
            ("npm_config_update_notifier", "false".into()),
            ("npm_config_fund", "false".into()),
            ("npm_config_audit", "false".into()),
        ],
        // Nothing ignored: npm extracts with fixed modes, and the tarball is the same file.
        keep: &|_| Keep::All,
        content_every_step: true,
    };
    compare_flow(data, &flow);
}

#[test]
fn npm_install_of_a_local_tarball_and_npx_as_on_disk_with_passthrough() {
    npm_flow(Data::Passthrough);
}

#[test]
fn npm_install_of_a_local_tarball_and_npx_as_on_disk_without_passthrough() {
    npm_flow(Data::Writeback);
}

/// A wheel made by hand (no build backend, no network): a module with a console script.
const MAKE_WHEEL: &str = r#"
import base64, hashlib, sys, zipfile
files = {
    "greet/__init__.py": b"import sys\n\ndef main():\n    print('greetings:', ' '.join(sys.argv[1:]))\n    return 0\n",
    "greet-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: greet\nVersion: 1.0\nSummary: a local tool\n",
    "greet-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "greet-1.0.dist-info/entry_points.txt": b"[console_scripts]\ngreet = greet:main\n",
}
record = "greet-1.0.dist-info/RECORD"
lines = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines.append(f"{name},sha256={digest},{len(data)}")
lines.append(f"{record},,")
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, data in files.items():
        z.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data)
    z.writestr(zipfile.ZipInfo(record, (2024, 1, 1, 0, 0, 0)), "\n".join(lines) + "\n")
"#;

fn venv_flow(data: Data) {
    require_venv();
    let tools = outside();
    let wheel = tools.path().join("greet-1.0-py3-none-any.whl");
    ok(python_command(tools.path(), MAKE_WHEEL)
        .arg(&wheel)
        .output()
        .unwrap());
    let install = format!(".venv/bin/pip install --no-index {}", wheel.display());
    let steps = [
        "python3 -m venv .venv",
        install.as_str(),
        ".venv/bin/greet a b",
        ".venv/bin/python -c 'import greet; print(greet.__file__)'",
        ".venv/bin/pip show greet",
        ".venv/bin/pip uninstall -y greet && { .venv/bin/greet; echo \"after uninstall: $?\"; }",
        install.as_str(),
        ". .venv/bin/activate && greet through activate",
    ];
    let flow = Flow {
        setup: &|_| {},
        steps: &steps,
        env: vec![
            ("PIP_CONFIG_FILE", "/dev/null".into()),
            ("PIP_NO_CACHE_DIR", "1".into()),
            ("PIP_DISABLE_PIP_VERSION_CHECK", "1".into()),
            ("PIP_NO_INPUT", "1".into()),
        ],
        // Compiled bytecode (`*.pyc`) holds its source file's mtime, which necessarily differs
        // between two runs; its presence, mode and size are still compared.
        keep: &|rel| {
            if rel.ends_with(".pyc") {
                Keep::NoContent
            } else {
                Keep::All
            }
        },
        // A venv holds some 1,600 files: contents are compared after the last step.
        content_every_step: false,
    };
    compare_flow(data, &flow);
}

#[test]
fn venv_pip_install_of_a_local_wheel_and_its_script_as_on_disk_with_passthrough() {
    venv_flow(Data::Passthrough);
}

#[test]
fn venv_pip_install_of_a_local_wheel_and_its_script_as_on_disk_without_passthrough() {
    venv_flow(Data::Writeback);
}

/// A small C project: cc and run, then make with incremental rebuilds.
const MAKE_PROJECT: &str = r#"
printf '#include "util.h"\n#include <stdio.h>\nint main(void) { printf("%%d\\n", twice(21)); return 0; }\n' > main.c
printf 'int twice(int x);\n' > util.h
printf '#include "util.h"\nint twice(int x) { return 2 * x; }\n' > util.c
printf 'app: main.o util.o\n\tcc -o app main.o util.o\n%%.o: %%.c util.h\n\tcc -c -o $@ $<\nclean:\n\trm -f app *.o\n.PHONY: clean\n' > Makefile
"#;

fn make_flow(data: Data) {
    require("cc", "gcc");
    require("make", "make");
    let steps = [
        MAKE_PROJECT,
        "cc -o hello main.c util.c && ./hello && rm hello",
        "make",
        "./app",
        "make",
        "touch util.c && make",
        "make",
        "sed -i 's/2 \\* x/3 * x/' util.c && make && ./app",
        "touch util.h && make",
        "make clean && make && ./app",
    ];
    let flow = Flow {
        setup: &|_| {},
        steps: &steps,
        env: vec![],
        // Nothing ignored: cc output does not depend on when or where it ran.
        keep: &|_| Keep::All,
        content_every_step: true,
    };
    compare_flow(data, &flow);
}

#[test]
fn cc_and_make_with_incremental_rebuilds_as_on_disk_with_passthrough() {
    make_flow(Data::Passthrough);
}

#[test]
fn cc_and_make_with_incremental_rebuilds_as_on_disk_without_passthrough() {
    make_flow(Data::Writeback);
}

/// Edit each of `files` (made with mode 0640 before the mount) with vim and the given
/// options, on the plain directory and through the mount, and compare. vim skips its backup for
/// files under /tmp (`backupskip`), where tests live, so `backupskip=` gives every save here
/// what it does in a project anywhere else.
fn vim_flow(data: Data, files: &[(&str, &str)], last: &str) -> Workspace {
    require("vim", "vim");
    let setup = |dir: &Path| {
        for (f, _) in files {
            fs::write(dir.join(f), "one\ntwo\nthree\n").unwrap();
            fs::set_permissions(dir.join(f), fs::Permissions::from_mode(0o640)).unwrap();
        }
    };
    let edit = "-c '%s/two/TWO/' -c 'normal Gofour' -c wq";
    let mut steps: Vec<String> = files
        .iter()
        .map(|(f, how)| format!("vim --clean {how} {edit} {f} >/dev/null"))
        .collect();
    steps.push(last.to_string());
    let steps: Vec<&str> = steps.iter().map(String::as_str).collect();
    let flow = Flow {
        setup: &setup,
        steps: &steps,
        env: vec![],
        // Nothing ignored: the swap files vim makes are gone when it ends.
        keep: &|_| Keep::All,
        content_every_step: true,
    };
    let ws = compare_flow(data, &flow);
    for (f, _) in files {
        assert_eq!(
            fs::read_to_string(ws.path().join(f)).unwrap(),
            "one\nTWO\nthree\nfour\n",
            "{f}"
        );
    }
    ws
}

/// The history of `path` is exactly one change of `kind`, whose after state has mode 0640.
fn assert_one_change(ws: &Workspace, data: Data, path: &str, kind: &str) {
    let log = log_of(ws, path);
    let kinds: Vec<&str> = log.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [kind],
        "{data:?}: a vim save must give {path} exactly one {kind}: {log:#?}"
    );
    assert_eq!(log[0]["after"]["mode"], "640", "{log:#?}");
}

/// vim's saves, each way vim saves: its default (rename-away: the original renamed to
/// `FILE~`, the new content written, the backup deleted), explicitly rename-away
/// (`backupcopy=no`), in place after a backup copy (`backupcopy=yes`), and from ex mode
/// (`-es`, here with no backup). Each file's history is one `modify`.
fn vim_saves(data: Data) {
    let files = [
        ("default.txt", "--not-a-term -c 'set backupskip='"),
        (
            "renamed.txt",
            "--not-a-term -c 'set backupcopy=no backupskip='",
        ),
        (
            "inplace.txt",
            "--not-a-term -c 'set backupcopy=yes backupskip='",
        ),
        ("ex.txt", "-es"),
    ];
    let ws = vim_flow(
        data,
        &files,
        "cat default.txt renamed.txt inplace.txt ex.txt",
    );
    for (f, _) in files {
        assert_one_change(&ws, data, f, "modify");
    }
}

#[test]
fn vim_saves_are_one_modify_and_as_on_disk_with_passthrough() {
    vim_saves(Data::Passthrough);
}

#[test]
fn vim_saves_are_one_modify_and_as_on_disk_without_passthrough() {
    vim_saves(Data::Writeback);
}

/// vim with `set backup` (and its backup in the file's folder, vim's default `backupdir`)
/// renames the original away to `FILE~` and keeps it. What the user did is: FILE modified,
/// FILE~ created with the old content; the history should say so (a `modify` of the file, as
/// the spec promises for a save), rather than a rename of the file away and a `create` of it.
fn vim_save_keeping_a_backup(data: Data) {
    let files = [(
        "kept.txt",
        "--not-a-term -c 'set backup backupcopy=no backupskip='",
    )];
    let ws = vim_flow(data, &files, "cat kept.txt kept.txt~");
    assert_eq!(
        fs::read_to_string(ws.path().join("kept.txt~")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert_one_change(&ws, data, "kept.txt", "modify");
    assert_one_change(&ws, data, "kept.txt~", "create");
}

#[test]
fn vim_save_keeping_a_backup_is_a_modify_and_a_create_with_passthrough() {
    vim_save_keeping_a_backup(Data::Passthrough);
}

#[test]
fn vim_save_keeping_a_backup_is_a_modify_and_a_create_without_passthrough() {
    vim_save_keeping_a_backup(Data::Writeback);
}
