//! How the dumps show values, one rule each, shared by the snapshot and the log dumps
//! and by their text and JSON forms: zxids and session ids in hex as ZooKeeper's tools
//! print them, times as ms plus a date, data as text when it is text.

use base64::Engine;
use serde_json::{json, Map, Value};
use zlock_proto::records::{perms, Acl};
use zlock_server::commit::raft::codec::v1;

/// `0x<hex>`, as zkCli and ZooKeeper's toolkits print zxids and session ids.
pub fn hex(v: i64) -> String {
    format!("0x{v:x}")
}

/// A time in ms since the epoch, as text: the ms, then the date as zkCli prints it.
pub fn time(ms: i64) -> String {
    format!("{ms} ({})", crate::cmd::zk::java_date(ms))
}

/// ACL permissions as zkCli's getAcl letters, in its order: `cdrwa`.
pub fn perms_letters(p: i32) -> String {
    [
        (perms::CREATE, 'c'),
        (perms::DELETE, 'd'),
        (perms::READ, 'r'),
        (perms::WRITE, 'w'),
        (perms::ADMIN, 'a'),
    ]
    .iter()
    .filter(|(bit, _)| p & bit != 0)
    .map(|(_, c)| *c)
    .collect()
}

/// An ACL list as text: `world:anyone:cdrwa,digest:u:xyz=:r`.
pub fn acl_text(acl: &[Acl]) -> String {
    let parts: Vec<String> = acl
        .iter()
        .map(|a| format!("{}:{}:{}", a.id.scheme, a.id.id, perms_letters(a.perms)))
        .collect();
    parts.join(",")
}

/// An ACL list as JSON: `[{"scheme", "id", "perms": "cdrwa"}]`.
pub fn acl_json(acl: &[Acl]) -> Value {
    acl.iter()
        .map(|a| json!({"scheme": a.id.scheme, "id": a.id.id, "perms": perms_letters(a.perms)}))
        .collect()
}

/// Data as UTF-8 when it is printable text (tabs and newlines allowed), else `None`.
fn printable(data: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(data).ok()?;
    s.chars()
        .all(|c| !c.is_control() || c == '\n' || c == '\t' || c == '\r')
        .then_some(s)
}

/// Data as JSON: `{"utf8": "..."}` or `{"base64": "..."}`; null data (which ZooKeeper
/// keeps apart from empty) is `null`.
pub fn data_json(data: Option<&[u8]>) -> Value {
    match data {
        None => Value::Null,
        Some(d) => match printable(d) {
            Some(s) => json!({ "utf8": s }),
            None => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(d) }),
        },
    }
}

/// Data as text: quoted and escaped when printable, else `base64:...`; `null`.
pub fn data_text(data: Option<&[u8]>) -> String {
    match data {
        None => "null".into(),
        Some(d) => match printable(d) {
            Some(s) => format!("{s:?}"),
            None => format!(
                "base64:{}",
                base64::engine::general_purpose::STANDARD.encode(d)
            ),
        },
    }
}

/// A Raft log id as JSON: `{term, leader, index}` (`null`: none).
pub fn log_id_json(l: &Option<v1::LogId>) -> Value {
    match l {
        Some(l) => json!({"term": l.term, "leader": l.leader, "index": l.index}),
        None => Value::Null,
    }
}

/// `term T leader L index I`, or `none`.
pub fn log_id_text(l: &Option<v1::LogId>) -> String {
    match l {
        Some(l) => format!("term {} leader {} index {}", l.term, l.leader, l.index),
        None => "none".into(),
    }
}

/// A membership as JSON: `{voters: [[ids]], members: {id: addr}}`.
pub fn membership_json(c: &v1::Config) -> Value {
    let members: Map<String, Value> = c
        .nodes
        .iter()
        .map(|(id, n)| (id.to_string(), n.addr.clone().into()))
        .collect();
    json!({ "voters": c.voters, "members": members })
}

/// `voters {1,2,3}; members 1=addr, 2=addr` (two voter sets during a joint change).
pub fn membership_text(c: &v1::Config) -> String {
    let sets: Vec<String> = c
        .voters
        .iter()
        .map(|s| {
            let ids: Vec<String> = s.iter().map(u64::to_string).collect();
            format!("{{{}}}", ids.join(","))
        })
        .collect();
    let members: Vec<String> = c
        .nodes
        .iter()
        .map(|(id, n)| format!("{id}={}", n.addr))
        .collect();
    format!("voters {}; members {}", sets.join(" "), members.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlock_proto::records::Id;

    #[test]
    fn values_print_as_documented() {
        assert_eq!(hex(0x1_0000_002a), "0x10000002a");
        assert_eq!(perms_letters(31), "cdrwa");
        assert_eq!(perms_letters(perms::READ | perms::ADMIN), "ra");
        let acl = vec![
            Acl {
                perms: 31,
                id: Id::new("world", "anyone"),
            },
            Acl {
                perms: perms::READ,
                id: Id::new("ip", "10.0.0.1"),
            },
        ];
        assert_eq!(acl_text(&acl), "world:anyone:cdrwa,ip:10.0.0.1:r");
        assert_eq!(data_json(Some(b"hi\n")), json!({"utf8": "hi\n"}));
        assert_eq!(data_json(Some(&[0, 255])), json!({"base64": "AP8="}));
        assert_eq!(data_json(None), Value::Null);
        assert_eq!(data_text(Some(b"a\"b")), "\"a\\\"b\"");
        assert_eq!(data_text(Some(&[1])), "base64:AQ==");
        assert_eq!(time(0), "0 (Thu Jan 01 00:00:00 UTC 1970)");
    }
}
