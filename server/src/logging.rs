//! memspin's log: the `log` crate's records, one line each, on stderr; how much is logged
//! follows the verbosity (`-v`, `-vv`, `-vvv` at start, the `verbosity` command at run time).
//!
//! | verbosity | logged (memcached's `-v` levels, as memspin has them) |
//! |---|---|
//! | 0 | errors and warnings (a worker that fails, a refused socket option) |
//! | 1 (`-v`) | and what the operator did: start-up choices, `flush_all`, `stats reset`, `shutdown`, `verbosity` |
//! | 2 (`-vv`) | and every connection opened and closed, every request and the first line of its reply |
//! | 3 (`-vvv`) | and the engine's own decisions: turns used up, forwarding stopped by a full queue |
//!
//! A line is `<unix time> <level> <thread>: <message>`, written whole with one `write` so
//! lines from several workers never interleave. smoltcp's own records (it logs every segment
//! at trace level) are left out below warnings. A record below the level costs one relaxed
//! load (the `log` macros check the global level first).

use std::io::Write as _;
use std::sync::OnceLock;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The `log` level a verbosity turns on.
pub fn level_filter(verbosity: u8) -> LevelFilter {
    match verbosity {
        0 => LevelFilter::Warn,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// Sets what is logged from now on, in every thread.
pub fn set_verbosity(verbosity: u8) {
    log::set_max_level(level_filter(verbosity));
}

/// The logger writing to stderr.
struct Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
            && (metadata.level() <= Level::Warn || !metadata.target().starts_with("smoltcp"))
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format_line(record);
        // One write per line: lines of several threads never interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// One record as its line: `<unix seconds.millis> <LEVEL> <thread>: <message>\n`; a message
/// with line breaks has them written as `\n`, so one record stays one line.
fn format_line(record: &Record<'_>) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let thread = std::thread::current();
    let message = record.args().to_string().replace('\n', "\\n");
    format!(
        "{}.{:03} {} {}: {}\n",
        now.as_secs(),
        now.subsec_millis(),
        record.level(),
        thread.name().unwrap_or("memspin"),
        message
    )
}

static LOGGER: OnceLock<()> = OnceLock::new();

/// Installs the stderr logger at `verbosity` (once per process; later calls only set the
/// level).
pub fn init(verbosity: u8) {
    LOGGER.get_or_init(|| {
        let _ = log::set_logger(&Stderr);
    });
    set_verbosity(verbosity);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_maps_to_levels() {
        assert_eq!(level_filter(0), LevelFilter::Warn);
        assert_eq!(level_filter(1), LevelFilter::Info);
        assert_eq!(level_filter(2), LevelFilter::Debug);
        assert_eq!(level_filter(3), LevelFilter::Trace);
        assert_eq!(level_filter(9), LevelFilter::Trace);
    }

    #[test]
    fn a_record_is_one_line() {
        let args = format_args!("two\nlines");
        let record = Record::builder()
            .args(args)
            .level(Level::Info)
            .target("server")
            .build();
        let line = format_line(&record);
        assert!(line.ends_with(": two\\nlines\n"), "{line}");
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.contains(" INFO "), "{line}");
    }

    #[test]
    fn smoltcp_is_quiet_below_warnings() {
        log::set_max_level(LevelFilter::Trace);
        let meta = |level, target| Metadata::builder().level(level).target(target).build();
        assert!(!Stderr.enabled(&meta(Level::Trace, "smoltcp::iface")));
        assert!(Stderr.enabled(&meta(Level::Warn, "smoltcp::iface")));
        assert!(Stderr.enabled(&meta(Level::Trace, "server::engine")));
    }
}
