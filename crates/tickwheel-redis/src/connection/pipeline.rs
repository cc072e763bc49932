//! Pipelines on one server or a Redis Cluster: [`send_pipe`] follows the Cluster's topology
//! and says of every command whether it ran; [`query_pipe`] reads the replies.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

use redis::cluster::{ClusterConnection, ClusterPipeline};
use redis::cluster_routing::{Route, SlotAddr};
use redis::{Cmd, ConnectionLike, FromRedisValue, Pipeline, RedisError, RedisResult, Value};
use redis::{ErrorKind, Script, ServerErrorKind};

use super::Con;

/// What one command of a pipeline got from [`send_pipe`]. Every command sent here is one
/// script call (or a read), applied atomically: either it ran to its end or not at all.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Its reply: it ran (a script: applied).
    Reply(Value),
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
/// again): a redirected probe is sent alone through the cluster connection's own logic,
/// which on `MOVED` reads the slot map again, and the check repeats until every slot
/// answers; a probe answered `NOSCRIPT` loads the scripts again (on every node: a promoted
/// replica or a restarted node lacks them, and a `NOSCRIPT` reply in the pipeline would
/// lose the other replies). Then the
/// commands go as one cluster pipeline. Should the topology change in between, the
/// commands redirected did not run: on `MOVED` they go again in the next round (checked
/// first), on `TRYAGAIN`/`CLUSTERDOWN`/`READONLY` after a wait (10 ms doubling to 200 ms),
/// on `ASK` (a slot being migrated) each alone through the cluster connection (which sends
/// `ASKING` first); and those that ran are [`Answer::Ran`]. No command that ran is sent
/// again by this function. (A command sent alone through the cluster connection may be,
/// by `redis`, after an I/O error: the same as for every single command on a Cluster.)
/// Still redirected after 16 rounds: [`Answer::Refused`]. A pipeline of plain reads only
/// (`HLEN`, ...) skips the first check and, on a redirection, is sent again whole (after
/// the check): reads are safe to repeat, and the check would double their cost.
///
/// A command answered `NOSCRIPT` did not run either: the scripts are loaded again and
/// those commands, only them, sent again once.
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
    let broken = match con {
        Con::Single(c) => {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for cmd in cmds {
                pipe.add_command(cmd.clone());
            }
            match pipe.query::<Vec<Value>>(c) {
                Ok(replies) if replies.len() == cmds.len() => {
                    for (a, v) in answers.iter_mut().zip(replies) {
                        *a = reply(v);
                    }
                    None
                }
                Ok(replies) => {
                    answers.iter_mut().for_each(|a| *a = Answer::Lost);
                    Some(miscount(cmds.len(), replies.len()))
                }
                Err(e) => {
                    answers.iter_mut().for_each(|a| *a = Answer::Lost);
                    Some(e)
                }
            }
        }
        Con::Cluster(c) => cluster_send(c, cmds, &mut answers),
    };
    (answers, broken)
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
    c: &mut ClusterConnection,
    cmds: &[Cmd],
    answers: &mut [Answer],
) -> Option<RedisError> {
    let mut todo: Vec<usize> = (0..cmds.len()).collect();
    let mut last = None;
    // Reads can be sent again: a pipeline of reads only is checked after a redirection only.
    let reads = cmds.iter().all(is_read);
    for round in 0..ROUNDS {
        let checked = if reads && round == 0 {
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
        let e = match pipe.query::<Vec<Value>>(c) {
            Ok(replies) if replies.len() == todo.len() => {
                for (&i, v) in todo.iter().zip(replies) {
                    answers[i] = reply(v);
                }
                return None;
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
        let mut wait = false;
        for (&i, err) in todo.iter().zip(failed) {
            match err {
                None if reads => again.push(i),
                None => answers[i] = Answer::Ran,
                // A slot being migrated, this key moved already: the command goes alone
                // through the cluster connection, which sends `ASKING` first to the
                // importing node (the slot map stays as it is until the migration ends).
                Some(err) if err.kind() == ErrorKind::Server(ServerErrorKind::Ask) => {
                    match c.req_command(&cmds[i]) {
                        Ok(v) => answers[i] = reply(v),
                        Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => {
                            answers[i] = classify(e)
                        }
                        Err(e) => {
                            answers[i] = Answer::Lost;
                            return Some(e);
                        }
                    }
                }
                Some(err) if to_follow(&err) => {
                    wait |= !matches!(err.kind(), ErrorKind::Server(ServerErrorKind::Moved));
                    again.push(i);
                    last = Some(err);
                }
                Some(err) => answers[i] = classify(err),
            }
        }
        todo = again;
        if todo.is_empty() {
            return None;
        }
        if wait {
            // `TRYAGAIN` (a multi-key script during a migration), `CLUSTERDOWN`, `READONLY`:
            // the cluster settles in a moment. 10 ms doubling, at most 200 ms (16 rounds:
            // about 2.5 s in all).
            std::thread::sleep(Duration::from_millis((10u64 << round.min(5)).min(200)));
        }
    }
    // Still redirected after every round: not run.
    let e = last.expect("a round left commands only after a redirection");
    for &i in &todo {
        answers[i] = Answer::Refused(e.clone());
    }
    None
}

/// Whether a command only reads (a plain read command, not a script): safe to send again.
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
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) => READS.iter().any(|r| name.eq_ignore_ascii_case(r)),
        _ => false,
    }
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
/// with a [`probe`] per slot in one pipeline, until every slot answers: a redirected probe
/// is sent alone through the cluster connection, which follows it and reads the slot map
/// again; a `NOSCRIPT` (a promoted replica, a restarted node) loads the scripts on every
/// node. A `NOSCRIPT` reply in the real pipeline would lose the other commands' replies.
fn check_slots<'a>(
    c: &mut ClusterConnection,
    cmds: impl Iterator<Item = &'a Cmd>,
) -> RedisResult<()> {
    let mut seen = HashSet::new();
    let mut probes = ClusterPipeline::new();
    let mut keys = Vec::new();
    for cmd in cmds {
        if let Some(key) = first_key(cmd) {
            if seen.insert(Route::with_key(key, SlotAddr::Master)) {
                probes.add_command(probe(key));
                keys.push(key);
            }
        }
    }
    if keys.is_empty() {
        return Ok(());
    }
    let mut last = None;
    for _ in 0..ROUNDS {
        let e = match probes.query::<Vec<Value>>(c) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let Some(errors) = e.clone().into_server_errors() else {
            return Err(e);
        };
        let mut noscript = false;
        let mut follow = None;
        for (pos, err) in errors.iter() {
            let err = RedisError::from(err.clone());
            if err.code() == Some("NOSCRIPT") {
                noscript = true;
            } else if to_follow(&err) {
                follow.get_or_insert(*pos);
            } else {
                return Err(err);
            }
        }
        if let Some(pos) = follow {
            // Sent alone, the probe follows the redirection and refreshes the slot map.
            let key = keys.get(pos).copied().unwrap_or_default();
            match probe(key).query::<Value>(c) {
                Ok(_) => {}
                Err(e) if e.code() == Some("NOSCRIPT") => noscript = true,
                Err(e) if to_follow(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        if noscript {
            load_scripts(c)?;
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

/// Runs a pipeline through [`send_pipe`] (which follows a Cluster's topology) and reads its
/// replies as `T`: an error for a broken connection, or else the first error reply.
pub(crate) fn query_pipe<T: FromRedisValue>(con: &mut Con, pipe: &Pipeline) -> RedisResult<T> {
    let cmds: Vec<Cmd> = pipe.cmd_iter().cloned().collect();
    let (answers, broken) = send_pipe(con, &cmds);
    if let Some(e) = broken {
        return Err(e);
    }
    let mut values = Vec::with_capacity(answers.len());
    for a in answers {
        match a {
            Answer::Reply(v) => values.push(v),
            Answer::Refused(e) | Answer::Failed(e) => return Err(e),
            Answer::Ran | Answer::Unsent | Answer::Lost => {
                return Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "a pipeline's reply is lost (the Cluster's topology changed meanwhile): \
                     call again",
                )))
            }
        }
    }
    Ok(redis::from_redis_value(Value::Array(values))?)
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
