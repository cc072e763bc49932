//! Pipelines on one server or a Redis Cluster: [`send_pipe`] follows the Cluster's topology
//! and says of every command whether it ran; [`query_pipe`] reads the replies.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

use redis::cluster::{ClusterConnection, ClusterPipeline};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionLike, FromRedisValue, Pipeline, RedisError, RedisResult, Value};
use redis::{ErrorKind, Script, ServerErrorKind};

use super::{ClusterLink, Con, Confirm, Link};
use crate::error::Error;

/// What one command of a pipeline got from [`send_pipe`]. Every command sent here is one
/// script call (or a read), applied atomically: either it ran to its end or not at all.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Its reply: it ran (a script: applied; confirmed by the replicas asked for, if any).
    Reply(Value),
    /// Its reply: it ran on the primary, but fewer replicas than
    /// [`Config::confirm_replicas`](crate::Config::confirm_replicas) confirmed the round
    /// trip's writes (`WAIT`): a failover may lose it.
    Unconfirmed(Value, Shortfall),
    /// It ran (applied), but its reply is lost: on a Cluster, the slot map changed (or a
    /// node lost its scripts) between the check [`send_pipe`] makes and the pipeline, and
    /// `redis`'s cluster pipeline hands back only the error replies of a pipeline that got
    /// any.
    Ran,
    /// An error reply given before it ran (see [`not_run`]: `NOSCRIPT`, `OOM`, `BUSY`,
    /// `LOADING`, `READONLY`, `MASTERDOWN`, `NOREPLICAS`, a redirection or `CROSSSLOT`):
    /// not applied.
    Refused(RedisError),
    /// Any other error reply: a script that failed while running (it may have written
    /// before it failed): in doubt.
    Failed(RedisError),
    /// Never sent (the connection broke first): not applied.
    Unsent,
    /// Sent, but the connection failed before its reply came: applied or not.
    Lost,
}

/// How many replicas confirmed a round trip's writes, of how many asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shortfall {
    pub(crate) confirmed: u32,
    pub(crate) wanted: u32,
}

impl From<Shortfall> for Error {
    fn from(s: Shortfall) -> Error {
        Error::NotConfirmed {
            confirmed: s.confirmed,
            wanted: s.wanted,
        }
    }
}

/// Whether an error reply says the command did not run: the server refused it before
/// running it, or redirected it.
pub(crate) fn not_run(e: &RedisError) -> bool {
    e.is_cluster_error()
        || matches!(
            e.code(),
            Some(
                "NOSCRIPT"
                    | "OOM"
                    | "BUSY"
                    | "LOADING"
                    | "READONLY"
                    | "MASTERDOWN"
                    | "NOREPLICAS"
                    | "CROSSSLOT"
            )
        )
}

/// Whether an error reply is one to follow: a Cluster's redirection (`MOVED`, `ASK`), a
/// slot in flux (`TRYAGAIN`, `CLUSTERDOWN`) or a write sent to a replica (`READONLY`, from a
/// stale slot map). The command did not run, and can run once the topology is read again.
fn to_follow(e: &RedisError) -> bool {
    e.is_cluster_error() || e.code() == Some("READONLY")
}

/// How many times a Cluster pipeline is sent again for commands redirected meanwhile.
const ROUNDS: usize = 16;

