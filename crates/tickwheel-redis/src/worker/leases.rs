//! Leases: the heartbeat, renewals, fair-share rebalancing and giving shards up.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};

use redis::Value;

use super::delivery::Lease;
use super::window::ShardWindow;
use super::{ShardLoss, Worker, WorkerEvent};
use crate::connection::query_one;
use crate::namespace::{query_pipe, Error};
use crate::protocol;

/// A shard this worker holds.
#[derive(Clone, Debug)]
pub(crate) struct Owned {
    pub(crate) epoch: u64,
    /// Local instant (µs, [`ServerClock::lease_us`](super::clock::ServerClock::lease_us)) until
    /// which the lease surely holds.
    pub(crate) valid_until_us: u64,
    /// What of the shard's pending tasks the schedule holds.
    pub(crate) window: ShardWindow,
    /// Being given up (released, or on shutdown): no more deliveries under its lease, and
    /// the claims held under it are put back.
    pub(crate) revoked: bool,
    /// Paused in Redis ([`Producer::pause`](crate::Producer::pause)): claims are refused, and
    /// what was claimed ahead and not delivered is put back (see [`Shards::leases`]).
    pub(crate) paused: bool,
    /// Resumed, and its window not yet read to its end: nothing of it is claimed until the
    /// read has armed every task that fell due, so they go out together, in run-at order.
    pub(crate) resuming: bool,
}

/// The shards this worker holds, their windows, and the pace of the work on them: when the
/// leases are renewed next, whether a window read stopped at its limit, and when the worker
/// may take shards again after an outage.
#[derive(Debug)]
pub(crate) struct Shards {
    owned: BTreeMap<u32, Owned>,
    /// Local instant (µs, [`ServerClock::lease_us`](super::clock::ServerClock::lease_us)) before
    /// which the worker takes no shard it does not hold: after an outage, the shards' owners get a
    /// grace to renew first (see `rebalance`).
    pub(crate) acquire_after_us: u64,
    /// Local instant (µs) until which the worker, just connected, takes no shard another
    /// worker owns (see `rebalance`).
    pub(crate) joined_until_us: u64,
    /// Live workers as the last heartbeat counted them (at least 1): the fair share is
    /// `ceil(shards / live)`.
    pub(crate) live: u64,
    /// When maintenance (heartbeat, renewals, rebalancing) is due, namespace-clock ms.
    pub(crate) next_maintenance_ms: u64,
    /// A window is partly read: the next step reads on.
    pub(crate) reading_on: bool,
}

impl Default for Shards {
    fn default() -> Shards {
        Shards {
            owned: BTreeMap::new(),
            acquire_after_us: 0,
            joined_until_us: 0,
            live: 1,
            next_maintenance_ms: 0,
            reading_on: false,
        }
    }
}

impl Shards {
    /// The shards held, in order.
    pub(crate) fn ids(&self) -> Vec<u32> {
        self.owned.keys().copied().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.owned.len()
    }

    pub(crate) fn get(&self, shard: u32) -> Option<&Owned> {
        self.owned.get(&shard)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &Owned)> {
        self.owned.iter().map(|(&s, o)| (s, o))
    }

    /// The epoch of the lease held on `shard`.
    pub(crate) fn epoch(&self, shard: u32) -> Option<u64> {
        self.owned.get(&shard).map(|o| o.epoch)
    }

    /// Whether `shard` is held under `epoch`.
    pub(crate) fn holds(&self, shard: u32, epoch: u64) -> bool {
        self.owned.get(&shard).is_some_and(|o| o.epoch == epoch)
    }

    /// The leases held now, as the delivery side checks them: a shard being given up is left
    /// out, so the claims held under it lapse at once and are put back (RETRY undoing the
    /// claim) before the release, not left in flight for the next owner to take as a
    /// redelivery. A paused shard is left out likewise: nothing is handed to a handler
    /// while it is paused.
    pub(crate) fn leases(&self) -> HashMap<u32, Lease> {
        self.owned
            .iter()
            .filter(|(_, o)| !o.revoked && !o.paused)
            .map(|(&s, o)| {
                (
                    s,
                    Lease {
                        epoch: o.epoch,
                        valid_until_us: o.valid_until_us,
                    },
                )
            })
            .collect()
    }

    /// Marks every window to be read again, and maintenance due now (notices may have been
    /// missed, leases may want renewing).
    pub(crate) fn unload_all(&mut self) {
        for o in self.owned.values_mut() {
            o.window = ShardWindow::Unloaded;
        }
        self.next_maintenance_ms = 0;
    }

    /// Records what of `shard`'s tasks the schedule now holds.
    pub(crate) fn set_window(&mut self, shard: u32, window: ShardWindow) {
        if let Some(o) = self.owned.get_mut(&shard) {
            o.window = window;
        }
    }

    /// No more deliveries under `shard`'s lease (it is being given up): see
    /// [`Shards::leases`].
    pub(crate) fn revoke(&mut self, shard: u32) {
        if let Some(o) = self.owned.get_mut(&shard) {
            o.valid_until_us = 0;
            o.revoked = true;
        }
    }

