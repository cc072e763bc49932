//! Pipelines on a Redis Cluster: [`cluster_send`] checks the slot map with probes, sends
//! the pipeline by node, follows redirections, and confirms the writes with `WAIT` on the
//! connections that carried them.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;
use std::time::Duration;

use redis::cluster::{ClusterConnection, ClusterPipeline};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionLike, RedisError, RedisResult, Value};
use redis::{ErrorKind, Script, ServerErrorKind};

use super::{classify, confirmed_or_not, is_read, miscount, replicas, reply, Answer};
use crate::connection::{ClusterLink, Confirm};

/// Whether an error reply is one to follow: a Cluster's redirection (`MOVED`, `ASK`), a
/// slot in flux (`TRYAGAIN`, `CLUSTERDOWN`) or a write sent to a replica (`READONLY`, from a
/// stale slot map). The command did not run, and can run once the topology is read again.
pub(super) fn to_follow(e: &RedisError) -> bool {
    e.is_cluster_error() || e.code() == Some("READONLY")
}

/// How many times a Cluster pipeline is sent again for commands redirected meanwhile.
pub(super) const ROUNDS: usize = 16;

/// [`send_pipe`](super::send_pipe) on a Cluster.
pub(super) fn cluster_send(
    c: &mut ClusterLink,
    confirm: Option<Confirm>,
    cmds: &[Cmd],
    answers: &mut [Answer],
) -> Option<RedisError> {
    let mut todo: Vec<usize> = (0..cmds.len()).collect();
    let mut last = None;
    // Reads can be sent again: a pipeline of reads only is checked after a redirection only.
    let reads = cmds.iter().all(is_read);
    // So can a single command, whose redirection loses no other reply.
    let unchecked = reads || cmds.len() == 1;
    for round in 0..ROUNDS {
        let checked = if unchecked && round == 0 {
            Ok(())
        } else {
            check_slots(c, todo.iter().map(|&i| &cmds[i]))
        };
        if let Err(e) = checked {
            return Some(e);
        }
        let mut pipe = ClusterPipeline::new();
        for &i in &todo {
            pipe.add_command(cmds[i].clone());
        }
        let e = match pipe.query::<Vec<Value>>(&mut c.con) {
            Ok(replies) if replies.len() == todo.len() => {
                for (&i, v) in todo.iter().zip(replies) {
                    answers[i] = reply(v);
                }
                return confirm.and_then(|w| cluster_wait(c, w, cmds, &todo, answers));
            }
            Ok(replies) => {
                todo.iter().for_each(|&i| answers[i] = Answer::Lost);
                return Some(miscount(todo.len(), replies.len()));
            }
            Err(e) => e,
        };
        let Some(errors) = e.clone().into_server_errors() else {
            todo.iter().for_each(|&i| answers[i] = Answer::Lost);
            return Some(e);
        };
        // Error replies for some commands: the others ran, their replies lost.
        let mut failed = vec![None; todo.len()];
        for (pos, err) in errors.iter() {
            if let Some(slot) = failed.get_mut(*pos) {
                *slot = Some(RedisError::from(err.clone()));
            }
        }
        let mut again = Vec::new();
        let mut asked = Vec::new();
        let mut wait = false;
        for (&i, err) in todo.iter().zip(failed) {
            match err {
                None if reads => again.push(i),
                None => answers[i] = Answer::Ran,
                // A slot being migrated, this key moved already: sent alone below.
                Some(err) if err.kind() == ErrorKind::Server(ServerErrorKind::Ask) => {
                    asked.push((i, err))
                }
                Some(err) if to_follow(&err) => {
                    // A `MOVED` again after a checked map: the map came from a node that
                    // has not heard of the change yet.
                    wait |= round > 0
                        || !matches!(err.kind(), ErrorKind::Server(ServerErrorKind::Moved));
                    again.push(i);
                    last = Some(err);
                }
                Some(err) => answers[i] = classify(err),
            }
        }
        // (The commands that ran here have no reply to return, confirmed or not: no `WAIT`.)
        for (i, err) in asked {
            answers[i] = ask(c, confirm, &err, &cmds[i]);
        }
        todo = again;
        if todo.is_empty() {
            return None;
        }
        if wait {
            // `TRYAGAIN` (a multi-key script during a migration), `CLUSTERDOWN`, `READONLY`:
            // the cluster settles in a moment. 10 ms doubling, at most 200 ms (16 rounds:
            // about 2.5 s in all).
            pause(round);
        }
    }
    // Still redirected after every round: not run.
    let e = last.expect("a round left commands only after a redirection");
    for &i in &todo {
        answers[i] = Answer::Refused(e.clone());
    }
    None
}

