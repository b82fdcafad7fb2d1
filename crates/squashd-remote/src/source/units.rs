//! Where a unit comes from: the pinned metadata, the memory tier, the disk cache or the server,
//! for readers (one fetch per unit however many miss it) and for prefetch (consecutive units in
//! one request, holding no placeholder).

use super::{Shared, MAX_TRACED};
use crate::disk_cache::UnitKey;
use crate::http::FetchError;
use crate::prefetch::Queue;
use crate::stats::Counters;
use quick_cache::sync::GuardResult;
use std::collections::HashMap;
use std::io;
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, Instant};

impl Shared {
    pub(super) fn broken(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn note_traced(&self, index: u64) {
        if let Some(trace) = &self.trace {
            let mut trace = trace.lock().unwrap_or_else(PoisonError::into_inner);
            if trace.order.len() < MAX_TRACED && trace.seen.insert(index) {
                trace.order.push(index);
            }
        }
    }

    pub(super) fn unit_len(&self, index: u64) -> u64 {
        let start = index * self.unit_size;
        self.unit_size.min(self.info.size.saturating_sub(start))
    }

    pub(super) fn key(&self, index: u64) -> UnitKey {
        UnitKey {
            object: self.identity.clone(),
            index,
        }
    }

    /// Whether unit `index` is held in memory or on its way there.
    pub(super) fn has(&self, index: u64) -> bool {
        self.memory.peek(&index).is_some()
            || self.inflight.contains(index)
            || self
                .pinned
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(&index)
    }

    pub(super) fn queue_range(&self, pos: u64, len: u64) {
        let Some(end) = pos.checked_add(len).map(|e| e.min(self.info.size)) else {
            return;
        };
        if len == 0 || pos >= end {
            return;
        }
        self.queue_units(pos / self.unit_size..(end - 1) / self.unit_size + 1);
    }

    pub(super) fn queue_units(&self, units: std::ops::Range<u64>) {
        let count = self.info.size.div_ceil(self.unit_size);
        let units = units.start.min(count)..units.end.min(count);
        if self.workers.count == 0 || units.is_empty() {
            return;
        }
        self.workers.ensure_started(&self.queue);
        self.queue.push(units.filter(|&u| !self.has(u)));
    }

    /// Unit `index` for a reader, from wherever it is nearest.
    pub(super) fn unit(&self, index: u64) -> io::Result<Arc<[u8]>> {
        if let Some(bytes) = self
            .pinned
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&index)
        {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(bytes.clone());
        }
        if let Some(bytes) = self.memory.get(&index) {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(bytes);
        }
        let started = Instant::now();
        // Prefetch may have the unit on the way: its bytes come sooner than a request of our
        // own would bring them. Looked for before taking the placeholder: prefetch offers a
        // unit to memory before it lets go of it here, so a unit not found in flight now is
        // either in memory by now or was not yet asked for.
        let result = match self.inflight.wait(index, PATIENCE_FOR_PREFETCH) {
            Some(bytes) => Ok(bytes),
            None => match self.memory.get_value_or_guard(&index, None) {
                GuardResult::Value(bytes) => Ok(bytes),
                GuardResult::Guard(guard) => {
                    let bytes = self.load_for_reader(index)?;
                    let _ = guard.insert(bytes.clone());
                    Ok(bytes)
                }
                GuardResult::Timeout => Err(io::Error::other("unreachable: no time-out was set")),
            },
        };
        Counters::add(&self.counters.wait_ns, started.elapsed().as_nanos() as u64);
        result
    }

    /// Fetches the consecutive units `run` ahead of readers: those not held or on their way
    /// already, from the disk cache where it has them, the rest in one request per stretch
    /// without a gap. No placeholder is held during the request: a reader that misses one of
    /// these units waits for it as it is on its way (see `inflight`), and each unit is offered
    /// to the memory tier only if no reader has loaded it or is loading it.
    pub(super) fn load_ahead(&self, run: &[u64]) -> io::Result<()> {
        let mut missing = Vec::new();
        for &index in run {
            if self.has(index) {
                continue;
            }
            match self.disk_unit(index) {
                Some(bytes) => self.offer(index, bytes),
                None => missing.push(index),
            }
        }
        let mut rest = &missing[..];
        while let Some(&first) = rest.first() {
            let stretch = rest
                .windows(2)
                .take_while(|pair| pair[1] == pair[0] + 1)
                .count()
                + 1;
            let last = rest[stretch - 1];
            rest = &rest[stretch..];
            self.stream_run(first, last, None)?;
        }
        Ok(())
    }

