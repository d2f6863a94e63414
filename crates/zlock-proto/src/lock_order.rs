//! The queue order of a lock path: one rule, used by the server's native lock index
//! and by the client's recipes, so that a native contender, a zlock recipe, Curator and
//! kazoo contending on one path agree on who holds and who waits.
//!
//! # Entries: which children are contenders
//! A child of the lock path is a contender (an *entry* of the queue) when its name ends
//! with a sequence number as ZooKeeper writes it ([`sequence`]), whatever comes before
//! (`_c_<uuid>-lock-`, `lock-`, `__READ__`, `__WRIT__`, `lease-`, kazoo's
//! `<uuid>__lock__`, ...). The prefix, and so the recipe that made the node, does not
//! matter: an entry of a kind we do not know still blocks (it counts as a writer), which
//! is the safe side for mutual exclusion; the cost is only that a reader may wait for a
//! foreign kind of reader (kazoo's `__rlock__`).
//!
//! A child whose name has no such suffix (`config`, a `leases` folder, a literal
//! `lock`) is **not an entry**: it neither holds, nor waits, nor blocks anyone. Every
//! contender of every recipe we interoperate with (Curator, kazoo, ZooKeeper's own
//! recipes, zlock's recipes and native lock) is a sequential node, so mutual exclusion
//! among contenders never depends on such a node; it has no creation number, so it has
//! no place in a FIFO queue; and counting it as a blocker would let one stray
//! persistent node stop the lock forever. Curator agrees in effect: its mutex sorts a
//! name without its lock name by the whole name, after every ten-digit suffix, so no
//! contender ever waits for it.
//!
//! # Sequence numbers
//! ZooKeeper names a sequential node `prefix + String.format("%010d", c)` where `c` is
//! the parent's 32-bit create counter, a signed `int`: after 2^31 creates it goes
//! negative (the ZooKeeper Programmer's Guide, "Sequence Nodes": "the counter will
//! overflow when incremented beyond 2147483647 (resulting in a name
//! "<path>-2147483648")"). So a suffix is one of
//! - ten digits, `0000000000` to `2147483647`;
//! - `-` and nine digits, `-000000001` to `-999999999` (ten characters);
//! - `-` and ten digits, `-1000000000` to `-2147483648` (eleven characters).
//!
//! The eleven-character form is ambiguous with a prefix that ends in `-` followed by
//! ten digits (`lock-1000000000` is counter 1,000,000,000 under the prefix `lock-`, or
//! -1,000,000,000 under the prefix `lock`). The name alone cannot tell; the rule is:
//! the `-` is a sign when the name starts with it or the character before it is not a
//! letter or digit (every prefix in use ends in a separator, `-` or `_`, so a wrapped
//! counter shows as `lock--1500000000` or `__READ__-1500000000`), and always for
//! `-2147483648`, whose ten digits are no `int`. The cost: a prefix ending in a letter
//! or digit reads counters from -1,000,000,000 to -2,147,483,647 as positive.
//!
//! # Order
//! Entries are ordered by the create counter as an unsigned 32-bit number (`c as u32`:
//! `0 .. 2147483647`, then `-2147483648 .. -1`), then by name (two entries share a
//! number only if one was created with a literal name). That is creation order across
//! the wrap at 2^31: a new entry always comes after every older one, which is what keeps
//! "first holds" exclusive (an order that put the wrapped, newer names first would let
//! a newcomer hold beside the current holder). It breaks at 2^32 creates under one
//! parent, where ZooKeeper starts reusing names. Curator and kazoo compare the suffix
//! as a string: the same order for every non-negative counter, none after the wrap
//! (they put negative numbers first, unsafe as just said), which no FIFO order can match.
//!
//! # What blocks what
//! A reader is an entry whose name has [`READ_MARKER`] right before its sequence
//! number (Curator's `_c_<uuid>-__READ__NNNNNNNNNN`); every other entry is a writer.
//! Given the entries before it in queue order ([`Mode::may_hold`]):
//! - an exclusive contender (a mutex, a write lock) is blocked by any earlier entry;
//! - a reader is blocked by an earlier writer (earlier readers do not block);
//! - a semaphore contender with N leases is blocked by N or more earlier entries of any
//!   kind.

use std::cmp::Ordering;

/// Curator's marker of a read node (`InterProcessReadWriteLock`).
pub const READ_MARKER: &str = "__READ__";

/// The sequence number a child name ends with, as ZooKeeper writes it (see the module
/// doc); `None` when it ends with none, so it is not an entry.
pub fn sequence(name: &str) -> Option<i32> {
    suffix(name).map(|(seq, _)| seq)
}