/// The wait before round `round` after a redirection that is not a first `MOVED`: 10 ms
/// doubling, at most 200 ms.
fn pause(round: usize) {
    std::thread::sleep(Duration::from_millis((10u64 << round.min(5)).min(200)));
}

/// `WAIT` after a round of a Cluster pipeline, for the commands `ran` of `cmds` (those that
/// ran or may have), on the primaries that carried their writes only, each over the
/// connection that carried them (`redis` keeps one per node, and routes a command for a
/// slot by the same slot map as the pipeline): one `WAIT` routed by each written slot. Each
/// write counts what its own node answered, so a replica away on one shard leaves the writes
/// to the others confirmed, and holds no call that did not write there. (A write without a
/// key, if any, waits on every primary, and counts the fewest.) Marks the writes unconfirmed
/// that too few replicas confirmed; an error (a connection that broke) is returned, the
/// writes' confirmation unknown.
///
/// `redis` shows no slot map, so which slots share a node is not known beforehand: after a
/// first `WAIT` on a node the others there answer at once (its replicas have acknowledged
/// the connection's writes), a round trip each; once a `WAIT` comes back short, the node of
/// each slot still to wait on is asked first (`CLUSTER MYID`, on the same connection), and a
/// slot of a node that came back short takes its answer: a stopped replica costs one timeout
/// per node, not one per slot.
///
/// After an error the cluster connection is opened again, which reads the slot map afresh.
/// A `WAIT` sent to every primary went to every node the map called one, and a map read
/// from a seed that has not heard of a failover yet still calls the demoted node one: a call
/// that wrote only to slots that did not move got no `MOVED` that would make it read the map
/// again, so each such call failed with "WAIT cannot be used with replica instances" for as
/// long as the connection lived (tests/failover.rs,
/// `a_wait_in_flight_at_a_demotion_is_not_sent_to_the_demoted_node_again`). Sent by slot, a
/// `WAIT` goes only to nodes that took the round's writes; a keyless write still waits on
/// every primary. The writes' own confirmation stays unknown: a `WAIT` on a new connection
/// would confirm nothing it sent.
fn cluster_wait(
    link: &mut ClusterLink,
    want: Confirm,
    cmds: &[Cmd],
    ran: &[usize],
    answers: &mut [Answer],
) -> Option<RedisError> {
    let writes: Vec<(usize, Option<Route>)> = ran
        .iter()
        .copied()
        .filter(|&i| !is_read(&cmds[i]))
        .map(|i| {
            let route = first_key(&cmds[i]).map(|key| Route::with_key(key, SlotAddr::Master));
            (i, route)
        })
        .collect();
    if writes.is_empty() {
        return None;
    }
    // The written slots, in order, each once; whether any write had no key.
    let mut routes = Vec::new();
    let mut seen = HashSet::new();
    for &(_, route) in &writes {
        if seen.insert(route) {
            routes.extend(route);
        }
    }
    let keyless = seen.contains(&None);
    let (counted, broken) = match wait_by_slot(&mut link.con, want, &routes, keyless) {
        Ok(counted) => (counted, None),
        Err(e) => {
            // Best effort: if it cannot be opened now, the next call's probes will.
            if let Ok(fresh) = link.seeds.connect() {
                link.con = fresh;
                link.remaps += 1;
            }
            (Counted::default(), Some(e))
        }
    };
    for (i, route) in writes {
        let confirmed = match route {
            Some(route) => counted.by_slot.get(&route).copied().unwrap_or(0),
            None => counted.keyless,
        };
        confirmed_or_not(&mut answers[i..=i], &cmds[i..=i], want, confirmed);
    }
    broken
}

/// How many replicas confirmed a round's writes: by written slot (its node's `WAIT`), and
/// for the keyless writes (the fewest of every primary's).
#[derive(Default)]
struct Counted {
    by_slot: HashMap<Route, u32>,
    keyless: u32,
}