/// Sends commands as a pipeline, following a Cluster's topology: the one place every
/// pipelined call (producer, inspector, worker) goes through. Returns what each command
/// got, in order, and the connection error that stopped it, if any (the connection is then
/// in doubt: drop it).
///
/// On one server: one round trip. On a Cluster: `redis`'s cluster pipeline sends each
/// command to the node of its slot (one round trip per node), by the connection's slot
/// map; but it neither follows a `MOVED`/`ASK` reply nor reads the slot map again, and when
/// any command got an error reply it hands back only the errors (the replies of the
/// commands that ran are lost). So first the slot of every command is checked with a
/// [`probe`] (one per slot, in one pipeline; it changes nothing, so it is safe to send
/// again): on a redirection the cluster connection is opened again (a fresh slot map), and
/// the check repeats until every slot answers; a probe answered `NOSCRIPT` loads the scripts again (on every node: a promoted
/// replica or a restarted node lacks them, and a `NOSCRIPT` reply in the pipeline would
/// lose the other replies). Then the
/// commands go as one cluster pipeline. Should the topology change in between, the
/// commands redirected did not run: on `MOVED` they go again in the next round (checked
/// first), on `TRYAGAIN`/`CLUSTERDOWN`/`READONLY` after a wait (10 ms doubling to 200 ms),
/// on `ASK` (a slot being migrated) each alone, after `ASKING`, on a plain connection to
/// the importing node; and those that ran are [`Answer::Ran`]. No command that ran is sent
/// again, by this function or by `redis`. Still redirected after 16 rounds: [`Answer::Refused`]. A pipeline of plain reads only
/// (`HLEN`, ..., read-only scripts) skips the first check and, on a redirection, is sent
/// again whole (after the check): reads are safe to repeat, and the check would double
/// their cost. So does a single command: its redirection costs no other reply.
///
/// A command answered `NOSCRIPT` did not run either: the scripts are loaded again and
/// those commands, only them, sent again once.
///
/// Confirmation ([`Con::confirm`], from
/// [`Config::confirm_replicas`](crate::Config::confirm_replicas)): a round trip that
/// carries a write (any command but a plain read or a read-only script) ends with
/// `WAIT <replicas> <timeout>` on the same connection that carried the write, never on
/// another (a connection that wrote nothing answers `WAIT` at once, a false confirmation).
/// On one server it is the pipeline's last command. On a Cluster it follows each round's
/// pipeline, before any new slot map: on the node of the written slot when the round wrote
/// to one slot, else on every primary (the fewest replicas counts), over the connections
/// the pipeline used; a command redirected by `ASK` goes with its own `WAIT` on the plain
/// connection that carried it. The writes of a round trip fewer replicas confirmed are
/// [`Answer::Unconfirmed`]. The Cluster connection is built without retries, so `redis`
/// never sends a command (a write, or `WAIT`) again on a new connection after an I/O
/// error: a lost reply is in doubt, returned as the connection's error.
pub(crate) fn send_pipe(con: &mut Con, cmds: &[Cmd]) -> (Vec<Answer>, Option<RedisError>) {
    let (mut answers, broken) = send_once(con, cmds);
    if broken.is_some() {
        return (answers, broken);
    }
    let noscript: Vec<usize> = answers
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, Answer::Refused(e) if e.code() == Some("NOSCRIPT")))
        .map(|(i, _)| i)
        .collect();
    if noscript.is_empty() {
        return (answers, None);
    }
    if let Err(e) = crate::protocol::scripts::scripts().load_all(con) {
        let server = matches!(e.kind(), redis::ErrorKind::Server(_));
        return (answers, (!server).then_some(e));
    }
    let again: Vec<Cmd> = noscript.iter().map(|&i| cmds[i].clone()).collect();
    let (replies, broken) = send_once(con, &again);
    for (i, a) in noscript.into_iter().zip(replies) {
        answers[i] = a;
    }
    (answers, broken)
}

/// [`send_pipe`] without reloading scripts.
fn send_once(con: &mut Con, cmds: &[Cmd]) -> (Vec<Answer>, Option<RedisError>) {
    let mut answers: Vec<Answer> = cmds.iter().map(|_| Answer::Unsent).collect();
    if cmds.is_empty() {
        return (answers, None);
    }
    let confirm = con.confirm;
    let broken = match &mut con.link {
        Link::Single(c) => {
            // `WAIT` last, on the connection that carried the writes.
            let wait = confirm.filter(|_| cmds.iter().any(|c| !is_read(c)));
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for cmd in cmds {
                pipe.add_command(cmd.clone());
            }
            if let Some(w) = wait {
                pipe.add_command(w.wait());
            }
            let n = cmds.len() + usize::from(wait.is_some());
            match pipe.query::<Vec<Value>>(c) {
                Ok(mut replies) if replies.len() == n => {
                    let waited = wait.map(|w| (w, replies.pop()));
                    for (a, v) in answers.iter_mut().zip(replies) {
                        *a = reply(v);
                    }
                    if let Some((w, v)) = waited {
                        let confirmed = v.as_ref().map_or(0, replicas);
                        confirmed_or_not(&mut answers, cmds, w, confirmed);
                    }
                    None
                }
                Ok(replies) => {
                    answers.iter_mut().for_each(|a| *a = Answer::Lost);
                    Some(miscount(n, replies.len()))
                }
                Err(e) => {
                    answers.iter_mut().for_each(|a| *a = Answer::Lost);
                    Some(e)
                }
            }
        }
        Link::Cluster(c) => cluster_send(c, confirm, cmds, &mut answers),
    };
    (answers, broken)
}

/// `WAIT`'s reply: how many replicas confirmed (an error reply, or anything else: none).
fn replicas(v: &Value) -> u32 {
    match v {
        Value::Int(n) => u32::try_from((*n).max(0)).unwrap_or(u32::MAX),
        _ => 0,
    }
}

/// Marks the writes of a round trip that `confirmed` replicas confirmed: unconfirmed when
/// fewer than asked for.
fn confirmed_or_not(answers: &mut [Answer], cmds: &[Cmd], want: Confirm, confirmed: u32) {
    if confirmed >= want.replicas {
        return;
    }
    let short = Shortfall {
        confirmed,
        wanted: want.replicas,
    };
    for (a, cmd) in answers.iter_mut().zip(cmds) {
        if is_read(cmd) {
            continue;
        }
        if let Answer::Reply(_) = a {
            let Answer::Reply(v) = std::mem::replace(a, Answer::Unsent) else {
                unreachable!("matched above")
            };
            *a = Answer::Unconfirmed(v, short);
        }
    }
}

