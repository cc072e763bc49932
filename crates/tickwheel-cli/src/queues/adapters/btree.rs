//! Peer: `BTreeMap<(deadline, id), _>`, the design of async-io's reactor timers (smol).
//!
//! Keys are unique because ids are; cancel and reset are a remove (and an insert) by key,
//! and firing pops the first key while its deadline is due.

use super::VirtualTimeQueue;
use std::collections::BTreeMap;

/// Timers ordered by `(deadline, id)`.
#[derive(Debug, Default)]
pub struct BTreeTimers {
    map: BTreeMap<(u64, u32), ()>,
}

impl VirtualTimeQueue for BTreeTimers {
    type Handle = (u64, u32);

    #[inline]
    fn insert(&mut self, id: u32, deadline: u64) -> (u64, u32) {
        self.map.insert((deadline, id), ());
        (deadline, id)
    }

    #[inline]
    fn cancel(&mut self, key: (u64, u32)) -> bool {
        self.map.remove(&key).is_some()
    }

    #[inline]
    fn reset(&mut self, key: (u64, u32), id: u32, deadline: u64) -> (u64, u32) {
        self.map.remove(&key);
        self.insert(id, deadline)
    }

    #[inline]
    fn advance(&mut self, now: u64, fired: &mut Vec<(u32, u64)>) {
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (_, id) = entry.remove_entry().0;
            fired.push((id, now));
        }
    }
}
