//! The systemd units in systemd/: verified with `systemd-analyze verify`, and their command lines
//! run the way systemd runs them (as the unit's user, with its capabilities, with a
//! NOTIFY_SOCKET), since these machines have no systemd to start them. Also: several workspaces
//! mounted at once, and rewind as a real non-root user.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{REWIND, is_mounted, wait_for};

const NOBODY: u32 = 65534;

fn unit(which: &str) -> String {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("systemd/{which}/rewind@.service"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The values of `key` in `section` (comments and other sections skipped).
fn directive(unit: &str, section: &str, key: &str) -> Vec<String> {
    let mut current = "";
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            current = line;
            continue;
        }
        if current == format!("[{section}]")
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            out.push(v.trim().to_string());
        }
    }
    out
}

fn systemd_analyze() -> bool {
    Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn units_pass_systemd_verify_and_keep_the_mount_visible() {
    for which in ["user", "system"] {
        let text = unit(which);
        assert_eq!(directive(&text, "Service", "Type"), ["notify"], "{which}");
        assert_eq!(
            directive(&text, "Service", "Restart"),
            ["on-failure"],
            "{which}"
        );
        let exec = directive(&text, "Service", "ExecStart");
        assert_eq!(exec.len(), 1);
        assert!(
            exec[0].ends_with("rewind mount --foreground %f"),
            "{which}: {exec:?}"
        );
        // Nothing that gives the service its own mount namespace or stops setuid fusermount3.
        for key in [
            "PrivateTmp",
            "PrivateMounts",
            "PrivateDevices",
            "ProtectSystem",
            "ProtectHome",
            "ReadOnlyPaths",
            "InaccessiblePaths",
            "TemporaryFileSystem",
            "BindPaths",
            "RootDirectory",
            "MountFlags",
            "NoNewPrivileges",
        ] {
            assert!(
                directive(&text, "Service", key).is_empty(),
                "{which} unit sets {key}"
            );
        }
    }
    if !systemd_analyze() {
        eprintln!("systemd-analyze is not installed: unit verification not run");
        return;
    }
    for which in ["user", "system"] {
        let dir = tempfile::tempdir().unwrap();
        // verify checks that the programs exist: point the units at this build.
        let text = unit(which)
            .replace("%h/.local/bin/rewind", REWIND)
            .replace("/usr/local/bin/rewind", REWIND);
        std::fs::write(dir.path().join("rewind@.service"), text).unwrap();
        let runtime = dir.path().join("runtime");
        std::fs::create_dir(&runtime).unwrap();
        let mut cmd = Command::new("systemd-analyze");
        if which == "user" {
            cmd.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
        }
        let out = cmd
            .args(["verify", "--man=no"])
            .arg(dir.path().join("rewind@home-alice-project.service"))
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "{which} unit: systemd-analyze verify says:\n{stderr}"
        );
    }
}

/// A tree a non-root user can use: the rewind binary, a home, and a workspace, all theirs.
struct UserTree {
    root: tempfile::TempDir,
}

impl UserTree {
    fn new() -> UserTree {
        let fuse = std::fs::metadata("/dev/fuse").expect("/dev/fuse");
        assert_eq!(
            fuse.permissions().mode() & 0o666,
            0o666,
            "/dev/fuse must be usable by every user (crw-rw-rw-, as Debian's udev rule makes \
             it); scripts/setup fixes it"
        );
        let root = tempfile::Builder::new()
            .prefix("rewind-user-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["bin", "home", "ws", "notify"] {
            std::fs::create_dir(root.path().join(sub)).unwrap();
        }
        for sub in ["home", "ws", "notify"] {
            std::os::unix::fs::chown(root.path().join(sub), Some(NOBODY), Some(NOBODY)).unwrap();
        }
        // The build lives under root's home, which other users cannot enter.
        let bin = root.path().join("bin/rewind");
        if std::fs::hard_link(REWIND, &bin).is_err() {
            std::fs::copy(REWIND, &bin).unwrap();
        }
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        UserTree { root }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.root.path().join(sub)
    }

