//! `rewind ui`: the review page. An HTTP server on loopback (axum on tokio) that renders HTML
//! on the server (maud) from the output of the CLI's own commands ([`history`]), with a little
//! JavaScript for live updates, keyboard moves and dialogs. Everything it serves is embedded in
//! the binary.
//!
//! Security ([`guard`]): loopback only; a secret token on every request (`?token=` once, then
//! an `HttpOnly; SameSite=Strict` cookie); the `Host` must be the address served and a foreign
//! `Origin` is refused (DNS rebinding, cross-site requests); actions are POSTs that also carry a
//! CSRF token taken from the page.

mod guard;
pub mod history;
mod page;
mod routes;

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::sync::broadcast;

use self::history::Backend;

/// What every request handler shares.
pub struct State {
    pub backend: Backend,
    pub addr: SocketAddr,
    pub token: String,
    pub csrf: String,
    /// Each change recorded while the page is served, as `.rewind/events` gives it (JSON).
    pub events: broadcast::Sender<String>,
}

pub type Shared = Arc<State>;

/// A secret of 32 random bytes, hex.
fn secret() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Why the page could not be served (each a failure, exit status 1: a port in use is not a
/// mistake in how `rewind ui` was called).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot start the server: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Listen {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("no randomness for the token: {0}")]
    Secret(#[source] std::io::Error),
    #[error("the server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Serve the page until interrupted. Prints the URL (with the token) as the first line.
pub fn serve(backend: Backend, port: u16, open: bool) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    runtime.block_on(async move {
        let listen = |source| ServeError::Listen { port, source };
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(listen)?;
        let addr = listener.local_addr().map_err(listen)?;
        let token = secret().map_err(ServeError::Secret)?;
        let csrf = secret().map_err(ServeError::Secret)?;
        let (events, _) = broadcast::channel(1024);
        if let Some(path) = backend.events_path() {
            follow_events(path, events.clone());
        }
        let state = Arc::new(State {
            backend,
            addr,
            token,
            csrf,
            events,
        });
        let url = format!("http://{addr}/?token={}", state.token);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{url}");
        let _ = writeln!(
            out,
            "rewind ui: serving {} ({}); Ctrl-C to stop",
            state.backend.workspace().display(),
            if state.backend.mounted() {
                "mounted: live"
            } else {
                "not mounted: read-only"
            }
        );
        let _ = out.flush();
        drop(out);
        if open {
            open_browser(&url);
        }
        let app = routes::router(state);
        axum::serve(listener, app).await.map_err(ServeError::Serve)
    })
}

/// Open the page in the browser, if there is a way to; never fails. The browser is given a
/// file only its user may read, which sends it on to `url`, not `url` itself: a command's
/// arguments are there for every local user to read (`ps`), and the browser keeps them for
/// as long as it runs, so the token in them let any other user in (Jupyter does the same).
/// The file goes a minute later.
fn open_browser(url: &str) {
    let Some(file) = redirect_file(url) else {
        return;
    };
    let _ = std::process::Command::new("xdg-open")
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = std::fs::remove_file(&file);
    });
}

/// A page that sends the browser to `url`, in a new file of mode 0600 in the user's runtime
/// folder (else the temporary folder).
fn redirect_file(url: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let name = format!("rewind-ui-{}.html", secret().ok()?.get(..16)?);
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .ok()?;
    // `url` is `http://127.0.0.1:PORT/?token=HEX`: nothing in it to escape.
    let page = format!(
        "<!DOCTYPE html>\n<meta charset=\"utf-8\">\n<meta http-equiv=\"refresh\" content=\"0;url={url}\">\n\
         <title>rewind</title>\n<p><a href=\"{url}\">Open rewind</a></p>\n"
    );
    f.write_all(page.as_bytes()).ok()?;
    Some(path)
}

/// Read `.rewind/events` on a thread of its own and pass each line on to the pages listening.
fn follow_events(path: std::path::PathBuf, tx: broadcast::Sender<String>) {
    std::thread::spawn(move || {
        use std::io::BufRead;
        let Ok(f) = std::fs::File::open(&path) else {
            tracing::warn!("cannot open {}: the page will not be live", path.display());
            return;
        };
        for line in std::io::BufReader::new(f).lines() {
            let Ok(line) = line else { break };
            // No page listening is not an error.
            let _ = tx.send(line);
        }
    });
}