/// A reply of a pipeline with `ignore_errors`: a value or an error reply.
fn reply(v: Value) -> Answer {
    match v {
        Value::ServerError(e) => classify(e.into()),
        v => Answer::Reply(v),
    }
}

/// The error of a pipeline that answered another number of replies than it had commands
/// (all of them in doubt).
fn miscount(sent: usize, got: usize) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "a pipeline answered another number of commands than it sent",
        format!("{got} replies to {sent} commands"),
    ))
}

/// [`send_pipe`] on a Cluster.
fn cluster_send(
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
                return confirm.and_then(|w| cluster_wait(&mut c.con, w, cmds, &todo, answers));
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
                    wait |= !matches!(err.kind(), ErrorKind::Server(ServerErrorKind::Moved));
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

/// The wait before round `round` after a redirection that is not `MOVED`: 10 ms doubling,
/// at most 200 ms.
fn pause(round: usize) {
    std::thread::sleep(Duration::from_millis((10u64 << round.min(5)).min(200)));
}

/// `WAIT` after a round of a Cluster pipeline, for the commands `ran` of `cmds` (those that
/// ran or may have): on the primary of their slot when they wrote to one slot, else on
/// every primary (the reply is the fewest replicas any confirmed), over the connections the
/// pipeline used (`redis` keeps one per node). Marks their replies unconfirmed when too few
/// confirmed; an error (a connection that broke) is returned, their confirmation unknown.
fn cluster_wait(
    c: &mut ClusterConnection,
    want: Confirm,
    cmds: &[Cmd],
    ran: &[usize],
    answers: &mut [Answer],
) -> Option<RedisError> {
    let writes: Vec<usize> = ran
        .iter()
        .copied()
        .filter(|&i| !is_read(&cmds[i]))
        .collect();
    if writes.is_empty() {
        return None;
    }
    let mut routes = HashSet::new();
    let mut keyless = false;
    for &i in &writes {
        match first_key(&cmds[i]) {
            Some(key) => {
                routes.insert(Route::with_key(key, SlotAddr::Master));
            }
            None => keyless = true,
        }
    }
    let waited = match routes.iter().next() {
        Some(&route) if routes.len() == 1 && !keyless => c.route_command(
            &want.wait(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
        ),
        _ => c.req_command(&want.wait()),
    };
    let (confirmed, broken) = match waited {
        Ok(v) => (replicas(&v), None),
        Err(e) => (0, Some(e)),
    };
    let sent: Vec<Cmd> = writes.iter().map(|&i| cmds[i].clone()).collect();
    let mut mine: Vec<Answer> = writes
        .iter()
        .map(|&i| std::mem::replace(&mut answers[i], Answer::Unsent))
        .collect();
    confirmed_or_not(&mut mine, &sent, want, confirmed);
    for (&i, a) in writes.iter().zip(mine) {
        answers[i] = a;
    }
    broken
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

/// Whether a command only reads (a plain read command, a read-only script or the probe):
/// safe to send again, and no replica need confirm it.
fn is_read(cmd: &Cmd) -> bool {
    const READS: [&[u8]; 12] = [
        b"HLEN",
        b"HGET",
        b"HMGET",
        b"HGETALL",
        b"HEXISTS",
        b"EXISTS",
        b"GET",
        b"ZCARD",
        b"ZSCORE",
        b"ZRANGE",
        b"ZRANGEBYSCORE",
        b"SCARD",
    ];
    let mut args = cmd.args_iter();
    let Some(redis::Arg::Simple(name)) = args.next() else {
        return false;
    };
    if name.eq_ignore_ascii_case(b"EVALSHA") {
        // A read-only script, or the probe.
        return match args.next() {
            Some(redis::Arg::Simple(sha)) => {
                crate::protocol::scripts::scripts().reads_only(sha)
                    || sha == probe_script().get_hash().as_bytes()
            }
            _ => false,
        };
    }
    READS.iter().any(|r| name.eq_ignore_ascii_case(r))
}

/// The first key of a command: of `EVALSHA`/`EVAL`/`FCALL` the first of its keys (none when
/// `numkeys` is 0), of any other command its first argument.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
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
fn probe_script() -> &'static Script {
    static PROBE: OnceLock<Script> = OnceLock::new();
    PROBE.get_or_init(|| Script::new("return 1"))
}

/// A command that checks which node serves `key`'s slot, and that the node has the
/// crate's scripts, and changes nothing: `EVALSHA` of [`probe_script`], declaring `key`.
/// Routed as a write (to the slot's primary: `redis` may send a read such as `EXISTS` to a
/// replica, which answers it even with a stale slot map); answered `MOVED`/`ASK` by a node
/// that does not serve the slot, `NOSCRIPT` by one whose script cache is empty.
fn probe(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(probe_script().get_hash()).arg(1).arg(key);
    cmd
}

/// Loads the crate's scripts, then the probe's, on every node.
fn load_scripts(c: &mut ClusterConnection) -> RedisResult<()> {
    crate::protocol::scripts::scripts().load_all(c)?;
    probe_script().prepare_invoke().load(c)?;
    Ok(())
}

/// Checks the connection's slot map and the nodes' script caches for the slots of `cmds`,
/// with a [`probe`] per slot in one pipeline, until every slot answers: on a redirection
/// (`MOVED`, or `TRYAGAIN`/`CLUSTERDOWN`/`READONLY` after a wait) the cluster connection is
/// opened again, which reads the slot map afresh (it has no retries, so it does not
/// follow a redirection itself); a `NOSCRIPT` (a promoted replica, a restarted node) loads
/// the scripts on every node. A `NOSCRIPT` reply in the real pipeline would lose the other
/// commands' replies. `ASK` (a slot being migrated) counts as settled: the command is sent
/// alone to the importing node ([`ask`]).
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
            if err.kind() != ErrorKind::Server(ServerErrorKind::Moved) {
                pause(round);
            }
            // A fresh slot map.
            c.con = c.client.get_connection()?;
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

/// What an error reply says of its command.
fn classify(e: RedisError) -> Answer {
    if not_run(&e) {
        Answer::Refused(e)
    } else {
        Answer::Failed(e)
    }
}

/// Runs a pipeline through [`send_pipe`] (which follows a Cluster's topology, and confirms
/// its writes when asked to) and reads its replies as `T`: an error for a broken
/// connection, or else the first error reply, or else [`Error::NotConfirmed`] when too few
/// replicas confirmed its writes.
pub(crate) fn query_pipe<T: FromRedisValue>(con: &mut Con, pipe: &Pipeline) -> Result<T, Error> {
    let cmds: Vec<Cmd> = pipe.cmd_iter().cloned().collect();
    let (answers, broken) = send_pipe(con, &cmds);
    if let Some(e) = broken {
        return Err(e.into());
    }
    let mut values = Vec::with_capacity(answers.len());
    let mut short = None;
    for a in answers {
        match a {
            Answer::Reply(v) => values.push(v),
            Answer::Unconfirmed(v, s) => {
                short.get_or_insert(s);
                values.push(v)
            }
            Answer::Refused(e) | Answer::Failed(e) => return Err(e.into()),
            Answer::Ran | Answer::Unsent | Answer::Lost => {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "a pipeline's reply is lost (the Cluster's topology changed meanwhile): \
                     call again",
                ))
                .into())
            }
        }
    }
    if let Some(s) = short {
        return Err(s.into());
    }
    Ok(redis::from_redis_value(Value::Array(values)).map_err(RedisError::from)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_keys_and_reads() {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("abc").arg(2).arg("k1").arg("k2").arg("argv");
        assert_eq!(first_key(&eval), Some(&b"k1"[..]));
        let mut none = redis::cmd("evalsha");
        none.arg("abc").arg(0).arg("argv");
        assert_eq!(first_key(&none), None);
        let mut hlen = redis::cmd("HLEN");
        hlen.arg("tw:{ns:3}:tasks");
        assert_eq!(first_key(&hlen), Some(&b"tw:{ns:3}:tasks"[..]));
        assert!(is_read(&hlen));
        assert!(!is_read(&eval));
        assert_eq!(
            first_key(&probe(b"tw:{ns:3}:due")),
            Some(&b"tw:{ns:3}:due"[..])
        );
    }

    #[test]
    fn error_replies_say_whether_the_command_ran() {
        let reply = |text: &str| -> RedisError {
            match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap() {
                Value::ServerError(e) => e.into(),
                v => panic!("not an error: {v:?}"),
            }
        };
        for ran_not in [
            "MOVED 3999 127.0.0.1:6381",
            "ASK 3999 127.0.0.1:6381",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "NOSCRIPT No matching script",
            "OOM command not allowed",
            "READONLY You can't write against a read only replica.",
        ] {
            assert!(not_run(&reply(ran_not)), "{ran_not}");
            assert!(matches!(classify(reply(ran_not)), Answer::Refused(_)));
        }
        let wrongtype = reply("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(!not_run(&wrongtype));
        assert!(matches!(classify(wrongtype), Answer::Failed(_)));
        assert!(to_follow(&reply("MOVED 1 127.0.0.1:1")));
        assert!(!to_follow(&reply("NOSCRIPT x")));
    }
}