    /// `argv` as user nobody, as systemd starts a unit's command (`User=`, its HOME, and with
    /// `cap_sys_admin` the unit's `AmbientCapabilities=CAP_SYS_ADMIN`).
    fn as_user(&self, cap_sys_admin: bool, argv: &[&str]) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .arg("--clear-groups");
        if cap_sys_admin {
            cmd.args(["--inh-caps=+sys_admin", "--ambient-caps=+sys_admin"]);
        }
        cmd.arg("--")
            .args(argv)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path("home"))
            .env("USER", "nobody")
            .current_dir(self.root.path());
        cmd
    }

    /// A shell script as nobody, in the workspace.
    fn sh(&self, script: &str) -> String {
        // Entered as nobody: root is not let into a user's mount.
        let script = format!("cd {}\n{script}", self.path("ws").display());
        let out = self
            .as_user(false, &["bash", "-ec", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "script failed:\n{script}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `rewind ARGS` as nobody.
    fn rewind(&self, args: &[&str]) -> String {
        let bin = self.path("bin/rewind");
        let mut argv = vec![bin.to_str().unwrap()];
        argv.extend(args);
        let out = self.as_user(false, &argv).output().unwrap();
        assert!(
            out.status.success(),
            "rewind {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl UserTree {
    /// `rewind mount` of the workspace as nobody: with passthrough (CAP_SYS_ADMIN) or with the
    /// writeback cache.
    fn mount(&self, passthrough: bool) {
        let (bin, ws) = (self.path("bin/rewind"), self.path("ws"));
        let out = self
            .as_user(
                passthrough,
                &[bin.to_str().unwrap(), "mount", ws.to_str().unwrap()],
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {out:?}");
    }

    fn unmount(&self) {
        let ws = self.path("ws");
        self.rewind(&["unmount", ws.to_str().unwrap()]);
        assert!(!is_mounted(&ws));
    }

    /// `rewind log --json PATH` as nobody: the changes, and the text they were read from.
    fn log(&self, path: &str) -> (Vec<serde_json::Value>, String) {
        let ws = self.path("ws");
        let log = self.rewind(&["-C", ws.to_str().unwrap(), "log", "--json", path]);
        let changes = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (changes, log)
    }

    /// The last change of `path` leaves it holding `content`.
    fn assert_last_is(&self, path: &str, content: &[u8]) {
        let (changes, log) = self.log(path);
        let hash = rewind::store::Hash::of(content).to_string();
        assert!(
            changes
                .last()
                .is_some_and(|c| c["after"]["hash"] == hash.as_str()),
            "{path}: its last change does not leave {:?}: {log}",
            String::from_utf8_lossy(content)
        );
    }
}

impl Drop for UserTree {
    fn drop(&mut self) {
        let ws = self.path("ws");
        if is_mounted(&ws) {
            let _ = Command::new("umount").arg("-l").arg(&ws).status();
        }
    }
}

/// `chmod 000 f; chmod 644 f` through a mount whose daemon is not root: the second chmod is
/// recorded with the content the file had (it did not change), not refused because the daemon
/// may no longer read the file (which left it stuck unreadable until the unmount); so are a
/// link to it and a chmod after a chown, which change its ctime too.
#[test]
fn a_file_chmodded_unreadable_by_a_non_root_daemon_can_be_chmodded_back() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, name) in [(false, "locked-cached"), (true, "locked-passthrough")] {
        tree.mount(passthrough);
        tree.sh(&format!("echo 'mine' > {name}"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh(&format!(
            "chmod 000 {name}\ntest ! -r {name}\nln {name} {name}.2\nchown nobody {name}\n\
             chmod 600 {name}\nchmod 000 {name}\nchmod 644 {name}\necho more >> {name}"
        ));
        assert_eq!(tree.sh(&format!("cat {name}")), "mine\nmore\n", "{name}");
        tree.rewind(&["-C", ws_arg, "sync"]);
        let (changes, log) = tree.log(name);
        let kinds: Vec<&str> = changes
            .iter()
            .map(|c| c["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["create", "chmod", "chmod", "chmod", "chmod", "modify"],
            "{name}: {log}"
        );
        let mine = rewind::store::Hash::of(b"mine\n").to_string();
        let modes: Vec<(&str, &str)> = changes[1..5]
            .iter()
            .map(|c| {
                assert_eq!(c["before"]["hash"], mine.as_str(), "{name}: {log}");
                assert_eq!(c["after"]["hash"], mine.as_str(), "{name}: {log}");
                (
                    c["before"]["mode"].as_str().unwrap(),
                    c["after"]["mode"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            modes,
            [("644", "0"), ("0", "600"), ("600", "0"), ("0", "644")],
            "{name}: {log}"
        );
        let (links, link) = tree.log(&format!("{name}.2"));
        assert_eq!(links[0]["kind"], "link", "{name}: {link}");
        assert_eq!(links[0]["after"]["hash"], mine.as_str(), "{name}: {link}");
        tree.unmount();
    }
}

/// A file its owner may write but a daemon that is not root may not read (mode 0200): writing
/// it again through the mount is refused (`EACCES`) rather than left out of the history, with
/// and without passthrough, by `open` and by `open(O_CREAT)` alike; the history's last version
/// is then the file's content. With passthrough the write went through, and the history kept
/// the content from before it.
#[test]
fn a_write_a_non_root_daemon_could_not_record_is_refused() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, name) in [(false, "w-cached"), (true, "w-passthrough")] {
        tree.mount(passthrough);
        // One made write-only as it is created, one chmodded so after it was recorded.
        tree.sh(&format!(
            "python3 -c \"import os; fd = os.open('{name}', os.O_CREAT | os.O_WRONLY, 0o200); \
             os.write(fd, b'one\\n'); os.close(fd)\"\n\
             echo one > {name}.2"
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let said = tree.sh(&format!(
            "chmod 200 {name}.2\n\
             python3 -c \"\nimport os\nfor path, flags in [('{name}', os.O_WRONLY | os.O_APPEND), \
             ('{name}.2', os.O_WRONLY | os.O_CREAT | os.O_APPEND)]:\n    \
             try:\n        fd = os.open(path, flags)\n    \
             except PermissionError:\n        print(path, 'refused')\n        continue\n    \
             os.write(fd, b'two\\n')\n    os.close(fd)\n    print(path, 'written')\"\n\
             chmod 644 {name} {name}.2"
        ));
        assert_eq!(
            said,
            format!("{name} refused\n{name}.2 refused\n"),
            "{name}"
        );
        tree.rewind(&["-C", ws_arg, "sync"]);
        for path in [name.to_string(), format!("{name}.2")] {
            let content = tree.sh(&format!("cat {path}"));
            assert_eq!(content, "one\n", "{path}");
            let (changes, log) = tree.log(&path);
            let last = changes.last().unwrap();
            let hash = rewind::store::Hash::of(content.as_bytes()).to_string();
            assert_eq!(last["after"]["hash"], hash.as_str(), "{path}: {log}");
            assert_eq!(last["after"]["mode"], "644", "{path}: {log}");
        }
        tree.unmount();
    }
}

/// A unit's main process, started with a NOTIFY_SOCKET we read, killed on drop.
struct Service {
    child: Child,
    notify: UnixDatagram,
}

impl Service {
    fn start(mut cmd: Command, socket: &Path) -> Service {
        let _ = std::fs::remove_file(socket);
        let notify = UnixDatagram::bind(socket).unwrap();
        // The service runs as another user: let it send.
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o777)).unwrap();
        notify
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let child = cmd
            .env("NOTIFY_SOCKET", socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Service { child, notify }
    }

    /// The next notification that has `field`, e.g. `READY=1`; panics after 30 s.
    fn expect(&mut self, field: &str) -> String {
        let mut buf = [0u8; 4096];
        loop {
            let n = match self.notify.recv(&mut buf) {
                Ok(n) => n,
                Err(e) => {
                    let _ = self.child.kill();
                    let out = std::mem::replace(&mut self.child, dummy()).wait_with_output();
                    panic!(
                        "no {field} from the service ({e}); its stderr:\n{}",
                        out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                            .unwrap_or_default()
                    );
                }
            };
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.lines().any(|l| l == field) {
                return msg;
            }
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }
}

fn dummy() -> Child {
    Command::new("true").spawn().unwrap()
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A unit's ExecStart, as argv with the specifiers systemd would fill in.
fn exec_start(unit: &str, workspace: &Path, home: &Path) -> Vec<String> {
    let line = directive(unit, "Service", "ExecStart").remove(0);
    line.split_whitespace()
        .map(|w| {
            w.replace("%h", home.to_str().unwrap())
                .replace("%f", workspace.to_str().unwrap())
        })
        .collect()
}

#[test]
fn the_user_unit_runs_as_a_plain_user_and_recovers_from_a_crash() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    tree.sh("echo first > kept.txt");
    // The unit runs %h/.local/bin/rewind: put this build there.
    let home_bin = tree.path("home/.local/bin");
    std::fs::create_dir_all(&home_bin).unwrap();
    std::fs::hard_link(tree.path("bin/rewind"), home_bin.join("rewind"))
        .or_else(|_| std::fs::copy(tree.path("bin/rewind"), home_bin.join("rewind")).map(|_| ()))
        .unwrap();
    std::os::unix::fs::chown(tree.path("home/.local"), Some(NOBODY), Some(NOBODY)).unwrap();
    let argv = exec_start(&unit("user"), &ws, &tree.path("home"));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let socket = tree.path("notify/sock");

    let mut service = Service::start(tree.as_user(false, &argv), &socket);
    let ready = service.expect("READY=1");
    assert!(ready.contains("STATUS=recording"), "{ready}");
    assert!(is_mounted(&ws));
    tree.sh("echo second >> kept.txt && sed -i s/first/one/ kept.txt && mkdir d && echo x > d/new");
    let status = tree.rewind(&["-C", ws.to_str().unwrap(), "status"]);
    assert!(status.contains("state: mounted"), "{status}");
    assert!(status.contains("data path: writeback cache"), "{status}");

    // systemctl stop: SIGTERM, then the process must unmount and exit 0.
    service.signal(libc::SIGTERM);
    service.expect("STOPPING=1");
    assert!(service.wait().success());
    assert!(!is_mounted(&ws));
    assert_eq!(
        std::fs::read_to_string(ws.join("kept.txt")).unwrap(),
        "one\nsecond\n"
    );

    // A crash, then the restart Restart=on-failure makes: the dead mount is cleared and the
    // history goes on from where it was.
    let mut service = Service::start(tree.as_user(false, &argv), &socket);
    service.expect("READY=1");
    tree.sh("echo third >> kept.txt");
    service.signal(libc::SIGKILL);
    assert!(!service.wait().success());
    let stale = tree.rewind(&["-C", ws.to_str().unwrap(), "status"]);
    assert!(stale.contains("stale"), "{stale}");
    let mut service = Service::start(tree.as_user(false, &argv), &socket);
    service.expect("READY=1");
    let log = tree.rewind(&["-C", ws.to_str().unwrap(), "log", "kept.txt"]);
    assert_eq!(log.lines().count(), 3, "{log}");
    assert_eq!(tree.sh("cat kept.txt"), "one\nsecond\nthird\n");
    let old = tree.rewind(&["-C", ws.to_str().unwrap(), "cat", "kept.txt", "--at", "0"]);
    assert_eq!(old, "first\n");
    service.signal(libc::SIGTERM);
    assert!(service.wait().success());
    assert!(!is_mounted(&ws));
}

#[test]
fn the_system_unit_runs_as_its_user_with_passthrough() {
    let unit = unit("system");
    assert_eq!(
        directive(&unit, "Service", "AmbientCapabilities"),
        ["CAP_SYS_ADMIN"]
    );
    // Its guard refuses root (%U is the unit's User=, 0 when none is set) and lets a user by.
    let pre = directive(&unit, "Service", "ExecStartPre").remove(0);
    let script = pre
        .strip_prefix("/bin/sh -c '")
        .and_then(|s| s.strip_suffix('\''))
        .expect("ExecStartPre=/bin/sh -c '...'");
    let guard = |uid: &str| {
        Command::new("/bin/sh")
            .arg("-c")
            .arg(
                script
                    .replace("%U", uid)
                    .replace("%i", "home-alice-project"),
            )
            .output()
            .unwrap()
    };
    let as_root = guard("0");
    assert!(!as_root.status.success());
    assert!(String::from_utf8_lossy(&as_root.stderr).contains("set User="));
    assert!(guard("1000").status.success());

    let tree = UserTree::new();
    let ws = tree.path("ws");
    let mut argv = exec_start(&unit, &ws, Path::new("/nonexistent"));
    assert_eq!(argv[0], "/usr/local/bin/rewind");
    argv[0] = tree.path("bin/rewind").to_str().unwrap().to_string();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut service = Service::start(tree.as_user(true, &argv), &tree.path("notify/sock"));
    service.expect("READY=1");
    tree.sh("head -c 3000000 /dev/urandom > big && echo hi > small && sed -i s/hi/ho/ small");
    let status = tree.rewind(&["-C", ws.to_str().unwrap(), "status"]);
    assert!(status.contains("data path: passthrough"), "{status}");
    // The history is the user's: in their home, owned by them.
    let data = tree.path("home/.local/share/rewind");
    let store = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap() != "mounts")
        .expect("a store under the user's home");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&store).unwrap().uid(), NOBODY);
    assert!(wait_for(10, || {
        tree.rewind(&["-C", ws.to_str().unwrap(), "log"])
            .lines()
            .count()
            == 3
    }));
    service.signal(libc::SIGTERM);
    service.expect("STOPPING=1");
    assert!(service.wait().success());
    assert!(!is_mounted(&ws));
}

#[test]
fn several_workspaces_each_have_their_own_store_and_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let rewind = |args: &[&str]| {
        let out = Command::new(REWIND)
            .args(args)
            .current_dir(dir.path())
            .env("XDG_DATA_HOME", &data)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    struct Unmount(Vec<PathBuf>);
    impl Drop for Unmount {
        fn drop(&mut self) {
            for ws in &self.0 {
                if is_mounted(ws) {
                    let _ = Command::new("umount").arg("-l").arg(ws).status();
                }
            }
        }
    }
    let names = ["alpha", "beta", "gamma"];
    let spaces: Vec<PathBuf> = names.iter().map(|n| dir.path().join(n)).collect();
    let _guard = Unmount(spaces.clone());
    let mut pids = Vec::new();
    for ws in &spaces {
        std::fs::create_dir(ws).unwrap();
        let (ok, out) = rewind(&["mount", ws.to_str().unwrap()]);
        assert!(ok, "{out}");
        pids.push(
            out.rsplit("daemon pid ")
                .next()
                .unwrap()
                .trim_end_matches([')', '\n'])
                .to_string(),
        );
    }
    pids.sort();
    pids.dedup();
    assert_eq!(pids.len(), 3, "one daemon each: {pids:?}");
    for (ws, name) in spaces.iter().zip(names) {
        std::fs::write(ws.join(format!("{name}.txt")), name).unwrap();
    }
    for (ws, name) in spaces.iter().zip(names) {
        assert!(wait_for(10, || {
            let (_, log) = rewind(&["-C", ws.to_str().unwrap(), "log"]);
            log.lines().count() == 1 && log.contains(&format!("{name}.txt"))
        }));
        let (_, status) = rewind(&["-C", ws.to_str().unwrap(), "status"]);
        let store = status
            .lines()
            .find_map(|l| l.strip_prefix("store: "))
            .unwrap()
            .to_string();
        assert!(
            store.contains(name) && store.starts_with(data.to_str().unwrap()),
            "{store}"
        );
    }
    // Outside any workspace, status lists them all.
    let (_, all) = rewind(&["status"]);
    for ws in &spaces {
        let line = all
            .lines()
            .find(|l| l.starts_with(ws.to_str().unwrap()))
            .unwrap_or_else(|| panic!("{} missing from:\n{all}", ws.display()));
        assert!(line.contains("  mounted"), "{line}");
    }
    for ws in &spaces[..2] {
        assert!(rewind(&["unmount", ws.to_str().unwrap()]).0);
    }
    let (_, all) = rewind(&["status"]);
    assert_eq!(all.matches("not mounted").count(), 2, "{all}");
    assert_eq!(all.matches("  mounted").count(), 1, "{all}");
    assert!(rewind(&["unmount", spaces[2].to_str().unwrap()]).0);
}

/// A new file its user made unreadable (`open(O_CREAT|O_WRONLY, 0)`, written, closed) in a
/// workspace a non-root daemon records: the daemon cannot open it by its name afterwards, so
/// its create is captured from the handle the daemon kept for it. With the writeback cache and
/// with passthrough (the handle the writer's open asked for is write-only). (The create was
/// dropped: the file was in the workspace and not in the history.)
#[test]
fn a_new_file_its_user_cannot_read_is_recorded_by_a_non_root_daemon() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, name) in [(false, "secret-cached"), (true, "secret-passthrough")] {
        tree.mount(passthrough);
        tree.sh(&format!(
            "python3 -c \"import os; fd = os.open('{name}', os.O_CREAT | os.O_WRONLY, 0); \
             os.write(fd, b'mine alone\\n'); os.close(fd)\"\n\
             test ! -r {name}"
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let (changes, log) = tree.log(name);
        assert_eq!(changes.len(), 1, "{name}: {log}");
        assert_eq!(changes[0]["kind"], "create", "{name}: {log}");
        let written = rewind::store::Hash::of(b"mine alone\n").to_string();
        assert_eq!(
            changes[0]["after"]["hash"],
            written.as_str(),
            "{name}: {log}"
        );
        // Its content is in the store (the user cannot read the file itself).
        let id = changes[0]["id"].as_u64().unwrap();
        assert_eq!(
            tree.sh(&format!("cat .rewind/versions/{name}/{id}")),
            "mine alone\n",
            "{name}"
        );
        tree.unmount();
    }
}

/// (hostile13) A file opened for writing while its owner and a daemon that is not root could
/// read it, made unreadable (mode 0200) before the writer writes and closes, through a
/// write-only and a read-write handle: the edit is recorded with what the writer left (read
/// through the handle the daemon opened read-write), with and without passthrough.
#[test]
fn an_edit_whose_file_was_made_unreadable_while_open_is_recorded_with_its_content() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, name) in [(false, "u-cached"), (true, "u-passthrough")] {
        tree.mount(passthrough);
        tree.sh(&format!("echo one > {name}.wo && echo one > {name}.rw"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh(&format!(
            "python3 -c \"\nimport os\n\
             for path, flags in [('{name}.wo', os.O_WRONLY | os.O_APPEND), \
             ('{name}.rw', os.O_RDWR | os.O_APPEND)]:\n    \
             fd = os.open(path, flags)\n    \
             os.chmod(path, 0o200)\n    \
             os.write(fd, b'two\\n')\n    \
             os.close(fd)\n\""
        ));
        tree.sh(&format!("chmod 644 {name}.wo {name}.rw"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        for path in [format!("{name}.wo"), format!("{name}.rw")] {
            let content = tree.sh(&format!("cat {path}"));
            assert_eq!(content, "one\ntwo\n", "{path}");
            let (changes, log) = tree.log(&path);
            let kinds: Vec<&str> = changes
                .iter()
                .map(|c| c["kind"].as_str().unwrap())
                .collect();
            assert_eq!(
                kinds,
                ["create", "chmod", "modify", "chmod"],
                "{path}: {log}"
            );
            let two = rewind::store::Hash::of(b"one\ntwo\n").to_string();
            assert_eq!(changes[2]["after"]["hash"], two.as_str(), "{path}: {log}");
            let id = changes[2]["id"].as_u64().unwrap();
            assert_eq!(
                tree.sh(&format!("cat .rewind/versions/{path}/{id}")),
                "one\ntwo\n"
            );
        }
        tree.unmount();
    }
}

/// (hostile13) A file open for writing (the daemon's handle on it is read-write) that its
/// owner makes unreadable (`chmod 000`) is renamed, linked and deleted through a mount whose
/// daemon is not root, each recorded with the file's content: its episode keeps a handle to
/// read it through (`Recorder::keep_reader`). It used to fail with `EIO` ("cannot record a
/// change, refusing the operation: NAME: Permission denied"): the cut read it by its name.
#[test]
fn a_file_open_for_writing_and_made_unreadable_can_be_renamed_linked_and_deleted() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, name) in [(false, "o-cached"), (true, "o-passthrough")] {
        tree.mount(passthrough);
        tree.sh(&format!(
            "echo one > {name}.mv && echo one > {name}.ln && echo one > {name}.rm"
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let said = tree.sh(&format!(
            "python3 -c \"\nimport os\n\
             for path, op in [('{name}.mv', lambda p: os.rename(p, p + '.moved')), \
             ('{name}.ln', lambda p: os.link(p, p + '.2')), ('{name}.rm', os.unlink)]:\n    \
             fd = os.open(path, os.O_WRONLY | os.O_APPEND)\n    \
             os.write(fd, b'two\\n')\n    \
             os.chmod(path, 0)\n    \
             try:\n        op(path)\n        print(path, 'done')\n    \
             except OSError as e:\n        print(path, e)\n    \
             os.write(fd, b'three\\n')\n    \
             os.close(fd)\n\"\n\
             chmod 644 {name}.*"
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        assert_eq!(
            said,
            format!("{name}.mv done\n{name}.ln done\n{name}.rm done\n"),
            "passthrough {passthrough}"
        );
        for path in [format!("{name}.mv.moved"), format!("{name}.ln.2")] {
            let content = tree.sh(&format!("cat {path}"));
            assert_eq!(content, "one\ntwo\nthree\n", "{path}");
            tree.assert_last_is(&path, content.as_bytes());
        }
        let (changes, log) = tree.log(&format!("{name}.rm"));
        let last = changes.last().unwrap();
        assert_eq!(last["kind"], "delete", "{log}");
        let two = rewind::store::Hash::of(b"one\ntwo\n").to_string();
        assert_eq!(last["before"]["hash"], two.as_str(), "{log}");
        tree.unmount();
    }
}

/// (hostile13) A folder its owner made unreadable (`chmod 000`) while the workspace was not
/// mounted: a mount whose daemon is not root refuses, naming the folder and what to do
/// (`Error::Unscannable`). It used to scan it as if it were empty: every file below it was
/// recorded as deleted by `external` (here `d/h`, which is still there with new content), and
/// a file made below it meanwhile (`d/m`) never entered the history. Either a clear refusal or
/// an exact history is right: a delete of a file that is there is neither.
#[test]
fn a_folder_made_unreadable_while_unmounted_is_not_recorded_as_emptied() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(false);
    tree.sh("mkdir d && echo one > d/h && echo one > d/k");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.unmount();
    // While not mounted: an edit, a delete and a new file below d, then d made unreadable.
    tree.sh("echo two >> d/h && rm d/k && echo new > d/m && chmod 000 d");
    let bin = tree.path("bin/rewind");
    let out = tree
        .as_user(false, &[bin.to_str().unwrap(), "mount", ws_arg])
        .output()
        .unwrap();
    if !out.status.success() {
        // Refused: it must say why, and name the folder.
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cannot scan d: Permission denied") && err.contains("make it readable"),
            "mount refused without naming d and what to do: {err}"
        );
        return;
    }
    tree.sh("chmod 755 d");
    tree.rewind(&["-C", ws_arg, "sync"]);
    let (changes, log) = tree.log("d/h");
    assert!(
        !changes.iter().any(|c| c["kind"] == "delete"),
        "d/h is there, yet the history says it was deleted: {log}"
    );
    tree.assert_last_is("d/h", b"one\ntwo\n");
    let (made, log) = tree.log("d/m");
    assert!(!made.is_empty(), "d/m is not in the history: {log}");
    tree.unmount();
}

/// (hostile13) With a daemon that is not root, a folder its owner makes unreadable (`chmod 000
/// d`) while a file below it is being written, or while its new file's create is still held
/// back: the edit's end is read through the handle being released, and the create waits,
/// held back with its id, until the folder is readable again (`Found::Hidden`). Both used to
/// be lost: the daemon could not look the file up by its path (`EACCES`), took it for gone
/// and recorded nothing, with no error logged. Here `d/f` ends "one\ntwo\n" and `d/new`
/// holds "new\n".
#[test]
fn a_change_below_a_folder_made_unreadable_meanwhile_is_not_lost() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, d) in [(false, "dc"), (true, "dp")] {
        tree.mount(passthrough);
        tree.sh(&format!("mkdir {d} && echo one > {d}/f"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        // An edit whose folder becomes unreadable before it ends; a new file whose folder
        // becomes unreadable while its create is held back.
        tree.sh(&format!(
            "python3 -c \"\nimport os\n\
             fd = os.open('{d}/f', os.O_WRONLY | os.O_APPEND)\n\
             os.chmod('{d}', 0)\n\
             os.write(fd, b'two\\n')\n\
             os.close(fd)\n\
             os.chmod('{d}', 0o755)\n\
             with open('{d}/new', 'w') as n:\n    n.write('new\\n')\n\
             os.chmod('{d}', 0)\n\""
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh(&format!("chmod 755 {d}"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.assert_last_is(&format!("{d}/f"), b"one\ntwo\n");
        tree.assert_last_is(&format!("{d}/new"), b"new\n");
        tree.unmount();
    }
}

/// (hostile14) With a daemon that is not root, a folder holding a new file whose create is
/// still held back is made unreadable (`chmod 000 d`), then renamed (`mv d e`, and its parent
/// `mv p q`): the renames must succeed, as they did before d4931e7, and the create be recorded
/// once the folder is readable again, at its new path. Since d4931e7 both renames fail with
/// `EIO`: the folder rename flushes the held-back creates below it first
/// (`flush_pending_under`), the create is out of sight (`EACCES`), and that error is returned
/// to the rename instead of leaving the create held back.
#[test]
fn a_folder_with_a_hidden_held_back_create_can_be_renamed() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, p) in [(false, "pc"), (true, "pp")] {
        tree.mount(passthrough);
        tree.sh(&format!("mkdir {p} {p}/d && echo one > {p}/d/f"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let said = tree.sh(&format!(
            "python3 -c \"\nimport os\n\
             with open('{p}/d/new', 'w') as n:\n    n.write('new\\n')\n\
             os.chmod('{p}/d', 0)\n\
             for a, b in [('{p}/d', '{p}/e'), ('{p}', '{p}.q')]:\n    \
             try:\n        os.rename(a, b)\n        print(a, 'renamed')\n    \
             except OSError as e:\n        print(a, e)\n\""
        ));
        assert_eq!(
            said,
            format!("{p}/d renamed\n{p} renamed\n"),
            "passthrough {passthrough}"
        );
        tree.sh(&format!("chmod 755 {p}.q/e"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.assert_last_is(&format!("{p}.q/e/new"), b"new\n");
        tree.unmount();
    }
}

/// (hostile14) A folder the history has, made unreadable while the workspace was not mounted:
/// the mount refuses (`Error::Unscannable`), naming it, and its advice works. It first said
/// "... or name it in .rewindignore", which does not help a folder the history has files
/// below (they are still looked up, so that their past keeps its end): it now says to make
/// it readable, and that lets the mount go on.
#[test]
fn an_unreadable_folder_the_history_has_is_refused_with_advice_that_works() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    let bin = tree.path("bin/rewind");
    tree.mount(false);
    tree.sh("mkdir c && echo one > c/f && echo top > top");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.unmount();
    tree.sh("chmod 000 c");
    let mount = || {
        tree.as_user(false, &[bin.to_str().unwrap(), "mount", ws_arg])
            .output()
            .unwrap()
    };
    let out = mount();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success()
            && err.contains("cannot scan c")
            && err.contains("The history has files there: make it readable")
            && !err.contains(".rewindignore"),
        "{out:?}"
    );
    // As the refusal says.
    tree.sh("chmod 755 c");
    let out = mount();
    assert!(
        out.status.success(),
        "the mount still refuses with c readable: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    tree.sh("echo more >> top");
    tree.rewind(&["-C", ws_arg, "sync"]);
    let (changes, log) = tree.log("top");
    assert_eq!(changes.last().unwrap()["kind"], "modify", "{log}");
    let (changes, log) = tree.log("c/f");
    assert!(changes.iter().all(|c| c["kind"] != "delete"), "{log}");
    tree.unmount();
}

/// (hostile14) While a new file's create is held back because a folder above it was made
/// unreadable (d4931e7 keeps it, with its `since`), every read of the history (`rewind log`,
/// `rewind status`) waits the whole give-up of `settle_for_reading` (4 × `PENDING_FOR`, 2 s)
/// and warns "held-back new files are not being recorded", for as long as the folder stays
/// unreadable; its doc says it "costs at most PENDING_FOR and a tick of the pending thread".
/// A create that waits for its folder is not one the reader can wait for.
#[test]
fn reading_the_history_while_a_create_waits_for_its_folder_is_not_slowed() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(false);
    tree.sh("mkdir d && echo one > d/f");
    tree.rewind(&["-C", ws_arg, "sync"]);
    let timed = |args: &[&str]| {
        let t = std::time::Instant::now();
        tree.rewind(args);
        t.elapsed()
    };
    let quiet = timed(&["-C", ws_arg, "log"]);
    tree.sh("echo new > d/new && chmod 000 d");
    tree.rewind(&["-C", ws_arg, "sync"]);
    let mut slow = Vec::new();
    for args in [["log"], ["status"], ["log"]] {
        let took = timed(&[&["-C", ws_arg][..], &args[..]].concat());
        slow.push((args[0], took));
    }
    tree.sh("chmod 755 d");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.unmount();
    assert!(
        slow.iter()
            .all(|(_, took)| *took < Duration::from_millis(1500)),
        "with d/new waiting for d: {slow:?} (a log with nothing held back: {quiet:?})"
    );
}

/// (hostile14) A new file's create held back because its folder was made unreadable, then the
/// workspace unmounted (the folder made readable while unmounted): the create is written by
/// nobody. Its id (set aside when its writer closed it, before the `chmod 000 c`) is left a
/// hole, and the next mount's scan records `c/new` as made by `external`, after the chmods.
/// A held-back create the unmount cannot record should leave its marker (as an fsynced one
/// does) so the next mount records it with its id and its writer.
#[test]
fn a_create_waiting_for_its_folder_at_unmount_keeps_its_writer_and_its_place() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(false);
    tree.sh("mkdir c && echo one > c/f");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.sh("python3 -c \"\nimport os\n\
         with open('c/new', 'w') as n:\n    n.write('new\\n')\n\
         os.chmod('c', 0)\n\"");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.unmount();
    tree.sh("chmod 755 c");
    tree.mount(false);
    tree.rewind(&["-C", ws_arg, "sync"]);
    let (made, log) = tree.log("c/new");
    let (dir, dir_log) = tree.log("c");
    tree.unmount();
    assert_eq!(made.len(), 1, "{log}");
    assert_eq!(made[0]["kind"], "create", "{log}");
    let chmod_to_0 = dir
        .iter()
        .find(|c| c["kind"] == "chmod" && c["after"]["mode"] == "0")
        .unwrap_or_else(|| panic!("{dir_log}"));
    assert!(
        made[0]["id"].as_u64() < chmod_to_0["id"].as_u64() && made[0]["process"] != "external",
        "c/new's create lost its place and its writer: {log}\nc: {dir_log}"
    );
}

/// (hostile14) A file with two names, `d/f` and `g`, with a daemon that is not root: its owner
/// makes `d` unreadable (`chmod 000 d`). `g` is in a readable folder and is itself readable,
/// so `stat g`, `cat g`, `echo >> g`, `chmod g`, `truncate g` and `ln g g3` must work (they do
/// outside the mount), with and without passthrough. The daemon reached the file by the
/// first name it saw (`d/f`), which it could no longer look up, and each failed with
/// `EACCES`; refused there, it now tries the file's other names (`Core::reachable_path`).
/// (Rename and unlink of `g` always worked: they go by the parent's path and the name.)
#[test]
fn a_hard_link_outside_a_folder_made_unreadable_can_still_be_used() {
    let tree = UserTree::new();
    for (passthrough, d) in [(false, "dc"), (true, "dp")] {
        tree.mount(passthrough);
        let said = tree.sh(&format!(
            "mkdir {d} && echo one > {d}/f && ln {d}/f {d}.g && cat {d}/f >/dev/null\n\
             python3 -c \"\nimport os\n\
             os.chmod('{d}', 0)\n\
             g = '{d}.g'\n\
             for name, op in [('stat', lambda: os.stat(g)), ('read', lambda: open(g).read()), \
             ('append', lambda: open(g, 'a').write('x\\n')), \
             ('chmod', lambda: os.chmod(g, 0o600)), ('truncate', lambda: os.truncate(g, 2)), \
             ('link', lambda: os.link(g, g + '3'))]:\n    \
             try:\n        op(); print(name, 'ok')\n    \
             except OSError as e:\n        print(name, e)\n\
             os.chmod('{d}', 0o755)\n\""
        ));
        tree.unmount();
        assert_eq!(
            said, "stat ok\nread ok\nappend ok\nchmod ok\ntruncate ok\nlink ok\n",
            "passthrough {passthrough}"
        );
    }
}

/// (hostile14) With passthrough and a daemon that is not root: `d/f` (also named `g`) is open
/// for writing, written ("two"), `d` made unreadable, then `g` renamed to `g2` and deleted, and
/// the writer writes "three" and closes. With `d` readable the rename first cuts the episode
/// (a modify of `d/f`, "one" -> "one two", with its link `g`), so the history of the one file
/// is one chain. With `d` unreadable the cut is skipped (`cut_episode_by` looks `d/f` up by
/// its path, `stat_if_same`, before it would read through the episode's kept handle): `g2` is
/// renamed and deleted holding "one\ntwo\n" while `d/f`'s history says "one\n" until the
/// close's modify, "one\n" -> "one\ntwo\nthree\n".
#[test]
fn a_cut_of_an_episode_below_a_folder_made_unreadable_reads_through_its_handle() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(true);
    tree.sh("mkdir d && echo one > d/f && ln d/f g");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.sh("python3 -c \"\nimport os\n\
         fd = os.open('d/f', os.O_WRONLY | os.O_APPEND)\n\
         os.write(fd, b'two\\n')\n\
         os.chmod('d', 0)\n\
         os.rename('g', 'g2')\n\
         os.unlink('g2')\n\
         os.write(fd, b'three\\n')\n\
         os.close(fd)\n\
         os.chmod('d', 0o755)\n\"");
    tree.rewind(&["-C", ws_arg, "sync"]);
    let (changes, log) = tree.log("d/f");
    let (g2, g2_log) = tree.log("g2");
    tree.unmount();
    let two = rewind::store::Hash::of(b"one\ntwo\n").to_string();
    assert_eq!(
        g2.last().unwrap()["before"]["hash"],
        two.as_str(),
        "{g2_log}"
    );
    assert_eq!(
        changes.last().unwrap()["before"]["hash"],
        two.as_str(),
        "d/f's last change does not follow from what g2 held: {log}\ng2: {g2_log}"
    );
}

/// Python that defines `ex(a, b)`: `renameat2(a, b, RENAME_EXCHANGE)`.
const EXCHANGE_PY: &str = "import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def ex(a, b):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
";

/// (hostile15) A daemon that is not root; folder `b` holds a new file whose create is held
/// back, and `b` is made unreadable (`chmod 000 b`); then `a` and `b` are exchanged
/// (`renameat2` with `RENAME_EXCHANGE`), and the folder (now at `a`) made readable again.
/// `a/new` must be recorded (a create with "new\n"). 193de5f moves the hidden creates below
/// the rename's *source* with it (`move_hidden_creates`), but `before_rename` drops what
/// `flush_pending_under(dst)` returns: the create stays held back at `b/new`, where its file
/// is not, is found `Gone` and dropped, so `a/new` never enters the history.
#[test]
fn an_exchanged_folder_with_a_hidden_held_back_create_keeps_it() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, p) in [(false, "c"), (true, "p")] {
        tree.mount(passthrough);
        tree.sh(&format!(
            "mkdir {p}a {p}b && echo one > {p}b/f && echo x > {p}a/x"
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh(&format!(
            "python3 -c \"{EXCHANGE_PY}\n\
             with open('{p}b/new', 'w') as n:\n    n.write('new\\n')\n\
             os.chmod('{p}b', 0)\nex('{p}a', '{p}b')\n\""
        ));
        tree.sh(&format!("chmod 755 {p}a && cat {p}a/new {p}b/x"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        std::thread::sleep(Duration::from_millis(1500));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let (made, log) = tree.log(&format!("{p}a/new"));
        let (_, all) = tree.log(".");
        tree.unmount();
        let new = rewind::store::Hash::of(b"new\n").to_string();
        assert!(
            made.last()
                .is_some_and(|c| c["after"]["hash"] == new.as_str()),
            "passthrough {passthrough}: {p}a/new is not in the history: {log}\nall:\n{all}"
        );
    }
}

/// (hostile15) As above, with a held-back create hidden in each folder, under the same name:
/// `a/new` ("from a") and `b/new` ("from b"), both folders made unreadable, then exchanged and
/// made readable again. Both files must be recorded, each at its new path with its content,
/// and what comes after (a change of `top`) must show in the log. `move_hidden_creates`
/// puts `a/new`'s create at `b/new` with `insert`, over `b/new`'s own (still held back,
/// since `flush_pending_under(dst)`'s result is dropped): that one is lost, and the id set
/// aside for it is never given back.
#[test]
fn exchanged_folders_with_hidden_held_back_creates_of_one_name_keep_both() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, p) in [(false, "c"), (true, "p")] {
        tree.mount(passthrough);
        tree.sh(&format!("mkdir {p}a {p}b && echo top > {p}top"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh(&format!(
            "python3 -c \"{EXCHANGE_PY}\n\
             for d in ['{p}a', '{p}b']:\n    \
             with open(d + '/new', 'w') as n:\n        n.write('from ' + d + '\\n')\n\
             os.chmod('{p}a', 0)\nos.chmod('{p}b', 0)\nex('{p}a', '{p}b')\n\""
        ));
        tree.sh(&format!(
            "chmod 755 {p}a {p}b && cat {p}a/new {p}b/new && echo more >> {p}top"
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        std::thread::sleep(Duration::from_millis(1500));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let (a, _) = tree.log(&format!("{p}a/new"));
        let (b, _) = tree.log(&format!("{p}b/new"));
        let (top, _) = tree.log(&format!("{p}top"));
        let (_, all) = tree.log(".");
        tree.unmount();
        let hash = |s: &str| rewind::store::Hash::of(s.as_bytes()).to_string();
        let last_is = |changes: &[serde_json::Value], content: &str| {
            changes
                .last()
                .is_some_and(|c| c["after"]["hash"] == hash(content).as_str())
        };
        assert!(
            last_is(&a, &format!("from {p}b\n"))
                && last_is(&b, &format!("from {p}a\n"))
                && last_is(&top, "top\nmore\n"),
            "passthrough {passthrough}: {p}a/new should be 'from {p}b', {p}b/new 'from {p}a', \
             and {p}top modified after:\n{all}"
        );
    }
}

/// (hostile15) A new file's create held back because its folder `c` was made unreadable, its
/// marker written by a `rewind sync` (193de5f: `sync` leaves the marker of what still waits),
/// then `mv c e`: the create follows the folder (a new id after the rename's). Then, with
/// `kill` (SIGKILL of the daemon, then `e` made readable and the workspace mounted again) or
/// without (`e` made readable, the create recorded, unmount and mount): `e/new` must have one
/// create, by its writer (python3, not `external`), after the rename, and `c/new` nothing.
#[test]
fn a_create_waiting_for_its_folder_with_a_marker_follows_a_rename_of_it() {
    for kill in [false, true] {
        let tree = UserTree::new();
        let ws = tree.path("ws");
        let ws_arg = ws.to_str().unwrap();
        tree.mount(false);
        tree.sh("mkdir c && echo one > c/f");
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh("python3 -c \"\nimport os\n\
             with open('c/new', 'w') as n:\n    n.write('new\\n')\n\
             os.chmod('c', 0)\n\"");
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh("mv c e");
        if kill {
            let status = tree.sh("cat .rewind/status");
            let pid: i32 = status
                .lines()
                .find_map(|l| l.strip_prefix("daemon: pid "))
                .unwrap_or_else(|| panic!("{status}"))
                .trim()
                .parse()
                .unwrap();
            // SAFETY: a plain kill(2) of the daemon this test started.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
            std::thread::sleep(Duration::from_millis(300));
            let ws_path = ws.to_str().unwrap();
            let out = tree
                .as_user(false, &["fusermount3", "-uz", ws_path])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            tree.sh("chmod 755 e");
        } else {
            tree.sh("chmod 755 e");
            tree.rewind(&["-C", ws_arg, "sync"]);
            std::thread::sleep(Duration::from_millis(1200));
            tree.rewind(&["-C", ws_arg, "sync"]);
            tree.unmount();
        }
        tree.mount(false);
        tree.rewind(&["-C", ws_arg, "sync"]);
        let (made, _) = tree.log("e/new");
        let (old, _) = tree.log("c/new");
        let (renamed, _) = tree.log("e");
        let (_, all) = tree.log(".");
        tree.unmount();
        let rename_id = renamed
            .iter()
            .find(|c| c["kind"] == "rename")
            .and_then(|c| c["id"].as_u64())
            .unwrap_or_else(|| panic!("kill {kill}: no rename of c:\n{all}"));
        assert!(
            made.len() == 1
                && made[0]["kind"] == "create"
                && made[0]["process"] == "python3"
                && made[0]["id"].as_u64() > Some(rename_id)
                && old.is_empty(),
            "kill {kill}: e/new should have one create by python3 after the rename \
             ({rename_id}), and c/new nothing:\n{all}"
        );
    }
}

/// (hostile15) A new file's create held back because its folder `c` was made unreadable, then
/// a rename of `p/c` that fails (`ENOTEMPTY`: onto a folder with a file), `p/c` renamed twice
/// (`p/c -> p/e -> p/g`), its parent renamed (`p -> q`), back (`q/g -> q/c`, `q -> p`), and
/// `p/c` made readable again: `p/c/new` has one create, after the last rename, and the history
/// of the other names has nothing of it.
#[test]
fn a_create_waiting_for_its_folder_follows_renames_and_a_failed_one() {
    for passthrough in [false, true] {
        let tree = UserTree::new();
        let ws = tree.path("ws");
        let ws_arg = ws.to_str().unwrap();
        tree.mount(passthrough);
        tree.sh("mkdir p p/c p/t && echo one > p/c/f && echo x > p/t/x");
        tree.rewind(&["-C", ws_arg, "sync"]);
        let said = tree.sh("python3 -c \"\nimport os\n\
             with open('p/c/new', 'w') as n:\n    n.write('new\\n')\n\
             os.chmod('p/c', 0)\n\
             try:\n    os.rename('p/c', 'p/t')\nexcept OSError as e:\n    print(e.errno)\n\
             os.rename('p/c', 'p/e')\nos.rename('p/e', 'p/g')\nos.rename('p', 'q')\n\
             os.rename('q/g', 'q/c')\nos.rename('q', 'p')\n\"");
        assert_eq!(said.trim(), libc::ENOTEMPTY.to_string());
        tree.sh("chmod 755 p/c && cat p/c/new");
        tree.rewind(&["-C", ws_arg, "sync"]);
        std::thread::sleep(Duration::from_millis(1200));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let (made, _) = tree.log("p/c/new");
        let (_, all) = tree.log(".");
        let others: Vec<_> = ["p/e/new", "p/g/new", "q/g/new", "q/c/new", "p/t/new"]
            .iter()
            .map(|p| tree.log(p).0.len())
            .collect();
        let last_rename = all
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|c| c["kind"] == "rename")
            .filter_map(|c| c["id"].as_u64())
            .max();
        let creates: Vec<_> = made.iter().filter(|c| c["kind"] == "create").collect();
        // The points on either side of the create: not there at the last rename, there at it.
        let bin = tree.path("bin/rewind");
        let cat_at = |id: u64| {
            let at = id.to_string();
            tree.as_user(
                false,
                &[
                    bin.to_str().unwrap(),
                    "-C",
                    ws_arg,
                    "cat",
                    "p/c/new",
                    "--at",
                    &at,
                ],
            )
            .output()
            .unwrap()
        };
        if let (Some(before), Some(at)) =
            (last_rename, creates.first().and_then(|c| c["id"].as_u64()))
        {
            let (before, at) = (cat_at(before), cat_at(at));
            assert!(
                !before.status.success() && at.status.success() && at.stdout == b"new\n",
                "passthrough {passthrough}: cat --at: {before:?} {at:?}\n{all}"
            );
        }
        tree.unmount();
        assert!(
            creates.len() == 1
                && creates[0]["id"].as_u64() > last_rename
                && others.iter().all(|n| *n == 0),
            "passthrough {passthrough}: c/new (others {others:?}):\n{all}"
        );
    }
}

/// (hostile15) As `reading_the_history_while_a_create_waits_for_its_folder_is_not_slowed`,
/// but a read right after the folder is renamed: `move_hidden_creates` takes the create's old
/// path out of `out_of_sight` and does not put its new one in, and it keeps its `since`, so a
/// `settle_for_reading` that comes before the pending thread has tried it again waits for it
/// the whole give-up (2 s): the pending thread puts it back held with the same `since`.
#[test]
fn reading_the_history_right_after_a_waiting_creates_folder_is_renamed_is_not_slowed() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(false);
    tree.sh("mkdir d && echo one > d/f");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.sh("echo new > d/new && chmod 000 d");
    tree.rewind(&["-C", ws_arg, "sync"]);
    std::thread::sleep(Duration::from_millis(1000));
    let mut took = Vec::new();
    for (a, b) in [("d", "e"), ("e", "d"), ("d", "e"), ("e", "d")] {
        tree.sh(&format!("mv {a} {b}"));
        let t = std::time::Instant::now();
        tree.rewind(&["-C", ws_arg, "log"]);
        took.push(t.elapsed());
    }
    tree.sh("chmod 755 d");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.unmount();
    assert!(
        took.iter().all(|t| *t < Duration::from_millis(1500)),
        "a log right after each rename: {took:?}"
    );
}

/// (hostile15) A new file's create held back because its folder `c` was made unreadable, left
/// as a marker by the unmount (193de5f). While unmounted: `c` is left unreadable (the mount
/// must refuse, naming `c`), then made readable and `c/new` deleted, or appended to. Deleted:
/// nothing of `c/new` is recorded. Appended to: what the history says python3 made must not
/// be what someone else wrote while nothing was mounted (that is `external`).
#[test]
fn a_create_left_waiting_at_unmount_then_changed_while_unmounted() {
    for case in ["deleted", "appended"] {
        let tree = UserTree::new();
        let ws = tree.path("ws");
        let ws_arg = ws.to_str().unwrap();
        let bin = tree.path("bin/rewind");
        tree.mount(false);
        tree.sh("mkdir c && echo one > c/f");
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.sh("python3 -c \"\nimport os\n\
             with open('c/new', 'w') as n:\n    n.write('new\\n')\n\
             os.chmod('c', 0)\n\"");
        tree.rewind(&["-C", ws_arg, "sync"]);
        tree.unmount();
        let out = tree
            .as_user(false, &[bin.to_str().unwrap(), "mount", ws_arg])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success() && err.contains("cannot scan c"),
            "{case}: mount with c unreadable: {out:?}"
        );
        match case {
            "deleted" => tree.sh("chmod 755 c && rm c/new"),
            _ => tree.sh("chmod 755 c && echo changed >> c/new"),
        };
        tree.mount(false);
        tree.rewind(&["-C", ws_arg, "sync"]);
        let (made, _) = tree.log("c/new");
        let (_, all) = tree.log(".");
        tree.unmount();
        let by_python_with_change = made.iter().any(|c| {
            c["process"] == "python3"
                && c["after"]["hash"]
                    == rewind::store::Hash::of(b"new\nchanged\n")
                        .to_string()
                        .as_str()
        });
        match case {
            "deleted" => assert!(made.is_empty(), "{case}:\n{all}"),
            _ => assert!(
                !by_python_with_change,
                "{case}: an append made while unmounted is put down to python3:\n{all}"
            ),
        }
    }
}

/// (hostile15) A new file's create waits because its folder `c` was made unreadable; nothing
/// else happens (no `sync`, no fsync) for a while (3 s, six times `PENDING_FOR`), then the
/// daemon is killed (SIGKILL), `c` made readable and the workspace mounted again. A held-back
/// create normally waits `PENDING_FOR`; this one waits for as long as `c` stays unreadable
/// (hours, maybe), with no marker until a `sync` or the unmount writes one, so a crash
/// meanwhile gives `c/new` to `external`. Its marker should be written when it starts to wait.
#[test]
fn a_create_waiting_for_its_folder_keeps_its_writer_over_a_crash() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(false);
    tree.sh("mkdir c && echo one > c/f");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.sh("python3 -c \"\nimport os\n\
         with open('c/new', 'w') as n:\n    n.write('new\\n')\n\
         os.chmod('c', 0)\n\"");
    std::thread::sleep(Duration::from_millis(3000));
    let status = tree.sh("cat .rewind/status");
    let pid: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("daemon: pid "))
        .unwrap_or_else(|| panic!("{status}"))
        .trim()
        .parse()
        .unwrap();
    // SAFETY: a plain kill(2) of the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    let out = tree
        .as_user(false, &["fusermount3", "-uz", ws_arg])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    tree.sh("chmod 755 c");
    tree.mount(false);
    tree.rewind(&["-C", ws_arg, "sync"]);
    let (made, log) = tree.log("c/new");
    tree.unmount();
    assert!(
        made.len() == 1 && made[0]["process"] == "python3",
        "c/new's writer lost over a crash: {log}"
    );
}

/// A daemon that is not root records a file its owner makes unreadable (0200, 0000) right
/// after writing it, while its create is held back, and a rollback that deletes and brings
/// it back records that too: each change's content is in the history.
// Failed before a chmod kept a handle to read such a file through
// (`Recorder::keep_reader_of_pending`): its create waited for a read by name that never came,
// and `rm` left no history of it at all. And before a rollback's new file was made read-write
// and read through its fd (`Core::end_write_of_made`): its restore was not recorded.
#[test]
fn a_rollback_by_a_non_root_daemon_records_the_unreadable_files_it_makes() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(true);
    tree.sh("echo secret > w200 && chmod 200 w200 && echo none > w000 && chmod 000 w000");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.rewind(&["-C", ws_arg, "checkpoint", "both"]);
    tree.sh("rm -f w200 w000");
    tree.rewind(&["-C", ws_arg, "sync"]);
    let out = tree.rewind(&["-C", ws_arg, "rollback", "--to", "both"]);
    tree.rewind(&["-C", ws_arg, "sync"]);
    for (path, content, mode) in [("w200", "secret\n", "200"), ("w000", "none\n", "0")] {
        let (changes, log) = tree.log(path);
        let last = changes.last().unwrap();
        assert_eq!(last["kind"], "restore", "{path}: {out}\n{log}");
        let hash = rewind::store::Hash::of(content.as_bytes()).to_string();
        assert_eq!(last["after"]["hash"], hash.as_str(), "{path}: {log}");
        assert_eq!(last["after"]["mode"], mode, "{path}: {log}");
    }
    tree.unmount();
}

/// A non-root daemon rolls back an edit of a file its agent then made read-only (`chmod
/// 444`), as its dry run says: the file gets its content and mode back, with and without
/// passthrough.
// Failed before the restorer set the owner's write bit of such a file first
// (`Restorer::make_writable`): the dry run said `revert f (file)`, and the run `failed f:
// Permission denied`, exit 1, leaving the agent's edit.
#[test]
fn a_non_root_rollback_puts_back_a_file_made_read_only_as_its_dry_run_says() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    for (passthrough, name) in [(false, "ro-cached"), (true, "ro-passthrough")] {
        tree.mount(passthrough);
        tree.sh(&format!("echo original > {name}"));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let session = format!("agent-{name}");
        tree.sh(&format!(
            "REWIND_SESSION={session} sh -c 'echo edited > {name}; chmod 444 {name}'; true"
        ));
        tree.rewind(&["-C", ws_arg, "sync"]);
        let dry = tree.rewind(&["-C", ws_arg, "rollback", "--session", &session, "--dry-run"]);
        assert!(dry.contains(&format!("revert   {name}")), "{dry}");
        let run = tree.rewind(&["-C", ws_arg, "rollback", "--session", &session]);
        assert!(
            run.contains("restored 1 path, skipped 0, failed 0"),
            "{run}"
        );
        assert_eq!(
            tree.sh(&format!("cat {name}; stat -c %a {name}")),
            "original\n644\n",
            "{run}"
        );
        tree.unmount();
    }
}

/// A rollback whose every step fails (a daemon that is not root cannot remove a file from a
/// folder its owner made read-only) changes nothing, and offers no undo of a rollback
/// session it never made.
// Failed before the summary asked whether the rollback's session exists: it said `undo it
// with \`rewind rollback --session rollback-1\``, and that command answered that there is no
// such session (exit 2).
#[test]
fn a_rollback_that_changed_nothing_offers_no_undo() {
    let tree = UserTree::new();
    let ws = tree.path("ws");
    let ws_arg = ws.to_str().unwrap();
    tree.mount(false);
    tree.sh("mkdir d");
    tree.rewind(&["-C", ws_arg, "sync"]);
    tree.sh("REWIND_SESSION=maker sh -c 'echo q > d/q'; chmod 555 d");
    tree.rewind(&["-C", ws_arg, "sync"]);
    let bin = tree.path("bin/rewind");
    let out = tree
        .as_user(
            false,
            &[
                bin.to_str().unwrap(),
                "-C",
                ws_arg,
                "rollback",
                "--session",
                "maker",
            ],
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        said.contains("failed   d/q")
            && said.contains("nothing was changed")
            && !said.contains("undo"),
        "{said}"
    );
    tree.sh("chmod 755 d");
    tree.unmount();
}