    /// Fetches units `first..=last` in one request, each unit offered (and handed to the
    /// readers waiting for it) as soon as its bytes are in, not at the end of the request.
    /// For a reader (`want`: the unit it needs, which it holds the placeholder of), on a
    /// reader's connection; else ahead of readers, on prefetch's.
    fn stream_run(
        &self,
        first: u64,
        last: u64,
        want: Option<u64>,
    ) -> io::Result<Option<Arc<[u8]>>> {
        let _permit = match want {
            Some(_) => self.gate.for_reader(),
            None => self.gate.for_prefetch(),
        };
        let last = match want {
            Some(_) => {
                self.inflight.begin(first..=last);
                last
            }
            // A reader may have fetched or started to fetch some of these units since they were
            // queued: prefetch takes the stretch before the first of them, and queues again
            // what follows it.
            None => {
                let asked = last;
                let held = |unit| self.memory.peek(&unit).is_some();
                let Some(last) = self.inflight.begin_stretch(first..=asked, held) else {
                    return Ok(None);
                };
                if last < asked {
                    self.queue_units(last + 1..asked + 1);
                }
                last
            }
        };
        let start = first * self.unit_size;
        let end = last * self.unit_size + self.unit_len(last);
        let mut wanted = None;
        let streamed = self.fetcher.get_chunks(
            &self.info,
            start,
            end - start,
            self.unit_size,
            |pos, bytes| {
                let index = pos / self.unit_size;
                let unit: Arc<[u8]> = Arc::from(bytes);
                if want == Some(index) {
                    wanted = Some(unit.clone());
                } else {
                    self.offer(index, unit.clone());
                }
                self.inflight.finish(index, Some(unit.clone()));
                if want.is_none() {
                    Counters::add(&self.counters.units_prefetched, 1);
                }
                self.count_and_keep(index, &unit);
            },
        );
        // Whatever did not arrive: its waiters fetch it themselves.
        for index in first..=last {
            self.inflight.finish(index, None);
        }
        streamed.map_err(|e| self.failed(e))?;
        Ok(wanted)
    }

    /// Puts a unit fetched ahead into the memory tier, unless a reader got there first.
    pub(super) fn offer(&self, index: u64, bytes: Arc<[u8]>) {
        if let GuardResult::Guard(guard) =
            self.memory.get_value_or_guard(&index, Some(Duration::ZERO))
        {
            let _ = guard.insert(bytes);
        }
    }

    /// Unit `index` for a reader who missed it: from the disk cache, else from the server
    /// (then into the disk cache). Units queued for prefetch right after it come in the same
    /// request: prefetch has fallen behind this reader, and a request per unit would cost it
    /// a round trip each.
    fn load_for_reader(&self, index: u64) -> io::Result<Arc<[u8]>> {
        if let Some(bytes) = self.disk_unit(index) {
            return Ok(bytes);
        }
        // On its way from now on, for prefetch to leave alone and other readers to wait for;
        // unless prefetch took it since we looked: then its bytes are what we wait for.
        if self
            .inflight
            .begin_stretch(index..=index, |_| false)
            .is_none()
        {
            if let Some(bytes) = self.inflight.wait(index, PATIENCE_FOR_PREFETCH) {
                return Ok(bytes);
            }
            self.inflight.begin([index]);
        }
        let claimed = self
            .queue
            .claim(index, super::units_in(READER_RUN_BYTES, self.unit_size));
        let mut last = index;
        for (at, &unit) in claimed.iter().enumerate().skip(1) {
            // A unit held already ends the run (one on disk is brought into memory on the way).
            let held = self.has(unit)
                || self
                    .disk_unit(unit)
                    .map(|bytes| self.offer(unit, bytes))
                    .is_some();
            if held {
                self.queue.push(claimed[at + 1..].iter().copied());
                break;
            }
            last = unit;
        }
        self.stream_run(index, last, Some(index))?
            .ok_or_else(|| io::Error::other(format!("{}: unit {index} came back empty", self.name)))
    }

    /// Unit `index` from the disk cache, if it holds it whole.
    fn disk_unit(&self, index: u64) -> Option<Arc<[u8]>> {
        let bytes = self
            .disk
            .as_ref()?
            .get(&self.key(index))
            .filter(|b| b.len() as u64 == self.unit_len(index))?;
        Counters::add(&self.counters.disk_hits, 1);
        Some(bytes.into())
    }

