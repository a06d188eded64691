//! The source of entity timestamps: the system clock, made strictly increasing within the process.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::model::Ticks;

/// Hands out strictly increasing timestamps.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    last: AtomicI64,
}

impl Clock {
    /// The current time, or one tick past the last timestamp handed out if the clock has not moved.
    pub(crate) fn next(&self) -> Ticks {
        let now = Ticks::now().0;
        let previous = self
            .last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or_else(|last| last);
        Ticks(now.max(previous + 1))
    }
}
