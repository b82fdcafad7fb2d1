//! Connections shared between readers and prefetch so that prefetch never starves a
//! reader: a reader waits only for a free connection; prefetch also waits while any reader is
//! waiting, and never takes the last connections, which stay for readers.

use std::sync::{Condvar, Mutex, PoisonError};

/// Counts requests in flight against a limit of connections.
pub(crate) struct Gate {
    state: Mutex<State>,
    changed: Condvar,
    connections: usize,
    /// Connections prefetch never takes.
    reserved: usize,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    readers_waiting: usize,
}

/// One request's right to a connection, given back when dropped.
pub(crate) struct Permit<'a>(&'a Gate);

impl Gate {
    pub fn new(connections: usize) -> Gate {
        let connections = connections.max(1);
        Gate {
            state: Mutex::default(),
            changed: Condvar::new(),
            connections,
            reserved: (connections / 4).max(1),
        }
    }

    /// A connection for a reader that is waiting for the bytes.
    pub fn for_reader(&self) -> Permit<'_> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.readers_waiting += 1;
        while state.in_flight >= self.connections {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.readers_waiting -= 1;
        state.in_flight += 1;
        Permit(self)
    }

    /// A connection for prefetch: only while no reader waits and a reserve stays free.
    pub fn for_prefetch(&self) -> Permit<'_> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while state.readers_waiting > 0
            || state.in_flight + self.reserved >= self.connections.max(2)
        {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.in_flight += 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.in_flight -= 1;
        drop(state);
        self.0.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn prefetch_waits_while_a_reader_waits() {
        let gate = Arc::new(Gate::new(2));
        // One connection in use by a reader; prefetch may not take the last one (reserve 1).
        let held = gate.for_reader();
        let (tx, rx) = std::sync::mpsc::channel();
        let ahead = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let _p = gate.for_prefetch();
                tx.send(()).unwrap();
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        // A second reader still gets the last connection at once.
        let second = gate.for_reader();
        drop(second);
        drop(held);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        ahead.join().unwrap();
    }
}
