//! [`Scan`]: the tasks a [`ListFilter`] selects, page by page; in-flight tasks shard by
//! shard, then pending ones merged across shards by run-at second.

use std::collections::VecDeque;

use super::{one_by_one, Inspector, ListFilter, StateFilter, TaskInfo, MAX_STEP};
use crate::error::Error;
use crate::protocol::scripts::BUCKET_MS;
use crate::protocol::{InspectInFlight, InspectPending, PendingCursor, TaskRow};

/// A scan in progress: [`Inspector::scan`].
#[derive(Debug)]
pub struct Scan<'a> {
    inspector: &'a mut Inspector,
    /// In-flight phase: (shard, next rank) of the shards not read to their end.
    in_flight: Vec<(u32, u64)>,
    /// Pending phase: each shard's cursor and the tasks read from it and not yet returned.
    pending: Vec<ShardScan>,
    lo_ms: u64,
    hi_ms: u64,
    /// Tasks still to return (`None`: no limit).
    left: Option<usize>,
}

#[derive(Debug)]
struct ShardScan {
    shard: u32,
    cursor: PendingCursor,
    buffer: VecDeque<TaskRow>,
    done: bool,
}

impl<'a> Scan<'a> {
    /// The scan `filter` selects: shards checked, cursors at their start.
    pub(super) fn new(inspector: &'a mut Inspector, filter: ListFilter) -> Result<Scan<'a>, Error> {
        let n = inspector.shards();
        let shards: Vec<u32> = match &filter.shards {
            None => (0..n).collect(),
            Some(list) => {
                if let Some(&bad) = list.iter().find(|&&s| s >= n) {
                    return Err(Error::InvalidConfig(format!(
                        "shard {bad}: the namespace has shards 0 to {}",
                        n - 1
                    )));
                }
                let mut list = list.clone();
                list.sort_unstable();
                list.dedup();
                list
            }
        };
        let lo_ms = filter.due_after_ms.unwrap_or(0);
        let hi_ms = match filter.due_before_ms {
            Some(0) => None,
            Some(ms) => Some(ms - 1),
            None => Some(u64::MAX >> 11),
        };
        let in_flight = match filter.state {
            StateFilter::Pending => Vec::new(),
            _ => shards.iter().map(|&s| (s, 0)).collect(),
        };
        let pending = match (filter.state, hi_ms) {
            (StateFilter::InFlight, _) | (_, None) => Vec::new(),
            (_, Some(_)) => shards
                .iter()
                .map(|&s| ShardScan {
                    shard: s,
                    cursor: PendingCursor {
                        bucket: filter.due_after_ms.map(|ms| ms / BUCKET_MS),
                        ..PendingCursor::default()
                    },
                    buffer: VecDeque::new(),
                    done: false,
                })
                .collect(),
        };
        Ok(Scan {
            inspector,
            in_flight: if hi_ms.is_none() {
                Vec::new()
            } else {
                in_flight
            },
            pending,
            lo_ms,
            hi_ms: hi_ms.unwrap_or(0),
            left: filter.limit,
        })
    }

    /// The next page of tasks (at most about [`MAX_STEP`] times the shards read), or `None`
    /// when the scan is complete. A page may be empty while the scan goes on.
    pub fn next_page(&mut self) -> Result<Option<Vec<TaskInfo>>, Error> {
        if self.left == Some(0) {
            return Ok(None);
        }
        let page = if !self.in_flight.is_empty() {
            self.in_flight_page()?
        } else if self.pending.iter().any(|s| !s.done || !s.buffer.is_empty()) {
            self.pending_page()?
        } else {
            return Ok(None);
        };
        Ok(Some(self.take(page)))
    }

    /// The step each call reads: the tasks still wanted, at most [`MAX_STEP`].
    fn step(&self) -> u64 {
        self.left.unwrap_or(MAX_STEP).clamp(1, MAX_STEP) as u64
    }

    fn take(&mut self, mut page: Vec<TaskInfo>) -> Vec<TaskInfo> {
        if let Some(left) = &mut self.left {
            page.truncate(*left);
            *left -= page.len();
        }
        page
    }

    fn in_flight_page(&mut self) -> Result<Vec<TaskInfo>, Error> {
        let (lo_ms, hi_ms, limit) = (self.lo_ms, self.hi_ms, self.step());
        let shards = std::mem::take(&mut self.in_flight);
        let pages = self.inspector.with_con(|con, ns, _| {
            let calls: Vec<InspectInFlight> = shards
                .iter()
                .map(|&(s, offset)| InspectInFlight {
                    keys: &ns.shards[s as usize],
                    offset,
                    limit,
                    lo_ms,
                    hi_ms,
                })
                .collect();
            one_by_one(con, &calls)
        });
        let pages = match pages {
            Ok(p) => p,
            Err(e) => {
                self.in_flight = shards;
                return Err(e);
            }
        };
        let mut out = Vec::new();
        for (&(s, _), page) in shards.iter().zip(pages) {
            out.extend(page.tasks.into_iter().map(|r| TaskInfo::from_row(r, s)));
            if let Some(next) = page.next {
                self.in_flight.push((s, next));
            }
        }
        Ok(out)
    }

    /// Refills the shards whose buffer is empty (a call each), then returns tasks in
    /// (second, shard) order while every shard still being read has some buffered: a shard
    /// whose buffer runs dry may hold earlier tasks than the others' next ones.
    fn pending_page(&mut self) -> Result<Vec<TaskInfo>, Error> {
        let (lo_ms, hi_ms, limit) = (self.lo_ms, self.hi_ms, self.step());
        let to_bucket = Some(hi_ms / BUCKET_MS);
        let refill: Vec<usize> = (0..self.pending.len())
            .filter(|&i| !self.pending[i].done && self.pending[i].buffer.is_empty())
            .collect();
        if !refill.is_empty() {
            let cursors: Vec<(u32, PendingCursor)> = refill
                .iter()
                .map(|&i| (self.pending[i].shard, self.pending[i].cursor.clone()))
                .collect();
            let pages = self.inspector.with_con(|con, ns, _| {
                let calls: Vec<InspectPending> = cursors
                    .iter()
                    .map(|(s, cursor)| InspectPending {
                        keys: &ns.shards[*s as usize],
                        from: cursor,
                        to_bucket,
                        lo_ms,
                        hi_ms,
                        limit,
                    })
                    .collect();
                one_by_one(con, &calls)
            })?;
            for (&i, page) in refill.iter().zip(pages) {
                let s = &mut self.pending[i];
                s.buffer.extend(page.tasks);
                match page.next {
                    Some(c) => s.cursor = c,
                    None => s.done = true,
                }
            }
        }
        let mut out = Vec::new();
        let want = self.left.unwrap_or(usize::MAX);
        while out.len() < want {
            if self.pending.iter().any(|s| !s.done && s.buffer.is_empty()) {
                break;
            }
            let Some(i) = (0..self.pending.len())
                .filter(|&i| !self.pending[i].buffer.is_empty())
                .min_by_key(|&i| (self.pending[i].buffer[0].due_ms / BUCKET_MS, i))
            else {
                break;
            };
            let s = &mut self.pending[i];
            let row = s.buffer.pop_front().expect("not empty");
            out.push(TaskInfo::from_row(row, s.shard));
        }
        Ok(out)
    }
}
