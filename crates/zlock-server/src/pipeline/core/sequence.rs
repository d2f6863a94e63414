//! Requests in: each write becomes a Txn with its origin, a handshake becomes a
//! session's Txn, a read is answered in place or queued behind its session's writes.

use super::*;

impl Core {
    fn origin(&self, session: SessionId, xid: i32) -> Origin {
        Origin {
            member: self.router.me,
            session,
            xid,
        }
    }

    /// The sequencer's step for one item, in arrival order: a write becomes a Txn with
    /// everything fixed in it (origin, time, a new session's password) and is pushed to
    /// `txns`, its request registered with the router; anything member-local (a read
    /// queued behind a write, a reconnect, a four-letter word) is handled here.
    pub fn sequence(&mut self, item: Item, txns: &mut Vec<Txn>) -> Flow {
        match item {
            Item::Connect {
                conn,
                timeout_ms,
                passwd,
                read_only,
                features,
                done,
            } => {
                let hs = Handshaking {
                    conn,
                    passwd: passwd.clone(),
                    resume: None,
                    read_only,
                    features,
                    done,
                };
                self.handshake(hs, TxnBody::CreateSession { passwd, timeout_ms }, txns);
            }
            resume @ Item::Resume { .. } => self.resume(resume, txns),
            Item::Request {
                session,
                asker,
                auth,
                req,
            } => {
                let write = State::is_write(&req);
                if write && !self.router.routes_to(session, asker.conn_id) {
                    // Its connection is closed here (dropped when a proposal's outcome
                    // was unknown, replaced by a newer connection of its session, or
                    // its session ended) and its client told ConnectionLoss: proposing
                    // it now would let it land after the client, reconnected, decided
                    // it was not applied (a lock recipe would create a second node).
                    // A ZooKeeper follower that loses its leader drops its queued
                    // requests the same way.
                    asker
                        .inflight
                        .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    return Flow::Go;
                }
                self.touch(session);
                if write {
                    let body = match req {
                        Request::CloseSession => TxnBody::CloseSession {
                            session_id: session,
                        },
                        Request::Lock(mut lock) => {
                            self.router
                                .stats
                                .lock_requests
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            // The proposer fixes the default in the Txn: a member
                            // configured otherwise applies the same lock-delay.
                            if lock.lock_delay_ms == LOCK_DELAY_SERVER_DEFAULT {
                                lock.lock_delay_ms = self.config.lock_delay_ms;
                            }
                            TxnBody::Request {
                                auth,
                                request: Request::Lock(lock),
                            }
                        }
                        request => TxnBody::Request { auth, request },
                    };
                    txns.push(Txn::new(self.origin(session, asker.xid), now_ms(), body));
                    if crate::stages::on() {
                        let ago = asker.received.elapsed();
                        crate::stages::mark("in", session.0, asker.xid, ago);
                        crate::stages::mark("seq", session.0, asker.xid, std::time::Duration::ZERO);
                    }
                    self.router.expect_write(session, asker);
                } else {
                    let w = Waiting::Read { asker, auth, req };
                    self.router.behind_writes(&mut self.state, session, w);
                }
            }
            Item::Reply {
                session,
                asker,
                frame,
                close,
            } => {
                let w = Waiting::Reply {
                    asker,
                    frame,
                    close,
                };
                self.router.behind_writes(&mut self.state, session, w);
            }
            Item::Disconnected { session, conn_id } => self.router.disconnected(session, conn_id),
            Item::Expire { session } => txns.push(Txn::new(
                self.origin(SessionId::NONE, 0),
                now_ms(),
                TxnBody::CloseSession {
                    session_id: session,
                },
            )),
            Item::DeleteExpired { paths } => txns.push(Txn::new(
                self.origin(SessionId::NONE, 0),
                now_ms(),
                TxnBody::DeleteExpired { paths },
            )),
            Item::Admin { query, done } => {
                if query == AdminQuery::Srst {
                    self.router.latency = Latency::default();
                }
                let _ = done.send(admin::answer(query, &self.facts()));
            }
            Item::AdminJson { query, done } => {
                let _ = done.send(admin::json::answer(query, &self.facts()));
            }
            Item::Restore { state, done } => match self.snapshot_self {
                true => self.restore_due = Some((state, done)),
                false => {
                    let _ = done.send(Err("a member of an ensemble is not restored in \
                                           place"
                        .into()));
                }
            },
            Item::Image { done } => {
                let _ = done.send(zlock_core::snapshot::Image::of(&self.state));
            }
            Item::Acl { path, done } => {
                let _ = done.send(self.state.tree.get(&path).map(|n| n.acl.clone()));
            }
            Item::Scrape { done } => {
                let _ = done.send(Box::new(self.scrape()));
            }
            dropping @ (Item::OutOfTouch | Item::Trouble(_)) => {
                // Trouble: committed or not, nobody can say. Either way every client
                // here is dropped (they reconnect and resume), and none of their
                // requests sequenced before this is proposed.
                if let Item::Trouble(why) = &dropping {
                    tracing::warn!(reason = %why, "no answer from the leader; closing client connections");
                }
                txns.clear();
                self.router.drop_all();
            }
            // The sequencer takes the log's own items as it gathers a batch.
            Item::Purge { .. } => {}
            Item::Shutdown => return Flow::Stop,
        }
        Flow::Go
    }

