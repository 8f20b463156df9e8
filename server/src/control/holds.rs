//! Holds: how one worker runs a Redis transaction whose keys live on several workers, with
//! no other command executing on any of them meanwhile (`engine/resp/transactions.rs` says
//! how a transaction uses them).
//!
//! ```text
//! coordinator C (the connection's worker)          participant P (owns some of the keys)
//!   take the token (one cross-worker run at a time)
//!   Hold(epoch) ─ forwarded, behind C's earlier ──▶ serve: slot = Holding, empty answer, then
//!                 requests to P                       P's loop spins on its slot, executing
//!   every answer in: begin (Holding ─▶ Running) ◀─    nothing else (no turn, no queue)
//!   jobs, one at a time, through P's slot ─────────▶ runs each job on its own engine
//!   release: every slot Free, the token back ──────▶ back to its loop
//! ```
//!
//! The token is a process-wide atomic: a worker that cannot take it serves its other
//! connections and tries again on a later pass, and it holds nothing while it waits, so a
//! participant is never a coordinator that waits on it. A participant answers a hold
//! whatever it is doing between two messages of its queue, so every hold is answered.
//!
//! A participant holds within bounds: [`HOLD_WAIT`] for the coordinator to begin, and
//! [`RUN_SILENCE`] between two jobs once it has begun. Past them it lets go on its own and
//! marks its slot so: a coordinator that had not begun finds it and runs nothing (the
//! transaction is answered with an error, nothing done); one that had begun (a coordinator
//! stalled for seconds, a bug) gets no answer for its later jobs, which it answers as errors:
//! that one transaction was not atomic. A coordinator waits at most [`JOB_WAIT`] for a job.

use std::any::Any;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::engine::Engine;

/// Work a coordinator hands a held participant, run on the participant's engine.
pub type Job = Box<dyn FnOnce(&mut Engine) -> Box<dyn Any + Send> + Send>;

/// How long a participant holds waiting for its coordinator to begin.
pub const HOLD_WAIT: Duration = Duration::from_secs(1);

/// How long a participant that began holds without a job before it lets go.
pub const RUN_SILENCE: Duration = Duration::from_secs(10);

/// How long a coordinator waits for a job's answer.
pub const JOB_WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// Not held.
    #[default]
    Free,
    /// Held for this epoch, waiting for the coordinator to begin.
    Holding(u64),
    /// Held for this epoch, running the coordinator's jobs.
    Running(u64),
}

/// One worker's slot.
#[derive(Default)]
struct Slot {
    state: State,
    /// The last epoch released (or let go): a hold for it or an older one is not taken.
    closed: u64,
    job: Option<Job>,
    done: Option<Box<dyn Any + Send>>,
}

/// What a held participant does next.
pub enum Next {
    /// Run this job and hand its answer back with [`Holds::done`].
    Job(Job),
    /// Nothing yet: spin.
    Wait,
    /// Released (or let go): back to the loop.
    Released,
}