    /// Records that `shard` is paused (or not); `true` when that changed. On resume its
    /// window is read again, so what fell due meanwhile is armed at its run-at and claimed
    /// at once, in run-at order.
    pub(crate) fn set_paused(&mut self, shard: u32, paused: bool) -> bool {
        let Some(o) = self.owned.get_mut(&shard) else {
            return false;
        };
        if o.paused == paused {
            return false;
        }
        o.paused = paused;
        o.resuming = !paused;
        if !paused {
            o.window = ShardWindow::Unloaded;
            self.next_maintenance_ms = 0;
        }
        true
    }

    /// `shard`'s window has been read to its end (see [`Owned::resuming`]).
    pub(crate) fn caught_up(&mut self, shard: u32) {
        if let Some(o) = self.owned.get_mut(&shard) {
            o.resuming = false;
        }
    }

    /// Whether nothing of `shard` may be claimed now: it is paused, or back from a pause and
    /// its window not yet read again (see [`Owned::resuming`]) while windows can be read
    /// (`subscribed`; without notifications no window is read, and the wheel is claimed as
    /// it stands rather than not at all).
    pub(crate) fn paused_or_resuming(&self, shard: u32, subscribed: bool) -> bool {
        self.owned
            .get(&shard)
            .is_some_and(|o| o.paused || (o.resuming && subscribed))
    }

    /// Extends the lease on `shard` (renewed) to `until_us`.
    fn renewed(&mut self, shard: u32, until_us: u64) {
        if let Some(o) = self.owned.get_mut(&shard) {
            o.valid_until_us = until_us;
        }
    }
}

impl Worker {
    /// Forgets a shard (lost or released): its tasks leave the schedule.
    pub(crate) fn drop_shard(&mut self, shard: u32, cause: ShardLoss) {
        let Some(o) = self.shards.owned.remove(&shard) else {
            return;
        };
        self.stats.dropped += 1;
        self.emit(WorkerEvent::ShardLost {
            shard,
            epoch: o.epoch,
            cause,
        });
        self.schedule.drop_shard(shard);
    }

    /// Gives a shard up: first no more deliveries under its lease, then its acknowledgements
    /// (under its epoch), then the release in Redis.
    pub(crate) fn release(&mut self, shard: u32) {
        if self.shards.get(shard).is_none() {
            return;
        }
        self.shards.revoke(shard);
        self.forward(true);
        self.apply_leases_locally();
        let _ = self.send_outcomes(true);
        self.release_now(shard);
    }

    pub(crate) fn release_now(&mut self, shard: u32) {
        if let Some(epoch) = self.shards.epoch(shard) {
            let call = protocol::Release {
                keys: &self.ns.shards[shard as usize],
                tenure: protocol::Tenure::new(epoch, &self.id),
            };
            // Unconfirmed: should a failover lose the release, the lease runs out there.
            if let Ok(con) = self.redis.con_or_reconnect(&self.cfg) {
                let _ = con.unconfirmed(|con| protocol::invoke(con, &call));
            }
            self.drop_shard(shard, ShardLoss::Released);
        }
    }

    /// How long a lease is counted on after the renewal was sent, µs: the lease less a
    /// twentieth, for the local clock running slower than the server's.
    pub(crate) fn lease_us_reckoned(&self) -> u64 {
        let lease = self.cfg.lease.as_micros() as u64;
        lease - lease / 20
    }

    /// Maintenance: held acknowledgements out (under their epoch, before any shard may be
    /// released), the heartbeat and every renewal, then rebalancing towards a fair share.
    pub(crate) fn maintain(&mut self) -> Result<(), Error> {
        self.flush_acks()?;
        if let Err(e) = self.renew() {
            self.emit(WorkerEvent::RenewalFailed {
                error: e.to_string(),
            });
            return Err(e);
        }
        self.rebalance()
    }

    /// The heartbeat and every renewal in one pipeline: one round trip (one fsync). Whatever
    /// fails to renew is lost.
    fn renew(&mut self) -> Result<(), Error> {
        let lease_ms = self.cfg.lease.as_millis() as u64;
        let now = protocol::now(&self.cfg);
        let held: Vec<(u32, u64)> = self.shards.iter().map(|(s, o)| (s, o.epoch)).collect();
        let beat = protocol::Heartbeat {
            workers_key: &self.ns.workers_key,
            now,
            worker: &self.id,
            ttl_ms: lease_ms,
            cluster: self.redis.on_cluster(),
        };
        let renewals: Vec<protocol::Acquire> = held
            .iter()
            .map(|&(s, epoch)| protocol::Acquire {
                keys: &self.ns.shards[s as usize],
                now,
                worker: &self.id,
                lease_ms,
                held_epoch: epoch,
            })
            .collect();
        let mut pipe = redis::pipe();
        protocol::push(&mut pipe, &beat);
        renewals.iter().for_each(|r| protocol::push(&mut pipe, r));
        let sent = self.clock.lease_us();
        let con = self.redis.con_or_reconnect(&self.cfg)?;
        let mut replies = query_pipe::<Vec<Value>>(con, &pipe)?.into_iter();
        let after = self.clock.local_us();
        let beat = protocol::next_reply(&beat, &mut replies)?;
        let renewed = renewals
            .iter()
            .map(|r| {
                let reply = protocol::next_reply(r, &mut replies)?;
                Ok((reply.epoch.is_some(), reply.paused))
            })
            .collect::<Result<Vec<(bool, bool)>, Error>>()?;
        drop(renewals);
        self.shards.live = beat.live.max(1);
        self.clock.observe(&beat.node, beat.now_us, after);
        let until = sent + self.lease_us_reckoned();
        let mut paused_changed = false;
        for ((s, _), (renewed, paused)) in held.into_iter().zip(renewed) {
            if !renewed {
                self.stats.fenced += 1;
                self.drop_shard(s, ShardLoss::NotRenewed);
            } else {
                self.shards.renewed(s, until);
                // A pause or resume whose notice was missed is learnt here.
                paused_changed |= self.shards.set_paused(s, paused);
            }
        }
        if paused_changed {
            self.forward(false);
        }
        Ok(())
    }

