//! A TCP proxy that a partition test can cut: in front of a server, it forwards every
//! connection until [`Partition::cut`], then closes the connections it isolates (all, or
//! those whose client identifies itself as the rule says) and closes each new one as soon
//! as it identifies, until [`Partition::heal`]. Closing rather than dropping packets: the
//! peers notice at once (as behind a firewall that rejects), where a silent drop would
//! leave the test waiting for their timeouts. The rule is asked at the cut (and of a new
//! connection while cut), so it may depend on what the test learned after the connections
//! were made (which node to cut off, say).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tickwheel_redis::server::RedisCluster;

/// Says of the first bytes a client sent whether a cut isolates its connection.
type Isolated = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// How many of the first bytes a client sends are kept for the rule.
const FIRST: usize = 256;

#[derive(Default)]
struct Links {
    cut: bool,
    /// Every connection open: the first bytes its client sent and both its streams.
    open: Vec<(Vec<u8>, TcpStream, TcpStream)>,
}

pub struct Partition {
    pub port: u16,
    links: Arc<Mutex<Links>>,
    isolated: Isolated,
}

impl Partition {
    /// Listens on a loopback port of its own and proxies each connection to port `to`; a
    /// connection is isolated by a cut when `isolated` says so of the first bytes its
    /// client sent.
    pub fn start(to: u16, isolated: impl Fn(&[u8]) -> bool + Send + Sync + 'static) -> Partition {
        let isolated: Isolated = Arc::new(isolated);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let links: Arc<Mutex<Links>> = Arc::default();
        let (shared, rule) = (links.clone(), isolated.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let (links, rule) = (shared.clone(), rule.clone());
                std::thread::spawn(move || proxy(client, server, &links, &*rule));
            }
        });
        Partition {
            port,
            links,
            isolated,
        }
    }

    /// Cuts the isolated connections, and every new one that identifies as isolated.
    pub fn cut(&self) {
        let mut links = self.links.lock().unwrap();
        links.cut = true;
        let isolated = &*self.isolated;
        links.open.retain(|(first, a, b)| {
            if !isolated(first) {
                return true;
            }
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
            false
        });
    }

    /// Lets new connections through again.
    pub fn heal(&self) {
        self.links.lock().unwrap().cut = false;
    }
}

/// A Redis Cluster's buses behind [`Partition`]s: once [`isolate`](Self::isolate) names a
/// node, a cut closes every link of that node's bus, and every link it opened to the
/// others' (known by its node ID, in the header of the first message it sends on one).
pub struct BusCut {
    pub proxies: Vec<Partition>,
    isolated: Arc<OnceLock<(usize, Vec<u8>)>>,
}

impl BusCut {
    /// Starts a Cluster of `primaries` primaries with `replicas` replicas each, every node's
    /// bus behind a proxy that the node announces.
    pub fn cluster(primaries: usize, replicas: usize) -> (RedisCluster, BusCut) {
        let isolated: Arc<OnceLock<(usize, Vec<u8>)>> = Arc::default();
        let mut proxies = Vec::new();
        let c = RedisCluster::start_with_replicas_behind(primaries, replicas, |bus| {
            let (node, isolated) = (proxies.len(), isolated.clone());
            // A bus message's header: "RCmb", 36 bytes, then the sender's 40-byte node ID.
            let proxy = Partition::start(bus, move |first| {
                isolated
                    .get()
                    .is_some_and(|(n, id)| *n == node || first.get(40..80) == Some(&id[..]))
            });
            let port = proxy.port;
            proxies.push(proxy);
            port
        })
        .unwrap_or_else(|e| panic!("cannot run the Redis Cluster partition test: {e}"));
        (c, BusCut { proxies, isolated })
    }

    /// Names the node the cuts cut off (once).
    pub fn isolate(&self, c: &RedisCluster, node: usize) {
        let mut con = redis::Client::open(c.nodes()[node].url().as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut con).unwrap();
        self.isolated.set((node, id.into_bytes())).unwrap();
    }

    pub fn cut(&self) {
        self.proxies.iter().for_each(Partition::cut);
    }

    pub fn heal(&self) {
        self.proxies.iter().for_each(Partition::heal);
    }
}

/// Waits until the old primary of a partition healed at `healed` is a primary no longer
/// (`still_primary` says whether it is), at most 60 s, and says how long that took.
pub fn wait_demoted(healed: Instant, still_primary: impl Fn() -> bool) {
    while still_primary() {
        assert!(
            healed.elapsed() < Duration::from_secs(60),
            "the old primary is still a primary 60 s after the partition healed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "the old primary no longer a primary {:?} after the partition healed",
        healed.elapsed()
    );
}

fn proxy(
    mut client: TcpStream,
    mut server: TcpStream,
    links: &Mutex<Links>,
    isolated: &(dyn Fn(&[u8]) -> bool + Send + Sync),
) {
    let mut buf = [0u8; 65536];
    let n = match client.read(&mut buf) {
        Ok(0) | Err(_) => return,
        Ok(n) => n,
    };
    {
        let mut links = links.lock().unwrap();
        if links.cut && isolated(&buf[..n]) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        }
        let first = buf[..n.min(FIRST)].to_vec();
        links.open.push((
            first,
            client.try_clone().unwrap(),
            server.try_clone().unwrap(),
        ));
    }
    if server.write_all(&buf[..n]).is_err() {
        return;
    }
    let (mut back_from, mut back_to) = (server.try_clone().unwrap(), client.try_clone().unwrap());
    std::thread::spawn(move || pump(&mut back_from, &mut back_to));
    pump(&mut client, &mut server);
}

fn pump(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buf = [0u8; 65536];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
