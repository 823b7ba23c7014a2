//! A link's outgoing messages: one bounded queue per [`StreamClass`], all three in one
//! small allocation, taken by the link's one writer task.
//!
//! Three tokio channels did this before, and a tokio channel allocates about 800 bytes
//! when it is made (its shared state, cache-padded, and a first block of 32 slots),
//! used or not: 2.4 KiB on each end of every link, most of a relay's own share of an
//! idle child after the protocol's state (issue 49's heap profile). Here a class's
//! queue takes memory only while messages wait in it, and gives it back once empty.
//!
//! The semantics are the channels': a send fails when the class already holds `bound`
//! messages the writer has not taken (the peer does not keep up) or when the writer is
//! gone; the writer learns that the sender is gone once every queue is drained.
//!
//! [`StreamClass`]: strata_protocol::wire::StreamClass
//!
//! The queues are behind a `std::sync::Mutex`, which the workspace disallows in favour
//! of tokio's: the node sends from synchronous code (a tokio mutex could only be tried
//! there), every critical section here is a few pointer moves with no await inside,
//! and a lock that is never held across an await neither blocks the runtime nor
//! changes what the simulation sees (it runs on one thread: the lock is never
//! contended there).
#![allow(clippy::disallowed_types)]

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::sync::mpsc::error::TryRecvError;

use super::message::Queued;

/// A link's outgoing queues, bounded at `bound` messages per class.
pub(crate) fn out_queue<M>(bound: usize) -> (OutSender<M>, OutReceiver<M>) {
    let shared = Arc::new(Mutex::new(State {
        queues: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
        waker: None,
        sender_gone: false,
        receiver_gone: false,
    }));
    (
        OutSender {
            shared: shared.clone(),
            bound,
        },
        OutReceiver { shared },
    )
}

struct State<M> {
    queues: [VecDeque<Queued<M>>; 3],
    /// The writer's, while it waits for a message.
    waker: Option<Waker>,
    sender_gone: bool,
    receiver_gone: bool,
}

fn lock<M>(shared: &Mutex<State<M>>) -> MutexGuard<'_, State<M>> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// The sending end (the link's [`Sender`](super::transport::Sender)).
pub(crate) struct OutSender<M> {
    shared: Arc<Mutex<State<M>>>,
    bound: usize,
}

impl<M> fmt::Debug for OutSender<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.shared);
        f.debug_struct("OutSender")
            .field("queued", &state.queues.each_ref().map(VecDeque::len))
            .field("bound", &self.bound)
            .finish()
    }
}

