//! What taking a snapshot image costs the core's lock, on a tree as `zlock bench load`
//! builds it (`/zlock-load/b<j>/n<k>`, 10,000 children per bucket, 100 bytes each):
//!
//! ```text
//! cargo run --release -p zlock-core --example image_cost -- [ZNODES] [SESSIONS]
//! ```
//!
//! Prints the time `Image::of` takes (what the core holds its lock for), the time of
//! 1,000 setData applies right after an image (the copy-on-write of what the image
//! shares) and without one, the encoding of an image, and a getAllChildrenNumber of the
//! whole load walked in one go.
//! A measurement, not a test: nothing is asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use zlock_core::snapshot::Image;
use zlock_core::{Config, State};
use zlock_proto::records::{PathRequest, SetDataRequest};
use zlock_proto::Request;

mod common;

use common::{load, sessions, write, BUCKET};

fn set_data(path: String) -> Request {
    Request::SetData(SetDataRequest {
        path,
        data: Some(vec![b'y'; 100]),
        version: -1,
    })
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let znodes: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let sessions_n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);

    let mut st = State::new(Config::default());
    let sid = sessions(&mut st, sessions_n.max(1))[0];
    let started = Instant::now();
    load(&mut st, sid, znodes);
    println!(
        "loaded {} znodes, {} sessions in {:.1} s",
        st.tree.len(),
        st.sessions.len(),
        started.elapsed().as_secs_f64()
    );

    let mut image_times = Vec::new();
    let mut after_image = Vec::new();
    let mut no_image = Vec::new();
    let mut g = 0usize;
    let mut next_path = || {
        g = (g + 7919) % znodes;
        format!("/zlock-load/b{}/n{}", g / BUCKET, g % BUCKET)
    };
    for _ in 0..15 {
        let t = Instant::now();
        let image = Image::of(&st);
        image_times.push(t.elapsed());
        let t = Instant::now();
        for _ in 0..1_000 {
            write(&mut st, sid, set_data(next_path()));
        }
        after_image.push(t.elapsed());
        drop(image);
        let t = Instant::now();
        for _ in 0..1_000 {
            write(&mut st, sid, set_data(next_path()));
        }
        no_image.push(t.elapsed());
    }
    let (m, lo, hi) = median(image_times);
    println!("Image::of: median {m:?} (min {lo:?}, max {hi:?}) over 15");
    let (m, lo, hi) = median(after_image);
    println!("1000 setData right after an image: median {m:?} (min {lo:?}, max {hi:?})");
    let (m, lo, hi) = median(no_image);
    println!("1000 setData with no image alive: median {m:?} (min {lo:?}, max {hi:?})");

    let mut encodes = Vec::new();
    for _ in 0..3 {
        let image = Image::of(&st);
        let t = Instant::now();
        zlock_core::snapshot::write_image(&image, &mut std::io::sink()).unwrap();
        encodes.push(t.elapsed());
    }
    let (m, lo, hi) = median(encodes);
    println!("encoding an image (write_image to a sink): median {m:?} (min {lo:?}, max {hi:?})");

    let req = Request::GetAllChildrenNumber(PathRequest {
        path: "/zlock-load".into(),
    });
    let mut walks = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = st.read(sid, &[], &req);
        walks.push(t.elapsed());
        assert_eq!(r.err, 0);
    }
    let (m, lo, hi) = median(walks);
    println!("getAllChildrenNumber /zlock-load in one go: median {m:?} (min {lo:?}, max {hi:?})");
}
