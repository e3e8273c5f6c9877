//! custream's maker thread: where notifier streams are made (src/waits/notifiers.rs). The driver
//! can block `cuStreamCreate` while the GPU is busy (an H100 froze an event loop that made a
//! few dozen streams behind 0.3 s kernels), so no event loop's thread makes one for an
//! `await`; and not custream's host thread either, whose Python host functions the GPU may
//! be waiting for. A job here may wait for the GPU: nothing the GPU waits for waits for it.
//! Its jobs make driver calls only, never Python.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, PoisonError};

use crate::driver::gate;

pub type Job = Box<dyn FnOnce() + Send>;

/// The thread's queue and the fork generation it belongs to (a forked child has none of its
/// parent's threads).
static QUEUE: Mutex<Option<(u32, Sender<Job>)>> = Mutex::new(None);

/// Run `job` on the maker thread, made on first use. Never waits, but for the queue's lock.
pub fn later(job: Job) {
    let generation = gate::fork_generation();
    let mut queue = QUEUE.lock().unwrap_or_else(PoisonError::into_inner);
    let mut job = job;
    if let Some((_, q)) = queue.as_ref().filter(|(g, _)| *g == generation) {
        match q.send(job) {
            Ok(()) => return,
            Err(back) => job = back.0,
        }
    }
    let (send, receive) = channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("custream-maker".into())
        .spawn(move || {
            for job in receive {
                job();
            }
        });
    match spawned {
        Ok(_) => {
            // A new channel's receiver is alive in the thread just made: the send succeeds.
            let _ = send.send(job);
            *queue = Some((generation, send));
        }
        // No thread can be made: run it here rather than lose it.
        Err(_) => {
            drop(queue);
            job();
        }
    }
}
