//! One Txn as the log dump shows it: its origin and time, then the operation and its
//! fields, once as a list of named values that both the text line and the JSON object
//! are made from (so the two forms cannot say different things).
//!
//! What is left out on purpose: a new session's password (a secret that lets anyone
//! resume the session) and the data itself (its length is shown; `dump-snapshot --data`
//! shows what a znode holds). The zxid is not here either: the log does not store it
//! (it is a counter of applied Txns, see `zlock data dump-log --help`).

use serde_json::{json, Map, Value};
use zlock_core::{Txn, TxnBody, TxnClock};
use zlock_proto::records::{lock_flags, lock_mode, LockRequest, MultiOp};
use zlock_proto::{OpCode, Request};

use super::fmt::{acl_json, hex, time};

/// An operation: its ZooKeeper name, its fields in order, and a multi's ops.
pub struct Op {
    pub name: String,
    pub fields: Vec<(&'static str, Value)>,
    pub ops: Vec<Op>,
}

impl Op {
    fn new(name: impl Into<String>) -> Op {
        Op {
            name: name.into(),
            fields: Vec::new(),
            ops: Vec::new(),
        }
    }

    fn with(mut self, key: &'static str, value: impl Into<Value>) -> Op {
        self.fields.push((key, value.into()));
        self
    }

    /// `name k=v k=v`, a multi's ops on the lines after it, each indented by `indent`.
    pub fn text(&self, indent: &str) -> String {
        let mut s = self.name.clone();
        for (k, v) in &self.fields {
            s.push_str(&format!(" {k}={}", value_text(v)));
        }
        for op in &self.ops {
            s.push_str(&format!("\n{indent}- {}", op.text(indent)));
        }
        s
    }

    /// `{"op": name, fields..., "ops": [...]}`.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        m.insert("op".into(), self.name.clone().into());
        for (k, v) in &self.fields {
            m.insert((*k).into(), v.clone());
        }
        if self.name == "multi" {
            m.insert("ops".into(), self.ops.iter().map(Op::json).collect());
        }
        Value::Object(m)
    }
}

/// A field value in a text line: strings bare, lists joined by commas, an ACL entry
/// (see [`acl_json`]) as `scheme:id:perms`.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("perms") => format!(
            "{}:{}:{}",
            value_text(&o["scheme"]),
            value_text(&o["id"]),
            value_text(&o["perms"])
        ),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(value_text).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// The Txn as one text line (more for a multi's ops), ZooKeeper's TxnLogToolkit style:
/// time, origin, operation.
pub fn text(t: &Txn, indent: &str) -> String {
    let clock = match t.clock {
        TxnClock::Leader => "",
        TxnClock::Proposer => " (proposer's clock)",
    };
    format!(
        "{}{clock} member {} session {} xid {} {}",
        time(t.time_ms),
        t.origin.member.0,
        hex(t.origin.session.0),
        t.origin.xid,
        op(t).text(indent)
    )
}

/// The Txn as a JSON object: `time_ms`, `clock`, `member`, `session`, `xid`, `auth`,
/// then the operation's fields (see [`Op::json`]).
pub fn json(t: &Txn) -> Value {
    let mut m = Map::new();
    m.insert("time_ms".into(), t.time_ms.into());
    let clock = match t.clock {
        TxnClock::Leader => "leader",
        TxnClock::Proposer => "proposer",
    };
    m.insert("clock".into(), clock.into());
    m.insert("member".into(), t.origin.member.0.into());
    m.insert("session".into(), hex(t.origin.session.0).into());
    m.insert("xid".into(), t.origin.xid.into());
    if let TxnBody::Request { auth, .. } = &t.body {
        let ids: Vec<Value> = auth
            .iter()
            .map(|i| json!({"scheme": i.scheme, "id": i.id}))
            .collect();
        m.insert("auth".into(), ids.into());
    }
    if let Value::Object(fields) = op(t).json() {
        m.extend(fields);
    }
    Value::Object(m)
}

/// What the Txn does.
pub fn op(t: &Txn) -> Op {
    match &t.body {
        TxnBody::CreateSession { timeout_ms, .. } => {
            Op::new("createSession").with("timeout_ms", *timeout_ms)
        }
        TxnBody::CloseSession { session_id } => Op::new("closeSession")
            .with("session_id", hex(session_id.0))
            .with("expiry", t.is_expiry()),
        TxnBody::DeleteExpired { paths } => Op::new("deleteExpired").with("paths", paths.clone()),
        TxnBody::MoveSession { session_id, .. } => {
            Op::new("moveSession").with("session_id", hex(session_id.0))
        }
        TxnBody::Request { request, .. } => request_op(request),
    }
}