/// The `WAIT`s of [`cluster_wait`]: one routed by each of `routes` (a slot whose node came
/// back short already takes that node's answer), and one to every primary when `keyless`.
fn wait_by_slot(
    c: &mut ClusterConnection,
    want: Confirm,
    routes: &[Route],
    keyless: bool,
) -> RedisResult<Counted> {
    let on = |route: Route| RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
    let wait = want.wait();
    let node_of = |c: &mut ClusterConnection, route: Route| -> RedisResult<String> {
        let mut myid = redis::cmd("CLUSTER");
        myid.arg("MYID");
        Ok(redis::from_redis_value(c.route_command(&myid, on(route))?)?)
    };
    let mut counted = Counted::default();
    // The nodes (by id) whose `WAIT` came back short, and what they answered.
    let mut short: HashMap<String, u32> = HashMap::new();
    for (k, &route) in routes.iter().enumerate() {
        let node = if short.is_empty() {
            None
        } else {
            Some(node_of(c, route)?)
        };
        if let Some(&n) = node.as_ref().and_then(|id| short.get(id)) {
            counted.by_slot.insert(route, n);
            continue;
        }
        let n = replicas(&c.route_command(&wait, on(route))?);
        if n < want.replicas && k + 1 < routes.len() {
            let node = match node {
                Some(id) => id,
                None => node_of(c, route)?,
            };
            short.insert(node, n);
        }
        counted.by_slot.insert(route, n);
    }
    if keyless {
        counted.keyless = replicas(&c.req_command(&wait)?);
    }
    Ok(counted)
}

/// A command redirected by `ASK` (its slot being migrated, its key moved already): sent
/// alone on a plain connection to the importing node, after `ASKING`, and followed there
/// by `WAIT` when it writes and writes must be confirmed. The cluster connection follows
/// no redirection itself (it has no retries); the plain one is closed after.
fn ask(c: &ClusterLink, confirm: Option<Confirm>, err: &RedisError, cmd: &Cmd) -> Answer {
    let Some((node, _)) = err.redirect_node() else {
        return Answer::Refused(err.clone());
    };
    let opened = redis::Client::open(format!("redis://{node}/")).and_then(|client| {
        let con = client.get_connection_with_timeout(c.io_timeout)?;
        con.set_read_timeout(Some(c.io_timeout))?;
        con.set_write_timeout(Some(c.io_timeout))?;
        Ok(con)
    });
    let mut con = match opened {
        Ok(con) => con,
        // Never sent.
        Err(e) => return Answer::Refused(e),
    };
    let wait = confirm.filter(|_| !is_read(cmd));
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("ASKING").add_command(cmd.clone());
    if let Some(w) = wait {
        pipe.add_command(w.wait());
    }
    match pipe.query::<Vec<Value>>(&mut con) {
        Ok(replies) if replies.len() == 2 + usize::from(wait.is_some()) => {
            let mut replies = replies.into_iter().skip(1);
            let mut answer = [replies.next().map_or(Answer::Lost, reply)];
            if let Some(w) = wait {
                let confirmed = replies.next().as_ref().map_or(0, replicas);
                confirmed_or_not(&mut answer, std::slice::from_ref(cmd), w, confirmed);
            }
            let [answer] = answer;
            answer
        }
        // Sent, no reply (or not all of it): applied or not.
        Ok(_) => Answer::Failed(miscount(2, 0)),
        Err(e) => Answer::Failed(e),
    }
}

/// The first key of a command: of `EVALSHA`/`EVAL`/`FCALL` the first of its keys (none when
/// `numkeys` is 0), of any other command its first argument.
pub(super) fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let arg = |i: usize| match cmd.args_iter().nth(i) {
        Some(redis::Arg::Simple(a)) => Some(a),
        _ => None,
    };
    let name = arg(0)?;
    let scripted = [
        &b"EVALSHA"[..],
        b"EVAL",
        b"EVALSHA_RO",
        b"EVAL_RO",
        b"FCALL",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n));
    if scripted {
        let keys: usize = std::str::from_utf8(arg(2)?).ok()?.parse().ok()?;
        return if keys > 0 { arg(3) } else { None };
    }
    arg(1)
}

/// The probe's script: `return 1`, loaded after the crate's scripts, so a node that has it
/// has them (a restart or `SCRIPT FLUSH` empties the cache whole; a promoted replica never
/// had it).
pub(super) fn probe_script() -> &'static Script {
    static PROBE: OnceLock<Script> = OnceLock::new();
    PROBE.get_or_init(|| Script::new("return 1"))
}

