//! The server clock as each worker estimates it (per node on a Cluster), never ahead of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;

use super::local_us;
use crate::namespace::{string, Endpoint, TimeSource};

/// The local clock the estimates are reckoned against: the system clock, or (in unit tests)
/// a virtual one.
#[derive(Clone, Debug)]
pub(crate) enum Local {
    System,
    #[cfg(test)]
    Manual(Arc<std::sync::atomic::AtomicU64>),
}

/// One node's clock as estimated: its clock minus the local clock, µs, a lower bound (see
/// [`ServerClock::observe`]), and the local µs of the last sample.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeClock {
    pub(crate) offset_us: i64,
    pub(crate) observed_at_us: u64,
}

impl NodeClock {
    /// The offset at local `at_us`: the last lower bound, slid down by 1 ms per second since
    /// (the local clock may run faster than the node's).
    pub(crate) fn offset_at(&self, at_us: u64) -> i64 {
        self.offset_us - (at_us.saturating_sub(self.observed_at_us) / 1000) as i64
    }
}

/// The estimates of every node's clock seen, by node (a Cluster node id; `""` for one
/// server), and an index for each node id.
#[derive(Debug, Default)]
pub(crate) struct Nodes {
    pub(crate) ids: HashMap<String, u32>,
    pub(crate) clocks: Vec<Option<NodeClock>>,
}

/// The namespace's clock as a worker estimates it, shared with its delivery thread and its
/// clock thread.
///
/// Every node has a clock of its own (the one server, or each node of a Cluster), and a claim
/// is judged by the clock of the node that runs it, so the estimate is kept per node: a
/// task claimed ahead is delivered when the estimate of the clock of *the node that claimed
/// it* reaches its run-at. Each estimate is fed only by replies that name their node (the
/// claim replies carry it, and so do the clock thread's probes), so a shard that moves to
/// another node (a resharding, a failover) cannot lend one node's clock to another's claims.
#[derive(Clone, Debug)]
pub(crate) struct ServerClock {
    pub(crate) time: TimeSource,
    pub(crate) local: Local,
    pub(crate) nodes: Arc<Mutex<Nodes>>,
}

impl ServerClock {
    pub(crate) fn new(time: TimeSource) -> ServerClock {
        ServerClock {
            time,
            local: Local::System,
            nodes: Arc::default(),
        }
    }

