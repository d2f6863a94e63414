//! What the examples share: a state with sessions, and the tree `zlock bench load`
//! builds (`/zlock-load/b<j>/n<k>`, 10,000 children per bucket, 100 bytes each).

use std::sync::Arc;

use zlock_core::{Origin, SessionId, State, Txn, TxnBody};
use zlock_proto::records::{Acl, CreateRequest};
use zlock_proto::{OpCode, Request};

pub const BUCKET: usize = 10_000;

pub fn apply(st: &mut State, txn: &Txn) -> zlock_core::Applied {
    match st.apply(st.applied.next(), txn) {
        Ok(a) => a,
        Err(e) => panic!("{e}"),
    }
}

/// Applies `request` for `session`, which must succeed.
pub fn write(st: &mut State, session: SessionId, request: Request) {
    let origin = Origin {
        session,
        ..Origin::default()
    };
    let a = apply(st, &Txn::request(origin, 100, Arc::new(vec![]), request));
    assert_eq!(a.reply.err, 0);
}

pub fn create(path: String, data: &[u8]) -> Request {
    Request::Create(
        OpCode::Create,
        CreateRequest {
            path,
            data: Some(data.to_vec()),
            acl: Acl::open_unsafe(),
            flags: 0,
        },
    )
}

/// Opens `n` sessions; their ids.
pub fn sessions(st: &mut State, n: usize) -> Vec<SessionId> {
    (0..n)
        .map(|_| {
            let txn = Txn {
                origin: Origin::default(),
                time_ms: 100,
                clock: zlock_core::TxnClock::Leader,
                body: TxnBody::CreateSession {
                    passwd: vec![1; 16],
                    timeout_ms: 30_000,
                },
            };
            apply(st, &txn).created_session.expect("a session")
        })
        .collect()
}

/// Creates `znodes` znodes of 100 bytes as `zlock bench load` lays them out.
pub fn load(st: &mut State, session: SessionId, znodes: usize) {
    write(st, session, create("/zlock-load".into(), b""));
    for j in 0..znodes.div_ceil(BUCKET) {
        write(st, session, create(format!("/zlock-load/b{j}"), b""));
    }
    let data = vec![b'x'; 100];
    for g in 0..znodes {
        let p = format!("/zlock-load/b{}/n{}", g / BUCKET, g % BUCKET);
        write(st, session, create(p, &data));
    }
}
