//! The seeded workload driven against ZooKeeper, and reading every node back.

use std::time::Duration;

use zlock::Client;
use zlock_proto::jute::{Reader, Record};
use zlock_proto::records::*;
use zlock_proto::{OpCode, Request};

use super::{View, BOUND, CONNECT_BOUND, SEED, SESSION_MS, STEPS, USER, USER_DIGEST};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn acl_choice(rng: &mut Rng) -> Vec<Acl> {
    let all = perms::ALL;
    match rng.below(4) {
        0 => Acl::open_unsafe(),
        1 => vec![Acl {
            perms: all,
            id: Id::new("digest", USER_DIGEST),
        }],
        2 => vec![Acl {
            perms: all,
            id: Id::new("ip", "127.0.0.1"),
        }],
        _ => vec![
            Acl {
                perms: perms::READ,
                id: Id::new("world", "anyone"),
            },
            Acl {
                perms: all,
                id: Id::new("digest", USER_DIGEST),
            },
        ],
    }
}

fn data_choice(rng: &mut Rng, i: usize) -> Option<Vec<u8>> {
    match rng.below(5) {
        0 => None,
        1 => Some(Vec::new()),
        _ => Some(format!("payload-{i}-{}", rng.next() % 1000).into_bytes()),
    }
}

/// A session on `addr`, retried while the server, its port open, is still loading its
/// data (it closes connections until then, or leaves them unanswered); each attempt
/// bounded by [`BOUND`], all of them by [`CONNECT_BOUND`].
pub async fn connect(addr: &str) -> Client {
    let deadline = tokio::time::Instant::now() + CONNECT_BOUND;
    loop {
        match tokio::time::timeout(BOUND, Client::connect(addr, SESSION_MS)).await {
            Ok(Ok((c, _events))) => {
                c.add_auth("digest", USER).await.unwrap();
                return c;
            }
            Ok(Err(e)) if tokio::time::Instant::now() < deadline => {
                eprintln!("connect to {addr}: {e}; again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Err(e)) => panic!("connect to {addr}: {e}"),
            Err(_) if tokio::time::Instant::now() < deadline => {
                eprintln!("connect to {addr}: no session in {BOUND:?}; again");
            }
            Err(_) => panic!("connect to {addr}: no session in {CONNECT_BOUND:?}"),
        }
    }
}

/// Sends `req`, bounded; the reply's error code (0: ok) and body.
pub async fn call(c: &Client, req: Request) -> (i32, Vec<u8>) {
    match tokio::time::timeout(BOUND, c.send(&req)).await {
        Ok(Ok((h, body))) => (h.err, body),
        Ok(Err(e)) => panic!("{req:?}: {e}"),
        Err(_) => panic!("{req:?} got no answer in {BOUND:?}"),
    }
}

pub fn create(path: &str, data: Option<Vec<u8>>, acl: Vec<Acl>, flags: i32) -> Request {
    Request::Create(
        OpCode::Create,
        CreateRequest {
            path: path.into(),
            data,
            acl,
            flags,
        },
    )
}

/// Drives ZooKeeper through the seeded mix; returns the long-lived session's client.
pub async fn workload(addr: &str) -> Client {
    let a = connect(addr).await;
    let mut b = connect(addr).await;
    let mut rng = Rng(SEED);
    let mut known: Vec<String> = Vec::new();
    for d in ["/t", "/t/d1", "/t/d2"] {
        call(&a, create(d, Some(b"dir".to_vec()), Acl::open_unsafe(), 0)).await;
    }
    let dirs = ["/t", "/t/d1", "/t/d2"];
    for i in 0..STEPS {
        let dir = dirs[rng.below(dirs.len())];
        let r = rng.below(100);
        if r < 25 {
            let seq = rng.below(3) == 0;
            let path = if seq {
                format!("{dir}/s-")
            } else {
                format!("{dir}/n{i}")
            };
            let req = create(
                &path,
                data_choice(&mut rng, i),
                acl_choice(&mut rng),
                if seq { 2 } else { 0 },
            );
            if let (0, body) = call(&a, req).await {
                known.push(
                    CreateResponse::decode(&mut Reader::new(&body))
                        .map(|r| r.path)
                        .unwrap(),
                );
            }
        } else if r < 35 {
            let owner = if rng.below(2) == 0 { &a } else { &b };
            let flags = if rng.below(2) == 0 { 1 } else { 3 };
            let req = create(
                &format!("{dir}/e{i}-"),
                data_choice(&mut rng, i),
                Acl::open_unsafe(),
                flags,
            );
            call(owner, req).await;
        } else if r < 40 {
            let req = Request::CreateTtl(CreateTtlRequest {
                path: format!("{dir}/ttl{i}-"),
                data: data_choice(&mut rng, i),
                acl: acl_choice(&mut rng),
                flags: if rng.below(2) == 0 { 5 } else { 6 },
                ttl: 3_600_000,
            });
            if let (0, body) = call(&a, req).await {
                known.push(
                    CreateResponse::decode(&mut Reader::new(&body))
                        .map(|r| r.path)
                        .unwrap(),
                );
            }
        } else if r < 43 {
            // A container keeps a child for good: ZooKeeper would delete an emptied one
            // while the test reads it.
            let path = format!("/t/c{i}");
            let req = Request::Create(
                OpCode::CreateContainer,
                CreateRequest {
                    path: path.clone(),
                    data: data_choice(&mut rng, i),
                    acl: Acl::open_unsafe(),
                    flags: 4,
                },
            );
            call(&a, req).await;
            call(
                &a,
                create(&format!("{path}/keep"), None, Acl::open_unsafe(), 0),
            )
            .await;
        } else if r < 60 && !known.is_empty() {
            let path = known[rng.below(known.len())].clone();
            let version = match rng.below(3) {
                0 => -1,
                1 => 0,
                _ => 7,
            };
            let req = Request::SetData(SetDataRequest {
                path,
                data: data_choice(&mut rng, i),
                version,
            });
            call(&a, req).await;
        } else if r < 72 && !known.is_empty() {
            let path = known.swap_remove(rng.below(known.len()));
            call(&a, Request::Delete(DeleteRequest { path, version: -1 })).await;
        } else if r < 80 && !known.is_empty() {
            let path = known[rng.below(known.len())].clone();
            let req = Request::SetAcl(SetAclRequest {
                path,
                acl: acl_choice(&mut rng),
                version: -1,
            });
            call(&a, req).await;
        } else if r < 95 {
            let path = format!("{dir}/m{i}");
            let mut ops = vec![
                MultiOp::Create(
                    OpCode::Create,
                    CreateRequest {
                        path: path.clone(),
                        data: data_choice(&mut rng, i),
                        acl: Acl::open_unsafe(),
                        flags: 0,
                    },
                ),
                MultiOp::SetData(SetDataRequest {
                    path: path.clone(),
                    data: data_choice(&mut rng, i),
                    version: 0,
                }),
            ];
            if rng.below(3) == 0 {
                // Fails the whole multi (an ErrorTxn in ZooKeeper's log).
                ops.push(MultiOp::Check(CheckVersionRequest {
                    path: "/t".into(),
                    version: 99,
                }));
            } else if let Some(victim) = known.pop() {
                ops.push(MultiOp::Delete(DeleteRequest {
                    path: victim,
                    version: -1,
                }));
            }
            if let (0, _) = call(&a, Request::Multi(ops)).await {
                known.push(path);
            }
        } else {
            // The second session ends (its ephemerals go) and another begins.
            b.close().await.unwrap();
            b = connect(addr).await;
        }
    }
    a
}

/// Every node as `c` reads it, walking from `/`.
pub async fn read_all(c: &Client) -> View {
    let mut view = View::new();
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        let (err, body) = call(
            c,
            Request::GetData(PathWatchRequest {
                path: p.clone(),
                watch: false,
            }),
        )
        .await;
        let data = match err {
            0 => {
                let r = GetDataResponse::decode(&mut Reader::new(&body)).unwrap();
                format!("data={:?} stat={:?}", r.data, r.stat)
            }
            e => format!("getData error {e}"),
        };
        let (err, body) = call(c, Request::GetAcl(PathRequest { path: p.clone() })).await;
        let acl = match err {
            0 => format!(
                "acl={:?}",
                GetAclResponse::decode(&mut Reader::new(&body)).unwrap().acl
            ),
            e => format!("getACL error {e}"),
        };
        let (err, body) = call(
            c,
            Request::GetChildren(PathWatchRequest {
                path: p.clone(),
                watch: false,
            }),
        )
        .await;
        if err == 0 {
            let kids = GetChildrenResponse::decode(&mut Reader::new(&body))
                .unwrap()
                .children;
            for k in kids {
                stack.push(if p == "/" {
                    format!("/{k}")
                } else {
                    format!("{p}/{k}")
                });
            }
        }
        view.insert(p, format!("{data} {acl}"));
    }
    view
}

/// The paths on which two views differ, each with both sides.
pub fn differences(want: &View, got: &View) -> Vec<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            Some(g) if g == w => {}
            g => out.push(format!("{p}:\n  zookeeper: {w}\n  zlock:     {g:?}")),
        }
    }
    for p in got.keys().filter(|p| !want.contains_key(*p)) {
        out.push(format!("{p}: only on zlock"));
    }
    out
}
