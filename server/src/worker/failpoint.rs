//! Fault injection for the failure tests, compiled only with debug assertions: the `memspin`
//! binary that `cargo test` builds for the integration tests has it, a release build has
//! none of it (no environment read, no signal handler, no check in the loop).
//!
//! ```text
//! MEMSPIN_FAILPOINT=panic:I   arm worker I; SIGUSR1 fires it
//! MEMSPIN_FAILPOINT=hang:I
//! SIGUSR1 ─▶ FIRED ─▶ worker I's next stop check (once per loop iteration) panics,
//!                     or never returns (a worker stuck in one long operation)
//! ```
//!
//! Why this and not the `fail` crate: failpoints behind a cargo feature would have to be
//! switched on for the binary the integration tests run, and a feature is on for every
//! build that asks for it (`cargo test --release` included), while `debug_assertions` ties
//! the hook to the build that must never ship; the check needs no dependency, and a signal
//! lets a test fire it at a moment it chooses while clients are being served. The worker's
//! index comes from a thread-local that [`super::spawn`] sets.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The environment variable that arms a failpoint.
pub const ENV: &str = "MEMSPIN_FAILPOINT";

/// What a failpoint does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Worker `.0` panics.
    Panic(usize),
    /// Worker `.0` stops looking at the stop flag: it sleeps forever inside its loop.
    Hang(usize),
}

impl Action {
    fn worker(self) -> usize {
        match self {
            Action::Panic(w) | Action::Hang(w) => w,
        }
    }
}

/// Parses `panic:I` or `hang:I`.
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse(spec: &str) -> Result<Action, String> {
    let bad = || format!("{ENV}={spec:?}: expected panic:WORKER or hang:WORKER");
    let (action, worker) = spec.split_once(':').ok_or_else(bad)?;
    let worker = worker.parse().map_err(|_| bad())?;
    match action {
        "panic" => Ok(Action::Panic(worker)),
        "hang" => Ok(Action::Hang(worker)),
        _ => Err(bad()),
    }
}

static ARMED: OnceLock<Action> = OnceLock::new();
static FIRED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

thread_local! {
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Arms the failpoint named in [`ENV`], if set, and makes SIGUSR1 fire it.
///
/// # Errors
/// A malformed [`ENV`], or the handler cannot be installed.
pub fn install() -> Result<(), String> {
    let Ok(spec) = std::env::var(ENV) else {
        return Ok(());
    };
    let action = parse(&spec)?;
    let fired = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&fired))
        .map_err(|e| format!("{ENV}: SIGUSR1 handler: {e}"))?;
    let _ = FIRED.set(fired);
    let _ = ARMED.set(action);
    eprintln!("memspin: {ENV}={spec} armed (debug build); SIGUSR1 fires it");
    Ok(())
}

/// Tells the failpoints which worker the calling thread is.
pub fn set_worker(index: usize) {
    WORKER.with(|w| w.set(Some(index)));
}

/// Fires the armed action if SIGUSR1 arrived and it concerns the calling worker.
///
/// # Panics
/// That is the point: when worker I's `panic:I` failpoint fired.
pub fn check() {
    let (Some(&action), Some(fired)) = (ARMED.get(), FIRED.get()) else {
        return;
    };
    if !fired.load(Ordering::Relaxed) || WORKER.with(Cell::get) != Some(action.worker()) {
        return;
    }
    match action {
        Action::Panic(w) => panic!("failpoint {ENV}=panic:{w}: worker {w} panics on purpose"),
        Action::Hang(w) => {
            eprintln!("memspin: failpoint {ENV}=hang:{w}: worker {w} hangs on purpose");
            loop {
                std::thread::park();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(parse("panic:1"), Ok(Action::Panic(1)));
        assert_eq!(parse("panic:0"), Ok(Action::Panic(0)));
        assert_eq!(parse("hang:3"), Ok(Action::Hang(3)));
        for bad in ["", "panic", "panic:", "panic:x", "abort:1", "hang:-1"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