    /// Releases shards above a fair share (`ceil(shards / live workers)`), or takes free ones
    /// up to it, trying them from a point of its own so that workers spread out.
    ///
    /// Not during an outage, nor in its grace ([`Worker::grace_us`]) once Redis answers
    /// again: Redis's clock ran on while it was down, so every lease may have expired, with
    /// its owner alive and holding acknowledgements for what it delivered meanwhile. Taking
    /// such a shard would fence them (each of those tasks delivered again); its owner renews
    /// it in its first step after Redis is back, within a reconnection wait (at most
    /// 100 ms) instead. A shard still unrenewed after the grace has no live owner: it is
    /// taken then, not a whole lease later, so a fault that follows another within a lease
    /// costs about a lease, not two.
    ///
    /// A worker that has just connected waits the same grace before it takes a shard
    /// another worker owns: it may have connected as Redis came back (started, or restarted
    /// after a crash, while Redis was down), every lease expired and their owners not yet
    /// renewed. A shard nobody holds (never taken, or released) it takes at once.
    fn rebalance(&mut self) -> Result<(), Error> {
        let total = self.ns.shards.len() as u64;
        let fair = total.div_ceil(self.shards.live) as usize;
        while self.shards.len() > fair {
            let s = *self.shards.owned.keys().next_back().expect("non-empty");
            self.release(s);
        }
        let now = self.clock.lease_us();
        let joining = now < self.shards.joined_until_us;
        if self.shards.len() < fair && now >= self.shards.acquire_after_us {
            let start = RandomState::new().hash_one(&self.id) % total;
            for i in 0..total {
                let s = ((start + i) % total) as u32;
                if self.shards.owned.contains_key(&s) || (joining && self.has_owner(s)?) {
                    continue;
                }
                if self.acquire(s)? && self.shards.len() >= fair {
                    break;
                }
            }
        }
        Ok(())
    }

    /// How long after Redis answers again (µs) this worker waits before it takes shards it
    /// does not hold: three maintenance intervals (every live owner renews in its first
    /// step, at most a reconnection wait after Redis is back), and never more than a lease.
    pub(crate) fn grace_us(&self) -> u64 {
        let grace = (self.cfg.maintenance_interval * 3).min(self.cfg.lease);
        grace.as_micros() as u64
    }

    /// Whether Redis names another worker the owner of shard `s` (its lease live or not;
    /// a lease this worker took without hearing the reply is its own, taken again at once).
    fn has_owner(&mut self, s: u32) -> Result<bool, Error> {
        let state = self.ns.shards[s as usize].state();
        let con = self.redis.con_or_reconnect(&self.cfg)?;
        let mut hget = redis::cmd("HGET");
        hget.arg(state).arg("owner");
        let owner: Option<String> = query_one(con, hget)?;
        Ok(owner.is_some_and(|o| !o.is_empty() && o != self.id))
    }

    /// Tries to take shard `s` (epoch 0: a lease this worker does not know of, its own
    /// included should an earlier acquisition's reply have been lost). Returns whether it did.
    fn acquire(&mut self, s: u32) -> Result<bool, Error> {
        let call = protocol::Acquire {
            keys: &self.ns.shards[s as usize],
            now: protocol::now(&self.cfg),
            worker: &self.id,
            lease_ms: self.cfg.lease.as_millis() as u64,
            held_epoch: 0,
        };
        let sent = self.clock.lease_us();
        let con = self.redis.con_or_reconnect(&self.cfg)?;
        let reply = protocol::invoke(con, &call)?;
        let Some(epoch) = reply.epoch else {
            return Ok(false);
        };
        self.stats.acquired += 1;
        self.emit(WorkerEvent::ShardAcquired { shard: s, epoch });
        let valid_until_us = sent + self.lease_us_reckoned();
        self.shards.owned.insert(
            s,
            Owned {
                epoch,
                valid_until_us,
                window: ShardWindow::Unloaded,
                revoked: false,
                paused: reply.paused,
                resuming: false,
            },
        );
        Ok(true)
    }
}
