//! Leases: the heartbeat, renewals, fair-share rebalancing and giving shards up.

#[allow(unused_imports)]
use super::*;

impl Worker {
    /// The leases held now, as the delivery side checks them.
    pub(crate) fn leases(&self) -> HashMap<u32, Lease> {
        self.owned
            .iter()
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

    /// Forgets a shard (lost or released): its tasks leave the wheel.
    pub(crate) fn drop_shard(&mut self, shard: u32, cause: ShardLoss) {
        let Some(o) = self.owned.remove(&shard) else {
            return;
        };
        self.stats.dropped += 1;
        self.emit(WorkerEvent::ShardLost {
            shard,
            epoch: o.epoch,
            cause,
        });
        let keys: Vec<(u32, String)> = self
            .index
            .keys()
            .filter(|(s, _)| *s == shard)
            .cloned()
            .collect();
        for k in keys {
            if let Some((key, _)) = self.index.remove(&k) {
                self.wheel.remove(key);
            }
        }
    }

    /// Gives a shard up: first no more deliveries under its lease, then its acknowledgements
    /// (under its epoch), then the release in Redis.
    pub(crate) fn release(&mut self, shard: u32) {
        let Some(o) = self.owned.get_mut(&shard) else {
            return;
        };
        o.valid_until_us = 0;
        self.forward(true);
        self.settle_local();
        let _ = self.send_outcomes(true);
        self.release_now(shard);
    }

    pub(crate) fn release_now(&mut self, shard: u32) {
        if let Some(epoch) = self.owned.get(&shard).map(|o| o.epoch) {
            let call = protocol::Release {
                keys: &self.ns.shards[shard as usize],
                worker: &self.id,
                epoch,
            };
            if let Ok(con) = open_con(&mut self.con, &self.cfg, &self.client) {
                let _ = protocol::invoke(con, &call);
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
        let held: Vec<(u32, u64)> = self.owned.iter().map(|(&s, o)| (s, o.epoch)).collect();
        let beat = protocol::Heartbeat {
            workers_key: &self.ns.workers_key,
            now,
            worker: &self.id,
            ttl_ms: lease_ms,
            cluster: self.on_cluster(),
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
        let con = open_con(&mut self.con, &self.cfg, &self.client)?;
        let mut replies = query_pipe::<Vec<Value>>(con, &pipe)?.into_iter();
        let after = self.clock.local_us();
        let beat = protocol::next_reply(&beat, &mut replies)?;
        let renewed = renewals
            .iter()
            .map(|r| Ok(protocol::next_reply(r, &mut replies)?.epoch.is_some()))
            .collect::<Result<Vec<bool>, Error>>()?;
        drop(renewals);
        self.live = beat.live.max(1);
        self.clock.observe(&beat.node, beat.now_us, after);
        let until = sent + self.lease_us_reckoned();
        for ((s, _), renewed) in held.into_iter().zip(renewed) {
            if !renewed {
                self.stats.fenced += 1;
                self.drop_shard(s, ShardLoss::NotRenewed);
            } else if let Some(o) = self.owned.get_mut(&s) {
                o.valid_until_us = until;
            }
        }
        Ok(())
    }

    /// Releases shards above a fair share (`ceil(shards / live workers)`), or takes free ones
    /// up to it, trying them from a point of its own so that workers spread out.
    ///
    /// Not in the first lease after an outage: Redis's clock ran on while it was down, so
    /// every lease may have expired, with its owner alive and holding acknowledgements for
    /// what it delivered meanwhile. Taking such a shard would fence them (each of those
    /// tasks delivered again); its owner renews it within a reconnection wait instead. A
    /// shard whose owner is gone is taken a lease later.
    fn rebalance(&mut self) -> Result<(), Error> {
        let total = self.ns.shards.len() as u64;
        let fair = total.div_ceil(self.live) as usize;
        while self.owned.len() > fair {
            let s = *self.owned.keys().next_back().expect("non-empty");
            self.release(s);
        }
        if self.owned.len() < fair && self.clock.lease_us() >= self.acquire_after_us {
            let start = RandomState::new().hash_one(&self.id) % total;
            for i in 0..total {
                let s = ((start + i) % total) as u32;
                if self.owned.contains_key(&s) {
                    continue;
                }
                if self.acquire(s)? && self.owned.len() >= fair {
                    break;
                }
            }
        }
        Ok(())
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
        let con = open_con(&mut self.con, &self.cfg, &self.client)?;
        let Some(epoch) = protocol::invoke(con, &call)?.epoch else {
            return Ok(false);
        };
        self.stats.acquired += 1;
        self.emit(WorkerEvent::ShardAcquired { shard: s, epoch });
        let valid_until_us = sent + self.lease_us_reckoned();
        self.owned.insert(
            s,
            Owned {
                epoch,
                valid_until_us,
                window: Window::Unloaded,
            },
        );
        Ok(true)
    }
}
