//! A byte-bounded, crash-safe disk cache of fetched units, shared by every remote image of a process.