    /// The local clock, µs since the Unix epoch.
    pub(crate) fn local_us(&self) -> u64 {
        match &self.local {
            Local::System => local_us(),
            #[cfg(test)]
            Local::Manual(t) => t.load(Ordering::SeqCst),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Nodes> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index of `node` (a Cluster node id, `""` for one server).
    pub(crate) fn node(&self, node: &str) -> u32 {
        let mut n = self.lock();
        if let Some(&i) = n.ids.get(node) {
            return i;
        }
        let i = n.clocks.len() as u32;
        n.ids.insert(node.to_string(), i);
        n.clocks.push(None);
        i
    }

    /// Takes in a reading of `node`'s clock (`server_us`) from a reply that arrived at local
    /// `after_us`; returns the node's index. The node read its clock before replying, so
    /// `server_us - after_us` is a lower bound of its offset; the estimate is the tightest
    /// recent lower bound, allowed to slide down by 1 ms per second for clock drift. An
    /// estimate that is never ahead means no early delivery.
    pub(crate) fn observe(&self, node: &str, server_us: i64, after_us: u64) -> u32 {
        let i = self.node(node);
        if !matches!(self.time, TimeSource::Server) {
            return i;
        }
        let mut n = self.lock();
        let slot = &mut n.clocks[i as usize];
        let sample = server_us - after_us as i64;
        *slot = Some(match *slot {
            None => NodeClock {
                offset_us: sample,
                observed_at_us: after_us,
            },
            Some(c) => NodeClock {
                offset_us: sample.max(c.offset_at(after_us)),
                observed_at_us: after_us.max(c.observed_at_us),
            },
        });
        i
    }

    /// Forgets the estimate of `node`'s clock (`""`: the one server's): under Sentinel, after
    /// a failover, `""` is another node with a clock of its own, which the old node's
    /// estimate must not stand for (a new primary whose clock is behind would make the
    /// deliveries early by the difference). Until the next reading, deliveries timed by it
    /// wait.
    pub(crate) fn forget(&self, node: &str) {
        let mut n = self.lock();
        if let Some(&i) = n.ids.get(node) {
            n.clocks[i as usize] = None;
        }
    }

    /// Now by the clock of node `node` (an index from [`ServerClock::observe`]), µs since the Unix
    /// epoch, never ahead of that node's clock; `None` before any reading of it.
    pub(crate) fn node_now_us(&self, node: u32) -> Option<u64> {
        match &self.time {
            TimeSource::Manual(t) => Some(t.now_ms() * 1000),
            TimeSource::Server => {
                let local = self.local_us();
                let c = (*self.lock().clocks.get(node as usize)?)?;
                Some((local as i64 + c.offset_at(local)).max(0) as u64)
            }
        }
    }

    /// Now by the namespace's clock, µs since the Unix epoch: the latest of the nodes'
    /// estimates (the local clock before any reading). It paces the I/O side (when to claim,
    /// to renew, to read); it may run ahead of some node's clock by as much as the node
    /// clocks disagree, so deliveries go by [`ServerClock::node_now_us`] instead.
    pub(crate) fn now_us(&self) -> u64 {
        match &self.time {
            TimeSource::Manual(t) => t.now_ms() * 1000,
            TimeSource::Server => {
                let local = self.local_us();
                let n = self.lock();
                let best = n.clocks.iter().flatten().map(|c| c.offset_at(local)).max();
                (local as i64 + best.unwrap_or(0)).max(0) as u64
            }
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.now_us() / 1000
    }

    /// The clock leases are reckoned on, µs: the local clock (a lease is renewed for `lease`
    /// from the moment Redis runs the renewal, which is after the worker sent it), or the
    /// manual clock, which the scripts use as their now.
    pub(crate) fn lease_us(&self) -> u64 {
        match &self.time {
            TimeSource::Manual(t) => t.now_ms() * 1000,
            TimeSource::Server => self.local_us(),
        }
    }
}

/// Reads the server's clock every 100 ms on a connection of its own, for the clock
/// estimates. Replies to the scripts are poorer samples while Redis is busy: under
/// `appendfsync always` a reply waits for the fsync of every write of its event-loop round,
/// and an estimate fed only by them falls behind (the worker then delivers late by as much).
/// A probe writes nothing, so one that lands in a round without writes comes back at once;
/// the estimate keeps the tightest. One server: `TIME`. A Cluster: each primary in turn,
/// with a script that returns the node's id beside its clock (each node has a clock of its
/// own, and each sample must go to its own node's estimate); the primaries are looked up
/// again every 5 s and after an error.
pub(crate) fn clock_loop(
    client: Endpoint,
    clock: ServerClock,
    stop: Arc<AtomicBool>,
    io_timeout: Duration,
) {
    let mut single = None;
    let mut cluster = ClusterProbe::default();
    while !stop.load(Ordering::SeqCst) {
        match &client {
            Endpoint::Cluster(c, _) => cluster.probe(c, &clock),
            _ => probe_single(&client, &mut single, &clock, io_timeout),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One reading of a single server's clock with `TIME` (a command that writes nothing),
/// reconnecting first if the last one failed (under Sentinel, to the primary of now).
fn probe_single(
    client: &Endpoint,
    con: &mut Option<redis::Connection>,
    clock: &ServerClock,
    io_timeout: Duration,
) {
    if con.is_some() && client.primary_moved(io_timeout) {
        *con = None;
        clock.forget("");
    }
    if con.is_none() {
        *con = client.plain_connection(io_timeout).ok().map(|(c, _)| c);
    }
    if let Some(c) = con.as_mut() {
        match redis::cmd("TIME").query::<(i64, i64)>(c) {
            Ok((secs, micros)) => {
                clock.observe("", secs * 1_000_000 + micros, clock.local_us());
            }
            Err(_) => *con = None,
        }
    }
}

/// Every this many rounds of the Cluster prober (100 ms each), it opens its connection
/// again (a fresh slot map) and reads every primary at once, learning them anew.
const RELEARN_ROUNDS: u64 = 50;

/// The clock prober's state on a Cluster: its connection, the primaries it knows, and how
/// many rounds it made (every [`RELEARN_ROUNDS`]th opens the connection again and reads every
/// primary at once, learning them anew).
#[derive(Default)]
struct ClusterProbe {
    con: Option<redis::cluster::ClusterConnection>,
    primaries: Vec<(String, u16)>,
    round: u64,
}

impl ClusterProbe {
    /// One round: a reading of every primary's clock, each filed under the node it names.
    fn probe(&mut self, seeds: &crate::connection::Seeds, clock: &ServerClock) {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
        if self.round % RELEARN_ROUNDS == 0 {
            // A connection reads its slot map only when it opens, and a graceful failover
            // raises no error here (the demoted node still answers the probe): learning the
            // primaries anew means opening the connection again.
            self.con = None;
        }
        if self.con.is_none() {
            self.con = seeds.connect().ok();
            self.primaries.clear();
        }
        let Some(c) = self.con.as_mut() else {
            return;
        };
        let probe = crate::protocol::Probe::command();
        let observe = |v: Value, after: u64| -> Option<()> {
            let r = crate::protocol::Probe::decode(v).ok()?;
            clock.observe(&r.node, r.now_us, after);
            Some(())
        };
        let ok = if self.primaries.is_empty() || self.round % RELEARN_ROUNDS == 0 {
            // Every primary at once: their addresses, and a sample of each (stamped when the
            // last one answered: a looser bound, still a bound).
            let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let primaries = &mut self.primaries;
            c.route_command(&probe, all).ok().and_then(|v| {
                let after = clock.local_us();
                let Value::Map(m) = v else { return None };
                primaries.clear();
                for (addr, v) in m {
                    let addr = string(addr).ok()?;
                    let (host, port) = addr.rsplit_once(':')?;
                    primaries.push((host.to_string(), port.parse().ok()?));
                    observe(v, after)?;
                }
                Some(())
            })
        } else {
            self.primaries.iter().try_for_each(|(host, port)| {
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                observe(c.route_command(&probe, to).ok()?, clock.local_us())
            })
        };
        if ok.is_none() {
            self.con = None;
        }
        self.round += 1;
    }
}