    /// Units `first..=last` in one request on a reader's connection (the metadata pin), each
    /// counted and kept in the disk cache.
    fn fetch_units(&self, first: u64, last: u64) -> io::Result<Vec<(u64, Arc<[u8]>)>> {
        let start = first * self.unit_size;
        let end = last * self.unit_size + self.unit_len(last);
        let bytes = {
            let _permit = self.gate.for_reader();
            self.fetch(start, end - start)?
        };
        let mut units = Vec::new();
        for index in first..=last {
            let at = ((index - first) * self.unit_size) as usize;
            let Some(unit) = bytes.get(at..at + self.unit_len(index) as usize) else {
                break;
            };
            self.count_and_keep(index, unit);
            units.push((index, Arc::from(unit)));
        }
        Ok(units)
    }

    /// Counts unit `index` as fetched and keeps it in the disk cache.
    fn count_and_keep(&self, index: u64, unit: &[u8]) {
        Counters::add(&self.counters.units_fetched, 1);
        if let Some(disk) = &self.disk {
            disk.put(&self.key(index), unit);
        }
    }

    /// Keeps the whole units among `bytes`, the object's end from `start` on, fetched when it
    /// was opened.
    pub(super) fn keep_tail(&self, start: u64, bytes: &[u8]) {
        let mut index = start.div_ceil(self.unit_size);
        while let Some(unit) = usize::try_from(index * self.unit_size - start)
            .ok()
            .and_then(|at| bytes.get(at..at + self.unit_len(index) as usize))
            .filter(|unit| !unit.is_empty())
        {
            if !self.has(index) {
                self.keep_fetched(index, unit);
            }
            index += 1;
        }
    }

    /// Keeps unit `index`, fetched when the object was opened, in memory and on disk.
    pub(super) fn keep_fetched(&self, index: u64, unit: &[u8]) {
        if unit.len() as u64 == self.unit_len(index) {
            self.count_and_keep(index, unit);
            self.offer(index, Arc::from(unit));
        }
    }

    /// Bytes from the server; a changed object breaks the source for good.
    pub(super) fn fetch(&self, start: u64, len: u64) -> io::Result<Vec<u8>> {
        self.fetcher
            .get(&self.info, start, len)
            .map_err(|e| self.failed(e))
    }

    pub(super) fn failed(&self, e: FetchError) -> io::Error {
        let message = e.to_string();
        if matches!(e, FetchError::Changed(_)) {
            tracing::error!("{}: {message}; every read of it now fails", self.name);
            *self.broken.lock().unwrap_or_else(PoisonError::into_inner) = Some(message.clone());
        } else {
            tracing::warn!("{}: {message}", self.name);
        }
        io::Error::other(format!("{}: {message}", self.name))
    }

    /// Pins the units covering `start..end`, fetching those the disk cache lacks in one request.
    pub(super) fn pin(&self, start: u64, end: u64) -> io::Result<()> {
        let first = start / self.unit_size;
        let last = (end - 1) / self.unit_size;
        let mut pinned = HashMap::new();
        let mut missing = Vec::new();
        for index in first..=last {
            match self.memory.get(&index).or_else(|| self.disk_unit(index)) {
                Some(bytes) => {
                    pinned.insert(index, bytes);
                }
                None => missing.push(index),
            }
        }
        if let (Some(&from), Some(&to)) = (missing.first(), missing.last()) {
            for (index, unit) in self.fetch_units(from, to)? {
                pinned.entry(index).or_insert(unit);
            }
        }
        self.pinned
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(pinned);
        Ok(())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// How long a reader waits for a unit prefetch has on the way before fetching it itself (the
/// prefetch request may be retrying a failure).
const PATIENCE_FOR_PREFETCH: Duration = Duration::from_secs(5);

/// Bytes a reader's request fetches at most (its unit and those queued for prefetch after it).
const READER_RUN_BYTES: u64 = 4 << 20;

/// Bytes one prefetch request fetches at most: a sequential reader's window comes in few
/// large requests, so that a few threads keep a high bandwidth-delay product in flight.
pub(super) const MAX_RUN_BYTES: u64 = 8 << 20;

/// Fetches queued units while the source lives; holds it only for one run at a time, so a
/// dropped source ends its workers.
pub(super) fn prefetch_worker(shared: &Weak<Shared>, queue: &Queue, run_units: usize) {
    while let Ok(run) = queue.pop_run(run_units, Duration::from_secs(1)) {
        if run.is_empty() {
            continue;
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.broken().is_none() {
            // A failure here is a reader's to meet and report; prefetch just stops for it.
            let _ = shared.load_ahead(&run);
        }
    }
}