fn data_len(data: &Option<Vec<u8>>) -> Value {
    match data {
        Some(d) => d.len().into(),
        None => Value::Null,
    }
}

/// ZooKeeper's `CreateMode` names for create flags.
fn create_mode(flags: i32) -> &'static str {
    match flags {
        0 => "PERSISTENT",
        1 => "EPHEMERAL",
        2 => "PERSISTENT_SEQUENTIAL",
        3 => "EPHEMERAL_SEQUENTIAL",
        4 => "CONTAINER",
        5 => "PERSISTENT_WITH_TTL",
        6 => "PERSISTENT_SEQUENTIAL_WITH_TTL",
        _ => "invalid",
    }
}

/// An opcode's name as ZooKeeper spells it (`setData`, `create2`).
fn op_name(code: OpCode) -> String {
    let debug = format!("{code:?}");
    let mut chars = debug.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => debug,
    }
}

fn create(
    code: OpCode,
    path: &str,
    data: &Option<Vec<u8>>,
    acl: &[zlock_proto::records::Acl],
    flags: i32,
) -> Op {
    Op::new(op_name(code))
        .with("path", path)
        .with("data_length", data_len(data))
        .with("flags", flags)
        .with("mode", create_mode(flags))
        .with("acl", acl_json(acl))
}

fn request_op(r: &Request) -> Op {
    match r {
        Request::Create(code, c) => create(*code, &c.path, &c.data, &c.acl, c.flags),
        Request::CreateTtl(c) => {
            create(OpCode::CreateTtl, &c.path, &c.data, &c.acl, c.flags).with("ttl_ms", c.ttl)
        }
        Request::Delete(d) => Op::new("delete")
            .with("path", d.path.as_str())
            .with("version", d.version),
        Request::SetData(s) => Op::new("setData")
            .with("path", s.path.as_str())
            .with("data_length", data_len(&s.data))
            .with("version", s.version),
        Request::SetAcl(s) => Op::new("setACL")
            .with("path", s.path.as_str())
            .with("acl", acl_json(&s.acl))
            .with("version", s.version),
        Request::Check(c) => Op::new("check")
            .with("path", c.path.as_str())
            .with("version", c.version),
        Request::Multi(ops) => {
            let mut m = Op::new("multi").with("count", ops.len());
            m.ops = ops.iter().map(multi_op).collect();
            m
        }
        Request::Lock(l) => lock_op(l),
        Request::Reconfig(c) => Op::new("reconfig")
            .with("joining", c.joining_servers.clone())
            .with("leaving", c.leaving_servers.clone())
            .with("new_members", c.new_members.clone())
            .with("cur_config_id", c.cur_config_id),
        other => Op::new(op_name(other.op_code())),
    }
}

fn multi_op(op: &MultiOp) -> Op {
    match op {
        MultiOp::Create(code, c) => create(*code, &c.path, &c.data, &c.acl, c.flags),
        MultiOp::CreateTtl(c) => {
            create(OpCode::CreateTtl, &c.path, &c.data, &c.acl, c.flags).with("ttl_ms", c.ttl)
        }
        MultiOp::Delete(d) => request_op(&Request::Delete(d.clone())),
        MultiOp::SetData(s) => request_op(&Request::SetData(s.clone())),
        MultiOp::Check(c) => request_op(&Request::Check(c.clone())),
        MultiOp::GetData(p) => Op::new("getData").with("path", p.path.as_str()),
        MultiOp::GetChildren(p) => Op::new("getChildren").with("path", p.path.as_str()),
    }
}

/// zlock's native lock request (opcode 1001).
fn lock_op(l: &LockRequest) -> Op {
    let mode = match l.mode {
        lock_mode::EXCLUSIVE => "exclusive",
        lock_mode::READ => "read",
        lock_mode::WRITE => "write",
        lock_mode::SEMAPHORE => "semaphore",
        _ => "invalid",
    };
    let mut flags = Vec::new();
    if l.flags & lock_flags::RESUME != 0 {
        flags.push("resume");
    }
    if l.flags & lock_flags::TRY != 0 {
        flags.push("try");
    }
    Op::new("lock")
        .with("path", l.path.as_str())
        .with("prefix", l.prefix.as_str())
        .with("data_length", data_len(&l.data))
        .with("acl", acl_json(&l.acl))
        .with("mode", mode)
        .with("leases", l.leases)
        .with("flags", flags)
        .with("release", l.release.as_str())
        .with("lock_delay_ms", l.lock_delay_ms)
}
