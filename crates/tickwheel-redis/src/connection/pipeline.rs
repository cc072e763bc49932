//! Pipelines on one server or a Redis Cluster: [`send_pipe`] follows the Cluster's topology
//! and says of every command whether it ran; [`query_pipe`] reads the replies.

use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisResult, Value};

use super::{Con, Confirm, Link};
use crate::error::Error;

mod cluster;
use cluster::{cluster_send, probe_script};

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

impl Shortfall {
    /// The one of `short` (the shortfall kept so far, if any) and `s` with the fewer
    /// confirmations: on a Cluster each node's writes count its own `WAIT`, and a call
    /// reports the fewest.
    pub(crate) fn fewest(short: &mut Option<Shortfall>, s: Shortfall) {
        if short.is_none_or(|k| s.confirmed < k.confirmed) {
            *short = Some(s);
        }
    }
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

/// Sends commands as a pipeline, following a Cluster's topology: the one place every
/// script call (producer, inspector, worker; `protocol::invoke` is a pipeline of one) goes
/// through. Returns what each command got, in order, and the connection error that stopped
/// it, if any (the connection is then in doubt: drop it).
///
/// On one server: one round trip. On a Cluster: `redis`'s cluster pipeline sends each
/// command to the node of its slot (one round trip per node), by the connection's slot
/// map; but it neither follows a `MOVED`/`ASK` reply nor reads the slot map again, and when
/// any command got an error reply it hands back only the errors (the replies of the
/// commands that ran are lost). So first the slot of every command is checked with a probe
/// (one per slot, in one pipeline; it changes nothing, so it is safe to send again): on a
/// redirection the cluster connection is opened again (a fresh slot map), and the check
/// repeats until every slot answers; a probe answered `NOSCRIPT` loads the scripts again
/// (on every node: a promoted replica or a restarted node lacks them, and a `NOSCRIPT`
/// reply in the pipeline would lose the other replies). Then the commands go as one cluster
/// pipeline. Should the topology change in between, the commands redirected did not run:
/// on `MOVED` they go again in the next round (checked first), on
/// `TRYAGAIN`/`CLUSTERDOWN`/`READONLY` after a wait (10 ms doubling to 200 ms), on `ASK` (a
/// slot being migrated) each alone, after `ASKING`, on a plain connection to the importing
/// node; and those that ran are [`Answer::Ran`]. No command that ran is sent again, by this
/// function or by `redis` (its cluster client is built without retries). Still redirected
/// after 16 rounds: [`Answer::Refused`]. A pipeline of reads only (`HLEN`, ..., read-only
/// scripts) skips the first check and, on a redirection, is sent again whole (after the
/// check): reads are safe to repeat, and the check would double their cost. So does a
/// single command: its redirection costs no other reply.
///
/// A command answered `NOSCRIPT` did not run either: the scripts are loaded again and
/// those commands, only them, sent again once.
///
/// Confirmation ([`Con::confirm`], from
/// [`Config::confirm_replicas`](crate::Config::confirm_replicas)): a round trip that
/// carries a write (any command but a read) ends with `WAIT <replicas> <timeout>` on the
/// same connection that carried the write, never on another (a connection that wrote
/// nothing answers `WAIT` at once: a false confirmation). On one server it is the
/// pipeline's last command. On a Cluster it follows the pipeline, before any new slot map:
/// one `WAIT` by written slot, over the connection the pipeline used for it (the primary
/// of the slot), each write counting its own node's answer (a write without a key, if any,
/// on every primary, the fewest counting); a command redirected by `ASK` goes with its own
/// `WAIT` on the plain connection that carried it. The writes fewer replicas confirmed are
/// [`Answer::Unconfirmed`].
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
    if let Err(e) = con.load_scripts() {
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

/// What an error reply says of its command.
fn classify(e: RedisError) -> Answer {
    if not_run(&e) {
        Answer::Refused(e)
    } else {
        Answer::Failed(e)
    }
}

impl Con {
    /// Fills the script cache with every script: the one server's, or every Cluster node's.
    pub(crate) fn load_scripts(&mut self) -> RedisResult<()> {
        match &mut self.link {
            Link::Single(c) => {
                for cmd in crate::protocol::scripts::scripts().load_commands() {
                    cmd.query::<String>(c)?;
                }
                Ok(())
            }
            Link::Cluster(c) => cluster::load_scripts(&mut c.con),
        }
    }

    /// A small command before the scripts' bodies: a server that wants a password answers
    /// it `NOAUTH Authentication required`, where a script's body (over 16 KiB for the
    /// largest) would get the connection closed with `Protocol error: unauthenticated bulk
    /// length`. On a Cluster, `protocol::connect` has asked a seed (`PING`) before opening
    /// the connection, whose slot map such a server refuses the same way.
    pub(crate) fn check_auth(&mut self) -> RedisResult<()> {
        match &mut self.link {
            Link::Single(c) => redis::cmd("PING").query::<Value>(c).map(drop),
            Link::Cluster(_) => Ok(()),
        }
    }

    /// The server's clock (`TIME`), µs since the Unix epoch: the one server's; on a Cluster,
    /// a primary's (by a fresh slot map after an error).
    pub(crate) fn time_us(&mut self) -> RedisResult<u64> {
        let time = redis::cmd("TIME");
        let (s, us): (u64, u64) = match &mut self.link {
            Link::Single(c) => time.query(c)?,
            Link::Cluster(c) => {
                let v = cluster::any_primary(c, &time)?;
                redis::from_redis_value(v)?
            }
        };
        Ok(s * 1_000_000 + us)
    }
}

/// Runs one command through [`send_pipe`], as [`query_pipe`] runs a pipeline: on a Cluster it
/// follows the topology (a `MOVED` reads the slot map afresh) like every other call. The
/// crate sends nothing to a [`Con`] any other way.
pub(crate) fn query_one<T: FromRedisValue>(con: &mut Con, cmd: Cmd) -> Result<T, Error> {
    let mut pipe = redis::pipe();
    pipe.add_command(cmd);
    query_pipe::<(T,)>(con, &pipe).map(|(t,)| t)
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
                Shortfall::fewest(&mut short, s);
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
    use super::cluster::{first_key, probe, to_follow};
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