/// The token and every worker's slot (see the module documentation).
pub struct Holds {
    /// 0: no cross-worker run; else its coordinator's index plus one.
    token: AtomicUsize,
    epoch: AtomicU64,
    slots: Vec<Mutex<Slot>>,
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holds")
            .field("token", &self.token.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for Holds {
    fn default() -> Holds {
        Holds::new(super::MAX_WORKERS)
    }
}

impl Holds {
    /// Holds for `workers` workers.
    pub fn new(workers: usize) -> Holds {
        Holds {
            token: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
            slots: (0..workers).map(|_| Mutex::default()).collect(),
        }
    }

    fn slot(&self, worker: usize) -> std::sync::MutexGuard<'_, Slot> {
        // A job that panicked poisons nothing worth refusing: the slot's fields stay valid.
        self.slots[worker]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the token for coordinator `me`: the epoch of its run, or `None` while another
    /// run holds it.
    pub fn try_take(&self, me: usize) -> Option<u64> {
        self.token
            .compare_exchange(0, me + 1, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(self.epoch.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// Participant `worker` was asked to hold for `epoch`: true when it holds (the run is not
    /// over already).
    pub fn enter(&self, worker: usize, epoch: u64) -> bool {
        let mut slot = self.slot(worker);
        if slot.closed >= epoch {
            return false;
        }
        slot.state = State::Holding(epoch);
        slot.job = None;
        slot.done = None;
        true
    }

    /// Participant `worker`, held for `epoch` since `since` (its last job's end, or the
    /// hold's start): what next. Past its bounds it lets go.
    pub fn next(&self, worker: usize, epoch: u64, since: Instant) -> Next {
        let mut slot = self.slot(worker);
        let bound = match slot.state {
            State::Holding(e) if e == epoch => HOLD_WAIT,
            State::Running(e) if e == epoch => RUN_SILENCE,
            _ => return Next::Released,
        };
        if let Some(job) = slot.job.take() {
            return Next::Job(job);
        }
        if since.elapsed() > bound {
            log::warn!("worker {worker}: let go of a cross-worker transaction held too long");
            slot.state = State::Free;
            slot.closed = slot.closed.max(epoch);
            return Next::Released;
        }
        Next::Wait
    }

    /// Participant `worker` ran a job of `epoch`: its answer.
    pub fn done(&self, worker: usize, epoch: u64, answer: Box<dyn Any + Send>) {
        let mut slot = self.slot(worker);
        if slot.state == State::Running(epoch) {
            slot.done = Some(answer);
        }
    }

    /// Coordinator of `epoch`: every participant answered its hold; true when all still
    /// hold (they now wait for jobs), false when one let go (nothing may run).
    pub fn begin(&self, epoch: u64, participants: &[usize]) -> bool {
        for &worker in participants {
            let mut slot = self.slot(worker);
            match slot.state {
                State::Holding(e) if e == epoch => slot.state = State::Running(epoch),
                State::Running(e) if e == epoch => {}
                _ => return false,
            }
        }
        true
    }

    /// Coordinator of `epoch`: runs `job` on participant `worker` and waits for its answer;
    /// `None` when the participant let go (or did not answer within [`JOB_WAIT`]).
    pub fn run(&self, worker: usize, epoch: u64, job: Job) -> Option<Box<dyn Any + Send>> {
        {
            let mut slot = self.slot(worker);
            if slot.state != State::Running(epoch) {
                return None;
            }
            slot.done = None;
            slot.job = Some(job);
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            {
                let mut slot = self.slot(worker);
                if let Some(done) = slot.done.take() {
                    return Some(done);
                }
                if slot.state != State::Running(epoch) || start.elapsed() > JOB_WAIT {
                    slot.job = None;
                    return None;
                }
            }
            pause(&mut spins);
        }
    }

    /// Coordinator `me` of `epoch` is done: every participant goes back to its loop, and the
    /// token is free.
    pub fn release(&self, me: usize, epoch: u64, participants: &[usize]) {
        for &worker in participants {
            let mut slot = self.slot(worker);
            if matches!(slot.state, State::Holding(e) | State::Running(e) if e == epoch) {
                slot.state = State::Free;
            }
            slot.closed = slot.closed.max(epoch);
            slot.job = None;
            slot.done = None;
        }
        let _ = self
            .token
            .compare_exchange(me + 1, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// One step of a wait on another core: spins a little, then lets the other threads run.
pub fn pause(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_at_a_time_and_a_closed_epoch_is_not_held() {
        let holds = Holds::new(2);
        let epoch = holds.try_take(0).unwrap();
        assert!(holds.try_take(1).is_none(), "one run at a time");
        assert!(holds.enter(1, epoch));
        assert!(holds.begin(epoch, &[1]));
        holds.release(0, epoch, &[1]);
        assert!(matches!(
            holds.next(1, epoch, Instant::now()),
            Next::Released
        ));
        assert!(!holds.enter(1, epoch), "a late hold of a finished run");
        let next = holds.try_take(1).unwrap();
        assert!(next > epoch);
        holds.release(1, next, &[]);
    }

    #[test]
    fn a_participant_that_let_go_refuses_the_begin() {
        let holds = Holds::new(2);
        let epoch = holds.try_take(0).unwrap();
        assert!(holds.enter(1, epoch));
        let long_ago = Instant::now() - HOLD_WAIT - Duration::from_millis(1);
        assert!(matches!(holds.next(1, epoch, long_ago), Next::Released));
        assert!(!holds.begin(epoch, &[1]));
        holds.release(0, epoch, &[1]);
        assert!(holds.try_take(0).is_some());
    }
}
