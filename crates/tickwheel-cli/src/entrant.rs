//! Every entrant `tickwheel bench` knows, across families: one name space for the command
//! line, tables and files, each name owned by exactly one family's entrant type.

use crate::durable::DurableEntrant;
use crate::futures::FutureEntrant;
use crate::queues::QueueEntrant;
use crate::services::ServiceEntrant;
use std::fmt;
use std::str::FromStr;

/// An entrant of some family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Entrant {
    /// A timer queue on virtual time.
    Queue(QueueEntrant),
    /// A timer service on the real clock.
    Service(ServiceEntrant),
    /// A durable-task design on Redis.
    Durable(DurableEntrant),
    /// A timer API of futures in an async runtime.
    Future(FutureEntrant),
}

impl Entrant {
    /// All entrants, in table order: queues, then services, then durable designs, then
    /// futures.
    pub fn all() -> Vec<Entrant> {
        let queues = QueueEntrant::ALL.into_iter().map(Entrant::Queue);
        let services = ServiceEntrant::ALL.into_iter().map(Entrant::Service);
        let durable = DurableEntrant::ALL.into_iter().map(Entrant::Durable);
        let futures = FutureEntrant::ALL.into_iter().map(Entrant::Future);
        queues
            .chain(services)
            .chain(durable)
            .chain(futures)
            .collect()
    }

    /// The name used on the command line, in tables and in files.
    pub fn name(self) -> &'static str {
        match self {
            Entrant::Queue(q) => q.name(),
            Entrant::Service(s) => s.name(),
            Entrant::Durable(d) => d.name(),
            Entrant::Future(f) => f.name(),
        }
    }
}

impl fmt::Display for Entrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Entrant {
    type Err = String;

    fn from_str(s: &str) -> Result<Entrant, String> {
        let all = Entrant::all();
        all.iter()
            .copied()
            .find(|e| e.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|e| e.name()).collect();
                format!("unknown entrant `{s}`; known: {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        let all = Entrant::all();
        for e in &all {
            assert_eq!(e.name().parse::<Entrant>(), Ok(*e));
        }
        let mut names: Vec<&str> = all.iter().map(|e| e.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert!("nope"
            .parse::<Entrant>()
            .unwrap_err()
            .contains("unknown entrant"));
    }
}