/// The sequence number and the length of its suffix in bytes.
fn suffix(name: &str) -> Option<(i32, usize)> {
    let b = name.as_bytes();
    let n = b.len();
    let tail = b.get(n.checked_sub(10)?..)?;
    let dash_before = n >= 11 && b[n - 11] == b'-';
    if tail.iter().all(u8::is_ascii_digit) {
        let v = digits(tail);
        if v > i64::from(i32::MAX) {
            // Only `-2147483648` has ten digits that are no int.
            return (dash_before && v == -i64::from(i32::MIN)).then_some((i32::MIN, 11));
        }
        let sign = dash_before && (n == 11 || !b[n - 12].is_ascii_alphanumeric());
        if sign && v >= 1_000_000_000 {
            return i32::try_from(-v).ok().map(|s| (s, 11));
        }
        return i32::try_from(v).ok().map(|s| (s, 10));
    }
    if tail[0] == b'-' && tail[1..].iter().all(u8::is_ascii_digit) {
        // `%010d` never writes -0.
        let v = digits(&tail[1..]);
        if v == 0 {
            return None;
        }
        return i32::try_from(-v).ok().map(|s| (s, 10));
    }
    None
}

fn digits(ds: &[u8]) -> i64 {
    ds.iter().fold(0, |acc, d| acc * 10 + i64::from(d - b'0'))
}

/// Is this entry a reader ([`READ_MARKER`] right before its sequence number)? A name
/// that is no entry is no reader either.
pub fn is_reader(name: &str) -> bool {
    match suffix(name) {
        Some((_, len)) => name[..name.len() - len].ends_with(READ_MARKER),
        None => false,
    }
}

/// An entry's place in the queue: ordered by create counter (unsigned), then name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueKey {
    counter: u32,
    name: Box<str>,
}

impl QueueKey {
    /// The key of the child `name`; `None` if it is no entry.
    pub fn of(name: impl Into<Box<str>>) -> Option<QueueKey> {
        let name = name.into();
        let seq = sequence(&name)?;
        Some(QueueKey {
            // The counter's bits: creation order across the wrap at 2^31.
            counter: seq as u32,
            name,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sequence number as ZooKeeper wrote it.
    pub fn sequence(&self) -> i32 {
        self.counter as i32
    }
}

impl Ord for QueueKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.counter
            .cmp(&other.counter)
            .then_with(|| self.name.cmp(&other.name))
    }
}

impl PartialOrd for QueueKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The entries among `children`, in queue order; the other names are dropped.
pub fn queue(children: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<(QueueKey, String)> = children
        .into_iter()
        .filter_map(|c| QueueKey::of(c.as_str()).map(|k| (k, c)))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.into_iter().map(|(_, c)| c).collect()
}

/// What a contender asks for, which decides what blocks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Blocked by any earlier entry (a mutex, the write side of a read-write lock).
    Exclusive,
    /// Blocked by an earlier writer.
    Read,
    /// Blocked by this many (at least 1) or more earlier entries.
    Semaphore(usize),
}

impl Mode {
    /// How many may hold at once (1 for an exclusive lock and a read lock's writers).
    pub fn leases(self) -> usize {
        match self {
            Mode::Semaphore(n) => n.max(1),
            Mode::Exclusive | Mode::Read => 1,
        }
    }

    /// Does a contender hold, given how many entries, and how many writers among them,
    /// come before it?
    pub fn may_hold(self, before: usize, writers_before: usize) -> bool {
        match self {
            Mode::Exclusive => before == 0,
            Mode::Read => writers_before == 0,
            Mode::Semaphore(n) => before < n.max(1),
        }
    }

    /// Does `queue[idx]` hold? `queue` is in queue order ([`queue`]).
    pub fn holds<S: AsRef<str>>(self, queue: &[S], idx: usize) -> bool {
        let ahead = &queue[..idx.min(queue.len())];
        let writers = ahead.iter().filter(|n| !is_reader(n.as_ref())).count();
        self.may_hold(ahead.len(), writers)
    }
}

/// The last writer before `queue[idx]`: what a waiting reader waits for (`None`: it
/// holds).
pub fn last_writer_before<S: AsRef<str>>(queue: &[S], idx: usize) -> Option<usize> {
    queue[..idx.min(queue.len())]
        .iter()
        .rposition(|n| !is_reader(n.as_ref()))
}

#[cfg(test)]
#[path = "lock_order_tests.rs"]
mod tests;