/// A command that checks which node serves `key`'s slot, and that the node has the
/// crate's scripts, and changes nothing: `EVALSHA` of [`probe_script`], declaring `key`.
/// Routed as a write (to the slot's primary: `redis` may send a read such as `EXISTS` to a
/// replica, which answers it even with a stale slot map); answered `MOVED`/`ASK` by a node
/// that does not serve the slot, `NOSCRIPT` by one whose script cache is empty.
pub(super) fn probe(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(probe_script().get_hash()).arg(1).arg(key);
    cmd
}

/// Loads the crate's scripts, then the probe's, on every node (`redis` sends `SCRIPT LOAD` to
/// every node of its map, and every one must take it).
pub(super) fn load_scripts(c: &mut ClusterConnection) -> RedisResult<()> {
    for cmd in crate::protocol::scripts::scripts().load_commands() {
        cmd.query::<String>(c)?;
    }
    probe_script().prepare_invoke().load(c)?;
    Ok(())
}

/// `cmd` on a primary picked at random by the connection's slot map; after an error, once
/// more on a fresh map (the node may be down, or no longer a primary). Its reply.
pub(super) fn any_primary(c: &mut ClusterLink, cmd: &Cmd) -> RedisResult<Value> {
    let any = RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary);
    match c.con.route_command(cmd, any.clone()) {
        Ok(v) => Ok(v),
        Err(_) => {
            c.con = c.seeds.connect()?;
            c.remaps += 1;
            c.con.route_command(cmd, any)
        }
    }
}

/// Checks the connection's slot map and the nodes' script caches for the slots of `cmds`, with a
/// [`probe`] per slot in one pipeline, until every slot answers: on a redirection (`MOVED`, or
/// `TRYAGAIN`/`CLUSTERDOWN`/`READONLY` or a second `MOVED` after a wait) the cluster connection is
/// opened again, which reads the slot map afresh (it has no retries, so it does not follow a
/// redirection itself); a `NOSCRIPT` (a promoted replica, a restarted node) loads the scripts on
/// every node. A `NOSCRIPT` reply in the real pipeline would lose the other commands' replies.
/// `ASK` (a slot being migrated) counts as settled: the command is sent alone to the importing node
/// ([`ask`]).
fn check_slots<'a>(c: &mut ClusterLink, cmds: impl Iterator<Item = &'a Cmd>) -> RedisResult<()> {
    let mut seen = HashSet::new();
    let mut probes = ClusterPipeline::new();
    for cmd in cmds {
        if let Some(key) = first_key(cmd) {
            if seen.insert(Route::with_key(key, SlotAddr::Master)) {
                probes.add_command(probe(key));
            }
        }
    }
    if seen.is_empty() {
        return Ok(());
    }
    let mut last = None;
    for round in 0..ROUNDS {
        let e = match probes.query::<Vec<Value>>(&mut c.con) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let Some(errors) = e.clone().into_server_errors() else {
            return Err(e);
        };
        let mut noscript = false;
        let mut follow = None;
        for (_, err) in errors.iter() {
            let err = RedisError::from(err.clone());
            if err.code() == Some("NOSCRIPT") {
                noscript = true;
            } else if err.kind() == ErrorKind::Server(ServerErrorKind::Ask) {
            } else if to_follow(&err) {
                follow.get_or_insert(err);
            } else {
                return Err(err);
            }
        }
        if let Some(err) = follow {
            // A first `MOVED` is the topology changing under an old map: read it at once.
            // A `MOVED` from a map just read means the node that gave it has not heard of
            // the change yet (gossip takes a moment): wait for it as for a slot in flux.
            if round > 0 || err.kind() != ErrorKind::Server(ServerErrorKind::Moved) {
                pause(round);
            }
            // A fresh slot map.
            c.con = c.seeds.connect()?;
            c.remaps += 1;
            last = Some(err);
        } else if !noscript {
            // Only `ASK`s: the slots are known.
            return Ok(());
        }
        if noscript {
            load_scripts(&mut c.con)?;
        }
    }
    Err(last.unwrap_or_else(|| {
        RedisError::from((
            redis::ErrorKind::Client,
            "the Cluster's slot map did not settle",
        ))
    }))
}