impl<M> OutSender<M> {
    /// Queues `msg` on class `class` (0, 1, 2); gives it back if that class is full or
    /// the writer is gone.
    pub(crate) fn try_send(&self, class: usize, msg: Queued<M>) -> Result<(), Queued<M>> {
        let waker = {
            let mut state = lock(&self.shared);
            if state.receiver_gone || state.queues[class].len() >= self.bound {
                return Err(msg);
            }
            state.queues[class].push_back(msg);
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

impl<M> Drop for OutSender<M> {
    fn drop(&mut self) {
        let waker = {
            let mut state = lock(&self.shared);
            state.sender_gone = true;
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The receiving end, held by the link's writer task (one task: it keeps one waker).
pub(crate) struct OutReceiver<M> {
    shared: Arc<Mutex<State<M>>>,
}

impl<M> fmt::Debug for OutReceiver<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutReceiver").finish_non_exhaustive()
    }
}

impl<M> OutReceiver<M> {
    /// Class `class`'s next message if one waits; `Disconnected` once the sender is gone
    /// and the class is drained.
    pub(crate) fn try_recv(&self, class: usize) -> Result<Queued<M>, TryRecvError> {
        let mut state = lock(&self.shared);
        match pop_releasing(&mut state.queues[class]) {
            Some(m) => Ok(m),
            None if state.sender_gone => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Class `class`'s next message; `None` once the sender is gone and the class is
    /// drained. Waits otherwise, woken by the next send on any class.
    pub(crate) fn poll_recv(&self, class: usize, cx: &mut Context<'_>) -> Poll<Option<Queued<M>>> {
        let mut state = lock(&self.shared);
        if let Some(m) = pop_releasing(&mut state.queues[class]) {
            return Poll::Ready(Some(m));
        }
        if state.sender_gone {
            return Poll::Ready(None);
        }
        match &state.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// [`Self::poll_recv`] as a future.
    pub(crate) async fn recv(&self, class: usize) -> Option<Queued<M>> {
        std::future::poll_fn(|cx| self.poll_recv(class, cx)).await
    }
}

impl<M> Drop for OutReceiver<M> {
    fn drop(&mut self) {
        let dropped = {
            let mut state = lock(&self.shared);
            state.receiver_gone = true;
            state.waker = None;
            std::mem::take(&mut state.queues)
        };
        // The messages are dropped outside the lock.
        drop(dropped);
    }
}

/// Takes the queue's front; a queue left empty gives its buffer back.
fn pop_releasing<T>(queue: &mut VecDeque<T>) -> Option<T> {
    let front = queue.pop_front();
    if queue.is_empty() && queue.capacity() > 0 {
        *queue = VecDeque::new();
    }
    front
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::Waker;

    #[test]
    fn bounded_per_class_and_in_order() {
        let (tx, rx) = out_queue::<u32>(2);
        assert!(tx.try_send(0, Box::new(1)).is_ok());
        assert!(tx.try_send(0, Box::new(2)).is_ok());
        assert_eq!(tx.try_send(0, Box::new(3)).map_err(|m| *m), Err(3));
        // Another class has its own bound.
        assert!(tx.try_send(1, Box::new(10)).is_ok());
        assert_eq!(rx.try_recv(0).map(|m| *m), Ok(1));
        // Taken by the writer: room again.
        assert!(tx.try_send(0, Box::new(3)).is_ok());
        assert_eq!(rx.try_recv(0).map(|m| *m), Ok(2));
        assert_eq!(rx.try_recv(0).map(|m| *m), Ok(3));
        assert_eq!(rx.try_recv(0).map(|m| *m), Err(TryRecvError::Empty));
        assert_eq!(rx.try_recv(2).map(|m| *m), Err(TryRecvError::Empty));
        assert_eq!(rx.try_recv(1).map(|m| *m), Ok(10));
    }

    #[test]
    fn an_empty_queue_holds_no_buffer() {
        let (tx, rx) = out_queue::<u32>(8);
        for i in 0..5 {
            assert!(tx.try_send(2, Box::new(i)).is_ok());
        }
        while rx.try_recv(2).is_ok() {}
        assert_eq!(lock(&rx.shared).queues[2].capacity(), 0);
    }

    #[test]
    fn the_sender_gone_is_seen_after_what_it_queued() {
        let (tx, rx) = out_queue::<u32>(8);
        assert!(tx.try_send(1, Box::new(7)).is_ok());
        drop(tx);
        assert_eq!(rx.try_recv(1).map(|m| *m), Ok(7));
        assert_eq!(rx.try_recv(1).map(|m| *m), Err(TryRecvError::Disconnected));
        assert_eq!(rx.try_recv(0).map(|m| *m), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn sending_to_a_gone_writer_fails() {
        let (tx, rx) = out_queue::<u32>(8);
        drop(rx);
        assert_eq!(tx.try_send(0, Box::new(1)).map_err(|m| *m), Err(1));
    }

    #[test]
    fn a_waiting_writer_is_woken_by_a_send_or_the_sender_going() {
        let (tx, rx) = out_queue::<u32>(8);
        let woken = Arc::new(WakeCount::default());
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        {
            let mut recv = pin!(rx.recv(0));
            assert!(recv.as_mut().poll(&mut cx).is_pending());
            assert!(tx.try_send(0, Box::new(5)).is_ok());
            assert_eq!(woken.count(), 1);
            assert!(matches!(recv.as_mut().poll(&mut cx), Poll::Ready(Some(m)) if *m == 5));
        }
        assert!(rx.poll_recv(2, &mut cx).is_pending());
        drop(tx);
        assert_eq!(woken.count(), 2);
        assert!(matches!(rx.poll_recv(2, &mut cx), Poll::Ready(None)));
    }

    #[derive(Default)]
    struct WakeCount(std::sync::atomic::AtomicUsize);

    impl WakeCount {
        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl std::task::Wake for WakeCount {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}
