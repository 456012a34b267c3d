//! Logging with `tracing`: concise by default, `RUST_LOG` for more, to stderr (which journald
//! or the daemon's log file collects).

pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        // The log may be on the disk that just filled up: a failed log write must not become a
        // panic (tracing-subscriber reports it with eprintln!, which panics on a full stderr).
        .log_internal_errors(false)
        .try_init();
}