    /// Registers a handshake with the router and queues the Txn (a CreateSession, or
    /// a MoveSession in an ensemble) whose application answers it.
    fn handshake(&mut self, hs: Handshaking, body: TxnBody, txns: &mut Vec<Txn>) {
        let ticket = self.router.expect_session(hs);
        txns.push(Txn::new(
            self.origin(SessionId::NONE, ticket),
            now_ms(),
            body,
        ));
    }

    /// A reconnect to an existing session (`item` is an [`Item::Resume`]).
    fn resume(&mut self, item: Item, txns: &mut Vec<Txn>) {
        let Item::Resume {
            conn,
            session_id,
            last_zxid_seen,
            passwd,
            read_only,
            features,
            done,
        } = item
        else {
            return;
        };
        let offer = (read_only, features);
        if self.config.ensemble.is_some() {
            // A member of an ensemble resumes a session through the log: the session
            // moves here (see `Router::moved`), answered once applied.
            let hs = Handshaking {
                conn,
                passwd: passwd.clone(),
                resume: Some((session_id, last_zxid_seen)),
                read_only,
                features,
                done,
            };
            self.handshake(hs, TxnBody::MoveSession { session_id, passwd }, txns);
            return;
        }
        if Zxid(last_zxid_seen) > self.state.zxid {
            // The client has seen a newer state than ours (we lost data, or it talked
            // to another ensemble): ZooKeeper refuses without an answer so the client
            // tries another server.
            tracing::warn!(
                session = %session_id,
                client_zxid = format_args!("0x{last_zxid_seen:x}"),
                our_zxid = %self.state.zxid,
                "refusing a client that has seen a newer zxid than ours"
            );
            self.router.close(&conn);
            let _ = done.send(None);
            return;
        }
        let alive = !self.sessions.is_expiring(session_id) && self.sessions.contains(session_id);
        match self.state.sessions.get(&session_id) {
            Some(s) if alive && s.passwd == passwd => {
                self.sessions.touch(session_id, self.clock.now());
                if let Some(t) = &mut self.touched {
                    t.insert(session_id);
                }
                let timeout_ms = s.timeout_ms;
                self.router.accept(conn, session_id, s, offer);
                let _ = done.send(Some(crate::pipeline::Handshake {
                    session_id,
                    timeout_ms,
                }));
            }
            _ => {
                self.router.refuse(&conn, offer.0);
                let _ = done.send(None);
            }
        }
    }

    /// Answers a read whose session has nothing in the commit stage (nothing once the
    /// server has stopped: the state is gone, and an answer from it would be wrong).
    pub fn direct(&mut self, session: SessionId, asker: Asker, auth: &[Id], req: &Request) {
        if self.stopped {
            return;
        }
        self.touch(session);
        self.router
            .read_now(&mut self.state, session, asker, auth, req);
    }
}
